//! The program's end of an event file. Completion channels, the async-event
//! file and DEVX's command and event fds all hand the program one end of a
//! socket pair, which polls readable while a record waits and reads one per
//! call; the library sends on the other end without blocking, and peeks at
//! what the program has not read yet.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::uverbs::Errno;

/// The calling thread's errno, EIO when there is none.
pub(super) fn errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// (device, inode) of an open fd.
pub(super) fn ident(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: fstat writes into the zeroed struct it is given.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; a bad fd fails with EBADF.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino))
}

/// A socket pair: the program reads from `fd`, the library sends on `tx`.
pub struct ProgramFd {
    tx: OwnedFd,
    /// The program's end: its number, and which socket it was (device,
    /// inode), so that a number the program closed and reused is not it.
    pub fd: RawFd,
    ident: (u64, u64),
}

impl ProgramFd {
    /// A pair of `kind` sockets: `SOCK_STREAM` for fixed-size records,
    /// `SOCK_SEQPACKET` where each read must return one whole record.
    pub fn new(kind: libc::c_int) -> Result<ProgramFd, Errno> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: socketpair writes two fds into the array it is given.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                kind | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(errno());
        }
        // SAFETY: fds[1] was just created and is owned by nobody else.
        let tx = unsafe { OwnedFd::from_raw_fd(fds[1]) };
        let Some(id) = ident(fds[0]) else {
            let e = errno();
            // SAFETY: fds[0] was just created; nobody else has it yet.
            unsafe { libc::close(fds[0]) };
            return Err(e);
        };
        Ok(ProgramFd {
            tx,
            fd: fds[0],
            ident: id,
        })
    }

    /// Whether `fd` is still this pair's fd in the program (not closed and
    /// its number reused).
    pub fn is(&self, fd: RawFd) -> bool {
        fd == self.fd && ident(fd) == Some(self.ident)
    }

    /// Queues one record; false when the program closed its end or the
    /// socket is full.
    pub fn send(&self, rec: &[u8]) -> bool {
        // SAFETY: `rec` is readable for its length; `tx` is our open socket.
        let sent = unsafe {
            libc::send(
                self.tx.as_raw_fd(),
                rec.as_ptr().cast(),
                rec.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        sent == rec.len() as isize
    }

    /// The bytes sent and not read by the program yet (none once its fd
    /// is gone), left where they are.
    pub fn unread(&self) -> Vec<u8> {
        if !self.is(self.fd) {
            return Vec::new();
        }
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int.
        if unsafe { libc::ioctl(self.fd, libc::FIONREAD, &mut queued) } != 0 || queued <= 0 {
            return Vec::new();
        }
        let mut buf = vec![0u8; queued as usize];
        // SAFETY: `buf` has `queued` writable bytes; MSG_PEEK leaves the
        // program's data where it is.
        let n = unsafe {
            libc::recv(
                self.fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        buf.truncate(usize::try_from(n).unwrap_or(0));
        buf
    }
}
