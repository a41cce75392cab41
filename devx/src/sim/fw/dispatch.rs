//! The one place that maps opcodes to handlers. Mailbox lengths come from
//! the prm-layouts `*_in` / `*_out` layouts of each opcode.

use super::cmd::{Cmd, FwResult};
use super::ext::{counters, flow, general_obj, mcg, srq, tir, wq};
use super::state::State;
use super::{cq, general, mkey, pd, qp, qp_state, uar, umem};

pub type Handler = fn(&mut State, &Cmd, &mut [u8]) -> FwResult;

/// Which op_mod values a command accepts.
#[derive(Debug, Clone, Copy)]
pub enum OpMods {
    /// op_mod must be zero (most commands).
    Zero,
    /// The handler checks op_mod itself (caps type, general object type).
    Any,
    /// One of these values.
    List(&'static [u16]),
}

impl OpMods {
    pub fn allows(self, op_mod: u16) -> bool {
        match self {
            OpMods::Zero => op_mod == 0,
            OpMods::Any => true,
            OpMods::List(l) => l.contains(&op_mod),
        }
    }
}

/// A command the firmware implements.
#[derive(Clone, Copy)]
pub struct CmdDef {
    pub handler: Handler,
    pub op_mods: OpMods,
    /// Minimum inbox length (the fixed `*_in` layout).
    pub in_len: usize,
    /// The fixed `*_out` layout: what the handler fills.
    pub out_len: usize,
    /// The shortest outbox answered: the header and the command's own
    /// top-level fields. What lies beyond (a context, a capability page)
    /// is cut to the outbox, as firmware does.
    pub min_out_len: usize,
    /// True for commands with the general-object header, whose bytes 4..6
    /// are vhca_tunnel_id rather than reserved.
    pub general_header: bool,
}

/// The handler table.
fn handler(opcode: u16) -> Option<(Handler, OpMods)> {
    use OpMods::*;
    Some(match opcode {
        // Device queries.
        0x100 => (general::query_hca_cap as Handler, Any),
        0x101 => (general::query_adapter, Zero),
        0x10a => (general::query_issi, Zero),
        0x750 => (general::query_vport_state, List(&[0, 2])),
        0x754 => (general::query_nic_vport_context, Zero),
        0x760 => (general::query_roce_address, Zero),
        0x762 => (general::query_hca_vport_context, Zero),
        0x764 => (general::query_hca_vport_gid, Zero),
        0x80d => (general::nop, Any),
        // Domains and pages.
        0x800 => (pd::alloc_pd, Zero),
        0x801 => (pd::dealloc_pd, Zero),
        0x816 => (pd::alloc_td, Zero),
        0x817 => (pd::dealloc_td, Zero),
        0x80e => (pd::alloc_xrcd, Zero),
        0x80f => (pd::dealloc_xrcd, Zero),
        0x802 => (uar::alloc, Zero),
        0x803 => (uar::dealloc, Zero),
        0xa0a => (umem::destroy, Zero),
        // Completion queues.
        0x400 => (cq::create, Zero),
        0x401 => (cq::destroy, Zero),
        0x402 => (cq::query, Zero),
        0x403 => (cq::modify, List(&[0, cq::OP_MOD_RESIZE])),
        // Queue pairs.
        0x500 => (qp::create, Zero),
        0x501 => (qp::destroy, Zero),
        0x50b => (qp::query, Zero),
        0x502 | 0x503 | 0x504 | 0x505 | 0x506 | 0x507 | 0x50a | 0x50c | 0x50e => {
            (qp_state::transition, Zero)
        }
        // Memory keys.
        0x200 => (mkey::create, Zero),
        0x201 => (mkey::query, Zero),
        0x202 => (mkey::destroy, Zero),
        _ => return ext_handler(opcode),
    })
}

/// Extension families: SRQ/RMP/XRC_SRQ, SQ/RQ, TIR/TIS/RQT, flow steering,
/// counters, general objects, multicast.
fn ext_handler(opcode: u16) -> Option<(Handler, OpMods)> {
    use OpMods::*;
    Some(match opcode {
        // Shared receive queues.
        0x700 => (srq::create_srq as Handler, Zero),
        0x701 => (srq::destroy_srq, Zero),
        0x702 => (srq::query_srq, Zero),
        0x703 => (srq::arm_rq, List(&[1])),
        0x705 => (srq::create_xrc_srq, Zero),
        0x706 => (srq::destroy_xrc_srq, Zero),
        0x707 => (srq::query_xrc_srq, Zero),
        0x708 => (srq::arm_xrc_srq, List(&[1])),
        0x90c => (srq::create_rmp, Zero),
        0x90d => (srq::modify_rmp, Zero),
        0x90e => (srq::destroy_rmp, Zero),
        0x90f => (srq::query_rmp, Zero),
        // Ethernet work queues.
        0x904 => (wq::create_sq, Zero),
        0x905 => (wq::modify_sq, Zero),
        0x906 => (wq::destroy_sq, Zero),
        0x907 => (wq::query_sq, Zero),
        0x908 => (wq::create_rq, Zero),
        0x909 => (wq::modify_rq, Zero),
        0x90a => (wq::destroy_rq, Zero),
        0x90b => (wq::query_rq, Zero),
        // TIR, TIS, RQT.
        0x900 => (tir::create_tir, Zero),
        0x901 => (tir::modify_tir, Zero),
        0x902 => (tir::destroy_tir, Zero),
        0x903 => (tir::query_tir, Zero),
        0x912 => (tir::create_tis, Zero),
        0x913 => (tir::modify_tis, Zero),
        0x914 => (tir::destroy_tis, Zero),
        0x915 => (tir::query_tis, Zero),
        0x916 => (tir::create_rqt, Zero),
        0x917 => (tir::modify_rqt, Zero),
        0x918 => (tir::destroy_rqt, Zero),
        0x919 => (tir::query_rqt, Zero),
        // Flow steering.
        0x930 => (flow::create_table, Zero),
        0x931 => (flow::destroy_table, Zero),
        0x932 => (flow::query_table, Zero),
        0x933 => (flow::create_group, Zero),
        0x934 => (flow::destroy_group, Zero),
        0x935 => (flow::query_group, Zero),
        0x936 => (flow::set_entry, List(&[0, 1])),
        0x937 => (flow::query_entry, Zero),
        0x938 => (flow::delete_entry, Zero),
        // Counters.
        0x771 => (counters::alloc_q_counter, Zero),
        0x772 => (counters::dealloc_q_counter, Zero),
        0x773 => (counters::query_q_counter, Zero),
        0x939 => (counters::alloc_flow_counter, Zero),
        0x93a => (counters::dealloc_flow_counter, Zero),
        0x93b => (counters::query_flow_counter, Zero),
        // General objects and multicast.
        0xa00..=0xa03 => (general_obj::command, Any),
        0x806 => (mcg::attach, Zero),
        0x807 => (mcg::detach, Zero),
        _ => return None,
    })
}

/// The definition of `opcode`, or `None` when the firmware does not know it.
pub fn lookup(opcode: u16) -> Option<CmdDef> {
    let (handler, op_mods) = handler(opcode)?;
    let (inp, outp) = prm_layouts::mailbox_layouts(opcode)?;
    Some(CmdDef {
        handler,
        op_mods,
        in_len: (inp.size_bits / 8) as usize,
        out_len: (outp.size_bits / 8) as usize,
        min_out_len: min_out_len(outp),
        general_header: (0xa00..=0xa03).contains(&opcode),
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
