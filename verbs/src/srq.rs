//! Shared receive queues as RMPs. Legacy CREATE_SRQ has no UMEM fields, so
//! DEVX users (and the mlx5 kernel driver at ISSI 1) build basic SRQs from
//! RMP objects: a linked-list WQ in a UMEM, with a doorbell record UMEM.

use std::fmt;
use std::sync::Arc;

use devx::{CmdComp, Umem};
use memmap2::MmapMut;
use prm_layouts::enums::Opcode;
use prm_layouts::{
    CreateRmpIn, CreateRmpOut, ModifyRmpIn, ModifyRmpOut, QueryRmpIn, QueryRmpOut, WqeSrqNextSeg,
};

use crate::async_event::{EventHandler, HandlerEntry};
use crate::context::Context;
use crate::datapath::SrqTrack;
use crate::error::{DestroyError, Error, Result, VerbResult};
use crate::exec::{self, Exec};
use crate::pd::Pd;
use crate::util::{
    log2, outbox, pow2_at_least, queue_memory, sole, DoorbellRecord, Owned, QueueMemory,
};

/// `rmpc.state` RDY.
const RMP_STATE_RDY: u8 = 1;
/// `wq.wq_type`: linked list (SRQ WQEs chain through their next segment).
const WQ_TYPE_LINKED_LIST: u8 = 0;
/// SRQ WQEs are at least 32 bytes: next segment plus one data segment.
const MIN_WQE: u32 = 32;

/// Attributes of a new SRQ (`ibv_srq_init_attr`).
#[derive(Debug, Clone)]
pub struct SrqInit {
    pub max_wr: u32,
    pub max_sge: u32,
    /// Limit event threshold (LWM); 0 disarms it. Armed, the SRQ reports
    /// `SrqLimitReached` once when its posted receives drop below it.
    pub srq_limit: u32,
    /// Where this SRQ's async events go instead of the context's queue.
    pub events: Option<EventHandler>,
}

impl SrqInit {
    pub fn new(max_wr: u32, max_sge: u32) -> SrqInit {
        SrqInit {
            max_wr,
            max_sge,
            srq_limit: 0,
            events: None,
        }
    }

    /// Arms the limit event at `srq_limit` (see [`SrqInit::srq_limit`]).
    pub fn limit(mut self, srq_limit: u32) -> SrqInit {
        self.srq_limit = srq_limit;
        self
    }

    /// Sends this SRQ's async events to `handler`.
    pub fn events(mut self, handler: EventHandler) -> SrqInit {
        self.events = Some(handler);
        self
    }
}

/// What QUERY_RMP reports (`ibv_srq_attr` plus the state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
    /// `rmpc.state`: 1 ready, 3 error.
    pub state: u8,
}

pub(crate) struct SrqDeps {
    buf: Umem<MmapMut>,
    dbr: DoorbellRecord,
    pd: Pd,
    /// Its entry in the context's event dispatch table, if it has a handler.
    _events: Option<HandlerEntry>,
}

pub(crate) struct SrqShared {
    owned: Owned<SrqDeps>,
    /// Outstanding receives, shared with the CQs that complete them.
    pub(crate) track: Arc<SrqTrack>,
}

impl SrqShared {
    pub(crate) fn srqn(&self) -> u32 {
        self.owned.id()
    }

    pub(crate) fn context(&self) -> &Context {
        self.owned.deps().pd.context()
    }
}

/// A shared receive queue (`ibv_srq`). QPs that receive from it keep it alive.
pub struct Srq {
    shared: Arc<SrqShared>,
    max_wr: u32,
    max_sge: u32,
    /// Ring start, stride and size for the data path.
    pub(crate) buf_addr: usize,
    pub(crate) wqe_shift: u32,
    pub(crate) wqe_cnt: u32,
    /// Posted WQEs (free running) and the free-list head, for the data path.
    pub(crate) head: u32,
    pub(crate) counter: u32,
}

impl fmt::Debug for Srq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Srq({:#x}, {} WRs)", self.srqn(), self.max_wr)
    }
}

impl Srq {
    /// `ibv_create_srq`: UMEM_REG (ring), UMEM_REG (doorbell record),
    /// CREATE_RMP; a failure at any step releases what the earlier steps made.
    pub fn create(pd: &Pd, init: &SrqInit) -> Result<Srq> {
        exec::now(Srq::build(pd, init, Exec::Now))
    }

    /// [`Srq::create`] with its commands queued on `comp`. Dropping the
    /// future releases what the earlier steps made and cancels the step in
    /// flight: nothing is left behind.
    pub async fn create_async(pd: &Pd, init: &SrqInit, comp: &CmdComp) -> Result<Srq> {
        Srq::build(pd, init, Exec::Queued(comp)).await
    }

    /// The one description of `ibv_create_srq`, for both forms.
    async fn build(pd: &Pd, init: &SrqInit, exec: Exec<'_>) -> Result<Srq> {
        const VERB: &str = "create_srq";
        let ctx = pd.context();
        let l = ctx.limits();
        if init.max_wr == 0 {
            return Err(Error::argument(VERB, "max_wr must be at least 1"));
        }
        if init.max_wr > l.max_srq_wr {
            return Err(Error::argument(
                VERB,
                format!(
                    "max_wr {} exceeds the device's {}",
                    init.max_wr, l.max_srq_wr
                ),
            ));
        }
        if init.max_sge > l.max_srq_sge {
            return Err(Error::argument(
                VERB,
                format!(
                    "max_sge {} exceeds the device's {}",
                    init.max_sge, l.max_srq_sge
                ),
            ));
        }
        if init.srq_limit > init.max_wr || init.srq_limit > 0xffff {
            return Err(Error::argument(
                VERB,
                format!("srq_limit {} exceeds max_wr", init.srq_limit),
            ));
        }
        let wqe = pow2_at_least((16 + init.max_sge.max(1) * 16).max(MIN_WQE))
            .ok_or_else(|| Error::argument(VERB, "WQE size overflows"))?;
        if wqe > l.max_wqe_sz_rq.max(MIN_WQE) {
            return Err(Error::argument(
                VERB,
                format!("{wqe}-byte WQEs exceed the device's {}", l.max_wqe_sz_rq),
            ));
        }
        // The linked list keeps one WQE unused.
        let n = pow2_at_least(init.max_wr + 1)
            .ok_or_else(|| Error::argument(VERB, "max_wr overflows"))?;

        let mut mem = queue_memory(VERB, n as usize * wqe as usize)?;
        for (i, w) in mem.chunks_exact_mut(wqe as usize).enumerate() {
            if let Some(next) = WqeSrqNextSeg::from_slice_mut(w) {
                next.set_next_wqe_index(((i as u32 + 1) & (n - 1)) as u16);
            }
        }
        let buf = exec
            .register(ctx.devx(), mem, devx::access::LOCAL_WRITE)
            .await
            .verb(VERB)?;
        let dbr = DoorbellRecord::new(VERB, ctx.devx(), exec).await?;

        let mut inbox = CreateRmpIn::new();
        inbox.set_opcode(Opcode::CreateRmp.raw());
        let rmpc = inbox.ctx_mut();
        rmpc.set_state(RMP_STATE_RDY);
        let wq = rmpc.wq_mut();
        wq.set_wq_type(WQ_TYPE_LINKED_LIST);
        wq.set_pd(pd.pdn());
        wq.set_log_wq_stride(log2(wqe) as u8);
        wq.set_log_wq_sz(log2(n) as u8);
        wq.set_log_wq_pg_sz(0);
        wq.set_lwm(init.srq_limit as u16);
        wq.set_dbr_umem_valid(1);
        wq.set_wq_umem_valid(1);
        wq.set_dbr_umem_id(dbr.umem_id());
        wq.set_dbr_addr(0);
        wq.set_wq_umem_id(buf.id());
        wq.set_wq_umem_offset(0);
        let obj = exec
            .create(ctx.devx(), inbox.as_bytes(), CreateRmpOut::SIZE_BYTES)
            .await
            .verb(VERB)?;
        let events = ctx.subscribe_async(
            VERB,
            &obj,
            crate::async_event::Subscriber::Srq,
            init.events.as_ref(),
        )?;

        let buf_addr = buf.addr();
        let deps = SrqDeps {
            buf,
            dbr,
            pd: pd.clone(),
            _events: events,
        };
        Ok(Srq {
            shared: Arc::new(SrqShared {
                owned: Owned::new(obj, deps),
                track: Arc::new(SrqTrack::new(n)),
            }),
            max_wr: n - 1,
            max_sge: (wqe - 16) / 16,
            buf_addr,
            wqe_shift: log2(wqe),
            wqe_cnt: n,
            head: 0,
            counter: 0,
        })
    }

    /// The RMP number; QPs name it in `srqn_rmpn_xrqn`.
    pub fn srqn(&self) -> u32 {
        self.shared.srqn()
    }

    /// Receive requests that fit (at least what was asked).
    pub fn max_wr(&self) -> u32 {
        self.max_wr
    }

    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    pub fn pd(&self) -> &Pd {
        &self.shared.owned.deps().pd
    }

    pub fn obj(&self) -> &devx::Obj {
        self.shared.owned.obj()
    }

    pub(crate) fn shared(&self) -> &Arc<SrqShared> {
        &self.shared
    }

    /// The linked-list WQE ring; the doorbell record's first be32 counts
    /// posted WQEs.
    pub fn memory(&self) -> QueueMemory {
        let deps = self.shared.owned.deps();
        QueueMemory {
            addr: deps.buf.addr(),
            len: deps.buf.len(),
            entries: self.wqe_cnt,
            stride: 1 << self.wqe_shift,
            doorbell_record: deps.dbr.addr(),
        }
    }

    /// `ibv_query_srq`: QUERY_RMP.
    pub fn query(&self) -> Result<SrqAttr> {
        const VERB: &str = "query_srq";
        let mut inbox = QueryRmpIn::new();
        inbox.set_opcode(Opcode::QueryRmp.raw());
        inbox.set_rmpn(self.srqn());
        let out = self
            .obj()
            .query(inbox.as_bytes(), QueryRmpOut::SIZE_BYTES)
            .verb(VERB)?;
        let out: &QueryRmpOut = outbox(VERB, "QUERY_RMP", &out)?;
        let rmpc = out.rmp_context();
        let wq = rmpc.wq();
        let stride = 1u32 << wq.log_wq_stride().min(31);
        Ok(SrqAttr {
            max_wr: (1u32 << wq.log_wq_sz().min(31)) - 1,
            max_sge: stride.saturating_sub(16) / 16,
            srq_limit: u32::from(wq.lwm()),
            state: rmpc.state(),
        })
    }

    /// `ibv_modify_srq(IBV_SRQ_LIMIT)`: MODIFY_RMP with the LWM bit selected.
    /// Arms the limit event: the SRQ reports `SrqLimitReached` once when its
    /// posted receives drop below `srq_limit` (0 disarms it).
    pub fn modify_limit(&self, srq_limit: u32) -> Result<()> {
        exec::now(self.modify_limit_with(srq_limit, Exec::Now))
    }

    /// [`Srq::modify_limit`] with its MODIFY_RMP queued on `comp`.
    pub async fn modify_limit_async(&self, srq_limit: u32, comp: &CmdComp) -> Result<()> {
        self.modify_limit_with(srq_limit, Exec::Queued(comp)).await
    }

    async fn modify_limit_with(&self, srq_limit: u32, exec: Exec<'_>) -> Result<()> {
        const VERB: &str = "modify_srq";
        if srq_limit > self.max_wr {
            return Err(Error::argument(
                VERB,
                format!("srq_limit {srq_limit} exceeds max_wr {}", self.max_wr),
            ));
        }
        let mut inbox = ModifyRmpIn::new();
        inbox.set_opcode(Opcode::ModifyRmp.raw());
        inbox.set_rmp_state(RMP_STATE_RDY);
        inbox.set_rmpn(self.srqn());
        inbox.bitmask_mut().set_lwm(1);
        let rmpc = inbox.ctx_mut();
        rmpc.set_state(RMP_STATE_RDY);
        rmpc.wq_mut().set_lwm(srq_limit as u16);
        exec.modify(self.obj(), inbox.as_bytes(), ModifyRmpOut::SIZE_BYTES)
            .await
            .verb(VERB)?;
        Ok(())
    }

    /// `ibv_modify_srq(IBV_SRQ_MAX_WR)`: mlx5 SRQs cannot be resized.
    pub fn resize(&self, _max_wr: u32) -> Result<()> {
        Err(Error::unsupported(
            "modify_srq",
            "mlx5 SRQs (RMPs) have no resize; create a larger SRQ instead",
        ))
    }

    /// `ibv_destroy_srq`: fails with `Busy` while QPs receive from it, or with
    /// the device's refusal; the SRQ comes back alive.
    pub fn destroy(self) -> Result<(), DestroyError<Srq>> {
        const VERB: &str = "destroy_srq";
        let Srq {
            shared,
            max_wr,
            max_sge,
            buf_addr,
            wqe_shift,
            wqe_cnt,
            head,
            counter,
        } = self;
        let rebuild = |shared| Srq {
            shared,
            max_wr,
            max_sge,
            buf_addr,
            wqe_shift,
            wqe_cnt,
            head,
            counter,
        };
        let inner = match sole(shared, VERB, "shared receive queue") {
            Ok(inner) => inner,
            Err((shared, err)) => return Err(DestroyError::new(rebuild(shared), err)),
        };
        let SrqShared { owned, track } = inner;
        owned.destroy().map_err(|refused| {
            let (owned, source) = *refused;
            DestroyError::new(
                rebuild(Arc::new(SrqShared { owned, track })),
                Error::Device { verb: VERB, source },
            )
        })
    }
}

impl Pd {
    /// `ibv_create_srq`.
    pub fn create_srq(&self, init: &SrqInit) -> Result<Srq> {
        Srq::create(self, init)
    }

    /// [`Srq::create_async`].
    pub async fn create_srq_async(&self, init: &SrqInit, comp: &CmdComp) -> Result<Srq> {
        Srq::create_async(self, init, comp).await
    }
}
