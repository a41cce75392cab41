//! Completion queues: CREATE / QUERY / MODIFY (moderation, resize) / DESTROY.

use prm_layouts::{Cqc, CreateCqIn, CreateCqOut, DestroyCqIn, ModifyCqIn, QueryCqIn, QueryCqOut};

use super::cmd::{ensure, out_view, Cmd, FwResult};
use super::eq;
use super::kind::ObjKind;
use super::state::{Holder, State};
use super::table::ObjRef;
use super::umem;
use crate::sim::syndrome;

/// `modify_field_select` bits of MODIFY_CQ op_mod 0 (`MLX5_CQ_MODIFY_*`).
pub(crate) mod modify {
    pub(crate) const PERIOD: u32 = 1 << 0;
    pub(crate) const COUNT: u32 = 1 << 1;
    pub(crate) const OVERRUN: u32 = 1 << 2;
    pub(crate) const PERIOD_MODE: u32 = 1 << 4;
    pub(crate) const ALL: u32 = PERIOD | COUNT | OVERRUN | PERIOD_MODE;
}

/// `resize_field_select` bits of MODIFY_CQ op_mod 1 (`MLX5_MODIFY_CQ_MASK_*`).
pub(crate) mod resize {
    pub(crate) const LOG_SIZE: u32 = 1 << 0;
    pub(crate) const PG_OFFSET: u32 = 1 << 1;
    pub(crate) const PG_SIZE: u32 = 1 << 2;
    pub(crate) const ALL: u32 = LOG_SIZE | PG_OFFSET | PG_SIZE;
}

pub(crate) const OP_MOD_RESIZE: u16 = 1;

#[derive(Debug, Clone)]
pub(crate) struct CqObj {
    /// The context as created and modified; QUERY_CQ returns it.
    pub(crate) cqc: Cqc,
    pub(crate) umem: u32,
    pub(crate) umem_offset: u64,
    pub(crate) dbr_umem: u32,
    pub(crate) dbr_addr: u64,
    pub(crate) eqn: u32,
    pub(crate) uar: u32,
    /// Completion notification request (the arm doorbell), if one is pending.
    pub(crate) arm: Option<Arm>,
    /// Producer index of the last solicited (or error) CQE written, so an
    /// arm for solicited events can tell whether one is already waiting.
    pub(crate) last_solicited: Option<u32>,
    holds: Vec<ObjRef>,
}

/// A pending notification request: its sequence number and whether only
/// solicited completions fire it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arm {
    pub(crate) sn: u8,
    pub(crate) solicited: bool,
}

/// `cqc.st` values (arm state).
pub(crate) mod arm_state {
    pub(crate) const SOLICITED_ARMED: u8 = 0x6;
    pub(crate) const ARMED: u8 = 0x9;
    pub(crate) const FIRED: u8 = 0xa;
}

impl Holder for CqObj {
    fn holds(&self) -> Vec<ObjRef> {
        self.holds.clone()
    }
}

impl CqObj {
    /// CQE stride in bytes (64 or 128).
    pub(crate) fn cqe_bytes(&self) -> u64 {
        64u64 << self.cqc.cqe_sz()
    }
}

fn buffer_bytes(log_size: u8, cqe_sz: u8) -> u64 {
    (1u64 << log_size) * (64u64 << cqe_sz)
}

pub(crate) fn create(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<CreateCqIn>()?;
    let c = inp.cq_context();
    ensure(c.apu_cq() == 0, syndrome::RESERVED_NONZERO)?;
    ensure(c.cqe_sz() <= 1, syndrome::CQE_SIZE)?;
    ensure(
        c.cqe_comp_en() == 0 || st.profile.cqe_compression,
        syndrome::CQE_COMPRESSION,
    )?;
    ensure(
        c.log_cq_size() <= st.profile.log_max_cq_sz,
        syndrome::CQ_TOO_LARGE,
    )?;

    let uar = c.uar_page();
    st.uar.usable(uar, cmd.uid)?;
    let eqn = c.c_eqn_or_apu_element();
    st.eq.usable(eqn, cmd.uid)?;
    ensure(eq::is_completion_eq(st, eqn), syndrome::EQ_NOT_COMPLETION)?;

    ensure(inp.cq_umem_valid() == 1, syndrome::NO_UMEM)?;
    let bytes = buffer_bytes(c.log_cq_size(), c.cqe_sz());
    let buf = umem::resolve(st, cmd.uid, inp.cq_umem_id(), inp.cq_umem_offset(), bytes)?;
    ensure(buf.writable(), syndrome::UMEM_READ_ONLY)?;
    ensure(c.dbr_umem_valid() == 1, syndrome::NO_UMEM)?;
    umem::resolve_dbr(st, cmd.uid, c.dbr_umem_id(), c.dbr_addr())?;

    let mut cqc = *c;
    cqc.set_status(0);
    cqc.set_producer_counter(0);
    cqc.set_consumer_counter(0);
    cqc.set_last_notified_index(0);
    cqc.set_last_solicit_index(0);
    let holds = vec![
        ObjRef::new(ObjKind::Uar, uar),
        ObjRef::new(ObjKind::Eq, eqn),
        ObjRef::new(ObjKind::Umem, inp.cq_umem_id()),
        ObjRef::new(ObjKind::Umem, c.dbr_umem_id()),
    ];
    let obj = CqObj {
        cqc,
        umem: inp.cq_umem_id(),
        umem_offset: inp.cq_umem_offset(),
        dbr_umem: c.dbr_umem_id(),
        dbr_addr: c.dbr_addr(),
        eqn,
        uar,
        arm: None,
        last_solicited: None,
        holds: holds.clone(),
    };
    let cqn = st.cq.insert(cmd.uid, obj)?;
    st.hold_all(&holds);
    out_view::<CreateCqOut>(out)?.set_cqn(cqn);
    Ok(())
}

pub(crate) fn query(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let cqn = cmd.view::<QueryCqIn>()?.cqn();
    let cqc = st.cq.owned(cqn, cmd.uid)?.obj.cqc;
    *out_view::<QueryCqOut>(out)?.cq_context_mut() = cqc;
    Ok(())
}

pub(crate) fn modify(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<ModifyCqIn>()?;
    let select = inp.modify_field_select_resize_field_select();
    let new = inp.cq_context();
    let max_log = st.profile.log_max_cq_sz;
    let cq = &mut st.cq.owned_mut(inp.cqn(), cmd.uid)?.obj;
    if cmd.op_mod == OP_MOD_RESIZE {
        let mask = select.resize_field_select().resize_field_select();
        ensure(mask & !resize::ALL == 0, syndrome::CQ_MODIFY_FIELDS)?;
        ensure(inp.cq_umem_valid() == 1, syndrome::NO_UMEM)?;
        if mask & resize::LOG_SIZE != 0 {
            let log = new.log_cq_size();
            ensure(log <= max_log, syndrome::CQ_TOO_LARGE)?;
            let outstanding = cq
                .cqc
                .producer_counter()
                .wrapping_sub(cq.cqc.consumer_counter())
                & 0x00ff_ffff;
            ensure(
                u64::from(outstanding) <= 1u64 << log,
                syndrome::CQ_RESIZE_TOO_SMALL,
            )?;
            // A resize names its new ring like CREATE_CQ does; without one the
            // ring stays where it is and must already be large enough.
            let bytes = buffer_bytes(log, cq.cqc.cqe_sz());
            let (umem_id, offset) = match inp.cq_umem_id() {
                0 => (cq.umem, cq.umem_offset),
                id => (id, inp.cq_umem_offset()),
            };
            let old_umem = cq.umem;
            umem::resolve(st, cmd.uid, umem_id, offset, bytes)?;
            let cq = &mut st.cq.owned_mut(inp.cqn(), cmd.uid)?.obj;
            cq.cqc.set_log_cq_size(log);
            if umem_id != old_umem {
                cq.umem = umem_id;
                cq.umem_offset = offset;
                for h in cq.holds.iter_mut() {
                    if *h == ObjRef::new(ObjKind::Umem, old_umem) {
                        *h = ObjRef::new(ObjKind::Umem, umem_id);
                        break;
                    }
                }
                st.hold(ObjRef::new(ObjKind::Umem, umem_id));
                st.release_all(&[ObjRef::new(ObjKind::Umem, old_umem)]);
            }
        }
        // Page offset and size describe the buffer's pages; a UMEM-backed
        // ring keeps its UMEM geometry, so they are accepted and stored.
        let cq = &mut st.cq.owned_mut(inp.cqn(), cmd.uid)?.obj;
        if mask & resize::PG_OFFSET != 0 {
            cq.cqc.set_page_offset(new.page_offset());
        }
        if mask & resize::PG_SIZE != 0 {
            cq.cqc.set_log_page_size(new.log_page_size());
        }
        return Ok(());
    }
    let mask = select.modify_field_select().modify_field_select();
    ensure(mask & !modify::ALL == 0, syndrome::CQ_MODIFY_FIELDS)?;
    if mask & modify::PERIOD != 0 {
        cq.cqc.set_cq_period(new.cq_period());
    }
    if mask & modify::COUNT != 0 {
        cq.cqc.set_cq_max_count(new.cq_max_count());
    }
    if mask & modify::OVERRUN != 0 {
        cq.cqc.set_oi(new.oi());
    }
    if mask & modify::PERIOD_MODE != 0 {
        ensure(new.cq_period_mode() <= 1, syndrome::CQ_MODIFY_FIELDS)?;
        cq.cqc.set_cq_period_mode(new.cq_period_mode());
    }
    Ok(())
}

pub(crate) fn destroy(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let cqn = cmd.view::<DestroyCqIn>()?.cqn();
    let obj = st.cq.remove(cqn, cmd.uid)?;
    st.release_all(&obj.holds);
    Ok(())
}
