//! What a command handler gets (the inbox and its header) and how it fails.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::sim::syndrome::{self, Check};

/// A firmware failure: the status and syndrome written to the outbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FwError {
    pub(crate) status: u8,
    pub(crate) syndrome: u32,
}

impl From<Check> for FwError {
    fn from(c: Check) -> FwError {
        FwError {
            status: c.status,
            syndrome: c.syndrome,
        }
    }
}

pub(crate) type FwResult<T = ()> = Result<T, FwError>;

/// Fails with `check`.
pub(crate) fn fail<T>(check: Check) -> FwResult<T> {
    Err(check.into())
}

/// `Ok` when `cond` holds, else fails with `check`.
pub(crate) fn ensure(cond: bool, check: Check) -> FwResult {
    if cond {
        Ok(())
    } else {
        Err(check.into())
    }
}

/// One command as the firmware sees it. The inbox is at least as long as
/// the command's `*_in` layout (the dispatcher checked).
pub(crate) struct Cmd<'a> {
    pub(crate) inbox: &'a [u8],
    pub(crate) opcode: u16,
    pub(crate) op_mod: u16,
    /// The uid the kernel stamped (0 = the kernel itself).
    pub(crate) uid: u16,
}

impl<'a> Cmd<'a> {
    /// Typed view of the inbox's fixed part.
    pub(crate) fn view<T: FromBytes + KnownLayout + Immutable>(&self) -> FwResult<&'a T> {
        T::ref_from_prefix(self.inbox)
            .map(|(t, _)| t)
            .map_err(|_| syndrome::INBOX_SHORT.into())
    }

    /// Bytes after the fixed part of layout `T` (the flexible tail).
    pub(crate) fn tail<T: KnownLayout + Immutable + FromBytes>(&self) -> &'a [u8] {
        self.inbox.get(core::mem::size_of::<T>()..).unwrap_or(&[])
    }
}

/// Typed view of an outbox's fixed part.
pub(crate) fn out_view<T: FromBytes + IntoBytes + KnownLayout>(out: &mut [u8]) -> FwResult<&mut T> {
    T::mut_from_prefix(out)
        .map(|(t, _)| t)
        .map_err(|_| syndrome::OUTBOX_SHORT.into())
}

/// Copies `bytes` into `out` at `at`, failing when the outbox is too short.
pub(crate) fn put(out: &mut [u8], at: usize, bytes: &[u8]) -> FwResult {
    let end = at
        .checked_add(bytes.len())
        .ok_or(FwError::from(syndrome::OUTBOX_SHORT))?;
    match out.get_mut(at..end) {
        Some(dst) => {
            dst.copy_from_slice(bytes);
            Ok(())
        }
        None => fail(syndrome::OUTBOX_SHORT),
    }
}
