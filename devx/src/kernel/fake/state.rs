//! The fake kernel's bookkeeping: open files and descriptors, objects,
//! subscriptions, mappings and the test's knobs, all under one lock.

use crate::provider::GidTableEntry;
use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::path::PathBuf;

use super::spec::ObjType;
use super::{Call, FakeKernel, Tamper};
use crate::eventfd::EventFdRef;
use crate::kernel::abi::UcontextResp;
use crate::kernel::sys::Errno;

#[derive(Debug)]
pub(super) enum FakeObj {
    Devx { opcode: u16, obj_id: u32 },
    Umem,
    Uar { mmap_offset: u64 },
}

impl FakeObj {
    pub(super) fn ty(&self) -> ObjType {
        match self {
            FakeObj::Devx { .. } => ObjType::DevxObj,
            FakeObj::Umem => ObjType::Umem,
            FakeObj::Uar { .. } => ObjType::Uar,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct UFile {
    /// `Some(devx)` once a ucontext exists; `devx` = it has a DEVX uid.
    pub(super) ctx: Option<bool>,
    pub(super) objects: HashMap<u32, FakeObj>,
    pub(super) next_handle: u32,
}

#[derive(Debug)]
pub(super) enum FdState {
    Uverbs {
        file: u32,
    },
    /// The verbs async-event file: the one the write() GET_CONTEXT creates
    /// or UVERBS_METHOD_ASYNC_EVENT_ALLOC makes; `struct
    /// ib_uverbs_async_event_desc` records queued.
    VerbsAsync {
        queue: VecDeque<[u8; 16]>,
        nonblock: bool,
    },
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
pub(super) struct Subscription {
    pub(super) id: usize,
    pub(super) event_fd: RawFd,
    pub(super) obj: Option<u32>,
    pub(super) types: Vec<u16>,
    pub(super) cookie: u64,
    /// FD_NUM: events signal this eventfd instead of queueing.
    pub(super) redirect: Option<EventFdRef>,
}

#[derive(Debug)]
pub(super) struct Mapping {
    pub(super) len: usize,
    pub(super) page_id: u32,
}

#[derive(Debug)]
pub(super) struct Config {
    pub(super) ioctl_get_context: bool,
    pub(super) devx: bool,
    pub(super) wc: bool,
    pub(super) num_comp_vectors: u32,
    pub(super) page_size: usize,
    /// The valid entries QUERY_GID_TABLE returns.
    pub(super) gid_table: Vec<GidTableEntry>,
    pub(super) ucontext: UcontextResp,
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) cfg: Config,
    pub(super) next_fd: RawFd,
    pub(super) fds: HashMap<RawFd, FdState>,
    pub(super) files: HashMap<u32, UFile>,
    pub(super) next_file: u32,
    pub(super) calls: Vec<Call>,
    pub(super) writes: Vec<Vec<u8>>,
    pub(super) opened: Vec<(PathBuf, i32)>,
    pub(super) tampers: Vec<(u16, u16, Tamper)>,
    pub(super) fw_fail: HashMap<u16, (u8, u32)>,
    pub(super) fw_reply: HashMap<u16, Vec<u8>>,
    pub(super) open_error: Option<Errno>,
    pub(super) mmap_error: Option<Errno>,
    pub(super) maps: HashMap<usize, Mapping>,
    pub(super) raw_reads: HashMap<RawFd, VecDeque<Result<Vec<u8>, Errno>>>,
    pub(super) subs: Vec<Subscription>,
    pub(super) next_sub: usize,
    pub(super) next_obj_id: u32,
    pub(super) next_uar: u32,
    pub(super) violations: Vec<String>,
    pub(super) destroyed_on_close: usize,
}

impl FdState {
    pub(super) fn verbs_async() -> FdState {
        FdState::VerbsAsync {
            queue: VecDeque::new(),
            nonblock: false,
        }
    }
}

impl FakeKernel {
    pub(super) fn alloc_fd(s: &mut State, st: FdState) -> RawFd {
        let fd = s.next_fd;
        s.next_fd += 1;
        s.fds.insert(fd, st);
        fd
    }

    pub(super) fn take_tamper(s: &mut State, object: u16, method: u16) -> Option<Tamper> {
        let i = s
            .tampers
            .iter()
            .position(|(o, m, _)| *o == object && *m == method)?;
        Some(s.tampers.remove(i).2)
    }
}
