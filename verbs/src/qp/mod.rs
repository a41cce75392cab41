//! Queue pairs (RC, UC, UD) as DEVX QPs: one UMEM holding the RQ then the SQ,
//! a doorbell record UMEM, a UAR, and the PD/CQs/SRQ kept alive by the QP.

mod connect;
mod create;
mod geometry;
mod modify;
mod path;
mod query;

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use devx::{Uar, Umem};
use memmap2::MmapMut;
pub use prm_layouts::enums::{QpServiceType, QpState};

use crate::async_event::{EventHandler, HandlerEntry};
use crate::context::Context;
use crate::cq::{Cq, CqShared};
use crate::error::{DestroyError, Error, Result};
use crate::pd::Pd;
use crate::srq::{Srq, SrqShared};
use crate::util::{sole, DoorbellRecord, Owned, QueueMemory};

pub(crate) use connect::gid_rank;
pub use connect::ConnectOpts;
pub(crate) use geometry::Queue;
pub use modify::{InitAttr, QpTarget, RtrAttr, RtsAttr, RtsModify};
pub use query::QpAttr;

/// Transport service of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    Rc,
    Uc,
    Ud,
}

impl QpType {
    /// The PRM `qpc.st` value.
    pub fn service_type(self) -> QpServiceType {
        match self {
            QpType::Rc => QpServiceType::Rc,
            QpType::Uc => QpServiceType::Uc,
            QpType::Ud => QpServiceType::Ud,
        }
    }

    pub(crate) fn from_st(st: u8) -> Option<QpType> {
        match QpServiceType::from_raw(st)? {
            QpServiceType::Rc => Some(QpType::Rc),
            QpServiceType::Uc => Some(QpType::Uc),
            QpServiceType::Ud => Some(QpType::Ud),
            _ => None,
        }
    }
}

/// Queue capacities (`ibv_qp_cap`): requested at create, actual afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// Attributes of a new QP (`ibv_qp_init_attr`). Holds the CQs and SRQ it
/// names, so it has no lifetime of its own.
#[derive(Clone)]
pub struct QpInit {
    pub(crate) qp_type: QpType,
    pub(crate) send_cq: Arc<CqShared>,
    pub(crate) recv_cq: Arc<CqShared>,
    pub(crate) srq: Option<Arc<SrqShared>>,
    pub(crate) cap: QpCap,
    pub(crate) sq_sig_all: bool,
    pub(crate) uar: Option<Arc<Uar>>,
    pub(crate) events: Option<EventHandler>,
}

impl fmt::Debug for QpInit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QpInit")
            .field("qp_type", &self.qp_type)
            .field("send_cq", &self.send_cq.cqn())
            .field("recv_cq", &self.recv_cq.cqn())
            .field("srq", &self.srq.as_ref().map(|s| s.srqn()))
            .field("cap", &self.cap)
            .field("sq_sig_all", &self.sq_sig_all)
            .finish()
    }
}

impl QpInit {
    /// A QP of `qp_type` completing sends into `send_cq` and receives into
    /// `recv_cq`, with one send and one receive request of one SGE each.
    pub fn new(qp_type: QpType, send_cq: &Cq, recv_cq: &Cq) -> QpInit {
        QpInit {
            qp_type,
            send_cq: send_cq.shared().clone(),
            recv_cq: recv_cq.shared().clone(),
            srq: None,
            cap: QpCap {
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
            uar: None,
            events: None,
        }
    }

    /// Sends this QP's async events (communication established, SQ
    /// drained, last WQE reached, its errors) to `handler` instead of the
    /// context's queue.
    pub fn events(mut self, handler: EventHandler) -> QpInit {
        self.events = Some(handler);
        self
    }

    pub fn cap(mut self, cap: QpCap) -> QpInit {
        self.cap = cap;
        self
    }

    pub fn max_send_wr(mut self, n: u32) -> QpInit {
        self.cap.max_send_wr = n;
        self
    }

    /// 0 without an SRQ makes a send-only QP (zero-length RQ).
    pub fn max_recv_wr(mut self, n: u32) -> QpInit {
        self.cap.max_recv_wr = n;
        self
    }

    pub fn max_send_sge(mut self, n: u32) -> QpInit {
        self.cap.max_send_sge = n;
        self
    }

    pub fn max_recv_sge(mut self, n: u32) -> QpInit {
        self.cap.max_recv_sge = n;
        self
    }

    pub fn max_inline_data(mut self, n: u32) -> QpInit {
        self.cap.max_inline_data = n;
        self
    }

    /// Receive from a shared receive queue instead of an own RQ.
    pub fn srq(mut self, srq: &Srq) -> QpInit {
        self.srq = Some(srq.shared().clone());
        self
    }

    /// Signal every send request (`sq_sig_all`).
    pub fn sq_sig_all(mut self, all: bool) -> QpInit {
        self.sq_sig_all = all;
        self
    }

    /// Ring doorbells through this UAR instead of one of the QP's own. The
    /// QPs given one UAR share its BlueFlame register and take turns under
    /// its lock; the UAR of a QP that allocated its own is not shareable.
    pub fn uar(mut self, uar: Arc<Uar>) -> QpInit {
        self.uar = Some(uar);
        self
    }
}

pub(crate) struct QpDeps {
    buf: Umem<MmapMut>,
    dbr: DoorbellRecord,
    uar: Arc<Uar>,
    pd: Pd,
    send_cq: Arc<CqShared>,
    recv_cq: Arc<CqShared>,
    srq: Option<Arc<SrqShared>>,
    /// Its entry in the context's event dispatch table, if it has a handler.
    _events: Option<HandlerEntry>,
}

pub(crate) struct QpShared {
    owned: Owned<QpDeps>,
    qp_type: QpType,
}

impl QpShared {
    pub(crate) fn qpn(&self) -> u32 {
        self.owned.id()
    }
}

/// A queue pair (`ibv_qp`). Dropping it destroys the QP and then releases its
/// buffers, UAR, PD, CQs and SRQ (unless something else still holds them).
///
/// A new QP is in RESET; [`Qp::connect`] takes an RC or UC QP to RTS in one
/// call, the `to_*` transitions one step at a time. Posting needs the right
/// state: sends RTS (or SQD, SQE, ERR), receives anything but RESET; other
/// states fail with [`Error::QpState`].
///
/// ```
/// use verbs::{QpInit, QpState, QpType};
/// # fn main() -> verbs::Result<()> {
/// let ctx = verbs::Context::open_by_name("sim0")?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(16)?;
/// let init = QpInit::new(QpType::Rc, &cq, &cq).max_send_wr(8).max_recv_wr(8);
/// let (a, b) = (pd.create_qp(&init)?, pd.create_qp(&init)?);
/// assert_eq!(a.state(), QpState::Rst);
/// a.connect(&b.endpoint()?)?;
/// b.connect(&a.endpoint()?)?;
/// assert_eq!(b.query()?.dest_qp_num, a.qpn());
/// # Ok(()) }
/// ```
pub struct Qp {
    shared: Arc<QpShared>,
    cap: QpCap,
    sq_sig_all: bool,
    /// Last state a transition reached (the device's is in `query`).
    state: AtomicU8,
    /// Port set by the RST→INIT transition.
    port: AtomicU8,
    /// QP buffer start in this process.
    pub(crate) buf_addr: usize,
    pub(crate) rq: Queue,
    pub(crate) sq: Queue,
    /// Bytes one send request reserves in the SQ.
    pub(crate) sq_wqe_size: u32,
    /// Send and receive queue state of the data path.
    pub(crate) dp: crate::datapath::QpDataPath,
}

impl fmt::Debug for Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Qp({:?} {:#x}, {})",
            self.qp_type(),
            self.qpn(),
            self.state()
        )
    }
}

impl Qp {
    /// The QP number, usable by raw DEVX objects and peers.
    #[inline]
    pub fn qpn(&self) -> u32 {
        // The send queue's copy: no call into the object's handle.
        self.dp.sq.shape.qpn
    }

    pub fn qp_type(&self) -> QpType {
        self.shared.qp_type
    }

    /// Capacities actually provided (at least what was asked).
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    pub fn sq_sig_all(&self) -> bool {
        self.sq_sig_all
    }

    /// The state the last successful transition reached.
    pub fn state(&self) -> QpState {
        QpState::from_raw(self.state.load(Ordering::Relaxed)).unwrap_or(QpState::Rst)
    }

    /// Records a transition the device accepted, for `state()` and for the
    /// posting calls' state check.
    pub(crate) fn set_state(&self, s: QpState) {
        self.state.store(s.raw(), Ordering::Relaxed);
        self.dp.set_state(s);
    }

    /// The port chosen at RST→INIT (0 before).
    pub fn port(&self) -> u8 {
        self.port.load(Ordering::Relaxed)
    }

    pub fn pd(&self) -> &Pd {
        &self.shared.owned.deps().pd
    }

    pub fn context(&self) -> &Context {
        self.pd().context()
    }

    pub fn obj(&self) -> &devx::Obj {
        self.shared.owned.obj()
    }

    pub fn send_cqn(&self) -> u32 {
        self.shared.owned.deps().send_cq.cqn()
    }

    pub fn recv_cqn(&self) -> u32 {
        self.shared.owned.deps().recv_cq.cqn()
    }

    /// The send CQ, and the receive CQ if it is another.
    pub(crate) fn cqs(&self) -> impl Iterator<Item = &Arc<CqShared>> {
        let deps = self.shared.owned.deps();
        let recv = (!Arc::ptr_eq(&deps.send_cq, &deps.recv_cq)).then_some(&deps.recv_cq);
        std::iter::once(&deps.send_cq).chain(recv)
    }

    pub fn srqn(&self) -> Option<u32> {
        self.shared.owned.deps().srq.as_ref().map(|s| s.srqn())
    }

    /// The UAR this QP's send doorbells go through.
    pub fn uar(&self) -> &Arc<Uar> {
        &self.shared.owned.deps().uar
    }

    fn queue_memory(&self, q: &Queue) -> QueueMemory {
        let deps = self.shared.owned.deps();
        QueueMemory {
            addr: deps.buf.addr() + q.offset,
            len: q.bytes(),
            entries: q.wqe_cnt,
            stride: 1 << q.wqe_shift,
            doorbell_record: deps.dbr.addr(),
        }
    }

    /// The send queue: WQEBBs of 64 bytes after the RQ in the QP buffer. The
    /// doorbell record's second be32 is the SND counter.
    pub fn send_queue_memory(&self) -> QueueMemory {
        self.queue_memory(&self.sq)
    }

    /// The receive queue at the start of the QP buffer (empty with an SRQ or
    /// without receives). The doorbell record's first be32 is the RCV counter.
    pub fn recv_queue_memory(&self) -> QueueMemory {
        self.queue_memory(&self.rq)
    }

    pub(crate) fn shared(&self) -> &Arc<QpShared> {
        &self.shared
    }

    /// `ibv_destroy_qp`: fails with `Busy` while multicast attachments hold it,
    /// or with the device's refusal; the QP comes back alive.
    pub fn destroy(self) -> Result<(), DestroyError<Qp>> {
        const VERB: &str = "destroy_qp";
        let Qp {
            shared,
            cap,
            sq_sig_all,
            state,
            port,
            buf_addr,
            rq,
            sq,
            sq_wqe_size,
            dp,
        } = self;
        let rebuild = |shared| Qp {
            shared,
            cap,
            sq_sig_all,
            state,
            port,
            buf_addr,
            rq,
            sq,
            sq_wqe_size,
            dp,
        };
        let inner = match sole(shared, VERB, "queue pair") {
            Ok(inner) => inner,
            Err((shared, err)) => return Err(DestroyError::new(rebuild(shared), err)),
        };
        let QpShared { owned, qp_type } = inner;
        owned.destroy().map_err(|refused| {
            let (owned, source) = *refused;
            DestroyError::new(
                rebuild(Arc::new(QpShared { owned, qp_type })),
                Error::Device { verb: VERB, source },
            )
        })
    }
}
