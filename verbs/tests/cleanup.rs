//! Every multi-command verb, with a failure injected at each of its steps in
//! turn, leaves the emulated device exactly as it found it (and the object it
//! was changing, unchanged).

mod common;

use std::collections::BTreeMap;

use common::Plan;
use devx::sim::{ObjKind, SimDevice};
use verbs::{
    AccessFlags, AhAttr, CqInit, InitAttr, Mr, Mtu, MwType, QpInit, QpType, RtrAttr, SrqInit,
};

/// What the device holds (per kind), plus its open contexts.
fn snapshot(sim: &SimDevice) -> (BTreeMap<ObjKind, usize>, usize) {
    (sim.counts(), sim.open_contexts())
}

/// Runs `verb` with its `n`th step failing, for n = 0, 1, … until it succeeds;
/// after each injected failure nothing may have changed on the device. Returns
/// the number of steps, or the first failure that was the device's own.
fn each_step<T>(
    sim: &SimDevice,
    plan: &Plan,
    mut verb: impl FnMut() -> verbs::Result<T>,
) -> Result<usize, verbs::Error> {
    let before = snapshot(sim);
    for n in 0..64 {
        plan.fail_at(n);
        let injected_before = plan.injected();
        let r = verb();
        plan.disarm();
        match r {
            Ok(v) => {
                assert_eq!(
                    plan.injected(),
                    injected_before,
                    "step {n} was skipped, not failed"
                );
                drop(v);
                return Ok(n as usize);
            }
            Err(e) if common::is_injected(&e) => {
                assert_eq!(
                    snapshot(sim),
                    before,
                    "failing step {n} ({e}) left objects behind"
                );
            }
            Err(e) => {
                assert_eq!(
                    snapshot(sim),
                    before,
                    "the device's refusal ({e}) left objects behind"
                );
                return Err(e);
            }
        }
    }
    panic!("the verb never succeeded");
}

#[test]
fn open_device() {
    let (name, sim) = common::fresh_sim(1);
    let plan = Plan::new();
    let dev = common::FailingProvider::device(devx::sim::device(&name).unwrap(), plan.clone());
    let steps = each_step(&sim, &plan, || verbs::Context::open(&dev)).unwrap();
    assert_eq!(steps, 1, "QUERY_HCA_CAP");
    assert_eq!(sim.open_contexts(), 0);
}

#[test]
fn pd_td_mw_ah_single_commands() {
    let (ctx, sim, plan) = common::open_failing(1);
    assert_eq!(each_step(&sim, &plan, || ctx.alloc_pd()).unwrap(), 1);
    assert_eq!(each_step(&sim, &plan, || ctx.alloc_td()).unwrap(), 1);
    let pd = ctx.alloc_pd().unwrap();
    for t in [MwType::Type1, MwType::Type2] {
        assert_eq!(each_step(&sim, &plan, || pd.alloc_mw(t)).unwrap(), 1);
    }
    let cq = ctx.create_cq(4).unwrap();
    let ud = pd.create_qp(&QpInit::new(QpType::Ud, &cq, &cq)).unwrap();
    let mut mgid = [0u8; 16];
    mgid[0] = 0xff;
    let mgid = verbs::Gid(mgid);
    assert_eq!(
        each_step(&sim, &plan, || ud.attach_mcast(&mgid, 0)).unwrap(),
        1
    );
    let gid = ctx.query_gid(1, 0).unwrap().gid;
    assert_eq!(
        each_step(&sim, &plan, || pd.create_ah(&AhAttr::roce(1, gid, 0, None))).unwrap(),
        1
    );
}

#[test]
fn create_cq() {
    let (ctx, sim, plan) = common::open_failing(1);
    let steps = each_step(&sim, &plan, || ctx.create_cq(100)).unwrap();
    assert_eq!(steps, 5, "ring UMEM, doorbell UMEM, UAR, EQN, CREATE_CQ");
    // With a shared UAR there is one step less, and the UAR survives failures.
    let uar = std::sync::Arc::new(devx::Uar::alloc(ctx.devx()).unwrap());
    let init = CqInit::new(8).uar(uar.clone());
    assert_eq!(
        each_step(&sim, &plan, || verbs::Cq::create(&ctx, &init)).unwrap(),
        4
    );
    assert_eq!(sim.count(ObjKind::Uar), 1);
}

#[test]
fn resize_cq() {
    let (ctx, sim, plan) = common::open_failing(1);
    let mut cq = ctx.create_cq(255).unwrap();
    let mem = cq.memory();
    let steps = each_step(&sim, &plan, || {
        let r = cq.resize(63);
        if r.is_err() {
            // A failed resize leaves the ring where it was.
            assert_eq!(cq.memory(), mem);
            assert_eq!(cq.query().unwrap().log_cq_size, 8);
        }
        r
    });
    assert_eq!(steps.unwrap(), 2, "new ring UMEM, MODIFY_CQ");
    assert_eq!(cq.cqe(), 63);
}

#[test]
fn create_qp_of_each_type() {
    let (ctx, sim, plan) = common::open_failing(1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        let init = QpInit::new(t, &cq, &cq).max_send_wr(8).max_recv_wr(8);
        let steps = each_step(&sim, &plan, || pd.create_qp(&init)).unwrap();
        assert_eq!(
            steps, 4,
            "{t:?}: buffer UMEM, doorbell UMEM, UAR, CREATE_QP"
        );
    }
}

#[test]
fn qp_transitions_change_nothing_when_they_fail() {
    let (ctx, sim, plan) = common::open_failing(1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    assert_eq!(
        each_step(&sim, &plan, || qp.to_init(&InitAttr::new(1))).unwrap(),
        1
    );
    let gid = ctx.query_gid(1, 1).unwrap().gid;
    let rtr = RtrAttr::new(Mtu::Mtu2048, 0x100, 1, AhAttr::roce(1, gid, 1, None));
    let steps = each_step(&sim, &plan, || {
        let r = qp.to_rtr(&rtr);
        if r.is_err() {
            assert_eq!(qp.state(), verbs::QpState::Init);
        }
        r
    });
    assert_eq!(steps.unwrap(), 2, "GID lookup, INIT2RTR");
    assert_eq!(qp.query().unwrap().path_mtu, Some(Mtu::Mtu2048));
}

#[test]
fn register_and_reregister_mr() {
    let (ctx, sim, plan) = common::open_failing(1);
    let pd = ctx.alloc_pd().unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    let steps = each_step(&sim, &plan, || Mr::register(&pd, vec![0u8; 5000], access)).unwrap();
    assert_eq!(steps, 2, "UMEM, CREATE_MKEY");

    let mut mr = pd.reg_mr(vec![9u8; 4096], access).unwrap();
    let key = mr.lkey();
    let steps = each_step(&sim, &plan, || {
        let r = mr.rereg_memory(vec![1u8; 64], None);
        if r.is_err() {
            // The old registration is untouched.
            assert_eq!(
                (mr.lkey(), mr.len(), mr.read_vec(0, 1).unwrap()[0]),
                (key, 4096, 9)
            );
        }
        r
    });
    assert_eq!(steps.unwrap(), 2, "UMEM, CREATE_MKEY");
    let steps = each_step(&sim, &plan, || {
        let before = mr.lkey();
        let r = mr.rereg(Some(AccessFlags::LOCAL_WRITE), None);
        if r.is_err() {
            assert_eq!(mr.lkey(), before);
        }
        r
    });
    assert_eq!(steps.unwrap(), 1, "CREATE_MKEY");
    assert_eq!(
        each_step(&sim, &plan, || mr.register_shared(&pd, access)).unwrap(),
        1
    );
}

#[test]
fn create_srq() {
    let (ctx, sim, plan) = common::open_failing(1);
    let pd = ctx.alloc_pd().unwrap();
    let steps = each_step(&sim, &plan, || pd.create_srq(&SrqInit::new(64, 2))).unwrap();
    assert_eq!(steps, 3, "ring UMEM, doorbell UMEM, CREATE_RMP");
}

#[test]
fn queries_leave_nothing() {
    let (ctx, sim, plan) = common::open_failing(1);
    assert_eq!(each_step(&sim, &plan, || ctx.query_device()).unwrap(), 2);
    assert_eq!(each_step(&sim, &plan, || ctx.query_port(1)).unwrap(), 3);
    let cq = ctx.create_cq(4).unwrap();
    assert_eq!(each_step(&sim, &plan, || cq.query()).unwrap(), 1);
}
