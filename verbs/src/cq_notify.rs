//! CQ arming (`ibv_req_notify_cq`, prm-guide §6.3) and event accounting
//! (`ibv_ack_cq_events`).

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Arc;

use crate::comp_channel::CompChannel;
use crate::cq::Cq;
use crate::error::{Result, VerbResult};

/// Arm command: solicited completions only (`MLX5_CQ_DB_REQ_NOT_SOL`).
const REQ_NOT_SOL: u32 = 1 << 24;

/// Event counters of one CQ, shared with the channel that delivers them.
#[derive(Debug, Default)]
pub(crate) struct CqNotify {
    /// Arm sequence number: bumped on each completion event read.
    arm_sn: AtomicU32,
    /// Events read from the channel, and those acknowledged.
    events: AtomicU32,
    acked: AtomicU32,
}

impl CqNotify {
    pub(crate) fn event(&self) {
        self.arm_sn.fetch_add(1, Ordering::AcqRel);
        self.events.fetch_add(1, Ordering::AcqRel);
    }
}

/// Subscribes CQ `cq` (just created) to completion events on `channel`.
pub(crate) fn subscribe(
    verb: &'static str,
    channel: &CompChannel,
    obj: &devx::Obj,
    notify: &Arc<CqNotify>,
) -> Result<()> {
    obj.subscribe(
        channel.events(),
        &[devx::event_type::COMP],
        u64::from(obj.id()),
    )
    .verb(verb)?;
    channel.register(obj.id(), notify);
    Ok(())
}

/// The arm word: `sn << 28 | cmd | ci` (24-bit consumer counter).
pub(crate) fn arm_word(arm_sn: u32, solicited_only: bool, ci: u32) -> u32 {
    let cmd = if solicited_only { REQ_NOT_SOL } else { 0 };
    ((arm_sn & 3) << 28) | cmd | (ci & 0x00ff_ffff)
}

impl Cq {
    /// `ibv_req_notify_cq`: asks for one completion event, for the next
    /// completion or (`solicited_only`) the next solicited or failed one.
    /// If such a completion is already waiting unpolled the event comes at
    /// once. A CQ without a channel is armed all the same (as with
    /// rdma-core); its event reaches nobody. Writes the arm word to the doorbell record's arm slot, then
    /// rings UAR + 0x20 with `(word << 32 | cqn)` big-endian.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        const VERB: &str = "req_notify_cq";
        let sn = self.notify().arm_sn.load(Ordering::Acquire);
        let word = arm_word(sn, solicited_only, self.head.ci());
        let arm_db = (self.memory().doorbell_record + 4) as *mut u32;
        // SAFETY: the doorbell record is 64 bytes of this CQ's registered
        // memory, kept mapped while the CQ lives; slot [1] (bytes 4..8) is
        // the arm word, which the device only reads.
        unsafe { arm_db.write_volatile(word.to_be()) };
        // The record must be visible before the doorbell reaches the device.
        fence(Ordering::SeqCst);
        let db = (u64::from(word) << 32) | u64::from(self.cqn());
        self.uar()
            .write64(
                devx::uar::CQ_DOORBELL_OFFSET,
                u64::from_ne_bytes(db.to_be_bytes()),
            )
            .verb(VERB)
    }

    /// Completion events read for this CQ so far.
    pub fn events_received(&self) -> u32 {
        self.notify().events.load(Ordering::Acquire)
    }

    /// `ibv_ack_cq_events`: acknowledges `n` events read for this CQ.
    pub fn ack_events(&self, n: u32) {
        self.notify().acked.fetch_add(n, Ordering::AcqRel);
    }

    /// Events read and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        let n = self.notify();
        n.events
            .load(Ordering::Acquire)
            .wrapping_sub(n.acked.load(Ordering::Acquire))
    }

    /// The arm sequence number the next `req_notify` uses (mod 4 on the wire).
    pub fn arm_sn(&self) -> u32 {
        self.notify().arm_sn.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::arm_word;

    #[test]
    fn arm_words() {
        assert_eq!(arm_word(0, false, 5), 5);
        assert_eq!(arm_word(1, true, 0x0100_0007), 0x1100_0007);
        assert_eq!(arm_word(6, false, 0xff_ffff), 0x20ff_ffff);
    }
}
