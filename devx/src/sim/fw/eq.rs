//! Event queues. The device creates its completion EQs at start (owned by
//! the kernel, uid 0); DEVX users find them with QUERY_EQN and name them in
//! `cqc.c_eqn_or_apu_element`. User-created EQs go through a method this emulator does not
//! offer, so EQ commands are not admitted.

use super::cmd::FwResult;
use super::state::{Holder, State};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EqObj {
    /// The completion vector this EQ serves.
    pub(crate) vector: Option<u32>,
}

impl Holder for EqObj {}

/// Creates the completion EQs of `profile.num_comp_vectors`.
pub(crate) fn create_completion_eqs(st: &mut State) -> FwResult {
    let first = st.profile.first_comp_eqn;
    for v in 0..st.profile.num_comp_vectors {
        st.eq.insert_at(first + v, 0, EqObj { vector: Some(v) })?;
    }
    Ok(())
}

/// The EQ number of completion vector `vector`, if it exists.
pub(crate) fn eqn_of_vector(st: &State, vector: u32) -> Option<u32> {
    let n = st.profile.first_comp_eqn.checked_add(vector)?;
    match st.eq.peek(n) {
        Some(e) if e.obj.vector == Some(vector) => Some(n),
        _ => None,
    }
}

/// True when `eqn` is a completion EQ.
pub(crate) fn is_completion_eq(st: &State, eqn: u32) -> bool {
    st.eq.peek(eqn).is_some_and(|e| e.obj.vector.is_some())
}
