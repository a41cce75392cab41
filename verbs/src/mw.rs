//! Memory windows: MKEYs created free (`free` = 1) and UMR-enabled in KLM
//! mode, bound later by a UMR work request (a data-path operation).

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};

use devx::CmdComp;
use prm_layouts::enums::Opcode;
use prm_layouts::{CreateMkeyIn, CreateMkeyOut};

use crate::error::{DestroyError, Error, Result, VerbResult};
use crate::exec::{self, Exec};
use crate::mr::{key, query_mkey, MrAttr, ACCESS_MODE_KLMS, QPN_UNBOUND};
use crate::pd::Pd;
use crate::util::Owned;

/// Window type (`ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MwType {
    /// Bound through `ibv_bind_mw`; any QP of the PD may use it.
    Type1,
    /// Bound by a send WR to one QP, invalidated remotely (`en_rinval`).
    Type2,
}

/// KLM entries reserved for a window (the kernel's default of one, rounded to 4).
const MW_KLMS: u32 = 4;

/// A memory window (`ibv_mw`).
pub struct Mw {
    owned: Owned<Pd>,
    mw_type: MwType,
    /// Changes with every bind posted (the key tag advances).
    rkey: AtomicU32,
}

impl fmt::Debug for Mw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mw({:?}, rkey {:#x})", self.mw_type, self.rkey())
    }
}

impl Mw {
    /// `ibv_alloc_mw`: CREATE_MKEY with `free`, `umr_en`, KLM access mode, no
    /// QP (type 2 windows are tied to a QP by the bind), no UMEM. Whether the
    /// device takes windows is its answer (`query_device` reports `imaicl`).
    pub fn alloc(pd: &Pd, mw_type: MwType) -> Result<Mw> {
        exec::now(Mw::build(pd, mw_type, Exec::Now))
    }

    /// [`Mw::alloc`] with its CREATE_MKEY queued on `comp`. Dropping the
    /// future cancels it: a window the firmware makes anyway is destroyed.
    pub async fn alloc_async(pd: &Pd, mw_type: MwType, comp: &CmdComp) -> Result<Mw> {
        Mw::build(pd, mw_type, Exec::Queued(comp)).await
    }

    /// The one description of `ibv_alloc_mw`, for both forms.
    async fn build(pd: &Pd, mw_type: MwType, exec: Exec<'_>) -> Result<Mw> {
        const VERB: &str = "alloc_mw";
        let ctx = pd.context();
        let variant = ctx.next_key_variant();
        let mut inbox = CreateMkeyIn::new();
        inbox.set_opcode(Opcode::CreateMkey.raw());
        let mkc = inbox.memory_key_mkey_entry_mut();
        mkc.set_free(1);
        mkc.set_umr_en(1);
        mkc.set_lr(1);
        mkc.set_access_mode_1_0(ACCESS_MODE_KLMS);
        mkc.set_access_mode_4_2(0);
        mkc.set_en_rinval(u8::from(mw_type == MwType::Type2));
        mkc.set_qpn(QPN_UNBOUND);
        mkc.set_mkey_7_0(variant);
        mkc.set_pd(pd.pdn());
        mkc.set_translations_octword_size(MW_KLMS);
        let obj = exec
            .create(ctx.devx(), inbox.as_bytes(), CreateMkeyOut::SIZE_BYTES)
            .await
            .verb(VERB)?;
        let rkey = key(obj.id(), variant);
        Ok(Mw {
            owned: Owned::new(obj, pd.clone()),
            mw_type,
            rkey: AtomicU32::new(rkey),
        })
    }

    /// The R_Key the window has now: the one the last bind posted through
    /// [`crate::Qp::post_bind_mw`] assigned (a bind advances the key tag).
    pub fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Relaxed)
    }

    /// Records the key a posted bind gives the window.
    pub(crate) fn set_rkey(&self, rkey: u32) {
        self.rkey.store(rkey, Ordering::Relaxed);
    }

    pub fn mw_type(&self) -> MwType {
        self.mw_type
    }

    pub fn pd(&self) -> &Pd {
        self.owned.deps()
    }

    pub fn obj(&self) -> &devx::Obj {
        self.owned.obj()
    }

    /// `ci_query_mw`: QUERY_MKEY (its PD, key, and whether it is bound).
    pub fn query(&self) -> Result<MrAttr> {
        query_mkey("query_mw", self.obj(), self.rkey())
    }

    /// `ibv_dealloc_mw`: DESTROY_MKEY.
    pub fn dealloc(self) -> Result<(), DestroyError<Mw>> {
        let Mw {
            owned,
            mw_type,
            rkey,
        } = self;
        owned.destroy().map_err(|refused| {
            let (owned, source) = *refused;
            DestroyError::new(
                Mw {
                    owned,
                    mw_type,
                    rkey,
                },
                Error::Device {
                    verb: "dealloc_mw",
                    source,
                },
            )
        })
    }
}

impl Pd {
    /// `ibv_alloc_mw`.
    pub fn alloc_mw(&self, mw_type: MwType) -> Result<Mw> {
        Mw::alloc(self, mw_type)
    }

    /// [`Mw::alloc_async`].
    pub async fn alloc_mw_async(&self, mw_type: MwType, comp: &CmdComp) -> Result<Mw> {
        Mw::alloc_async(self, mw_type, comp).await
    }
}
