//! Work queues as the device sees them: a QP's send and receive rings and
//! doorbell record, resolved from its firmware object, and the SRQ (RMP)
//! rings receives may come from. The device's consumer counters live in the
//! contexts' hardware counter fields (`hw_sq_wqebb_counter`, `hw_rq_counter`,
//! the RMP's `wq.hw_counter`), so QUERY_* reports them and 2RST clears them.

use super::dma::Span;
use crate::sim::fw::events;
use crate::sim::fw::ext::srq::SrqCtx;
use crate::sim::fw::ext::wq::wq_type;
use crate::sim::fw::state::State;
use prm_layouts::WqeCtrlSeg;

/// A send queue basic block: WQEs are posted and counted in these.
pub(crate) const SEND_WQE_BB: usize = 64;
/// The largest send WQE (16 WQEBBs).
pub(crate) const MAX_SQ_WQE: usize = 1024;
/// The largest receive WQE this engine reads (the profile allows 512).
pub(crate) const MAX_RQ_WQE: usize = 2048;
/// `MLX5_INVALID_LKEY`: ends a receive scatter list early.
pub(crate) const INVALID_LKEY: u32 = 0x100;

/// The WQEBBs a send WQE of `len` bytes occupies.
pub(crate) fn wqebbs(len: usize) -> u16 {
    len.div_ceil(SEND_WQE_BB) as u16
}

/// True when a WQE of `bbs` WQEBBs at counter `ci` lies wholly below the
/// SND counter `pi`. A WQE whose `ds` reaches past what the doorbell record
/// posted is malformed: the loops that walk the queue stop at it instead
/// of stepping over `pi` and running on round the 16-bit counter.
pub(crate) fn posted_whole(pi: u16, ci: u16, bbs: u16) -> bool {
    bbs <= pi.wrapping_sub(ci)
}

/// What the engine needs of one QP, copied out of its context.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpView {
    pub(crate) qpn: u32,
    pub(crate) service: u8,
    pub(crate) state: u8,
    pub(crate) pd: u32,
    pub(crate) uar_page: u32,
    pub(crate) cqn_snd: u32,
    pub(crate) cqn_rcv: u32,
    pub(crate) user_index: u32,
    pub(crate) log_msg_max: u8,
    pub(crate) mtu: u8,
    pub(crate) q_key: u32,
    pub(crate) rnr_retry: u8,
    pub(crate) min_rnr_nak: u8,
    pub(crate) rre: bool,
    pub(crate) rwe: bool,
    pub(crate) rae: bool,
    pub(crate) remote_qpn: u32,
    pub(crate) rgid: [u8; 16],
    pub(crate) sgid_index: u8,
    pub(crate) rq_type: u8,
    pub(crate) srqn: u32,
    /// Send ring and its size in WQEBBs.
    pub(crate) sq: Option<Span>,
    pub(crate) sq_bbs: u32,
    /// Receive ring, stride and number of WQEs.
    pub(crate) rq: Option<Span>,
    pub(crate) rq_stride: usize,
    pub(crate) rq_wqes: u32,
    pub(crate) dbr: Option<Span>,
    /// Device consumer counters: SQ in WQEBBs, RQ in WQEs.
    pub(crate) sq_ci: u16,
    pub(crate) rq_ci: u32,
}

impl QpView {
    /// Largest message the QP sends or accepts: log_msg_max for connected
    /// transports; a UD message is one packet (no transition sets a UD
    /// QP's log_msg_max).
    pub(crate) fn max_msg(&self) -> u64 {
        if self.service == crate::sim::fw::qp::st::UD {
            return self.mtu_bytes();
        }
        1u64 << self.log_msg_max.min(31)
    }

    /// Path MTU in bytes (UD messages must fit one packet).
    pub(crate) fn mtu_bytes(&self) -> u64 {
        match self.mtu {
            1..=5 => 128u64 << self.mtu,
            _ => 4096,
        }
    }

    /// The SND counter software stored in the doorbell record.
    pub(crate) fn snd_counter(&self) -> Option<u16> {
        self.dbr?.read_be32(4).map(|v| v as u16)
    }

    /// The RCV counter software stored in the doorbell record.
    pub(crate) fn rcv_counter(&self) -> Option<u16> {
        self.dbr?.read_be32(0).map(|v| v as u16)
    }

    /// Reads the send WQE starting at WQEBB counter `ci` into `out`,
    /// following the ring's wrap to BB 0. Returns the bytes read (ds * 16,
    /// at least the control segment).
    #[inline]
    pub(crate) fn read_send_wqe(&self, ci: u16, out: &mut [u8; MAX_SQ_WQE]) -> Option<usize> {
        let sq = self.sq?;
        let mask = self.sq_bbs - 1;
        let bb = |i: u32| ((u32::from(ci) + i) & mask) as usize * 64;
        // Most WQEs fit their first WQEBB: take it whole in one copy (bytes
        // past the WQE are never looked at), else the control segment.
        let mut done = if sq.read(bb(0), &mut out[..64]) {
            64
        } else if sq.read(bb(0), &mut out[..16]) {
            16
        } else {
            return None;
        };
        let ds = usize::from(super::requester::ctrl(&out[..]).ds()).max(1);
        // ds counts 16-byte units.
        let bytes = ds * WqeCtrlSeg::SIZE_BYTES;
        done = done.min(bytes);
        while done < bytes {
            let i = (done / 64) as u32;
            let in_bb = done % 64;
            let take = (64 - in_bb).min(bytes - done);
            if !sq.read(bb(i) + in_bb, &mut out[done..done + take]) {
                return None;
            }
            done += take;
        }
        Some(bytes)
    }

    /// Reads RQ WQE number `counter` (free running) into `out`.
    pub(crate) fn read_recv_wqe(&self, counter: u32, out: &mut [u8]) -> Option<usize> {
        let rq = self.rq?;
        let len = self.rq_stride.min(out.len());
        let at = (counter & (self.rq_wqes - 1)) as usize * self.rq_stride;
        rq.read(at, &mut out[..len]).then_some(len)
    }
}

fn span(st: &State, umem: u32, off: u64, len: u64) -> Option<Span> {
    st.umem
        .peek(umem)
        .and_then(|u| Span::of_umem(&u.obj, off, len))
}

/// Resolves QP `qpn` (any uid: the device serves them all).
pub(crate) fn qp_view(st: &State, qpn: u32) -> Option<QpView> {
    let o = &st.qp.peek(qpn)?.obj;
    let q = &o.qpc;
    let path = q.primary_address_path();
    let rq_stride = 16usize << q.log_rq_stride();
    let rq_wqes = 1u32 << q.log_rq_size();
    let sq_bbs = 1u32 << q.log_sq_size();
    let (rq, sq) = if o.rq_bytes + o.sq_bytes > 0 {
        let rq = (o.rq_bytes > 0)
            .then(|| span(st, o.wq_umem, o.wq_umem_offset, o.rq_bytes))
            .flatten();
        let sq = (o.sq_bytes > 0)
            .then(|| {
                span(
                    st,
                    o.wq_umem,
                    o.wq_umem_offset.checked_add(o.rq_bytes)?,
                    o.sq_bytes,
                )
            })
            .flatten();
        (rq, sq)
    } else {
        (None, None)
    };
    Some(QpView {
        qpn,
        service: q.st(),
        state: q.state(),
        pd: q.pd(),
        uar_page: q.uar_page(),
        cqn_snd: q.cqn_snd(),
        cqn_rcv: q.cqn_rcv(),
        user_index: q.user_index(),
        log_msg_max: q.log_msg_max(),
        mtu: q.mtu(),
        q_key: q.q_key(),
        rnr_retry: q.rnr_retry(),
        min_rnr_nak: q.min_rnr_nak(),
        rre: q.rre() == 1,
        rwe: q.rwe() == 1,
        rae: q.rae() == 1,
        remote_qpn: q.remote_qpn(),
        rgid: *path.rgid_rip(),
        sgid_index: path.src_addr_index(),
        rq_type: q.rq_type(),
        srqn: q.srqn_rmpn_xrqn(),
        sq,
        sq_bbs,
        rq,
        rq_stride,
        rq_wqes,
        dbr: span(st, o.dbr_umem, o.dbr_addr, 8),
        sq_ci: q.hw_sq_wqebb_counter(),
        rq_ci: q.hw_rq_counter(),
    })
}

/// Stores the device's send consumer counter (WQEBBs) in the QP context.
pub(crate) fn save_sq(st: &mut State, qpn: u32, sq_ci: u16) {
    if let Some(e) = st.qp.peek_mut(qpn) {
        e.obj.qpc.set_hw_sq_wqebb_counter(sq_ci);
    }
}

/// Stores the device's receive consumer counter (WQEs) in the QP context.
pub(crate) fn save_rq(st: &mut State, qpn: u32, rq_ci: u32) {
    if let Some(e) = st.qp.peek_mut(qpn) {
        e.obj.qpc.set_hw_rq_counter(rq_ci);
    }
}

/// A shared receive queue (RMP) as the device sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SrqView {
    pub(crate) srqn: u32,
    pub(crate) ready: bool,
    pub(crate) linked_list: bool,
    pub(crate) ring: Span,
    pub(crate) stride: usize,
    pub(crate) wqes: u32,
    pub(crate) dbr: Span,
    /// WQEs consumed so far (free running).
    pub(crate) consumed: u32,
}

impl SrqView {
    /// WQEs software has posted (the doorbell record's counter).
    pub(crate) fn posted(&self) -> Option<u32> {
        self.dbr.read_be32(0)
    }

    /// Reads WQE `index` of the ring into `out`.
    pub(crate) fn read_wqe(&self, index: u32, out: &mut [u8]) -> Option<usize> {
        let len = self.stride.min(out.len());
        let at = (index & (self.wqes - 1)) as usize * self.stride;
        self.ring.read(at, &mut out[..len]).then_some(len)
    }
}

/// Resolves RMP `srqn`; other SRQ kinds have no ring the engine can read.
pub(crate) fn srq_view(st: &State, srqn: u32) -> Option<SrqView> {
    let o = &st.srq.peek(srqn)?.obj;
    let SrqCtx::Rmp(c) = &o.ctx else {
        return None;
    };
    let w = c.wq();
    let stride = 1usize << w.log_wq_stride();
    let wqes = 1u32 << w.log_wq_sz();
    Some(SrqView {
        srqn,
        ready: c.state() == crate::sim::fw::ext::srq::state::RDY,
        linked_list: w.wq_type() == wq_type::LINKED_LIST,
        ring: span(
            st,
            w.wq_umem_id(),
            w.wq_umem_offset(),
            stride as u64 * u64::from(wqes),
        )?,
        stride,
        wqes,
        dbr: span(st, w.dbr_umem_id(), w.dbr_addr(), 8)?,
        consumed: w.hw_counter(),
    })
}

/// The RMP's limit event: armed while its `lwm` is set, it fires once when
/// the receives software posted and the device has not consumed drop below
/// it, and disarms (`lwm` back to 0) until a MODIFY_RMP arms it again.
pub(crate) fn srq_limit(st: &mut State, srqn: u32, outstanding: u16) {
    let Some(e) = st.srq.peek_mut(srqn) else {
        return;
    };
    let lwm = e.obj.lwm;
    if !matches!(e.obj.ctx, SrqCtx::Rmp(_)) || lwm == 0 || outstanding >= lwm {
        return;
    }
    e.obj.lwm = 0;
    st.events.raise(
        Some(events::rmp_key(srqn)),
        &events::srq_event_eqe(events::ty::SRQ_RQ_LIMIT, srqn),
    );
}

/// Stores the RMP's consumed count.
pub(crate) fn save_srq_counter(st: &mut State, srqn: u32, consumed: u32) {
    if let Some(e) = st.srq.peek_mut(srqn) {
        if let SrqCtx::Rmp(c) = &mut e.obj.ctx {
            c.wq_mut().set_hw_counter(consumed);
        }
    }
}
