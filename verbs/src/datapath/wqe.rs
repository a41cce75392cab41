//! Send WQE composition (prm-guide §5.2–§5.3): validate a request, size it,
//! then store its segments into the SQ ring, wrapping at the ring end.

use super::ring::Ring;
use super::wr::{SendOp, SendWr, Sge};
use crate::error::{Error, Result};
use crate::qp::QpType;

/// WQE basic block and DS unit.
pub(crate) const WQEBB: u32 = 64;
const DS: usize = 16;
/// `fm_ce_se` bits.
pub const CTRL_SOLICITED: u8 = 0x02;
pub const CTRL_SIGNALED: u8 = 0x08;
pub const CTRL_FENCE: u8 = 0x80;
/// Inline segment marker in `byte_count`.
const INLINE_SEG: u32 = 0x8000_0000;
/// Receive list terminator key (`MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;
/// Atomics move 8 bytes.
const ATOMIC_SIZE: u32 = 8;
/// Bit 31 of `dqp_dct`: extended address vector.
const AV_EXT: u32 = 0x8000_0000;

const VERB: &str = "post_send";

/// What a QP allows in its send WQEs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SqShape {
    pub qpn: u32,
    pub qp_type: QpType,
    pub max_sge: u32,
    pub max_inline: u32,
    pub sig_all: bool,
}

/// A request's size, once it passed validation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// 16-byte units including the control segment.
    pub ds: u32,
    /// WQEBBs the WQE spans.
    pub nbb: u32,
}

#[inline(always)]
fn be_pair(a: u64, b: u64) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[..8].copy_from_slice(&a.to_be_bytes());
    s[8..].copy_from_slice(&b.to_be_bytes());
    s
}

/// A data segment: byte_count, lkey, addr.
#[inline(always)]
pub(crate) fn data_seg(byte_count: u32, lkey: u32, addr: u64) -> [u8; 16] {
    be_pair((u64::from(byte_count) << 32) | u64::from(lkey), addr)
}

#[inline(always)]
fn raddr_seg(remote_addr: u64, rkey: u32) -> [u8; 16] {
    be_pair(remote_addr, u64::from(rkey) << 32)
}

/// The first 8 bytes of a control segment as two host-order words.
#[inline(always)]
fn ctrl_words(cur_post: u32, opcode: u8, qpn: u32, ds: u32) -> (u32, u32) {
    (
        ((cur_post & 0xffff) << 8) | u32::from(opcode),
        (qpn << 8) | (ds & 0x3f),
    )
}

/// The doorbell value: the control segment's first 8 bytes as in memory.
#[inline(always)]
fn ctrl8(w0: u32, w1: u32) -> u64 {
    u64::from_ne_bytes(((u64::from(w0) << 32) | u64::from(w1)).to_be_bytes())
}

// Rejections, out of line so the checks in `plan` stay a few compares on
// the posting path. `extern "C"`: a call that cannot unwind needs no
// cleanup of the caller's batch, so the batch's counters can stay in
// registers across the posting loop (a panic in here aborts instead).
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)]
extern "C" fn bad(msg: &'static str) -> Error {
    Error::argument(VERB, msg)
}

#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)]
extern "C" fn inline_too_long(len: usize, max: u32) -> Error {
    Error::argument(
        VERB,
        format!("{len} inline bytes exceed the QP's max_inline_data {max}"),
    )
}

#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)]
extern "C" fn too_many_sges(n: usize, max: u32) -> Error {
    Error::argument(VERB, format!("{n} SGEs exceed the QP's max_send_sge {max}"))
}

/// Checks `wr` against the QP and sizes its WQE; nothing is written.
#[inline(always)]
pub(crate) fn plan(shape: &SqShape, wr: &SendWr<'_>) -> Result<Plan> {
    let op = &wr.op;
    match shape.qp_type {
        QpType::Ud => {
            if !op.is_send() {
                return Err(bad("UD QPs only send (SEND, SEND_WITH_IMM)"));
            }
            if wr.ud.is_none() {
                return Err(bad("a UD send needs a destination (`ud`)"));
            }
        }
        QpType::Uc if matches!(op, SendOp::RdmaRead { .. }) || op.is_atomic() => {
            return Err(bad("UC QPs have no RDMA READ or atomics"));
        }
        _ if wr.ud.is_some() => {
            return Err(bad("a UD destination on a connected QP"));
        }
        _ => {}
    }
    let mut ds: u32 = 1;
    if shape.qp_type == QpType::Ud {
        ds += 3;
    }
    if !op.is_send() {
        ds += 1;
    }
    if op.is_atomic() {
        if wr.sgl.len() != 1 || wr.inline.is_some() {
            return Err(bad(
                "an atomic takes exactly one SGE for the original value",
            ));
        }
        ds += 2;
    } else if let Some(data) = wr.inline {
        if matches!(op, SendOp::RdmaRead { .. }) {
            return Err(bad("RDMA READ cannot be inline"));
        }
        if data.len() > shape.max_inline as usize {
            return Err(inline_too_long(data.len(), shape.max_inline));
        }
        if !data.is_empty() {
            ds += (4 + data.len() as u32).div_ceil(DS as u32);
        }
    } else {
        if wr.sgl.len() > shape.max_sge as usize {
            return Err(too_many_sges(wr.sgl.len(), shape.max_sge));
        }
        ds += match wr.sgl {
            // One entry is the common case: no loop for it.
            [s] => u32::from(s.length != 0),
            sgl => sgl.iter().filter(|s| s.length != 0).count() as u32,
        };
    }
    Ok(Plan {
        ds,
        nbb: (ds * DS as u32).div_ceil(WQEBB),
    })
}

/// Stores the WQE for `wr` at SQ counter `cur_post`; returns the doorbell
/// value. `plan` must come from [`plan`] for the same request.
#[inline(always)]
pub(crate) fn write(ring: &Ring, cur_post: u32, shape: &SqShape, wr: &SendWr<'_>, p: Plan) -> u64 {
    let base = (cur_post as usize) * WQEBB as usize;
    let mut seg = base + DS;
    let op = &wr.op;
    if let Some(ud) = &wr.ud {
        let mut av = [0u8; 48];
        av.copy_from_slice(&ud.ah.av().as_bytes()[..48]);
        av[0..4].copy_from_slice(&ud.remote_qkey.to_be_bytes());
        let ext = u32::from_be_bytes([av[8], av[9], av[10], av[11]]) & AV_EXT;
        av[8..12].copy_from_slice(&(ext | (ud.remote_qpn & 0xff_ffff)).to_be_bytes());
        for chunk in av.chunks_exact(DS) {
            let mut s = [0u8; 16];
            s.copy_from_slice(chunk);
            ring.write_seg(seg, s);
            seg += DS;
        }
    }
    match *op {
        SendOp::RdmaWrite { remote_addr, rkey }
        | SendOp::RdmaWriteWithImm {
            remote_addr, rkey, ..
        }
        | SendOp::RdmaRead { remote_addr, rkey } => {
            ring.write_seg(seg, raddr_seg(remote_addr, rkey));
            seg += DS;
        }
        SendOp::CompSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            ring.write_seg(seg, raddr_seg(remote_addr, rkey));
            ring.write_seg(seg + DS, be_pair(swap, compare));
            seg += 2 * DS;
        }
        SendOp::FetchAdd {
            remote_addr,
            rkey,
            add,
        } => {
            ring.write_seg(seg, raddr_seg(remote_addr, rkey));
            ring.write_seg(seg + DS, be_pair(add, 0));
            seg += 2 * DS;
        }
        SendOp::Send | SendOp::SendWithImm(_) => {}
    }
    if op.is_atomic() {
        let s: &Sge = &wr.sgl[0];
        ring.write_seg(seg, data_seg(ATOMIC_SIZE, s.lkey, s.addr));
    } else if let Some(data) = wr.inline {
        if !data.is_empty() {
            ring.write_bytes(seg, &(INLINE_SEG | data.len() as u32).to_be_bytes());
            ring.write_bytes(seg + 4, data);
        }
    } else if let [s] = wr.sgl {
        if s.length != 0 {
            ring.write_seg(seg, data_seg(s.length, s.lkey, s.addr));
        }
    } else {
        for s in wr.sgl.iter().filter(|s| s.length != 0) {
            ring.write_seg(seg, data_seg(s.length, s.lkey, s.addr));
            seg += DS;
        }
    }
    let mut fm_ce_se = 0u8;
    if wr.signaled || shape.sig_all {
        fm_ce_se |= CTRL_SIGNALED;
    }
    if wr.solicited {
        fm_ce_se |= CTRL_SOLICITED;
    }
    if wr.fence {
        fm_ce_se |= CTRL_FENCE;
    }
    let (w0, w1) = ctrl_words(cur_post, op.mlx5_opcode(), shape.qpn, p.ds);
    let w2 = u32::from(fm_ce_se);
    let w3 = op.imm().unwrap_or(0);
    ring.write_seg(
        base,
        be_pair(
            (u64::from(w0) << 32) | u64::from(w1),
            (u64::from(w2) << 32) | u64::from(w3),
        ),
    );
    ctrl8(w0, w1)
}
