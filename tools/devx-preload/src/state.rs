//! Process-wide state: the emulated devices shown, their private sysfs tree,
//! and the uverbs files opened on them.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use devx::kernel::MELLANOX_PCI_VENDOR;
use devx::sim::{self, SimDevice};

use crate::tree::{self, DeviceSpec, GidSpec, LinkLayer};
use crate::uverbs::UverbsFile;

/// Environment variable naming the emulated devices to show
/// (comma-separated `simN` names; default `sim0`).
pub const DEVICES_ENV: &str = "DEVX_PRELOAD_DEVICES";
/// Environment variable that turns logging to stderr on (`1`).
pub const LOG_ENV: &str = "DEVX_PRELOAD_LOG";
/// Environment variable naming a fixture file to record every command of
/// the program's contexts into (the first context; the n-th, n > 1, into
/// `<path>.<n>`).
pub const RECORD_ENV: &str = "DEVX_PRELOAD_RECORD";

/// Where the next context records its commands, when `DEVX_PRELOAD_RECORD`
/// asks for recording.
pub fn record_path() -> Option<PathBuf> {
    static CONTEXTS: AtomicUsize = AtomicUsize::new(0);
    let base = PathBuf::from(std::env::var_os(RECORD_ENV).filter(|v| !v.is_empty())?);
    match CONTEXTS.fetch_add(1, Ordering::Relaxed) {
        0 => Some(base),
        n => {
            let mut p = base.into_os_string();
            p.push(format!(".{}", n + 1));
            Some(PathBuf::from(p))
        }
    }
}

/// One device as the program sees it.
pub struct Shown {
    pub spec: DeviceSpec,
    pub sim: Arc<SimDevice>,
}

pub struct State {
    pub root: PathBuf,
    pub devices: Vec<Shown>,
    /// Why the devices or the tree could not be set up; every redirected
    /// path then fails with ENOENT and this is logged.
    pub error: Option<String>,
    creator: u32,
}

impl State {
    /// The device behind `uverbsN`.
    pub fn device(&self, uverbs_index: u32) -> Option<&Shown> {
        self.devices
            .iter()
            .find(|d| d.spec.uverbs_index == uverbs_index)
    }
}

/// Whether `DEVX_PRELOAD_LOG` asks for logging.
pub fn logging() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(LOG_ENV).is_some_and(|v| v != "0" && !v.is_empty()))
}

/// Writes one line to stderr when logging is on.
pub fn log(msg: impl FnOnce() -> String) {
    if logging() {
        eprintln!("devx-preload: {}", msg());
    }
}

/// The state, set up on first use.
pub fn get() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(init)
}

fn init() -> State {
    let creator = std::process::id();
    let root = std::env::temp_dir().join(format!("devx-preload-{creator}-{}", nonce()));
    let mut state = State {
        root,
        devices: Vec::new(),
        error: None,
        creator,
    };
    remove_stale_trees();
    match setup(&mut state) {
        Ok(()) => {
            log(|| {
                format!(
                    "{} device(s) under {}",
                    state.devices.len(),
                    state.root.display()
                )
            });
            // SAFETY: `remove_tree` is an `extern "C" fn()` that never unwinds.
            unsafe { libc::atexit(remove_tree) };
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&state.root);
            eprintln!("devx-preload: no emulated devices: {e}");
            state.error = Some(e);
            state.devices.clear();
        }
    }
    state
}

/// Removes trees left by processes that died without running their exit
/// handlers (killed by a signal).
fn remove_stale_trees() {
    let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("devx-preload-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish() & 0xffff_ffff
}

fn setup(state: &mut State) -> Result<(), String> {
    let names = std::env::var(DEVICES_ENV).unwrap_or_else(|_| "sim0".into());
    for (i, name) in names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .enumerate()
    {
        let sim = sim::sim_device(name).map_err(|e| format!("{DEVICES_ENV}: {e}"))?;
        let index = u32::try_from(i).map_err(|_| format!("{DEVICES_ENV}: too many devices"))?;
        state.devices.push(Shown {
            spec: spec_of(&sim, index),
            sim,
        });
    }
    std::fs::create_dir(&state.root)
        .map_err(|e| format!("cannot create {}: {e}", state.root.display()))?;
    let specs: Vec<DeviceSpec> = state.devices.iter().map(|d| d.spec.clone()).collect();
    tree::build(&state.root, &specs).map_err(|e| {
        format!(
            "cannot build the sysfs tree in {}: {e}",
            state.root.display()
        )
    })
}

/// What sysfs shows for an emulated device.
pub fn spec_of(sim: &SimDevice, uverbs_index: u32) -> DeviceSpec {
    let profile = sim.profile();
    let ident = sim.identity();
    // `cmd_hca_cap.port_type`: 1 is Ethernet, as verbs reads it.
    let link_layer = if profile.port_type == 1 {
        LinkLayer::Ethernet
    } else {
        LinkLayer::InfiniBand
    };
    DeviceSpec {
        ibdev: sim.name().to_string(),
        uverbs_index,
        node_guid: ident.node_guid,
        sys_image_guid: ident.node_guid,
        fw_ver: profile.fw_version.to_string(),
        pci_vendor: MELLANOX_PCI_VENDOR,
        pci_device: profile.vendor_part_id,
        num_ports: profile.num_ports,
        link_layer,
        active: true,
        gids: ident
            .gid_table()
            .iter()
            .map(|g| GidSpec {
                gid: g.gid,
                roce_v2: g.version == prm_layouts::enums::RoceVersion::V2,
            })
            .collect(),
        gid_tbl_len: u32::from(profile.roce_address_table_size),
    }
}

extern "C" fn remove_tree() {
    // Registered only once the state exists, so `get` does not initialise.
    let _ = std::panic::catch_unwind(|| {
        let s = get();
        // A forked child exits too; the tree belongs to the process that made it.
        if s.creator == std::process::id() {
            let _ = std::fs::remove_dir_all(&s.root);
        }
    });
}

/// Uverbs files the library owns, by descriptor.
fn files() -> MutexGuard<'static, HashMap<RawFd, Arc<UverbsFile>>> {
    static FILES: OnceLock<Mutex<HashMap<RawFd, Arc<UverbsFile>>>> = OnceLock::new();
    FILES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Descriptors below this have an ownership bit, so that `write`, `close`
/// and friends on the program's own descriptors never take a lock.
const FAST_FDS: usize = 4096;
static OWNED: [AtomicU64; FAST_FDS / 64] = [const { AtomicU64::new(0) }; FAST_FDS / 64];
/// Owned descriptors at or above FAST_FDS.
static OWNED_HIGH: AtomicUsize = AtomicUsize::new(0);

fn may_own(fd: RawFd) -> bool {
    match usize::try_from(fd) {
        Ok(i) if i < FAST_FDS => OWNED[i / 64].load(Ordering::Acquire) & (1 << (i % 64)) != 0,
        Ok(_) => OWNED_HIGH.load(Ordering::Acquire) != 0,
        Err(_) => false,
    }
}

fn mark(fd: RawFd, owned: bool) {
    match usize::try_from(fd) {
        Ok(i) if i < FAST_FDS => {
            let bit = 1 << (i % 64);
            if owned {
                OWNED[i / 64].fetch_or(bit, Ordering::AcqRel);
            } else {
                OWNED[i / 64].fetch_and(!bit, Ordering::AcqRel);
            }
        }
        Ok(_) if owned => {
            OWNED_HIGH.fetch_add(1, Ordering::AcqRel);
        }
        Ok(_) => {
            OWNED_HIGH.fetch_sub(1, Ordering::AcqRel);
        }
        Err(_) => {}
    }
}

/// Records `file` as the uverbs file behind `fd`.
pub fn register(fd: RawFd, file: Arc<UverbsFile>) {
    let mut files = files();
    if files.insert(fd, file).is_none() {
        mark(fd, true);
    }
}

/// Forgets `fd` (it is being closed); returns its file if it was ours.
pub fn unregister(fd: RawFd) -> Option<Arc<UverbsFile>> {
    if !may_own(fd) {
        return None;
    }
    let gone = files().remove(&fd);
    if gone.is_some() {
        mark(fd, false);
    }
    gone
}

/// The uverbs file behind `fd`, if the library owns it.
pub fn file(fd: RawFd) -> Option<Arc<UverbsFile>> {
    if !may_own(fd) {
        return None;
    }
    files().get(&fd).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_is_tracked_below_and_above_the_bitmap() {
        for fd in [4000, 70_000] {
            assert!(file(fd).is_none());
            register(fd, Arc::new(UverbsFile::new(0, fd)));
            assert_eq!(file(fd).map(|f| f.fd), Some(fd));
            assert!(file(fd + 1).is_none());
            assert!(unregister(fd).is_some());
            assert!(unregister(fd).is_none());
            assert!(file(fd).is_none());
        }
        assert!(file(-1).is_none());
    }
}
