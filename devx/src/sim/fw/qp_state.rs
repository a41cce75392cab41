//! The QP state machine: the nine transition commands (prm-guide §4).
//!
//! Each transition has a source state, a target state, the qpc fields it
//! always takes from the inbox (mandatory, per service type) and the optional
//! fields an `opt_param_mask` bit may carry (the kernel's `opt_mask` table).
//! Fields are named by their PRM path and copied bit for bit, so QUERY_QP
//! returns exactly what was set.

use std::sync::OnceLock;

use prm_layouts::{FieldKind, Opcode as Op, Qpc, Rst2initQpIn};

use super::cmd::{ensure, Cmd, FwResult};
use super::qp::{self, st, state};
use super::state::State;
use crate::sim::syndrome;

/// `opt_param_mask` bits (`MLX5_QP_OPTPAR_*`).
pub(crate) mod opt {
    pub(crate) const ALT_ADDR_PATH: u32 = 1 << 0;
    pub(crate) const RRE: u32 = 1 << 1;
    pub(crate) const RAE: u32 = 1 << 2;
    pub(crate) const RWE: u32 = 1 << 3;
    pub(crate) const PKEY_INDEX: u32 = 1 << 4;
    pub(crate) const Q_KEY: u32 = 1 << 5;
    pub(crate) const RNR_TIMEOUT: u32 = 1 << 6;
    pub(crate) const PRIMARY_ADDR_PATH: u32 = 1 << 7;
    pub(crate) const SRA_MAX: u32 = 1 << 8;
    pub(crate) const RRA_MAX: u32 = 1 << 9;
    pub(crate) const PM_STATE: u32 = 1 << 10;
    pub(crate) const RETRY_COUNT: u32 = 1 << 12;
    pub(crate) const RNR_RETRY: u32 = 1 << 13;
    pub(crate) const ACK_TIMEOUT: u32 = 1 << 14;
    pub(crate) const LAG_TX_AFF: u32 = 1 << 15;
    pub(crate) const PRI_PORT: u32 = 1 << 16;
    pub(crate) const SRQN: u32 = 1 << 18;
    pub(crate) const CQN_RCV: u32 = 1 << 19;
    pub(crate) const COUNTER_SET_ID: u32 = 1 << 25;
}

/// qpc fields carried by each optional parameter bit.
fn fields_of_bit(bit: u32) -> &'static [&'static str] {
    match bit {
        opt::ALT_ADDR_PATH => &["secondary_address_path."],
        opt::RRE => &["rre"],
        opt::RAE => &["rae", "atomic_mode"],
        opt::RWE => &["rwe"],
        opt::PKEY_INDEX => &["primary_address_path.pkey_index"],
        opt::Q_KEY => &["q_key"],
        opt::RNR_TIMEOUT => &["min_rnr_nak"],
        opt::PRIMARY_ADDR_PATH => &["primary_address_path."],
        opt::SRA_MAX => &["log_sra_max"],
        opt::RRA_MAX => &["log_rra_max"],
        opt::PM_STATE => &["pm_state"],
        opt::RETRY_COUNT => &["retry_count"],
        opt::RNR_RETRY => &["rnr_retry"],
        opt::ACK_TIMEOUT => &["primary_address_path.ack_timeout"],
        opt::LAG_TX_AFF => &["lag_tx_port_affinity"],
        opt::PRI_PORT => &["primary_address_path.vhca_port_num"],
        opt::SRQN => &["srqn_rmpn_xrqn"],
        opt::CQN_RCV => &["cqn_rcv"],
        opt::COUNTER_SET_ID => &["counter_set_id"],
        _ => &[],
    }
}

/// One transition command.
struct Transition {
    opcode: Op,
    /// Source states; empty = any state.
    from: &'static [u8],
    to: u8,
}

const TRANSITIONS: &[Transition] = &[
    Transition {
        opcode: Op::Rst2initQp,
        from: &[state::RST],
        to: state::INIT,
    },
    Transition {
        opcode: Op::Init2initQp,
        from: &[state::INIT],
        to: state::INIT,
    },
    Transition {
        opcode: Op::Init2rtrQp,
        from: &[state::INIT],
        to: state::RTR,
    },
    Transition {
        opcode: Op::Rtr2rtsQp,
        from: &[state::RTR],
        to: state::RTS,
    },
    Transition {
        opcode: Op::Rts2rtsQp,
        from: &[state::RTS],
        to: state::RTS,
    },
    Transition {
        opcode: Op::Sqerr2rtsQp,
        from: &[state::SQER],
        to: state::RTS,
    },
    Transition {
        opcode: Op::SqdRtsQp,
        from: &[state::SQD],
        to: state::RTS,
    },
    Transition {
        opcode: Op::Qp2Err,
        from: &[],
        to: state::ERR,
    },
    Transition {
        opcode: Op::Qp2Rst,
        from: &[],
        to: state::RST,
    },
];

fn is_connected(service: u8) -> bool {
    matches!(service, st::RC | st::XRC)
}

/// Fields a transition always takes from the inbox.
fn mandatory(opcode: Op, service: u8) -> &'static [&'static str] {
    match (opcode, service) {
        (Op::Rst2initQp, st::RC | st::XRC) => &[
            "primary_address_path.vhca_port_num",
            "primary_address_path.pkey_index",
            "rre",
            "rwe",
            "rae",
            "atomic_mode",
            "pm_state",
            "counter_set_id",
        ],
        (Op::Rst2initQp, st::UC) => &[
            "primary_address_path.vhca_port_num",
            "primary_address_path.pkey_index",
            "rwe",
            "pm_state",
            "counter_set_id",
        ],
        (Op::Rst2initQp, st::UD) => &[
            "primary_address_path.vhca_port_num",
            "primary_address_path.pkey_index",
            "q_key",
            "counter_set_id",
        ],
        (Op::Rst2initQp, _) => &["primary_address_path.vhca_port_num", "counter_set_id"],
        (Op::Init2rtrQp, st::RC | st::XRC) => &[
            "mtu",
            "log_msg_max",
            "remote_qpn",
            "next_rcv_psn",
            "min_rnr_nak",
            "log_rra_max",
            "primary_address_path.",
        ],
        (Op::Init2rtrQp, st::UC) => &[
            "mtu",
            "log_msg_max",
            "remote_qpn",
            "next_rcv_psn",
            "primary_address_path.",
        ],
        (Op::Rtr2rtsQp, st::RC | st::XRC) => &[
            "next_send_psn",
            "retry_count",
            "rnr_retry",
            "primary_address_path.ack_timeout",
            "log_sra_max",
            "log_ack_req_freq",
        ],
        (Op::Rtr2rtsQp, st::UC | st::UD) => &["next_send_psn"],
        _ => &[],
    }
}

/// Optional parameter bits a transition accepts (LNX-qp `opt_mask`, plus
/// the counter set and LAG affinity the device honours everywhere it may).
fn allowed(opcode: Op, service: u8) -> u32 {
    use opt::*;
    let rc = is_connected(service);
    match opcode {
        Op::Init2initQp => match service {
            _ if rc => RRE | RAE | RWE | PKEY_INDEX | PRI_PORT | LAG_TX_AFF | COUNTER_SET_ID,
            st::UC => RWE | PKEY_INDEX | PRI_PORT | LAG_TX_AFF | COUNTER_SET_ID,
            st::UD => PKEY_INDEX | Q_KEY | PRI_PORT | LAG_TX_AFF | COUNTER_SET_ID,
            _ => PRI_PORT | LAG_TX_AFF | COUNTER_SET_ID,
        },
        Op::Init2rtrQp => match service {
            _ if rc => ALT_ADDR_PATH | RRE | RAE | RWE | PKEY_INDEX | LAG_TX_AFF | COUNTER_SET_ID,
            st::UC => ALT_ADDR_PATH | RWE | PKEY_INDEX | LAG_TX_AFF | COUNTER_SET_ID,
            st::UD => PKEY_INDEX | Q_KEY | LAG_TX_AFF | COUNTER_SET_ID,
            _ => LAG_TX_AFF | COUNTER_SET_ID,
        },
        Op::Rtr2rtsQp => match service {
            _ if rc => ALT_ADDR_PATH | RRE | RAE | RWE | PM_STATE | RNR_TIMEOUT | COUNTER_SET_ID,
            st::UC => ALT_ADDR_PATH | RWE | PM_STATE | COUNTER_SET_ID,
            st::UD => Q_KEY | COUNTER_SET_ID,
            _ => COUNTER_SET_ID,
        },
        Op::Rts2rtsQp => match service {
            _ if rc => RRE | RAE | RWE | RNR_TIMEOUT | PM_STATE | ALT_ADDR_PATH | COUNTER_SET_ID,
            st::UC => RWE | PM_STATE | ALT_ADDR_PATH | COUNTER_SET_ID,
            st::UD => Q_KEY | SRQN | CQN_RCV | COUNTER_SET_ID,
            _ => COUNTER_SET_ID,
        },
        Op::Sqerr2rtsQp | Op::SqdRtsQp => match service {
            _ if rc => RNR_TIMEOUT | RWE | RAE | RRE,
            st::UC => RWE,
            st::UD => Q_KEY,
            _ => 0,
        },
        _ => 0,
    }
}

/// A qpc field's position, resolved once from the layout metadata.
#[derive(Clone, Copy)]
struct Span {
    off: u32,
    width: u32,
    bytes: bool,
}

/// Positions of the fields named by `names` (a trailing `.` names every
/// field under that prefix).
fn spans(names: &[&str]) -> Vec<Span> {
    let meta = Qpc::META;
    let mut v = Vec::new();
    for f in meta.fields {
        let hit = names.iter().any(|n| {
            if n.ends_with('.') {
                f.name.starts_with(n)
            } else {
                f.name == *n
            }
        });
        if hit {
            v.push(Span {
                off: f.offset_bits,
                width: f.width_bits,
                bytes: f.kind == FieldKind::Bytes,
            });
        }
    }
    v
}

/// Cache of resolved field sets, keyed by the static name list's address.
fn cached(names: &'static [&'static str]) -> &'static [Span] {
    use std::collections::HashMap;
    use std::sync::Mutex;
    type Cache = Mutex<HashMap<(usize, usize), &'static [Span]>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (names.as_ptr() as usize, names.len());
    let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = map.get(&key) {
        return s;
    }
    let leaked: &'static [Span] = Box::leak(spans(names).into_boxed_slice());
    map.insert(key, leaked);
    leaked
}

fn copy(dst: &mut Qpc, src: &Qpc, spans: &[Span]) {
    for s in spans {
        if s.bytes {
            let (a, n) = ((s.off / 8) as usize, (s.width / 8) as usize);
            dst.0[a..a + n].copy_from_slice(&src.0[a..a + n]);
        } else if let Some(v) = prm_layouts::bits::get(&src.0, s.off, s.width) {
            let _ = prm_layouts::bits::set_masked(&mut dst.0, s.off, s.width, v);
        }
    }
}

/// Checks field values against the profile where a transition sets them.
fn validate(st: &State, service: u8, opcode: Op, new: &Qpc) -> FwResult {
    let p = &st.profile;
    let path = new.primary_address_path();
    ensure(
        u32::from(path.pkey_index()) < p.pkey_entries,
        syndrome::QP_BAD_PKEY,
    )?;
    ensure(path.vhca_port_num() <= p.num_ports, syndrome::BAD_PORT)?;
    ensure(new.pm_state() != 2, syndrome::QP_BAD_PM_STATE)?;
    if opcode == Op::Init2rtrQp && matches!(service, st::RC | st::UC | st::XRC) {
        ensure((1..=5).contains(&new.mtu()), syndrome::QP_BAD_MTU)?;
        ensure(new.log_msg_max() <= p.log_max_msg, syndrome::MSG_TOO_LARGE)?;
        ensure(
            u16::from(path.src_addr_index()) < p.roce_address_table_size,
            syndrome::BAD_GID_INDEX,
        )?;
    }
    ensure(
        new.log_rra_max() <= p.log_max_ra_res_qp,
        syndrome::RA_TOO_LARGE,
    )?;
    ensure(
        new.log_sra_max() <= p.log_max_ra_req_qp,
        syndrome::RA_TOO_LARGE,
    )?;
    Ok(())
}

/// Runs any of the nine transition commands.
pub(crate) fn transition(stt: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let Some(t) = TRANSITIONS.iter().find(|t| t.opcode.raw() == cmd.opcode) else {
        return Err(syndrome::UNKNOWN_OPCODE.into());
    };
    // Every transition names its QP where RST2INIT does.
    let qpn = Rst2initQpIn::META.named("qpn").get_or_zero(cmd.inbox) as u32;
    let cur = stt.qp.owned(qpn, cmd.uid)?.obj.clone();
    let from = cur.state();
    ensure(
        t.from.is_empty() || t.from.contains(&from),
        syndrome::QP_BAD_TRANSITION,
    )?;
    let service = cur.service_type();

    if t.to == state::RST {
        // Reset clears what the transitions set; the objects the QP is
        // attached to (receive CQ, SRQ, counter set) stay as they are.
        let q = &mut stt.qp.owned_mut(qpn, cmd.uid)?.obj;
        let mut next = q.created;
        next.set_cqn_rcv(q.qpc.cqn_rcv());
        next.set_srqn_rmpn_xrqn(q.qpc.srqn_rmpn_xrqn());
        next.set_counter_set_id(q.qpc.counter_set_id());
        q.qpc = next;
        return Ok(());
    }
    if t.to == state::ERR {
        stt.qp
            .owned_mut(qpn, cmd.uid)?
            .obj
            .qpc
            .set_state(state::ERR);
        return Ok(());
    }

    // The 272-byte transition mailboxes share one shape (RST2INIT's).
    let inp = cmd.view::<Rst2initQpIn>()?;
    let mask = inp.opt_param_mask();
    ensure(
        mask & !allowed(t.opcode, service) == 0,
        syndrome::QP_OPT_PARAM,
    )?;
    let src = inp.qpc();
    let mut next = cur.qpc;
    copy(&mut next, src, cached(mandatory(t.opcode, service)));
    for i in 0..32 {
        let bit = 1u32 << i;
        if mask & bit != 0 {
            copy(&mut next, src, cached(fields_of_bit(bit)));
        }
    }
    validate(stt, service, t.opcode, &next)?;

    // References a transition may move: receive CQ, SRQ, counter set.
    let mut obj = cur;
    let old_holds = super::state::Holder::holds(&obj);
    if next.cqn_rcv() != obj.qpc.cqn_rcv() && obj.cqn_rcv.is_some() {
        stt.cq.usable(next.cqn_rcv(), cmd.uid)?;
        obj.cqn_rcv = Some(next.cqn_rcv());
    }
    if next.srqn_rmpn_xrqn() != obj.qpc.srqn_rmpn_xrqn() && obj.srqn.is_some() {
        super::ext::srq::usable_srq(stt, cmd.uid, next.srqn_rmpn_xrqn())?;
        obj.srqn = Some(next.srqn_rmpn_xrqn());
    }
    if next.counter_set_id() != obj.qpc.counter_set_id() {
        obj.counter = qp::counter_ref(stt, cmd.uid, next.counter_set_id())?;
    }
    next.set_state(t.to);
    obj.qpc = next;
    let new_holds = super::state::Holder::holds(&obj);
    stt.hold_all(&new_holds);
    stt.release_all(&old_holds);
    stt.qp.owned_mut(qpn, cmd.uid)?.obj = obj;
    Ok(())
}

/// Moves a QP to `to` on behalf of the data path (send queue errors put it
/// in SQER or ERR); no command checks apply.
pub(crate) fn force_state(stt: &mut State, qpn: u32, to: u8) -> bool {
    match stt.qp.peek_mut(qpn) {
        Some(e) => {
            e.obj.qpc.set_state(to);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transition_names_its_qp_where_rst2init_does() {
        let qpn = Rst2initQpIn::META.named("qpn");
        for t in TRANSITIONS {
            let (inbox, _) = prm_layouts::mailbox_layouts(t.opcode.raw()).unwrap();
            assert_eq!(inbox.field("qpn"), Some(qpn), "{}", t.opcode);
        }
    }

    #[test]
    fn every_named_field_exists_in_qpc() {
        let mut bits = Vec::new();
        for i in 0..32 {
            bits.push(fields_of_bit(1 << i));
        }
        for op in [Op::Rst2initQp, Op::Init2rtrQp, Op::Rtr2rtsQp] {
            for s in [st::RC, st::UC, st::UD, st::RAW] {
                bits.push(mandatory(op, s));
            }
        }
        for names in bits {
            for n in names {
                assert!(!spans(&[n]).is_empty(), "qpc has no field {n}");
            }
        }
    }
}
