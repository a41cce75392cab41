//! The only door to the operating system: every system call the kernel
//! provider makes goes through [`Sys`], so tests can put a fake kernel behind it.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

pub use nix::errno::Errno;

/// Result of one system call.
pub type SysResult<T> = std::result::Result<T, Errno>;

/// The system calls the kernel provider needs, nothing more.
///
/// The real implementation is [`RealSys`]; `fake::FakeKernel` (feature
/// `fake-kernel`) is a test double that answers like the kernel's uverbs and
/// mlx5 DEVX layers.
pub trait Sys: Send + Sync {
    /// `open(2)`; returns the new descriptor.
    fn open(&self, path: &Path, flags: i32) -> SysResult<RawFd>;

    /// `close(2)`.
    fn close(&self, fd: RawFd) -> SysResult<()>;

    /// `ioctl(2)` with a pointer argument; returns the (non-negative) result.
    ///
    /// # Safety
    /// For `RDMA_VERBS_IOCTL`, `arg` points to a writable `ib_uverbs_ioctl_hdr`
    /// followed by its attributes (`hdr.length` bytes in all), and every
    /// pointer-carrying attribute points to memory valid for its `len` bytes
    /// (writable for outputs) until the call returns.
    unsafe fn ioctl(&self, fd: RawFd, request: u64, arg: *mut u8) -> SysResult<i32>;

    /// `write(2)`; returns the byte count written.
    ///
    /// # Safety
    /// A uverbs write command embeds a response pointer; it must be valid for
    /// writes of the response length the command states, until the call returns.
    unsafe fn write(&self, fd: RawFd, buf: &[u8]) -> SysResult<usize>;

    /// `read(2)`; returns the byte count read.
    fn read(&self, fd: RawFd, buf: &mut [u8]) -> SysResult<usize>;

    /// `mmap(2)` at an address the system chooses (never `MAP_FIXED`).
    fn mmap(
        &self,
        len: usize,
        prot: i32,
        flags: i32,
        fd: RawFd,
        offset: i64,
    ) -> SysResult<NonNull<u8>>;

    /// `munmap(2)`.
    ///
    /// # Safety
    /// `addr`/`len` describe a mapping returned by [`Sys::mmap`] on this same
    /// implementation that nothing uses any more.
    unsafe fn munmap(&self, addr: NonNull<u8>, len: usize) -> SysResult<()>;

    /// `poll(2)` on one descriptor; returns its `revents` (0 on timeout).
    fn poll(&self, fd: RawFd, events: i16, timeout_ms: i32) -> SysResult<i16>;

    /// `fcntl(F_SETFL, flags | O_NONBLOCK)`.
    fn set_nonblocking(&self, fd: RawFd) -> SysResult<()>;
}

/// The real system calls, through libc.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealSys;

/// The shared [`RealSys`] instance.
pub fn real() -> Arc<dyn Sys> {
    static REAL: OnceLock<Arc<dyn Sys>> = OnceLock::new();
    REAL.get_or_init(|| Arc::new(RealSys)).clone()
}

fn check(ret: libc::c_int) -> SysResult<libc::c_int> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

fn check_size(ret: libc::ssize_t) -> SysResult<usize> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret as usize)
    }
}

impl Sys for RealSys {
    fn open(&self, path: &Path, flags: i32) -> SysResult<RawFd> {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
        loop {
            // SAFETY: `c` is a NUL-terminated path that outlives the call.
            match check(unsafe { libc::open(c.as_ptr(), flags) }) {
                Err(Errno::EINTR) => continue,
                r => return r,
            }
        }
    }

    fn close(&self, fd: RawFd) -> SysResult<()> {
        // SAFETY: closing a descriptor has no memory-safety preconditions; the
        // provider closes only descriptors it owns.
        check(unsafe { libc::close(fd) }).map(|_| ())
    }

    unsafe fn ioctl(&self, fd: RawFd, request: u64, arg: *mut u8) -> SysResult<i32> {
        loop {
            // SAFETY: the caller upholds this method's contract for `arg`.
            match check(unsafe { libc::ioctl(fd, request as _, arg) }) {
                Err(Errno::EINTR) => continue,
                r => return r,
            }
        }
    }

    unsafe fn write(&self, fd: RawFd, buf: &[u8]) -> SysResult<usize> {
        // SAFETY: `buf` is valid for reads of its length; embedded pointers
        // are the caller's responsibility per this method's contract.
        check_size(unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) })
    }

    fn read(&self, fd: RawFd, buf: &mut [u8]) -> SysResult<usize> {
        loop {
            // SAFETY: `buf` is valid for writes of its length.
            match check_size(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) }) {
                Err(Errno::EINTR) => continue,
                r => return r,
            }
        }
    }

    fn mmap(
        &self,
        len: usize,
        prot: i32,
        flags: i32,
        fd: RawFd,
        offset: i64,
    ) -> SysResult<NonNull<u8>> {
        if flags & libc::MAP_FIXED != 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: a null hint without MAP_FIXED lets the kernel pick unused
        // address space, so no existing memory is replaced.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                flags,
                fd,
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        NonNull::new(p.cast()).ok_or(Errno::ENOMEM)
    }

    unsafe fn munmap(&self, addr: NonNull<u8>, len: usize) -> SysResult<()> {
        // SAFETY: the caller guarantees the mapping is ours and unused.
        check(unsafe { libc::munmap(addr.as_ptr().cast(), len) }).map(|_| ())
    }

    fn poll(&self, fd: RawFd, events: i16, timeout_ms: i32) -> SysResult<i16> {
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd, count 1.
        let n = check(unsafe { libc::poll(&mut p, 1, timeout_ms) })?;
        Ok(if n == 0 { 0 } else { p.revents })
    }

    fn set_nonblocking(&self, fd: RawFd) -> SysResult<()> {
        // SAFETY: F_GETFL/F_SETFL take integer arguments only.
        let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
        // SAFETY: as above.
        check(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(|_| ())
    }
}
