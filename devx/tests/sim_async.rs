//! Asynchronous queries on the emulated device: ordering, wr_ids, the
//! pollable fd, firmware errors in completions, cancellation on close.

#[path = "sim_support.rs"]
mod support;

use std::os::fd::BorrowedFd;

use devx::sim::syndrome as syn;
use devx::{CmdChannel, ProviderContext};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use prm_layouts::*;
use support::*;

fn readable(ch: &dyn CmdChannel) -> bool {
    // SAFETY: the channel keeps its fd open for as long as `ch` lives.
    let fd = unsafe { BorrowedFd::borrow_raw(ch.fd()) };
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).unwrap() == 1
}

#[test]
fn a_thousand_outstanding_queries_complete_in_order() {
    let mut env = Env::new(501);
    let (cq_h, cqn) = env.cq(6);
    let ch = env.ctx.create_cmd_channel().unwrap();
    assert!(!readable(&*ch));
    let q = with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn);
    env.dev.pause_async(true);
    for wr_id in 0..1000u64 {
        env.ctx
            .query_async(cq_h, &q, QueryCqOut::SIZE_BYTES, wr_id * 7, &*ch)
            .unwrap();
    }
    assert_eq!(env.dev.async_queued(), 1000);
    assert!(ch.try_get().unwrap().is_none());
    env.dev.pause_async(false);
    for wr_id in 0..1000u64 {
        let (got, out) = ch.get().unwrap();
        assert_eq!(got, wr_id * 7);
        let out = out.unwrap();
        assert_eq!(
            QueryCqOut::from_slice(&out)
                .unwrap()
                .cq_context()
                .log_cq_size(),
            6
        );
    }
    assert!(!readable(&*ch));
    assert!(ch.try_get().unwrap().is_none());
    // Nothing outstanding: a blocking get says so instead of hanging.
    assert!(ch.get().unwrap_err().is_argument());
}

#[test]
fn fd_polls_readable_while_completions_wait() {
    let env = Env::new(502);
    let (pd_h, _) = env.pd();
    let mut cqenv = env;
    let (cq_h, cqn) = cqenv.cq(5);
    let ch = cqenv.ctx.create_cmd_channel().unwrap();
    let q = with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn);
    cqenv
        .ctx
        .query_async(cq_h, &q, QueryCqOut::SIZE_BYTES, 1, &*ch)
        .unwrap();
    cqenv
        .ctx
        .query_async(cq_h, &q, QueryCqOut::SIZE_BYTES, 2, &*ch)
        .unwrap();
    // Wait for both to finish, then the fd is readable until both are read.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cqenv.dev.async_queued() > 0 && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    let (a, _) = ch.get().unwrap();
    assert_eq!(a, 1);
    let (b, _) = ch.get().unwrap();
    assert_eq!(b, 2);
    assert!(!readable(&*ch));
    cqenv
        .ctx
        .query_async(cq_h, &q, QueryCqOut::SIZE_BYTES, 3, &*ch)
        .unwrap();
    let start = std::time::Instant::now();
    while !readable(&*ch) {
        assert!(start.elapsed().as_secs() < 10, "completion never arrived");
        std::thread::yield_now();
    }
    assert_eq!(ch.try_get().unwrap().unwrap().0, 3);
    cqenv.destroy(pd_h).unwrap();
}

#[test]
fn fd_asked_for_after_the_completion_arrived_polls_readable() {
    let mut env = Env::new(507);
    let (cq_h, cqn) = env.cq(5);
    let ch = env.ctx.create_cmd_channel().unwrap();
    let q = with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn);
    env.ctx
        .query_async(cq_h, &q, QueryCqOut::SIZE_BYTES, 1, &*ch)
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while env.dev.async_queued() + env.dev.async_in_flight() > 0
        && std::time::Instant::now() < deadline
    {
        std::thread::yield_now();
    }
    // The fd is asked for only now: it still says a completion waits.
    assert!(readable(&*ch));
    assert_eq!(ch.try_get().unwrap().unwrap().0, 1);
    assert!(!readable(&*ch));
}

#[test]
fn firmware_errors_arrive_as_errors() {
    let mut env = Env::new(503);
    let (cq_h, cqn) = env.cq(5);
    let ch = env.ctx.create_cmd_channel().unwrap();
    env.dev.pause_async(true);
    env.ctx
        .query_async(
            cq_h,
            &with_num(hdr(Opcode::QueryCq.raw(), 1, 16), cqn),
            64,
            9,
            &*ch,
        )
        .unwrap();
    env.dev.pause_async(false);
    let (wr_id, r) = ch.get().unwrap();
    assert_eq!(wr_id, 9);
    check(&r.unwrap_err(), syn::BAD_OP_MOD);
    // Kernel checks happen at submit: wrong class, unbound object, bad length.
    let e = env
        .ctx
        .query_async(
            cq_h,
            &with_num(hdr(Opcode::ModifyCq.raw(), 0, 16), cqn),
            16,
            1,
            &*ch,
        )
        .unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    let e = env
        .ctx
        .query_async(
            cq_h,
            &with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn + 1),
            272,
            1,
            &*ch,
        )
        .unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    let e = env
        .ctx
        .query_async(
            cq_h,
            &with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn),
            8,
            1,
            &*ch,
        )
        .unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    // A channel of another context.
    let other = env.sibling();
    let och = other.ctx.create_cmd_channel().unwrap();
    let e = env
        .ctx
        .query_async(
            cq_h,
            &with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn),
            272,
            1,
            &*och,
        )
        .unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
}

#[test]
fn output_is_capped_per_channel() {
    let mut env = Env::new(504);
    let (cq_h, cqn) = env.cq(5);
    let ch = env.ctx.create_cmd_channel().unwrap();
    env.dev.pause_async(true);
    let q = with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn);
    for i in 0..16 {
        env.ctx.query_async(cq_h, &q, 0xffff, i, &*ch).unwrap();
    }
    let e = env.ctx.query_async(cq_h, &q, 0xffff, 16, &*ch).unwrap_err();
    assert_eq!(errno(&e), libc::EAGAIN);
    env.dev.pause_async(false);
    for i in 0..16 {
        assert_eq!(ch.get().unwrap().0, i);
    }
    env.ctx.query_async(cq_h, &q, 0xffff, 16, &*ch).unwrap();
    assert_eq!(ch.get().unwrap().0, 16);
}

#[test]
fn completions_taken_as_they_come_never_reach_the_output_cap() {
    let mut env = Env::new(531);
    let (cq_h, cqn) = env.cq(5);
    let ch = env.ctx.create_cmd_channel().unwrap();
    let q = with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn);
    // Far more than the 16 such outboxes the cap allows at once.
    for wr_id in 0..100 {
        env.ctx.query_async(cq_h, &q, 0xffff, wr_id, &*ch).unwrap();
        assert_eq!(ch.try_get().unwrap().unwrap().0, wr_id);
    }
    // Still exactly 16 may wait unread.
    for wr_id in 0..16 {
        env.ctx.query_async(cq_h, &q, 0xffff, wr_id, &*ch).unwrap();
    }
    let e = env.ctx.query_async(cq_h, &q, 0xffff, 16, &*ch).unwrap_err();
    assert_eq!(errno(&e), libc::EAGAIN);
    for wr_id in 0..16 {
        assert_eq!(ch.get().unwrap().0, wr_id);
    }
}

#[test]
fn completions_of_commands_run_at_submit_keep_their_order_when_the_fd_is_asked_for() {
    let mut env = Env::new(532);
    let (cq_h, cqn) = env.cq(5);
    let ch = env.ctx.create_cmd_channel().unwrap();
    let q = with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn);
    for wr_id in 0..3 {
        env.ctx
            .query_async(cq_h, &q, QueryCqOut::SIZE_BYTES, wr_id, &*ch)
            .unwrap();
    }
    assert!(readable(&*ch));
    env.ctx
        .query_async(cq_h, &q, QueryCqOut::SIZE_BYTES, 3, &*ch)
        .unwrap();
    for wr_id in 0..4 {
        assert!(readable(&*ch));
        assert_eq!(ch.try_get().unwrap().unwrap().0, wr_id);
    }
    assert!(!readable(&*ch));
    assert!(ch.try_get().unwrap().is_none());
}

#[test]
fn closing_the_context_cancels_queued_queries() {
    let mut env = Env::new(505);
    let (cq_h, cqn) = env.cq(5);
    let ch = env.ctx.create_cmd_channel().unwrap();
    let dev = env.dev.clone();
    dev.pause_async(true);
    let q = with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn);
    for i in 0..100 {
        env.ctx
            .query_async(cq_h, &q, QueryCqOut::SIZE_BYTES, i, &*ch)
            .unwrap();
    }
    drop(env);
    dev.pause_async(false);
    assert_eq!(dev.live_objects(), 0);
    for i in 0..100 {
        let (wr_id, r) = ch.get().unwrap();
        assert_eq!(wr_id, i);
        assert!(r.unwrap_err().is_cancelled());
    }
    assert!(ch.try_get().unwrap().is_none());
}

#[test]
fn cancellation_does_not_touch_other_contexts() {
    let mut a = Env::new(506);
    let mut b = a.sibling();
    let (a_cq, a_cqn) = a.cq(5);
    let (b_cq, b_cqn) = b.cq(5);
    let ach = a.ctx.create_cmd_channel().unwrap();
    let bch = b.ctx.create_cmd_channel().unwrap();
    a.dev.pause_async(true);
    for i in 0..10 {
        a.ctx
            .query_async(
                a_cq,
                &with_num(hdr(Opcode::QueryCq.raw(), 0, 16), a_cqn),
                272,
                i,
                &*ach,
            )
            .unwrap();
        b.ctx
            .query_async(
                b_cq,
                &with_num(hdr(Opcode::QueryCq.raw(), 0, 16), b_cqn),
                272,
                i,
                &*bch,
            )
            .unwrap();
    }
    let dev = a.dev.clone();
    drop(a);
    dev.pause_async(false);
    for i in 0..10 {
        assert!(ach.get().unwrap().1.unwrap_err().is_cancelled());
        let (wr_id, r) = bch.get().unwrap();
        assert_eq!(wr_id, i);
        assert!(r.is_ok());
    }
}
