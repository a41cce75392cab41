//! SQ and RQ objects.
use crate::sim::fw::state::Holder;
#[derive(Debug, Clone)]
pub struct SqObj;
#[derive(Debug, Clone)]
pub struct RqObj;
impl Holder for SqObj {}
impl Holder for RqObj {}
