//! A DEVX context on an open uverbs file, and the DEVX methods on it.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use prm_layouts::commands::header;
use prm_layouts::enums::opcode_name;

use crate::admission::{op_mod_of, opcode_of};

use super::abi::{
    self, async_fd, devx, devx_obj, ne32, obj, uar, umem, verbs, AllocUcontextReq, IoctlAttr,
    IoctlCmd, UcontextResp, ALLOC_UCONTEXT_RESP_LEN, GID_ENTRY_LEN, WRITE_GET_CONTEXT_LEN,
    WRITE_GET_CONTEXT_RESP_LEN,
};
use super::discover::KernelDevice;
use super::sys::{Errno, Sys};
use crate::error::{Error, FwReport, Result};
use crate::provider::{
    AsyncCompletion, CmdChannel, DeviceInfo, DevxEvent, EventChannel, GidTableEntry, Handle,
    Provider, ProviderContext, UarAlloc, UarKind, UarPage,
};
use crate::uar::{BfStore, BF_HALF, BF_OFFSET};

/// Name of this provider in errors and device info.
const PROVIDER: &str = "kernel";

/// Largest mailbox a u16 attribute length can carry.
const MAX_MAILBOX: usize = 0xffff;

/// How the context was allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocPath {
    /// `UVERBS_METHOD_GET_CONTEXT` through the ioctl interface.
    Ioctl,
    /// The legacy `write()` command (kernels without the ioctl method).
    Write,
}

impl Provider for KernelDevice {
    fn info(&self) -> DeviceInfo {
        self.device_info()
    }

    fn open(&self) -> Result<Arc<dyn ProviderContext>> {
        Ok(Arc::new(KernelContext::open(self)?))
    }
}

/// Closes a descriptor on drop unless released.
struct FdGuard<'a> {
    sys: &'a dyn Sys,
    fd: RawFd,
}

impl FdGuard<'_> {
    fn release(self) -> RawFd {
        let fd = self.fd;
        std::mem::forget(self);
        fd
    }
}

impl Drop for FdGuard<'_> {
    fn drop(&mut self) {
        let _ = self.sys.close(self.fd);
    }
}

/// An open uverbs file with a DEVX-enabled ucontext.
pub struct KernelContext {
    sys: Arc<dyn Sys>,
    fd: RawFd,
    info: DeviceInfo,
    resp: UcontextResp,
    num_comp_vectors: u32,
    core_support: u64,
    path: AllocPath,
    /// The context's async-event file: the one the write() path creates,
    /// or allocated (UVERBS_OBJECT_ASYNC_EVENT) after the ioctl path, as
    /// rdma-core does. `Err`: the kernel gave none, and why.
    async_events: std::result::Result<Arc<KernelAsyncFile>, Errno>,
}

impl fmt::Debug for KernelContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelContext")
            .field("device", &self.info.name)
            .field("fd", &self.fd)
            .field("path", &self.path)
            .field("ucontext", &self.resp)
            .finish_non_exhaustive()
    }
}

impl Drop for KernelContext {
    fn drop(&mut self) {
        // The async-event file closes with its last holder.
        // Closing the uverbs file destroys every object left in the context.
        let _ = self.sys.close(self.fd);
    }
}

fn mailbox_check(inbox: &[u8], outlen: usize) -> Result<()> {
    if inbox.len() < 16 || inbox.len() > MAX_MAILBOX {
        return Err(Error::argument(format!(
            "inbox of {} bytes: a command takes 16 to 65535 bytes",
            inbox.len()
        )));
    }
    if !(16..=MAX_MAILBOX).contains(&outlen) {
        return Err(Error::argument(format!(
            "outbox of {outlen} bytes: a command returns 16 to 65535 bytes"
        )));
    }
    Ok(())
}

/// `METHOD(OPCODE_NAME)`, the op text of OS errors.
fn op_with_opcode(method: &str, inbox: &[u8]) -> String {
    if inbox.len() >= 2 {
        format!("{method}({})", opcode_name(opcode_of(inbox)))
    } else {
        method.to_string()
    }
}

/// A failed command that returns an outbox: firmware errors (EREMOTEIO with
/// the outbox copied back) carry status and syndrome, anything else is an OS error.
fn cmd_error(method: &str, errno: Errno, out_attr: &IoctlAttr, inbox: &[u8], out: &[u8]) -> Error {
    if errno == Errno::EREMOTEIO && out_attr.valid_output() && out.first().is_some_and(|&s| s != 0)
    {
        return Error::from_outbox(inbox, out);
    }
    Error::os(op_with_opcode(method, inbox), errno as i32)
}

/// The firmware status the kernel's `cmd_status_to_err` turns into `errno`,
/// for the destroy paths that return only the errno.
fn status_from_destroy_errno(errno: Errno) -> Option<u8> {
    match errno {
        Errno::EBUSY => Some(0x06),  // RES_BUSY
        Errno::ENOMEM => Some(0x08), // LIM
        Errno::EAGAIN => Some(0x0f), // NO_RES
        Errno::EINVAL => Some(0x03), // BAD_PARAM (one of several)
        Errno::EIO => Some(0x01),    // INT_ERR (one of several)
        _ => None,
    }
}

fn provider_error(message: impl Into<String>) -> Error {
    Error::Provider {
        provider: PROVIDER.into(),
        message: message.into(),
    }
}

/// A handle the kernel wrote into an IDR attribute.
fn handle_of(method: &str, data: u64) -> Result<Handle> {
    Handle::try_from(data).map_err(|_| {
        provider_error(format!(
            "{method} returned handle {data:#x}, which does not fit in 32 bits"
        ))
    })
}

/// A descriptor the kernel wrote into an FD attribute.
fn fd_of(method: &str, data: u64) -> Result<RawFd> {
    RawFd::try_from(data).map_err(|_| {
        provider_error(format!(
            "{method} returned fd {data:#x}, which is not a descriptor"
        ))
    })
}

impl KernelContext {
    /// Runs an ALLOC method whose first attribute is FD NEW and returns the new
    /// fd, made non-blocking so `try_get` never sleeps (`get` waits in poll).
    fn alloc_async_fd<const N: usize>(
        &self,
        mut cmd: IoctlCmd<N>,
        name: &str,
        fcntl_op: &str,
    ) -> Result<RawFd> {
        // SAFETY: these methods carry no pointer attributes.
        unsafe { cmd.exec(self.sys(), self.fd) }.map_err(|e| Error::os(name, e as i32))?;
        let fd = fd_of(name, cmd.attrs[0].data)?;
        let guard = FdGuard {
            sys: self.sys(),
            fd,
        };
        self.sys
            .set_nonblocking(fd)
            .map_err(|e| Error::os(fcntl_op, e as i32))?;
        Ok(guard.release())
    }

    /// Opens the device's char device and allocates a DEVX context on it.
    pub fn open(dev: &KernelDevice) -> Result<KernelContext> {
        let sys = dev.sys.clone();
        let info = dev.device_info();
        Self::open_path(sys, &dev.dev_path, info)
    }

    /// Opens `path` with `sys` and allocates a DEVX context; `info` is what
    /// the context reports about its device.
    pub fn open_path(sys: Arc<dyn Sys>, path: &Path, info: DeviceInfo) -> Result<KernelContext> {
        let fd = sys
            .open(path, libc::O_RDWR | libc::O_CLOEXEC)
            .map_err(|e| Error::os(format!("open {}", path.display()), e as i32))?;
        let guard = FdGuard { sys: &*sys, fd };
        let req = AllocUcontextReq::devx().to_bytes();
        let (resp, num_comp_vectors, core_support, path, async_event_fd) =
            match Self::get_context_ioctl(&*sys, fd, &req) {
                Ok((resp, ncv, core)) => (resp, ncv, core, AllocPath::Ioctl, None),
                // rdma-core's rule: these two mean "no ioctl method, use write()".
                Err(Errno::EPROTONOSUPPORT) | Err(Errno::ENOTTY) => {
                    let (resp, ncv, afd) =
                        Self::get_context_write(&*sys, fd, &req).map_err(get_context_error)?;
                    (resp, ncv, 0, AllocPath::Write, afd)
                }
                Err(e) => return Err(get_context_error(e)),
            };
        let afd = match async_event_fd {
            Some(afd) => Ok(afd),
            None => Self::alloc_async_event_file(&*sys, fd),
        };
        let async_events = afd.and_then(|afd| {
            let file = KernelAsyncFile {
                sys: sys.clone(),
                fd: afd,
            };
            // Read with `try_get`: never sleeps.
            sys.set_nonblocking(afd)?;
            Ok(Arc::new(file))
        });
        let fd = guard.release();
        Ok(KernelContext {
            sys,
            fd,
            info,
            resp,
            num_comp_vectors,
            core_support,
            path,
            async_events,
        })
    }

    /// UVERBS_METHOD_ASYNC_EVENT_ALLOC: the context's async-event file.
    fn alloc_async_event_file(sys: &dyn Sys, fd: RawFd) -> std::result::Result<RawFd, Errno> {
        let mut cmd = IoctlCmd::new(
            verbs::UVERBS_OBJECT_ASYNC_EVENT,
            verbs::UVERBS_METHOD_ASYNC_EVENT_ALLOC,
            [IoctlAttr::new_obj(
                verbs::UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE,
            )],
        );
        // SAFETY: the method carries no pointer attributes.
        unsafe { cmd.exec(sys, fd) }?;
        RawFd::try_from(cmd.attrs[0].data)
            .ok()
            .filter(|fd| *fd >= 0)
            .ok_or(Errno::EPROTO)
    }

    fn get_context_ioctl(
        sys: &dyn Sys,
        fd: RawFd,
        req: &[u8; abi::ALLOC_UCONTEXT_REQ_LEN],
    ) -> std::result::Result<(UcontextResp, u32, u64), Errno> {
        let mut ncv = [0u8; 4];
        let mut core_support = [0u8; 8];
        let mut resp = [0u8; ALLOC_UCONTEXT_RESP_LEN];
        let mut cmd = IoctlCmd::new(
            verbs::UVERBS_OBJECT_DEVICE,
            verbs::UVERBS_METHOD_GET_CONTEXT,
            [
                IoctlAttr::ptr_out(
                    verbs::UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS,
                    ncv.as_mut_ptr(),
                    4,
                ),
                IoctlAttr::ptr_out(
                    verbs::UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT,
                    core_support.as_mut_ptr(),
                    8,
                ),
                IoctlAttr::ptr_in(verbs::UVERBS_ATTR_UHW_IN, req),
                IoctlAttr::ptr_out(verbs::UVERBS_ATTR_UHW_OUT, resp.as_mut_ptr(), resp.len()),
            ],
        );
        // SAFETY: every pointer attribute refers to a live local buffer of its length.
        unsafe { cmd.exec(sys, fd)? };
        // Outputs the kernel did not mark valid read as zero.
        let ncv = if cmd.attrs[0].valid_output() {
            u32::from_ne_bytes(ncv)
        } else {
            0
        };
        let core = if cmd.attrs[1].valid_output() {
            u64::from_ne_bytes(core_support)
        } else {
            0
        };
        let resp = if cmd.attrs[3].valid_output() {
            UcontextResp::from_bytes(&resp)
        } else {
            UcontextResp::default()
        };
        Ok((resp, ncv, core))
    }

    fn get_context_write(
        sys: &dyn Sys,
        fd: RawFd,
        req: &[u8; abi::ALLOC_UCONTEXT_REQ_LEN],
    ) -> std::result::Result<(UcontextResp, u32, Option<RawFd>), Errno> {
        let mut resp = [0u8; WRITE_GET_CONTEXT_RESP_LEN];
        let mut buf = [0u8; WRITE_GET_CONTEXT_LEN];
        buf[0..4].copy_from_slice(&verbs::IB_USER_VERBS_CMD_GET_CONTEXT.to_ne_bytes());
        buf[4..6].copy_from_slice(&((WRITE_GET_CONTEXT_LEN / 4) as u16).to_ne_bytes());
        buf[6..8].copy_from_slice(&((WRITE_GET_CONTEXT_RESP_LEN / 4) as u16).to_ne_bytes());
        buf[8..16].copy_from_slice(&(resp.as_mut_ptr() as u64).to_ne_bytes());
        buf[16..].copy_from_slice(req);
        // SAFETY: the embedded response pointer refers to `resp`, which is
        // live and as long as out_words says.
        let n = unsafe { sys.write(fd, &buf)? };
        if n != buf.len() {
            return Err(Errno::EPROTO);
        }
        let afd = ne32(&resp, 0) as i32;
        Ok((
            UcontextResp::from_bytes(&resp[8..]),
            ne32(&resp, 4),
            (afd >= 0).then_some(afd),
        ))
    }

    /// The uverbs file descriptor of this context.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// The mlx5 response to the context allocation.
    pub fn ucontext(&self) -> &UcontextResp {
        &self.resp
    }

    /// Completion vectors of the device (0 when the kernel did not say).
    pub fn num_comp_vectors(&self) -> u32 {
        self.num_comp_vectors
    }

    /// `UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT` bits (0 on the write() path).
    pub fn core_support(&self) -> u64 {
        self.core_support
    }

    /// Which interface allocated the context.
    pub fn alloc_path(&self) -> AllocPath {
        self.path
    }

    fn sys(&self) -> &dyn Sys {
        &*self.sys
    }

    fn query_or_modify(
        &self,
        method: u16,
        name: &str,
        handle: Handle,
        inbox: &[u8],
        outbox: &mut [u8],
    ) -> Result<()> {
        mailbox_check(inbox, outbox.len())?;
        let mut cmd = IoctlCmd::new(
            obj::DEVX_OBJ,
            method,
            [
                IoctlAttr::obj(devx_obj::HANDLE, u64::from(handle)),
                IoctlAttr::ptr_in(devx_obj::CMD_IN, inbox),
                IoctlAttr::ptr_out(devx_obj::CMD_OUT, outbox.as_mut_ptr(), outbox.len()),
            ],
        );
        // SAFETY: `inbox` and `outbox` outlive the call and have the lengths given.
        match unsafe { cmd.exec(self.sys(), self.fd) } {
            Ok(()) => Ok(()),
            Err(e) => Err(cmd_error(name, e, &cmd.attrs[2], inbox, outbox)),
        }
    }

    /// Runs a destroy method whose one attribute, `attr`, names `handle`.
    fn destroy_idr(
        &self,
        object: u16,
        method: u16,
        attr: u16,
        handle: Handle,
    ) -> std::result::Result<(), Errno> {
        let mut cmd = IoctlCmd::new(object, method, [IoctlAttr::obj(attr, u64::from(handle))]);
        // SAFETY: no pointer attributes.
        unsafe { cmd.exec(self.sys(), self.fd) }
    }
}

fn get_context_error(e: Errno) -> Error {
    match e {
        Errno::EOPNOTSUPP => Error::unsupported(
            "a DEVX context",
            "the kernel refused the DEVX flag of the mlx5 context request (EOPNOTSUPP)",
        ),
        e => Error::os("GET_CONTEXT(DEVX)", e as i32),
    }
}

impl ProviderContext for KernelContext {
    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn create(&self, inbox: &[u8], outbox: &mut [u8]) -> Result<Handle> {
        mailbox_check(inbox, outbox.len())?;
        let mut cmd = IoctlCmd::new(
            obj::DEVX_OBJ,
            devx_obj::METHOD_CREATE,
            [
                IoctlAttr::new_obj(devx_obj::HANDLE),
                IoctlAttr::ptr_in(devx_obj::CMD_IN, inbox),
                IoctlAttr::ptr_out(devx_obj::CMD_OUT, outbox.as_mut_ptr(), outbox.len()),
            ],
        );
        // SAFETY: `inbox` and `outbox` outlive the call and have the lengths given.
        match unsafe { cmd.exec(self.sys(), self.fd) } {
            Ok(()) => handle_of("DEVX_OBJ_CREATE", cmd.attrs[0].data),
            Err(e) => Err(cmd_error(
                "DEVX_OBJ_CREATE",
                e,
                &cmd.attrs[2],
                inbox,
                outbox,
            )),
        }
    }

    fn query(&self, obj: Handle, inbox: &[u8], outbox: &mut [u8]) -> Result<()> {
        self.query_or_modify(devx_obj::METHOD_QUERY, "DEVX_OBJ_QUERY", obj, inbox, outbox)
    }

    fn modify(&self, obj: Handle, inbox: &[u8], outbox: &mut [u8]) -> Result<()> {
        self.query_or_modify(
            devx_obj::METHOD_MODIFY,
            "DEVX_OBJ_MODIFY",
            obj,
            inbox,
            outbox,
        )
    }

    fn destroy(&self, handle: Handle, destroy_inbox: &[u8]) -> Result<()> {
        // The kernel runs the destroy command it built at create time;
        // `destroy_inbox` only names the command in errors.
        match self.destroy_idr(
            obj::DEVX_OBJ,
            devx_obj::METHOD_DESTROY,
            devx_obj::HANDLE,
            handle,
        ) {
            Ok(()) => Ok(()),
            Err(e) => match status_from_destroy_errno(e) {
                Some(status) if destroy_inbox.len() >= 8 => Err(Error::Firmware {
                    opcode: opcode_of(destroy_inbox),
                    op_mod: op_mod_of(destroy_inbox),
                    status,
                    syndrome: 0,
                    report: FwReport::ErrnoOnly,
                }),
                _ => Err(Error::os(
                    op_with_opcode("DEVX_OBJ_DESTROY", destroy_inbox),
                    e as i32,
                )),
            },
        }
    }

    fn general(&self, inbox: &[u8], outbox: &mut [u8]) -> Result<()> {
        mailbox_check(inbox, outbox.len())?;
        let mut cmd = IoctlCmd::new(
            obj::DEVX,
            devx::METHOD_OTHER,
            [
                IoctlAttr::ptr_in(devx::OTHER_CMD_IN, inbox),
                IoctlAttr::ptr_out(devx::OTHER_CMD_OUT, outbox.as_mut_ptr(), outbox.len()),
            ],
        );
        // SAFETY: `inbox` and `outbox` outlive the call and have the lengths given.
        match unsafe { cmd.exec(self.sys(), self.fd) } {
            Ok(()) => Ok(()),
            Err(e) => Err(cmd_error("DEVX_OTHER", e, &cmd.attrs[1], inbox, outbox)),
        }
    }

    fn create_cmd_channel(&self) -> Result<Arc<dyn CmdChannel>> {
        const NAME: &str = "DEVX_ASYNC_CMD_FD_ALLOC";
        let cmd = IoctlCmd::new(
            obj::DEVX_ASYNC_CMD_FD,
            async_fd::METHOD_ALLOC,
            [IoctlAttr::new_obj(async_fd::HANDLE)],
        );
        let fd = self.alloc_async_fd(cmd, NAME, "fcntl(DEVX async cmd fd, O_NONBLOCK)")?;
        Ok(Arc::new(KernelCmdChannel {
            sys: self.sys.clone(),
            fd,
            pending: Mutex::new(HashMap::new()),
            max_outlen: AtomicUsize::new(16),
            ready: Mutex::new(VecDeque::new()),
        }))
    }

    fn query_async(
        &self,
        obj: Handle,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<()> {
        mailbox_check(inbox, outlen)?;
        let ch = kernel_channel(channel)?;
        // Recorded before the ioctl: the completion may be read on another
        // thread before the ioctl returns here.
        let opcode = opcode_of(inbox);
        ch.push_pending(wr_id, opcode, op_mod_of(inbox));
        ch.max_outlen.fetch_max(outlen, Ordering::Relaxed);
        let mut cmd = IoctlCmd::new(
            abi::obj::DEVX_OBJ,
            devx_obj::METHOD_ASYNC_QUERY,
            [
                IoctlAttr::obj(devx_obj::HANDLE, u64::from(obj)),
                IoctlAttr::ptr_in(devx_obj::CMD_IN, inbox),
                IoctlAttr::u64_in(devx_obj::ASYNC_OUT_LEN, outlen as u64),
                IoctlAttr::u64_in(devx_obj::ASYNC_WR_ID, wr_id),
                IoctlAttr::obj(devx_obj::ASYNC_FD, ch.fd as u64),
            ],
        );
        // SAFETY: `inbox` outlives the call and has the length given.
        match unsafe { cmd.exec(self.sys(), self.fd) } {
            Ok(()) => Ok(()),
            Err(e) => {
                ch.take_pending(wr_id);
                Err(Error::os(
                    op_with_opcode("DEVX_OBJ_ASYNC_QUERY", inbox),
                    e as i32,
                ))
            }
        }
    }

    /// DEVX has no asynchronous modify: it runs synchronously here and its
    /// completion is queued at once (readable with `try_get` on return; the
    /// fd does not signal it).
    fn modify_async(
        &self,
        obj: Handle,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<()> {
        let ch = kernel_channel(channel)?;
        let mut out = vec![0u8; outlen];
        let result = self.modify(obj, inbox, &mut out).map(|()| out);
        ch.ready().push_back((wr_id, result));
        Ok(())
    }

    /// DEVX has no asynchronous general command: it runs synchronously
    /// here and its completion is queued at once (readable with `try_get`
    /// on return; the fd does not signal it).
    fn general_async(
        &self,
        inbox: &[u8],
        outbox: Vec<u8>,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<()> {
        let ch = kernel_channel(channel)?;
        let mut out = outbox;
        let result = self.general(inbox, &mut out).map(|()| out);
        ch.ready().push_back((wr_id, result));
        Ok(())
    }

    fn umem_reg(&self, addr: usize, len: usize, access: u32) -> Result<(Handle, u32)> {
        const NAME: &str = "DEVX_UMEM_REG";
        if len == 0 {
            return Err(Error::argument("cannot register an empty umem"));
        }
        let mut umem_id = [0u8; 4];
        let mut cmd = IoctlCmd::new(
            obj::DEVX_UMEM,
            umem::METHOD_REG,
            [
                IoctlAttr::new_obj(umem::HANDLE),
                IoctlAttr::u64_in(umem::ADDR, addr as u64),
                IoctlAttr::u64_in(umem::LEN, len as u64),
                IoctlAttr::u32_in(umem::ACCESS, access),
                IoctlAttr::u64_in(umem::PGSZ_BITMAP, umem::DEFAULT_PGSZ_BITMAP).optional(),
                IoctlAttr::ptr_out(umem::OUT_ID, umem_id.as_mut_ptr(), 4),
            ],
        );
        // SAFETY: the only pointer attribute refers to the live local `umem_id`.
        unsafe { cmd.exec(self.sys(), self.fd) }.map_err(|e| Error::os(NAME, e as i32))?;
        let handle = handle_of(NAME, cmd.attrs[0].data)?;
        if !cmd.attrs[5].valid_output() {
            let _ = self.destroy_idr(obj::DEVX_UMEM, umem::METHOD_DEREG, umem::HANDLE, handle);
            return Err(provider_error(format!(
                "{NAME} succeeded without returning the umem id"
            )));
        }
        Ok((handle, u32::from_ne_bytes(umem_id)))
    }

    fn umem_dereg(&self, handle: Handle) -> Result<()> {
        self.destroy_idr(obj::DEVX_UMEM, umem::METHOD_DEREG, umem::HANDLE, handle)
            .map_err(|e| Error::os("DEVX_UMEM_DEREG", e as i32))
    }

    fn uar_alloc(&self, kind: UarKind) -> Result<UarAlloc> {
        const NAME: &str = "UAR_OBJ_ALLOC";
        let mut offset = [0u8; 8];
        let mut length = [0u8; 4];
        let mut page_id = [0u8; 4];
        let mut cmd = IoctlCmd::new(
            obj::UAR,
            uar::METHOD_ALLOC,
            [
                IoctlAttr::new_obj(uar::HANDLE),
                IoctlAttr::u64_in(uar::TYPE, kind as u64),
                IoctlAttr::ptr_out(uar::MMAP_OFFSET, offset.as_mut_ptr(), 8),
                IoctlAttr::ptr_out(uar::MMAP_LENGTH, length.as_mut_ptr(), 4),
                IoctlAttr::ptr_out(uar::PAGE_ID, page_id.as_mut_ptr(), 4),
            ],
        );
        // SAFETY: the pointer attributes refer to live locals of their lengths.
        unsafe { cmd.exec(self.sys(), self.fd) }.map_err(|e| match e {
            Errno::EOPNOTSUPP => Error::unsupported(
                format!("a {kind:?} UAR"),
                "the kernel refused the UAR type (EOPNOTSUPP; BlueFlame needs write-combining)",
            ),
            e => Error::os(format!("{NAME}({kind:?})"), e as i32),
        })?;
        let handle = handle_of(NAME, cmd.attrs[0].data)?;
        let free = |msg: String| {
            let _ = self.destroy_idr(obj::UAR, uar::METHOD_DESTROY, uar::HANDLE, handle);
            provider_error(msg)
        };
        if !cmd.attrs[2..5].iter().all(IoctlAttr::valid_output) {
            return Err(free(format!(
                "{NAME} succeeded without returning its mmap offset, length and page id"
            )));
        }
        let offset = u64::from_ne_bytes(offset);
        let length = u32::from_ne_bytes(length) as usize;
        // One system page; anything else is not a UAR page we know how to use.
        if !(4096..=1 << 20).contains(&length) || !length.is_power_of_two() {
            return Err(free(format!(
                "{NAME} returned an mmap length of {length} bytes"
            )));
        }
        let Ok(off) = i64::try_from(offset) else {
            return Err(free(format!(
                "{NAME} returned mmap offset {offset:#x}, beyond off_t"
            )));
        };
        let base = match self
            .sys
            .mmap(length, libc::PROT_WRITE, libc::MAP_SHARED, self.fd, off)
        {
            Ok(p) => p,
            Err(e) => {
                let _ = self.destroy_idr(obj::UAR, uar::METHOD_DESTROY, uar::HANDLE, handle);
                return Err(Error::os(
                    format!("mmap(UAR page at offset {offset:#x})"),
                    e as i32,
                ));
            }
        };
        Ok(UarAlloc {
            handle,
            page_id: u32::from_ne_bytes(page_id),
            page: Arc::new(KernelUarPage {
                sys: self.sys.clone(),
                base,
                len: length,
            }),
        })
    }

    fn uar_free(&self, handle: Handle) -> Result<()> {
        self.destroy_idr(obj::UAR, uar::METHOD_DESTROY, uar::HANDLE, handle)
            .map_err(|e| Error::os("UAR_OBJ_DESTROY", e as i32))
    }

    fn query_eqn(&self, vector: u32) -> Result<u32> {
        const NAME: &str = "DEVX_QUERY_EQN";
        let mut eqn = [0u8; 4];
        let mut cmd = IoctlCmd::new(
            obj::DEVX,
            devx::METHOD_QUERY_EQN,
            [
                IoctlAttr::u32_in(devx::QUERY_EQN_USER_VEC, vector),
                IoctlAttr::ptr_out(devx::QUERY_EQN_DEV_EQN, eqn.as_mut_ptr(), 4),
            ],
        );
        // SAFETY: the pointer attribute refers to the live local `eqn`.
        unsafe { cmd.exec(self.sys(), self.fd) }
            .map_err(|e| Error::os(format!("{NAME}(vector {vector})"), e as i32))?;
        if !cmd.attrs[1].valid_output() {
            return Err(provider_error(format!(
                "{NAME} succeeded without returning the EQ number"
            )));
        }
        Ok(u32::from_ne_bytes(eqn))
    }

    fn query_gid_table(&self) -> Result<Vec<GidTableEntry>> {
        const NAME: &str = "QUERY_GID_TABLE";
        // As many entries as a u16 attribute length can carry: far more than
        // the valid entries of any device's ports.
        let max = MAX_MAILBOX / GID_ENTRY_LEN;
        let mut entries = vec![0u8; max * GID_ENTRY_LEN];
        let mut num = [0u8; 8];
        let mut cmd = IoctlCmd::new(
            verbs::UVERBS_OBJECT_DEVICE,
            verbs::UVERBS_METHOD_QUERY_GID_TABLE,
            [
                IoctlAttr::u64_in(
                    verbs::UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE,
                    GID_ENTRY_LEN as u64,
                ),
                IoctlAttr::u32_in(verbs::UVERBS_ATTR_QUERY_GID_TABLE_FLAGS, 0),
                IoctlAttr::ptr_out(
                    verbs::UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES,
                    entries.as_mut_ptr(),
                    entries.len(),
                ),
                IoctlAttr::ptr_out(
                    verbs::UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES,
                    num.as_mut_ptr(),
                    num.len(),
                ),
            ],
        );
        // SAFETY: the pointer attributes refer to the live locals `entries`
        // and `num`, with their lengths.
        unsafe { cmd.exec(self.sys(), self.fd) }.map_err(|e| Error::os(NAME, e as i32))?;
        if !cmd.attrs[3].valid_output() {
            return Err(provider_error(format!(
                "{NAME} succeeded without returning the number of entries"
            )));
        }
        let n = u64::from_ne_bytes(num);
        if n > max as u64 {
            return Err(provider_error(format!(
                "{NAME} returned {n} entries into room for {max}"
            )));
        }
        entries
            .chunks_exact(GID_ENTRY_LEN)
            .take(n as usize)
            .map(|b| {
                let b: &[u8; GID_ENTRY_LEN] = b.try_into().unwrap_or(&[0; GID_ENTRY_LEN]);
                abi::gid_entry_from_bytes(b)
                    .ok_or_else(|| provider_error(format!("{NAME} returned an unknown gid_type")))
            })
            .collect()
    }

    /// The async-event file allocated when the context opened.
    fn async_event_file(&self) -> Result<Arc<dyn crate::AsyncEventFile>> {
        match &self.async_events {
            Ok(f) => Ok(Arc::clone(f) as Arc<dyn crate::AsyncEventFile>),
            Err(e) => Err(Error::os(
                "the context's async-event file (ASYNC_EVENT_ALLOC at open)",
                *e as i32,
            )),
        }
    }

    fn create_event_channel(&self, omit_data: bool) -> Result<Arc<dyn EventChannel>> {
        const NAME: &str = "DEVX_ASYNC_EVENT_FD_ALLOC";
        let flags = if omit_data {
            async_fd::FLAG_OMIT_DATA
        } else {
            0
        };
        let cmd = IoctlCmd::new(
            obj::DEVX_ASYNC_EVENT_FD,
            async_fd::METHOD_ALLOC,
            [
                IoctlAttr::new_obj(async_fd::HANDLE),
                IoctlAttr::u32_in(async_fd::EVENT_FLAGS, flags),
            ],
        );
        let fd = self.alloc_async_fd(cmd, NAME, "fcntl(DEVX async event fd, O_NONBLOCK)")?;
        Ok(Arc::new(KernelEventChannel {
            sys: self.sys.clone(),
            fd,
            omit_data,
        }))
    }

    fn subscribe_event(
        &self,
        channel: &dyn EventChannel,
        obj: Option<Handle>,
        event_types: &[u16],
        cookie: u64,
    ) -> Result<()> {
        let cookie = IoctlAttr::u64_in(devx::SUBSCRIBE_COOKIE, cookie);
        self.subscribe(channel, obj, event_types, cookie)
    }

    fn subscribe_event_fd(
        &self,
        channel: &dyn EventChannel,
        obj: Option<Handle>,
        event_types: &[u16],
        eventfd: BorrowedFd<'_>,
    ) -> Result<()> {
        // The kernel takes its own reference to the eventfd by number.
        let fd_num = IoctlAttr::u32_in(devx::SUBSCRIBE_FD_NUM, eventfd.as_raw_fd() as u32);
        self.subscribe(channel, obj, event_types, fd_num)
    }
}

impl KernelContext {
    /// DEVX_SUBSCRIBE_EVENT; `delivery` is the COOKIE or the FD_NUM
    /// (redirect) attribute, never both (the kernel refuses that).
    fn subscribe(
        &self,
        channel: &dyn EventChannel,
        obj: Option<Handle>,
        event_types: &[u16],
        delivery: IoctlAttr,
    ) -> Result<()> {
        const NAME: &str = "DEVX_SUBSCRIBE_EVENT";
        let ch = channel
            .as_any()
            .downcast_ref::<KernelEventChannel>()
            .ok_or_else(|| Error::argument("the event channel belongs to another provider"))?;
        if event_types.is_empty() || event_types.len() > 16 {
            return Err(Error::argument(format!(
                "{} event types: a subscription takes 1 to 16",
                event_types.len()
            )));
        }
        let mut list = [0u8; 32];
        for (i, t) in event_types.iter().enumerate() {
            list[2 * i..2 * i + 2].copy_from_slice(&t.to_ne_bytes());
        }
        let list = &list[..2 * event_types.len()];
        let fd_attr = IoctlAttr::obj(devx::SUBSCRIBE_FD_HANDLE, ch.fd as u64);
        let list_attr = IoctlAttr::ptr_in(devx::SUBSCRIBE_TYPE_NUM_LIST, list);
        let r = match obj {
            Some(h) => {
                let mut cmd = IoctlCmd::new(
                    abi::obj::DEVX,
                    devx::METHOD_SUBSCRIBE_EVENT,
                    [
                        fd_attr,
                        delivery,
                        IoctlAttr::obj(devx::SUBSCRIBE_OBJ_HANDLE, u64::from(h)),
                        list_attr,
                    ],
                );
                // SAFETY: the list attribute is inline or points to `list`,
                // which outlives the call.
                unsafe { cmd.exec(self.sys(), self.fd) }
            }
            None => {
                let mut cmd = IoctlCmd::new(
                    abi::obj::DEVX,
                    devx::METHOD_SUBSCRIBE_EVENT,
                    [fd_attr, delivery, list_attr],
                );
                // SAFETY: as above.
                unsafe { cmd.exec(self.sys(), self.fd) }
            }
        };
        r.map_err(|e| Error::os(NAME, e as i32))
    }
}

/// The context's uverbs async-event file: `struct
/// ib_uverbs_async_event_desc` records, one per read.
pub struct KernelAsyncFile {
    sys: Arc<dyn Sys>,
    fd: RawFd,
}

impl Drop for KernelAsyncFile {
    fn drop(&mut self) {
        let _ = self.sys.close(self.fd);
    }
}

impl crate::AsyncEventFile for KernelAsyncFile {
    fn fd(&self) -> RawFd {
        self.fd
    }

    fn try_get(&self) -> Result<Option<crate::AsyncEventDesc>> {
        let mut buf = [0u8; ASYNC_EVENT_DESC_LEN];
        match self.sys.read(self.fd, &mut buf) {
            Ok(ASYNC_EVENT_DESC_LEN) => Ok(Some(crate::AsyncEventDesc {
                element: u64::from_ne_bytes(buf[0..8].try_into().expect("8 bytes")),
                event_type: ne32(&buf, 8),
            })),
            Ok(n) => Err(provider_error(format!(
                "read(async event file) returned {n} bytes; an event is {ASYNC_EVENT_DESC_LEN}"
            ))),
            Err(Errno::EAGAIN) => Ok(None),
            Err(e) => Err(Error::os("read(async event file)", e as i32)),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `sizeof(struct ib_uverbs_async_event_desc)`: u64 element, u32
/// event_type, u32 reserved.
pub const ASYNC_EVENT_DESC_LEN: usize = 16;

/// A DEVX async command fd: completions of `query_async`.
pub struct KernelCmdChannel {
    sys: Arc<dyn Sys>,
    fd: RawFd,
    /// (opcode, op_mod) of queued queries by wr_id, to name firmware errors.
    pending: Mutex<HashMap<u64, VecDeque<(u16, u16)>>>,
    /// Largest outbox queued so far: the read buffer must hold any completion.
    max_outlen: AtomicUsize,
    /// Completions of commands the kernel has no async method for: they
    /// ran synchronously at submission and are read before the fd's.
    ready: Mutex<VecDeque<AsyncCompletion>>,
}

impl fmt::Debug for KernelCmdChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KernelCmdChannel(fd {})", self.fd)
    }
}

impl KernelCmdChannel {
    fn push_pending(&self, wr_id: u64, opcode: u16, op_mod: u16) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.entry(wr_id).or_default().push_back((opcode, op_mod));
    }

    fn take_pending(&self, wr_id: u64) -> Option<(u16, u16)> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let q = p.get_mut(&wr_id)?;
        let v = q.pop_front();
        if q.is_empty() {
            p.remove(&wr_id);
        }
        v
    }

    fn ready(&self) -> std::sync::MutexGuard<'_, VecDeque<AsyncCompletion>> {
        self.ready.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read_one(&self) -> Result<Option<(u64, Vec<u8>)>> {
        let mut cap = 8 + self.max_outlen.load(Ordering::Relaxed).min(MAX_MAILBOX);
        loop {
            let mut buf = vec![0u8; cap];
            match self.sys.read(self.fd, &mut buf) {
                Ok(n) if n < 8 || n > buf.len() => {
                    return Err(provider_error(format!(
                        "DEVX async cmd fd returned a completion of {n} bytes"
                    )))
                }
                Ok(n) => {
                    buf.truncate(n);
                    let out = buf.split_off(8);
                    let wr_id = u64::from_ne_bytes(buf[..8].try_into().unwrap_or_default());
                    return Ok(Some((wr_id, out)));
                }
                Err(Errno::EAGAIN) => return Ok(None),
                // A completion bigger than any we queued: read it whole anyway.
                Err(Errno::ENOSPC) if cap < 8 + MAX_MAILBOX => cap = 8 + MAX_MAILBOX,
                Err(e) => return Err(Error::os("read(DEVX async cmd fd)", e as i32)),
            }
        }
    }
}

impl CmdChannel for KernelCmdChannel {
    fn fd(&self) -> RawFd {
        self.fd
    }

    fn try_get(&self) -> Result<Option<AsyncCompletion>> {
        if let Some(c) = self.ready().pop_front() {
            return Ok(Some(c));
        }
        let Some((wr_id, out)) = self.read_one()? else {
            return Ok(None);
        };
        let (opcode, op_mod) = self.take_pending(wr_id).unwrap_or((0, 0));
        let result = match out.first() {
            Some(&status) if status != 0 => Err(Error::Firmware {
                opcode,
                op_mod,
                status,
                syndrome: header::SYNDROME.get_or_zero(&out) as u32,
                report: FwReport::Outbox,
            }),
            _ => Ok(out),
        };
        Ok(Some((wr_id, result)))
    }

    /// Only the completions of commands run during their submit.
    fn try_get_queued(&self) -> Option<AsyncCompletion> {
        self.ready().pop_front()
    }

    fn get(&self) -> Result<AsyncCompletion> {
        block_on(&*self.sys, self.fd, "poll(DEVX async cmd fd)", || {
            self.try_get()
        })
    }

    /// A completion that ran synchronously wakes at once; the kernel's own
    /// completions wake through the fd.
    fn wake_on_completion(&self, waker: &std::task::Waker) -> bool {
        if self.ready().is_empty() {
            return false;
        }
        waker.wake_by_ref();
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn kernel_channel(channel: &dyn CmdChannel) -> Result<&KernelCmdChannel> {
    channel
        .as_any()
        .downcast_ref::<KernelCmdChannel>()
        .ok_or_else(|| Error::argument("the completion channel belongs to another provider"))
}

impl Drop for KernelCmdChannel {
    fn drop(&mut self) {
        let _ = self.sys.close(self.fd);
    }
}

/// Reads with `try_get` until something arrives, sleeping in poll between tries.
fn block_on<T>(
    sys: &dyn Sys,
    fd: RawFd,
    op: &str,
    try_get: impl Fn() -> Result<Option<T>>,
) -> Result<T> {
    loop {
        if let Some(v) = try_get()? {
            return Ok(v);
        }
        wait_readable(sys, fd, op)?;
    }
}

fn wait_readable(sys: &dyn Sys, fd: RawFd, op: &str) -> Result<()> {
    match sys.poll(fd, libc::POLLIN, -1) {
        Ok(rev) if rev & libc::POLLNVAL != 0 => Err(Error::os(op, libc::EBADF)),
        Ok(_) | Err(Errno::EINTR) => Ok(()),
        Err(e) => Err(Error::os(op, e as i32)),
    }
}

/// Bytes of one event read: u64 cookie, then the 64-byte EQE.
const EVENT_LEN: usize = 8 + 64;

/// A DEVX async event fd: firmware events of the subscriptions made on it.
pub struct KernelEventChannel {
    sys: Arc<dyn Sys>,
    fd: RawFd,
    omit_data: bool,
}

impl fmt::Debug for KernelEventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "KernelEventChannel(fd {}, omit_data {})",
            self.fd, self.omit_data
        )
    }
}

impl KernelEventChannel {
    /// True when events carry only their cookie.
    pub fn omits_data(&self) -> bool {
        self.omit_data
    }
}

impl EventChannel for KernelEventChannel {
    fn fd(&self) -> RawFd {
        self.fd
    }

    fn try_get(&self) -> Result<Option<DevxEvent>> {
        let mut buf = [0u8; EVENT_LEN];
        match self.sys.read(self.fd, &mut buf) {
            Ok(n) if n == 8 || n == EVENT_LEN => Ok(Some(DevxEvent {
                cookie: u64::from_ne_bytes(buf[..8].try_into().unwrap_or_default()),
                eqe: buf[8..n].to_vec(),
            })),
            Ok(n) => Err(provider_error(format!(
                "DEVX async event fd returned an event of {n} bytes"
            ))),
            Err(Errno::EAGAIN) => Ok(None),
            // EOVERFLOW: the kernel dropped events; reported once, then reads go on.
            Err(e) => Err(Error::os("read(DEVX async event fd)", e as i32)),
        }
    }

    fn get(&self) -> Result<DevxEvent> {
        block_on(&*self.sys, self.fd, "poll(DEVX async event fd)", || {
            self.try_get()
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for KernelEventChannel {
    fn drop(&mut self) {
        let _ = self.sys.close(self.fd);
    }
}

/// A UAR page mapped from the uverbs file. Unmapped on drop.
pub struct KernelUarPage {
    sys: Arc<dyn Sys>,
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory (device registers) owned by
// this value; any thread may store to it, and every store is a single
// volatile access.
unsafe impl Send for KernelUarPage {}
// SAFETY: as above; `&self` only allows volatile stores.
unsafe impl Sync for KernelUarPage {}

impl fmt::Debug for KernelUarPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KernelUarPage({:p}, {} bytes)", self.base, self.len)
    }
}

impl KernelUarPage {
    /// Length of the mapping.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a UAR mapping is at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl UarPage for KernelUarPage {
    fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// # Panics
    /// When `offset` is not 8-byte aligned or the store would leave the page:
    /// a doorbell outside its register is a caller bug, not device data.
    fn write64(&self, offset: usize, value: u64) {
        // Stores outside an aligned 8-byte slot of the page are dropped, as
        // the emulated device does; `Uar::write64` reports them to callers.
        if offset & 7 != 0 || offset.checked_add(8).is_none_or(|end| end > self.len) {
            return;
        }
        // SAFETY: the slot lies inside the live mapping and is 8-byte aligned
        // (the mapping is page aligned); one volatile store, as a doorbell needs.
        unsafe { std::ptr::write_volatile(self.base.as_ptr().add(offset).cast::<u64>(), value) }
    }

    /// The device watches its register page: a store there is the
    /// doorbell, when the mapping holds the whole register.
    fn bf_store(&self) -> BfStore {
        if self.len >= BF_OFFSET + 2 * BF_HALF {
            BfStore::Mmio
        } else {
            BfStore::Call
        }
    }
}

impl Drop for KernelUarPage {
    fn drop(&mut self) {
        // SAFETY: the mapping came from `sys.mmap` and dies with this value.
        let _ = unsafe { self.sys.munmap(self.base, self.len) };
    }
}
