//! CQ notification end to end between two emulated devices: `req_notify`
//! arms, a completion raises one event on the CQ's completion channel,
//! `get_cq_event` names the CQ, and the CQE is then polled.

mod datapath_support;

mod cq_notify {
    use crate::datapath_support::{caps, connect_qp, open, path_to, wait, Buf, Side};
    use std::os::fd::AsRawFd;
    use verbs::{CompChannel, CqInit, QpInit, QpType, RecvWr, SendWr, WcOpcode, WcStatus};

    /// One side whose CQ reports to a completion channel.
    fn side(base: u32) -> (Side, CompChannel) {
        let (ctx, sim) = open(base);
        let ch = CompChannel::new(&ctx).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = verbs::Cq::create(&ctx, &CqInit::new(64).channel(&ch)).unwrap();
        let qp = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(caps()))
            .unwrap();
        (
            Side {
                ctx,
                sim,
                pd,
                cq,
                qp,
            },
            ch,
        )
    }

    fn pair(base: u32) -> ((Side, CompChannel), (Side, CompChannel)) {
        let a = side(base);
        let b = side(base + 100);
        connect_qp(&a.0.qp, b.0.qp.qpn(), path_to(&b.0), 7);
        connect_qp(&b.0.qp, a.0.qp.qpn(), path_to(&a.0), 7);
        (a, b)
    }

    fn readable(fd: i32) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLIN != 0 }
    }

    use verbs::devx::reactor::block_on;

    #[test]
    fn an_awaited_event_wakes_its_waiter() {
        let ((mut a, ch_a), (mut b, _ch_b)) = pair(760);
        let src = Buf::all(&a.pd, 4096);
        let dst = Buf::all(&b.pd, 4096);
        a.cq.req_notify(false).unwrap();
        // The waiter parks before anything is sent: only the fd's readiness wakes it.
        let waiter = {
            let ch = ch_a.clone();
            std::thread::spawn(move || block_on(ch.next_cq_event()))
        };
        b.qp.post_recv(&RecvWr::new(2, &[dst.sge(0, 4096)]))
            .unwrap();
        a.qp.post_send(&SendWr::send(1, &[src.sge(0, 5)])).unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), a.cq.cqn());
        a.cq.ack_events(1);
        let s = wait(&mut a.cq, 1);
        assert_eq!((s[0].wr_id, s[0].status), (1, WcStatus::Success));
    }

    #[test]
    fn send_raises_one_event_per_arm_on_each_side() {
        let ((mut a, ch_a), (mut b, ch_b)) = pair(700);
        let src = Buf::all(&a.pd, 4096);
        let dst = Buf::all(&b.pd, 4096);
        src.write(0, b"hello");
        a.cq.req_notify(false).unwrap();
        b.cq.req_notify(false).unwrap();
        assert_eq!(a.cq.query().unwrap().arm_state, 0x9);
        assert!(ch_a.try_get_cq_event().unwrap().is_none());

        b.qp.post_recv(&RecvWr::new(2, &[dst.sge(0, 4096)]))
            .unwrap();
        a.qp.post_send(&SendWr::send(1, &[src.sge(0, 5)])).unwrap();

        assert!(readable(ch_a.as_raw_fd()));
        assert_eq!(ch_a.get_cq_event().unwrap(), a.cq.cqn());
        assert_eq!(ch_b.get_cq_event().unwrap(), b.cq.cqn());
        assert_eq!(a.cq.arm_sn(), 1, "bumped per event, as rdma-core does");
        assert_eq!(a.cq.unacked_events(), 1);
        a.cq.ack_events(1);
        assert_eq!(a.cq.unacked_events(), 0);
        assert_eq!(a.cq.query().unwrap().arm_state, 0xa);

        let s = wait(&mut a.cq, 1);
        assert_eq!((s[0].wr_id, s[0].status), (1, WcStatus::Success));
        let r = wait(&mut b.cq, 1);
        assert_eq!((r[0].wr_id, r[0].opcode), (2, WcOpcode::Recv));
        assert_eq!(dst.read(0, 5), b"hello");

        // One event per arm: the next send raises nothing until re-armed.
        b.qp.post_recv(&RecvWr::new(3, &[dst.sge(0, 4096)]))
            .unwrap();
        a.qp.post_send(&SendWr::send(4, &[src.sge(0, 5)])).unwrap();
        wait(&mut a.cq, 1);
        assert!(ch_a.try_get_cq_event().unwrap().is_none());
        a.cq.req_notify(false).unwrap();
        b.qp.post_recv(&RecvWr::new(5, &[dst.sge(0, 4096)]))
            .unwrap();
        a.qp.post_send(&SendWr::send(6, &[src.sge(0, 5)])).unwrap();
        assert_eq!(ch_a.get_cq_event().unwrap(), a.cq.cqn());
        assert_eq!(a.cq.arm_sn(), 2);
        wait(&mut a.cq, 1);
    }

    #[test]
    fn solicited_only_ignores_unsolicited_completions() {
        let ((mut a, _ch_a), (mut b, ch_b)) = pair(720);
        let src = Buf::all(&a.pd, 4096);
        let dst = Buf::all(&b.pd, 4096);
        b.cq.req_notify(true).unwrap();
        assert_eq!(b.cq.query().unwrap().arm_state, 0x6);
        for id in 0..2 {
            b.qp.post_recv(&RecvWr::new(id, &[dst.sge(0, 4096)]))
                .unwrap();
        }
        a.qp.post_send(&SendWr::send(1, &[src.sge(0, 8)])).unwrap();
        wait(&mut b.cq, 1);
        assert!(ch_b.try_get_cq_event().unwrap().is_none());
        a.qp.post_send(&SendWr::send(2, &[src.sge(0, 8)]).solicited())
            .unwrap();
        assert_eq!(ch_b.get_cq_event().unwrap(), b.cq.cqn());
        wait(&mut b.cq, 1);
        wait(&mut a.cq, 2);
    }

    #[test]
    fn arming_with_a_completion_pending_fires_at_once() {
        let ((mut a, ch_a), (mut b, _ch_b)) = pair(740);
        let src = Buf::all(&a.pd, 4096);
        let dst = Buf::all(&b.pd, 4096);
        b.qp.post_recv(&RecvWr::new(1, &[dst.sge(0, 4096)]))
            .unwrap();
        a.qp.post_send(&SendWr::send(1, &[src.sge(0, 8)])).unwrap();
        // No event without arming.
        std::thread::sleep(std::time::Duration::from_millis(10));
        assert!(ch_a.try_get_cq_event().unwrap().is_none());
        // The CQE is still unpolled: arming raises the event immediately.
        a.cq.req_notify(false).unwrap();
        assert_eq!(ch_a.try_get_cq_event().unwrap(), Some(a.cq.cqn()));
        wait(&mut a.cq, 1);
        wait(&mut b.cq, 1);
    }

    #[test]
    fn a_channel_serves_several_cqs() {
        let (ctx, _sim) = open(760);
        let ch = CompChannel::new(&ctx).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq1 = verbs::Cq::create(&ctx, &CqInit::new(16).channel(&ch)).unwrap();
        let cq2 = verbs::Cq::create(&ctx, &CqInit::new(16).channel(&ch)).unwrap();
        let mut qp1 = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq1, &cq1).cap(caps()))
            .unwrap();
        let mut qp2 = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq2, &cq2).cap(caps()))
            .unwrap();
        let path = crate::datapath_support::path_to_self(&ctx);
        connect_qp(&qp1, qp2.qpn(), path, 7);
        connect_qp(&qp2, qp1.qpn(), path, 7);
        let buf = Buf::all(&pd, 4096);
        cq2.req_notify(false).unwrap();
        qp2.post_recv(&RecvWr::new(1, &[buf.sge(0, 64)])).unwrap();
        qp1.post_send(&SendWr::send(1, &[buf.sge(1024, 8)]))
            .unwrap();
        assert_eq!(ch.get_cq_event().unwrap(), cq2.cqn());
        assert!(
            ch.try_get_cq_event().unwrap().is_none(),
            "cq1 was not armed"
        );
        assert_eq!((cq1.arm_sn(), cq2.arm_sn()), (0, 1));
    }

    #[test]
    fn a_cq_without_channel_arms_all_the_same() {
        let (ctx, _sim) = open(780);
        let cq = ctx.create_cq(8).unwrap();
        cq.req_notify(true).unwrap();
        assert_eq!(cq.query().unwrap().arm_state, 0x6);
        assert_eq!(cq.arm_sn(), 0);
    }
}
