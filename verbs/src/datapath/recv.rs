//! Receive queues: a QP's own RQ and SRQs. No MMIO: the WQEs, then the RCV
//! counter in the doorbell record (prm-guide §5.5).

use std::sync::Arc;

use super::ready::{recv_refused, recvs_allowed, PostState};
use super::ring::{DbRec, Ring};
use super::track::QpTrack;
use super::wqe::{data_seg, INVALID_LKEY};
use super::wr::RecvWr;
use crate::error::{Error, Result};
use crate::qp::Qp;
use crate::srq::Srq;

const RCV_DBR: usize = 0;
/// SRQ WQEs start with their 16-byte next segment.
const SRQ_NEXT_SEG: usize = 16;

/// Stores the data segments of one receive WQE at `off`, ending the list
/// with the invalid-key terminator when it does not fill the WQE.
#[inline(always)]
fn write_sgl(ring: &Ring, off: usize, wr: &RecvWr<'_>, max_sge: usize) {
    let mut n = 0;
    for s in wr.sgl.iter().filter(|s| s.length != 0) {
        ring.write_seg(off + 16 * n, data_seg(s.length, s.lkey, s.addr));
        n += 1;
    }
    if n < max_sge {
        ring.write_seg(off + 16 * n, data_seg(0, INVALID_LKEY, 0));
    }
}

fn check_sges(verb: &'static str, wrs: &[RecvWr<'_>], max_sge: usize) -> Result<()> {
    if let Some(wr) = wrs.iter().find(|w| w.sgl.len() > max_sge) {
        return Err(Error::argument(
            verb,
            format!(
                "{} SGEs exceed the queue's max_recv_sge {max_sge}",
                wr.sgl.len()
            ),
        ));
    }
    Ok(())
}

/// A QP's receive queue (absent when the QP uses an SRQ or has no receives).
pub struct RecvQueue {
    pub(crate) ring: Option<Ring>,
    /// Receive WQEs posted (free running).
    pub(crate) head: u32,
    pub(crate) wqes: u32,
    pub(crate) stride_shift: u32,
    pub(crate) max_sge: u32,
    pub(crate) dbrec: DbRec,
    pub(crate) track: Arc<QpTrack>,
    /// The QP's state as of its last transition (see `ready`).
    pub(crate) state: PostState,
}

impl std::fmt::Debug for RecvQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecvQueue({} of {} in use)", self.in_use(), self.wqes)
    }
}

impl RecvQueue {
    /// The QP went back to RST: the RCV counter restarts at 0, in the
    /// queue and in the doorbell record.
    pub(crate) fn reset(&mut self) {
        self.head = 0;
        self.dbrec.store(RCV_DBR, 0);
    }

    /// Receives posted and not yet completed.
    pub fn in_use(&self) -> u32 {
        self.head.wrapping_sub(self.track.rq_tail())
    }

    pub fn head(&self) -> u32 {
        self.head
    }

    /// `ibv_post_recv` of one request.
    #[inline]
    pub fn post(&mut self, wr: &RecvWr<'_>) -> Result<()> {
        self.post_list(std::slice::from_ref(wr))
    }

    /// Posts every request, or none if any is bad, they do not all fit, or
    /// the QP is in RESET; one doorbell record update for all.
    pub fn post_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        const VERB: &str = "post_recv";
        let state = self.state.raw();
        if !recvs_allowed(state) {
            return Err(recv_refused(self.track.qpn, state));
        }
        let Some(ring) = self.ring else {
            return Err(Error::argument(
                VERB,
                "the QP has no receive queue of its own (it uses an SRQ or none)",
            ));
        };
        check_sges(VERB, wrs, self.max_sge as usize)?;
        let used = self.in_use() as usize;
        if used + wrs.len() > self.wqes as usize {
            return Err(Error::QueueFull {
                verb: VERB,
                queue: "receive queue",
            });
        }
        for wr in wrs {
            let off = (self.head as usize) << self.stride_shift;
            write_sgl(&ring, off, wr, self.max_sge as usize);
            self.track.rq_record(self.head, wr.wr_id);
            self.head = self.head.wrapping_add(1);
        }
        self.dbrec.store(RCV_DBR, self.head & 0xffff);
        Ok(())
    }
}

impl Qp {
    /// The receive queue, borrowed exclusively: the single-producer contract.
    pub fn recv_queue(&mut self) -> &mut RecvQueue {
        &mut self.dp.rq
    }

    /// Both queues at once, so sends and receives can be posted from
    /// different places (threads) without sharing the QP.
    pub fn queues(&mut self) -> (&mut super::SendQueue, &mut RecvQueue) {
        (&mut self.dp.sq, &mut self.dp.rq)
    }

    /// `ibv_post_recv` of one request (example at [`Qp::post_send`]). Fails
    /// at once, writing nothing, when the QP is in RESET.
    pub fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<()> {
        self.dp.rq.post(wr)
    }

    /// `ibv_post_recv` of a list: all or nothing, one doorbell record update.
    pub fn post_recv_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.dp.rq.post_list(wrs)
    }
}

impl Srq {
    /// `ibv_post_srq_recv` of one request.
    pub fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<()> {
        self.post_recv_list(std::slice::from_ref(wr))
    }

    /// Posts every request, or none; one doorbell record update. `&mut`: one
    /// producer at a time.
    pub fn post_recv_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        const VERB: &str = "post_srq_recv";
        let mem = self.memory();
        let max_sge = (mem.stride as usize - SRQ_NEXT_SEG) / 16;
        check_sges(VERB, wrs, max_sge)?;
        let track = &self.shared().track;
        let mut head = self.head;
        for _ in wrs {
            if !track.has_room(head) {
                return Err(Error::QueueFull {
                    verb: VERB,
                    queue: "shared receive queue",
                });
            }
            head = head.wrapping_add(1);
        }
        // SAFETY: the SRQ's ring is registered queue memory of `len` bytes (a
        // power of two, page aligned) owned by the SRQ, which outlives this call.
        let ring = unsafe { Ring::new(mem.addr, mem.len) };
        // SAFETY: the SRQ's 64-byte doorbell record, alive as long as the SRQ.
        let dbrec = unsafe { DbRec::new(mem.doorbell_record) };
        let mut head = self.head;
        for wr in wrs {
            let slot = head as usize & (mem.entries as usize - 1);
            let off = slot * mem.stride as usize + SRQ_NEXT_SEG;
            write_sgl(&ring, off, wr, max_sge);
            track.record(head, wr.wr_id);
            head = head.wrapping_add(1);
        }
        self.head = head;
        dbrec.store(RCV_DBR, self.head & 0xffff);
        Ok(())
    }
}
