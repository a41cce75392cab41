//! Firmware objects with RAII destroy.

use std::fmt;

use crate::admission::ObjKey;
use crate::cmd_comp::{CmdComp, Completion};
use crate::context::{check_lengths, Context};
use crate::error::{Error, Result};
use crate::pending::{Pending, Step};
use crate::provider::Handle;

/// A firmware object created through DEVX. Dropping it destroys the object;
/// `destroy()` does the same and returns the result.
///
/// ```
/// use prm_layouts::enums::Opcode;
/// use prm_layouts::{AllocPdIn, AllocPdOut};
///
/// # fn main() -> devx::Result<()> {
/// let ctx = devx::Device::by_name("sim0")?.open()?;
/// let mut inbox = AllocPdIn::new();
/// inbox.set_opcode(Opcode::AllocPd.raw());
/// let pd = ctx.create(inbox.as_bytes(), AllocPdOut::SIZE_BYTES)?;
/// println!("PD {:#x}", pd.id()); // the number other objects name it by
/// pd.destroy()?; // DEALLOC_PD, derived from the create
/// # Ok(()) }
/// ```
pub struct Obj {
    ctx: Context,
    handle: Handle,
    create_in: Vec<u8>,
    create_out: Vec<u8>,
    destroy_in: Vec<u8>,
    key: Option<ObjKey>,
    alive: bool,
}

/// A destroy the device refused. The object is still alive and inside; retry
/// with `obj.destroy()` or drop it to retry once more on drop.
pub struct DestroyFailed {
    pub obj: Box<Obj>,
    pub error: Error,
}

impl fmt::Debug for DestroyFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DestroyFailed({:?}, {})", self.obj, self.error)
    }
}

impl fmt::Display for DestroyFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "destroying {}: {}", self.obj.describe(), self.error)
    }
}

impl std::error::Error for DestroyFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<DestroyFailed> for Error {
    fn from(e: DestroyFailed) -> Error {
        e.error.clone()
    }
}

impl fmt::Debug for Obj {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Obj({})", self.describe())
    }
}

impl Obj {
    pub(crate) fn new(
        ctx: Context,
        handle: Handle,
        create_in: &[u8],
        create_out: Vec<u8>,
        destroy_in: Vec<u8>,
        key: Option<ObjKey>,
    ) -> Obj {
        Obj {
            ctx,
            handle,
            create_in: create_in.to_vec(),
            create_out,
            destroy_in,
            key,
            alive: true,
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} #{:#x} on {}",
            prm_layouts::enums::opcode_name(self.create_opcode()),
            self.id(),
            self.ctx.device().name()
        )
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The provider's handle for this object.
    pub fn handle(&self) -> Handle {
        self.handle
    }

    /// Opcode of the command that created it.
    pub fn create_opcode(&self) -> u16 {
        crate::admission::opcode_of(&self.create_in)
    }

    /// The PRM object number (cqn, qpn, pd, mkey index, table id…).
    pub fn id(&self) -> u32 {
        self.key.map(|k| k.number).unwrap_or(0)
    }

    /// The outbox the create returned.
    pub fn out(&self) -> &[u8] {
        &self.create_out
    }

    /// The inbox that created it.
    pub fn create_inbox(&self) -> &[u8] {
        &self.create_in
    }

    /// The destroy command derived from the create (empty when the stack builds its own).
    pub fn destroy_inbox(&self) -> &[u8] {
        &self.destroy_in
    }

    /// Queries the object; returns `outlen` bytes of outbox.
    pub fn query(&self, inbox: &[u8], outlen: usize) -> Result<Vec<u8>> {
        check_lengths(inbox, outlen)?;
        let mut out = vec![0u8; outlen];
        self.query_into(inbox, &mut out)?;
        Ok(out)
    }

    /// `query` into a caller buffer.
    pub fn query_into(&self, inbox: &[u8], out: &mut [u8]) -> Result<()> {
        check_lengths(inbox, out.len())?;
        self.ctx.inner.provider.query(self.handle, inbox, out)?;
        Error::check_outbox(inbox, out)
    }

    /// Modifies the object; returns `outlen` bytes of outbox.
    pub fn modify(&self, inbox: &[u8], outlen: usize) -> Result<Vec<u8>> {
        check_lengths(inbox, outlen)?;
        let mut out = vec![0u8; outlen];
        self.modify_into(inbox, &mut out)?;
        Ok(out)
    }

    /// `modify` into a caller buffer.
    pub fn modify_into(&self, inbox: &[u8], out: &mut [u8]) -> Result<()> {
        check_lengths(inbox, out.len())?;
        self.ctx.inner.provider.modify(self.handle, inbox, out)?;
        Error::check_outbox(inbox, out)?;
        // A modify may let go of a UMEM (a CQ resize of its old ring).
        self.ctx.retry_deferred();
        Ok(())
    }

    /// Queues a query whose completion, tagged `wr_id`, arrives on `comp`.
    pub fn query_async(
        &self,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        comp: &CmdComp,
    ) -> Result<()> {
        check_lengths(inbox, outlen)?;
        self.ctx.check_comp(comp)?;
        self.ctx
            .inner
            .provider
            .query_async(self.handle, inbox, outlen, wr_id, comp.channel())
    }

    /// Queues a modify whose completion, tagged `wr_id`, arrives on `comp`.
    /// On the emulated device it runs on the firmware's command queue. DEVX
    /// has no asynchronous modify: the kernel provider runs it synchronously
    /// during this call and queues its completion at once (`try_get`
    /// returns it; the fd does not signal it).
    pub fn modify_async(
        &self,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        comp: &CmdComp,
    ) -> Result<()> {
        check_lengths(inbox, outlen)?;
        self.ctx.check_comp(comp)?;
        self.ctx
            .inner
            .provider
            .modify_async(self.handle, inbox, outlen, wr_id, comp.channel())
    }

    /// [`Obj::modify_async`] as a future resolving to the outbox (or the
    /// error), the way [`Obj::modify`] returns it. Dropping the future
    /// leaves the modify to run; its outcome is then not reported.
    pub fn modify_pending<'c>(
        &self,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        comp: &'c CmdComp,
    ) -> Result<Pending<'c, Result<Vec<u8>>>> {
        check_lengths(inbox, outlen)?;
        self.ctx.check_comp(comp)?;
        let queued = comp.completion(wr_id);
        match self.ctx.inner.provider.modify_async(
            self.handle,
            inbox,
            outlen,
            wr_id,
            comp.channel(),
        ) {
            Ok(()) => Ok(Pending::queued(
                queued,
                Box::new(ModifyStep {
                    ctx: self.ctx.clone(),
                    inbox: inbox.to_vec(),
                }),
            )),
            Err(e) => {
                queued.unsubmitted();
                Err(e)
            }
        }
    }

    /// Queues the destroy on `comp`, tagged `wr_id`; the future resolves
    /// like [`Obj::destroy`]. On the emulated device it runs on the
    /// firmware's command queue. DEVX has no asynchronous destroy: the
    /// kernel provider (and the emulated one after a fatal error) runs it
    /// during this call and the future is ready at once. Dropping the
    /// future leaves the destroy to finish: if the firmware refuses it, the
    /// object is dropped like any other (destroyed again once what holds it
    /// is gone).
    pub fn destroy_async(
        self,
        wr_id: u64,
        comp: &CmdComp,
    ) -> Pending<'_, Result<(), DestroyFailed>> {
        if let Err(error) = self.ctx.check_comp(comp) {
            return Pending::ready(Err(DestroyFailed {
                obj: Box::new(self),
                error,
            }));
        }
        let queued = comp.completion(wr_id);
        let provider = std::sync::Arc::clone(&self.ctx.inner.provider);
        match provider.destroy_async(self.handle, &self.destroy_in, wr_id, comp.channel()) {
            Ok(true) => Pending::queued(queued, Box::new(DestroyStep { obj: self })),
            Ok(false) => {
                queued.unsubmitted();
                Pending::ready(self.destroy())
            }
            Err(error) => {
                queued.unsubmitted();
                Pending::ready(Err(DestroyFailed {
                    obj: Box::new(self),
                    error,
                }))
            }
        }
    }

    /// The provider destroyed the object: forget it.
    fn disown(mut self) {
        self.alive = false;
        self.ctx.retry_deferred();
    }

    /// Destroys the object now. On failure the object comes back inside the
    /// error, still alive, so the caller can destroy what references it first.
    pub fn destroy(mut self) -> Result<(), DestroyFailed> {
        match self
            .ctx
            .inner
            .provider
            .destroy(self.handle, &self.destroy_in)
        {
            Ok(()) => {
                self.alive = false;
                self.ctx.retry_deferred();
                Ok(())
            }
            Err(error) => Err(DestroyFailed {
                obj: Box::new(self),
                error,
            }),
        }
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        if !self.alive {
            return;
        }
        match self
            .ctx
            .inner
            .provider
            .destroy(self.handle, &self.destroy_in)
        {
            Ok(()) => self.ctx.retry_deferred(),
            // Nothing to report to from a drop: the context destroys it
            // again once what holds it is gone, or at the latest on close.
            Err(_) => {
                self.ctx
                    .inner
                    .deferred
                    .keep_obj(self.handle, std::mem::take(&mut self.destroy_in));
                // What held it may have gone since the refusal.
                self.ctx.retry_deferred();
            }
        }
    }
}

/// A queued destroy, holding its object until the completion.
struct DestroyStep {
    obj: Obj,
}

impl<'a> Step<'a> for DestroyStep {
    type Output = Result<(), DestroyFailed>;

    fn finish(self: Box<Self>, out: Result<Vec<u8>>) -> Result<(), DestroyFailed> {
        match out {
            Ok(_) => {
                self.obj.disown();
                Ok(())
            }
            Err(error) => Err(DestroyFailed {
                obj: Box::new(self.obj),
                error,
            }),
        }
    }

    fn abandon(self: Box<Self>, completion: Completion<'a>) {
        let obj = self.obj;
        completion.abandon_with(Box::new(move |out| match out {
            Ok(_) => obj.disown(),
            // The outcome will not be known: if the firmware refuses, the
            // provider names the object again and destroys it when the
            // context closes.
            Err(e) if e.is_cancelled() => obj.disown(),
            // Refused: the provider names it again; dropping retries.
            Err(_) => drop(obj),
        }));
    }
}

/// A queued modify: its inbox, to check the outbox against.
struct ModifyStep {
    ctx: Context,
    inbox: Vec<u8>,
}

impl<'a> Step<'a> for ModifyStep {
    type Output = Result<Vec<u8>>;

    fn finish(self: Box<Self>, out: Result<Vec<u8>>) -> Result<Vec<u8>> {
        let out = out?;
        Error::check_outbox(&self.inbox, &out)?;
        // As `modify_into`: a modify may let go of a UMEM.
        self.ctx.retry_deferred();
        Ok(out)
    }

    fn abandon(self: Box<Self>, completion: Completion<'a>) {
        drop(completion);
    }
}
