//! What the engine resolved from the firmware tables (QP contexts with their
//! ring and doorbell spans, CQ memory, MKEY checks down to the backing UMEM
//! span), kept
//! for one firmware epoch. Every command bumps the epoch, so nothing cached
//! outlives a create, modify or destroy; in particular no span survives the
//! deregistration of its UMEM.

use super::cqe::{self, CqMemory};
use super::dma::Span;
use super::keys::{self, KeyFault, Need};
use super::queue::{self, QpView};
use crate::sim::fw::mkey::{self, mode, Access};
use crate::sim::fw::state::State;

/// Entries kept per kind before the cache starts over (a linear scan of a
/// few entries beats hashing; tests and benchmarks use a handful).
const MAX_ENTRIES: usize = 64;

/// A UMEM-backed MTT key that passed the variant and state checks.
#[derive(Debug, Clone, Copy)]
struct KeyInfo {
    pd: u32,
    access: Access,
    start_addr: u64,
    len: u64,
    /// The key's whole range in its UMEM; `None` without one (or when the
    /// tables disagree), and then every access takes the uncached path.
    span: Option<Span>,
}

#[derive(Default)]
pub(crate) struct Cache {
    epoch: Option<u64>,
    qps: Vec<QpView>,
    /// `None`: the CQ or its memory is gone.
    cqs: Vec<(u32, Option<CqMemory>)>,
    /// `None`: the key does not resolve (a [`KeyFault::BadKey`]).
    keys: Vec<(u32, Option<KeyInfo>)>,
    /// The last access that passed: its key, PD and need, and the key's
    /// range. A WQE after WQE names the same key from the same QP, so the
    /// next access then needs only its bounds checked.
    last: Option<Grant>,
}

/// A key that passed every check but the bounds for one PD and need (an
/// access [`Cache::resolve`] let through, or [`Cache::grant`]): what is
/// left to check of a later access with the same key, PD and need is its
/// range. Valid for the firmware epoch it was made in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    pub(crate) key: u32,
    pd: u32,
    need: Need,
    start_addr: u64,
    len: u64,
    span: Span,
}

impl Grant {
    /// `[addr, addr + len)` of the key's range, as [`Cache::resolve`]'s
    /// bounds check gives it.
    #[inline(always)]
    pub(crate) fn range(&self, addr: u64, len: u64) -> Result<Span, KeyFault> {
        let off = addr.checked_sub(self.start_addr).ok_or(KeyFault::Bounds)?;
        let end = off.checked_add(len).ok_or(KeyFault::Bounds)?;
        if end > self.len {
            return Err(KeyFault::Bounds);
        }
        // Inside the key's range, which lies inside its UMEM.
        let off = usize::try_from(off).map_err(|_| KeyFault::Bounds)?;
        let len = usize::try_from(len).map_err(|_| KeyFault::Bounds)?;
        self.span.sub(off, len).ok_or(KeyFault::Bounds)
    }
}

impl Cache {
    /// Forgets everything when the firmware changed since the last use.
    fn sync(&mut self, st: &State) {
        if self.epoch != Some(st.epoch) {
            self.qps.clear();
            self.cqs.clear();
            self.keys.clear();
            self.last = None;
            self.epoch = Some(st.epoch);
        }
    }

    /// [`queue::qp_view`], with the context's data-path fields (state and
    /// the consumer counters, which the engine itself changes) read fresh.
    pub(crate) fn qp_view(&mut self, st: &State, qpn: u32) -> Option<QpView> {
        self.qp_view_ref(st, qpn).copied()
    }

    /// [`Cache::qp_view`] in place, for a caller that reads a few fields.
    pub(crate) fn qp_view_ref(&mut self, st: &State, qpn: u32) -> Option<&QpView> {
        self.sync(st);
        let i = match self.qps.iter().position(|v| v.qpn == qpn) {
            Some(i) => {
                let q = &st.qp.peek(qpn)?.obj.qpc;
                let v = &mut self.qps[i];
                v.state = q.state();
                v.sq_ci = q.hw_sq_wqebb_counter();
                v.rq_ci = q.hw_rq_counter();
                i
            }
            None => {
                let v = queue::qp_view(st, qpn)?;
                if self.qps.len() >= MAX_ENTRIES {
                    self.qps.clear();
                }
                self.qps.push(v);
                self.qps.len() - 1
            }
        };
        self.qps.get(i)
    }

    /// [`cqe::memory`] of CQ `cqn`.
    pub(crate) fn cq_memory(&mut self, st: &State, cqn: u32) -> Option<CqMemory> {
        self.sync(st);
        if let Some((_, m)) = self.cqs.iter().find(|(n, _)| *n == cqn) {
            return *m;
        }
        let m = cqe::memory(st, cqn);
        if self.cqs.len() >= MAX_ENTRIES {
            self.cqs.clear();
        }
        self.cqs.push((cqn, m));
        m
    }

    /// [`keys::resolve`] with the key's lookup and UMEM resolution cached;
    /// the PD, access and bounds checks run on every call (the first two
    /// once for a run of accesses with the same key, PD and need). Inlined
    /// up to that repeat, which most accesses are.
    #[inline]
    pub(crate) fn resolve(
        &mut self,
        st: &State,
        key: u32,
        addr: u64,
        len: u64,
        pd: u32,
        need: Need,
    ) -> Result<Span, KeyFault> {
        if let Some(g) = self.last_for(st, key, pd, need) {
            return g.range(addr, len);
        }
        self.resolve_new(st, key, addr, len, pd, need)
    }

    /// [`Cache::resolve`] for an access unlike the last one.
    #[inline(never)]
    fn resolve_new(
        &mut self,
        st: &State,
        key: u32,
        addr: u64,
        len: u64,
        pd: u32,
        need: Need,
    ) -> Result<Span, KeyFault> {
        match self.pass(st, key, pd, need)? {
            Some(g) => g.range(addr, len),
            None => keys::resolve(st, key, addr, len, pd, need),
        }
    }

    /// `key` checked for `pd` and `need`, but not yet for an address
    /// range, for a run of accesses that only differ in their range:
    /// `None` when the key fails a check, or is one whose accesses always
    /// take the uncached path ([`keys::resolve`]); [`Cache::resolve`]
    /// tells those apart.
    #[inline]
    pub(crate) fn grant(&mut self, st: &State, key: u32, pd: u32, need: Need) -> Option<Grant> {
        if let Some(g) = self.last_for(st, key, pd, need) {
            return Some(g);
        }
        self.pass(st, key, pd, need).ok().flatten()
    }

    /// [`Cache::last`] when it is for `key`, `pd` and `need` in this epoch.
    #[inline(always)]
    fn last_for(&self, st: &State, key: u32, pd: u32, need: Need) -> Option<Grant> {
        if self.epoch != Some(st.epoch) {
            return None;
        }
        self.last
            .filter(|g| (g.key, g.pd, g.need) == (key, pd, need))
    }

    /// The checks of [`Cache::resolve`] but the bounds; `Ok(None)` for a
    /// key without a cached span. A key that passes becomes
    /// [`Cache::last`].
    fn pass(
        &mut self,
        st: &State,
        key: u32,
        pd: u32,
        need: Need,
    ) -> Result<Option<Grant>, KeyFault> {
        self.sync(st);
        let info = match self.keys.iter().find(|(k, _)| *k == key) {
            Some((_, i)) => *i,
            None => {
                let i = key_info(st, key);
                if self.keys.len() >= MAX_ENTRIES {
                    self.keys.clear();
                }
                self.keys.push((key, i));
                i
            }
        };
        let m = info.ok_or(KeyFault::BadKey)?;
        let Some(span) = m.span else {
            return Ok(None);
        };
        if m.pd != pd {
            return Err(KeyFault::Pd);
        }
        if !keys::granted(m.access, need) {
            return Err(KeyFault::Access);
        }
        let grant = Grant {
            key,
            pd,
            need,
            start_addr: m.start_addr,
            len: m.len,
            span,
        };
        self.last = Some(grant);
        Ok(Some(grant))
    }
}

/// The parts of `key` that [`keys::resolve`] checks the same way for every
/// access.
fn key_info(st: &State, key: u32) -> Option<KeyInfo> {
    let m = mkey::lookup(st, key)?;
    if super::umr::is_window(m) {
        let (access, span) = super::umr::window_info(st, m)?;
        return Some(KeyInfo {
            pd: m.pd,
            access,
            start_addr: m.start_addr,
            len: m.len,
            span: Some(span),
        });
    }
    if m.mkc.free() == 1 || m.mode != mode::MTT {
        return None;
    }
    let span = m.umem.and_then(|(umem_id, base)| {
        let umem = st.umem.peek(umem_id)?;
        Span::of_umem(&umem.obj, base, m.len)
    });
    Some(KeyInfo {
        pd: m.pd,
        access: m.access,
        start_addr: m.start_addr,
        len: m.len,
        span,
    })
}
