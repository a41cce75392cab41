//! Work queue sizes the way libmlx5 computes them (prm-guide §5.1): RQ first
//! at offset 0, SQ right after, in one buffer.

use crate::device::Limits;
use crate::qp::{QpCap, QpType};
use crate::util::{log2, pow2_at_least};

/// Send WQE basic block.
pub(crate) const WQEBB: u32 = 64;
/// A send WQE spans at most 16 WQEBBs (`MLX5_SEND_WQE_MAX_WQEBBS`).
const MAX_WQE_BYTES: u32 = 16 * WQEBB;
/// Data segment / DS unit.
const SEG: u32 = 16;
/// `log_sq_size` / `log_rq_size` are 4-bit fields.
const MAX_LOG_QUEUE: u32 = 15;

/// How the receive side is provided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RqKind {
    /// The QP's own ring.
    Own,
    /// A shared receive queue (`rq_type` 1).
    Srq,
    /// No receives at all (`rq_type` 3, zero-length RQ).
    None,
}

impl RqKind {
    pub(crate) fn rq_type(self) -> u8 {
        match self {
            RqKind::Own => 0,
            RqKind::Srq => 1,
            RqKind::None => 3,
        }
    }
}

/// One work queue inside the QP buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Queue {
    /// Byte offset inside the QP buffer.
    pub offset: usize,
    /// Entries (RQ: WQEs; SQ: WQEBBs). A power of two, 0 if absent.
    pub wqe_cnt: u32,
    /// log2 of the entry stride (RQ: WQE size; SQ: 6).
    pub wqe_shift: u32,
    /// Work requests that fit.
    pub max_post: u32,
    /// Scatter/gather entries per request.
    pub max_gs: u32,
}

impl Queue {
    pub(crate) fn bytes(&self) -> usize {
        (self.wqe_cnt as usize) << self.wqe_shift
    }

    pub(crate) fn log_cnt(&self) -> u32 {
        log2(self.wqe_cnt)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub rq_kind: RqKind,
    pub rq: Queue,
    pub sq: Queue,
    /// Bytes one send request reserves (a multiple of 64).
    pub sq_wqe_size: u32,
    pub max_inline: u32,
}

impl Geometry {
    pub(crate) fn buf_len(&self) -> usize {
        self.rq.bytes() + self.sq.bytes()
    }

    /// What the caller actually got (`ibv_qp_init_attr.cap` after create).
    pub(crate) fn cap(&self) -> QpCap {
        QpCap {
            max_send_wr: self.sq.max_post,
            max_recv_wr: self.rq.max_post,
            max_send_sge: self.sq.max_gs,
            max_recv_sge: self.rq.max_gs,
            max_inline_data: self.max_inline,
        }
    }
}

/// Bytes of a send WQE before its data: ctrl plus the largest per-transport
/// segments (rdma-core `sq_overhead`).
fn sq_overhead(t: QpType) -> u32 {
    match t {
        // ctrl + raddr + atomic
        QpType::Rc => 16 + 16 + 16,
        // ctrl + raddr
        QpType::Uc => 16 + 16,
        // ctrl + datagram (address vector)
        QpType::Ud => 16 + 48,
    }
}

/// `v` rounded up to a multiple of `to`; `None` past `u32` (caller sizes).
fn align(v: u32, to: u32) -> Option<u32> {
    v.div_ceil(to).checked_mul(to)
}

pub(crate) fn compute(
    t: QpType,
    cap: &QpCap,
    rq_kind: RqKind,
    l: &Limits,
) -> Result<Geometry, String> {
    let rq = match rq_kind {
        RqKind::Own => recv_queue(cap, l)?,
        RqKind::Srq | RqKind::None => Queue::default(),
    };
    let (mut sq, sq_wqe_size, max_inline) = send_queue(t, cap, l)?;
    sq.offset = rq.bytes();
    Ok(Geometry {
        rq_kind,
        rq,
        sq,
        sq_wqe_size,
        max_inline,
    })
}

fn recv_queue(cap: &QpCap, l: &Limits) -> Result<Queue, String> {
    if cap.max_recv_wr > l.max_qp_wr {
        return Err(format!(
            "max_recv_wr {} exceeds the device's {}",
            cap.max_recv_wr, l.max_qp_wr
        ));
    }
    if cap.max_recv_sge > l.max_recv_sge {
        return Err(format!(
            "max_recv_sge {} exceeds the device's {}",
            cap.max_recv_sge, l.max_recv_sge
        ));
    }
    let sges = cap.max_recv_sge.max(1);
    let wqe_size = pow2_at_least(sges * SEG).ok_or("receive WQE size overflows")?;
    if wqe_size > l.max_wqe_sz_rq {
        return Err(format!(
            "{sges} receive SGEs need {wqe_size}-byte WQEs; the device allows {}",
            l.max_wqe_sz_rq
        ));
    }
    let mut cnt = pow2_at_least(cap.max_recv_wr).ok_or("receive depth overflows")?;
    // The SQ must start WQEBB-aligned: the RQ spans at least 64 bytes.
    while cnt.saturating_mul(wqe_size) < WQEBB {
        cnt *= 2;
    }
    if log2(cnt) > MAX_LOG_QUEUE || cnt > l.max_qp_wr.max(WQEBB / wqe_size) {
        return Err(format!(
            "a receive queue of {cnt} WQEs exceeds the device's limit"
        ));
    }
    Ok(Queue {
        offset: 0,
        wqe_cnt: cnt,
        wqe_shift: log2(wqe_size),
        max_post: cnt,
        max_gs: wqe_size / SEG,
    })
}

fn send_queue(t: QpType, cap: &QpCap, l: &Limits) -> Result<(Queue, u32, u32), String> {
    if cap.max_send_wr == 0 {
        return Err("max_send_wr must be at least 1".into());
    }
    if cap.max_send_wr > l.max_qp_wr {
        return Err(format!(
            "max_send_wr {} exceeds the device's {}",
            cap.max_send_wr, l.max_qp_wr
        ));
    }
    if cap.max_send_sge > l.max_send_sge {
        return Err(format!(
            "max_send_sge {} exceeds the device's {}",
            cap.max_send_sge, l.max_send_sge
        ));
    }
    let overhead = sq_overhead(t);
    let gather = overhead + cap.max_send_sge * SEG;
    let inline = if cap.max_inline_data > 0 {
        align(4u32.saturating_add(cap.max_inline_data), SEG)
            .and_then(|d| overhead.checked_add(d))
            .ok_or("max_inline_data overflows")?
    } else {
        0
    };
    let size = align(gather.max(inline), WQEBB).ok_or("send WQE size overflows")?;
    let limit = l.max_wqe_sz_sq.min(MAX_WQE_BYTES);
    if size > limit {
        return Err(format!(
            "a send WQE of {size} bytes (for {} SGEs, {} inline bytes) exceeds the device's {limit}",
            cap.max_send_sge, cap.max_inline_data
        ));
    }
    let total = u64::from(cap.max_send_wr) * u64::from(size);
    let total = u32::try_from(total)
        .ok()
        .and_then(pow2_at_least)
        .ok_or("send queue size overflows")?;
    let cnt = total / WQEBB;
    if log2(cnt) > MAX_LOG_QUEUE || cnt > l.max_qp_wr {
        return Err(format!(
            "{} send requests of {size} bytes need {cnt} WQEBBs; the device allows {}",
            cap.max_send_wr,
            l.max_qp_wr.min(1 << MAX_LOG_QUEUE)
        ));
    }
    let sq = Queue {
        offset: 0,
        wqe_cnt: cnt,
        wqe_shift: log2(WQEBB),
        max_post: total / size,
        max_gs: (size - overhead) / SEG,
    };
    Ok((sq, size, size - overhead - 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_qp_wr: 1 << 15,
            max_send_sge: 30,
            max_recv_sge: 32,
            max_cqe: (1 << 22) - 1,
            max_srq_wr: (1 << 15) - 1,
            max_srq_sge: 31,
            max_wqe_sz_sq: 1024,
            max_wqe_sz_rq: 512,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
        }
    }

    fn cap(sw: u32, rw: u32, ss: u32, rs: u32, inl: u32) -> QpCap {
        QpCap {
            max_send_wr: sw,
            max_recv_wr: rw,
            max_send_sge: ss,
            max_recv_sge: rs,
            max_inline_data: inl,
        }
    }

    #[test]
    fn rc_layout_puts_rq_first() {
        let g = compute(QpType::Rc, &cap(64, 32, 1, 1, 0), RqKind::Own, &limits()).unwrap();
        assert_eq!(g.rq.wqe_cnt, 32);
        assert_eq!(g.rq.wqe_shift, 4);
        assert_eq!(g.sq.offset, 32 * 16);
        assert_eq!(g.sq_wqe_size, 64);
        assert_eq!(g.sq.wqe_cnt, 64);
        assert_eq!(g.buf_len(), 512 + 4096);
        assert_eq!(g.cap().max_send_wr, 64);
        assert_eq!(g.cap().max_inline_data, 12);
    }

    #[test]
    fn inline_and_sges_grow_the_wqe() {
        let g = compute(QpType::Ud, &cap(10, 1, 4, 3, 100), RqKind::Own, &limits()).unwrap();
        // UD overhead 64, inline 64 + align16(104) = 176 → 192; gather 64 + 64 = 128.
        assert_eq!(g.sq_wqe_size, 192);
        assert_eq!(g.sq.wqe_cnt, 2048 / 64);
        assert!(g.cap().max_send_wr >= 10);
        assert_eq!(g.rq.wqe_shift, 6);
        assert_eq!(g.rq.wqe_cnt, 1);
        assert_eq!(g.sq.offset % 64, 0);
    }

    #[test]
    fn tiny_rq_is_padded_to_a_wqebb() {
        let g = compute(QpType::Uc, &cap(1, 1, 0, 1, 0), RqKind::Own, &limits()).unwrap();
        assert_eq!(g.rq.bytes(), 64);
        assert_eq!(g.sq.offset, 64);
    }

    #[test]
    fn srq_and_no_rq_have_no_ring() {
        for kind in [RqKind::Srq, RqKind::None] {
            let g = compute(QpType::Rc, &cap(1, 0, 1, 0, 0), kind, &limits()).unwrap();
            assert_eq!(g.rq.bytes(), 0);
            assert_eq!(g.sq.offset, 0);
        }
    }

    #[test]
    fn bad_attributes_are_refused() {
        let l = limits();
        assert!(compute(QpType::Rc, &cap(0, 1, 1, 1, 0), RqKind::Own, &l).is_err());
        assert!(compute(QpType::Rc, &cap(1, 1, 31, 1, 0), RqKind::Own, &l).is_err());
        assert!(compute(QpType::Rc, &cap(1, 1, 1, 33, 0), RqKind::Own, &l).is_err());
        assert!(compute(QpType::Rc, &cap(1 << 16, 1, 1, 1, 0), RqKind::Own, &l).is_err());
        assert!(compute(QpType::Rc, &cap(1, 1, 1, 1, 2000), RqKind::Own, &l).is_err());
        assert!(compute(QpType::Rc, &cap(1 << 15, 1, 30, 1, 0), RqKind::Own, &l).is_err());
    }
}
