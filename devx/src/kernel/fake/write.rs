//! The legacy write() command path: only GET_CONTEXT, as kernels without
//! the ioctl method offer it.

use std::os::fd::RawFd;

use super::methods::alloc_ucontext;
use super::state::FdState;
use super::FakeKernel;
use crate::kernel::abi::{self, verbs, ALLOC_UCONTEXT_RESP_LEN};
use crate::kernel::sys::{Errno, SysResult};

impl FakeKernel {
    /// Runs one uverbs write() command.
    ///
    /// # Safety
    /// As [`Sys::write`](crate::kernel::Sys::write).
    pub(super) unsafe fn uverbs_write(&self, fd: RawFd, buf: &[u8]) -> SysResult<usize> {
        let mut s = self.lock();
        s.writes.push(buf.to_vec());
        let file = match s.fds.get(&fd) {
            Some(FdState::Uverbs { file }) => *file,
            Some(_) => return Err(Errno::EINVAL),
            None => return Err(Errno::EBADF),
        };
        if buf.len() < 8 {
            return Err(Errno::EINVAL);
        }
        let command = abi::ne32(buf, 0);
        let in_words = abi::ne16(buf, 4) as usize;
        let out_words = abi::ne16(buf, 6) as usize;
        if in_words * 4 != buf.len() {
            return Err(Errno::EINVAL);
        }
        if command != verbs::IB_USER_VERBS_CMD_GET_CONTEXT {
            return Err(Errno::EOPNOTSUPP);
        }
        if buf.len() < 16 || out_words * 4 < 8 {
            return Err(Errno::ENOSPC);
        }
        if s.files.get(&file).is_some_and(|f| f.ctx.is_some()) {
            return Err(Errno::EINVAL);
        }
        let resp_ptr = abi::ne64(buf, 8);
        if resp_ptr == 0 {
            return Err(Errno::EFAULT);
        }
        let (resp, devx) = alloc_ucontext(&s.cfg, &buf[16..])?;
        let afd = Self::alloc_fd(&mut s, FdState::verbs_async());
        let mut out = Vec::with_capacity(8 + ALLOC_UCONTEXT_RESP_LEN);
        out.extend_from_slice(&(afd as u32).to_ne_bytes());
        out.extend_from_slice(&s.cfg.num_comp_vectors.to_ne_bytes());
        out.extend_from_slice(&resp.to_bytes());
        let n = out.len().min(out_words * 4);
        // SAFETY: the write() contract makes the response pointer valid for
        // `out_words * 4` bytes; `n` does not exceed that.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), resp_ptr as *mut u8, n) };
        if let Some(f) = s.files.get_mut(&file) {
            f.ctx = Some(devx);
        }
        Ok(buf.len())
    }
}
