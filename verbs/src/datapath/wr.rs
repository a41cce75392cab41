//! Work requests: what `post_send` and `post_recv` take.

use devx::StableMemory;
use prm_layouts::SendOpcode;

use crate::ah::Ah;
use crate::mr::Mr;

/// One scatter/gather entry (`ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

impl Sge {
    #[inline]
    pub fn new(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge { addr, length, lkey }
    }

    /// `length` bytes at `offset` into `mr`, with its lkey. Not checked: the
    /// device answers out-of-range entries with a protection error.
    #[inline]
    pub fn from_mr<M: StableMemory>(mr: &Mr<M>, offset: usize, length: u32) -> Sge {
        Sge {
            addr: (mr.addr() as u64).wrapping_add(offset as u64),
            length,
            lkey: mr.lkey(),
        }
    }
}

/// The operation of a send request (`ibv_wr_opcode` with its arguments).
/// Immediates are host-order values; they travel big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    Send,
    SendWithImm(u32),
    RdmaWrite {
        remote_addr: u64,
        rkey: u32,
    },
    RdmaWriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    RdmaRead {
        remote_addr: u64,
        rkey: u32,
    },
    /// 8-byte compare and swap; the original value lands in the one SGE.
    CompSwap {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    /// 8-byte fetch and add; the original value lands in the one SGE.
    FetchAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
}

impl SendOp {
    /// The mlx5 WQE opcode (prm-guide §5.4).
    #[inline]
    pub fn mlx5_opcode(&self) -> SendOpcode {
        match self {
            SendOp::Send => SendOpcode::Send,
            SendOp::SendWithImm(_) => SendOpcode::SendImm,
            SendOp::RdmaWrite { .. } => SendOpcode::RdmaWrite,
            SendOp::RdmaWriteWithImm { .. } => SendOpcode::RdmaWriteImm,
            SendOp::RdmaRead { .. } => SendOpcode::RdmaRead,
            SendOp::CompSwap { .. } => SendOpcode::AtomicCs,
            SendOp::FetchAdd { .. } => SendOpcode::AtomicFa,
        }
    }

    #[inline]
    pub(crate) fn imm(&self) -> Option<u32> {
        match *self {
            SendOp::SendWithImm(i) | SendOp::RdmaWriteWithImm { imm: i, .. } => Some(i),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn is_send(&self) -> bool {
        matches!(self, SendOp::Send | SendOp::SendWithImm(_))
    }

    #[inline]
    pub(crate) fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompSwap { .. } | SendOp::FetchAdd { .. })
    }
}

/// Where a UD send goes: the address handle, remote QPN and Q_Key.
#[derive(Debug, Clone, Copy)]
pub struct UdDest<'a> {
    pub ah: &'a Ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// A send request (`ibv_send_wr`). Constructors make signaled requests;
/// `unsignaled()` opts out (a QP with `sq_sig_all` signals regardless).
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub op: SendOp,
    /// Gather list (scatter list for RDMA READ and atomics).
    pub sgl: &'a [Sge],
    /// Data carried in the WQE itself instead of `sgl` (`IBV_SEND_INLINE`),
    /// at most the QP's `max_inline_data` bytes.
    pub inline: Option<&'a [u8]>,
    pub signaled: bool,
    pub fence: bool,
    pub solicited: bool,
    /// UD QPs: the destination.
    pub ud: Option<UdDest<'a>>,
}

impl<'a> SendWr<'a> {
    #[inline]
    pub fn new(wr_id: u64, op: SendOp, sgl: &'a [Sge]) -> SendWr<'a> {
        SendWr {
            wr_id,
            op,
            sgl,
            inline: None,
            signaled: true,
            fence: false,
            solicited: false,
            ud: None,
        }
    }

    #[inline]
    pub fn send(wr_id: u64, sgl: &'a [Sge]) -> SendWr<'a> {
        SendWr::new(wr_id, SendOp::Send, sgl)
    }

    #[inline]
    pub fn rdma_write(wr_id: u64, sgl: &'a [Sge], remote_addr: u64, rkey: u32) -> SendWr<'a> {
        SendWr::new(wr_id, SendOp::RdmaWrite { remote_addr, rkey }, sgl)
    }

    #[inline]
    pub fn rdma_read(wr_id: u64, sgl: &'a [Sge], remote_addr: u64, rkey: u32) -> SendWr<'a> {
        SendWr::new(wr_id, SendOp::RdmaRead { remote_addr, rkey }, sgl)
    }

    #[inline]
    pub fn comp_swap(
        wr_id: u64,
        sge: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> SendWr<'a> {
        let op = SendOp::CompSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        };
        SendWr::new(wr_id, op, sge)
    }

    #[inline]
    pub fn fetch_add(
        wr_id: u64,
        sge: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        add: u64,
    ) -> SendWr<'a> {
        SendWr::new(
            wr_id,
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            },
            sge,
        )
    }

    /// Adds an immediate: SEND becomes SEND_WITH_IMM, RDMA_WRITE becomes
    /// RDMA_WRITE_WITH_IMM; other operations are left as they are.
    #[inline]
    pub fn imm(mut self, imm: u32) -> SendWr<'a> {
        self.op = match self.op {
            SendOp::Send | SendOp::SendWithImm(_) => SendOp::SendWithImm(imm),
            SendOp::RdmaWrite { remote_addr, rkey }
            | SendOp::RdmaWriteWithImm {
                remote_addr, rkey, ..
            } => SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            },
            other => other,
        };
        self
    }

    /// Carries `data` in the WQE; `sgl` is then ignored.
    #[inline]
    pub fn inline_data(mut self, data: &'a [u8]) -> SendWr<'a> {
        self.inline = Some(data);
        self
    }

    #[inline]
    pub fn signaled(mut self, on: bool) -> SendWr<'a> {
        self.signaled = on;
        self
    }

    #[inline]
    pub fn unsignaled(self) -> SendWr<'a> {
        self.signaled(false)
    }

    /// Waits for earlier RDMA READs and atomics before starting.
    #[inline]
    pub fn fence(mut self) -> SendWr<'a> {
        self.fence = true;
        self
    }

    #[inline]
    pub fn solicited(mut self) -> SendWr<'a> {
        self.solicited = true;
        self
    }

    #[inline]
    pub fn ud(mut self, ah: &'a Ah, remote_qpn: u32, remote_qkey: u32) -> SendWr<'a> {
        self.ud = Some(UdDest {
            ah,
            remote_qpn,
            remote_qkey,
        });
        self
    }
}

/// A receive request (`ibv_recv_wr`).
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sgl: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    #[inline]
    pub fn new(wr_id: u64, sgl: &'a [Sge]) -> RecvWr<'a> {
        RecvWr { wr_id, sgl }
    }
}
