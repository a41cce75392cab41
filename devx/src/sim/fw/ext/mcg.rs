//! Multicast group attachment.

use crate::sim::fw::state::{Holder, State};

#[derive(Debug, Clone)]
pub struct McgAttach {
    pub gid: [u8; 16],
    pub qpn: u32,
}

impl Holder for McgAttach {}

pub fn forget_uid(st: &mut State) {
    let _ = st;
}
