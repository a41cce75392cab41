//! [`Sys`] for [`FakeKernel`]: open and close of uverbs files, ioctl and
//! write entry, reads and polls of the async fds, and UAR mmap.

use std::os::fd::RawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use super::state::{FakeObj, FdState, Mapping, UFile};
use super::{FakeKernel, MAX_POLL_WAIT};
use crate::kernel::sys::{Errno, Sys, SysResult};

impl Sys for FakeKernel {
    fn open(&self, path: &Path, flags: i32) -> SysResult<RawFd> {
        let mut s = self.lock();
        s.opened.push((path.to_path_buf(), flags));
        if let Some(e) = s.open_error.take() {
            return Err(e);
        }
        if flags & libc::O_ACCMODE != libc::O_RDWR || flags & libc::O_CLOEXEC == 0 {
            s.violations.push(format!(
                "open({}) with flags {flags:#x}, rdma-core uses O_RDWR|O_CLOEXEC",
                path.display()
            ));
        }
        let file = s.next_file;
        s.next_file += 1;
        s.files.insert(file, UFile::default());
        Ok(Self::alloc_fd(&mut s, FdState::Uverbs { file }))
    }

    fn close(&self, fd: RawFd) -> SysResult<()> {
        let mut s = self.lock();
        match s.fds.remove(&fd) {
            None => Err(Errno::EBADF),
            Some(FdState::Uverbs { file }) => {
                if let Some(f) = s.files.remove(&file) {
                    s.destroyed_on_close += f.objects.len();
                }
                Ok(())
            }
            Some(FdState::AsyncEvent { .. }) => {
                s.subs.retain(|sub| sub.event_fd != fd);
                Ok(())
            }
            Some(_) => Ok(()),
        }
    }

    unsafe fn ioctl(&self, fd: RawFd, request: u64, arg: *mut u8) -> SysResult<i32> {
        // SAFETY: forwarded contract.
        unsafe { self.uverbs_ioctl(fd, request, arg) }
    }

    unsafe fn write(&self, fd: RawFd, buf: &[u8]) -> SysResult<usize> {
        // SAFETY: forwarded contract.
        unsafe { self.uverbs_write(fd, buf) }
    }

    fn read(&self, fd: RawFd, buf: &mut [u8]) -> SysResult<usize> {
        let mut s = self.lock();
        if let Some(q) = s.raw_reads.get_mut(&fd) {
            if let Some(answer) = q.pop_front() {
                let bytes = answer?;
                let n = bytes.len().min(buf.len());
                buf[..n].copy_from_slice(&bytes[..n]);
                return Ok(n);
            }
        }
        match s.fds.get_mut(&fd) {
            None => Err(Errno::EBADF),
            Some(FdState::AsyncCmd {
                queue,
                bytes,
                nonblock,
                ..
            }) => {
                let Some(head) = queue.front() else {
                    if !*nonblock {
                        s.violations
                            .push("blocking read of an empty async cmd fd".into());
                    }
                    return Err(Errno::EAGAIN);
                };
                if head.len() > buf.len() {
                    return Err(Errno::ENOSPC);
                }
                let n = head.len();
                buf[..n].copy_from_slice(head);
                *bytes = bytes.saturating_sub(n - 8);
                queue.pop_front();
                Ok(n)
            }
            Some(FdState::AsyncEvent {
                queue, nonblock, ..
            }) => {
                let Some((_, head)) = queue.front() else {
                    if !*nonblock {
                        s.violations
                            .push("blocking read of an empty async event fd".into());
                    }
                    return Err(Errno::EAGAIN);
                };
                if head.len() > buf.len() {
                    return Err(Errno::EINVAL);
                }
                let n = head.len();
                buf[..n].copy_from_slice(head);
                queue.pop_front();
                Ok(n)
            }
            Some(FdState::VerbsAsync { queue, nonblock }) => {
                let Some(head) = queue.front() else {
                    if !*nonblock {
                        s.violations
                            .push("blocking read of an empty async-event file".into());
                    }
                    return Err(Errno::EAGAIN);
                };
                // ib_uverbs_event_read: one whole record per read.
                if head.len() > buf.len() {
                    return Err(Errno::EINVAL);
                }
                let n = head.len();
                buf[..n].copy_from_slice(head);
                queue.pop_front();
                Ok(n)
            }
            Some(_) => Err(Errno::EINVAL),
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
        let mut s = self.lock();
        if let Some(e) = s.mmap_error.take() {
            return Err(e);
        }
        let file = match s.fds.get(&fd) {
            Some(FdState::Uverbs { file }) => *file,
            Some(_) => return Err(Errno::ENODEV),
            None => return Err(Errno::EBADF),
        };
        if flags & libc::MAP_SHARED == 0 || len != s.cfg.page_size || prot & libc::PROT_WRITE == 0 {
            return Err(Errno::EINVAL);
        }
        let page_id = s
            .files
            .get(&file)
            .and_then(|f| {
                f.objects.values().find_map(|o| match o {
                    FakeObj::Uar { mmap_offset } if *mmap_offset as i64 == offset => {
                        Some(((*mmap_offset / s.cfg.page_size as u64) & 0xff) as u32)
                    }
                    _ => None,
                })
            })
            .ok_or(Errno::EINVAL)?;
        // An anonymous page stands in for the device's UAR.
        // SAFETY: a fresh private anonymous mapping at a kernel-chosen address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let p = NonNull::new(p.cast::<u8>()).ok_or(Errno::ENOMEM)?;
        s.maps.insert(p.as_ptr() as usize, Mapping { len, page_id });
        Ok(p)
    }

    unsafe fn munmap(&self, addr: NonNull<u8>, len: usize) -> SysResult<()> {
        let mut s = self.lock();
        match s.maps.get(&(addr.as_ptr() as usize)) {
            Some(m) if m.len == len => {}
            _ => return Err(Errno::EINVAL),
        }
        s.maps.remove(&(addr.as_ptr() as usize));
        // SAFETY: the mapping was made by `mmap` above with this length.
        if unsafe { libc::munmap(addr.as_ptr().cast(), len) } != 0 {
            return Err(Errno::last());
        }
        Ok(())
    }

    fn poll(&self, fd: RawFd, events: i16, timeout_ms: i32) -> SysResult<i16> {
        let deadline = if timeout_ms < 0 {
            Instant::now() + MAX_POLL_WAIT
        } else {
            Instant::now() + Duration::from_millis(timeout_ms as u64).min(MAX_POLL_WAIT)
        };
        let mut s = self.lock();
        loop {
            let raw = s.raw_reads.get(&fd).is_some_and(|q| !q.is_empty());
            let ready = match s.fds.get(&fd) {
                None => return Ok(libc::POLLNVAL),
                Some(FdState::AsyncCmd { queue, .. }) => !queue.is_empty(),
                Some(FdState::AsyncEvent { queue, .. }) => !queue.is_empty(),
                Some(FdState::VerbsAsync { queue, .. }) => !queue.is_empty(),
                Some(_) => false,
            };
            if raw || ready {
                return Ok(events & libc::POLLIN);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(0);
            }
            s = self
                .wake
                .wait_timeout(s, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    fn set_nonblocking(&self, fd: RawFd) -> SysResult<()> {
        let mut s = self.lock();
        match s.fds.get_mut(&fd) {
            None => Err(Errno::EBADF),
            Some(FdState::AsyncCmd { nonblock, .. })
            | Some(FdState::AsyncEvent { nonblock, .. })
            | Some(FdState::VerbsAsync { nonblock, .. }) => {
                *nonblock = true;
                Ok(())
            }
            Some(_) => Ok(()),
        }
    }
}
