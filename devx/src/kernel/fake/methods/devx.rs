//! Device-wide DEVX methods: EQ number lookup and event subscription.

use std::os::fd::RawFd;

use crate::eventfd::EventFdRef;
use crate::kernel::abi::devx;
use crate::kernel::fake::ctx::Ctx;
use crate::kernel::fake::state::{State, Subscription};
use crate::kernel::sys::{Errno, SysResult};

/// DEVX_QUERY_EQN: completion vector `n` maps to EQ `n + 7`.
pub(super) fn query_eqn(s: &mut State, ctx: &mut Ctx<'_>) -> SysResult<i32> {
    let vec = ctx.input_u32(devx::QUERY_EQN_USER_VEC).unwrap_or(u32::MAX);
    if vec >= s.cfg.num_comp_vectors {
        return Err(Errno::ENOENT);
    }
    ctx.write_out(devx::QUERY_EQN_DEV_EQN, &(vec + 7).to_ne_bytes())?;
    Ok(0)
}

/// DEVX_SUBSCRIBE_EVENT: records which event types reach which event fd.
pub(super) fn subscribe(s: &mut State, ctx: &mut Ctx<'_>, devx_uid: bool) -> SysResult<i32> {
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
    if ctx.find(devx::SUBSCRIBE_FD_NUM).is_some() && ctx.find(devx::SUBSCRIBE_COOKIE).is_some() {
        return Err(Errno::EINVAL);
    }
    let types: Vec<u16> = list
        .chunks_exact(2)
        .map(|c| u16::from_ne_bytes([c[0], c[1]]))
        .collect();
    if types.iter().any(|&t| t > 255) {
        return Err(Errno::EINVAL);
    }
    // eventfd_ctx_fdget: EBADF for a closed descriptor, EINVAL for one
    // that is no eventfd.
    let redirect = match ctx.input_u32(devx::SUBSCRIBE_FD_NUM) {
        Some(fd) => Some(EventFdRef::get(fd as RawFd)?),
        None => None,
    };
    let sub = Subscription {
        id: s.next_sub,
        event_fd: ctx.obj_data(devx::SUBSCRIBE_FD_HANDLE).unwrap_or(0) as RawFd,
        obj: ctx.obj_data(devx::SUBSCRIBE_OBJ_HANDLE).map(|h| h as u32),
        types,
        cookie: ctx.input_u64(devx::SUBSCRIBE_COOKIE).unwrap_or(0),
        redirect,
    };
    s.next_sub += 1;
    s.subs.push(sub);
    Ok(0)
}
