//! A table of firmware objects of one kind: number allocation, uid
//! ownership and reference counts, all O(1) per command.

use std::collections::HashMap;

use super::cmd::{fail, FwResult};
use super::kind::ObjKind;
use crate::sim::syndrome;

/// A reference one object holds on another (released when the holder dies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ObjRef {
    pub(crate) kind: ObjKind,
    pub(crate) num: u32,
}

impl ObjRef {
    pub(crate) fn new(kind: ObjKind, num: u32) -> ObjRef {
        ObjRef { kind, num }
    }
}

/// One live object.
#[derive(Debug)]
pub(crate) struct Entry<T> {
    /// Owner uid (0 = the kernel / device itself, usable by every uid).
    pub(crate) uid: u16,
    /// How many other objects reference this one.
    pub(crate) refs: u32,
    pub(crate) obj: T,
}

type NumMap<V> = crate::num_hash::NumMap<u32, V>;

/// Objects of one kind, keyed by their PRM number.
#[derive(Debug)]
pub(crate) struct Table<T> {
    kind: ObjKind,
    map: NumMap<Entry<T>>,
    per_uid: HashMap<u16, usize>,
    first: u32,
    last: u32,
    next: u32,
    limit: usize,
}

impl<T> Table<T> {
    /// Numbers are handed out from `first..=last`, increasing and wrapping, so
    /// a destroyed number is not reused soon (stale handles fail loudly);
    /// at most `limit` objects live at once.
    pub(crate) fn new(kind: ObjKind, first: u32, last: u32, limit: usize) -> Table<T> {
        let span = (last - first) as usize + 1;
        Table {
            kind,
            map: NumMap::default(),
            per_uid: HashMap::new(),
            first,
            last,
            next: first,
            limit: limit.min(span),
        }
    }

    pub(crate) fn kind(&self) -> ObjKind {
        self.kind
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Objects owned by `uid`.
    pub(crate) fn count_uid(&self, uid: u16) -> usize {
        self.per_uid.get(&uid).copied().unwrap_or(0)
    }

    /// Allocates the next free number for a new object of `uid`.
    pub(crate) fn insert(&mut self, uid: u16, obj: T) -> FwResult<u32> {
        if self.map.len() >= self.limit {
            return fail(syndrome::table_full(self.kind));
        }
        // The table is not full, so a free number exists; with increasing
        // allocation the loop almost always ends at once.
        let mut n = self.next;
        while self.map.contains_key(&n) {
            n = if n >= self.last { self.first } else { n + 1 };
        }
        self.next = if n >= self.last { self.first } else { n + 1 };
        self.put(n, uid, obj);
        Ok(n)
    }

    /// Inserts at a fixed number (objects whose number the caller chooses).
    pub(crate) fn insert_at(&mut self, n: u32, uid: u16, obj: T) -> FwResult {
        if self.map.len() >= self.limit {
            return fail(syndrome::table_full(self.kind));
        }
        if self.map.contains_key(&n) {
            return fail(syndrome::busy(self.kind));
        }
        self.put(n, uid, obj);
        Ok(())
    }

    fn put(&mut self, n: u32, uid: u16, obj: T) {
        self.map.insert(n, Entry { uid, refs: 0, obj });
        *self.per_uid.entry(uid).or_insert(0) += 1;
    }

    pub(crate) fn contains(&self, n: u32) -> bool {
        self.map.contains_key(&n)
    }

    /// Any object, without an ownership check (introspection, data path).
    pub(crate) fn peek(&self, n: u32) -> Option<&Entry<T>> {
        self.map.get(&n)
    }

    pub(crate) fn peek_mut(&mut self, n: u32) -> Option<&mut Entry<T>> {
        self.map.get_mut(&n)
    }

    /// An object `uid` may operate on (query, modify, destroy): its own.
    /// uid 0 (the kernel) may operate on everything.
    pub(crate) fn owned(&self, n: u32, uid: u16) -> FwResult<&Entry<T>> {
        match self.map.get(&n) {
            None => fail(syndrome::not_found(self.kind)),
            Some(e) if uid != 0 && e.uid != uid => fail(syndrome::foreign(self.kind)),
            Some(e) => Ok(e),
        }
    }

    pub(crate) fn owned_mut(&mut self, n: u32, uid: u16) -> FwResult<&mut Entry<T>> {
        let kind = self.kind;
        match self.map.get_mut(&n) {
            None => fail(syndrome::not_found(kind)),
            Some(e) if uid != 0 && e.uid != uid => fail(syndrome::foreign(kind)),
            Some(e) => Ok(e),
        }
    }

    /// An object `uid` may reference from another object: its own or one
    /// of the kernel's (uid 0: verbs objects and the device's EQs).
    pub(crate) fn usable(&self, n: u32, uid: u16) -> FwResult<&Entry<T>> {
        match self.map.get(&n) {
            None => fail(syndrome::not_found(self.kind)),
            Some(e) if uid != 0 && e.uid != 0 && e.uid != uid => fail(syndrome::foreign(self.kind)),
            Some(e) => Ok(e),
        }
    }

    /// Removes an object `uid` owns; refused while others reference it.
    pub(crate) fn remove(&mut self, n: u32, uid: u16) -> FwResult<T> {
        let e = self.owned(n, uid)?;
        if e.refs > 0 {
            return fail(syndrome::busy(self.kind));
        }
        Ok(self.take(n).expect("checked above"))
    }

    fn take(&mut self, n: u32) -> Option<T> {
        let e = self.map.remove(&n)?;
        if let Some(c) = self.per_uid.get_mut(&e.uid) {
            *c -= 1;
            if *c == 0 {
                self.per_uid.remove(&e.uid);
            }
        }
        Some(e.obj)
    }

    /// Every number owned by `uid` (teardown only: linear in the table).
    pub(crate) fn numbers_of(&self, uid: u16) -> Vec<u32> {
        if self.count_uid(uid) == 0 {
            return Vec::new();
        }
        self.map
            .iter()
            .filter(|(_, e)| e.uid == uid)
            .map(|(n, _)| *n)
            .collect()
    }

    /// Every live number (teardown only: linear in the table).
    pub(crate) fn numbers_of_all(&self) -> Vec<u32> {
        self.map.keys().copied().collect()
    }

    /// Removes an object regardless of references (teardown of a uid whose
    /// objects reference each other). Returns it so its holds can be released.
    pub(crate) fn force_remove(&mut self, n: u32) -> Option<T> {
        self.take(n)
    }
}

/// Reference counting seen through any table, so holders can release what
/// they hold without knowing the object types.
pub(crate) trait RefCounts {
    fn hold(&mut self, n: u32);
    fn release(&mut self, n: u32);
}

impl<T> RefCounts for Table<T> {
    fn hold(&mut self, n: u32) {
        if let Some(e) = self.map.get_mut(&n) {
            e.refs += 1;
        }
    }

    fn release(&mut self, n: u32) {
        if let Some(e) = self.map.get_mut(&n) {
            e.refs = e.refs.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_increase_wrap_and_skip_live_ones() {
        let mut t: Table<()> = Table::new(ObjKind::Pd, 1, 3, 10);
        assert_eq!(t.insert(5, ()).unwrap(), 1);
        assert_eq!(t.insert(5, ()).unwrap(), 2);
        t.remove(1, 5).unwrap();
        assert_eq!(t.insert(5, ()).unwrap(), 3);
        assert_eq!(t.insert(5, ()).unwrap(), 1);
        let full = t.insert(5, ()).unwrap_err();
        assert_eq!(full.status, syndrome::status::LIM);
    }

    #[test]
    fn ownership_and_references() {
        let mut t: Table<()> = Table::new(ObjKind::Cq, 1, 100, 100);
        let n = t.insert(7, ()).unwrap();
        assert_eq!(
            t.owned(n, 8).unwrap_err().syndrome,
            syndrome::foreign(ObjKind::Cq).syndrome
        );
        assert_eq!(
            t.owned(99, 7).unwrap_err().syndrome,
            syndrome::not_found(ObjKind::Cq).syndrome
        );
        t.hold(n);
        assert_eq!(
            t.remove(n, 7).unwrap_err().status,
            syndrome::status::RES_BUSY
        );
        t.release(n);
        t.remove(n, 7).unwrap();
        assert_eq!(t.count_uid(7), 0);
        let k = t.insert(0, ()).unwrap();
        assert!(t.usable(k, 9).is_ok());
        assert!(t.owned(k, 9).is_err());
    }
}
