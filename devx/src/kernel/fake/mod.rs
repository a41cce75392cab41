//! Test doubles for the kernel behind [`Sys`]: not for production use.
//!
//! [`FakeKernel`] answers like Linux 6.1's uverbs ioctl parser and mlx5 DEVX
//! handlers (framing rules, attribute kinds and sizes, IDR handles, FD
//! objects, EREMOTEIO with an outbox, the async fds, UAR mmap), with a tiny
//! firmware that succeeds unless told otherwise. It records every ioctl it
//! decodes so tests can check the bytes, and it notes where the caller
//! departs from what rdma-core sends ([`FakeKernel::violations`]).
//!
//! [`InstantKernel`] answers every ioctl with success at once; it measures
//! the provider's own overhead.
//!
//! Layout: this file holds the [`FakeKernel`] type and its knobs; `state`
//! its bookkeeping, `spec` the per-method attribute specs, `ioctl` and `ctx`
//! the ioctl decoding and framing checks, `methods` the per-object handlers,
//! `firmware` the tiny firmware, `write` the legacy write() command,
//! `syscalls` the [`Sys`] implementation and `instant` [`InstantKernel`].
//!
//! [`Sys`]: super::Sys

mod ctx;
mod firmware;
mod instant;
mod ioctl;
mod methods;
mod spec;
mod state;
mod syscalls;
mod write;

use crate::provider::GidTableEntry;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::abi::{self, IoctlAttr, IoctlHdr, UcontextResp, ALLOC_UCONTEXT_RESP_LEN};
use super::sys::Errno;

pub use instant::InstantKernel;
use state::{Config, FdState, State, Subscription};

/// First descriptor number the fake hands out; far from real descriptors so
/// a mix-up shows at once.
const FIRST_FAKE_FD: RawFd = 1_000_000;
/// The kernel caps outstanding async query output per command fd at 1 MiB.
const ASYNC_BYTES_LIMIT: usize = 1 << 20;
/// Longest a blocking poll waits in the fake before reporting a timeout.
const MAX_POLL_WAIT: Duration = Duration::from_secs(10);

/// What the kernel does to the next call of one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tamper {
    /// Fail with this errno before doing anything.
    Errno(i32),
    /// Return success without touching any output (no handle, no fd, no
    /// VALID_OUTPUT).
    SucceedSilently,
    /// Return EREMOTEIO without copying an outbox back.
    RemoteIoWithoutOutbox,
    /// Run the method, then overwrite the new handle or fd with this value.
    Handle(u64),
    /// Run the method, then fill every pointer output with 0xff and mark it valid.
    GarbageOutputs,
    /// Run the method, then make the ioctl return this value instead of 0.
    ReturnValue(i32),
}

/// One ioctl as the fake decoded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub fd: RawFd,
    pub request: u64,
    /// Header and attributes exactly as the caller passed them.
    pub raw: Vec<u8>,
    pub hdr: IoctlHdr,
    pub attrs: Vec<IoctlAttr>,
    /// Input payloads (inline or pointed to) of PTR_IN attributes, by id.
    pub inputs: Vec<(u16, Vec<u8>)>,
    /// The errno the fake answered, `None` for success.
    pub errno: Option<i32>,
}

impl Call {
    /// The attribute with this id, as sent.
    pub fn attr(&self, id: u16) -> Option<&IoctlAttr> {
        self.attrs.iter().find(|a| a.attr_id == id)
    }

    /// The input payload of the PTR_IN attribute with this id.
    pub fn input(&self, id: u16) -> Option<&[u8]> {
        self.inputs
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, v)| v.as_slice())
    }

    /// `DEVX_OBJ_CREATE`, `GET_CONTEXT`, …
    pub fn method_name(&self) -> &'static str {
        abi::method_name(self.hdr.object_id, self.hdr.method_id)
    }
}

/// A fake Linux kernel (uverbs + mlx5 DEVX + a trivial firmware) behind
/// [`Sys`](super::Sys). A test double: not for production use.
#[derive(Debug)]
pub struct FakeKernel {
    state: Mutex<State>,
    wake: Condvar,
}

impl Default for FakeKernel {
    fn default() -> Self {
        FakeKernel::new()
    }
}

impl FakeKernel {
    /// A kernel with DEVX firmware, write-combining, 4 completion vectors and
    /// the ioctl GET_CONTEXT method.
    pub fn new() -> FakeKernel {
        let ucontext = UcontextResp {
            qp_tab_size: 1 << 18,
            bf_reg_size: 512,
            tot_bfregs: 0,
            cache_line_size: 64,
            max_sq_desc_sz: 512,
            max_rq_desc_sz: 512,
            max_send_wqebb: 1 << 15,
            max_recv_wr: 1 << 15,
            max_srq_recv_wr: 1 << 15,
            num_ports: 1,
            comp_mask: 0x3,
            response_length: ALLOC_UCONTEXT_RESP_LEN as u32,
            cqe_version: 1,
            cmds_supp_uhw: 0x3,
            eth_min_inline: 1,
            clock_info_versions: 1,
            log_uar_size: 12,
            num_uars_per_page: 1,
            num_dyn_bfregs: 0,
            dump_fill_mkey: 0x100,
            ..UcontextResp::default()
        };
        FakeKernel {
            state: Mutex::new(State {
                cfg: Config {
                    ioctl_get_context: true,
                    devx: true,
                    wc: true,
                    num_comp_vectors: 4,
                    page_size: 4096,
                    gid_table: Vec::new(),
                    ucontext,
                },
                next_fd: FIRST_FAKE_FD,
                fds: HashMap::new(),
                files: HashMap::new(),
                next_file: 1,
                calls: Vec::new(),
                writes: Vec::new(),
                opened: Vec::new(),
                tampers: Vec::new(),
                fw_fail: HashMap::new(),
                fw_reply: HashMap::new(),
                open_error: None,
                mmap_error: None,
                maps: HashMap::new(),
                raw_reads: HashMap::new(),
                subs: Vec::new(),
                next_sub: 1,
                next_obj_id: 0x100,
                next_uar: 0x20,
                violations: Vec::new(),
                destroyed_on_close: 0,
            }),
            wake: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether GET_CONTEXT exists as an ioctl method (else EPROTONOSUPPORT,
    /// as on kernels that only have the write() command).
    pub fn set_ioctl_get_context(&self, on: bool) {
        self.lock().cfg.ioctl_get_context = on;
    }

    /// Whether the firmware supports DEVX (`log_max_uctx != 0`).
    pub fn set_devx(&self, on: bool) {
        self.lock().cfg.devx = on;
    }

    /// Whether the device maps write-combining (BlueFlame) UARs.
    pub fn set_write_combining(&self, on: bool) {
        self.lock().cfg.wc = on;
    }

    pub fn set_num_comp_vectors(&self, n: u32) {
        self.lock().cfg.num_comp_vectors = n;
    }

    /// The valid GID table entries QUERY_GID_TABLE returns (none at first).
    pub fn set_gid_table(&self, entries: Vec<GidTableEntry>) {
        self.lock().cfg.gid_table = entries;
    }

    /// The mlx5 response new contexts get.
    pub fn set_ucontext(&self, resp: UcontextResp) {
        self.lock().cfg.ucontext = resp;
    }

    /// The next call of (`object`, `method`) misbehaves as told.
    pub fn tamper_next(&self, object: u16, method: u16, how: Tamper) {
        self.lock().tampers.push((object, method, how));
    }

    /// Every later command with `opcode` fails in firmware with this status
    /// and syndrome (EREMOTEIO plus outbox, like the kernel).
    pub fn fail_opcode(&self, opcode: u16, status: u8, syndrome: u32) {
        self.lock().fw_fail.insert(opcode, (status, syndrome));
    }

    pub fn clear_fw_failures(&self) {
        self.lock().fw_fail.clear();
    }

    /// The outbox bytes firmware answers `opcode` with (status forced to 0).
    pub fn set_fw_reply(&self, opcode: u16, outbox: Vec<u8>) {
        self.lock().fw_reply.insert(opcode, outbox);
    }

    /// The next `open` fails with this errno.
    pub fn fail_open(&self, errno: i32) {
        self.lock().open_error = Some(Errno::from_raw(errno));
    }

    /// The next `mmap` fails with this errno.
    pub fn fail_mmap(&self, errno: i32) {
        self.lock().mmap_error = Some(Errno::from_raw(errno));
    }

    /// The next `read` of `fd` returns these bytes (or fails with the errno),
    /// ahead of anything queued.
    pub fn push_read(&self, fd: RawFd, answer: Result<Vec<u8>, i32>) {
        let mut s = self.lock();
        s.raw_reads
            .entry(fd)
            .or_default()
            .push_back(answer.map_err(Errno::from_raw));
        drop(s);
        self.wake.notify_all();
    }

    /// Queues an async event (`struct ib_uverbs_async_event_desc`:
    /// `element`, `event_type`) on every open async-event file; returns
    /// how many got it.
    pub fn raise_async_event(&self, event_type: u32, element: u64) -> usize {
        let mut s = self.lock();
        let mut desc = [0u8; 16];
        desc[0..8].copy_from_slice(&element.to_ne_bytes());
        desc[8..12].copy_from_slice(&event_type.to_ne_bytes());
        let mut n = 0;
        for st in s.fds.values_mut() {
            if let FdState::VerbsAsync { queue, .. } = st {
                queue.push_back(desc);
                n += 1;
            }
        }
        drop(s);
        self.wake.notify_all();
        n
    }

    /// Raises firmware event `event_type` (for object handle `obj`, or
    /// device-wide) with this EQE; returns how many channels and redirect
    /// eventfds got it.
    pub fn raise_event(&self, event_type: u16, obj: Option<u32>, eqe: &[u8; 64]) -> usize {
        let mut s = self.lock();
        let wanted = |sub: &&Subscription| sub.obj == obj && sub.types.contains(&event_type);
        // Redirected subscriptions signal their eventfd and queue nothing.
        let mut n = 0;
        for sub in s.subs.iter().filter(wanted) {
            if let Some(efd) = &sub.redirect {
                efd.signal();
                n += 1;
            }
        }
        let targets: Vec<(usize, RawFd, u64)> = s
            .subs
            .iter()
            .filter(wanted)
            .filter(|sub| sub.redirect.is_none())
            .map(|sub| (sub.id, sub.event_fd, sub.cookie))
            .collect();
        for (id, fd, cookie) in targets {
            if let Some(FdState::AsyncEvent {
                queue, omit_data, ..
            }) = s.fds.get_mut(&fd)
            {
                if *omit_data {
                    // Repeated events of one subscription collapse while queued.
                    if !queue.iter().any(|(sid, _)| *sid == id) {
                        queue.push_back((id, cookie.to_ne_bytes().to_vec()));
                    }
                } else {
                    let mut ev = cookie.to_ne_bytes().to_vec();
                    ev.extend_from_slice(eqe);
                    queue.push_back((id, ev));
                }
                n += 1;
            }
        }
        drop(s);
        self.wake.notify_all();
        n
    }

    /// Every ioctl decoded so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The last ioctl decoded.
    pub fn last_call(&self) -> Option<Call> {
        self.lock().calls.last().cloned()
    }

    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// Buffers passed to `write`.
    pub fn writes(&self) -> Vec<Vec<u8>> {
        self.lock().writes.clone()
    }

    /// Paths and flags passed to `open`.
    pub fn opened(&self) -> Vec<(PathBuf, i32)> {
        self.lock().opened.clone()
    }

    /// Departures from what rdma-core sends (flags, reserved fields, open
    /// flags…) that a real kernel might still accept.
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// Descriptors currently open in the fake.
    pub fn open_fds(&self) -> usize {
        self.lock().fds.len()
    }

    /// Objects (DEVX objects, umems, UARs) alive in all open files.
    pub fn live_objects(&self) -> usize {
        self.lock().files.values().map(|f| f.objects.len()).sum()
    }

    /// Objects destroyed because their uverbs file was closed.
    pub fn destroyed_on_close(&self) -> usize {
        self.lock().destroyed_on_close
    }

    /// Live UAR mappings.
    pub fn mappings(&self) -> usize {
        self.lock().maps.len()
    }

    /// Reads the 64-bit word at `offset` of the mapped UAR page `page_id`
    /// (what a doorbell store left there).
    pub fn read_uar_u64(&self, page_id: u32, offset: usize) -> Option<u64> {
        let s = self.lock();
        let (addr, map) = s.maps.iter().find(|(_, m)| m.page_id == page_id)?;
        if offset & 7 != 0 || offset.checked_add(8)? > map.len {
            return None;
        }
        // SAFETY: the mapping is live (it is removed from `maps` before it is
        // unmapped, under the same lock) and the slot is inside it and aligned.
        Some(unsafe { std::ptr::read_volatile((*addr + offset) as *const u64) })
    }
}
