//! TIR, TIS, RQT.
use crate::sim::fw::state::Holder;
#[derive(Debug, Clone)]
pub struct TirObj;
#[derive(Debug, Clone)]
pub struct TisObj;
#[derive(Debug, Clone)]
pub struct RqtObj;
impl Holder for TirObj {}
impl Holder for TisObj {}
impl Holder for RqtObj {}
