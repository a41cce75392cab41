//! CREATE_QP with UMEM-backed queues (prm-guide §3.4, the PYB RC recipe).

use std::sync::atomic::AtomicU8;
use std::sync::Arc;

use devx::CmdComp;
use prm_layouts::enums::{Opcode, QpState};
use prm_layouts::{CreateQpIn, CreateQpOut};

use super::geometry::{compute, RqKind};
use super::{Qp, QpDeps, QpInit, QpShared};
use crate::datapath::{Layout, QpDataPath};
use crate::error::{Error, Result, VerbResult};
use crate::exec::{self, Exec};
use crate::pd::Pd;
use crate::util::{queue_memory, DoorbellRecord, Owned};

/// `qpc.pm_state`: migrated (no alternate path armed).
pub(crate) const PM_STATE_MIGRATED: u8 = 3;
/// `qpc.ts_format`: the device's default timestamp format.
const TS_FORMAT_DEFAULT: u8 = 1;

impl Qp {
    /// `ibv_create_qp`. Checks the capacities against the device, then issues
    /// UMEM_REG (RQ+SQ buffer), UMEM_REG (doorbell record), UAR allocation
    /// unless one is given, and CREATE_QP; a failure at any step releases what
    /// the earlier steps made.
    pub fn create(pd: &Pd, init: &QpInit) -> Result<Qp> {
        exec::now(Qp::build(pd, init, Exec::Now))
    }

    /// [`Qp::create`] with its commands queued on `comp`. Dropping the
    /// future releases what the earlier steps made and cancels the step in
    /// flight: nothing is left behind.
    pub async fn create_async(pd: &Pd, init: &QpInit, comp: &CmdComp) -> Result<Qp> {
        Qp::build(pd, init, Exec::Queued(comp)).await
    }

    /// The one description of `ibv_create_qp`, for both forms.
    async fn build(pd: &Pd, init: &QpInit, exec: Exec<'_>) -> Result<Qp> {
        const VERB: &str = "create_qp";
        let ctx = pd.context();
        for (what, c) in [("send CQ", &init.send_cq), ("receive CQ", &init.recv_cq)] {
            if !c.context().same_as(ctx) {
                return Err(Error::argument(
                    VERB,
                    format!("the {what} belongs to another context"),
                ));
            }
        }
        if let Some(srq) = &init.srq {
            if !srq.context().same_as(ctx) {
                return Err(Error::argument(VERB, "the SRQ belongs to another context"));
            }
        }
        let caps = ctx.caps();
        let supported = match init.qp_type {
            super::QpType::Rc => caps.rc(),
            super::QpType::Uc => caps.uc(),
            super::QpType::Ud => caps.ud(),
        };
        if supported == 0 {
            return Err(Error::unsupported(
                VERB,
                format!("the device does not offer {:?} QPs", init.qp_type),
            ));
        }
        let rq_kind = match (&init.srq, init.cap.max_recv_wr) {
            (Some(_), _) => RqKind::Srq,
            (None, 0) => RqKind::None,
            (None, _) => RqKind::Own,
        };
        let geo = compute(init.qp_type, &init.cap, rq_kind, &ctx.limits())
            .map_err(|m| Error::argument(VERB, m))?;

        let mem = queue_memory(VERB, geo.buf_len())?;
        let buf = exec
            .register(ctx.devx(), mem, devx::access::LOCAL_WRITE)
            .await
            .verb(VERB)?;
        let dbr = DoorbellRecord::new(VERB, ctx.devx(), exec).await?;
        // A UAR of its own: the QP rings its BlueFlame register alone, with
        // no lock. A given UAR may be given to other QPs too: they take turns
        // under its lock (see `datapath::Doorbell`).
        let dedicated = init.uar.is_none();
        let uar = match &init.uar {
            Some(u) => {
                u.blue_flame().share().verb(VERB)?;
                u.clone()
            }
            None => {
                let u = exec.alloc_uar(ctx.devx()).await.verb(VERB)?;
                u.blue_flame().dedicate().verb(VERB)?;
                Arc::new(u)
            }
        };

        let mut inbox = CreateQpIn::new();
        inbox.set_opcode(Opcode::CreateQp.raw());
        let qpc = inbox.qpc_mut();
        qpc.set_st(init.qp_type.service_type().raw());
        qpc.set_pm_state(PM_STATE_MIGRATED);
        qpc.set_pd(pd.pdn());
        qpc.set_uar_page(uar.page_id());
        qpc.set_ts_format(TS_FORMAT_DEFAULT);
        qpc.set_log_page_size(0);
        qpc.set_page_offset(0);
        qpc.set_rq_type(geo.rq_kind.rq_type());
        if geo.rq_kind == RqKind::Own {
            qpc.set_log_rq_size(geo.rq.log_cnt() as u8);
            qpc.set_log_rq_stride((geo.rq.wqe_shift - 4) as u8);
        }
        if let Some(srq) = &init.srq {
            qpc.set_srqn_rmpn_xrqn(srq.srqn());
        }
        qpc.set_no_sq(0);
        qpc.set_log_sq_size(geo.sq.log_cnt() as u8);
        qpc.set_cqn_snd(init.send_cq.cqn());
        qpc.set_cqn_rcv(init.recv_cq.cqn());
        qpc.set_dbr_umem_valid(1);
        qpc.set_dbr_umem_id(dbr.umem_id());
        qpc.set_dbr_addr(0);
        inbox.set_wq_umem_id(buf.id());
        inbox.set_wq_umem_offset(0);
        inbox.set_wq_umem_valid(1);
        let obj = exec
            .create(ctx.devx(), inbox.as_bytes(), CreateQpOut::SIZE_BYTES)
            .await
            .verb(VERB)?;
        let events = ctx.subscribe_async(
            VERB,
            &obj,
            crate::async_event::Subscriber::Qp,
            init.events.as_ref(),
        )?;

        let buf_addr = buf.addr();
        let layout = Layout {
            buf_addr,
            sq: geo.sq,
            rq: geo.rq,
            cap: geo.cap(),
            dbr_addr: dbr.addr(),
        };
        let dp = QpDataPath::attach(init, obj.id(), uar.clone(), dedicated, layout);
        let deps = QpDeps {
            buf,
            dbr,
            uar,
            pd: pd.clone(),
            send_cq: init.send_cq.clone(),
            recv_cq: init.recv_cq.clone(),
            srq: init.srq.clone(),
            _events: events,
        };
        Ok(Qp {
            shared: Arc::new(QpShared {
                owned: Owned::new(obj, deps),
                qp_type: init.qp_type,
            }),
            cap: geo.cap(),
            sq_sig_all: init.sq_sig_all,
            state: AtomicU8::new(QpState::Rst.raw()),
            port: AtomicU8::new(0),
            buf_addr,
            rq: geo.rq,
            sq: geo.sq,
            sq_wqe_size: geo.sq_wqe_size,
            dp,
        })
    }
}

impl Pd {
    /// `ibv_create_qp`.
    pub fn create_qp(&self, init: &QpInit) -> Result<Qp> {
        Qp::create(self, init)
    }

    /// [`Qp::create_async`].
    pub async fn create_qp_async(&self, init: &QpInit, comp: &CmdComp) -> Result<Qp> {
        Qp::create_async(self, init, comp).await
    }
}
