//! Queue pairs: CREATE / QUERY / DESTROY. The state machine is in `qp_state`.

use prm_layouts::{CreateQpIn, CreateQpOut, DestroyQpIn, Qpc, QueryQpIn, QueryQpOut};

use super::cmd::{ensure, out_view, Cmd, FwResult};
use super::ext::srq;
use super::kind::ObjKind;
use super::state::{Holder, State};
use super::table::ObjRef;
use super::umem;
use crate::sim::syndrome;

/// `qpc.st` service types (`MLX5_QPC_ST_*`).
pub(crate) mod st {
    pub(crate) const RC: u8 = 0x0;
    pub(crate) const UC: u8 = 0x1;
    pub(crate) const UD: u8 = 0x2;
    pub(crate) const XRC: u8 = 0x3;
    pub(crate) const RAW: u8 = 0x9;
}

/// `qpc.state` values (`MLX5_QPC_STATE_*`).
pub(crate) mod state {
    pub(crate) const RST: u8 = 0x0;
    pub(crate) const INIT: u8 = 0x1;
    pub(crate) const RTR: u8 = 0x2;
    pub(crate) const RTS: u8 = 0x3;
    pub(crate) const SQER: u8 = 0x4;
    pub(crate) const ERR: u8 = 0x6;
    pub(crate) const SQD: u8 = 0x7;
}

/// `qpc.rq_type` values (`MLX5_*_RQ`).
pub(crate) mod rq_type {
    pub(crate) const REGULAR: u8 = 0x0;
    pub(crate) const SRQ: u8 = 0x1;
    pub(crate) const ZERO_LEN: u8 = 0x3;
}

#[derive(Debug, Clone)]
pub(crate) struct QpObj {
    /// The context as created and modified, with the current state.
    pub(crate) qpc: Qpc,
    /// The context at create time: 2RST returns the QP to it.
    pub(crate) created: Qpc,
    pub(crate) wq_umem: u32,
    pub(crate) wq_umem_offset: u64,
    /// Receive queue bytes at the start of the buffer; the send queue follows.
    pub(crate) rq_bytes: u64,
    pub(crate) sq_bytes: u64,
    pub(crate) dbr_umem: u32,
    pub(crate) dbr_addr: u64,
    /// References that never change (PD, UAR, UMEMs, XRCD, send CQ).
    pub(crate) fixed: Vec<ObjRef>,
    /// References a modify may move (receive CQ, SRQ, counter set).
    pub(crate) cqn_rcv: Option<u32>,
    pub(crate) srqn: Option<u32>,
    pub(crate) counter: Option<u32>,
}

impl Holder for QpObj {
    fn holds(&self) -> Vec<ObjRef> {
        let mut v = self.fixed.clone();
        v.extend(self.cqn_rcv.map(|n| ObjRef::new(ObjKind::Cq, n)));
        v.extend(self.srqn.map(|n| ObjRef::new(ObjKind::Srq, n)));
        v.extend(self.counter.map(|n| ObjRef::new(ObjKind::QCounter, n)));
        v
    }
}

impl QpObj {
    pub(crate) fn state(&self) -> u8 {
        self.qpc.state()
    }

    pub(crate) fn service_type(&self) -> u8 {
        self.qpc.st()
    }
}

/// Receive and send queue bytes a QP context asks for.
pub(crate) fn queue_bytes(q: &Qpc) -> (u64, u64) {
    let rq = if q.rq_type() == rq_type::REGULAR {
        (1u64 << q.log_rq_size()) * (16u64 << q.log_rq_stride())
    } else {
        0
    };
    let sq = if q.no_sq() == 0 {
        (1u64 << q.log_sq_size()) * 64
    } else {
        0
    };
    (rq, sq)
}

/// A Q counter set `uid` may count into; 0 is the device's default set.
pub(crate) fn counter_ref(st: &State, uid: u16, id: u8) -> FwResult<Option<u32>> {
    if id == 0 {
        return Ok(None);
    }
    st.q_counter.usable(u32::from(id), uid)?;
    Ok(Some(u32::from(id)))
}

pub(crate) fn create(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<CreateQpIn>()?;
    let q = inp.qpc();
    let p = &st.profile;
    let service = q.st();
    ensure(
        matches!(service, st::RC | st::UC | st::UD | st::XRC | st::RAW),
        syndrome::QP_BAD_TYPE,
    )?;
    ensure(inp.input_qpn() == 0, syndrome::QP_INPUT_QPN)?;
    ensure(q.pm_state() != 2, syndrome::QP_BAD_PM_STATE)?;
    ensure(q.log_sq_size() <= p.log_max_qp_sz, syndrome::SQ_TOO_LARGE)?;
    ensure(q.log_rq_size() <= p.log_max_qp_sz, syndrome::RQ_TOO_LARGE)?;
    ensure(
        16u32 << q.log_rq_stride() <= u32::from(p.max_wqe_sz_rq),
        syndrome::RQ_STRIDE_TOO_LARGE,
    )?;
    ensure(q.log_msg_max() <= p.log_max_msg, syndrome::MSG_TOO_LARGE)?;
    let rqt = q.rq_type();
    ensure(
        matches!(rqt, rq_type::REGULAR | rq_type::SRQ | rq_type::ZERO_LEN),
        syndrome::QP_BAD_RQ_TYPE,
    )?;
    let has_sq = q.no_sq() == 0;
    let has_rq = rqt != rq_type::ZERO_LEN;
    // Only an XRC target QP lives without either queue.
    ensure(
        has_sq || has_rq || service == st::XRC,
        syndrome::QP_NO_QUEUES,
    )?;

    let mut fixed = Vec::new();
    st.pd.usable(q.pd(), cmd.uid)?;
    fixed.push(ObjRef::new(ObjKind::Pd, q.pd()));
    if service == st::XRC {
        st.xrcd
            .usable(q.xrcd(), cmd.uid)
            .map_err(|_| syndrome::XRCD_REQUIRED)?;
        fixed.push(ObjRef::new(ObjKind::Xrcd, q.xrcd()));
    }
    if has_sq {
        st.cq.usable(q.cqn_snd(), cmd.uid)?;
        fixed.push(ObjRef::new(ObjKind::Cq, q.cqn_snd()));
    }
    if has_sq || q.uar_page() != 0 {
        st.uar.usable(q.uar_page(), cmd.uid)?;
        fixed.push(ObjRef::new(ObjKind::Uar, q.uar_page()));
    }
    let cqn_rcv = if has_rq {
        st.cq.usable(q.cqn_rcv(), cmd.uid)?;
        Some(q.cqn_rcv())
    } else {
        None
    };
    let srqn = if rqt == rq_type::SRQ {
        srq::usable_srq(st, cmd.uid, q.srqn_rmpn_xrqn())?;
        Some(q.srqn_rmpn_xrqn())
    } else {
        None
    };
    let counter = counter_ref(st, cmd.uid, q.counter_set_id())?;

    let (rq_bytes, sq_bytes) = queue_bytes(q);
    let total = rq_bytes + sq_bytes;
    if total > 0 {
        ensure(inp.wq_umem_valid() == 1, syndrome::NO_UMEM)?;
        umem::resolve(st, cmd.uid, inp.wq_umem_id(), inp.wq_umem_offset(), total)?;
        fixed.push(ObjRef::new(ObjKind::Umem, inp.wq_umem_id()));
        ensure(q.dbr_umem_valid() == 1, syndrome::NO_UMEM)?;
        umem::resolve_dbr(st, cmd.uid, q.dbr_umem_id(), q.dbr_addr())?;
        fixed.push(ObjRef::new(ObjKind::Umem, q.dbr_umem_id()));
    }

    let mut qpc = *q;
    qpc.set_state(state::RST);
    qpc.set_hw_sq_wqebb_counter(0);
    qpc.set_sw_sq_wqebb_counter(0);
    qpc.set_hw_rq_counter(0);
    qpc.set_sw_rq_counter(0);
    let obj = QpObj {
        qpc,
        created: qpc,
        wq_umem: inp.wq_umem_id(),
        wq_umem_offset: inp.wq_umem_offset(),
        rq_bytes,
        sq_bytes,
        dbr_umem: q.dbr_umem_id(),
        dbr_addr: q.dbr_addr(),
        fixed,
        cqn_rcv,
        srqn,
        counter,
    };
    let holds = obj.holds();
    let qpn = st.qp.insert(cmd.uid, obj)?;
    st.hold_all(&holds);
    out_view::<CreateQpOut>(out)?.set_qpn(qpn);
    Ok(())
}

pub(crate) fn query(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let qpn = cmd.view::<QueryQpIn>()?.qpn();
    let qpc = st.qp.owned(qpn, cmd.uid)?.obj.qpc;
    *out_view::<QueryQpOut>(out)?.qpc_mut() = qpc;
    Ok(())
}

pub(crate) fn destroy(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let qpn = cmd.view::<DestroyQpIn>()?.qpn();
    let obj = st.qp.remove(qpn, cmd.uid)?;
    st.release_all(&obj.holds());
    Ok(())
}
