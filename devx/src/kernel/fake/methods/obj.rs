//! DEVX object commands: create, query and modify of an object, general
//! commands (METHOD_OTHER), and async queries onto a command fd.

use std::os::fd::RawFd;

use crate::kernel::abi::{devx, devx_obj, obj, IoctlHdr};
use crate::kernel::fake::ctx::Ctx;
use crate::kernel::fake::firmware::{class_admits, Class, CREATED_ID};
use crate::kernel::fake::state::{FakeObj, FdState, State};
use crate::kernel::fake::{FakeKernel, Tamper, ASYNC_BYTES_LIMIT};
use crate::kernel::sys::{Errno, SysResult};
use prm_layouts::commands::header;
use prm_layouts::Opcode;

/// DEVX_OBJ_CREATE / QUERY / MODIFY and DEVX_OTHER: the inbox goes to
/// firmware once its opcode fits the method.
pub(super) fn command(
    s: &mut State,
    file: u32,
    hdr: &IoctlHdr,
    ctx: &mut Ctx<'_>,
    tamper: Option<Tamper>,
    devx_uid: bool,
) -> SysResult<i32> {
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
    let op = crate::admission::opcode_of(&inbox);
    // Commands a context without a DEVX uid may still send (`devx_is_whitelist_cmd`).
    let whitelisted = Opcode::from_raw(op).is_some_and(|op| {
        matches!(
            op,
            Opcode::QueryHcaCap
                | Opcode::QueryHcaVportContext
                | Opcode::QueryEswVportContext
                | Opcode::QueryEswFunctions
        )
    });
    if !devx_uid && !whitelisted {
        return Err(Errno::EINVAL);
    }
    if !class_admits(class, &inbox) {
        return Err(Errno::EINVAL);
    }
    if class != Class::General && header::VHCA_TUNNEL_ID.get_or_zero(&inbox) != 0 {
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
    let (out, failed) = FakeKernel::firmware(s, &inbox, outlen, class);
    if failed || tamper == Some(Tamper::RemoteIoWithoutOutbox) {
        if tamper != Some(Tamper::RemoteIoWithoutOutbox) {
            ctx.write_out(out_id, &out)?;
        }
        return Err(Errno::EREMOTEIO);
    }
    ctx.write_out(out_id, &out)?;
    if class == Class::Create {
        let obj_id = CREATED_ID.get_or_zero(&out) as u32;
        let f = s.files.entry(file).or_default();
        let h = f.next_handle;
        f.next_handle += 1;
        f.objects.insert(h, FakeObj::Devx { opcode: op, obj_id });
        ctx.set_data(devx_obj::HANDLE, u64::from(h));
    }
    Ok(0)
}

/// DEVX_OBJ_ASYNC_QUERY: firmware answers at once; the outbox waits on the
/// command fd under the kernel's byte cap.
pub(super) fn async_query(s: &mut State, ctx: &mut Ctx<'_>, devx_uid: bool) -> SysResult<i32> {
    let inbox = ctx.input(devx_obj::CMD_IN).unwrap_or(&[]).to_vec();
    if !devx_uid
        || !class_admits(Class::Query, &inbox)
        || header::VHCA_TUNNEL_ID.get_or_zero(&inbox) != 0
    {
        return Err(Errno::EINVAL);
    }
    let out_len = ctx.input_u64(devx_obj::ASYNC_OUT_LEN).unwrap_or(u64::MAX);
    if out_len > 0xffff {
        return Err(Errno::EINVAL);
    }
    let out_len = out_len as usize;
    let wr_id = ctx.input_u64(devx_obj::ASYNC_WR_ID).unwrap_or(0);
    let cmd_fd = ctx.obj_data(devx_obj::ASYNC_FD).unwrap_or(0) as RawFd;
    let (out, _) = FakeKernel::firmware(s, &inbox, out_len, Class::Query);
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
