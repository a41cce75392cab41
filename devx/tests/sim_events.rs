//! Firmware events on the emulated device: SUBSCRIBE_EVENT rules, the EQE
//! format, OMIT_DATA collapse, CQ arming through UAR + 0x20 and the arm
//! state QUERY_CQ reports, CQ overrun errors, and the pollable channel fd.

#[path = "sim_datapath_support.rs"]
mod dp;

use dp::*;

// Named so `cargo test -p devx sim_events` selects these tests.
mod sim_events {
    use super::*;
    use devx::{DevxEvent, EventChannel, ProviderContext};
    use prm_layouts::enums::Opcode;
    use prm_layouts::{Cqc, QueryCqIn, QueryCqOut};
    use std::io::Read;
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::sync::Arc;

    const COMP: u16 = 0x00;
    const CQ_ERROR: u16 = 0x04;
    const PORT_CHANGE: u16 = 0x09;

    fn channel(n: &Node, omit: bool) -> Arc<dyn EventChannel> {
        n.ctx.create_event_channel(omit).unwrap()
    }

    fn subscribe(n: &Node, ch: &Arc<dyn EventChannel>, cq: &Cq, types: &[u16], cookie: u64) {
        n.ctx
            .subscribe_event(&**ch, Some(cq.h), types, cookie)
            .unwrap();
    }

    /// Writes the arm word into the doorbell record's arm slot and rings
    /// UAR + 0x20 through `page`, as rdma-core's `mlx5_arm_cq` does.
    fn arm_via(page: &Arc<dyn devx::UarPage>, cq: &Cq, sn: u32, solicited: bool) {
        let cmd = if solicited { 1 << 24 } else { 0 };
        let word = (sn & 3) << 28 | cmd | (cq.ci & 0xff_ffff);
        // SAFETY: the CQ doorbell record region; [1] is the arm word.
        unsafe { *((cq.dbr + 4) as *mut [u8; 4]) = word.to_be_bytes() };
        let v = (u64::from(word) << 32) | u64::from(cq.cqn);
        page.write64(0x20, u64::from_ne_bytes(v.to_be_bytes()));
    }

    fn arm(n: &Node, cq: &Cq, solicited: bool) {
        arm_via(&n.page, cq, 0, solicited);
    }

    fn cq_context(n: &Node, cq: &Cq) -> Cqc {
        let mut q = QueryCqIn::new();
        q.set_opcode(0x402);
        q.set_cqn(cq.cqn);
        let mut out = vec![0u8; QueryCqOut::SIZE_BYTES];
        n.ctx.query(cq.h, q.as_bytes(), &mut out).unwrap();
        // query_cq_out: 16-byte header, then the CQ context.
        Cqc(out[16..80].try_into().unwrap())
    }

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r == 1 && p.revents & libc::POLLIN != 0
    }

    fn eqe_cqn(ev: &DevxEvent) -> u32 {
        be32(&ev.eqe, 56) & 0xff_ffff
    }

    /// A signaled NOP on `qp`: one requester CQE.
    fn nop(qp: &mut Qp) {
        qp.post(NOP, SIGNALED, [0; 4], &[]);
    }

    fn errno(e: devx::Error) -> i32 {
        assert!(e.is_os(), "{e}");
        e.errno()
    }

    #[test]
    fn subscribe_rules() {
        let n = Node::new(4000);
        let other = n.dev.open_sim().unwrap();
        let cq = n.cq(4);
        let ch = channel(&n, false);
        let sub = |obj, types: &[u16]| n.ctx.subscribe_event(&*ch, obj, types, 1);
        // Completion and CQ error on a CQ; PORT_CHANGE device-wide.
        sub(Some(cq.h), &[COMP, CQ_ERROR]).unwrap();
        sub(None, &[PORT_CHANGE]).unwrap();
        // QP and SRQ error types pass the kernel's legacy list for any object.
        sub(Some(cq.h), &[0x02, 0x05, 0x12, 0x13]).unwrap();
        // Wrong types, empty and oversized lists: EINVAL.
        assert_eq!(errno(sub(None, &[COMP]).unwrap_err()), libc::EINVAL);
        assert_eq!(errno(sub(None, &[CQ_ERROR]).unwrap_err()), libc::EINVAL);
        assert_eq!(
            errno(sub(Some(cq.h), &[PORT_CHANGE]).unwrap_err()),
            libc::EINVAL
        );
        assert_eq!(errno(sub(Some(cq.h), &[0x100]).unwrap_err()), libc::EINVAL);
        assert_eq!(errno(sub(Some(cq.h), &[]).unwrap_err()), libc::EINVAL);
        assert_eq!(
            errno(sub(Some(cq.h), &[COMP; 17]).unwrap_err()),
            libc::EINVAL
        );
        sub(Some(cq.h), &[COMP; 16]).unwrap();
        // A handle that is no object of ours, or not a DEVX object.
        assert_eq!(errno(sub(Some(0xdead), &[COMP]).unwrap_err()), libc::ENOENT);
        let (umem_h, _) = {
            let r = Region::new(4096);
            let got = n.ctx.umem_reg(r.addr(), 4096, LOCAL_WRITE).unwrap();
            std::mem::forget(r);
            got
        };
        assert_eq!(errno(sub(Some(umem_h), &[COMP]).unwrap_err()), libc::EINVAL);
        // Another context's channel.
        let foreign = other.create_event_channel(false).unwrap();
        let e = n
            .ctx
            .subscribe_event(&*foreign, Some(cq.h), &[COMP], 1)
            .unwrap_err();
        assert_eq!(errno(e), libc::EINVAL);
    }

    #[test]
    fn completion_eqe_goes_to_the_subscribed_channel_once_armed() {
        let n = Node::new(4010);
        let mut p = rc_pair_on(&n, None, RC, 7);
        let ch_a = channel(&n, false);
        let ch_b = channel(&n, false);
        subscribe(&n, &ch_a, &p.cq_a, &[COMP], 0xaaaa);
        subscribe(&n, &ch_b, &p.cq_b, &[COMP], 0xbbbb);

        // Not armed: completions raise nothing.
        nop(&mut p.a);
        assert!(p.cq_a.poll().is_some());
        assert!(ch_a.try_get().unwrap().is_none());
        assert!(!readable(ch_a.fd()));

        arm(&n, &p.cq_a, false);
        assert_eq!(cq_context(&n, &p.cq_a).st(), 0x9);
        nop(&mut p.a);
        assert!(readable(ch_a.fd()));
        let ev = ch_a.try_get().unwrap().expect("completion event");
        assert_eq!(ev.cookie, 0xaaaa);
        assert_eq!(ev.eqe.len(), 64);
        assert_eq!(ev.eqe[1], 0x00, "type COMP");
        assert_eq!(ev.eqe[3], 0, "sub_type");
        assert_eq!(eqe_cqn(&ev), p.cq_a.cqn);
        assert_eq!(ev.comp_cqn(), Some(p.cq_a.cqn));
        assert!(!readable(ch_a.fd()));
        assert!(ch_b.try_get().unwrap().is_none());
        assert_eq!(cq_context(&n, &p.cq_a).st(), 0xa, "fired");

        // Fired means disarmed: the next CQE raises nothing.
        nop(&mut p.a);
        assert!(ch_a.try_get().unwrap().is_none());
        assert_eq!(p.cq_a.poll_all().len(), 2);
    }

    #[test]
    fn arming_with_a_cqe_waiting_fires_at_once() {
        let n = Node::new(4020);
        let mut p = rc_pair_on(&n, None, RC, 7);
        let ch = channel(&n, false);
        subscribe(&n, &ch, &p.cq_a, &[COMP], 7);
        nop(&mut p.a);
        // ci 0 < producer 1: the event is raised by the arm itself.
        arm(&n, &p.cq_a, false);
        assert_eq!(ch.get().unwrap().cookie, 7);
        assert_eq!(cq_context(&n, &p.cq_a).st(), 0xa);
        // Once polled, arming waits for the next CQE.
        assert!(p.cq_a.poll().is_some());
        arm(&n, &p.cq_a, false);
        assert!(ch.try_get().unwrap().is_none());
        assert_eq!(cq_context(&n, &p.cq_a).st(), 0x9);
    }

    #[test]
    fn solicited_only_waits_for_a_solicited_completion() {
        let n = Node::new(4030);
        let mut p = rc_pair_on(&n, None, RC, 7);
        let ch = channel(&n, false);
        subscribe(&n, &ch, &p.cq_b, &[COMP], 1);
        let buf = n.mr(4096, ALL);
        for _ in 0..2 {
            p.b.post_recv(&[(buf.key, buf.addr(), 4096)]);
        }
        arm(&n, &p.cq_b, true);
        assert_eq!(cq_context(&n, &p.cq_b).st(), 0x6);
        let seg = data_seg(16, buf.key, buf.addr());
        p.a.post(SEND, SIGNALED, [0; 4], &[&seg]);
        assert!(!p.cq_b.wait().se);
        assert!(ch.try_get().unwrap().is_none(), "unsolicited completion");
        // fm_ce_se bit 1: solicited event.
        p.a.post(SEND, SIGNALED | 0x02, [0; 4], &[&seg]);
        assert!(p.cq_b.wait().se);
        assert_eq!(eqe_cqn(&ch.get().unwrap()), p.cq_b.cqn);
    }

    #[test]
    fn omit_data_collapses_repeats_of_one_subscription() {
        let n = Node::new(4040);
        let mut p = rc_pair_on(&n, None, RC, 7);
        let ch = channel(&n, true);
        subscribe(&n, &ch, &p.cq_a, &[COMP], 0x11);
        subscribe(&n, &ch, &p.cq_b, &[COMP], 0x22);
        for _ in 0..3 {
            arm(&n, &p.cq_a, false);
            nop(&mut p.a);
            p.cq_a.poll_all();
        }
        arm(&n, &p.cq_b, false);
        nop(&mut p.b);
        let first = ch.try_get().unwrap().unwrap();
        assert_eq!(
            first,
            DevxEvent {
                cookie: 0x11,
                eqe: Vec::new()
            }
        );
        assert_eq!(ch.try_get().unwrap().unwrap().cookie, 0x22);
        assert!(ch.try_get().unwrap().is_none());
        assert!(!readable(ch.fd()));
        // Read, the subscription queues again.
        arm(&n, &p.cq_a, false);
        nop(&mut p.a);
        assert_eq!(ch.try_get().unwrap().unwrap().cookie, 0x11);
    }

    #[test]
    fn unsubscribed_or_foreign_page_arms_raise_nothing() {
        let n = Node::new(4050);
        let mut p = rc_pair_on(&n, None, RC, 7);
        let ch = channel(&n, false);
        subscribe(&n, &ch, &p.cq_a, &[COMP], 1);
        // cq_b is armed but nobody listens: it fires without an event.
        arm(&n, &p.cq_b, false);
        nop(&mut p.b);
        assert_eq!(cq_context(&n, &p.cq_b).st(), 0xa);
        assert!(ch.try_get().unwrap().is_none());
        // An arm through a UAR page that is not the CQ's is ignored.
        let other = n.ctx.uar_alloc(devx::UarKind::BlueFlame).unwrap();
        arm_via(&other.page, &p.cq_a, 0, false);
        assert_ne!(cq_context(&n, &p.cq_a).st(), 0x9);
        nop(&mut p.a);
        assert!(ch.try_get().unwrap().is_none());
    }

    #[test]
    fn overrun_raises_cq_error() {
        let n = Node::new(4060);
        let cq = n.cq(1);
        let mut a = n.qp(RC, &cq);
        let cq_b = n.cq(4);
        let b = n.qp(RC, &cq_b);
        n.connect(&a, b.qpn, [0; 16], 7);
        n.connect(&b, a.qpn, [0; 16], 7);
        let ch = channel(&n, false);
        subscribe(&n, &ch, &cq, &[CQ_ERROR], 0xe);
        for _ in 0..3 {
            nop(&mut a);
        }
        let ev = ch.get().unwrap();
        assert_eq!(ev.cookie, 0xe);
        assert_eq!(ev.eqe[1], 0x04);
        assert_eq!(be32(&ev.eqe, 32) & 0xff_ffff, cq.cqn);
        assert_eq!(ev.eqe[43], 0x01, "overrun syndrome");
        assert_eq!(cq_context(&n, &cq).status(), 0x9);
        // Reported once.
        nop(&mut a);
        assert!(ch.try_get().unwrap().is_none());
    }

    #[test]
    fn blocking_get_wakes_on_an_event_from_another_thread() {
        let n = Node::new(4070);
        let mut p = rc_pair_on(&n, None, RC, 7);
        let ch = channel(&n, false);
        subscribe(&n, &ch, &p.cq_a, &[COMP], 5);
        arm(&n, &p.cq_a, false);
        let waiter = {
            let ch = Arc::clone(&ch);
            std::thread::spawn(move || ch.get().unwrap().cookie)
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        nop(&mut p.a);
        assert_eq!(waiter.join().unwrap(), 5);
    }

    #[test]
    fn events_wrapper_checks_context() {
        let dev = devx::Device::by_name("sim4080").unwrap();
        let ctx = dev.open().unwrap();
        let other = dev.open().unwrap();
        let ev = devx::Events::new(&ctx, false).unwrap();
        ctx.subscribe_unaffiliated(&ev, &[devx::event_type::PORT_CHANGE], 3)
            .unwrap();
        assert_eq!(
            errno(ctx.subscribe_unaffiliated(&ev, &[0], 3).unwrap_err()),
            libc::EINVAL
        );
        assert!(other
            .subscribe_unaffiliated(&ev, &[devx::event_type::PORT_CHANGE], 3)
            .unwrap_err()
            .is_argument());
        let pd = ctx.create(&hdr(Opcode::AllocPd.raw(), 0, 16), 16).unwrap();
        pd.subscribe(&ev, &[devx::event_type::COMP], 9).unwrap();
        assert!(ev.try_get().unwrap().is_none());
        assert!(std::os::fd::AsRawFd::as_raw_fd(&ev) >= 0);
        // The eventfd forms check the same way.
        let efd = eventfd();
        pd.subscribe_fd(&ev, &[devx::event_type::COMP], &efd)
            .unwrap();
        ctx.subscribe_unaffiliated_fd(&ev, &[devx::event_type::PORT_CHANGE], &efd)
            .unwrap();
        assert!(other
            .subscribe_unaffiliated_fd(&ev, &[devx::event_type::PORT_CHANGE], &efd)
            .unwrap_err()
            .is_argument());
    }

    /// A new eventfd with blocking reads.
    fn eventfd() -> OwnedFd {
        // SAFETY: eventfd(2) takes no pointers; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
        // SAFETY: a descriptor just made, owned by nothing else.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    /// Reads (and so resets) the eventfd counter, waiting until it is non-zero.
    fn take_count(fd: &OwnedFd) -> u64 {
        let mut b = [0u8; 8];
        std::fs::File::from(fd.try_clone().unwrap())
            .read_exact(&mut b)
            .unwrap();
        u64::from_ne_bytes(b)
    }

    /// Waits until the CQ's producer counter (as QUERY_CQ reports it, under
    /// the device lock the completion was written under) reaches `pc`.
    fn wait_producer(n: &Node, cq: &Cq, pc: u32) {
        for _ in 0..1_000_000 {
            if cq_context(n, cq).producer_counter() >= pc {
                return;
            }
            std::thread::yield_now();
        }
        panic!("CQ {:#x} never reached producer counter {pc}", cq.cqn);
    }

    #[test]
    fn a_subscription_redirected_to_an_eventfd_adds_one_per_event() {
        let n = Node::new(4090);
        let mut p = rc_pair_on(&n, None, RC, 7);
        let ch = channel(&n, false);
        let efd = eventfd();
        n.ctx
            .subscribe_event_fd(&*ch, Some(p.cq_a.h), &[COMP], efd.as_fd())
            .unwrap();
        // The subscription holds its own reference: the caller's may go.
        let reader = efd.try_clone().unwrap();
        drop(efd);
        nop(&mut p.a);
        arm(&n, &p.cq_a, false);
        assert_eq!(take_count(&reader), 1);
        assert!(
            ch.try_get().unwrap().is_none(),
            "a redirected event is not queued on the channel"
        );
        assert!(!readable(ch.fd()));
        // Each completion event adds one more.
        assert!(p.cq_a.poll().is_some());
        arm(&n, &p.cq_a, false);
        nop(&mut p.a);
        assert_eq!(take_count(&reader), 1);
        // Two events before a read add up.
        assert!(p.cq_a.poll().is_some());
        arm(&n, &p.cq_a, false);
        nop(&mut p.a);
        wait_producer(&n, &p.cq_a, 3);
        assert!(p.cq_a.poll().is_some());
        arm(&n, &p.cq_a, false);
        nop(&mut p.a);
        wait_producer(&n, &p.cq_a, 4);
        assert_eq!(take_count(&reader), 2);
        // Closing the channel ends the subscription.
        assert!(p.cq_a.poll().is_some());
        arm(&n, &p.cq_a, false);
        drop(ch);
        nop(&mut p.a);
        wait_producer(&n, &p.cq_a, 5);
        assert!(!readable(reader.as_raw_fd()));
    }

    #[test]
    fn a_redirect_to_something_not_an_eventfd_is_einval() {
        let n = Node::new(4095);
        let cq = n.cq(4);
        let ch = channel(&n, false);
        let not_eventfd = std::fs::File::open("/dev/null").unwrap();
        let e = n
            .ctx
            .subscribe_event_fd(&*ch, Some(cq.h), &[COMP], not_eventfd.as_fd())
            .unwrap_err();
        assert_eq!(errno(e), libc::EINVAL);
        // Event types are checked as for any subscription.
        let efd = eventfd();
        let e = n
            .ctx
            .subscribe_event_fd(&*ch, Some(cq.h), &[PORT_CHANGE], efd.as_fd())
            .unwrap_err();
        assert_eq!(errno(e), libc::EINVAL);
    }
}
