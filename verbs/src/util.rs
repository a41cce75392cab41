//! Pieces every object builder shares: queue memory, doorbell records, and the
//! holder that destroys a firmware object before releasing what it points at.

use devx::{Obj, Umem};
use memmap2::MmapMut;

use std::sync::Arc;

use zerocopy::{FromBytes, Immutable, KnownLayout};

use crate::error::{Error, Result, VerbResult};
use crate::exec::Exec;

/// Smallest power of two ≥ `n` (≥ 1), or `None` past `u32`.
pub(crate) fn pow2_at_least(n: u32) -> Option<u32> {
    n.max(1).checked_next_power_of_two()
}

/// log2 of a power of two.
pub(crate) fn log2(n: u32) -> u32 {
    31 - n.max(1).leading_zeros()
}

/// `ceil(log2(n))` as the PRM's `log_*_max` fields want (0 for 0 and 1).
pub(crate) fn log2_ceil(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

/// Zeroed, page-aligned anonymous memory for a queue the device reads or writes.
pub(crate) fn queue_memory(verb: &'static str, len: usize) -> Result<MmapMut> {
    MmapMut::map_anon(len.max(1)).map_err(|e| Error::Device {
        verb,
        source: devx::Error::os(
            "mmap queue memory",
            e.raw_os_error().unwrap_or(libc::ENOMEM),
        ),
    })
}

/// Where a queue lives in this process, for code that writes WQEs or reads
/// CQEs itself (the data path, or a caller mixing in raw DEVX work).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueMemory {
    /// First byte of the ring.
    pub addr: usize,
    /// Ring bytes (`entries * stride`).
    pub len: usize,
    /// Entries in the ring (a power of two; 0 if the queue is absent).
    pub entries: u32,
    /// Bytes per entry (CQE, RQ WQE, SQ WQEBB, SRQ WQE).
    pub stride: u32,
    /// Address of the doorbell record (8 bytes, big-endian counters).
    pub doorbell_record: usize,
}

/// A doorbell record: 8 bytes (64 reserved, page aligned) in a UMEM of its own,
/// so it outlives any buffer swap of its queue (CQ resize).
pub(crate) struct DoorbellRecord {
    umem: Umem<MmapMut>,
}

impl DoorbellRecord {
    pub(crate) const LEN: usize = 64;

    pub(crate) async fn new(
        verb: &'static str,
        ctx: &devx::Context,
        exec: Exec<'_>,
    ) -> Result<DoorbellRecord> {
        let mem = queue_memory(verb, Self::LEN)?;
        let umem = exec
            .register(ctx, mem, devx::access::LOCAL_WRITE)
            .await
            .verb(verb)?;
        Ok(DoorbellRecord { umem })
    }

    /// The umem id for `*.dbr_umem_id`; the record sits at offset 0 (`dbr_addr`).
    pub(crate) fn umem_id(&self) -> u32 {
        self.umem.id()
    }

    /// Where the record lives in this process.
    pub(crate) fn addr(&self) -> usize {
        self.umem.addr()
    }
}

/// A destroy the device refused: the holder, intact, and why.
pub(crate) type Refused<R> = Box<(Owned<R>, devx::Error)>;

/// A firmware object together with what it uses (queue memory, UMEMs, UAR,
/// parent objects). The object is destroyed first; only then is the rest
/// released. If the device refuses the destroy, the DEVX context destroys
/// the object again once what holds it is gone, and the UMEMs it still uses
/// stay registered, their memory kept by the context until then: nothing is
/// freed under the device, and nothing stays leaked once its users are gone.
pub(crate) struct Owned<R> {
    obj: Option<Obj>,
    deps: Option<R>,
}

impl<R> Owned<R> {
    pub(crate) fn new(obj: Obj, deps: R) -> Owned<R> {
        Owned {
            obj: Some(obj),
            deps: Some(deps),
        }
    }

    pub(crate) fn obj(&self) -> &Obj {
        // Both are Some from construction until `destroy`/drop consume self.
        self.obj.as_ref().expect("object present while owned")
    }

    pub(crate) fn deps(&self) -> &R {
        self.deps
            .as_ref()
            .expect("dependencies present while owned")
    }

    /// The PRM object number.
    pub(crate) fn id(&self) -> u32 {
        self.obj().id()
    }

    /// The object and its dependencies, for a caller that destroys the
    /// object (through an [`crate::exec::Exec`]) before releasing them.
    pub(crate) fn into_parts(mut self) -> (Obj, R) {
        match (self.obj.take(), self.deps.take()) {
            (Some(obj), Some(deps)) => (obj, deps),
            _ => unreachable!("both are present from construction until consumed"),
        }
    }

    /// Destroys the object now, then releases its dependencies. On refusal the
    /// holder comes back intact.
    pub(crate) fn destroy(mut self) -> std::result::Result<(), Refused<R>> {
        let Some(obj) = self.obj.take() else {
            return Ok(());
        };
        match obj.destroy() {
            Ok(()) => Ok(()),
            Err(failed) => {
                self.obj = Some(*failed.obj);
                Err(Box::new((self, failed.error)))
            }
        }
    }
}

impl<R> Drop for Owned<R> {
    fn drop(&mut self) {
        // The object goes first (a refusal leaves it to the context), then
        // `deps`: a UMEM the object still uses refuses its deregistration
        // and the context keeps its memory.
        drop(self.obj.take());
        drop(self.deps.take());
    }
}

/// The typed view of an outbox, or an error naming the command that returned
/// too few bytes.
pub(crate) fn outbox<'a, T>(verb: &'static str, what: &str, out: &'a [u8]) -> Result<&'a T>
where
    T: FromBytes + KnownLayout + Immutable,
{
    T::ref_from_prefix(out)
        .map(|(t, _)| t)
        .map_err(|_| Error::Device {
            verb,
            source: devx::Error::argument(format!("{what} returned a short outbox")),
        })
}

/// Takes sole ownership of what an object shares with its users before it is
/// destroyed; while others still hold it, says how many as a `Busy` error.
pub(crate) fn sole<T>(
    shared: Arc<T>,
    verb: &'static str,
    what: &'static str,
) -> std::result::Result<T, (Arc<T>, Error)> {
    Arc::try_unwrap(shared).map_err(|shared| {
        let users = Arc::strong_count(&shared) - 1;
        (shared, Error::Busy { verb, what, users })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_and_powers() {
        assert_eq!(pow2_at_least(0), Some(1));
        assert_eq!(pow2_at_least(5), Some(8));
        assert_eq!(pow2_at_least(u32::MAX), None);
        assert_eq!(log2(1), 0);
        assert_eq!(log2(4096), 12);
        assert_eq!(log2_ceil(0), 0);
        assert_eq!(log2_ceil(1), 0);
        assert_eq!(log2_ceil(2), 1);
        assert_eq!(log2_ceil(3), 2);
        assert_eq!(log2_ceil(16), 4);
    }
}
