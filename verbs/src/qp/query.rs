//! `ibv_query_qp`: QUERY_QP read back into verbs attributes.

use prm_layouts::enums::{Opcode, QpState};
use prm_layouts::{Qpc, QueryQpIn, QueryQpOut};

use super::path;
use super::{Qp, QpCap, QpType};
use crate::access::AccessFlags;
use crate::ah::AhAttr;
use crate::context::LinkLayer;
use crate::error::{Result, VerbResult};
use crate::port::Mtu;
use crate::util::outbox;

/// What the device reports about a QP (`ibv_qp_attr` + `ibv_qp_init_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpAttr {
    pub state: QpState,
    /// The raw `qpc.state` when it names no state the PRM defines.
    pub raw_state: u8,
    /// `None` if the device reports a service type this crate does not create.
    pub qp_type: Option<QpType>,
    pub path_mtu: Option<Mtu>,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub access: AccessFlags,
    pub pkey_index: u16,
    pub port_num: u8,
    pub ah_attr: AhAttr,
    pub max_rd_atomic: u32,
    pub max_dest_rd_atomic: u32,
    pub min_rnr_timer: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub pd: u32,
    pub send_cqn: u32,
    pub recv_cqn: u32,
    /// The SRQ (RMP) number when `rq_type` says the QP receives from one.
    pub srqn: Option<u32>,
    /// What the QP was created with (not a device field).
    pub cap: QpCap,
    pub sq_sig_all: bool,
}

impl Qp {
    /// `ibv_query_qp`: QUERY_QP.
    pub fn query(&self) -> Result<QpAttr> {
        const VERB: &str = "query_qp";
        let mut inbox = QueryQpIn::new();
        inbox.set_opcode(Opcode::QueryQp.raw());
        inbox.set_qpn(self.qpn());
        let out = self
            .obj()
            .query(inbox.as_bytes(), QueryQpOut::SIZE_BYTES)
            .verb(VERB)?;
        let out: &QueryQpOut = outbox(VERB, "QUERY_QP", &out)?;
        let eth = self.context().link_layer() == LinkLayer::Ethernet;
        Ok(QpAttr::from_qpc(
            out.qpc(),
            eth,
            self.cap(),
            self.sq_sig_all(),
        ))
    }
}

impl QpAttr {
    /// The attributes a QUERY_QP's `qpc` reports; `cap` and `sq_sig_all`
    /// are what the QP was created with (no device fields).
    pub fn from_qpc(q: &Qpc, eth: bool, cap: QpCap, sq_sig_all: bool) -> QpAttr {
        let p = q.primary_address_path();
        let mut access = AccessFlags::NONE;
        if q.rre() != 0 {
            access |= AccessFlags::REMOTE_READ;
        }
        if q.rwe() != 0 {
            access |= AccessFlags::REMOTE_WRITE;
        }
        if q.rae() != 0 {
            access |= AccessFlags::REMOTE_ATOMIC;
        }
        let state = QpState::from_raw(q.state());
        QpAttr {
            state: state.unwrap_or(QpState::Err),
            raw_state: q.state(),
            qp_type: QpType::from_st(q.st()),
            path_mtu: Mtu::from_raw(q.mtu()),
            qkey: q.q_key(),
            rq_psn: q.next_rcv_psn(),
            sq_psn: q.next_send_psn(),
            dest_qp_num: q.remote_qpn(),
            access,
            pkey_index: p.pkey_index(),
            port_num: p.vhca_port_num(),
            ah_attr: path::decode(p, eth),
            max_rd_atomic: 1 << q.log_sra_max(),
            max_dest_rd_atomic: 1 << q.log_rra_max(),
            min_rnr_timer: q.min_rnr_nak(),
            timeout: p.ack_timeout(),
            retry_cnt: q.retry_count(),
            rnr_retry: q.rnr_retry(),
            pd: q.pd(),
            send_cqn: q.cqn_snd(),
            recv_cqn: q.cqn_rcv(),
            srqn: (q.rq_type() == 1).then(|| q.srqn_rmpn_xrqn()),
            cap,
            sq_sig_all,
        }
    }
}
