//! Dispatch of a framed ioctl to its per-object handler, and the shared
//! destroy path of IDR objects.

mod async_fd;
mod context;
mod devx;
mod obj;
mod uar;
mod umem;

use super::ctx::Ctx;
use super::firmware::{destroy_opcode, status_to_errno};
use super::state::{FakeObj, State};
use super::{FakeKernel, Tamper};
// The handler modules share names with the ABI's, so ABI constants are
// spelled `abi::…` here.
use crate::kernel::abi::{self, devx_obj, verbs, IoctlHdr};
use crate::kernel::sys::{Errno, SysResult};

pub(super) use context::alloc_ucontext;

impl FakeKernel {
    /// Runs a method whose framing, objects and fds already checked out.
    pub(super) fn method(
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
                context::get_context(s, file, ctx)
            }
            (verbs::UVERBS_OBJECT_ASYNC_EVENT, verbs::UVERBS_METHOD_ASYNC_EVENT_ALLOC) => {
                async_fd::alloc_verbs_async(s, ctx)
            }
            (verbs::UVERBS_OBJECT_DEVICE, verbs::UVERBS_METHOD_QUERY_GID_TABLE) => {
                context::query_gid_table(s, ctx)
            }
            (abi::obj::DEVX_OBJ, devx_obj::METHOD_CREATE)
            | (abi::obj::DEVX_OBJ, devx_obj::METHOD_QUERY)
            | (abi::obj::DEVX_OBJ, devx_obj::METHOD_MODIFY)
            | (abi::obj::DEVX, abi::devx::METHOD_OTHER) => {
                obj::command(s, file, hdr, ctx, tamper, devx_uid)
            }
            (abi::obj::DEVX_OBJ, devx_obj::METHOD_DESTROY) => {
                self.destroy(s, file, ctx, devx_obj::HANDLE)
            }
            (abi::obj::DEVX_OBJ, devx_obj::METHOD_ASYNC_QUERY) => {
                obj::async_query(s, ctx, devx_uid)
            }
            (abi::obj::DEVX, abi::devx::METHOD_QUERY_EQN) => devx::query_eqn(s, ctx),
            (abi::obj::DEVX, abi::devx::METHOD_QUERY_UAR) => Err(Errno::EINVAL),
            (abi::obj::DEVX, abi::devx::METHOD_SUBSCRIBE_EVENT) => {
                devx::subscribe(s, ctx, devx_uid)
            }
            (abi::obj::DEVX_UMEM, abi::umem::METHOD_REG) => umem::reg(s, file, ctx, devx_uid),
            (abi::obj::DEVX_UMEM, abi::umem::METHOD_DEREG) => {
                self.destroy(s, file, ctx, abi::umem::HANDLE)
            }
            (abi::obj::DEVX_ASYNC_CMD_FD, abi::async_fd::METHOD_ALLOC) => {
                async_fd::alloc_cmd_fd(s, file, ctx)
            }
            (abi::obj::DEVX_ASYNC_EVENT_FD, abi::async_fd::METHOD_ALLOC) => {
                async_fd::alloc_event_fd(s, file, ctx)
            }
            (abi::obj::UAR, abi::uar::METHOD_ALLOC) => uar::alloc(s, file, ctx),
            (abi::obj::UAR, abi::uar::METHOD_DESTROY) => {
                self.destroy(s, file, ctx, abi::uar::HANDLE)
            }
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
