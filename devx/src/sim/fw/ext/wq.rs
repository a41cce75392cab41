//! Ethernet work queues: SQ and RQ objects, and the `wq` checks they share
//! with RMPs (buffer and doorbell in UMEMs, PD, UAR, sizes).

use prm_layouts::{
    CreateRqIn, CreateRqOut, CreateSqIn, CreateSqOut, DestroyRqIn, DestroySqIn, ModifyRqIn,
    ModifySqIn, QueryRqIn, QueryRqOut, QuerySqIn, QuerySqOut, Rqc, Sqc, Wq,
};

use crate::sim::fw::cmd::{ensure, Cmd, FwResult};
use crate::sim::fw::kind::ObjKind;
use crate::sim::fw::qp::counter_ref;
use crate::sim::fw::state::{Holder, State};
use crate::sim::fw::table::ObjRef;
use crate::sim::fw::{cmd::out_view, umem};
use crate::sim::syndrome::{self, Check};

/// SQ / RQ states (`MLX5_SQC_STATE_*`, `MLX5_RQC_STATE_*`).
pub(crate) mod state {
    pub(crate) const RST: u8 = 0x0;
    pub(crate) const RDY: u8 = 0x1;
    pub(crate) const ERR: u8 = 0x3;
}

/// `wq_type` values (`MLX5_WQ_TYPE_*`).
pub(crate) mod wq_type {
    pub(crate) const LINKED_LIST: u8 = 0x0;
    pub(crate) const CYCLIC: u8 = 0x1;
    pub(crate) const CYCLIC_STRIDING_RQ: u8 = 0x3;
}

/// RQ `modify_bitmask` bit for the counter set (`MLX5_MODIFY_RQ_IN_MODIFY_BITMASK_RQ_COUNTER_SET_ID`).
pub(crate) const RQ_MODIFY_COUNTER_SET_ID: u64 = 1 << 3;

/// Checks a work queue's buffer, doorbell, PD (and UAR when it rings
/// doorbells); returns the references it will hold.
pub(crate) fn check_wq(
    st: &State,
    uid: u16,
    wq: &Wq,
    types: &[u8],
    max_log: u8,
    too_large: Check,
    needs_uar: bool,
) -> FwResult<Vec<ObjRef>> {
    ensure(types.contains(&wq.wq_type()), syndrome::WQ_TYPE)?;
    ensure(wq.log_wq_sz() <= max_log, too_large)?;
    st.pd.usable(wq.pd(), uid)?;
    let mut holds = vec![ObjRef::new(ObjKind::Pd, wq.pd())];
    if needs_uar {
        st.uar.usable(wq.uar_page(), uid)?;
        holds.push(ObjRef::new(ObjKind::Uar, wq.uar_page()));
    }
    let bytes = (1u64 << wq.log_wq_sz()) << wq.log_wq_stride();
    ensure(wq.wq_umem_valid() == 1, syndrome::NO_UMEM)?;
    umem::resolve(st, uid, wq.wq_umem_id(), wq.wq_umem_offset(), bytes)?;
    holds.push(ObjRef::new(ObjKind::Umem, wq.wq_umem_id()));
    ensure(wq.dbr_umem_valid() == 1, syndrome::NO_UMEM)?;
    umem::resolve_dbr(st, uid, wq.dbr_umem_id(), wq.dbr_addr())?;
    holds.push(ObjRef::new(ObjKind::Umem, wq.dbr_umem_id()));
    Ok(holds)
}

/// SQ/RQ state changes the device accepts.
fn legal(from: u8, to: u8) -> bool {
    matches!(
        (from, to),
        (state::RST, state::RDY)
            | (state::RDY, state::RDY)
            | (state::RDY, state::ERR)
            | (state::RDY, state::RST)
            | (state::ERR, state::RST)
    )
}

fn transition(cur: u8, claimed: u8, to: u8) -> FwResult {
    ensure(
        matches!(to, state::RST | state::RDY | state::ERR),
        syndrome::WQ_BAD_STATE_VALUE,
    )?;
    ensure(cur == claimed && legal(cur, to), syndrome::WQ_STATE)
}

#[derive(Debug, Clone)]
pub(crate) struct SqObj {
    pub(crate) ctx: Sqc,
    holds: Vec<ObjRef>,
}

#[derive(Debug, Clone)]
pub(crate) struct RqObj {
    pub(crate) ctx: Rqc,
    holds: Vec<ObjRef>,
    counter: Option<u32>,
}

impl Holder for SqObj {
    fn holds(&self) -> Vec<ObjRef> {
        self.holds.clone()
    }
}
impl Holder for RqObj {
    fn holds(&self) -> Vec<ObjRef> {
        let mut v = self.holds.clone();
        v.extend(self.counter.map(|n| ObjRef::new(ObjKind::QCounter, n)));
        v
    }
}

pub(crate) fn create_sq(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let c = cmd.view::<CreateSqIn>()?.ctx();
    ensure(c.state() == state::RST, syndrome::WQ_BAD_STATE_VALUE)?;
    ensure(c.hairpin() == 0, syndrome::WQ_TYPE)?;
    let max = st.profile.log_max_wq_sz;
    let mut holds = check_wq(
        st,
        cmd.uid,
        c.wq(),
        &[wq_type::CYCLIC],
        max,
        syndrome::WQ_TOO_LARGE,
        true,
    )?;
    st.cq.usable(c.cqn(), cmd.uid)?;
    holds.push(ObjRef::new(ObjKind::Cq, c.cqn()));
    if c.tis_lst_sz() > 0 {
        st.tis.usable(c.tis_num_0(), cmd.uid)?;
        holds.push(ObjRef::new(ObjKind::Tis, c.tis_num_0()));
    }
    let n = st.sq.insert(
        cmd.uid,
        SqObj {
            ctx: *c,
            holds: holds.clone(),
        },
    )?;
    st.hold_all(&holds);
    out_view::<CreateSqOut>(out)?.set_sqn(n);
    Ok(())
}

pub(crate) fn modify_sq(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<ModifySqIn>()?;
    let sq = &mut st.sq.owned_mut(inp.sqn(), cmd.uid)?.obj;
    transition(sq.ctx.state(), inp.sq_state(), inp.ctx().state())?;
    sq.ctx.set_state(inp.ctx().state());
    Ok(())
}

pub(crate) fn query_sq(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let n = cmd.view::<QuerySqIn>()?.sqn();
    let ctx = st.sq.owned(n, cmd.uid)?.obj.ctx;
    *out_view::<QuerySqOut>(out)?.sq_context_mut() = ctx;
    Ok(())
}

pub(crate) fn destroy_sq(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DestroySqIn>()?.sqn();
    let o = st.sq.remove(n, cmd.uid)?;
    st.release_all(&o.holds());
    Ok(())
}

pub(crate) fn create_rq(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let c = cmd.view::<CreateRqIn>()?.ctx();
    ensure(c.state() == state::RST, syndrome::WQ_BAD_STATE_VALUE)?;
    ensure(c.hairpin() == 0, syndrome::WQ_TYPE)?;
    let mut holds = match c.mem_rq_type() {
        // Receive buffers of its own.
        0 => {
            let max = st.profile.log_max_wq_sz;
            let types = [wq_type::CYCLIC, wq_type::CYCLIC_STRIDING_RQ];
            check_wq(
                st,
                cmd.uid,
                c.wq(),
                &types,
                max,
                syndrome::WQ_TOO_LARGE,
                false,
            )?
        }
        // Buffers from a shared RMP.
        1 => {
            super::srq::usable_kind(st, cmd.uid, c.rmpn(), ObjKind::Rmp)?;
            vec![ObjRef::new(ObjKind::Rmp, c.rmpn())]
        }
        _ => return Err(syndrome::WQ_TYPE.into()),
    };
    st.cq.usable(c.cqn(), cmd.uid)?;
    holds.push(ObjRef::new(ObjKind::Cq, c.cqn()));
    let counter = counter_ref(st, cmd.uid, c.counter_set_id())?;
    let obj = RqObj {
        ctx: *c,
        holds,
        counter,
    };
    let all = obj.holds();
    let n = st.rq.insert(cmd.uid, obj)?;
    st.hold_all(&all);
    out_view::<CreateRqOut>(out)?.set_rqn(n);
    Ok(())
}

pub(crate) fn modify_rq(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<ModifyRqIn>()?;
    let cur = st.rq.owned(inp.rqn(), cmd.uid)?.obj.clone();
    transition(cur.ctx.state(), inp.rq_state(), inp.ctx().state())?;
    let mut new = cur.clone();
    new.ctx.set_state(inp.ctx().state());
    if inp.modify_bitmask() & RQ_MODIFY_COUNTER_SET_ID != 0 {
        new.counter = counter_ref(st, cmd.uid, inp.ctx().counter_set_id())?;
        new.ctx.set_counter_set_id(inp.ctx().counter_set_id());
    }
    st.hold_all(&new.holds());
    st.release_all(&cur.holds());
    st.rq.owned_mut(inp.rqn(), cmd.uid)?.obj = new;
    Ok(())
}

pub(crate) fn query_rq(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let n = cmd.view::<QueryRqIn>()?.rqn();
    let ctx = st.rq.owned(n, cmd.uid)?.obj.ctx;
    *out_view::<QueryRqOut>(out)?.rq_context_mut() = ctx;
    Ok(())
}

pub(crate) fn destroy_rq(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DestroyRqIn>()?.rqn();
    let o = st.rq.remove(n, cmd.uid)?;
    st.release_all(&o.holds());
    Ok(())
}
