//! The data-path engine of the emulated device: when software rings a send
//! doorbell, the posted WQEs are executed from registered memory, as the
//! hardware would, and CQEs are written into the CQ rings.
//!
//! * Execution is synchronous, inside the doorbell store, under the device
//!   lock (the firmware state lock; the engine's own bookkeeping in
//!   [`Inner`] is only ever locked inside it).
//! * Messages to a QP of this device are delivered under the same lock.
//!   Messages to another emulated device (found by the destination GID in
//!   the peers' GID tables) are carried across with this device's lock
//!   released; consecutive WQEs of a QP travel as one batch, delivered
//!   under one peer lock. The one exception, RC RDMA WRITEs copied
//!   straight from memory to memory, takes the peer's locks only if they
//!   are free at once, never waiting while it holds this device's
//!   ([`Engine::try_locked`]); so no thread ever waits for a device lock
//!   while holding another.
//! * RNR waits are retried by a timer thread per device (and by any later
//!   doorbell for the QP); see [`requester`].
//! * All raw memory access is in [`dma`]; every range is checked against an
//!   MKEY and its registered UMEM in [`keys`] before it is touched.

pub(crate) mod cache;
pub(crate) mod cqe;
pub(crate) mod dma;
pub(crate) mod flush;
pub(crate) mod keys;
pub(crate) mod msg;
pub(crate) mod net;
pub(crate) mod notify;
pub(crate) mod queue;
pub(crate) mod requester;
pub(crate) mod responder;
pub(crate) mod umr;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use super::fw::state::State;
use super::fw::Firmware;
use crate::uar::{held_key, page_bits, HeldDoorbell};
use msg::Reply;
use requester::{Batch, Entry, Step};

/// Receives every doorbell written to an emulated UAR page: the engine,
/// or a test's stand-in installed with `SimDevice::set_doorbell_sink`. The
/// kernel layer's UAR pages deliver to it.
pub trait DoorbellSink: Send + Sync {
    /// `value` was stored at `offset` of UAR page `page_id` (bytes as in memory).
    fn doorbell(&self, page_id: u32, offset: usize, value: u64);
}

/// BlueFlame / doorbell registers of a UAR page (prm-guide §5.6).
pub(crate) const BF_REGS: std::ops::Range<usize> = 0x800..0x1000;

/// [`Engine::last_held`] when nothing is held: no [`held_key`] is all ones
/// (the ctrl segment's DS byte is never part of one).
const NO_HELD: u64 = u64::MAX;

/// The QPN a send doorbell names: `value` is the first 8 bytes of the
/// WQE's ctrl segment as they are in memory.
#[inline(always)]
fn doorbell_qpn(value: u64) -> u32 {
    let mut ctrl = prm_layouts::WqeCtrlSeg::new();
    ctrl.0[..8].copy_from_slice(&value.to_ne_bytes());
    ctrl.qpn()
}

/// A QP waiting for the responder to post a receive.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RnrWait {
    pub(crate) qpn: u32,
    /// Timer retries left (rnr_retry; 7 = unlimited).
    pub(crate) left: u8,
    pub(crate) delay: Duration,
}

/// Where a destination GID lives.
pub(crate) enum Peer {
    Local,
    /// Another device: its index in [`Inner::remote`] (an index, so that
    /// resolving a peer per WQE costs no reference count traffic).
    Remote(usize),
    /// A device in another process or host, through the network port.
    Net(IpAddr),
}

/// The engine's bookkeeping; locked only while the device lock is held.
#[derive(Default)]
pub(crate) struct Inner {
    /// QPs whose send queue a thread is executing right now.
    pub(crate) busy: Vec<u32>,
    pub(crate) rnr: Vec<RnrWait>,
    /// Reused message buffer.
    pub(crate) scratch: Vec<u8>,
    /// Message buffers of settled batches, for the next ones.
    pub(crate) spare: Vec<Vec<u8>>,
    /// The message of the last [`requester`] WQE bound for another device.
    pub(crate) outgoing: Option<msg::Msg>,
    /// Reused batch storage.
    pub(crate) batch: Option<Box<Batch>>,
    /// Reused receive WQE buffer.
    pub(crate) recv: Vec<u8>,
    /// Reused send WQE buffer.
    pub(crate) wqe: Option<Box<[u8; queue::MAX_SQ_WQE]>>,
    /// Linked-list SRQ heads: srqn → (WQEs consumed, next WQE index).
    pub(crate) srq_heads: HashMap<u32, (u32, u32)>,
    /// QP views and key checks resolved in the current firmware epoch.
    pub(crate) cache: cache::Cache,
    /// Resolved remote GIDs; entries are never removed, so an index stays
    /// valid.
    peers: Vec<([u8; 16], Arc<Engine>)>,
    /// The last GID resolved to a peer, and its index: a QP's WQEs name
    /// the same destination again and again.
    last_peer: Option<([u8; 16], usize)>,
    /// The last GID found on no device of this process, with the registry
    /// generation it was looked up in, and the address it names.
    last_net: Option<([u8; 16], u64, IpAddr)>,
    /// Transport state of QPs talking through the network port.
    pub(crate) net: net::NetState,
}

impl Inner {
    /// The engine of resolved peer `i` (see [`Peer::Remote`]).
    pub(crate) fn remote(&self, i: usize) -> Option<&Arc<Engine>> {
        self.peers.get(i).map(|(_, e)| e)
    }
}

/// One device's data-path engine.
pub(crate) struct Engine {
    index: u32,
    fw: Arc<Firmware>,
    gids: [[u8; 16]; 4],
    inner: Mutex<Inner>,
    paused: AtomicBool,
    /// Doorbells rung while paused: (UAR page, QPN), in order.
    held: Mutex<Vec<(u32, u32)>>,
    /// `held`'s last entry as [`held_key`] while paused and installed
    /// ([`NO_HELD`] otherwise), written under its lock: a paused doorbell
    /// for the same QP again, the common case, is then dropped on one load
    /// and a compare, without reading `paused` or `installed`.
    last_held: AtomicU64,
    /// The engine is the device's doorbell sink (see
    /// `SimDevice::set_doorbell_sink`); written under `held`'s lock.
    installed: AtomicBool,
    timer: AtomicBool,
    /// The RNR timer thread last started.
    timer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The device is gone: no timer runs or starts.
    stopped: AtomicBool,
    /// Other devices of the process are reached over the in-process link
    /// (the named `simN` devices); a privately owned device reaches none.
    linked: bool,
    me: Weak<Engine>,
    /// The network port, when the device has an address ([`net`]).
    net: OnceLock<Arc<crate::sim::wire::NetPort>>,
    /// Messages delivered to this device (over the network or the
    /// in-memory link), and the threads woken on each ([`Engine::arrived`]).
    arrivals: AtomicU64,
    listeners: Mutex<Vec<(u64, std::thread::Thread)>>,
    listening: AtomicBool,
    next_listener: AtomicU64,
}

impl Engine {
    pub(crate) fn new(index: u32, fw: Arc<Firmware>, linked: bool) -> Arc<Engine> {
        let gids = fw.with(|st| st.ident.gid_table().map(|e| e.gid));
        Arc::new_cyclic(|me| Engine {
            index,
            fw,
            gids,
            inner: Mutex::new(Inner::default()),
            paused: AtomicBool::new(false),
            held: Mutex::new(Vec::new()),
            last_held: AtomicU64::new(NO_HELD),
            installed: AtomicBool::new(true),
            timer: AtomicBool::new(false),
            timer_thread: Mutex::new(None),
            stopped: AtomicBool::new(false),
            linked,
            me: me.clone(),
            net: OnceLock::new(),
            arrivals: AtomicU64::new(0),
            listeners: Mutex::new(Vec::new()),
            listening: AtomicBool::new(false),
            next_listener: AtomicU64::new(1),
        })
    }

    fn listeners(&self) -> MutexGuard<'_, Vec<(u64, std::thread::Thread)>> {
        self.listeners.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Messages were delivered: counts them and wakes the listeners (a
    /// program answers completions with new work, so whoever watches its
    /// doorbells should look now).
    pub(crate) fn arrived(&self) {
        self.arrivals.fetch_add(1, Ordering::Release);
        if self.listening.load(Ordering::Acquire) {
            for (_, t) in self.listeners().iter() {
                t.unpark();
            }
        }
    }

    /// How many times messages were delivered to this device.
    pub fn arrivals(&self) -> u64 {
        self.arrivals.load(Ordering::Acquire)
    }

    /// Unparks `thread` whenever messages are delivered; the id removes it.
    pub fn listen_arrivals(&self, thread: std::thread::Thread) -> u64 {
        let id = self.next_listener.fetch_add(1, Ordering::Relaxed);
        let mut l = self.listeners();
        l.push((id, thread));
        self.listening.store(true, Ordering::Release);
        id
    }

    pub fn unlisten_arrivals(&self, id: u64) {
        let mut l = self.listeners();
        l.retain(|(i, _)| *i != id);
        self.listening.store(!l.is_empty(), Ordering::Release);
    }

    fn lock_inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// GID table entry `index` of this device (entry 0 for an empty index).
    pub(crate) fn gid(&self, index: u8) -> [u8; 16] {
        self.gids
            .get(usize::from(index))
            .copied()
            .unwrap_or(self.gids[0])
    }

    /// The device a destination GID names: zero or one of ours is local.
    fn peer(&self, inner: &mut Inner, gid: &[u8; 16]) -> Option<Peer> {
        // Our own GIDs never change, so a GID once found remote stays so.
        if let Some((g, i)) = inner.last_peer {
            if g == *gid {
                return Some(Peer::Remote(i));
            }
        }
        // A network peer stays one until a device is added to the process
        // (it is none of ours: those never change).
        let generation = super::registry_generation();
        if let Some((g, at, ip)) = inner.last_net {
            if g == *gid && at == generation {
                return Some(Peer::Net(ip));
            }
        }
        if *gid == [0; 16] || self.gids.contains(gid) {
            return Some(Peer::Local);
        }
        if let Some(i) = inner.peers.iter().position(|(g, _)| g == gid) {
            inner.last_peer = Some((*gid, i));
            return Some(Peer::Remote(i));
        }
        if !self.linked {
            return self.net_peer(gid);
        }
        // The registry lock is never held while a device lock is taken, so
        // taking it here (under this device's lock) cannot deadlock.
        let reg = super::registry().lock().unwrap_or_else(|e| e.into_inner());
        let found = reg
            .values()
            .find(|d| d.index() != self.index && d.shared.dp.gids.contains(gid))
            .map(|d| Arc::clone(&d.shared.dp));
        drop(reg);
        let Some(e) = found else {
            let peer = self.net_peer(gid);
            if let Some(Peer::Net(ip)) = peer {
                inner.last_net = Some((*gid, generation, ip));
            }
            return peer;
        };
        inner.peers.push((*gid, e));
        let i = inner.peers.len() - 1;
        inner.last_peer = Some((*gid, i));
        Some(Peer::Remote(i))
    }

    /// Executes QP `qpn`'s send queue (see [`requester::drive`]). Out of
    /// line, so the doorbell around it stays small enough to inline.
    #[inline(never)]
    fn run_qp(&self, qpn: u32, entry: Entry) {
        let mut resume: Option<Box<Batch>> = None;
        loop {
            let step = self.fw.with_mut(|st| {
                let mut inner = self.lock_inner();
                requester::drive(self, st, &mut inner, qpn, entry, resume.take())
            });
            match step {
                Step::Idle => return,
                Step::Remote(peer, mut batch) => {
                    peer.accept(&mut batch);
                    resume = Some(batch);
                }
            }
        }
    }

    /// Messages from another device's QP arrive here, in order; delivery
    /// stops at the first that is not ACKed, as the requester would.
    fn accept(&self, batch: &mut Batch) {
        self.fw.with_mut(|st| {
            let mut inner = self.lock_inner();
            batch.replies.clear();
            let mut view = None;
            for i in 0..batch.writes.len() {
                let w = batch.writes[i];
                let data = responder::Payload::Bytes(batch.write_data(i));
                let reply = responder::deliver_write(
                    st,
                    &mut inner,
                    &mut view,
                    batch.write_qpn,
                    w.raddr,
                    w.rkey,
                    data,
                );
                batch.replies.push(reply);
                if reply != Reply::Ack {
                    break;
                }
            }
            for msg in &mut batch.msgs {
                let reply = responder::deliver(st, &mut inner, msg);
                batch.replies.push(reply);
                if reply != Reply::Ack {
                    break;
                }
            }
        });
        self.arrived();
    }

    /// Runs `f` with this device's state and engine bookkeeping if both are
    /// free now; `None` if another thread holds either. For a thread that
    /// holds another device's locks (see [`Firmware::try_with_mut`]).
    ///
    /// [`Firmware::try_with_mut`]: crate::sim::fw::Firmware::try_with_mut
    pub(crate) fn try_locked<R>(&self, f: impl FnOnce(&mut State, &mut Inner) -> R) -> Option<R> {
        self.fw
            .try_with_mut(|st| {
                let mut inner = match self.inner.try_lock() {
                    Ok(g) => g,
                    Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => return None,
                };
                Some(f(st, &mut inner))
            })
            .flatten()
    }

    /// Starts the RNR retry timer thread unless it runs already.
    fn start_timer(&self, _inner: &Inner) {
        if self.stopped.load(Ordering::Acquire) || self.timer.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(me) = self.me.upgrade() else {
            self.timer.store(false, Ordering::Release);
            return;
        };
        let spawned = std::thread::Builder::new()
            .name(format!("sim{}-rnr", self.index))
            .spawn(move || me.timer_loop());
        match spawned {
            Ok(h) => *self.timer_thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(h),
            Err(_) => self.timer.store(false, Ordering::Release),
        }
    }

    /// Ends the RNR timer (the device is gone) and waits for it.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let handle = self
            .timer_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    /// Retries RNR-blocked QPs until none is left waiting.
    fn timer_loop(&self) {
        loop {
            if self.stopped.load(Ordering::Acquire) {
                self.timer.store(false, Ordering::Release);
                return;
            }
            let waits: Vec<RnrWait> = self.fw.with(|_| self.lock_inner().rnr.clone());
            if waits.is_empty() {
                // Decide under the locks, so a wait added meanwhile either
                // is seen here or finds the flag cleared and starts a timer.
                let done = self.fw.with(|_| {
                    let inner = self.lock_inner();
                    if inner.rnr.is_empty() {
                        self.timer.store(false, Ordering::Release);
                        true
                    } else {
                        false
                    }
                });
                if done {
                    return;
                }
                continue;
            }
            let delay = waits.iter().map(|w| w.delay).min().unwrap_or_default();
            std::thread::sleep(delay.max(Duration::from_micros(10)));
            for w in waits {
                self.run_qp(
                    w.qpn,
                    Entry {
                        page: None,
                        by_timer: true,
                    },
                );
            }
        }
    }

    /// Holds doorbells back (remembered in order) or executes them again.
    pub(crate) fn pause(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
        if !paused {
            self.run();
        }
    }

    /// Executes the doorbells held while paused, and retries RNR waits and
    /// QPs that need flushing, now, whether paused or not.
    pub(crate) fn run(&self) {
        let held = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            self.last_held.store(NO_HELD, Ordering::Release);
            std::mem::take(&mut *held)
        };
        for (page, qpn) in held {
            self.run_qp(
                qpn,
                Entry {
                    page: Some(page),
                    by_timer: false,
                },
            );
        }
        let waits: Vec<RnrWait> = self.fw.with(|_| self.lock_inner().rnr.clone());
        for w in waits {
            self.run_qp(
                w.qpn,
                Entry {
                    page: None,
                    by_timer: false,
                },
            );
        }
    }

    /// Doorbells held while paused.
    pub(crate) fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Engine {
    /// A doorbell for `qpn` while paused, not a repeat of the last one held:
    /// remembered in order. False when the engine was resumed meanwhile
    /// (`paused` is read under the lock, which [`Engine::run`] takes after
    /// it is cleared): the caller runs the QP, and `last_held` stays clear.
    #[cold]
    #[inline(never)]
    fn hold(&self, page_id: u32, value: u64) -> bool {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if !self.paused.load(Ordering::Acquire) {
            return false;
        }
        let qpn = doorbell_qpn(value);
        if held.last() != Some(&(page_id, qpn)) {
            held.push((page_id, qpn));
        }
        if self.installed.load(Ordering::Acquire) {
            self.last_held
                .store(held_key(page_bits(page_id), value), Ordering::Release);
        }
        true
    }

    /// Makes the engine the device's doorbell sink again (`true`) or not.
    /// Taken out, it lets no doorbell end as a held repeat: those go to
    /// the sink installed instead.
    pub(crate) fn install(&self, on: bool) {
        let _held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        self.installed.store(on, Ordering::Release);
        if !on {
            self.last_held.store(NO_HELD, Ordering::Release);
        }
    }

    /// Whether the engine is the device's doorbell sink.
    #[inline(always)]
    pub(crate) fn installed(&self) -> bool {
        self.installed.load(Ordering::Acquire)
    }

    /// The note of the last doorbell held, as UAR page `page` sees it: a
    /// page's ringer checks a repeat itself ([`crate::uar::BfStore`]).
    pub(crate) fn held_doorbell(&self, page: u32) -> HeldDoorbell {
        HeldDoorbell::new(&self.last_held, page)
    }

    #[inline(never)]
    fn arm(&self, page_id: u32, value: u64) {
        // Arming is a firmware-state change only; it never waits for the
        // data path, so a paused engine still takes it.
        self.fw
            .with_mut(|st| notify::arm_doorbell(st, page_id, value));
        if let Some(p) = self.net.get() {
            p.armed();
        }
    }

    /// The program found a CQ empty: receives what arrived at the network
    /// port on its thread (see [`crate::sim::wire::port`]). Whether any
    /// packet was handled.
    pub(crate) fn progress(&self) -> bool {
        self.net.get().is_some_and(|p| p.progress(self))
    }
}

impl DoorbellSink for Engine {
    /// A held repeat (a paused engine rung again for the same QP) ends in
    /// the UAR page's store, or its ringer's, which checks the engine's
    /// [`HeldDoorbell`] note before it calls here; one that comes another
    /// way is held again, which adds nothing.
    #[inline]
    fn doorbell(&self, page_id: u32, offset: usize, value: u64) {
        if offset == notify::CQ_ARM_DOORBELL {
            return self.arm(page_id, value);
        }
        if !BF_REGS.contains(&offset) {
            return;
        }
        if self.paused.load(Ordering::Acquire) && self.hold(page_id, value) {
            return;
        }
        self.run_qp(
            doorbell_qpn(value),
            Entry {
                page: Some(page_id),
                by_timer: false,
            },
        );
    }
}
