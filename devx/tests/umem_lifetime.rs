//! Registered memory stays mapped while the device uses it, whatever order
//! the UMEM, the objects in it and the context are dropped in, and is
//! released once its last user is gone.

use std::any::Any;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use devx::sim::{ObjKind, SimDevice};
use devx::{access, Context, ExclusiveMemory, Obj, StableMemory, Uar, Umem};
use memmap2::MmapMut;
use prm_layouts::enums::Opcode;
use prm_layouts::{
    AllocPdIn, AllocPdOut, CreateCqIn, CreateCqOut, CreateMkeyIn, CreateMkeyOut, ModifyCqIn,
    ModifyCqOut,
};

/// MODIFY_CQ op_mod of a resize (`MLX5_CQ_OPMOD_RESIZE`).
const OP_MOD_RESIZE: u16 = 1;
/// `resize_field_select`: log size, page offset and page size.
const RESIZE_ALL_FIELDS: u32 = 0x1 | 0x2 | 0x4;

static NEXT: AtomicU32 = AtomicU32::new(0);

fn open() -> (Context, Arc<SimDevice>) {
    let name = format!("sim{}", 7100 + NEXT.fetch_add(1, Ordering::Relaxed));
    let sim = devx::sim::sim_device(&name).unwrap();
    (devx::Device::emulated(&name).unwrap().open().unwrap(), sim)
}

/// Anonymous memory that records when it is unmapped, and what it held then.
struct Tracked {
    map: MmapMut,
    freed: Arc<Mutex<Option<Vec<u8>>>>,
}

/// The test's view of a [`Tracked`] mapping.
#[derive(Clone)]
struct Probe {
    addr: usize,
    len: usize,
    freed: Arc<Mutex<Option<Vec<u8>>>>,
}

impl Tracked {
    fn new(len: usize) -> (Tracked, Probe) {
        let map = MmapMut::map_anon(len).unwrap();
        let freed = Arc::new(Mutex::new(None));
        let probe = Probe {
            addr: map.as_ptr() as usize,
            len,
            freed: freed.clone(),
        };
        (Tracked { map, freed }, probe)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        *self.freed.lock().unwrap() = Some(self.map[..64].to_vec());
    }
}

// SAFETY: the mapping keeps its address until dropped.
unsafe impl StableMemory for Tracked {
    fn range(&self) -> (*const u8, usize) {
        (self.map.as_ptr(), self.map.len())
    }
}
// SAFETY: only the registration reaches the mapping.
unsafe impl ExclusiveMemory for Tracked {}

impl Probe {
    fn freed(&self) -> bool {
        self.freed.lock().unwrap().is_some()
    }

    /// Still mapped and never freed: what the device may write is memory.
    fn alive(&self) -> bool {
        // SAFETY: msync only inspects the address range; it fails with
        // ENOMEM when any page of it is unmapped.
        let mapped = unsafe { libc::msync(self.addr as *mut _, self.len, libc::MS_ASYNC) } == 0;
        mapped && !self.freed()
    }
}

/// CREATE_CQ of 64 CQEs in `ring`, doorbell record in `dbr`.
fn create_cq(ctx: &Context, ring: u32, dbr: u32, uar: &Uar) -> Obj {
    ctx.create(&cq_inbox(ctx, ring, dbr, uar), CreateCqOut::SIZE_BYTES)
        .unwrap()
}

/// A CQ straight through the provider, with no `Obj` to destroy it: only
/// closing the context does.
fn abandoned_cq(ctx: &Context, ring: u32, dbr: u32, uar: &Uar) {
    let mut out = [0u8; CreateCqOut::SIZE_BYTES];
    ctx.provider()
        .create(&cq_inbox(ctx, ring, dbr, uar), &mut out)
        .unwrap();
}

fn cq_inbox(ctx: &Context, ring: u32, dbr: u32, uar: &Uar) -> Vec<u8> {
    let mut m = CreateCqIn::new();
    m.set_opcode(Opcode::CreateCq.raw());
    m.set_cq_umem_valid(1);
    m.set_cq_umem_id(ring);
    let c = m.cq_context_mut();
    c.set_log_cq_size(6);
    c.set_uar_page(uar.page_id());
    c.set_c_eqn_or_apu_element(ctx.query_eqn(0).unwrap());
    c.set_dbr_umem_valid(1);
    c.set_dbr_umem_id(dbr);
    m.as_bytes().to_vec()
}

fn create_pd(ctx: &Context) -> Obj {
    let mut m = AllocPdIn::new();
    m.set_opcode(Opcode::AllocPd.raw());
    ctx.create(m.as_bytes(), AllocPdOut::SIZE_BYTES).unwrap()
}

/// CREATE_MKEY over the first `len` bytes of UMEM `umem`.
fn create_mkey(ctx: &Context, pd: &Obj, umem: &Umem<impl StableMemory>) -> Obj {
    let mut m = CreateMkeyIn::new();
    m.set_opcode(Opcode::CreateMkey.raw());
    m.set_mkey_umem_valid(1);
    m.set_mkey_umem_id(umem.id());
    let c = m.memory_key_mkey_entry_mut();
    c.set_access_mode_1_0(1);
    c.set_lr(1);
    c.set_lw(1);
    c.set_qpn(0xff_ffff);
    c.set_pd(pd.id());
    c.set_start_addr(umem.addr() as u64);
    c.set_len(umem.len() as u64);
    c.set_log_page_size(12);
    c.set_translations_octword_size(1);
    ctx.create(m.as_bytes(), CreateMkeyOut::SIZE_BYTES).unwrap()
}

/// Every order of `n` items.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for at in 0..=p.len() {
            let mut q = p.clone();
            q.insert(at, n - 1);
            out.push(q);
        }
    }
    out
}

#[test]
fn a_umem_dropped_under_a_live_cq_stays_mapped_until_the_cq_goes() {
    let (ctx, sim) = open();
    let (mem, ring) = Tracked::new(64 * 64);
    let umem = Umem::register(&ctx, mem, access::LOCAL_WRITE).unwrap();
    let dbr = Umem::register(&ctx, vec![0u8; 64], access::LOCAL_WRITE).unwrap();
    let uar = Uar::alloc(&ctx).unwrap();
    let cq = create_cq(&ctx, umem.id(), dbr.id(), &uar);

    // The device refuses the deregistration; the memory must not go.
    drop(umem);
    assert!(ring.alive());
    assert_eq!((ctx.kept_umems(), sim.count(ObjKind::Umem)), (1, 2));

    // Destroying the CQ lets the context finish the release.
    drop(cq);
    assert!(ring.freed());
    assert_eq!((ctx.kept_umems(), sim.count(ObjKind::Umem)), (0, 1));
}

#[test]
fn a_ring_dropped_before_a_resize_is_released_by_the_resize() {
    let (ctx, _sim) = open();
    let (mem, old) = Tracked::new(64 * 64);
    let umem = Umem::register(&ctx, mem, access::LOCAL_WRITE).unwrap();
    let dbr = Umem::register(&ctx, vec![0u8; 64], access::LOCAL_WRITE).unwrap();
    let uar = Uar::alloc(&ctx).unwrap();
    let cq = create_cq(&ctx, umem.id(), dbr.id(), &uar);
    drop(umem);
    assert!(old.alive());

    // MODIFY_CQ moves the CQ to a new ring: the old one has no user left.
    let new = Umem::register(
        &ctx,
        MmapMut::map_anon(64 * 128).unwrap(),
        access::LOCAL_WRITE,
    )
    .unwrap();
    let mut m = ModifyCqIn::new();
    m.set_opcode(Opcode::ModifyCq.raw());
    m.set_op_mod(OP_MOD_RESIZE);
    m.set_cqn(cq.id());
    m.modify_field_select_resize_field_select_mut()
        .resize_field_select_mut()
        .set_resize_field_select(RESIZE_ALL_FIELDS);
    m.cq_context_mut().set_log_cq_size(7);
    m.set_cq_umem_valid(1);
    m.set_cq_umem_id(new.id());
    cq.modify(m.as_bytes(), ModifyCqOut::SIZE_BYTES).unwrap();
    assert!(old.freed());
    assert_eq!(ctx.kept_umems(), 0);
}

#[test]
fn every_drop_order_of_umem_cq_and_context_keeps_the_ring_while_the_cq_lives() {
    for order in permutations(4) {
        let (ctx, sim) = open();
        let (mem, ring) = Tracked::new(64 * 64);
        let umem = Umem::register(&ctx, mem, access::LOCAL_WRITE).unwrap();
        let dbr = Umem::register(&ctx, vec![0u8; 64], access::LOCAL_WRITE).unwrap();
        let uar = Uar::alloc(&ctx).unwrap();
        let cq = create_cq(&ctx, umem.id(), dbr.id(), &uar);
        let mut items: Vec<Option<Box<dyn Any>>> = vec![
            Some(Box::new(umem)),
            Some(Box::new(cq)),
            Some(Box::new(ctx)),
            Some(Box::new((dbr, uar))),
        ];
        for &i in &order {
            drop(items[i].take());
            if sim.count(ObjKind::Cq) > 0 {
                assert!(ring.alive(), "order {order:?}: ring gone under a live CQ");
            }
        }
        assert!(ring.freed(), "order {order:?}: ring never released");
        assert_eq!(sim.live_objects(), 0, "order {order:?}");
        assert_eq!(sim.open_contexts(), 0, "order {order:?}");
    }
}

#[test]
fn memory_an_abandoned_object_uses_is_freed_only_after_the_context_closes() {
    let (ctx, sim) = open();
    let (mem, ring) = Tracked::new(64 * 64);
    let umem = Umem::register(&ctx, mem, access::LOCAL_WRITE).unwrap();
    let dbr = Umem::register(&ctx, vec![0u8; 64], access::LOCAL_WRITE).unwrap();
    let uar = Uar::alloc(&ctx).unwrap();
    abandoned_cq(&ctx, umem.id(), dbr.id(), &uar);
    drop((umem, dbr, uar));
    assert!(ring.alive());
    assert_eq!(ctx.kept_umems(), 2);
    drop(ctx);
    assert!(ring.freed());
    assert_eq!((sim.live_objects(), sim.open_contexts()), (0, 0));
}

#[test]
fn a_provider_context_held_elsewhere_keeps_the_memory_forever() {
    let (ctx, sim) = open();
    let (mem, ring) = Tracked::new(64 * 64);
    let umem = Umem::register(&ctx, mem, access::LOCAL_WRITE).unwrap();
    let dbr = Umem::register(&ctx, vec![0u8; 64], access::LOCAL_WRITE).unwrap();
    let uar = Uar::alloc(&ctx).unwrap();
    abandoned_cq(&ctx, umem.id(), dbr.id(), &uar);
    let provider = ctx.provider().clone();
    drop((umem, dbr, uar, ctx));
    // The provider context did not close: the device may still use the ring.
    assert!(ring.alive());
    assert_eq!(sim.open_contexts(), 1);
    assert!(!ring.freed(), "freed without knowing the device let go");
    drop(provider);
    assert_eq!(sim.open_contexts(), 0);
}

#[test]
fn an_object_whose_destroy_was_refused_is_destroyed_once_its_user_goes() {
    let (ctx, sim) = open();
    let (mem, buf) = Tracked::new(8192);
    let pd = create_pd(&ctx);
    let umem = Umem::register(&ctx, mem, access::LOCAL_WRITE).unwrap();
    let mkey = create_mkey(&ctx, &pd, &umem);
    // The PD's destroy is refused while the MKEY lives in it; the UMEM's too.
    drop(pd);
    drop(umem);
    assert_eq!((ctx.kept_objects(), ctx.kept_umems()), (1, 1));
    assert!(buf.alive());
    drop(mkey);
    assert_eq!((ctx.kept_objects(), ctx.kept_umems()), (0, 0));
    assert!(buf.freed());
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn writable_registrations_need_exclusive_memory() {
    let (ctx, _sim) = open();
    static SHARED: [u8; 4096] = [5u8; 4096];
    for a in [
        access::LOCAL_WRITE,
        access::LOCAL_WRITE | access::REMOTE_WRITE,
    ] {
        let e = Umem::register_read_only(&ctx, &SHARED[..], a).unwrap_err();
        assert!(
            e.is_argument() && e.to_string().contains("exclusively"),
            "{e}"
        );
    }
    let u = Umem::register_read_only(&ctx, &SHARED[..], access::REMOTE_READ).unwrap();
    assert!(!u.writable());
    assert_eq!(u.memory()[7], 5);
    assert_eq!(u.read_vec(4090, 6).unwrap(), [5; 6]);
    let arc = Arc::new(vec![1u8; 64]);
    let u = Umem::register_read_only(&ctx, arc.clone(), access::REMOTE_READ).unwrap();
    assert_eq!(u.memory().as_ptr(), arc.as_ptr());
}

#[test]
fn copies_in_and_out_are_bounds_checked() {
    let (ctx, _sim) = open();
    let u = Umem::register(&ctx, vec![0u8; 100], access::LOCAL_WRITE).unwrap();
    u.write_at(3, b"abcdefghijkl").unwrap();
    u.fill(20, 5, 9).unwrap();
    assert_eq!(u.read_vec(2, 5).unwrap(), b"\0abcd");
    assert_eq!(u.read_vec(19, 7).unwrap(), [0, 9, 9, 9, 9, 9, 0]);
    for e in [
        u.write_at(99, b"xy").unwrap_err(),
        u.fill(usize::MAX, 2, 0).unwrap_err(),
        u.read_at(101, &mut [0u8; 0]).unwrap_err(),
        u.read_vec(0, 101).unwrap_err(),
    ] {
        assert!(e.is_argument() && e.to_string().contains("100-byte"), "{e}");
    }
    let back = u.deregister().unwrap();
    assert_eq!(&back[3..6], b"abc");
}
