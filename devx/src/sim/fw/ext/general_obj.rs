//! General objects.
use crate::sim::fw::state::Holder;
#[derive(Debug, Clone)]
pub struct GeneralObj;
impl Holder for GeneralObj {}
