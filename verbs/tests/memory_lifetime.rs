//! Memory registered through the verbs stays mapped while the device uses
//! it, in every drop order of regions, PDs, CQs, QPs and the context, and is
//! released once its last user is gone.

mod datapath_support;

use std::any::Any;
use std::sync::{Arc, Mutex};

use datapath_support::{open, rc_pair, wait, Buf};
use devx::sim::ObjKind;
use devx::{ExclusiveMemory, StableMemory};
use memmap2::MmapMut;
use prm_layouts::enums::Opcode;
use prm_layouts::{CreateMkeyIn, CreateMkeyOut};
use verbs::{AccessFlags, Mr, Pd, QpInit, QpType, RecvWr, SendWr, Sge, WcStatus};

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

/// True while the pages holding `[addr, addr + len)` are mapped.
fn mapped(addr: usize, len: usize) -> bool {
    let page = addr & !4095;
    // SAFETY: msync only inspects the range; ENOMEM when a page is unmapped.
    unsafe { libc::msync(page as *mut _, addr + len - page, libc::MS_ASYNC) == 0 }
}

impl Probe {
    /// What the memory held when it was freed, if it was.
    fn freed(&self) -> Option<Vec<u8>> {
        self.freed.lock().unwrap().clone()
    }

    fn alive(&self) -> bool {
        mapped(self.addr, self.len) && self.freed().is_none()
    }
}

/// A raw DEVX MKEY with local write over the whole of `mr`'s UMEM: a user of
/// the memory the region does not know about. Returns it and its lkey.
fn raw_mkey(pd: &Pd, mr: &Mr<Tracked>) -> (devx::Obj, u32) {
    let mut m = CreateMkeyIn::new();
    m.set_opcode(Opcode::CreateMkey.raw());
    m.set_mkey_umem_valid(1);
    m.set_mkey_umem_id(mr.umem_id());
    let c = m.memory_key_mkey_entry_mut();
    c.set_access_mode_1_0(1);
    c.set_lr(1);
    c.set_lw(1);
    c.set_qpn(0xff_ffff);
    c.set_mkey_7_0(0x5a);
    c.set_pd(pd.pdn());
    c.set_start_addr(mr.addr() as u64);
    c.set_len(mr.len() as u64);
    c.set_log_page_size(12);
    c.set_translations_octword_size(1);
    let obj = pd
        .context()
        .devx()
        .create(m.as_bytes(), CreateMkeyOut::SIZE_BYTES)
        .unwrap();
    let key = (obj.id() << 8) | 0x5a;
    (obj, key)
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
fn memory_of_a_dropped_region_still_receives_while_another_key_uses_it() {
    let (mut a, mut b) = rc_pair(7300);
    let (mem, probe) = Tracked::new(4096);
    let mr = b.pd.reg_mr(mem, AccessFlags::LOCAL_WRITE).unwrap();
    let (mkey, lkey) = raw_mkey(&b.pd, &mr);
    // The region's own key goes; its UMEM stays registered for the raw key.
    assert_eq!(mr.deregister().unwrap().map(|_| ()), None);
    assert!(probe.alive());
    assert_eq!(b.ctx.devx().kept_umems(), 1);

    // The device writes the received message into the memory after the
    // region was dropped, and completes it.
    let dst = [Sge::new(probe.addr as u64 + 8, 64, lkey)];
    b.qp.post_recv(&RecvWr::new(1, &dst)).unwrap();
    let src = Buf::new(&a.pd, 64, AccessFlags::LOCAL_WRITE);
    src.write(0, b"landed after dereg");
    a.qp.post_send(&SendWr::send(2, &[src.sge(0, 18)])).unwrap();
    let got = wait(&mut b.cq, 1);
    assert_eq!((got[0].status, got[0].byte_len), (WcStatus::Success, 18));
    assert_eq!(wait(&mut a.cq, 1)[0].status, WcStatus::Success);
    assert!(probe.alive());

    // The last user gone, the memory goes, holding what the device wrote.
    drop(mkey);
    assert_eq!(b.ctx.devx().kept_umems(), 0);
    let held = probe.freed().expect("memory released after its last user");
    assert_eq!(&held[8..26], b"landed after dereg");
}

#[test]
fn every_drop_order_of_region_raw_key_pd_and_context() {
    for order in permutations(4) {
        let (ctx, sim) = open(7400);
        let pd = ctx.alloc_pd().unwrap();
        let (mem, probe) = Tracked::new(8192);
        let mr = pd.reg_mr(mem, AccessFlags::LOCAL_WRITE).unwrap();
        let (mkey, _) = raw_mkey(&pd, &mr);
        let raw_alive = Arc::new(());
        let mut items: Vec<Option<Box<dyn Any>>> = vec![
            Some(Box::new(mr)),
            Some(Box::new((mkey, raw_alive.clone()))),
            Some(Box::new(pd)),
            Some(Box::new(ctx)),
        ];
        for &i in &order {
            drop(items[i].take());
            if Arc::strong_count(&raw_alive) > 1 {
                assert!(
                    probe.alive(),
                    "order {order:?}: memory gone under a live key"
                );
            }
        }
        assert!(probe.freed().is_some(), "order {order:?}: never released");
        assert_eq!(sim.live_objects(), 0, "order {order:?}");
    }
}

#[test]
fn every_drop_order_of_mr_pd_cq_qp_and_context_keeps_memory_while_used() {
    for order in permutations(5) {
        let (ctx, sim) = open(7500);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8).unwrap();
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
        let (mem, probe) = Tracked::new(4096);
        let mr = pd.reg_mr(mem, AccessFlags::LOCAL_WRITE).unwrap();
        let ring = cq.memory();
        let sq = qp.send_queue_memory();
        let mut items: Vec<Option<Box<dyn Any>>> = vec![
            Some(Box::new(mr)),
            Some(Box::new(pd)),
            Some(Box::new(cq)),
            Some(Box::new(qp)),
            Some(Box::new(ctx)),
        ];
        for &i in &order {
            drop(items[i].take());
            if sim.count(ObjKind::Cq) > 0 {
                assert!(mapped(ring.addr, ring.len), "order {order:?}: CQ ring gone");
                assert!(mapped(ring.doorbell_record, 8), "order {order:?}");
            }
            if sim.count(ObjKind::Qp) > 0 {
                assert!(mapped(sq.addr, sq.len), "order {order:?}: SQ gone");
            }
            if sim.count(ObjKind::Mkey) > 0 {
                assert!(probe.alive(), "order {order:?}: MR memory gone");
            }
        }
        assert!(probe.freed().is_some(), "order {order:?}");
        assert_eq!(sim.live_objects(), 0, "order {order:?}");
        assert_eq!(sim.open_contexts(), 0, "order {order:?}");
    }
}
