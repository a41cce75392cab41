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

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::abi::{
    self, async_fd, devx, devx_obj, obj, uar, umem, verbs, AllocUcontextReq, IoctlAttr, IoctlHdr,
    UcontextResp, ALLOC_UCONTEXT_RESP_LEN, ATTR_LEN, HDR_LEN, MLX5_IB_ALLOC_UCTX_DEVX,
    MLX5_LIB_CAP_DYN_UAR, RDMA_DRIVER_MLX5, RDMA_VERBS_IOCTL, UVERBS_ATTR_F_MANDATORY,
    UVERBS_ATTR_F_VALID_OUTPUT,
};
use super::sys::{Errno, Sys, SysResult};

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

/// Where an object handle may come from (uverbs object types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ObjType {
    DevxObj,
    Umem,
    Uar,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FdType {
    AsyncCmd,
    AsyncEvent,
}

/// Attribute kinds of the kernel's method specs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    IdrNew,
    IdrRead(Option<ObjType>),
    IdrDestroy(ObjType),
    FdNew,
    FdRead(FdType),
    /// PTR_IN with `min..=max` bytes.
    PtrIn(u16, u16),
    /// PTR_OUT with `min..=max` bytes.
    PtrOut(u16, u16),
    ConstIn,
    /// FLAGS_IN with these bits allowed.
    FlagsIn(u64),
    RawFd,
}

#[derive(Debug, Clone, Copy)]
struct AttrSpec {
    id: u16,
    kind: Kind,
    /// The kernel refuses the call when this attribute is missing.
    mandatory: bool,
    /// rdma-core sends it with UVERBS_ATTR_F_MANDATORY.
    rdma_core_mandatory: bool,
}

const fn m(id: u16, kind: Kind) -> AttrSpec {
    AttrSpec {
        id,
        kind,
        mandatory: true,
        rdma_core_mandatory: true,
    }
}

const fn o(id: u16, kind: Kind) -> AttrSpec {
    AttrSpec {
        id,
        kind,
        mandatory: false,
        rdma_core_mandatory: true,
    }
}

const ANY: u16 = u16::MAX;
const MAILBOX_IN: Kind = Kind::PtrIn(16, ANY);
const MAILBOX_OUT: Kind = Kind::PtrOut(16, ANY);
const U32_IN: Kind = Kind::PtrIn(4, 4);
const U64_IN: Kind = Kind::PtrIn(8, 8);
const U32_OUT: Kind = Kind::PtrOut(4, 4);
const U64_OUT: Kind = Kind::PtrOut(8, 8);

/// IB access flags UMEM_REG admits.
const UMEM_ACCESS: u64 = 0x1 | 0x2 | 0x4 | 0x0010_0000;

static GET_CONTEXT: &[AttrSpec] = &[
    o(verbs::UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS, U32_OUT),
    o(verbs::UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT, U64_OUT),
    o(verbs::UVERBS_ATTR_UHW_IN, Kind::PtrIn(0, ANY)),
    o(verbs::UVERBS_ATTR_UHW_OUT, Kind::PtrOut(0, ANY)),
];
static OTHER: &[AttrSpec] = &[
    m(devx::OTHER_CMD_IN, MAILBOX_IN),
    m(devx::OTHER_CMD_OUT, MAILBOX_OUT),
];
static QUERY_UAR: &[AttrSpec] = &[m(0x1000, U32_IN), m(0x1001, U32_OUT)];
static QUERY_EQN: &[AttrSpec] = &[
    m(devx::QUERY_EQN_USER_VEC, U32_IN),
    m(devx::QUERY_EQN_DEV_EQN, U32_OUT),
];
static SUBSCRIBE: &[AttrSpec] = &[
    m(devx::SUBSCRIBE_FD_HANDLE, Kind::FdRead(FdType::AsyncEvent)),
    o(
        devx::SUBSCRIBE_OBJ_HANDLE,
        Kind::IdrRead(Some(ObjType::DevxObj)),
    ),
    m(devx::SUBSCRIBE_TYPE_NUM_LIST, Kind::PtrIn(2, ANY)),
    o(devx::SUBSCRIBE_FD_NUM, U32_IN),
    o(devx::SUBSCRIBE_COOKIE, U64_IN),
];
static OBJ_CREATE: &[AttrSpec] = &[
    m(devx_obj::HANDLE, Kind::IdrNew),
    m(devx_obj::CMD_IN, MAILBOX_IN),
    m(devx_obj::CMD_OUT, MAILBOX_OUT),
];
static OBJ_DESTROY: &[AttrSpec] = &[m(devx_obj::HANDLE, Kind::IdrDestroy(ObjType::DevxObj))];
static OBJ_QUERY_MODIFY: &[AttrSpec] = &[
    m(devx_obj::HANDLE, Kind::IdrRead(None)),
    m(devx_obj::CMD_IN, MAILBOX_IN),
    m(devx_obj::CMD_OUT, MAILBOX_OUT),
];
static OBJ_ASYNC_QUERY: &[AttrSpec] = &[
    m(devx_obj::HANDLE, Kind::IdrRead(None)),
    m(devx_obj::CMD_IN, MAILBOX_IN),
    m(devx_obj::ASYNC_FD, Kind::FdRead(FdType::AsyncCmd)),
    m(devx_obj::ASYNC_WR_ID, U64_IN),
    m(devx_obj::ASYNC_OUT_LEN, Kind::ConstIn),
];
static UMEM_REG: &[AttrSpec] = &[
    m(umem::HANDLE, Kind::IdrNew),
    m(umem::ADDR, U64_IN),
    m(umem::LEN, U64_IN),
    o(umem::ACCESS, Kind::FlagsIn(UMEM_ACCESS)),
    m(umem::OUT_ID, U32_OUT),
    AttrSpec {
        id: umem::PGSZ_BITMAP,
        kind: Kind::ConstIn,
        mandatory: false,
        rdma_core_mandatory: false,
    },
    o(umem::DMABUF_FD, Kind::RawFd),
];
static UMEM_DEREG: &[AttrSpec] = &[m(umem::HANDLE, Kind::IdrDestroy(ObjType::Umem))];
static ASYNC_CMD_ALLOC: &[AttrSpec] = &[m(async_fd::HANDLE, Kind::FdNew)];
static ASYNC_EVENT_ALLOC: &[AttrSpec] = &[
    m(async_fd::HANDLE, Kind::FdNew),
    m(
        async_fd::EVENT_FLAGS,
        Kind::FlagsIn(async_fd::FLAG_OMIT_DATA as u64),
    ),
];
static UAR_ALLOC: &[AttrSpec] = &[
    m(uar::HANDLE, Kind::IdrNew),
    m(uar::TYPE, Kind::ConstIn),
    m(uar::MMAP_OFFSET, U64_OUT),
    m(uar::MMAP_LENGTH, U32_OUT),
    m(uar::PAGE_ID, U32_OUT),
];
static UAR_DESTROY: &[AttrSpec] = &[m(uar::HANDLE, Kind::IdrDestroy(ObjType::Uar))];

fn method_spec(object: u16, method: u16) -> Option<&'static [AttrSpec]> {
    Some(match (object, method) {
        (verbs::UVERBS_OBJECT_DEVICE, verbs::UVERBS_METHOD_GET_CONTEXT) => GET_CONTEXT,
        (obj::DEVX, devx::METHOD_OTHER) => OTHER,
        (obj::DEVX, devx::METHOD_QUERY_UAR) => QUERY_UAR,
        (obj::DEVX, devx::METHOD_QUERY_EQN) => QUERY_EQN,
        (obj::DEVX, devx::METHOD_SUBSCRIBE_EVENT) => SUBSCRIBE,
        (obj::DEVX_OBJ, devx_obj::METHOD_CREATE) => OBJ_CREATE,
        (obj::DEVX_OBJ, devx_obj::METHOD_DESTROY) => OBJ_DESTROY,
        (obj::DEVX_OBJ, devx_obj::METHOD_MODIFY) => OBJ_QUERY_MODIFY,
        (obj::DEVX_OBJ, devx_obj::METHOD_QUERY) => OBJ_QUERY_MODIFY,
        (obj::DEVX_OBJ, devx_obj::METHOD_ASYNC_QUERY) => OBJ_ASYNC_QUERY,
        (obj::DEVX_UMEM, umem::METHOD_REG) => UMEM_REG,
        (obj::DEVX_UMEM, umem::METHOD_DEREG) => UMEM_DEREG,
        (obj::DEVX_ASYNC_CMD_FD, async_fd::METHOD_ALLOC) => ASYNC_CMD_ALLOC,
        (obj::DEVX_ASYNC_EVENT_FD, async_fd::METHOD_ALLOC) => ASYNC_EVENT_ALLOC,
        (obj::UAR, uar::METHOD_ALLOC) => UAR_ALLOC,
        (obj::UAR, uar::METHOD_DESTROY) => UAR_DESTROY,
        _ => return None,
    })
}

/// Opcode classes of the DEVX methods (Linux 6.1 `devx_is_*_cmd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Create,
    Modify,
    Query,
    General,
}

fn classify(inbox: &[u8]) -> Option<Class> {
    let op = abi::be16(inbox, 0);
    let op_mod = abi::be16(inbox, 6);
    match op {
        0x936 if op_mod == 0 => Some(Class::Create),
        0x936 if op_mod == 1 => Some(Class::Modify),
        0x827 | 0x829 => Some(Class::Create), // also modify; the method decides
        0xa00 | 0x200 | 0x400 | 0x500 | 0x600 | 0x700 | 0x705 | 0x710 | 0x717 | 0x771 | 0x782
        | 0x800 | 0x806 | 0x80e | 0x816 | 0x900 | 0x904 | 0x908 | 0x90c | 0x912 | 0x916 | 0x930
        | 0x933 | 0x939 | 0x93d | 0x940 => Some(Class::Create),
        0x403
        | 0x502..=0x507
        | 0x50a
        | 0x50e
        | 0x703
        | 0x708
        | 0x714
        | 0x71a
        | 0x726
        | 0x729
        | 0x72a
        | 0x785
        | 0x901
        | 0x905
        | 0x909
        | 0x90d
        | 0x913
        | 0x917
        | 0x93c
        | 0xa01 => Some(Class::Modify),
        0x201 | 0x402 | 0x50b | 0x702 | 0x707 | 0x713 | 0x719 | 0x725 | 0x727 | 0x773 | 0x784
        | 0x82a | 0x903 | 0x907 | 0x90b | 0x90f | 0x915 | 0x919 | 0x932 | 0x935 | 0x937 | 0x93b
        | 0x93f | 0x942 | 0xa02 => Some(Class::Query),
        0xb00..=0xcff
        | 0x100
        | 0x101
        | 0x10a
        | 0x740
        | 0x750
        | 0x752
        | 0x754
        | 0x760
        | 0x762
        | 0x76f
        | 0x770
        | 0x80a
        | 0x80d
        | 0x822
        | 0x824
        | 0x826
        | 0x842 => Some(Class::General),
        _ => None,
    }
}

fn class_admits(class: Class, inbox: &[u8]) -> bool {
    let op = abi::be16(inbox, 0);
    match (class, op) {
        (Class::Modify, 0x827 | 0x829) => true,
        _ => classify(inbox) == Some(class),
    }
}

#[derive(Debug)]
enum FakeObj {
    Devx { opcode: u16, obj_id: u32 },
    Umem,
    Uar { mmap_offset: u64 },
}

impl FakeObj {
    fn ty(&self) -> ObjType {
        match self {
            FakeObj::Devx { .. } => ObjType::DevxObj,
            FakeObj::Umem => ObjType::Umem,
            FakeObj::Uar { .. } => ObjType::Uar,
        }
    }
}

#[derive(Debug, Default)]
struct UFile {
    /// `Some(devx)` once a ucontext exists; `devx` = it has a DEVX uid.
    ctx: Option<bool>,
    objects: HashMap<u32, FakeObj>,
    next_handle: u32,
}

#[derive(Debug)]
enum FdState {
    Uverbs {
        file: u32,
    },
    /// The verbs async-event fd the write() GET_CONTEXT creates.
    VerbsAsync,
    AsyncCmd {
        file: u32,
        queue: VecDeque<Vec<u8>>,
        bytes: usize,
        nonblock: bool,
    },
    AsyncEvent {
        file: u32,
        queue: VecDeque<(usize, Vec<u8>)>,
        omit_data: bool,
        nonblock: bool,
    },
}

#[derive(Debug)]
struct Subscription {
    id: usize,
    event_fd: RawFd,
    obj: Option<u32>,
    types: Vec<u16>,
    cookie: u64,
}

#[derive(Debug)]
struct Mapping {
    len: usize,
    page_id: u32,
}

#[derive(Debug)]
struct Config {
    ioctl_get_context: bool,
    devx: bool,
    wc: bool,
    num_comp_vectors: u32,
    page_size: usize,
    ucontext: UcontextResp,
}

#[derive(Debug)]
struct State {
    cfg: Config,
    next_fd: RawFd,
    fds: HashMap<RawFd, FdState>,
    files: HashMap<u32, UFile>,
    next_file: u32,
    calls: Vec<Call>,
    writes: Vec<Vec<u8>>,
    opened: Vec<(PathBuf, i32)>,
    tampers: Vec<(u16, u16, Tamper)>,
    fw_fail: HashMap<u16, (u8, u32)>,
    fw_reply: HashMap<u16, Vec<u8>>,
    open_error: Option<Errno>,
    mmap_error: Option<Errno>,
    maps: HashMap<usize, Mapping>,
    raw_reads: HashMap<RawFd, VecDeque<Result<Vec<u8>, Errno>>>,
    subs: Vec<Subscription>,
    next_sub: usize,
    next_obj_id: u32,
    next_uar: u32,
    violations: Vec<String>,
    destroyed_on_close: usize,
}

/// A fake Linux kernel (uverbs + mlx5 DEVX + a trivial firmware) behind
/// [`Sys`]. A test double: not for production use.
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

    /// Raises firmware event `event_type` (for object handle `obj`, or
    /// device-wide) with this EQE; returns how many channels got it.
    pub fn raise_event(&self, event_type: u16, obj: Option<u32>, eqe: &[u8; 64]) -> usize {
        let mut s = self.lock();
        let targets: Vec<(usize, RawFd, u64)> = s
            .subs
            .iter()
            .filter(|sub| sub.obj == obj && sub.types.contains(&event_type))
            .map(|sub| (sub.id, sub.event_fd, sub.cookie))
            .collect();
        let mut n = 0;
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

    fn alloc_fd(s: &mut State, st: FdState) -> RawFd {
        let fd = s.next_fd;
        s.next_fd += 1;
        s.fds.insert(fd, st);
        fd
    }

    fn take_tamper(s: &mut State, object: u16, method: u16) -> Option<Tamper> {
        let i = s
            .tampers
            .iter()
            .position(|(o, m, _)| *o == object && *m == method)?;
        Some(s.tampers.remove(i).2)
    }

    /// Firmware: the outbox for `inbox`, and whether it failed.
    fn firmware(s: &mut State, inbox: &[u8], outlen: usize, class: Class) -> (Vec<u8>, bool) {
        let opcode = abi::be16(inbox, 0);
        let mut out = vec![0u8; outlen];
        if let Some(&(status, syndrome)) = s.fw_fail.get(&opcode) {
            out[0] = status;
            if outlen >= 8 {
                out[4..8].copy_from_slice(&syndrome.to_be_bytes());
            }
            return (out, status != 0);
        }
        if let Some(reply) = s.fw_reply.get(&opcode) {
            let n = reply.len().min(outlen);
            out[..n].copy_from_slice(&reply[..n]);
            out[0] = 0;
        }
        if class == Class::Create && outlen >= 12 {
            let id = s.next_obj_id;
            s.next_obj_id += 1;
            let id = if opcode == 0xa00 {
                id
            } else {
                id & 0x00ff_ffff
            };
            out[8..12].copy_from_slice(&id.to_be_bytes());
        }
        (out, false)
    }
}

/// An attribute as decoded from the caller's buffer.
struct Decoded<'s> {
    index: usize,
    spec: &'s AttrSpec,
    attr: IoctlAttr,
}

/// The running ioctl: attributes and where to write answers.
struct Ctx<'a> {
    attrs: Vec<IoctlAttr>,
    decoded: Vec<Decoded<'static>>,
    inputs: Vec<(u16, Vec<u8>)>,
    buf: &'a mut [u8],
}

impl Ctx<'_> {
    fn find(&self, id: u16) -> Option<&Decoded<'static>> {
        self.decoded.iter().find(|d| d.attr.attr_id == id)
    }

    fn input(&self, id: u16) -> Option<&[u8]> {
        self.inputs
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, v)| v.as_slice())
    }

    fn input_u64(&self, id: u16) -> Option<u64> {
        self.input(id).map(|b| abi::ne64(b, 0))
    }

    fn input_u32(&self, id: u16) -> Option<u32> {
        self.input(id).map(|b| abi::ne32(b, 0))
    }

    fn obj_data(&self, id: u16) -> Option<u64> {
        self.find(id).map(|d| d.attr.data)
    }

    fn out_len(&self, id: u16) -> usize {
        self.find(id).map_or(0, |d| d.attr.len as usize)
    }

    fn set_data(&mut self, id: u16, value: u64) {
        if let Some(i) = self.find(id).map(|d| d.index) {
            self.attrs[i].data = value;
        }
    }

    /// Copies `bytes` to a PTR_OUT (at most its length) and marks it valid.
    fn write_out(&mut self, id: u16, bytes: &[u8]) -> Result<(), Errno> {
        let Some(d) = self.find(id) else {
            return Ok(());
        };
        let (index, ptr, len) = (d.index, d.attr.data, d.attr.len as usize);
        let n = len.min(bytes.len());
        if n > 0 {
            if ptr == 0 {
                return Err(Errno::EFAULT);
            }
            // SAFETY: the Sys::ioctl contract makes every PTR_OUT valid for
            // writes of its `len` bytes during the call; `n <= len`.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr as *mut u8, n) };
        }
        self.attrs[index].flags |= UVERBS_ATTR_F_VALID_OUTPUT;
        Ok(())
    }

    fn garble_outputs(&mut self) {
        let outs: Vec<u16> = self
            .decoded
            .iter()
            .filter(|d| matches!(d.spec.kind, Kind::PtrOut(..)))
            .map(|d| d.attr.attr_id)
            .collect();
        for id in outs {
            let len = self.out_len(id);
            let _ = self.write_out(id, &vec![0xff; len]);
        }
    }

    /// Writes the (possibly updated) attributes back into the caller's buffer.
    fn flush(&mut self) {
        for (i, a) in self.attrs.iter().enumerate() {
            let at = HDR_LEN + i * ATTR_LEN;
            if let Some(dst) = self.buf.get_mut(at..at + ATTR_LEN) {
                dst.copy_from_slice(&a.to_bytes());
            }
        }
    }
}

impl FakeKernel {
    /// Decodes and runs one uverbs ioctl.
    ///
    /// # Safety
    /// As [`Sys::ioctl`].
    unsafe fn uverbs_ioctl(&self, fd: RawFd, request: u64, arg: *mut u8) -> SysResult<i32> {
        let mut s = self.lock();
        let file = match s.fds.get(&fd) {
            Some(FdState::Uverbs { file }) => *file,
            Some(_) => return Err(Errno::ENOTTY),
            None => return Err(Errno::EBADF),
        };
        if request != RDMA_VERBS_IOCTL {
            return Err(Errno::ENOTTY);
        }
        if arg.is_null() {
            return Err(Errno::EFAULT);
        }
        // SAFETY: the contract makes `arg` valid for at least the 24-byte header.
        let head: [u8; HDR_LEN] = unsafe { std::ptr::read_unaligned(arg.cast()) };
        let hdr = IoctlHdr::from_bytes(&head);
        let length = hdr.length as usize;
        let mut call = Call {
            fd,
            request,
            raw: head.to_vec(),
            hdr,
            attrs: Vec::new(),
            inputs: Vec::new(),
            errno: None,
        };
        if length != HDR_LEN + ATTR_LEN * hdr.num_attrs as usize || length > 4096 {
            call.errno = Some(libc::EINVAL);
            s.calls.push(call);
            return Err(Errno::EINVAL);
        }
        // SAFETY: the contract makes `arg` valid and writable for `hdr.length`
        // bytes, which was just checked to be the header plus its attributes.
        let buf = unsafe { std::slice::from_raw_parts_mut(arg, length) };
        call.raw = buf.to_vec();
        let attrs: Vec<IoctlAttr> = buf[HDR_LEN..]
            .chunks_exact(ATTR_LEN)
            .map(|c| IoctlAttr::from_bytes(c.try_into().unwrap_or(&[0; ATTR_LEN])))
            .collect();
        call.attrs = attrs.clone();
        let mut ctx = Ctx {
            attrs,
            decoded: Vec::new(),
            inputs: Vec::new(),
            buf,
        };
        // SAFETY: pointer attributes are valid per the contract.
        let r = unsafe { self.run(&mut s, file, &hdr, &mut ctx) };
        ctx.flush();
        call.inputs = std::mem::take(&mut ctx.inputs);
        call.errno = r.as_ref().err().map(|e| *e as i32);
        s.calls.push(call);
        drop(s);
        self.wake.notify_all();
        r
    }

    /// Framing checks, then the method.
    ///
    /// # Safety
    /// Pointer attributes in `ctx` are valid per [`Sys::ioctl`].
    unsafe fn run(
        &self,
        s: &mut State,
        file: u32,
        hdr: &IoctlHdr,
        ctx: &mut Ctx<'_>,
    ) -> SysResult<i32> {
        if hdr.reserved1 != 0 || hdr.reserved2 != 0 {
            return Err(Errno::EPROTONOSUPPORT);
        }
        if hdr.driver_id != RDMA_DRIVER_MLX5 {
            return Err(Errno::EINVAL);
        }
        let devx_object = (obj::DEVX..=obj::DEVX_ASYNC_EVENT_FD).contains(&hdr.object_id);
        let Some(spec) = method_spec(hdr.object_id, hdr.method_id) else {
            return Err(Errno::EPROTONOSUPPORT);
        };
        if devx_object && !s.cfg.devx {
            return Err(Errno::EPROTONOSUPPORT);
        }
        if hdr.object_id == verbs::UVERBS_OBJECT_DEVICE && !s.cfg.ioctl_get_context {
            return Err(Errno::EPROTONOSUPPORT);
        }
        // Attributes: kinds, sizes, reserved fields, duplicates.
        for i in 0..ctx.attrs.len() {
            let a = ctx.attrs[i];
            if ctx.attrs[..i].iter().any(|b| b.attr_id == a.attr_id) {
                return Err(Errno::EINVAL);
            }
            let Some(sp) = spec.iter().find(|sp| sp.id == a.attr_id) else {
                if a.flags & UVERBS_ATTR_F_MANDATORY != 0 {
                    return Err(Errno::EPROTONOSUPPORT);
                }
                s.violations
                    .push(format!("attr {:#x} unknown to the method", a.attr_id));
                continue;
            };
            let want = if sp.rdma_core_mandatory {
                UVERBS_ATTR_F_MANDATORY
            } else {
                0
            };
            if a.flags != want {
                s.violations.push(format!(
                    "{} attr {:#x}: flags {:#x}, rdma-core sends {want:#x}",
                    abi::method_name(hdr.object_id, hdr.method_id),
                    a.attr_id,
                    a.flags
                ));
            }
            if a.flags & !(UVERBS_ATTR_F_MANDATORY | UVERBS_ATTR_F_VALID_OUTPUT) != 0 {
                return Err(Errno::EINVAL);
            }
            if a.attr_data != 0 {
                return Err(Errno::EINVAL);
            }
            let len = a.len;
            match sp.kind {
                Kind::IdrNew | Kind::FdNew => {
                    if len != 0 {
                        return Err(Errno::EINVAL);
                    }
                    if a.data != 0 {
                        s.violations.push(format!(
                            "attr {:#x}: NEW object with data {:#x}",
                            a.attr_id, a.data
                        ));
                    }
                }
                Kind::IdrRead(_) | Kind::IdrDestroy(_) | Kind::FdRead(_) | Kind::RawFd => {
                    if len != 0 {
                        return Err(Errno::EINVAL);
                    }
                }
                Kind::PtrIn(min, max) => {
                    if len < min || len > max {
                        return Err(Errno::EINVAL);
                    }
                    let bytes = if len as usize <= 8 {
                        a.data.to_ne_bytes()[..len as usize].to_vec()
                    } else {
                        if a.data == 0 {
                            return Err(Errno::EFAULT);
                        }
                        // SAFETY: the contract makes a pointer PTR_IN valid
                        // for reads of its `len` bytes.
                        unsafe { std::slice::from_raw_parts(a.data as *const u8, len as usize) }
                            .to_vec()
                    };
                    ctx.inputs.push((a.attr_id, bytes));
                }
                Kind::ConstIn => {
                    if len != 8 {
                        return Err(Errno::EINVAL);
                    }
                    ctx.inputs.push((a.attr_id, a.data.to_ne_bytes().to_vec()));
                }
                Kind::FlagsIn(allowed) => {
                    let v = match len {
                        4 => u64::from(abi::ne32(&a.data.to_ne_bytes(), 0)),
                        8 => a.data,
                        _ => return Err(Errno::EINVAL),
                    };
                    if v & !allowed != 0 {
                        return Err(Errno::EINVAL);
                    }
                    ctx.inputs.push((a.attr_id, v.to_ne_bytes().to_vec()));
                }
                Kind::PtrOut(min, max) => {
                    if len < min || len > max {
                        return Err(Errno::EINVAL);
                    }
                }
            }
            ctx.decoded.push(Decoded {
                index: i,
                spec: sp,
                attr: a,
            });
        }
        for sp in spec.iter().filter(|sp| sp.mandatory) {
            if ctx.find(sp.id).is_none() {
                return Err(Errno::EINVAL);
            }
        }
        // Objects and fds named by the call must exist and be of the right type.
        for d in &ctx.decoded {
            let f = s.files.get(&file);
            match d.spec.kind {
                Kind::IdrRead(_) | Kind::IdrDestroy(_) => {
                    let want = match d.spec.kind {
                        Kind::IdrRead(t) => t,
                        Kind::IdrDestroy(t) => Some(t),
                        _ => None,
                    };
                    let found = u32::try_from(d.attr.data)
                        .ok()
                        .and_then(|h| f.and_then(|f| f.objects.get(&h)));
                    let Some(o) = found else {
                        return Err(Errno::ENOENT);
                    };
                    if want.is_some_and(|t| t != o.ty()) {
                        return Err(Errno::EINVAL);
                    }
                }
                Kind::FdRead(want) => {
                    let ok = i32::try_from(d.attr.data)
                        .ok()
                        .and_then(|fd| s.fds.get(&fd))
                        .is_some_and(|st| match (st, want) {
                            (FdState::AsyncCmd { file: f2, .. }, FdType::AsyncCmd) => *f2 == file,
                            (FdState::AsyncEvent { file: f2, .. }, FdType::AsyncEvent) => {
                                *f2 == file
                            }
                            _ => false,
                        });
                    if !ok {
                        return Err(Errno::EBADF);
                    }
                }
                _ => {}
            }
        }
        let tamper = Self::take_tamper(s, hdr.object_id, hdr.method_id);
        match tamper {
            Some(Tamper::Errno(e)) => return Err(Errno::from_raw(e)),
            Some(Tamper::SucceedSilently) => return Ok(0),
            _ => {}
        }
        // Everything but GET_CONTEXT needs the ucontext.
        let has_ctx = s.files.get(&file).is_some_and(|f| f.ctx.is_some());
        if hdr.object_id != verbs::UVERBS_OBJECT_DEVICE && !has_ctx {
            return Err(Errno::EINVAL);
        }
        let r = self.method(s, file, hdr, ctx, tamper);
        match (tamper, r) {
            (Some(Tamper::Handle(v)), Ok(n)) => {
                let ids: Vec<u16> = ctx
                    .decoded
                    .iter()
                    .filter(|d| matches!(d.spec.kind, Kind::IdrNew | Kind::FdNew))
                    .map(|d| d.attr.attr_id)
                    .collect();
                for id in ids {
                    ctx.set_data(id, v);
                }
                Ok(n)
            }
            (Some(Tamper::GarbageOutputs), Ok(n)) => {
                ctx.garble_outputs();
                Ok(n)
            }
            (Some(Tamper::ReturnValue(v)), Ok(_)) => Ok(v),
            (_, r) => r,
        }
    }

    fn method(
        &self,
        s: &mut State,
        file: u32,
        hdr: &IoctlHdr,
        ctx: &mut Ctx<'_>,
        tamper: Option<Tamper>,
    ) -> SysResult<i32> {
        let devx_uid = s.files.get(&file).and_then(|f| f.ctx).unwrap_or(false);
        match (hdr.object_id, hdr.method_id) {
            (verbs::UVERBS_OBJECT_DEVICE, verbs::UVERBS_METHOD_GET_CONTEXT) => {
                if s.files.get(&file).is_some_and(|f| f.ctx.is_some()) {
                    return Err(Errno::EINVAL);
                }
                let blob = ctx.input(verbs::UVERBS_ATTR_UHW_IN).unwrap_or(&[]).to_vec();
                let (resp, devx) = alloc_ucontext(&s.cfg, &blob)?;
                ctx.write_out(
                    verbs::UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS,
                    &s.cfg.num_comp_vectors.to_ne_bytes(),
                )?;
                ctx.write_out(
                    verbs::UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT,
                    &1u64.to_ne_bytes(),
                )?;
                ctx.write_out(verbs::UVERBS_ATTR_UHW_OUT, &resp.to_bytes())?;
                if let Some(f) = s.files.get_mut(&file) {
                    f.ctx = Some(devx);
                }
                Ok(0)
            }
            (obj::DEVX_OBJ, devx_obj::METHOD_CREATE)
            | (obj::DEVX_OBJ, devx_obj::METHOD_QUERY)
            | (obj::DEVX_OBJ, devx_obj::METHOD_MODIFY)
            | (obj::DEVX, devx::METHOD_OTHER) => {
                let (class, in_id, out_id) = match (hdr.object_id, hdr.method_id) {
                    (obj::DEVX_OBJ, devx_obj::METHOD_CREATE) => {
                        (Class::Create, devx_obj::CMD_IN, devx_obj::CMD_OUT)
                    }
                    (obj::DEVX_OBJ, devx_obj::METHOD_QUERY) => {
                        (Class::Query, devx_obj::CMD_IN, devx_obj::CMD_OUT)
                    }
                    (obj::DEVX_OBJ, _) => (Class::Modify, devx_obj::CMD_IN, devx_obj::CMD_OUT),
                    _ => (Class::General, devx::OTHER_CMD_IN, devx::OTHER_CMD_OUT),
                };
                let inbox = ctx.input(in_id).unwrap_or(&[]).to_vec();
                let op = abi::be16(&inbox, 0);
                let whitelisted = matches!(op, 0x100 | 0x762 | 0x752 | 0x740);
                if !devx_uid && !whitelisted {
                    return Err(Errno::EINVAL);
                }
                if !class_admits(class, &inbox) {
                    return Err(Errno::EINVAL);
                }
                if class != Class::General && abi::be16(&inbox, 4) != 0 {
                    return Err(Errno::EINVAL);
                }
                if matches!(class, Class::Query | Class::Modify) {
                    let h = ctx.obj_data(devx_obj::HANDLE).unwrap_or(u64::MAX);
                    let named = s
                        .files
                        .get(&file)
                        .and_then(|f| f.objects.get(&(h as u32)))
                        .and_then(|o| match o {
                            FakeObj::Devx { obj_id, .. } => Some(*obj_id),
                            _ => None,
                        });
                    if named.is_none() {
                        return Err(Errno::EINVAL);
                    }
                }
                let outlen = ctx.out_len(out_id);
                let (out, failed) = Self::firmware(s, &inbox, outlen, class);
                if failed || tamper == Some(Tamper::RemoteIoWithoutOutbox) {
                    if tamper != Some(Tamper::RemoteIoWithoutOutbox) {
                        ctx.write_out(out_id, &out)?;
                    }
                    return Err(Errno::EREMOTEIO);
                }
                ctx.write_out(out_id, &out)?;
                if class == Class::Create {
                    let obj_id = abi::be32(&out, 8);
                    let f = s.files.entry(file).or_default();
                    let h = f.next_handle;
                    f.next_handle += 1;
                    f.objects.insert(h, FakeObj::Devx { opcode: op, obj_id });
                    ctx.set_data(devx_obj::HANDLE, u64::from(h));
                }
                Ok(0)
            }
            (obj::DEVX_OBJ, devx_obj::METHOD_DESTROY) => {
                self.destroy(s, file, ctx, devx_obj::HANDLE)
            }
            (obj::DEVX_OBJ, devx_obj::METHOD_ASYNC_QUERY) => {
                let inbox = ctx.input(devx_obj::CMD_IN).unwrap_or(&[]).to_vec();
                if !devx_uid || !class_admits(Class::Query, &inbox) || abi::be16(&inbox, 4) != 0 {
                    return Err(Errno::EINVAL);
                }
                let out_len = ctx.input_u64(devx_obj::ASYNC_OUT_LEN).unwrap_or(u64::MAX);
                if out_len > 0xffff {
                    return Err(Errno::EINVAL);
                }
                let out_len = out_len as usize;
                let wr_id = ctx.input_u64(devx_obj::ASYNC_WR_ID).unwrap_or(0);
                let cmd_fd = ctx.obj_data(devx_obj::ASYNC_FD).unwrap_or(0) as RawFd;
                let (out, _) = Self::firmware(s, &inbox, out_len, Class::Query);
                let Some(FdState::AsyncCmd { queue, bytes, .. }) = s.fds.get_mut(&cmd_fd) else {
                    return Err(Errno::EBADF);
                };
                if *bytes + out_len > ASYNC_BYTES_LIMIT {
                    return Err(Errno::EAGAIN);
                }
                *bytes += out_len;
                let mut entry = wr_id.to_ne_bytes().to_vec();
                entry.extend_from_slice(&out);
                queue.push_back(entry);
                Ok(0)
            }
            (obj::DEVX, devx::METHOD_QUERY_EQN) => {
                let vec = ctx.input_u32(devx::QUERY_EQN_USER_VEC).unwrap_or(u32::MAX);
                if vec >= s.cfg.num_comp_vectors {
                    return Err(Errno::ENOENT);
                }
                ctx.write_out(devx::QUERY_EQN_DEV_EQN, &(vec + 7).to_ne_bytes())?;
                Ok(0)
            }
            (obj::DEVX, devx::METHOD_QUERY_UAR) => Err(Errno::EINVAL),
            (obj::DEVX, devx::METHOD_SUBSCRIBE_EVENT) => {
                if !devx_uid {
                    return Err(Errno::EINVAL);
                }
                let list = ctx
                    .input(devx::SUBSCRIBE_TYPE_NUM_LIST)
                    .unwrap_or(&[])
                    .to_vec();
                if list.len() & 1 != 0 || list.len() / 2 > 16 {
                    return Err(Errno::EINVAL);
                }
                if ctx.find(devx::SUBSCRIBE_FD_NUM).is_some()
                    && ctx.find(devx::SUBSCRIBE_COOKIE).is_some()
                {
                    return Err(Errno::EINVAL);
                }
                let types: Vec<u16> = list
                    .chunks_exact(2)
                    .map(|c| u16::from_ne_bytes([c[0], c[1]]))
                    .collect();
                if types.iter().any(|&t| t > 255) {
                    return Err(Errno::EINVAL);
                }
                let sub = Subscription {
                    id: s.next_sub,
                    event_fd: ctx.obj_data(devx::SUBSCRIBE_FD_HANDLE).unwrap_or(0) as RawFd,
                    obj: ctx.obj_data(devx::SUBSCRIBE_OBJ_HANDLE).map(|h| h as u32),
                    types,
                    cookie: ctx.input_u64(devx::SUBSCRIBE_COOKIE).unwrap_or(0),
                };
                s.next_sub += 1;
                s.subs.push(sub);
                Ok(0)
            }
            (obj::DEVX_UMEM, umem::METHOD_REG) => {
                if !devx_uid {
                    return Err(Errno::EINVAL);
                }
                let addr = ctx.input_u64(umem::ADDR).unwrap_or(0);
                let len = ctx.input_u64(umem::LEN).unwrap_or(0);
                let access = ctx.input_u64(umem::ACCESS).unwrap_or(0);
                if access & 0x2 != 0 && access & 0x1 == 0 {
                    return Err(Errno::EINVAL);
                }
                if len == 0 || addr.checked_add(len).is_none() {
                    return Err(Errno::EINVAL);
                }
                let pgsz = ctx.input_u64(umem::PGSZ_BITMAP).unwrap_or(!0xfff);
                if pgsz & !0xfff == 0 {
                    return Err(Errno::EINVAL);
                }
                let id = s.next_obj_id;
                s.next_obj_id += 1;
                let f = s.files.entry(file).or_default();
                let h = f.next_handle;
                f.next_handle += 1;
                f.objects.insert(h, FakeObj::Umem);
                ctx.set_data(umem::HANDLE, u64::from(h));
                ctx.write_out(umem::OUT_ID, &id.to_ne_bytes())?;
                Ok(0)
            }
            (obj::DEVX_UMEM, umem::METHOD_DEREG) => self.destroy(s, file, ctx, umem::HANDLE),
            (obj::DEVX_ASYNC_CMD_FD, async_fd::METHOD_ALLOC) => {
                let fd = Self::alloc_fd(
                    s,
                    FdState::AsyncCmd {
                        file,
                        queue: VecDeque::new(),
                        bytes: 0,
                        nonblock: false,
                    },
                );
                ctx.set_data(async_fd::HANDLE, fd as u64);
                Ok(0)
            }
            (obj::DEVX_ASYNC_EVENT_FD, async_fd::METHOD_ALLOC) => {
                let flags = ctx.input_u64(async_fd::EVENT_FLAGS).unwrap_or(0);
                let fd = Self::alloc_fd(
                    s,
                    FdState::AsyncEvent {
                        file,
                        queue: VecDeque::new(),
                        omit_data: flags & u64::from(async_fd::FLAG_OMIT_DATA) != 0,
                        nonblock: false,
                    },
                );
                ctx.set_data(async_fd::HANDLE, fd as u64);
                Ok(0)
            }
            (obj::UAR, uar::METHOD_ALLOC) => {
                let ty = ctx.input_u64(uar::TYPE).unwrap_or(u64::MAX);
                if ty > 1 || (ty == 0 && !s.cfg.wc) {
                    return Err(Errno::EOPNOTSUPP);
                }
                let page_id = s.next_uar;
                s.next_uar += 1;
                // Opaque offsets with a "command" byte of 9 and up, like the kernel's.
                let mmap_offset = ((9u64 << 8) | u64::from(page_id)) * s.cfg.page_size as u64;
                let page_size = s.cfg.page_size as u32;
                let f = s.files.entry(file).or_default();
                let h = f.next_handle;
                f.next_handle += 1;
                f.objects.insert(h, FakeObj::Uar { mmap_offset });
                ctx.set_data(uar::HANDLE, u64::from(h));
                ctx.write_out(uar::MMAP_OFFSET, &mmap_offset.to_ne_bytes())?;
                ctx.write_out(uar::MMAP_LENGTH, &page_size.to_ne_bytes())?;
                ctx.write_out(uar::PAGE_ID, &page_id.to_ne_bytes())?;
                Ok(0)
            }
            (obj::UAR, uar::METHOD_DESTROY) => self.destroy(s, file, ctx, uar::HANDLE),
            _ => Err(Errno::EPROTONOSUPPORT),
        }
    }

    fn destroy(&self, s: &mut State, file: u32, ctx: &Ctx<'_>, id: u16) -> SysResult<i32> {
        let h = ctx
            .obj_data(id)
            .and_then(|h| u32::try_from(h).ok())
            .ok_or(Errno::ENOENT)?;
        let f = s.files.get_mut(&file).ok_or(Errno::ENOENT)?;
        if let Some(FakeObj::Devx { opcode, .. }) = f.objects.get(&h) {
            if let Some(&(status, _)) = s.fw_fail.get(&destroy_opcode(*opcode)) {
                // The kernel runs its stored destroy with mlx5_cmd_exec: only
                // a translated errno comes back, and the handle stays.
                return Err(Errno::from_raw(status_to_errno(status)));
            }
        }
        f.objects.remove(&h).ok_or(Errno::ENOENT)?;
        Ok(0)
    }
}

/// The destroy opcode the kernel pairs with a create opcode (common cases).
fn destroy_opcode(create: u16) -> u16 {
    match create {
        0xa00 => 0xa03,
        0x800 => 0x801,
        0x80e => 0x80f,
        0x816 => 0x817,
        0x939 => 0x93a,
        0x771 => 0x772,
        op => op + 1,
    }
}

/// The kernel's `cmd_status_to_err`.
fn status_to_errno(status: u8) -> i32 {
    match status {
        0x6 => libc::EBUSY,
        0x8 => libc::ENOMEM,
        0xf => libc::EAGAIN,
        0x2 | 0x3 | 0x5 | 0x9 | 0xa | 0x10 | 0x30 | 0x40 => libc::EINVAL,
        _ => libc::EIO,
    }
}

/// `mlx5_ib_alloc_ucontext`: checks the driver request and builds the response.
fn alloc_ucontext(cfg: &Config, blob: &[u8]) -> SysResult<(UcontextResp, bool)> {
    if blob.len() == 8 {
        // The v0 request: no flags, no DEVX, static bfregs.
        let mut resp = cfg.ucontext;
        resp.response_length = ALLOC_UCONTEXT_RESP_LEN as u32;
        return Ok((resp, false));
    }
    if blob.len() < 16 {
        return Err(Errno::EINVAL);
    }
    let (req, reserved) = AllocUcontextReq::from_bytes(blob);
    if req.flags & !MLX5_IB_ALLOC_UCTX_DEVX != 0 || req.comp_mask != 0 || reserved {
        return Err(Errno::EOPNOTSUPP);
    }
    if blob.len() > abi::ALLOC_UCONTEXT_REQ_LEN
        && blob[abi::ALLOC_UCONTEXT_REQ_LEN..].iter().any(|&b| b != 0)
    {
        return Err(Errno::EOPNOTSUPP);
    }
    let total = req.total_num_bfregs.saturating_add(1) & !1;
    if req.num_low_latency_bfregs > total.wrapping_sub(1) {
        return Err(Errno::EINVAL);
    }
    let dyn_uar = req.lib_caps & MLX5_LIB_CAP_DYN_UAR != 0;
    if !dyn_uar && total == 0 {
        return Err(Errno::EINVAL);
    }
    if !dyn_uar && total > 512 {
        return Err(Errno::ENOMEM);
    }
    let devx = req.flags & MLX5_IB_ALLOC_UCTX_DEVX != 0;
    if devx && !cfg.devx {
        return Err(Errno::EINVAL);
    }
    let mut resp = cfg.ucontext;
    resp.response_length = ALLOC_UCONTEXT_RESP_LEN as u32;
    resp.cqe_version = resp.cqe_version.min(req.max_cqe_version);
    resp.tot_bfregs = if dyn_uar { 0 } else { total };
    Ok((resp, devx))
}

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
        let afd = Self::alloc_fd(&mut s, FdState::VerbsAsync);
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
            | Some(FdState::AsyncEvent { nonblock, .. }) => {
                *nonblock = true;
                Ok(())
            }
            Some(_) => Ok(()),
        }
    }
}

/// A kernel that answers every call with success at once: new handles are a
/// counter, outputs stay as the caller left them. Measures the provider's own
/// overhead. A test double: not for production use.
#[derive(Debug, Default)]
pub struct InstantKernel {
    next: AtomicU64,
}

impl InstantKernel {
    pub fn new() -> InstantKernel {
        InstantKernel::default()
    }
}

impl Sys for InstantKernel {
    fn open(&self, _path: &Path, _flags: i32) -> SysResult<RawFd> {
        Ok(FIRST_FAKE_FD)
    }

    fn close(&self, _fd: RawFd) -> SysResult<()> {
        Ok(())
    }

    unsafe fn ioctl(&self, _fd: RawFd, request: u64, arg: *mut u8) -> SysResult<i32> {
        if request != RDMA_VERBS_IOCTL || arg.is_null() {
            return Err(Errno::ENOTTY);
        }
        // SAFETY: the contract makes `arg` a readable header.
        let hdr: IoctlHdr = unsafe { std::ptr::read_unaligned(arg.cast()) };
        if hdr.num_attrs > 0 {
            // SAFETY: the contract makes the first attribute writable.
            let first = unsafe { arg.add(HDR_LEN) }.cast::<IoctlAttr>();
            // SAFETY: as above; unaligned access since the caller's buffer
            // alignment is not part of the contract.
            let mut a: IoctlAttr = unsafe { std::ptr::read_unaligned(first) };
            if a.len == 0 && a.data == 0 {
                a.data = self.next.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff;
                // SAFETY: as above.
                unsafe { std::ptr::write_unaligned(first, a) };
            }
        }
        Ok(0)
    }

    unsafe fn write(&self, _fd: RawFd, buf: &[u8]) -> SysResult<usize> {
        Ok(buf.len())
    }

    fn read(&self, _fd: RawFd, _buf: &mut [u8]) -> SysResult<usize> {
        Err(Errno::EAGAIN)
    }

    fn mmap(
        &self,
        _len: usize,
        _prot: i32,
        _flags: i32,
        _fd: RawFd,
        _offset: i64,
    ) -> SysResult<NonNull<u8>> {
        Err(Errno::ENODEV)
    }

    unsafe fn munmap(&self, _addr: NonNull<u8>, _len: usize) -> SysResult<()> {
        Ok(())
    }

    fn poll(&self, _fd: RawFd, _events: i16, _timeout_ms: i32) -> SysResult<i16> {
        Ok(0)
    }

    fn set_nonblocking(&self, _fd: RawFd) -> SysResult<()> {
        Ok(())
    }
}
