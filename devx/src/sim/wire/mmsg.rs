//! Batched datagram I/O: `sendmmsg` / `recvmmsg` over a port's socket, so
//! a window of packets costs one system call each way. With segmentation
//! offload, consecutive packets of one size to one peer leave as one UDP
//! GSO send (`UDP_SEGMENT`) and may arrive as one GRO datagram
//! (`UDP_GRO`), which the receiver cuts at the segment size: the kernel
//! handles them as one. Buffers are the caller's, reused; nothing is
//! allocated per packet.

use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

/// Datagrams per system call.
pub(crate) const BATCH: usize = 32;
/// Room per datagram: a 4096-byte MTU packet with every header fits, and
/// so does a jumbo frame.
pub(crate) const SLOT: usize = 9216;
/// Room per received datagram: a GRO datagram of many packets, up to the
/// largest UDP payload.
pub(crate) const RX_SLOT: usize = 1 << 16;
/// Packets one GSO send carries at most (the kernel's `UDP_MAX_SEGMENTS`),
/// and so one GRO datagram of ours.
pub(crate) const GSO_SEGMENTS: usize = 64;
/// Bytes one GSO send carries at most: one UDP datagram behind an IPv6
/// header.
const GSO_BYTES: usize = u16::MAX as usize - 48;

/// Room for one control message carrying a segment size.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct Cmsg([u8; 32]);

/// What [`send_batch`] did.
pub(crate) struct Sent {
    /// Packets the kernel took, from the first.
    pub(crate) packets: usize,
    /// The kernel refused segmentation offload; nothing was sent.
    pub(crate) gso_refused: bool,
}

/// Room for a C socket address, IPv4 or IPv6: the larger of the two (a
/// `sockaddr_storage` is four times that, all zeroed per datagram).
type CAddr = libc::sockaddr_in6;

/// `a` as a C socket address.
fn to_c(a: SocketAddr) -> (CAddr, libc::socklen_t) {
    // SAFETY: sockaddr_in6 is plain integers, valid all-zero.
    let mut s: CAddr = unsafe { std::mem::zeroed() };
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
            // SAFETY: sockaddr_in6 is larger than sockaddr_in and as
            // aligned.
            unsafe { std::ptr::write((&mut s as *mut CAddr).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            s = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (s, len as libc::socklen_t)
}

/// A C socket address the kernel filled in, `len` bytes of it.
fn from_c(s: &CAddr, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match i32::from(s.sin6_family) {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the room holds a sockaddr_in, which
            // is smaller than it and as aligned.
            let sin: libc::sockaddr_in = unsafe { std::ptr::read((s as *const CAddr).cast()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(s.sin6_port),
                u32::from_be(s.sin6_flowinfo),
                s.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Sends `n` datagrams: datagram `i` is `bufs[i * SLOT..][..lens[i]]` to
/// `dsts[i]`; with `gso`, runs of one size to one peer (the last may be
/// shorter) go as one segmented send each.
pub(crate) fn send_batch(
    sock: &UdpSocket,
    bufs: &[u8],
    lens: &[usize],
    dsts: &[SocketAddr],
    gso: bool,
) -> Sent {
    let n = lens.len().min(dsts.len()).min(BATCH);
    // Only the entries of the packets and sends there are get written
    // (a batch of small packets is often one send): nothing is cleared
    // for the rest.
    let mut addrs = [const { MaybeUninit::<CAddr>::uninit() }; BATCH];
    let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; BATCH];
    let mut hdrs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH];
    let mut cmsgs = [const { MaybeUninit::<Cmsg>::uninit() }; BATCH];
    // `firsts[g]`: the first packet of send `g`.
    let mut firsts = [0usize; BATCH + 1];
    let mut groups = 0;
    let mut i = 0;
    while i < n {
        let Some(data) = bufs.get(i * SLOT..i * SLOT + lens[i]) else {
            return Sent {
                packets: 0,
                gso_refused: false,
            };
        };
        iovs[i].write(libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        });
        // Extend the run while the packets fit one segmented send.
        let mut j = i + 1;
        let mut bytes = lens[i];
        while gso
            && j < n
            && j - i < GSO_SEGMENTS
            && dsts[j] == dsts[i]
            && lens[j - 1] == lens[i]
            && lens[j] <= lens[i]
            && bytes + lens[j] <= GSO_BYTES
        {
            let Some(d) = bufs.get(j * SLOT..j * SLOT + lens[j]) else {
                break;
            };
            iovs[j].write(libc::iovec {
                iov_base: d.as_ptr() as *mut libc::c_void,
                iov_len: d.len(),
            });
            bytes += lens[j];
            j += 1;
        }
        let g = groups;
        let (a, alen) = to_c(dsts[i]);
        // SAFETY: an mmsghdr is pointers, lengths, flags and a count;
        // all-zero is valid.
        let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
        h.msg_hdr.msg_name = addrs[g].write(a) as *mut CAddr as *mut libc::c_void;
        h.msg_hdr.msg_namelen = alen;
        // iovs[i..j] were written above.
        h.msg_hdr.msg_iov = iovs[i].as_mut_ptr();
        h.msg_hdr.msg_iovlen = j - i;
        if j - i > 1 {
            segment_size(&mut h.msg_hdr, cmsgs[g].write(Cmsg([0; 32])), lens[i]);
        }
        hdrs[g].write(h);
        firsts[g] = i;
        groups += 1;
        i = j;
    }
    firsts[groups] = n;
    let mut sent = 0;
    while sent < groups {
        // SAFETY: hdrs[sent..groups] were written above and point at live
        // buffers, and at addresses, iovecs and control messages written on
        // this stack frame; the kernel only reads them.
        let r = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                hdrs[sent..].as_mut_ptr().cast::<libc::mmsghdr>(),
                (groups - sent) as libc::c_uint,
                0,
            )
        };
        if r <= 0 {
            let e = io::Error::last_os_error();
            if r < 0 && e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // EIO: the route cannot offload checksums; EINVAL: no
            // UDP_SEGMENT in this kernel.
            let segmented = firsts[sent + 1] - firsts[sent] > 1;
            let refused = matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL));
            if r < 0 && segmented && refused && sent == 0 {
                return Sent {
                    packets: 0,
                    gso_refused: true,
                };
            }
            break;
        }
        sent += r as usize;
    }
    Sent {
        packets: firsts[sent],
        gso_refused: false,
    }
}

/// Attaches a `UDP_SEGMENT` control message of `size` to `h`.
fn segment_size(h: &mut libc::msghdr, c: &mut Cmsg, size: usize) {
    h.msg_control = c.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    h.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as _;
    // SAFETY: `h` points at `c`, 8-aligned and large enough for one
    // header and a u16 (CMSG_SPACE(2) is 24 bytes), so the first header
    // and its data lie inside `c`.
    unsafe {
        let m = libc::CMSG_FIRSTHDR(h);
        (*m).cmsg_level = libc::SOL_UDP;
        (*m).cmsg_type = libc::UDP_SEGMENT;
        (*m).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(m).cast::<u16>(), size as u16);
    }
}

/// One received datagram: its length, whether it was cut short, who sent
/// it, and the size of the packets it joins (GRO; 0: one packet).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    pub(crate) len: usize,
    pub(crate) truncated: bool,
    pub(crate) from: Option<SocketAddr>,
    pub(crate) segment: usize,
}

/// Receives up to [`BATCH`] datagrams into `bufs` (slot `i` at
/// `i * RX_SLOT`); with `wait`, waits (up to the socket's read timeout)
/// for the first, else takes only what is there.
pub(crate) fn recv_batch(
    sock: &UdpSocket,
    bufs: &mut [u8],
    out: &mut [Received; BATCH],
    wait: bool,
) -> io::Result<usize> {
    let slots = (bufs.len() / RX_SLOT).min(BATCH);
    // SAFETY: sockaddr_in6 is plain integers, valid all-zero.
    let mut addrs: [CAddr; BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: an iovec is a pointer and a length; null and 0 are valid.
    let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: an mmsghdr is pointers, lengths, flags and a count; all-zero is valid.
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    // Only the part the kernel fills (msg_controllen, on return) is read.
    let mut cmsgs = [const { MaybeUninit::<Cmsg>::uninit() }; BATCH];
    for (i, slot) in bufs.chunks_exact_mut(RX_SLOT).take(slots).enumerate() {
        iovs[i] = libc::iovec {
            iov_base: slot.as_mut_ptr().cast(),
            iov_len: RX_SLOT,
        };
        hdrs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut CAddr).cast();
        hdrs[i].msg_hdr.msg_namelen = std::mem::size_of::<CAddr>() as libc::socklen_t;
        hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
        hdrs[i].msg_hdr.msg_control = cmsgs[i].as_mut_ptr().cast();
        hdrs[i].msg_hdr.msg_controllen = std::mem::size_of::<Cmsg>() as _;
    }
    // SAFETY: every header points at a distinct slot of `bufs`, an
    // address and a control buffer on this frame, all live for the call.
    let r = unsafe {
        libc::recvmmsg(
            sock.as_raw_fd(),
            hdrs.as_mut_ptr(),
            slots as libc::c_uint,
            if wait {
                libc::MSG_WAITFORONE
            } else {
                libc::MSG_DONTWAIT
            },
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = r as usize;
    for i in 0..n {
        out[i] = Received {
            len: (hdrs[i].msg_len as usize).min(RX_SLOT),
            truncated: hdrs[i].msg_hdr.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0,
            from: from_c(&addrs[i], hdrs[i].msg_hdr.msg_namelen),
            segment: gro_segment(&hdrs[i].msg_hdr),
        };
    }
    Ok(n)
}

/// The segment size a `UDP_GRO` control message in `h` gives, or 0.
fn gro_segment(h: &libc::msghdr) -> usize {
    if h.msg_controllen == 0 {
        return 0;
    }
    // SAFETY: the kernel filled `msg_controllen` bytes of the control
    // buffer `h` points at with well-formed headers; CMSG_FIRSTHDR and
    // CMSG_NXTHDR stay inside it and return null past the end.
    unsafe {
        let mut m = libc::CMSG_FIRSTHDR(h);
        while !m.is_null() {
            if (*m).cmsg_level == libc::SOL_UDP && (*m).cmsg_type == libc::UDP_GRO {
                let size = std::ptr::read_unaligned(libc::CMSG_DATA(m).cast::<libc::c_int>());
                return usize::try_from(size).unwrap_or(0);
            }
            m = libc::CMSG_NXTHDR(h, m);
        }
    }
    0
}
