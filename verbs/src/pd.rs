//! Protection domains and transport domains.

use std::fmt;
use std::sync::Arc;

use devx::CmdComp;
use prm_layouts::enums::Opcode;
use prm_layouts::{AllocPdIn, AllocPdOut, AllocTransportDomainIn, AllocTransportDomainOut};

use crate::context::Context;
use crate::error::{DestroyError, Error, Result, VerbResult};
use crate::exec::{self, Exec};
use crate::util::{sole, Owned};

struct PdInner {
    owned: Owned<()>,
    ctx: Context,
}

/// A protection domain (`ibv_pd`). Cheap to clone; QPs, MRs, MWs, SRQs and
/// AHs keep the PD they were made in alive, and the last handle deallocates it.
///
/// ```
/// # fn main() -> verbs::Result<()> {
/// let ctx = verbs::Context::open_by_name("sim0")?;
/// let pd = ctx.alloc_pd()?;
/// println!("PD {:#x}", pd.pdn());
/// let mr = pd.reg_mr(vec![0u8; 4096], verbs::AccessFlags::LOCAL_WRITE)?;
/// assert_eq!(mr.pd().pdn(), pd.pdn());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdInner>,
}

impl fmt::Debug for Pd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pd({:#x})", self.pdn())
    }
}

impl Pd {
    /// `ibv_alloc_pd`: ALLOC_PD.
    pub fn alloc(ctx: &Context) -> Result<Pd> {
        exec::now(Pd::build(ctx, Exec::Now))
    }

    /// [`Pd::alloc`] with its ALLOC_PD queued on `comp`. Dropping the
    /// future cancels it: a PD the firmware makes anyway is deallocated.
    pub async fn alloc_async(ctx: &Context, comp: &CmdComp) -> Result<Pd> {
        Pd::build(ctx, Exec::Queued(comp)).await
    }

    /// The one description of `ibv_alloc_pd`, for both forms.
    async fn build(ctx: &Context, exec: Exec<'_>) -> Result<Pd> {
        let mut inbox = AllocPdIn::new();
        inbox.set_opcode(Opcode::AllocPd.raw());
        let obj = exec
            .create(ctx.devx(), inbox.as_bytes(), AllocPdOut::SIZE_BYTES)
            .await
            .verb("alloc_pd")?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                owned: Owned::new(obj, ()),
                ctx: ctx.clone(),
            }),
        })
    }

    /// The PD number that `pd` fields of QP, MKEY and WQ contexts take.
    pub fn pdn(&self) -> u32 {
        self.inner.owned.id()
    }

    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The DEVX object, for raw commands next to the verbs.
    pub fn obj(&self) -> &devx::Obj {
        self.inner.owned.obj()
    }

    /// `ibv_dealloc_pd`: fails with `Busy` while other handles or objects made
    /// in this PD exist, or with the device's refusal; the PD comes back alive.
    pub fn dealloc(self) -> Result<(), DestroyError<Pd>> {
        let inner = match sole(self.inner, "dealloc_pd", "protection domain") {
            Ok(inner) => inner,
            Err((inner, err)) => return Err(DestroyError::new(Pd { inner }, err)),
        };
        let PdInner { owned, ctx } = inner;
        owned.destroy().map_err(|refused| {
            let (owned, source) = *refused;
            let err = Error::Device {
                verb: "dealloc_pd",
                source,
            };
            DestroyError::new(
                Pd {
                    inner: Arc::new(PdInner { owned, ctx }),
                },
                err,
            )
        })
    }
}

impl Context {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::alloc(self)
    }

    /// [`Pd::alloc_async`].
    pub async fn alloc_pd_async(&self, comp: &CmdComp) -> Result<Pd> {
        Pd::alloc_async(self, comp).await
    }

    /// A transport domain, which raw Ethernet queues (TIS/TIR) need.
    pub fn alloc_td(&self) -> Result<Td> {
        Td::alloc(self)
    }
}

/// A transport domain (ALLOC_TRANSPORT_DOMAIN). Raw packet queues are built
/// from SQ/RQ/TIR/TIS DEVX objects, which name a transport domain.
pub struct Td {
    owned: Owned<()>,
    ctx: Context,
}

impl fmt::Debug for Td {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Td({:#x})", self.tdn())
    }
}

impl Td {
    pub fn alloc(ctx: &Context) -> Result<Td> {
        let mut inbox = AllocTransportDomainIn::new();
        inbox.set_opcode(Opcode::AllocTransportDomain.raw());
        let obj = ctx
            .devx()
            .create(inbox.as_bytes(), AllocTransportDomainOut::SIZE_BYTES)
            .verb("alloc_td")?;
        Ok(Td {
            owned: Owned::new(obj, ()),
            ctx: ctx.clone(),
        })
    }

    /// The number `transport_domain` fields take.
    pub fn tdn(&self) -> u32 {
        self.owned.id()
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    pub fn obj(&self) -> &devx::Obj {
        self.owned.obj()
    }

    pub fn dealloc(self) -> Result<(), DestroyError<Td>> {
        let Td { owned, ctx } = self;
        owned.destroy().map_err(|refused| {
            let (owned, source) = *refused;
            DestroyError::new(
                Td { owned, ctx },
                Error::Device {
                    verb: "dealloc_td",
                    source,
                },
            )
        })
    }
}
