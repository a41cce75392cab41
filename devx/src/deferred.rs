//! Releases the device refused, kept until it lets go.
//!
//! A UMEM whose deregistration is refused (a CQ, QP or MKEY still lives in
//! it) must stay mapped: the device may still write it. Its memory moves
//! here, type-erased, together with its handle; so does an object whose
//! destroy was refused when its owner dropped it. After every successful
//! destroy or modify (a resize lets go of the old ring) the context retries
//! what it keeps (objects first, newest first, then UMEMs), and so does each
//! new keep (the last user may have gone just before), so each release
//! happens as soon as its last user is gone.
//! Whatever is still kept when the context closes is freed only after the
//! provider closed it, which destroys every object and UMEM of the context.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::provider::{Handle, ProviderContext};

/// A UMEM the device still uses: its handle and the memory, kept alive.
struct KeptUmem {
    handle: Handle,
    /// Dropped only once the deregistration succeeded or the context closed.
    _memory: Box<dyn Send>,
}

/// An object whose destroy was refused: its handle and destroy command.
struct KeptObj {
    handle: Handle,
    destroy_in: Vec<u8>,
}

#[derive(Default)]
struct Kept {
    objs: Vec<KeptObj>,
    umems: Vec<KeptUmem>,
}

/// The per-context list of refused releases.
#[derive(Default)]
pub(crate) struct Deferred {
    kept: Mutex<Kept>,
    /// Something is kept; written under the lock, read without it so a
    /// retry with nothing to do costs one load.
    any: AtomicBool,
}

impl Deferred {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        // A panic while holding the lock leaves the lists intact (pushes and
        // removals are single operations), so a poisoned lock is still usable.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `memory`, registered as UMEM `handle`, until its
    /// deregistration succeeds or the context closes.
    pub(crate) fn keep_umem(&self, handle: Handle, memory: Box<dyn Send>) {
        let mut k = self.lock();
        k.umems.push(KeptUmem {
            handle,
            _memory: memory,
        });
        self.any.store(true, Ordering::Release);
    }

    /// Keeps an object the device refused to destroy, to destroy it again
    /// once what holds it is gone.
    pub(crate) fn keep_obj(&self, handle: Handle, destroy_in: Vec<u8>) {
        let mut k = self.lock();
        k.objs.push(KeptObj { handle, destroy_in });
        self.any.store(true, Ordering::Release);
    }

    /// How many UMEMs and objects are kept (for tests and tools).
    pub(crate) fn counts(&self) -> (usize, usize) {
        let k = self.lock();
        (k.umems.len(), k.objs.len())
    }

    /// Retries every kept release until a round frees nothing more. Memory
    /// whose UMEM came free is dropped after the lock is released.
    pub(crate) fn retry(&self, provider: &dyn ProviderContext) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut freed = Vec::new();
        {
            let mut k = self.lock();
            loop {
                let before = k.objs.len() + k.umems.len();
                // Newest first: a later object may hold an earlier one.
                let mut i = k.objs.len();
                while i > 0 {
                    i -= 1;
                    let o = &k.objs[i];
                    if provider.destroy(o.handle, &o.destroy_in).is_ok() {
                        k.objs.remove(i);
                    }
                }
                let mut i = 0;
                while i < k.umems.len() {
                    if provider.umem_dereg(k.umems[i].handle).is_ok() {
                        freed.push(k.umems.swap_remove(i));
                    } else {
                        i += 1;
                    }
                }
                if k.objs.len() + k.umems.len() == before {
                    break;
                }
            }
            self.any.store(
                !(k.objs.is_empty() && k.umems.is_empty()),
                Ordering::Release,
            );
        }
        drop(freed);
    }

    /// At context close, when the provider context did not close (something
    /// else still holds it): the device may still use the memory, so it is
    /// leaked rather than freed.
    pub(crate) fn leak(&self) {
        let k = std::mem::take(&mut *self.lock());
        self.any.store(false, Ordering::Release);
        std::mem::forget(k.umems);
    }
}
