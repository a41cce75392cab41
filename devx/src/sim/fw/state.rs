//! The firmware's device state: one table per object kind, the profile the
//! limits come from, and the helpers that keep references consistent.
//!
//! Adding an object kind: define its object type (implementing [`Holder`])
//! and handlers in a new file under `fw/`, add a table field here (with its
//! number range and limit in [`State::new`]), one arm each in
//! [`State::refs_mut`], [`State::count`] and [`State::purge_uid`], and its
//! opcodes in `fw/dispatch.rs`.

use super::ext::{counters, flow, general_obj, mcg, srq, tir, wq};
use super::kind::ObjKind;
use super::table::{ObjRef, RefCounts, Table};
use super::{cq, eq, mkey, pd, qp, uar, umem};
use crate::sim::identity::Identity;
use crate::sim::profile::Profile;

/// An object that may hold references on others.
pub(crate) trait Holder {
    /// What this object references (released when it is destroyed).
    fn holds(&self) -> Vec<ObjRef> {
        Vec::new()
    }
}

impl Holder for () {}

const MAX24: u32 = 0x00ff_ffff;

pub(crate) struct State {
    pub(crate) profile: Profile,
    pub(crate) ident: Identity,
    pub(crate) uctx: Table<()>,
    pub(crate) pd: Table<pd::Pd>,
    pub(crate) td: Table<pd::TransportDomain>,
    pub(crate) xrcd: Table<pd::Xrcd>,
    pub(crate) uar: Table<uar::UarObj>,
    pub(crate) umem: Table<umem::UmemObj>,
    pub(crate) eq: Table<eq::EqObj>,
    pub(crate) cq: Table<cq::CqObj>,
    pub(crate) qp: Table<qp::QpObj>,
    pub(crate) mkey: Table<mkey::MkeyObj>,
    /// SRQ, XRC_SRQ and RMP share one number space, as on the device.
    pub(crate) srq: Table<srq::SrqObj>,
    pub(crate) sq: Table<wq::SqObj>,
    pub(crate) rq: Table<wq::RqObj>,
    pub(crate) tir: Table<tir::TirObj>,
    pub(crate) tis: Table<tir::TisObj>,
    pub(crate) rqt: Table<tir::RqtObj>,
    pub(crate) flow_table: Table<flow::FlowTableObj>,
    pub(crate) flow_group: Table<flow::FlowGroupObj>,
    pub(crate) flow_entry: Table<flow::FlowEntryObj>,
    pub(crate) flow_counter: Table<counters::FlowCounterObj>,
    pub(crate) q_counter: Table<counters::QCounterObj>,
    pub(crate) general_obj: Table<general_obj::GeneralObj>,
    pub(crate) mcg: Table<mcg::McgAttach>,
    /// Multicast attachments by (GID, QPN), for duplicate and detach lookups.
    pub(crate) mcg_index: std::collections::HashMap<([u8; 16], u32), u32>,
    /// QPs attached per multicast GID (for max_qp_mcg).
    pub(crate) mcg_members: std::collections::HashMap<[u8; 16], u32>,
    /// Flow counter bulks: first id → number of counters.
    pub(crate) fc_ranges: std::collections::BTreeMap<u32, u32>,
    /// Next flow counter id to hand out (bulks are aligned to their size).
    pub(crate) fc_next: u32,
    /// Flow entries by (table id, flow index).
    pub(crate) fte_index: std::collections::HashMap<(u32, u32), u32>,
    /// Bumped on every command and control-path change (see
    /// `Firmware::lock`); the data path's caches are valid for one epoch.
    pub(crate) epoch: u64,
    /// Event subscriptions (the kernel's EQ dispatch), here so that the
    /// data path can raise events while it holds the device lock.
    pub(crate) events: super::events::EventHub,
    /// The physical link of the port (`SimDevice::set_link`); up at start.
    pub(crate) link_up: bool,
}

impl State {
    pub(crate) fn new(profile: Profile, ident: Identity) -> State {
        let n = Profile::count;
        let p = &profile;
        State {
            uctx: Table::new(ObjKind::Uctx, 1, 0xfffe, n(p.log_max_uctx)),
            pd: Table::new(ObjKind::Pd, 1, MAX24, n(p.log_max_pd)),
            td: Table::new(
                ObjKind::TransportDomain,
                1,
                MAX24,
                n(p.log_max_transport_domain),
            ),
            xrcd: Table::new(ObjKind::Xrcd, 1, MAX24, n(p.log_max_xrcd)),
            // No cap bounds UARs; a million pages is more than any test maps.
            uar: Table::new(ObjKind::Uar, 1, MAX24, 1 << 20),
            umem: Table::new(ObjKind::Umem, 1, MAX24, n(p.log_max_umem)),
            eq: Table::new(ObjKind::Eq, 0, 0xff, usize::from(p.max_num_eqs)),
            cq: Table::new(ObjKind::Cq, 1, MAX24, n(p.log_max_cq)),
            // QPNs 0 and 1 are the special QPs; leave a small reserved block.
            qp: Table::new(ObjKind::Qp, 0x100, MAX24, n(p.log_max_qp)),
            mkey: Table::new(ObjKind::Mkey, 1, MAX24, n(p.log_max_mkey)),
            srq: Table::new(ObjKind::Srq, 1, MAX24, n(p.log_max_srq)),
            sq: Table::new(ObjKind::Sq, 1, MAX24, n(p.log_max_sq)),
            rq: Table::new(ObjKind::Rq, 1, MAX24, n(p.log_max_rq)),
            tir: Table::new(ObjKind::Tir, 1, MAX24, n(p.log_max_tir)),
            tis: Table::new(ObjKind::Tis, 1, MAX24, n(p.log_max_tis)),
            rqt: Table::new(ObjKind::Rqt, 1, MAX24, n(p.log_max_rqt)),
            flow_table: Table::new(ObjKind::FlowTable, 1, MAX24, n(p.log_max_ft_num)),
            flow_group: Table::new(ObjKind::FlowGroup, 1, u32::MAX - 1, 1 << 24),
            flow_entry: Table::new(ObjKind::FlowEntry, 1, u32::MAX - 1, 1 << 24),
            flow_counter: Table::new(
                ObjKind::FlowCounter,
                1,
                u32::MAX - 1,
                n(p.log_max_flow_counter),
            ),
            // Counter set 0 is the device's default counter.
            q_counter: Table::new(ObjKind::QCounter, 1, 0xff, usize::from(p.max_qp_cnt)),
            general_obj: Table::new(ObjKind::GeneralObj, 1, u32::MAX - 1, 1 << 24),
            mcg: Table::new(ObjKind::McgAttach, 1, u32::MAX - 1, 1 << 24),
            mcg_index: Default::default(),
            mcg_members: Default::default(),
            fc_ranges: Default::default(),
            fc_next: 1,
            fte_index: Default::default(),
            epoch: 0,
            events: Default::default(),
            link_up: true,
            profile,
            ident,
        }
    }

    /// Reference counts of a kind's table.
    pub(crate) fn refs_mut(&mut self, kind: ObjKind) -> &mut dyn RefCounts {
        match kind {
            ObjKind::Uctx => &mut self.uctx,
            ObjKind::Pd => &mut self.pd,
            ObjKind::TransportDomain => &mut self.td,
            ObjKind::Xrcd => &mut self.xrcd,
            ObjKind::Uar => &mut self.uar,
            ObjKind::Umem => &mut self.umem,
            ObjKind::Eq => &mut self.eq,
            ObjKind::Cq => &mut self.cq,
            ObjKind::Qp => &mut self.qp,
            ObjKind::Mkey => &mut self.mkey,
            ObjKind::Srq | ObjKind::XrcSrq | ObjKind::Rmp => &mut self.srq,
            ObjKind::Sq => &mut self.sq,
            ObjKind::Rq => &mut self.rq,
            ObjKind::Tir => &mut self.tir,
            ObjKind::Tis => &mut self.tis,
            ObjKind::Rqt => &mut self.rqt,
            ObjKind::FlowTable => &mut self.flow_table,
            ObjKind::FlowGroup => &mut self.flow_group,
            ObjKind::FlowEntry => &mut self.flow_entry,
            ObjKind::FlowCounter => &mut self.flow_counter,
            ObjKind::QCounter => &mut self.q_counter,
            ObjKind::GeneralObj => &mut self.general_obj,
            ObjKind::McgAttach => &mut self.mcg,
        }
    }

    /// Live objects of a kind (SRQ-like kinds are counted by their own type).
    pub(crate) fn count(&self, kind: ObjKind) -> usize {
        match kind {
            ObjKind::Uctx => self.uctx.len(),
            ObjKind::Pd => self.pd.len(),
            ObjKind::TransportDomain => self.td.len(),
            ObjKind::Xrcd => self.xrcd.len(),
            ObjKind::Uar => self.uar.len(),
            ObjKind::Umem => self.umem.len(),
            ObjKind::Eq => self.eq.len(),
            ObjKind::Cq => self.cq.len(),
            ObjKind::Qp => self.qp.len(),
            ObjKind::Mkey => self.mkey.len(),
            ObjKind::Srq | ObjKind::XrcSrq | ObjKind::Rmp => srq::count_of(self, kind),
            ObjKind::Sq => self.sq.len(),
            ObjKind::Rq => self.rq.len(),
            ObjKind::Tir => self.tir.len(),
            ObjKind::Tis => self.tis.len(),
            ObjKind::Rqt => self.rqt.len(),
            ObjKind::FlowTable => self.flow_table.len(),
            ObjKind::FlowGroup => self.flow_group.len(),
            ObjKind::FlowEntry => self.flow_entry.len(),
            ObjKind::FlowCounter => self.flow_counter.len(),
            ObjKind::QCounter => self.q_counter.len(),
            ObjKind::GeneralObj => self.general_obj.len(),
            ObjKind::McgAttach => self.mcg.len(),
        }
    }

    /// Objects DEVX users created, all uids.
    pub(crate) fn live_objects(&self) -> usize {
        ObjKind::ALL
            .iter()
            .filter(|k| k.is_user_object() && !matches!(k, ObjKind::XrcSrq | ObjKind::Rmp))
            .map(|k| match k {
                ObjKind::Srq => self.srq.len(),
                k => self.count(*k),
            })
            .sum()
    }

    /// Takes a reference on `r`.
    pub(crate) fn hold(&mut self, r: ObjRef) {
        self.refs_mut(r.kind).hold(r.num);
    }

    /// Takes references on all of `refs`.
    pub(crate) fn hold_all(&mut self, refs: &[ObjRef]) {
        for r in refs {
            self.hold(*r);
        }
    }

    /// Drops the references in `refs`.
    pub(crate) fn release_all(&mut self, refs: &[ObjRef]) {
        for r in refs {
            self.refs_mut(r.kind).release(r.num);
        }
    }

    /// Objects `uid` still owns, all kinds.
    pub(crate) fn uid_objects(&self, uid: u16) -> usize {
        self.pd.count_uid(uid)
            + self.td.count_uid(uid)
            + self.xrcd.count_uid(uid)
            + self.uar.count_uid(uid)
            + self.umem.count_uid(uid)
            + self.eq.count_uid(uid)
            + self.cq.count_uid(uid)
            + self.qp.count_uid(uid)
            + self.mkey.count_uid(uid)
            + self.srq.count_uid(uid)
            + self.sq.count_uid(uid)
            + self.rq.count_uid(uid)
            + self.tir.count_uid(uid)
            + self.tis.count_uid(uid)
            + self.rqt.count_uid(uid)
            + self.flow_table.count_uid(uid)
            + self.flow_group.count_uid(uid)
            + self.flow_entry.count_uid(uid)
            + self.flow_counter.count_uid(uid)
            + self.q_counter.count_uid(uid)
            + self.general_obj.count_uid(uid)
            + self.mcg.count_uid(uid)
    }

    /// Removes every object of `uid`, whatever references them (a context
    /// closing after its orderly teardown left something behind). Returns
    /// how many objects went.
    pub(crate) fn purge_uid(&mut self, uid: u16) -> usize {
        let mut released = Vec::new();
        let mut n = 0;
        // Holders first, so the references they release are counted right.
        n += purge(&mut self.mcg, uid, &mut released);
        mcg::forget_uid(self);
        n += purge(&mut self.flow_entry, uid, &mut released);
        n += purge(&mut self.flow_group, uid, &mut released);
        n += purge(&mut self.flow_table, uid, &mut released);
        flow::forget_uid(self);
        n += purge(&mut self.tir, uid, &mut released);
        n += purge(&mut self.rqt, uid, &mut released);
        n += purge(&mut self.sq, uid, &mut released);
        n += purge(&mut self.rq, uid, &mut released);
        n += purge(&mut self.tis, uid, &mut released);
        n += purge(&mut self.mkey, uid, &mut released);
        n += purge(&mut self.qp, uid, &mut released);
        n += purge(&mut self.srq, uid, &mut released);
        n += purge(&mut self.cq, uid, &mut released);
        n += purge(&mut self.general_obj, uid, &mut released);
        n += purge(&mut self.flow_counter, uid, &mut released);
        counters::forget_uid(self);
        n += purge(&mut self.q_counter, uid, &mut released);
        n += purge(&mut self.eq, uid, &mut released);
        n += purge(&mut self.umem, uid, &mut released);
        n += purge(&mut self.uar, uid, &mut released);
        n += purge(&mut self.xrcd, uid, &mut released);
        n += purge(&mut self.td, uid, &mut released);
        n += purge(&mut self.pd, uid, &mut released);
        self.release_all(&released);
        n
    }
}

fn purge<T: Holder>(t: &mut Table<T>, uid: u16, released: &mut Vec<ObjRef>) -> usize {
    let nums = t.numbers_of(uid);
    for num in &nums {
        if let Some(obj) = t.force_remove(*num) {
            released.extend(obj.holds());
        }
    }
    nums.len()
}
