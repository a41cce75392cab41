//! Copies to and from the caller's memory named by ioctl attributes.
//!
//! The kernel answers EFAULT for a bad user pointer instead of crashing;
//! so does this: copies go through `process_vm_readv`/`process_vm_writev`
//! on our own process, which fail with EFAULT on unmapped memory. Where
//! those calls are not allowed (some seccomp profiles), plain copies are
//! used and a bad pointer is the program's own fault, as with any libc call.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set once `process_vm_*` turned out to be unavailable.
static DIRECT: AtomicBool = AtomicBool::new(false);

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Whether the errno means "this system call is not allowed here".
fn unavailable(e: i32) -> bool {
    e == libc::ENOSYS || e == libc::EPERM
}

/// Reads `len` bytes at `addr`.
pub fn read(addr: u64, len: usize) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; len];
    if len == 0 {
        return Ok(buf);
    }
    if addr == 0 {
        return Err(libc::EFAULT);
    }
    if !DIRECT.load(Ordering::Relaxed) {
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: `local` is our own buffer of `len` bytes; the kernel checks
        // `remote` and fails with EFAULT instead of touching bad memory.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n == len as isize {
            return Ok(buf);
        }
        let e = if n < 0 { errno() } else { libc::EFAULT };
        if !unavailable(e) {
            return Err(e);
        }
        DIRECT.store(true, Ordering::Relaxed);
    }
    // SAFETY: the program passed `addr` as `len` readable bytes (the ioctl
    // contract); process_vm_readv, which would have checked, is not allowed.
    unsafe { std::ptr::copy_nonoverlapping(addr as usize as *const u8, buf.as_mut_ptr(), len) };
    Ok(buf)
}

/// Writes `bytes` at `addr`.
pub fn write(addr: u64, bytes: &[u8]) -> Result<(), i32> {
    if bytes.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(libc::EFAULT);
    }
    if !DIRECT.load(Ordering::Relaxed) {
        let local = libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        // SAFETY: `local` is only read; the kernel checks `remote`.
        let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n == bytes.len() as isize {
            return Ok(());
        }
        let e = if n < 0 { errno() } else { libc::EFAULT };
        if !unavailable(e) {
            return Err(e);
        }
        DIRECT.store(true, Ordering::Relaxed);
    }
    // SAFETY: the program passed `addr` as writable output of this length.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as usize as *mut u8, bytes.len()) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_round_trip_and_bad_pointers_fail() {
        let src = [1u8, 2, 3, 4, 5];
        assert_eq!(read(src.as_ptr() as u64, 5).unwrap(), src);
        let mut dst = [0u8; 3];
        write(dst.as_mut_ptr() as u64, &[7, 8, 9]).unwrap();
        assert_eq!(dst, [7, 8, 9]);
        assert_eq!(read(0, 4), Err(libc::EFAULT));
        assert_eq!(write(0, &[1]), Err(libc::EFAULT));
        if !DIRECT.load(Ordering::Relaxed) {
            // Page 1 is never mapped.
            assert_eq!(read(4096, 8), Err(libc::EFAULT));
        }
    }
}
