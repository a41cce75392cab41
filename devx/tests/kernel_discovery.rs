//! Discovery over fake sysfs trees: mlx5 devices are found by driver and
//! vendor, whatever their name; others and broken entries are passed over
//! with a reason.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use devx::kernel::fake::FakeKernel;
use devx::kernel::{discover_in, discover_with, KernelContext, LinkLayer, PortState};
use devx::Provider;

/// A scratch directory removed on drop.
struct Tree {
    root: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "devx-kernel-discovery-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        Tree { root }
    }

    fn sys(&self) -> PathBuf {
        self.root.join("sys")
    }

    fn dev(&self) -> PathBuf {
        self.root.join("dev")
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    fn link(&self, rel: &str, target: &str) {
        let p = self.root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        symlink(target, p).unwrap();
    }

    fn class_abi(&self, v: &str) {
        self.write("sys/class/infiniband_verbs/abi_version", v);
    }

    /// A PCI function with vendor/device ids and (optionally) a bound driver.
    fn pci(&self, bdf: &str, vendor: &str, device: &str, driver: Option<&str>) {
        let d = format!("sys/devices/pci0000:00/{bdf}");
        self.write(&format!("{d}/vendor"), &format!("{vendor}\n"));
        self.write(&format!("{d}/device"), &format!("{device}\n"));
        if let Some(drv) = driver {
            fs::create_dir_all(self.root.join(format!("sys/bus/pci/drivers/{drv}"))).unwrap();
            self.link(
                &format!("{d}/driver"),
                &format!("../../../bus/pci/drivers/{drv}"),
            );
        }
    }

    /// `uverbsN` naming `ibdev`, with driver ABI `abi`, parent `parent_rel`
    /// (relative to sys/) and char device number `devno`.
    fn uverbs(&self, n: u32, ibdev: &str, abi: &str, parent_rel: &str, devno: &str) {
        let d = format!("sys/class/infiniband_verbs/uverbs{n}");
        self.write(&format!("{d}/ibdev"), &format!("{ibdev}\n"));
        self.write(&format!("{d}/abi_version"), &format!("{abi}\n"));
        self.write(&format!("{d}/dev"), &format!("{devno}\n"));
        self.link(&format!("{d}/device"), &format!("../../../{parent_rel}"));
    }

    /// The char device: a link to /dev/null, the one char device (1:3)
    /// every test machine has.
    fn node(&self, n: u32) {
        self.link(&format!("dev/infiniband/uverbs{n}"), "/dev/null");
    }

    fn ibdev_attrs(&self, ibdev: &str, guid: &str, fw: &str, hca_type: &str) {
        let d = format!("sys/class/infiniband/{ibdev}");
        self.write(&format!("{d}/node_guid"), &format!("{guid}\n"));
        self.write(&format!("{d}/sys_image_guid"), &format!("{guid}\n"));
        self.write(&format!("{d}/fw_ver"), &format!("{fw}\n"));
        self.write(&format!("{d}/hca_type"), &format!("{hca_type}\n"));
        self.write(&format!("{d}/hw_rev"), "0x0\n");
        self.write(&format!("{d}/board_id"), "MT_0000000359\n");
    }

    fn port(&self, ibdev: &str, p: u32, state: &str, phys: &str, ll: &str) {
        let d = format!("sys/class/infiniband/{ibdev}/ports/{p}");
        self.write(&format!("{d}/state"), &format!("{state}\n"));
        self.write(&format!("{d}/phys_state"), &format!("{phys}\n"));
        self.write(&format!("{d}/link_layer"), &format!("{ll}\n"));
    }

    /// A complete, renamed mlx5 device on uverbs`n`.
    fn mlx5(&self, n: u32, ibdev: &str, bdf: &str) {
        self.pci(bdf, "0x15b3", "0x101d", Some("mlx5_core"));
        self.uverbs(n, ibdev, "1", &format!("devices/pci0000:00/{bdf}"), "1:3");
        self.node(n);
        self.ibdev_attrs(ibdev, "b859:9f03:00d6:2a4e", "22.36.1010", "MT4125");
        self.port(ibdev, 1, "4: ACTIVE", "5: LinkUp", "Ethernet");
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

#[test]
fn no_infiniband_class_means_no_devices() {
    let t = Tree::new();
    fs::create_dir_all(t.sys()).unwrap();
    let d = discover_in(&t.sys(), &t.dev());
    assert!(d.devices.is_empty());
    assert!(d.skipped.is_empty());
    // A root that does not exist at all is the same.
    let d = discover_in(
        Path::new("/nonexistent/devx/sys"),
        Path::new("/nonexistent/devx/dev"),
    );
    assert!(d.devices.is_empty());
}

#[test]
fn this_machine_never_panics() {
    let _ = devx::kernel::discover();
    let _ = devx::kernel::discover_providers();
}

#[test]
fn a_renamed_mlx5_device_is_found_with_its_attributes() {
    let t = Tree::new();
    t.class_abi("6\n");
    t.mlx5(0, "rdmap8s0f0", "0000:08:00.0");
    t.port("rdmap8s0f0", 2, "1: DOWN", "3: Disabled", "InfiniBand");
    let d = discover_in(&t.sys(), &t.dev());
    assert!(d.skipped.is_empty(), "{:?}", d.skipped);
    assert_eq!(d.devices.len(), 1);
    let dev = &d.devices[0];
    assert_eq!(dev.ibdev(), "rdmap8s0f0");
    assert_eq!(dev.uverbs(), "uverbs0");
    assert_eq!(dev.dev_path(), t.dev().join("infiniband/uverbs0"));
    assert_eq!(dev.node_guid(), 0xb859_9f03_00d6_2a4e);
    assert_eq!(dev.fw_ver(), "22.36.1010");
    assert_eq!(dev.vendor_id(), 0x15b3);
    assert_eq!(dev.ieee_vendor_id(), 0x02c9);
    assert_eq!(dev.vendor_part_id(), 0x101d);
    assert_eq!(dev.driver(), "mlx5_core");
    assert_eq!(dev.parent(), "0000:08:00.0");
    assert_eq!(dev.board_id(), "MT_0000000359");
    let ports = dev.ports();
    assert_eq!(ports.len(), 2);
    assert_eq!(
        (ports[0].port, ports[0].state, ports[0].phys_state),
        (1, PortState::Active, 5)
    );
    assert_eq!(ports[0].link_layer, LinkLayer::Ethernet);
    assert_eq!((ports[1].port, ports[1].state), (2, PortState::Down));
    assert_eq!(ports[1].link_layer, LinkLayer::InfiniBand);

    let info = dev.info();
    assert_eq!(info.name, "rdmap8s0f0");
    assert_eq!(info.provider, "kernel");
    assert!(!info.emulated);
    assert_eq!(info.num_ports, 2);
    assert_eq!(info.vendor_part_id, 4125);
    assert_eq!(
        info.location,
        t.dev().join("infiniband/uverbs0").display().to_string()
    );
}

#[test]
fn vendor_alone_or_driver_alone_identifies_mlx5() {
    let t = Tree::new();
    // Vendor 0x15b3 but no driver link (e.g. a restricted sysfs).
    t.pci("0000:01:00.0", "0x15b3", "0x1017", None);
    t.uverbs(0, "weird0", "1", "devices/pci0000:00/0000:01:00.0", "1:3");
    t.node(0);
    // Driver mlx5_core but an unreadable vendor.
    t.pci("0000:02:00.0", "garbage", "0x1017", Some("mlx5_core"));
    t.uverbs(1, "weird1", "1", "devices/pci0000:00/0000:02:00.0", "1:3");
    t.node(1);
    let d = discover_in(&t.sys(), &t.dev());
    let names: Vec<&str> = d.devices.iter().map(|d| d.ibdev()).collect();
    assert_eq!(names, ["weird0", "weird1"], "{:?}", d.skipped);
    // The missing ibdev attributes read as empty, not as an error.
    assert_eq!(d.devices[0].node_guid(), 0);
    assert!(d.devices[0].ports().is_empty());
    assert_eq!(d.devices[0].vendor_part_id(), 0x1017);
}

#[test]
fn a_subfunction_is_found_through_its_pci_parent() {
    let t = Tree::new();
    t.pci("0000:03:00.0", "0x15b3", "0x101d", Some("mlx5_core"));
    let aux = "devices/pci0000:00/0000:03:00.0/mlx5_core.sf.2";
    fs::create_dir_all(t.root.join("sys/bus/auxiliary/drivers/mlx5_core.sf")).unwrap();
    t.link(
        &format!("sys/{aux}/driver"),
        "../../../../bus/auxiliary/drivers/mlx5_core.sf",
    );
    t.uverbs(3, "mlx5_sf2", "1", aux, "1:3");
    t.node(3);
    t.ibdev_attrs("mlx5_sf2", "0000:0000:0000:0001", "22.36.1010", "MT4125");
    let d = discover_in(&t.sys(), &t.dev());
    assert_eq!(d.devices.len(), 1, "{:?}", d.skipped);
    assert_eq!(d.devices[0].driver(), "mlx5_core.sf");
    assert_eq!(d.devices[0].parent(), "mlx5_core.sf.2");
    assert_eq!(
        d.devices[0].vendor_part_id(),
        4125,
        "from hca_type when the parent has no device id"
    );
}

#[test]
fn other_drivers_are_passed_over() {
    let t = Tree::new();
    t.class_abi("6");
    t.mlx5(0, "mlx5_0", "0000:08:00.0");
    // An mlx4 function: Mellanox, but driver ABI 4.
    t.pci("0000:09:00.0", "0x15b3", "0x1003", Some("mlx4_core"));
    t.uverbs(
        1,
        "mlx5_fake_name",
        "4",
        "devices/pci0000:00/0000:09:00.0",
        "1:3",
    );
    t.node(1);
    // A soft-RoCE device named like an mlx5 one: ABI 1 is not enough.
    t.write("sys/devices/virtual/rxe/vendor", "0x0000\n");
    t.uverbs(2, "mlx5_9", "1", "devices/virtual/rxe", "1:3");
    t.node(2);
    // An Intel function.
    t.pci("0000:0a:00.0", "0x8086", "0x1592", Some("ice"));
    t.uverbs(3, "irdma0", "1", "devices/pci0000:00/0000:0a:00.0", "1:3");
    t.node(3);
    let d = discover_in(&t.sys(), &t.dev());
    let names: Vec<&str> = d.devices.iter().map(|d| d.ibdev()).collect();
    assert_eq!(names, ["mlx5_0"]);
    assert_eq!(d.skipped.len(), 3);
    for s in &d.skipped {
        assert!(s.reason.starts_with("not an mlx5 device"), "{s}");
    }
    assert_eq!(d.skipped[0].ibdev.as_deref(), Some("mlx5_fake_name"));
    assert!(
        d.skipped[0].reason.contains("driver ABI 4"),
        "{}",
        d.skipped[0]
    );
    assert!(d.skipped[2].reason.contains("0x8086"), "{}", d.skipped[2]);
}

#[test]
fn broken_entries_are_skipped_with_a_reason() {
    let t = Tree::new();
    t.mlx5(0, "good", "0000:08:00.0");
    // No ibdev file.
    t.pci("0000:11:00.0", "0x15b3", "0x101d", Some("mlx5_core"));
    t.write("sys/class/infiniband_verbs/uverbs1/abi_version", "1\n");
    // No dev file.
    t.uverbs(2, "nodev", "1", "devices/pci0000:00/0000:11:00.0", "1:3");
    fs::remove_file(t.root.join("sys/class/infiniband_verbs/uverbs2/dev")).unwrap();
    // No char device node.
    t.uverbs(3, "nonode", "1", "devices/pci0000:00/0000:11:00.0", "1:3");
    // A node whose number is not the one sysfs names.
    t.uverbs(
        4,
        "mismatch",
        "1",
        "devices/pci0000:00/0000:11:00.0",
        "231:196",
    );
    t.node(4);
    // A regular file where the char device should be.
    t.uverbs(5, "notchar", "1", "devices/pci0000:00/0000:11:00.0", "1:3");
    t.write("dev/infiniband/uverbs5", "");
    // Garbage ABI text.
    t.uverbs(6, "badabi", "one", "devices/pci0000:00/0000:11:00.0", "1:3");
    t.node(6);
    // Not a uverbs entry at all.
    t.write("sys/class/infiniband_verbs/something_else", "x");

    let d = discover_in(&t.sys(), &t.dev());
    let names: Vec<&str> = d.devices.iter().map(|d| d.ibdev()).collect();
    assert_eq!(names, ["good"]);
    let reasons: Vec<(String, String)> = d
        .skipped
        .iter()
        .map(|s| (s.uverbs.clone(), s.reason.clone()))
        .collect();
    assert_eq!(reasons.len(), 6, "{reasons:?}");
    let find = |n: &str| {
        reasons
            .iter()
            .find(|(u, _)| u == n)
            .map(|(_, r)| r.as_str())
            .unwrap()
    };
    assert!(find("uverbs1").contains("ibdev"), "{}", find("uverbs1"));
    assert!(
        find("uverbs2").contains("cannot read dev"),
        "{}",
        find("uverbs2")
    );
    assert!(
        find("uverbs3").contains("no char device"),
        "{}",
        find("uverbs3")
    );
    assert!(find("uverbs4").contains("231:196"), "{}", find("uverbs4"));
    assert!(
        find("uverbs5").contains("not a char device"),
        "{}",
        find("uverbs5")
    );
    assert!(
        find("uverbs6").contains("abi_version"),
        "{}",
        find("uverbs6")
    );
    // Displayed with the device name when known.
    assert!(d
        .skipped
        .iter()
        .any(|s| s.to_string().starts_with("uverbs4 (mismatch): ")));
}

#[test]
fn an_unknown_class_abi_refuses_everything() {
    let t = Tree::new();
    t.class_abi("9\n");
    t.mlx5(0, "mlx5_0", "0000:08:00.0");
    let d = discover_in(&t.sys(), &t.dev());
    assert!(d.devices.is_empty());
    assert_eq!(d.skipped.len(), 1);
    assert!(
        d.skipped[0].reason.contains("class ABI"),
        "{}",
        d.skipped[0]
    );
}

#[test]
fn devices_come_in_uverbs_order() {
    let t = Tree::new();
    t.mlx5(10, "b", "0000:10:00.0");
    t.mlx5(2, "a", "0000:02:00.0");
    t.mlx5(1, "c", "0000:01:00.0");
    let d = discover_in(&t.sys(), &t.dev());
    let names: Vec<&str> = d.devices.iter().map(|d| d.uverbs()).collect();
    assert_eq!(names, ["uverbs1", "uverbs2", "uverbs10"]);
}

#[test]
fn a_discovered_device_opens_through_its_sys() {
    let t = Tree::new();
    t.mlx5(0, "mlx5_0", "0000:08:00.0");
    let k = Arc::new(FakeKernel::new());
    let d = discover_with(&t.sys(), &t.dev(), k.clone());
    let dev = &d.devices[0];
    let ctx = KernelContext::open(dev).unwrap();
    assert_eq!(k.opened()[0].0, t.dev().join("infiniband/uverbs0"));
    assert_eq!(devx::ProviderContext::info(&ctx).name, "mlx5_0");
    let via_trait = dev.open().unwrap();
    assert_eq!(via_trait.info().node_guid, 0xb859_9f03_00d6_2a4e);
}
