//! The embedded emulated ConnectX ("sim" provider).
//!
//! Layers, each using only the ones below it:
//! * `kernel`: what the kernel's DEVX code does per context (uid, handle
//!   table, admission, binding, inbox edits, UMEM probing, teardown, async
//!   completion channels, event channels, UAR pages);
//! * `engine`: the data path, executing posted WQEs when a doorbell
//!   reaches its [`DoorbellSink`];
//! * `fw`: the firmware command processor over per-device object tables,
//!   answering every inbox with a PRM status and a [`syndrome`], and the
//!   device's event hub that firmware and data path raise events into;
//! * [`wire`], `profile`, `identity`, [`syndrome`]: the RoCEv2 wire
//!   format and port, the ConnectX-6 Dx capability profile every limit
//!   comes from, the port identity, and the syndrome table.
//!
//! `kernel` uses `engine` and `fw`, `engine` uses `fw` and `wire`; nothing
//! in `fw` or `engine` reaches up (a unit test below checks the sources).
//!
//! Asynchronous commands (`general_async`, `create_async`, …) go through
//! the firmware's command queue of [`CMD_QUEUE_SLOTS`] slots, one command
//! executing at a time. The device's firmware thread runs them, except a
//! command submitted while the queue is idle (nothing queued or executing,
//! a slot free, not paused with [`SimDevice::pause_async`]) whose opcode
//! has no latency in [`Profile::cmd_latency`]: the submitting thread runs
//! that one itself and posts its completion on the channel before the
//! submit returns, sparing two thread wake-ups. Commands with latency,
//! behind others or while paused always wait for the firmware thread.
//!
//! Named devices are process-wide: `sim0` always exists, `simN` is created
//! on first request and lives until the process ends; they reach each other
//! over an in-process link, and the CLI and tools find them by name. A test
//! that wants a device of its own makes one with [`SimDevice::new`]: it is
//! private to its owner and goes away with it.
//!
//! ```
//! use devx::sim::{ObjKind, Profile, SimDevice};
//! # fn main() -> devx::Result<()> {
//! let sim = SimDevice::new(Profile::connectx6_dx());
//! let ctx = sim.device().open()?;
//! let mut pd = prm_layouts::AllocPdIn::new();
//! pd.set_opcode(prm_layouts::Opcode::AllocPd.raw());
//! let pd = ctx.create(pd.as_bytes(), prm_layouts::AllocPdOut::SIZE_BYTES)?;
//! assert_eq!(sim.count(ObjKind::Pd), 1);
//! drop((pd, ctx));
//! assert_eq!(sim.live_objects(), 0);
//! # Ok(()) }
//! ```

pub(crate) mod engine;
pub(crate) mod fw;
mod identity;
pub(crate) mod kernel;
mod live;
mod profile;
pub mod syndrome;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::provider::{DeviceInfo, Provider, ProviderContext};

pub use engine::DoorbellSink;
pub use fw::kind::ObjKind;
pub use identity::{GidEntry, Identity};
pub use kernel::async_cmd::{CMD_QUEUE_SLOTS, MAX_OUTSTANDING_BYTES};
pub use kernel::SimContext;
pub use profile::Profile;

/// Highest N of a `simN` device.
pub const MAX_DEVICE_INDEX: u32 = 0xffff;

/// What every context of one device shares.
pub(crate) struct DeviceShared {
    pub(crate) info: DeviceInfo,
    pub(crate) fw: Arc<fw::Firmware>,
    pub(crate) engine: Arc<kernel::async_cmd::AsyncEngine>,
    pub(crate) doorbell: kernel::uar::DoorbellSlot,
    /// The data-path engine, the doorbell sink unless a test replaces it.
    pub(crate) dp: Arc<engine::Engine>,
    pub(crate) next_ctx: AtomicU64,
    pub(crate) contexts: AtomicUsize,
    /// Set by an injected internal error; never cleared.
    pub(crate) fatal: std::sync::atomic::AtomicBool,
    /// Every open context's async-event file.
    pub(crate) async_files: kernel::async_file::AsyncFiles,
}

/// The last reference is gone (only privately owned devices get here):
/// their threads end before the memory they use goes.
impl Drop for DeviceShared {
    fn drop(&mut self) {
        self.engine.shutdown();
        self.dp.stop();
    }
}

impl DeviceShared {
    /// Fails `what` fast once the device hit a fatal error.
    pub(crate) fn check_alive(&self, what: &str) -> Result<()> {
        if self.fatal.load(Ordering::Acquire) {
            return Err(crate::Error::DeviceFatal(format!(
                "{}: {what}",
                self.info.name
            )));
        }
        Ok(())
    }
}

/// One emulated device, with introspection for tests.
pub struct SimDevice {
    index: u32,
    profile: Profile,
    /// Why the configured network port could not be opened.
    net_error: Option<String>,
    shared: Arc<DeviceShared>,
}

impl SimDevice {
    /// A private emulated device that the caller owns: it has no name in
    /// the process-wide registry (so `Device::by_name` and `Device::list` do
    /// not find it and tests running in parallel never share it), no
    /// network port, and no in-process link to other devices; its QPs talk
    /// to QPs of the same device. Open contexts through
    /// [`SimDevice::device`].
    ///
    /// The device lives as long as its owner, a [`Device`] made from it, or
    /// one of its contexts: dropping the owner first leaves the contexts
    /// working. Once the last of them is gone its objects, memory and
    /// threads (`sim<index>-fw` for asynchronous commands, `sim<index>-rnr`
    /// for RNR retries) are gone too.
    pub fn new(profile: Profile) -> Arc<SimDevice> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        // Above every `simN`, so its MAC, GUID and GIDs are its own.
        let index = MAX_DEVICE_INDEX + 1 + k;
        Arc::new(SimDevice::create(
            index,
            format!("owned-sim{k}"),
            profile,
            false,
        ))
    }

    /// A [`Device`] over this emulated device, to open [`crate::Context`]s.
    pub fn device(self: &Arc<Self>) -> Device {
        Device::from_provider(Arc::clone(self) as Arc<dyn Provider>)
    }

    /// `simN`, for the registry.
    fn named(index: u32, profile: Profile) -> SimDevice {
        SimDevice::create(index, format!("sim{index}"), profile, true)
    }

    /// A device named `name`; `named` devices (`simN`) get their network
    /// port from the configuration and reach each other in-process.
    fn create(index: u32, name: String, profile: Profile, named: bool) -> SimDevice {
        let mut ident = Identity::new(index);
        // A device with a network address is known by it (its RoCE GIDs).
        let port = if named {
            wire::NetPort::for_device(&name)
        } else {
            Ok(None)
        };
        if let Ok(Some(p)) = &port {
            match wire::flow::canonical(p.local_addr().ip()) {
                std::net::IpAddr::V4(a) => ident.ipv4 = a.octets(),
                std::net::IpAddr::V6(a) => ident.ipv6 = Some(a.octets()),
            }
        }
        let info = DeviceInfo {
            name: name.clone(),
            provider: "sim".into(),
            emulated: true,
            location: if named {
                format!("embedded emulated device, {}", profile.model)
            } else {
                format!(
                    "embedded emulated device (privately owned), {}",
                    profile.model
                )
            },
            node_guid: ident.node_guid,
            fw_version: profile.fw_version.into(),
            vendor_id: profile.vendor_id,
            vendor_part_id: profile.vendor_part_id,
            num_ports: profile.num_ports,
        };
        let fw = Arc::new(fw::Firmware::new(profile.clone(), ident));
        let engine = Arc::new(kernel::async_cmd::AsyncEngine::new(
            format!("sim{index}-fw"),
            Arc::clone(&fw),
            profile.cmd_latency.clone(),
        ));
        let dp = engine::Engine::new(index, Arc::clone(&fw), named);
        let net_error = match port {
            Ok(Some(p)) => dp
                .attach_port(&name, p)
                .err()
                .map(|e| format!("{name}: receive thread: {e}")),
            Ok(None) => None,
            Err(e) => Some(e),
        };
        SimDevice {
            index,
            profile,
            net_error,
            shared: Arc::new(DeviceShared {
                info,
                fw,
                engine,
                doorbell: Arc::new(kernel::uar::SinkSlot::with_engine(Arc::clone(&dp))),
                dp,
                next_ctx: AtomicU64::new(1),
                contexts: AtomicUsize::new(0),
                fatal: std::sync::atomic::AtomicBool::new(false),
                async_files: Default::default(),
            }),
        }
    }

    pub fn name(&self) -> &str {
        &self.shared.info.name
    }

    /// N of `simN`; above [`MAX_DEVICE_INDEX`] for a privately owned device.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The capability profile this device answers from.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// MAC, GUID and GID table of the device's port.
    pub fn identity(&self) -> Identity {
        self.shared.fw.with(|st| st.ident.clone())
    }

    /// Firmware objects DEVX users created and still hold, all uids
    /// (the device's own completion EQs and the user contexts are not counted).
    pub fn live_objects(&self) -> usize {
        self.shared.fw.with(|st| st.live_objects())
    }

    /// Live objects of one kind (EQs include the device's completion EQs).
    pub fn count(&self, kind: ObjKind) -> usize {
        self.shared.fw.with(|st| st.count(kind))
    }

    /// Live objects per kind, kinds with none left out.
    pub fn counts(&self) -> BTreeMap<ObjKind, usize> {
        self.shared.fw.with(|st| {
            ObjKind::ALL
                .iter()
                .map(|k| (*k, st.count(*k)))
                .filter(|(_, n)| *n > 0)
                .collect()
        })
    }

    /// Objects owned by one uid.
    pub fn objects_of_uid(&self, uid: u16) -> usize {
        self.shared.fw.with(|st| st.uid_objects(uid))
    }

    /// Contexts open right now.
    pub fn open_contexts(&self) -> usize {
        self.shared.contexts.load(Ordering::Relaxed)
    }

    /// Firmware commands run since the device was created.
    pub fn commands_executed(&self) -> u64 {
        self.shared.fw.commands_executed()
    }

    /// How many times messages were delivered to this device.
    pub fn arrivals(&self) -> u64 {
        self.shared.dp.arrivals()
    }

    /// Unparks `thread` whenever messages are delivered to this device (a
    /// doorbell watcher's cue to look); the id removes it.
    pub fn listen_arrivals(&self, thread: std::thread::Thread) -> u64 {
        self.shared.dp.listen_arrivals(thread)
    }

    pub fn unlisten_arrivals(&self, id: u64) {
        self.shared.dp.unlisten_arrivals(id);
    }

    /// A doorbell found in a UAR page mapped into a program: the store is
    /// already in the page (the program made it), so it only goes to the
    /// sink, as `UarPage::write64` hands it on after storing.
    pub fn notice_doorbell(&self, page_id: u32, offset: usize, value: u64) {
        self.shared.doorbell.deliver(page_id, offset, value);
    }

    /// Installs (or removes) the receiver of doorbells rung on this device's
    /// UARs. The data-path engine is installed at creation; replacing it
    /// turns the data path off for this device.
    pub fn set_doorbell_sink(&self, sink: Option<Arc<dyn DoorbellSink>>) {
        self.shared.doorbell.set(sink);
    }

    /// Holds send doorbells back (`true`): they are remembered and executed,
    /// in order, by [`SimDevice::run_engine`] or when the engine is resumed
    /// (`false`). Lets benchmarks time posting without device processing.
    pub fn pause_engine(&self, paused: bool) {
        self.shared.dp.pause(paused);
    }

    /// Executes the doorbells held while paused (and retries QPs waiting on
    /// RNR) now, on the calling thread, whether paused or not.
    pub fn run_engine(&self) {
        self.shared.dp.run();
    }

    /// Doorbells held by a paused engine.
    pub fn engine_held(&self) -> usize {
        self.shared.dp.held()
    }

    /// Holds queued async commands back (or lets them run again).
    pub fn pause_async(&self, paused: bool) {
        self.shared.engine.set_paused(paused);
    }

    /// Async commands queued and not yet started.
    pub fn async_queued(&self) -> usize {
        self.shared.engine.queued()
    }

    /// Async commands holding a firmware command queue slot (started, their
    /// completion not posted yet); never more than
    /// [`CMD_QUEUE_SLOTS`].
    pub fn async_in_flight(&self) -> usize {
        self.shared.engine.in_flight()
    }

    /// Puts the device into the fatal internal-error state, as a firmware
    /// crash does: every later command of every context fails with
    /// [`crate::Error::DeviceFatal`], queued asynchronous commands complete
    /// with it, and the data path stops. Destroying objects, UMEMs and UARs
    /// still works, so contexts and objects can be dropped cleanly.
    /// Every open context's async-event file reports DEVICE_FATAL once.
    pub fn inject_fatal_error(&self) {
        if !self.shared.fatal.swap(true, Ordering::AcqRel) {
            self.shared
                .async_files
                .raise(crate::async_event::ib_event::DEVICE_FATAL, 0);
        }
        self.shared.dp.pause(true);
        self.shared.engine.fail_all(&self.shared.info.name);
    }

    /// Takes the port's link down (`false`) or up: the port reports Down or
    /// Active from then on and every channel subscribed to the device's
    /// PORT_CHANGE event gets one (sub type DOWN or ACTIVE). Setting the
    /// state it already has raises nothing. Every open context's
    /// async-event file reports PORT_ACTIVE or PORT_ERR for port 1.
    pub fn set_link(&self, up: bool) {
        use crate::async_event::ib_event;
        use fw::events::{port_change, port_change_eqe};
        let changed = self.shared.fw.with_mut(|st| {
            if st.link_up == up {
                return false;
            }
            st.link_up = up;
            let sub = if up {
                port_change::ACTIVE
            } else {
                port_change::DOWN
            };
            st.events.raise(None, &port_change_eqe(1, sub));
            true
        });
        if changed {
            let t = if up {
                ib_event::PORT_ACTIVE
            } else {
                ib_event::PORT_ERR
            };
            self.shared.async_files.raise(t, 1);
        }
    }

    /// True once the device hit a fatal error.
    pub fn is_fatal(&self) -> bool {
        self.shared.fatal.load(Ordering::Acquire)
    }

    /// Opens a context and returns it with its concrete type (uid, handles).
    pub fn open_sim(&self) -> Result<Arc<SimContext>> {
        Ok(Arc::new(SimContext::open(Arc::clone(&self.shared))?))
    }

    /// The UDP address of the device's network port, if it has one
    /// (configured as the [`wire`] module says).
    pub fn net_addr(&self) -> Option<std::net::SocketAddr> {
        self.shared.dp.port().map(|p| p.local_addr())
    }

    /// Why the device has no network port although one was configured.
    pub fn net_error(&self) -> Option<&str> {
        self.net_error.as_deref()
    }

    /// The network port's counters (sent, received, and refused packets).
    pub fn net_counters(&self) -> Option<wire::NetCounters> {
        self.shared.dp.port().map(|p| p.counters())
    }

    /// Runs one command mailbox straight on the firmware, without the
    /// kernel layer's admission, uid stamping or handle checks: for probing
    /// the firmware's own checks (fuzzing). `out` gets the firmware's
    /// answer; a failure is [`Error::Firmware`] with the status and
    /// syndrome the firmware answered, even when `out` is too short to
    /// carry them. Objects created this way belong to no context.
    pub fn execute_firmware(&self, inbox: &[u8], out: &mut [u8]) -> Result<()> {
        self.shared
            .fw
            .execute(inbox, out)
            .map_err(|e| kernel::with_outbox(inbox, e))
    }
}

impl Provider for SimDevice {
    fn info(&self) -> DeviceInfo {
        self.shared.info.clone()
    }

    fn open(&self) -> Result<Arc<dyn ProviderContext>> {
        Ok(self.open_sim()?)
    }

    fn live_objects(&self) -> Result<Vec<crate::live::LiveObject>> {
        Ok(self.shared.fw.with(live::list))
    }
}

fn registry() -> &'static Mutex<BTreeMap<u32, Arc<SimDevice>>> {
    static REGISTRY: OnceLock<Mutex<BTreeMap<u32, Arc<SimDevice>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut m = BTreeMap::new();
        m.insert(0, Arc::new(SimDevice::named(0, Profile::connectx6_dx())));
        Mutex::new(m)
    })
}

/// The index N of a `simN` name.
pub(crate) fn parse_name(name: &str) -> Result<u32> {
    let bad = || {
        Error::argument(format!(
            "'{name}' is not an emulated device name (sim0, sim1, … sim{MAX_DEVICE_INDEX})"
        ))
    };
    let digits = name.strip_prefix("sim").ok_or_else(bad)?;
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return Err(bad());
    }
    let n: u32 = digits.parse().map_err(|_| bad())?;
    if n > MAX_DEVICE_INDEX {
        return Err(bad());
    }
    Ok(n)
}

/// The emulated device `name`, created with the ConnectX-6 Dx profile on
/// first request.
pub fn sim_device(name: &str) -> Result<Arc<SimDevice>> {
    let n = parse_name(name)?;
    let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
    Ok(Arc::clone(reg.entry(n).or_insert_with(|| {
        Arc::new(SimDevice::named(n, Profile::connectx6_dx()))
    })))
}

/// Creates `name` with a custom profile (tests of limits). Fails if the
/// device already exists.
pub fn sim_device_with_profile(name: &str, profile: Profile) -> Result<Arc<SimDevice>> {
    let n = parse_name(name)?;
    let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
    if reg.contains_key(&n) {
        return Err(Error::argument(format!(
            "emulated device {name} already exists"
        )));
    }
    let d = Arc::new(SimDevice::named(n, profile));
    reg.insert(n, Arc::clone(&d));
    Ok(d)
}

/// The emulated device `name` (`simN`) as a provider.
pub fn device(name: &str) -> Result<Arc<dyn Provider>> {
    Ok(sim_device(name)?)
}

/// Every emulated device created so far (`sim0` always), by index.
pub fn devices() -> Vec<Arc<dyn Provider>> {
    let reg = registry().lock().unwrap_or_else(|e| e.into_inner());
    reg.values()
        .map(|d| Arc::clone(d) as Arc<dyn Provider>)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `.rs` file under `dir` (the tree is a few levels deep).
    fn sources(dir: &std::path::Path, depth: u32, out: &mut Vec<std::path::PathBuf>) {
        assert!(depth < 8, "{}: nested too deep", dir.display());
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                sources(&path, depth + 1, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }

    /// The layering in the module docs: `fw` and `engine` never name a
    /// layer above them.
    #[test]
    fn layers_point_one_way() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sim");
        let rules: [(&str, &[&str]); 2] = [
            (
                "fw",
                &[
                    "sim::kernel",
                    "super::kernel",
                    "sim::engine",
                    "super::engine",
                ],
            ),
            ("engine", &["sim::kernel", "super::kernel"]),
        ];
        let mut bad = Vec::new();
        for (layer, banned) in rules {
            let mut files = Vec::new();
            sources(&root.join(layer), 0, &mut files);
            assert!(!files.is_empty(), "no sources under sim/{layer}");
            for f in files {
                let text = std::fs::read_to_string(&f).unwrap();
                for (n, line) in text.lines().enumerate() {
                    if let Some(b) = banned.iter().find(|b| line.contains(*b)) {
                        bad.push(format!("{}:{}: names {b}", f.display(), n + 1));
                    }
                }
            }
        }
        assert!(bad.is_empty(), "layer rule broken:\n{}", bad.join("\n"));
    }

    #[test]
    fn names() {
        assert_eq!(parse_name("sim0").unwrap(), 0);
        assert_eq!(parse_name("sim12").unwrap(), 12);
        for bad in [
            "sim",
            "sim01",
            "mlx5_0",
            "sim-1",
            "sim1x",
            "sim99999999999",
            "SIM1",
        ] {
            assert!(parse_name(bad).unwrap_err().is_argument(), "{bad}");
        }
    }
}
