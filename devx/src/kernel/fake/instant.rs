//! [`InstantKernel`]: answers every call with success at once, to measure
//! the provider's own overhead.

use std::os::fd::RawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use super::FIRST_FAKE_FD;
use crate::kernel::abi::{IoctlAttr, IoctlHdr, HDR_LEN, RDMA_VERBS_IOCTL};
use crate::kernel::sys::{Errno, Sys, SysResult};

/// A kernel that answers every call with success at once: new handles are a
/// counter, outputs stay as the caller left them. Measures the provider's own
/// overhead. A test double: not for production use.
#[derive(Debug, Default)]
pub struct InstantKernel {
    next: AtomicU64,
}

impl InstantKernel {
    pub fn new() -> InstantKernel {
        InstantKernel::default()
    }
}

impl Sys for InstantKernel {
    fn open(&self, _path: &Path, _flags: i32) -> SysResult<RawFd> {
        Ok(FIRST_FAKE_FD)
    }

    fn close(&self, _fd: RawFd) -> SysResult<()> {
        Ok(())
    }

    unsafe fn ioctl(&self, _fd: RawFd, request: u64, arg: *mut u8) -> SysResult<i32> {
        if request != RDMA_VERBS_IOCTL || arg.is_null() {
            return Err(Errno::ENOTTY);
        }
        // SAFETY: the contract makes `arg` a readable header.
        let hdr: IoctlHdr = unsafe { std::ptr::read_unaligned(arg.cast()) };
        if hdr.num_attrs > 0 {
            // SAFETY: the contract makes the first attribute writable.
            let first = unsafe { arg.add(HDR_LEN) }.cast::<IoctlAttr>();
            // SAFETY: as above; unaligned access since the caller's buffer
            // alignment is not part of the contract.
            let mut a: IoctlAttr = unsafe { std::ptr::read_unaligned(first) };
            if a.len == 0 && a.data == 0 {
                a.data = self.next.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff;
                // SAFETY: as above.
                unsafe { std::ptr::write_unaligned(first, a) };
            }
        }
        Ok(0)
    }

    unsafe fn write(&self, _fd: RawFd, buf: &[u8]) -> SysResult<usize> {
        Ok(buf.len())
    }

    fn read(&self, _fd: RawFd, _buf: &mut [u8]) -> SysResult<usize> {
        Err(Errno::EAGAIN)
    }

    fn mmap(
        &self,
        _len: usize,
        _prot: i32,
        _flags: i32,
        _fd: RawFd,
        _offset: i64,
    ) -> SysResult<NonNull<u8>> {
        Err(Errno::ENODEV)
    }

    unsafe fn munmap(&self, _addr: NonNull<u8>, _len: usize) -> SysResult<()> {
        Ok(())
    }

    fn poll(&self, _fd: RawFd, _events: i16, _timeout_ms: i32) -> SysResult<i16> {
        Ok(0)
    }

    fn set_nonblocking(&self, _fd: RawFd) -> SysResult<()> {
        Ok(())
    }
}
