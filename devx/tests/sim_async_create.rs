//! Queued creates, destroys, UMEM registrations and UAR allocations on the
//! emulated firmware's command queue: futures that resolve to RAII objects,
//! clean cancellation, 10,000 commands in flight, finish order.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use devx::sim::{sim_device_with_profile, ObjKind, Profile, SimDevice};
use devx::{CmdComp, Context, Obj, Uar, UarKind, Umem};
use prm_layouts::enums::Opcode;
use prm_layouts::*;

/// A device whose commands of each `(opcode, latency)` hold their queue
/// slot that long, and a context on it.
fn device(index: u32, latency: &[(Opcode, Duration)]) -> (Arc<SimDevice>, Context) {
    let p = Profile {
        cmd_latency: latency.iter().map(|(o, d)| (o.raw(), *d)).collect(),
        ..Profile::default()
    };
    let dev = sim_device_with_profile(&format!("sim{index}"), p).unwrap();
    let ctx = devx::Device::by_name(&format!("sim{index}"))
        .unwrap()
        .open()
        .unwrap();
    (dev, ctx)
}

fn alloc_pd() -> Vec<u8> {
    let mut m = AllocPdIn::new();
    m.set_opcode(Opcode::AllocPd.raw());
    m.as_bytes().to_vec()
}

fn alloc_td() -> Vec<u8> {
    let mut m = AllocTransportDomainIn::new();
    m.set_opcode(Opcode::AllocTransportDomain.raw());
    m.as_bytes().to_vec()
}

fn nop() -> Vec<u8> {
    let mut m = NopIn::new();
    m.set_opcode(Opcode::Nop.raw());
    m.as_bytes().to_vec()
}

/// Waits (bounded) until `cond` holds; says whether it did.
fn eventually(cond: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

fn pd_of(obj: &Obj) -> u32 {
    AllocPdOut::from_slice(obj.out()).unwrap().pd()
}

#[test]
fn a_queued_create_resolves_to_an_object_and_a_queued_destroy_removes_it() {
    let (dev, ctx) = device(1001, &[]);
    let comp = CmdComp::new(&ctx).unwrap();
    let pending = ctx
        .create_async(&alloc_pd(), AllocPdOut::SIZE_BYTES, 11, &comp)
        .unwrap();
    assert!(pending.is_queued());
    let pd = pending.wait().unwrap();
    assert_eq!(pd.create_opcode(), Opcode::AllocPd.raw());
    assert_eq!(pd.id(), pd_of(&pd));
    assert_eq!(dev.count(ObjKind::Pd), 1);
    pd.destroy_async(12, &comp).wait().unwrap();
    assert_eq!(dev.live_objects(), 0);
    // Neither completion is left for `get`: their futures took them.
    assert!(comp.try_get().unwrap().is_none());
}

#[test]
fn a_failed_queued_create_reports_the_firmware_error_and_leaves_nothing() {
    let (dev, ctx) = device(1002, &[]);
    let comp = CmdComp::new(&ctx).unwrap();
    // A CQ with no ring UMEM: the firmware refuses it.
    let mut m = CreateCqIn::new();
    m.set_opcode(Opcode::CreateCq.raw());
    m.cq_context_mut()
        .set_c_eqn_or_apu_element(ctx.query_eqn(0).unwrap());
    m.cq_context_mut().set_log_cq_size(4);
    let e = ctx
        .create_async(m.as_bytes(), CreateCqOut::SIZE_BYTES, 1, &comp)
        .unwrap()
        .wait()
        .unwrap_err();
    assert!(e.is_firmware(), "{e}");
    assert_eq!(dev.live_objects(), 0);
    assert!(comp.try_get().unwrap().is_none());
}

#[test]
fn dropping_a_create_the_firmware_already_ran_destroys_the_object() {
    // The create runs at once and then holds its slot for a minute.
    let (dev, ctx) = device(1003, &[(Opcode::AllocPd, Duration::from_secs(60))]);
    let comp = CmdComp::new(&ctx).unwrap();
    let pending = ctx
        .create_async(&alloc_pd(), AllocPdOut::SIZE_BYTES, 1, &comp)
        .unwrap();
    // Holding its slot: it ran, and its handle names the PD.
    assert!(eventually(|| dev.async_in_flight() == 1));
    assert_eq!(dev.count(ObjKind::Pd), 1);
    drop(pending);
    assert_eq!(dev.live_objects(), 0);
    assert_eq!(dev.count(ObjKind::Pd), 0);
    // Closing the context posts the held completion; nobody receives it.
    drop(comp);
    drop(ctx);
    assert_eq!(dev.count(ObjKind::Pd), 0);
}

#[test]
fn dropping_a_create_still_queued_leaves_nothing_once_it_runs() {
    let (dev, ctx) = device(1004, &[]);
    let comp = CmdComp::new(&ctx).unwrap();
    dev.pause_async(true);
    let pd = ctx
        .create_async(&alloc_pd(), AllocPdOut::SIZE_BYTES, 1, &comp)
        .unwrap();
    let td = ctx
        .create_async(&alloc_td(), AllocTransportDomainOut::SIZE_BYTES, 2, &comp)
        .unwrap();
    assert_eq!(dev.async_queued(), 2);
    drop(pd);
    dev.pause_async(false);
    let td = td.wait().unwrap();
    assert!(eventually(
        || dev.async_queued() == 0 && dev.async_in_flight() == 0
    ));
    // The PD create ran after its future was gone: made, then destroyed.
    assert_eq!(dev.count(ObjKind::Pd), 0);
    assert_eq!(dev.count(ObjKind::TransportDomain), 1);
    drop(td);
    assert_eq!(dev.live_objects(), 0);
    assert!(comp.try_get().unwrap().is_none());
}

#[test]
fn closing_the_context_cancels_queued_creates() {
    use devx::ProviderContext;
    let (dev, _ctx) = device(1005, &[]);
    let sim = dev.open_sim().unwrap();
    let ch = sim.create_cmd_channel().unwrap();
    dev.pause_async(true);
    let handle = sim
        .create_async(&alloc_pd(), AllocPdOut::SIZE_BYTES, 7, &*ch)
        .unwrap();
    assert!(handle.is_some());
    assert_eq!(sim.handle_count(), 1);
    drop(sim);
    let (wr_id, out) = ch.get().unwrap();
    assert_eq!(wr_id, 7);
    assert!(out.unwrap_err().is_cancelled());
    dev.pause_async(false);
    assert_eq!(dev.async_queued(), 0);
    assert_eq!(dev.live_objects(), 0);
}

#[test]
fn a_refused_queued_destroy_gives_the_object_back() {
    let (dev, ctx) = device(1006, &[]);
    let comp = CmdComp::new(&ctx).unwrap();
    let pd = ctx
        .create_async(&alloc_pd(), AllocPdOut::SIZE_BYTES, 1, &comp)
        .unwrap()
        .wait()
        .unwrap();
    let umem = Umem::register_async(&ctx, vec![0u8; 4096], devx::access::LOCAL_WRITE, 2, &comp)
        .unwrap()
        .wait()
        .unwrap();
    let mut mk = CreateMkeyIn::new();
    mk.set_opcode(Opcode::CreateMkey.raw());
    mk.set_mkey_umem_id(umem.id());
    let c = mk.memory_key_mkey_entry_mut();
    c.set_access_mode_1_0(1);
    c.set_lr(1);
    c.set_lw(1);
    c.set_qpn(0xff_ffff);
    c.set_pd(pd.id());
    c.set_start_addr(0x1000);
    c.set_len(4096);
    let mkey = ctx
        .create_async(mk.as_bytes(), CreateMkeyOut::SIZE_BYTES, 3, &comp)
        .unwrap()
        .wait()
        .unwrap();
    // The MKEY holds the PD: the firmware refuses to free it.
    let refused = pd.destroy_async(4, &comp).wait().unwrap_err();
    assert!(refused.error.is_firmware(), "{}", refused.error);
    assert_eq!(dev.count(ObjKind::Pd), 1);
    mkey.destroy_async(5, &comp).wait().unwrap();
    refused.obj.destroy_async(6, &comp).wait().unwrap();
    drop(umem);
    assert_eq!(dev.live_objects(), 0);
    assert_eq!(dev.count(ObjKind::Umem), 0);
}

#[test]
fn a_dropped_queued_destroy_still_finishes() {
    let (dev, ctx) = device(1007, &[(Opcode::DeallocPd, Duration::from_millis(50))]);
    let comp = CmdComp::new(&ctx).unwrap();
    let pd = ctx
        .create_async(&alloc_pd(), AllocPdOut::SIZE_BYTES, 1, &comp)
        .unwrap()
        .wait()
        .unwrap();
    drop(pd.destroy_async(2, &comp));
    assert!(eventually(|| dev.count(ObjKind::Pd) == 0));
    // Its completion finishes the abandoned destroy: nothing is kept.
    assert!(eventually(|| {
        let _ = comp.try_get();
        dev.async_in_flight() == 0
    }));
    let _ = comp.try_get();
    drop(comp);
    assert_eq!(ctx.kept_objects(), 0);
}

#[test]
fn dropping_the_channel_of_a_dropped_queued_destroy_does_not_wait() {
    let (dev, ctx) = device(1012, &[]);
    let comp = CmdComp::new(&ctx).unwrap();
    let pd = ctx
        .create_async(&alloc_pd(), AllocPdOut::SIZE_BYTES, 1, &comp)
        .unwrap()
        .wait()
        .unwrap();
    dev.pause_async(true);
    drop(pd.destroy_async(2, &comp));
    // The firmware holds the destroy back: the channel closes regardless.
    drop(comp);
    assert_eq!(ctx.kept_objects(), 0);
    dev.pause_async(false);
    assert!(eventually(|| dev.count(ObjKind::Pd) == 0));
    drop(ctx);
    assert_eq!(dev.live_objects(), 0);
}

#[test]
fn queued_umem_and_uar_resolve_and_cancel_cleanly() {
    let (dev, ctx) = device(
        1008,
        &[
            (Opcode::CreateUmem, Duration::from_secs(60)),
            (Opcode::AllocUar, Duration::from_secs(60)),
        ],
    );
    let comp = CmdComp::new(&ctx).unwrap();
    // Dropped while the firmware holds them: deregistered and freed.
    let umem =
        Umem::register_async(&ctx, vec![0u8; 4096], devx::access::LOCAL_WRITE, 1, &comp).unwrap();
    let uar = Uar::alloc_async(&ctx, UarKind::BlueFlame, 2, &comp).unwrap();
    assert!(umem.is_queued() && uar.is_queued());
    // Both hold their slots: they ran, and their handles name what they made.
    assert!(eventually(|| dev.async_in_flight() == 2));
    assert_eq!(dev.count(ObjKind::Umem), 1);
    assert_eq!(dev.count(ObjKind::Uar), 1);
    drop(umem);
    drop(uar);
    assert_eq!(dev.count(ObjKind::Umem), 0);
    assert_eq!(dev.count(ObjKind::Uar), 0);
    drop(comp);
    drop(ctx);

    let (dev, ctx) = device(1009, &[]);
    let comp = CmdComp::new(&ctx).unwrap();
    let umem = Umem::register_async(&ctx, vec![0u8; 8192], devx::access::LOCAL_WRITE, 1, &comp)
        .unwrap()
        .wait()
        .unwrap();
    let uar = Uar::alloc_async(&ctx, UarKind::NonCached, 2, &comp)
        .unwrap()
        .wait()
        .unwrap();
    assert_ne!(umem.id(), 0);
    assert_eq!(umem.len(), 8192);
    assert_eq!(uar.kind(), UarKind::NonCached);
    umem.write_at(0, b"queued").unwrap();
    assert_eq!(umem.read_vec(0, 6).unwrap(), b"queued");
    // Usable by a create like any registration.
    let mut c = CreateCqIn::new();
    c.set_opcode(Opcode::CreateCq.raw());
    c.set_cq_umem_id(umem.id());
    let cqc = c.cq_context_mut();
    cqc.set_log_cq_size(6);
    cqc.set_uar_page(uar.page_id());
    cqc.set_c_eqn_or_apu_element(ctx.query_eqn(0).unwrap());
    cqc.set_dbr_umem_id(umem.id());
    cqc.set_dbr_addr(4096);
    let cq = ctx.create(c.as_bytes(), CreateCqOut::SIZE_BYTES).unwrap();
    drop(cq);
    drop(uar);
    drop(umem);
    assert_eq!(dev.count(ObjKind::Umem), 0);
    assert_eq!(dev.count(ObjKind::Uar), 0);
}

#[test]
fn ten_thousand_commands_in_flight_complete_once_each_with_their_wr_id() {
    let (dev, ctx) = device(1010, &[]);
    let comp = CmdComp::new(&ctx).unwrap();
    let n = 10_000u64;
    dev.pause_async(true);
    for i in 0..n {
        ctx.general_async(&nop(), NopOut::SIZE_BYTES, i * 3 + 1, &comp)
            .unwrap();
    }
    assert_eq!(dev.async_queued(), n as usize);
    dev.pause_async(false);
    let mut seen = BTreeSet::new();
    for _ in 0..n {
        let (wr_id, out) = comp.get().unwrap();
        out.unwrap();
        assert!(seen.insert(wr_id), "wr_id {wr_id} completed twice");
    }
    assert_eq!(seen, (0..n).map(|i| i * 3 + 1).collect::<BTreeSet<_>>());
    assert!(comp.try_get().unwrap().is_none());
}

#[test]
fn completions_of_queued_creates_come_in_finish_order() {
    // Submitted PD, TD, PD: the slow PDs finish after the TD.
    let (_dev, ctx) = device(1011, &[(Opcode::AllocPd, Duration::from_secs(1))]);
    let comp = CmdComp::new(&ctx).unwrap();
    let mut pending: Vec<_> = [(1, alloc_pd()), (2, alloc_td()), (3, alloc_pd())]
        .into_iter()
        .map(|(wr_id, inbox)| {
            let outlen = AllocPdOut::SIZE_BYTES.max(AllocTransportDomainOut::SIZE_BYTES);
            Some(ctx.create_async(&inbox, outlen, wr_id, &comp).unwrap())
        })
        .collect();
    // Polls every unresolved future on each wake; records who resolves when.
    let mut order = Vec::new();
    let mut objs = Vec::new();
    devx::reactor::block_on(std::future::poll_fn(|cx| {
        for (i, p) in pending.iter_mut().enumerate() {
            if let Some(f) = p {
                if let std::task::Poll::Ready(obj) = std::pin::Pin::new(f).poll(cx) {
                    objs.push(obj.unwrap());
                    order.push(i + 1);
                    *p = None;
                }
            }
        }
        if pending.iter().all(Option::is_none) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }));
    assert_eq!(order[0], 2, "the TD finishes first: {order:?}");
    assert_eq!(order.len(), 3);
    assert_eq!(objs.len(), 3);
}

#[test]
fn a_queued_umem_deregistration_gives_the_memory_back_or_the_umem_when_refused() {
    let (dev, ctx) = device(1013, &[]);
    let comp = CmdComp::new(&ctx).unwrap();
    let umem = Umem::register(&ctx, vec![9u8; 4096], devx::access::LOCAL_WRITE).unwrap();
    let pending = umem.deregister_async(1, &comp);
    assert!(pending.is_queued());
    assert_eq!(pending.wait().ok(), Some(vec![9u8; 4096]));
    assert_eq!(dev.count(ObjKind::Umem), 0);

    // An MKEY over the UMEM: the firmware refuses, the UMEM comes back.
    let pd = ctx.create(&alloc_pd(), AllocPdOut::SIZE_BYTES).unwrap();
    let umem = Umem::register(&ctx, vec![0u8; 4096], devx::access::LOCAL_WRITE).unwrap();
    let mut mk = CreateMkeyIn::new();
    mk.set_opcode(Opcode::CreateMkey.raw());
    mk.set_mkey_umem_valid(1);
    mk.set_mkey_umem_id(umem.id());
    let c = mk.memory_key_mkey_entry_mut();
    c.set_access_mode_1_0(1);
    c.set_lr(1);
    c.set_lw(1);
    c.set_qpn(0xff_ffff);
    c.set_pd(pd_of(&pd));
    c.set_len(4096);
    let mkey = ctx
        .create(mk.as_bytes(), CreateMkeyOut::SIZE_BYTES)
        .unwrap();
    let Err((umem, error)) = umem.deregister_async(2, &comp).wait() else {
        panic!("the firmware deregistered a UMEM an MKEY uses");
    };
    assert!(error.is_firmware(), "{error}");
    umem.write_at(0, b"still registered").unwrap();
    mkey.destroy().unwrap();
    assert!(umem.deregister_async(3, &comp).wait().is_ok());
    drop(pd);
    assert!(comp.try_get().unwrap().is_none());
    assert_eq!(dev.live_objects(), 0);
}

#[test]
fn a_dropped_queued_umem_deregistration_still_finishes() {
    let (dev, ctx) = device(1014, &[(Opcode::DestroyUmem, Duration::from_millis(50))]);
    let comp = CmdComp::new(&ctx).unwrap();
    let umem = Umem::register(&ctx, vec![0u8; 4096], devx::access::LOCAL_WRITE).unwrap();
    drop(umem.deregister_async(1, &comp));
    assert!(eventually(|| dev.count(ObjKind::Umem) == 0));
    // Its completion finishes the abandoned deregistration: nothing is kept.
    assert!(eventually(|| {
        let _ = comp.try_get();
        dev.async_in_flight() == 0
    }));
    let _ = comp.try_get();
    assert_eq!(ctx.kept_umems(), 0);
    drop(comp);
    drop(ctx);
    assert_eq!(dev.live_objects(), 0);
}

#[test]
fn dropping_the_channel_of_a_dropped_queued_umem_deregistration_leaves_nothing() {
    let (dev, ctx) = device(1015, &[]);
    let comp = CmdComp::new(&ctx).unwrap();
    let umem = Umem::register(&ctx, vec![0u8; 4096], devx::access::LOCAL_WRITE).unwrap();
    dev.pause_async(true);
    drop(umem.deregister_async(1, &comp));
    // The firmware holds the deregistration back: the channel closes
    // regardless and the deregistration still runs.
    drop(comp);
    dev.pause_async(false);
    assert!(eventually(|| dev.count(ObjKind::Umem) == 0));
    drop(ctx);
    assert_eq!(dev.live_objects(), 0);
}
