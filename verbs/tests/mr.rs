//! Memory regions (UMEM-backed MKEYs) and memory windows.

mod common;

use devx::sim::ObjKind;
use verbs::{AccessFlags, Error, Mr, MwType};

#[test]
fn register_query_deregister() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let mut data = vec![0u8; 10_000];
    data[5] = 42;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = pd.reg_mr(data, access).unwrap();
    assert_eq!(mr.lkey(), mr.rkey());
    assert_eq!(mr.len(), 10_000);
    assert_eq!(mr.read_vec(5, 1).unwrap(), [42]);
    let q = mr.query().unwrap();
    assert_eq!(q.addr, mr.addr() as u64);
    assert_eq!(q.length, 10_000);
    assert_eq!(q.access, access);
    assert_eq!(q.pd, pd.pdn());
    assert_eq!((q.lkey, q.rkey), (mr.lkey(), mr.rkey()));
    assert_eq!((q.qpn, q.access_mode, q.free), (0xff_ffff, 1, false));
    assert_eq!(sim.count(ObjKind::Mkey), 1);
    assert_eq!(sim.count(ObjKind::Umem), 1);
    let data = mr.deregister().unwrap().expect("memory comes back");
    assert_eq!(data[5], 42);
    assert_eq!(sim.count(ObjKind::Mkey) + sim.count(ObjKind::Umem), 0);
}

#[test]
fn keys_carry_a_fresh_variant_byte() {
    let (ctx, _sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let a = pd.reg_mr(vec![0u8; 64], AccessFlags::LOCAL_WRITE).unwrap();
    let a_key = a.lkey();
    drop(a);
    let b = pd.reg_mr(vec![0u8; 64], AccessFlags::LOCAL_WRITE).unwrap();
    // Same index may come back; the key must differ.
    assert_ne!(b.lkey(), a_key);
}

#[test]
fn shared_memory_registers_read_only() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let buf = std::sync::Arc::new(vec![7u8; 4096]);
    {
        // Write rights over memory the rest of the program reads: refused
        // before any command, naming why.
        for a in [
            AccessFlags::LOCAL_WRITE,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ] {
            let e = Mr::register_read_only(&pd, buf.clone(), a).unwrap_err();
            assert!(
                e.is_argument() && e.to_string().contains("exclusively"),
                "{e}"
            );
        }
        assert_eq!(sim.count(ObjKind::Umem), 0);
        let mr = pd
            .reg_mr_read_only(buf.clone(), AccessFlags::REMOTE_READ)
            .unwrap();
        assert_eq!(mr.addr(), buf.as_ptr() as usize);
        // The device never writes it, so a reference is sound.
        assert_eq!(mr.memory()[0], 7);
        assert_eq!(mr.read_vec(4095, 1).unwrap(), [7]);
        assert_eq!(mr.query().unwrap().access, AccessFlags::REMOTE_READ);
        // Read-only pinned memory cannot become writable without new memory.
        let mut mr = mr;
        let e = mr.rereg(Some(AccessFlags::LOCAL_WRITE), None).unwrap_err();
        assert!(e.is_argument(), "{e}");
        assert_eq!(mr.query().unwrap().access, AccessFlags::REMOTE_READ);
    }
    assert_eq!(sim.count(ObjKind::Mkey), 0);
    assert_eq!(buf[0], 7);
}

#[test]
fn access_rules_are_checked_before_any_command() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let before = sim.commands_executed();
    for a in [
        AccessFlags::REMOTE_WRITE,
        AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ,
    ] {
        let e = pd.reg_mr(vec![0u8; 64], a).unwrap_err();
        assert!(e.is_argument() && e.verb() == "reg_mr", "{e}");
    }
    let e = pd
        .reg_mr(Vec::<u8>::new(), AccessFlags::LOCAL_WRITE)
        .unwrap_err();
    assert!(e.is_argument(), "{e}");
    assert_eq!(sim.commands_executed(), before);
    assert_eq!(sim.live_objects(), 1);
}

#[test]
fn rereg_creates_the_new_key_before_destroying_the_old() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let pd2 = ctx.alloc_pd().unwrap();
    let mut mr = pd
        .reg_mr(vec![1u8; 8192], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let k0 = mr.lkey();
    mr.rereg(
        Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE),
        Some(&pd2),
    )
    .unwrap();
    assert_ne!(mr.lkey(), k0);
    let q = mr.query().unwrap();
    assert_eq!(
        q.access,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
    );
    assert_eq!(q.pd, pd2.pdn());
    assert_eq!(mr.pd().pdn(), pd2.pdn());
    assert_eq!(sim.count(ObjKind::Mkey), 1);
    assert_eq!(sim.count(ObjKind::Umem), 1);

    let old = mr
        .rereg_memory(vec![2u8; 100], None)
        .unwrap()
        .expect("old memory back");
    assert_eq!(old.len(), 8192);
    assert_eq!(mr.len(), 100);
    assert_eq!(mr.read_vec(0, 1).unwrap(), [2]);
    assert_eq!(mr.query().unwrap().length, 100);
    assert_eq!((sim.count(ObjKind::Mkey), sim.count(ObjKind::Umem)), (1, 1));

    // A refused rereg leaves the region as it was.
    let k1 = mr.lkey();
    let e = mr.rereg(Some(AccessFlags::REMOTE_WRITE), None).unwrap_err();
    assert!(e.is_argument());
    assert_eq!(mr.lkey(), k1);
    assert_eq!(mr.query().unwrap().lkey, k1);
}

#[test]
fn shared_regions_use_the_same_umem() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .reg_mr(vec![3u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let shared = mr
        .register_shared(&pd, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
        .unwrap();
    assert_ne!(shared.lkey(), mr.lkey());
    assert_eq!(shared.umem_id(), mr.umem_id());
    assert_eq!(shared.addr(), mr.addr());
    assert_eq!((sim.count(ObjKind::Mkey), sim.count(ObjKind::Umem)), (2, 1));
    // The first region goes; the memory stays with the shared one.
    assert!(mr.deregister().unwrap().is_none());
    assert_eq!(
        shared.query().unwrap().access,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ
    );
    let mem = shared.deregister().unwrap().unwrap();
    assert_eq!(mem[0], 3);
    assert_eq!(sim.live_objects(), 1);
}

#[test]
fn memory_windows() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    for t in [MwType::Type1, MwType::Type2] {
        let mw = pd.alloc_mw(t).unwrap();
        assert_eq!(mw.mw_type(), t);
        let q = mw.query().unwrap();
        assert!(q.free, "a new window is not bound");
        assert_eq!((q.pd, q.qpn, q.access_mode), (pd.pdn(), 0xff_ffff, 2));
        assert_eq!(q.rkey, mw.rkey());
        assert_eq!(sim.count(ObjKind::Mkey), 1);
        mw.dealloc().unwrap();
        assert_eq!(sim.count(ObjKind::Mkey), 0);
    }
    let e: Error = pd.clone().dealloc().unwrap_err().into();
    assert!(e.is_busy());
}
