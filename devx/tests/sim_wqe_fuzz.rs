//! No WQE bytes and no doorbell-record value make the data-path engine
//! loop, touch memory outside registered ranges, or panic: a WQE reaching
//! past the SND counter completes in error, and random WQEs (random `ds`,
//! opcodes, keys, addresses around registered ranges between guard pages,
//! random SND counters) always leave the doorbell call returning and the
//! device answering commands. The responder's RCV counter is randomized
//! too.
//!
//! The seeded run in CI tries `DEVX_WQE_FUZZ_CASES` cases (default 300)
//! from `DEVX_WQE_FUZZ_SEED` (default fixed); set them for a longer run:
//! `DEVX_WQE_FUZZ_CASES=100000 cargo test -p devx --test sim_wqe_fuzz`.

#[path = "sim_datapath_support.rs"]
mod dp;

use std::sync::mpsc;
use std::time::Duration;

use devx::ProviderContext;
use dp::*;
use prm_layouts::{CqeOpcode, CqeSyndrome, Opcode};

/// How long one doorbell (or the whole regression) may take before the
/// test calls it a hang; generous for a loaded CI machine.
const HANG: Duration = Duration::from_secs(60);

const ERR: u8 = 6;

/// Allocates a PD from a fresh context on `n`'s device: proves the device
/// lock is free.
fn device_answers(n: &Node) {
    let ctx = n.dev.open_sim().expect("open a second context");
    let mut out = [0u8; 16];
    ctx.create(&hdr(Opcode::AllocPd as u16, 0, 16), &mut out)
        .expect("ALLOC_PD from a second context");
}

/// Runs `f` on a thread and fails the test, naming `what`, when it does
/// not finish in time (the thread is left behind: it is hung).
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(HANG) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no return after {HANG:?} (hang)"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: the thread panicked"),
    }
}

#[test]
fn a_wqe_longer_than_what_was_posted_completes_in_error() {
    bounded("doorbell for a WQE past the SND counter", || {
        let n = Node::new(1190);
        let mut p = rc_pair_on(&n, None, RC, 0);
        let src = n.mr(256, ALL);
        let dst = n.mr(256, ALL);
        // An RDMA_WRITE whose ctrl segment says ds = 5 (two WQEBBs), with
        // only one WQEBB posted.
        let segs = [
            raddr_seg(dst.addr(), dst.key),
            data_seg(16, src.key, src.addr()),
        ];
        let (index, ctrl) =
            p.a.write_wqe(WRITE, SIGNALED, [0; 4], &[&segs[0], &segs[1], &[0; 32]]);
        assert_eq!(p.a.sq_pi.wrapping_sub(index), 2, "the WQE takes two WQEBBs");
        p.a.ring_raw(index.wrapping_add(1), ctrl);

        let c = p.cq_a.poll_all();
        assert_eq!(c.len(), 1, "one completion for the malformed WQE: {c:?}");
        assert_eq!(c[0].opcode, CqeOpcode::ReqErr as u8);
        assert_eq!(c[0].syndrome, CqeSyndrome::LocalQpOpErr as u8);
        assert_eq!(c[0].wqe_counter, index);
        assert_eq!(n.qp_state(&p.a), ERR);
        device_answers(&n);
        // Nothing was written at the destination.
        assert_eq!(dst.mem.read(0, 16), vec![0; 16]);
    });
}

#[test]
fn a_wqe_past_the_counter_in_a_queue_already_in_error_is_flushed_once() {
    bounded("flush of a WQE past the SND counter", || {
        let n = Node::new(1191);
        let mut p = rc_pair_on(&n, None, RC, 0);
        let src = n.mr(256, ALL);
        // A bad lkey moves the QP to ERR; the next WQE then claims two
        // WQEBBs with one posted and must flush once, not wrap the counter.
        p.a.post(
            SEND,
            SIGNALED,
            [0; 4],
            &[&data_seg(16, src.key ^ 1, src.addr())],
        );
        let index = p.a.sq_pi;
        let (_, ctrl) = p.a.write_wqe(SEND, SIGNALED, [0; 4], &[&[0; 64]]);
        p.a.ring_raw(index.wrapping_add(1), ctrl);
        let c = p.cq_a.poll_all();
        let sq: Vec<_> = c
            .iter()
            .filter(|c| c.opcode == CqeOpcode::ReqErr as u8)
            .collect();
        assert_eq!(sq.len(), 2, "the error and one flush: {c:?}");
        assert_eq!(sq[1].syndrome, CqeSyndrome::WrFlushErr as u8);
        device_answers(&n);
    });
}

/// splitmix64: small, seeded, and the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

/// Memory with an inaccessible page on each side: any access past it
/// faults the test process. Mapped once per run; each case registers it
/// on its own context.
struct Guarded {
    base: usize,
    len: usize,
}

const PAGE: usize = 4096;

impl Guarded {
    fn new(pages: usize) -> Guarded {
        let len = pages * PAGE;
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + 2 * PAGE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED, "mmap");
        let base = at as usize + PAGE;
        // SAFETY: the middle pages of the mapping just made.
        let rc = unsafe {
            libc::mprotect(
                base as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        assert_eq!(rc, 0, "mprotect");
        // Never unmapped: the mapping serves every case of the run.
        Guarded { base, len }
    }

    /// Registers the range on `n`'s context with `acc`; returns its key.
    fn register(&self, n: &Node, acc: Acc) -> u32 {
        let (_, umem) = n
            .ctx
            .umem_reg(
                self.base,
                self.len,
                LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ,
            )
            .expect("register the guarded range");
        n.mkey(umem, 0, self.base as u64, self.len as u64, acc, n.pd)
            .expect("MKEY over the guarded range")
    }

    /// An address around the range: inside, at its edges, or in the
    /// guard pages and beyond.
    fn addr(&self, r: &mut Rng) -> u64 {
        let edge = r.pick(&[0i64, self.len as i64]);
        let off = edge + r.below(3 * PAGE as u64) as i64 - PAGE as i64;
        (self.base as i64 + off) as u64
    }
}

/// What the random WQEs can name: two guarded ranges, one registered with
/// every access right and one for local access only.
struct Target<'a> {
    full: &'a Guarded,
    local: &'a Guarded,
    full_key: u32,
    local_key: u32,
}

impl Target<'_> {
    fn key(&self, r: &mut Rng) -> u32 {
        match r.below(5) {
            0 => self.local_key,
            1 => r.next() as u32,
            2 => self.full_key ^ 0xff,
            _ => self.full_key,
        }
    }

    fn addr(&self, r: &mut Rng) -> u64 {
        match r.below(6) {
            0 => self.local.addr(r),
            1 => r.next(),
            _ => self.full.addr(r),
        }
    }

    fn len(&self, r: &mut Rng) -> u32 {
        match r.below(4) {
            0 => r.next() as u32,
            1 => 0,
            _ => r.below(2 * self.full.len as u64) as u32,
        }
    }
}

const OPCODES: [u8; 9] = [NOP, WRITE, WRITE_IMM, SEND, SEND_IMM, READ, CAS, FAA, 0xff];

/// The segments after the ctrl segment of one random WQE.
fn segments(r: &mut Rng, t: &Target, opcode: u8) -> Vec<Vec<u8>> {
    let mut segs = Vec::new();
    if r.chance(10) {
        let n = r.below(200) as usize;
        segs.push((0..n).map(|_| r.next() as u8).collect());
        return segs;
    }
    if matches!(opcode, WRITE | WRITE_IMM | READ | CAS | FAA) || r.chance(10) {
        segs.push(raddr_seg(t.addr(r), t.key(r)));
    }
    if matches!(opcode, CAS | FAA) || r.chance(5) {
        segs.push(atomic_seg(r.next(), r.next()));
    }
    if r.chance(20) {
        let n = r.below(300) as usize;
        let data: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
        segs.push(inline_seg(&data));
    } else {
        for _ in 0..r.below(5) {
            segs.push(data_seg(t.len(r), t.key(r), t.addr(r)));
        }
    }
    segs
}

/// One case on a context of its own: receives on the responder, 1–4
/// random WQEs on the requester, a random SND counter, one doorbell; then
/// both CQs drain, the device must still answer, and closing the context
/// leaves no object behind.
fn case(r: &mut Rng, full: &Guarded, local: &Guarded) -> Seen {
    let n = Node::new(FUZZ_DEVICE);
    let t = Target {
        full,
        local,
        full_key: full.register(&n, ALL),
        local_key: local.register(&n, LOCAL_ONLY),
    };
    let seen = run_case(r, &n, &t);
    device_answers(&n);
    let dev = std::sync::Arc::clone(&n.dev);
    drop(n);
    // The device serves this test alone.
    assert_eq!(
        dev.live_objects(),
        0,
        "closing the case's context destroys its objects"
    );
    seen
}

/// The device the random cases run on.
const FUZZ_DEVICE: u32 = 1192;

fn run_case(r: &mut Rng, n: &Node, t: &Target) -> Seen {
    let service = r.pick(&[RC, RC, UC]);
    let mut p = rc_pair_on(n, None, service, r.below(3) as u8);
    for _ in 0..r.below(4) {
        let sges: Vec<_> = (0..r.below(3))
            .map(|_| (t.key(r), t.addr(r), t.len(r)))
            .collect();
        p.b.post_recv(&sges);
    }
    if r.chance(10) {
        p.b.set_rcv_counter(r.next() as u16);
    }
    let start = p.a.sq_pi;
    let mut head = 0;
    for i in 0..1 + r.below(4) {
        let opcode = r.pick(&OPCODES);
        let segs = segments(r, t, opcode);
        let refs: Vec<&[u8]> = segs.iter().map(Vec::as_slice).collect();
        let at = p.a.sq_pi;
        let (_, ctrl) = p.a.write_wqe(opcode, r.pick(&[0, SIGNALED]), [0; 4], &refs);
        if r.chance(30) {
            // A ds of anything the 6-bit field holds, whatever was written.
            let mut bytes = ctrl.to_ne_bytes();
            bytes[7] = (bytes[7] & 0xc0) | r.below(64) as u8;
            p.a.write_raw(at, &bytes);
        }
        if r.chance(5) {
            let junk: Vec<u8> = (0..64).map(|_| r.next() as u8).collect();
            p.a.write_raw(at, &junk);
        }
        if i == 0 {
            head = ctrl;
        }
    }
    let counter = match r.below(10) {
        0 => r.next() as u16,
        1 => start.wrapping_add(r.below(8) as u16),
        2 => p.a.sq_pi.wrapping_sub(1),
        _ => p.a.sq_pi,
    };
    p.a.ring_raw(counter, if r.chance(10) { r.next() } else { head });
    // Bounded drains: the rings hold 64 CQEs each.
    let mut seen = Seen::default();
    for _ in 0..256 {
        let (a, b) = (p.cq_a.poll(), p.cq_b.poll());
        if a.is_none() && b.is_none() {
            break;
        }
        for c in a.iter().chain(b.iter()) {
            seen.count(c);
        }
    }
    seen
}

/// Completions the cases produced, to show the engine was reached.
#[derive(Default, Debug)]
struct Seen {
    ok: u64,
    errors: u64,
    flushed: u64,
}

impl Seen {
    fn count(&mut self, c: &Cqe) {
        let error = [CqeOpcode::ReqErr as u8, CqeOpcode::RespErr as u8].contains(&c.opcode);
        match (error, c.syndrome == CqeSyndrome::WrFlushErr as u8) {
            (false, _) => self.ok += 1,
            (true, true) => self.flushed += 1,
            (true, false) => self.errors += 1,
        }
    }

    fn add(&mut self, o: Seen) {
        self.ok += o.ok;
        self.errors += o.errors;
        self.flushed += o.flushed;
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

#[test]
fn random_wqes_and_counters_never_hang_fault_or_panic() {
    let cases = env_u64("DEVX_WQE_FUZZ_CASES", 300);
    let seed = env_u64("DEVX_WQE_FUZZ_SEED", 0x5eed_0fd3_f100);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (full, local) = (Guarded::new(2), Guarded::new(1));
        let mut seen = Seen::default();
        for i in 0..cases {
            let mut r = Rng(seed ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d));
            seen.add(case(&mut r, &full, &local));
            if tx.send((i, None)).is_err() {
                return;
            }
        }
        let _ = tx.send((cases, Some(seen)));
    });
    let mut done = 0;
    loop {
        match rx.recv_timeout(HANG) {
            Ok((_, Some(seen))) => {
                eprintln!(
                    "{cases} random WQE cases from seed {seed:#x}: every doorbell returned; \
                     completions {} ok, {} in error, {} flushed",
                    seen.ok, seen.errors, seen.flushed
                );
                assert!(
                    seen.ok > 0 && seen.errors > 0 || cases < 50,
                    "the cases reach the engine"
                );
                return;
            }
            Ok((i, None)) => done = i + 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("case {done} (seed {seed:#x}) did not return after {HANG:?}: hang")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("case {done} (seed {seed:#x}) panicked")
            }
        }
    }
}
