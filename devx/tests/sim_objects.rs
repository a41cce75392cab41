//! PD, TD, XRCD, UAR, UMEM, CQ and MKEY end to end on the emulated device:
//! create, query back field for field, modify, destroy, and every refusal.

#[path = "sim_support.rs"]
mod support;

use devx::sim::syndrome as syn;
use devx::sim::ObjKind;
use devx::ProviderContext;
use prm_layouts::*;
use support::*;

#[test]
fn domains_are_allocated_and_freed() {
    let env = Env::new(101);
    let (pd_h, pd) = env.pd();
    let (td_h, out) = env
        .create(&hdr(Opcode::AllocTransportDomain.raw(), 0, 16), 16)
        .unwrap();
    let td = be32(&out, 8);
    let (x_h, out) = env
        .create(&hdr(Opcode::AllocXrcd.raw(), 0, 16), 16)
        .unwrap();
    assert!(pd > 0 && td > 0 && be32(&out, 8) > 0);
    assert_eq!(env.dev.count(ObjKind::Pd), 1);
    assert_eq!(env.dev.count(ObjKind::TransportDomain), 1);
    assert_eq!(env.dev.count(ObjKind::Xrcd), 1);
    assert_eq!(env.dev.live_objects(), 3);
    for h in [pd_h, td_h, x_h] {
        env.destroy(h).unwrap();
    }
    assert_eq!(env.dev.live_objects(), 0);
    // The handle is gone: a second destroy is ENOENT, like a closed IDR entry.
    assert_eq!(errno(&env.destroy(pd_h).unwrap_err()), libc::ENOENT);
}

#[test]
fn umem_registration_checks_the_memory() {
    let mut env = Env::new(102);
    let (h, id) = env.umem(8192, LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ);
    assert!(id > 0);
    assert_eq!(env.dev.count(ObjKind::Umem), 1);
    // Unmapped memory: EFAULT, like failed pinning.
    assert_eq!(
        errno(&env.ctx.umem_reg(0x1000, 4096, 0).unwrap_err()),
        libc::EFAULT
    );
    // Read-only memory cannot be registered for device writes.
    static RO: [u8; 64] = [0; 64];
    let ro = RO.as_ptr() as usize;
    assert!(env.ctx.umem_reg(ro, 64, 0).is_ok());
    assert_eq!(
        errno(&env.ctx.umem_reg(ro, 64, LOCAL_WRITE).unwrap_err()),
        libc::EFAULT
    );
    // Access flags the kernel refuses.
    let m = Mem::new(4096);
    assert_eq!(
        errno(&env.ctx.umem_reg(m.addr(), 4096, 0x80).unwrap_err()),
        libc::EINVAL
    );
    assert_eq!(
        errno(&env.ctx.umem_reg(m.addr(), 4096, REMOTE_WRITE).unwrap_err()),
        libc::EINVAL
    );
    assert_eq!(
        errno(&env.ctx.umem_reg(m.addr(), 0, 0).unwrap_err()),
        libc::EINVAL
    );
    env.ctx.umem_dereg(h).unwrap();
    assert_eq!(errno(&env.ctx.umem_dereg(h).unwrap_err()), libc::ENOENT);
}

#[test]
fn cq_round_trip() {
    let mut env = Env::new(103);
    let inbox = env.cq_inbox(8);
    let sent = *CreateCqIn::from_slice(&inbox).unwrap().cq_context();
    let (h, out) = env.create(&inbox, 16).unwrap();
    let cqn = be32(&out, 8);
    assert_eq!(env.dev.count(ObjKind::Cq), 1);

    let q = env
        .query(
            h,
            &with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn),
            QueryCqOut::SIZE_BYTES,
        )
        .unwrap();
    let got = QueryCqOut::from_slice(&q).unwrap().cq_context();
    assert_eq!(got.log_cq_size(), 8);
    assert_eq!(got.uar_page(), sent.uar_page());
    assert_eq!(got.c_eqn_or_apu_element(), sent.c_eqn_or_apu_element());
    assert_eq!(got.dbr_umem_id(), sent.dbr_umem_id());
    assert_eq!(got.cq_period(), 16);
    assert_eq!(got.cq_max_count(), 32);
    // The kernel forced the doorbell UMEM valid bit.
    assert_eq!(got.dbr_umem_valid(), 1);

    // Moderation: only the selected fields change.
    let mut m = ModifyCqIn::new();
    m.set_opcode(0x403);
    m.set_cqn(cqn);
    m.modify_field_select_resize_field_select_mut()
        .modify_field_select_mut()
        .set_modify_field_select(0x1);
    m.cq_context_mut().set_cq_period(100);
    m.cq_context_mut().set_cq_max_count(7);
    env.modify(h, m.as_bytes()).unwrap();
    let q = env
        .query(
            h,
            &with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn),
            QueryCqOut::SIZE_BYTES,
        )
        .unwrap();
    let got = QueryCqOut::from_slice(&q).unwrap().cq_context();
    assert_eq!((got.cq_period(), got.cq_max_count()), (100, 32));

    // Unknown modify fields.
    m.modify_field_select_resize_field_select_mut()
        .modify_field_select_mut()
        .set_modify_field_select(0x8);
    check(
        &env.modify(h, m.as_bytes()).unwrap_err(),
        syn::CQ_MODIFY_FIELDS,
    );

    // Resize (op_mod 1) within the UMEM: shrink works, growing past it does not.
    let mut r = ModifyCqIn::new();
    r.set_opcode(0x403);
    r.set_op_mod(1);
    r.set_cqn(cqn);
    r.modify_field_select_resize_field_select_mut()
        .resize_field_select_mut()
        .set_resize_field_select(1);
    r.cq_context_mut().set_log_cq_size(6);
    env.modify(h, r.as_bytes()).unwrap();
    let q = env
        .query(
            h,
            &with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn),
            QueryCqOut::SIZE_BYTES,
        )
        .unwrap();
    assert_eq!(
        QueryCqOut::from_slice(&q)
            .unwrap()
            .cq_context()
            .log_cq_size(),
        6
    );
    r.cq_context_mut().set_log_cq_size(9);
    check(
        &env.modify(h, r.as_bytes()).unwrap_err(),
        syn::UMEM_TOO_SMALL,
    );
    r.set_op_mod(2);
    check(&env.modify(h, r.as_bytes()).unwrap_err(), syn::BAD_OP_MOD);

    env.destroy(h).unwrap();
    assert_eq!(
        env.dev.live_objects(),
        3,
        "the two UMEMs and the UAR stay; only the CQ went"
    );
}

#[test]
fn cq_refusals() {
    let mut env = Env::new(104);
    let (_, umem) = env.umem(4096, LOCAL_WRITE);
    let (_, ro_umem) = env.umem(4096, 0);
    let (_, dbr) = env.umem(64, LOCAL_WRITE);
    let (_, uar) = env.uar();
    let eqn = env.eqn();
    let ok = cq_inbox(6, umem, 0, dbr, 0, uar, eqn);
    let (h, _) = env.create(&ok, 16).unwrap();
    env.destroy(h).unwrap();

    // 64 CQEs of 64 bytes fill the 4 KiB UMEM; 128 do not.
    check(
        &env.create(&cq_inbox(7, umem, 0, dbr, 0, uar, eqn), 16)
            .unwrap_err(),
        syn::UMEM_TOO_SMALL,
    );
    check(
        &env.create(&cq_inbox(6, umem, 64, dbr, 0, uar, eqn), 16)
            .unwrap_err(),
        syn::UMEM_TOO_SMALL,
    );
    check(
        &env.create(&cq_inbox(6, ro_umem, 0, dbr, 0, uar, eqn), 16)
            .unwrap_err(),
        syn::UMEM_READ_ONLY,
    );
    check(
        &env.create(&cq_inbox(6, umem, 0, dbr, 60, uar, eqn), 16)
            .unwrap_err(),
        syn::DBR_OUT_OF_UMEM,
    );
    check(
        &env.create(&cq_inbox(6, umem, 0, dbr, 4, uar, eqn), 16)
            .unwrap_err(),
        syn::DBR_MISALIGNED,
    );
    check(
        &env.create(&cq_inbox(23, umem, 0, dbr, 0, uar, eqn), 16)
            .unwrap_err(),
        syn::CQ_TOO_LARGE,
    );
    check(
        &env.create(&cq_inbox(6, 0xabcd, 0, dbr, 0, uar, eqn), 16)
            .unwrap_err(),
        syn::not_found(ObjKind::Umem),
    );
    check(
        &env.create(&cq_inbox(6, umem, 0, dbr, 0, 0x777, eqn), 16)
            .unwrap_err(),
        syn::not_found(ObjKind::Uar),
    );
    // An EQ that is not a completion EQ: the kernel's CQ layer says ENOENT.
    assert_eq!(
        errno(
            &env.create(&cq_inbox(6, umem, 0, dbr, 0, uar, 200), 16)
                .unwrap_err()
        ),
        libc::ENOENT
    );
    // cqe_sz 2 is neither 64 nor 128 bytes.
    let mut bad = ok.clone();
    CreateCqIn::from_slice_mut(&mut bad)
        .unwrap()
        .cq_context_mut()
        .set_cqe_sz(2);
    check(&env.create(&bad, 16).unwrap_err(), syn::CQE_SIZE);
    let mut bad = ok.clone();
    CreateCqIn::from_slice_mut(&mut bad)
        .unwrap()
        .cq_context_mut()
        .set_cqe_comp_en(1);
    check(&env.create(&bad, 16).unwrap_err(), syn::CQE_COMPRESSION);
    // Another context's UMEM is not a resource of this uid.
    let mut other = env.sibling();
    let (_, foreign) = other.umem(4096, LOCAL_WRITE);
    check(
        &env.create(&cq_inbox(6, foreign, 0, dbr, 0, uar, eqn), 16)
            .unwrap_err(),
        syn::foreign(ObjKind::Umem),
    );
    assert_eq!(env.dev.count(ObjKind::Cq), 0);
}

#[test]
fn referenced_objects_cannot_be_destroyed() {
    let mut env = Env::new(105);
    let (umem_h, umem) = env.umem(4096, LOCAL_WRITE);
    let (dbr_h, dbr) = env.umem(64, LOCAL_WRITE);
    let (uar_h, uar) = env.uar();
    let eqn = env.eqn();
    let (cq_h, _) = env
        .create(&cq_inbox(6, umem, 0, dbr, 0, uar, eqn), 16)
        .unwrap();

    let e = env.ctx.umem_dereg(umem_h).unwrap_err();
    check(&e, syn::busy(ObjKind::Umem));
    assert_eq!(
        e.errno(),
        libc::EBUSY,
        "destroy paths report a translated errno"
    );
    check(
        &env.ctx.umem_dereg(dbr_h).unwrap_err(),
        syn::busy(ObjKind::Umem),
    );
    check(
        &env.ctx.uar_free(uar_h).unwrap_err(),
        syn::busy(ObjKind::Uar),
    );

    let (pd_h, pd) = env.pd();
    let inbox = env.mkey_inbox(pd, 8192, LOCAL_WRITE);
    let (mk_h, _) = env.create(&inbox, 16).unwrap();
    check(&env.destroy(pd_h).unwrap_err(), syn::busy(ObjKind::Pd));

    // Once the users are gone, so can the used.
    env.destroy(cq_h).unwrap();
    env.destroy(mk_h).unwrap();
    env.ctx.umem_dereg(umem_h).unwrap();
    env.ctx.umem_dereg(dbr_h).unwrap();
    env.ctx.uar_free(uar_h).unwrap();
    env.destroy(pd_h).unwrap();
}

#[test]
fn mkey_round_trip_and_refusals() {
    let mut env = Env::new(106);
    let (_, pd) = env.pd();
    let (_, umem) = env.umem(8192, LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE);
    let inbox = mkey_inbox(pd, umem, 4096, 0x7000_0000, 4096);
    let (h, out) = env.create(&inbox, 16).unwrap();
    let index = be32(&out, 8) & 0xff_ffff;
    let q = env
        .query(
            h,
            &with_num(hdr(Opcode::QueryMkey.raw(), 0, 16), index),
            QueryMkeyOut::SIZE_BYTES,
        )
        .unwrap();
    let got = QueryMkeyOut::from_slice(&q)
        .unwrap()
        .memory_key_mkey_entry();
    let sent = CreateMkeyIn::from_slice(&inbox)
        .unwrap()
        .memory_key_mkey_entry();
    assert_eq!(got, sent, "QUERY_MKEY returns the mkc field for field");
    env.destroy(h).unwrap();

    check(
        &env.create(&mkey_inbox(pd, umem, 4097, 0, 4096), 16)
            .unwrap_err(),
        syn::MKEY_OUT_OF_UMEM,
    );
    check(
        &env.create(&mkey_inbox(0x4242, umem, 0, 0, 4096), 16)
            .unwrap_err(),
        syn::not_found(ObjKind::Pd),
    );
    let mut bad = mkey_inbox(pd, umem, 0, 0, 4096);
    CreateMkeyIn::from_slice_mut(&mut bad)
        .unwrap()
        .memory_key_mkey_entry_mut()
        .set_lw(0);
    check(&env.create(&bad, 16).unwrap_err(), syn::MKEY_ACCESS_RIGHTS);
    let mut bad = mkey_inbox(pd, umem, 0, 0, 4096);
    CreateMkeyIn::from_slice_mut(&mut bad)
        .unwrap()
        .memory_key_mkey_entry_mut()
        .set_access_mode_1_0(0);
    check(&env.create(&bad, 16).unwrap_err(), syn::MKEY_ACCESS_MODE);
    let (_, ro) = env.umem(4096, 0);
    check(
        &env.create(&mkey_inbox(pd, ro, 0, 0, 4096), 16).unwrap_err(),
        syn::UMEM_READ_ONLY,
    );
    // CREATE_MKEY shorter than its mkey context: the kernel refuses it.
    assert_eq!(
        errno(&env.create(&inbox[..64], 16).unwrap_err()),
        libc::EINVAL
    );
}

#[test]
fn uar_pages_are_real_pages() {
    let env = Env::new(107);
    let u = env.ctx.uar_alloc(devx::UarKind::NonCached).unwrap();
    assert!(u.page_id > 0);
    assert_eq!(u.page.base() as usize % 4096, 0);
    u.page.write64(0x20, 0x0102_0304_0506_0708);
    // SAFETY: the page is 4 KiB of live memory owned by the UAR allocation.
    let v = unsafe { std::ptr::read_volatile(u.page.base().add(0x20) as *const u64) };
    assert_eq!(v, 0x0102_0304_0506_0708);
    assert_eq!(env.dev.count(ObjKind::Uar), 1);
    env.ctx.uar_free(u.handle).unwrap();
    assert_eq!(env.dev.count(ObjKind::Uar), 0);
}
