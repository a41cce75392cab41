//! General objects (CREATE/MODIFY/QUERY/DESTROY_GENERAL_OBJECT, obj_type in
//! the op_mod position). The profile advertises no general object types
//! (`general_obj_types` = 0), so every type is refused; a type is added by
//! dispatching on `cmd.op_mod` here and storing a [`GeneralObj`] in
//! `State::general_obj`.

use crate::sim::fw::cmd::{fail, Cmd, FwResult};
use crate::sim::fw::state::{Holder, State};
use crate::sim::syndrome;

#[derive(Debug, Clone)]
pub struct GeneralObj {
    pub obj_type: u16,
    /// The object context as created (the inbox tail after the header).
    pub ctx: Vec<u8>,
}

impl Holder for GeneralObj {}

/// All four general-object commands.
pub fn command(_st: &mut State, _cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    fail(syndrome::GENERAL_OBJ_TYPE)
}
