//! Q counters (per-QP/RQ statistics sets) and flow counters (allocated in
//! bulks, referenced by flow entries). The emulator moves no traffic through
//! them yet, so queries read zeros.

use prm_layouts::{
    AllocFlowCounterIn, AllocFlowCounterOut, AllocQCounterOut, DeallocFlowCounterIn,
    DeallocQCounterIn, QueryFlowCounterIn, QueryQCounterIn,
};

use crate::sim::fw::cmd::{ensure, fail, out_view, Cmd, FwResult};
use crate::sim::fw::kind::ObjKind;
use crate::sim::fw::state::{Holder, State};
use crate::sim::syndrome;

#[derive(Debug, Clone, Default)]
pub(crate) struct QCounterObj;

impl Holder for QCounterObj {}

/// A bulk of flow counters, filed under its first id (its size is in
/// `State::fc_ranges`).
#[derive(Debug, Clone)]
pub(crate) struct FlowCounterObj;

impl Holder for FlowCounterObj {}

pub(crate) fn alloc_q_counter(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let n = st.q_counter.insert(cmd.uid, QCounterObj)?;
    out_view::<AllocQCounterOut>(out)?.set_counter_set_id(n as u8);
    Ok(())
}

/// Refused while a QP or RQ counts into the set.
pub(crate) fn dealloc_q_counter(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = u32::from(cmd.view::<DeallocQCounterIn>()?.counter_set_id());
    st.q_counter.remove(n, cmd.uid)?;
    Ok(())
}

pub(crate) fn query_q_counter(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = u32::from(cmd.view::<QueryQCounterIn>()?.counter_set_id());
    st.q_counter.owned(n, cmd.uid)?;
    Ok(())
}

/// Counters a request asks for: `2^log_size`, else `bulk * 128`, else one.
fn bulk_size(inp: &AllocFlowCounterIn) -> u32 {
    if inp.flow_counter_bulk_log_size() != 0 {
        1 << inp.flow_counter_bulk_log_size()
    } else if inp.flow_counter_bulk() != 0 {
        u32::from(inp.flow_counter_bulk()) * 128
    } else {
        1
    }
}

pub(crate) fn alloc_flow_counter(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<AllocFlowCounterIn>()?;
    let size = bulk_size(inp);
    ensure(
        size <= 1u32 << st.profile.log_max_flow_counter_bulk.min(31),
        syndrome::BULK_TOO_LARGE,
    )?;
    // Bulks start at a multiple of their size, as the device hands them out.
    let base = st
        .fc_next
        .checked_next_multiple_of(size)
        .ok_or(syndrome::table_full(ObjKind::FlowCounter))?;
    let next = base
        .checked_add(size)
        .ok_or(syndrome::table_full(ObjKind::FlowCounter))?;
    st.flow_counter.insert_at(base, cmd.uid, FlowCounterObj)?;
    st.fc_next = next;
    st.fc_ranges.insert(base, size);
    out_view::<AllocFlowCounterOut>(out)?.set_flow_counter_id(base);
    Ok(())
}

pub(crate) fn dealloc_flow_counter(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let id = cmd.view::<DeallocFlowCounterIn>()?.flow_counter_id();
    st.flow_counter.remove(id, cmd.uid)?;
    st.fc_ranges.remove(&id);
    Ok(())
}

/// The bulk (its first id) that counter `id` belongs to, if `uid` may use it.
pub(crate) fn counter_base(st: &State, uid: u16, id: u32) -> FwResult<u32> {
    let Some((&base, &size)) = st.fc_ranges.range(..=id).next_back() else {
        return fail(syndrome::not_found(ObjKind::FlowCounter));
    };
    ensure(id - base < size, syndrome::not_found(ObjKind::FlowCounter))?;
    st.flow_counter.usable(base, uid)?;
    Ok(base)
}

pub(crate) fn query_flow_counter(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<QueryFlowCounterIn>()?;
    let id = inp.flow_counter_id();
    let base = counter_base(st, cmd.uid, id)?;
    st.flow_counter.owned(base, cmd.uid)?;
    let n = u32::from(inp.num_of_counters()).max(1);
    let size = st.fc_ranges.get(&base).copied().unwrap_or(1);
    ensure(
        u64::from(id - base) + u64::from(n) <= u64::from(size),
        syndrome::not_found(ObjKind::FlowCounter),
    )?;
    // One 16-byte traffic_counter per counter, all zero.
    ensure(out.len() >= 16 + 16 * n as usize, syndrome::OUTBOX_SHORT)?;
    Ok(())
}

/// Drops bulk ranges whose counters were purged.
pub(crate) fn forget_uid(st: &mut State) {
    let live: Vec<u32> = st
        .fc_ranges
        .keys()
        .copied()
        .filter(|b| !st.flow_counter.contains(*b))
        .collect();
    for b in live {
        st.fc_ranges.remove(&b);
    }
}
