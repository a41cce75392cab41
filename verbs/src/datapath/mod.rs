//! The direct data path: send and receive WQEs written straight into queue
//! memory, doorbells rung through the UAR, completions read from the CQ ring
//! by their owner bit (prm-guide §5, §6).
//!
//! Posting borrows the queue mutably (`qp.post_send(&mut self, ..)`,
//! `qp.send_queue()`, `qp.queues()`, `srq.post_recv(&mut self, ..)`), and
//! polling borrows the CQ mutably: that is the single-producer /
//! single-consumer contract the rings need, checked by the compiler. Control
//! operations (`modify`, `query`) take `&self` and can be interleaved freely;
//! to post from several threads, put the QP behind a lock of your choice.
//! The hot paths allocate nothing, take no lock and make no system call
//! (a poll that finds nothing lets an emulated device receive on the
//! caller's thread: [`devx::Uar::progress`]).
//!
//! Pointer work is confined to [`ring`] (queue memory and doorbell records)
//! and [`Doorbell`] (the ordering of record store and MMIO).

mod barrier;
mod bind;
mod doorbell;
mod lazy;
mod poll;
mod ready;
mod recv;
mod ring;
mod send;
mod track;
mod wc;
mod wqe;
mod wr;

use std::sync::Arc;

/// A CQE's QPN and SRQN/user index, and the CQ doorbell record's consumer
/// counter, are 24-bit fields: the low bits of their dwords.
pub(crate) const LOW_24: u32 = 0xff_ffff;

use devx::Uar;

pub use bind::{next_rkey, MwBind};
pub use doorbell::{BfHalf, Doorbell, BF_HALF, BF_OFFSET};
pub use lazy::{Completion, Poll};
pub use poll::RawCqe;
pub use recv::RecvQueue;
pub use send::{SendBatch, SendQueue};
pub use wc::{Wc, WcOpcode, WcStatus};
pub use wqe::{CTRL_FENCE, CTRL_SIGNALED, CTRL_SOLICITED, INVALID_LKEY};
pub use wr::{RecvWr, SendOp, SendWr, Sge, UdDest};

pub(crate) use poll::{stale_end, Head, Poller};
pub(crate) use track::{QpTrack, Registry, SrqTrack};

use crate::qp::{QpCap, QpInit, Queue};
use ready::{PostState, SendState};
use ring::{DbRec, Ring, Ring64};
use wqe::SqShape;

/// Where a new QP's queues are.
pub(crate) struct Layout {
    pub buf_addr: usize,
    pub sq: Queue,
    pub rq: Queue,
    pub cap: QpCap,
    pub dbr_addr: usize,
}

/// A QP's data-path state; dropping it tells the CQs the QPN is gone.
pub(crate) struct QpDataPath {
    pub(crate) sq: SendQueue,
    pub(crate) rq: RecvQueue,
}

impl QpDataPath {
    /// Builds the queues of a QP just created and registers it with its CQs.
    /// `dedicated`: the QP has `uar`'s BlueFlame register to itself.
    pub(crate) fn attach(
        init: &QpInit,
        qpn: u32,
        uar: Arc<Uar>,
        dedicated: bool,
        l: Layout,
    ) -> QpDataPath {
        let srq = init.srq.as_ref().map(|s| s.track.clone());
        let track = Arc::new(QpTrack::new(qpn, l.sq.wqe_cnt, l.rq.wqe_cnt, srq));
        init.send_cq.tracks.add(track.clone());
        if !Arc::ptr_eq(&init.send_cq, &init.recv_cq) {
            init.recv_cq.tracks.add(track.clone());
        }
        // SAFETY: the QP buffer and doorbell record are registered, page
        // aligned mappings the QP owns for as long as it owns this value; the
        // SQ is a power of two of 64-byte blocks at a 64-aligned offset.
        let ring = unsafe { Ring64::new(l.buf_addr + l.sq.offset, l.sq.bytes()) };
        // SAFETY: as above, the QP's 64-byte doorbell record.
        let dbrec = unsafe { DbRec::new(l.dbr_addr) };
        let rq_ring = (l.rq.wqe_cnt > 0).then(|| {
            // SAFETY: the RQ sits at the buffer start, a power of two ≥ 64 bytes.
            unsafe { Ring::new(l.buf_addr + l.rq.offset, l.rq.bytes()) }
        });
        let sq = SendQueue {
            ring,
            cur_post: 0,
            shape: SqShape::new(
                qpn,
                init.qp_type,
                l.cap.max_send_sge,
                l.cap.max_inline_data,
                if init.sq_sig_all { CTRL_SIGNALED } else { 0 },
            ),
            db: Doorbell::new(dbrec, uar, dedicated, qpn),
            track: track.clone(),
            state: SendState::new(l.sq.wqe_cnt),
        };
        let rq = RecvQueue {
            ring: rq_ring,
            head: 0,
            wqes: l.rq.wqe_cnt,
            stride_shift: l.rq.wqe_shift,
            max_sge: l.rq.max_gs,
            dbrec,
            track,
            state: PostState::new(),
        };
        QpDataPath { sq, rq }
    }

    /// The QP reached state `s`: the posting calls check it from now on.
    pub(crate) fn set_state(&self, s: prm_layouts::enums::QpState) {
        self.sq.state.set(s);
        self.rq.state.set(s);
    }

    /// The QP's track, which its CQs' pollers share.
    pub(crate) fn track(&self) -> &Arc<QpTrack> {
        &self.sq.track
    }

    /// The QP went back to RST: counters restart at 0.
    pub(crate) fn reset(&mut self) {
        self.sq.cur_post = 0;
        self.sq.state.set_end(self.sq.state.end_at(0));
        self.sq.db.reset();
        self.rq.reset();
        self.sq.track.reset();
    }
}

impl Drop for QpDataPath {
    fn drop(&mut self) {
        self.sq.track.kill();
    }
}
