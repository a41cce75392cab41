//! A DEVX context: the uid-scoped place where objects live and commands run.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::admission;
use crate::cmd_comp::CmdComp;
use crate::cmd_comp::Completion;
use crate::deferred::Deferred;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::obj::Obj;
use crate::pending::{self, Pending, Step};
use crate::provider::{GidTableEntry, Handle, ProviderContext};

static NEXT_CONTEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) struct ContextInner {
    pub(crate) id: u64,
    pub(crate) device: Device,
    pub(crate) provider: Arc<dyn ProviderContext>,
    /// Declared after `provider`: fields drop in order, so what is kept here
    /// is freed only after the provider context closed.
    pub(crate) deferred: Deferred,
}

impl Drop for ContextInner {
    /// The provider context closes right after this (dropping `provider`
    /// destroys every object and UMEM the context still has), then the kept
    /// memory is freed. If something else still holds the provider context,
    /// it does not close now and the kept memory is leaked instead.
    fn drop(&mut self) {
        if Arc::strong_count(&self.provider) > 1 || Arc::weak_count(&self.provider) > 0 {
            self.deferred.leak();
        }
    }
}

/// An open DEVX context. Cheap to clone; every object keeps its context alive,
/// and the provider context closes when the last clone and object are gone.
///
/// General commands take a PRM inbox and return the outbox, built and read
/// with `prm-layouts`:
///
/// ```
/// use prm_layouts::enums::{HcaCapType, Opcode};
/// use prm_layouts::{QueryHcaCapIn, QueryHcaCapOut};
///
/// # fn main() -> devx::Result<()> {
/// let ctx = devx::Device::by_name("sim0")?.open()?;
/// let mut q = QueryHcaCapIn::new();
/// q.set_opcode(Opcode::QueryHcaCap.raw());
/// q.set_op_mod(HcaCapType::General.op_mod(true));
/// let out = ctx.general_cmd(q.as_bytes(), QueryHcaCapOut::SIZE_BYTES)?;
/// let out = QueryHcaCapOut::from_slice(&out).expect("a full outbox");
/// assert!(out.capability().cmd_hca_cap().log_max_cq() > 0);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("id", &self.inner.id)
            .field("device", &self.inner.device.name())
            .finish()
    }
}

/// Checks the caller's buffers before anything reaches a provider. Which
/// opcodes a method admits is the provider's call: kernels admit more over time.
pub(crate) fn check_lengths(inbox: &[u8], outlen: usize) -> Result<()> {
    if inbox.len() < 16 {
        return Err(Error::argument(format!(
            "inbox is {} bytes; a command needs at least its 16-byte header",
            inbox.len()
        )));
    }
    if outlen < 16 {
        return Err(Error::argument(format!(
            "outbox length {outlen} is too short; every command returns at least 16 bytes"
        )));
    }
    if inbox.len() > 0xffff || outlen > 0xffff {
        return Err(Error::argument("mailboxes are limited to 65535 bytes"));
    }
    Ok(())
}

impl Context {
    pub(crate) fn new(device: Device, provider: Arc<dyn ProviderContext>) -> Context {
        Context {
            inner: Arc::new(ContextInner {
                id: NEXT_CONTEXT_ID.fetch_add(1, Ordering::Relaxed),
                device,
                provider,
                deferred: Deferred::default(),
            }),
        }
    }

    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// The provider behind this context, for wrappers and tests.
    pub fn provider(&self) -> &Arc<dyn ProviderContext> {
        &self.inner.provider
    }

    /// True when both handles name the same open context.
    pub fn same_as(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Creates a firmware object. The outbox (`outlen` bytes) stays with the
    /// object (`Obj::out`); the destroy command is derived from both.
    pub fn create(&self, inbox: &[u8], outlen: usize) -> Result<Obj> {
        check_lengths(inbox, outlen)?;
        let mut out = vec![0u8; outlen];
        let handle = self.inner.provider.create(inbox, &mut out)?;
        self.adopt(handle, inbox, out)
    }

    /// The object a create of `inbox` made as `handle`, answering `out`.
    fn adopt(&self, handle: Handle, inbox: &[u8], out: Vec<u8>) -> Result<Obj> {
        if let Err(e) = Error::check_outbox(inbox, &out) {
            // A provider must not report success with a failed outbox; undo it anyway.
            let _ = self.inner.provider.destroy(handle, &[]);
            return Err(e);
        }
        // Creates the library cannot pair with a destroy (newer kernels admit
        // more) carry an empty command: the kernel destroys those itself.
        let destroy = admission::destroy_command(inbox, &out).unwrap_or_default();
        let key = admission::created_key(inbox, &out);
        Ok(Obj::new(self.clone(), handle, inbox, out, destroy, key))
    }

    /// Queues a create on `comp`, tagged `wr_id`; the future resolves to the
    /// object (or the error). On the emulated device it runs on the
    /// firmware's command queue (run by the submitting thread when the
    /// queue is idle and the profile gives it no latency; its completion
    /// still arrives on `comp`). DEVX has no asynchronous create: the
    /// kernel provider runs it during this call and the future is ready at
    /// once ([`Pending::is_queued`] says which). Dropping the future before
    /// it resolves destroys the object the firmware made (at once, or as
    /// soon as it makes it).
    ///
    /// ```
    /// use prm_layouts::enums::Opcode;
    /// use prm_layouts::{AllocPdIn, AllocPdOut};
    ///
    /// # fn main() -> devx::Result<()> {
    /// let ctx = devx::Device::by_name("sim0")?.open()?;
    /// let comp = devx::CmdComp::new(&ctx)?;
    /// let mut inbox = AllocPdIn::new();
    /// inbox.set_opcode(Opcode::AllocPd.raw());
    /// let pd = ctx.create_async(inbox.as_bytes(), AllocPdOut::SIZE_BYTES, 1, &comp)?;
    /// let pd = pd.wait()?; // or `.await`
    /// pd.destroy_async(2, &comp).wait()?;
    /// # Ok(()) }
    /// ```
    pub fn create_async<'c>(
        &self,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        comp: &'c CmdComp,
    ) -> Result<Pending<'c, Result<Obj>>> {
        check_lengths(inbox, outlen)?;
        self.check_comp(comp)?;
        pending::submit(
            comp,
            wr_id,
            || {
                let queued =
                    self.inner
                        .provider
                        .create_async(inbox, outlen, wr_id, comp.channel())?;
                Ok(queued.map(|handle| CreateStep {
                    ctx: self.clone(),
                    handle,
                    inbox: inbox.to_vec(),
                }))
            },
            || self.create(inbox, outlen),
        )
    }

    pub(crate) fn check_comp(&self, comp: &CmdComp) -> Result<()> {
        if !comp.context().same_as(self) {
            return Err(Error::argument(
                "the completion channel belongs to another context than the command's",
            ));
        }
        Ok(())
    }

    /// Runs a command that names no object (QUERY_HCA_CAP, QUERY_VPORT_STATE…).
    pub fn general_cmd(&self, inbox: &[u8], outlen: usize) -> Result<Vec<u8>> {
        check_lengths(inbox, outlen)?;
        let mut out = vec![0u8; outlen];
        self.general_cmd_into(inbox, &mut out)?;
        Ok(out)
    }

    /// Queues a command that names no object; its completion, tagged
    /// `wr_id`, arrives on `comp`. On the emulated device it runs on the
    /// firmware's command queue (run by the submitting thread when the
    /// queue is idle and the profile gives it no latency). DEVX has no asynchronous form of it: the
    /// kernel provider runs it synchronously during this call and queues its
    /// completion at once (`try_get` returns it; the fd does not signal it).
    pub fn general_async(
        &self,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        comp: &CmdComp,
    ) -> Result<()> {
        check_lengths(inbox, outlen)?;
        // Room for the emulator's private copy of the inbox too, so the
        // buffer is not grown there.
        let mut outbox = Vec::with_capacity(inbox.len() + outlen);
        outbox.resize(outlen, 0);
        self.general_async_into(inbox, outbox, wr_id, comp)
    }

    /// [`Self::general_async`] with an owned outbox, as io_uring-style APIs
    /// take buffers: the completion's outbox is `outbox` itself, filled
    /// (its length is the outbox length; its contents on entry do not
    /// matter), so a caller that passes the buffer its previous completion
    /// handed back allocates nothing per command. A completion that is an
    /// error (or a submit that fails) does not hand the buffer back. The emulated device keeps its
    /// private copy of the inbox in the buffer while the command is queued:
    /// one that has room for `inbox.len()` more bytes (as every buffer a
    /// completion hands back has) is not grown.
    pub fn general_async_into(
        &self,
        inbox: &[u8],
        outbox: Vec<u8>,
        wr_id: u64,
        comp: &CmdComp,
    ) -> Result<()> {
        check_lengths(inbox, outbox.len())?;
        self.check_comp(comp)?;
        self.inner
            .provider
            .general_async(inbox, outbox, wr_id, comp.channel())
    }

    /// `general_cmd` into a caller buffer, allocating nothing.
    pub fn general_cmd_into(&self, inbox: &[u8], out: &mut [u8]) -> Result<()> {
        check_lengths(inbox, out.len())?;
        self.inner.provider.general(inbox, out)?;
        Error::check_outbox(inbox, out)
    }

    /// How many UMEMs this context keeps registered (and their memory
    /// alive) because the device refused to let them go when their owner
    /// dropped them; each is released once the objects using it are destroyed.
    pub fn kept_umems(&self) -> usize {
        self.inner.deferred.counts().0
    }

    /// How many objects this context will destroy again because the device
    /// refused when their owner dropped them.
    pub fn kept_objects(&self) -> usize {
        self.inner.deferred.counts().1
    }

    /// Retries the releases the device refused before; called after every
    /// successful destroy or modify and after each new keep.
    pub(crate) fn retry_deferred(&self) {
        self.inner.deferred.retry(self.inner.provider.as_ref());
    }

    /// The async-event file of this context: port state changes and the
    /// device-fatal error, as `ibv_get_async_event` reads them.
    pub fn async_event_file(&self) -> Result<Arc<dyn crate::AsyncEventFile>> {
        self.inner.provider.async_event_file()
    }

    /// The EQ number serving completion vector `vector`.
    pub fn query_eqn(&self, vector: u32) -> Result<u32> {
        self.inner.provider.query_eqn(vector)
    }

    /// The valid entries of the kernel's GID table, every port.
    pub fn query_gid_table(&self) -> Result<Vec<GidTableEntry>> {
        self.inner.provider.query_gid_table()
    }
}

/// A queued create: its handle, and the inbox the object is described by.
struct CreateStep {
    ctx: Context,
    handle: Handle,
    inbox: Vec<u8>,
}

impl<'a> Step<'a> for CreateStep {
    type Output = Result<Obj>;

    fn finish(self: Box<Self>, out: Result<Vec<u8>>) -> Result<Obj> {
        // A failed create made nothing; the provider forgot the handle.
        self.ctx.adopt(self.handle, &self.inbox, out?)
    }

    fn abandon(self: Box<Self>, completion: Completion<'a>) {
        drop(completion);
        // Destroys the object, or dooms it while the firmware has not made
        // it yet; a handle already gone had its create fail.
        if let Err(e) = self.ctx.inner.provider.destroy(self.handle, &[]) {
            if e.errno() != libc::ENOENT {
                self.ctx.inner.deferred.keep_obj(self.handle, Vec::new());
                self.ctx.retry_deferred();
            }
        }
    }
}
