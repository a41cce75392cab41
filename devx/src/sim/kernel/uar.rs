//! UAR pages of the emulated device: an owned, page-aligned 4 KiB block
//! standing in for the mmapped doorbell page. A 64-bit store is kept in the
//! page and handed to the device's doorbell sink (the data-path engine).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::provider::UarPage;
use crate::sim::engine::{DoorbellSink, Engine, BF_REGS};
use crate::uar::{BfHalf, BfStore, HeldDoorbell};

/// A device's doorbell sink slot, shared by all its UAR pages.
pub(crate) type DoorbellSlot = Arc<SinkSlot>;

/// Where doorbells go. The device's own engine is fixed at creation and
/// called directly, with no lock and no dynamic dispatch, while it is the
/// installed sink ([`Engine::installed`]); any other sink (tests) is
/// reached under a read lock.
pub(crate) struct SinkSlot {
    engine: Arc<Engine>,
    other: RwLock<Option<Arc<dyn DoorbellSink>>>,
}

impl SinkSlot {
    /// A slot with `engine` installed.
    pub(crate) fn with_engine(engine: Arc<Engine>) -> SinkSlot {
        SinkSlot {
            engine,
            other: RwLock::new(None),
        }
    }

    /// Installs `sink` (or none). Installing the slot's engine again
    /// restores the direct path. A doorbell already on its way to the
    /// engine may still finish after this returns; one to another sink is
    /// waited for (it holds the read lock).
    pub(crate) fn set(&self, sink: Option<Arc<dyn DoorbellSink>>) {
        let mut other = self.other.write().unwrap_or_else(|e| e.into_inner());
        let is_engine = sink
            .as_ref()
            .is_some_and(|s| std::ptr::addr_eq(Arc::as_ptr(s), Arc::as_ptr(&self.engine)));
        self.engine.install(is_engine);
        *other = if is_engine { None } else { sink };
    }

    /// Lets the engine do pending work on the caller's thread (see
    /// [`UarPage::progress`]); test sinks have none.
    pub(crate) fn progress(&self) -> bool {
        self.engine.installed() && self.engine.progress()
    }

    /// Inlined into the page's store, with the engine's doorbell; the
    /// other sinks' locked path is out of line, so the direct one saves no
    /// registers.
    #[inline(always)]
    pub(crate) fn deliver(&self, page_id: u32, offset: usize, value: u64) {
        if self.engine.installed() {
            return self.engine.doorbell(page_id, offset, value);
        }
        self.deliver_other(page_id, offset, value);
    }

    /// The device's engine, fixed at creation.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    #[cold]
    #[inline(never)]
    fn deliver_other(&self, page_id: u32, offset: usize, value: u64) {
        // Called under the read lock rather than through a cloned Arc: no
        // reference count traffic, and a sink being replaced waits for
        // doorbells in progress. Sinks never write UAR pages.
        let sink = self.other.read().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = sink.as_ref() {
            s.doorbell(page_id, offset, value);
        }
    }
}

pub(crate) const UAR_PAGE_SIZE: usize = 4096;

#[repr(C, align(4096))]
struct PageWords([AtomicU64; UAR_PAGE_SIZE / 8]);

/// One emulated UAR page.
pub(crate) struct SimUarPage {
    /// In the page value itself (which is then page-aligned): a store
    /// goes through the page's address with no pointer to load first.
    words: PageWords,
    /// The sink's engine's note of the doorbell it holds, as this page
    /// sees it: a paused engine's repeat is checked on the store with one
    /// load and one compare. `sink` keeps the engine, and so the note,
    /// alive.
    held: HeldDoorbell,
    page_id: u32,
    freed: AtomicBool,
    sink: DoorbellSlot,
}

impl SimUarPage {
    pub(crate) fn new(page_id: u32, sink: DoorbellSlot) -> SimUarPage {
        SimUarPage {
            words: PageWords(std::array::from_fn(|_| AtomicU64::new(0))),
            held: sink.engine().held_doorbell(page_id),
            page_id,
            freed: AtomicBool::new(false),
            sink,
        }
    }

    /// The last value stored at `offset` (8-byte aligned).
    #[cfg(test)]
    pub(crate) fn read64(&self, offset: usize) -> Option<u64> {
        if offset & 7 != 0 {
            return None;
        }
        self.words
            .0
            .get(offset / 8)
            .map(|w| w.load(Ordering::Acquire))
    }

    /// The doorbell stored at `offset` goes to the sink. Out of line, so the
    /// store and the held repeat's check save no registers.
    #[inline(never)]
    fn hand_on(&self, offset: usize, value: u64) {
        if self.freed.load(Ordering::Acquire) {
            return;
        }
        self.sink.deliver(self.page_id, offset, value);
    }

    /// Whether the engine holds a doorbell for the QP send doorbell
    /// `value` names, through this page, already.
    #[inline(always)]
    fn holds(&self, value: u64) -> bool {
        // SAFETY: `sink` holds the engine, whose note `held` points to.
        unsafe { self.held.holds(self.held.key_of(value)) }
    }

    /// After UAR free the page stays allocated (a stale mapping must not
    /// fault) but doorbells through it reach nobody.
    pub(crate) fn mark_freed(&self) {
        self.freed.store(true, Ordering::Release);
    }
}

impl UarPage for SimUarPage {
    fn base(&self) -> *mut u8 {
        self.words.0.as_ptr() as *mut u8
    }

    fn write64(&self, offset: usize, value: u64) {
        // Unaligned or out-of-page stores are dropped, as a PCIe write
        // outside the BAR page would be.
        if offset & 7 != 0 {
            return;
        }
        let Some(word) = self.words.0.get(offset / 8) else {
            return;
        };
        word.store(value, Ordering::Release);
        // A paused engine's repeat, the doorbell of a posting loop timed
        // alone, ends here; a freed page's would be dropped as well.
        if BF_REGS.contains(&offset) && self.holds(value) {
            return;
        }
        self.hand_on(offset, value);
    }

    /// [`UarPage::write64`] for an offset known to be a BlueFlame
    /// register's: no check of where it lands.
    #[inline]
    fn write_bf(&self, half: BfHalf, value: u64) {
        let offset = half.offset();
        self.words.0[offset / 8].store(value, Ordering::Release);
        if self.holds(value) {
            return;
        }
        self.hand_on(offset, value);
    }

    /// The ringer stores and checks a paused engine's repeat itself; any
    /// other doorbell still comes through [`SimUarPage::write_bf`].
    fn bf_store(&self) -> BfStore {
        BfStore::UnlessHeld(self.held)
    }

    fn progress(&self) -> bool {
        !self.freed.load(Ordering::Acquire) && self.sink.progress()
    }

    /// Ordinary memory, and the engine reads the queues a doorbell names
    /// only after this store: inside it, or from a thread that takes the
    /// doorbell through a lock.
    fn write_combining(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Profile, SimDevice};
    use std::sync::Mutex;

    struct Log(Mutex<Vec<(u32, usize, u64)>>);
    impl DoorbellSink for Log {
        fn doorbell(&self, page_id: u32, offset: usize, value: u64) {
            self.0.lock().unwrap().push((page_id, offset, value));
        }
    }

    /// A private device, its engine paused, and a page delivering to it.
    fn paused_page() -> (Arc<SimDevice>, SimUarPage) {
        let dev = SimDevice::new(Profile::default());
        dev.pause_engine(true);
        let page = SimUarPage::new(3, Arc::clone(&dev.shared.doorbell));
        (dev, page)
    }

    /// A send doorbell's value: the first 8 bytes of a ctrl segment.
    fn ctrl8(qpn: u32) -> u64 {
        let c = prm_layouts::WqeCtrlSeg::new().with_qpn(qpn);
        u64::from_ne_bytes(c.0[..8].try_into().unwrap())
    }

    #[test]
    fn stores_land_in_the_page_and_reach_the_sink() {
        let (dev, p) = paused_page();
        let log = Arc::new(Log(Mutex::new(Vec::new())));
        dev.set_doorbell_sink(Some(log.clone()));
        assert_eq!(p.base() as usize % 4096, 0);
        p.write64(0x20, 0x1122_3344_5566_7788);
        p.write64(0x21, 1);
        p.write64(4096, 1);
        assert_eq!(p.read64(0x20), Some(0x1122_3344_5566_7788));
        assert_eq!(
            log.0.lock().unwrap().as_slice(),
            &[(3, 0x20, 0x1122_3344_5566_7788)]
        );
        p.mark_freed();
        p.write64(0x800, 5);
        assert_eq!(log.0.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_paused_engine_holds_each_run_of_one_qps_doorbells_once() {
        let (dev, p) = paused_page();
        for qpn in [5, 5, 6, 6, 5] {
            p.write64(0x800, ctrl8(qpn));
        }
        assert_eq!(dev.engine_held(), 3);
        assert_eq!(p.read64(0x800), Some(ctrl8(5)));
        dev.pause_engine(false);
        assert_eq!(dev.engine_held(), 0);
    }

    #[test]
    fn blue_flame_halves_land_in_the_page_and_repeats_are_per_page_and_qp() {
        let (dev, p) = paused_page();
        let other = SimUarPage::new(4, Arc::clone(&dev.shared.doorbell));
        let (first, second) = (BfHalf::FIRST, BfHalf::FIRST.other());
        assert_ne!(first.offset(), second.offset());
        p.write_bf(first, ctrl8(5));
        p.write_bf(second, ctrl8(5));
        assert_eq!(dev.engine_held(), 1);
        other.write_bf(first, ctrl8(5));
        p.write_bf(first, ctrl8(6));
        assert_eq!(dev.engine_held(), 3);
        assert_eq!(p.read64(first.offset()), Some(ctrl8(6)));
        assert_eq!(p.read64(second.offset()), Some(ctrl8(5)));
        dev.pause_engine(false);
        assert_eq!(dev.engine_held(), 0);
    }

    /// What a ringer that stores itself reads ([`BfStore::UnlessHeld`]):
    /// held exactly while the paused engine holds that QP's doorbell
    /// through that page, whatever the WQE index, opcode and DS.
    #[test]
    fn the_page_tells_a_ringer_which_doorbells_the_paused_engine_holds() {
        let (dev, p) = paused_page();
        let other = SimUarPage::new(4, Arc::clone(&dev.shared.doorbell));
        let BfStore::UnlessHeld(held) = p.bf_store() else {
            panic!("an emulated page lets its ringer store");
        };
        let BfStore::UnlessHeld(held_other) = other.bf_store() else {
            panic!("an emulated page lets its ringer store");
        };
        // SAFETY: `p` and `other` are alive throughout.
        let holds = |h: &HeldDoorbell, qpn| unsafe { h.holds(h.key(qpn)) };
        assert!(!holds(&held, 5), "nothing held yet");
        let ctrl = prm_layouts::WqeCtrlSeg::new()
            .with_wqe_index(0x1234)
            .with_opcode(prm_layouts::SendOpcode::RdmaWrite.raw())
            .with_qpn(5)
            .with_ds(3);
        p.write_bf(
            BfHalf::FIRST,
            u64::from_ne_bytes(ctrl.0[..8].try_into().unwrap()),
        );
        assert_eq!(dev.engine_held(), 1);
        assert!(holds(&held, 5));
        assert!(!holds(&held, 6), "another QP");
        assert!(!holds(&held_other, 5), "another page");
        let log = Arc::new(Log(Mutex::new(Vec::new())));
        dev.set_doorbell_sink(Some(log.clone()));
        assert!(!holds(&held, 5), "the engine is no longer the sink");
        dev.set_doorbell_sink(Some(Arc::clone(dev.shared.doorbell.engine()) as _));
        p.write_bf(BfHalf::FIRST, ctrl8(5));
        assert!(holds(&held, 5));
        dev.pause_engine(false);
        assert!(!holds(&held, 5), "a running engine holds nothing");
    }

    #[test]
    fn another_sink_gets_the_doorbells_the_engine_held_a_repeat_of() {
        let (dev, p) = paused_page();
        p.write64(0x800, ctrl8(5));
        let log = Arc::new(Log(Mutex::new(Vec::new())));
        dev.set_doorbell_sink(Some(log.clone()));
        p.write64(0x900, ctrl8(5));
        assert_eq!(log.0.lock().unwrap().as_slice(), &[(3, 0x900, ctrl8(5))]);
        assert_eq!(dev.engine_held(), 1);
    }
}
