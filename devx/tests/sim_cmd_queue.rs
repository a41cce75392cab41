//! The emulated firmware's command queue: 32 slots, per-opcode latency from
//! the profile, completions in finish order, and futures over `CmdComp`
//! resolved by a minimal executor.

#[path = "sim_support.rs"]
mod support;

use std::time::{Duration, Instant};

use devx::reactor::block_on;
use devx::sim::CMD_QUEUE_SLOTS;
use devx::sim::{Profile, SimDevice};
use devx::ProviderContext;
use prm_layouts::enums::Opcode;
use prm_layouts::*;
use support::*;

/// A device whose QUERY_CQ holds its queue slot for a minute.
fn slow_cq_queries() -> Env {
    let p = Profile {
        cmd_latency: vec![(Opcode::QueryCq.raw(), Duration::from_secs(60))],
        ..Profile::default()
    };
    Env::on(SimDevice::new(p))
}

fn query_cq(cqn: u32) -> Vec<u8> {
    let mut q = QueryCqIn::new();
    q.set_opcode(Opcode::QueryCq.raw());
    q.set_cqn(cqn);
    q.as_bytes().to_vec()
}

fn query_caps() -> Vec<u8> {
    let mut q = QueryHcaCapIn::new();
    q.set_opcode(Opcode::QueryHcaCap.raw());
    q.as_bytes().to_vec()
}

#[test]
fn completions_come_in_finish_order() {
    let mut env = slow_cq_queries();
    let (cq_h, cqn) = env.cq(5);
    let ch = env.ctx.create_cmd_channel().unwrap();
    env.ctx
        .query_async(cq_h, &query_cq(cqn), QueryCqOut::SIZE_BYTES, 1, &*ch)
        .unwrap();
    env.ctx
        .general_async(&query_caps(), vec![0; QueryHcaCapOut::SIZE_BYTES], 2, &*ch)
        .unwrap();
    // The capability query was submitted second and finishes first.
    let (first, out) = ch.get().unwrap();
    assert_eq!(first, 2);
    assert!(out.is_ok());
    assert_eq!(env.dev.async_in_flight(), 1);
    // Closing the context posts its started command's completion at once.
    drop(env);
    let (second, out) = ch.get().unwrap();
    assert_eq!(second, 1);
    let out = out.unwrap();
    assert_eq!(
        QueryCqOut::from_slice(&out)
            .unwrap()
            .cq_context()
            .log_cq_size(),
        5
    );
}

#[test]
fn commands_beyond_the_queue_slots_wait_for_one() {
    let mut env = slow_cq_queries();
    let (cq_h, cqn) = env.cq(5);
    let ch = env.ctx.create_cmd_channel().unwrap();
    let extra = 8;
    for wr_id in 0..(CMD_QUEUE_SLOTS + extra) as u64 {
        env.ctx
            .query_async(cq_h, &query_cq(cqn), QueryCqOut::SIZE_BYTES, wr_id, &*ch)
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    // A started command leaves the queue before it takes its slot.
    while (env.dev.async_queued() > extra || env.dev.async_in_flight() < CMD_QUEUE_SLOTS)
        && Instant::now() < deadline
    {
        std::thread::yield_now();
    }
    assert_eq!(env.dev.async_queued(), extra);
    assert_eq!(env.dev.async_in_flight(), CMD_QUEUE_SLOTS);
    assert!(ch.try_get().unwrap().is_none());
    drop(env);
    let mut ok = 0;
    let mut cancelled = 0;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..CMD_QUEUE_SLOTS + extra {
        let (wr_id, out) = ch.get().unwrap();
        assert!(seen.insert(wr_id), "wr_id {wr_id} completed twice");
        match out {
            Ok(_) => ok += 1,
            Err(e) => {
                assert!(e.is_cancelled(), "{e}");
                cancelled += 1;
            }
        }
    }
    assert_eq!((ok, cancelled), (CMD_QUEUE_SLOTS, extra));
    assert!(ch.try_get().unwrap().is_none());
}

fn sim_ctx() -> devx::Context {
    devx::Device::by_name("sim523").unwrap().open().unwrap()
}

#[test]
fn futures_resolve_by_wr_id_and_next_takes_the_rest() {
    let ctx = sim_ctx();
    let comp = devx::CmdComp::new(&ctx).unwrap();
    // As many as the channel's 1 MiB output cap holds.
    let n = (devx::sim::MAX_OUTSTANDING_BYTES / QueryHcaCapOut::SIZE_BYTES) as u64;
    for wr_id in 0..n {
        ctx.general_async(&query_caps(), QueryHcaCapOut::SIZE_BYTES, wr_id, &comp)
            .unwrap();
    }
    // Await a late one first; the ones read on its way stay for `next`.
    let out = block_on(comp.completion(n - 1)).unwrap();
    assert_eq!(out.len(), QueryHcaCapOut::SIZE_BYTES);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..n - 1 {
        let (wr_id, out) = block_on(comp.next()).unwrap();
        assert!(out.is_ok());
        assert!(seen.insert(wr_id), "wr_id {wr_id} completed twice");
    }
    assert_eq!(seen.len() as u64, n - 1);
    assert!(!seen.contains(&(n - 1)));
    assert!(comp.try_get().unwrap().is_none());
}

#[test]
fn a_dropped_future_abandons_its_completion() {
    let ctx = sim_ctx();
    let comp = devx::CmdComp::new(&ctx).unwrap();
    ctx.general_async(&query_caps(), QueryHcaCapOut::SIZE_BYTES, 1, &comp)
        .unwrap();
    drop(comp.completion(1));
    ctx.general_async(&query_caps(), QueryHcaCapOut::SIZE_BYTES, 2, &comp)
        .unwrap();
    let (wr_id, out) = block_on(comp.next()).unwrap();
    assert_eq!(wr_id, 2);
    assert!(out.is_ok());
    assert!(comp.try_get().unwrap().is_none());
}

#[test]
fn a_future_made_after_its_command_ran_resolves_and_others_stay_for_get() {
    let ctx = sim_ctx();
    let comp = devx::CmdComp::new(&ctx).unwrap();
    let blocking = ctx
        .general_cmd(&query_caps(), QueryHcaCapOut::SIZE_BYTES)
        .unwrap();
    // With no latency and an idle queue both run before their submit
    // returns: 1's completion is queued ahead of 2's.
    for wr_id in [1, 2] {
        ctx.general_async(&query_caps(), QueryHcaCapOut::SIZE_BYTES, wr_id, &comp)
            .unwrap();
    }
    assert_eq!(block_on(comp.completion(2)).unwrap(), blocking);
    let (wr_id, out) = comp.get().unwrap();
    assert_eq!((wr_id, out.unwrap()), (1, blocking.clone()));
    assert!(comp.try_get().unwrap().is_none());
    ctx.general_async(&query_caps(), QueryHcaCapOut::SIZE_BYTES, 3, &comp)
        .unwrap();
    assert_eq!(block_on(comp.completion(3)).unwrap(), blocking);
    assert!(comp.try_get().unwrap().is_none());
}

#[test]
fn an_owned_outbox_comes_back_filled_by_its_completion() {
    let ctx = sim_ctx();
    let comp = devx::CmdComp::new(&ctx).unwrap();
    let blocking = ctx
        .general_cmd(&query_caps(), QueryHcaCapOut::SIZE_BYTES)
        .unwrap();
    // Stale contents and no room for the inbox: still filled, right length.
    let mut out = vec![0xa5u8; QueryHcaCapOut::SIZE_BYTES];
    for wr_id in 0..3 {
        let buf = out.as_ptr();
        ctx.general_async_into(&query_caps(), out, wr_id, &comp)
            .unwrap();
        out = block_on(comp.completion(wr_id)).unwrap();
        assert_eq!(out, blocking);
        // Once it has room for the inbox it is the very buffer handed in.
        if wr_id > 0 {
            assert_eq!(out.as_ptr(), buf);
        }
    }
    assert!(comp.try_get().unwrap().is_none());
}

#[test]
fn an_owned_outbox_queued_for_the_firmware_thread_comes_back_filled() {
    let env = Env::new(525);
    let ch = env.ctx.create_cmd_channel().unwrap();
    let expected = env
        .ctx
        .general_async(&query_caps(), vec![0; QueryHcaCapOut::SIZE_BYTES], 1, &*ch)
        .and_then(|()| ch.get())
        .unwrap()
        .1
        .unwrap();
    // Paused, the command waits in the queue and the firmware thread runs it.
    env.dev.pause_async(true);
    let mut outbox = Vec::with_capacity(query_caps().len() + QueryHcaCapOut::SIZE_BYTES);
    outbox.resize(QueryHcaCapOut::SIZE_BYTES, 0x5a);
    let buf = outbox.as_ptr();
    env.ctx
        .general_async(&query_caps(), outbox, 2, &*ch)
        .unwrap();
    assert!(ch.try_get().unwrap().is_none());
    env.dev.pause_async(false);
    let (wr_id, out) = ch.get().unwrap();
    let out = out.unwrap();
    assert_eq!(wr_id, 2);
    assert_eq!(out, expected);
    assert_eq!(out.as_ptr(), buf);
}

#[test]
fn a_queued_modify_changes_the_object() {
    let mut env = Env::new(524);
    let (cq_h, cqn) = env.cq(5);
    let ch = env.ctx.create_cmd_channel().unwrap();
    let mut m = ModifyCqIn::new();
    m.set_opcode(Opcode::ModifyCq.raw());
    m.set_cqn(cqn);
    // Field select bit 0: the moderation period.
    m.modify_field_select_resize_field_select_mut()
        .modify_field_select_mut()
        .set_modify_field_select(1);
    m.cq_context_mut().set_cq_period(100);
    env.ctx
        .modify_async(cq_h, m.as_bytes(), ModifyCqOut::SIZE_BYTES, 7, &*ch)
        .unwrap();
    let (wr_id, out) = ch.get().unwrap();
    assert_eq!(wr_id, 7);
    out.unwrap();
    let mut out = vec![0u8; QueryCqOut::SIZE_BYTES];
    env.ctx.query(cq_h, &query_cq(cqn), &mut out).unwrap();
    assert_eq!(
        QueryCqOut::from_slice(&out)
            .unwrap()
            .cq_context()
            .cq_period(),
        100
    );
}
