//! Flow counters and Q counters.
use crate::sim::fw::state::Holder;
#[derive(Debug, Clone)]
pub struct FlowCounterObj;
#[derive(Debug, Clone)]
pub struct QCounterObj;
impl Holder for FlowCounterObj {}
impl Holder for QCounterObj {}
