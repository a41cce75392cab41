//! Error completions end to end: each error class the engine reports, with
//! the requests behind it flushed.

mod datapath_support;

/// Named so that `cargo test -p verbs datapath` selects these tests.
mod datapath {
    use crate::datapath_support::{caps, rc_pair, rc_pair_with, wait, Buf};
    use verbs::{RecvWr, SendWr, Sge, WcStatus};

    #[test]
    fn bad_lkey_is_a_local_protection_error_then_flush() {
        let (mut a, b) = rc_pair(900);
        let rb = Buf::all(&b.pd, 64);
        let bad = [Sge::new(0x1000, 8, 0x00de_ad00)];
        a.qp.post_send(&SendWr::rdma_write(1, &bad, rb.addr(), rb.mr.rkey()))
            .unwrap();
        a.qp.post_send(&SendWr::rdma_write(2, &[], rb.addr(), rb.mr.rkey()))
            .unwrap();
        let w = wait(&mut a.cq, 2);
        assert_eq!(
            (w[0].wr_id, w[0].status),
            (1, WcStatus::LocProtErr),
            "{w:?}"
        );
        assert_eq!(
            (w[1].wr_id, w[1].status),
            (2, WcStatus::WrFlushErr),
            "{w:?}"
        );
    }

    #[test]
    fn bad_rkey_is_a_remote_access_error() {
        let (mut a, b) = rc_pair(900);
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
        assert_eq!(
            (w[0].wr_id, w[0].status),
            (1, WcStatus::RemAccessErr),
            "{w:?}"
        );
    }

    #[test]
    fn a_remote_access_error_raises_the_responders_access_event() {
        use devx::event_type as ev;
        let (mut a, b) = rc_pair(960);
        let events = devx::Events::new(b.qp.obj().context(), false).unwrap();
        let errors = [
            ev::WQ_CATAS_ERROR,
            ev::WQ_INVAL_REQ_ERROR,
            ev::WQ_ACCESS_ERROR,
        ];
        b.qp.obj().subscribe(&events, &errors, 5).unwrap();
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
        // The responder raised its event before the requester heard the NAK.
        let e = events.try_get().unwrap().expect("an access error event");
        assert_eq!(e.cookie, 5);
        assert_eq!(e.event_type(), Some(ev::WQ_ACCESS_ERROR as u8));
        assert_eq!(
            u32::from_be_bytes(e.eqe[56..60].try_into().unwrap()) & 0xff_ffff,
            b.qp.qpn()
        );
        assert!(events.try_get().unwrap().is_none(), "one event per cause");
    }

    #[test]
    fn short_receive_buffer_is_a_local_length_error_at_the_responder() {
        let (mut a, mut b) = rc_pair(900);
        let la = Buf::all(&a.pd, 256);
        let rb = Buf::all(&b.pd, 256);
        b.qp.post_recv(&RecvWr::new(7, &[rb.sge(0, 16)])).unwrap();
        a.qp.post_send(&SendWr::send(1, &[la.sge(0, 100)])).unwrap();
        let r = wait(&mut b.cq, 1);
        assert_eq!((r[0].wr_id, r[0].status), (7, WcStatus::LocLenErr), "{r:?}");
        let s = wait(&mut a.cq, 1);
        assert_eq!(
            (s[0].wr_id, s[0].status),
            (1, WcStatus::RemInvReqErr),
            "{s:?}"
        );
    }

    #[test]
    fn no_receive_exhausts_rnr_retries_then_flushes() {
        let (mut a, _b) = rc_pair_with(900, caps(), 0);
        let la = Buf::all(&a.pd, 64);
        a.qp.post_send(&SendWr::send(1, &[la.sge(0, 8)])).unwrap();
        a.qp.post_send(&SendWr::send(2, &[la.sge(0, 8)]).unsignaled())
            .unwrap();
        a.qp.post_send(&SendWr::send(3, &[la.sge(0, 8)])).unwrap();
        // The emulator flushes unsignaled requests too, one CQE each.
        let w = wait(&mut a.cq, 3);
        let got: Vec<_> = w.iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(
            got,
            [
                (1, WcStatus::RnrRetryExcErr),
                (2, WcStatus::WrFlushErr),
                (3, WcStatus::WrFlushErr)
            ]
        );
        assert_eq!(a.qp.send_queue().in_use(), 0);
    }
}
