//! NIC flow steering: flow tables, flow groups and flow table entries.
//!
//! Groups hold their table, entries hold their group and every destination
//! (flow table, TIR) and counter they name, so nothing in use can vanish.
//! MODIFY_FLOW_TABLE has no layout in prm-layouts yet and is not offered.

use prm_layouts::{
    CreateFlowGroupIn, CreateFlowGroupOut, CreateFlowTableIn, CreateFlowTableOut, DeleteFteIn,
    DestFormatStruct, DestroyFlowGroupIn, DestroyFlowTableIn, FlowContext, FlowCounterList,
    FlowTableContext, QueryFlowGroupIn, QueryFlowGroupOut, QueryFlowTableIn, QueryFlowTableOut,
    QueryFteIn, QueryFteOut, SetFteIn,
};

use super::counters;
use crate::sim::fw::cmd::{ensure, fail, out_view, put, Cmd, FwResult};
use crate::sim::fw::kind::ObjKind;
use crate::sim::fw::state::{Holder, State};
use crate::sim::fw::table::ObjRef;
use crate::sim::syndrome;

/// Table types a NIC function may create (`FS_FT_*`): NIC RX, NIC TX, RDMA RX, RDMA TX.
pub(crate) const TABLE_TYPES: &[u8] = &[0x0, 0x1, 0x7, 0x8];

/// `flow_context.action` bits (`MLX5_FLOW_CONTEXT_ACTION_*`).
#[allow(dead_code)] // The PRM's full list; not every value is read.
pub(crate) mod action {
    pub(crate) const ALLOW: u16 = 0x1;
    pub(crate) const DROP: u16 = 0x2;
    pub(crate) const FWD_DEST: u16 = 0x4;
    pub(crate) const COUNT: u16 = 0x8;
}

/// Destination types (`MLX5_IFC_FLOW_DESTINATION_TYPE_*`).
pub(crate) mod dest {
    pub(crate) const VPORT: u8 = 0x0;
    pub(crate) const FLOW_TABLE: u8 = 0x1;
    pub(crate) const TIR: u8 = 0x2;
}

/// Offset of the destination list in a SET_FTE / QUERY_FTE mailbox: the
/// list (`flow_context.destination[]`) is the tail of both.
const DEST_LIST_AT: usize = prm_layouts::SetFteIn::SIZE_BYTES;
const _: () = assert!(prm_layouts::QueryFteOut::SIZE_BYTES == DEST_LIST_AT);

#[derive(Debug, Clone)]
pub(crate) struct FlowTableObj {
    pub(crate) table_type: u8,
    pub(crate) ctx: FlowTableContext,
    /// Groups: (start, end, group id).
    pub(crate) groups: Vec<(u32, u32, u32)>,
    holds: Vec<ObjRef>,
}

#[derive(Debug, Clone)]
pub(crate) struct FlowGroupObj {
    pub(crate) table: u32,
    pub(crate) start: u32,
    pub(crate) end: u32,
    pub(crate) criteria_enable: u8,
    /// The `match_criteria` block, returned by QUERY_FLOW_GROUP.
    pub(crate) criteria: Box<[u8]>,
}

#[derive(Debug, Clone)]
pub(crate) struct FlowEntryObj {
    pub(crate) table: u32,
    pub(crate) index: u32,
    pub(crate) ctx: Box<FlowContext>,
    /// Destination and counter list entries, 8 bytes each, as given.
    pub(crate) list: Vec<u8>,
    holds: Vec<ObjRef>,
}

impl Holder for FlowTableObj {
    fn holds(&self) -> Vec<ObjRef> {
        self.holds.clone()
    }
}
impl Holder for FlowGroupObj {
    fn holds(&self) -> Vec<ObjRef> {
        vec![ObjRef::new(ObjKind::FlowTable, self.table)]
    }
}
impl Holder for FlowEntryObj {
    fn holds(&self) -> Vec<ObjRef> {
        self.holds.clone()
    }
}

/// A table `uid` owns, checked against the type the command names.
fn own_table(st: &State, uid: u16, id: u32, table_type: u8) -> FwResult<&FlowTableObj> {
    let t = &st.flow_table.owned(id, uid)?.obj;
    ensure(t.table_type == table_type, syndrome::FT_TYPE)?;
    Ok(t)
}

pub(crate) fn create_table(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<CreateFlowTableIn>()?;
    ensure(inp.other_vport() == 0, syndrome::OTHER_FUNCTION)?;
    ensure(TABLE_TYPES.contains(&inp.table_type()), syndrome::FT_TYPE)?;
    let c = inp.flow_table_context();
    let p = &st.profile;
    ensure(c.log_size() <= p.log_max_ft_size, syndrome::FT_TOO_LARGE)?;
    ensure(c.level() <= p.max_ft_level, syndrome::FT_TOO_LARGE)?;
    ensure(
        c.sw_owner() == 0 && c.termination_table() == 0,
        syndrome::FT_TYPE,
    )?;
    let mut holds = Vec::new();
    // Miss action 1: go to table_miss_id, a deeper table of the same type.
    if c.table_miss_action() == 1 {
        let miss = &st.flow_table.usable(c.table_miss_id(), cmd.uid)?.obj;
        ensure(
            miss.table_type == inp.table_type() && miss.ctx.level() > c.level(),
            syndrome::FTE_DEST,
        )?;
        holds.push(ObjRef::new(ObjKind::FlowTable, c.table_miss_id()));
    }
    let obj = FlowTableObj {
        table_type: inp.table_type(),
        ctx: *c,
        groups: Vec::new(),
        holds: holds.clone(),
    };
    let id = st.flow_table.insert(cmd.uid, obj)?;
    st.hold_all(&holds);
    out_view::<CreateFlowTableOut>(out)?.set_table_id(id);
    Ok(())
}

pub(crate) fn query_table(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<QueryFlowTableIn>()?;
    let ctx = own_table(st, cmd.uid, inp.table_id(), inp.table_type())?.ctx;
    *out_view::<QueryFlowTableOut>(out)?.flow_table_context_mut() = ctx;
    Ok(())
}

/// Refused while groups, entries or other tables still point at it.
pub(crate) fn destroy_table(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<DestroyFlowTableIn>()?;
    own_table(st, cmd.uid, inp.table_id(), inp.table_type())?;
    let t = st.flow_table.remove(inp.table_id(), cmd.uid)?;
    st.release_all(&t.holds);
    Ok(())
}

pub(crate) fn create_group(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<CreateFlowGroupIn>()?;
    ensure(inp.other_vport() == 0, syndrome::OTHER_FUNCTION)?;
    let table = inp.table_id();
    let t = own_table(st, cmd.uid, table, inp.table_type())?;
    let (start, end) = (inp.start_flow_index(), inp.end_flow_index());
    let size = 1u64 << t.ctx.log_size();
    ensure(start <= end && u64::from(end) < size, syndrome::FG_RANGE)?;
    ensure(
        !t.groups.iter().any(|g| start <= g.1 && g.0 <= end),
        syndrome::FG_OVERLAP,
    )?;
    let obj = FlowGroupObj {
        table,
        start,
        end,
        criteria_enable: inp.match_criteria_enable(),
        criteria: inp.match_criteria().as_bytes().into(),
    };
    let gid = st.flow_group.insert(cmd.uid, obj)?;
    st.hold(ObjRef::new(ObjKind::FlowTable, table));
    if let Some(e) = st.flow_table.peek_mut(table) {
        e.obj.groups.push((start, end, gid));
    }
    out_view::<CreateFlowGroupOut>(out)?.set_group_id(gid);
    Ok(())
}

/// The group `gid` of `table`, owned by `uid`.
fn own_group(st: &State, uid: u16, table: u32, gid: u32) -> FwResult<&FlowGroupObj> {
    let g = &st.flow_group.owned(gid, uid)?.obj;
    ensure(g.table == table, syndrome::not_found(ObjKind::FlowGroup))?;
    Ok(g)
}

pub(crate) fn query_group(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<QueryFlowGroupIn>()?;
    own_table(st, cmd.uid, inp.table_id(), inp.table_type())?;
    let g = own_group(st, cmd.uid, inp.table_id(), inp.group_id())?.clone();
    let o = out_view::<QueryFlowGroupOut>(out)?;
    o.set_start_flow_index(g.start);
    o.set_end_flow_index(g.end);
    o.set_match_criteria_enable(g.criteria_enable);
    o.match_criteria_mut()
        .as_mut_bytes()
        .copy_from_slice(&g.criteria);
    Ok(())
}

/// Refused while entries live in the group.
pub(crate) fn destroy_group(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<DestroyFlowGroupIn>()?;
    own_table(st, cmd.uid, inp.table_id(), inp.table_type())?;
    own_group(st, cmd.uid, inp.table_id(), inp.group_id())?;
    let g = st.flow_group.remove(inp.group_id(), cmd.uid)?;
    st.release_all(&g.holds());
    if let Some(e) = st.flow_table.peek_mut(g.table) {
        e.obj.groups.retain(|x| x.2 != inp.group_id());
    }
    Ok(())
}

/// Validates an entry's context and lists; returns what it will hold.
fn check_entry(
    st: &State,
    cmd: &Cmd,
    table: &FlowTableObj,
    index: u32,
) -> FwResult<(Vec<ObjRef>, Vec<u8>)> {
    let inp = cmd.view::<SetFteIn>()?;
    let c = inp.flow_context();
    let gid = c.group_id();
    let g = st
        .flow_group
        .owned(gid, cmd.uid)
        .map_err(|_| syndrome::FTE_NO_GROUP)?;
    let in_group =
        table.groups.iter().any(|x| x.2 == gid) && (g.obj.start..=g.obj.end).contains(&index);
    ensure(in_group, syndrome::FTE_NO_GROUP)?;
    let (n_dest, n_cnt) = (
        c.destination_list_size() as usize,
        c.flow_counter_list_size() as usize,
    );
    let act = c.action();
    ensure(
        act & action::FWD_DEST == 0 || n_dest > 0,
        syndrome::FTE_DEST,
    )?;
    ensure(
        act & action::FWD_DEST != 0 || n_dest == 0,
        syndrome::FTE_DEST,
    )?;
    ensure(act & action::COUNT == 0 || n_cnt > 0, syndrome::FTE_DEST)?;
    ensure(act & action::COUNT != 0 || n_cnt == 0, syndrome::FTE_DEST)?;
    let bytes = (n_dest + n_cnt)
        .checked_mul(DestFormatStruct::SIZE_BYTES)
        .ok_or(syndrome::FTE_DEST)?;
    let list = cmd
        .inbox
        .get(DEST_LIST_AT..DEST_LIST_AT + bytes)
        .ok_or(syndrome::INBOX_SHORT)?;
    let mut holds = vec![ObjRef::new(ObjKind::FlowGroup, gid)];
    for (i, e) in list.chunks_exact(DestFormatStruct::SIZE_BYTES).enumerate() {
        if i >= n_dest {
            let counter = FlowCounterList::from_slice(e).ok_or(syndrome::INBOX_SHORT)?;
            let base = counters::counter_base(st, cmd.uid, counter.flow_counter_id())?;
            holds.push(ObjRef::new(ObjKind::FlowCounter, base));
            continue;
        }
        let d = DestFormatStruct::from_slice(e).ok_or(syndrome::INBOX_SHORT)?;
        let (ty, id) = (d.destination_type(), d.destination_id());
        match ty {
            dest::FLOW_TABLE => {
                let t = &st.flow_table.usable(id, cmd.uid)?.obj;
                let deeper = t.table_type == table.table_type && t.ctx.level() > table.ctx.level();
                ensure(deeper, syndrome::FTE_DEST)?;
                holds.push(ObjRef::new(ObjKind::FlowTable, id));
            }
            dest::TIR => {
                st.tir.usable(id, cmd.uid)?;
                holds.push(ObjRef::new(ObjKind::Tir, id));
            }
            // This function's own vport.
            dest::VPORT if id == 0 => {}
            _ => return fail(syndrome::FTE_DEST),
        }
    }
    Ok((holds, list.to_vec()))
}

/// SET_FLOW_TABLE_ENTRY: op_mod 0 creates the entry at `flow_index`, op_mod 1
/// replaces the context of the one there.
pub(crate) fn set_entry(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<SetFteIn>()?;
    ensure(inp.other_vport() == 0, syndrome::OTHER_FUNCTION)?;
    let (table_id, index) = (inp.table_id(), inp.flow_index());
    let table = own_table(st, cmd.uid, table_id, inp.table_type())?.clone();
    ensure(
        u64::from(index) < 1u64 << table.ctx.log_size(),
        syndrome::FTE_NO_GROUP,
    )?;
    let existing = st.fte_index.get(&(table_id, index)).copied();
    let (holds, list) = check_entry(st, cmd, &table, index)?;
    let ctx = Box::new(*inp.flow_context());
    if cmd.op_mod == 0 {
        ensure(existing.is_none(), syndrome::FTE_EXISTS)?;
        let obj = FlowEntryObj {
            table: table_id,
            index,
            ctx,
            list,
            holds: holds.clone(),
        };
        let n = st.flow_entry.insert(cmd.uid, obj)?;
        st.hold_all(&holds);
        st.fte_index.insert((table_id, index), n);
        return Ok(());
    }
    let Some(n) = existing else {
        return fail(syndrome::FTE_MISSING);
    };
    let old = st.flow_entry.owned(n, cmd.uid)?.obj.holds.clone();
    st.hold_all(&holds);
    st.release_all(&old);
    let e = &mut st.flow_entry.owned_mut(n, cmd.uid)?.obj;
    e.ctx = ctx;
    e.list = list;
    e.holds = holds;
    Ok(())
}

fn entry_number(st: &State, uid: u16, table: u32, table_type: u8, index: u32) -> FwResult<u32> {
    own_table(st, uid, table, table_type)?;
    let n = st
        .fte_index
        .get(&(table, index))
        .copied()
        .ok_or(syndrome::FTE_MISSING)?;
    st.flow_entry.owned(n, uid)?;
    Ok(n)
}

pub(crate) fn query_entry(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<QueryFteIn>()?;
    let n = entry_number(
        st,
        cmd.uid,
        inp.table_id(),
        inp.table_type(),
        inp.flow_index(),
    )?;
    let e = st.flow_entry.owned(n, cmd.uid)?.obj.clone();
    *out_view::<QueryFteOut>(out)?.flow_context_mut() = *e.ctx;
    put(out, DEST_LIST_AT, &e.list)
}

pub(crate) fn delete_entry(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<DeleteFteIn>()?;
    let n = entry_number(
        st,
        cmd.uid,
        inp.table_id(),
        inp.table_type(),
        inp.flow_index(),
    )?;
    let e = st.flow_entry.remove(n, cmd.uid)?;
    st.release_all(&e.holds);
    st.fte_index.remove(&(e.table, e.index));
    Ok(())
}

/// Rebuilds the entry index and group lists after a uid's objects were purged.
pub(crate) fn forget_uid(st: &mut State) {
    st.fte_index.retain(|_, n| st.flow_entry.contains(*n));
    let groups: Vec<u32> = st.flow_table.numbers_of_all();
    for t in groups {
        let live: Vec<(u32, u32, u32)> = match st.flow_table.peek(t) {
            Some(e) => e
                .obj
                .groups
                .iter()
                .copied()
                .filter(|g| st.flow_group.contains(g.2))
                .collect(),
            None => continue,
        };
        if let Some(e) = st.flow_table.peek_mut(t) {
            e.obj.groups = live;
        }
    }
}
