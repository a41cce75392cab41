//! Event handlers given to a CQ, QP or SRQ at creation: that object's
//! affiliated events reach its handler (a closure with the caller's value,
//! or a channel) instead of the context-wide queue; and the SRQ limit
//! event, armed with the SRQ's limit, fires once per arm.

mod datapath_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use datapath_support::{caps, connect_qp, open, path_to, side, wait, Buf, Side};
use verbs::{
    AsyncElement, AsyncEvent, AsyncEventType, CqInit, EventHandler, QpInit, QpType, RecvWr, SendWr,
    SrqInit,
};

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

/// The next event on `rx` (bounded wait).
fn next(rx: &mpsc::Receiver<AsyncEvent>) -> AsyncEvent {
    rx.recv_timeout(Duration::from_secs(20))
        .expect("an event within the bound")
}

#[test]
fn a_cq_handler_gets_its_cq_error_with_the_callers_value_and_the_queue_does_not() {
    let (ctx, sim) = open(13_000);
    let q = ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    // The caller's context value, captured by the handler.
    struct Mine {
        name: &'static str,
        seen: Mutex<Vec<(AsyncEventType, AsyncElement)>>,
        calls: AtomicUsize,
    }
    let mine = Arc::new(Mine {
        name: "small cq",
        seen: Mutex::default(),
        calls: AtomicUsize::new(0),
    });
    let m = Arc::clone(&mine);
    let handler = EventHandler::call(move |e| {
        assert_eq!(m.name, "small cq");
        m.calls.fetch_add(1, Ordering::SeqCst);
        m.seen.lock().unwrap().push((e.event_type, e.element));
    });
    // The smallest CQ takes fewer completions than are posted below.
    let small = verbs::Cq::create(&ctx, &CqInit::new(1).events(handler)).unwrap();
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
    let b = side(13_100, QpType::Rc, caps());
    connect_qp(&a.qp, b.qp.qpn(), path_to(&b), 7);
    connect_qp(&b.qp, a.qp.qpn(), path_to(&a), 7);
    let rb = Buf::all(&b.pd, 64);
    for i in 0..16 {
        a.qp.post_send(&SendWr::rdma_write(i, &[], rb.addr(), rb.mr.rkey()).signaled(true))
            .unwrap();
    }
    assert!(eventually(|| mine.calls.load(Ordering::SeqCst) > 0));
    assert_eq!(
        mine.seen.lock().unwrap()[0],
        (AsyncEventType::CqErr, AsyncElement::Cq(a.cq.cqn()))
    );
    // Handed to the handler, not queued for the context's waiters.
    assert!(q.try_get().unwrap().is_none());
    // The handler dropped its event: acknowledged.
    assert_eq!(q.unacked(), 0);
}

#[test]
fn a_qp_handler_gets_its_access_error_instead_of_the_queue() {
    let (ctx, sim) = open(13_200);
    let q = ctx.async_events().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let (handler, rx) = EventHandler::channel();
    let qp = pd
        .create_qp(
            &QpInit::new(QpType::Rc, &cq, &cq)
                .cap(caps())
                .events(handler),
        )
        .unwrap();
    let resp = Side {
        ctx,
        sim,
        pd,
        cq,
        qp,
    };
    // The requester's QP has no handler.
    let mut req = side(13_300, QpType::Rc, caps());
    connect_qp(&req.qp, resp.qp.qpn(), path_to(&resp), 7);
    connect_qp(&resp.qp, req.qp.qpn(), path_to(&req), 7);
    // A write to a key the responder does not know.
    let src = Buf::all(&req.pd, 64);
    req.qp
        .post_send(&SendWr::rdma_write(1, &[src.sge(0, 8)], 0x1000, 0xdead_beef).signaled(true))
        .unwrap();
    let wc = wait(&mut req.cq, 1);
    assert!(!wc[0].is_ok());
    let e = next(&rx);
    assert_eq!(
        (e.event_type, e.element),
        (AsyncEventType::QpAccessErr, AsyncElement::Qp(resp.qp.qpn()))
    );
    assert!(q.try_get().unwrap().is_none());
}

#[test]
fn the_srq_limit_event_fires_once_per_arm() {
    let (ctx, sim) = open(13_400);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let (handler, rx) = EventHandler::channel();
    let mut srq = pd
        .create_srq(&SrqInit::new(16, 1).limit(4).events(handler))
        .unwrap();
    assert_eq!(srq.query().unwrap().srq_limit, 4);
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(caps()).srq(&srq))
        .unwrap();
    let mut resp = Side {
        ctx,
        sim,
        pd,
        cq,
        qp,
    };
    let mut req = side(13_500, QpType::Rc, caps());
    connect_qp(&req.qp, resp.qp.qpn(), path_to(&resp), 7);
    connect_qp(&resp.qp, req.qp.qpn(), path_to(&req), 7);
    let dst = Buf::all(&resp.pd, 64 * 16);
    for i in 0..8 {
        srq.post_recv(&RecvWr::new(i, &[dst.sge(64 * i as usize, 64)]))
            .unwrap();
    }
    let src = Buf::all(&req.pd, 64);
    let mut sent = 0u64;
    let mut send = |n: u64, req: &mut Side, resp: &mut Side| {
        for _ in 0..n {
            req.qp
                .post_send(&SendWr::send(sent, &[src.sge(0, 8)]).signaled(true))
                .unwrap();
            sent += 1;
        }
        assert!(wait(&mut req.cq, n as usize).iter().all(|w| w.is_ok()));
        assert!(wait(&mut resp.cq, n as usize).iter().all(|w| w.is_ok()));
    };
    // 8 posted; 4 left is not below the limit: nothing yet.
    send(4, &mut req, &mut resp);
    // 3 left: below 4, the event fires and the limit disarms.
    send(1, &mut req, &mut resp);
    let e = next(&rx);
    assert_eq!(
        (e.event_type, e.element),
        (
            AsyncEventType::SrqLimitReached,
            AsyncElement::Srq(srq.srqn())
        )
    );
    assert_eq!(srq.query().unwrap().srq_limit, 0);
    // Further below, unarmed: no event. (Reading the context's queue
    // routes whatever the device raised so far to its handlers.)
    send(1, &mut req, &mut resp);
    let q = resp.ctx.async_events().unwrap();
    assert!(q.try_get().unwrap().is_none());
    assert!(rx.try_recv().is_err());
    // Armed again (2 left, limit 2; queued this time): fires when it drops
    // to 1.
    let comp = resp.ctx.cmd_comp().unwrap();
    devx::reactor::block_on(srq.modify_limit_async(2, &comp)).unwrap();
    assert_eq!(srq.query().unwrap().srq_limit, 2);
    send(1, &mut req, &mut resp);
    let e = next(&rx);
    assert_eq!(e.event_type, AsyncEventType::SrqLimitReached);
    assert!(q.try_get().unwrap().is_none());
    assert!(rx.try_recv().is_err());
}

#[test]
fn an_objects_handler_goes_with_it() {
    let (ctx, _sim) = open(13_600);
    let q = ctx.async_events().unwrap();
    let (handler, rx) = EventHandler::channel();
    let cq = verbs::Cq::create(&ctx, &CqInit::new(4).events(handler)).unwrap();
    drop(cq);
    // The channel's sender went with the CQ's table entry.
    assert!(eventually(|| matches!(
        rx.try_recv(),
        Err(mpsc::TryRecvError::Disconnected)
    )));
    // The queue still works for everything else.
    assert!(q.try_get().unwrap().is_none());
    q.close();
    assert!(q.try_get().is_err());
}
