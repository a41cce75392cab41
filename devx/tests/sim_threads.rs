//! The emulated firmware under load: many threads at once, many live objects.

#[path = "sim_support.rs"]
mod support;

use std::sync::Arc;

use devx::sim::ObjKind;
use devx::ProviderContext;
use prm_layouts::*;
use support::*;

#[test]
fn four_threads_ten_thousand_commands_each() {
    let mut env = Env::new(601);
    let (cq_h, cqn) = env.cq(6);
    let ctx = Arc::clone(&env.ctx);
    let before = env.dev.commands_executed();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let ctx = Arc::clone(&ctx);
            std::thread::spawn(move || {
                let q = with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn);
                let mut out = vec![0u8; QueryCqOut::SIZE_BYTES];
                let mut live = Vec::new();
                for i in 0..10_000u32 {
                    match i % 4 {
                        // Allocate, query, free: the tables churn while others read.
                        0 => {
                            let mut o = vec![0u8; 16];
                            live.push(
                                ctx.create(&hdr(Opcode::AllocPd.raw(), 0, 16), &mut o)
                                    .unwrap(),
                            );
                        }
                        1 => ctx.query(cq_h, &q, &mut out).unwrap(),
                        2 => {
                            let h = live.pop().unwrap();
                            ctx.destroy(h, &[]).unwrap();
                        }
                        _ => {
                            let mut o = vec![0u8; 16];
                            ctx.general(&hdr(Opcode::QueryVportState.raw(), 0, 16), &mut o)
                                .unwrap();
                            assert_eq!(o[15] & 0xf, 1, "thread {t}: vport up");
                        }
                    }
                }
                assert!(live.is_empty());
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(env.dev.commands_executed() - before, 40_000);
    assert_eq!(env.dev.count(ObjKind::Pd), 0);
}

#[test]
fn threads_sharing_a_channel_each_completion_arrives_once() {
    let mut env = Env::new(604);
    let (cq_h, cqn) = env.cq(6);
    let ch = env.ctx.create_cmd_channel().unwrap();
    const PER_THREAD: u64 = 5_000;
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let ctx = Arc::clone(&env.ctx);
            let ch = Arc::clone(&ch);
            std::thread::spawn(move || {
                let q = with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn);
                let mut got = Vec::new();
                for i in 0..PER_THREAD {
                    let wr_id = t * PER_THREAD + i;
                    ctx.query_async(cq_h, &q, QueryCqOut::SIZE_BYTES, wr_id, &*ch)
                        .unwrap();
                    // Takes its own completion or another thread's, or
                    // finds that another thread took it.
                    if let Some((w, out)) = ch.try_get().unwrap() {
                        out.unwrap();
                        got.push(w);
                    }
                }
                got
            })
        })
        .collect();
    let mut seen: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    while let Some((w, _)) = ch.try_get().unwrap() {
        seen.push(w);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..4 * PER_THREAD).collect::<Vec<_>>());
}

#[test]
fn threads_with_their_own_contexts() {
    let dev = devx::sim::sim_device("sim602").unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let dev = Arc::clone(&dev);
            std::thread::spawn(move || {
                let ctx = dev.open_sim().unwrap();
                for _ in 0..2_500 {
                    let mut o = vec![0u8; 16];
                    let h = ctx
                        .create(&hdr(Opcode::AllocTransportDomain.raw(), 0, 16), &mut o)
                        .unwrap();
                    let mut o2 = vec![0u8; 16];
                    ctx.create(&hdr(Opcode::AllocPd.raw(), 0, 16), &mut o2)
                        .unwrap();
                    ctx.destroy(h, &[]).unwrap();
                }
                // The PDs are left for the close to clean up.
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(dev.live_objects(), 0);
    assert_eq!(dev.open_contexts(), 0);
}

#[test]
fn a_hundred_thousand_live_objects() {
    let env = Env::new(603);
    let handles: Vec<_> = (0..100_000).map(|_| env.pd().0).collect();
    assert_eq!(env.dev.count(ObjKind::Pd), 100_000);
    // Numbers stay unique and lookups keep working with a full table.
    let (h, pd) = env.pd();
    assert!(pd > 100_000);
    env.destroy(h).unwrap();
    for h in handles {
        env.destroy(h).unwrap();
    }
    assert_eq!(env.dev.live_objects(), 0);
}
