//! Creates, destroys, UMEM registrations and UAR allocations queued on the
//! firmware's command queue.
//!
//! A queued create (registration, allocation) gets its handle at once, as
//! a pending entry; the firmware thread enters what the command made when
//! it runs it. Releasing a pending handle dooms it: what the command makes
//! is destroyed right away and its completion reports `Cancelled`. A
//! command cancelled before it ran (its context closed, the device failed)
//! takes its pending entry out again. A queued destroy takes the handle
//! out at once and puts it back if the firmware refuses.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use prm_layouts::{AllocUarIn, AllocUarOut, CreateUmemIn, CreateUmemOut, Opcode};

use super::async_cmd::Work;
use super::handles::{Entry, Handles, Named};
use super::uar::SimUarPage;
use super::{
    dealloc_uar, destroy_umem, edits, einval, errno_only, flow_counter_bulk, not_an_object,
    umem_region, with_outbox, SimContext,
};
use crate::admission::{self, CmdClass};
use crate::error::{Error, Result};
use crate::provider::{CmdChannel, Handle, UarKind};
use crate::sim::fw::Firmware;

fn lock(h: &Mutex<Handles>) -> MutexGuard<'_, Handles> {
    h.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs a command whose outbox the kernel keeps (destroy, UMEM, UAR).
fn run_errno(fw: &Firmware, cmd: &[u8]) -> Result<Vec<u8>> {
    let mut out = vec![0u8; 64];
    match fw.execute(cmd, &mut out) {
        Ok(()) => Ok(out),
        Err(e) => Err(errno_only(
            admission::opcode_of(cmd),
            admission::op_mod_of(cmd),
            e,
        )),
    }
}

/// The completion of a command whose handle was released before it ran.
fn released(cmd: &[u8], wr_id: u64) -> Error {
    Error::Cancelled(format!(
        "{} (wr_id {wr_id}): its handle was released before it completed; what it made is \
         destroyed",
        prm_layouts::enums::opcode_name(admission::opcode_of(cmd))
    ))
}

/// A pending entry reserved for a queued command. Dropped unfilled (the
/// command was cancelled or failed) it takes the entry out again.
struct Reserved {
    handles: Option<Weak<Mutex<Handles>>>,
    handle: Handle,
}

impl Reserved {
    /// Enters what the command made; false when the handle was released
    /// meanwhile (the caller destroys it).
    fn fill(mut self, named: Named) -> bool {
        let Some(handles) = self.handles.take().and_then(|w| w.upgrade()) else {
            return false;
        };
        let entered = lock(&handles).fill(self.handle, named).is_none();
        entered
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if let Some(h) = self.handles.take().and_then(|w| w.upgrade()) {
            lock(&h).drop_pending(self.handle);
        }
    }
}

/// A handle taken out for a queued destroy; put back unless the destroy
/// succeeded.
struct Taken {
    handles: Weak<Mutex<Handles>>,
    handle: Handle,
    entry: Option<Entry>,
}

impl Taken {
    /// The destroy succeeded: the entry goes for good.
    fn done(mut self) {
        self.entry = None;
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if let (Some(e), Some(h)) = (self.entry.take(), self.handles.upgrade()) {
            lock(&h).restore(self.handle, e);
        }
    }
}

impl SimContext {
    fn reserve(&self) -> Reserved {
        let handle = self.handles().insert(Named::Pending { doomed: false });
        Reserved {
            handles: Some(Arc::downgrade(&self.handles)),
            handle,
        }
    }

    pub(super) fn queue_create(
        &self,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<Handle> {
        self.dev.check_alive("async create")?;
        admission::admit(inbox, CmdClass::Create)?;
        let chan = self.async_channel(outlen, channel)?;
        let cmd = self.private_copy(inbox);
        self.precheck_create(&cmd)?;
        let reserved = self.reserve();
        let handle = reserved.handle;
        let span = flow_counter_bulk(&cmd);
        let queued = cmd.clone();
        let work: Work = Box::new(move |fw| {
            let mut out = vec![0u8; outlen];
            fw.execute(&cmd, &mut out)
                .map_err(|e| with_outbox(&cmd, e))?;
            let destroy = admission::destroy_command(&cmd, &out).ok();
            let Some(key) = admission::created_key(&cmd, &out) else {
                // A create the kernel cannot track: undo it rather than leak it.
                if let Some(d) = &destroy {
                    let _ = run_errno(fw, d);
                }
                return Err(Error::unsupported(
                    "this create",
                    "the emulator cannot track its object",
                ));
            };
            let undo = destroy.clone();
            if reserved.fill(Named::Obj { key, span, destroy }) {
                return Ok(out);
            }
            if let Some(d) = undo {
                let _ = run_errno(fw, &d);
            }
            Err(released(&cmd, wr_id))
        });
        self.dev
            .engine
            .submit_work(self.id, queued, outlen, wr_id, &chan.inner, Some(work))?;
        Ok(handle)
    }

    /// After a fatal error destroys run synchronously (the firmware thread
    /// no longer runs commands): `false`.
    pub(super) fn queue_destroy(
        &self,
        obj: Handle,
        destroy_inbox: &[u8],
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<bool> {
        if self.dev.check_alive("async destroy").is_err() {
            return Ok(false);
        }
        const OUTLEN: usize = 64;
        let chan = self.async_channel(OUTLEN, channel)?;
        let Some(entry) = self.handles().take(obj) else {
            return Err(Error::os(
                format!("handle {obj} is not an object of this context"),
                libc::ENOENT,
            ));
        };
        let given = (!destroy_inbox.is_empty()).then_some(destroy_inbox);
        let cmd = match &entry.named {
            Named::Obj { destroy: built, .. } => match (given, built) {
                (Some(g), Some(b)) if !Self::same_destroy(g, b) => Err(einval(
                    "destroy command names another object than the handle",
                )),
                (Some(g), _) => {
                    let mut c = g.to_vec();
                    edits::stamp_uid(&mut c, self.uid);
                    Ok(c)
                }
                (None, Some(d)) => Ok(d.clone()),
                (None, None) => Err(Error::argument("object has no destroy command")),
            },
            Named::Pending { .. } => Err(einval(not_an_object(obj, &entry.named))),
            _ => Err(einval(format!(
                "handle {obj} is a UMEM or UAR; use umem_dereg / uar_free"
            ))),
        };
        let cmd = match cmd {
            Ok(c) => c,
            Err(e) => {
                self.handles().restore(obj, entry);
                return Err(e);
            }
        };
        let taken = Taken {
            handles: Arc::downgrade(&self.handles),
            handle: obj,
            entry: Some(entry),
        };
        let ctx_id = self.id;
        let queued = cmd.clone();
        let work: Work = Box::new(move |fw| {
            // A refusal drops `taken` with its entry: the handle is back.
            let out = run_errno(fw, &cmd)?;
            taken.done();
            // The kernel drops an object's subscriptions with the object.
            fw.with_mut(|st| st.events.forget_handle(ctx_id, obj));
            Ok(out)
        });
        self.dev
            .engine
            .submit_work(self.id, queued, OUTLEN, wr_id, &chan.inner, Some(work))?;
        Ok(true)
    }

    /// UMEM_DEREG queued like `queue_destroy`: the handle is out while its
    /// DESTROY_UMEM waits for a slot and back if the firmware refuses.
    /// `false` for a handle that is no registered UMEM (a registration still
    /// queued): the caller deregisters it synchronously.
    pub(super) fn queue_umem_dereg(
        &self,
        umem: Handle,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<bool> {
        if self.dev.check_alive("async UMEM deregistration").is_err() {
            return Ok(false);
        }
        const OUTLEN: usize = 64;
        let chan = self.async_channel(OUTLEN, channel)?;
        let (entry, umem_id) = {
            let mut handles = self.handles();
            let umem_id = match handles.get(umem).map(|e| &e.named) {
                Some(Named::Umem { umem_id }) => *umem_id,
                _ => return Ok(false),
            };
            (handles.take(umem), umem_id)
        };
        let Some(entry) = entry else {
            return Ok(false);
        };
        let taken = Taken {
            handles: Arc::downgrade(&self.handles),
            handle: umem,
            entry: Some(entry),
        };
        let cmd = destroy_umem(self.uid, umem_id).as_bytes().to_vec();
        let queued = cmd.clone();
        let work: Work = Box::new(move |fw| {
            // A refusal drops `taken` with its entry: the handle is back.
            let out = run_errno(fw, &cmd)?;
            taken.done();
            Ok(out)
        });
        self.dev
            .engine
            .submit_work(self.id, queued, OUTLEN, wr_id, &chan.inner, Some(work))?;
        Ok(true)
    }

    pub(super) fn queue_umem_reg(
        &self,
        addr: usize,
        len: usize,
        access: u32,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<Handle> {
        self.dev.check_alive("UMEM registration")?;
        let chan = self.async_channel(CreateUmemOut::SIZE_BYTES, channel)?;
        // The kernel pins the range during the call; the firmware command
        // is what waits for a queue slot.
        let region = umem_region(addr, len, access)?;
        let reserved = self.reserve();
        let handle = reserved.handle;
        let uid = self.uid;
        let mut named = CreateUmemIn::new();
        named.set_opcode(Opcode::CreateUmem.raw());
        let queued = named.as_bytes().to_vec();
        let work: Work = Box::new(move |fw| {
            let umem_id = fw
                .create_umem(uid, region)
                .map_err(|e| errno_only(Opcode::CreateUmem.raw(), 0, e))?;
            if !reserved.fill(Named::Umem { umem_id }) {
                let _ = run_errno(fw, destroy_umem(uid, umem_id).as_bytes());
                return Err(released(named.as_bytes(), wr_id));
            }
            let mut out = CreateUmemOut::new();
            out.set_umem_id(umem_id);
            Ok(out.as_bytes().to_vec())
        });
        self.dev.engine.submit_work(
            self.id,
            queued,
            CreateUmemOut::SIZE_BYTES,
            wr_id,
            &chan.inner,
            Some(work),
        )?;
        Ok(handle)
    }

    pub(super) fn queue_uar_alloc(
        &self,
        _kind: UarKind,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<Handle> {
        self.dev.check_alive("UAR allocation")?;
        let chan = self.async_channel(AllocUarOut::SIZE_BYTES, channel)?;
        let mut alloc = AllocUarIn::new();
        alloc.set_opcode(Opcode::AllocUar.raw());
        alloc.set_uid(self.uid);
        let cmd = alloc.as_bytes().to_vec();
        let reserved = self.reserve();
        let handle = reserved.handle;
        let uid = self.uid;
        let doorbell = Arc::clone(&self.dev.doorbell);
        let queued = cmd.clone();
        let work: Work = Box::new(move |fw| {
            let mut out = run_errno(fw, &cmd)?;
            out.truncate(AllocUarOut::SIZE_BYTES);
            let page_id = AllocUarOut::from_slice(&out).map_or(0, |o| o.uar());
            let page = Arc::new(SimUarPage::new(page_id, doorbell));
            if !reserved.fill(Named::Uar { page_id, page }) {
                let _ = run_errno(fw, dealloc_uar(uid, page_id).as_bytes());
                return Err(released(&cmd, wr_id));
            }
            Ok(out)
        });
        self.dev.engine.submit_work(
            self.id,
            queued,
            AllocUarOut::SIZE_BYTES,
            wr_id,
            &chan.inner,
            Some(work),
        )?;
        Ok(handle)
    }
}
