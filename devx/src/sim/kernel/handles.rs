//! A context's handle table: what each handle names, the destroy command
//! the kernel built for it, and its creation order for teardown.

use std::collections::HashMap;
use std::sync::Arc;

use crate::admission::ObjKey;
use crate::provider::Handle;

use super::uar::SimUarPage;

pub(crate) enum Named {
    /// A firmware object made through OBJ_CREATE; `span` numbers from
    /// `key.number` name it (more than one only for flow counter bulks).
    Obj {
        key: ObjKey,
        span: u32,
        destroy: Option<Vec<u8>>,
    },
    /// A registered UMEM.
    Umem { umem_id: u32 },
    /// An allocated UAR page.
    Uar { page_id: u32, page: Arc<SimUarPage> },
    /// Named by a queued create, UMEM registration or UAR allocation that
    /// has not run yet. `doomed`: released before it ran, so what it makes
    /// is destroyed at once.
    Pending { doomed: bool },
}

pub(crate) struct Entry {
    pub(crate) seq: u64,
    pub(crate) named: Named,
}

#[derive(Default)]
pub(crate) struct Handles {
    next: Handle,
    seq: u64,
    map: HashMap<Handle, Entry>,
}

impl Handles {
    pub(crate) fn insert(&mut self, named: Named) -> Handle {
        // Handles start at 1 and skip live ones when the counter wraps.
        loop {
            self.next = self.next.wrapping_add(1);
            if self.next != 0 && !self.map.contains_key(&self.next) {
                break;
            }
        }
        self.seq += 1;
        self.map.insert(
            self.next,
            Entry {
                seq: self.seq,
                named,
            },
        );
        self.next
    }

    /// Puts back an entry taken out for a destroy that failed.
    pub(crate) fn restore(&mut self, h: Handle, e: Entry) {
        self.map.insert(h, e);
    }

    pub(crate) fn get(&self, h: Handle) -> Option<&Entry> {
        self.map.get(&h)
    }

    pub(crate) fn take(&mut self, h: Handle) -> Option<Entry> {
        self.map.remove(&h)
    }

    /// Every entry, newest first (reverse dependency order).
    pub(crate) fn drain_newest_first(&mut self) -> Vec<(Handle, Entry)> {
        let mut v: Vec<_> = self.map.drain().collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1.seq));
        v
    }

    /// Marks a pending entry doomed; false when `h` names no pending entry.
    pub(crate) fn doom(&mut self, h: Handle) -> bool {
        match self.map.get_mut(&h) {
            Some(Entry {
                named: Named::Pending { doomed },
                ..
            }) => {
                *doomed = true;
                true
            }
            _ => false,
        }
    }

    /// Replaces pending entry `h` with what its command made. Returns
    /// `named` back, and takes the entry out, when it was doomed or is gone.
    pub(crate) fn fill(&mut self, h: Handle, named: Named) -> Option<Named> {
        match self.map.get_mut(&h) {
            Some(e) if matches!(e.named, Named::Pending { doomed: false }) => {
                e.named = named;
                None
            }
            _ => {
                if matches!(self.map.get(&h), Some(e) if matches!(e.named, Named::Pending { .. })) {
                    self.map.remove(&h);
                }
                Some(named)
            }
        }
    }

    /// Takes pending entry `h` out (its command failed or was cancelled).
    pub(crate) fn drop_pending(&mut self, h: Handle) {
        if matches!(self.map.get(&h), Some(e) if matches!(e.named, Named::Pending { .. })) {
            self.map.remove(&h);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}
