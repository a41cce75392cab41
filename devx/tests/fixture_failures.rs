//! Recordings of failing runs read back: whatever the recorder writes, the
//! parser reads, and writing the parsed fixture gives the same text.

#[path = "fixture_toy.rs"]
mod toy;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use devx::fixture::{self, Recorder};
use devx::{
    CmdChannel, DeviceInfo, Error, FwReport, Handle, Provider, ProviderContext, UarAlloc, UarKind,
};
use proptest::prelude::*;
use toy::{mailbox, toy};

/// The toy device, failing each call with the next scripted error (`None`:
/// the call goes through).
struct Flaky {
    inner: Arc<dyn Provider>,
    script: Arc<Mutex<VecDeque<Option<Error>>>>,
}

impl Flaky {
    fn new(script: Vec<Option<Error>>) -> Arc<Flaky> {
        Arc::new(Flaky {
            inner: toy(),
            script: Arc::new(Mutex::new(script.into())),
        })
    }
}

fn next(script: &Mutex<VecDeque<Option<Error>>>) -> devx::Result<()> {
    match script.lock().unwrap().pop_front().flatten() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

impl Provider for Flaky {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    fn open(&self) -> devx::Result<Arc<dyn ProviderContext>> {
        next(&self.script)?;
        Ok(Arc::new(FlakyCtx {
            inner: self.inner.open()?,
            script: self.script.clone(),
        }))
    }
}

struct FlakyCtx {
    inner: Arc<dyn ProviderContext>,
    script: Arc<Mutex<VecDeque<Option<Error>>>>,
}

impl ProviderContext for FlakyCtx {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }
    fn create(&self, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<Handle> {
        next(&self.script)?;
        self.inner.create(inbox, outbox)
    }
    fn query(&self, obj: Handle, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<()> {
        next(&self.script)?;
        self.inner.query(obj, inbox, outbox)
    }
    fn modify(&self, obj: Handle, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<()> {
        next(&self.script)?;
        self.inner.modify(obj, inbox, outbox)
    }
    fn destroy(&self, obj: Handle, destroy_inbox: &[u8]) -> devx::Result<()> {
        next(&self.script)?;
        self.inner.destroy(obj, destroy_inbox)
    }
    fn general(&self, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<()> {
        next(&self.script)?;
        self.inner.general(inbox, outbox)
    }
    fn create_cmd_channel(&self) -> devx::Result<Arc<dyn CmdChannel>> {
        next(&self.script)?;
        self.inner.create_cmd_channel()
    }
    fn query_async(
        &self,
        obj: Handle,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> devx::Result<()> {
        next(&self.script)?;
        self.inner.query_async(obj, inbox, outlen, wr_id, channel)
    }
    fn umem_reg(&self, addr: usize, len: usize, access: u32) -> devx::Result<(Handle, u32)> {
        next(&self.script)?;
        self.inner.umem_reg(addr, len, access)
    }
    fn umem_dereg(&self, umem: Handle) -> devx::Result<()> {
        next(&self.script)?;
        self.inner.umem_dereg(umem)
    }
    fn uar_alloc(&self, kind: UarKind) -> devx::Result<UarAlloc> {
        next(&self.script)?;
        self.inner.uar_alloc(kind)
    }
    fn uar_free(&self, uar: Handle) -> devx::Result<()> {
        next(&self.script)?;
        self.inner.uar_free(uar)
    }
    fn query_eqn(&self, vector: u32) -> devx::Result<u32> {
        next(&self.script)?;
        self.inner.query_eqn(vector)
    }
    fn query_gid_table(&self) -> devx::Result<Vec<devx::GidTableEntry>> {
        next(&self.script)?;
        self.inner.query_gid_table()
    }
}

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

/// Opens `opens` contexts and runs a few commands on each, on a device that
/// fails as `script` says; returns the recorded text.
fn record(script: Vec<Option<Error>>, opens: usize) -> String {
    let sink = Sink::default();
    let rec = Recorder::to_writer(Flaky::new(script), sink.clone()).unwrap();
    {
        let dev = rec.device();
        for _ in 0..opens {
            let Ok(ctx) = dev.open() else { continue };
            let _ = ctx.query_eqn(0);
            let _ = ctx.query_gid_table();
            let _ = ctx.general_cmd(&mailbox("query_issi_in", &[("opcode", 0x10a)]), 16);
            if let Ok(pd) = ctx.create(&mailbox("alloc_pd_in", &[("opcode", 0x800)]), 16) {
                let _ = pd.query(&mailbox("query_issi_in", &[("opcode", 0x10a)]), 32);
                let _ = pd.destroy();
            }
            let _ = devx::Uar::alloc(&ctx);
            let _ = devx::CmdComp::new(&ctx);
        }
    }
    rec.finish().unwrap();
    let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    text
}

/// Parses `text`, writes it back and parses again: both parses agree and
/// the written text is the recorded one.
fn reads_back(text: &str) {
    let f = fixture::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let again = fixture::fixture_text(&f);
    assert_eq!(again, text);
    assert_eq!(fixture::parse(&again).unwrap(), f);
}

#[test]
fn an_errno_without_a_name_reads_back() {
    let emfile = Error::os("CmdComp::new", libc::EMFILE);
    assert!(devx::fixture::errno_name(libc::EMFILE).contains(' '));
    // The open goes through; every call after it fails with EMFILE.
    let mut script = vec![None];
    script.extend(std::iter::repeat_n(Some(emfile), 16));
    let text = record(script, 1);
    assert!(text.contains("name=\"errno 24\""), "{text}");
    reads_back(&text);
}

#[test]
fn a_failed_open_reads_back() {
    let text = record(vec![Some(Error::os("open", libc::ENODEV))], 1);
    assert!(text.contains("@1 open\n"), "{text}");
    reads_back(&text);
}

fn any_error() -> impl Strategy<Value = Error> {
    let text = || any::<String>();
    prop_oneof![
        (
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
            any::<u32>(),
            any::<bool>()
        )
            .prop_map(
                |(opcode, op_mod, status, syndrome, errno_only)| Error::Firmware {
                    opcode,
                    op_mod,
                    status,
                    syndrome,
                    report: if errno_only {
                        FwReport::ErrnoOnly
                    } else {
                        FwReport::Outbox
                    },
                }
            ),
        (text(), any::<i32>()).prop_map(|(op, errno)| Error::Os { op, errno }),
        text().prop_map(Error::Argument),
        (text(), text()).prop_map(|(what, why)| Error::Unsupported { what, why }),
        text().prop_map(Error::Cancelled),
        (text(), text()).prop_map(|(provider, message)| Error::Provider { provider, message }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any mix of successes and failures, of every error kind with any text
    /// and errno, records to a fixture that reads back to the same text.
    #[test]
    fn every_recording_reads_back(
        script in prop::collection::vec(prop::option::weighted(0.4, any_error()), 0..40),
        opens in 1usize..4,
    ) {
        reads_back(&record(script, opens));
    }
}
