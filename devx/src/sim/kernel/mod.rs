//! The kernel-like layer of the emulated device: what `devx.c` and the
//! uverbs core do between a DEVX caller and the firmware.
//!
//! Per context: its own uid (CREATE_UCTX), a handle table, the uid stamped
//! into a private copy of every inbox, opcode admission per method, query
//! and modify bound to the handle's own object, the `*_umem_valid` bits
//! forced, UMEM ranges checked before registration, and on close every
//! remaining object destroyed newest first and async commands cancelled.

pub(crate) mod async_cmd;
pub(crate) mod async_file;
mod async_res;
pub(crate) mod edits;
pub(crate) mod events;
pub(crate) mod handles;
pub(crate) mod memprobe;
pub(crate) mod uar;

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::admission::{self, CmdClass};
use crate::error::{Error, FwReport, Result};
use crate::eventfd::EventFdRef;
use crate::provider::{
    CmdChannel, DeviceInfo, EventChannel, GidTableEntry, GidType, Handle, ProviderContext,
    UarAlloc, UarKind,
};
use prm_layouts::commands::header;
use prm_layouts::{
    AllocFlowCounterIn, AllocUarIn, AllocUarOut, CreateCqIn, CreateMkeyIn, DeallocUarIn,
    DestroyUmemIn, MboxIn, Mkc, Opcode,
};

use prm_layouts::RoceVersion;

use super::fw::cmd::FwError;
use super::fw::state::State;
use super::fw::{eq, umem};
use super::profile::PORT_TYPE_ETHERNET;
use super::DeviceShared;
use crate::sim::fw::events::Delivery;
use async_cmd::SimCmdChannel;
use events::SimEventChannel;
use handles::{Handles, Named};
use uar::SimUarPage;

/// UMEM_REG access flags the kernel accepts.
const UMEM_ACCESS_ALLOWED: u32 = umem::access::LOCAL_WRITE
    | umem::access::REMOTE_WRITE
    | umem::access::REMOTE_READ
    | umem::access::RELAXED_ORDERING;

/// One open context on an emulated device.
pub struct SimContext {
    dev: Arc<DeviceShared>,
    id: u64,
    uid: u16,
    /// Shared with the firmware thread, which enters what queued creates,
    /// registrations and allocations make.
    handles: Arc<Mutex<Handles>>,
    /// Opened with the context, as the kernel's is.
    async_file: Arc<async_file::SimAsyncFile>,
}

/// The kernel's GID table of the emulated port 1. An Ethernet port holds
/// the RoCE addresses it gave the firmware (IPv4 ones in their mapped
/// form); an InfiniBand port its default GID, the link-local prefix and
/// the port GUID.
fn gid_table(st: &State) -> Vec<GidTableEntry> {
    const PORT: u32 = 1;
    if st.profile.port_type != PORT_TYPE_ETHERNET {
        let mut gid = [0u8; 16];
        gid[..2].copy_from_slice(&[0xfe, 0x80]);
        gid[8..].copy_from_slice(&st.ident.node_guid.to_be_bytes());
        return vec![GidTableEntry {
            gid,
            index: 0,
            port: PORT,
            gid_type: GidType::Ib,
            netdev_ifindex: 0,
        }];
    }
    (0u32..)
        .zip(st.ident.gid_table())
        .map(|(index, e)| GidTableEntry {
            gid: e.gid,
            index,
            port: PORT,
            gid_type: match e.version {
                RoceVersion::V2 => GidType::RoceV2,
                RoceVersion::V1 => GidType::RoceV1,
            },
            netdev_ifindex: 0,
        })
        .collect()
}

fn einval(what: impl Into<String>) -> Error {
    Error::os(what, libc::EINVAL)
}

/// Why handle `h`, naming `named`, is not a DEVX object.
fn not_an_object(h: Handle, named: &Named) -> String {
    match named {
        Named::Pending { .. } => format!("handle {h} is still being created"),
        _ => format!("handle {h} is a UMEM or UAR, not a DEVX object"),
    }
}

/// A firmware failure whose outbox went back to the caller. Status and
/// syndrome come from the firmware's answer itself, so an outbox too short to
/// hold them still reports them.
pub(crate) fn with_outbox(inbox: &[u8], e: FwError) -> Error {
    Error::Firmware {
        opcode: admission::opcode_of(inbox),
        op_mod: admission::op_mod_of(inbox),
        status: e.status,
        syndrome: e.syndrome,
        report: FwReport::Outbox,
    }
}

/// A firmware failure the kernel reports with an errno only (destroy, UMEM, UAR).
fn errno_only(opcode: u16, op_mod: u16, e: FwError) -> Error {
    Error::Firmware {
        opcode,
        op_mod,
        status: e.status,
        syndrome: e.syndrome,
        report: FwReport::ErrnoOnly,
    }
}

/// DESTROY_UMEM of `umem_id`, as the kernel sends it.
fn destroy_umem(uid: u16, umem_id: u32) -> DestroyUmemIn {
    let mut m = DestroyUmemIn::new();
    m.set_opcode(Opcode::DestroyUmem.raw());
    m.set_uid(uid);
    m.set_umem_id(umem_id);
    m
}

/// DEALLOC_UAR of `page_id`, as the kernel sends it.
fn dealloc_uar(uid: u16, page_id: u32) -> DeallocUarIn {
    let mut m = DeallocUarIn::new();
    m.set_opcode(Opcode::DeallocUar.raw());
    m.set_uid(uid);
    m.set_uar(page_id);
    m
}

/// Where CREATE_MKEY's mkey context ends: the kernel reads the context, so
/// it must be there.
const MKC_END: usize = {
    let at = CreateMkeyIn::META
        .named("memory_key_mkey_entry.free")
        .offset_bits
        - Mkc::META.named("free").offset_bits;
    at as usize / 8 + Mkc::SIZE_BYTES
};

/// Where a queued command's completion goes.
struct Queued<'a> {
    outlen: usize,
    /// The buffer the command's private copy and then its outbox live in
    /// (empty: a fresh one).
    buf: Vec<u8>,
    wr_id: u64,
    channel: &'a dyn CmdChannel,
}

impl SimContext {
    pub(crate) fn open(dev: Arc<DeviceShared>) -> Result<SimContext> {
        dev.check_alive("open context")?;
        let uid = dev
            .fw
            .create_uctx()
            .map_err(|e| errno_only(Opcode::CreateUctx.raw(), 0, e))?;
        let async_file = dev.async_files.open()?;
        let id = dev
            .next_ctx
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        dev.contexts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(SimContext {
            dev,
            id,
            uid,
            handles: Arc::new(Mutex::new(Handles::default())),
            async_file,
        })
    }

    /// The DEVX uid of this context.
    pub fn uid(&self) -> u16 {
        self.uid
    }

    /// Handles this context holds (objects, UMEMs, UARs, pending creates).
    pub fn handle_count(&self) -> usize {
        self.handles().len()
    }

    /// Queues a query, modify (of `obj`) or general command on the
    /// firmware's command queue, after the checks the blocking call makes.
    fn submit(
        &self,
        class: CmdClass,
        obj: Option<Handle>,
        inbox: &[u8],
        q: Queued<'_>,
    ) -> Result<()> {
        self.dev.check_alive(match class {
            CmdClass::Query => "async query",
            CmdClass::Modify => "async modify",
            _ => "async general command",
        })?;
        admission::admit(inbox, class)?;
        let chan = self.async_channel(q.outlen, q.channel)?;
        if let Some(obj) = obj {
            self.bind(obj, inbox)?;
        }
        let cmd = self.private_copy_with_room(inbox, q.outlen, q.buf);
        self.dev
            .engine
            .submit(self.id, cmd, q.outlen, q.wr_id, &chan.inner)
    }

    fn handles(&self) -> MutexGuard<'_, Handles> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kernel's private copy of an inbox: uid stamped, valid bits forced.
    fn private_copy(&self, inbox: &[u8]) -> Vec<u8> {
        self.stamped(inbox.to_vec())
    }

    /// [`Self::private_copy`] after room for a queued command's outbox's
    /// `outlen` bytes, where its answer is written (see
    /// `AsyncEngine::submit_work`). Kept in `buf` (a caller's outbox),
    /// grown only if it lacks the room.
    fn private_copy_with_room(&self, inbox: &[u8], outlen: usize, buf: Vec<u8>) -> Vec<u8> {
        let mut cmd = buf;
        cmd.clear();
        cmd.reserve(outlen + inbox.len());
        cmd.resize(outlen, 0);
        cmd.extend_from_slice(inbox);
        if let Some(copy) = cmd.get_mut(outlen..) {
            self.stamp(copy);
        }
        cmd
    }

    fn stamped(&self, mut cmd: Vec<u8>) -> Vec<u8> {
        self.stamp(&mut cmd);
        cmd
    }

    /// [`Self::stamped`] in place. Not inlined: one copy serves the
    /// blocking and the queued path.
    #[inline(never)]
    fn stamp(&self, cmd: &mut [u8]) {
        edits::stamp_uid(cmd, self.uid);
        edits::force_umem_valid(cmd);
    }

    /// Runs a command whose outbox goes back to the caller (EREMOTEIO path).
    fn exec(&self, cmd: &[u8], outbox: &mut [u8]) -> Result<()> {
        match self.dev.fw.execute(cmd, outbox) {
            Ok(()) => Ok(()),
            Err(e) => Err(with_outbox(cmd, e)),
        }
    }

    /// Runs a command whose outbox the kernel keeps (destroy, UMEM, UAR).
    fn exec_errno(&self, cmd: &[u8]) -> std::result::Result<Vec<u8>, Error> {
        let mut out = vec![0u8; 64];
        match self.dev.fw.execute(cmd, &mut out) {
            Ok(()) => Ok(out),
            Err(e) => Err(errno_only(
                admission::opcode_of(cmd),
                admission::op_mod_of(cmd),
                e,
            )),
        }
    }

    /// The channel an async command of `outlen` output bytes completes on:
    /// one of this context's.
    fn async_channel<'c>(
        &self,
        outlen: usize,
        channel: &'c dyn CmdChannel,
    ) -> Result<&'c SimCmdChannel> {
        if !(16..=0xffff).contains(&outlen) {
            return Err(einval(format!(
                "async command output length {outlen} is not 16..=65535"
            )));
        }
        let Some(chan) = channel.as_any().downcast_ref::<SimCmdChannel>() else {
            return Err(Error::argument(
                "completion channel belongs to another provider",
            ));
        };
        if chan.inner.ctx_id != self.id {
            return Err(einval("completion channel belongs to another context"));
        }
        Ok(chan)
    }

    fn check_outbox(&self, outbox_len: usize) -> Result<()> {
        if outbox_len < 16 {
            return Err(einval(format!(
                "outbox of {outbox_len} bytes; CMD_OUT needs at least 16"
            )));
        }
        Ok(())
    }

    /// The object a query or modify may touch through `obj`: the one the
    /// handle names, and only that one.
    fn bind(&self, obj: Handle, inbox: &[u8]) -> Result<()> {
        let handles = self.handles();
        let Some(entry) = handles.get(obj) else {
            return Err(Error::os(
                format!("handle {obj} is not an object of this context"),
                libc::ENOENT,
            ));
        };
        let Named::Obj { key, span, .. } = &entry.named else {
            return Err(einval(not_an_object(obj, &entry.named)));
        };
        // A flow counter bulk answers to every id in it, as the kernel allows.
        let bound = admission::named_key(inbox).is_some_and(|named| {
            named.creator == key.creator && named.number.wrapping_sub(key.number) < (*span).max(1)
        });
        if !bound {
            return Err(einval(format!(
                "{} names another object than handle {obj}",
                prm_layouts::enums::opcode_name(admission::opcode_of(inbox))
            )));
        }
        Ok(())
    }

    /// Checks the kernel makes on a create before firmware sees it.
    fn precheck_create(&self, cmd: &[u8]) -> Result<()> {
        match Opcode::from_raw(admission::opcode_of(cmd)) {
            // The mkey context must be there for the kernel to read it.
            Some(Opcode::CreateMkey) if cmd.len() < MKC_END => {
                Err(einval("CREATE_MKEY inbox is shorter than its mkey context"))
            }
            // The core CQ layer looks the EQ up first (ENOENT if it is not a
            // completion EQ). Short inboxes are the firmware's to refuse.
            Some(Opcode::CreateCq) if cmd.len() >= CreateCqIn::SIZE_BYTES => {
                let cqc = CreateCqIn::from_slice(cmd).map(|m| m.cq_context());
                let eqn = cqc.map_or(0, |c| c.c_eqn_or_apu_element());
                if self.dev.fw.with(|st| eq::is_completion_eq(st, eqn)) {
                    Ok(())
                } else {
                    Err(Error::os(
                        format!("CREATE_CQ: EQ {eqn} is not a completion EQ"),
                        libc::ENOENT,
                    ))
                }
            }
            _ => Ok(()),
        }
    }

    /// Destroys what one handle names; the firmware's refusal leaves it alive.
    fn destroy_entry(&self, named: &Named, given: Option<&[u8]>) -> Result<()> {
        match named {
            Named::Obj { destroy, .. } => {
                let cmd = match (given, destroy) {
                    (Some(g), _) => {
                        let mut c = g.to_vec();
                        edits::stamp_uid(&mut c, self.uid);
                        c
                    }
                    (None, Some(d)) => d.clone(),
                    (None, None) => {
                        return Err(Error::argument("object has no destroy command"));
                    }
                };
                self.exec_errno(&cmd).map(|_| ())
            }
            Named::Umem { umem_id } => self
                .exec_errno(destroy_umem(self.uid, *umem_id).as_bytes())
                .map(|_| ()),
            Named::Uar { page_id, page } => {
                self.exec_errno(dealloc_uar(self.uid, *page_id).as_bytes())?;
                page.mark_freed();
                Ok(())
            }
            // Its queued command was cancelled: nothing was made.
            Named::Pending { .. } => Ok(()),
        }
    }

    /// True when `given` (uid aside) is the command the kernel built.
    fn same_destroy(given: &[u8], built: &[u8]) -> bool {
        let n = given.len().min(built.len());
        if n < MboxIn::SIZE_BYTES || given[n..].iter().any(|&b| b != 0) {
            return false;
        }
        let (mut given, mut built) = (given[..n].to_vec(), built[..n].to_vec());
        for m in [&mut given, &mut built] {
            let _ = header::UID.set(m, 0);
        }
        given == built
    }
}

/// The region UMEM_REG registers, after the kernel's checks of the access
/// flags and of the range (pinned: it must be mapped, and writable when the
/// device may write it).
fn umem_region(addr: usize, len: usize, access: u32) -> Result<umem::UmemObj> {
    if access & !UMEM_ACCESS_ALLOWED != 0 {
        return Err(einval(format!(
            "UMEM access flags {access:#x} include unknown bits"
        )));
    }
    let write = access & umem::access::LOCAL_WRITE != 0;
    if access & umem::access::REMOTE_WRITE != 0 && !write {
        return Err(einval("UMEM remote write requires local write"));
    }
    memprobe::check_range(addr, len, write)
        .map_err(|errno| Error::os(format!("UMEM_REG of {len} bytes at {addr:#x}"), errno))?;
    Ok(umem::UmemObj {
        addr: addr as u64,
        len: len as u64,
        access,
    })
}

/// Counters an ALLOC_FLOW_COUNTER inbox asks for (1 for any other create).
fn flow_counter_bulk(cmd: &[u8]) -> u32 {
    if admission::opcode_of(cmd) != Opcode::AllocFlowCounter.raw() {
        return 1;
    }
    let Some(m) = AllocFlowCounterIn::from_slice(cmd) else {
        return 1;
    };
    let log = u32::from(m.flow_counter_bulk_log_size());
    let bulk = u32::from(m.flow_counter_bulk());
    if log != 0 {
        1 << log
    } else if bulk != 0 {
        bulk * 128
    } else {
        1
    }
}

impl ProviderContext for SimContext {
    fn info(&self) -> DeviceInfo {
        self.dev.info.clone()
    }

    fn create(&self, inbox: &[u8], outbox: &mut [u8]) -> Result<Handle> {
        self.dev.check_alive("create")?;
        admission::admit(inbox, CmdClass::Create)?;
        self.check_outbox(outbox.len())?;
        let cmd = self.private_copy(inbox);
        self.precheck_create(&cmd)?;
        self.exec(&cmd, outbox)?;
        let key = admission::created_key(&cmd, outbox);
        let destroy = admission::destroy_command(&cmd, outbox).ok();
        let span = flow_counter_bulk(&cmd);
        let Some(key) = key else {
            // A create the kernel cannot track: undo it rather than leak it.
            if let Some(d) = destroy {
                let _ = self.exec_errno(&d);
            }
            return Err(Error::unsupported(
                "this create",
                "the emulator cannot track its object",
            ));
        };
        Ok(self.handles().insert(Named::Obj { key, span, destroy }))
    }

    fn query(&self, obj: Handle, inbox: &[u8], outbox: &mut [u8]) -> Result<()> {
        self.dev.check_alive("query")?;
        admission::admit(inbox, CmdClass::Query)?;
        self.check_outbox(outbox.len())?;
        self.bind(obj, inbox)?;
        let cmd = self.private_copy(inbox);
        self.exec(&cmd, outbox)
    }

    fn modify(&self, obj: Handle, inbox: &[u8], outbox: &mut [u8]) -> Result<()> {
        self.dev.check_alive("modify")?;
        admission::admit(inbox, CmdClass::Modify)?;
        self.check_outbox(outbox.len())?;
        self.bind(obj, inbox)?;
        let cmd = self.private_copy(inbox);
        self.exec(&cmd, outbox)
    }

    /// A handle whose queued create has not run yet is doomed instead: the
    /// object is destroyed as soon as the firmware makes it.
    fn destroy(&self, obj: Handle, destroy_inbox: &[u8]) -> Result<()> {
        if self.handles().doom(obj) {
            return Ok(());
        }
        let Some(entry) = self.handles().take(obj) else {
            return Err(Error::os(
                format!("handle {obj} is not an object of this context"),
                libc::ENOENT,
            ));
        };
        let given = if destroy_inbox.is_empty() {
            None
        } else {
            Some(destroy_inbox)
        };
        let check = match (&entry.named, given) {
            (
                Named::Obj {
                    destroy: Some(built),
                    ..
                },
                Some(g),
            ) if !Self::same_destroy(g, built) => Err(einval(
                "destroy command names another object than the handle",
            )),
            (Named::Obj { .. }, _) => Ok(()),
            _ => Err(einval(format!(
                "handle {obj} is a UMEM or UAR; use umem_dereg / uar_free"
            ))),
        };
        let result = check.and_then(|()| self.destroy_entry(&entry.named, given));
        if result.is_err() {
            self.handles().restore(obj, entry);
        } else {
            // The kernel drops an object's subscriptions with the object.
            self.dev
                .fw
                .with_mut(|st| st.events.forget_handle(self.id, obj));
        }
        result
    }

    fn general(&self, inbox: &[u8], outbox: &mut [u8]) -> Result<()> {
        self.dev.check_alive("general command")?;
        admission::admit(inbox, CmdClass::General)?;
        self.check_outbox(outbox.len())?;
        let cmd = self.private_copy(inbox);
        self.exec(&cmd, outbox)
    }

    fn create_cmd_channel(&self) -> Result<Arc<dyn CmdChannel>> {
        self.dev.check_alive("completion channel")?;
        Ok(Arc::new(SimCmdChannel::new(self.id)?))
    }

    fn query_async(
        &self,
        obj: Handle,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<()> {
        let queued = Queued {
            outlen,
            buf: Vec::new(),
            wr_id,
            channel,
        };
        self.submit(CmdClass::Query, Some(obj), inbox, queued)
    }

    fn modify_async(
        &self,
        obj: Handle,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<()> {
        let queued = Queued {
            outlen,
            buf: Vec::new(),
            wr_id,
            channel,
        };
        self.submit(CmdClass::Modify, Some(obj), inbox, queued)
    }

    fn general_async(
        &self,
        inbox: &[u8],
        outbox: Vec<u8>,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<()> {
        let queued = Queued {
            outlen: outbox.len(),
            buf: outbox,
            wr_id,
            channel,
        };
        self.submit(CmdClass::General, None, inbox, queued)
    }

    fn create_async(
        &self,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<Option<Handle>> {
        self.queue_create(inbox, outlen, wr_id, channel).map(Some)
    }

    fn destroy_async(
        &self,
        obj: Handle,
        destroy_inbox: &[u8],
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<bool> {
        self.queue_destroy(obj, destroy_inbox, wr_id, channel)
    }

    fn umem_reg_async(
        &self,
        addr: usize,
        len: usize,
        access: u32,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<Option<Handle>> {
        self.queue_umem_reg(addr, len, access, wr_id, channel)
            .map(Some)
    }

    fn umem_dereg_async(&self, umem: Handle, wr_id: u64, channel: &dyn CmdChannel) -> Result<bool> {
        self.queue_umem_dereg(umem, wr_id, channel)
    }

    fn uar_alloc_async(
        &self,
        kind: UarKind,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<Option<Handle>> {
        self.queue_uar_alloc(kind, wr_id, channel).map(Some)
    }

    fn uar_allocated(&self, uar: Handle) -> Result<UarAlloc> {
        match self.handles().get(uar).map(|e| &e.named) {
            Some(Named::Uar { page_id, page }) => Ok(UarAlloc {
                handle: uar,
                page_id: *page_id,
                page: Arc::clone(page) as Arc<dyn crate::provider::UarPage>,
            }),
            _ => Err(Error::os(
                format!("handle {uar} is not an allocated UAR of this context"),
                libc::ENOENT,
            )),
        }
    }

    fn umem_reg(&self, addr: usize, len: usize, access: u32) -> Result<(Handle, u32)> {
        self.dev.check_alive("UMEM registration")?;
        let region = umem_region(addr, len, access)?;
        let umem_id = self
            .dev
            .fw
            .create_umem(self.uid, region)
            .map_err(|e| errno_only(Opcode::CreateUmem.raw(), 0, e))?;
        Ok((self.handles().insert(Named::Umem { umem_id }), umem_id))
    }

    fn umem_dereg(&self, h: Handle) -> Result<()> {
        if self.handles().doom(h) {
            return Ok(());
        }
        let Some(entry) = self.handles().take(h) else {
            return Err(Error::os(
                format!("handle {h} is not a UMEM of this context"),
                libc::ENOENT,
            ));
        };
        let result = match entry.named {
            Named::Umem { .. } => self.destroy_entry(&entry.named, None),
            _ => Err(einval(format!("handle {h} is not a UMEM"))),
        };
        if result.is_err() {
            self.handles().restore(h, entry);
        }
        result
    }

    // Every emulated page serves every kind: the kind only picks the
    // kernel's mmap attributes.
    fn uar_alloc(&self, _kind: UarKind) -> Result<UarAlloc> {
        self.dev.check_alive("UAR allocation")?;
        let mut alloc = AllocUarIn::new();
        alloc.set_opcode(Opcode::AllocUar.raw());
        alloc.set_uid(self.uid);
        let out = self.exec_errno(alloc.as_bytes())?;
        let page_id = AllocUarOut::from_slice(&out).map_or(0, |o| o.uar());
        let page = Arc::new(SimUarPage::new(page_id, Arc::clone(&self.dev.doorbell)));
        let handle = self.handles().insert(Named::Uar {
            page_id,
            page: Arc::clone(&page),
        });
        Ok(UarAlloc {
            handle,
            page_id,
            page,
        })
    }

    fn uar_free(&self, h: Handle) -> Result<()> {
        if self.handles().doom(h) {
            return Ok(());
        }
        let Some(entry) = self.handles().take(h) else {
            return Err(Error::os(
                format!("handle {h} is not a UAR of this context"),
                libc::ENOENT,
            ));
        };
        let result = match entry.named {
            Named::Uar { .. } => self.destroy_entry(&entry.named, None),
            _ => Err(einval(format!("handle {h} is not a UAR"))),
        };
        if result.is_err() {
            self.handles().restore(h, entry);
        }
        result
    }

    fn query_eqn(&self, vector: u32) -> Result<u32> {
        self.dev.check_alive("EQ number query")?;
        self.dev
            .fw
            .with(|st| eq::eqn_of_vector(st, vector))
            .ok_or_else(|| {
                Error::os(
                    format!("QUERY_EQN: no completion vector {vector}"),
                    libc::ENOENT,
                )
            })
    }

    fn query_gid_table(&self) -> Result<Vec<GidTableEntry>> {
        Ok(self.dev.fw.with(gid_table))
    }

    fn async_event_file(&self) -> Result<Arc<dyn crate::AsyncEventFile>> {
        Ok(Arc::clone(&self.async_file) as Arc<dyn crate::AsyncEventFile>)
    }

    fn create_event_channel(&self, omit_data: bool) -> Result<Arc<dyn EventChannel>> {
        self.dev.check_alive("event channel")?;
        Ok(Arc::new(SimEventChannel::new(self.id, omit_data)?))
    }

    /// SUBSCRIBE_EVENT with the kernel's checks: a DEVX uid, a channel of
    /// this context, 1 to 16 event numbers valid for an object (the legacy
    /// affiliated list, completion included) or for the device (PORT_CHANGE),
    /// and an object handle naming a DEVX object of this context.
    fn subscribe_event(
        &self,
        channel: &dyn EventChannel,
        obj: Option<Handle>,
        event_types: &[u16],
        cookie: u64,
    ) -> Result<()> {
        self.subscribe(channel, obj, event_types, || Ok(Delivery::Cookie(cookie)))
    }

    /// SUBSCRIBE_EVENT with FD_NUM: the same checks, then the kernel's
    /// reference to the eventfd (EBADF when the descriptor is not open,
    /// EINVAL when it is no eventfd).
    fn subscribe_event_fd(
        &self,
        channel: &dyn EventChannel,
        obj: Option<Handle>,
        event_types: &[u16],
        eventfd: BorrowedFd<'_>,
    ) -> Result<()> {
        self.subscribe(channel, obj, event_types, || {
            EventFdRef::get(eventfd.as_raw_fd())
                .map(Delivery::EventFd)
                .map_err(|e| Error::os("SUBSCRIBE_EVENT: the redirect eventfd", e as i32))
        })
    }
}

impl SimContext {
    /// The subscription both SUBSCRIBE_EVENT forms make; `delivery` runs
    /// once the rest of the request is found valid.
    fn subscribe(
        &self,
        channel: &dyn EventChannel,
        obj: Option<Handle>,
        event_types: &[u16],
        delivery: impl FnOnce() -> Result<Delivery>,
    ) -> Result<()> {
        self.dev.check_alive("event subscription")?;
        if self.uid == 0 {
            return Err(einval("SUBSCRIBE_EVENT needs a context with a DEVX uid"));
        }
        let Some(chan) = channel.as_any().downcast_ref::<SimEventChannel>() else {
            return Err(Error::argument("event channel belongs to another provider"));
        };
        if chan.inner.ctx_id != self.id {
            return Err(einval("event channel belongs to another context"));
        }
        events::check_event_types(event_types, obj.is_some())?;
        let target = match obj {
            None => None,
            Some(h) => {
                let handles = self.handles();
                let Some(entry) = handles.get(h) else {
                    return Err(Error::os(
                        format!("handle {h} is not an object of this context"),
                        libc::ENOENT,
                    ));
                };
                let Named::Obj { key, .. } = &entry.named else {
                    return Err(einval(not_an_object(h, &entry.named)));
                };
                Some((h, *key))
            }
        };
        let delivery = delivery()?;
        self.dev.fw.with_mut(|st| {
            st.events
                .subscribe(self.id, target, event_types, delivery, &chan.inner)
        });
        Ok(())
    }
}

impl Drop for SimContext {
    /// Closing the context: cancel its async commands, destroy what it still
    /// owns newest first (retrying what another of its objects still held),
    /// then give the uid back.
    fn drop(&mut self) {
        self.dev.engine.cancel_ctx(self.id);
        self.dev.fw.with_mut(|st| st.events.forget_ctx(self.id));
        let mut left = self.handles().drain_newest_first();
        while !left.is_empty() {
            let before = left.len();
            left.retain(|(_, e)| self.destroy_entry(&e.named, None).is_err());
            if left.len() == before {
                break;
            }
        }
        for (_, e) in &left {
            if let Named::Uar { page, .. } = &e.named {
                page.mark_freed();
            }
        }
        if self.dev.fw.destroy_uctx(self.uid).is_err() {
            self.dev.fw.purge_uid(self.uid);
            let _ = self.dev.fw.destroy_uctx(self.uid);
        }
        self.dev
            .contexts
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
