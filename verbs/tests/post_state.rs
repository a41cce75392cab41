//! Posting checks the QP state at once (IBA's QP state table): sends need
//! RTS (or SQD, SQE, ERR), receives anything but RESET. A refused post
//! writes nothing and rings nothing; an accepted one in ERR is flushed.

mod datapath_support;

use datapath_support::{be32_at, open, wait};
use verbs::{
    AccessFlags, Cq, Error, InitAttr, Pd, Qp, QpInit, QpState, QpType, RecvWr, RtrAttr, SendWr,
    Sge, WcStatus,
};

struct Setup {
    _pd: Pd,
    cq: Cq,
    a: Qp,
    b: Qp,
    buf: verbs::Mr<Vec<u8>>,
}

fn setup(base: u32) -> Setup {
    let (ctx, _sim) = open(base);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let init = QpInit::new(QpType::Rc, &cq, &cq)
        .max_send_wr(4)
        .max_recv_wr(4);
    let a = pd.create_qp(&init).unwrap();
    let b = pd.create_qp(&init).unwrap();
    let buf = pd
        .reg_mr(
            vec![0u8; 64],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    Setup {
        _pd: pd,
        cq,
        a,
        b,
        buf,
    }
}

fn assert_send_refused(qp: &mut Qp, state: &str, sge: &[Sge]) {
    let qpn = qp.qpn();
    let dbr = qp.send_queue_memory().doorbell_record;
    let (posted, snd) = (qp.send_queue().cur_post(), be32_at(dbr + 4));
    let e = qp.post_send(&SendWr::send(1, sge)).unwrap_err();
    assert!(matches!(e, Error::QpState { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "post_send: QP {qpn:#x} is in {state}; sends need RTS (or SQD, SQE, ERR); connect the QP first"
        )
    );
    assert_eq!(e.errno(), libc::EINVAL);
    // A batch reports the same on every request and rings nothing.
    let mut batch = qp.send_batch();
    assert!(matches!(batch.send(2, sge), Err(Error::QpState { .. })));
    assert!(matches!(batch.send(3, sge), Err(Error::QpState { .. })));
    assert!(batch.is_empty());
    batch.ring();
    assert_eq!(qp.send_queue().cur_post(), posted, "nothing was written");
    assert_eq!(be32_at(dbr + 4), snd, "the SND counter did not move");
}

#[test]
fn sends_are_refused_in_reset_init_and_rtr_by_name() {
    let mut s = setup(1200);
    let sge = [Sge::from_mr(&s.buf, 0, 8)];
    assert_send_refused(&mut s.a, "RESET", &sge);
    s.a.to_init(&InitAttr::new(1)).unwrap();
    assert_send_refused(&mut s.a, "INIT", &sge);
    let remote = s.b.endpoint().unwrap();
    let local = s.a.endpoint().unwrap();
    let path = verbs::AhAttr::roce(1, remote.gid, local.gid_index, remote.mac);
    s.a.to_rtr(&RtrAttr::new(
        verbs::Mtu::Mtu1024,
        remote.qpn,
        remote.psn,
        path,
    ))
    .unwrap();
    assert_eq!(s.a.state(), QpState::Rtr);
    assert_send_refused(&mut s.a, "RTR", &sge);
}

#[test]
fn receives_are_refused_in_reset_only() {
    let mut s = setup(1210);
    let sge = [Sge::from_mr(&s.buf, 0, 8)];
    let qpn = s.a.qpn();
    let e = s.a.post_recv(&RecvWr::new(1, &sge)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "post_recv: QP {qpn:#x} is in RESET; receives need INIT or later; move the QP out of RESET first"
        )
    );
    let e = s.a.recv_queue().post_list(&[RecvWr::new(1, &sge)]);
    assert!(matches!(e, Err(Error::QpState { .. })));
    assert_eq!(s.a.recv_queue().head(), 0, "nothing was written");
    s.a.to_init(&InitAttr::new(1)).unwrap();
    s.a.post_recv(&RecvWr::new(2, &sge)).unwrap();
    s.a.connect(&s.b.endpoint().unwrap()).unwrap();
    s.a.post_recv(&RecvWr::new(3, &sge)).unwrap();
    assert_eq!(s.a.recv_queue().head(), 2);
}

#[test]
fn rts_accepts_and_reset_refuses_again() {
    let mut s = setup(1220);
    s.a.connect(&s.b.endpoint().unwrap()).unwrap();
    s.b.connect(&s.a.endpoint().unwrap()).unwrap();
    let sge = [Sge::from_mr(&s.buf, 0, 8)];
    let dst = s.buf.addr() as u64 + 32;
    s.a.post_send(&SendWr::rdma_write(7, &sge, dst, s.buf.rkey()))
        .unwrap();
    let wc = wait(&mut s.cq, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));
    s.a.reset().unwrap();
    assert_send_refused(&mut s.a, "RESET", &sge);
    assert!(s.a.post_recv(&RecvWr::new(1, &sge)).is_err());
}

/// Receives posted in ERR are accepted too (checked above for INIT and
/// RTS); their flush is the device's, which the emulator does not model.
#[test]
fn err_accepts_sends_and_flushes_them() {
    let mut s = setup(1230);
    s.a.connect(&s.b.endpoint().unwrap()).unwrap();
    s.a.to_err().unwrap();
    let sge = [Sge::from_mr(&s.buf, 0, 8)];
    s.a.post_send(&SendWr::send(11, &sge)).unwrap();
    let wc = wait(&mut s.cq, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (11, WcStatus::WrFlushErr));
    s.a.post_recv(&RecvWr::new(12, &sge)).unwrap();
}
