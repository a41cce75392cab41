//! What the doorbell watch thread costs: how long after a store into a
//! mapped UAR page the device has the doorbell (the thread looking, and
//! the thread asleep), and the CPU the thread uses while nothing happens.
//!
//! ```sh
//! cargo run --release -p devx-preload --example doorbell_watch
//! ```
//!
//! The device's doorbell sink is replaced by a recorder, so the numbers are
//! the watch alone, without the engine's work.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use devx::provider::UarKind;
use devx::sim::DoorbellSink;
use devx::uar::BF_OFFSET;
use devx_preload::doorbell::{Watcher, MAX_SLEEP};

/// Keeps the last doorbell the device got.
#[derive(Default)]
struct Recorder {
    last: AtomicU64,
}

impl DoorbellSink for Recorder {
    fn doorbell(&self, _page_id: u32, _offset: usize, value: u64) {
        self.last.store(value, Ordering::Release);
    }
}

/// CPU time of this process.
fn cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is a valid target.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sim = devx::sim::sim_device("sim0")?;
    let recorder = Arc::new(Recorder::default());
    sim.set_doorbell_sink(Some(recorder.clone()));
    let ctx = devx::Device::emulated("sim0")?.open()?;
    let uar = ctx.provider().uar_alloc(UarKind::BlueFlame)?;
    let watcher = Watcher::new(Arc::clone(&sim));
    watcher.watch(uar.page_id, Arc::clone(&uar.page));
    watcher.start();
    // SAFETY: the page is the emulated UAR page: AtomicU64 words, alive
    // while `uar` is; BF_OFFSET is in the page and 8-byte aligned.
    let word = unsafe { &*(uar.page.base().add(BF_OFFSET) as *const AtomicU64) };
    let mut value = 0u64;
    // One doorbell as libmlx5 rings it: a store into the page; then wait
    // (bounded) until the device has it.
    let mut ring = || -> Option<Duration> {
        value += 1;
        let t = Instant::now();
        word.store(value, Ordering::Release);
        let deadline = t + Duration::from_secs(1);
        while recorder.last.load(Ordering::Acquire) != value {
            if Instant::now() > deadline {
                return None;
            }
            std::hint::spin_loop();
        }
        Some(t.elapsed())
    };

    // Hot: doorbells back to back, the thread looking.
    let mut hot: Vec<Duration> = (0..20_000).filter_map(|_| ring()).collect();
    let before = watcher.stats();
    let t = Instant::now();
    let n = 20_000;
    for _ in 0..n {
        ring();
    }
    let hot_total = t.elapsed();
    let after = watcher.stats();
    println!(
        "hot:  notice latency p50 {:?} p99 {:?} ({} samples); {:.0} doorbells/s back to back; {:.1} looks per doorbell",
        percentile(&mut hot, 0.5),
        percentile(&mut hot, 0.99),
        hot.len(),
        n as f64 / hot_total.as_secs_f64(),
        (after.looks - before.looks) as f64 / (after.noticed - before.noticed).max(1) as f64,
    );

    // Cold: the thread has backed off to its longest sleep.
    let mut cold = Vec::new();
    for _ in 0..50 {
        std::thread::sleep(MAX_SLEEP * 20);
        if let Some(d) = ring() {
            cold.push(d);
        }
    }
    println!(
        "cold: notice latency p50 {:?} p99 {:?} max {:?} ({} samples)",
        percentile(&mut cold, 0.5),
        percentile(&mut cold, 0.99),
        cold.iter().max().copied().unwrap_or_default(),
        cold.len()
    );

    // Idle: nothing rung for 2 s.
    std::thread::sleep(Duration::from_millis(100));
    let (c0, s0, t0) = (cpu(), watcher.stats(), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (c1, s1, wall) = (cpu(), watcher.stats(), t0.elapsed());
    println!(
        "idle: {:.3}% of one CPU ({:?} CPU in {:?}), {:.0} wake-ups/s",
        100.0 * (c1 - c0).as_secs_f64() / wall.as_secs_f64(),
        c1 - c0,
        wall,
        (s1.sleeps - s0.sleeps) as f64 / wall.as_secs_f64()
    );
    watcher.stop();
    Ok(())
}
