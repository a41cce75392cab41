//! A toy device for the fixture tests: it hands out object numbers, answers
//! every known command with success, and fails where a test asks it to, so
//! recording and replay can be tested without the emulator.
#![allow(dead_code)]

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use devx::{
    AsyncCompletion, CmdChannel, DeviceInfo, Error, GidTableEntry, GidType, Handle, Provider,
    ProviderContext, UarAlloc, UarKind, UarPage,
};

/// Opcode the toy refuses with BAD_OP, for firmware-error tests.
pub const BAD_OPCODE: u16 = 0xb42;
/// Syndrome of that refusal.
pub const BAD_SYNDROME: u32 = 0x00c0_ffee;

pub fn toy() -> Arc<dyn Provider> {
    Arc::new(Toy {
        next: Arc::new(Mutex::new(0x10)),
    })
}

pub fn toy_info() -> DeviceInfo {
    DeviceInfo {
        name: "toy0".into(),
        provider: "toy".into(),
        emulated: true,
        location: "toy device for fixture tests".into(),
        node_guid: 0x1122_3344_5566_7788,
        fw_version: "1.2.3".into(),
        vendor_id: 0x02c9,
        vendor_part_id: 0x101d,
        num_ports: 1,
    }
}

struct Toy {
    next: Arc<Mutex<u32>>,
}

impl Provider for Toy {
    fn info(&self) -> DeviceInfo {
        toy_info()
    }

    fn open(&self) -> devx::Result<Arc<dyn ProviderContext>> {
        Ok(Arc::new(ToyCtx {
            next: self.next.clone(),
            objs: Mutex::new(HashMap::new()),
            handles: AtomicU64::new(1),
        }))
    }
}

struct ToyCtx {
    next: Arc<Mutex<u32>>,
    /// handle → (create opcode, number)
    objs: Mutex<HashMap<Handle, (u16, u32)>>,
    handles: AtomicU64,
}

use prm_layouts::bytes::be16;

fn fw_fail(inbox: &[u8], outbox: &mut [u8], status: u8, syndrome: u32) -> Error {
    if outbox.len() >= 8 {
        outbox[0] = status;
        outbox[4..8].copy_from_slice(&syndrome.to_be_bytes());
    }
    Error::from_outbox(inbox, outbox)
}

impl ToyCtx {
    fn number(&self) -> u32 {
        let mut n = self.next.lock().unwrap();
        *n += 1;
        *n
    }

    fn handle(&self) -> Handle {
        self.handles.fetch_add(1, Ordering::Relaxed) as Handle
    }

    /// Query outboxes echo the object number and a marker so replays have
    /// something to return.
    fn answer(&self, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<()> {
        outbox.fill(0);
        if be16(inbox, 0) == BAD_OPCODE {
            return Err(fw_fail(inbox, outbox, 0x02, BAD_SYNDROME));
        }
        if outbox.len() > 0x10 {
            outbox[0x10] = 0xa5;
        }
        Ok(())
    }
}

impl ProviderContext for ToyCtx {
    fn info(&self) -> DeviceInfo {
        toy_info()
    }

    fn create(&self, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<Handle> {
        self.answer(inbox, outbox)?;
        let op = be16(inbox, 0);
        let n = self.number();
        match op {
            0xa00 | 0x939 => outbox[8..12].copy_from_slice(&n.to_be_bytes()),
            0x771 => outbox[0x0b] = n as u8,
            _ => outbox[9..12].copy_from_slice(&n.to_be_bytes()[1..]),
        }
        let h = self.handle();
        self.objs.lock().unwrap().insert(h, (op, n));
        Ok(h)
    }

    fn query(&self, obj: Handle, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<()> {
        if !self.objs.lock().unwrap().contains_key(&obj) {
            return Err(Error::os("query", libc::EINVAL));
        }
        self.answer(inbox, outbox)
    }

    fn modify(&self, obj: Handle, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<()> {
        self.query(obj, inbox, outbox)
    }

    fn destroy(&self, obj: Handle, _destroy_inbox: &[u8]) -> devx::Result<()> {
        match self.objs.lock().unwrap().remove(&obj) {
            Some(_) => Ok(()),
            None => Err(Error::os("destroy", libc::ENOENT)),
        }
    }

    fn general(&self, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<()> {
        self.answer(inbox, outbox)
    }

    fn create_cmd_channel(&self) -> devx::Result<Arc<dyn CmdChannel>> {
        let (a, b) = UnixStream::pair().map_err(|_| Error::os("socketpair", libc::EIO))?;
        Ok(Arc::new(ToyChannel {
            queue: Mutex::new(VecDeque::new()),
            _a: a,
            b,
        }))
    }

    fn query_async(
        &self,
        _obj: Handle,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> devx::Result<()> {
        let ch = channel
            .as_any()
            .downcast_ref::<ToyChannel>()
            .ok_or_else(|| Error::argument("not a toy channel"))?;
        let mut out = vec![0u8; outlen];
        let r = self.answer(inbox, &mut out).map(|()| out);
        ch.queue.lock().unwrap().push_back((wr_id, r));
        Ok(())
    }

    fn umem_reg(&self, _addr: usize, len: usize, access: u32) -> devx::Result<(Handle, u32)> {
        if access == 0 || len == 0 {
            return Err(Error::os("umem_reg", libc::EINVAL));
        }
        Ok((self.handle(), self.number()))
    }

    fn umem_dereg(&self, _umem: Handle) -> devx::Result<()> {
        Ok(())
    }

    fn uar_alloc(&self, _kind: UarKind) -> devx::Result<UarAlloc> {
        Ok(UarAlloc {
            handle: self.handle(),
            page_id: self.number(),
            page: Arc::new(ToyPage(Mutex::new(vec![0; 4096]))),
        })
    }

    fn uar_free(&self, _uar: Handle) -> devx::Result<()> {
        Ok(())
    }

    fn query_eqn(&self, vector: u32) -> devx::Result<u32> {
        Ok(7 + vector)
    }

    /// One RoCE v2 entry for an IPv4 address.
    fn query_gid_table(&self) -> devx::Result<Vec<GidTableEntry>> {
        let mut gid = [0u8; 16];
        gid[10..].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 7]);
        Ok(vec![GidTableEntry {
            gid,
            index: 3,
            port: 1,
            gid_type: GidType::RoceV2,
            netdev_ifindex: 5,
        }])
    }
}

struct ToyChannel {
    queue: Mutex<VecDeque<AsyncCompletion>>,
    _a: UnixStream,
    b: UnixStream,
}

impl CmdChannel for ToyChannel {
    fn fd(&self) -> RawFd {
        self.b.as_raw_fd()
    }

    fn try_get(&self) -> devx::Result<Option<AsyncCompletion>> {
        Ok(self.queue.lock().unwrap().pop_front())
    }

    fn get(&self) -> devx::Result<AsyncCompletion> {
        self.try_get()?
            .ok_or_else(|| Error::os("get", libc::EAGAIN))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct ToyPage(Mutex<Vec<u8>>);

impl UarPage for ToyPage {
    fn base(&self) -> *mut u8 {
        self.0.lock().unwrap().as_mut_ptr()
    }

    fn write64(&self, offset: usize, value: u64) {
        if let Some(s) = self.0.lock().unwrap().get_mut(offset..offset + 8) {
            s.copy_from_slice(&value.to_ne_bytes());
        }
    }
}

/// A unique path under the system temp dir.
pub fn temp_path(tag: &str) -> std::path::PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "devx-fixture-{tag}-{}-{n}.fixture",
        std::process::id()
    ))
}

/// An inbox for `layout` with `fields` set by name (opcode from the caller).
pub fn mailbox(layout: &str, fields: &[(&str, u64)]) -> Vec<u8> {
    let meta = prm_layouts::find(layout).unwrap_or_else(|| panic!("no layout {layout}"));
    let mut b = vec![0u8; meta.size_bytes()];
    for (f, v) in fields {
        meta.set(&mut b, f, *v)
            .unwrap_or_else(|e| panic!("{layout}.{f}: {e}"));
    }
    b
}

/// A short recording on the toy: context, EQ, UAR, UMEM, PD, CQ, a query, a
/// refused command, an async query, teardown.
pub fn sample_fixture() -> String {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let rec = devx::fixture::Recorder::to_writer(toy(), sink.clone()).unwrap();
    {
        let dev = rec.device();
        let ctx = dev.open().unwrap();
        let eqn = ctx.query_eqn(0).unwrap();
        let uar = devx::Uar::alloc(&ctx).unwrap();
        let umem = devx::Umem::register(&ctx, vec![0u8; 4096], devx::access::LOCAL_WRITE).unwrap();
        let pd = ctx
            .create(&mailbox("alloc_pd_in", &[("opcode", 0x800)]), 16)
            .unwrap();
        let cq = ctx
            .create(
                &mailbox(
                    "create_cq_in",
                    &[
                        ("opcode", 0x400),
                        ("cq_context.log_cq_size", 5),
                        ("cq_context.uar_page", u64::from(uar.page_id())),
                        ("cq_context.c_eqn_or_apu_element", u64::from(eqn)),
                        ("cq_umem_id", u64::from(umem.id())),
                    ],
                ),
                16,
            )
            .unwrap();
        let q = mailbox(
            "query_cq_in",
            &[("opcode", 0x402), ("cqn", u64::from(cq.id()))],
        );
        cq.query(&q, 272).unwrap();
        let mut bad = vec![0u8; 16];
        bad[0..2].copy_from_slice(&BAD_OPCODE.to_be_bytes());
        ctx.general_cmd(&bad, 16).unwrap_err();
        let comp = devx::CmdComp::new(&ctx).unwrap();
        cq.query_async(&q, 272, 5, &comp).unwrap();
        comp.get().unwrap().1.unwrap();
        drop((cq, pd, umem, uar));
    }
    rec.finish().unwrap();
    let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    text
}
