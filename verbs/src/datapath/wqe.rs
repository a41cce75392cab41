//! Send WQE composition (prm-guide §5.2–§5.3): validate a request, size it,
//! then store its segments into the SQ ring, wrapping at the ring end.

use prm_layouts::words::{Field32, Words};
use prm_layouts::{fields, SendOpcode, WqeCtrlSeg, WqeInlDataSeg};

use super::ring::{Entry64, Ring64};
use super::wr::{SendOp, SendWr, Sge};
use crate::error::Error;
use crate::qp::QpType;

/// WQE basic block and DS unit.
pub(crate) const WQEBB: u32 = 64;
pub(crate) const DS: usize = WqeCtrlSeg::SIZE_BYTES;
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
/// How far past a WQE's first block a post prefetches the SQ for the WQEs
/// to come: far enough that the line is there when they are written.
const PREFETCH_BLOCKS: usize = 4;

const VERB: &str = "post_send";

/// What a QP allows in its send WQEs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SqShape {
    pub qpn: u32,
    pub qp_type: QpType,
    pub max_sge: u32,
    pub max_inline: u32,
    /// `fm_ce_se` bits every WQE carries: [`CTRL_SIGNALED`] on a QP made
    /// with `sq_sig_all`, else none.
    pub fm_ce_se: u8,
    /// What a request may carry, by whether it names a UD destination
    /// (index 1) or not (0); see [`Ends`].
    pub ends: [Ends; 2],
}

/// One past the most SGEs and inline bytes a request may carry, both 0
/// where the request does not suit the QP's type (a UD destination on a
/// connected QP, none on a UD QP): [`plan`] checks a request's type and
/// size with one compare, and tells what failed apart out of line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ends {
    pub sge: u32,
    pub inline: u32,
}

impl SqShape {
    pub(crate) fn new(
        qpn: u32,
        qp_type: QpType,
        max_sge: u32,
        max_inline: u32,
        fm_ce_se: u8,
    ) -> SqShape {
        let ends = |suits: bool| Ends {
            sge: if suits { max_sge.saturating_add(1) } else { 0 },
            inline: if suits {
                max_inline.saturating_add(1)
            } else {
                0
            },
        };
        let ud = qp_type == QpType::Ud;
        SqShape {
            qpn,
            qp_type,
            max_sge,
            max_inline,
            fm_ce_se,
            ends: [ends(!ud), ends(ud)],
        }
    }
}

/// A request's size, once it passed validation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// 16-byte units including the control segment.
    pub ds: u32,
    /// WQEBBs the WQE spans.
    pub nbb: u32,
    /// The gather list has no empty entry to skip: `write` stores every
    /// entry where it lies, without looking at the lengths again.
    pub dense: bool,
}

// Segments are built as host-order dwords from the layouts' field
// positions: each value lands with a shift, and each segment is four
// whole-word stores (the typed setters' byte read-modify-writes are not
// merged that well).

/// A data segment: byte_count, lkey, addr.
#[inline(always)]
pub(crate) fn data_seg(byte_count: u32, lkey: u32, addr: u64) -> [u8; 16] {
    use fields::wqe_data_seg as f;
    Words::<4>::new()
        .with(f::BYTE_COUNT, byte_count)
        .with(f::LKEY, lkey)
        .with64(f::ADDR, addr)
        .to_be_bytes()
}

#[inline(always)]
fn raddr_seg(remote_addr: u64, rkey: u32) -> [u8; 16] {
    use fields::wqe_raddr_seg as f;
    Words::<4>::new()
        .with64(f::RADDR, remote_addr)
        .with(f::RKEY, rkey)
        .to_be_bytes()
}

#[inline(always)]
fn atomic_seg(swap_add: u64, compare: u64) -> [u8; 16] {
    use fields::wqe_atomic_seg as f;
    Words::<4>::new()
        .with64(f::SWAP_ADD, swap_add)
        .with64(f::COMPARE, compare)
        .to_be_bytes()
}

/// A 16-byte segment copied from wire bytes with some fields replaced,
/// held as two 8-byte words in memory order: a field goes in with a mask and
/// an or, and the words around it are never byte-swapped (as
/// `Words::from_be_bytes` then `to_be_bytes` would do to all four dwords).
#[derive(Clone, Copy)]
struct WireSeg([u64; 2]);

impl WireSeg {
    /// The first 16 bytes of `b` (which has at least 16).
    #[inline(always)]
    fn from_bytes(b: &[u8]) -> WireSeg {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[8 * i..8 * i + 8]);
            u64::from_ne_bytes(w)
        };
        WireSeg([word(0), word(1)])
    }

    /// Sets field `f` to `v` (masked to its width).
    #[inline(always)]
    fn with(mut self, f: Field32, v: u32) -> WireSeg {
        let (i, at) = (f.byte / 8, f.byte % 8);
        // A host-order dword as its wire bytes lie in word `i`.
        let place = |d: u32| {
            let mut w = [0u8; 8];
            w[at..at + 4].copy_from_slice(&d.to_be_bytes());
            u64::from_ne_bytes(w)
        };
        self.0[i] = (self.0[i] & !place(f.mask())) | place(f.put(v));
        self
    }

    #[inline(always)]
    fn to_bytes(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.0[0].to_ne_bytes());
        out[8..].copy_from_slice(&self.0[1].to_ne_bytes());
        out
    }
}

/// The control segment of the WQE at SQ counter `cur_post`.
#[inline(always)]
pub(crate) fn ctrl_seg(
    cur_post: u32,
    opcode: SendOpcode,
    qpn: u32,
    ds: u32,
    fm_ce_se: u32,
    imm: u32,
) -> Words<4> {
    use fields::wqe_ctrl_seg as f;
    Words::<4>::new()
        .with(f::WQE_INDEX, cur_post)
        .with(f::OPCODE, opcode.raw().into())
        .with(f::QPN, qpn)
        .with(f::DS, ds)
        .with(f::FM_CE_SE, fm_ce_se)
        .with(f::IMM, imm)
}

/// WQEBBs the WQE at SQ counter `at` spans, as its control segment's DS
/// says. For the producer, on a WQE it wrote and has not yet reused.
#[inline]
pub(crate) fn bbs_at(ring: &Ring64, at: u32) -> u32 {
    use fields::wqe_ctrl_seg as f;
    let ctrl = ring.entry64(at as usize * WQEBB as usize);
    bbs_of(f::DS.get(u32::from_be_bytes(ctrl.read_dword(f::DS.byte))))
}

/// WQEBBs a WQE of `ds` 16-byte units spans.
#[inline(always)]
pub(crate) fn bbs_of(ds: u32) -> u32 {
    (ds * DS as u32).div_ceil(WQEBB)
}

/// The doorbell value: the control segment's first 8 bytes as they lie in
/// memory.
#[inline(always)]
pub(crate) fn ctrl8(c: Words<4>) -> u64 {
    c.pair(0).to_be()
}

/// What [`plan`] found of a request it refused: plain values built where
/// the check fails, so the compiler knows on each path whether `plan`
/// succeeded. Which rule failed, and the [`Error`], are worked out out of
/// line by [`Reject::error`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reject {
    qp_type: QpType,
    max_sge: u32,
    max_inline: u32,
    op: OpKind,
    ud: bool,
    sges: usize,
    inline: Option<usize>,
}

/// What [`Reject`] keeps of a request's operation.
#[derive(Debug, Clone, Copy)]
struct OpKind {
    send: bool,
    read: bool,
    atomic: bool,
}

impl Reject {
    #[inline(always)]
    pub(crate) fn error(self) -> Error {
        refuse(self)
    }
}

/// The rules [`plan`] checks, one by one in the order they are reported.
/// Out of line so the checks in `plan` stay a compare or two on the posting
/// path. `extern "C"`: a call that cannot unwind needs no cleanup of the
/// caller's batch, so the batch's counters can stay in registers across
/// the posting loop (a panic in here aborts instead).
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)]
extern "C" fn refuse(r: Reject) -> Error {
    let bad = |msg: &str| Error::argument(VERB, msg);
    let op = r.op;
    match r.qp_type {
        QpType::Ud if !op.send => return bad("UD QPs only send (SEND, SEND_WITH_IMM)"),
        QpType::Ud if !r.ud => return bad("a UD send needs a destination (`ud`)"),
        QpType::Ud => {}
        QpType::Uc if op.read || op.atomic => return bad("UC QPs have no RDMA READ or atomics"),
        _ if r.ud => return bad("a UD destination on a connected QP"),
        _ => {}
    }
    if op.atomic {
        return bad("an atomic takes exactly one SGE for the original value");
    }
    if let Some(len) = r.inline {
        if op.read {
            return bad("RDMA READ cannot be inline");
        }
        return Error::argument(
            VERB,
            format!(
                "{len} inline bytes exceed the QP's max_inline_data {}",
                r.max_inline
            ),
        );
    }
    Error::argument(
        VERB,
        format!("{} SGEs exceed the QP's max_send_sge {}", r.sges, r.max_sge),
    )
}

/// Checks `wr` against the QP and sizes its WQE; nothing is written.
///
/// The QP's type and the request's SGE count or inline length take one
/// compare against [`SqShape::ends`]; the rules on the operation fold away
/// for a request whose operation the compiler sees. What failed is told
/// apart out of line ([`Reject::error`]).
#[inline(always)]
pub(crate) fn plan(shape: &SqShape, wr: &SendWr<'_>) -> std::result::Result<Plan, Reject> {
    let op = &wr.op;
    let ud = wr.ud.is_some();
    let end = shape.ends[usize::from(ud)];
    let mut ds: u32 = 1;
    let mut dense = true;
    // Past `end`, a destination means a UD QP.
    if ud {
        ds += 3;
    }
    if !op.is_send() {
        ds += 1;
    }
    let fits = if op.is_atomic() {
        ds += 2;
        wr.sgl.len() == 1 && wr.inline.is_none() && end.sge != 0
    } else if let Some(data) = wr.inline {
        if !data.is_empty() {
            ds += (4 + data.len() as u32).div_ceil(DS as u32);
        }
        !matches!(op, SendOp::RdmaRead { .. }) && data.len() < end.inline as usize
    } else {
        let n = match wr.sgl {
            // One entry is the common case: no loop for it.
            [s] => u32::from(s.length != 0),
            sgl => sgl.iter().filter(|s| s.length != 0).count() as u32,
        };
        dense = n as usize == wr.sgl.len();
        ds += n;
        wr.sgl.len() < end.sge as usize
    };
    // The operation's rules by type: a UD QP (a request past `end` with a
    // destination) only sends; UC has no RDMA READ or atomics.
    let op_suits = (!ud || op.is_send())
        && !(shape.qp_type == QpType::Uc
            && (matches!(op, SendOp::RdmaRead { .. }) || op.is_atomic()));
    if !(fits && op_suits) {
        return Err(Reject {
            qp_type: shape.qp_type,
            max_sge: shape.max_sge,
            max_inline: shape.max_inline,
            op: OpKind {
                send: op.is_send(),
                read: matches!(op, SendOp::RdmaRead { .. }),
                atomic: op.is_atomic(),
            },
            ud,
            sges: wr.sgl.len(),
            inline: wr.inline.map(<[u8]>::len),
        });
    }
    Ok(Plan {
        ds,
        nbb: bbs_of(ds),
        dense,
    })
}

/// The segments after a WQE's control segment, stored one after another.
/// Each 64-byte block is located (wrapped) once, and where the WQE's layout
/// is fixed the compiler sees each segment's place in its block, so the
/// stores of a one-block WQE all go to one computed address.
struct Segs<'r> {
    ring: &'r Ring64,
    /// Ring offset of the next segment.
    off: usize,
    block: Entry64,
}

impl Segs<'_> {
    #[inline(always)]
    fn push(&mut self, seg: [u8; 16]) {
        let at = self.off % WQEBB as usize;
        if at == 0 {
            self.block = self.ring.next64(self.block);
        }
        self.block.write_seg(at, seg);
        self.off += DS;
    }

    /// Stores a dword where the next segment starts; whatever follows
    /// (inline data) is written by the caller.
    #[inline(always)]
    fn dword(&mut self, d: [u8; 4]) {
        let at = self.off % WQEBB as usize;
        if at == 0 {
            self.block = self.ring.next64(self.block);
        }
        self.block.write_dword(at, d);
    }
}

/// Stores the WQE for `wr` at SQ counter `cur_post`; returns the doorbell
/// value. `plan` must come from [`plan`] for the same request.
#[inline(always)]
pub(crate) fn write(
    ring: &Ring64,
    cur_post: u32,
    shape: &SqShape,
    wr: &SendWr<'_>,
    p: Plan,
) -> u64 {
    let base = (cur_post as usize) * WQEBB as usize;
    let first = ring.entry64(base);
    let op = &wr.op;
    // Widened first: the choice between the QP's bits and those with a
    // request's flag added is then one conditional move of whole registers
    // (two byte-wide values would be zero-extended per request).
    let mut fm_ce_se = u32::from(shape.fm_ce_se);
    if wr.signaled {
        fm_ce_se |= u32::from(CTRL_SIGNALED);
    }
    if wr.solicited {
        fm_ce_se |= u32::from(CTRL_SOLICITED);
    }
    if wr.fence {
        fm_ce_se |= u32::from(CTRL_FENCE);
    }
    let ctrl = ctrl_seg(
        cur_post,
        op.mlx5_opcode(),
        shape.qpn,
        p.ds,
        fm_ce_se,
        op.imm().unwrap_or(0),
    );
    // The control segment first: the WQE's stores then go in address
    // order, block by block, as the device reads them.
    first.write_seg(0, ctrl.to_be_bytes());
    first.prefetch_write_ahead(PREFETCH_BLOCKS);
    let mut segs = Segs {
        ring,
        off: base + DS,
        block: first,
    };
    if let Some(ud) = &wr.ud {
        // The AH's address vector with this request's Q_Key and remote QPN:
        // its first 16 bytes patched in place as they lie in memory, the
        // other 32 as they are. (Copying all 48 and storing the two dwords
        // over the copy takes fewer instructions but one store more, and
        // times slower.)
        use fields::{wqe_av_qkey::QKEY, wqe_datagram_seg::DQP_DCT};
        let av = &ud.ah.av().0;
        let head = WireSeg::from_bytes(&av[..DS])
            .with(QKEY, ud.remote_qkey)
            .with(DQP_DCT, ud.remote_qpn);
        segs.push(head.to_bytes());
        for chunk in av[16..].chunks_exact(DS) {
            let mut s = [0u8; 16];
            s.copy_from_slice(chunk);
            segs.push(s);
        }
    }
    match *op {
        SendOp::RdmaWrite { remote_addr, rkey }
        | SendOp::RdmaWriteWithImm {
            remote_addr, rkey, ..
        }
        | SendOp::RdmaRead { remote_addr, rkey } => {
            segs.push(raddr_seg(remote_addr, rkey));
        }
        SendOp::CompSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            segs.push(raddr_seg(remote_addr, rkey));
            segs.push(atomic_seg(swap, compare));
        }
        SendOp::FetchAdd {
            remote_addr,
            rkey,
            add,
        } => {
            segs.push(raddr_seg(remote_addr, rkey));
            segs.push(atomic_seg(add, 0));
        }
        SendOp::Send | SendOp::SendWithImm(_) => {}
    }
    if op.is_atomic() {
        let s: &Sge = &wr.sgl[0];
        segs.push(data_seg(ATOMIC_SIZE, s.lkey, s.addr));
    } else if let Some(data) = wr.inline {
        if !data.is_empty() {
            let hdr = WqeInlDataSeg::new().with_byte_count(INLINE_SEG | data.len() as u32);
            segs.dword(hdr.0);
            ring.write_blocks(segs.block, segs.off + 4, data);
        }
    } else if let [s] = wr.sgl {
        if p.dense {
            segs.push(data_seg(s.length, s.lkey, s.addr));
        }
    } else if p.dense {
        // No empty entry to skip, the common case (`plan` looked): each
        // segment's place is known from the list's length alone, so a list
        // of known length becomes stores to fixed places.
        for s in wr.sgl {
            segs.push(data_seg(s.length, s.lkey, s.addr));
        }
    } else {
        for s in wr.sgl.iter().filter(|s| s.length != 0) {
            segs.push(data_seg(s.length, s.lkey, s.addr));
        }
    }
    ctrl8(ctrl)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prm_layouts::fields::{wqe_av_qkey::QKEY, wqe_datagram_seg::DQP_DCT};

    /// Patching in memory order gives the bytes patching host-order
    /// dwords gives: only the field's bits change, a value wider than the
    /// field is cut to it, and the bits around it are kept.
    #[test]
    fn wire_seg_sets_fields_like_words() {
        let src: [u8; 16] = std::array::from_fn(|i| 0x80 | (i as u8 * 17));
        for (qkey, qpn) in [(0x1111_2222, 0x00ab_cdef), (0, 0xffff_ffff), (u32::MAX, 0)] {
            let got = WireSeg::from_bytes(&src)
                .with(QKEY, qkey)
                .with(DQP_DCT, qpn)
                .to_bytes();
            let want: [u8; 16] = Words::<4>::from_be_bytes(&src)
                .with(QKEY, qkey)
                .with(DQP_DCT, qpn)
                .to_be_bytes();
            assert_eq!(got, want, "qkey {qkey:#x} qpn {qpn:#x}");
        }
    }
}
