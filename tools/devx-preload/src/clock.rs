//! The device's free-running clock, as mlx5_ib shows it to libmlx5: two
//! read-only pages a program maps and reads with plain loads.
//!
//! * The core-clock page (`MLX5_IB_MMAP_CORE_CLOCK`): on a card, the
//!   init-segment page holding `internal_timer_h`/`internal_timer_l`, the
//!   big-endian halves of the 64-bit counter running at
//!   `device_frequency_khz`. libmlx5 reads it for `ibv_query_rt_values_ex`
//!   (high, low, high again until the two highs agree).
//! * The clock-info page (`MLX5_IB_MMAP_CLOCK_INFO`, `struct
//!   mlx5_ib_clock_info`): the kernel's timecounter for that counter
//!   (cycles and wall-clock nanoseconds at its last update, `mult`/`shift`,
//!   mask), under a sequence word; `mlx5dv_get_clock_info` copies it and
//!   `mlx5dv_ts_to_ns` converts counter values to nanoseconds with it.
//!
//! The emulated counter is the time since the process first asked for a
//! device clock, scaled to the profile's `device_frequency_khz`; the
//! timecounter starts at the wall-clock time of that moment, as mlx5_core's
//! starts at `ktime_get_real()`.
//!
//! A plain load cannot call into the library, so a thread keeps the pages
//! current once either is mapped: one thread for all contexts of the
//! process, running while a context with mapped pages lives. It stores the
//! counter every [`TICK`], the resolution of the mapped counter (reads less
//! than a tick apart may see the same value). Every program that opens a
//! context maps the core clock, so the tick is 1 ms: 1 000 short wake-ups
//! a second (a 100 µs tick cost about 5 % of a CPU with one idle context,
//! debug build). It advances the timecounter every half overflow period
//! (about six minutes at 1 GHz), as mlx5_core's overflow work does, so a
//! delta times `mult` never overflows 64 bits. The counter is one aligned
//! 8-byte store, so a reader's high/low/high sequence sees either the old
//! or the new value, or retries.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use devx::UarPage;

use crate::abi::{self as uabi, ClockInfo};
use crate::state;

/// How often the mapped counter is refreshed.
pub const TICK: Duration = Duration::from_millis(1);
/// `MLX5_CYCLES_SHIFT` of Linux 6.1's mlx5_core (`lib/clock.c`).
const CYCLES_SHIFT: u32 = 23;
/// Width of the counter the timecounter uses (`CLOCKSOURCE_MASK(41)`).
const CYCLES_MASK: u64 = (1 << 41) - 1;
/// The kernel's tick rate the overflow period is given in (jiffies);
/// libmlx5 does not read it.
const HZ: u64 = 1000;
const NSEC_PER_SEC: u64 = 1_000_000_000;
/// Size of a clock page.
pub const CLOCK_PAGE_SIZE: usize = 4096;

/// The instant the emulated counters read zero, and the wall-clock time
/// (ns since the epoch) then.
fn epoch() -> (Instant, u64) {
    static EPOCH: OnceLock<(Instant, u64)> = OnceLock::new();
    *EPOCH.get_or_init(|| {
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        (Instant::now(), real)
    })
}

/// The free-running counter of a device at `khz` now.
pub fn cycles_now(khz: u32) -> u64 {
    let ns = epoch().0.elapsed().as_nanos();
    u64::try_from(ns * u128::from(khz) / 1_000_000).unwrap_or(u64::MAX)
}

#[repr(C, align(4096))]
struct Words([AtomicU64; CLOCK_PAGE_SIZE / 8]);

/// One read-only clock page.
pub struct ClockPage {
    words: Box<Words>,
}

impl ClockPage {
    fn new() -> ClockPage {
        ClockPage {
            words: Box::new(Words(std::array::from_fn(|_| AtomicU64::new(0)))),
        }
    }

    fn store(&self, offset: usize, bytes: [u8; 8], order: Ordering) {
        if let Some(w) = self.words.0.get(offset / 8) {
            w.store(u64::from_ne_bytes(bytes), order);
        }
    }

    /// The 8 bytes at `offset` (8-byte aligned), as laid out in memory.
    pub fn bytes(&self, offset: usize) -> [u8; 8] {
        self.words
            .0
            .get(offset / 8)
            .map_or([0; 8], |w| w.load(Ordering::Acquire).to_ne_bytes())
    }
}

impl UarPage for ClockPage {
    fn base(&self) -> *mut u8 {
        self.words.0.as_ptr() as *mut u8
    }

    /// The pages are mapped read-only: stores are dropped.
    fn write64(&self, _offset: usize, _value: u64) {}
}

fn pair(lo: u32, hi: u32) -> [u8; 8] {
    let mut b = [0; 8];
    b[..4].copy_from_slice(&lo.to_ne_bytes());
    b[4..].copy_from_slice(&hi.to_ne_bytes());
    b
}

/// mlx5_core's timecounter: nanoseconds advanced by `delta * mult >> shift`
/// with the fraction carried.
#[derive(Debug, Clone, Copy)]
struct Timecounter {
    cycle_last: u64,
    nsec: u64,
    frac: u64,
    mult: u32,
}

impl Timecounter {
    fn advance(&mut self, cycles: u64) {
        let delta = cycles.wrapping_sub(self.cycle_last) & CYCLES_MASK;
        let ns = u128::from(delta) * u128::from(self.mult) + u128::from(self.frac);
        self.nsec = self
            .nsec
            .wrapping_add(u64::try_from(ns >> CYCLES_SHIFT).unwrap_or(u64::MAX));
        self.frac = u64::try_from(ns & ((1 << CYCLES_SHIFT) - 1)).unwrap_or(0);
        self.cycle_last = cycles;
    }
}

/// `clocksource_khz2mult`.
fn khz2mult(khz: u32, shift: u32) -> u32 {
    let khz = u64::from(khz.max(1));
    u32::try_from(((1_000_000u64 << shift) + khz / 2) / khz).unwrap_or(u32::MAX)
}

/// The cycles between two timecounter updates and that period in
/// nanoseconds, as `mlx5_init_overflow_period` computes them.
fn overflow(mult: u32) -> (u64, u64) {
    let cycles = ((u64::MAX >> 1) / u64::from(mult.max(1))).min(CYCLES_MASK / 3);
    let ns = (u128::from(cycles) * u128::from(mult)) >> CYCLES_SHIFT;
    (cycles, u64::try_from(ns).unwrap_or(u64::MAX))
}

struct Shared {
    khz: u32,
    /// Offset of `internal_timer_h` in the core-clock page.
    timer_offset: usize,
    core: Arc<ClockPage>,
    info: Arc<ClockPage>,
    tc: Mutex<Timecounter>,
    sign: AtomicU64,
    /// Handed to the ticker (on the first mapping).
    started: AtomicBool,
    /// When the ticker last rewrote the clock-info page.
    last_info: Mutex<Instant>,
}

impl Shared {
    fn store_counter(&self) {
        let c = cycles_now(self.khz);
        // internal_timer_h then internal_timer_l, each big-endian: the
        // counter's big-endian bytes, in one store.
        self.core
            .store(self.timer_offset, c.to_be_bytes(), Ordering::Release);
    }

    /// Advances the timecounter to now and rewrites the clock-info page
    /// under its sequence word (`mlx5_update_clock_info_page`).
    fn update_info(&self) {
        let mut tc = self.tc.lock().unwrap_or_else(|e| e.into_inner());
        tc.advance(cycles_now(self.khz));
        let sign = u32::try_from(self.sign.load(Ordering::Relaxed)).unwrap_or(0);
        let info = &self.info;
        info.store(
            0,
            pair(sign | uabi::MLX5_IB_CLOCK_INFO_KERNEL_UPDATING, 0),
            Ordering::Relaxed,
        );
        fence(Ordering::SeqCst);
        write_info(info, &self.info_fields(&tc, sign));
        let next = sign.wrapping_add(uabi::MLX5_IB_CLOCK_INFO_KERNEL_UPDATING * 2);
        info.store(0, pair(next, 0), Ordering::Release);
        self.sign.store(u64::from(next), Ordering::Relaxed);
    }

    fn info_fields(&self, tc: &Timecounter, sign: u32) -> ClockInfo {
        let (_, period_ns) = overflow(tc.mult);
        ClockInfo {
            sign,
            resv: 0,
            nsec: tc.nsec,
            cycles: tc.cycle_last,
            frac: tc.frac,
            mult: tc.mult,
            shift: CYCLES_SHIFT,
            mask: CYCLES_MASK,
            overflow_period: period_ns / (NSEC_PER_SEC / HZ),
        }
    }
}

/// Writes every field but `sign`.
fn write_info(page: &ClockPage, i: &ClockInfo) {
    use std::mem::offset_of;
    let r = Ordering::Relaxed;
    page.store(offset_of!(ClockInfo, nsec), i.nsec.to_ne_bytes(), r);
    page.store(offset_of!(ClockInfo, cycles), i.cycles.to_ne_bytes(), r);
    page.store(offset_of!(ClockInfo, frac), i.frac.to_ne_bytes(), r);
    page.store(offset_of!(ClockInfo, mult), pair(i.mult, i.shift), r);
    page.store(offset_of!(ClockInfo, mask), i.mask.to_ne_bytes(), r);
    page.store(
        offset_of!(ClockInfo, overflow_period),
        i.overflow_period.to_ne_bytes(),
        r,
    );
}

/// The clock pages of one context; the ticker keeps them current while the
/// `Clock` lives.
pub struct Clock {
    shared: Arc<Shared>,
}

impl Clock {
    /// The pages of a device counting at `khz`, with `internal_timer_h` at
    /// `timer_offset` of the core-clock page.
    pub fn new(khz: u32, timer_offset: usize) -> Clock {
        let mult = khz2mult(khz, CYCLES_SHIFT);
        let tc = Timecounter {
            cycle_last: 0,
            nsec: epoch().1,
            frac: 0,
            mult,
        };
        let shared = Arc::new(Shared {
            khz,
            timer_offset: timer_offset & !7,
            core: Arc::new(ClockPage::new()),
            info: Arc::new(ClockPage::new()),
            tc: Mutex::new(tc),
            sign: AtomicU64::new(0),
            started: AtomicBool::new(false),
            last_info: Mutex::new(Instant::now()),
        });
        shared.store_counter();
        shared.update_info();
        Clock { shared }
    }

    /// The page mapped at mmap offset `off` (bytes) for `page_shift`, if
    /// it is a clock page; keeps the pages current from then on.
    pub fn page_at(&self, off: u64, page_shift: u32) -> Option<Arc<dyn UarPage>> {
        let page = if off == uabi::cmd_mmap_offset(uabi::MLX5_IB_MMAP_CORE_CLOCK, page_shift) {
            Arc::clone(&self.shared.core)
        } else if off
            == uabi::cmd_mmap_offset(uabi::MLX5_IB_MMAP_CLOCK_INFO, page_shift)
                | u64::from(uabi::MLX5_IB_CLOCK_INFO_V1) << page_shift
        {
            Arc::clone(&self.shared.info)
        } else {
            return None;
        };
        self.start();
        Some(page)
    }

    /// The current contents of the clock-info page.
    pub fn info(&self) -> ClockInfo {
        let tc = *self.shared.tc.lock().unwrap_or_else(|e| e.into_inner());
        let sign = u32::try_from(self.shared.sign.load(Ordering::Relaxed)).unwrap_or(0);
        self.shared.info_fields(&tc, sign)
    }

    /// The core-clock page.
    pub fn core_page(&self) -> Arc<ClockPage> {
        Arc::clone(&self.shared.core)
    }

    fn start(&self) {
        if !self.shared.started.swap(true, Ordering::AcqRel) {
            tick_for(&self.shared);
        }
    }
}

impl Shared {
    /// One tick: the counter, and the clock-info page when due.
    fn tick(&self, period: Duration) {
        self.store_counter();
        let mut last = self.last_info.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() >= period {
            self.update_info();
            *last = Instant::now();
        }
    }
}

/// The clocks the ticker serves, and whether its thread runs.
struct Ticker {
    clocks: Vec<Weak<Shared>>,
    running: bool,
}

fn ticker() -> MutexGuard<'static, Ticker> {
    static TICKER: Mutex<Ticker> = Mutex::new(Ticker {
        clocks: Vec::new(),
        running: false,
    });
    TICKER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Serves `shared` from now until its `Clock` drops, starting the ticker
/// thread unless it runs.
fn tick_for(shared: &Arc<Shared>) {
    let mut t = ticker();
    t.clocks.push(Arc::downgrade(shared));
    if t.running {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("devx-preload-clock".into())
        .spawn(|| {
            let r = std::panic::catch_unwind(AssertUnwindSafe(run));
            if r.is_err() {
                ticker().running = false;
                eprintln!("devx-preload: the clock thread stopped on a panic");
            }
        });
    match spawned {
        Ok(_) => t.running = true,
        Err(e) => state::log(|| format!("clock thread: {e}")),
    }
}

/// The ticker: one thread for every live clock of the process, ending when
/// none is left.
fn run() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and only affects this
    // thread; a 1 µs slack keeps TICK-long sleeps near TICK.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64) };
    loop {
        let live: Vec<Arc<Shared>> = {
            let mut t = ticker();
            t.clocks.retain(|w| w.strong_count() > 0);
            let live: Vec<_> = t.clocks.iter().filter_map(Weak::upgrade).collect();
            if live.is_empty() {
                t.running = false;
                return;
            }
            live
        };
        for s in &live {
            let (_, period_ns) = overflow(khz2mult(s.khz, CYCLES_SHIFT));
            // Half the period leaves room for a late wake-up.
            s.tick(Duration::from_nanos(period_ns / 2));
        }
        drop(live);
        std::thread::sleep(TICK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts_to_ns(i: &ClockInfo, ts: u64) -> u64 {
        // mlx5dv_ts_to_ns.
        let delta = ts.wrapping_sub(i.cycles) & i.mask;
        if delta > i.mask / 2 {
            let delta = i.cycles.wrapping_sub(ts) & i.mask;
            i.nsec - ((delta * u64::from(i.mult) - i.frac) >> i.shift)
        } else {
            i.nsec + ((delta * u64::from(i.mult) + i.frac) >> i.shift)
        }
    }

    #[test]
    fn parameters_follow_mlx5_core_at_1_ghz() {
        assert_eq!(khz2mult(1_000_000, CYCLES_SHIFT), 1 << 23);
        // A third of the 41-bit mask, below (2^63 - 1) / mult.
        let (cycles, ns) = overflow(1 << 23);
        assert_eq!(cycles, CYCLES_MASK / 3);
        assert_eq!(ns, CYCLES_MASK / 3);
    }

    #[test]
    fn clock_info_converts_counter_values_to_wall_clock_ns() {
        let khz = 156_250;
        let clock = Clock::new(khz, 0);
        let i = clock.info();
        assert_eq!(i.sign % 2, 0, "not left mid-update");
        assert_eq!((i.shift, i.mask), (CYCLES_SHIFT, CYCLES_MASK));
        // One second of counter after the last update is one second later,
        // within the rounding of `mult` (under 1 ppm).
        let later = ts_to_ns(&i, i.cycles + u64::from(khz) * 1000);
        assert!(
            later.abs_diff(i.nsec + NSEC_PER_SEC) <= 1000,
            "{later} {i:?}"
        );
        let earlier = ts_to_ns(&i, i.cycles.wrapping_sub(u64::from(khz)));
        assert!(
            earlier.abs_diff(i.nsec - 1_000_000) <= 1000,
            "{earlier} {i:?}"
        );
        let page = &clock.shared.info;
        assert_eq!(
            u64::from_ne_bytes(page.bytes(std::mem::offset_of!(ClockInfo, mask))),
            CYCLES_MASK
        );
    }

    #[test]
    fn mapping_the_core_clock_page_keeps_its_counter_running() {
        let clock = Clock::new(1_000_000, 0);
        assert!(clock.page_at(0, 12).is_none());
        let info_off = uabi::cmd_mmap_offset(uabi::MLX5_IB_MMAP_CLOCK_INFO, 12);
        assert!(clock.page_at(info_off, 12).is_some());
        let off = uabi::cmd_mmap_offset(uabi::MLX5_IB_MMAP_CORE_CLOCK, 12);
        let page = clock.page_at(off, 12).expect("core clock page");
        let core = clock.core_page();
        assert_eq!(page.base(), core.base());
        let read = || u64::from_be_bytes(core.bytes(0));
        let first = read();
        // Bounded wait for the thread's next store.
        let advanced = (0..10_000).any(|_| {
            std::thread::sleep(TICK);
            read() > first
        });
        assert!(advanced, "counter stayed at {first}");
    }
}
