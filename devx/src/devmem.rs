//! Copies between Rust buffers and memory registered with the device.
//!
//! Registered memory is bytes shared with the device, which may read or
//! write them at any time; safe code never holds a Rust reference into
//! writable registered memory. It copies bytes in and out instead, each byte
//! with a relaxed atomic access: never a data race in Rust's memory model,
//! whatever other threads do, and every byte is loaded or stored exactly
//! once (the compiler may not cache or elide it). Bytes read while the
//! device writes them may mix old and new values; read after the completion.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::{Error, Result};

/// Checks that `[offset, offset + len)` lies inside `size` bytes.
pub(crate) fn check(what: &str, offset: usize, len: usize, size: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::argument(format!(
            "{what}: {len} bytes at offset {offset} run past the end of the {size}-byte registration"
        ))),
    }
}

/// The byte at `base + i` as an atomic.
///
/// # Safety
/// `base + i` must be mapped and stay mapped while the returned reference is
/// used, and be accessed by other Rust code only through atomics or copies
/// that cannot race with it (the device's own accesses are outside Rust).
unsafe fn byte<'a>(base: usize, i: usize) -> &'a AtomicU8 {
    // SAFETY: the caller vouches for the address; any byte is aligned for AtomicU8.
    unsafe { AtomicU8::from_ptr((base + i) as *mut u8) }
}

/// Copies `out.len()` bytes from `base`.
///
/// # Safety
/// `[base, base + out.len())` must be registered memory that stays mapped
/// for the call and that no Rust reference covers mutably.
pub(crate) unsafe fn copy_out(base: usize, out: &mut [u8]) {
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: inside the range the caller vouched for.
        *o = unsafe { byte(base, i) }.load(Ordering::Relaxed);
    }
}

/// Copies `data` to `base`.
///
/// # Safety
/// `[base, base + data.len())` must be registered memory the registration
/// owns exclusively (no Rust reference to it exists) and that stays mapped
/// for the call.
pub(crate) unsafe fn copy_in(base: usize, data: &[u8]) {
    for (i, &d) in data.iter().enumerate() {
        // SAFETY: inside the range the caller vouched for.
        unsafe { byte(base, i) }.store(d, Ordering::Relaxed);
    }
}

/// Stores `value` into `len` bytes at `base`.
///
/// # Safety
/// As for [`copy_in`], over `[base, base + len)`.
pub(crate) unsafe fn fill(base: usize, len: usize, value: u8) {
    for i in 0..len {
        // SAFETY: inside the range the caller vouched for.
        unsafe { byte(base, i) }.store(value, Ordering::Relaxed);
    }
}
