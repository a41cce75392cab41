//! Flow steering.
use crate::sim::fw::state::Holder;
#[derive(Debug, Clone)]
pub struct FlowTableObj;
#[derive(Debug, Clone)]
pub struct FlowGroupObj;
#[derive(Debug, Clone)]
pub struct FlowEntryObj;
impl Holder for FlowTableObj {}
impl Holder for FlowGroupObj {}
impl Holder for FlowEntryObj {}
