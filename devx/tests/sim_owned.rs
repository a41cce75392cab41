//! Emulated devices a test owns (`SimDevice::new`): private to their owner,
//! isolated from each other and from the named `simN` devices, and gone —
//! objects, memory and threads — once the owner and its contexts are.

use std::sync::{Arc, Weak};

use devx::sim::{ObjKind, Profile, SimDevice};
use devx::{access, CmdComp, Context, Device, Obj, Uar, Umem};
use memmap2::MmapMut;
use prm_layouts::enums::Opcode;
use prm_layouts::{AllocPdIn, AllocPdOut, CreateCqIn, CreateCqOut, QueryCqIn, QueryCqOut};

fn pd(ctx: &Context) -> devx::Result<Obj> {
    let mut m = AllocPdIn::new();
    m.set_opcode(Opcode::AllocPd.raw());
    ctx.create(m.as_bytes(), AllocPdOut::SIZE_BYTES)
}

/// A CQ with what it is made of (ring, doorbell record, UAR).
struct Cq {
    cq: Obj,
    _parts: (Umem<MmapMut>, Umem<MmapMut>, Uar),
}

fn cq(ctx: &Context) -> Cq {
    let mem = MmapMut::map_anon(4096).unwrap();
    let ring = Umem::register(ctx, mem, access::LOCAL_WRITE).unwrap();
    let mem = MmapMut::map_anon(4096).unwrap();
    let dbr = Umem::register(ctx, mem, access::LOCAL_WRITE).unwrap();
    let uar = Uar::alloc(ctx).unwrap();
    let mut c = CreateCqIn::new();
    c.set_opcode(Opcode::CreateCq.raw());
    c.set_cq_umem_id(ring.id());
    let cqc = c.cq_context_mut();
    cqc.set_log_cq_size(6);
    cqc.set_uar_page(uar.page_id());
    cqc.set_c_eqn_or_apu_element(ctx.query_eqn(0).unwrap());
    cqc.set_dbr_umem_id(dbr.id());
    let cq = ctx.create(c.as_bytes(), CreateCqOut::SIZE_BYTES).unwrap();
    Cq {
        cq,
        _parts: (ring, dbr, uar),
    }
}

/// Runs an asynchronous QUERY_CQ to its completion: the device's firmware
/// thread is running afterwards.
fn query_async(ctx: &Context, cq: &Obj) -> devx::Result<u8> {
    let comp = CmdComp::new(ctx)?;
    let mut q = QueryCqIn::new();
    q.set_opcode(Opcode::QueryCq.raw());
    q.set_cqn(cq.id());
    cq.query_async(q.as_bytes(), QueryCqOut::SIZE_BYTES, 7, &comp)?;
    let (wr_id, out) = comp.get()?;
    assert_eq!(wr_id, 7);
    let out = out?;
    Ok(QueryCqOut::from_slice(&out)
        .expect("a full outbox")
        .cq_context()
        .log_cq_size())
}

/// Threads of this process named `name` (Linux keeps each thread's name in
/// /proc/self/task/<tid>/comm).
fn threads_named(name: &str) -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").expect("procfs");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

/// Threads named `name` once they have had up to 5 s to end: when the last
/// reference to a device goes on its own firmware thread (a completion it
/// just posted), that thread cannot join itself and ends right after.
fn threads_left(name: &str) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while threads_named(name) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    threads_named(name)
}

/// Threads named `name` once one has had up to 5 s to start: the first
/// asynchronous command spawns the firmware thread, which names itself when
/// it runs (a command the submitting thread ran itself may complete first).
fn threads_started(name: &str) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while threads_named(name) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    threads_named(name)
}

fn firmware_thread(sim: &SimDevice) -> String {
    format!("sim{}-fw", sim.index())
}

#[test]
fn owned_devices_are_isolated_from_each_other_and_from_named_ones() {
    let a = SimDevice::new(Profile::connectx6_dx());
    let b = SimDevice::new(Profile::connectx6_dx());
    assert_ne!(a.name(), b.name());
    assert_ne!(a.identity().node_guid, b.identity().node_guid);
    assert!(a.index() > devx::sim::MAX_DEVICE_INDEX);

    let ctx_a = a.device().open().unwrap();
    let ctx_b = b.device().open().unwrap();
    let pds: Vec<Obj> = (0..3).map(|_| pd(&ctx_a).unwrap()).collect();
    let pd_b = pd(&ctx_b).unwrap();
    assert_eq!(a.count(ObjKind::Pd), 3);
    assert_eq!(b.count(ObjKind::Pd), 1);
    assert_eq!(ctx_a.device().name(), a.name());

    // Each lists only its own objects.
    let listed = |d: &Arc<SimDevice>| {
        devx::live_objects(&d.device())
            .unwrap()
            .into_iter()
            .filter(|o| o.kind == "pd")
            .count()
    };
    assert_eq!((listed(&a), listed(&b)), (3, 1));

    // Not found by name, not listed with the named devices.
    for d in [&a, &b] {
        assert!(Device::by_name(d.name()).is_err(), "{}", d.name());
        assert!(Device::list().iter().all(|l| l.name() != d.name()));
    }
    drop((pds, pd_b));
    assert_eq!((a.live_objects(), b.live_objects()), (0, 0));
}

#[test]
fn many_owned_devices_made_in_parallel_never_share_a_name() {
    let names: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    (0..4)
                        .map(|_| {
                            let d = SimDevice::new(Profile::connectx6_dx());
                            let ctx = d.device().open().unwrap();
                            let _pd = pd(&ctx).unwrap();
                            assert_eq!(d.count(ObjKind::Pd), 1);
                            d.name().to_string()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len());
}

#[test]
fn dropping_the_owner_after_its_contexts_frees_everything() {
    let sim = SimDevice::new(Profile::connectx6_dx());
    let thread = firmware_thread(&sim);
    let ctx = sim.device().open().unwrap();
    let cq = cq(&ctx);
    assert_eq!(query_async(&ctx, &cq.cq).unwrap(), 6);
    assert_eq!(threads_started(&thread), 1);
    assert_eq!(sim.open_contexts(), 1);

    drop(cq);
    drop(ctx);
    assert_eq!(sim.live_objects(), 0);
    // Only the device's own completion EQs are left.
    assert!(sim.counts().keys().all(|k| *k == ObjKind::Eq));
    assert_eq!(sim.open_contexts(), 0);

    let weak: Weak<SimDevice> = Arc::downgrade(&sim);
    drop(sim);
    assert!(weak.upgrade().is_none());
    assert_eq!(threads_left(&thread), 0);
}

#[test]
fn a_context_keeps_its_device_alive_after_the_owner_drops() {
    let sim = SimDevice::new(Profile::connectx6_dx());
    let thread = firmware_thread(&sim);
    let weak = Arc::downgrade(&sim);
    let ctx = sim.device().open().unwrap();
    drop(sim);

    // Still a working device: commands, asynchronous ones, objects.
    let cq = cq(&ctx);
    let pd = pd(&ctx).unwrap();
    assert_eq!(query_async(&ctx, &cq.cq).unwrap(), 6);
    let alive = weak.upgrade().expect("the context holds the device");
    assert_eq!(alive.count(ObjKind::Pd), 1);
    assert_eq!(alive.count(ObjKind::Cq), 1);
    drop(alive);

    drop((pd, cq));
    drop(ctx);
    assert!(weak.upgrade().is_none());
    assert_eq!(threads_left(&thread), 0);
}
