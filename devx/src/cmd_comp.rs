//! Completion channels for asynchronous commands.

use std::fmt;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use crate::context::Context;
use crate::error::Result;
use crate::provider::{AsyncCompletion, CmdChannel};

/// A completion channel: `Obj::query_async` queues commands, `get`/`try_get`
/// return `(wr_id, outbox or error)` in completion order. The fd polls
/// readable while a completion waits, so any event loop can watch it.
///
/// ```
/// use prm_layouts::enums::Opcode;
/// use prm_layouts::{QueryCqIn, QueryCqOut};
/// # use prm_layouts::{CreateCqIn, CreateCqOut};
/// # fn main() -> devx::Result<()> {
/// # let ctx = devx::Device::by_name("sim0")?.open()?;
/// # let mem = memmap2::MmapMut::map_anon(4096).expect("memory");
/// # let ring = devx::Umem::register(&ctx, mem, devx::access::LOCAL_WRITE)?;
/// # let mem = memmap2::MmapMut::map_anon(4096).expect("memory");
/// # let dbr = devx::Umem::register(&ctx, mem, devx::access::LOCAL_WRITE)?;
/// # let uar = devx::Uar::alloc(&ctx)?;
/// # let mut c = CreateCqIn::new();
/// # c.set_opcode(Opcode::CreateCq.raw());
/// # c.set_cq_umem_id(ring.id());
/// # let cqc = c.cq_context_mut();
/// # cqc.set_log_cq_size(6);
/// # cqc.set_uar_page(uar.page_id());
/// # cqc.set_c_eqn_or_apu_element(ctx.query_eqn(0)?);
/// # cqc.set_dbr_umem_id(dbr.id());
/// # let cq = ctx.create(c.as_bytes(), CreateCqOut::SIZE_BYTES)?;
/// // `cq`: a CQ object made with `ctx.create` (CREATE_CQ).
/// let comp = devx::CmdComp::new(&ctx)?;
/// let mut q = QueryCqIn::new();
/// q.set_opcode(Opcode::QueryCq.raw());
/// q.set_cqn(cq.id());
/// cq.query_async(q.as_bytes(), QueryCqOut::SIZE_BYTES, 42, &comp)?;
/// let (wr_id, out) = comp.get()?;
/// let out = out?;
/// let out = QueryCqOut::from_slice(&out).expect("a full outbox");
/// assert_eq!((wr_id, out.cq_context().log_cq_size()), (42, 6));
/// # Ok(()) }
/// ```
pub struct CmdComp {
    ctx: Context,
    channel: Arc<dyn CmdChannel>,
}

impl fmt::Debug for CmdComp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CmdComp(fd {})", self.channel.fd())
    }
}

impl CmdComp {
    pub fn new(ctx: &Context) -> Result<CmdComp> {
        let channel = ctx.inner.provider.create_cmd_channel()?;
        Ok(CmdComp {
            ctx: ctx.clone(),
            channel,
        })
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    pub(crate) fn channel(&self) -> &dyn CmdChannel {
        &*self.channel
    }

    /// Waits for the next completion.
    pub fn get(&self) -> Result<AsyncCompletion> {
        self.channel.get()
    }

    /// The next completion if one is ready.
    pub fn try_get(&self) -> Result<Option<AsyncCompletion>> {
        self.channel.try_get()
    }
}

impl AsRawFd for CmdComp {
    fn as_raw_fd(&self) -> RawFd {
        self.channel.fd()
    }
}
