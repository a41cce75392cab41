//! The firmware objects alive on a device, all users together, as
//! `rdma res show` lists them.
//!
//! The emulated device answers from its firmware object tables. A kernel
//! device would answer through the kernel's resource tracking (RDMA netlink,
//! `RDMA_NLDEV_CMD_RES_*_GET`), which this library does not speak: listing
//! is unsupported there.

use crate::device::Device;
use crate::error::Result;

/// One live firmware object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveObject {
    /// Object kind: `pd`, `cq`, `qp`, `mkey`, `umem`, `uar`, `eq`, `srq`, …
    /// (the emulator's `ObjKind` names).
    pub kind: &'static str,
    /// Its PRM number (CQN, QPN, mkey index, …).
    pub number: u32,
    /// The DEVX uid owning it (0: the device or kernel itself).
    pub uid: u16,
    /// How many other objects reference it.
    pub refs: u32,
    /// A few attributes by PRM field name (QP `state` and `st`, CQ `log_cq_size`…).
    pub attrs: Vec<(&'static str, u64)>,
}

/// Every live firmware object of `device`, ordered by kind and number.
/// User contexts are left out. Unsupported on kernel devices.
pub fn live_objects(device: &Device) -> Result<Vec<LiveObject>> {
    device.provider().live_objects()
}

#[cfg(all(test, feature = "emulator"))]
mod tests {
    use super::*;

    #[test]
    fn a_created_pd_is_listed_with_its_owner() {
        let dev = Device::emulated("sim4101").unwrap();
        let ctx = dev.open().unwrap();
        let mut pd_in = prm_layouts::AllocPdIn::new();
        pd_in.set_opcode(prm_layouts::Opcode::AllocPd.raw());
        let pd = ctx
            .create(pd_in.as_bytes(), prm_layouts::AllocPdOut::SIZE_BYTES)
            .unwrap();
        let live = live_objects(&dev).unwrap();
        let found = live
            .iter()
            .find(|o| o.kind == "pd" && o.number == pd.id())
            .expect("the PD is listed");
        assert_ne!(found.uid, 0);
        drop(pd);
        let live = live_objects(&dev).unwrap();
        assert!(!live.iter().any(|o| o.kind == "pd"));
    }
}
