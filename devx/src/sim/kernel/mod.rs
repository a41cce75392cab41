//! The kernel-like layer of the emulated device: what `devx.c` and the
//! uverbs core do between a DEVX caller and the firmware.
//!
//! Per context: its own uid (CREATE_UCTX), a handle table, the uid stamped
//! into a private copy of every inbox, opcode admission per method, query
//! and modify bound to the handle's own object, the `*_umem_valid` bits
//! forced, UMEM ranges checked before registration, and on close every
//! remaining object destroyed newest first and async commands cancelled.

pub mod async_cmd;
pub mod edits;
pub mod events;
pub(crate) mod handles;
pub mod memprobe;
pub mod uar;

use std::sync::{Arc, Mutex, MutexGuard};

use crate::admission::{self, CmdClass};
use crate::error::{Error, FwReport, Result};
use crate::provider::{
    CmdChannel, DeviceInfo, EventChannel, Handle, ProviderContext, UarAlloc, UarKind,
};

use super::fw::cmd::FwError;
use super::fw::{eq, umem};
use super::DeviceShared;
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
    handles: Mutex<Handles>,
}

fn einval(what: impl Into<String>) -> Error {
    Error::os(what, libc::EINVAL)
}

/// A firmware failure whose outbox went back to the caller. Status and
/// syndrome come from the firmware's answer itself, so an outbox too short to
/// hold them still reports them.
pub(crate) fn with_outbox(inbox: &[u8], e: FwError) -> Error {
    Error::Firmware {
        opcode: crate::error::be16(inbox, 0),
        op_mod: crate::error::be16(inbox, 6),
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

fn header(opcode: u16, uid: u16, number24: u32) -> Vec<u8> {
    let mut b = vec![0u8; 16];
    b[0..2].copy_from_slice(&opcode.to_be_bytes());
    b[2..4].copy_from_slice(&uid.to_be_bytes());
    b[8..12].copy_from_slice(&(number24 & 0x00ff_ffff).to_be_bytes());
    b
}

impl SimContext {
    pub(crate) fn open(dev: Arc<DeviceShared>) -> Result<SimContext> {
        dev.check_alive("open context")?;
        let uid = dev.fw.create_uctx().map_err(|e| errno_only(0xa04, 0, e))?;
        let id = dev
            .next_ctx
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        dev.contexts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(SimContext {
            dev,
            id,
            uid,
            handles: Mutex::new(Handles::default()),
        })
    }

    /// The DEVX uid of this context.
    pub fn uid(&self) -> u16 {
        self.uid
    }

    /// Handles this context holds (objects, UMEMs, UARs).
    pub fn handle_count(&self) -> usize {
        self.handles().len()
    }

    fn handles(&self) -> MutexGuard<'_, Handles> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kernel's private copy of an inbox: uid stamped, valid bits forced.
    fn private_copy(&self, inbox: &[u8]) -> Vec<u8> {
        let mut cmd = inbox.to_vec();
        edits::stamp_uid(&mut cmd, self.uid);
        edits::force_umem_valid(&mut cmd);
        cmd
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
            return Err(einval(format!(
                "handle {obj} is a UMEM or UAR, not a DEVX object"
            )));
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
        match admission::opcode_of(cmd) {
            // The mkey context must be there for the kernel to read it.
            0x200 if cmd.len() < 16 + 64 => {
                Err(einval("CREATE_MKEY inbox is shorter than its mkey context"))
            }
            // The core CQ layer looks the EQ up first (ENOENT if it is not a
            // completion EQ). Short inboxes are the firmware's to refuse.
            0x400 if cmd.len() >= prm_layouts::CreateCqIn::SIZE_BYTES => {
                let eqn = prm_layouts::bits::get(cmd, 0x80 + 0xa0, 32).unwrap_or(0) as u32;
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
                .exec_errno(&header(0xa0a, self.uid, *umem_id))
                .map(|_| ()),
            Named::Uar { page_id, page } => {
                self.exec_errno(&header(0x803, self.uid, *page_id))?;
                page.mark_freed();
                Ok(())
            }
        }
    }

    /// True when `given` (uid aside) is the command the kernel built.
    fn same_destroy(given: &[u8], built: &[u8]) -> bool {
        let n = given.len().min(built.len());
        n >= 16
            && given[..2] == built[..2]
            && given[4..n] == built[4..n]
            && given[n..].iter().all(|&b| b == 0)
    }
}

/// Counters an ALLOC_FLOW_COUNTER inbox asks for (1 for any other create).
fn flow_counter_bulk(cmd: &[u8]) -> u32 {
    if admission::opcode_of(cmd) != 0x939 {
        return 1;
    }
    let log = prm_layouts::bits::get(cmd, 0x73, 5).unwrap_or(0) as u32;
    let bulk = prm_layouts::bits::get(cmd, 0x78, 8).unwrap_or(0) as u32;
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

    fn destroy(&self, obj: Handle, destroy_inbox: &[u8]) -> Result<()> {
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
        self.dev.check_alive("async query")?;
        admission::admit(inbox, CmdClass::Query)?;
        let chan = self.async_channel(outlen, channel)?;
        self.bind(obj, inbox)?;
        let cmd = self.private_copy(inbox);
        self.dev
            .engine
            .submit(self.id, cmd, outlen, wr_id, &chan.inner)
    }

    fn modify_async(
        &self,
        obj: Handle,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<()> {
        self.dev.check_alive("async modify")?;
        admission::admit(inbox, CmdClass::Modify)?;
        let chan = self.async_channel(outlen, channel)?;
        self.bind(obj, inbox)?;
        let cmd = self.private_copy(inbox);
        self.dev
            .engine
            .submit(self.id, cmd, outlen, wr_id, &chan.inner)
    }

    fn general_async(
        &self,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<()> {
        self.dev.check_alive("async general command")?;
        admission::admit(inbox, CmdClass::General)?;
        let chan = self.async_channel(outlen, channel)?;
        let cmd = self.private_copy(inbox);
        self.dev
            .engine
            .submit(self.id, cmd, outlen, wr_id, &chan.inner)
    }

    fn umem_reg(&self, addr: usize, len: usize, access: u32) -> Result<(Handle, u32)> {
        self.dev.check_alive("UMEM registration")?;
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
        let region = umem::UmemObj {
            addr: addr as u64,
            len: len as u64,
            access,
        };
        let umem_id = self
            .dev
            .fw
            .create_umem(self.uid, region)
            .map_err(|e| errno_only(0xa08, 0, e))?;
        Ok((self.handles().insert(Named::Umem { umem_id }), umem_id))
    }

    fn umem_dereg(&self, h: Handle) -> Result<()> {
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

    fn uar_alloc(&self, kind: UarKind) -> Result<UarAlloc> {
        self.dev.check_alive("UAR allocation")?;
        let out = self.exec_errno(&header(0x802, self.uid, 0))?;
        let page_id = u32::from_be_bytes([0, out[9], out[10], out[11]]);
        let page = Arc::new(SimUarPage::new(
            page_id,
            kind,
            Arc::clone(&self.dev.doorbell),
        ));
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
                    return Err(einval(format!(
                        "handle {h} is a UMEM or UAR, not a DEVX object"
                    )));
                };
                Some((h, *key))
            }
        };
        self.dev.fw.with_mut(|st| {
            st.events
                .subscribe(self.id, target, event_types, cookie, &chan.inner)
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
