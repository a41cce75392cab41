//! The firmware objects alive on a device, all users together, as
//! `rdma res show` lists them.
//!
//! The emulated device answers from its firmware object tables. A kernel
//! device would answer through the kernel's resource tracking (RDMA netlink,
//! `RDMA_NLDEV_CMD_RES_*_GET`), which this library does not speak: listing
//! is unsupported there.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::sim::fw::state::State;
use crate::sim::fw::table::Table;
use crate::sim::ObjKind;

/// One live firmware object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveObject {
    /// Object kind: `pd`, `cq`, `qp`, `mkey`, `umem`, `uar`, `eq`, `srq`, …
    /// (the emulator's [`ObjKind`] names).
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
/// User contexts are left out.
pub fn live_objects(device: &Device) -> Result<Vec<LiveObject>> {
    if !device.is_emulated() {
        return Err(Error::unsupported(
            format!("listing the live objects of {}", device.name()),
            "the kernel tracks them in RDMA netlink (`rdma res`), which this library does not read",
        ));
    }
    let sim = crate::sim::sim_device(device.name())?;
    let mut out = sim.firmware().with(collect);
    out.sort_by_key(|o| {
        let kind = ObjKind::ALL.iter().position(|k| k.name() == o.kind);
        (kind, o.number)
    });
    Ok(out)
}

fn collect(st: &State) -> Vec<LiveObject> {
    let mut out = Vec::new();
    add(&mut out, &st.pd, |_| ObjKind::Pd, |_| Vec::new());
    add(
        &mut out,
        &st.td,
        |_| ObjKind::TransportDomain,
        |_| Vec::new(),
    );
    add(&mut out, &st.xrcd, |_| ObjKind::Xrcd, |_| Vec::new());
    add(&mut out, &st.uar, |_| ObjKind::Uar, |_| Vec::new());
    add(
        &mut out,
        &st.umem,
        |_| ObjKind::Umem,
        |u| vec![("len", u.len), ("access", u.access.into())],
    );
    add(&mut out, &st.eq, |_| ObjKind::Eq, |_| Vec::new());
    add(
        &mut out,
        &st.cq,
        |_| ObjKind::Cq,
        |c| {
            vec![
                ("log_cq_size", c.cqc.log_cq_size().into()),
                ("c_eqn_or_apu_element", c.eqn.into()),
            ]
        },
    );
    add(
        &mut out,
        &st.qp,
        |_| ObjKind::Qp,
        |q| vec![("state", q.qpc.state().into()), ("st", q.qpc.st().into())],
    );
    add(
        &mut out,
        &st.mkey,
        |_| ObjKind::Mkey,
        |m| vec![("key", m.key.into()), ("pd", m.pd.into()), ("len", m.len)],
    );
    add(&mut out, &st.srq, |s| s.kind, |_| Vec::new());
    add(&mut out, &st.sq, |_| ObjKind::Sq, |_| Vec::new());
    add(&mut out, &st.rq, |_| ObjKind::Rq, |_| Vec::new());
    add(&mut out, &st.tir, |_| ObjKind::Tir, |_| Vec::new());
    add(&mut out, &st.tis, |_| ObjKind::Tis, |_| Vec::new());
    add(&mut out, &st.rqt, |_| ObjKind::Rqt, |_| Vec::new());
    add(
        &mut out,
        &st.flow_table,
        |_| ObjKind::FlowTable,
        |_| Vec::new(),
    );
    add(
        &mut out,
        &st.flow_group,
        |_| ObjKind::FlowGroup,
        |_| Vec::new(),
    );
    add(
        &mut out,
        &st.flow_entry,
        |_| ObjKind::FlowEntry,
        |_| Vec::new(),
    );
    add(
        &mut out,
        &st.flow_counter,
        |_| ObjKind::FlowCounter,
        |_| Vec::new(),
    );
    add(
        &mut out,
        &st.q_counter,
        |_| ObjKind::QCounter,
        |_| Vec::new(),
    );
    add(
        &mut out,
        &st.general_obj,
        |_| ObjKind::GeneralObj,
        |_| Vec::new(),
    );
    add(&mut out, &st.mcg, |_| ObjKind::McgAttach, |_| Vec::new());
    out
}

fn add<T>(
    out: &mut Vec<LiveObject>,
    table: &Table<T>,
    kind: impl Fn(&T) -> ObjKind,
    attrs: impl Fn(&T) -> Vec<(&'static str, u64)>,
) {
    for number in table.numbers_of_all() {
        if let Some(e) = table.peek(number) {
            out.push(LiveObject {
                kind: kind(&e.obj).name(),
                number,
                uid: e.uid,
                refs: e.refs,
                attrs: attrs(&e.obj),
            });
        }
    }
}

#[cfg(test)]
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
