//! Helpers shared by the data-path tests: devices, connected QP pairs,
//! registered buffers read and written by address, hand-made CQEs.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use devx::sim::{DoorbellSink, SimDevice};
use verbs::{
    AccessFlags, AhAttr, Context, Cq, InitAttr, Mr, Mtu, Pd, Qp, QpCap, QpInit, QpType, RtrAttr,
    RtsAttr, Wc,
};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A device nobody else in this test binary uses.
pub fn open(base: u32) -> (Context, Arc<SimDevice>) {
    let name = format!("sim{}", base + NEXT.fetch_add(1, Ordering::Relaxed));
    let sim = devx::sim::sim_device(&name).expect("emulated device");
    let dev = devx::Device::by_name(&name).expect("device by name");
    (Context::open(&dev).expect("open"), sim)
}

/// Records doorbells instead of executing them.
#[derive(Default)]
pub struct Recorder(pub Mutex<Vec<(u32, usize, u64)>>);

impl DoorbellSink for Recorder {
    fn doorbell(&self, page_id: u32, offset: usize, value: u64) {
        self.0.lock().unwrap().push((page_id, offset, value));
    }
}

/// A device whose doorbells are only recorded.
pub fn recorded(base: u32) -> (Context, Arc<SimDevice>, Arc<Recorder>) {
    let (ctx, sim) = open(base);
    let rec = Arc::new(Recorder::default());
    sim.set_doorbell_sink(Some(rec.clone()));
    (ctx, sim, rec)
}

/// Bytes of queue memory at `addr` (tests only read rings the device is not
/// writing at the time).
pub fn bytes(addr: usize, len: usize) -> Vec<u8> {
    // SAFETY: callers pass ranges inside a live queue mapping.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len).to_vec() }
}

pub fn be32_at(addr: usize) -> u32 {
    let b = bytes(addr, 4);
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Writes a CQE into slot `slot` of `cq`'s ring, `op_own` last.
pub fn put_cqe(cq: &Cq, slot: u32, cqe: [u8; 64]) {
    let m = cq.memory();
    let at = m.addr + (slot as usize % m.entries as usize) * 64;
    // SAFETY: a slot of the CQ's live ring; the test is the only writer.
    unsafe {
        std::ptr::copy_nonoverlapping(cqe.as_ptr(), at as *mut u8, 63);
        std::ptr::write_volatile((at + 63) as *mut u8, cqe[63]);
    }
}

/// A CQE with the fields the poller reads.
pub fn cqe(opcode: u8, owner: u8, qpn: u32, wqe_counter: u16) -> [u8; 64] {
    let mut c = [0u8; 64];
    c[56..60].copy_from_slice(&qpn.to_be_bytes());
    c[60..62].copy_from_slice(&wqe_counter.to_be_bytes());
    c[63] = (opcode << 4) | (owner & 1);
    c
}

/// A registered buffer the test reads and writes by copy between posts.
pub struct Buf {
    pub mr: Mr<Vec<u8>>,
}

impl Buf {
    pub fn new(pd: &Pd, len: usize, access: AccessFlags) -> Buf {
        Buf {
            mr: pd.reg_mr(vec![0u8; len], access).unwrap(),
        }
    }

    pub fn all(pd: &Pd, len: usize) -> Buf {
        let a = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        Buf::new(pd, len, a)
    }

    pub fn addr(&self) -> u64 {
        self.mr.addr() as u64
    }

    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        self.mr.read_vec(off, len).unwrap()
    }

    pub fn write(&self, off: usize, data: &[u8]) {
        self.mr.write_at(off, data).unwrap()
    }

    pub fn sge(&self, off: usize, len: u32) -> verbs::Sge {
        verbs::Sge::from_mr(&self.mr, off, len)
    }
}

/// One side of a connection.
pub struct Side {
    pub ctx: Context,
    pub sim: Arc<SimDevice>,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
}

pub fn caps() -> QpCap {
    QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 128,
    }
}

pub fn side(base: u32, qp_type: QpType, cap: QpCap) -> Side {
    let (ctx, sim) = open(base);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let qp = pd
        .create_qp(&QpInit::new(qp_type, &cq, &cq).cap(cap))
        .unwrap();
    Side {
        ctx,
        sim,
        pd,
        cq,
        qp,
    }
}

/// The path to `peer`: its RoCE v2 GID at index 1 and its MAC.
pub fn path_to(peer: &Side) -> AhAttr {
    let g = peer.ctx.query_gid(1, 1).unwrap();
    AhAttr::roce(1, g.gid, 1, Some(peer.sim.identity().mac))
}

pub fn access_all() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// RST→INIT→RTR→RTS towards `remote_qpn` over `path`.
pub fn connect_qp(qp: &Qp, remote_qpn: u32, path: AhAttr, rnr_retry: u8) {
    qp.to_init(&InitAttr::new(1).access(access_all())).unwrap();
    let rtr = RtrAttr::new(Mtu::Mtu1024, remote_qpn, 0x100, path)
        .max_dest_rd_atomic(4)
        .min_rnr_timer(1);
    qp.to_rtr(&rtr).unwrap();
    qp.to_rts(
        &RtsAttr::new(0x100)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(rnr_retry)
            .max_rd_atomic(4),
    )
    .unwrap();
}

/// Two RC QPs on two devices, connected.
pub fn rc_pair(base: u32) -> (Side, Side) {
    rc_pair_with(base, caps(), 7)
}

pub fn rc_pair_with(base: u32, cap: QpCap, rnr_retry: u8) -> (Side, Side) {
    let a = side(base, QpType::Rc, cap);
    let b = side(base + 100, QpType::Rc, cap);
    connect_qp(&a.qp, b.qp.qpn(), path_to(&b), rnr_retry);
    connect_qp(&b.qp, a.qp.qpn(), path_to(&a), rnr_retry);
    (a, b)
}

/// Polls until `n` completions arrived (or a generous time passed).
pub fn wait(cq: &mut Cq, n: usize) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut buf = [Wc::default(); 16];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while out.len() < n {
        let k = cq.poll(&mut buf[..(n - out.len()).min(16)]);
        out.extend_from_slice(&buf[..k]);
        if k == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out with {} of {n} completions: {out:?}",
                out.len()
            );
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
    out
}

/// Nothing more arrives for a short while.
pub fn quiet(cq: &mut Cq) {
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut buf = [Wc::default(); 4];
    let k = cq.poll(&mut buf);
    assert_eq!(k, 0, "unexpected completions: {:?}", &buf[..k]);
}

/// A RoCE path to this device's own GID 1 (for AVs).
pub fn path_to_self(ctx: &Context) -> AhAttr {
    let g = ctx.query_gid(1, 1).unwrap();
    AhAttr::roce(1, g.gid, 1, None)
}

/// Moves `qp` to RTS so it accepts sends and receives: an RC or UC QP
/// connected to itself, a UD QP with Q_Key 0x1111. For tests whose
/// doorbells are recorded, where the WQEs themselves are what is checked.
pub fn rts(qp: &Qp) {
    if qp.qp_type() == QpType::Ud {
        qp.to_init(&InitAttr::new(1).qkey(0x1111)).unwrap();
        qp.to_rtr(&RtrAttr::ud()).unwrap();
        qp.to_rts(&RtsAttr::new(0)).unwrap();
    } else {
        qp.connect(&qp.endpoint().unwrap()).unwrap();
    }
}
