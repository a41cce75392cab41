//! Memory windows end to end between two emulated devices: the responder
//! side binds a window over part of a region through its own QP, and the
//! requester reaches that memory through the window's R_Key, within the
//! window's range and rights only.

mod datapath_support;

/// Named so that `cargo test -p verbs datapath` selects these tests.
mod datapath {
    use crate::datapath_support::{access_all, quiet, rc_pair, wait, Buf, Side};
    use verbs::{AccessFlags, Mw, MwBind, MwType, SendWr, WcOpcode, WcStatus};

    fn rw() -> AccessFlags {
        AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE
    }

    /// A region on `b` that windows may bind to.
    fn bindable(b: &Side, len: usize) -> Buf {
        Buf::new(&b.pd, len, access_all() | AccessFlags::MW_BIND)
    }

    fn bind(
        b: &mut Side,
        wr_id: u64,
        mw: &Mw,
        mr: &Buf,
        off: u64,
        len: u64,
        access: AccessFlags,
    ) -> u32 {
        let rkey =
            b.qp.post_bind_mw(&MwBind {
                wr_id,
                mw,
                mr: &mr.mr,
                addr: mr.addr() + off,
                length: len,
                access,
                signaled: true,
            })
            .unwrap();
        let w = wait(&mut b.cq, 1);
        assert_eq!(
            (w[0].wr_id, w[0].status, w[0].opcode),
            (wr_id, WcStatus::Success, WcOpcode::BindMw),
            "{w:?}"
        );
        rkey
    }

    fn status(side: &mut Side) -> WcStatus {
        wait(&mut side.cq, 1)[0].status
    }

    #[test]
    fn type1_write_and_read_through_the_window() {
        let (mut a, mut b) = rc_pair(700);
        let la = Buf::all(&a.pd, 4096);
        let rb = bindable(&b, 8192);
        let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
        let before = mw.rkey();
        let rkey = bind(&mut b, 9, &mw, &rb, 1024, 2048, rw());
        assert_eq!(rkey, mw.rkey());
        assert_eq!(rkey >> 8, before >> 8);
        assert_eq!(rkey & 0xff, (before + 1) & 0xff);
        let q = mw.query().unwrap();
        assert!(!q.free);
        assert_eq!((q.addr, q.length, q.rkey), (rb.addr() + 1024, 2048, rkey));

        let data: Vec<u8> = (0..2048u32).map(|i| (i * 7) as u8).collect();
        la.write(0, &data);
        a.qp.post_send(&SendWr::rdma_write(
            1,
            &[la.sge(0, 2048)],
            rb.addr() + 1024,
            rkey,
        ))
        .unwrap();
        assert_eq!(status(&mut a), WcStatus::Success);
        assert_eq!(rb.read(1024, 2048), data);
        assert_eq!(rb.read(0, 1024), vec![0; 1024]);

        rb.write(2000, b"window!");
        a.qp.post_send(&SendWr::rdma_read(
            2,
            &[la.sge(3000, 7)],
            rb.addr() + 2000,
            rkey,
        ))
        .unwrap();
        let w = wait(&mut a.cq, 1);
        assert_eq!((w[0].status, w[0].byte_len), (WcStatus::Success, 7));
        assert_eq!(la.read(3000, 7), b"window!");
    }

    #[test]
    fn type2_write_and_read_through_the_window() {
        let (mut a, mut b) = rc_pair(710);
        let la = Buf::all(&a.pd, 4096);
        let rb = bindable(&b, 4096);
        let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
        let rkey = bind(&mut b, 3, &mw, &rb, 512, 512, rw());
        assert_eq!(mw.query().unwrap().qpn, b.qp.qpn());
        la.write(0, &[0x5a; 512]);
        a.qp.post_send(&SendWr::rdma_write(
            1,
            &[la.sge(0, 512)],
            rb.addr() + 512,
            rkey,
        ))
        .unwrap();
        assert_eq!(status(&mut a), WcStatus::Success);
        assert_eq!(rb.read(512, 512), vec![0x5a; 512]);
        a.qp.post_send(&SendWr::rdma_read(
            2,
            &[la.sge(1024, 16)],
            rb.addr() + 1008,
            rkey,
        ))
        .unwrap();
        assert_eq!(status(&mut a), WcStatus::Success);
        assert_eq!(la.read(1024, 16), vec![0x5a; 16]);
    }

    #[test]
    fn the_key_before_any_bind_is_refused() {
        let (mut a, b) = rc_pair(720);
        let la = Buf::all(&a.pd, 64);
        let rb = bindable(&b, 4096);
        let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
        a.qp.post_send(&SendWr::rdma_write(
            1,
            &[la.sge(0, 8)],
            rb.addr(),
            mw.rkey(),
        ))
        .unwrap();
        assert_eq!(status(&mut a), WcStatus::RemAccessErr);
        assert_eq!(rb.read(0, 8), vec![0; 8]);
    }

    #[test]
    fn access_past_the_window_is_a_remote_access_error() {
        let (mut a, mut b) = rc_pair(730);
        let la = Buf::all(&a.pd, 64);
        let rb = bindable(&b, 4096);
        let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
        let rkey = bind(&mut b, 1, &mw, &rb, 1024, 1024, rw());
        // Inside the MR, but 8 bytes past the window's end.
        la.write(0, &[0xee; 16]);
        a.qp.post_send(&SendWr::rdma_write(
            1,
            &[la.sge(0, 16)],
            rb.addr() + 2040,
            rkey,
        ))
        .unwrap();
        a.qp.post_send(&SendWr::rdma_write(
            2,
            &[la.sge(0, 8)],
            rb.addr() + 1024,
            rkey,
        ))
        .unwrap();
        let w = wait(&mut a.cq, 2);
        assert_eq!(w[0].status, WcStatus::RemAccessErr, "{w:?}");
        assert_eq!(w[1].status, WcStatus::WrFlushErr, "{w:?}");
        assert_eq!(rb.read(2032, 32), vec![0; 32]);
    }

    #[test]
    fn access_before_the_window_is_a_remote_access_error() {
        let (mut a, mut b) = rc_pair(740);
        let la = Buf::all(&a.pd, 64);
        let rb = bindable(&b, 4096);
        let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
        let rkey = bind(&mut b, 1, &mw, &rb, 1024, 1024, rw());
        a.qp.post_send(&SendWr::rdma_read(
            1,
            &[la.sge(0, 8)],
            rb.addr() + 1020,
            rkey,
        ))
        .unwrap();
        assert_eq!(status(&mut a), WcStatus::RemAccessErr);
    }

    #[test]
    fn a_missing_right_is_a_remote_access_error() {
        let (mut a, mut b) = rc_pair(750);
        let la = Buf::all(&a.pd, 64);
        let rb = bindable(&b, 4096);
        let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
        let rkey = bind(&mut b, 1, &mw, &rb, 0, 4096, AccessFlags::REMOTE_READ);
        a.qp.post_send(&SendWr::rdma_read(1, &[la.sge(0, 8)], rb.addr(), rkey))
            .unwrap();
        assert_eq!(status(&mut a), WcStatus::Success);
        a.qp.post_send(&SendWr::rdma_write(2, &[la.sge(0, 8)], rb.addr(), rkey))
            .unwrap();
        assert_eq!(status(&mut a), WcStatus::RemAccessErr);
    }

    #[test]
    fn no_atomic_right_refuses_atomics() {
        let (mut a, mut b) = rc_pair(760);
        let la = Buf::all(&a.pd, 64);
        let rb = bindable(&b, 4096);
        let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
        let rkey = bind(&mut b, 1, &mw, &rb, 0, 64, rw());
        a.qp.post_send(&SendWr::fetch_add(1, &[la.sge(0, 8)], rb.addr(), rkey, 5))
            .unwrap();
        assert_eq!(status(&mut a), WcStatus::RemAccessErr);
    }

    #[test]
    fn rebinding_invalidates_the_old_key() {
        let (mut a, mut b) = rc_pair(770);
        let la = Buf::all(&a.pd, 64);
        let rb = bindable(&b, 4096);
        let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
        let k1 = bind(&mut b, 1, &mw, &rb, 0, 1024, rw());
        la.write(0, &[1; 8]);
        a.qp.post_send(&SendWr::rdma_write(1, &[la.sge(0, 8)], rb.addr(), k1))
            .unwrap();
        assert_eq!(status(&mut a), WcStatus::Success);
        let k2 = bind(&mut b, 2, &mw, &rb, 2048, 1024, rw());
        assert_ne!(k1, k2);
        assert_eq!(k2, verbs::next_rkey(k1));
        la.write(0, &[2; 8]);
        a.qp.post_send(&SendWr::rdma_write(
            2,
            &[la.sge(0, 8)],
            rb.addr() + 2048,
            k2,
        ))
        .unwrap();
        assert_eq!(status(&mut a), WcStatus::Success);
        assert_eq!(rb.read(2048, 8), vec![2; 8]);
        // The old key, even inside the new range, no longer works.
        a.qp.post_send(&SendWr::rdma_write(
            3,
            &[la.sge(0, 8)],
            rb.addr() + 2048,
            k1,
        ))
        .unwrap();
        assert_eq!(status(&mut a), WcStatus::RemAccessErr);
        assert_eq!(rb.read(0, 8), vec![1; 8]);
    }

    #[test]
    fn unbinding_makes_the_key_unusable() {
        let (mut a, mut b) = rc_pair(780);
        let la = Buf::all(&a.pd, 64);
        let rb = bindable(&b, 4096);
        let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
        let k = bind(&mut b, 1, &mw, &rb, 0, 1024, rw());
        bind(&mut b, 2, &mw, &rb, 0, 0, AccessFlags::NONE);
        assert!(mw.query().unwrap().free);
        a.qp.post_send(&SendWr::rdma_write(1, &[la.sge(0, 8)], rb.addr(), k))
            .unwrap();
        assert_eq!(status(&mut a), WcStatus::RemAccessErr);
    }

    #[test]
    fn binding_a_bound_type2_window_is_a_bind_error_then_flush() {
        let (_a, mut b) = rc_pair(790);
        let rb = bindable(&b, 4096);
        let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
        let k = bind(&mut b, 1, &mw, &rb, 0, 1024, rw());
        b.qp.post_bind_mw(&MwBind {
            wr_id: 2,
            mw: &mw,
            mr: &rb.mr,
            addr: rb.addr(),
            length: 64,
            access: rw(),
            signaled: false,
        })
        .unwrap();
        b.qp.post_send(&SendWr::rdma_write(3, &[], rb.addr(), k))
            .unwrap();
        let w = wait(&mut b.cq, 2);
        assert_eq!((w[0].wr_id, w[0].status), (2, WcStatus::MwBindErr), "{w:?}");
        assert_eq!(
            (w[1].wr_id, w[1].status),
            (3, WcStatus::WrFlushErr),
            "{w:?}"
        );
        quiet(&mut b.cq);
    }

    #[test]
    fn remote_write_over_a_region_without_local_write_is_a_bind_error() {
        let (_a, mut b) = rc_pair(800);
        let rb = Buf::new(&b.pd, 4096, AccessFlags::REMOTE_READ | AccessFlags::MW_BIND);
        let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
        let k =
            b.qp.post_bind_mw(&MwBind {
                wr_id: 5,
                mw: &mw,
                mr: &rb.mr,
                addr: rb.addr(),
                length: 64,
                access: rw(),
                signaled: true,
            })
            .unwrap();
        let w = wait(&mut b.cq, 1);
        assert_eq!((w[0].wr_id, w[0].status), (5, WcStatus::MwBindErr));
        assert!(mw.query().unwrap().free);
        // The window stayed unbound; the QP is in error and flushes the rest.
        assert_eq!(k, mw.rkey());
        b.qp.post_send(&SendWr::rdma_read(6, &[], rb.addr(), k))
            .unwrap();
        assert_eq!(status(&mut b), WcStatus::WrFlushErr);
    }

    #[test]
    fn bad_arguments_fail_before_anything_is_written() {
        let (_a, mut b) = rc_pair(810);
        let rb = bindable(&b, 4096);
        let plain = Buf::all(&b.pd, 4096);
        let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
        let other_pd = b.ctx.alloc_pd().unwrap();
        let foreign = Buf::new(&other_pd, 4096, access_all() | AccessFlags::MW_BIND);
        let key = mw.rkey();
        let posted = b.qp.send_queue().cur_post();
        let cases: [(&Buf, u64, u64, AccessFlags); 5] = [
            (&rb, 4000, 200, rw()),
            (&rb, u64::MAX - 8, 16, rw()),
            (&plain, 0, 64, rw()),
            (&rb, 0, 64, AccessFlags::LOCAL_WRITE),
            (&foreign, 0, 64, rw()),
        ];
        for (mr, off, len, access) in cases {
            let addr = if off > 1 << 40 { off } else { mr.addr() + off };
            let e =
                b.qp.post_bind_mw(&MwBind {
                    wr_id: 1,
                    mw: &mw,
                    mr: &mr.mr,
                    addr,
                    length: len,
                    access,
                    signaled: true,
                })
                .unwrap_err();
            assert!(e.to_string().contains("bind_mw"), "{e}");
        }
        assert_eq!(b.qp.send_queue().cur_post(), posted);
        assert_eq!(mw.rkey(), key);
        quiet(&mut b.cq);
    }
}
