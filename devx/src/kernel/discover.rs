//! Finding mlx5 devices through sysfs.
//!
//! A device is mlx5 when its uverbs driver ABI is 1 and its parent device is a
//! Mellanox function (PCI vendor 0x15b3) or is bound to `mlx5_core`. The IB
//! device name is not used for that: udev rules rename devices.

use std::fmt;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::sys::{self, Sys};
use crate::provider::{DeviceInfo, Provider};

/// PCI vendor id of Mellanox / NVIDIA networking.
pub const MELLANOX_PCI_VENDOR: u32 = 0x15b3;
/// IEEE OUI of Mellanox, the `vendor_id` verbs reports for its devices.
pub const MELLANOX_IEEE_VENDOR: u32 = 0x02c9;
/// The uverbs driver ABI version of mlx5.
pub const MLX5_UVERBS_ABI: u32 = 1;

/// Logical state of a port, from `ports/<n>/state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    Nop,
    Down,
    Init,
    Armed,
    Active,
    ActiveDefer,
    Other(u8),
}

impl PortState {
    pub fn from_raw(v: u8) -> PortState {
        match v {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            x => PortState::Other(x),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            PortState::Nop => "NOP",
            PortState::Down => "DOWN",
            PortState::Init => "INIT",
            PortState::Armed => "ARMED",
            PortState::Active => "ACTIVE",
            PortState::ActiveDefer => "ACTIVE_DEFER",
            PortState::Other(_) => "UNKNOWN",
        }
    }
}

/// Link layer of a port, from `ports/<n>/link_layer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkLayer {
    InfiniBand,
    Ethernet,
    Other(String),
}

/// One port of a device as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number, from 1.
    pub port: u8,
    pub state: PortState,
    /// Physical state number (`5` = LinkUp), 0 when unknown.
    pub phys_state: u8,
    pub link_layer: LinkLayer,
}

/// An mlx5 device reachable through `/dev/infiniband/uverbsN`. Implements
/// [`Provider`]: `open` allocates a DEVX context on a fresh file descriptor.
#[derive(Clone)]
pub struct KernelDevice {
    pub(crate) sys: Arc<dyn Sys>,
    pub(crate) uverbs: String,
    pub(crate) ibdev: String,
    pub(crate) dev_path: PathBuf,
    pub(crate) node_guid: u64,
    pub(crate) sys_image_guid: u64,
    pub(crate) fw_ver: String,
    pub(crate) vendor_id: u32,
    pub(crate) vendor_part_id: u32,
    pub(crate) hw_rev: String,
    pub(crate) board_id: String,
    pub(crate) parent: String,
    pub(crate) driver: String,
    pub(crate) ports: Vec<PortInfo>,
}

impl fmt::Debug for KernelDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelDevice")
            .field("ibdev", &self.ibdev)
            .field("uverbs", &self.uverbs)
            .field("dev_path", &self.dev_path)
            .field("node_guid", &format_args!("{:#018x}", self.node_guid))
            .field("fw_ver", &self.fw_ver)
            .field("vendor_part_id", &self.vendor_part_id)
            .field("ports", &self.ports)
            .finish_non_exhaustive()
    }
}

impl KernelDevice {
    /// A device known only by name and char device, served by the real
    /// system calls (for callers that found it some other way).
    pub fn new(ibdev: impl Into<String>, dev_path: impl Into<PathBuf>) -> KernelDevice {
        let dev_path = dev_path.into();
        let uverbs = dev_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        KernelDevice {
            sys: sys::real(),
            uverbs,
            ibdev: ibdev.into(),
            dev_path,
            node_guid: 0,
            sys_image_guid: 0,
            fw_ver: String::new(),
            vendor_id: MELLANOX_PCI_VENDOR,
            vendor_part_id: 0,
            hw_rev: String::new(),
            board_id: String::new(),
            parent: String::new(),
            driver: String::new(),
            ports: Vec::new(),
        }
    }

    /// The same device with its system calls going to `sys` (a fake kernel).
    pub fn with_sys(mut self, sys: Arc<dyn Sys>) -> KernelDevice {
        self.sys = sys;
        self
    }

    /// IB device name (`mlx5_0`, or whatever udev renamed it to).
    pub fn ibdev(&self) -> &str {
        &self.ibdev
    }
    /// `uverbsN`.
    pub fn uverbs(&self) -> &str {
        &self.uverbs
    }
    /// `/dev/infiniband/uverbsN`.
    pub fn dev_path(&self) -> &Path {
        &self.dev_path
    }
    /// Node GUID, the first printed group most significant.
    pub fn node_guid(&self) -> u64 {
        self.node_guid
    }
    pub fn sys_image_guid(&self) -> u64 {
        self.sys_image_guid
    }
    pub fn fw_ver(&self) -> &str {
        &self.fw_ver
    }
    /// PCI vendor id of the parent function (0x15b3).
    pub fn vendor_id(&self) -> u32 {
        self.vendor_id
    }
    /// The IEEE vendor id verbs reports as `vendor_id` (0x02c9 for Mellanox /
    /// NVIDIA networking functions); what [`DeviceInfo::vendor_id`] carries,
    /// as for the emulated device.
    pub fn ieee_vendor_id(&self) -> u32 {
        if self.vendor_id == MELLANOX_PCI_VENDOR {
            MELLANOX_IEEE_VENDOR
        } else {
            self.vendor_id
        }
    }
    /// PCI device id (`4125` for a ConnectX-6 Dx), as verbs reports vendor_part_id.
    pub fn vendor_part_id(&self) -> u32 {
        self.vendor_part_id
    }
    pub fn hw_rev(&self) -> &str {
        &self.hw_rev
    }
    pub fn board_id(&self) -> &str {
        &self.board_id
    }
    /// Name of the parent device (`0000:08:00.0`, or an SF's auxiliary device).
    pub fn parent(&self) -> &str {
        &self.parent
    }
    /// Driver bound to the parent (`mlx5_core`), empty when unknown.
    pub fn driver(&self) -> &str {
        &self.driver
    }
    pub fn ports(&self) -> &[PortInfo] {
        &self.ports
    }

    /// What the provider seam shows of this device.
    pub fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            name: self.ibdev.clone(),
            provider: "kernel".into(),
            emulated: false,
            location: self.dev_path.display().to_string(),
            node_guid: self.node_guid,
            fw_version: self.fw_ver.clone(),
            vendor_id: self.ieee_vendor_id(),
            vendor_part_id: self.vendor_part_id,
            num_ports: self.ports.len().min(u8::MAX as usize) as u8,
        }
    }
}

/// A uverbs device that discovery passed over, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// `uverbsN` (or the class directory when the whole class was refused).
    pub uverbs: String,
    /// The IB device name, when it could be read.
    pub ibdev: Option<String>,
    pub reason: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.ibdev {
            Some(ib) => write!(f, "{} ({ib}): {}", self.uverbs, self.reason),
            None => write!(f, "{}: {}", self.uverbs, self.reason),
        }
    }
}

/// Result of a sysfs scan: the usable mlx5 devices and what was passed over.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    pub devices: Vec<KernelDevice>,
    pub skipped: Vec<Skipped>,
}

/// The mlx5 devices of this machine, in uverbs order; empty when there are
/// none or no RDMA stack at all.
pub fn discover() -> Vec<KernelDevice> {
    discover_in(Path::new("/sys"), Path::new("/dev")).devices
}

/// Every mlx5 device of this machine as a provider.
pub fn discover_providers() -> Vec<Arc<dyn Provider>> {
    discover()
        .into_iter()
        .map(|d| Arc::new(d) as Arc<dyn Provider>)
        .collect()
}

/// Scans `sysfs_root/class/infiniband_verbs` (and `…/class/infiniband`) for
/// mlx5 devices whose char device lies under `dev_root/infiniband/`.
pub fn discover_in(sysfs_root: &Path, dev_root: &Path) -> Discovery {
    discover_with(sysfs_root, dev_root, sys::real())
}

/// [`discover_in`] with the devices' system calls going to `sys`.
pub fn discover_with(sysfs_root: &Path, dev_root: &Path, sys: Arc<dyn Sys>) -> Discovery {
    let mut out = Discovery::default();
    let class = sysfs_root.join("class/infiniband_verbs");
    let Ok(entries) = fs::read_dir(&class) else {
        return out;
    };
    // rdma-core accepts class ABI 3..=6; a missing file is not fatal.
    if let Ok(text) = fs::read_to_string(class.join("abi_version")) {
        match text.trim().parse::<u32>() {
            Ok(v) if (3..=6).contains(&v) => {}
            _ => {
                out.skipped.push(Skipped {
                    uverbs: "infiniband_verbs".into(),
                    ibdev: None,
                    reason: format!("unsupported uverbs class ABI '{}'", text.trim()),
                });
                return out;
            }
        }
    }
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.strip_prefix("uverbs").is_some_and(|r| !r.is_empty()))
        .collect();
    names.sort_by_key(|n| {
        (
            n["uverbs".len()..].parse::<u64>().unwrap_or(u64::MAX),
            n.clone(),
        )
    });
    for name in names {
        match probe(sysfs_root, dev_root, &class, &name, &sys) {
            Ok(dev) => out.devices.push(dev),
            Err(s) => out.skipped.push(s),
        }
    }
    out
}

fn read_trim(p: &Path) -> std::io::Result<String> {
    fs::read_to_string(p).map(|s| s.trim().to_string())
}

fn parse_hex(s: &str) -> Option<u32> {
    let s = s.trim();
    u32::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

/// `xxxx:xxxx:xxxx:xxxx` → u64, first group most significant.
pub(crate) fn parse_guid(s: &str) -> Option<u64> {
    let groups: Vec<&str> = s.trim().split(':').collect();
    if groups.len() != 4 {
        return None;
    }
    let mut v = 0u64;
    for g in groups {
        if g.is_empty() || g.len() > 4 {
            return None;
        }
        v = (v << 16) | u64::from(u16::from_str_radix(g, 16).ok()?);
    }
    Some(v)
}

/// `major:minor` → (major, minor).
fn parse_devno(s: &str) -> Option<(u64, u64)> {
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// glibc's `major()`/`minor()` of a `dev_t`.
fn split_rdev(rdev: u64) -> (u64, u64) {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    (major, minor)
}

/// `4: ACTIVE` → 4.
fn parse_leading_number(s: &str) -> Option<u8> {
    s.split(':').next()?.trim().parse().ok()
}

fn probe(
    sysfs_root: &Path,
    dev_root: &Path,
    class: &Path,
    name: &str,
    sys: &Arc<dyn Sys>,
) -> Result<KernelDevice, Skipped> {
    let dir = class.join(name);
    let skip = |ibdev: Option<&str>, reason: String| Skipped {
        uverbs: name.to_string(),
        ibdev: ibdev.map(str::to_string),
        reason,
    };
    let ibdev = read_trim(&dir.join("ibdev")).map_err(|e| {
        skip(
            None,
            format!("cannot read {}: {e}", dir.join("ibdev").display()),
        )
    })?;
    if ibdev.is_empty() {
        return Err(skip(None, "empty ibdev file".into()));
    }
    let ib = Some(ibdev.as_str());
    let abi_text = read_trim(&dir.join("abi_version"))
        .map_err(|e| skip(ib, format!("cannot read abi_version: {e}")))?;
    let abi: u32 = abi_text
        .parse()
        .map_err(|_| skip(ib, format!("unreadable abi_version '{abi_text}'")))?;

    let parent_dir = dir.join("device");
    let driver = fs::read_link(parent_dir.join("driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    // An SF's parent is an auxiliary device whose own parent is the PCI function.
    let vendor = read_trim(&parent_dir.join("vendor"))
        .or_else(|_| read_trim(&parent_dir.join("../vendor")))
        .ok()
        .and_then(|s| parse_hex(&s));
    let mellanox_parent = driver.starts_with("mlx5_core") || vendor == Some(MELLANOX_PCI_VENDOR);
    if abi != MLX5_UVERBS_ABI || !mellanox_parent {
        let vendor_text = vendor.map_or("unknown".to_string(), |v| format!("{v:#06x}"));
        let driver_text = if driver.is_empty() {
            "unknown"
        } else {
            driver.as_str()
        };
        return Err(skip(
            ib,
            format!(
                "not an mlx5 device (driver ABI {abi}, parent vendor {vendor_text}, driver {driver_text})"
            ),
        ));
    }

    let devno_text =
        read_trim(&dir.join("dev")).map_err(|e| skip(ib, format!("cannot read dev: {e}")))?;
    let devno = parse_devno(&devno_text)
        .ok_or_else(|| skip(ib, format!("unreadable dev number '{devno_text}'")))?;
    let dev_path = dev_root.join("infiniband").join(name);
    let meta = fs::metadata(&dev_path)
        .map_err(|e| skip(ib, format!("no char device {}: {e}", dev_path.display())))?;
    if !meta.file_type().is_char_device() {
        return Err(skip(
            ib,
            format!("{} is not a char device", dev_path.display()),
        ));
    }
    let rdev = split_rdev(meta.rdev());
    if rdev != devno {
        return Err(skip(
            ib,
            format!(
                "{} is device {}:{}, sysfs says {}:{}",
                dev_path.display(),
                rdev.0,
                rdev.1,
                devno.0,
                devno.1
            ),
        ));
    }

    let ibdir = sysfs_root.join("class/infiniband").join(&ibdev);
    let text = |f: &str| read_trim(&ibdir.join(f)).unwrap_or_default();
    let vendor_part_id = read_trim(&parent_dir.join("device"))
        .ok()
        .and_then(|s| parse_hex(&s))
        .or_else(|| {
            text("hca_type")
                .strip_prefix("MT")
                .and_then(|d| d.parse().ok())
        })
        .unwrap_or(0);
    let parent = fs::canonicalize(&parent_dir)
        .or_else(|_| fs::read_link(&parent_dir))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();

    Ok(KernelDevice {
        sys: sys.clone(),
        uverbs: name.to_string(),
        ibdev: ibdev.clone(),
        dev_path,
        node_guid: parse_guid(&text("node_guid")).unwrap_or(0),
        sys_image_guid: parse_guid(&text("sys_image_guid")).unwrap_or(0),
        fw_ver: text("fw_ver"),
        vendor_id: vendor.unwrap_or(MELLANOX_PCI_VENDOR),
        vendor_part_id,
        hw_rev: text("hw_rev"),
        board_id: text("board_id"),
        parent,
        driver,
        ports: read_ports(&ibdir.join("ports")),
    })
}

fn read_ports(dir: &Path) -> Vec<PortInfo> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut ports: Vec<PortInfo> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let port: u8 = e.file_name().to_str()?.parse().ok()?;
            let p = e.path();
            let state = read_trim(&p.join("state"))
                .ok()
                .and_then(|s| parse_leading_number(&s))
                .map_or(PortState::Other(0), PortState::from_raw);
            let phys_state = read_trim(&p.join("phys_state"))
                .ok()
                .and_then(|s| parse_leading_number(&s))
                .unwrap_or(0);
            let link_layer = match read_trim(&p.join("link_layer"))
                .unwrap_or_default()
                .as_str()
            {
                "InfiniBand" => LinkLayer::InfiniBand,
                "Ethernet" => LinkLayer::Ethernet,
                other => LinkLayer::Other(other.to_string()),
            };
            Some(PortInfo {
                port,
                state,
                phys_state,
                link_layer,
            })
        })
        .collect();
    ports.sort_by_key(|p| p.port);
    ports
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_parsing() {
        assert_eq!(
            parse_guid("b859:9f03:00d6:2a4e"),
            Some(0xb859_9f03_00d6_2a4e)
        );
        assert_eq!(parse_guid("b859:9f03:00d6\n"), None);
        assert_eq!(parse_guid("zzzz:0:0:0"), None);
        assert_eq!(parse_guid(""), None);
    }

    #[test]
    fn rdev_split_matches_glibc() {
        // makedev(231, 192) and a large minor.
        assert_eq!(split_rdev((231 << 8) | 192), (231, 192));
        let (major, minor): (u64, u64) = (0x123, 0x1245);
        let dev = ((major & 0xfff) << 8) | (minor & 0xff) | ((minor & !0xff) << 12);
        assert_eq!(split_rdev(dev), (major, minor));
    }

    #[test]
    fn port_state_text() {
        assert_eq!(parse_leading_number("4: ACTIVE"), Some(4));
        assert_eq!(parse_leading_number("garbage"), None);
        assert_eq!(PortState::from_raw(4).name(), "ACTIVE");
    }
}
