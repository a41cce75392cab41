//! The context's async events (`ibv_get_async_event`): each event type
//! fires for its cause on the emulated device, any number of waiters share
//! the queue with one event per waiter, and closing wakes all of them.

mod datapath_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datapath_support::{caps, connect_qp, open, path_to, wait, Buf, Side};
use verbs::{AsyncElement, AsyncEventType, QpInit, QpType, SendWr, WcStatus};

/// Waits (bounded) until `cond` holds; says whether it did.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// An RC side whose context's async events were asked for before its
/// objects were made, so they report theirs.
fn side(base: u32) -> Side {
    let (ctx, sim) = open(base);
    ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(caps()))
        .unwrap();
    Side {
        ctx,
        sim,
        pd,
        cq,
        qp,
    }
}

#[test]
fn link_down_and_up_report_port_err_and_port_active() {
    let (ctx, sim) = open(9100);
    let events = ctx.async_events().unwrap();
    assert!(events.try_get().unwrap().is_none());
    sim.set_link(false);
    let e = ctx.get_async_event().unwrap();
    assert_eq!(
        (e.event_type, e.element),
        (AsyncEventType::PortErr, AsyncElement::Port(1))
    );
    assert_eq!(events.unacked(), 1);
    e.ack();
    assert_eq!(events.unacked(), 0);
    // No change, no event.
    sim.set_link(false);
    assert!(events.try_get().unwrap().is_none());
    sim.set_link(true);
    let e = devx::reactor::block_on(ctx.next_async_event()).unwrap();
    assert_eq!(
        (e.event_type, e.element),
        (AsyncEventType::PortActive, AsyncElement::Port(1))
    );
    assert!(events.try_get().unwrap().is_none());
}

#[test]
fn a_remote_access_error_reports_the_responders_qp_access_error() {
    let mut a = side(9200);
    let b = side(9300);
    connect_qp(&a.qp, b.qp.qpn(), path_to(&b), 7);
    connect_qp(&b.qp, a.qp.qpn(), path_to(&a), 7);
    let la = Buf::all(&a.pd, 64);
    let rb = Buf::all(&b.pd, 64);
    a.qp.post_send(&SendWr::rdma_write(
        1,
        &[la.sge(0, 8)],
        rb.addr(),
        rb.mr.rkey() ^ 0x100,
    ))
    .unwrap();
    let w = wait(&mut a.cq, 1);
    assert_eq!(w[0].status, WcStatus::RemAccessErr, "{w:?}");
    let e = b.ctx.get_async_event().unwrap();
    assert_eq!(
        (e.event_type, e.element),
        (AsyncEventType::QpAccessErr, AsyncElement::Qp(b.qp.qpn()))
    );
    // The requester's side saw an error completion, not an async event.
    assert!(a.ctx.async_events().unwrap().try_get().unwrap().is_none());
}

#[test]
fn an_injected_fatal_error_reports_device_fatal_to_a_waiter() {
    let (ctx, sim) = open(9400);
    let events = ctx.async_events().unwrap();
    let got = std::thread::scope(|s| {
        let waiter = s.spawn(|| events.get());
        sim.inject_fatal_error();
        waiter.join().unwrap()
    })
    .unwrap();
    assert_eq!(
        (got.event_type, got.element),
        (AsyncEventType::DeviceFatal, AsyncElement::Device)
    );
    // Once only.
    sim.inject_fatal_error();
    assert!(events.try_get().unwrap().is_none());
    // Commands fail fast from now on.
    assert!(ctx.alloc_pd().is_err());
}

/// `waiters` threads wait (half blocking, half awaiting), `events` link
/// changes happen; returns how many waiters got an event, how many the
/// close that follows cancelled, and how many events were left queued.
fn waiters_and_events(base: u32, waiters: usize, events: usize) -> (usize, usize, usize) {
    let (ctx, sim) = open(base);
    let q = ctx.async_events().unwrap();
    let got = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..waiters)
            .map(|i| {
                let (q, got) = (&q, &got);
                s.spawn(move || {
                    let r = if i % 2 == 0 {
                        q.get()
                    } else {
                        devx::reactor::block_on(q.next())
                    };
                    if r.is_ok() {
                        got.fetch_add(1, Ordering::AcqRel);
                    }
                    r
                })
            })
            .collect();
        for i in 0..events {
            sim.set_link(i % 2 == 1);
        }
        let served = waiters.min(events);
        assert!(eventually(|| got.load(Ordering::Acquire) == served));
        // Every waiter still waiting found the queue empty.
        let mut left = 0;
        while let Some(e) = q.try_get().unwrap() {
            e.ack();
            left += 1;
        }
        q.close();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let ok = results.iter().filter(|r| r.is_ok()).count();
        let cancelled = results
            .iter()
            .filter(|r| r.as_ref().is_err_and(|e| e.is_cancelled()))
            .count();
        assert!(q.try_get().unwrap_err().is_cancelled());
        (ok, cancelled, left)
    })
}

#[test]
fn n_waiters_and_m_events_give_min_n_m_completions_and_close_cancels_the_rest() {
    for (i, (n, m)) in [(5, 3), (2, 4), (4, 4), (8, 1)].into_iter().enumerate() {
        let (ok, cancelled, left) = waiters_and_events(9500 + 10 * i as u32, n, m);
        assert_eq!(ok, n.min(m), "{n} waiters, {m} events");
        assert_eq!(cancelled, n - ok, "{n} waiters, {m} events");
        assert_eq!(left, m - ok);
    }
}

#[test]
fn close_wakes_every_pending_waiter_with_cancelled() {
    let (ctx, _sim) = open(9600);
    let q = ctx.async_events().unwrap();
    let n = 6;
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n).map(|_| s.spawn(|| q.get())).collect();
        // Whether or not each waiter is parked yet, the close reaches it.
        ctx.close_async_events().unwrap();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.len(), n);
    for r in results {
        let e = r.unwrap_err();
        assert!(e.is_cancelled(), "{e}");
        assert!(e.to_string().contains("closed"), "{e}");
    }
    assert!(ctx.get_async_event().unwrap_err().is_cancelled());
}

#[test]
fn the_kernel_providers_async_event_file_feeds_the_same_queue() {
    use devx::kernel::fake::FakeKernel;
    use devx::kernel::KernelDevice;
    let k = Arc::new(FakeKernel::new());
    let dev = KernelDevice::new("mlx5_0", "/dev/infiniband/uverbs0").with_sys(k.clone());
    let ctx = verbs::Context::open(&devx::Device::from_provider(Arc::new(dev))).unwrap();
    let q = ctx.async_events().unwrap();
    assert!(q.try_get().unwrap().is_none());
    k.raise_async_event(devx::ib_event::PORT_ACTIVE, 1);
    k.raise_async_event(devx::ib_event::DEVICE_FATAL, 0);
    let e = q.try_get().unwrap().unwrap();
    assert_eq!(
        (e.event_type, e.element),
        (AsyncEventType::PortActive, AsyncElement::Port(1))
    );
    let e = q.try_get().unwrap().unwrap();
    assert_eq!(
        (e.event_type, e.element),
        (AsyncEventType::DeviceFatal, AsyncElement::Device)
    );
    assert!(q.try_get().unwrap().is_none());
    q.close();
    assert!(q.try_get().unwrap_err().is_cancelled());
}

#[test]
fn an_overrun_cq_reports_cq_err() {
    let (ctx, sim) = open(9700);
    let q = ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    // The smallest CQ takes fewer completions than are posted below.
    let small = ctx.create_cq(1).unwrap();
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, &small, &small).cap(caps()))
        .unwrap();
    let mut a = Side {
        ctx,
        sim,
        pd,
        cq: small,
        qp,
    };
    let b = side(9800);
    connect_qp(&a.qp, b.qp.qpn(), path_to(&b), 7);
    connect_qp(&b.qp, a.qp.qpn(), path_to(&a), 7);
    let rb = Buf::all(&b.pd, 64);
    for i in 0..16 {
        a.qp.post_send(&SendWr::rdma_write(i, &[], rb.addr(), rb.mr.rkey()).signaled(true))
            .unwrap();
    }
    let mut got = None;
    assert!(eventually(|| {
        got = q.try_get().unwrap();
        got.is_some()
    }));
    let e = got.unwrap();
    assert_eq!(
        (e.event_type, e.element),
        (AsyncEventType::CqErr, AsyncElement::Cq(a.cq.cqn()))
    );
}
