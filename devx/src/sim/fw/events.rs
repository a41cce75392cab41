//! The device's event dispatch: EQE builders, the subscription table
//! ([`EventHub`]) that the kernel layer's SUBSCRIBE_EVENT fills, and the
//! per-channel queues it delivers into. It lives in the firmware state so
//! the firmware and the data path can raise events under the device lock;
//! channel queues have their own lock and never take the device lock
//! (kernel-abi §4.1, §4.5).

use std::collections::{HashSet, VecDeque};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

use nix::sys::eventfd::{EfdFlags, EventFd};

use prm_layouts::{Eqe, Opcode};

use crate::admission::ObjKey;
use crate::error::{Error, Result};
use crate::eventfd::EventFdRef;
use crate::provider::{DevxEvent, Handle};

/// EQE types (`MLX5_EVENT_TYPE_*`, prm-guide §6.3).
pub(crate) mod ty {
    pub(crate) const COMP: u16 = 0x00;
    pub(crate) const PATH_MIG: u16 = 0x01;
    pub(crate) const COMM_EST: u16 = 0x02;
    pub(crate) const SQ_DRAINED: u16 = 0x03;
    pub(crate) const CQ_ERROR: u16 = 0x04;
    pub(crate) const WQ_CATAS_ERROR: u16 = 0x05;
    pub(crate) const PATH_MIG_FAILED: u16 = 0x07;
    pub(crate) const PORT_CHANGE: u16 = 0x09;
    pub(crate) const WQ_INVAL_REQ_ERROR: u16 = 0x10;
    pub(crate) const WQ_ACCESS_ERROR: u16 = 0x11;
    pub(crate) const SRQ_CATAS_ERROR: u16 = 0x12;
    pub(crate) const SRQ_LAST_WQE: u16 = 0x13;
    pub(crate) const SRQ_RQ_LIMIT: u16 = 0x14;
    pub(crate) const XRQ_ERROR: u16 = 0x18;
    pub(crate) const DCT_DRAINED: u16 = 0x1c;
    pub(crate) const DCT_KEY_VIOLATION: u16 = 0x1d;
}

/// `cq_err.syndrome` of an overrun (`MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN`).
pub(crate) const CQ_ERR_SYNDROME_OVERRUN: u8 = 0x01;

/// Events a channel holds unread before it drops one and reports EOVERFLOW
/// (the kernel's allocation failure, made deterministic).
pub(crate) const MAX_QUEUED_EVENTS: usize = 1 << 16;

/// A completion EQE naming CQ `cqn`.
pub(crate) fn comp_eqe(cqn: u32) -> [u8; 64] {
    let mut e = Eqe::new();
    e.set_event_type(ty::COMP as u8);
    e.event_data_mut().comp_mut().set_cq_number(cqn);
    e.0
}

pub(crate) use crate::events::port_change;

/// A port change EQE (`mlx5_eqe_port_state`) for `port`.
pub(crate) fn port_change_eqe(port: u8, sub_type: u8) -> [u8; 64] {
    let mut e = Eqe::new();
    e.set_event_type(ty::PORT_CHANGE as u8);
    e.set_event_sub_type(sub_type);
    e.event_data_mut()
        .port_state_change_mut()
        .set_port_num(port);
    e.0
}

/// A CQ error EQE (`mlx5_eqe_cq_err`).
pub(crate) fn cq_error_eqe(cqn: u32, syndrome: u8) -> [u8; 64] {
    let mut e = Eqe::new();
    e.set_event_type(ty::CQ_ERROR as u8);
    let d = e.event_data_mut().cq_error_mut();
    d.set_cqn(cqn);
    d.set_syndrome(syndrome);
    e.0
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct EvQ {
    /// (subscription id, event) in arrival order.
    events: VecDeque<(u64, DevxEvent)>,
    /// Subscriptions with an event queued (omit-data collapse).
    queued: HashSet<u64>,
    /// An event was dropped; the next read reports EOVERFLOW once.
    overflow: bool,
}

pub(crate) struct EvChanInner {
    pub(crate) ctx_id: u64,
    omit_data: bool,
    q: Mutex<EvQ>,
    cv: Condvar,
    efd: EventFd,
}

impl EvChanInner {
    /// An empty queue with its eventfd, for a channel of context `ctx_id`.
    pub(crate) fn new(ctx_id: u64, omit_data: bool) -> Result<EvChanInner> {
        let efd = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| Error::os("eventfd", e as i32))?;
        Ok(EvChanInner {
            ctx_id,
            omit_data,
            q: Mutex::new(EvQ::default()),
            cv: Condvar::new(),
            efd,
        })
    }

    /// The eventfd that polls readable while events are queued.
    pub(crate) fn fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }

    fn push(&self, sub: u64, cookie: u64, eqe: &[u8; 64]) {
        let mut q = lock(&self.q);
        // Without data there is nothing to tell repeats apart: one queued
        // cookie per subscription, as the kernel keeps one list entry each.
        if self.omit_data && !q.queued.insert(sub) {
            return;
        }
        if q.events.len() >= MAX_QUEUED_EVENTS {
            q.overflow = true;
            if self.omit_data {
                q.queued.remove(&sub);
            }
            return;
        }
        if q.events.is_empty() {
            // Readable while anything is queued.
            let _ = self.efd.write(1);
        }
        let eqe = if self.omit_data {
            Vec::new()
        } else {
            eqe.to_vec()
        };
        q.events.push_back((sub, DevxEvent { cookie, eqe }));
        self.cv.notify_all();
    }

    /// The next event; waits for one when `block`.
    pub(crate) fn pop(&self, block: bool) -> Result<Option<DevxEvent>> {
        let mut q = lock(&self.q);
        loop {
            if q.overflow {
                q.overflow = false;
                return Err(Error::os(
                    "read(event channel): events were dropped",
                    libc::EOVERFLOW,
                ));
            }
            if let Some((sub, ev)) = q.events.pop_front() {
                q.queued.remove(&sub);
                if q.events.is_empty() {
                    // Drain the counter: the fd stops polling readable.
                    let _ = self.efd.read();
                }
                return Ok(Some(ev));
            }
            if !block {
                return Ok(None);
            }
            q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// How a subscription delivers its events.
pub(crate) enum Delivery {
    /// Queued on the channel, carrying this cookie.
    Cookie(u64),
    /// Signalled on an eventfd (the kernel's FD_NUM redirect).
    EventFd(EventFdRef),
}

struct Sub {
    id: u64,
    ctx: u64,
    /// The subscribing context's handle of the object; `None`: unaffiliated.
    handle: Option<Handle>,
    target: Option<ObjKey>,
    types: Vec<u16>,
    delivery: Delivery,
    chan: Weak<EvChanInner>,
}

/// The device's subscriptions: where each raised event goes. Lives in the
/// firmware state so the data path can raise events under the device lock;
/// channels have their own lock and never take the device lock.
#[derive(Default)]
pub(crate) struct EventHub {
    subs: Vec<Sub>,
    next: u64,
}

impl EventHub {
    pub(crate) fn subscribe(
        &mut self,
        ctx: u64,
        obj: Option<(Handle, ObjKey)>,
        types: &[u16],
        delivery: Delivery,
        chan: &Arc<EvChanInner>,
    ) {
        self.subs.retain(|s| s.chan.strong_count() > 0);
        self.next += 1;
        self.subs.push(Sub {
            id: self.next,
            ctx,
            handle: obj.map(|o| o.0),
            target: obj.map(|o| o.1),
            types: types.to_vec(),
            delivery,
            chan: Arc::downgrade(chan),
        });
    }

    /// Drops the subscriptions on one object handle (it was destroyed).
    pub(crate) fn forget_handle(&mut self, ctx: u64, handle: Handle) {
        self.subs
            .retain(|s| !(s.ctx == ctx && s.handle == Some(handle)));
    }

    /// Drops every subscription a context made (it was closed).
    pub(crate) fn forget_ctx(&mut self, ctx: u64) {
        self.subs.retain(|s| s.ctx != ctx);
    }

    /// Delivers `eqe` (by its event type) to every channel subscribed to it
    /// for `target` (`None`: an unaffiliated event).
    pub(crate) fn raise(&self, target: Option<ObjKey>, eqe: &[u8; 64]) {
        let t = u16::from(Eqe::from_slice(eqe).map_or(0, |e| e.event_type()));
        for s in &self.subs {
            if s.target != target || !s.types.contains(&t) {
                continue;
            }
            // The subscription lives as long as its channel, whichever way
            // it delivers.
            let Some(ch) = s.chan.upgrade() else {
                continue;
            };
            match &s.delivery {
                Delivery::Cookie(cookie) => ch.push(s.id, *cookie, eqe),
                Delivery::EventFd(efd) => efd.signal(),
            }
        }
    }
}

/// The key a CQ's subscriptions are filed under (CREATE_CQ, cqn).
pub(crate) fn cq_key(cqn: u32) -> ObjKey {
    ObjKey {
        creator: Opcode::CreateCq.raw().into(),
        number: cqn & 0x00ff_ffff,
    }
}

/// The key a QP's subscriptions are filed under (CREATE_QP, qpn).
pub(crate) fn qp_key(qpn: u32) -> ObjKey {
    ObjKey {
        creator: u32::from(prm_layouts::enums::Opcode::CreateQp.raw()),
        number: qpn & 0x00ff_ffff,
    }
}

/// The key an RMP's subscriptions are filed under (CREATE_RMP, rmpn).
pub(crate) fn rmp_key(rmpn: u32) -> ObjKey {
    ObjKey {
        creator: u32::from(Opcode::CreateRmp.raw()),
        number: rmpn & 0x00ff_ffff,
    }
}

/// An SRQ event EQE (`mlx5_eqe_qp_srq`) naming SRQ `srqn`.
pub(crate) fn srq_event_eqe(event_type: u16, srqn: u32) -> [u8; 64] {
    let mut e = Eqe::new();
    e.set_event_type(event_type as u8);
    e.event_data_mut().qp_srq_mut().set_qpn_rqn_sqn(srqn);
    e.0
}

/// `mlx5_eqe_qp_srq.type` of a QP.
const QUEUE_TYPE_QP: u8 = 0;

/// A QP event EQE (`mlx5_eqe_qp_srq`) naming QP `qpn`.
pub(crate) fn qp_event_eqe(event_type: u16, qpn: u32) -> [u8; 64] {
    let mut e = Eqe::new();
    e.set_event_type(event_type as u8);
    let d = e.event_data_mut().qp_srq_mut();
    d.set_type(QUEUE_TYPE_QP);
    d.set_qpn_rqn_sqn(qpn);
    e.0
}
