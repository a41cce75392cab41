//! QP state transitions (`ibv_modify_qp`) as one builder per transition, each
//! carrying the attributes that transition takes. The library validates the
//! attributes only; whether the transition is legal is the device's answer.

use std::sync::atomic::Ordering;

use devx::CmdComp;
use prm_layouts::enums::{Opcode, QpState};
use prm_layouts::{Init2rtrQpIn, Qp2errIn, Qp2rstIn, Qpc, Rst2initQpIn, Rtr2rtsQpIn, Rts2rtsQpIn};

use super::create::PM_STATE_MIGRATED;
use super::path;
use super::{Qp, QpType};
use crate::access::AccessFlags;
use crate::ah::AhAttr;
use crate::context::Context;
use crate::error::{Error, Result, VerbResult};
use crate::exec::{self, Exec};
use crate::port::Mtu;
use crate::util::log2_ceil;

/// `opt_param_mask` bits (QPH `MLX5_QP_OPTPAR_*`).
mod opt {
    pub const RRE: u32 = 0x2;
    pub const RAE: u32 = 0x4;
    pub const RWE: u32 = 0x8;
    pub const PKEY_INDEX: u32 = 0x10;
    pub const Q_KEY: u32 = 0x20;
    pub const RNR_TIMEOUT: u32 = 0x40;
}

/// `qpc.atomic_mode` for standard 8-byte verbs atomics (IB compatible).
const ATOMIC_MODE_IB_COMP: u8 = 1;
/// UD QPs run 4096-byte MTU and 4 KiB messages (the kernel's `mtu_msgmax`).
const UD_MTU: Mtu = Mtu::Mtu4096;
const UD_LOG_MSG_MAX: u8 = 12;

/// RST→INIT: port, P_Key index, access rights, and the Q_Key of a UD QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitAttr {
    pub port_num: u8,
    pub pkey_index: u16,
    pub access: AccessFlags,
    /// UD only.
    pub qkey: u32,
}

impl InitAttr {
    pub fn new(port_num: u8) -> InitAttr {
        InitAttr {
            port_num,
            pkey_index: 0,
            access: AccessFlags::NONE,
            qkey: 0,
        }
    }

    pub fn access(mut self, access: AccessFlags) -> InitAttr {
        self.access = access;
        self
    }

    pub fn pkey_index(mut self, i: u16) -> InitAttr {
        self.pkey_index = i;
        self
    }

    pub fn qkey(mut self, qkey: u32) -> InitAttr {
        self.qkey = qkey;
        self
    }
}

/// INIT→RTR: the receive side and, for RC/UC, the remote end and its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttr {
    pub path_mtu: Mtu,
    pub dest_qp_num: u32,
    pub rq_psn: u32,
    /// RC: RDMA reads/atomics this QP answers at once.
    pub max_dest_rd_atomic: u8,
    /// RC: the RNR NAK timer code (0..=31) this QP sends.
    pub min_rnr_timer: u8,
    /// RC/UC: the primary path. `port_num` 0 means the port chosen at INIT.
    pub ah: AhAttr,
    /// Optional: change access rights on the way.
    pub access: Option<AccessFlags>,
    pub pkey_index: Option<u16>,
    /// UD: change the Q_Key.
    pub qkey: Option<u32>,
}

impl RtrAttr {
    /// RC/UC: receive from `dest_qp_num` over `ah`, expecting `rq_psn` first.
    pub fn new(path_mtu: Mtu, dest_qp_num: u32, rq_psn: u32, ah: AhAttr) -> RtrAttr {
        RtrAttr {
            path_mtu,
            dest_qp_num,
            rq_psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah,
            access: None,
            pkey_index: None,
            qkey: None,
        }
    }

    /// UD: no remote end.
    pub fn ud() -> RtrAttr {
        RtrAttr::new(UD_MTU, 0, 0, AhAttr::default())
    }

    pub fn max_dest_rd_atomic(mut self, n: u8) -> RtrAttr {
        self.max_dest_rd_atomic = n;
        self
    }

    pub fn min_rnr_timer(mut self, t: u8) -> RtrAttr {
        self.min_rnr_timer = t;
        self
    }

    pub fn access(mut self, a: AccessFlags) -> RtrAttr {
        self.access = Some(a);
        self
    }
}

/// RTR→RTS: the send side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    pub sq_psn: u32,
    /// RC: local ACK timeout code (4.096 µs · 2^timeout; 0 = infinite).
    pub timeout: u8,
    /// RC: retries on timeout (0..=7).
    pub retry_cnt: u8,
    /// RC: retries on RNR NAK (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// RC: outstanding RDMA reads/atomics this QP initiates.
    pub max_rd_atomic: u8,
    pub min_rnr_timer: Option<u8>,
    pub access: Option<AccessFlags>,
    pub qkey: Option<u32>,
}

impl RtsAttr {
    pub fn new(sq_psn: u32) -> RtsAttr {
        RtsAttr {
            sq_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            min_rnr_timer: None,
            access: None,
            qkey: None,
        }
    }

    pub fn timeout(mut self, t: u8) -> RtsAttr {
        self.timeout = t;
        self
    }

    pub fn retry_cnt(mut self, n: u8) -> RtsAttr {
        self.retry_cnt = n;
        self
    }

    pub fn rnr_retry(mut self, n: u8) -> RtsAttr {
        self.rnr_retry = n;
        self
    }

    pub fn max_rd_atomic(mut self, n: u8) -> RtsAttr {
        self.max_rd_atomic = n;
        self
    }
}

/// RTS→RTS: change what may change while sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RtsModify {
    pub access: Option<AccessFlags>,
    pub min_rnr_timer: Option<u8>,
    pub qkey: Option<u32>,
}

pub(super) fn check_max(verb: &'static str, what: &str, v: u32, max: u32) -> Result<()> {
    if v > max {
        return Err(Error::argument(verb, format!("{what} {v} exceeds {max}")));
    }
    Ok(())
}

macro_rules! modify_inbox {
    ($ty:ty, $op:expr, $qpn:expr, $mask:expr, $qpc:expr) => {{
        let mut m = <$ty>::new();
        m.set_opcode($op.raw());
        m.set_qpn($qpn);
        m.set_opt_param_mask($mask);
        *m.qpc_mut() = *$qpc;
        m.as_bytes().to_vec()
    }};
}

/// The QP a transition is built for: what the inboxes need to know about
/// it. [`Qp`] builds one for itself; a QP whose queues live elsewhere (a
/// program's memory, for the preload library) builds its own and submits
/// the inboxes through its own object.
#[derive(Clone, Copy)]
pub struct QpTarget<'a> {
    pub ctx: &'a Context,
    pub qp_type: QpType,
    pub qpn: u32,
    pub pdn: u32,
    pub send_cqn: u32,
    pub recv_cqn: u32,
    /// The port chosen at INIT (0 before).
    pub port: u8,
}

impl QpTarget<'_> {
    fn qp_type(&self) -> QpType {
        self.qp_type
    }

    fn context(&self) -> &Context {
        self.ctx
    }

    fn qpn(&self) -> u32 {
        self.qpn
    }

    fn port(&self) -> u8 {
        self.port
    }

    /// Fields the kernel sets on every transition: service type, PD,
    /// migration state, and the fixed MTU of UD QPs.
    fn base_qpc(&self) -> Qpc {
        let mut qpc = Qpc::new();
        qpc.set_st(self.qp_type().service_type().raw());
        qpc.set_pd(self.pdn);
        qpc.set_pm_state(PM_STATE_MIGRATED);
        if self.qp_type() == QpType::Ud {
            qpc.set_mtu(UD_MTU as u8);
            qpc.set_log_msg_max(UD_LOG_MSG_MAX);
        }
        qpc
    }

    /// Access rights into `qpc`; the opt_param_mask bits they need.
    fn set_access(&self, verb: &'static str, qpc: &mut Qpc, a: AccessFlags) -> Result<u32> {
        let remote =
            AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        match self.qp_type() {
            QpType::Ud if a.bits() & remote.bits() != 0 => {
                return Err(Error::argument(verb, "UD QPs have no remote access rights"));
            }
            QpType::Uc
                if a.contains(AccessFlags::REMOTE_READ)
                    || a.contains(AccessFlags::REMOTE_ATOMIC) =>
            {
                return Err(Error::argument(verb, "UC QPs allow remote write only"));
            }
            _ => {}
        }
        if a.contains(AccessFlags::REMOTE_ATOMIC) && self.context().caps().atomic() == 0 {
            return Err(Error::unsupported(
                verb,
                "remote atomic access: the device reports no atomic support",
            ));
        }
        qpc.set_rre(u8::from(a.contains(AccessFlags::REMOTE_READ)));
        qpc.set_rwe(u8::from(a.contains(AccessFlags::REMOTE_WRITE)));
        qpc.set_rae(u8::from(a.contains(AccessFlags::REMOTE_ATOMIC)));
        if a.contains(AccessFlags::REMOTE_ATOMIC) {
            qpc.set_atomic_mode(ATOMIC_MODE_IB_COMP);
        }
        Ok(opt::RRE | opt::RWE | opt::RAE)
    }

    fn check_pkey(&self, verb: &'static str, index: u16) -> Result<()> {
        let c = self.context().caps();
        let len: u32 = match self.context().link_layer() {
            crate::context::LinkLayer::Ethernet => 1,
            crate::context::LinkLayer::InfiniBand => 128u32 << c.pkey_table_size().min(16),
        };
        check_max(verb, "pkey_index", u32::from(index), len - 1)
    }

    /// RST→INIT (RST2INIT_QP).
    pub fn init_inbox(&self, attr: &InitAttr) -> Result<Vec<u8>> {
        const VERB: &str = "modify_qp(INIT)";
        self.context().check_port(VERB, attr.port_num)?;
        self.check_pkey(VERB, attr.pkey_index)?;
        let mut qpc = self.base_qpc();
        // RST2INIT takes the access rights as mandatory fields: no opt bits.
        self.set_access(VERB, &mut qpc, attr.access)?;
        let p = qpc.primary_address_path_mut();
        p.set_vhca_port_num(attr.port_num);
        p.set_pkey_index(attr.pkey_index);
        if self.qp_type() == QpType::Ud {
            qpc.set_q_key(attr.qkey);
        }
        qpc.set_cqn_snd(self.send_cqn);
        qpc.set_cqn_rcv(self.recv_cqn);
        let inbox = modify_inbox!(Rst2initQpIn, Opcode::Rst2initQp, self.qpn(), 0, &qpc);
        Ok(inbox)
    }

    /// INIT→RTR (INIT2RTR_QP).
    pub fn rtr_inbox(&self, attr: &RtrAttr) -> Result<Vec<u8>> {
        const VERB: &str = "modify_qp(RTR)";
        let l = self.context().limits();
        let mut qpc = self.base_qpc();
        let mut mask = 0;
        if let Some(a) = attr.access {
            mask |= self.set_access(VERB, &mut qpc, a)?;
        }
        if let Some(i) = attr.pkey_index {
            self.check_pkey(VERB, i)?;
            qpc.primary_address_path_mut().set_pkey_index(i);
            mask |= opt::PKEY_INDEX;
        }
        if self.qp_type() == QpType::Ud {
            if let Some(q) = attr.qkey {
                qpc.set_q_key(q);
                mask |= opt::Q_KEY;
            }
            let inbox = modify_inbox!(Init2rtrQpIn, Opcode::Init2rtrQp, self.qpn(), mask, &qpc);
            return Ok(inbox);
        }
        check_max(VERB, "dest_qp_num", attr.dest_qp_num, 0xff_ffff)?;
        check_max(VERB, "rq_psn", attr.rq_psn, 0xff_ffff)?;
        if self.qp_type() == QpType::Rc {
            check_max(
                VERB,
                "max_dest_rd_atomic",
                u32::from(attr.max_dest_rd_atomic),
                l.max_qp_rd_atom,
            )?;
            check_max(VERB, "min_rnr_timer", u32::from(attr.min_rnr_timer), 31)?;
            qpc.set_log_rra_max(log2_ceil(u32::from(attr.max_dest_rd_atomic)) as u8);
            qpc.set_min_rnr_nak(attr.min_rnr_timer);
        }
        let mut ah = attr.ah;
        if ah.port_num == 0 {
            ah.port_num = self.port();
        }
        // Reads the source GID's table entry: the one command before INIT2RTR.
        let resolved = ah.resolve(self.context(), VERB)?;
        qpc.set_mtu(attr.path_mtu as u8);
        qpc.set_log_msg_max(self.context().caps().log_max_msg());
        qpc.set_remote_qpn(attr.dest_qp_num);
        qpc.set_next_rcv_psn(attr.rq_psn);
        let salt = self.qpn() ^ attr.dest_qp_num;
        path::encode(qpc.primary_address_path_mut(), &ah, &resolved, true, salt);
        let inbox = modify_inbox!(Init2rtrQpIn, Opcode::Init2rtrQp, self.qpn(), mask, &qpc);
        Ok(inbox)
    }

    /// RTR→RTS (RTR2RTS_QP).
    pub fn rts_inbox(&self, attr: &RtsAttr) -> Result<Vec<u8>> {
        const VERB: &str = "modify_qp(RTS)";
        let l = self.context().limits();
        check_max(VERB, "sq_psn", attr.sq_psn, 0xff_ffff)?;
        let mut qpc = self.base_qpc();
        let mut mask = self.optional(VERB, &mut qpc, attr.access, attr.min_rnr_timer, attr.qkey)?;
        qpc.set_next_send_psn(attr.sq_psn);
        if self.qp_type() == QpType::Rc {
            check_max(VERB, "timeout", u32::from(attr.timeout), 31)?;
            check_max(VERB, "retry_cnt", u32::from(attr.retry_cnt), 7)?;
            check_max(VERB, "rnr_retry", u32::from(attr.rnr_retry), 7)?;
            check_max(
                VERB,
                "max_rd_atomic",
                u32::from(attr.max_rd_atomic),
                l.max_qp_init_rd_atom,
            )?;
            qpc.set_retry_count(attr.retry_cnt);
            qpc.set_rnr_retry(attr.rnr_retry);
            qpc.set_log_sra_max(log2_ceil(u32::from(attr.max_rd_atomic)) as u8);
            let p = qpc.primary_address_path_mut();
            p.set_ack_timeout(attr.timeout);
            p.set_vhca_port_num(self.port());
        } else {
            mask &= !opt::RNR_TIMEOUT;
        }
        let inbox = modify_inbox!(Rtr2rtsQpIn, Opcode::Rtr2rtsQp, self.qpn(), mask, &qpc);
        Ok(inbox)
    }

    /// RTS→RTS (RTS2RTS_QP): change access rights, RNR timer or Q_Key.
    pub fn rts_modify_inbox(&self, attr: &RtsModify) -> Result<Vec<u8>> {
        const VERB: &str = "modify_qp(RTS→RTS)";
        let mut qpc = self.base_qpc();
        let mask = self.optional(VERB, &mut qpc, attr.access, attr.min_rnr_timer, attr.qkey)?;
        let inbox = modify_inbox!(Rts2rtsQpIn, Opcode::Rts2rtsQp, self.qpn(), mask, &qpc);
        Ok(inbox)
    }

    fn optional(
        &self,
        verb: &'static str,
        qpc: &mut Qpc,
        access: Option<AccessFlags>,
        min_rnr_timer: Option<u8>,
        qkey: Option<u32>,
    ) -> Result<u32> {
        let mut mask = 0;
        if let Some(a) = access {
            mask |= self.set_access(verb, qpc, a)?;
        }
        if let Some(t) = min_rnr_timer {
            if self.qp_type() != QpType::Rc {
                return Err(Error::argument(
                    verb,
                    "min_rnr_timer applies to RC QPs only",
                ));
            }
            check_max(verb, "min_rnr_timer", u32::from(t), 31)?;
            qpc.set_min_rnr_nak(t);
            mask |= opt::RNR_TIMEOUT;
        }
        if let Some(q) = qkey {
            if self.qp_type() != QpType::Ud {
                return Err(Error::argument(verb, "qkey applies to UD QPs only"));
            }
            qpc.set_q_key(q);
            mask |= opt::Q_KEY;
        }
        Ok(mask)
    }

    /// Any state → ERR (2ERR_QP).
    pub fn err_inbox(&self) -> Vec<u8> {
        let mut m = Qp2errIn::new();
        m.set_opcode(Opcode::Qp2Err.raw());
        m.set_qpn(self.qpn);
        m.as_bytes().to_vec()
    }

    /// Any state → RST (2RST_QP).
    pub fn reset_inbox(&self) -> Vec<u8> {
        let mut m = Qp2rstIn::new();
        m.set_opcode(Opcode::Qp2Rst.raw());
        m.set_qpn(self.qpn);
        m.as_bytes().to_vec()
    }
}

impl Qp {
    /// This QP as a transition target.
    pub fn target(&self) -> QpTarget<'_> {
        QpTarget {
            ctx: self.context(),
            qp_type: self.qp_type(),
            qpn: self.qpn(),
            pdn: self.pd().pdn(),
            send_cqn: self.send_cqn(),
            recv_cqn: self.recv_cqn(),
            port: self.port(),
        }
    }

    /// Runs a transition's mailbox; the QP has reached `reached` once the
    /// firmware accepts it.
    async fn submit(
        &self,
        exec: Exec<'_>,
        verb: &'static str,
        inbox: &[u8],
        reached: QpState,
    ) -> Result<()> {
        exec.modify(self.obj(), inbox, 16).await.verb(verb)?;
        self.set_state(reached);
        Ok(())
    }

    /// RST→INIT (RST2INIT_QP).
    pub fn to_init(&self, attr: &InitAttr) -> Result<()> {
        exec::now(self.to_init_with(attr, Exec::Now))
    }

    /// [`Qp::to_init`] with its MODIFY queued on `comp`. If the future is
    /// dropped before it resolves, whether the QP made the transition is
    /// unknown: [`Qp::query`] tells.
    pub async fn to_init_async(&self, attr: &InitAttr, comp: &CmdComp) -> Result<()> {
        self.to_init_with(attr, Exec::Queued(comp)).await
    }

    pub(super) async fn to_init_with(&self, attr: &InitAttr, exec: Exec<'_>) -> Result<()> {
        let inbox = self.target().init_inbox(attr)?;
        self.submit(exec, "modify_qp(INIT)", &inbox, QpState::Init)
            .await?;
        self.port.store(attr.port_num, Ordering::Relaxed);
        Ok(())
    }

    /// INIT→RTR (INIT2RTR_QP).
    pub fn to_rtr(&self, attr: &RtrAttr) -> Result<()> {
        exec::now(self.to_rtr_with(attr, Exec::Now))
    }

    /// [`Qp::to_rtr`] with its MODIFY queued on `comp`. If the future is
    /// dropped before it resolves, whether the QP made the transition is
    /// unknown: [`Qp::query`] tells.
    pub async fn to_rtr_async(&self, attr: &RtrAttr, comp: &CmdComp) -> Result<()> {
        self.to_rtr_with(attr, Exec::Queued(comp)).await
    }

    pub(super) async fn to_rtr_with(&self, attr: &RtrAttr, exec: Exec<'_>) -> Result<()> {
        let inbox = self.target().rtr_inbox(attr)?;
        self.submit(exec, "modify_qp(RTR)", &inbox, QpState::Rtr)
            .await
    }

    /// RTR→RTS (RTR2RTS_QP).
    pub fn to_rts(&self, attr: &RtsAttr) -> Result<()> {
        exec::now(self.to_rts_with(attr, Exec::Now))
    }

    /// [`Qp::to_rts`] with its MODIFY queued on `comp`. If the future is
    /// dropped before it resolves, whether the QP made the transition is
    /// unknown: [`Qp::query`] tells.
    pub async fn to_rts_async(&self, attr: &RtsAttr, comp: &CmdComp) -> Result<()> {
        self.to_rts_with(attr, Exec::Queued(comp)).await
    }

    pub(super) async fn to_rts_with(&self, attr: &RtsAttr, exec: Exec<'_>) -> Result<()> {
        let inbox = self.target().rts_inbox(attr)?;
        self.submit(exec, "modify_qp(RTS)", &inbox, QpState::Rts)
            .await
    }

    /// RTS→RTS (RTS2RTS_QP): change access rights, RNR timer or Q_Key.
    pub fn modify_rts(&self, attr: &RtsModify) -> Result<()> {
        exec::now(self.modify_rts_with(attr, Exec::Now))
    }

    /// [`Qp::modify_rts`] with its MODIFY queued on `comp`. If the future is
    /// dropped before it resolves, whether the QP made the transition is
    /// unknown: [`Qp::query`] tells.
    pub async fn modify_rts_async(&self, attr: &RtsModify, comp: &CmdComp) -> Result<()> {
        self.modify_rts_with(attr, Exec::Queued(comp)).await
    }

    async fn modify_rts_with(&self, attr: &RtsModify, exec: Exec<'_>) -> Result<()> {
        let inbox = self.target().rts_modify_inbox(attr)?;
        self.submit(exec, "modify_qp(RTS→RTS)", &inbox, QpState::Rts)
            .await
    }

    /// Any state → ERR (2ERR_QP): outstanding requests flush.
    pub fn to_err(&self) -> Result<()> {
        exec::now(self.to_err_with(Exec::Now))
    }

    /// [`Qp::to_err`] with its MODIFY queued on `comp`.
    pub async fn to_err_async(&self, comp: &CmdComp) -> Result<()> {
        self.to_err_with(Exec::Queued(comp)).await
    }

    async fn to_err_with(&self, exec: Exec<'_>) -> Result<()> {
        let inbox = self.target().err_inbox();
        self.submit(exec, "modify_qp(ERR)", &inbox, QpState::Err)
            .await
    }

    /// Any state → RST (2RST_QP). Also rewinds the software queue counters,
    /// hence the exclusive borrow. Completions of the QP still in its CQs
    /// are dropped when a poll reaches them (mlx5's `mlx5_cq_clean` removes
    /// them at the reset, under the CQ's lock; these polls take none), so
    /// none is reported against the work posted after the reset. An SRQ
    /// gets the WQEs of the dropped receives back then.
    pub fn reset(&mut self) -> Result<()> {
        let inbox = self.target().reset_inbox();
        exec::now(self.submit(Exec::Now, "modify_qp(RESET)", &inbox, QpState::Rst))?;
        // The device writes no more completions of the QP: where those
        // still in its CQs end is known now.
        for cq in self.cqs() {
            cq.drop_stale(self.dp.track());
        }
        self.dp.reset();
        Ok(())
    }
}
