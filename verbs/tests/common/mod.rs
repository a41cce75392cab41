//! Shared test helpers: a fresh emulated device per test, and a provider that
//! fails the Nth command so every step of a multi-command verb can be hit.

#![allow(dead_code)]

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use devx::sim::SimDevice;
use devx::{
    CmdChannel, Device, DeviceInfo, EventChannel, Handle, Provider, ProviderContext, UarAlloc,
    UarKind,
};
use verbs::Context;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A device nobody else in this test binary uses, so object counts are ours.
pub fn fresh_sim(base: u32) -> (String, Arc<SimDevice>) {
    let name = format!("sim{}", base + NEXT.fetch_add(1, Ordering::Relaxed));
    let dev = devx::sim::sim_device(&name).expect("emulated device");
    (name, dev)
}

/// A fresh device and a verbs context on it.
pub fn open(base: u32) -> (Context, Arc<SimDevice>) {
    let (name, sim) = fresh_sim(base);
    let dev = Device::by_name(&name).expect("device by name");
    (Context::open(&dev).expect("open"), sim)
}

/// When the wrapped provider should fail: `countdown` constructive calls from
/// now (0 = the next one); negative = never.
#[derive(Default)]
pub struct Plan {
    countdown: AtomicI64,
    calls: AtomicUsize,
    injected: AtomicUsize,
}

impl Plan {
    pub fn new() -> Arc<Plan> {
        let p = Plan::default();
        p.countdown.store(-1, Ordering::SeqCst);
        Arc::new(p)
    }

    /// Fail the `n`th constructive call from now (0-based).
    pub fn fail_at(&self, n: i64) {
        self.countdown.store(n, Ordering::SeqCst);
    }

    pub fn disarm(&self) {
        self.countdown.store(-1, Ordering::SeqCst);
    }

    /// Constructive calls seen so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn injected(&self) -> usize {
        self.injected.load(Ordering::SeqCst)
    }

    fn step(&self) -> bool {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let left = self.countdown.load(Ordering::SeqCst);
        if left < 0 {
            return false;
        }
        self.countdown.store(left - 1, Ordering::SeqCst);
        if left == 0 {
            self.injected.fetch_add(1, Ordering::SeqCst);
            return true;
        }
        false
    }
}

/// The syndrome every injected failure carries.
pub const INJECTED_SYNDROME: u32 = 0x1dead;

fn injected_fw(inbox: &[u8]) -> devx::Error {
    devx::Error::Firmware {
        opcode: u16::from_be_bytes([inbox[0], inbox[1]]),
        op_mod: u16::from_be_bytes([inbox[6], inbox[7]]),
        status: 0x0f,
        syndrome: INJECTED_SYNDROME,
        report: devx::FwReport::Outbox,
    }
}

fn injected_os(what: &str) -> devx::Error {
    devx::Error::os(format!("{what} (injected)"), libc::ENOMEM)
}

pub fn is_injected(e: &verbs::Error) -> bool {
    match e.devx() {
        Some(devx::Error::Firmware { syndrome, .. }) => *syndrome == INJECTED_SYNDROME,
        Some(devx::Error::Os { op, .. }) => op.ends_with("(injected)"),
        _ => false,
    }
}

/// Wraps a provider; constructive calls (create, query, modify, general,
/// UMEM/UAR allocation, EQN query) go through `plan`, releases never fail.
pub struct FailingProvider {
    inner: Arc<dyn Provider>,
    plan: Arc<Plan>,
}

impl FailingProvider {
    pub fn device(inner: Arc<dyn Provider>, plan: Arc<Plan>) -> Device {
        Device::from_provider(Arc::new(FailingProvider { inner, plan }))
    }
}

impl Provider for FailingProvider {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    fn open(&self) -> devx::Result<Arc<dyn ProviderContext>> {
        Ok(Arc::new(FailingContext {
            inner: self.inner.open()?,
            plan: self.plan.clone(),
        }))
    }
}

struct FailingContext {
    inner: Arc<dyn ProviderContext>,
    plan: Arc<Plan>,
}

impl ProviderContext for FailingContext {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    fn create(&self, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<Handle> {
        if self.plan.step() {
            return Err(injected_fw(inbox));
        }
        self.inner.create(inbox, outbox)
    }

    fn query(&self, obj: Handle, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<()> {
        if self.plan.step() {
            return Err(injected_fw(inbox));
        }
        self.inner.query(obj, inbox, outbox)
    }

    fn modify(&self, obj: Handle, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<()> {
        if self.plan.step() {
            return Err(injected_fw(inbox));
        }
        self.inner.modify(obj, inbox, outbox)
    }

    fn destroy(&self, obj: Handle, destroy_inbox: &[u8]) -> devx::Result<()> {
        self.inner.destroy(obj, destroy_inbox)
    }

    fn general(&self, inbox: &[u8], outbox: &mut [u8]) -> devx::Result<()> {
        if self.plan.step() {
            return Err(injected_fw(inbox));
        }
        self.inner.general(inbox, outbox)
    }

    fn create_cmd_channel(&self) -> devx::Result<Arc<dyn CmdChannel>> {
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
        self.inner.query_async(obj, inbox, outlen, wr_id, channel)
    }

    fn umem_reg(&self, addr: usize, len: usize, access: u32) -> devx::Result<(Handle, u32)> {
        if self.plan.step() {
            return Err(injected_os("umem_reg"));
        }
        self.inner.umem_reg(addr, len, access)
    }

    fn umem_dereg(&self, umem: Handle) -> devx::Result<()> {
        self.inner.umem_dereg(umem)
    }

    fn uar_alloc(&self, kind: UarKind) -> devx::Result<UarAlloc> {
        if self.plan.step() {
            return Err(injected_os("uar_alloc"));
        }
        self.inner.uar_alloc(kind)
    }

    fn uar_free(&self, uar: Handle) -> devx::Result<()> {
        self.inner.uar_free(uar)
    }

    fn query_eqn(&self, vector: u32) -> devx::Result<u32> {
        if self.plan.step() {
            return Err(injected_os("query_eqn"));
        }
        self.inner.query_eqn(vector)
    }

    fn query_gid_table(&self) -> devx::Result<Vec<devx::GidTableEntry>> {
        self.inner.query_gid_table()
    }

    fn create_event_channel(&self, omit_data: bool) -> devx::Result<Arc<dyn EventChannel>> {
        self.inner.create_event_channel(omit_data)
    }

    fn subscribe_event(
        &self,
        channel: &dyn EventChannel,
        obj: Option<Handle>,
        event_types: &[u16],
        cookie: u64,
    ) -> devx::Result<()> {
        self.inner
            .subscribe_event(channel, obj, event_types, cookie)
    }

    fn subscribe_event_fd(
        &self,
        channel: &dyn EventChannel,
        obj: Option<Handle>,
        event_types: &[u16],
        eventfd: std::os::fd::BorrowedFd<'_>,
    ) -> devx::Result<()> {
        self.inner
            .subscribe_event_fd(channel, obj, event_types, eventfd)
    }
}

/// A context on a fresh emulated device behind a `FailingProvider`.
pub fn open_failing(base: u32) -> (Context, Arc<SimDevice>, Arc<Plan>) {
    let (name, sim) = fresh_sim(base);
    let plan = Plan::new();
    let inner = devx::sim::device(&name).expect("provider");
    let dev = FailingProvider::device(inner, plan.clone());
    (Context::open(&dev).expect("open"), sim, plan)
}
