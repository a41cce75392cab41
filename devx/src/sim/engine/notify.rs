//! CQ arming and completion events (prm-guide §6.3): the arm doorbell at
//! UAR + 0x20 records a notification request; the next CQE written (or the
//! next solicited / error CQE for a solicited-only request) disarms the CQ
//! and raises a completion EQE to the channels subscribed for it.

use crate::sim::fw::cq::{arm_state, Arm};
use crate::sim::fw::events::{self, cq_key};
use crate::sim::fw::state::State;

/// Offset of the CQ arm doorbell in a UAR page.
pub(crate) const CQ_ARM_DOORBELL: usize = 0x20;

const MASK24: u32 = 0x00ff_ffff;

/// Arm command (word[27:24]): next completion, or solicited ones only.
const CMD_NEXT: u32 = 0;
const CMD_SOLICITED: u32 = 1;

/// The arm doorbell: `value` holds `(word << 32 | cqn)` big-endian as it sits
/// in memory. Dropped unless it came through the CQ's own UAR page.
pub(crate) fn arm_doorbell(st: &mut State, page_id: u32, value: u64) {
    let b = value.to_ne_bytes();
    let word = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let cqn = u32::from_be_bytes([b[4], b[5], b[6], b[7]]) & MASK24;
    arm(st, page_id, cqn, word);
}

/// Records a notification request `word` (`sn << 28 | cmd << 24 | ci`) on CQ
/// `cqn`. A CQE that would fire it is already waiting when `ci` is behind
/// the producer: then the event is raised at once, as the hardware does.
pub(crate) fn arm(st: &mut State, page_id: u32, cqn: u32, word: u32) {
    let sn = ((word >> 28) & 3) as u8;
    let solicited = match (word >> 24) & 0xf {
        CMD_NEXT => false,
        CMD_SOLICITED => true,
        _ => return,
    };
    let ci = word & MASK24;
    let Some(e) = st.cq.peek_mut(cqn) else {
        return;
    };
    let cq = &mut e.obj;
    if cq.uar != page_id || cq.cqc.status() != 0 {
        return;
    }
    // A pending "next" request is not narrowed by a later solicited one.
    let solicited = solicited && cq.arm.is_none_or(|a| a.solicited);
    let pi = cq.cqc.producer_counter();
    let waiting = pi.wrapping_sub(ci) & MASK24;
    let fire = if solicited {
        cq.last_solicited
            .is_some_and(|ls| ls.wrapping_sub(ci) & MASK24 < waiting)
    } else {
        waiting != 0
    };
    cq.arm = Some(Arm { sn, solicited });
    cq.cqc.set_st(if solicited {
        arm_state::SOLICITED_ARMED
    } else {
        arm_state::ARMED
    });
    if fire {
        fire_comp(st, cqn);
    }
}

/// After a CQE was written at producer index `pi`: fires a pending request
/// it satisfies. Error CQEs count as solicited (IB spec: an unsuccessful
/// completion always notifies).
pub(crate) fn completed(st: &mut State, cqn: u32, pi: u32, solicited: bool) {
    let Some(e) = st.cq.peek_mut(cqn) else {
        return;
    };
    let cq = &mut e.obj;
    if solicited {
        cq.last_solicited = Some(pi);
        cq.cqc.set_last_solicit_index(pi);
    }
    let fire = cq.arm.is_some_and(|a| !a.solicited || solicited);
    if fire {
        fire_comp(st, cqn);
    }
}

/// Disarms CQ `cqn` and raises its completion event.
fn fire_comp(st: &mut State, cqn: u32) {
    if let Some(e) = st.cq.peek_mut(cqn) {
        let cq = &mut e.obj;
        cq.arm = None;
        cq.cqc.set_st(arm_state::FIRED);
        let pi = cq.cqc.producer_counter();
        cq.cqc.set_last_notified_index(pi);
    }
    st.events.raise(Some(cq_key(cqn)), &events::comp_eqe(cqn));
}

/// CQ `cqn` overran: raises the affiliated CQ_ERROR event.
pub(crate) fn overrun(st: &mut State, cqn: u32) {
    st.events.raise(
        Some(cq_key(cqn)),
        &events::cq_error_eqe(cqn, events::CQ_ERR_SYNDROME_OVERRUN),
    );
}

/// QP `qpn` entered ERR for an error its responder detected; `nak` is the
/// syndrome the requester hears. Raises the affiliated event IBA names for
/// the cause: an access violation, an invalid request, or else a
/// catastrophic work queue error.
pub(crate) fn qp_error(st: &mut State, qpn: u32, nak: prm_layouts::CqeSyndrome) {
    use events::ty;
    use prm_layouts::CqeSyndrome;
    let t = match nak {
        CqeSyndrome::RemoteAccessErr => ty::WQ_ACCESS_ERROR,
        CqeSyndrome::RemoteInvalReqErr => ty::WQ_INVAL_REQ_ERROR,
        _ => ty::WQ_CATAS_ERROR,
    };
    st.events
        .raise(Some(events::qp_key(qpn)), &events::qp_event_eqe(t, qpn));
}
