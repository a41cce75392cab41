//! Completion queues: sizes, ring and doorbell memory, query, moderation,
//! resize, and destroy while in use.

mod common;

use devx::sim::ObjKind;
use verbs::{CompChannel, Cq, CqInit, Error, QpInit, QpType};

/// Reads byte `at` of a queue through its address.
fn byte_at(addr: usize, at: usize) -> u8 {
    // SAFETY: callers pass offsets inside a live queue mapping that this test
    // keeps alive; the emulator writes nothing to it in these tests.
    unsafe { std::ptr::read_volatile((addr + at) as *const u8) }
}

#[test]
fn sizes_round_up_with_one_spare_slot() {
    let (ctx, _sim) = common::open(1);
    for (ask, got) in [
        (1u32, 1u32),
        (2, 3),
        (16, 31),
        (31, 31),
        (32, 63),
        (1000, 1023),
    ] {
        let cq = ctx.create_cq(ask).unwrap();
        assert_eq!(cq.cqe(), got, "asked {ask}");
        assert_eq!(cq.memory().entries, got + 1);
    }
}

#[test]
fn ring_starts_invalid_and_the_doorbell_record_is_separate() {
    let (ctx, sim) = common::open(1);
    let cq = ctx.create_cq(7).unwrap();
    let m = cq.memory();
    assert_eq!((m.entries, m.stride, m.len), (8, 64, 512));
    assert_eq!(m.addr % 4096, 0);
    for i in 0..8 {
        assert_eq!(byte_at(m.addr, i * 64 + 63), 0xF0, "CQE {i} op_own");
        assert_eq!(byte_at(m.addr, i * 64), 0);
    }
    assert!(m.doorbell_record < m.addr || m.doorbell_record >= m.addr + m.len);
    assert_eq!(m.doorbell_record % 8, 0);
    // Ring UMEM, doorbell UMEM, UAR, CQ.
    assert_eq!(sim.count(ObjKind::Umem), 2);
    assert_eq!(sim.count(ObjKind::Uar), 1);
    assert_eq!(sim.count(ObjKind::Cq), 1);
}

#[test]
fn query_reports_what_create_set() {
    let (ctx, sim) = common::open(1);
    let cq = Cq::create(&ctx, &CqInit::new(100).comp_vector(1)).unwrap();
    let q = cq.query().unwrap();
    assert_eq!(q.cqe, 127);
    assert_eq!(q.log_cq_size, 7);
    assert_eq!(q.cqe_size, 64);
    assert_eq!(q.uar_page, cq.uar().page_id());
    assert_eq!(q.eqn, cq.eqn());
    assert_eq!(cq.eqn(), sim.profile().first_comp_eqn + 1);
    assert_eq!(
        (q.status, q.producer_counter, q.consumer_counter),
        (0, 0, 0)
    );
}

#[test]
fn bad_sizes_are_refused_before_any_command() {
    let (ctx, sim) = common::open(1);
    let before = sim.commands_executed();
    let e = ctx.create_cq(0).unwrap_err();
    assert!(e.is_argument() && e.verb() == "create_cq", "{e}");
    let max = ctx.query_device().unwrap().max_cqe;
    let before2 = sim.commands_executed();
    assert!(before2 > before);
    let e = ctx.create_cq(max + 1).unwrap_err();
    assert!(e.to_string().contains("exceed the device's max_cqe"), "{e}");
    assert_eq!(sim.commands_executed(), before2);
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn a_missing_completion_vector_is_the_devices_answer() {
    let (ctx, sim) = common::open(1);
    let n = sim.profile().num_comp_vectors;
    let e = Cq::create(&ctx, &CqInit::new(4).comp_vector(n)).unwrap_err();
    assert_eq!(e.verb(), "create_cq");
    assert!(e.devx().is_some(), "{e}");
    assert_eq!(sim.live_objects(), 0);
}

/// On a device with many completion vectors EQ numbers pass 255; a CQ
/// lands on the EQ its vector names, all 32 bits of it.
#[test]
fn a_cq_on_an_eq_number_above_255_is_created_on_that_eq() {
    let profile = devx::sim::Profile {
        first_comp_eqn: 0x1f0,
        num_comp_vectors: 32,
        ..devx::sim::Profile::connectx6_dx()
    };
    let sim = devx::sim::SimDevice::new(profile);
    let ctx = verbs::Context::open(&sim.device()).unwrap();
    let eqn = ctx.devx().query_eqn(31).unwrap();
    assert_eq!(eqn, 0x20f);
    let cq = Cq::create(&ctx, &CqInit::new(4).comp_vector(31)).unwrap();
    assert_eq!(cq.eqn(), eqn);
    assert_eq!(cq.query().unwrap().eqn, eqn);
}

#[test]
fn moderation_is_modified_and_read_back() {
    let (ctx, _sim) = common::open(1);
    let cq = ctx.create_cq(16).unwrap();
    cq.modify_moderation(32, 100).unwrap();
    let q = cq.query().unwrap();
    assert_eq!((q.cq_max_count, q.cq_period), (32, 100));
    assert!(cq.modify_moderation(1, 0x1000).unwrap_err().is_argument());
}

#[test]
fn shrinking_keeps_the_cq_usable_and_leaks_nothing() {
    let (ctx, sim) = common::open(1);
    let mut cq = ctx.create_cq(255).unwrap();
    let old = cq.memory();
    assert_eq!(cq.resize(31).unwrap(), 31);
    let new = cq.memory();
    assert_eq!(new.entries, 32);
    assert_ne!(new.addr, old.addr);
    assert_eq!(new.doorbell_record, old.doorbell_record);
    for i in 0..32 {
        assert_eq!(byte_at(new.addr, i * 64 + 63), 0xF0);
    }
    let q = cq.query().unwrap();
    assert_eq!(q.log_cq_size, 5);
    assert!(cq.resize(0).unwrap_err().is_argument());
    cq.destroy().unwrap();
    assert_eq!(sim.live_objects(), 0);
}

/// MODIFY_CQ resize names the new ring's UMEM at the same positions as
/// CREATE_CQ (cq_umem_offset 0x280, cq_umem_id 0x2c0), so a CQ can grow into
/// a larger ring.
#[test]
fn growing_moves_to_a_larger_ring() {
    let (ctx, sim) = common::open(1);
    let mut cq = ctx.create_cq(15).unwrap();
    assert_eq!(cq.resize(1000).unwrap(), 1023);
    assert_eq!(cq.query().unwrap().log_cq_size, 10);
    drop(cq);
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn destroy_is_refused_while_a_qp_completes_into_it() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    let e = cq.destroy().unwrap_err();
    // The QP holds it twice: as send and as receive CQ.
    assert!(
        matches!(e.error, Error::Busy { users: 2, .. }),
        "{}",
        e.error
    );
    let cq = e.object;
    // Dropping the CQ first is fine: the QP keeps it until the QP is gone.
    let cqn = cq.cqn();
    drop(cq);
    assert_eq!(
        sim.count(ObjKind::Cq),
        1,
        "CQ {cqn:#x} destroyed under its QP"
    );
    assert_eq!(qp.send_cqn(), cqn);
    drop(qp);
    assert_eq!(sim.count(ObjKind::Cq), 0);
    drop(pd);
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn a_completion_channel_is_kept_with_the_cq() {
    let (ctx, sim) = common::open(1);
    let ch = CompChannel::new(&ctx).unwrap();
    let cq = Cq::create(&ctx, &CqInit::new(4).channel(&ch)).unwrap();
    assert_eq!(cq.channel().map(|c| c.fd()), Some(ch.fd()));
    // The CQ subscribes to its channel: a channel of another context is
    // refused, and the create leaves nothing behind.
    let (other, _sim2) = common::open(1);
    let foreign = CompChannel::from_devx(devx::Events::new(other.devx(), false).unwrap());
    let before = sim.live_objects();
    let e = Cq::create(&ctx, &CqInit::new(4).channel(&foreign)).unwrap_err();
    assert_eq!(e.verb(), "create_cq", "{e}");
    assert!(e.is_argument(), "{e}");
    assert_eq!(sim.live_objects(), before);
    assert!(ctx.create_cq(4).unwrap().channel().is_none());
}

#[test]
fn a_shared_uar_is_used_and_kept() {
    let (ctx, sim) = common::open(1);
    let uar = std::sync::Arc::new(devx::Uar::alloc(ctx.devx()).unwrap());
    let a = Cq::create(&ctx, &CqInit::new(4).uar(uar.clone())).unwrap();
    let b = Cq::create(&ctx, &CqInit::new(4).uar(uar.clone())).unwrap();
    assert_eq!(sim.count(ObjKind::Uar), 1);
    assert_eq!(a.query().unwrap().uar_page, uar.page_id());
    assert_eq!(b.uar().page_id(), uar.page_id());
    drop((a, b, uar));
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn a_foreign_uar_is_refused_by_the_device_by_name() {
    let (ctx, sim) = common::open(1);
    let (other, _sim2) = common::open(1);
    let foreign = std::sync::Arc::new(devx::Uar::alloc(other.devx()).unwrap());
    let before = sim.live_objects();
    let e = Cq::create(&ctx, &CqInit::new(4).uar(foreign)).unwrap_err();
    let text = e.to_string();
    assert!(text.starts_with("create_cq: CREATE_CQ: "), "{text}");
    assert!(text.contains(", syndrome 0x"), "{text}");
    assert!(e.status_name().is_some(), "{text}");
    assert_eq!(e.errno(), libc::EREMOTEIO);
    assert_eq!(sim.live_objects(), before);
}

#[test]
fn wait_one_on_an_empty_cq_times_out_by_name() {
    let (ctx, _sim) = common::open(1);
    let mut cq = ctx.create_cq(4).unwrap();
    let err = cq
        .wait_one(std::time::Duration::from_millis(20))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert_eq!(err.errno(), libc::ETIMEDOUT);
    assert!(err
        .to_string()
        .starts_with("poll_cq: nothing arrived within"));
}
