//! The one place that maps opcodes to handlers. Mailbox lengths come from
//! the prm-layouts `*_in` / `*_out` layouts of each opcode.

use prm_layouts::commands;
use prm_layouts::Opcode as Op;

use super::cmd::{Cmd, FwResult};
use super::ext::{counters, flow, general_obj, mcg, srq, tir, wq};
use super::state::State;
use super::{cq, general, mkey, pd, qp, qp_state, uar, umem};

pub(crate) type Handler = fn(&mut State, &Cmd, &mut [u8]) -> FwResult;

/// Which op_mod values a command accepts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OpMods {
    /// op_mod must be zero (most commands).
    Zero,
    /// The handler checks op_mod itself (caps type, general object type).
    Any,
    /// One of these values.
    List(&'static [u16]),
}

impl OpMods {
    pub(crate) fn allows(self, op_mod: u16) -> bool {
        match self {
            OpMods::Zero => op_mod == 0,
            OpMods::Any => true,
            OpMods::List(l) => l.contains(&op_mod),
        }
    }
}

/// A command the firmware implements.
#[derive(Clone, Copy)]
pub(crate) struct CmdDef {
    pub(crate) handler: Handler,
    pub(crate) op_mods: OpMods,
    /// Minimum inbox length (the fixed `*_in` layout).
    pub(crate) in_len: usize,
    /// The fixed `*_out` layout: what the handler fills.
    pub(crate) out_len: usize,
    /// The shortest outbox answered: the header and the command's own
    /// top-level fields. What lies beyond (a context, a capability page)
    /// is cut to the outbox, as firmware does.
    pub(crate) min_out_len: usize,
    /// True for commands with the general-object header, whose bytes 4..6
    /// are vhca_tunnel_id rather than reserved.
    pub(crate) general_header: bool,
}

/// The handler table.
fn handler(opcode: Op) -> Option<(Handler, OpMods)> {
    use OpMods::*;
    Some(match opcode {
        // Device queries.
        Op::QueryHcaCap => (general::query_hca_cap as Handler, Any),
        Op::QueryAdapter => (general::query_adapter, Zero),
        Op::QueryIssi => (general::query_issi, Zero),
        Op::QueryVportState => (general::query_vport_state, List(&[0, 2])),
        Op::QueryNicVportContext => (general::query_nic_vport_context, Zero),
        Op::QueryRoceAddress => (general::query_roce_address, Zero),
        Op::QueryHcaVportContext => (general::query_hca_vport_context, Zero),
        Op::QueryHcaVportGid => (general::query_hca_vport_gid, Zero),
        Op::Nop => (general::nop, Any),
        // Domains and pages.
        Op::AllocPd => (pd::alloc_pd, Zero),
        Op::DeallocPd => (pd::dealloc_pd, Zero),
        Op::AllocTransportDomain => (pd::alloc_td, Zero),
        Op::DeallocTransportDomain => (pd::dealloc_td, Zero),
        Op::AllocXrcd => (pd::alloc_xrcd, Zero),
        Op::DeallocXrcd => (pd::dealloc_xrcd, Zero),
        Op::AllocUar => (uar::alloc, Zero),
        Op::DeallocUar => (uar::dealloc, Zero),
        Op::DestroyUmem => (umem::destroy, Zero),
        // Completion queues.
        Op::CreateCq => (cq::create, Zero),
        Op::DestroyCq => (cq::destroy, Zero),
        Op::QueryCq => (cq::query, Zero),
        Op::ModifyCq => (cq::modify, List(&[0, cq::OP_MOD_RESIZE])),
        // Queue pairs.
        Op::CreateQp => (qp::create, Zero),
        Op::DestroyQp => (qp::destroy, Zero),
        Op::QueryQp => (qp::query, Zero),
        Op::Rst2initQp
        | Op::Init2initQp
        | Op::Init2rtrQp
        | Op::Rtr2rtsQp
        | Op::Rts2rtsQp
        | Op::Sqerr2rtsQp
        | Op::SqdRtsQp
        | Op::Qp2Err
        | Op::Qp2Rst => (qp_state::transition, Zero),
        // Memory keys.
        Op::CreateMkey => (mkey::create, Zero),
        Op::QueryMkey => (mkey::query, Zero),
        Op::DestroyMkey => (mkey::destroy, Zero),
        _ => return ext_handler(opcode),
    })
}

/// Extension families: SRQ/RMP/XRC_SRQ, SQ/RQ, TIR/TIS/RQT, flow steering,
/// counters, general objects, multicast.
fn ext_handler(opcode: Op) -> Option<(Handler, OpMods)> {
    use OpMods::*;
    Some(match opcode {
        // Shared receive queues.
        Op::CreateSrq => (srq::create_srq as Handler, Zero),
        Op::DestroySrq => (srq::destroy_srq, Zero),
        Op::QuerySrq => (srq::query_srq, Zero),
        Op::ArmRq => (srq::arm_rq, List(&[1])),
        Op::CreateXrcSrq => (srq::create_xrc_srq, Zero),
        Op::DestroyXrcSrq => (srq::destroy_xrc_srq, Zero),
        Op::QueryXrcSrq => (srq::query_xrc_srq, Zero),
        Op::ArmXrcSrq => (srq::arm_xrc_srq, List(&[1])),
        Op::CreateRmp => (srq::create_rmp, Zero),
        Op::ModifyRmp => (srq::modify_rmp, Zero),
        Op::DestroyRmp => (srq::destroy_rmp, Zero),
        Op::QueryRmp => (srq::query_rmp, Zero),
        // Ethernet work queues.
        Op::CreateSq => (wq::create_sq, Zero),
        Op::ModifySq => (wq::modify_sq, Zero),
        Op::DestroySq => (wq::destroy_sq, Zero),
        Op::QuerySq => (wq::query_sq, Zero),
        Op::CreateRq => (wq::create_rq, Zero),
        Op::ModifyRq => (wq::modify_rq, Zero),
        Op::DestroyRq => (wq::destroy_rq, Zero),
        Op::QueryRq => (wq::query_rq, Zero),
        // TIR, TIS, RQT.
        Op::CreateTir => (tir::create_tir, Zero),
        Op::ModifyTir => (tir::modify_tir, Zero),
        Op::DestroyTir => (tir::destroy_tir, Zero),
        Op::QueryTir => (tir::query_tir, Zero),
        Op::CreateTis => (tir::create_tis, Zero),
        Op::ModifyTis => (tir::modify_tis, Zero),
        Op::DestroyTis => (tir::destroy_tis, Zero),
        Op::QueryTis => (tir::query_tis, Zero),
        Op::CreateRqt => (tir::create_rqt, Zero),
        Op::ModifyRqt => (tir::modify_rqt, Zero),
        Op::DestroyRqt => (tir::destroy_rqt, Zero),
        Op::QueryRqt => (tir::query_rqt, Zero),
        // Flow steering.
        Op::CreateFlowTable => (flow::create_table, Zero),
        Op::DestroyFlowTable => (flow::destroy_table, Zero),
        Op::QueryFlowTable => (flow::query_table, Zero),
        Op::CreateFlowGroup => (flow::create_group, Zero),
        Op::DestroyFlowGroup => (flow::destroy_group, Zero),
        Op::QueryFlowGroup => (flow::query_group, Zero),
        Op::SetFlowTableEntry => (flow::set_entry, List(&[0, 1])),
        Op::QueryFlowTableEntry => (flow::query_entry, Zero),
        Op::DeleteFlowTableEntry => (flow::delete_entry, Zero),
        // Counters.
        Op::AllocQCounter => (counters::alloc_q_counter, Zero),
        Op::DeallocQCounter => (counters::dealloc_q_counter, Zero),
        Op::QueryQCounter => (counters::query_q_counter, Zero),
        Op::AllocFlowCounter => (counters::alloc_flow_counter, Zero),
        Op::DeallocFlowCounter => (counters::dealloc_flow_counter, Zero),
        Op::QueryFlowCounter => (counters::query_flow_counter, Zero),
        // General objects and multicast.
        Op::CreateGeneralObject
        | Op::ModifyGeneralObject
        | Op::QueryGeneralObject
        | Op::DestroyGeneralObject => (general_obj::command, Any),
        Op::AttachToMcg => (mcg::attach, Zero),
        Op::DetachFromMcg => (mcg::detach, Zero),
        _ => return None,
    })
}

/// The definition of `opcode`, or `None` when the firmware does not know it.
#[inline]
pub(crate) fn lookup(opcode: u16) -> Option<CmdDef> {
    let (handler, op_mods) = handler(Op::from_raw(opcode)?)?;
    let (inp, outp) = prm_layouts::mailbox_layouts(opcode)?;
    Some(CmdDef {
        handler,
        op_mods,
        in_len: (inp.size_bits / 8) as usize,
        out_len: (outp.size_bits / 8) as usize,
        min_out_len: min_out_len(outp),
        // Commands on typed (general) objects carry the general object header.
        general_header: commands::command_any(opcode)
            .and_then(|c| c.object)
            .is_some_and(|o| o.typed),
    })
}

/// Status and syndrome plus the command-specific output dwords: every
/// command's outbox has at least this much.
const OUT_HEADER_BYTES: usize = 16;

/// The header and every top-level field of `outp` (rounded up to a dword);
/// nested structures and arrays are the part firmware truncates.
fn min_out_len(outp: &prm_layouts::LayoutMeta) -> usize {
    let end_bits = outp
        .fields
        .iter()
        .filter(|f| !f.name.contains(['.', '[']))
        .map(|f| f.offset_bits + f.width_bits)
        .max()
        .unwrap_or(0);
    let bytes = (end_bits as usize).div_ceil(32) * 4;
    bytes
        .max(OUT_HEADER_BYTES)
        .min((outp.size_bits / 8) as usize)
}
