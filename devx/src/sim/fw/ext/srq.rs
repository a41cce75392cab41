//! Shared receive queues: legacy SRQ, XRC_SRQ and RMP share one number
//! space, as on the device, so a QP's `srqn_rmpn_xrqn` names any of them.
//!
//! Legacy CREATE_SRQ has no UMEM fields: it needs physical pages, which a
//! DEVX user cannot give, so it is refused (use RMP or XRC_SRQ). XRC_SRQ's
//! buffer fields have no names in the layouts; its buffer is not checked.

use prm_layouts::{
    ArmRqIn, ArmXrcSrqIn, CreateRmpIn, CreateRmpOut, CreateXrcSrqIn, CreateXrcSrqOut, DestroyRmpIn,
    DestroySrqIn, DestroyXrcSrqIn, ModifyRmpIn, QueryRmpIn, QueryRmpOut, QuerySrqIn, QueryXrcSrqIn,
    QueryXrcSrqOut, Rmpc, XrcSrqc,
};

use super::wq::{check_wq, wq_type};
use crate::sim::fw::cmd::{ensure, fail, out_view, Cmd, FwResult};
use crate::sim::fw::kind::ObjKind;
use crate::sim::fw::state::{Holder, State};
use crate::sim::fw::table::ObjRef;
use crate::sim::syndrome;

/// RMP states (`MLX5_RMPC_STATE_*`).
pub(crate) mod state {
    pub(crate) const RDY: u8 = 0x1;
    pub(crate) const ERR: u8 = 0x3;
}

#[derive(Debug, Clone)]
pub(crate) enum SrqCtx {
    Rmp(Rmpc),
    Xrc(XrcSrqc),
}

#[derive(Debug, Clone)]
pub(crate) struct SrqObj {
    pub(crate) kind: ObjKind,
    pub(crate) ctx: SrqCtx,
    /// Limit event watermark set by ARM_RQ / ARM_XRC_SRQ / MODIFY_RMP.
    pub(crate) lwm: u16,
    holds: Vec<ObjRef>,
}

impl Holder for SrqObj {
    fn holds(&self) -> Vec<ObjRef> {
        self.holds.clone()
    }
}

/// An SRQ-like object a QP may receive through; returns its kind.
pub(crate) fn usable_srq(st: &State, uid: u16, n: u32) -> FwResult<ObjKind> {
    Ok(st.srq.usable(n, uid)?.obj.kind)
}

/// An SRQ-like object of exactly `kind` that `uid` may reference.
pub(crate) fn usable_kind(st: &State, uid: u16, n: u32, kind: ObjKind) -> FwResult {
    match st.srq.usable(n, uid) {
        Ok(e) if e.obj.kind == kind => Ok(()),
        Ok(_) => fail(syndrome::not_found(kind)),
        Err(e) => Err(e),
    }
}

/// An SRQ-like object of `kind` that `uid` owns.
fn owned_kind(st: &mut State, uid: u16, n: u32, kind: ObjKind) -> FwResult<&mut SrqObj> {
    let e = st.srq.owned_mut(n, uid)?;
    ensure(e.obj.kind == kind, syndrome::not_found(kind))?;
    Ok(&mut e.obj)
}

/// Live objects of one SRQ-like kind (introspection: scans the table).
pub(crate) fn count_of(st: &State, kind: ObjKind) -> usize {
    st.srq
        .numbers_of_all()
        .into_iter()
        .filter(|n| st.srq.peek(*n).is_some_and(|e| e.obj.kind == kind))
        .count()
}

fn destroy_kind(st: &mut State, uid: u16, n: u32, kind: ObjKind) -> FwResult {
    owned_kind(st, uid, n, kind)?;
    let o = st.srq.remove(n, uid)?;
    st.release_all(&o.holds);
    Ok(())
}

/// Legacy SRQs need physical pages; DEVX users have none to give.
pub(crate) fn create_srq(_st: &mut State, _cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    fail(syndrome::SRQ_NO_UMEM)
}

pub(crate) fn query_srq(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<QuerySrqIn>()?.srqn();
    owned_kind(st, cmd.uid, n, ObjKind::Srq).map(|_| ())
}

pub(crate) fn destroy_srq(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DestroySrqIn>()?.srqn();
    destroy_kind(st, cmd.uid, n, ObjKind::Srq)
}

/// ARM_RQ op_mod 1: arm the limit event of an SRQ or RMP.
pub(crate) fn arm_rq(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<ArmRqIn>()?;
    let e = st.srq.owned_mut(inp.srq_number(), cmd.uid)?;
    ensure(
        matches!(e.obj.kind, ObjKind::Srq | ObjKind::Rmp),
        syndrome::not_found(ObjKind::Srq),
    )?;
    e.obj.lwm = inp.lwm();
    Ok(())
}

pub(crate) fn create_xrc_srq(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<CreateXrcSrqIn>()?;
    let c = inp.xrc_srq_context_entry();
    let p = &st.profile;
    ensure(
        c.log_xrc_srq_size() <= p.log_max_srq_sz,
        syndrome::SRQ_TOO_LARGE,
    )?;
    ensure(
        16u32 << c.log_rq_stride() <= u32::from(p.max_wqe_sz_rq),
        syndrome::RQ_STRIDE_TOO_LARGE,
    )?;
    ensure(inp.xrc_srq_umem_valid() == 1, syndrome::NO_UMEM)?;
    st.xrcd
        .usable(c.xrcd(), cmd.uid)
        .map_err(|_| syndrome::XRCD_REQUIRED)?;
    st.cq.usable(c.cqn(), cmd.uid)?;
    st.pd.usable(c.pd(), cmd.uid)?;
    let holds = vec![
        ObjRef::new(ObjKind::Xrcd, c.xrcd()),
        ObjRef::new(ObjKind::Cq, c.cqn()),
        ObjRef::new(ObjKind::Pd, c.pd()),
    ];
    let mut ctx = *c;
    ctx.set_state(0);
    let obj = SrqObj {
        kind: ObjKind::XrcSrq,
        ctx: SrqCtx::Xrc(ctx),
        lwm: c.lwm(),
        holds: holds.clone(),
    };
    let n = st.srq.insert(cmd.uid, obj)?;
    st.hold_all(&holds);
    out_view::<CreateXrcSrqOut>(out)?.set_xrc_srqn(n);
    Ok(())
}

pub(crate) fn query_xrc_srq(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let n = cmd.view::<QueryXrcSrqIn>()?.xrc_srqn();
    let o = owned_kind(st, cmd.uid, n, ObjKind::XrcSrq)?.clone();
    if let SrqCtx::Xrc(mut c) = o.ctx {
        c.set_lwm(o.lwm);
        *out_view::<QueryXrcSrqOut>(out)?.xrc_srq_context_entry_mut() = c;
    }
    Ok(())
}

pub(crate) fn destroy_xrc_srq(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DestroyXrcSrqIn>()?.xrc_srqn();
    destroy_kind(st, cmd.uid, n, ObjKind::XrcSrq)
}

pub(crate) fn arm_xrc_srq(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<ArmXrcSrqIn>()?;
    owned_kind(st, cmd.uid, inp.xrc_srqn(), ObjKind::XrcSrq)?.lwm = inp.lwm();
    Ok(())
}

pub(crate) fn create_rmp(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let c = cmd.view::<CreateRmpIn>()?.ctx();
    ensure(c.state() == state::RDY, syndrome::WQ_BAD_STATE_VALUE)?;
    let max = st.profile.log_max_srq_sz;
    let types = [wq_type::LINKED_LIST, wq_type::CYCLIC];
    let holds = check_wq(
        st,
        cmd.uid,
        c.wq(),
        &types,
        max,
        syndrome::SRQ_TOO_LARGE,
        false,
    )?;
    let obj = SrqObj {
        kind: ObjKind::Rmp,
        ctx: SrqCtx::Rmp(*c),
        lwm: c.wq().lwm(),
        holds: holds.clone(),
    };
    let n = st.srq.insert(cmd.uid, obj)?;
    st.hold_all(&holds);
    out_view::<CreateRmpOut>(out)?.set_rmpn(n);
    Ok(())
}

pub(crate) fn modify_rmp(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<ModifyRmpIn>()?;
    let o = owned_kind(st, cmd.uid, inp.rmpn(), ObjKind::Rmp)?;
    let SrqCtx::Rmp(cur) = &mut o.ctx else {
        return fail(syndrome::not_found(ObjKind::Rmp));
    };
    let to = inp.ctx().state();
    ensure(
        matches!(to, state::RDY | state::ERR),
        syndrome::WQ_BAD_STATE_VALUE,
    )?;
    ensure(cur.state() == inp.rmp_state(), syndrome::WQ_STATE)?;
    cur.set_state(to);
    if inp.bitmask().lwm() == 1 {
        o.lwm = inp.ctx().wq().lwm();
    }
    Ok(())
}

pub(crate) fn query_rmp(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let n = cmd.view::<QueryRmpIn>()?.rmpn();
    let o = owned_kind(st, cmd.uid, n, ObjKind::Rmp)?.clone();
    if let SrqCtx::Rmp(mut c) = o.ctx {
        c.wq_mut().set_lwm(o.lwm);
        *out_view::<QueryRmpOut>(out)?.rmp_context_mut() = c;
    }
    Ok(())
}

pub(crate) fn destroy_rmp(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DestroyRmpIn>()?.rmpn();
    destroy_kind(st, cmd.uid, n, ObjKind::Rmp)
}
