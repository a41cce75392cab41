//! Batched datagram I/O: `sendmmsg` / `recvmmsg` over a port's socket, so
//! a window of packets costs one system call each way. Buffers are the
//! caller's, reused; nothing is allocated per packet.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

/// Datagrams per system call.
pub(crate) const BATCH: usize = 32;
/// Room per datagram: a 4096-byte MTU packet with every header fits, and
/// so does a jumbo frame.
pub(crate) const SLOT: usize = 9216;

/// `a` as a C socket address.
fn to_c(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data, valid all-zero.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for
            // every sockaddr type.
            unsafe { std::ptr::write((&mut s as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write((&mut s as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (s, len as libc::socklen_t)
}

/// A C socket address the kernel filled in.
fn from_c(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read((s as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read((s as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Sends `n` datagrams: datagram `i` is `bufs[i * SLOT..][..lens[i]]` to
/// `dsts[i]`. Returns how many the kernel took (the rest failed).
pub(crate) fn send_batch(
    sock: &UdpSocket,
    bufs: &[u8],
    lens: &[usize],
    dsts: &[SocketAddr],
) -> usize {
    let n = lens.len().min(dsts.len()).min(BATCH);
    // SAFETY: sockaddr_storage is plain integers, valid all-zero.
    let mut addrs: [libc::sockaddr_storage; BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: an iovec is a pointer and a length; null and 0 are valid.
    let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: an mmsghdr is pointers, lengths, flags and a count; all-zero is valid.
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        let Some(data) = bufs.get(i * SLOT..i * SLOT + lens[i]) else {
            return 0;
        };
        let (a, alen) = to_c(dsts[i]);
        addrs[i] = a;
        iovs[i] = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        hdrs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_storage).cast();
        hdrs[i].msg_hdr.msg_namelen = alen;
        hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    let mut sent = 0;
    while sent < n {
        // SAFETY: hdrs[sent..n] point at live buffers, addresses and iovecs
        // on this stack frame; the kernel only reads them.
        let r = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                hdrs[sent..].as_mut_ptr(),
                (n - sent) as libc::c_uint,
                0,
            )
        };
        if r <= 0 {
            if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        sent += r as usize;
    }
    sent
}

/// One received datagram: its length, whether it was cut short, and who
/// sent it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    pub(crate) len: usize,
    pub(crate) truncated: bool,
    pub(crate) from: Option<SocketAddr>,
}

/// Receives up to [`BATCH`] datagrams into `bufs` (slot `i` at
/// `i * SLOT`), waiting (up to the socket's read timeout) for the first.
pub(crate) fn recv_batch(
    sock: &UdpSocket,
    bufs: &mut [u8],
    out: &mut [Received; BATCH],
) -> io::Result<usize> {
    let slots = (bufs.len() / SLOT).min(BATCH);
    // SAFETY: sockaddr_storage is plain integers, valid all-zero.
    let mut addrs: [libc::sockaddr_storage; BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: an iovec is a pointer and a length; null and 0 are valid.
    let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: an mmsghdr is pointers, lengths, flags and a count; all-zero is valid.
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for (i, slot) in bufs.chunks_exact_mut(SLOT).take(slots).enumerate() {
        iovs[i] = libc::iovec {
            iov_base: slot.as_mut_ptr().cast(),
            iov_len: SLOT,
        };
        hdrs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_storage).cast();
        hdrs[i].msg_hdr.msg_namelen =
            std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: every header points at a distinct slot of `bufs` and an
    // address on this frame, all live for the call.
    let r = unsafe {
        libc::recvmmsg(
            sock.as_raw_fd(),
            hdrs.as_mut_ptr(),
            slots as libc::c_uint,
            libc::MSG_WAITFORONE,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = r as usize;
    for i in 0..n {
        out[i] = Received {
            len: (hdrs[i].msg_len as usize).min(SLOT),
            truncated: hdrs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            from: from_c(&addrs[i]),
        };
    }
    Ok(n)
}
