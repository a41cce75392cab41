//! The network port of an emulated device: a UDP socket bound to the
//! device's address, a receive thread that parses and checks every
//! datagram before handing it on, per-port counters, and an optional
//! capture of everything sent and received.
//!
//! A program that polls its CQs receives itself: an empty poll takes what
//! has arrived on the polling thread ([`NetPort::progress`]), as busy
//! polling does with a NIC's queue. While it keeps polling, the receive
//! thread sleeps instead of waiting on the socket, so arriving packets
//! wake no thread and the core does not change hands for each; once the
//! program stops polling, or arms a CQ to wait for its events, the receive
//! thread waits on the socket again.

use std::fs::File;
use std::io::{self, BufWriter};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, TryLockError, Weak};
use std::time::{Duration, Instant, SystemTime};

use super::config::{NetConfig, PCAP_VAR_PREFIX};
use super::error::WireError;
use super::fault::{Fate, FaultSpec, Faults, FAULT_VAR_PREFIX};
use super::flow::Flow;
use super::icrc::IcrcCache;
use super::mmsg;
use super::packet::{Headers, Packet};
use super::pcap::PcapWriter;

/// Largest packet the port encodes (the largest UDP payload).
const TX_BUFFER: usize = u16::MAX as usize;
/// How long the receive thread waits before looking whether its device
/// is still there.
const RX_POLL: Duration = Duration::from_millis(100);
/// Socket buffers asked for, each way.
const SOCKET_BUFFER: libc::c_int = 4 << 20;
/// Bytes an RC window may hold, at least and at most; within these, a
/// quarter of the receive buffer the kernel granted (it counts overhead
/// per packet too), so a burst is not dropped for room.
const WINDOW_BYTES_MIN: usize = 64 << 10;
const WINDOW_BYTES_MAX: usize = 512 << 10;
/// The finest timer step of the transport (retransmission, RNR waits).
const MIN_TICK: Duration = Duration::from_micros(200);
/// How long the receive thread sleeps while the program receives by
/// polling, before it looks again whether the program still polls: the
/// longest a packet waits when the program stops polling unannounced.
const POLLED_NAP: Duration = MIN_TICK;
/// Empty polls since a CQ was last armed after which the program counts
/// as polling rather than waiting for completion events (which poll a
/// few times around each arm).
const POLLING_AFTER: u64 = 8;

/// Where received packets go: the device's data-path engine.
pub(crate) trait PacketSink: Send + Sync {
    /// The packets of one received batch that parsed and passed their
    /// ICRC check, in arrival order: handled together, so the device is
    /// locked once per batch.
    fn receive(&self, port: &NetPort, packets: &Arrivals<'_>);

    /// Time passes: retransmit what timed out. Returns how long until the
    /// next deadline (`None`: none pending).
    fn tick(&self, port: &NetPort) -> Option<Duration>;
}

/// A checked packet of a received batch: where it lies in the receive
/// buffers, and who sent it.
#[derive(Clone, Copy)]
struct Span {
    at: usize,
    len: usize,
    from: SocketAddr,
}

/// The checked packets of one received batch.
pub(crate) struct Arrivals<'a> {
    bufs: &'a [u8],
    spans: &'a [Span],
}

impl<'a> Arrivals<'a> {
    /// Each packet, parsed again (its ICRC was checked before the device
    /// was locked), with its sender.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Packet<'a>, SocketAddr)> + 'a {
        let bufs = self.bufs;
        self.spans.iter().filter_map(move |s| {
            let data = bufs.get(s.at..s.at + s.len)?;
            Packet::parse(data).ok().map(|p| (p, s.from))
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

/// What a port counts; [`NetCounters`] reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    TxPackets,
    TxBytes,
    /// The socket refused a datagram.
    TxErrors,
    RxPackets,
    RxBytes,
    /// Truncated, malformed or unsupported-opcode datagrams.
    RxMalformed,
    RxIcrcErrors,
    /// No QP with the destination QPN, or one of another transport or in a
    /// state that takes no packets.
    RxBadQpn,
    /// UD datagrams whose Q_Key is not the QP's.
    RxBadQkey,
    /// RC/UC requests ahead of the expected PSN (or, UC, behind it).
    RxSequenceErrors,
    /// RC requests seen before, answered again.
    RxDuplicates,
    /// Opcodes out of sequence, short middle packets, lengths beyond what
    /// the RETH announced or the QP takes.
    RxInvalidRequests,
    /// Packets the fault injector (`DEVX_SIM_FAULT_<dev>`) dropped, sent twice,
    /// or held back.
    TxFaultDrops,
    TxFaultDuplicates,
    TxFaultHeld,
}

impl Counter {
    pub const ALL: [Counter; 15] = [
        Counter::TxPackets,
        Counter::TxBytes,
        Counter::TxErrors,
        Counter::RxPackets,
        Counter::RxBytes,
        Counter::RxMalformed,
        Counter::RxIcrcErrors,
        Counter::RxBadQpn,
        Counter::RxBadQkey,
        Counter::RxSequenceErrors,
        Counter::RxDuplicates,
        Counter::RxInvalidRequests,
        Counter::TxFaultDrops,
        Counter::TxFaultDuplicates,
        Counter::TxFaultHeld,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Counter::TxPackets => "tx_packets",
            Counter::TxBytes => "tx_bytes",
            Counter::TxErrors => "tx_errors",
            Counter::RxPackets => "rx_packets",
            Counter::RxBytes => "rx_bytes",
            Counter::RxMalformed => "rx_malformed",
            Counter::RxIcrcErrors => "rx_icrc_errors",
            Counter::RxBadQpn => "rx_bad_qpn",
            Counter::RxBadQkey => "rx_bad_qkey",
            Counter::RxSequenceErrors => "rx_sequence_errors",
            Counter::RxDuplicates => "rx_duplicates",
            Counter::RxInvalidRequests => "rx_invalid_requests",
            Counter::TxFaultDrops => "tx_fault_drops",
            Counter::TxFaultDuplicates => "tx_fault_duplicates",
            Counter::TxFaultHeld => "tx_fault_held",
        }
    }
}

/// A snapshot of a port's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NetCounters([u64; Counter::ALL.len()]);

impl NetCounters {
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }

    /// Every counter with its name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Counter::ALL.iter().map(|c| (c.name(), self.get(*c)))
    }
}

/// Receive buffers and checking state, used by whichever thread receives
/// (the receive thread or a polling program), one at a time, so packets
/// are handled in arrival order.
struct Rx {
    bufs: Vec<u8>,
    got: [mmsg::Received; mmsg::BATCH],
    /// Room for every packet of a full batch of GRO datagrams, kept.
    spans: Vec<Span>,
    icrc: IcrcCache,
}

struct Tx {
    /// Where a packet is encoded.
    buf: Vec<u8>,
    icrc: IcrcCache,
    faults: Option<Faults>,
    q: Queue,
}

/// Packets waiting for one `sendmmsg`.
struct Queue {
    slots: Vec<u8>,
    lens: Vec<usize>,
    dsts: Vec<SocketAddr>,
    /// Nesting of [`NetPort::batch`]; 0: every packet goes at once.
    depth: u32,
    /// Whether runs of packets go as segmented sends; off once the kernel
    /// refuses one.
    gso: bool,
}

/// One device's UDP port.
pub(crate) struct NetPort {
    socket: UdpSocket,
    local: SocketAddr,
    config: NetConfig,
    counters: [AtomicU64; Counter::ALL.len()],
    /// Packet buffer and fault injector for sends (senders hold the device
    /// lock anyway).
    tx: Mutex<Tx>,
    capture: Option<Mutex<PcapWriter<BufWriter<File>>>>,
    window_bytes: usize,
    rx: Mutex<Rx>,
    /// Empty CQ polls of the program ([`NetPort::progress`]), and their
    /// count when a CQ was last armed.
    polls: AtomicU64,
    armed_at: AtomicU64,
    /// The receive thread, woken when the program arms a CQ.
    rx_thread: OnceLock<std::thread::Thread>,
}

impl NetPort {
    /// The port the environment configures for device `dev` (see
    /// [`super::config`]), bound; `None` when it names no address.
    pub(crate) fn for_device(dev: &str) -> Result<Option<Arc<NetPort>>, String> {
        NetPort::open(dev, NetConfig::from_env()?)
    }

    /// Binds device `dev`'s port if `config` gives it an address; `None`
    /// when it has none. The capture file comes from `DEVX_SIM_PCAP_<dev>`.
    pub(crate) fn open(dev: &str, config: NetConfig) -> Result<Option<Arc<NetPort>>, String> {
        let Some(addr) = config.addr_of(dev) else {
            return Ok(None);
        };
        let socket = UdpSocket::bind(addr).map_err(|e| format!("{dev}: bind {addr}: {e}"))?;
        let local = socket
            .local_addr()
            .map_err(|e| format!("{dev}: local address: {e}"))?;
        if local.is_ipv4() {
            set_dont_fragment(&socket).map_err(|e| format!("{dev}: IP_MTU_DISCOVER: {e}"))?;
        }
        // A window of 4 KiB packets overflows the default receive buffer
        // on loopback; the kernel caps the request at net.core.rmem_max,
        // which is all this can ask for.
        let _ = set_int_option(&socket, libc::SOL_SOCKET, libc::SO_RCVBUF, SOCKET_BUFFER);
        let _ = set_int_option(&socket, libc::SOL_SOCKET, libc::SO_SNDBUF, SOCKET_BUFFER);
        let rcvbuf = get_int_option(&socket, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap_or(0);
        let window_bytes =
            (usize::try_from(rcvbuf).unwrap_or(0) / 4).clamp(WINDOW_BYTES_MIN, WINDOW_BYTES_MAX);
        // Runs of packets may arrive joined; the receive loop cuts them.
        let _ = set_int_option(&socket, libc::SOL_UDP, libc::UDP_GRO, 1);
        socket
            .set_read_timeout(Some(RX_POLL))
            .map_err(|e| format!("{dev}: read timeout: {e}"))?;
        let capture = match std::env::var_os(format!("{PCAP_VAR_PREFIX}{dev}")) {
            Some(path) => {
                let f = File::create(&path)
                    .map_err(|e| format!("{dev}: capture {}: {e}", path.to_string_lossy()))?;
                let w = PcapWriter::new(BufWriter::new(f))
                    .map_err(|e| format!("{dev}: capture: {e}"))?;
                Some(Mutex::new(w))
            }
            None => None,
        };
        let faults = match std::env::var(format!("{FAULT_VAR_PREFIX}{dev}")) {
            Ok(s) => Some(Faults::new(
                FaultSpec::parse(&s).map_err(|e| format!("{FAULT_VAR_PREFIX}{dev}: {e}"))?,
            )),
            Err(_) => None,
        };
        Ok(Some(Arc::new(NetPort {
            socket,
            local,
            config,
            counters: Default::default(),
            tx: Mutex::new(Tx {
                buf: vec![0; TX_BUFFER],
                icrc: IcrcCache::default(),
                faults,
                q: Queue {
                    slots: vec![0; mmsg::BATCH * mmsg::SLOT],
                    lens: Vec::with_capacity(mmsg::BATCH),
                    dsts: Vec::with_capacity(mmsg::BATCH),
                    depth: 0,
                    gso: true,
                },
            }),
            capture,
            window_bytes,
            rx: Mutex::new(Rx {
                bufs: vec![0u8; mmsg::BATCH * mmsg::RX_SLOT],
                got: [mmsg::Received {
                    len: 0,
                    truncated: false,
                    from: None,
                    segment: 0,
                }; mmsg::BATCH],
                spans: Vec::with_capacity(mmsg::BATCH * mmsg::GSO_SEGMENTS),
                icrc: IcrcCache::default(),
            }),
            polls: AtomicU64::new(0),
            armed_at: AtomicU64::new(0),
            rx_thread: OnceLock::new(),
        })))
    }

    /// Starts the receive thread; it ends when the port or the sink is
    /// dropped (checked every [`RX_POLL`]).
    pub(crate) fn start(
        self: &Arc<NetPort>,
        name: &str,
        sink: Weak<dyn PacketSink>,
    ) -> io::Result<()> {
        let port = Arc::downgrade(self);
        let h = std::thread::Builder::new()
            .name(format!("{name}-rx"))
            .spawn(move || receive_loop(&port, &sink))?;
        // Started once per port.
        let _ = self.rx_thread.set(h.thread().clone());
        Ok(())
    }

    /// The program polled a CQ and found it empty: receives what has
    /// arrived, on the caller's thread, and hands it to `sink`, unless
    /// another thread is receiving. Whether any packet was handled.
    pub(crate) fn progress(&self, sink: &dyn PacketSink) -> bool {
        self.polls.fetch_add(1, Ordering::Relaxed);
        let mut rx = match self.rx.try_lock() {
            Ok(rx) => rx,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        self.receive(&mut rx, false) > 0 && self.deliver(&rx, sink)
    }

    /// The program armed a CQ: it waits for completion events rather
    /// than polling, so the receive thread waits on the socket again.
    pub(crate) fn armed(&self) {
        self.armed_at
            .store(self.polls.load(Ordering::Relaxed), Ordering::Relaxed);
        if let Some(t) = self.rx_thread.get() {
            t.unpark();
        }
    }

    /// Whether the program receives by polling: it polled since `seen`
    /// (the count of polls the receive thread saw last, updated here),
    /// and polled often since it last armed a CQ.
    fn polled(&self, seen: &mut u64) -> bool {
        let polls = self.polls.load(Ordering::Relaxed);
        let since_arm = polls.wrapping_sub(self.armed_at.load(Ordering::Relaxed));
        let polling = polls != *seen && since_arm >= POLLING_AFTER;
        *seen = polls;
        polling
    }

    /// Receives one batch into `rx` (waiting for it, up to the socket's
    /// read timeout, with `wait`) and checks its packets; how many
    /// datagrams came. Errors (the read timeout, a signal, an ICMP error
    /// from an earlier send, nothing there) stop nothing.
    fn receive(&self, rx: &mut Rx, wait: bool) -> usize {
        let Rx {
            bufs,
            got,
            spans,
            icrc,
        } = rx;
        let n = mmsg::recv_batch(&self.socket, bufs, got, wait).unwrap_or(0);
        check_batch(self, icrc, bufs, &got[..n], spans);
        n
    }

    /// Hands the good packets of the batch in `rx` to `sink`; whether
    /// there were any. What they send (ACKs, the next bursts) leaves
    /// together.
    fn deliver(&self, rx: &Rx, sink: &dyn PacketSink) -> bool {
        if rx.spans.is_empty() {
            return false;
        }
        let arrivals = Arrivals {
            bufs: &rx.bufs,
            spans: &rx.spans,
        };
        self.batch(|| sink.receive(self, &arrivals));
        true
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The bytes of request packets an RC window may hold unacknowledged.
    pub(crate) fn window_bytes(&self) -> usize {
        self.window_bytes
    }

    pub(crate) fn count(&self, c: Counter) {
        self.add(c, 1);
    }

    fn add(&self, c: Counter, n: u64) {
        self.counters[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn counters(&self) -> NetCounters {
        NetCounters(std::array::from_fn(|i| {
            self.counters[i].load(Ordering::Relaxed)
        }))
    }

    /// Sends one packet to the device at `ip`. Socket errors are counted,
    /// as a lost packet would be on a wire.
    pub(crate) fn send(
        &self,
        ip: IpAddr,
        headers: &Headers,
        payload: &[u8],
    ) -> Result<(), WireError> {
        let dst = self.config.peer(ip);
        let flow = Flow::new(self.local, dst);
        let mut guard = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let Tx {
            buf,
            icrc,
            faults,
            q,
        } = &mut *guard;
        if faults.is_none() && headers.packet_len(payload.len()) <= mmsg::SLOT {
            // Straight into the send queue, no copy in between.
            if q.lens.len() == mmsg::BATCH {
                self.flush(q);
            }
            let at = q.lens.len() * mmsg::SLOT;
            let slot = &mut q.slots[at..at + mmsg::SLOT];
            let n = headers.encode_cached(icrc, &flow, payload.len(), slot, |s| {
                s.copy_from_slice(payload)
            })?;
            self.capture(&flow, &slot[..n]);
            q.lens.push(n);
            q.dsts.push(dst);
            if q.depth == 0 || q.lens.len() == mmsg::BATCH {
                self.flush(q);
            }
            return Ok(());
        }
        let n = headers.encode_cached(icrc, &flow, payload.len(), buf, |s| {
            s.copy_from_slice(payload)
        })?;
        let pkt = &buf[..n];
        let Some(faults) = faults.as_mut() else {
            self.enqueue(q, pkt, dst);
            return Ok(());
        };
        match faults.decide(dst) {
            Fate::Send => self.enqueue(q, pkt, dst),
            Fate::Drop => self.count(Counter::TxFaultDrops),
            Fate::Duplicate => {
                self.count(Counter::TxFaultDuplicates);
                self.enqueue(q, pkt, dst);
                self.enqueue(q, pkt, dst);
            }
            Fate::Hold => {
                self.count(Counter::TxFaultHeld);
                faults.hold(pkt, dst);
                return Ok(());
            }
        }
        if let Some((held, to)) = faults.release(true) {
            self.enqueue(q, held, to);
        }
        Ok(())
    }

    /// Runs `f`, sending the packets it sends through this port together
    /// (one `sendmmsg` per [`mmsg::BATCH`]) when it returns.
    pub(crate) fn batch<R>(&self, f: impl FnOnce() -> R) -> R {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).q.depth += 1;
        let r = f();
        let mut guard = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let q = &mut guard.q;
        q.depth = q.depth.saturating_sub(1);
        if q.depth == 0 {
            self.flush(q);
        }
        r
    }

    /// Sends a packet held back by the fault injector whose time is up.
    fn release_held(&self) {
        let mut guard = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let Tx { faults, q, .. } = &mut *guard;
        if let Some((held, to)) = faults.as_mut().and_then(|f| f.release(false)) {
            self.enqueue(q, held, to);
        }
    }

    /// Queues one encoded packet for the wire (and the capture); sends the
    /// queue when it is full or no batch is open.
    fn enqueue(&self, q: &mut Queue, pkt: &[u8], dst: SocketAddr) {
        self.capture(&Flow::new(self.local, dst), pkt);
        if pkt.len() > mmsg::SLOT {
            self.flush(q);
            match self.socket.send_to(pkt, dst) {
                Ok(_) => {
                    self.count(Counter::TxPackets);
                    self.add(Counter::TxBytes, pkt.len() as u64);
                }
                Err(_) => self.count(Counter::TxErrors),
            }
            return;
        }
        let at = q.lens.len() * mmsg::SLOT;
        q.slots[at..at + pkt.len()].copy_from_slice(pkt);
        q.lens.push(pkt.len());
        q.dsts.push(dst);
        if q.depth == 0 || q.lens.len() == mmsg::BATCH {
            self.flush(q);
        }
    }

    /// Sends what is queued, in one system call.
    fn flush(&self, q: &mut Queue) {
        if q.lens.is_empty() {
            return;
        }
        let mut r = mmsg::send_batch(&self.socket, &q.slots, &q.lens, &q.dsts, q.gso);
        if r.gso_refused {
            q.gso = false;
            r = mmsg::send_batch(&self.socket, &q.slots, &q.lens, &q.dsts, false);
        }
        let sent = r.packets;
        let bytes: usize = q.lens[..sent].iter().sum();
        self.add(Counter::TxPackets, sent as u64);
        self.add(Counter::TxBytes, bytes as u64);
        self.add(Counter::TxErrors, (q.lens.len() - sent) as u64);
        q.lens.clear();
        q.dsts.clear();
    }

    fn capture(&self, flow: &Flow, roce: &[u8]) {
        if let Some(c) = &self.capture {
            let mut w = c.lock().unwrap_or_else(|e| e.into_inner());
            // A capture that cannot be written must not stop the device.
            let _ = w.write(flow, roce, SystemTime::now());
            let _ = w.flush();
        }
    }

    /// Parses and checks one received packet, at `at` in the receive
    /// buffers `bufs`; whether it is good for the device.
    fn check(
        &self,
        icrc: &mut IcrcCache,
        bufs: &[u8],
        at: usize,
        len: usize,
        from: SocketAddr,
    ) -> bool {
        let Some(data) = bufs.get(at..at + len) else {
            self.count(Counter::RxMalformed);
            return false;
        };
        let flow = Flow::new(from, self.local);
        self.capture(&flow, data);
        match Packet::parse_cached(icrc, &flow, data) {
            Ok(_) => {
                self.count(Counter::RxPackets);
                self.add(Counter::RxBytes, data.len() as u64);
                true
            }
            Err(WireError::IcrcMismatch { .. }) => {
                self.count(Counter::RxIcrcErrors);
                false
            }
            Err(_) => {
                self.count(Counter::RxMalformed);
                false
            }
        }
    }
}

fn receive_loop(port: &Weak<NetPort>, sink: &Weak<dyn PacketSink>) {
    // Until the next timer deadline, and the socket's read timeout (set
    // only when the thread waits on the socket).
    let mut wait = RX_POLL;
    let mut timeout = RX_POLL;
    let mut last_tick = Instant::now();
    let mut seen = 0;
    loop {
        let Some(p) = port.upgrade() else {
            return;
        };
        let n = if p.polled(&mut seen) {
            // The program receives; look again after a nap (or at once
            // when it arms a CQ), and keep the timers going meanwhile.
            std::thread::park_timeout(wait.min(POLLED_NAP));
            0
        } else {
            if timeout != wait && p.socket.set_read_timeout(Some(wait)).is_ok() {
                timeout = wait;
            }
            let mut rx = p.rx.lock().unwrap_or_else(|e| e.into_inner());
            let n = p.receive(&mut rx, true);
            let Some(s) = sink.upgrade() else {
                return;
            };
            p.deliver(&rx, &*s);
            n
        };
        let Some(s) = sink.upgrade() else {
            return;
        };
        if n == 0 || last_tick.elapsed() >= MIN_TICK {
            last_tick = Instant::now();
            wait = s.tick(&p).map_or(RX_POLL, |d| d.clamp(MIN_TICK, RX_POLL));
            p.release_held();
        }
    }
}

/// Checks each packet of a received batch (cutting GRO datagrams into
/// their packets); `spans` gets the good ones.
fn check_batch(
    p: &NetPort,
    icrc: &mut IcrcCache,
    bufs: &[u8],
    got: &[mmsg::Received],
    spans: &mut Vec<Span>,
) {
    spans.clear();
    for (i, r) in got.iter().enumerate() {
        let base = i * mmsg::RX_SLOT;
        let (Some(from), false) = (r.from, r.truncated) else {
            p.count(Counter::RxMalformed);
            continue;
        };
        // A GRO datagram: packets of `segment` bytes, the last perhaps
        // shorter.
        let step = if r.segment == 0 || r.segment >= r.len {
            r.len.max(1)
        } else {
            r.segment
        };
        let mut at = 0;
        loop {
            let len = step.min(r.len - at);
            if p.check(icrc, bufs, base + at, len, from) {
                spans.push(Span {
                    at: base + at,
                    len,
                    from,
                });
            }
            at += len;
            if at >= r.len {
                break;
            }
        }
    }
}

/// Sets DF on every datagram, so the kernel writes IP identification 0
/// (see [`super::flow`]) and never fragments a packet.
fn set_dont_fragment(s: &UdpSocket) -> io::Result<()> {
    set_int_option(
        s,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DO,
    )
}

fn get_int_option(s: &UdpSocket, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the fd is a live socket owned by `s`; the kernel writes at
    // most `len` bytes into `v`, a c_int.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(v)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set_int_option(
    s: &UdpSocket,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the fd is a live socket owned by `s`; the option value is a
    // c_int whose size is passed alongside.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
