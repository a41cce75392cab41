//! The private sysfs tree: what Linux 6.1 shows under `/sys/class/infiniband*`
//! and `/dev/infiniband` for an mlx5 device, written into a directory of our
//! own so that redirected paths resolve to real files (directory listing,
//! `openat` relative to a directory fd and symlinks then work unchanged).
//!
//! Layout below the root, mirroring sysfs:
//! ```text
//! class/infiniband_verbs/abi_version                 "6"
//! class/infiniband_verbs/uverbsN -> ../../devices/devx-sim/<pci>/infiniband_verbs/uverbsN
//! class/infiniband/<ibdev>       -> ../../devices/devx-sim/<pci>/infiniband/<ibdev>
//! devices/devx-sim/<pci>/{vendor,device,subsystem_*,class,modalias,numa_node}
//! devices/devx-sim/<pci>/infiniband/<ibdev>/{node_guid,sys_image_guid,fw_ver,node_type,
//!     node_desc,hca_type,hw_rev,board_id,device -> ../..,ports/<p>/…}
//! devices/devx-sim/<pci>/infiniband_verbs/uverbsN/{ibdev,abi_version,dev,device -> ../..}
//! dev/infiniband/uverbsN                              (placeholder; opens are intercepted)
//! ```

use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

pub use verbs::LinkLayer;

/// Class-wide uverbs ABI (`IB_USER_VERBS_ABI_VERSION`).
pub const UVERBS_CLASS_ABI: u32 = 6;
/// Fixed major number of uverbs character devices.
pub const UVERBS_MAJOR: u32 = 231;
/// Minor number of `uverbs0`.
pub const UVERBS_BASE_MINOR: u32 = 192;

/// One populated GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidSpec {
    pub gid: [u8; 16],
    /// RoCE v2 (else IB / RoCE v1).
    pub roce_v2: bool,
}

/// Everything sysfs says about one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// IB device name (`sim0`).
    pub ibdev: String,
    /// N of `uverbsN`.
    pub uverbs_index: u32,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub fw_ver: String,
    pub pci_vendor: u32,
    /// PCI device id (= verbs `vendor_part_id` for mlx5).
    pub pci_device: u32,
    pub num_ports: u8,
    pub link_layer: LinkLayer,
    pub active: bool,
    /// Populated GID entries by index, for every port.
    pub gids: Vec<GidSpec>,
    /// GID table size (entries past `gids` read as the zero GID).
    pub gid_tbl_len: u32,
}

/// PCI class of an Ethernet controller (what ConnectX functions report).
const PCI_CLASS_ETHERNET: u32 = 0x02_0000;
/// Subsystem device id reported with the Mellanox subsystem vendor.
const PCI_SUBSYSTEM_DEVICE: u32 = 0x0016;
/// `IB_PORT_CM_SUP`, what a RoCE port advertises.
const PORT_CAP_CM_SUP: u32 = 1 << 16;

impl DeviceSpec {
    /// The name of the uverbs device, `uverbsN`.
    pub fn uverbs_name(&self) -> String {
        format!("uverbs{}", self.uverbs_index)
    }

    /// `major:minor` of the uverbs character device.
    pub fn devno(&self) -> (u32, u32) {
        (UVERBS_MAJOR, UVERBS_BASE_MINOR + self.uverbs_index)
    }

    /// Made-up PCI address of the function (`0000:dN:00.0`).
    pub fn pci_name(&self) -> String {
        format!("0000:{:02x}:00.0", self.uverbs_index & 0xff)
    }

    /// The PCI modalias libibverbs matches providers against.
    pub fn modalias(&self) -> String {
        format!(
            "pci:v{:08X}d{:08X}sv{:08X}sd{:08X}bc{:02X}sc{:02X}i{:02X}",
            self.pci_vendor,
            self.pci_device,
            self.pci_vendor,
            PCI_SUBSYSTEM_DEVICE,
            PCI_CLASS_ETHERNET >> 16,
            (PCI_CLASS_ETHERNET >> 8) & 0xff,
            PCI_CLASS_ETHERNET & 0xff
        )
    }
}

/// A GUID as sysfs prints it: four big-endian 16-bit groups.
pub fn guid_text(guid: u64) -> String {
    let b = guid.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// A GID as sysfs prints it: eight 16-bit groups.
pub fn gid_text(gid: &[u8; 16]) -> String {
    gid.chunks_exact(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

fn write(path: &Path, text: &str) -> io::Result<()> {
    fs::write(path, format!("{text}\n"))
}

fn mkdir(path: &Path) -> io::Result<PathBuf> {
    fs::create_dir_all(path)?;
    Ok(path.to_path_buf())
}

/// Writes the tree for `devices` below `root` (which must exist and be empty).
pub fn build(root: &Path, devices: &[DeviceSpec]) -> io::Result<()> {
    let class_verbs = mkdir(&root.join("class/infiniband_verbs"))?;
    let class_ib = mkdir(&root.join("class/infiniband"))?;
    let dev_ib = mkdir(&root.join("dev/infiniband"))?;
    write(
        &class_verbs.join("abi_version"),
        &UVERBS_CLASS_ABI.to_string(),
    )?;
    for d in devices {
        let pci_rel = format!("devices/devx-sim/{}", d.pci_name());
        let pci = mkdir(&root.join(&pci_rel))?;
        write(&pci.join("vendor"), &format!("{:#06x}", d.pci_vendor))?;
        write(&pci.join("device"), &format!("{:#06x}", d.pci_device))?;
        write(
            &pci.join("subsystem_vendor"),
            &format!("{:#06x}", d.pci_vendor),
        )?;
        write(
            &pci.join("subsystem_device"),
            &format!("{PCI_SUBSYSTEM_DEVICE:#06x}"),
        )?;
        write(&pci.join("class"), &format!("{PCI_CLASS_ETHERNET:#08x}"))?;
        write(&pci.join("modalias"), &d.modalias())?;
        write(&pci.join("numa_node"), "-1")?;

        let ib = mkdir(&pci.join("infiniband").join(&d.ibdev))?;
        symlink("../..", ib.join("device"))?;
        write(&ib.join("node_guid"), &guid_text(d.node_guid))?;
        write(&ib.join("sys_image_guid"), &guid_text(d.sys_image_guid))?;
        write(&ib.join("fw_ver"), &d.fw_ver)?;
        write(&ib.join("node_type"), "1: CA")?;
        write(&ib.join("node_desc"), &format!("devx emulated {}", d.ibdev))?;
        write(&ib.join("hca_type"), &format!("MT{}", d.pci_device))?;
        write(&ib.join("hw_rev"), "0x0")?;
        write(&ib.join("board_id"), "DEVX0000000000")?;
        for port in 1..=d.num_ports {
            write_port(&ib.join("ports").join(port.to_string()), d)?;
        }

        let uv = mkdir(&pci.join("infiniband_verbs").join(d.uverbs_name()))?;
        symlink("../..", uv.join("device"))?;
        write(&uv.join("ibdev"), &d.ibdev)?;
        write(
            &uv.join("abi_version"),
            &devx::kernel::MLX5_UVERBS_ABI.to_string(),
        )?;
        let (major, minor) = d.devno();
        write(&uv.join("dev"), &format!("{major}:{minor}"))?;

        symlink(
            format!("../../{pci_rel}/infiniband/{}", d.ibdev),
            class_ib.join(&d.ibdev),
        )?;
        symlink(
            format!("../../{pci_rel}/infiniband_verbs/{}", d.uverbs_name()),
            class_verbs.join(d.uverbs_name()),
        )?;
        fs::write(dev_ib.join(d.uverbs_name()), b"")?;
    }
    Ok(())
}

fn write_port(dir: &Path, d: &DeviceSpec) -> io::Result<()> {
    mkdir(dir)?;
    let (state, phys) = if d.active {
        ("4: ACTIVE", "5: LinkUp")
    } else {
        ("1: DOWN", "3: Disabled")
    };
    write(&dir.join("state"), state)?;
    write(&dir.join("phys_state"), phys)?;
    write(&dir.join("link_layer"), d.link_layer.name())?;
    write(&dir.join("rate"), "100 Gb/sec (4X EDR)")?;
    write(&dir.join("lid"), "0x0")?;
    write(&dir.join("sm_lid"), "0x0")?;
    write(&dir.join("sm_sl"), "0")?;
    write(&dir.join("lid_mask_count"), "0")?;
    write(&dir.join("cap_mask"), &format!("{PORT_CAP_CM_SUP:#010x}"))?;
    let gids = mkdir(&dir.join("gids"))?;
    let types = mkdir(&dir.join("gid_attrs/types"))?;
    mkdir(&dir.join("gid_attrs/ndevs"))?;
    for i in 0..d.gid_tbl_len {
        let entry = d.gids.get(i as usize);
        let gid = entry.map_or([0u8; 16], |g| g.gid);
        write(&gids.join(i.to_string()), &gid_text(&gid))?;
        if let Some(g) = entry {
            let ty = if g.roce_v2 { "RoCE v2" } else { "IB/RoCE v1" };
            write(&types.join(i.to_string()), ty)?;
        }
    }
    let pkeys = mkdir(&dir.join("pkeys"))?;
    write(&pkeys.join("0"), "0xffff")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DeviceSpec {
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        ll[15] = 1;
        DeviceSpec {
            ibdev: "sim0".into(),
            uverbs_index: 0,
            node_guid: 0x0e42_a1ff_fe00_0000,
            sys_image_guid: 0x0e42_a1ff_fe00_0000,
            fw_ver: "22.36.1010".into(),
            pci_vendor: 0x15b3,
            pci_device: 4125,
            num_ports: 1,
            link_layer: LinkLayer::Ethernet,
            active: true,
            gids: vec![GidSpec {
                gid: ll,
                roce_v2: true,
            }],
            gid_tbl_len: 4,
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("devx-preload-tree-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn read(p: PathBuf) -> String {
        fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .trim_end()
            .to_string()
    }

    #[test]
    fn text_formats_match_sysfs() {
        assert_eq!(guid_text(0x0e42_a1ff_fe00_0001), "0e42:a1ff:fe00:0001");
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = 0x2a;
        assert_eq!(gid_text(&g), "fe80:0000:0000:0000:0000:0000:0000:002a");
        assert_eq!(
            spec().modalias(),
            "pci:v000015B3d0000101Dsv000015B3sd00000016bc02sc00i00"
        );
    }

    #[test]
    fn tree_reads_like_sysfs_through_the_class_links() {
        let root = scratch("class");
        build(&root, &[spec()]).unwrap();
        let verbs = root.join("class/infiniband_verbs");
        assert_eq!(read(verbs.join("abi_version")), "6");
        let names: Vec<String> = fs::read_dir(&verbs)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("uverbs"))
            .collect();
        assert_eq!(names, ["uverbs0"]);
        assert_eq!(read(verbs.join("uverbs0/ibdev")), "sim0");
        assert_eq!(read(verbs.join("uverbs0/abi_version")), "1");
        assert_eq!(read(verbs.join("uverbs0/dev")), "231:192");
        assert_eq!(read(verbs.join("uverbs0/device/vendor")), "0x15b3");

        let ib = root.join("class/infiniband/sim0");
        assert_eq!(read(ib.join("node_guid")), "0e42:a1ff:fe00:0000");
        assert_eq!(read(ib.join("node_type")), "1: CA");
        assert_eq!(read(ib.join("fw_ver")), "22.36.1010");
        assert_eq!(read(ib.join("hca_type")), "MT4125");
        assert_eq!(
            read(ib.join("device/modalias")),
            "pci:v000015B3d0000101Dsv000015B3sd00000016bc02sc00i00"
        );
        let port = ib.join("ports/1");
        assert_eq!(read(port.join("state")), "4: ACTIVE");
        assert_eq!(read(port.join("link_layer")), "Ethernet");
        assert_eq!(
            read(port.join("gids/0")),
            "fe80:0000:0000:0000:0000:0000:0000:0001"
        );
        assert_eq!(read(port.join("gid_attrs/types/0")), "RoCE v2");
        assert_eq!(
            read(port.join("gids/3")),
            "0000:0000:0000:0000:0000:0000:0000:0000"
        );
        assert!(!port.join("gid_attrs/types/3").exists());
        assert!(root.join("dev/infiniband/uverbs0").is_file());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn second_device_gets_its_own_uverbs_and_minor() {
        let root = scratch("two");
        let mut b = spec();
        b.ibdev = "sim1".into();
        b.uverbs_index = 1;
        b.active = false;
        build(&root, &[spec(), b]).unwrap();
        let verbs = root.join("class/infiniband_verbs");
        assert_eq!(read(verbs.join("uverbs1/ibdev")), "sim1");
        assert_eq!(read(verbs.join("uverbs1/dev")), "231:193");
        assert_eq!(
            read(root.join("class/infiniband/sim1/ports/1/state")),
            "1: DOWN"
        );
        assert_ne!(
            fs::canonicalize(verbs.join("uverbs0/device")).unwrap(),
            fs::canonicalize(verbs.join("uverbs1/device")).unwrap()
        );
        fs::remove_dir_all(&root).unwrap();
    }
}
