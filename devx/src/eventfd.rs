//! A reference to a process eventfd, as the kernel takes one for an event
//! subscription redirected to it (`eventfd_ctx_fdget` in devx.c): held open
//! whatever the owner does with its own descriptor, signalled by adding 1.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg};

/// `readlink /proc/self/fd/N` of an eventfd.
const EVENTFD_LINK: &str = "anon_inode:[eventfd]";

/// An eventfd held by a subscription.
#[derive(Debug)]
pub(crate) struct EventFdRef(OwnedFd);

impl EventFdRef {
    /// Takes a reference to descriptor `fd`: EBADF when it is not open,
    /// EINVAL when it is not an eventfd (the kernel's answers).
    pub(crate) fn get(fd: RawFd) -> Result<EventFdRef, Errno> {
        if fd < 0 {
            return Err(Errno::EBADF);
        }
        let dup = fcntl(fd, FcntlArg::F_DUPFD_CLOEXEC(0))?;
        // SAFETY: `dup` was just returned by F_DUPFD_CLOEXEC; nothing else
        // owns it.
        let own = unsafe { OwnedFd::from_raw_fd(dup) };
        let link = std::fs::read_link(format!("/proc/self/fd/{}", own.as_raw_fd()))
            .map_err(|_| Errno::EINVAL)?;
        if link.as_os_str() != EVENTFD_LINK {
            return Err(Errno::EINVAL);
        }
        Ok(EventFdRef(own))
    }

    /// `eventfd_signal(ctx, 1)`: adds 1 to the counter. (Only a counter at
    /// its maximum, 2^64 − 2, would make the write wait for a read.)
    pub(crate) fn signal(&self) {
        let _ = nix::unistd::write(self.0.as_fd(), &1u64.to_ne_bytes());
    }
}
