//! The uverbs character device `/dev/infiniband/uverbsN` as Linux 6.1's
//! uverbs core and mlx5_ib answer it, served by the emulated device.

use std::os::fd::RawFd;

use crate::state::{self, Shown};

/// One open uverbs file.
pub struct UverbsFile {
    /// N of `uverbsN`.
    pub uverbs_index: u32,
    /// The eventfd the program holds for this file.
    pub fd: RawFd,
}

impl UverbsFile {
    pub fn new(uverbs_index: u32, fd: RawFd) -> UverbsFile {
        UverbsFile { uverbs_index, fd }
    }

    /// The device this file was opened on.
    pub fn device(&self) -> Option<&'static Shown> {
        state::get().device(self.uverbs_index)
    }
}

impl UverbsFile {
    /// `ioctl(fd, request, arg)` on this file: Ok(return value) or Err(errno).
    ///
    /// # Safety
    /// `arg` is what the caller passed for `request`.
    pub unsafe fn ioctl(&self, request: std::ffi::c_ulong, arg: *mut u8) -> Result<i32, i32> {
        let _ = arg;
        state::log(|| {
            format!(
                "ioctl {request:#x} on uverbs{}: not supported",
                self.uverbs_index
            )
        });
        Err(libc::ENOTTY)
    }

    /// Legacy `write()` command.
    ///
    /// # Safety
    /// `buf` is readable for `count` bytes.
    pub unsafe fn write(&self, buf: *const u8, count: usize) -> Result<usize, i32> {
        let _ = (buf, count);
        Err(libc::EINVAL)
    }

    /// `mmap` of this file.
    pub fn mmap(
        &self,
        addr: *mut u8,
        len: usize,
        prot: i32,
        flags: i32,
        off: i64,
    ) -> Result<*mut u8, i32> {
        let _ = (addr, len, prot, flags, off);
        Err(libc::EINVAL)
    }
}

/// `munmap` of a page the library mapped: true when it was ours.
pub fn unmap(addr: *mut u8, len: usize) -> bool {
    let _ = (addr, len);
    false
}
