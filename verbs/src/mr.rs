//! Memory regions as UMEM-backed MKEYs (access mode MTT, `mkey_umem_id`),
//! the way DEVX users register memory (prm-guide §3.4).
//!
//! DEVX has no MODIFY_MKEY, so re-registration creates a new MKEY (and, for
//! new memory, a new UMEM) first and destroys the old one only once the new
//! one exists: on failure the old registration stays untouched; on success
//! the region answers with new keys, exactly as `ibv_rereg_mr` may.
//!
//! Registered memory is bytes shared with the device; see [`Mr`] for how
//! safe code reads and writes it.

use std::fmt;
use std::sync::Arc;

use devx::{CmdComp, ExclusiveMemory, SharedMemory, StableMemory, Umem};
use prm_layouts::enums::Opcode;
use prm_layouts::{CreateMkeyIn, CreateMkeyOut, QueryMkeyIn, QueryMkeyOut};

use crate::access::AccessFlags;
use crate::error::{DestroyError, Error, Result, VerbResult};
use crate::exec::{self, Exec};
use crate::pd::Pd;
use crate::util::{outbox, Owned};

/// `mkc.access_mode`: MTT (pages), KLMs (indirect, used by windows).
pub(crate) const ACCESS_MODE_MTT: u8 = 1;
pub(crate) const ACCESS_MODE_KLMS: u8 = 2;
/// `mkc.qpn` of an MKEY not bound to a QP.
pub(crate) const QPN_UNBOUND: u32 = 0xff_ffff;
/// MTT page size of UMEM-backed keys (absolute log2).
const LOG_PAGE: u32 = 12;

/// An MKEY's verbs key: `mkey_index << 8 | mkey_7_0`.
pub(crate) fn key(mkey_index: u32, variant: u8) -> u32 {
    (mkey_index << 8) | u32::from(variant)
}

/// What QUERY_MKEY reports (`ibv_mr` fields plus the key's state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrAttr {
    pub addr: u64,
    pub length: u64,
    pub access: AccessFlags,
    pub pd: u32,
    pub lkey: u32,
    pub rkey: u32,
    /// `mkc.free`: the key is not usable (a window not yet bound).
    pub free: bool,
    /// `mkc.qpn`; 0xffffff when not bound to a QP.
    pub qpn: u32,
    /// `mkc.access_mode` (1 MTT, 2 KLMs).
    pub access_mode: u8,
}

struct MrDeps<M: StableMemory> {
    umem: Arc<Umem<M>>,
    pd: Pd,
}

/// A registered memory region (`ibv_mr`) over memory it owns or shares.
///
/// Registered memory is bytes shared with the device, which reads and writes
/// them while work requests run; safe code therefore never holds a Rust
/// reference into memory the device may write. It copies bytes in and out
/// instead: [`Mr::write_at`] and [`Mr::fill`] store, [`Mr::read_at`] and
/// [`Mr::read_vec`] load, each bounds-checked against the region with an
/// error naming the range, with atomic accesses so that no copy is ever
/// a data race. Bytes read while a work request that writes them is in
/// flight may mix old and new values: read them after its completion. Only
/// memory the region owns exclusively ([`ExclusiveMemory`]: `Vec<u8>`,
/// `Box<[u8]>`, `MmapMut`, `&'static mut [u8]`) can be registered writable
/// ([`Mr::register`]) or written; memory shared with the rest of the program
/// ([`SharedMemory`]: `Arc<_>`, `&'static [u8]`) is registered read-only
/// ([`Mr::register_read_only`]) and may still be borrowed ([`Mr::memory`]).
/// Memory is `'static` and lives as long as the device uses it: dropping a
/// region whose memory another object still references keeps the memory
/// alive in the context until that object is destroyed.
///
/// ```
/// use verbs::AccessFlags;
/// # fn main() -> verbs::Result<()> {
/// let ctx = verbs::Context::open_by_name("sim0")?;
/// let pd = ctx.alloc_pd()?;
/// let mr = pd.reg_mr(vec![0u8; 4096], AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
/// // Local work requests name it by lkey, a peer's RDMA by rkey and address.
/// let sge = verbs::Sge::from_mr(&mr, 0, 4096);
/// assert_eq!((sge.lkey, mr.len()), (mr.lkey(), 4096));
/// mr.write_at(0, b"hello")?;
/// assert_eq!(mr.read_vec(0, 5)?, b"hello");
/// println!("rkey {:#x} at {:#x}", mr.rkey(), mr.addr());
/// # Ok(()) }
/// ```
pub struct Mr<M: StableMemory> {
    owned: Owned<MrDeps<M>>,
    access: AccessFlags,
    key: u32,
}

impl<M: StableMemory> fmt::Debug for Mr<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Mr(key {:#x}, {} bytes at {:#x}, {:?})",
            self.key,
            self.len(),
            self.addr(),
            self.access
        )
    }
}

/// UMEM access for a region with rights `a`. The UMEM only decides how the
/// pages are pinned (writable or not); the MKEY enforces the rights. Writable
/// memory is pinned for every use so a re-registration can widen the rights
/// on the same UMEM; read-only memory stays pinned read-only.
fn umem_access(a: AccessFlags) -> u32 {
    if a.any_write() {
        devx::access::LOCAL_WRITE | devx::access::REMOTE_WRITE | devx::access::REMOTE_READ
    } else {
        devx::access::REMOTE_READ
    }
}

fn check_access(verb: &'static str, pd: &Pd, a: AccessFlags) -> Result<()> {
    if a.needs_local_write() {
        return Err(Error::argument(
            verb,
            "remote write or atomic access needs local write as well",
        ));
    }
    if a.contains(AccessFlags::REMOTE_ATOMIC) && pd.context().caps().atomic() == 0 {
        return Err(Error::unsupported(
            verb,
            "remote atomic access: the device reports no atomic support",
        ));
    }
    Ok(())
}

/// CREATE_MKEY over `umem`, covering it from its first byte: the object
/// and its key.
async fn create_mkey<M: StableMemory>(
    verb: &'static str,
    pd: &Pd,
    umem: &Umem<M>,
    access: AccessFlags,
    exec: Exec<'_>,
) -> Result<(devx::Obj, u32)> {
    let ctx = pd.context();
    let addr = umem.addr() as u64;
    let len = umem.len() as u64;
    let page = 1u64 << LOG_PAGE;
    let pages = (addr % page + len).div_ceil(page);
    let variant = ctx.next_key_variant();
    let mut inbox = CreateMkeyIn::new();
    inbox.set_opcode(Opcode::CreateMkey.raw());
    let mkc = inbox.memory_key_mkey_entry_mut();
    mkc.set_access_mode_1_0(ACCESS_MODE_MTT);
    mkc.set_access_mode_4_2(0);
    // Local read is implied by every registration.
    mkc.set_lr(1);
    mkc.set_lw(u8::from(access.contains(AccessFlags::LOCAL_WRITE)));
    mkc.set_rr(u8::from(access.contains(AccessFlags::REMOTE_READ)));
    mkc.set_rw(u8::from(access.contains(AccessFlags::REMOTE_WRITE)));
    mkc.set_a(u8::from(access.contains(AccessFlags::REMOTE_ATOMIC)));
    mkc.set_umr_en(0);
    mkc.set_qpn(QPN_UNBOUND);
    mkc.set_mkey_7_0(variant);
    mkc.set_pd(pd.pdn());
    mkc.set_start_addr(addr);
    mkc.set_len(len);
    mkc.set_log_page_size(LOG_PAGE as u8);
    mkc.set_translations_octword_size(pages.div_ceil(2).min(u64::from(u32::MAX)) as u32);
    inbox.set_mkey_umem_valid(1);
    inbox.set_mkey_umem_id(umem.id());
    inbox.set_mkey_umem_offset(0);
    let obj = exec
        .create(ctx.devx(), inbox.as_bytes(), CreateMkeyOut::SIZE_BYTES)
        .await
        .verb(verb)?;
    let k = key(obj.id(), variant);
    Ok((obj, k))
}

/// QUERY_MKEY, shared by regions and windows.
pub(crate) fn query_mkey(verb: &'static str, obj: &devx::Obj, variant_key: u32) -> Result<MrAttr> {
    let mut inbox = QueryMkeyIn::new();
    inbox.set_opcode(Opcode::QueryMkey.raw());
    inbox.set_mkey_index(variant_key >> 8);
    let out = obj
        .query(inbox.as_bytes(), QueryMkeyOut::SIZE_BYTES)
        .verb(verb)?;
    let out: &QueryMkeyOut = outbox(verb, "QUERY_MKEY", &out)?;
    let m = out.memory_key_mkey_entry();
    let mut access = AccessFlags::NONE;
    for (bit, flag) in [
        (m.lw(), AccessFlags::LOCAL_WRITE),
        (m.rr(), AccessFlags::REMOTE_READ),
        (m.rw(), AccessFlags::REMOTE_WRITE),
        (m.a(), AccessFlags::REMOTE_ATOMIC),
    ] {
        if bit != 0 {
            access |= flag;
        }
    }
    let k = key(variant_key >> 8, m.mkey_7_0());
    Ok(MrAttr {
        addr: m.start_addr(),
        length: m.len(),
        access,
        pd: m.pd(),
        lkey: k,
        rkey: k,
        free: m.free() != 0,
        qpn: m.qpn(),
        access_mode: (m.access_mode_4_2() << 2) | m.access_mode_1_0(),
    })
}

impl<M: ExclusiveMemory> Mr<M> {
    /// `ibv_reg_mr`: UMEM_REG of `memory`, then CREATE_MKEY over it. The MR
    /// owns `memory` until deregistered. Memory the rest of the program
    /// shares goes through [`Mr::register_read_only`]:
    ///
    /// ```compile_fail
    /// use verbs::{AccessFlags, Context};
    ///
    /// let ctx = Context::open(&devx::Device::emulated("sim0").unwrap()).unwrap();
    /// let pd = ctx.alloc_pd().unwrap();
    /// let shared = std::sync::Arc::new(vec![0u8; 64]);
    /// // `Arc<_>` is not `ExclusiveMemory`: the device may not write it.
    /// pd.reg_mr(shared, AccessFlags::LOCAL_WRITE);
    /// ```
    pub fn register(pd: &Pd, memory: M, access: AccessFlags) -> Result<Mr<M>> {
        exec::now(Mr::build(pd, memory, access, Exec::Now))
    }

    /// [`Mr::register`] with its commands queued on `comp`. Dropping the
    /// future deregisters the memory and cancels the step in flight:
    /// nothing is left behind (the memory is dropped with it).
    pub async fn register_async(
        pd: &Pd,
        memory: M,
        access: AccessFlags,
        comp: &CmdComp,
    ) -> Result<Mr<M>> {
        Mr::build(pd, memory, access, Exec::Queued(comp)).await
    }

    /// The one description of `ibv_reg_mr`, for both forms.
    async fn build(pd: &Pd, memory: M, access: AccessFlags, exec: Exec<'_>) -> Result<Mr<M>> {
        const VERB: &str = "reg_mr";
        check_access(VERB, pd, access)?;
        let umem = exec
            .register(pd.context().devx(), memory, umem_access(access))
            .await
            .verb(VERB)?;
        Mr::over_with(VERB, pd, Arc::new(umem), access, exec).await
    }

    /// Copies `data` into the region at `offset` (see [`Mr`]); a range past
    /// the region's end is an argument error and writes nothing.
    ///
    /// ```
    /// use verbs::{AccessFlags, Context};
    ///
    /// let ctx = Context::open(&devx::Device::emulated("sim0").unwrap()).unwrap();
    /// let pd = ctx.alloc_pd().unwrap();
    /// let mr = pd.reg_mr(vec![0u8; 64], AccessFlags::LOCAL_WRITE).unwrap();
    /// mr.write_at(8, b"hello").unwrap();
    /// assert_eq!(mr.read_vec(7, 3).unwrap(), [0, b'h', b'e']);
    /// assert!(mr.write_at(62, b"abc").unwrap_err().is_argument());
    /// ```
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.owned
            .deps()
            .umem
            .write_at(offset, data)
            .verb("write_at")
    }

    /// Sets `len` bytes at `offset` to `value`.
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.owned.deps().umem.fill(offset, len, value).verb("fill")
    }

    /// `ibv_rereg_mr(IBV_REREG_MR_CHANGE_TRANSLATION)`: registers `memory`
    /// (UMEM_REG + CREATE_MKEY), then releases the old key and UMEM. Returns
    /// the old memory unless another region (or an object of the device)
    /// still uses it.
    pub fn rereg_memory(&mut self, memory: M, access: Option<AccessFlags>) -> Result<Option<M>> {
        exec::now(self.rereg_memory_with(memory, access, Exec::Now))
    }

    /// [`Mr::rereg_memory`] with all its commands queued on `comp`: UMEM
    /// registration, CREATE_MKEY, then the old key's DESTROY_MKEY and the
    /// old UMEM's deregistration. Dropping the future before the new key
    /// exists leaves the region as it was and releases what the new
    /// registration made; dropped later, the region has its new key and
    /// memory, and the release of the old ones still completes (the old
    /// memory is then freed, not returned).
    pub async fn rereg_memory_async(
        &mut self,
        memory: M,
        access: Option<AccessFlags>,
        comp: &CmdComp,
    ) -> Result<Option<M>> {
        self.rereg_memory_with(memory, access, Exec::Queued(comp))
            .await
    }

    /// The one description of `ibv_rereg_mr(CHANGE_TRANSLATION)`.
    async fn rereg_memory_with(
        &mut self,
        memory: M,
        access: Option<AccessFlags>,
        exec: Exec<'_>,
    ) -> Result<Option<M>> {
        const VERB: &str = "rereg_mr";
        let access = access.unwrap_or(self.access);
        let pd = self.pd().clone();
        check_access(VERB, &pd, access)?;
        let umem = exec
            .register(pd.context().devx(), memory, umem_access(access))
            .await
            .verb(VERB)?;
        let new = Mr::over_with(VERB, &pd, Arc::new(umem), access, exec).await?;
        let old = self.replace(new);
        Ok(retire(old, exec).await)
    }
}

impl<M: SharedMemory> Mr<M> {
    /// The registered memory. Shared memory is only ever registered
    /// read-only, so the device never writes what this reference covers.
    pub fn memory(&self) -> &M {
        self.owned.deps().umem.memory()
    }
}

impl<M: StableMemory> Mr<M> {
    /// `ibv_reg_mr` without write rights: the device only reads `memory`.
    /// Any memory qualifies, including memory the rest of the program still
    /// reads ([`SharedMemory`]); write rights are refused with an argument error.
    pub fn register_read_only(pd: &Pd, memory: M, access: AccessFlags) -> Result<Mr<M>> {
        const VERB: &str = "reg_mr";
        if access.any_write() {
            return Err(Error::argument(
                VERB,
                format!(
                    "{access:?} lets the device write; only memory the region owns \
                     exclusively (Vec, Box, MmapMut) can be registered writable"
                ),
            ));
        }
        check_access(VERB, pd, access)?;
        let umem = Umem::register_read_only(pd.context().devx(), memory, umem_access(access))
            .verb(VERB)?;
        Mr::over(VERB, pd, Arc::new(umem), access)
    }

    /// Copies `out.len()` bytes from the region at `offset` (see [`Mr`]):
    /// after the completion of the work request that wrote them. A range past
    /// the region's end is an argument error.
    ///
    /// ```
    /// use verbs::{AccessFlags, Context};
    ///
    /// let ctx = Context::open(&devx::Device::emulated("sim0").unwrap()).unwrap();
    /// let pd = ctx.alloc_pd().unwrap();
    /// let mr = pd.reg_mr(vec![7u8; 16], AccessFlags::LOCAL_WRITE).unwrap();
    /// let mut out = [0u8; 4];
    /// mr.read_at(12, &mut out).unwrap();
    /// assert_eq!(out, [7; 4]);
    /// assert!(mr.read_at(13, &mut out).unwrap_err().is_argument());
    /// ```
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.owned.deps().umem.read_at(offset, out).verb("read_at")
    }

    /// `len` bytes from `offset`, as a new vector.
    pub fn read_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        self.owned
            .deps()
            .umem
            .read_vec(offset, len)
            .verb("read_vec")
    }

    fn over(verb: &'static str, pd: &Pd, umem: Arc<Umem<M>>, access: AccessFlags) -> Result<Mr<M>> {
        exec::now(Mr::over_with(verb, pd, umem, access, Exec::Now))
    }

    async fn over_with(
        verb: &'static str,
        pd: &Pd,
        umem: Arc<Umem<M>>,
        access: AccessFlags,
        exec: Exec<'_>,
    ) -> Result<Mr<M>> {
        let (obj, key) = create_mkey(verb, pd, &umem, access, exec).await?;
        Ok(Mr {
            owned: Owned::new(
                obj,
                MrDeps {
                    umem,
                    pd: pd.clone(),
                },
            ),
            access,
            key,
        })
    }

    /// `ibv_reg_mr` over the same memory again (`register_smr`): a second
    /// MKEY on this region's UMEM, possibly in another PD and with other rights.
    pub fn register_shared(&self, pd: &Pd, access: AccessFlags) -> Result<Mr<M>> {
        const VERB: &str = "register_smr";
        check_access(VERB, pd, access)?;
        if !pd.context().same_as(self.pd().context()) {
            return Err(Error::argument(VERB, "the PD belongs to another context"));
        }
        self.check_umem_allows(VERB, access)?;
        Mr::over(VERB, pd, self.owned.deps().umem.clone(), access)
    }

    fn check_umem_allows(&self, verb: &'static str, access: AccessFlags) -> Result<()> {
        let have = self.owned.deps().umem.access();
        let need = umem_access(access);
        if need & !have != 0 {
            return Err(Error::argument(
                verb,
                format!(
                    "{access:?} needs the memory pinned for writing; it was registered read-only \
                     (re-register it with `rereg_memory`)"
                ),
            ));
        }
        Ok(())
    }

    pub fn lkey(&self) -> u32 {
        self.key
    }

    pub fn rkey(&self) -> u32 {
        self.key
    }

    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// Start address (the MKEY's `start_addr`).
    pub fn addr(&self) -> usize {
        self.owned.deps().umem.addr()
    }

    pub fn len(&self) -> usize {
        self.owned.deps().umem.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn pd(&self) -> &Pd {
        &self.owned.deps().pd
    }

    pub fn umem_id(&self) -> u32 {
        self.owned.deps().umem.id()
    }

    pub fn obj(&self) -> &devx::Obj {
        self.owned.obj()
    }

    /// `ibv_query_mr`: QUERY_MKEY.
    pub fn query(&self) -> Result<MrAttr> {
        query_mkey("query_mr", self.obj(), self.key)
    }

    /// `ibv_rereg_mr` with new access rights and/or PD over the same memory:
    /// CREATE_MKEY of the new key, then DESTROY_MKEY of the old one.
    pub fn rereg(&mut self, access: Option<AccessFlags>, pd: Option<&Pd>) -> Result<()> {
        exec::now(self.rereg_with(access, pd, Exec::Now))
    }

    /// [`Mr::rereg`] with its CREATE_MKEY and the old key's DESTROY_MKEY
    /// queued on `comp`. Dropping the future before the new key exists
    /// leaves the region as it was (a key the firmware made anyway is
    /// destroyed); dropped later, the region has its new key and the old
    /// key's destroy still completes.
    pub async fn rereg_async(
        &mut self,
        access: Option<AccessFlags>,
        pd: Option<&Pd>,
        comp: &CmdComp,
    ) -> Result<()> {
        self.rereg_with(access, pd, Exec::Queued(comp)).await
    }

    /// The one description of `ibv_rereg_mr` over the same memory.
    async fn rereg_with(
        &mut self,
        access: Option<AccessFlags>,
        pd: Option<&Pd>,
        exec: Exec<'_>,
    ) -> Result<()> {
        const VERB: &str = "rereg_mr";
        let access = access.unwrap_or(self.access);
        let pd = pd.cloned().unwrap_or_else(|| self.pd().clone());
        check_access(VERB, &pd, access)?;
        if !pd.context().same_as(self.pd().context()) {
            return Err(Error::argument(VERB, "the PD belongs to another context"));
        }
        self.check_umem_allows(VERB, access)?;
        let umem = self.owned.deps().umem.clone();
        let new = Mr::over_with(VERB, &pd, umem, access, exec).await?;
        let old = self.replace(new);
        retire(old, exec).await;
        Ok(())
    }

    /// Swaps in `new` and hands back the old key with what it uses.
    fn replace(&mut self, new: Mr<M>) -> Owned<MrDeps<M>> {
        let Mr { owned, access, key } = new;
        self.access = access;
        self.key = key;
        std::mem::replace(&mut self.owned, owned)
    }

    /// `ibv_dereg_mr`: DESTROY_MKEY, then the UMEM is deregistered unless a
    /// shared region still uses it. Returns the memory when it came free.
    pub fn deregister(self) -> Result<Option<M>, DestroyError<Mr<M>>> {
        let Mr { owned, access, key } = self;
        let umem = owned.deps().umem.clone();
        match owned.destroy() {
            Ok(()) => Ok(release(umem)),
            Err(refused) => {
                let (owned, source) = *refused;
                Err(DestroyError::new(
                    Mr { owned, access, key },
                    Error::Device {
                        verb: "dereg_mr",
                        source,
                    },
                ))
            }
        }
    }
}

/// Destroys a replaced key (DESTROY_MKEY), then deregisters its UMEM unless
/// another region still uses it: the memory, when it came free. A refused
/// destroy leaves the old key to the context, as dropping it does.
async fn retire<M: StableMemory>(old: Owned<MrDeps<M>>, exec: Exec<'_>) -> Option<M> {
    let (obj, MrDeps { umem, pd }) = old.into_parts();
    drop(exec.destroy(obj).await);
    drop(pd);
    exec.deregister(Arc::try_unwrap(umem).ok()?).await
}

/// Deregisters a UMEM no region uses any more and returns its memory. `None`
/// while another region shares it, or while an object of the device still
/// uses it: then dropping the UMEM leaves its memory to the context, which
/// frees it once that object is destroyed.
fn release<M: StableMemory>(umem: Arc<Umem<M>>) -> Option<M> {
    Arc::try_unwrap(umem).ok()?.deregister().ok()
}

impl Pd {
    /// `ibv_reg_mr` over memory the region owns exclusively.
    pub fn reg_mr<M: ExclusiveMemory>(&self, memory: M, access: AccessFlags) -> Result<Mr<M>> {
        Mr::register(self, memory, access)
    }

    /// [`Mr::register_async`].
    pub async fn reg_mr_async<M: ExclusiveMemory>(
        &self,
        memory: M,
        access: AccessFlags,
        comp: &CmdComp,
    ) -> Result<Mr<M>> {
        Mr::register_async(self, memory, access, comp).await
    }

    /// `ibv_reg_mr` the device only reads, over any memory.
    pub fn reg_mr_read_only<M: StableMemory>(
        &self,
        memory: M,
        access: AccessFlags,
    ) -> Result<Mr<M>> {
        Mr::register_read_only(self, memory, access)
    }
}
