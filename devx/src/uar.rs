//! User access regions: the doorbell pages.

use std::fmt;
use std::sync::Arc;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::provider::{Handle, UarKind, UarPage};

/// Offset of the first doorbell/BlueFlame register in a UAR page.
pub const BF_OFFSET: usize = 0x800;
/// Bytes of a UAR page (the device's 4 KiB adapter page).
pub const UAR_PAGE_SIZE: usize = 4096;
/// Offset of the CQ arm doorbell in a UAR page.
pub const CQ_DOORBELL_OFFSET: usize = 0x20;

/// An allocated UAR page. Freed on drop.
pub struct Uar {
    ctx: Context,
    handle: Handle,
    page_id: u32,
    kind: UarKind,
    page: Arc<dyn UarPage>,
}

impl fmt::Debug for Uar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uar(page {:#x}, {:?})", self.page_id, self.kind)
    }
}

impl Uar {
    /// A write-combining UAR with BlueFlame registers.
    pub fn alloc(ctx: &Context) -> Result<Uar> {
        Uar::alloc_kind(ctx, UarKind::BlueFlame)
    }

    pub fn alloc_kind(ctx: &Context, kind: UarKind) -> Result<Uar> {
        let a = ctx.inner.provider.uar_alloc(kind)?;
        Ok(Uar {
            ctx: ctx.clone(),
            handle: a.handle,
            page_id: a.page_id,
            kind,
            page: a.page,
        })
    }

    /// The UAR index that `uar_page` fields of CQs and QPs take.
    pub fn page_id(&self) -> u32 {
        self.page_id
    }

    pub fn kind(&self) -> UarKind {
        self.kind
    }

    /// The mapped page.
    pub fn page(&self) -> &Arc<dyn UarPage> {
        &self.page
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Rings a 64-bit doorbell at `offset` in the page; `value` is stored as its
    /// in-memory bytes. The offset must name an aligned 8-byte slot of the page.
    #[inline]
    pub fn write64(&self, offset: usize, value: u64) -> Result<()> {
        if offset & 7 != 0 || offset >= UAR_PAGE_SIZE {
            return Err(Error::argument(format!(
                "doorbell offset {offset:#x} is not an aligned 8-byte slot of the {UAR_PAGE_SIZE:#x}-byte UAR page"
            )));
        }
        self.page.write64(offset, value);
        Ok(())
    }
}

impl Drop for Uar {
    fn drop(&mut self) {
        let _ = self.ctx.inner.provider.uar_free(self.handle);
    }
}
