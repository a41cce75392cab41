//! Allocation of the DEVX async command fd and async event fd (their reads
//! and polls are in `syscalls`).

use std::collections::VecDeque;

use crate::kernel::abi::{async_fd, verbs};
use crate::kernel::fake::ctx::Ctx;
use crate::kernel::fake::state::{FdState, State};
use crate::kernel::fake::FakeKernel;
use crate::kernel::sys::SysResult;

/// DEVX_ASYNC_CMD_FD_ALLOC.
pub(super) fn alloc_cmd_fd(s: &mut State, file: u32, ctx: &mut Ctx<'_>) -> SysResult<i32> {
    let fd = FakeKernel::alloc_fd(
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

/// DEVX_ASYNC_EVENT_FD_ALLOC.
pub(super) fn alloc_event_fd(s: &mut State, file: u32, ctx: &mut Ctx<'_>) -> SysResult<i32> {
    let flags = ctx.input_u64(async_fd::EVENT_FLAGS).unwrap_or(0);
    let fd = FakeKernel::alloc_fd(
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

/// UVERBS_METHOD_ASYNC_EVENT_ALLOC: the context's verbs async-event file.
pub(super) fn alloc_verbs_async(s: &mut State, ctx: &mut Ctx<'_>) -> SysResult<i32> {
    let fd = FakeKernel::alloc_fd(s, FdState::verbs_async());
    ctx.set_data(verbs::UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE, fd as u64);
    Ok(0)
}
