//! The send queue: post one request, or write a batch and ring once.

use std::sync::Arc;

use super::doorbell::Doorbell;
use super::ring::Ring;
use super::track::QpTrack;
use super::wqe::{self, SqShape};
use super::wr::{SendWr, Sge};
use crate::error::{Error, Result};
use crate::qp::Qp;

/// A QP's send queue. Reached through `&mut Qp`, so one producer at a time
/// writes WQEs; posting allocates nothing, takes no lock and makes no system
/// call.
pub struct SendQueue {
    pub(crate) ring: Ring,
    /// Next free WQEBB (free running).
    pub(crate) cur_post: u32,
    pub(crate) bbs: u32,
    pub(crate) shape: SqShape,
    pub(crate) db: Doorbell,
    pub(crate) track: Arc<QpTrack>,
}

impl std::fmt::Debug for SendQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SendQueue(qpn {:#x}, {} of {} WQEBBs in use)",
            self.shape.qpn,
            self.in_use(),
            self.bbs
        )
    }
}

impl SendQueue {
    /// The SQ counter: WQEBBs posted so far (free running).
    pub fn cur_post(&self) -> u32 {
        self.cur_post
    }

    /// WQEBBs posted and not yet retired by a polled completion.
    pub fn in_use(&self) -> u32 {
        self.cur_post.wrapping_sub(self.track.sq_tail())
    }

    pub fn doorbell(&self) -> &Doorbell {
        &self.db
    }

    /// Writes one WQE without ringing; returns the doorbell value.
    #[inline(always)]
    fn write(&mut self, wr: &SendWr<'_>) -> Result<u64> {
        let p = wqe::plan(&self.shape, wr)?;
        let next = self.cur_post.wrapping_add(p.nbb);
        if next.wrapping_sub(self.track.sq_tail()) > self.bbs {
            return Err(Error::QueueFull {
                verb: "post_send",
                queue: "send queue",
            });
        }
        let ctrl8 = wqe::write(&self.ring, self.cur_post, &self.shape, wr, p);
        self.track.sq_record(self.cur_post, next, wr.wr_id);
        self.cur_post = next;
        Ok(ctrl8)
    }

    /// `ibv_post_send` of one request: WQE, doorbell record, doorbell. A bad
    /// request (too many SGEs, inline too long, queue full) fails before
    /// anything is written.
    #[inline]
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<()> {
        let ctrl8 = self.write(wr)?;
        self.db.ring(self.cur_post, ctrl8);
        Ok(())
    }

    /// Starts a batch: requests are written as they come and one doorbell
    /// rings for all of them at [`SendBatch::ring`] (or when the batch drops).
    #[inline]
    pub fn batch(&mut self) -> SendBatch<'_> {
        SendBatch {
            sq: self,
            last: None,
            count: 0,
        }
    }
}

/// Send requests written but not yet announced to the device.
pub struct SendBatch<'a> {
    sq: &'a mut SendQueue,
    last: Option<u64>,
    count: usize,
}

impl SendBatch<'_> {
    /// Writes one request; on error nothing of it was written and the batch
    /// goes on.
    #[inline]
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<()> {
        self.last = Some(self.sq.write(wr)?);
        self.count += 1;
        Ok(())
    }

    #[inline]
    pub fn send(&mut self, wr_id: u64, sgl: &[Sge]) -> Result<()> {
        self.post(&SendWr::send(wr_id, sgl))
    }

    #[inline]
    pub fn rdma_write(
        &mut self,
        wr_id: u64,
        sgl: &[Sge],
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        self.post(&SendWr::rdma_write(wr_id, sgl, remote_addr, rkey))
    }

    #[inline]
    pub fn rdma_read(
        &mut self,
        wr_id: u64,
        sgl: &[Sge],
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        self.post(&SendWr::rdma_read(wr_id, sgl, remote_addr, rkey))
    }

    /// Requests written so far.
    #[inline]
    pub fn len(&self) -> usize {
        self.count
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Rings the doorbell once for everything written.
    #[inline]
    pub fn ring(mut self) {
        self.flush();
    }

    #[inline]
    fn flush(&mut self) {
        if let Some(ctrl8) = self.last.take() {
            self.sq.db.ring(self.sq.cur_post, ctrl8);
        }
    }
}

impl Drop for SendBatch<'_> {
    #[inline]
    fn drop(&mut self) {
        self.flush();
    }
}

impl Qp {
    /// The send queue, borrowed exclusively: the single-producer contract.
    #[inline]
    pub fn send_queue(&mut self) -> &mut SendQueue {
        &mut self.dp.sq
    }

    /// `ibv_post_send` of one request.
    #[inline]
    pub fn post_send(&mut self, wr: &SendWr<'_>) -> Result<()> {
        self.dp.sq.post(wr)
    }

    /// A batch of send requests with one doorbell.
    #[inline]
    pub fn send_batch(&mut self) -> SendBatch<'_> {
        self.dp.sq.batch()
    }
}
