//! Helpers for the data-path tests: devices with a PD and UAR, registered
//! buffers with MKEYs, CQs with a software poll, and QPs brought to RTS
//! whose WQEs the tests write by hand (prm-guide §5) before ringing the
//! doorbell exactly as a driver does.
#![allow(dead_code)]

#[path = "sim_support.rs"]
pub mod support;

use std::sync::Arc;

use devx::sim::{self, SimContext, SimDevice};
use devx::{ProviderContext, UarKind, UarPage};
use prm_layouts::*;
pub use support::{be16, be32, hdr, transition, LOCAL_WRITE, REMOTE_READ, REMOTE_WRITE};

pub const RC: u8 = 0;
pub const UC: u8 = 1;
pub const UD: u8 = 2;

/// Send opcodes.
pub const NOP: u8 = 0x00;
pub const WRITE: u8 = 0x08;
pub const WRITE_IMM: u8 = 0x09;
pub const SEND: u8 = 0x0a;
pub const SEND_IMM: u8 = 0x0b;
pub const READ: u8 = 0x10;
pub const CAS: u8 = 0x11;
pub const FAA: u8 = 0x12;

pub const SIGNALED: u8 = 0x08;

/// Page-aligned memory that stays put; the device reads and writes it.
pub struct Region {
    buf: Vec<u8>,
    off: usize,
    pub len: usize,
}

impl Region {
    pub fn new(len: usize) -> Region {
        let buf = vec![0u8; len + 4096];
        let off = (4096 - (buf.as_ptr() as usize % 4096)) % 4096;
        Region { buf, off, len }
    }
    pub fn addr(&self) -> usize {
        self.buf.as_ptr() as usize + self.off
    }
    pub fn read(&self, at: usize, n: usize) -> Vec<u8> {
        assert!(at + n <= self.len);
        // SAFETY: inside the owned allocation; the device only writes it
        // during doorbell calls, which do not overlap this read.
        unsafe { std::slice::from_raw_parts((self.addr() + at) as *const u8, n).to_vec() }
    }
    pub fn write(&self, at: usize, data: &[u8]) {
        assert!(at + data.len() <= self.len);
        // SAFETY: as for `read`.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), (self.addr() + at) as *mut u8, data.len())
        };
    }
    /// Reads past the registered length too (the slack after it), to
    /// check the device never wrote there.
    pub fn read_slack(&self, at: usize, n: usize) -> Vec<u8> {
        assert!(
            at + n <= self.len + 4096 - self.off.min(4096) && at + n <= self.buf.len() - self.off
        );
        // SAFETY: inside the owned allocation.
        unsafe { std::slice::from_raw_parts((self.addr() + at) as *const u8, n).to_vec() }
    }

    pub fn fill(&self, b: u8) {
        self.write(0, &vec![b; self.len]);
    }
}

/// mkc access bits of a test buffer.
#[derive(Clone, Copy)]
pub struct Acc {
    pub lw: bool,
    pub rr: bool,
    pub rw: bool,
    pub a: bool,
}

pub const ALL: Acc = Acc {
    lw: true,
    rr: true,
    rw: true,
    a: true,
};
pub const LOCAL_ONLY: Acc = Acc {
    lw: true,
    rr: false,
    rw: false,
    a: false,
};

/// A registered buffer with its key.
pub struct Mr {
    pub mem: Region,
    pub key: u32,
    pub umem: u32,
}

impl Mr {
    pub fn addr(&self) -> u64 {
        self.mem.addr() as u64
    }
}

/// One emulated device with a context, a PD and a UAR.
pub struct Node {
    pub dev: Arc<SimDevice>,
    pub ctx: Arc<SimContext>,
    pub pd: u32,
    pub uar: u32,
    pub page: Arc<dyn UarPage>,
    pub eqn: u32,
    keep: std::cell::RefCell<Vec<Region>>,
}

fn create(ctx: &SimContext, inbox: &[u8], outlen: usize) -> Result<Vec<u8>, devx::Error> {
    create_h(ctx, inbox, outlen).map(|(_, o)| o)
}

fn create_h(
    ctx: &SimContext,
    inbox: &[u8],
    outlen: usize,
) -> Result<(devx::Handle, Vec<u8>), devx::Error> {
    let mut out = vec![0u8; outlen.max(16)];
    ctx.create(inbox, &mut out).map(|h| (h, out))
}

impl Node {
    pub fn new(index: u32) -> Node {
        let dev = sim::sim_device(&format!("sim{index}")).unwrap();
        let ctx = dev.open_sim().unwrap();
        let out = create(&ctx, &hdr(Opcode::AllocPd.raw(), 0, 16), 16).unwrap();
        let pd = be32(&out, 8) & 0xff_ffff;
        let u = ctx.uar_alloc(UarKind::BlueFlame).unwrap();
        let eqn = ctx.query_eqn(0).unwrap();
        Node {
            dev,
            ctx,
            pd,
            uar: u.page_id,
            page: u.page,
            eqn,
            keep: Default::default(),
        }
    }

    /// Registers `len` bytes as a UMEM; the memory stays with the node.
    pub fn umem(&self, len: usize) -> (usize, u32) {
        let r = Region::new(len);
        let addr = r.addr();
        let (_, id) = self
            .ctx
            .umem_reg(addr, len, LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ)
            .unwrap();
        self.keep.borrow_mut().push(r);
        (addr, id)
    }

    /// A buffer of `len` bytes with an MTT key covering all of it.
    pub fn mr(&self, len: usize, acc: Acc) -> Mr {
        self.mr_pd(len, acc, self.pd)
    }

    pub fn mr_pd(&self, len: usize, acc: Acc, pd: u32) -> Mr {
        let mem = Region::new(len);
        let (_, umem) = self
            .ctx
            .umem_reg(mem.addr(), len, LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ)
            .unwrap();
        let key = self
            .mkey(umem, 0, mem.addr() as u64, len as u64, acc, pd)
            .unwrap();
        Mr { mem, key, umem }
    }

    pub fn mkey(
        &self,
        umem: u32,
        umem_off: u64,
        start: u64,
        len: u64,
        acc: Acc,
        pd: u32,
    ) -> Result<u32, devx::Error> {
        let mut m = CreateMkeyIn::new();
        m.set_opcode(0x200);
        m.set_mkey_umem_valid(1);
        m.set_mkey_umem_id(umem);
        m.set_mkey_umem_offset(umem_off);
        let c = m.memory_key_mkey_entry_mut();
        c.set_access_mode_1_0(1);
        c.set_lr(1);
        c.set_lw(u8::from(acc.lw));
        c.set_rr(u8::from(acc.rr));
        c.set_rw(u8::from(acc.rw));
        c.set_a(u8::from(acc.a));
        c.set_qpn(0xff_ffff);
        c.set_mkey_7_0(0x5a);
        c.set_pd(pd);
        c.set_start_addr(start);
        c.set_len(len);
        let out = create(&self.ctx, m.as_bytes(), 16)?;
        Ok(((be32(&out, 8) & 0xff_ffff) << 8) | 0x5a)
    }

    pub fn cq(&self, log: u8) -> Cq {
        let (ring, ring_id) = self.umem(64 << log);
        let (dbr, dbr_id) = self.umem(64);
        // op_own 0xf0: invalid, owner 0 (prm-guide §6.2).
        for i in 0..(1usize << log) {
            // SAFETY: inside the ring region just registered.
            unsafe { *((ring + i * 64 + 63) as *mut u8) = 0xf0 };
        }
        let inbox = support::cq_inbox(log, ring_id, 0, dbr_id, 0, self.uar, self.eqn);
        let (h, out) = create_h(&self.ctx, &inbox, 16).unwrap();
        Cq {
            h,
            cqn: be32(&out, 8) & 0xff_ffff,
            ring,
            dbr,
            log,
            ci: 0,
        }
    }

    /// A QP in RST with its own CQ for both directions.
    pub fn qp(&self, service: u8, cq: &Cq) -> Qp {
        self.qp_with(service, cq, 6, 4, 2)
    }

    pub fn qp_with(&self, service: u8, cq: &Cq, log_sq: u8, log_rq: u8, stride: u8) -> Qp {
        self.qp_full(service, cq, log_sq, log_rq, stride, None)
    }

    /// A QP receiving through SRQ `srqn` (or its own RQ with `None`).
    pub fn qp_on(&self, service: u8, cq: &Cq, srqn: Option<u32>) -> Qp {
        self.qp_full(service, cq, 6, 4, 2, srqn)
    }

    fn qp_full(
        &self,
        service: u8,
        cq: &Cq,
        log_sq: u8,
        log_rq: u8,
        stride: u8,
        srqn: Option<u32>,
    ) -> Qp {
        let rq_bytes = if srqn.is_some() {
            0
        } else {
            (1usize << log_rq) * (16 << stride)
        };
        let sq_bytes = (1usize << log_sq) * 64;
        let (buf, buf_id) = self.umem(rq_bytes + sq_bytes);
        let (dbr, dbr_id) = self.umem(64);
        let mut m = CreateQpIn::new();
        m.set_opcode(0x500);
        m.set_wq_umem_id(buf_id);
        m.set_wq_umem_valid(1);
        let q = m.qpc_mut();
        q.set_st(service);
        q.set_pm_state(3);
        q.set_pd(self.pd);
        match srqn {
            Some(n) => {
                q.set_rq_type(1);
                q.set_srqn_rmpn_xrqn(n);
            }
            None => {
                q.set_log_rq_size(log_rq);
                q.set_log_rq_stride(stride);
            }
        }
        q.set_log_sq_size(log_sq);
        q.set_uar_page(self.uar);
        q.set_cqn_snd(cq.cqn);
        q.set_cqn_rcv(cq.cqn);
        q.set_dbr_umem_valid(1);
        q.set_dbr_umem_id(dbr_id);
        q.set_ts_format(1);
        q.set_user_index(0x777);
        let (h, out) = create_h(&self.ctx, m.as_bytes(), 16).unwrap();
        Qp {
            h,
            qpn: be32(&out, 8) & 0xff_ffff,
            service,
            buf,
            sq: buf + rq_bytes,
            log_sq,
            log_rq,
            stride: 16 << stride,
            dbr,
            sq_pi: 0,
            rq_head: 0,
            bf: 0x800,
            page: Arc::clone(&self.page),
        }
    }

    /// The GID other devices use to reach this one.
    pub fn gid(&self) -> [u8; 16] {
        self.dev.identity().gid_table()[1].gid
    }

    pub fn modify(&self, qp: &Qp, opcode: u16, opt: u32, qpc: &Qpc) -> Result<(), devx::Error> {
        let inbox = transition(opcode, qp.qpn, opt, qpc);
        let mut out = vec![0u8; 16];
        self.ctx.modify(qp.h, &inbox, &mut out)
    }

    /// RST → INIT → RTR → RTS towards `remote_qpn` at `rgid` (zero = this device).
    pub fn connect(&self, qp: &Qp, remote_qpn: u32, rgid: [u8; 16], rnr_retry: u8) {
        let mut q = Qpc::new();
        q.primary_address_path_mut().set_vhca_port_num(1);
        q.set_rre(1);
        q.set_rwe(1);
        q.set_rae(1);
        q.set_atomic_mode(3);
        q.set_pm_state(3);
        q.set_q_key(0x1111_2222);
        self.modify(qp, 0x502, 0, &q).unwrap();
        let mut q = Qpc::new();
        q.set_mtu(3);
        q.set_log_msg_max(16);
        q.set_remote_qpn(remote_qpn);
        q.set_min_rnr_nak(1);
        let p = q.primary_address_path_mut();
        p.set_vhca_port_num(1);
        p.set_src_addr_index(1);
        p.set_hop_limit(64);
        p.set_rgid_rip(&rgid);
        self.modify(qp, 0x503, 0, &q).unwrap();
        let mut q = Qpc::new();
        q.set_retry_count(7);
        q.set_rnr_retry(rnr_retry);
        q.primary_address_path_mut().set_ack_timeout(14);
        self.modify(qp, 0x504, 0, &q).unwrap();
    }

    /// RST → INIT → RTR → RTS for a UD QP (q_key 0x11112222).
    pub fn connect_ud(&self, qp: &Qp) {
        let mut q = Qpc::new();
        q.primary_address_path_mut().set_vhca_port_num(1);
        q.set_q_key(0x1111_2222);
        self.modify(qp, 0x502, 0, &q).unwrap();
        self.modify(qp, 0x503, 0, &Qpc::new()).unwrap();
        self.modify(qp, 0x504, 0, &Qpc::new()).unwrap();
    }

    pub fn query_qp(&self, qp: &Qp) -> Qpc {
        let mut o = vec![0u8; QueryQpOut::SIZE_BYTES];
        self.ctx
            .query(
                qp.h,
                &support::with_num(hdr(Opcode::QueryQp.raw(), 0, 16), qp.qpn),
                &mut o,
            )
            .unwrap();
        *QueryQpOut::from_slice(&o).unwrap().qpc()
    }

    pub fn qp_state(&self, qp: &Qp) -> u8 {
        self.query_qp(qp).state()
    }
}

/// A CQ polled the way rdma-core does.
pub struct Cq {
    /// The context's handle of the CQ (for subscriptions).
    pub h: devx::Handle,
    pub cqn: u32,
    ring: usize,
    pub dbr: usize,
    pub log: u8,
    pub ci: u32,
}

/// One polled CQE, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    pub opcode: u8,
    pub syndrome: u8,
    pub qpn: u32,
    pub send_opcode: u8,
    pub wqe_counter: u16,
    pub byte_cnt: u32,
    pub imm: [u8; 4],
    pub rqpn: u32,
    pub grh: bool,
    pub uidx: u32,
    pub se: bool,
}

impl Cq {
    pub fn raw(&self, index: u32) -> [u8; 64] {
        let mut b = [0u8; 64];
        let at = self.ring + (index as usize & ((1 << self.log) - 1)) * 64;
        // SAFETY: inside the CQ ring region.
        unsafe { std::ptr::copy_nonoverlapping(at as *const u8, b.as_mut_ptr(), 64) };
        b
    }

    pub fn poll(&mut self) -> Option<Cqe> {
        let c = self.raw(self.ci);
        let op_own = c[63];
        let owner = ((self.ci >> self.log) & 1) as u8;
        if op_own >> 4 == 0xf || op_own & 1 != owner {
            return None;
        }
        self.ci += 1;
        // SAFETY: the CQ doorbell record region.
        unsafe { *(self.dbr as *mut [u8; 4]) = (self.ci & 0xff_ffff).to_be_bytes() };
        Some(Cqe {
            opcode: op_own >> 4,
            syndrome: c[55],
            qpn: be32(&c, 56) & 0xff_ffff,
            send_opcode: c[56],
            wqe_counter: be16(&c, 60),
            byte_cnt: be32(&c, 44),
            imm: [c[36], c[37], c[38], c[39]],
            rqpn: be32(&c, 24) & 0xff_ffff,
            grh: (be32(&c, 24) >> 28) & 3 != 0,
            uidx: be32(&c, 32) & 0xff_ffff,
            se: op_own & 2 != 0,
        })
    }

    pub fn poll_all(&mut self) -> Vec<Cqe> {
        std::iter::from_fn(|| self.poll()).collect()
    }

    /// Waits up to a second for a CQE (RNR retries run on a timer).
    pub fn wait(&mut self) -> Cqe {
        for _ in 0..2000 {
            if let Some(c) = self.poll() {
                return c;
            }
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
        panic!("no CQE on CQ {:#x}", self.cqn);
    }
}

/// A QP whose WQEs the test writes.
pub struct Qp {
    pub h: devx::Handle,
    pub qpn: u32,
    pub service: u8,
    buf: usize,
    sq: usize,
    pub log_sq: u8,
    pub log_rq: u8,
    pub stride: usize,
    dbr: usize,
    pub sq_pi: u16,
    pub rq_head: u16,
    bf: usize,
    pub page: Arc<dyn UarPage>,
}

pub fn data_seg(len: u32, key: u32, addr: u64) -> Vec<u8> {
    let mut s = WqeDataSeg::new();
    s.set_byte_count(len);
    s.set_lkey(key);
    s.set_addr(addr);
    s.as_bytes().to_vec()
}

pub fn raddr_seg(raddr: u64, rkey: u32) -> Vec<u8> {
    let mut s = WqeRaddrSeg::new();
    s.set_raddr(raddr);
    s.set_rkey(rkey);
    s.as_bytes().to_vec()
}

pub fn atomic_seg(swap_add: u64, compare: u64) -> Vec<u8> {
    let mut s = WqeAtomicSeg::new();
    s.set_swap_add(swap_add);
    s.set_compare(compare);
    s.as_bytes().to_vec()
}

pub fn inline_seg(data: &[u8]) -> Vec<u8> {
    let mut v = (0x8000_0000u32 | data.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(data);
    v.resize((4 + data.len()).div_ceil(16) * 16, 0);
    v
}

pub fn ud_seg(qkey: u32, dqpn: u32, rgid: [u8; 16]) -> Vec<u8> {
    let mut s = WqeDatagramSeg::new();
    s.key_mut().qkey_mut().set_qkey(qkey);
    s.set_dqp_dct(dqpn);
    s.set_grh_gid_fl(1 << 20);
    s.set_rgid(&rgid);
    s.as_bytes().to_vec()
}

impl Qp {
    fn write(&self, addr: usize, data: &[u8]) {
        // SAFETY: inside the QP's registered queue buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
    }

    fn set_dbr(&self, i: usize, v: u16) {
        // SAFETY: the QP's doorbell record region.
        unsafe { *((self.dbr + 4 * i) as *mut [u8; 4]) = u32::from(v).to_be_bytes() };
    }

    /// Writes one send WQE (ctrl + `segs`) at the producer index, without
    /// ringing; returns its wqe_index and the ctrl segment's first 8 bytes.
    pub fn write_wqe(
        &mut self,
        opcode: u8,
        fm_ce_se: u8,
        imm: [u8; 4],
        segs: &[&[u8]],
    ) -> (u16, u64) {
        // Built on the stack: the speed test posts millions of these.
        let mut wqe = [0u8; 1024];
        let mut len = 16;
        for s in segs {
            wqe[len..len + s.len()].copy_from_slice(s);
            len += s.len();
        }
        let ds = len.div_ceil(16);
        let mut ctrl = WqeCtrlSeg::new();
        ctrl.set_wqe_index(self.sq_pi);
        ctrl.set_opcode(opcode);
        ctrl.set_qpn(self.qpn);
        ctrl.set_ds(ds as u8);
        ctrl.set_fm_ce_se(fm_ce_se);
        ctrl.as_mut_bytes()[12..16].copy_from_slice(&imm);
        wqe[..16].copy_from_slice(ctrl.as_bytes());
        let wqe = &wqe[..ds * 16];
        let n = 1usize << self.log_sq;
        for (i, bb) in wqe.chunks(64).enumerate() {
            let slot = (usize::from(self.sq_pi) + i) & (n - 1);
            self.write(self.sq + slot * 64, bb);
        }
        let index = self.sq_pi;
        self.sq_pi = self.sq_pi.wrapping_add(wqe.len().div_ceil(64) as u16);
        let head = u64::from_ne_bytes(wqe[..8].try_into().unwrap());
        (index, head)
    }

    /// Writes raw bytes into the send ring from WQEBB counter `at` on,
    /// following the ring's wrap (for malformed WQEs).
    pub fn write_raw(&self, at: u16, bytes: &[u8]) {
        let n = 1usize << self.log_sq;
        for (i, bb) in bytes.chunks(64).enumerate() {
            let slot = (usize::from(at) + i) & (n - 1);
            self.write(self.sq + slot * 64, bb);
        }
    }

    /// Stores `counter` as the RCV counter, whatever was posted.
    pub fn set_rcv_counter(&self, counter: u16) {
        self.set_dbr(0, counter);
    }

    /// Stores `counter` as the SND counter and rings with `head`, whatever
    /// was written.
    pub fn ring_raw(&mut self, counter: u16, head: u64) {
        self.set_dbr(1, counter);
        self.page.write64(self.bf, head);
        self.bf ^= 0x100;
    }

    /// Stores the SND counter and rings the doorbell with `head`.
    pub fn ring(&mut self, head: u64) {
        self.set_dbr(1, self.sq_pi);
        self.page.write64(self.bf, head);
        self.bf ^= 0x100;
    }

    /// Posts one WQE and rings; returns its wqe_index.
    pub fn post(&mut self, opcode: u8, fm_ce_se: u8, imm: [u8; 4], segs: &[&[u8]]) -> u16 {
        let (i, head) = self.write_wqe(opcode, fm_ce_se, imm, segs);
        self.ring(head);
        i
    }

    /// Posts a receive WQE with `sges` (key, addr, len).
    pub fn post_recv(&mut self, sges: &[(u32, u64, u32)]) {
        let n = 1usize << self.log_rq;
        let base = self.buf + (usize::from(self.rq_head) & (n - 1)) * self.stride;
        let mut wqe = vec![0u8; self.stride];
        for (i, (k, a, l)) in sges.iter().enumerate() {
            wqe[i * 16..i * 16 + 16].copy_from_slice(&data_seg(*l, *k, *a));
        }
        if sges.len() * 16 < self.stride {
            let t = sges.len() * 16;
            wqe[t..t + 16].copy_from_slice(&data_seg(0, 0x100, 0));
        }
        self.write(base, &wqe);
        self.rq_head = self.rq_head.wrapping_add(1);
        self.set_dbr(0, self.rq_head);
    }
}

/// A connected pair: `a` on `na`, `b` on `nb` (the same node when one
/// device is used), one CQ per side.
pub struct Pair {
    pub a: Qp,
    pub b: Qp,
    pub cq_a: Cq,
    pub cq_b: Cq,
}

pub fn rc_pair_on(na: &Node, nb: Option<&Node>, service: u8, rnr_retry: u8) -> Pair {
    let cq_a = na.cq(6);
    let a = na.qp(service, &cq_a);
    match nb {
        None => {
            let cq_b = na.cq(6);
            let b = na.qp(service, &cq_b);
            na.connect(&a, b.qpn, [0; 16], rnr_retry);
            na.connect(&b, a.qpn, [0; 16], rnr_retry);
            Pair { a, b, cq_a, cq_b }
        }
        Some(nb) => {
            let cq_b = nb.cq(6);
            let b = nb.qp(service, &cq_b);
            na.connect(&a, b.qpn, nb.gid(), rnr_retry);
            nb.connect(&b, a.qpn, na.gid(), rnr_retry);
            Pair { a, b, cq_a, cq_b }
        }
    }
}
