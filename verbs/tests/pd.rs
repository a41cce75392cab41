//! Protection and transport domains.

mod common;

use devx::sim::ObjKind;
use verbs::{AccessFlags, Error};

#[test]
fn alloc_and_dealloc() {
    let (ctx, sim) = common::open(1);
    let a = ctx.alloc_pd().unwrap();
    let b = ctx.alloc_pd().unwrap();
    assert_ne!(a.pdn(), b.pdn());
    assert_eq!(sim.count(ObjKind::Pd), 2);
    a.dealloc().unwrap();
    assert_eq!(sim.count(ObjKind::Pd), 1);
    drop(b);
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn dealloc_is_refused_while_the_pd_is_used() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .reg_mr(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let clone = pd.clone();
    let e = pd.dealloc().unwrap_err();
    assert!(
        matches!(e.error, Error::Busy { users: 2, .. }),
        "{}",
        e.error
    );
    assert_eq!(e.error.verb(), "dealloc_pd");
    let pd = e.object;
    drop(clone);
    drop(mr);
    let pdn = pd.pdn();
    pd.dealloc().unwrap();
    assert_eq!(sim.count(ObjKind::Pd), 0, "pd {pdn:#x} still alive");
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn transport_domains() {
    let (ctx, sim) = common::open(1);
    let td = ctx.alloc_td().unwrap();
    assert_eq!(sim.count(ObjKind::TransportDomain), 1);
    assert!(td.tdn() > 0);
    td.dealloc().unwrap();
    assert_eq!(sim.live_objects(), 0);
}
