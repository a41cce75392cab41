//! The uverbs methods served: what Linux 6.1's uverbs core and mlx5_ib do
//! for each, over a `verbs::Context` (a DEVX context of the emulated device)
//! that plays the ucontext.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use devx::kernel::abi::{
    async_fd, devx as devx_ids, devx_obj as obj_ids, obj, uar as uar_ids, umem as umem_ids,
    verbs as ids, AllocUcontextReq, UcontextResp, UverbsGidEntry, ALLOC_UCONTEXT_REQ_LEN,
    ALLOC_UCONTEXT_RESP_LEN, MLX5_IB_ALLOC_UCTX_DEVX, MLX5_LIB_CAP_4K_UAR, MLX5_LIB_CAP_DYN_UAR,
};
use devx::{Provider, UarAlloc, UarKind, UarPage};
use prm_layouts::enums::HcaCapType;
use prm_layouts::{CreateCqIn, CreateCqOut, Opcode};
use verbs::{AtomicCap, LinkLayer};
use zerocopy::{FromBytes, IntoBytes};

use crate::abi::{
    self as uabi, device_cap, ExQueryDevice, ExQueryDeviceResp, Mlx5QueryDeviceResp,
    QueryDeviceResp, QueryPortRespEx,
};
use crate::clock::{self, Clock};
use crate::doorbell::Watcher;
use crate::state;
use crate::uverbs::{page_size, Errno, Request, UverbsFile};

mod ah;
mod async_events;
mod channel;
mod devx_fd;
mod program_fd;
mod qp;
mod srq;

/// A ucontext: the DEVX context of the emulated device behind one uverbs
/// file, and the objects made through it.
pub struct Ucontext {
    pub verbs: verbs::Context,
    pub resp: UcontextResp,
    /// The caller asked for DEVX (`MLX5_IB_ALLOC_UCTX_DEVX`).
    pub devx: bool,
    pub num_comp_vectors: u32,
    objects: Mutex<Objects>,
    /// Notices the doorbells the program stores into its UAR pages.
    pub watcher: Watcher,
    /// The async-event file the program reads (ASYNC_EVENT_ALLOC).
    async_events: Mutex<Option<Arc<async_events::AsyncEvents>>>,
    /// The core-clock and clock-info pages, when the response offers them.
    pub clock: Option<Clock>,
}

#[derive(Default)]
struct Objects {
    next_handle: u32,
    next_mmap_index: u64,
    table: HashMap<u32, Object>,
}

/// A uverbs object of the file, by its IDR handle.
enum Object {
    Uar(UarObj),
    Pd(verbs::Pd),
    Mr {
        mr: verbs::Mr<ProgramMemory>,
        pd_handle: u32,
    },
    /// A DEVX object (DEVX_OBJ_CREATE); dropping it destroys it.
    Devx(devx::Obj),
    /// A DEVX UMEM over the program's memory.
    Umem(devx::Umem<ProgramMemory>),
    /// A CQ over the program's ring and doorbell record (fields drop in
    /// order: the CQ before the memory it uses).
    Cq {
        obj: devx::Obj,
        ring: devx::Umem<ProgramMemory>,
        dbr: devx::Umem<ProgramMemory>,
        /// The completion channel delivering its events.
        channel: Option<Arc<channel::CompChannel>>,
    },
    /// A completion channel (the program holds its fd).
    CompChannel(Arc<channel::CompChannel>),
    /// A DEVX async command fd (the program holds its end).
    CmdFd(Arc<program_fd::ProgramFd>),
    /// A DEVX event channel (the program holds its end).
    EventFd(Arc<devx_fd::EventFd>),
    /// A QP over the program's buffer and doorbell record.
    Qp(Box<qp::QpObj>),
    /// A shared receive queue over the program's ring and doorbell record.
    Srq(Box<srq::SrqObj>),
    /// An address handle (no device object on mlx5).
    Ah {
        _ah: verbs::Ah,
        pd_handle: u32,
    },
}

impl Object {
    /// Teardown order on close: users before what they use.
    fn rank(&self) -> u8 {
        match self {
            Object::Qp(_) => 0,
            Object::Devx(_)
            | Object::Mr { .. }
            | Object::Cq { .. }
            | Object::Ah { .. }
            | Object::Srq(_) => 1,
            Object::Pd(_)
            | Object::Umem(_)
            | Object::CompChannel(_)
            | Object::CmdFd(_)
            | Object::EventFd(_) => 2,
            Object::Uar(_) => 3,
        }
    }
}

impl Objects {
    fn insert(&mut self, obj: Object) -> u32 {
        let h = self.next_handle;
        self.next_handle += 1;
        self.table.insert(h, obj);
        h
    }
}

/// Memory of the program registered with `ibv_reg_mr`: the device reads
/// and writes it, as it does any registered memory of a real process.
pub struct ProgramMemory {
    addr: usize,
    len: usize,
}

// SAFETY: the range belongs to the program, which gave it to the device with
// ibv_reg_mr and keeps it mapped until ibv_dereg_mr, as with the kernel; no
// Rust reference to those bytes exists anywhere.
unsafe impl devx::StableMemory for ProgramMemory {
    fn range(&self) -> (*const u8, usize) {
        (self.addr as *const u8, self.len)
    }
}

// SAFETY: as above; the library itself never borrows the range.
unsafe impl devx::ExclusiveMemory for ProgramMemory {}

struct UarObj {
    alloc: UarAlloc,
    mmap_offset: u64,
}

impl Ucontext {
    fn objects(&self) -> MutexGuard<'_, Objects> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn async_events(&self) -> MutexGuard<'_, Option<Arc<async_events::AsyncEvents>>> {
        self.async_events.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The clock page mapped at file offset `off` (read-only).
    pub fn clock_page_at(&self, off: u64) -> Option<Arc<dyn UarPage>> {
        self.clock
            .as_ref()
            .and_then(|c| c.page_at(off, page_size().trailing_zeros()))
    }

    /// The UAR page mapped at file offset `off`.
    pub fn page_at(&self, off: u64) -> Option<Arc<dyn UarPage>> {
        self.objects().table.values().find_map(|o| match o {
            Object::Uar(u) if u.mmap_offset == off => Some(Arc::clone(&u.alloc.page)),
            _ => None,
        })
    }
}

impl Drop for Ucontext {
    fn drop(&mut self) {
        // No doorbell is looked for once the objects start to go.
        self.watcher.stop();
        let w = self.watcher.stats();
        state::log(|| {
            format!(
                "doorbell watch: {} doorbells noticed in {} looks, {} sleeps",
                w.noticed, w.looks, w.sleeps
            )
        });
        // Closing the file destroys what is left, as the kernel does.
        let mut left: Vec<(u32, Object)> = self.objects().table.drain().collect();
        // Users first, newest first within a kind.
        left.sort_by_key(|(h, o)| (o.rank(), std::cmp::Reverse(*h)));
        for (_, o) in left {
            if let Object::Uar(u) = o {
                let _ = self.verbs.devx().provider().uar_free(u.alloc.handle);
            }
        }
    }
}

/// Runs the method `req` names.
pub fn dispatch(file: &UverbsFile, req: &mut Request) -> Result<(), Errno> {
    let (o, m) = (req.hdr.object_id, req.hdr.method_id);
    if (o, m) == (ids::UVERBS_OBJECT_DEVICE, ids::UVERBS_METHOD_GET_CONTEXT) {
        return get_context(file, req);
    }
    if (o, m) == (ids::UVERBS_OBJECT_DEVICE, ids::UVERBS_METHOD_INVOKE_WRITE) {
        return invoke_write(file, req);
    }
    let known = matches!(
        (o, m),
        (ids::UVERBS_OBJECT_DEVICE, ids::UVERBS_METHOD_QUERY_CONTEXT)
            | (ids::UVERBS_OBJECT_DEVICE, ids::UVERBS_METHOD_QUERY_PORT)
            | (
                ids::UVERBS_OBJECT_DEVICE,
                ids::UVERBS_METHOD_QUERY_GID_TABLE
            )
            | (
                ids::UVERBS_OBJECT_DEVICE,
                ids::UVERBS_METHOD_QUERY_GID_ENTRY
            )
            | (
                ids::UVERBS_OBJECT_ASYNC_EVENT,
                ids::UVERBS_METHOD_ASYNC_EVENT_ALLOC
            )
            | (obj::DEVX, devx_ids::METHOD_OTHER)
            | (obj::DEVX, devx_ids::METHOD_QUERY_EQN)
            | (obj::DEVX, devx_ids::METHOD_SUBSCRIBE_EVENT)
            | (obj::DEVX_ASYNC_CMD_FD, async_fd::METHOD_ALLOC)
            | (obj::DEVX_ASYNC_EVENT_FD, async_fd::METHOD_ALLOC)
            | (obj::DEVX_OBJ, obj_ids::METHOD_ASYNC_QUERY)
            | (obj::UAR, uar_ids::METHOD_ALLOC)
            | (obj::UAR, uar_ids::METHOD_DESTROY)
            | (ids::UVERBS_OBJECT_PD, ids::UVERBS_METHOD_PD_DESTROY)
            | (ids::UVERBS_OBJECT_MR, ids::UVERBS_METHOD_MR_DESTROY)
            | (ids::UVERBS_OBJECT_CQ, ids::UVERBS_METHOD_CQ_CREATE)
            | (ids::UVERBS_OBJECT_CQ, ids::UVERBS_METHOD_CQ_DESTROY)
            | (ids::UVERBS_OBJECT_QP, ids::UVERBS_METHOD_QP_CREATE)
            | (ids::UVERBS_OBJECT_AH, ids::UVERBS_METHOD_AH_DESTROY)
            | (ids::UVERBS_OBJECT_SRQ, ids::UVERBS_METHOD_SRQ_CREATE)
            | (ids::UVERBS_OBJECT_SRQ, ids::UVERBS_METHOD_SRQ_DESTROY)
            | (ids::UVERBS_OBJECT_QP, ids::UVERBS_METHOD_QP_DESTROY)
            | (obj::DEVX_OBJ, obj_ids::METHOD_CREATE)
            | (obj::DEVX_OBJ, obj_ids::METHOD_DESTROY)
            | (obj::DEVX_OBJ, obj_ids::METHOD_QUERY)
            | (obj::DEVX_OBJ, obj_ids::METHOD_MODIFY)
            | (obj::DEVX_UMEM, umem_ids::METHOD_REG)
            | (obj::DEVX_UMEM, umem_ids::METHOD_DEREG)
    );
    if !known {
        state::log(|| {
            format!(
                "uverbs{}: method {} (object {o:#x}, method {m:#x}) not supported",
                file.uverbs_index,
                req.name()
            )
        });
        return Err(libc::EPROTONOSUPPORT);
    }
    // Everything else runs on the ucontext.
    let ctx = file.ucontext().ok_or(libc::EINVAL)?;
    match (o, m) {
        (ids::UVERBS_OBJECT_DEVICE, ids::UVERBS_METHOD_QUERY_CONTEXT) => query_context(&ctx, req),
        (ids::UVERBS_OBJECT_DEVICE, ids::UVERBS_METHOD_QUERY_PORT) => query_port(&ctx, req),
        (ids::UVERBS_OBJECT_DEVICE, ids::UVERBS_METHOD_QUERY_GID_TABLE) => {
            query_gid_table(&ctx, req)
        }
        (ids::UVERBS_OBJECT_DEVICE, ids::UVERBS_METHOD_QUERY_GID_ENTRY) => {
            query_gid_entry(&ctx, req)
        }
        (ids::UVERBS_OBJECT_ASYNC_EVENT, ids::UVERBS_METHOD_ASYNC_EVENT_ALLOC) => {
            async_event_alloc(&ctx, req)
        }
        (obj::DEVX, devx_ids::METHOD_OTHER) => devx_other(&ctx, req),
        (obj::DEVX, devx_ids::METHOD_QUERY_EQN) => devx_query_eqn(&ctx, req),
        (obj::DEVX, devx_ids::METHOD_SUBSCRIBE_EVENT) => devx_fd::subscribe_event(&ctx, req),
        (obj::DEVX_ASYNC_CMD_FD, async_fd::METHOD_ALLOC) => devx_fd::cmd_fd_alloc(&ctx, req),
        (obj::DEVX_ASYNC_EVENT_FD, async_fd::METHOD_ALLOC) => devx_fd::event_fd_alloc(&ctx, req),
        (obj::DEVX_OBJ, obj_ids::METHOD_ASYNC_QUERY) => devx_fd::obj_async_query(&ctx, req),
        (obj::UAR, uar_ids::METHOD_ALLOC) => uar_alloc(&ctx, req),
        (ids::UVERBS_OBJECT_PD, ids::UVERBS_METHOD_PD_DESTROY) => destroy_pd(&ctx, req),
        (ids::UVERBS_OBJECT_MR, ids::UVERBS_METHOD_MR_DESTROY) => destroy_mr(&ctx, req),
        (ids::UVERBS_OBJECT_CQ, ids::UVERBS_METHOD_CQ_CREATE) => create_cq(&ctx, req),
        (ids::UVERBS_OBJECT_CQ, ids::UVERBS_METHOD_CQ_DESTROY) => destroy_cq(&ctx, req),
        (ids::UVERBS_OBJECT_QP, ids::UVERBS_METHOD_QP_CREATE) => qp::create_qp(&ctx, req),
        (ids::UVERBS_OBJECT_AH, ids::UVERBS_METHOD_AH_DESTROY) => ah::destroy_ah(&ctx, req),
        (ids::UVERBS_OBJECT_SRQ, ids::UVERBS_METHOD_SRQ_CREATE) => srq::create_srq(&ctx, req),
        (ids::UVERBS_OBJECT_SRQ, ids::UVERBS_METHOD_SRQ_DESTROY) => srq::destroy_srq(&ctx, req),
        (ids::UVERBS_OBJECT_QP, ids::UVERBS_METHOD_QP_DESTROY) => qp::destroy_qp(&ctx, req),
        (obj::DEVX_OBJ, obj_ids::METHOD_CREATE) => devx_obj_create(&ctx, req),
        (obj::DEVX_OBJ, obj_ids::METHOD_DESTROY) => devx_obj_destroy(&ctx, req),
        (obj::DEVX_OBJ, obj_ids::METHOD_QUERY) => devx_obj_query_modify(&ctx, req, false),
        (obj::DEVX_OBJ, obj_ids::METHOD_MODIFY) => devx_obj_query_modify(&ctx, req, true),
        (obj::DEVX_UMEM, umem_ids::METHOD_REG) => umem_reg(&ctx, req),
        (obj::DEVX_UMEM, umem_ids::METHOD_DEREG) => umem_dereg(&ctx, req),
        _ => uar_destroy(&ctx, req),
    }
}

// ---------------------------------------------------------------- context

/// GET_CONTEXT: checks the mlx5 request as `mlx5_ib_alloc_ucontext` does,
/// opens a DEVX context on the emulated device, answers the mlx5 response.
fn get_context(file: &UverbsFile, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        ids::UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS,
        ids::UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT,
        ids::UVERBS_ATTR_UHW_IN,
        ids::UVERBS_ATTR_UHW_OUT,
    ])?;
    let blob = req.input(ids::UVERBS_ATTR_UHW_IN)?.unwrap_or_default();
    let ureq = check_ucontext_req(&blob)?;
    let shown = file.device().ok_or(libc::ENXIO)?;
    let mut slot = file.lock();
    if slot.is_some() {
        return Err(libc::EINVAL);
    }
    let provider: Arc<dyn Provider> = Arc::clone(&shown.sim) as Arc<dyn Provider>;
    let mut dev = devx::Device::from_provider(provider);
    if let Some(path) = state::record_path() {
        // Every command of this context goes to the fixture; it is complete
        // (its `end` line written) when the context closes.
        dev = devx::fixture::record(&dev, &path).map_err(|e| {
            state::log(|| format!("cannot record to {}: {e}", path.display()));
            e.errno()
        })?;
        state::log(|| format!("recording commands to {}", path.display()));
    }
    let ctx = dev
        .open()
        .map_err(|e| e.errno())
        .and_then(|d| verbs::Context::from_devx(d).map_err(|e| e.errno()))?;
    let out_len = req.out_len(ids::UVERBS_ATTR_UHW_OUT).unwrap_or(0);
    let resp = ucontext_resp(&ctx, &ureq, shown, out_len)?;
    let clock = (resp.comp_mask & uabi::UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET != 0
        || resp.clock_info_versions != 0)
        .then(|| {
            let offset = usize::try_from(resp.hca_core_clock_offset).unwrap_or(0);
            Clock::new(ctx.caps().device_frequency_khz(), offset)
        });
    req.output(ids::UVERBS_ATTR_UHW_OUT, &resp.to_bytes())?;
    let num_comp_vectors = shown.sim.profile().num_comp_vectors;
    req.output(
        ids::UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS,
        &num_comp_vectors.to_ne_bytes(),
    )?;
    req.output(
        ids::UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT,
        &ids::IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS.to_ne_bytes(),
    )?;
    state::log(|| {
        format!(
            "uverbs{}: ucontext (devx {})",
            file.uverbs_index,
            ureq.flags & MLX5_IB_ALLOC_UCTX_DEVX != 0
        )
    });
    *slot = Some(Arc::new(Ucontext {
        verbs: ctx,
        resp,
        devx: ureq.flags & MLX5_IB_ALLOC_UCTX_DEVX != 0,
        num_comp_vectors,
        objects: Mutex::new(Objects::default()),
        watcher: Watcher::new(Arc::clone(&shown.sim)),
        async_events: Mutex::new(None),
        clock,
    }));
    Ok(())
}

/// The request checks of `mlx5_ib_alloc_ucontext` (Linux 6.1).
pub fn check_ucontext_req(blob: &[u8]) -> Result<AllocUcontextReq, Errno> {
    // 8 bytes is the v0 request; v2 needs at least up to comp_mask.
    if blob.len() != 8 && blob.len() < 16 {
        return Err(libc::EINVAL);
    }
    let (req, reserved) = AllocUcontextReq::from_bytes(blob);
    let tail_set = blob
        .get(ALLOC_UCONTEXT_REQ_LEN..)
        .is_some_and(|t| t.iter().any(|&b| b != 0));
    if req.flags & !MLX5_IB_ALLOC_UCTX_DEVX != 0 || req.comp_mask != 0 || reserved || tail_set {
        return Err(libc::EOPNOTSUPP);
    }
    if req.lib_caps & MLX5_LIB_CAP_DYN_UAR == 0 {
        // Static bfregs need the legacy UAR mmap commands, which are not served.
        state::log(|| "contexts without MLX5_LIB_CAP_DYN_UAR are not supported".into());
        return Err(libc::EOPNOTSUPP);
    }
    Ok(req)
}

fn pow2(log: u8) -> u32 {
    1u32.checked_shl(u32::from(log)).unwrap_or(u32::MAX)
}

/// The mlx5 response, derived from the current capabilities as
/// `mlx5_ib_alloc_ucontext` derives it.
fn ucontext_resp(
    ctx: &verbs::Context,
    req: &AllocUcontextReq,
    shown: &state::Shown,
    out_len: usize,
) -> Result<UcontextResp, Errno> {
    let c = ctx.caps();
    let roce = ctx.link_layer() == LinkLayer::Ethernet;
    let mut cmds_supp_uhw = uabi::MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE;
    if roce {
        cmds_supp_uhw |= uabi::MLX5_USER_CMDS_SUPP_UHW_CREATE_AH;
    }
    let eth_min_inline = if roce {
        let eth = ctx
            .query_caps(HcaCapType::EthernetOffloads, true)
            .map_err(|e| e.errno())?;
        // MLX5_CAP_INLINE_MODE_L2 (0) needs the L2 header inline
        // (MLX5_INLINE_MODE_L2 = 1), NOT_REQUIRED (2) nothing (NONE = 0); the
        // answer is that mode plus one. VPORT_CONTEXT (1) is answered as L2,
        // the least a vport may ask for.
        match eth.per_protocol_networking_offload_caps().wqe_inline_mode() {
            2 => 1,
            _ => 2,
        }
    } else {
        0
    };
    let mut comp_mask = 0;
    if c.ece_support() != 0 {
        comp_mask |= uabi::UCONTEXT_RESP_MASK_ECE;
    }
    // The clock pages are 4 KiB (the init segment's and the kernel's
    // clock-info page); mlx5_ib offers them only where that is a page.
    let small_pages = page_size() <= clock::CLOCK_PAGE_SIZE;
    let mut hca_core_clock_offset = 0;
    let clock_offset_end = std::mem::offset_of!(UcontextResp, hca_core_clock_offset) + 8;
    if small_pages && out_len >= clock_offset_end {
        comp_mask |= uabi::UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET;
        hca_core_clock_offset = uabi::INIT_SEG_INTERNAL_TIMER_H % page_size() as u64;
    }
    // mlx5_core keeps a clock-info page for a device with a frequency.
    let clock_info_versions = if small_pages && c.device_frequency_khz() != 0 {
        1 << uabi::MLX5_IB_CLOCK_INFO_V1
    } else {
        0
    };
    let uar_4k = req.lib_caps & MLX5_LIB_CAP_4K_UAR != 0 && c.uar_4k() != 0;
    let page_shift = page_size().trailing_zeros();
    let log_uar_size = if uar_4k {
        uabi::MLX5_ADAPTER_PAGE_SHIFT
    } else {
        page_shift
    };
    Ok(UcontextResp {
        qp_tab_size: pow2(c.log_max_qp()),
        bf_reg_size: pow2(c.log_bf_reg_size()),
        tot_bfregs: 0,
        cache_line_size: uabi::CACHE_LINE_SIZE,
        max_sq_desc_sz: c.max_wqe_sz_sq(),
        max_rq_desc_sz: c.max_wqe_sz_rq(),
        max_send_wqebb: pow2(c.log_max_qp_sz()),
        max_recv_wr: pow2(c.log_max_qp_sz()),
        max_srq_recv_wr: pow2(c.log_max_srq_sz()),
        num_ports: u16::from(shown.spec.num_ports),
        flow_action_flags: 0,
        comp_mask,
        response_length: out_len.min(ALLOC_UCONTEXT_RESP_LEN) as u32,
        cqe_version: c.cqe_version().min(req.max_cqe_version),
        cmds_supp_uhw,
        eth_min_inline,
        clock_info_versions,
        hca_core_clock_offset,
        log_uar_size,
        num_uars_per_page: 1 << (page_shift - log_uar_size),
        num_dyn_bfregs: 0,
        dump_fill_mkey: 0,
    })
}

/// QUERY_CONTEXT: the same answers for an existing context.
fn query_context(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    /// `MLX5_IB_ATTR_QUERY_CONTEXT_RESP_UCTX`.
    const RESP_UCTX: u16 = 0x1000;
    req.known(&[
        ids::UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS,
        ids::UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT,
        RESP_UCTX,
    ])?;
    req.output(
        ids::UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS,
        &ctx.num_comp_vectors.to_ne_bytes(),
    )?;
    req.output(
        ids::UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT,
        &ids::IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS.to_ne_bytes(),
    )?;
    let mut resp = ctx.resp;
    resp.response_length = ALLOC_UCONTEXT_RESP_LEN as u32;
    req.output(RESP_UCTX, &resp.to_bytes())
}

// ---------------------------------------------------------------- device

/// INVOKE_WRITE: a write() command carried by an ioctl. The probe (no
/// CORE_IN) gets ENOSPC, which tells libibverbs to use this path.
fn invoke_write(file: &UverbsFile, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        ids::UVERBS_ATTR_CORE_IN,
        ids::UVERBS_ATTR_CORE_OUT,
        ids::UVERBS_ATTR_WRITE_CMD,
        ids::UVERBS_ATTR_UHW_IN,
        ids::UVERBS_ATTR_UHW_OUT,
    ])?;
    let cmd = req
        .const_in(ids::UVERBS_ATTR_WRITE_CMD)?
        .ok_or(libc::EINVAL)?;
    let core_in = req.input(ids::UVERBS_ATTR_CORE_IN)?.unwrap_or_default();
    // The write commands served, with their core request sizes.
    #[derive(PartialEq)]
    enum W {
        QueryDevice,
        ExQueryDevice,
        QueryPort,
        AllocPd,
        RegMr,
        ModifyQp,
        QueryQp,
        CreateAh,
        CreateCompChannel,
    }
    let ext = u64::from(ids::IB_USER_VERBS_CMD_FLAG_EXTENDED);
    let (w, need_in) = match cmd {
        c if c == u64::from(ids::IB_USER_VERBS_CMD_QUERY_DEVICE) => (W::QueryDevice, 8),
        c if c == ext | u64::from(ids::IB_USER_VERBS_CMD_QUERY_DEVICE) => {
            (W::ExQueryDevice, std::mem::size_of::<ExQueryDevice>())
        }
        c if c == u64::from(ids::IB_USER_VERBS_CMD_QUERY_PORT) => {
            (W::QueryPort, uabi::QUERY_PORT_LEN)
        }
        c if c == u64::from(ids::IB_USER_VERBS_CMD_ALLOC_PD) => (W::AllocPd, 8),
        c if c == u64::from(ids::IB_USER_VERBS_CMD_REG_MR) => {
            (W::RegMr, std::mem::size_of::<uabi::RegMr>())
        }
        c if c == u64::from(ids::IB_USER_VERBS_CMD_MODIFY_QP) => {
            (W::ModifyQp, std::mem::size_of::<uabi::ModifyQp>())
        }
        c if c == u64::from(ids::IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL) => {
            // `struct ib_uverbs_create_comp_channel`: the response pointer.
            (W::CreateCompChannel, 8)
        }
        c if c == u64::from(ids::IB_USER_VERBS_CMD_CREATE_AH) => {
            (W::CreateAh, std::mem::size_of::<uabi::CreateAh>())
        }
        c if c == u64::from(ids::IB_USER_VERBS_CMD_QUERY_QP) => {
            (W::QueryQp, std::mem::size_of::<uabi::QueryQp>())
        }
        _ => {
            state::log(|| format!("INVOKE_WRITE: command {cmd:#x} not supported"));
            return Err(libc::EOPNOTSUPP);
        }
    };
    if core_in.len() < need_in {
        return Err(libc::ENOSPC);
    }
    let ctx = file.ucontext().ok_or(libc::EINVAL)?;
    match w {
        W::QueryDevice => {
            let resp = query_device_resp(&ctx.verbs)?;
            require_out(
                req,
                ids::UVERBS_ATTR_CORE_OUT,
                std::mem::size_of::<QueryDeviceResp>(),
            )?;
            req.output(ids::UVERBS_ATTR_CORE_OUT, resp.base.as_bytes())
        }
        W::ExQueryDevice => {
            let input = ExQueryDevice::read_from_prefix(&core_in)
                .map(|(i, _)| i)
                .map_err(|_| libc::EINVAL)?;
            if input.comp_mask != 0 || input.reserved != 0 {
                return Err(libc::EINVAL);
            }
            let mut resp = query_device_resp(&ctx.verbs)?;
            let min = std::mem::offset_of!(ExQueryDeviceResp, odp_general_caps);
            let len = require_out(req, ids::UVERBS_ATTR_CORE_OUT, min)?;
            resp.response_length = len.min(std::mem::size_of::<ExQueryDeviceResp>()) as u32;
            req.output(ids::UVERBS_ATTR_CORE_OUT, resp.as_bytes())?;
            if let Some(n) = req.out_len(ids::UVERBS_ATTR_UHW_OUT) {
                let drv = Mlx5QueryDeviceResp {
                    response_length: n.min(std::mem::size_of::<Mlx5QueryDeviceResp>()) as u32,
                    ..Default::default()
                };
                req.output(ids::UVERBS_ATTR_UHW_OUT, drv.as_bytes())?;
            }
            Ok(())
        }
        W::QueryPort => {
            let resp = query_port_resp(&ctx.verbs, core_in[uabi::QUERY_PORT_PORT_NUM_OFFSET])?;
            require_out(req, ids::UVERBS_ATTR_CORE_OUT, uabi::QUERY_PORT_RESP_LEN)?;
            req.output(
                ids::UVERBS_ATTR_CORE_OUT,
                &resp.as_bytes()[..uabi::QUERY_PORT_RESP_LEN],
            )
        }
        W::AllocPd => alloc_pd(&ctx, req),
        W::RegMr => reg_mr(&ctx, req, &core_in),
        W::ModifyQp => qp::modify_qp(&ctx, &core_in),
        W::QueryQp => qp::query_qp(&ctx, req, &core_in),
        W::CreateAh => ah::create_ah(&ctx, req, &core_in),
        W::CreateCompChannel => create_comp_channel(&ctx, req),
    }
}

/// Length of a required output of at least `min` bytes (ENOSPC if shorter).
fn require_out(req: &Request, id: u16, min: usize) -> Result<usize, Errno> {
    match req.out_len(id) {
        Some(n) if n >= min => Ok(n),
        _ => Err(libc::ENOSPC),
    }
}

/// Firmware version as mlx5_ib packs it: major << 32 | minor << 16 | sub.
fn fw_ver_u64(text: &str) -> u64 {
    let mut parts = text.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    let (maj, min, sub) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    (maj << 32) | ((min & 0xffff) << 16) | (sub & 0xffff)
}

/// `ib_device_attr` as mlx5_ib fills it, in uverbs' extended layout.
fn query_device_resp(ctx: &verbs::Context) -> Result<ExQueryDeviceResp, Errno> {
    let a = ctx.query_device().map_err(|e| e.errno())?;
    let f = a.cap_flags;
    let mut flags = device_cap::CHANGE_PHY_PORT
        | device_cap::PORT_ACTIVE_EVENT
        | device_cap::SYS_IMAGE_GUID
        | device_cap::RC_RNR_NAK_GEN;
    for (on, bit) in [
        (f.bad_pkey_counter, device_cap::BAD_PKEY_CNTR),
        (f.bad_qkey_counter, device_cap::BAD_QKEY_CNTR),
        (f.auto_path_migration, device_cap::AUTO_PATH_MIG),
        (f.xrc, device_cap::XRC),
        (
            f.mem_window,
            device_cap::MEM_WINDOW | device_cap::MEM_WINDOW_TYPE_2B,
        ),
        (
            f.block_multicast_loopback,
            device_cap::BLOCK_MULTICAST_LOOPBACK,
        ),
    ] {
        if on {
            flags |= bit;
        }
    }
    let base = QueryDeviceResp {
        fw_ver: fw_ver_u64(&a.fw_ver),
        node_guid: a.node_guid.to_be_bytes(),
        sys_image_guid: a.sys_image_guid.to_be_bytes(),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: a.max_qp,
        max_qp_wr: a.max_qp_wr,
        device_cap_flags: flags as u32,
        max_sge: a.max_send_sge.min(a.max_recv_sge),
        max_sge_rd: a.max_sge_rd,
        max_cq: a.max_cq,
        max_cqe: a.max_cqe,
        max_mr: a.max_mr,
        max_pd: a.max_pd,
        max_qp_rd_atom: a.max_qp_rd_atom,
        max_ee_rd_atom: a.max_ee_rd_atom,
        max_res_rd_atom: u32::try_from(a.max_res_rd_atom).unwrap_or(u32::MAX),
        max_qp_init_rd_atom: a.max_qp_init_rd_atom,
        max_ee_init_rd_atom: a.max_ee_init_rd_atom,
        atomic_cap: match a.atomic_cap {
            AtomicCap::None => 0,
            AtomicCap::Hca => 1,
            AtomicCap::Global => 2,
        },
        max_ee: a.max_ee,
        max_rdd: a.max_rdd,
        max_mw: a.max_mw,
        max_raw_ipv6_qp: a.max_raw_ipv6_qp,
        max_raw_ethy_qp: a.max_raw_ethy_qp,
        max_mcast_grp: a.max_mcast_grp,
        max_mcast_qp_attach: a.max_mcast_qp_attach,
        max_total_mcast_qp_attach: u32::try_from(a.max_total_mcast_qp_attach).unwrap_or(u32::MAX),
        max_ah: a.max_ah,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: a.max_srq,
        max_srq_wr: a.max_srq_wr,
        max_srq_sge: a.max_srq_sge,
        max_pkeys: u16::try_from(a.max_pkeys).unwrap_or(u16::MAX),
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
        reserved: [0; 4],
    };
    let (count, period) = if f.cq_moderation {
        (uabi::MLX5_MAX_CQ_COUNT, uabi::MLX5_MAX_CQ_PERIOD)
    } else {
        (0, 0)
    };
    Ok(ExQueryDeviceResp {
        base,
        timestamp_mask: i64::MAX as u64,
        hca_core_clock: a.hca_core_clock_khz,
        device_cap_flags_ex: flags,
        max_cq_moderation_count: count,
        max_cq_moderation_period: period,
        ..Default::default()
    })
}

fn query_port_resp(ctx: &verbs::Context, port: u8) -> Result<QueryPortRespEx, Errno> {
    let p = ctx.query_port(port).map_err(|e| e.errno())?;
    let roce = p.link_layer == LinkLayer::Ethernet;
    let mut cap = p.port_cap_flags;
    if roce {
        cap |= uabi::PORT_CAP_IP_BASED_GIDS;
    }
    Ok(QueryPortRespEx {
        port_cap_flags: cap,
        max_msg_sz: u32::try_from(p.max_msg_sz).unwrap_or(u32::MAX),
        gid_tbl_len: p.gid_tbl_len,
        pkey_tbl_len: u16::try_from(p.pkey_tbl_len).unwrap_or(u16::MAX),
        lid: p.lid,
        sm_lid: p.sm_lid,
        state: p.state as u8,
        max_mtu: p.max_mtu as u8,
        active_mtu: p.active_mtu as u8,
        lmc: p.lmc,
        sm_sl: p.sm_sl,
        subnet_timeout: p.subnet_timeout,
        active_width: uabi::ACTIVE_WIDTH_4X,
        active_speed: uabi::ACTIVE_SPEED_EDR,
        phys_state: p.phys_state,
        link_layer: if roce {
            uabi::link_layer::ETHERNET
        } else {
            uabi::link_layer::INFINIBAND
        },
        ..Default::default()
    })
}

/// QUERY_PORT (ioctl): the port number must name a port (EINVAL).
fn query_port(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        ids::UVERBS_ATTR_QUERY_PORT_PORT_NUM,
        ids::UVERBS_ATTR_QUERY_PORT_RESP,
    ])?;
    let port = req
        .const_in(ids::UVERBS_ATTR_QUERY_PORT_PORT_NUM)?
        .ok_or(libc::EINVAL)?;
    let port = u8::try_from(port).map_err(|_| libc::EINVAL)?;
    req.need(ids::UVERBS_ATTR_QUERY_PORT_RESP)?;
    let resp = query_port_resp(&ctx.verbs, port)?;
    req.output(ids::UVERBS_ATTR_QUERY_PORT_RESP, resp.as_bytes())
}

/// One GID table entry, or ENODATA for an empty one, EINVAL past the table.
fn gid_entry(ctx: &verbs::Context, port: u8, index: u32) -> Result<UverbsGidEntry, Errno> {
    let p = ctx.query_port(port).map_err(|e| e.errno())?;
    if index >= p.gid_tbl_len {
        return Err(libc::EINVAL);
    }
    let idx = u16::try_from(index).map_err(|_| libc::EINVAL)?;
    let e = ctx.query_gid(port, idx).map_err(|e| e.errno())?;
    if e.gid.is_zero() {
        return Err(libc::ENODATA);
    }
    Ok(UverbsGidEntry {
        gid: e.gid.0,
        gid_index: index,
        port_num: u32::from(port),
        gid_type: match e.gid_type {
            verbs::GidType::Ib => ids::IB_UVERBS_GID_TYPE_IB,
            verbs::GidType::RoceV1 => ids::IB_UVERBS_GID_TYPE_ROCE_V1,
            verbs::GidType::RoceV2 => ids::IB_UVERBS_GID_TYPE_ROCE_V2,
        },
        // The emulated port has no netdev.
        netdev_ifindex: 0,
    })
}

fn query_gid_entry(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        ids::UVERBS_ATTR_QUERY_GID_ENTRY_PORT,
        ids::UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX,
        ids::UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS,
        ids::UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY,
    ])?;
    let port = req
        .const_in(ids::UVERBS_ATTR_QUERY_GID_ENTRY_PORT)?
        .ok_or(libc::EINVAL)?;
    let index = req
        .const_in(ids::UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX)?
        .ok_or(libc::EINVAL)?;
    req.flags_in(ids::UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS, 0)?;
    require_out(
        req,
        ids::UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY,
        std::mem::size_of::<UverbsGidEntry>(),
    )
    .map_err(|_| libc::EINVAL)?;
    let port = u8::try_from(port).map_err(|_| libc::EINVAL)?;
    let index = u32::try_from(index).map_err(|_| libc::EINVAL)?;
    let e = gid_entry(&ctx.verbs, port, index)?;
    req.output(ids::UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY, e.as_bytes())
}

/// QUERY_GID_TABLE: every populated entry of every port, `entry_size` apart.
fn query_gid_table(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        ids::UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE,
        ids::UVERBS_ATTR_QUERY_GID_TABLE_FLAGS,
        ids::UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES,
        ids::UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES,
    ])?;
    let entry_size = req
        .const_in(ids::UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE)?
        .ok_or(libc::EINVAL)?;
    let entry_size = usize::try_from(entry_size).map_err(|_| libc::EINVAL)?;
    req.flags_in(ids::UVERBS_ATTR_QUERY_GID_TABLE_FLAGS, 0)?;
    let room = req
        .out_len(ids::UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES)
        .ok_or(libc::EINVAL)?;
    if entry_size == 0 || room / entry_size == 0 {
        return Err(libc::EINVAL);
    }
    let max = room / entry_size;
    let mut entries = Vec::new();
    for port in 1..=ctx.verbs.num_ports() {
        let len = ctx
            .verbs
            .query_port(port)
            .map_err(|e| e.errno())?
            .gid_tbl_len;
        for index in 0..len {
            match gid_entry(&ctx.verbs, port, index) {
                Ok(e) => entries.push(e),
                Err(libc::ENODATA) => {}
                Err(e) => return Err(e),
            }
        }
    }
    if entries.len() > max {
        return Err(libc::EINVAL);
    }
    let mut out = vec![0u8; entries.len() * entry_size];
    for (slot, e) in out.chunks_exact_mut(entry_size).zip(&entries) {
        let b = e.as_bytes();
        let n = b.len().min(entry_size);
        slot[..n].copy_from_slice(&b[..n]);
    }
    req.output(ids::UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES, &out)?;
    req.output(
        ids::UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES,
        &(entries.len() as u64).to_ne_bytes(),
    )
}

/// ASYNC_EVENT_ALLOC: the context's async-event file (port changes,
/// device fatal, QP errors; see `async_events`).
fn async_event_alloc(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[ids::UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE])?;
    req.need(ids::UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE)?;
    let ev = Arc::new(async_events::AsyncEvents::new(ctx.verbs.devx())?);
    let fd = ev.out.fd;
    *ctx.async_events() = Some(Arc::clone(&ev));
    ctx.watcher.serve(ev);
    ctx.watcher.start();
    req.set_data(ids::UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE, fd as u64);
    Ok(())
}

// ---------------------------------------------------------------- DEVX

/// DEVX OTHER: a general command; a firmware failure returns EREMOTEIO
/// with the outbox.
fn devx_other(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[devx_ids::OTHER_CMD_IN, devx_ids::OTHER_CMD_OUT])?;
    let inbox = req.input(devx_ids::OTHER_CMD_IN)?.ok_or(libc::EINVAL)?;
    let out_len = req.out_len(devx_ids::OTHER_CMD_OUT).ok_or(libc::EINVAL)?;
    if inbox.len() < 16 || out_len < 16 {
        return Err(libc::EINVAL);
    }
    let mut out = vec![0u8; out_len];
    match ctx.verbs.devx().provider().general(&inbox, &mut out) {
        Ok(()) => req.output(devx_ids::OTHER_CMD_OUT, &out),
        Err(e) if e.errno() == libc::EREMOTEIO => {
            req.output(devx_ids::OTHER_CMD_OUT, &out)?;
            Err(libc::EREMOTEIO)
        }
        Err(e) => Err(e.errno()),
    }
}

fn devx_query_eqn(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[devx_ids::QUERY_EQN_USER_VEC, devx_ids::QUERY_EQN_DEV_EQN])?;
    let vec = req
        .input(devx_ids::QUERY_EQN_USER_VEC)?
        .ok_or(libc::EINVAL)?;
    let vec: [u8; 4] = vec.as_slice().try_into().map_err(|_| libc::EINVAL)?;
    if req.out_len(devx_ids::QUERY_EQN_DEV_EQN) != Some(4) {
        return Err(libc::EINVAL);
    }
    let eqn = ctx
        .verbs
        .devx()
        .query_eqn(u32::from_ne_bytes(vec))
        .map_err(|e| e.errno())?;
    req.output(devx_ids::QUERY_EQN_DEV_EQN, &eqn.to_ne_bytes())
}

/// UAR_OBJ_ALLOC: a UAR page of the emulated device, mappable at the
/// returned offset.
fn uar_alloc(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        uar_ids::HANDLE,
        uar_ids::TYPE,
        uar_ids::MMAP_OFFSET,
        uar_ids::MMAP_LENGTH,
        uar_ids::PAGE_ID,
    ])?;
    req.need(uar_ids::HANDLE)?;
    let kind = match req.const_in(uar_ids::TYPE)?.ok_or(libc::EINVAL)? {
        0 => UarKind::BlueFlame,
        1 => UarKind::NonCached,
        _ => return Err(libc::EOPNOTSUPP),
    };
    for (id, len) in [
        (uar_ids::MMAP_OFFSET, 8),
        (uar_ids::MMAP_LENGTH, 4),
        (uar_ids::PAGE_ID, 4),
    ] {
        if req.out_len(id) != Some(len) {
            return Err(libc::EINVAL);
        }
    }
    let alloc = ctx
        .verbs
        .devx()
        .provider()
        .uar_alloc(kind)
        .map_err(|e| e.errno())?;
    let page_id = alloc.page_id;
    ctx.watcher.watch(page_id, Arc::clone(&alloc.page));
    // DEVX programs ring doorbells of queues the library never sees created.
    ctx.watcher.start();
    let (handle, offset) = {
        let mut o = ctx.objects();
        let offset = uabi::dyn_mmap_offset(o.next_mmap_index, page_size().trailing_zeros());
        o.next_mmap_index += 1;
        let handle = o.insert(Object::Uar(UarObj {
            alloc,
            mmap_offset: offset,
        }));
        (handle, offset)
    };
    req.output(uar_ids::MMAP_OFFSET, &offset.to_ne_bytes())?;
    req.output(uar_ids::MMAP_LENGTH, &(page_size() as u32).to_ne_bytes())?;
    req.output(uar_ids::PAGE_ID, &page_id.to_ne_bytes())?;
    req.set_data(uar_ids::HANDLE, u64::from(handle));
    Ok(())
}

fn uar_destroy(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[uar_ids::HANDLE])?;
    let handle = req.need(uar_ids::HANDLE)?.data;
    let Object::Uar(uar) = take(ctx, handle, |o| matches!(o, Object::Uar(_)))? else {
        return Err(libc::EINVAL);
    };
    ctx.watcher.unwatch(uar.alloc.page_id);
    ctx.verbs
        .devx()
        .provider()
        .uar_free(uar.alloc.handle)
        .map_err(|e| e.errno())
}

/// Removes the object an IDR DESTROY attribute names: ENOENT when there is
/// none, EINVAL when it is of another type.
fn take(ctx: &Ucontext, handle: u64, kind: impl Fn(&Object) -> bool) -> Result<Object, Errno> {
    let handle = u32::try_from(handle).map_err(|_| libc::ENOENT)?;
    let mut o = ctx.objects();
    match o.table.get(&handle) {
        None => Err(libc::ENOENT),
        Some(obj) if !kind(obj) => Err(libc::EINVAL),
        Some(_) => o.table.remove(&handle).ok_or(libc::ENOENT),
    }
}

/// A destroy the device refused: the handle stays valid, as in the kernel.
fn put_back(ctx: &Ucontext, handle: u64, obj: Object, errno: Errno) -> Errno {
    if let Ok(h) = u32::try_from(handle) {
        ctx.objects().table.insert(h, obj);
    }
    errno
}

// ---------------------------------------------------------------- DEVX objects

/// The outbox of a command the firmware refused: status and syndrome, as
/// the kernel copies it back with EREMOTEIO.
fn failed_outbox(e: &devx::Error, len: usize) -> Option<Vec<u8>> {
    let devx::Error::Firmware {
        status, syndrome, ..
    } = e
    else {
        return None;
    };
    let mut hdr = prm_layouts::GeneralObjOutCmdHdr::new();
    hdr.set_status(*status);
    hdr.set_syndrome(*syndrome);
    let mut out = vec![0u8; len];
    let n = len.min(hdr.as_bytes().len());
    out[..n].copy_from_slice(&hdr.as_bytes()[..n]);
    Some(out)
}

/// Answers a devx failure: EREMOTEIO with the outbox when firmware refused.
fn devx_failure(req: &mut Request, out_id: u16, e: &devx::Error) -> Errno {
    let len = req.out_len(out_id).unwrap_or(0);
    if let Some(out) = failed_outbox(e, len) {
        if req.output(out_id, &out).is_err() {
            return libc::EFAULT;
        }
    }
    e.errno()
}

/// Refuses DEVX methods on a context opened without the DEVX flag.
fn need_devx(ctx: &Ucontext) -> Result<(), Errno> {
    if ctx.devx {
        Ok(())
    } else {
        Err(libc::EINVAL)
    }
}

fn devx_obj_create(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[obj_ids::HANDLE, obj_ids::CMD_IN, obj_ids::CMD_OUT])?;
    need_devx(ctx)?;
    req.need(obj_ids::HANDLE)?;
    let inbox = req.input(obj_ids::CMD_IN)?.ok_or(libc::EINVAL)?;
    let out_len = req.out_len(obj_ids::CMD_OUT).ok_or(libc::EINVAL)?;
    if inbox.len() < 16 || out_len < 16 {
        return Err(libc::EINVAL);
    }
    match ctx.verbs.devx().create(&inbox, out_len) {
        Ok(o) => {
            req.output(obj_ids::CMD_OUT, o.out())?;
            let handle = ctx.objects().insert(Object::Devx(o));
            req.set_data(obj_ids::HANDLE, u64::from(handle));
            Ok(())
        }
        Err(e) => Err(devx_failure(req, obj_ids::CMD_OUT, &e)),
    }
}

fn devx_obj_destroy(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[obj_ids::HANDLE])?;
    let handle = req.need(obj_ids::HANDLE)?.data;
    let Object::Devx(o) = take(ctx, handle, |o| matches!(o, Object::Devx(_)))? else {
        return Err(libc::EINVAL);
    };
    o.destroy()
        .map_err(|e| put_back(ctx, handle, Object::Devx(*e.obj), e.error.errno()))
}

/// OBJ_QUERY / OBJ_MODIFY: on a DEVX object or a verbs CQ of this file.
fn devx_obj_query_modify(ctx: &Ucontext, req: &mut Request, modify: bool) -> Result<(), Errno> {
    req.known(&[obj_ids::HANDLE, obj_ids::CMD_IN, obj_ids::CMD_OUT])?;
    need_devx(ctx)?;
    let handle = req.need(obj_ids::HANDLE)?.data;
    let inbox = req.input(obj_ids::CMD_IN)?.ok_or(libc::EINVAL)?;
    let out_len = req.out_len(obj_ids::CMD_OUT).ok_or(libc::EINVAL)?;
    if inbox.len() < 16 || out_len < 16 {
        return Err(libc::EINVAL);
    }
    let handle = u32::try_from(handle).map_err(|_| libc::ENOENT)?;
    let mut out = vec![0u8; out_len];
    let r = {
        let objects = ctx.objects();
        let o = match objects.table.get(&handle) {
            Some(Object::Devx(o)) | Some(Object::Cq { obj: o, .. }) => o,
            Some(_) => return Err(libc::EINVAL),
            None => return Err(libc::ENOENT),
        };
        if modify {
            o.modify_into(&inbox, &mut out)
        } else {
            o.query_into(&inbox, &mut out)
        }
    };
    match r {
        Ok(()) => req.output(obj_ids::CMD_OUT, &out),
        Err(e) if e.errno() == libc::EREMOTEIO => {
            req.output(obj_ids::CMD_OUT, &out)?;
            Err(libc::EREMOTEIO)
        }
        Err(e) => Err(e.errno()),
    }
}

/// DEVX_UMEM_REG: the program's range as a UMEM of the context.
fn umem_reg(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        umem_ids::HANDLE,
        umem_ids::ADDR,
        umem_ids::LEN,
        umem_ids::ACCESS,
        umem_ids::OUT_ID,
        umem_ids::PGSZ_BITMAP,
        umem_ids::DMABUF_FD,
    ])?;
    need_devx(ctx)?;
    req.need(umem_ids::HANDLE)?;
    if req.attr(umem_ids::DMABUF_FD).is_some() {
        state::log(|| "umem_reg: dma-buf UMEMs are not served".into());
        return Err(libc::EOPNOTSUPP);
    }
    let addr = req.const_in(umem_ids::ADDR)?.ok_or(libc::EINVAL)?;
    let len = req.const_in(umem_ids::LEN)?.ok_or(libc::EINVAL)?;
    let access = req.flags_in(umem_ids::ACCESS, u64::from(devx::access::ALL))? as u32;
    if req.out_len(umem_ids::OUT_ID) != Some(4) {
        return Err(libc::EINVAL);
    }
    let memory = ProgramMemory {
        addr: usize::try_from(addr).map_err(|_| libc::EINVAL)?,
        len: usize::try_from(len).map_err(|_| libc::EINVAL)?,
    };
    let umem = devx::Umem::register(ctx.verbs.devx(), memory, access).map_err(|e| e.errno())?;
    let id = umem.id();
    let handle = ctx.objects().insert(Object::Umem(umem));
    req.output(umem_ids::OUT_ID, &id.to_ne_bytes())?;
    req.set_data(umem_ids::HANDLE, u64::from(handle));
    Ok(())
}

/// DEVX_UMEM_DEREG: refused (handle kept) while an object uses the UMEM.
fn umem_dereg(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[umem_ids::HANDLE])?;
    let handle = req.need(umem_ids::HANDLE)?.data;
    let Object::Umem(u) = take(ctx, handle, |o| matches!(o, Object::Umem(_)))? else {
        return Err(libc::EINVAL);
    };
    u.deregister()
        .map(drop)
        .map_err(|(u, e)| put_back(ctx, handle, Object::Umem(u), e.errno()))
}

// ---------------------------------------------------------------- PD, MR

/// ALLOC_PD: the PD handle, and mlx5's `pdn` in the driver response.
fn alloc_pd(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    require_out(req, ids::UVERBS_ATTR_CORE_OUT, 4)?;
    let pd = verbs::Pd::alloc(&ctx.verbs).map_err(|e| e.errno())?;
    let pdn = pd.pdn();
    let handle = ctx.objects().insert(Object::Pd(pd));
    req.output(ids::UVERBS_ATTR_CORE_OUT, &handle.to_ne_bytes())?;
    req.output(ids::UVERBS_ATTR_UHW_OUT, &pdn.to_ne_bytes())
}

/// PD_DESTROY: EBUSY while a memory region uses the PD.
fn destroy_pd(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[ids::UVERBS_ATTR_DESTROY_PD_HANDLE])?;
    let handle = req.need(ids::UVERBS_ATTR_DESTROY_PD_HANDLE)?.data;
    let in_use = ctx.objects().table.values().any(|o| match o {
        Object::Mr { pd_handle, .. } => u64::from(*pd_handle) == handle,
        Object::Qp(q) => u64::from(q.pd_handle) == handle,
        Object::Ah { pd_handle, .. } => u64::from(*pd_handle) == handle,
        Object::Srq(s) => u64::from(s.pd_handle) == handle,
        _ => false,
    });
    if in_use {
        return Err(libc::EBUSY);
    }
    let Object::Pd(pd) = take(ctx, handle, |o| matches!(o, Object::Pd(_)))? else {
        return Err(libc::EINVAL);
    };
    pd.dealloc()
        .map_err(|e| put_back(ctx, handle, Object::Pd(*e.object), e.error.errno()))
}

/// REG_MR: a UMEM over the program's range and an mkey over it.
fn reg_mr(ctx: &Ucontext, req: &mut Request, core_in: &[u8]) -> Result<(), Errno> {
    let cmd = uabi::RegMr::read_from_prefix(core_in)
        .map(|(c, _)| c)
        .map_err(|_| libc::EINVAL)?;
    require_out(
        req,
        ids::UVERBS_ATTR_CORE_OUT,
        std::mem::size_of::<uabi::RegMrResp>(),
    )?;
    if cmd.length == 0 || (cmd.start ^ cmd.hca_va) & (page_size() as u64 - 1) != 0 {
        return Err(libc::EINVAL);
    }
    if cmd.hca_va != cmd.start {
        state::log(|| "reg_mr with an I/O virtual address other than the buffer's".into());
        return Err(libc::EOPNOTSUPP);
    }
    if cmd.access_flags & uabi::ACCESS_ON_DEMAND != 0 {
        // ib_check_mr_access on a device without on-demand paging.
        return Err(libc::EOPNOTSUPP);
    }
    let access = verbs::AccessFlags::from_bits(cmd.access_flags & !uabi::ACCESS_OPTIONAL_RANGE)
        .ok_or(libc::EINVAL)?;
    let pd = match ctx.objects().table.get(&cmd.pd_handle) {
        Some(Object::Pd(pd)) => pd.clone(),
        _ => return Err(libc::EINVAL),
    };
    let memory = ProgramMemory {
        addr: usize::try_from(cmd.start).map_err(|_| libc::EINVAL)?,
        len: usize::try_from(cmd.length).map_err(|_| libc::EINVAL)?,
    };
    let mr = verbs::Mr::register(&pd, memory, access).map_err(|e| e.errno())?;
    let (lkey, rkey) = (mr.lkey(), mr.rkey());
    let mr_handle = ctx.objects().insert(Object::Mr {
        mr,
        pd_handle: cmd.pd_handle,
    });
    let resp = uabi::RegMrResp {
        mr_handle,
        lkey,
        rkey,
    };
    req.output(ids::UVERBS_ATTR_CORE_OUT, resp.as_bytes())
}

fn destroy_mr(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[ids::UVERBS_ATTR_DESTROY_MR_HANDLE])?;
    let handle = req.need(ids::UVERBS_ATTR_DESTROY_MR_HANDLE)?.data;
    let Object::Mr { mr, pd_handle } = take(ctx, handle, |o| matches!(o, Object::Mr { .. }))?
    else {
        return Err(libc::EINVAL);
    };
    mr.deregister().map(drop).map_err(|e| {
        let mr = *e.object;
        put_back(ctx, handle, Object::Mr { mr, pd_handle }, e.error.errno())
    })
}

// ---------------------------------------------------------------- CQ

/// A required u32 PTR_IN (inline).
fn u32_in(req: &Request, id: u16) -> Result<u32, Errno> {
    let b = req.input(id)?.ok_or(libc::EINVAL)?;
    let b: [u8; 4] = b.as_slice().try_into().map_err(|_| libc::EINVAL)?;
    Ok(u32::from_ne_bytes(b))
}

/// CQ_CREATE: `mlx5_ib_create_cq`'s user path. The ring and doorbell
/// record live in the program's memory (registered as UMEMs of the
/// context); the CQ context names the UAR page the program allocated.
fn create_cq(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    use uabi::create_cq_flags as flags;
    req.known(&[
        ids::UVERBS_ATTR_CREATE_CQ_HANDLE,
        ids::UVERBS_ATTR_CREATE_CQ_CQE,
        ids::UVERBS_ATTR_CREATE_CQ_USER_HANDLE,
        ids::UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL,
        ids::UVERBS_ATTR_CREATE_CQ_COMP_VECTOR,
        ids::UVERBS_ATTR_CREATE_CQ_FLAGS,
        ids::UVERBS_ATTR_CREATE_CQ_RESP_CQE,
        ids::UVERBS_ATTR_CREATE_CQ_EVENT_FD,
        ids::UVERBS_ATTR_UHW_IN,
        ids::UVERBS_ATTR_UHW_OUT,
    ])?;
    req.need(ids::UVERBS_ATTR_CREATE_CQ_HANDLE)?;
    req.need(ids::UVERBS_ATTR_CREATE_CQ_USER_HANDLE)?;
    let cqe = u32_in(req, ids::UVERBS_ATTR_CREATE_CQ_CQE)?;
    let vector = u32_in(req, ids::UVERBS_ATTR_CREATE_CQ_COMP_VECTOR)?;
    if req.out_len(ids::UVERBS_ATTR_CREATE_CQ_RESP_CQE) != Some(4) {
        return Err(libc::EINVAL);
    }
    req.flags_in(
        ids::UVERBS_ATTR_CREATE_CQ_FLAGS,
        uabi::CREATE_CQ_FLAGS_KNOWN,
    )?;
    let channel = match req.attr(ids::UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL) {
        None => None,
        Some(a) => {
            let fd = i32::try_from(a.data).map_err(|_| libc::EINVAL)?;
            let found = ctx.objects().table.values().find_map(|o| match o {
                Object::CompChannel(c) if c.is(fd) => Some(Arc::clone(c)),
                _ => None,
            });
            Some(found.ok_or(libc::EINVAL)?)
        }
    };
    let user_handle = req
        .const_in(ids::UVERBS_ATTR_CREATE_CQ_USER_HANDLE)?
        .ok_or(libc::EINVAL)?;
    if vector >= ctx.num_comp_vectors {
        return Err(libc::EINVAL);
    }
    let blob = req.input(ids::UVERBS_ATTR_UHW_IN)?.unwrap_or_default();
    if blob.len() < std::mem::offset_of!(uabi::Mlx5CreateCq, flags) {
        return Err(libc::EINVAL);
    }
    let mut padded = [0u8; std::mem::size_of::<uabi::Mlx5CreateCq>()];
    let n = blob.len().min(padded.len());
    padded[..n].copy_from_slice(&blob[..n]);
    let ucmd = uabi::Mlx5CreateCq::read_from_bytes(&padded).map_err(|_| libc::EINVAL)?;
    let known = flags::CQE_128B_PAD | flags::UAR_PAGE_INDEX | flags::REAL_TIME_TS;
    if ucmd.flags & !known != 0
        || (ucmd.cqe_size != 64 && ucmd.cqe_size != 128)
        || ucmd.reserved0 != 0
        || ucmd.reserved1 != 0
    {
        return Err(libc::EINVAL);
    }
    if ucmd.cqe_comp_en != 0 || ucmd.flags & (flags::CQE_128B_PAD | flags::REAL_TIME_TS) != 0 {
        state::log(|| "create_cq: CQE compression, padding and real-time stamps not served".into());
        return Err(libc::EOPNOTSUPP);
    }
    // Dynamic-UAR contexts must name the UAR page.
    if ucmd.flags & flags::UAR_PAGE_INDEX == 0 {
        return Err(libc::EINVAL);
    }
    let log_max = ctx.verbs.caps().log_max_cq_sz();
    let max = pow2(log_max);
    if cqe > max {
        return Err(libc::EINVAL);
    }
    let entries = (cqe + 1).checked_next_power_of_two().ok_or(libc::EINVAL)?;
    if entries > max {
        return Err(libc::EINVAL);
    }
    let ring_len = entries as usize * ucmd.cqe_size as usize;
    let devx_ctx = ctx.verbs.devx();
    let rw = devx::access::LOCAL_WRITE | devx::access::REMOTE_WRITE | devx::access::REMOTE_READ;
    let program = |addr: u64, len: usize| -> Result<ProgramMemory, Errno> {
        Ok(ProgramMemory {
            addr: usize::try_from(addr).map_err(|_| libc::EFAULT)?,
            len,
        })
    };
    let ring = devx::Umem::register(devx_ctx, program(ucmd.buf_addr, ring_len)?, rw)
        .map_err(|e| e.errno())?;
    // The doorbell record: two big-endian 32-bit words.
    let dbr =
        devx::Umem::register(devx_ctx, program(ucmd.db_addr, 8)?, rw).map_err(|e| e.errno())?;
    let eqn = devx_ctx.query_eqn(vector).map_err(|e| e.errno())?;

    let mut inbox = CreateCqIn::new();
    inbox.set_opcode(Opcode::CreateCq.raw());
    let cqc = inbox.cq_context_mut();
    cqc.set_log_cq_size(entries.trailing_zeros() as u8);
    cqc.set_uar_page(u32::from(ucmd.uar_page_index));
    cqc.set_c_eqn_or_apu_element(eqn);
    cqc.set_cqe_sz(u8::from(ucmd.cqe_size == 128));
    cqc.set_dbr_umem_valid(1);
    cqc.set_dbr_umem_id(dbr.id());
    cqc.set_dbr_addr(0);
    inbox.set_cq_umem_id(ring.id());
    inbox.set_cq_umem_offset(0);
    inbox.set_cq_umem_valid(1);
    let obj = devx_ctx
        .create(inbox.as_bytes(), CreateCqOut::SIZE_BYTES)
        .map_err(|e| e.errno())?;
    let cqn = obj.id();
    if let Some(c) = &channel {
        c.attach(&obj, user_handle)?;
    }
    let handle = ctx.objects().insert(Object::Cq {
        obj,
        ring,
        dbr,
        channel,
    });
    ctx.watcher.start();
    req.output(
        ids::UVERBS_ATTR_CREATE_CQ_RESP_CQE,
        &(entries - 1).to_ne_bytes(),
    )?;
    let resp = uabi::Mlx5CreateCqResp { cqn, reserved: 0 };
    req.output(ids::UVERBS_ATTR_UHW_OUT, resp.as_bytes())?;
    req.set_data(ids::UVERBS_ATTR_CREATE_CQ_HANDLE, u64::from(handle));
    state::log(|| format!("create_cq: cqn {cqn:#x}, {entries} entries, handle {handle}"));
    Ok(())
}

/// CQ_DESTROY: the event counts (no events are delivered yet: zero).
fn destroy_cq(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        ids::UVERBS_ATTR_DESTROY_CQ_HANDLE,
        ids::UVERBS_ATTR_DESTROY_CQ_RESP,
    ])?;
    let handle = req.need(ids::UVERBS_ATTR_DESTROY_CQ_HANDLE)?.data;
    require_out(req, ids::UVERBS_ATTR_DESTROY_CQ_RESP, 8).map_err(|_| libc::EINVAL)?;
    let in_use = ctx.objects().table.values().any(|o| match o {
        Object::Qp(q) => u64::from(q.send_cq) == handle || u64::from(q.recv_cq) == handle,
        _ => false,
    });
    if in_use {
        return Err(libc::EBUSY);
    }
    let Object::Cq {
        obj,
        ring,
        dbr,
        channel,
    } = take(ctx, handle, |o| matches!(o, Object::Cq { .. }))?
    else {
        return Err(libc::EINVAL);
    };
    let cqn = obj.id();
    if let Err(e) = obj.destroy() {
        let cq = Object::Cq {
            obj: *e.obj,
            ring,
            dbr,
            channel,
        };
        return Err(put_back(ctx, handle, cq, e.error.errno()));
    }
    // `struct ib_uverbs_destroy_cq_resp`: completion events the program read
    // (it waits until it has acknowledged that many), async events.
    let read = channel.as_ref().map_or(0, |c| c.detach(cqn));
    let mut resp = [0u8; 8];
    resp[..4].copy_from_slice(&read.to_ne_bytes());
    req.output(ids::UVERBS_ATTR_DESTROY_CQ_RESP, &resp)
}

/// CREATE_COMP_CHANNEL: a completion channel; the fd the program reads
/// events from.
fn create_comp_channel(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    require_out(req, ids::UVERBS_ATTR_CORE_OUT, 4)?;
    let ch = Arc::new(channel::CompChannel::new(ctx.verbs.devx())?);
    let fd = ch.out.fd;
    {
        let mut o = ctx.objects();
        // A channel whose fd number came back was closed by the program.
        o.table
            .retain(|_, v| !matches!(v, Object::CompChannel(c) if c.out.fd == fd));
        o.insert(Object::CompChannel(Arc::clone(&ch)));
    }
    ctx.watcher.serve(ch);
    ctx.watcher.start();
    req.output(ids::UVERBS_ATTR_CORE_OUT, &fd.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ucontext_requests_are_checked_like_mlx5_ib() {
        let good = AllocUcontextReq::devx().to_bytes();
        assert_eq!(check_ucontext_req(&good).unwrap(), AllocUcontextReq::devx());
        // Shorter requests lose lib_caps, hence dynamic UARs: not served.
        assert_eq!(check_ucontext_req(&good[..24]), Err(libc::EOPNOTSUPP));
        assert_eq!(check_ucontext_req(&good[..12]), Err(libc::EINVAL));
        assert_eq!(check_ucontext_req(&[]), Err(libc::EINVAL));
        let mut bad_flag = AllocUcontextReq::devx();
        bad_flag.flags |= 1 << 4;
        assert_eq!(
            check_ucontext_req(&bad_flag.to_bytes()),
            Err(libc::EOPNOTSUPP)
        );
        let mut reserved = good;
        reserved[18] = 1;
        assert_eq!(check_ucontext_req(&reserved), Err(libc::EOPNOTSUPP));
        let mut long = good.to_vec();
        long.extend_from_slice(&[0, 0, 0, 1]);
        assert_eq!(check_ucontext_req(&long), Err(libc::EOPNOTSUPP));
    }

    #[test]
    fn firmware_versions_pack_like_mlx5_ib() {
        assert_eq!(fw_ver_u64("22.36.1010"), (22 << 32) | (36 << 16) | 1010);
    }

    use devx::kernel::abi::{IoctlAttr, IoctlCmd, UVERBS_ID_DRIVER_NS};

    pub(super) fn run<const N: usize>(
        file: &UverbsFile,
        cmd: &mut IoctlCmd<N>,
    ) -> Result<i32, Errno> {
        file.ioctl_at(cmd as *mut IoctlCmd<N> as usize as u64)
    }

    /// A uverbs file on sim0 with its ucontext, and the mlx5 response.
    pub(super) fn open_context() -> (UverbsFile, UcontextResp) {
        open_context_with(AllocUcontextReq::devx())
    }

    fn open_context_with(ureq: AllocUcontextReq) -> (UverbsFile, UcontextResp) {
        let file = UverbsFile::new(0, -1);
        let req = ureq.to_bytes();
        let mut resp = [0u8; ALLOC_UCONTEXT_RESP_LEN];
        let mut vectors = 0u32;
        let mut cmd = IoctlCmd::new(
            ids::UVERBS_OBJECT_DEVICE,
            ids::UVERBS_METHOD_GET_CONTEXT,
            [
                IoctlAttr::ptr_in(ids::UVERBS_ATTR_UHW_IN, &req),
                IoctlAttr::ptr_out(ids::UVERBS_ATTR_UHW_OUT, resp.as_mut_ptr(), resp.len()),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS,
                    (&mut vectors as *mut u32).cast(),
                    4,
                ),
            ],
        );
        assert_eq!(run(&file, &mut cmd), Ok(0));
        assert!(cmd.attrs.iter().skip(1).all(|a| a.valid_output()));
        let sim = devx::sim::sim_device("sim0").unwrap();
        assert_eq!(vectors, sim.profile().num_comp_vectors);
        (file, UcontextResp::from_bytes(&resp))
    }

    #[test]
    fn get_context_answers_the_mlx5_response_once() {
        let (file, resp) = open_context();
        let p = devx::sim::sim_device("sim0").unwrap().profile().clone();
        assert_eq!(resp.response_length, ALLOC_UCONTEXT_RESP_LEN as u32);
        assert_eq!(resp.qp_tab_size, 1 << p.log_max_qp);
        assert_eq!(resp.num_ports, u16::from(p.num_ports));
        assert_eq!(resp.cqe_version, 1);
        assert_eq!(resp.max_send_wqebb, 1 << p.log_max_qp_sz);
        assert_eq!(resp.tot_bfregs, 0, "dynamic UARs: no static bfregs");
        assert_eq!(resp.log_uar_size, 12);
        // A second context on the same file is refused, as the kernel does.
        let req = AllocUcontextReq::devx().to_bytes();
        let mut cmd = IoctlCmd::new(
            ids::UVERBS_OBJECT_DEVICE,
            ids::UVERBS_METHOD_GET_CONTEXT,
            [IoctlAttr::ptr_in(ids::UVERBS_ATTR_UHW_IN, &req)],
        );
        assert_eq!(run(&file, &mut cmd), Err(libc::EINVAL));
    }

    #[test]
    fn methods_before_the_context_and_unknown_ones_fail_like_linux() {
        let file = UverbsFile::new(0, -1);
        let mut resp = QueryPortRespEx::default();
        let mut port = IoctlCmd::new(
            ids::UVERBS_OBJECT_DEVICE,
            ids::UVERBS_METHOD_QUERY_PORT,
            [
                IoctlAttr::u64_in(ids::UVERBS_ATTR_QUERY_PORT_PORT_NUM, 1),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_QUERY_PORT_RESP,
                    (&mut resp as *mut QueryPortRespEx).cast(),
                    std::mem::size_of::<QueryPortRespEx>(),
                ),
            ],
        );
        assert_eq!(run(&file, &mut port), Err(libc::EINVAL));
        // libibverbs' INVOKE_WRITE probe: no core input, ENOSPC.
        let mut probe = IoctlCmd::new(
            ids::UVERBS_OBJECT_DEVICE,
            ids::UVERBS_METHOD_INVOKE_WRITE,
            [IoctlAttr::u64_in(
                ids::UVERBS_ATTR_WRITE_CMD,
                u64::from(ids::IB_USER_VERBS_CMD_QUERY_DEVICE),
            )],
        );
        assert_eq!(run(&file, &mut probe), Err(libc::ENOSPC));
        let mut unknown = IoctlCmd::new(ids::UVERBS_OBJECT_PD, 5, [IoctlAttr::new_obj(0)]);
        assert_eq!(run(&file, &mut unknown), Err(libc::EPROTONOSUPPORT));
        // SAFETY: a null argument is never dereferenced for an unknown request.
        let r = unsafe { file.ioctl(0x5401, std::ptr::null_mut()) };
        assert_eq!(r, Err(libc::ENOTTY));
    }

    #[test]
    fn query_port_gid_and_device_come_from_the_emulated_port() {
        let (file, _) = open_context();
        let sim = devx::sim::sim_device("sim0").unwrap();
        let mut resp = QueryPortRespEx::default();
        let mut cmd = IoctlCmd::new(
            ids::UVERBS_OBJECT_DEVICE,
            ids::UVERBS_METHOD_QUERY_PORT,
            [
                IoctlAttr::u64_in(ids::UVERBS_ATTR_QUERY_PORT_PORT_NUM, 1),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_QUERY_PORT_RESP,
                    (&mut resp as *mut QueryPortRespEx).cast(),
                    std::mem::size_of::<QueryPortRespEx>(),
                ),
            ],
        );
        assert_eq!(run(&file, &mut cmd), Ok(0));
        assert_eq!(resp.state, verbs::PortState::Active as u8);
        assert_eq!(resp.link_layer, uabi::link_layer::ETHERNET);
        assert_eq!(
            resp.gid_tbl_len,
            u32::from(sim.profile().roce_address_table_size)
        );
        assert_ne!(resp.port_cap_flags & uabi::PORT_CAP_IP_BASED_GIDS, 0);
        cmd.attrs[0] = IoctlAttr::u64_in(ids::UVERBS_ATTR_QUERY_PORT_PORT_NUM, 2);
        assert_eq!(run(&file, &mut cmd), Err(libc::EINVAL));

        let mut entry = UverbsGidEntry::default();
        let mut gid = IoctlCmd::new(
            ids::UVERBS_OBJECT_DEVICE,
            ids::UVERBS_METHOD_QUERY_GID_ENTRY,
            [
                IoctlAttr::u64_in(ids::UVERBS_ATTR_QUERY_GID_ENTRY_PORT, 1),
                IoctlAttr::u64_in(ids::UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX, 1),
                IoctlAttr::u32_in(ids::UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS, 0),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY,
                    (&mut entry as *mut UverbsGidEntry).cast(),
                    std::mem::size_of::<UverbsGidEntry>(),
                ),
            ],
        );
        assert_eq!(run(&file, &mut gid), Ok(0));
        assert_eq!(entry.gid, sim.identity().gid_table()[1].gid);
        assert_eq!(entry.gid_type, ids::IB_UVERBS_GID_TYPE_ROCE_V2);
        gid.attrs[1] = IoctlAttr::u64_in(ids::UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX, 100);
        assert_eq!(run(&file, &mut gid), Err(libc::ENODATA));

        let input = ExQueryDevice::default();
        let mut dev = ExQueryDeviceResp::default();
        let mut drv = Mlx5QueryDeviceResp::default();
        let mut q = IoctlCmd::new(
            ids::UVERBS_OBJECT_DEVICE,
            ids::UVERBS_METHOD_INVOKE_WRITE,
            [
                IoctlAttr::u64_in(
                    ids::UVERBS_ATTR_WRITE_CMD,
                    u64::from(
                        ids::IB_USER_VERBS_CMD_FLAG_EXTENDED | ids::IB_USER_VERBS_CMD_QUERY_DEVICE,
                    ),
                ),
                IoctlAttr::ptr_in(ids::UVERBS_ATTR_CORE_IN, input.as_bytes()),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_CORE_OUT,
                    (&mut dev as *mut ExQueryDeviceResp).cast(),
                    std::mem::size_of::<ExQueryDeviceResp>(),
                ),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_UHW_OUT,
                    (&mut drv as *mut Mlx5QueryDeviceResp).cast(),
                    std::mem::size_of::<Mlx5QueryDeviceResp>(),
                ),
            ],
        );
        assert_eq!(run(&file, &mut q), Ok(0));
        let p = sim.profile();
        assert_eq!(dev.base.vendor_id, p.vendor_id);
        assert_eq!(dev.base.vendor_part_id, p.vendor_part_id);
        assert_eq!(dev.base.node_guid, sim.identity().node_guid.to_be_bytes());
        assert_eq!(dev.base.max_qp, 1 << p.log_max_qp);
        assert_eq!(dev.hca_core_clock, u64::from(p.device_frequency_khz));
        assert_eq!(
            dev.response_length as usize,
            std::mem::size_of::<ExQueryDeviceResp>()
        );
        assert_eq!(
            drv.response_length as usize,
            std::mem::size_of::<Mlx5QueryDeviceResp>()
        );
    }

    #[test]
    fn devx_general_commands_return_the_outbox_even_on_failure() {
        use prm_layouts::{Opcode, QueryHcaCapIn, QueryHcaCapOut};
        let (file, _) = open_context();
        let mut q = QueryHcaCapIn::new();
        q.set_opcode(Opcode::QueryHcaCap as u16);
        q.set_op_mod(HcaCapType::General.op_mod(true));
        let inbox = q.as_bytes().to_vec();
        let mut out = vec![0u8; QueryHcaCapOut::SIZE_BYTES];
        let mut cmd = IoctlCmd::new(
            obj::DEVX,
            devx_ids::METHOD_OTHER,
            [
                IoctlAttr::ptr_in(devx_ids::OTHER_CMD_IN, &inbox),
                IoctlAttr::ptr_out(devx_ids::OTHER_CMD_OUT, out.as_mut_ptr(), out.len()),
            ],
        );
        assert_eq!(run(&file, &mut cmd), Ok(0));
        let caps = QueryHcaCapOut::from_slice(&out).unwrap();
        let p = devx::sim::sim_device("sim0").unwrap().profile().clone();
        assert_eq!(caps.capability().cmd_hca_cap().log_max_qp(), p.log_max_qp);

        // A bad op_mod runs in firmware and fails: EREMOTEIO with the status.
        let mut bad = QueryHcaCapIn::new();
        bad.set_opcode(Opcode::QueryHcaCap as u16);
        bad.set_op_mod(0x7fff);
        let inbox = bad.as_bytes().to_vec();
        let mut out = vec![0u8; QueryHcaCapOut::SIZE_BYTES];
        let mut cmd = IoctlCmd::new(
            obj::DEVX,
            devx_ids::METHOD_OTHER,
            [
                IoctlAttr::ptr_in(devx_ids::OTHER_CMD_IN, &inbox),
                IoctlAttr::ptr_out(devx_ids::OTHER_CMD_OUT, out.as_mut_ptr(), out.len()),
            ],
        );
        assert_eq!(run(&file, &mut cmd), Err(libc::EREMOTEIO));
        assert!(cmd.attrs[1].valid_output());
        assert_ne!(out[0], 0, "outbox status");
    }

    #[test]
    fn uar_pages_map_at_the_offset_handed_out() {
        let (file, _) = open_context();
        let (mut offset, mut length, mut page_id) = (0u64, 0u32, 0u32);
        let mut cmd = IoctlCmd::new(
            obj::UAR,
            uar_ids::METHOD_ALLOC,
            [
                IoctlAttr::new_obj(uar_ids::HANDLE),
                IoctlAttr::u64_in(uar_ids::TYPE, 1),
                IoctlAttr::ptr_out(uar_ids::MMAP_OFFSET, (&mut offset as *mut u64).cast(), 8),
                IoctlAttr::ptr_out(uar_ids::MMAP_LENGTH, (&mut length as *mut u32).cast(), 4),
                IoctlAttr::ptr_out(uar_ids::PAGE_ID, (&mut page_id as *mut u32).cast(), 4),
            ],
        );
        assert_eq!(run(&file, &mut cmd), Ok(0));
        let handle = cmd.attrs[0].data;
        assert_eq!(length as usize, page_size());
        assert_eq!(
            offset,
            uabi::dyn_mmap_offset(0, page_size().trailing_zeros())
        );
        let flags = libc::MAP_SHARED;
        let prot = libc::PROT_WRITE;
        let base = file
            .mmap(
                std::ptr::null_mut(),
                page_size(),
                prot,
                flags,
                offset as i64,
            )
            .unwrap();
        assert_eq!(base as usize % page_size(), 0);
        assert_eq!(
            file.mmap(
                std::ptr::null_mut(),
                page_size(),
                prot,
                flags,
                offset as i64 + 4096
            ),
            Err(libc::EINVAL)
        );
        assert_eq!(
            file.mmap(
                std::ptr::null_mut(),
                2 * page_size(),
                prot,
                flags,
                offset as i64
            ),
            Err(libc::EINVAL)
        );
        assert!(crate::uverbs::unmap(base, page_size()));
        assert!(!crate::uverbs::unmap(base, page_size()));

        let mut destroy = IoctlCmd::new(
            obj::UAR,
            uar_ids::METHOD_DESTROY,
            [IoctlAttr::obj(uar_ids::HANDLE, handle)],
        );
        assert_eq!(run(&file, &mut destroy), Ok(0));
        assert_eq!(run(&file, &mut destroy), Err(libc::ENOENT));
    }

    /// ALLOC_PD through INVOKE_WRITE: (pd handle, pdn).
    pub(super) fn alloc_pd_cmd(file: &UverbsFile) -> Result<(u32, u32), Errno> {
        let core_in = [0u8; 8];
        let (mut handle, mut pdn) = (0u32, 0u32);
        let mut cmd = IoctlCmd::new(
            ids::UVERBS_OBJECT_DEVICE,
            ids::UVERBS_METHOD_INVOKE_WRITE,
            [
                IoctlAttr::u64_in(
                    ids::UVERBS_ATTR_WRITE_CMD,
                    u64::from(ids::IB_USER_VERBS_CMD_ALLOC_PD),
                ),
                IoctlAttr::ptr_in(ids::UVERBS_ATTR_CORE_IN, &core_in),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_CORE_OUT,
                    (&mut handle as *mut u32).cast(),
                    4,
                ),
                IoctlAttr::ptr_out(ids::UVERBS_ATTR_UHW_OUT, (&mut pdn as *mut u32).cast(), 4),
            ],
        );
        run(file, &mut cmd).map(|_| (handle, pdn))
    }

    /// A destroy method whose only attribute is the handle (id 0 for core
    /// objects, 0x1000 for mlx5 ones).
    pub(super) fn destroy(
        file: &UverbsFile,
        object: u16,
        method: u16,
        handle: u32,
    ) -> Result<i32, Errno> {
        let id = if object & UVERBS_ID_DRIVER_NS != 0 {
            UVERBS_ID_DRIVER_NS
        } else {
            0
        };
        let mut cmd = IoctlCmd::new(object, method, [IoctlAttr::obj(id, u64::from(handle))]);
        run(file, &mut cmd)
    }

    #[test]
    fn pd_and_mr_live_in_the_emulator_and_die_in_order() {
        let (file, _) = open_context();
        let (pd, pdn) = alloc_pd_cmd(&file).unwrap();
        assert_ne!(pdn, 0);
        // The program's buffer, kept alive past the registration.
        let buf: &'static mut [u8] = Box::leak(vec![0u8; 8192].into_boxed_slice());
        let reg = uabi::RegMr {
            response: 0,
            start: buf.as_ptr() as u64,
            length: buf.len() as u64,
            hca_va: buf.as_ptr() as u64,
            pd_handle: pd,
            access_flags: (verbs::AccessFlags::LOCAL_WRITE | verbs::AccessFlags::REMOTE_READ)
                .bits(),
        };
        let mut resp = uabi::RegMrResp::default();
        let mut cmd = IoctlCmd::new(
            ids::UVERBS_OBJECT_DEVICE,
            ids::UVERBS_METHOD_INVOKE_WRITE,
            [
                IoctlAttr::u64_in(
                    ids::UVERBS_ATTR_WRITE_CMD,
                    u64::from(ids::IB_USER_VERBS_CMD_REG_MR),
                ),
                IoctlAttr::ptr_in(ids::UVERBS_ATTR_CORE_IN, reg.as_bytes()),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_CORE_OUT,
                    (&mut resp as *mut uabi::RegMrResp).cast(),
                    12,
                ),
            ],
        );
        assert_eq!(run(&file, &mut cmd), Ok(0));
        assert_ne!(resp.lkey, 0);
        assert_eq!(resp.lkey, resp.rkey);
        let sim = devx::sim::sim_device("sim0").unwrap();
        assert!(sim.count(devx::sim::ObjKind::Mkey) >= 1);

        // Remote write without local write is refused, as ib_check_mr_access does.
        let mut bad = reg;
        bad.access_flags = verbs::AccessFlags::REMOTE_WRITE.bits();
        cmd.attrs[1] = IoctlAttr::ptr_in(ids::UVERBS_ATTR_CORE_IN, bad.as_bytes());
        assert_eq!(run(&file, &mut cmd), Err(libc::EINVAL));
        // On-demand paging: not offered, as by a device without ODP.
        bad = reg;
        bad.access_flags |= uabi::ACCESS_ON_DEMAND;
        cmd.attrs[1] = IoctlAttr::ptr_in(ids::UVERBS_ATTR_CORE_IN, bad.as_bytes());
        assert_eq!(run(&file, &mut cmd), Err(libc::EOPNOTSUPP));
        // A PD handle that is no PD.
        bad = reg;
        bad.pd_handle = resp.mr_handle;
        cmd.attrs[1] = IoctlAttr::ptr_in(ids::UVERBS_ATTR_CORE_IN, bad.as_bytes());
        assert_eq!(run(&file, &mut cmd), Err(libc::EINVAL));

        let (pd_obj, pd_destroy) = (ids::UVERBS_OBJECT_PD, ids::UVERBS_METHOD_PD_DESTROY);
        let (mr_obj, mr_destroy) = (ids::UVERBS_OBJECT_MR, ids::UVERBS_METHOD_MR_DESTROY);
        assert_eq!(destroy(&file, pd_obj, pd_destroy, pd), Err(libc::EBUSY));
        assert_eq!(destroy(&file, mr_obj, mr_destroy, pd), Err(libc::EINVAL));
        assert_eq!(destroy(&file, mr_obj, mr_destroy, resp.mr_handle), Ok(0));
        assert_eq!(
            destroy(&file, mr_obj, mr_destroy, resp.mr_handle),
            Err(libc::ENOENT)
        );
        assert_eq!(destroy(&file, pd_obj, pd_destroy, pd), Ok(0));
    }

    #[test]
    fn cq_over_program_memory_reports_its_size_and_number() {
        let (file, _) = open_context();
        let mut page_id = 0u32;
        let (mut offset, mut length) = (0u64, 0u32);
        let mut uar = IoctlCmd::new(
            obj::UAR,
            uar_ids::METHOD_ALLOC,
            [
                IoctlAttr::new_obj(uar_ids::HANDLE),
                IoctlAttr::u64_in(uar_ids::TYPE, 0),
                IoctlAttr::ptr_out(uar_ids::MMAP_OFFSET, (&mut offset as *mut u64).cast(), 8),
                IoctlAttr::ptr_out(uar_ids::MMAP_LENGTH, (&mut length as *mut u32).cast(), 4),
                IoctlAttr::ptr_out(uar_ids::PAGE_ID, (&mut page_id as *mut u32).cast(), 4),
            ],
        );
        assert_eq!(run(&file, &mut uar), Ok(0));
        let ring: &'static mut [u8] = Box::leak(vec![0u8; 128 * 64].into_boxed_slice());
        let dbr: &'static mut [u8] = Box::leak(vec![0u8; 8].into_boxed_slice());
        let ucmd = uabi::Mlx5CreateCq {
            buf_addr: ring.as_ptr() as u64,
            db_addr: dbr.as_ptr() as u64,
            cqe_size: 64,
            flags: uabi::create_cq_flags::UAR_PAGE_INDEX,
            uar_page_index: page_id as u16,
            ..Default::default()
        };
        let (mut cqe, mut resp) = (0u32, uabi::Mlx5CreateCqResp::default());
        let mut cmd = IoctlCmd::new(
            ids::UVERBS_OBJECT_CQ,
            ids::UVERBS_METHOD_CQ_CREATE,
            [
                IoctlAttr::new_obj(ids::UVERBS_ATTR_CREATE_CQ_HANDLE),
                IoctlAttr::u32_in(ids::UVERBS_ATTR_CREATE_CQ_CQE, 127),
                IoctlAttr::u64_in(ids::UVERBS_ATTR_CREATE_CQ_USER_HANDLE, 7),
                IoctlAttr::u32_in(ids::UVERBS_ATTR_CREATE_CQ_COMP_VECTOR, 0),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_CREATE_CQ_RESP_CQE,
                    (&mut cqe as *mut u32).cast(),
                    4,
                ),
                IoctlAttr::ptr_in(ids::UVERBS_ATTR_UHW_IN, ucmd.as_bytes()),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_UHW_OUT,
                    (&mut resp as *mut uabi::Mlx5CreateCqResp).cast(),
                    8,
                ),
            ],
        );
        assert_eq!(run(&file, &mut cmd), Ok(0));
        assert_eq!(cqe, 127);
        let handle = cmd.attrs[0].data as u32;
        let ctx = file.ucontext().unwrap();
        let mut q = prm_layouts::QueryCqIn::new();
        q.set_opcode(Opcode::QueryCq.raw());
        q.set_cqn(resp.cqn);
        let objects = ctx.objects();
        let Some(Object::Cq { obj, .. }) = objects.table.get(&handle) else {
            panic!("no CQ under handle {handle}");
        };
        let out = obj
            .query(q.as_bytes(), prm_layouts::QueryCqOut::SIZE_BYTES)
            .unwrap();
        let out = prm_layouts::QueryCqOut::from_slice(&out).unwrap();
        assert_eq!(out.cq_context().log_cq_size(), 7);
        assert_eq!(out.cq_context().uar_page(), page_id);
        drop(objects);

        // A vector the device does not have.
        cmd.attrs[3] = IoctlAttr::u32_in(ids::UVERBS_ATTR_CREATE_CQ_COMP_VECTOR, 1000);
        cmd.attrs[0] = IoctlAttr::new_obj(ids::UVERBS_ATTR_CREATE_CQ_HANDLE);
        assert_eq!(run(&file, &mut cmd), Err(libc::EINVAL));

        let mut counts = [0u8; 8];
        let mut d = IoctlCmd::new(
            ids::UVERBS_OBJECT_CQ,
            ids::UVERBS_METHOD_CQ_DESTROY,
            [
                IoctlAttr::obj(ids::UVERBS_ATTR_DESTROY_CQ_HANDLE, u64::from(handle)),
                IoctlAttr::ptr_out(ids::UVERBS_ATTR_DESTROY_CQ_RESP, counts.as_mut_ptr(), 8),
            ],
        );
        assert_eq!(run(&file, &mut d), Ok(0));
        assert_eq!(run(&file, &mut d), Err(libc::ENOENT));
    }

    fn devx_create(file: &UverbsFile, inbox: &[u8], out: &mut [u8]) -> Result<u64, Errno> {
        let mut cmd = IoctlCmd::new(
            obj::DEVX_OBJ,
            obj_ids::METHOD_CREATE,
            [
                IoctlAttr::new_obj(obj_ids::HANDLE),
                IoctlAttr::ptr_in(obj_ids::CMD_IN, inbox),
                IoctlAttr::ptr_out(obj_ids::CMD_OUT, out.as_mut_ptr(), out.len()),
            ],
        );
        run(file, &mut cmd).map(|_| cmd.attrs[0].data)
    }

    #[test]
    fn devx_objects_and_umems_follow_the_kernels_rules() {
        use prm_layouts::{AllocPdIn, AllocPdOut};
        let (file, _) = open_context();
        let mut pd_in = AllocPdIn::new();
        pd_in.set_opcode(Opcode::AllocPd.raw());
        let mut out = vec![0u8; AllocPdOut::SIZE_BYTES];
        let pd = devx_create(&file, pd_in.as_bytes(), &mut out).unwrap();
        assert_eq!(out[0], 0);
        assert_ne!(AllocPdOut::from_slice(&out).unwrap().pd(), 0);

        // Refused in firmware: EREMOTEIO, outbox with the status.
        let eqn = file.ucontext().unwrap().verbs.devx().query_eqn(0).unwrap();
        let mut cq_in = CreateCqIn::new();
        cq_in.set_opcode(Opcode::CreateCq.raw());
        cq_in.cq_context_mut().set_c_eqn_or_apu_element(eqn);
        let mut out = vec![0u8; CreateCqOut::SIZE_BYTES];
        assert_eq!(
            devx_create(&file, cq_in.as_bytes(), &mut out),
            Err(libc::EREMOTEIO)
        );
        assert_ne!(out[0], 0, "firmware status");

        let buf: &'static mut [u8] = Box::leak(vec![0u8; 4096].into_boxed_slice());
        let mut umem_id = 0u32;
        let mut reg = IoctlCmd::new(
            obj::DEVX_UMEM,
            umem_ids::METHOD_REG,
            [
                IoctlAttr::new_obj(umem_ids::HANDLE),
                IoctlAttr::u64_in(umem_ids::ADDR, buf.as_ptr() as u64),
                IoctlAttr::u64_in(umem_ids::LEN, buf.len() as u64),
                IoctlAttr::u32_in(umem_ids::ACCESS, devx::access::LOCAL_WRITE),
                IoctlAttr::ptr_out(umem_ids::OUT_ID, (&mut umem_id as *mut u32).cast(), 4),
            ],
        );
        assert_eq!(run(&file, &mut reg), Ok(0));
        assert_ne!(umem_id, 0);
        let umem = reg.attrs[0].data as u32;
        // Remote write without local write is refused before the device.
        reg.attrs[0] = IoctlAttr::new_obj(umem_ids::HANDLE);
        reg.attrs[3] = IoctlAttr::u32_in(umem_ids::ACCESS, devx::access::REMOTE_WRITE);
        assert_eq!(run(&file, &mut reg), Err(libc::EINVAL));

        let (dx, um) = (obj::DEVX_OBJ, obj::DEVX_UMEM);
        assert_eq!(
            destroy(&file, dx, obj_ids::METHOD_DESTROY, umem),
            Err(libc::EINVAL)
        );
        assert_eq!(destroy(&file, um, umem_ids::METHOD_DEREG, umem), Ok(0));
        assert_eq!(
            destroy(&file, dx, obj_ids::METHOD_DESTROY, pd as u32),
            Ok(0)
        );
        assert_eq!(
            destroy(&file, dx, obj_ids::METHOD_DESTROY, pd as u32),
            Err(libc::ENOENT)
        );
    }

    #[test]
    fn devx_methods_need_a_devx_context() {
        let mut plain = AllocUcontextReq::devx();
        plain.flags = 0;
        let (file, _) = open_context_with(plain);
        let mut pd_in = prm_layouts::AllocPdIn::new();
        pd_in.set_opcode(Opcode::AllocPd.raw());
        let mut out = [0u8; 16];
        assert_eq!(
            devx_create(&file, pd_in.as_bytes(), &mut out),
            Err(libc::EINVAL)
        );
    }
}
