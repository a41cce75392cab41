//! DEVX's two file objects: the async command fd
//! (`mlx5dv_devx_create_cmd_comp`, completions of
//! `mlx5dv_devx_obj_query_async`) and the async event fd
//! (`mlx5dv_devx_create_event_channel`, events subscribed with
//! `mlx5dv_devx_subscribe_devx_event`).
//!
//! The kernel answers fds whose every `read` returns one record: a
//! `mlx5_ib_uapi_devx_async_cmd_hdr` (wr_id) and the command's outbox, or a
//! `mlx5_ib_uapi_devx_async_event_hdr` (cookie) and the 64-byte EQE (only
//! the cookie when the channel omits data). Here the program gets one end of
//! a sequenced-packet socket pair, which keeps those record boundaries and
//! polls readable while one waits. An async query runs at once and its
//! record is queued; events come from a DEVX event channel of the emulated
//! device, forwarded by the doorbell watch thread.

use std::os::fd::{BorrowedFd, RawFd};

use devx::kernel::abi::{async_fd, devx as devx_ids, devx_obj as obj_ids};

use super::program_fd::{ident, ProgramFd};
use super::{need_devx, Object, Ucontext};
use crate::doorbell::EventSource;
use crate::uverbs::{Errno, Request};
use std::sync::Arc;

/// A DEVX event channel and the program's end of its records.
pub struct EventFd {
    events: devx::Events,
    out: ProgramFd,
}

impl EventSource for EventFd {
    fn forward(&self) -> usize {
        let mut n = 0;
        // Bounded: at most what is queued now; an event the socket refuses
        // (the program closed its end) is dropped, as the kernel drops
        // events of a closed channel.
        while let Ok(Some(ev)) = self.events.try_get() {
            if self
                .out
                .send(&[&ev.cookie.to_ne_bytes()[..], &ev.eqe].concat())
            {
                n += 1;
            }
        }
        n
    }
}

/// Drops the file objects whose fd number `fd` the program closed.
fn forget_closed(ctx: &Ucontext, fd: RawFd) {
    ctx.objects().table.retain(|_, v| match v {
        Object::CmdFd(c) => c.fd != fd,
        Object::EventFd(e) => e.out.fd != fd,
        _ => true,
    });
}

/// DEVX_ASYNC_CMD_FD ALLOC: the fd completions of async queries are read from.
pub fn cmd_fd_alloc(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[async_fd::HANDLE])?;
    need_devx(ctx)?;
    req.need(async_fd::HANDLE)?;
    let out = Arc::new(ProgramFd::new(libc::SOCK_SEQPACKET)?);
    forget_closed(ctx, out.fd);
    let fd = out.fd;
    ctx.objects().insert(Object::CmdFd(out));
    req.set_data(async_fd::HANDLE, fd as u64);
    Ok(())
}

/// DEVX_ASYNC_EVENT_FD ALLOC: an event channel (OMIT_DATA honoured).
pub fn event_fd_alloc(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[async_fd::HANDLE, async_fd::EVENT_FLAGS])?;
    need_devx(ctx)?;
    req.need(async_fd::HANDLE)?;
    let flags = req.flags_in(async_fd::EVENT_FLAGS, u64::from(async_fd::FLAG_OMIT_DATA))?;
    let omit = flags & u64::from(async_fd::FLAG_OMIT_DATA) != 0;
    let events = devx::Events::new(ctx.verbs.devx(), omit).map_err(|e| e.errno())?;
    let ch = Arc::new(EventFd {
        events,
        out: ProgramFd::new(libc::SOCK_SEQPACKET)?,
    });
    forget_closed(ctx, ch.out.fd);
    let fd = ch.out.fd;
    ctx.objects().insert(Object::EventFd(Arc::clone(&ch)));
    ctx.watcher.serve(ch);
    ctx.watcher.start();
    req.set_data(async_fd::HANDLE, fd as u64);
    Ok(())
}

/// An fd attribute's number.
fn fd_in(req: &Request, id: u16) -> Result<RawFd, Errno> {
    RawFd::try_from(req.need(id)?.data as i64).map_err(|_| libc::EBADF)
}

/// DEVX_OBJ ASYNC_QUERY: runs the query and queues (wr_id, outbox) on the
/// command fd; a firmware failure is reported in the outbox, as the kernel
/// does once the command was accepted.
pub fn obj_async_query(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        obj_ids::HANDLE,
        obj_ids::CMD_IN,
        obj_ids::ASYNC_FD,
        obj_ids::ASYNC_WR_ID,
        obj_ids::ASYNC_OUT_LEN,
    ])?;
    need_devx(ctx)?;
    let handle = u32::try_from(req.need(obj_ids::HANDLE)?.data).map_err(|_| libc::ENOENT)?;
    let inbox = req.input(obj_ids::CMD_IN)?.ok_or(libc::EINVAL)?;
    let fd = fd_in(req, obj_ids::ASYNC_FD)?;
    let wr_id = req.const_in(obj_ids::ASYNC_WR_ID)?.ok_or(libc::EINVAL)?;
    let out_len = req.const_in(obj_ids::ASYNC_OUT_LEN)?.ok_or(libc::EINVAL)?;
    let out_len = usize::try_from(out_len).map_err(|_| libc::EINVAL)?;
    if inbox.len() < 16 || out_len < 16 {
        return Err(libc::EINVAL);
    }
    let objects = ctx.objects();
    let o = match objects.table.get(&handle) {
        Some(Object::Devx(o)) | Some(Object::Cq { obj: o, .. }) => o,
        Some(_) => return Err(libc::EINVAL),
        None => return Err(libc::ENOENT),
    };
    let cmd = objects
        .table
        .values()
        .find_map(|v| match v {
            Object::CmdFd(c) if c.is(fd) => Some(Arc::clone(c)),
            _ => None,
        })
        .ok_or(libc::EINVAL)?;
    let mut out = vec![0u8; out_len];
    match o.query_into(&inbox, &mut out) {
        Ok(()) => {}
        Err(e) if e.errno() == libc::EREMOTEIO => {}
        Err(e) => return Err(e.errno()),
    }
    if cmd.send(&[&wr_id.to_ne_bytes()[..], &out].concat()) {
        Ok(())
    } else {
        Err(libc::ENOSPC)
    }
}

/// DEVX SUBSCRIBE_EVENT: event types of an object (or, without one, of
/// the device) to an event channel, each read carrying the cookie, or
/// signalling the program's eventfd instead.
pub fn subscribe_event(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        devx_ids::SUBSCRIBE_FD_HANDLE,
        devx_ids::SUBSCRIBE_OBJ_HANDLE,
        devx_ids::SUBSCRIBE_TYPE_NUM_LIST,
        devx_ids::SUBSCRIBE_FD_NUM,
        devx_ids::SUBSCRIBE_COOKIE,
    ])?;
    need_devx(ctx)?;
    let fd = fd_in(req, devx_ids::SUBSCRIBE_FD_HANDLE)?;
    let list = req
        .input(devx_ids::SUBSCRIBE_TYPE_NUM_LIST)?
        .ok_or(libc::EINVAL)?;
    if list.is_empty() || list.len() % 2 != 0 {
        return Err(libc::EINVAL);
    }
    let types: Vec<u16> = list
        .chunks_exact(2)
        .map(|c| u16::from_ne_bytes([c[0], c[1]]))
        .collect();
    let cookie = req.const_in(devx_ids::SUBSCRIBE_COOKIE)?.unwrap_or(0);
    let redirect = match req.attr(devx_ids::SUBSCRIBE_FD_NUM) {
        Some(a) => Some(RawFd::try_from(a.data as i64).map_err(|_| libc::EBADF)?),
        None => None,
    };
    let obj_handle = match req.attr(devx_ids::SUBSCRIBE_OBJ_HANDLE) {
        Some(a) => Some(u32::try_from(a.data).map_err(|_| libc::ENOENT)?),
        None => None,
    };
    let objects = ctx.objects();
    let ch = objects
        .table
        .values()
        .find_map(|v| match v {
            Object::EventFd(e) if e.out.is(fd) => Some(Arc::clone(e)),
            _ => None,
        })
        .ok_or(libc::EINVAL)?;
    let obj = match obj_handle {
        None => None,
        Some(h) => match objects.table.get(&h) {
            Some(Object::Devx(o)) | Some(Object::Cq { obj: o, .. }) => Some(o),
            Some(_) => return Err(libc::EINVAL),
            None => return Err(libc::ENOENT),
        },
    };
    let dev = ctx.verbs.devx();
    let r = match (obj, redirect) {
        (Some(o), None) => o.subscribe(&ch.events, &types, cookie),
        (None, None) => dev.subscribe_unaffiliated(&ch.events, &types, cookie),
        (o, Some(efd)) => {
            if ident(efd).is_none() {
                return Err(libc::EBADF);
            }
            // SAFETY: `efd` is open (checked just now) and the call only
            // duplicates it for the subscription.
            let efd = unsafe { BorrowedFd::borrow_raw(efd) };
            match o {
                Some(o) => o.subscribe_fd(&ch.events, &types, efd),
                None => dev.subscribe_unaffiliated_fd(&ch.events, &types, efd),
            }
        }
    };
    r.map_err(|e| e.errno())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::tests::{open_context, run};
    use crate::uverbs::UverbsFile;
    use devx::kernel::abi::{obj, IoctlAttr, IoctlCmd};

    fn alloc_cmd_fd(file: &UverbsFile) -> RawFd {
        let mut cmd = IoctlCmd::new(
            obj::DEVX_ASYNC_CMD_FD,
            async_fd::METHOD_ALLOC,
            [IoctlAttr::new_obj(async_fd::HANDLE)],
        );
        assert_eq!(run(file, &mut cmd), Ok(0));
        cmd.attrs[0].data as RawFd
    }

    fn alloc_event_fd(file: &UverbsFile, flags: u32) -> Result<RawFd, Errno> {
        let mut cmd = IoctlCmd::new(
            obj::DEVX_ASYNC_EVENT_FD,
            async_fd::METHOD_ALLOC,
            [
                IoctlAttr::new_obj(async_fd::HANDLE),
                IoctlAttr::u32_in(async_fd::EVENT_FLAGS, flags),
            ],
        );
        run(file, &mut cmd).map(|_| cmd.attrs[0].data as RawFd)
    }

    fn subscribe(file: &UverbsFile, fd: RawFd, types: &[u16]) -> Result<i32, Errno> {
        let list: Vec<u8> = types.iter().flat_map(|t| t.to_ne_bytes()).collect();
        let mut cmd = IoctlCmd::new(
            obj::DEVX,
            devx_ids::METHOD_SUBSCRIBE_EVENT,
            [
                IoctlAttr::obj(devx_ids::SUBSCRIBE_FD_HANDLE, fd as u64),
                IoctlAttr::ptr_in(devx_ids::SUBSCRIBE_TYPE_NUM_LIST, &list),
                IoctlAttr::u64_in(devx_ids::SUBSCRIBE_COOKIE, 5),
            ],
        );
        run(file, &mut cmd)
    }

    fn async_query(file: &UverbsFile, handle: u64, fd: RawFd) -> Result<i32, Errno> {
        let inbox = [0u8; 16];
        let mut cmd = IoctlCmd::new(
            obj::DEVX_OBJ,
            obj_ids::METHOD_ASYNC_QUERY,
            [
                IoctlAttr::obj(obj_ids::HANDLE, handle),
                IoctlAttr::ptr_in(obj_ids::CMD_IN, &inbox),
                IoctlAttr::obj(obj_ids::ASYNC_FD, fd as u64),
                IoctlAttr::u64_in(obj_ids::ASYNC_WR_ID, 1),
                IoctlAttr::u32_in(obj_ids::ASYNC_OUT_LEN, 16),
            ],
        );
        run(file, &mut cmd)
    }

    #[test]
    fn devx_fds_are_sockets_and_each_method_takes_only_its_own_kind() {
        let (file, _) = open_context();
        let cmd_fd = alloc_cmd_fd(&file);
        let ev_fd = alloc_event_fd(&file, 0).unwrap();
        for fd in [cmd_fd, ev_fd] {
            // SAFETY: a zeroed stat is a valid out-buffer.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: fstat on an fd this test owns.
            assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
            assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFSOCK);
        }
        // Flags the kernel does not know.
        assert_eq!(alloc_event_fd(&file, 1 << 4), Err(libc::EINVAL));
        assert!(alloc_event_fd(&file, async_fd::FLAG_OMIT_DATA).is_ok());
        // Device-wide port changes on the event channel; not on a command fd.
        assert_eq!(
            subscribe(&file, ev_fd, &[devx::event_type::PORT_CHANGE]),
            Ok(0)
        );
        assert_eq!(
            subscribe(&file, cmd_fd, &[devx::event_type::PORT_CHANGE]),
            Err(libc::EINVAL)
        );
        // An async query names an object of the file and a command fd.
        assert_eq!(async_query(&file, 999, cmd_fd), Err(libc::ENOENT));
        let mut pd = IoctlCmd::new(
            obj::DEVX_OBJ,
            obj_ids::METHOD_CREATE,
            [
                IoctlAttr::new_obj(obj_ids::HANDLE),
                IoctlAttr::ptr_in(obj_ids::CMD_IN, &alloc_pd_in()),
                IoctlAttr::ptr_out(
                    obj_ids::CMD_OUT,
                    Box::leak(Box::new([0u8; 16])).as_mut_ptr(),
                    16,
                ),
            ],
        );
        assert_eq!(run(&file, &mut pd), Ok(0));
        let handle = pd.attrs[0].data;
        assert_eq!(async_query(&file, handle, ev_fd), Err(libc::EINVAL));
        // SAFETY: closing fds this test owns.
        unsafe {
            libc::close(cmd_fd);
            libc::close(ev_fd);
        }
    }

    fn alloc_pd_in() -> [u8; 16] {
        let mut inbox = prm_layouts::AllocPdIn::new();
        inbox.set_opcode(prm_layouts::Opcode::AllocPd.raw());
        let mut b = [0u8; 16];
        b.copy_from_slice(zerocopy::IntoBytes::as_bytes(&inbox));
        b
    }
}
