//! How the emulated device notices the doorbells a program rings.
//!
//! libmlx5 posts a send by writing the WQE into its own buffer, updating
//! the doorbell record, and storing the WQE's first 8 bytes into a
//! register of a mapped UAR page (a plain 8-byte store, or a BlueFlame copy
//! of the whole WQE, whose first 8 bytes are the same); arming a CQ is a
//! store to the page's CQ doorbell. Those stores land in the emulated UAR
//! page itself (the page the program mapped), with no call into the
//! library.
//!
//! A card sees such a store as a PCIe write. Here a watch thread per
//! ucontext reads the doorbell words of the context's UAR pages (the CQ arm
//! word and the start of each BlueFlame buffer, nine words per page) and
//! hands each changed word to the device exactly as a store through
//! `UarPage::write64` would (`SimDevice::notice_doorbell`): the engine then
//! reads the doorbell record and the WQEs as hardware does. Doorbell
//! records are not watched: a card reads the send counter only when rung
//! and the receive counter only when a message arrives, and so does the
//! engine. Consecutive doorbells always differ (the WQE counter is in
//! them), so a changed word is a new doorbell; several stores to one word
//! between two looks are one doorbell, which is all a card needs, since
//! the engine runs the queue up to the record's counter.
//!
//! Why a watch thread rather than trapping stores (a write-protected page
//! and a SIGSEGV handler): a trap costs a signal and a page-protection
//! change per doorbell (microseconds), needs the program's SIGSEGV, and
//! cannot see BlueFlame copies made with vector stores any cheaper. The
//! watch costs nothing on the program's path; its price is latency and idle
//! CPU, bounded by an adaptive poll: after activity it looks every
//! [`MIN_SLEEP`] until [`SPIN`] has passed, then sleeps, doubling the sleep
//! up to [`MAX_SLEEP`] while nothing happens. An idle context thus wakes at
//! most 1000 times a second; a busy one notices a doorbell within one short
//! sleep. Activity is a doorbell, or a message the device delivered (from
//! the network or another device of the process): programs answer
//! completions with new work (a ping-pong's reply), so the device wakes the
//! thread on each delivery (`SimDevice::listen_arrivals`) and the next
//! doorbell finds it looking.
//!
//! Short sleeps rather than spinning or yielding keep the thread a sleeper
//! to the scheduler: on a machine whose CPUs are all busy (a program
//! polling its CQ keeps one busy), a thread that spins or yields waits for
//! a scheduler tick (4 ms) to run again, one that sleeps runs as soon as it
//! wakes. Measured with ibv_rc_pingpong on two busy CPUs, a yielding
//! watcher made each iteration 10 ms or more, a sleeping one as fast as the
//! Rust verbs ringing doorbells themselves.
//!
//! The thread also serves the context's completion channels
//! ([`EventSource`]): on each look it forwards the device's completion
//! events to the program. It ends when the context closes.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use devx::sim::SimDevice;
use devx::uar::{BF_OFFSET, CQ_DOORBELL_OFFSET, UAR_PAGE_SIZE};
use devx::UarPage;

use crate::state;

/// After activity the thread looks every [`MIN_SLEEP`] until [`SPIN`] has
/// passed, then backs off.
pub const SPIN: Duration = Duration::from_millis(2);
/// First and longest sleep of an idle thread.
pub const MIN_SLEEP: Duration = Duration::from_micros(10);
pub const MAX_SLEEP: Duration = Duration::from_millis(1);
/// BlueFlame buffers start every 256 bytes from [`BF_OFFSET`] (half of
/// mlx5's 512-byte register, and a non-cached page's doorbell spacing).
const BF_STRIDE: usize = 256;
const BF_WORDS: usize = (UAR_PAGE_SIZE - BF_OFFSET) / BF_STRIDE;
/// The words watched in each page.
const WATCHED: [usize; BF_WORDS + 1] = {
    let mut w = [CQ_DOORBELL_OFFSET; BF_WORDS + 1];
    let mut i = 0;
    while i < BF_WORDS {
        w[i + 1] = BF_OFFSET + i * BF_STRIDE;
        i += 1;
    }
    w
};

/// One watched page and the values last seen in its words.
struct Page {
    page_id: u32,
    page: Arc<dyn UarPage>,
    last: [u64; WATCHED.len()],
}

impl Page {
    fn new(page_id: u32, page: Arc<dyn UarPage>) -> Page {
        let mut p = Page {
            page_id,
            page,
            last: [0; WATCHED.len()],
        };
        for (i, off) in WATCHED.iter().enumerate() {
            p.last[i] = p.word(*off);
        }
        p
    }

    fn word(&self, offset: usize) -> u64 {
        // SAFETY: the page is an emulated UAR page (`SimUarPage`): 4096
        // bytes of `AtomicU64`s, page-aligned, alive while `self.page` is
        // held; `offset` is one of `WATCHED`, 8-byte aligned and in the page.
        let w = unsafe { &*(self.page.base().add(offset) as *const AtomicU64) };
        w.load(Ordering::Acquire)
    }
}

/// Something else the thread serves on each look: completion channels
/// forward the device's events to the program.
pub trait EventSource: Send + Sync {
    /// Forwards what waits; returns how many.
    fn forward(&self) -> usize;
}

/// What the thread and the context share.
struct Shared {
    sim: Arc<SimDevice>,
    pages: Mutex<Vec<Page>>,
    sources: Mutex<Vec<Arc<dyn EventSource>>>,
    stop: AtomicBool,
    noticed: AtomicU64,
    looks: AtomicU64,
    sleeps: AtomicU64,
}

impl Shared {
    fn pages(&self) -> MutexGuard<'_, Vec<Page>> {
        self.pages.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The watch thread of one ucontext.
pub struct Watcher {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What a watcher did, for logs and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchStats {
    pub noticed: u64,
    pub looks: u64,
    pub sleeps: u64,
}

impl Watcher {
    pub fn new(sim: Arc<SimDevice>) -> Watcher {
        Watcher {
            shared: Arc::new(Shared {
                sim,
                pages: Mutex::new(Vec::new()),
                sources: Mutex::new(Vec::new()),
                stop: AtomicBool::new(false),
                noticed: AtomicU64::new(0),
                looks: AtomicU64::new(0),
                sleeps: AtomicU64::new(0),
            }),
            thread: Mutex::new(None),
        }
    }

    /// Watches `page` (once).
    pub fn watch(&self, page_id: u32, page: Arc<dyn UarPage>) {
        let mut pages = self.shared.pages();
        if !pages.iter().any(|p| p.page_id == page_id) {
            pages.push(Page::new(page_id, page));
        }
    }

    /// Starts the thread unless it runs: once the context has a queue that
    /// doorbells can be rung for.
    pub fn start(&self) {
        let mut t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        if t.is_none() && !self.shared.stop.load(Ordering::Acquire) {
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("devx-preload-db".into())
                .spawn(move || {
                    // A panic ends the watch (doorbells then go unnoticed),
                    // never the program.
                    let r = std::panic::catch_unwind(AssertUnwindSafe(|| run(&shared)));
                    if r.is_err() {
                        eprintln!("devx-preload: the doorbell watch thread stopped on a panic");
                    }
                });
            match spawned {
                Ok(h) => *t = Some(h),
                Err(e) => state::log(|| format!("doorbell watch thread: {e}")),
            }
        }
    }

    /// Serves `source` on every look from now on (until the context closes).
    pub fn serve(&self, source: Arc<dyn EventSource>) {
        self.shared
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(source);
    }

    /// Stops watching `page_id` (its UAR was freed).
    pub fn unwatch(&self, page_id: u32) {
        self.shared.pages().retain(|p| p.page_id != page_id);
    }

    pub fn stats(&self) -> WatchStats {
        WatchStats {
            noticed: self.shared.noticed.load(Ordering::Relaxed),
            looks: self.shared.looks.load(Ordering::Relaxed),
            sleeps: self.shared.sleeps.load(Ordering::Relaxed),
        }
    }

    /// Stops the thread and waits for it (at most one sleep).
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = t {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread: look, hand changed words on, and poll adaptively.
fn run(shared: &Shared) {
    // Sleeps as short as MIN_SLEEP need a timer slack below the default
    // 50 µs. SAFETY: PR_SET_TIMERSLACK takes an integer and only affects
    // this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64) };
    let mut last_activity = Instant::now();
    let mut sleep = MIN_SLEEP;
    let listener = shared.sim.listen_arrivals(std::thread::current());
    let mut rx_seen = shared.sim.arrivals();
    while !shared.stop.load(Ordering::Acquire) {
        let mut rung = 0u64;
        {
            let mut pages = shared.pages();
            for p in pages.iter_mut() {
                for (i, off) in WATCHED.iter().enumerate() {
                    let v = p.word(*off);
                    if v != p.last[i] {
                        p.last[i] = v;
                        shared.sim.notice_doorbell(p.page_id, *off, v);
                        rung += 1;
                    }
                }
            }
        }
        let forwarded: usize = shared
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|s| s.forward())
            .sum();
        shared.looks.fetch_add(1, Ordering::Relaxed);
        shared.noticed.fetch_add(rung, Ordering::Relaxed);
        let rx = shared.sim.arrivals();
        if rung != 0 || forwarded != 0 || rx != rx_seen {
            rx_seen = rx;
            last_activity = Instant::now();
            sleep = MIN_SLEEP;
            continue;
        }
        if last_activity.elapsed() < SPIN {
            std::thread::park_timeout(MIN_SLEEP);
            continue;
        }
        shared.sleeps.fetch_add(1, Ordering::Relaxed);
        std::thread::park_timeout(sleep);
        sleep = (sleep * 2).min(MAX_SLEEP);
    }
    shared.sim.unlisten_arrivals(listener);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watched_words_are_the_arm_doorbell_and_each_blueflame_buffer() {
        assert_eq!(WATCHED[0], CQ_DOORBELL_OFFSET);
        assert_eq!(&WATCHED[1..3], &[BF_OFFSET, BF_OFFSET + 256]);
        assert_eq!(*WATCHED.last().unwrap(), UAR_PAGE_SIZE - 256);
        assert!(WATCHED.iter().all(|o| o % 8 == 0));
    }
}
