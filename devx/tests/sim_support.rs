//! Shared helpers for the emulated-device tests: one device per test (the
//! registry is process-wide and tests run in parallel), mailbox builders and
//! owned queue memory.
#![allow(dead_code, unused_imports)]

use std::sync::Arc;

use devx::sim::{self, SimContext, SimDevice};
use devx::{Error, Handle, ProviderContext, UarKind};
use prm_layouts::*;

pub const LOCAL_WRITE: u32 = 1;
pub const REMOTE_WRITE: u32 = 2;
pub const REMOTE_READ: u32 = 4;

/// Page-aligned owned memory for UMEMs.
pub struct Mem {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl Mem {
    pub fn new(len: usize) -> Mem {
        let buf = vec![0u8; len + 4096];
        let off = (4096 - (buf.as_ptr() as usize % 4096)) % 4096;
        Mem { buf, off, len }
    }
    pub fn addr(&self) -> usize {
        self.buf.as_ptr() as usize + self.off
    }
    pub fn size(&self) -> usize {
        self.len
    }
}

/// A context on its own device, with the memory its UMEMs use.
pub struct Env {
    pub ctx: Arc<SimContext>,
    pub dev: Arc<SimDevice>,
    mems: Vec<Mem>,
}

pub use prm_layouts::bytes::{be16, be32};

/// Header-only inbox: opcode, op_mod, and a 24-bit number at 0x48.
pub fn hdr(opcode: u16, op_mod: u16, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len.max(16)];
    b[0..2].copy_from_slice(&opcode.to_be_bytes());
    b[6..8].copy_from_slice(&op_mod.to_be_bytes());
    b
}

pub fn with_num(mut b: Vec<u8>, n: u32) -> Vec<u8> {
    b[8..12].copy_from_slice(&(n & 0xff_ffff).to_be_bytes());
    b
}

/// Status and syndrome of a firmware error.
pub fn fw(e: &Error) -> (u8, u32) {
    match e {
        Error::Firmware {
            status, syndrome, ..
        } => (*status, *syndrome),
        other => panic!("expected a firmware error, got {other:?}"),
    }
}

pub fn errno(e: &Error) -> i32 {
    match e {
        Error::Os { errno, .. } => *errno,
        other => panic!("expected an OS error, got {other:?}"),
    }
}

pub fn check(e: &Error, c: sim::syndrome::Check) {
    assert_eq!(
        fw(e),
        (c.status, c.syndrome),
        "expected {} ({}), got {e}",
        c.name,
        c.what
    );
}

impl Env {
    /// A fresh context on `simN` (created on first use).
    pub fn new(index: u32) -> Env {
        let dev = sim::sim_device(&format!("sim{index}")).unwrap();
        let ctx = dev.open_sim().unwrap();
        Env {
            ctx,
            dev,
            mems: Vec::new(),
        }
    }

    /// A fresh context on `dev`.
    pub fn on(dev: Arc<SimDevice>) -> Env {
        Env {
            ctx: dev.open_sim().unwrap(),
            dev,
            mems: Vec::new(),
        }
    }

    /// Another context on the same device.
    pub fn sibling(&self) -> Env {
        Env {
            ctx: self.dev.open_sim().unwrap(),
            dev: self.dev.clone(),
            mems: Vec::new(),
        }
    }

    pub fn create(&self, inbox: &[u8], outlen: usize) -> Result<(Handle, Vec<u8>), Error> {
        let mut out = vec![0u8; outlen];
        match self.ctx.create(inbox, &mut out) {
            Ok(h) => Ok((h, out)),
            Err(e) => {
                if let Error::Firmware {
                    status, syndrome, ..
                } = &e
                {
                    // The outbox carries what firmware said, as the kernel copies it.
                    assert_eq!(out[0], *status);
                    assert_eq!(be32(&out, 4), *syndrome);
                }
                Err(e)
            }
        }
    }

    pub fn general(&self, inbox: &[u8], outlen: usize) -> Result<Vec<u8>, Error> {
        let mut out = vec![0u8; outlen];
        self.ctx.general(inbox, &mut out).map(|()| out)
    }

    pub fn query(&self, h: Handle, inbox: &[u8], outlen: usize) -> Result<Vec<u8>, Error> {
        let mut out = vec![0u8; outlen];
        self.ctx.query(h, inbox, &mut out).map(|()| out)
    }

    pub fn modify(&self, h: Handle, inbox: &[u8]) -> Result<(), Error> {
        let mut out = vec![0u8; 16];
        self.ctx.modify(h, inbox, &mut out)
    }

    pub fn destroy(&self, h: Handle) -> Result<(), Error> {
        self.ctx.destroy(h, &[])
    }

    pub fn pd(&self) -> (Handle, u32) {
        let (h, out) = self.create(&hdr(Opcode::AllocPd.raw(), 0, 16), 16).unwrap();
        (h, be32(&out, 8) & 0xff_ffff)
    }

    /// Registers `len` bytes of fresh memory.
    pub fn umem(&mut self, len: usize, access: u32) -> (Handle, u32) {
        let m = Mem::new(len);
        let r = self.ctx.umem_reg(m.addr(), m.size(), access).unwrap();
        self.mems.push(m);
        r
    }

    pub fn uar(&self) -> (Handle, u32) {
        let u = self.ctx.uar_alloc(UarKind::BlueFlame).unwrap();
        (u.handle, u.page_id)
    }

    pub fn eqn(&self) -> u32 {
        self.ctx.query_eqn(0).unwrap()
    }

    /// A CREATE_CQ inbox over fresh UMEMs.
    pub fn cq_inbox(&mut self, log_size: u8) -> Vec<u8> {
        let (_, umem) = self.umem(64 << log_size, LOCAL_WRITE);
        let (_, dbr) = self.umem(64, LOCAL_WRITE);
        let (_, uar) = self.uar();
        let eqn = self.eqn();
        cq_inbox(log_size, umem, 0, dbr, 0, uar, eqn)
    }

    pub fn cq(&mut self, log_size: u8) -> (Handle, u32) {
        let inbox = self.cq_inbox(log_size);
        let (h, out) = self.create(&inbox, 16).unwrap();
        (h, be32(&out, 8) & 0xff_ffff)
    }

    /// An RC (or other type) CREATE_QP inbox over fresh UMEMs.
    pub fn qp_inbox(&mut self, service: u8, pd: u32, cqn: u32) -> Vec<u8> {
        let (log_rq, stride, log_sq) = (4u8, 2u8, 4u8);
        let bytes = (1usize << log_rq) * (16 << stride) + (1usize << log_sq) * 64;
        let (_, umem) = self.umem(bytes, LOCAL_WRITE);
        let (_, dbr) = self.umem(64, LOCAL_WRITE);
        let (_, uar) = self.uar();
        let mut m = CreateQpIn::new();
        m.set_opcode(0x500);
        m.set_wq_umem_id(umem);
        let q = m.qpc_mut();
        q.set_st(service);
        q.set_pm_state(3);
        q.set_pd(pd);
        q.set_log_rq_size(log_rq);
        q.set_log_rq_stride(stride);
        q.set_log_sq_size(log_sq);
        q.set_uar_page(uar);
        q.set_cqn_snd(cqn);
        q.set_cqn_rcv(cqn);
        q.set_dbr_umem_id(dbr);
        q.set_ts_format(1);
        m.as_bytes().to_vec()
    }

    pub fn qp(&mut self, service: u8) -> (Handle, u32) {
        let (_, pd) = self.pd();
        let (_, cqn) = self.cq(6);
        let inbox = self.qp_inbox(service, pd, cqn);
        let (h, out) = self.create(&inbox, 16).unwrap();
        (h, be32(&out, 8) & 0xff_ffff)
    }

    /// An MTT mkey over a fresh UMEM of `len` bytes.
    pub fn mkey_inbox(&mut self, pd: u32, len: u64, umem_access: u32) -> Vec<u8> {
        let (_, umem) = self.umem(len as usize, umem_access);
        mkey_inbox(pd, umem, 0, 0x1000, len)
    }
}

pub fn cq_inbox(
    log: u8,
    umem: u32,
    off: u64,
    dbr: u32,
    dbr_addr: u64,
    uar: u32,
    eqn: u32,
) -> Vec<u8> {
    let mut m = CreateCqIn::new();
    m.set_opcode(0x400);
    m.set_cq_umem_id(umem);
    m.set_cq_umem_offset(off);
    let c = m.cq_context_mut();
    c.set_log_cq_size(log);
    c.set_uar_page(uar);
    c.set_c_eqn_or_apu_element(eqn);
    c.set_dbr_umem_id(dbr);
    c.set_dbr_addr(dbr_addr);
    c.set_cq_period(16);
    c.set_cq_max_count(32);
    m.as_bytes().to_vec()
}

pub fn mkey_inbox(pd: u32, umem: u32, umem_off: u64, start: u64, len: u64) -> Vec<u8> {
    let mut m = CreateMkeyIn::new();
    m.set_opcode(0x200);
    m.set_mkey_umem_id(umem);
    m.set_mkey_umem_offset(umem_off);
    let c = m.memory_key_mkey_entry_mut();
    c.set_access_mode_1_0(1);
    c.set_lr(1);
    c.set_lw(1);
    c.set_rr(1);
    c.set_rw(1);
    c.set_qpn(0xff_ffff);
    c.set_mkey_7_0(0x42);
    c.set_pd(pd);
    c.set_start_addr(start);
    c.set_len(len);
    m.as_bytes().to_vec()
}

/// A QP transition inbox (272 bytes) with `qpc` and `opt_param_mask`.
pub fn transition(opcode: u16, qpn: u32, opt: u32, qpc: &Qpc) -> Vec<u8> {
    let mut m = Rst2initQpIn::new();
    m.set_opcode(opcode);
    m.set_qpn(qpn);
    m.set_opt_param_mask(opt);
    *m.qpc_mut() = *qpc;
    m.as_bytes().to_vec()
}

pub fn query_qp(env: &Env, h: Handle, qpn: u32) -> Qpc {
    let out = env
        .query(
            h,
            &with_num(hdr(Opcode::QueryQp.raw(), 0, 16), qpn),
            QueryQpOut::SIZE_BYTES,
        )
        .unwrap();
    *QueryQpOut::from_slice(&out).unwrap().qpc()
}
