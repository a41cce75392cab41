//! The one place that maps opcodes to handlers. Mailbox lengths come from
//! the prm-layouts `*_in` / `*_out` layouts of each opcode.

use super::cmd::{Cmd, FwResult};
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
    /// Minimum inbox and outbox lengths (the fixed layouts).
    pub in_len: usize,
    pub out_len: usize,
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
    let _ = opcode;
    None
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
        general_header: (0xa00..=0xa03).contains(&opcode),
    })
}
