//! The emulated device's answer to [`crate::live_objects`]: its firmware
//! object tables, listed.

use crate::live::LiveObject;
use crate::sim::fw::kind::ObjKind;
use crate::sim::fw::state::State;
use crate::sim::fw::table::Table;

/// Every object in the tables, ordered by kind and number.
pub(crate) fn list(st: &State) -> Vec<LiveObject> {
    let mut out = collect(st);
    out.sort_by_key(|o| {
        let kind = ObjKind::ALL.iter().position(|k| k.name() == o.kind);
        (kind, o.number)
    });
    out
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
