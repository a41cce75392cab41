//! Error state: the first error CQE moves a QP to ERR, and every WQE still
//! posted then completes with WR_FLUSH_ERR, one CQE per WQE whether it was
//! signaled or not (what rdma-core's poll loop expects to retire them).

use super::cqe::{self, Completion};
use super::queue::{self, QpView, MAX_SQ_WQE};
use crate::sim::fw::qp::{rq_type, state};
use crate::sim::fw::qp_state::force_state;
use crate::sim::fw::state::State;
use prm_layouts::{CqeOpcode, CqeSyndrome};

/// True in the states where posted WQEs are flushed.
pub(crate) fn flushing(s: u8) -> bool {
    matches!(s, state::ERR | state::SQER)
}

/// Moves `qpn` to ERR and flushes its receive queue; the send queue is
/// flushed too unless another thread is executing it (that thread flushes
/// when it sees the state).
pub(crate) fn to_error(st: &mut State, qpn: u32, sq_busy: bool) {
    force_state(st, qpn, state::ERR);
    let Some(v) = queue::qp_view(st, qpn) else {
        return;
    };
    flush_rq(st, &v);
    if !sq_busy {
        let mut ci = v.sq_ci;
        flush_sq(st, &v, &mut ci);
        queue::save_sq(st, qpn, ci);
    }
}

/// Completes every posted send WQE from `ci` with WR_FLUSH_ERR; a WQE
/// reaching past the SND counter is the last one flushed.
pub(crate) fn flush_sq(st: &mut State, v: &QpView, ci: &mut u16) {
    let Some(pi) = v.snd_counter() else {
        return;
    };
    let mut wqe = [0u8; MAX_SQ_WQE];
    while *ci != pi {
        let Some(len) = v.read_send_wqe(*ci, &mut wqe) else {
            return;
        };
        let c = super::requester::error_cqe(v, &wqe[..len], CqeSyndrome::WrFlushErr);
        cqe::push(st, v.cqn_snd, &c);
        let bbs = queue::wqebbs(len);
        *ci = if queue::posted_whole(pi, *ci, bbs) {
            ci.wrapping_add(bbs)
        } else {
            pi
        };
    }
}

/// Completes every posted receive WQE with WR_FLUSH_ERR (a QP on an SRQ
/// leaves the shared queue alone).
pub(crate) fn flush_rq(st: &mut State, v: &QpView) {
    if v.rq_type != rq_type::REGULAR || v.rq.is_none() {
        return;
    }
    let Some(pi) = v.rcv_counter() else {
        return;
    };
    let mut ci = v.rq_ci;
    while ci as u16 != pi {
        let c = Completion {
            opcode: CqeOpcode::RespErr,
            qpn: v.qpn,
            wqe_counter: ci as u16,
            user_index: v.user_index,
            syndrome: Some(CqeSyndrome::WrFlushErr),
            ..Completion::default()
        };
        cqe::push(st, v.cqn_rcv, &c);
        ci = ci.wrapping_add(1);
    }
    queue::save_rq(st, v.qpn, ci);
}
