//! Completion queues: a UMEM ring of 64-byte CQEs, a doorbell record in its own
//! UMEM, a UAR for arming, and the EQ of a completion vector.

use std::fmt;
use std::sync::{Arc, Mutex};

use devx::{CmdComp, Uar, Umem};
use memmap2::MmapMut;
use prm_layouts::enums::Opcode;
use prm_layouts::{Cqe64, CqeOpcode};
use prm_layouts::{
    CreateCqIn, CreateCqOut, ModifyCqIn, ModifyCqOut, NopIn, NopOut, QueryCqIn, QueryCqOut,
};

use crate::async_event::{EventHandler, HandlerEntry};
use crate::comp_channel::CompChannel;
use crate::context::Context;
use crate::cq_notify::{self, CqNotify};
use crate::datapath::{stale_end, Head, Poller, QpTrack, Registry};
use crate::error::{DestroyError, Error, Result, VerbResult};
use crate::exec::{self, Exec};
use crate::util::{
    log2, outbox, pow2_at_least, queue_memory, sole, DoorbellRecord, Owned, QueueMemory,
};

/// Bytes per CQE (`cqe_sz` 0).
pub const CQE_SIZE: usize = Cqe64::SIZE_BYTES;

/// MODIFY_CQ op_mod: 0 modifies moderation, 1 resizes (CQH `MLX5_CQ_OPMOD_RESIZE`).
const MODIFY_CQ_OPMOD_RESIZE: u16 = 1;
/// resize_field_select: log size, page offset, page size.
const RESIZE_FIELDS: u32 = 0x1 | 0x2 | 0x4;
/// modify_field_select: cq_period, cq_max_count.
const MODERATION_FIELDS: u32 = 0x1 | 0x2;

/// Attributes of a new CQ (`ibv_create_cq` arguments).
#[derive(Clone, Debug)]
pub struct CqInit {
    /// Minimum number of completions the CQ must hold.
    pub entries: u32,
    /// Completion vector whose EQ receives this CQ's events.
    pub comp_vector: u32,
    pub channel: Option<CompChannel>,
    /// Share a UAR for the arm doorbell; by default the CQ allocates its own.
    pub uar: Option<Arc<Uar>>,
    /// Where this CQ's async events (CQ error) go instead of the context's
    /// queue.
    pub events: Option<EventHandler>,
}

impl CqInit {
    pub fn new(entries: u32) -> CqInit {
        CqInit {
            entries,
            comp_vector: 0,
            channel: None,
            uar: None,
            events: None,
        }
    }

    /// Sends this CQ's async events to `handler`.
    pub fn events(mut self, handler: EventHandler) -> CqInit {
        self.events = Some(handler);
        self
    }

    pub fn comp_vector(mut self, v: u32) -> CqInit {
        self.comp_vector = v;
        self
    }

    pub fn channel(mut self, ch: &CompChannel) -> CqInit {
        self.channel = Some(ch.clone());
        self
    }

    pub fn uar(mut self, uar: Arc<Uar>) -> CqInit {
        self.uar = Some(uar);
        self
    }
}

/// What QUERY_CQ reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CqAttr {
    /// Usable entries (ring size − 1).
    pub cqe: u32,
    pub log_cq_size: u8,
    pub cqe_size: usize,
    pub uar_page: u32,
    /// The completion EQ (`c_eqn_or_apu_element`, 32 bits).
    pub eqn: u32,
    /// 0 OK, 9 overflow, 0xa write failure.
    pub status: u8,
    /// Arm state (6 solicited-armed, 9 armed, 0xa fired).
    pub arm_state: u8,
    pub producer_counter: u32,
    pub consumer_counter: u32,
    pub cq_period: u16,
    pub cq_max_count: u16,
}

pub(crate) struct CqDeps {
    /// The CQE ring in use. Replaced on resize; locked only then, never by
    /// the data path. A replaced ring the device still used when dropped
    /// stays mapped, kept by the DEVX context until the device lets go.
    ring: Mutex<Umem<MmapMut>>,
    dbr: DoorbellRecord,
    uar: Arc<Uar>,
    /// Its entry in the context's event dispatch table, if it has a handler.
    _events: Option<HandlerEntry>,
}

pub(crate) struct CqShared {
    owned: Owned<CqDeps>,
    ctx: Context,
    channel: Option<CompChannel>,
    eqn: u32,
    /// Arm sequence number and event counts (see `cq_notify`).
    notify: Arc<CqNotify>,
    /// The QPs completing here, for the data path's poll.
    pub(crate) tracks: Arc<Registry>,
}

impl CqShared {
    pub(crate) fn cqn(&self) -> u32 {
        self.owned.id()
    }

    pub(crate) fn context(&self) -> &Context {
        &self.ctx
    }

    /// QP `track` was just reset: its completions still in this CQ are
    /// dropped when polled, not reported against its new work.
    pub(crate) fn drop_stale(&self, track: &Arc<QpTrack>) {
        let deps = self.owned.deps();
        // Held while the ring is read: a resize replaces it under this lock.
        let ring = deps.ring.lock().unwrap_or_else(|p| p.into_inner());
        let log = (ring.len() / CQE_SIZE).trailing_zeros();
        // SAFETY: the ring stays mapped while its lock is held, and the
        // doorbell record as long as the CQ, which `self` keeps.
        let end = unsafe { stale_end(ring.addr(), log, deps.dbr.addr(), track.qpn) };
        if let Some(end) = end {
            self.tracks.mark_stale(track, end);
        }
    }
}

/// A completion queue (`ibv_cq`). QPs keep what they complete into alive, so
/// dropping a `Cq` that a QP uses defers the DESTROY_CQ until the QP is gone.
///
/// ```
/// # fn main() -> verbs::Result<()> {
/// let ctx = verbs::Context::open_by_name("sim0")?;
/// let mut cq = ctx.create_cq(100)?;
/// assert!(cq.cqe() >= 100); // rounded up to the ring size
/// let mut wc = [verbs::Wc::default(); 16];
/// assert_eq!(cq.poll(&mut wc), 0); // nothing completed yet
/// # Ok(()) }
/// ```
pub struct Cq {
    shared: Arc<CqShared>,
    pub(crate) log_size: u32,
    /// The consumer counter and the entry of the ring it names, for the
    /// data path's poll.
    pub(crate) head: Head,
    pub(crate) dp: Poller,
}

impl fmt::Debug for Cq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cq({:#x}, {} entries)", self.cqn(), self.cqe())
    }
}

fn ring_entries(verb: &'static str, ctx: &Context, entries: u32) -> Result<u32> {
    let max = ctx.limits().max_cqe;
    if entries == 0 {
        return Err(Error::argument(verb, "a CQ needs at least 1 entry"));
    }
    if entries > max {
        return Err(Error::argument(
            verb,
            format!("{entries} entries exceed the device's max_cqe {max}"),
        ));
    }
    // One slot stays free so a full ring is distinguishable from an empty one.
    pow2_at_least(entries + 1).ok_or_else(|| Error::argument(verb, "CQ size overflows"))
}

async fn new_ring(
    verb: &'static str,
    ctx: &Context,
    n: u32,
    exec: Exec<'_>,
) -> Result<Umem<MmapMut>> {
    let mut mem = queue_memory(verb, n as usize * CQE_SIZE)?;
    // Opcode INVALID, owner 0: nobody wrote these yet (prm-guide §6.2).
    let invalid = Cqe64::new().with_opcode(CqeOpcode::Invalid.raw());
    for cqe in mem.chunks_exact_mut(CQE_SIZE) {
        cqe[CQE_SIZE - 1] = invalid.0[CQE_SIZE - 1];
    }
    exec.register(ctx.devx(), mem, devx::access::LOCAL_WRITE)
        .await
        .verb(verb)
}

/// CREATE_CQ's mailbox over the ring, doorbell record, UAR and EQ made
/// before it (the *pre* step).
fn create_cq_inbox(
    n: u32,
    ring: &Umem<MmapMut>,
    dbr: &DoorbellRecord,
    uar: &Uar,
    eqn: u32,
) -> CreateCqIn {
    let mut inbox = CreateCqIn::new();
    inbox.set_opcode(Opcode::CreateCq.raw());
    let cqc = inbox.cq_context_mut();
    cqc.set_log_cq_size(log2(n) as u8);
    cqc.set_uar_page(uar.page_id());
    cqc.set_c_eqn_or_apu_element(eqn);
    cqc.set_cqe_sz(0);
    cqc.set_log_page_size(0);
    cqc.set_dbr_umem_valid(1);
    cqc.set_dbr_umem_id(dbr.umem_id());
    cqc.set_dbr_addr(0);
    inbox.set_cq_umem_id(ring.id());
    inbox.set_cq_umem_offset(0);
    inbox.set_cq_umem_valid(1);
    inbox
}

impl Cq {
    /// `ibv_create_cq`. Issues UMEM_REG (ring), UMEM_REG (doorbell record),
    /// UAR allocation unless one is given, QUERY_EQN and CREATE_CQ; a failure at
    /// any step releases what the earlier steps made.
    pub fn create(ctx: &Context, init: &CqInit) -> Result<Cq> {
        exec::now(Cq::build(ctx, init, Exec::Now))
    }

    /// [`Cq::create`] with its commands queued on `comp` (QUERY_EQN, which
    /// names no firmware object, runs during the call). Dropping the future
    /// releases what the earlier steps made and cancels the step in flight:
    /// nothing is left behind.
    pub async fn create_async(ctx: &Context, init: &CqInit, comp: &CmdComp) -> Result<Cq> {
        Cq::build(ctx, init, Exec::Queued(comp)).await
    }

    /// The one description of `ibv_create_cq`, for both forms.
    async fn build(ctx: &Context, init: &CqInit, exec: Exec<'_>) -> Result<Cq> {
        const VERB: &str = "create_cq";
        let n = ring_entries(VERB, ctx, init.entries)?;
        let ring = new_ring(VERB, ctx, n, exec).await?;
        let dbr = DoorbellRecord::new(VERB, ctx.devx(), exec).await?;
        let uar = match &init.uar {
            Some(u) => u.clone(),
            None => Arc::new(exec.alloc_uar(ctx.devx()).await.verb(VERB)?),
        };
        let eqn = ctx.devx().query_eqn(init.comp_vector).verb(VERB)?;
        let inbox = create_cq_inbox(n, &ring, &dbr, &uar, eqn);
        let obj = exec
            .create(ctx.devx(), inbox.as_bytes(), CreateCqOut::SIZE_BYTES)
            .await
            .verb(VERB)?;
        Cq::made(ctx, init, n, ring, dbr, uar, eqn, obj)
    }

    /// The CQ CREATE_CQ made (the *post* step): its event subscriptions and
    /// the data path's view of its ring.
    #[allow(clippy::too_many_arguments)]
    ///
    /// `obj` comes last: on a failure it drops first, before what it uses.
    fn made(
        ctx: &Context,
        init: &CqInit,
        n: u32,
        ring: Umem<MmapMut>,
        dbr: DoorbellRecord,
        uar: Arc<Uar>,
        eqn: u32,
        obj: devx::Obj,
    ) -> Result<Cq> {
        const VERB: &str = "create_cq";
        let events = ctx.subscribe_async(
            VERB,
            &obj,
            crate::async_event::Subscriber::Cq,
            init.events.as_ref(),
        )?;
        let notify = Arc::new(CqNotify::default());
        if let Some(ch) = &init.channel {
            cq_notify::subscribe(VERB, ch, &obj, &notify)?;
        }

        // SAFETY: the ring UMEM of 2^log entries; `deps` below keeps it
        // mapped as long as the CQ, and `take_ring` moves the head with it.
        let head = unsafe { Head::new(ring.addr(), log2(n), 0) };
        let tracks = Arc::new(Registry::default());
        let dp = Poller::new(tracks.clone(), dbr.addr());
        let deps = CqDeps {
            ring: Mutex::new(ring),
            dbr,
            uar,
            _events: events,
        };
        let shared = CqShared {
            owned: Owned::new(obj, deps),
            ctx: ctx.clone(),
            channel: init.channel.clone(),
            eqn,
            notify,
            tracks,
        };
        Ok(Cq {
            shared: Arc::new(shared),
            log_size: log2(n),
            head,
            dp,
        })
    }

    /// The CQ number, usable in raw DEVX objects (`cqn_snd`, `cqn_rcv`, `cqn`).
    pub fn cqn(&self) -> u32 {
        self.shared.cqn()
    }

    /// Usable entries (`ibv_cq.cqe`): ring size − 1.
    pub fn cqe(&self) -> u32 {
        (1u32 << self.log_size) - 1
    }

    pub fn log_size(&self) -> u32 {
        self.log_size
    }

    /// The EQ number its events go to.
    pub fn eqn(&self) -> u32 {
        self.shared.eqn
    }

    pub fn context(&self) -> &Context {
        &self.shared.ctx
    }

    pub fn channel(&self) -> Option<&CompChannel> {
        self.shared.channel.as_ref()
    }

    pub fn obj(&self) -> &devx::Obj {
        self.shared.owned.obj()
    }

    /// The UAR whose page +0x20 arms this CQ.
    pub fn uar(&self) -> &Arc<Uar> {
        &self.shared.owned.deps().uar
    }

    /// The CQE ring and doorbell record (`[0]` set_ci, `[1]` arm, big-endian
    /// u32 each). The ring moves on `resize`.
    pub fn memory(&self) -> QueueMemory {
        QueueMemory {
            addr: self.head.ring().addr(),
            len: (CQE_SIZE << self.log_size),
            entries: 1 << self.log_size,
            stride: CQE_SIZE as u32,
            doorbell_record: self.shared.owned.deps().dbr.addr(),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<CqShared> {
        &self.shared
    }

    pub(crate) fn notify(&self) -> &Arc<CqNotify> {
        &self.shared.notify
    }

    /// `ibv_query_cq`: QUERY_CQ.
    pub fn query(&self) -> Result<CqAttr> {
        const VERB: &str = "query_cq";
        let mut inbox = QueryCqIn::new();
        inbox.set_opcode(Opcode::QueryCq.raw());
        inbox.set_cqn(self.cqn());
        let out = self
            .obj()
            .query(inbox.as_bytes(), QueryCqOut::SIZE_BYTES)
            .verb(VERB)?;
        let out: &QueryCqOut = outbox(VERB, "QUERY_CQ", &out)?;
        let c = out.cq_context();
        let log = c.log_cq_size().min(31);
        Ok(CqAttr {
            cqe: (1u32 << log) - 1,
            log_cq_size: log,
            cqe_size: 64 << c.cqe_sz().min(1),
            uar_page: c.uar_page(),
            eqn: c.c_eqn_or_apu_element(),
            status: c.status(),
            arm_state: c.st(),
            producer_counter: c.producer_counter(),
            consumer_counter: c.consumer_counter(),
            cq_period: c.cq_period(),
            cq_max_count: c.cq_max_count(),
        })
    }

    /// `ibv_resize_cq`: a new ring in a new UMEM, MODIFY_CQ op_mod 1, then the
    /// old ring is released. Completions not yet polled move to the new ring at
    /// the same consumer counter. Returns the new usable size.
    pub fn resize(&mut self, entries: u32) -> Result<u32> {
        exec::now(self.resize_with(entries, Exec::Now))
    }

    /// [`Cq::resize`] with its UMEM registration, MODIFY_CQ and the old
    /// ring's deregistration queued on `comp`. Dropping the future before
    /// the MODIFY_CQ is queued leaves the CQ as it was (the new ring is
    /// released). Dropped while the MODIFY_CQ is queued or in flight, the
    /// drop waits until the firmware has run it (a NOP queued behind it
    /// completes) and the CQ takes the new ring if the firmware moved to it
    /// (the device then still holds its UMEM), so the CQ stays usable
    /// either way. Dropped while the old ring's deregistration is queued,
    /// the CQ has its new ring and the deregistration still completes.
    pub async fn resize_async(&mut self, entries: u32, comp: &CmdComp) -> Result<u32> {
        self.resize_with(entries, Exec::Queued(comp)).await
    }

    /// The one description of `ibv_resize_cq`, for both forms.
    async fn resize_with(&mut self, entries: u32, exec: Exec<'_>) -> Result<u32> {
        const VERB: &str = "resize_cq";
        let ctx = self.shared.ctx.clone();
        if ctx.caps().cq_resize() == 0 {
            return Err(Error::unsupported(
                VERB,
                "the device does not report cq_resize",
            ));
        }
        let n = ring_entries(VERB, &ctx, entries)?;
        let ring = new_ring(VERB, &ctx, n, exec).await?;

        let mut inbox = ModifyCqIn::new();
        inbox.set_opcode(Opcode::ModifyCq.raw());
        inbox.set_op_mod(MODIFY_CQ_OPMOD_RESIZE);
        inbox.set_cqn(self.cqn());
        inbox
            .modify_field_select_resize_field_select_mut()
            .resize_field_select_mut()
            .set_resize_field_select(RESIZE_FIELDS);
        let cqc = inbox.cq_context_mut();
        cqc.set_log_cq_size(log2(n) as u8);
        cqc.set_log_page_size(0);
        cqc.set_page_offset(0);
        cqc.set_cqe_sz(0);
        inbox.set_cq_umem_valid(1);
        inbox.set_cq_umem_offset(0);
        inbox.set_cq_umem_id(ring.id());
        let mut unsettled = Unsettled {
            cq: self,
            ring: Some(ring),
            log: log2(n),
            exec,
        };
        let done = exec
            .modify(
                unsettled.cq.obj(),
                inbox.as_bytes(),
                ModifyCqOut::SIZE_BYTES,
            )
            .await;
        // Answered: nothing is left to settle when `unsettled` drops.
        let ring = unsettled.ring.take().expect("the ring stays until settled");
        done.verb(VERB)?;
        let old = unsettled.cq.take_ring(ring, log2(n));
        let cqe = unsettled.cq.cqe();
        // If the device still uses it, the context keeps it mapped until
        // it lets go.
        exec.deregister(old).await;
        Ok(cqe)
    }

    /// Moves to `ring` (of 2^`log` entries), which the firmware now writes,
    /// and hands back the old ring.
    fn take_ring(&mut self, ring: Umem<MmapMut>, log: u32) -> Umem<MmapMut> {
        let mut current = self
            .shared
            .owned
            .deps()
            .ring
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let ci = self.head.ci();
        carry_unpolled(&current, self.log_size, &ring, log, ci);
        // SAFETY: the new ring UMEM of 2^log entries, which `current` holds
        // (mapped) from here on as long as the CQ, until the next resize
        // moves the head again.
        self.head = unsafe { Head::new(ring.addr(), log, ci) };
        self.log_size = log;
        std::mem::replace(&mut *current, ring)
    }

    /// `ibv_modify_cq` moderation: MODIFY_CQ op_mod 0 with cq_max_count and cq_period.
    pub fn modify_moderation(&self, max_count: u16, period: u16) -> Result<()> {
        const VERB: &str = "modify_cq";
        if self.shared.ctx.caps().cq_moderation() == 0 {
            return Err(Error::unsupported(
                VERB,
                "the device does not report cq_moderation",
            ));
        }
        if period > 0xfff {
            return Err(Error::argument(
                VERB,
                format!("cq_period {period} exceeds its 12-bit field"),
            ));
        }
        let mut inbox = ModifyCqIn::new();
        inbox.set_opcode(Opcode::ModifyCq.raw());
        inbox.set_cqn(self.cqn());
        inbox
            .modify_field_select_resize_field_select_mut()
            .modify_field_select_mut()
            .set_modify_field_select(MODERATION_FIELDS);
        let cqc = inbox.cq_context_mut();
        cqc.set_cq_max_count(max_count);
        cqc.set_cq_period(period);
        self.obj()
            .modify(inbox.as_bytes(), ModifyCqOut::SIZE_BYTES)
            .verb(VERB)?;
        Ok(())
    }

    /// `ibv_destroy_cq`: fails with `Busy` while QPs use it, or with the
    /// device's refusal; either way the CQ comes back.
    pub fn destroy(self) -> Result<(), DestroyError<Cq>> {
        const VERB: &str = "destroy_cq";
        let Cq {
            shared,
            log_size,
            head,
            dp,
        } = self;
        let rebuild = |shared| Cq {
            shared,
            log_size,
            head,
            dp,
        };
        let inner = match sole(shared, VERB, "completion queue") {
            Ok(inner) => inner,
            Err((shared, err)) => return Err(DestroyError::new(rebuild(shared), err)),
        };
        let CqShared {
            owned,
            ctx,
            channel,
            eqn,
            notify,
            tracks,
        } = inner;
        owned.destroy().map_err(|refused| {
            let (owned, source) = *refused;
            let shared = Arc::new(CqShared {
                owned,
                ctx,
                channel,
                eqn,
                notify,
                tracks,
            });
            DestroyError::new(rebuild(shared), Error::Device { verb: VERB, source })
        })
    }
}

impl Context {
    /// `ibv_create_cq` with `entries` and defaults otherwise.
    pub fn create_cq(&self, entries: u32) -> Result<Cq> {
        Cq::create(self, &CqInit::new(entries))
    }

    /// [`Cq::create_async`].
    pub async fn create_cq_async(&self, init: &CqInit, comp: &CmdComp) -> Result<Cq> {
        Cq::create_async(self, init, comp).await
    }
}

/// A resize whose MODIFY_CQ was submitted and not yet answered. Dropped
/// with its ring still in it (the resize future was dropped), it settles
/// which ring the CQ has: a NOP queued behind the MODIFY_CQ completes once
/// the firmware has run it, then a ring the device refuses to let go of is
/// the one it moved to.
struct Unsettled<'a, 'c> {
    cq: &'a mut Cq,
    ring: Option<Umem<MmapMut>>,
    log: u32,
    exec: Exec<'c>,
}

impl Drop for Unsettled<'_, '_> {
    fn drop(&mut self) {
        let (Some(ring), Exec::Queued(comp)) = (self.ring.take(), self.exec) else {
            return;
        };
        let ctx = comp.context();
        let mut nop = NopIn::new();
        nop.set_opcode(Opcode::Nop.raw());
        let wr_id = comp.library_wr_id();
        let behind = ctx
            .general_async(nop.as_bytes(), NopOut::SIZE_BYTES, wr_id, comp)
            .and_then(|()| devx::reactor::block_on(comp.completion(wr_id)));
        if behind.is_err() {
            // The firmware cannot say (the device failed, the channel
            // closed): the ring goes to the context if the device holds it.
            return;
        }
        if let Err((ring, _in_use)) = ring.deregister() {
            // Deregistered on drop; if the device still used it, the
            // context keeps it mapped until it lets go.
            drop(self.cq.take_ring(ring, self.log));
        }
    }
}

/// Copies software-owned, unpolled CQEs from the old ring into the new one at
/// the same counter, fixing each owner bit for the new ring size. The device
/// writes only entries at or past its producer counter, never the unpolled
/// ones carried here.
fn carry_unpolled(old: &Umem<MmapMut>, old_log: u32, new: &Umem<MmapMut>, new_log: u32, ci: u32) {
    let old_n = 1u32 << old_log;
    let new_n = 1u32 << new_log;
    let mut cqe = Cqe64::new();
    for k in 0..old_n.min(new_n - 1) {
        let idx = ci.wrapping_add(k);
        let src_at = (idx & (old_n - 1)) as usize * CQE_SIZE;
        if old.read_at(src_at, &mut cqe.0).is_err() {
            return;
        }
        let sw_owned = cqe.opcode() != CqeOpcode::Invalid.raw()
            && u32::from(cqe.owner()) == (idx >> old_log) & 1;
        // The entry firmware leaves in the old ring on resize ends the carry.
        if !sw_owned || cqe.opcode() == CqeOpcode::ResizeCq.raw() {
            return;
        }
        let dst_at = (idx & (new_n - 1)) as usize * CQE_SIZE;
        cqe.set_owner(((idx >> new_log) & 1) as u8);
        // The owner byte is the last one stored; the poller runs on this
        // thread (`resize` borrows the CQ mutably), after this returns.
        if new.write_at(dst_at, &cqe.0).is_err() {
            return;
        }
    }
}
