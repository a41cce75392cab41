//! The `_async` forms of the multi-command verbs (CQ and its resize, QP
//! and its transitions, MR and its re-registration, MW, SRQ, PD): they build working objects on the
//! emulated device's command queue, and dropping one at any step leaves
//! nothing behind.

mod datapath_support;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Waker};
use std::time::{Duration, Instant};

use datapath_support::{access_all, caps, wait, Buf, Side};
use devx::reactor::block_on;
use devx::sim::{sim_device_with_profile, ObjKind, Profile, SimDevice};
use devx::CmdComp;
use prm_layouts::enums::Opcode;
use verbs::{
    AccessFlags, AhAttr, Context, CqInit, InitAttr, Mtu, MwType, QpInit, QpState, QpType, RecvWr,
    RtrAttr, RtsAttr, SendWr, SrqInit,
};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A fresh device whose commands of `slow` hold their queue slot for a
/// minute (they run at once; their completion comes that much later).
fn open_slow(slow: &[Opcode]) -> (Context, Arc<SimDevice>) {
    let name = format!("sim{}", 12_000 + NEXT.fetch_add(1, Ordering::Relaxed));
    let p = Profile {
        cmd_latency: slow
            .iter()
            .map(|o| (o.raw(), Duration::from_secs(60)))
            .collect(),
        ..Profile::default()
    };
    let sim = sim_device_with_profile(&name, p).expect("emulated device");
    let dev = devx::Device::by_name(&name).expect("device by name");
    (Context::open(&dev).expect("open"), sim)
}

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

/// Polls `fut` (never letting it resolve) until `cond` holds, then drops
/// it; says whether `cond` held.
fn drop_when<F: Future>(fut: F, mut cond: impl FnMut() -> bool) -> bool {
    let mut fut = pin!(fut);
    let mut cx = TaskContext::from_waker(Waker::noop());
    eventually(|| {
        assert!(
            fut.as_mut().poll(&mut cx).is_pending(),
            "the verb finished before its slow step"
        );
        cond()
    })
}

/// An RC side made with the async verbs.
async fn async_side(ctx: Context, sim: Arc<SimDevice>, comp: &CmdComp) -> verbs::Result<Side> {
    let pd = ctx.alloc_pd_async(comp).await?;
    let cq = ctx.create_cq_async(&CqInit::new(256), comp).await?;
    let qp = pd
        .create_qp_async(&QpInit::new(QpType::Rc, &cq, &cq).cap(caps()), comp)
        .await?;
    Ok(Side {
        ctx,
        sim,
        pd,
        cq,
        qp,
    })
}

fn path_to(peer: &Side) -> AhAttr {
    let g = peer.ctx.query_gid(1, 1).unwrap();
    AhAttr::roce(1, g.gid, 1, Some(peer.sim.identity().mac))
}

async fn connect_async(qp: &verbs::Qp, peer: &Side, comp: &CmdComp) -> verbs::Result<()> {
    qp.to_init_async(&InitAttr::new(1).access(access_all()), comp)
        .await?;
    let rtr = RtrAttr::new(Mtu::Mtu1024, peer.qp.qpn(), 0x100, path_to(peer))
        .max_dest_rd_atomic(4)
        .min_rnr_timer(1);
    qp.to_rtr_async(&rtr, comp).await?;
    let rts = RtsAttr::new(0x100)
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7)
        .max_rd_atomic(4);
    qp.to_rts_async(&rts, comp).await
}

#[test]
fn an_rc_pair_built_with_async_verbs_moves_data() {
    let (ctx_a, sim_a) = open_slow(&[]);
    let (ctx_b, sim_b) = open_slow(&[]);
    let comp_a = ctx_a.cmd_comp().unwrap();
    let comp_b = ctx_b.cmd_comp().unwrap();
    let (mut a, mut b) = block_on(async {
        let a = async_side(ctx_a.clone(), sim_a.clone(), &comp_a).await?;
        let b = async_side(ctx_b.clone(), sim_b.clone(), &comp_b).await?;
        connect_async(&a.qp, &b, &comp_a).await?;
        connect_async(&b.qp, &a, &comp_b).await?;
        Ok::<_, verbs::Error>((a, b))
    })
    .unwrap();
    assert_eq!(a.qp.query().unwrap().state, QpState::Rts);
    assert_eq!(b.qp.state(), QpState::Rts);
    assert_eq!(sim_a.count(ObjKind::Qp), 1);

    let buf_a = Buf::all(&a.pd, 4096);
    let mr_b = block_on(b.pd.reg_mr_async(vec![0u8; 4096], access_all(), &comp_b)).unwrap();
    buf_a.write(0, b"queued all the way");
    b.qp.post_recv(&RecvWr::new(7, &[verbs::Sge::from_mr(&mr_b, 0, 4096)]))
        .unwrap();
    a.qp.post_send(&SendWr::send(9, &[buf_a.sge(0, 18)]))
        .unwrap();
    let sent = wait(&mut a.cq, 1);
    let got = wait(&mut b.cq, 1);
    assert!(sent[0].is_ok() && got[0].is_ok(), "{sent:?} {got:?}");
    assert_eq!((sent[0].wr_id, got[0].wr_id), (9, 7));
    assert_eq!(mr_b.read_vec(0, 18).unwrap(), b"queued all the way");
    // Every command's completion went to its own future.
    assert!(comp_a.try_get().unwrap().is_none());
    assert!(comp_b.try_get().unwrap().is_none());
    drop((a, b, buf_a, mr_b));
    assert_eq!(sim_a.live_objects(), 0);
    assert_eq!(sim_b.live_objects(), 0);
}

#[test]
fn connect_async_reaches_rts_like_connect() {
    let (ctx_a, sim_a) = open_slow(&[]);
    let (ctx_b, sim_b) = open_slow(&[]);
    let comp_a = ctx_a.cmd_comp().unwrap();
    let comp_b = ctx_b.cmd_comp().unwrap();
    let a = block_on(async_side(ctx_a, sim_a, &comp_a)).unwrap();
    let b = block_on(async_side(ctx_b, sim_b, &comp_b)).unwrap();
    let (ea, eb) = (a.qp.endpoint().unwrap(), b.qp.endpoint().unwrap());
    block_on(a.qp.connect_async(&eb, &comp_a)).unwrap();
    b.qp.connect(&ea).unwrap();
    assert_eq!(a.qp.query().unwrap().state, QpState::Rts);
    assert_eq!(b.qp.query().unwrap().state, QpState::Rts);
}

#[test]
fn srq_mr_and_mw_async_forms_make_the_objects() {
    let (ctx, sim) = open_slow(&[]);
    let comp = ctx.cmd_comp().unwrap();
    let pd = block_on(ctx.alloc_pd_async(&comp)).unwrap();
    let srq = block_on(pd.create_srq_async(&SrqInit::new(32, 2), &comp)).unwrap();
    assert!(srq.max_wr() >= 32);
    assert_eq!(srq.query().unwrap().max_wr, srq.max_wr());
    let mr = block_on(pd.reg_mr_async(vec![5u8; 8192], AccessFlags::LOCAL_WRITE, &comp)).unwrap();
    assert_eq!(mr.len(), 8192);
    assert_eq!(mr.query().unwrap().lkey, mr.lkey());
    let mw = block_on(pd.alloc_mw_async(MwType::Type2, &comp)).unwrap();
    assert!(mw.query().unwrap().free);
    assert_eq!(sim.count(ObjKind::Mkey), 2);
    drop((srq, mr, mw, pd));
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn a_queued_transition_reports_the_firmware_refusal_and_leaves_the_state() {
    let (ctx, _sim) = open_slow(&[]);
    let comp = ctx.cmd_comp().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(caps()))
        .unwrap();
    // RESET→RTS is no transition.
    let e = block_on(qp.to_rts_async(&RtsAttr::new(0), &comp)).unwrap_err();
    assert!(matches!(e, verbs::Error::Device { .. }), "{e}");
    assert_eq!(qp.state(), QpState::Rst);
    block_on(qp.to_err_async(&comp)).unwrap();
    assert_eq!(qp.query().unwrap().state, QpState::Err);
}

/// Object counts per kind, for "nothing left behind" checks.
fn counts(sim: &SimDevice) -> BTreeMap<ObjKind, usize> {
    sim.counts()
}

/// Drops the future `$make` builds (from a context and a channel) while
/// the command of `$slow` holds its slot (the firmware ran it, its
/// completion not yet posted), then checks the device is back to what it
/// had before.
macro_rules! cancel_at {
    ($slow:expr, $kind:expr, |$ctx:ident, $comp:ident| $make:expr) => {{
        let (slow, kind) = ($slow, $kind);
        let (ctx, sim) = open_slow(&[slow]);
        let comp = ctx.cmd_comp().unwrap();
        let before = counts(&sim);
        let had = sim.count(kind);
        {
            let ($ctx, $comp) = (&ctx, &comp);
            let fut = $make;
            assert!(
                drop_when(fut, || sim.count(kind) == had + 1
                    && sim.async_in_flight() == 1),
                "{slow:?} never held its slot"
            );
        }
        assert!(
            eventually(|| counts(&sim) == before),
            "cancelled at {slow:?}: {:?} left, had {before:?}",
            counts(&sim)
        );
        drop(comp);
        drop(ctx);
        assert_eq!(sim.live_objects(), 0);
    }};
}

#[test]
fn dropping_create_cq_at_any_step_leaves_nothing() {
    for (slow, kind) in [
        (Opcode::CreateUmem, ObjKind::Umem),
        (Opcode::AllocUar, ObjKind::Uar),
        (Opcode::CreateCq, ObjKind::Cq),
    ] {
        cancel_at!(slow, kind, |ctx, comp| async move {
            ctx.create_cq_async(&CqInit::new(64), comp).await
        });
    }
}

#[test]
fn dropping_create_qp_at_any_step_leaves_nothing() {
    for (slow, kind) in [
        (Opcode::CreateUmem, ObjKind::Umem),
        (Opcode::AllocUar, ObjKind::Uar),
        (Opcode::CreateQp, ObjKind::Qp),
    ] {
        // The PD and CQ are made blocking: only queued commands are slow.
        let (ctx, sim) = open_slow(&[slow]);
        let comp = ctx.cmd_comp().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let before = counts(&sim);
        let had = sim.count(kind);
        let init = QpInit::new(QpType::Rc, &cq, &cq).cap(caps());
        let fut = pd.create_qp_async(&init, &comp);
        assert!(
            drop_when(fut, || sim.count(kind) == had + 1
                && sim.async_in_flight() == 1),
            "{slow:?} never held its slot"
        );
        assert!(
            eventually(|| counts(&sim) == before),
            "cancelled at {slow:?}: {:?} left, had {before:?}",
            counts(&sim)
        );
        drop((init, cq, pd, comp, ctx));
        assert_eq!(sim.live_objects(), 0);
    }
}

#[test]
fn dropping_create_srq_reg_mr_and_alloc_mw_at_any_step_leaves_nothing() {
    for (slow, kind) in [
        (Opcode::CreateUmem, ObjKind::Umem),
        (Opcode::CreateRmp, ObjKind::Rmp),
    ] {
        cancel_at!(slow, kind, |ctx, comp| async move {
            let pd = ctx.alloc_pd()?;
            pd.create_srq_async(&SrqInit::new(16, 1), comp).await
        });
    }
    for (slow, kind) in [
        (Opcode::CreateUmem, ObjKind::Umem),
        (Opcode::CreateMkey, ObjKind::Mkey),
    ] {
        cancel_at!(slow, kind, |ctx, comp| async move {
            let pd = ctx.alloc_pd()?;
            pd.reg_mr_async(vec![0u8; 4096], AccessFlags::LOCAL_WRITE, comp)
                .await
        });
    }
    cancel_at!(Opcode::CreateMkey, ObjKind::Mkey, |ctx, comp| async move {
        let pd = ctx.alloc_pd()?;
        pd.alloc_mw_async(MwType::Type1, comp).await
    });
}

#[test]
fn dropping_a_create_still_queued_leaves_nothing_once_the_firmware_runs_it() {
    let (ctx, sim) = open_slow(&[]);
    let comp = ctx.cmd_comp().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let before = counts(&sim);
    let init = QpInit::new(QpType::Rc, &cq, &cq).cap(caps());
    // Held back: the QP's first step is queued, not started.
    sim.pause_async(true);
    let fut = pd.create_qp_async(&init, &comp);
    assert!(drop_when(fut, || sim.async_queued() == 1));
    sim.pause_async(false);
    assert!(eventually(
        || sim.async_queued() == 0 && sim.async_in_flight() == 0
    ));
    assert!(
        eventually(|| counts(&sim) == before),
        "{:?} left, had {before:?}",
        counts(&sim)
    );
}

#[test]
fn dropping_a_queued_transition_leaves_the_qp_usable() {
    let (ctx, sim) = open_slow(&[Opcode::Rst2initQp]);
    let comp = ctx.cmd_comp().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(caps()))
        .unwrap();
    let init = InitAttr::new(1);
    let fut = qp.to_init_async(&init, &comp);
    assert!(drop_when(fut, || sim.async_in_flight() == 1));
    // The firmware made the transition; the library did not learn it.
    assert_eq!(qp.query().unwrap().state, QpState::Init);
    drop((qp, cq, pd));
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn cq_resize_and_mr_rereg_async_forms_change_the_objects() {
    let (ctx, sim) = open_slow(&[]);
    let comp = ctx.cmd_comp().unwrap();
    let mut cq = ctx.create_cq(16).unwrap();
    let umems = sim.count(ObjKind::Umem);
    let size = block_on(cq.resize_async(200, &comp)).unwrap();
    assert!(size >= 200);
    assert_eq!((cq.cqe(), cq.query().unwrap().cqe), (size, size));
    // The old ring's UMEM went with the resize.
    assert_eq!(sim.count(ObjKind::Umem), umems);

    let pd = ctx.alloc_pd().unwrap();
    let mut mr = pd
        .reg_mr(vec![3u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let wider = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    block_on(mr.rereg_async(Some(wider), None, &comp)).unwrap();
    let attr = mr.query().unwrap();
    assert_eq!(
        (mr.access(), attr.access, attr.lkey),
        (wider, wider, mr.lkey())
    );
    assert_eq!(sim.count(ObjKind::Mkey), 1);

    let old = block_on(mr.rereg_memory_async(vec![7u8; 8192], None, &comp)).unwrap();
    assert_eq!(old, Some(vec![3u8; 4096]));
    assert_eq!(
        (mr.len(), mr.read_vec(8190, 2).unwrap()),
        (8192, vec![7, 7])
    );
    assert_eq!(sim.count(ObjKind::Mkey), 1);
    drop((mr, pd, cq, comp, ctx));
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn dropping_a_resize_or_rereg_in_flight_leaves_the_object_as_it_was() {
    // Resize: dropped while the new ring's UMEM registration holds its slot.
    let (ctx, sim) = open_slow(&[Opcode::CreateUmem]);
    let comp = ctx.cmd_comp().unwrap();
    let mut cq = ctx.create_cq(16).unwrap();
    let (size, before) = (cq.cqe(), counts(&sim));
    let umems = sim.count(ObjKind::Umem);
    assert!(drop_when(cq.resize_async(200, &comp), || sim
        .count(ObjKind::Umem)
        == umems + 1
        && sim.async_in_flight() == 1));
    assert!(eventually(|| counts(&sim) == before), "{:?}", counts(&sim));
    assert_eq!((cq.cqe(), cq.query().unwrap().cqe), (size, size));
    drop((cq, comp, ctx));
    assert_eq!(sim.live_objects(), 0);

    // Resize: dropped while the MODIFY_CQ holds its slot (the firmware has
    // moved to the new ring): the CQ takes it, the old ring goes.
    let (ctx, sim) = open_slow(&[Opcode::ModifyCq]);
    let comp = ctx.cmd_comp().unwrap();
    let mut cq = ctx.create_cq(16).unwrap();
    let umems = sim.count(ObjKind::Umem);
    assert!(drop_when(cq.resize_async(200, &comp), || sim
        .async_in_flight()
        == 1));
    let attr = cq.query().unwrap();
    assert!(attr.cqe >= 200);
    assert_eq!(cq.cqe(), attr.cqe);
    assert!(eventually(|| sim.count(ObjKind::Umem) == umems));
    drop((cq, comp, ctx));
    assert_eq!(sim.live_objects(), 0);

    // Rereg: dropped while the new key's CREATE_MKEY holds its slot.
    let (ctx, sim) = open_slow(&[Opcode::CreateMkey]);
    let comp = ctx.cmd_comp().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut mr = pd
        .reg_mr(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let (lkey, before) = (mr.lkey(), counts(&sim));
    let wider = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    assert!(drop_when(mr.rereg_async(Some(wider), None, &comp), || sim
        .count(ObjKind::Mkey)
        == 2
        && sim.async_in_flight() == 1));
    assert!(eventually(|| counts(&sim) == before), "{:?}", counts(&sim));
    let attr = mr.query().unwrap();
    assert_eq!(
        (mr.lkey(), attr.lkey, attr.access),
        (lkey, lkey, AccessFlags::LOCAL_WRITE)
    );
    drop((mr, pd, comp, ctx));
    assert_eq!(sim.live_objects(), 0);
}

/// Drops `fut` once firmware commands past `base` ran, one holds its
/// slot, and the device has `live` objects of `kind`; says whether that
/// happened.
fn drop_at<F: Future>(sim: &SimDevice, fut: F, base: u64, kind: ObjKind, live: usize) -> bool {
    drop_when(fut, || {
        sim.commands_executed() > base && sim.async_in_flight() == 1 && sim.count(kind) == live
    })
}

#[test]
fn resize_and_rereg_release_the_old_ring_and_key_on_the_queue() {
    // An awaited release never blocks: with the old key's DESTROY_MKEY (or
    // the old UMEM's DESTROY_UMEM) holding its slot, the future stays
    // pending while the object already answers with its new key or ring.
    let (ctx, sim) = open_slow(&[Opcode::DestroyMkey]);
    let comp = ctx.cmd_comp().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut mr = pd
        .reg_mr(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let (lkey, before) = (mr.lkey(), counts(&sim));
    let wider = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    // CREATE_MKEY, then DESTROY_MKEY of the old key: one key again.
    let base = sim.commands_executed();
    assert!(drop_at(
        &sim,
        mr.rereg_async(Some(wider), None, &comp),
        base,
        ObjKind::Mkey,
        1
    ));
    assert_eq!(counts(&sim), before);
    let attr = mr.query().unwrap();
    assert_ne!(mr.lkey(), lkey);
    assert_eq!((attr.lkey, attr.access), (mr.lkey(), wider));
    mr.write_at(0, b"still usable").unwrap();
    drop((mr, pd, comp, ctx));
    assert_eq!(sim.live_objects(), 0);

    // Rereg to new memory, dropped at the old key's destroy, then at the
    // old UMEM's deregistration.
    // UMEM_REG, CREATE_MKEY, DESTROY_MKEY (two UMEMs, one key), then
    // UMEM_DEREG (one UMEM).
    for (slow, kind, live) in [
        (Opcode::DestroyMkey, ObjKind::Mkey, 1),
        (Opcode::DestroyUmem, ObjKind::Umem, 1),
    ] {
        let (ctx, sim) = open_slow(&[slow]);
        let comp = ctx.cmd_comp().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mut mr = pd
            .reg_mr(vec![1u8; 4096], AccessFlags::LOCAL_WRITE)
            .unwrap();
        let before = counts(&sim);
        let base = sim.commands_executed();
        assert!(
            drop_at(
                &sim,
                mr.rereg_memory_async(vec![2u8; 8192], None, &comp),
                base,
                kind,
                live
            ),
            "{slow:?} never held its slot"
        );
        assert!(
            eventually(|| counts(&sim) == before),
            "dropped at {slow:?}: {:?}, had {before:?}",
            counts(&sim)
        );
        assert_eq!(
            (mr.len(), mr.read_vec(8190, 2).unwrap()),
            (8192, vec![2, 2])
        );
        assert_eq!(mr.query().unwrap().length, 8192);
        drop((mr, pd, comp, ctx));
        assert_eq!(sim.live_objects(), 0);
    }

    // Resize, dropped at the old ring's deregistration: UMEM_REG,
    // MODIFY_CQ, UMEM_DEREG (as many UMEMs as before).
    let (ctx, sim) = open_slow(&[Opcode::DestroyUmem]);
    let comp = ctx.cmd_comp().unwrap();
    let mut cq = ctx.create_cq(16).unwrap();
    let before = counts(&sim);
    let (base, umems) = (sim.commands_executed(), sim.count(ObjKind::Umem));
    assert!(drop_at(
        &sim,
        cq.resize_async(200, &comp),
        base,
        ObjKind::Umem,
        umems
    ));
    assert!(
        eventually(|| counts(&sim) == before),
        "{:?}, had {before:?}",
        counts(&sim)
    );
    let attr = cq.query().unwrap();
    assert!(attr.cqe >= 200);
    assert_eq!(cq.cqe(), attr.cqe);
    let mut wc = [verbs::Wc::default(); 4];
    assert_eq!(cq.poll(&mut wc), 0);
    drop((cq, comp, ctx));
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn bad_resize_or_rereg_input_is_refused_before_any_command() {
    let (ctx, sim) = open_slow(&[]);
    let comp = ctx.cmd_comp().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut mr = pd
        .reg_mr(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut cq = ctx.create_cq(16).unwrap();
    let (lkey, size, before) = (mr.lkey(), cq.cqe(), counts(&sim));
    let ran = sim.commands_executed();
    let err = block_on(cq.resize_async(0, &comp)).unwrap_err();
    assert!(err.is_argument(), "{err}");
    // Remote write without local write.
    let err = block_on(mr.rereg_async(Some(AccessFlags::REMOTE_WRITE), None, &comp)).unwrap_err();
    assert!(err.is_argument(), "{err}");
    let err =
        block_on(mr.rereg_memory_async(vec![0u8; 64], Some(AccessFlags::REMOTE_WRITE), &comp))
            .unwrap_err();
    assert!(err.is_argument(), "{err}");
    let (other, other_sim) = open_slow(&[]);
    let other_pd = other.alloc_pd().unwrap();
    let err = block_on(mr.rereg_async(None, Some(&other_pd), &comp)).unwrap_err();
    assert!(err.is_argument(), "{err}");
    assert_eq!(sim.commands_executed(), ran);
    assert_eq!(counts(&sim), before);
    assert_eq!((mr.lkey(), cq.cqe()), (lkey, size));
    drop((other_pd, other));
    assert_eq!(other_sim.live_objects(), 0);
    drop((mr, cq, pd, comp, ctx));
    assert_eq!(sim.live_objects(), 0);
}
