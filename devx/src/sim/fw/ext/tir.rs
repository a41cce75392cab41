//! Transport objects of the Ethernet path: TIS (send side, under SQs), TIR
//! (receive dispatch to an RQ or an RQT) and RQT (RSS indirection table).

use prm_layouts::{
    CreateRqtIn, CreateRqtOut, CreateTirIn, CreateTirOut, CreateTisIn, CreateTisOut, DestroyRqtIn,
    DestroyTirIn, DestroyTisIn, ModifyRqtIn, ModifyTirIn, ModifyTisIn, QueryRqtIn, QueryRqtOut,
    QueryTirIn, QueryTirOut, QueryTisIn, QueryTisOut, RqNum, Rqtc, Tirc, Tisc,
};

use crate::sim::fw::cmd::{ensure, fail, out_view, put, Cmd, FwResult};
use crate::sim::fw::kind::ObjKind;
use crate::sim::fw::state::{Holder, State};
use crate::sim::fw::table::ObjRef;
use crate::sim::syndrome;

/// Where the RQ list of an RQT context starts in create/modify/query
/// mailboxes: the list (`rqt_context.rq_num[]`) is the tail of each.
const RQ_LIST_AT: usize = prm_layouts::CreateRqtIn::SIZE_BYTES;
const _: () = assert!(
    prm_layouts::ModifyRqtIn::SIZE_BYTES == RQ_LIST_AT
        && prm_layouts::QueryRqtOut::SIZE_BYTES == RQ_LIST_AT
);

#[derive(Debug, Clone)]
pub(crate) struct TisObj {
    pub(crate) ctx: Tisc,
    holds: Vec<ObjRef>,
}

#[derive(Debug, Clone)]
pub(crate) struct TirObj {
    pub(crate) ctx: Tirc,
    holds: Vec<ObjRef>,
}

#[derive(Debug, Clone)]
pub(crate) struct RqtObj {
    pub(crate) ctx: Rqtc,
    pub(crate) rqs: Vec<u32>,
}

impl Holder for TisObj {
    fn holds(&self) -> Vec<ObjRef> {
        self.holds.clone()
    }
}
impl Holder for TirObj {
    fn holds(&self) -> Vec<ObjRef> {
        self.holds.clone()
    }
}
impl Holder for RqtObj {
    fn holds(&self) -> Vec<ObjRef> {
        self.rqs
            .iter()
            .map(|n| ObjRef::new(ObjKind::Rq, *n))
            .collect()
    }
}

pub(crate) fn create_tis(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let c = cmd.view::<CreateTisIn>()?.ctx();
    st.td.usable(c.transport_domain(), cmd.uid)?;
    let mut holds = vec![ObjRef::new(ObjKind::TransportDomain, c.transport_domain())];
    if c.pd() != 0 {
        st.pd.usable(c.pd(), cmd.uid)?;
        holds.push(ObjRef::new(ObjKind::Pd, c.pd()));
    }
    let n = st.tis.insert(
        cmd.uid,
        TisObj {
            ctx: *c,
            holds: holds.clone(),
        },
    )?;
    st.hold_all(&holds);
    out_view::<CreateTisOut>(out)?.set_tisn(n);
    Ok(())
}

pub(crate) fn modify_tis(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<ModifyTisIn>()?;
    let (m, c) = (inp.bitmask(), inp.ctx());
    let t = &mut st.tis.owned_mut(inp.tisn(), cmd.uid)?.obj.ctx;
    if m.prio() == 1 {
        t.set_prio(c.prio());
    }
    if m.lag_tx_port_affinity() == 1 {
        t.set_lag_tx_port_affinity(c.lag_tx_port_affinity());
    }
    if m.strict_lag_tx_port_affinity() == 1 {
        t.set_strict_lag_tx_port_affinity(c.strict_lag_tx_port_affinity());
    }
    Ok(())
}

pub(crate) fn query_tis(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let n = cmd.view::<QueryTisIn>()?.tisn();
    let ctx = st.tis.owned(n, cmd.uid)?.obj.ctx;
    *out_view::<QueryTisOut>(out)?.tis_context_mut() = ctx;
    Ok(())
}

pub(crate) fn destroy_tis(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DestroyTisIn>()?.tisn();
    let o = st.tis.remove(n, cmd.uid)?;
    st.release_all(&o.holds);
    Ok(())
}

/// What a TIR context dispatches to: an RQ (direct) or an RQT (indirect).
fn tir_target(st: &State, uid: u16, c: &Tirc) -> FwResult<ObjRef> {
    match c.disp_type() {
        0 => {
            st.rq.usable(c.inline_rqn(), uid)?;
            Ok(ObjRef::new(ObjKind::Rq, c.inline_rqn()))
        }
        1 => {
            st.rqt.usable(c.indirect_table(), uid)?;
            Ok(ObjRef::new(ObjKind::Rqt, c.indirect_table()))
        }
        _ => fail(syndrome::TIR_TYPE),
    }
}

pub(crate) fn create_tir(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let c = cmd.view::<CreateTirIn>()?.ctx();
    st.td.usable(c.transport_domain(), cmd.uid)?;
    let holds = vec![
        ObjRef::new(ObjKind::TransportDomain, c.transport_domain()),
        tir_target(st, cmd.uid, c)?,
    ];
    let n = st.tir.insert(
        cmd.uid,
        TirObj {
            ctx: *c,
            holds: holds.clone(),
        },
    )?;
    st.hold_all(&holds);
    out_view::<CreateTirOut>(out)?.set_tirn(n);
    Ok(())
}

pub(crate) fn modify_tir(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<ModifyTirIn>()?;
    let (m, c) = (inp.bitmask(), inp.ctx());
    let t = &mut st.tir.owned_mut(inp.tirn(), cmd.uid)?.obj.ctx;
    if m.self_lb_en() == 1 {
        t.set_self_lb_block(c.self_lb_block());
    }
    if m.hash() == 1 {
        t.set_rx_hash_fn(c.rx_hash_fn());
        t.set_rx_hash_symmetric(c.rx_hash_symmetric());
        for i in 0..Tirc::RX_HASH_TOEPLITZ_KEY_LEN {
            t.set_rx_hash_toeplitz_key(i, c.rx_hash_toeplitz_key(i));
        }
        *t.rx_hash_field_selector_outer_mut() = *c.rx_hash_field_selector_outer();
        *t.rx_hash_field_selector_inner_mut() = *c.rx_hash_field_selector_inner();
    }
    if m.packet_merge() == 1 {
        t.set_packet_merge_mask(c.packet_merge_mask());
        t.set_lro_timeout_period_usecs(c.lro_timeout_period_usecs());
        t.set_lro_max_ip_payload_size(c.lro_max_ip_payload_size());
    }
    Ok(())
}

pub(crate) fn query_tir(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let n = cmd.view::<QueryTirIn>()?.tirn();
    let ctx = st.tir.owned(n, cmd.uid)?.obj.ctx;
    *out_view::<QueryTirOut>(out)?.tir_context_mut() = ctx;
    Ok(())
}

pub(crate) fn destroy_tir(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DestroyTirIn>()?.tirn();
    let o = st.tir.remove(n, cmd.uid)?;
    st.release_all(&o.holds);
    Ok(())
}

/// Reads and checks an RQT's RQ list (`rqt_actual_size` entries).
fn rq_list(st: &State, cmd: &Cmd, c: &Rqtc) -> FwResult<Vec<u32>> {
    let max = 1u32 << st.profile.log_max_rqt_size.min(31);
    ensure(u32::from(c.rqt_max_size()) <= max, syndrome::RQT_TOO_LARGE)?;
    let n = usize::from(c.rqt_actual_size());
    ensure(n > 0, syndrome::RQT_EMPTY)?;
    ensure(n <= usize::from(c.rqt_max_size()), syndrome::RQT_TOO_LARGE)?;
    ensure(c.list_q_type() == 0, syndrome::TIR_TYPE)?;
    let bytes = cmd
        .inbox
        .get(RQ_LIST_AT..RQ_LIST_AT + RqNum::SIZE_BYTES * n)
        .ok_or(syndrome::INBOX_SHORT)?;
    let mut v = Vec::with_capacity(n);
    for e in bytes.chunks_exact(RqNum::SIZE_BYTES) {
        let rqn = RqNum::from_slice(e).map_or(0, |r| r.rq_num());
        st.rq.usable(rqn, cmd.uid)?;
        v.push(rqn);
    }
    Ok(v)
}

pub(crate) fn create_rqt(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let c = cmd.view::<CreateRqtIn>()?.rqt_context();
    let rqs = rq_list(st, cmd, c)?;
    let obj = RqtObj { ctx: *c, rqs };
    let holds = obj.holds();
    let n = st.rqt.insert(cmd.uid, obj)?;
    st.hold_all(&holds);
    out_view::<CreateRqtOut>(out)?.set_rqtn(n);
    Ok(())
}

pub(crate) fn modify_rqt(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<ModifyRqtIn>()?;
    let old = st.rqt.owned(inp.rqtn(), cmd.uid)?.obj.clone();
    if inp.bitmask().rqn_list() == 0 {
        return Ok(());
    }
    let c = inp.ctx();
    let mut ctx = old.ctx;
    ctx.set_rqt_actual_size(c.rqt_actual_size());
    let rqs = rq_list(st, cmd, &ctx)?;
    let new = RqtObj { ctx, rqs };
    st.hold_all(&new.holds());
    st.release_all(&old.holds());
    st.rqt.owned_mut(inp.rqtn(), cmd.uid)?.obj = new;
    Ok(())
}

pub(crate) fn query_rqt(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let n = cmd.view::<QueryRqtIn>()?.rqtn();
    let o = st.rqt.owned(n, cmd.uid)?.obj.clone();
    *out_view::<QueryRqtOut>(out)?.rqt_context_mut() = o.ctx;
    let list: Vec<u8> = o
        .rqs
        .iter()
        .flat_map(|&r| {
            let mut e = RqNum::new();
            e.set_rq_num(r);
            e.0
        })
        .collect();
    put(out, RQ_LIST_AT, &list)
}

pub(crate) fn destroy_rqt(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DestroyRqtIn>()?.rqtn();
    let o = st.rqt.remove(n, cmd.uid)?;
    st.release_all(&o.holds());
    Ok(())
}
