//! QPs through mlx5_ib: CREATE (ioctl), MODIFY and QUERY (write commands
//! carried by INVOKE_WRITE), DESTROY (ioctl), as Linux 6.1's uverbs core
//! and `mlx5_ib_create_qp` answer them for RC, UC and UD QPs.
//!
//! The QP's buffer (RQ then SQ) and doorbell record are the program's
//! memory, named by `mlx5_ib_create_qp`, registered as UMEMs of the context
//! like a CQ's ring. Transitions are built by `verbs::QpTarget`, the same
//! code the Rust verbs use, and run on the QP's DEVX object.

use devx::kernel::abi::verbs as ids;
use prm_layouts::enums::{CmdStatus, Opcode, QpState};
use prm_layouts::{CreateQpIn, CreateQpOut, QueryQpIn, QueryQpOut, Rst2initQpOut};
use verbs::{AccessFlags, AhAttr, Gid, GlobalRoute, InitAttr, LinkLayer, Mtu, QpType};
use verbs::{RtrAttr, RtsAttr, RtsModify};
use zerocopy::{FromBytes, IntoBytes};

use super::{pow2, put_back, require_out, take, Object, ProgramMemory, Ucontext};
use crate::abi::{self as uabi, create_qp_flags as cflags, qp_attr, qp_state};
use crate::state;
use crate::uverbs::{Errno, Request};

/// `qpc.rq_type`: a receive queue of the QP's own, or none at all.
const RQ_TYPE_REGULAR: u8 = 0;
const RQ_TYPE_SRQ: u8 = 1;
const RQ_TYPE_ZERO_SIZE: u8 = 3;
/// `qpc.pm_state`: migrated (no alternate path armed).
const PM_STATE_MIGRATED: u8 = 3;
/// `qpc.ts_format`: the device's default timestamp format.
const TS_FORMAT_DEFAULT: u8 = 1;
/// Send WQE basic block: `sq_wqe_count` counts these.
const SEND_WQE_BB: u64 = 64;
/// `rq_wqe_shift` bounds: 16-byte strides (one data segment) up to the
/// PRM's `log_rq_stride` width (2^(4+7) bytes).
const MIN_RQ_WQE_SHIFT: u32 = 4;
const MAX_RQ_WQE_SHIFT: u32 = 11;

/// A QP of the file, over the program's buffer and doorbell record (fields
/// drop in order: the QP before the memory it uses).
pub(super) struct QpObj {
    obj: devx::Obj,
    _buf: devx::Umem<ProgramMemory>,
    _dbr: devx::Umem<ProgramMemory>,
    qp_type: QpType,
    pub(super) pd_handle: u32,
    pub(super) send_cq: u32,
    pub(super) recv_cq: u32,
    /// The SRQ it receives from (its handle).
    pub(super) srq: Option<u32>,
    pdn: u32,
    send_cqn: u32,
    recv_cqn: u32,
    cap: uabi::QpCap,
    sq_sig_all: bool,
    /// The state as uverbs tracks it (`enum ib_qp_state`).
    state: u8,
    port: u8,
}

impl QpObj {
    fn target<'a>(&self, ctx: &'a verbs::Context) -> verbs::QpTarget<'a> {
        verbs::QpTarget {
            ctx,
            qp_type: self.qp_type,
            qpn: self.obj.id(),
            pdn: self.pdn,
            send_cqn: self.send_cqn,
            recv_cqn: self.recv_cqn,
            port: self.port,
        }
    }
}

/// The errno mlx5_ib gives for a failed verbs command: firmware statuses
/// map as `mlx5_cmd_check` maps them (DEVX methods instead answer
/// EREMOTEIO with the outbox).
pub(super) fn verbs_errno(e: &devx::Error) -> Errno {
    match e {
        devx::Error::Firmware { status, .. } => CmdStatus::from_raw(*status)
            .map(|s| s.errno())
            .unwrap_or(libc::EIO),
        other => other.errno(),
    }
}

pub(super) fn verbs_err(e: verbs::Error) -> Errno {
    match &e {
        verbs::Error::Device { source, .. } => verbs_errno(source),
        _ => e.errno(),
    }
}

/// An object handle attribute's value (IDR handles are 32-bit).
fn handle_of(req: &Request, id: u16) -> Result<u32, Errno> {
    u32::try_from(req.need(id)?.data).map_err(|_| libc::EINVAL)
}

/// The CQ number behind a handle (EINVAL when it is not a CQ of the file).
fn cqn_of(ctx: &Ucontext, handle: u32) -> Result<u32, Errno> {
    match ctx.objects().table.get(&handle) {
        Some(Object::Cq { obj, .. }) => Ok(obj.id()),
        _ => Err(libc::EINVAL),
    }
}

/// QP_CREATE: `mlx5_ib_create_qp`'s user path for RC, UC and UD QPs.
pub(super) fn create_qp(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        ids::UVERBS_ATTR_CREATE_QP_HANDLE,
        ids::UVERBS_ATTR_CREATE_QP_XRCD_HANDLE,
        ids::UVERBS_ATTR_CREATE_QP_PD_HANDLE,
        ids::UVERBS_ATTR_CREATE_QP_SRQ_HANDLE,
        ids::UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE,
        ids::UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE,
        ids::UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE,
        ids::UVERBS_ATTR_CREATE_QP_USER_HANDLE,
        ids::UVERBS_ATTR_CREATE_QP_CAP,
        ids::UVERBS_ATTR_CREATE_QP_TYPE,
        ids::UVERBS_ATTR_CREATE_QP_FLAGS,
        ids::UVERBS_ATTR_CREATE_QP_SOURCE_QPN,
        ids::UVERBS_ATTR_CREATE_QP_EVENT_FD,
        ids::UVERBS_ATTR_CREATE_QP_RESP_CAP,
        ids::UVERBS_ATTR_CREATE_QP_RESP_QP_NUM,
        ids::UVERBS_ATTR_UHW_IN,
        ids::UVERBS_ATTR_UHW_OUT,
    ])?;
    req.need(ids::UVERBS_ATTR_CREATE_QP_HANDLE)?;
    let user_handle = req
        .const_in(ids::UVERBS_ATTR_CREATE_QP_USER_HANDLE)?
        .ok_or(libc::EINVAL)?;
    let qp_type = match req
        .const_in(ids::UVERBS_ATTR_CREATE_QP_TYPE)?
        .ok_or(libc::EINVAL)?
    {
        ids::IB_UVERBS_QPT_RC => QpType::Rc,
        ids::IB_UVERBS_QPT_UC => QpType::Uc,
        ids::IB_UVERBS_QPT_UD => QpType::Ud,
        other => {
            state::log(|| format!("create_qp: QP type {other} is not served"));
            return Err(libc::EOPNOTSUPP);
        }
    };
    for (id, what) in [
        (ids::UVERBS_ATTR_CREATE_QP_XRCD_HANDLE, "XRC domains"),
        (ids::UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE, "RSS tables"),
        (ids::UVERBS_ATTR_CREATE_QP_SOURCE_QPN, "source QPNs"),
    ] {
        if req.attr(id).is_some() {
            state::log(|| format!("create_qp: {what} are not served"));
            return Err(libc::EOPNOTSUPP);
        }
    }
    let flags = req.flags_in(
        ids::UVERBS_ATTR_CREATE_QP_FLAGS,
        ids::IB_UVERBS_QP_CREATE_SQ_SIG_ALL,
    )?;
    let cap_in = req
        .input(ids::UVERBS_ATTR_CREATE_QP_CAP)?
        .ok_or(libc::EINVAL)?;
    let cap = uabi::QpCap::read_from_bytes(&cap_in).map_err(|_| libc::EINVAL)?;
    for id in [
        ids::UVERBS_ATTR_CREATE_QP_RESP_CAP,
        ids::UVERBS_ATTR_CREATE_QP_RESP_QP_NUM,
    ] {
        req.need(id)?;
    }
    let pd_handle = handle_of(req, ids::UVERBS_ATTR_CREATE_QP_PD_HANDLE)?;
    let send_cq = handle_of(req, ids::UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE)?;
    let recv_cq = handle_of(req, ids::UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE)?;
    let pdn = match ctx.objects().table.get(&pd_handle) {
        Some(Object::Pd(pd)) => pd.pdn(),
        _ => return Err(libc::EINVAL),
    };
    let send_cqn = cqn_of(ctx, send_cq)?;
    let recv_cqn = cqn_of(ctx, recv_cq)?;
    let srq = match req.attr(ids::UVERBS_ATTR_CREATE_QP_SRQ_HANDLE) {
        None => None,
        Some(a) => {
            let h = u32::try_from(a.data).map_err(|_| libc::EINVAL)?;
            match ctx.objects().table.get(&h) {
                Some(Object::Srq(s)) => Some((h, s.srqn())),
                _ => return Err(libc::EINVAL),
            }
        }
    };

    // The driver data, zero-extended as the kernel's udata copy does.
    let blob = req.input(ids::UVERBS_ATTR_UHW_IN)?.unwrap_or_default();
    if blob.len() < std::mem::offset_of!(uabi::Mlx5CreateQp, sq_buf_addr) {
        return Err(libc::EINVAL);
    }
    let mut padded = [0u8; std::mem::size_of::<uabi::Mlx5CreateQp>()];
    let n = blob.len().min(padded.len());
    padded[..n].copy_from_slice(&blob[..n]);
    if blob[n..].iter().any(|&b| b != 0) {
        return Err(libc::EINVAL);
    }
    let ucmd = uabi::Mlx5CreateQp::read_from_bytes(&padded).map_err(|_| libc::EINVAL)?;
    // Flags the emulated device takes: the UAR page naming, and the
    // scatter-to-CQE hints (an optimisation mlx5_ib may decline).
    let served = cflags::UAR_PAGE_INDEX | cflags::SCATTER_CQE | cflags::ALLOW_SCATTER_CQE;
    let known = served
        | cflags::SIGNATURE
        | cflags::TUNNEL_OFFLOADS
        | cflags::BFREG_INDEX
        | cflags::TYPE_DCT
        | cflags::TYPE_DCI
        | cflags::TIR_ALLOW_SELF_LB_UC
        | cflags::TIR_ALLOW_SELF_LB_MC
        | cflags::PACKET_BASED_CREDIT_MODE
        | cflags::DCI_STREAM;
    if ucmd.flags & !known != 0 {
        return Err(libc::EINVAL);
    }
    if ucmd.flags & !served != 0 {
        state::log(|| {
            format!(
                "create_qp: flags {:#x} are not served",
                ucmd.flags & !served
            )
        });
        return Err(libc::EOPNOTSUPP);
    }
    // Dynamic-UAR contexts name the UAR page (static bfregs are not served).
    if ucmd.flags & cflags::UAR_PAGE_INDEX == 0 {
        return Err(libc::EINVAL);
    }
    let c = ctx.verbs.caps();
    let max_wqes = pow2(c.log_max_qp_sz());
    let count_ok = |n: u32| n == 0 || (n.is_power_of_two() && n <= max_wqes);
    if !count_ok(ucmd.sq_wqe_count) || !count_ok(ucmd.rq_wqe_count) {
        return Err(libc::EINVAL);
    }
    if ucmd.rq_wqe_count != 0 && !(MIN_RQ_WQE_SHIFT..=MAX_RQ_WQE_SHIFT).contains(&ucmd.rq_wqe_shift)
    {
        return Err(libc::EINVAL);
    }
    // A QP on an SRQ has no receive queue of its own.
    let own_rq = if srq.is_some() { 0 } else { cap.max_recv_wr };
    if cap.max_send_wr > ucmd.sq_wqe_count || own_rq > ucmd.rq_wqe_count {
        return Err(libc::EINVAL);
    }
    if srq.is_some() && ucmd.rq_wqe_count != 0 {
        return Err(libc::EINVAL);
    }
    let rq_len = u64::from(ucmd.rq_wqe_count) << ucmd.rq_wqe_shift;
    let buf_len = rq_len + u64::from(ucmd.sq_wqe_count) * SEND_WQE_BB;
    if buf_len == 0 {
        return Err(libc::EINVAL);
    }
    let program = |addr: u64, len: u64| -> Result<ProgramMemory, Errno> {
        Ok(ProgramMemory {
            addr: usize::try_from(addr).map_err(|_| libc::EFAULT)?,
            len: usize::try_from(len).map_err(|_| libc::EINVAL)?,
        })
    };
    let devx_ctx = ctx.verbs.devx();
    let rw = devx::access::LOCAL_WRITE | devx::access::REMOTE_WRITE | devx::access::REMOTE_READ;
    let buf = devx::Umem::register(devx_ctx, program(ucmd.buf_addr, buf_len)?, rw)
        .map_err(|e| verbs_errno(&e))?;
    // The doorbell record: receive then send counter, big-endian 32-bit.
    let dbr = devx::Umem::register(devx_ctx, program(ucmd.db_addr, 8)?, rw)
        .map_err(|e| verbs_errno(&e))?;

    let mut inbox = CreateQpIn::new();
    inbox.set_opcode(Opcode::CreateQp.raw());
    let qpc = inbox.qpc_mut();
    qpc.set_st(qp_type.service_type().raw());
    qpc.set_pm_state(PM_STATE_MIGRATED);
    qpc.set_pd(pdn);
    qpc.set_uar_page(ucmd.bfreg_index);
    qpc.set_ts_format(TS_FORMAT_DEFAULT);
    qpc.set_user_index(ucmd.uidx);
    if let Some((_, srqn)) = srq {
        qpc.set_rq_type(RQ_TYPE_SRQ);
        qpc.set_srqn_rmpn_xrqn(srqn);
    } else if ucmd.rq_wqe_count == 0 {
        qpc.set_rq_type(RQ_TYPE_ZERO_SIZE);
    } else {
        qpc.set_rq_type(RQ_TYPE_REGULAR);
        qpc.set_log_rq_size(ucmd.rq_wqe_count.trailing_zeros() as u8);
        qpc.set_log_rq_stride((ucmd.rq_wqe_shift - MIN_RQ_WQE_SHIFT) as u8);
    }
    qpc.set_no_sq(u8::from(ucmd.sq_wqe_count == 0));
    if ucmd.sq_wqe_count != 0 {
        qpc.set_log_sq_size(ucmd.sq_wqe_count.trailing_zeros() as u8);
    }
    qpc.set_cqn_snd(send_cqn);
    qpc.set_cqn_rcv(recv_cqn);
    qpc.set_dbr_umem_valid(1);
    qpc.set_dbr_umem_id(dbr.id());
    qpc.set_dbr_addr(0);
    inbox.set_wq_umem_id(buf.id());
    inbox.set_wq_umem_offset(0);
    inbox.set_wq_umem_valid(1);
    let obj = devx_ctx
        .create(inbox.as_bytes(), CreateQpOut::SIZE_BYTES)
        .map_err(|e| verbs_errno(&e))?;
    let qpn = obj.id();
    if let Some(ev) = ctx.async_events().as_ref() {
        ev.attach_qp(&obj, user_handle)?;
    }
    let handle = ctx.objects().insert(Object::Qp(Box::new(QpObj {
        obj,
        _buf: buf,
        _dbr: dbr,
        qp_type,
        pd_handle,
        send_cq,
        recv_cq,
        srq: srq.map(|(h, _)| h),
        pdn,
        send_cqn,
        recv_cqn,
        cap,
        sq_sig_all: flags & ids::IB_UVERBS_QP_CREATE_SQ_SIG_ALL != 0,
        state: qp_state::RESET,
        port: 0,
    })));
    ctx.watcher.start();
    req.output(ids::UVERBS_ATTR_CREATE_QP_RESP_CAP, cap.as_bytes())?;
    req.output(ids::UVERBS_ATTR_CREATE_QP_RESP_QP_NUM, &qpn.to_ne_bytes())?;
    let resp = uabi::Mlx5CreateQpResp {
        // A QP on a dynamically allocated UAR page has no static bfreg.
        bfreg_index: uabi::MLX5_IB_INVALID_BFREG,
        ..Default::default()
    };
    req.output(ids::UVERBS_ATTR_UHW_OUT, resp.as_bytes())?;
    req.set_data(ids::UVERBS_ATTR_CREATE_QP_HANDLE, u64::from(handle));
    state::log(|| format!("create_qp: {qp_type:?} qpn {qpn:#x}, handle {handle}"));
    Ok(())
}

/// QP_DESTROY: the number of the QP's async events the program read.
pub(super) fn destroy_qp(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        ids::UVERBS_ATTR_DESTROY_QP_HANDLE,
        ids::UVERBS_ATTR_DESTROY_QP_RESP,
    ])?;
    let handle = req.need(ids::UVERBS_ATTR_DESTROY_QP_HANDLE)?.data;
    require_out(req, ids::UVERBS_ATTR_DESTROY_QP_RESP, 4).map_err(|_| libc::EINVAL)?;
    let Object::Qp(qp) = take(ctx, handle, |o| matches!(o, Object::Qp(_)))? else {
        return Err(libc::EINVAL);
    };
    let qpn = qp.obj.id();
    let QpObj {
        obj,
        _buf,
        _dbr,
        qp_type,
        pd_handle,
        send_cq,
        recv_cq,
        srq,
        pdn,
        send_cqn,
        recv_cqn,
        cap,
        sq_sig_all,
        state,
        port,
    } = *qp;
    if let Err(e) = obj.destroy() {
        let back = Object::Qp(Box::new(QpObj {
            obj: *e.obj,
            _buf,
            _dbr,
            qp_type,
            pd_handle,
            send_cq,
            recv_cq,
            srq,
            pdn,
            send_cqn,
            recv_cqn,
            cap,
            sq_sig_all,
            state,
            port,
        }));
        return Err(put_back(ctx, handle, back, verbs_errno(&e.error)));
    }
    let read = ctx
        .async_events()
        .as_ref()
        .map_or(0, |ev| ev.detach_qp(qpn));
    req.output(ids::UVERBS_ATTR_DESTROY_QP_RESP, &read.to_ne_bytes())
}

/// `ib_modify_qp_is_ok` for RC, UC and UD: the attributes each transition
/// requires and allows (Linux 6.1 `qp_state_table`).
fn transition_ok(cur: u8, next: u8, t: QpType, mask: u32) -> bool {
    use qp_attr as a;
    use qp_state as s;
    let (req, opt) = match (cur, next) {
        (s::RESET | s::INIT | s::RTR | s::RTS | s::SQD | s::SQE | s::ERR, s::RESET)
        | (s::RESET | s::INIT | s::RTR | s::RTS | s::SQD | s::SQE | s::ERR, s::ERR) => (0, 0),
        (s::RESET, s::INIT) => match t {
            QpType::Ud => (a::PKEY_INDEX | a::PORT | a::QKEY, 0),
            _ => (a::PKEY_INDEX | a::PORT | a::ACCESS_FLAGS, 0),
        },
        (s::INIT, s::INIT) => match t {
            QpType::Ud => (0, a::PKEY_INDEX | a::PORT | a::QKEY),
            _ => (0, a::PKEY_INDEX | a::PORT | a::ACCESS_FLAGS),
        },
        (s::INIT, s::RTR) => match t {
            QpType::Ud => (0, a::PKEY_INDEX | a::QKEY),
            QpType::Uc => (
                a::AV | a::PATH_MTU | a::DEST_QPN | a::RQ_PSN,
                a::ALT_PATH | a::ACCESS_FLAGS | a::PKEY_INDEX,
            ),
            QpType::Rc => (
                a::AV
                    | a::PATH_MTU
                    | a::DEST_QPN
                    | a::RQ_PSN
                    | a::MAX_DEST_RD_ATOMIC
                    | a::MIN_RNR_TIMER,
                a::ALT_PATH | a::ACCESS_FLAGS | a::PKEY_INDEX,
            ),
        },
        (s::RTR, s::RTS) => match t {
            QpType::Ud => (a::SQ_PSN, a::CUR_STATE | a::QKEY),
            QpType::Uc => (
                a::SQ_PSN,
                a::CUR_STATE | a::ALT_PATH | a::ACCESS_FLAGS | a::PATH_MIG_STATE,
            ),
            QpType::Rc => (
                a::TIMEOUT | a::RETRY_CNT | a::RNR_RETRY | a::SQ_PSN | a::MAX_QP_RD_ATOMIC,
                a::CUR_STATE | a::ALT_PATH | a::ACCESS_FLAGS | a::MIN_RNR_TIMER | a::PATH_MIG_STATE,
            ),
        },
        (s::RTS, s::RTS) => match t {
            QpType::Ud => (0, a::CUR_STATE | a::QKEY),
            QpType::Uc => (
                0,
                a::CUR_STATE | a::ACCESS_FLAGS | a::ALT_PATH | a::PATH_MIG_STATE,
            ),
            QpType::Rc => (
                0,
                a::CUR_STATE | a::ACCESS_FLAGS | a::ALT_PATH | a::PATH_MIG_STATE | a::MIN_RNR_TIMER,
            ),
        },
        _ => return false,
    };
    let mask = mask & !a::STATE;
    mask & req == req && mask & !(req | opt) == 0
}

fn access_of(bits: u32) -> Result<AccessFlags, Errno> {
    AccessFlags::from_bits(bits).ok_or(libc::EINVAL)
}

/// The MAC the kernel's neighbour resolution would give for `dgid`:
/// multicast and link-local GIDs map directly, the device's own GIDs to its
/// own MAC; other peers of the emulated link are reached by their GID (the
/// engine routes by address), so the loopback neighbour's all-zero MAC is
/// recorded, as Linux resolves addresses on `lo`.
pub(super) fn resolve_dmac(ctx: &verbs::Context, port: u8, dgid: &Gid) -> [u8; 6] {
    if let Some(m) = verbs::mac_from_gid(dgid) {
        return m;
    }
    let len = ctx.query_port(port).map_or(0, |p| p.gid_tbl_len);
    for i in 0..len {
        let Ok(e) = ctx.query_gid(port, i as u16) else {
            break;
        };
        if !e.gid.is_zero() && e.gid == *dgid {
            return e.mac.unwrap_or_default();
        }
    }
    [0; 6]
}

/// The primary path of a MODIFY_QP as verbs names it.
fn ah_of(ctx: &verbs::Context, d: &uabi::QpDest, qp_port: u8) -> Result<AhAttr, Errno> {
    let port = if d.port_num == 0 { qp_port } else { d.port_num };
    let eth = ctx.link_layer() == LinkLayer::Ethernet;
    let grh = (d.is_global != 0).then_some(GlobalRoute {
        dgid: Gid(d.dgid),
        flow_label: d.flow_label,
        sgid_index: d.sgid_index,
        hop_limit: d.hop_limit,
        traffic_class: d.traffic_class,
    });
    if eth && grh.is_none() {
        // RoCE paths carry a GRH (rdma_check_ah_attr).
        return Err(libc::EINVAL);
    }
    let dmac = grh
        .as_ref()
        .filter(|_| eth)
        .map(|g| resolve_dmac(ctx, port, &g.dgid));
    Ok(AhAttr {
        port_num: port,
        dlid: d.dlid,
        sl: d.sl,
        src_path_bits: d.src_path_bits,
        static_rate: d.static_rate,
        grh,
        dmac,
        udp_sport: None,
    })
}

/// MODIFY_QP (write command): the transition the mask asks for, checked
/// as `ib_modify_qp_is_ok` checks it, built by `verbs::QpTarget`.
pub(super) fn modify_qp(ctx: &Ucontext, core_in: &[u8]) -> Result<(), Errno> {
    use qp_attr as a;
    let cmd = uabi::ModifyQp::read_from_prefix(core_in)
        .map(|(c, _)| c)
        .map_err(|_| libc::EINVAL)?;
    if cmd.attr_mask & !a::KNOWN != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let mut objects = ctx.objects();
    let Some(Object::Qp(qp)) = objects.table.get_mut(&cmd.qp_handle) else {
        return Err(libc::EINVAL);
    };
    let mask = cmd.attr_mask;
    let cur = if mask & a::CUR_STATE != 0 {
        cmd.cur_qp_state
    } else {
        qp.state
    };
    let next = if mask & a::STATE != 0 {
        cmd.qp_state
    } else {
        cur
    };
    if cur > qp_state::ERR || next > qp_state::ERR || !transition_ok(cur, next, qp.qp_type, mask) {
        return Err(libc::EINVAL);
    }
    if mask & (a::ALT_PATH | a::PATH_MIG_STATE | a::EN_SQD_ASYNC_NOTIFY) != 0 {
        state::log(|| "modify_qp: alternate paths and SQD notification are not served".into());
        return Err(libc::EOPNOTSUPP);
    }
    if mask & a::PORT != 0 && (cmd.port_num == 0 || cmd.port_num > ctx.verbs.num_ports()) {
        return Err(libc::EINVAL);
    }
    let access = if mask & a::ACCESS_FLAGS != 0 {
        Some(access_of(cmd.qp_access_flags)?)
    } else {
        None
    };
    let qkey = (mask & a::QKEY != 0).then_some(cmd.qkey);
    let pkey = (mask & a::PKEY_INDEX != 0).then_some(cmd.pkey_index);
    let rnr = (mask & a::MIN_RNR_TIMER != 0).then_some(cmd.min_rnr_timer);
    let target = qp.target(&ctx.verbs);
    let inbox = match (cur, next) {
        (_, qp_state::RESET) => target.reset_inbox(),
        (_, qp_state::ERR) => target.err_inbox(),
        (qp_state::RESET, qp_state::INIT) => {
            let mut init = InitAttr::new(cmd.port_num)
                .pkey_index(cmd.pkey_index)
                .access(access.unwrap_or(AccessFlags::NONE));
            if let Some(q) = qkey {
                init = init.qkey(q);
            }
            target.init_inbox(&init).map_err(verbs_err)?
        }
        (qp_state::INIT, qp_state::RTR) => {
            let mut rtr = if qp.qp_type == QpType::Ud {
                RtrAttr::ud()
            } else {
                let mtu = Mtu::from_raw(cmd.path_mtu).ok_or(libc::EINVAL)?;
                RtrAttr::new(
                    mtu,
                    cmd.dest_qp_num,
                    cmd.rq_psn,
                    ah_of(&ctx.verbs, &cmd.dest, qp.port)?,
                )
            };
            if qp.qp_type == QpType::Rc {
                rtr = rtr
                    .max_dest_rd_atomic(cmd.max_dest_rd_atomic)
                    .min_rnr_timer(cmd.min_rnr_timer);
            }
            rtr.access = access;
            rtr.pkey_index = pkey;
            rtr.qkey = qkey;
            target.rtr_inbox(&rtr).map_err(verbs_err)?
        }
        (qp_state::RTR, qp_state::RTS) => {
            let mut rts = RtsAttr::new(cmd.sq_psn);
            if qp.qp_type == QpType::Rc {
                rts = rts
                    .timeout(cmd.timeout)
                    .retry_cnt(cmd.retry_cnt)
                    .rnr_retry(cmd.rnr_retry)
                    .max_rd_atomic(cmd.max_rd_atomic);
            }
            rts.min_rnr_timer = rnr;
            rts.access = access;
            rts.qkey = qkey;
            target.rts_inbox(&rts).map_err(verbs_err)?
        }
        (qp_state::RTS, qp_state::RTS) => {
            let m = RtsModify {
                access,
                min_rnr_timer: rnr,
                qkey,
            };
            target.rts_modify_inbox(&m).map_err(verbs_err)?
        }
        _ => {
            state::log(|| format!("modify_qp: transition {cur} -> {next} is not served"));
            return Err(libc::EOPNOTSUPP);
        }
    };
    qp.obj
        .modify(&inbox, Rst2initQpOut::SIZE_BYTES)
        .map_err(|e| verbs_errno(&e))?;
    qp.state = next;
    if mask & a::PORT != 0 {
        qp.port = cmd.port_num;
    }
    if next == qp_state::RESET {
        qp.port = 0;
    }
    Ok(())
}

/// The uverbs state of a PRM QP state.
fn ib_state(s: QpState) -> u8 {
    match s {
        QpState::Rst => qp_state::RESET,
        QpState::Init => qp_state::INIT,
        QpState::Rtr => qp_state::RTR,
        QpState::Rts => qp_state::RTS,
        QpState::Sqer => qp_state::SQE,
        QpState::Sqd | QpState::Suspended => qp_state::SQD,
        QpState::Err => qp_state::ERR,
    }
}

/// QUERY_QP (write command): the device's QP context read back.
pub(super) fn query_qp(ctx: &Ucontext, req: &mut Request, core_in: &[u8]) -> Result<(), Errno> {
    let cmd = uabi::QueryQp::read_from_prefix(core_in)
        .map(|(c, _)| c)
        .map_err(|_| libc::EINVAL)?;
    require_out(
        req,
        ids::UVERBS_ATTR_CORE_OUT,
        std::mem::size_of::<uabi::QueryQpResp>(),
    )?;
    let (out, cap, sq_sig_all) = {
        let objects = ctx.objects();
        let Some(Object::Qp(qp)) = objects.table.get(&cmd.qp_handle) else {
            return Err(libc::EINVAL);
        };
        let mut inbox = QueryQpIn::new();
        inbox.set_opcode(Opcode::QueryQp.raw());
        inbox.set_qpn(qp.obj.id());
        let out = qp
            .obj
            .query(inbox.as_bytes(), QueryQpOut::SIZE_BYTES)
            .map_err(|e| verbs_errno(&e))?;
        (out, qp.cap, qp.sq_sig_all)
    };
    let out = QueryQpOut::from_slice(&out).ok_or(libc::EIO)?;
    let eth = ctx.verbs.link_layer() == LinkLayer::Ethernet;
    let qpc = out.qpc();
    // mlx5_ib answers the receive queue's real geometry (its WQE count and
    // the data segments a WQE holds), not the request: a program filling
    // the RQ finds it full there.
    let (max_recv_wr, max_recv_sge) = if qpc.rq_type() == RQ_TYPE_REGULAR {
        (1u32 << qpc.log_rq_size(), 1u32 << qpc.log_rq_stride())
    } else {
        (0, 0)
    };
    let a = verbs::QpAttr::from_qpc(qpc, eth, verbs::QpCap::default(), sq_sig_all);
    let dest = |ah: &AhAttr| {
        let g = ah.grh.unwrap_or_default();
        uabi::QpDest {
            dgid: g.dgid.0,
            flow_label: g.flow_label,
            dlid: ah.dlid,
            reserved: 0,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
            sl: ah.sl,
            src_path_bits: ah.src_path_bits,
            static_rate: ah.static_rate,
            is_global: u8::from(ah.grh.is_some()),
            port_num: ah.port_num,
        }
    };
    let state = ib_state(a.state);
    let resp = uabi::QueryQpResp {
        dest: dest(&a.ah_attr),
        alt_dest: uabi::QpDest::default(),
        max_send_wr: cap.max_send_wr,
        max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge,
        max_inline_data: cap.max_inline_data,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.access.bits(),
        pkey_index: a.pkey_index,
        alt_pkey_index: 0,
        qp_state: state,
        cur_qp_state: state,
        path_mtu: a.path_mtu.map_or(0, |m| m as u8),
        path_mig_state: uabi::MIG_MIGRATED,
        sq_draining: 0,
        max_rd_atomic: u8::try_from(a.max_rd_atomic).unwrap_or(u8::MAX),
        max_dest_rd_atomic: u8::try_from(a.max_dest_rd_atomic).unwrap_or(u8::MAX),
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: 0,
        alt_timeout: 0,
        sq_sig_all: u8::from(sq_sig_all),
        reserved: [0; 5],
    };
    req.output(ids::UVERBS_ATTR_CORE_OUT, resp.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::tests::{alloc_pd_cmd, destroy, open_context, run};
    use crate::uverbs::UverbsFile;
    use devx::kernel::abi::{obj, uar as uar_ids, IoctlAttr, IoctlCmd};

    /// Program memory that outlives the test's objects.
    fn leak(len: usize) -> u64 {
        Box::leak(vec![0u8; len].into_boxed_slice()).as_ptr() as u64
    }

    /// A UAR page id and a CQ handle of `file`.
    fn uar_and_cq(file: &UverbsFile) -> (u32, u32) {
        let (mut offset, mut length, mut page_id) = (0u64, 0u32, 0u32);
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
        assert_eq!(run(file, &mut uar), Ok(0));
        let ucmd = uabi::Mlx5CreateCq {
            buf_addr: leak(64 * 64),
            db_addr: leak(8),
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
                IoctlAttr::u32_in(ids::UVERBS_ATTR_CREATE_CQ_CQE, 63),
                IoctlAttr::u64_in(ids::UVERBS_ATTR_CREATE_CQ_USER_HANDLE, 1),
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
        assert_eq!(run(file, &mut cmd), Ok(0));
        (page_id, cmd.attrs[0].data as u32)
    }

    /// QP_CREATE as libibverbs sends it: (handle, qpn, driver response).
    fn create(
        file: &UverbsFile,
        qp_type: u64,
        pd: u32,
        cq: u32,
        ucmd: &uabi::Mlx5CreateQp,
    ) -> Result<(u32, u32, uabi::Mlx5CreateQpResp), Errno> {
        let cap = uabi::QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let (mut cap_out, mut qpn) = (uabi::QpCap::default(), 0u32);
        let mut resp = uabi::Mlx5CreateQpResp::default();
        let mut cmd = IoctlCmd::new(
            ids::UVERBS_OBJECT_QP,
            ids::UVERBS_METHOD_QP_CREATE,
            [
                IoctlAttr::new_obj(ids::UVERBS_ATTR_CREATE_QP_HANDLE),
                IoctlAttr::obj(ids::UVERBS_ATTR_CREATE_QP_PD_HANDLE, u64::from(pd)),
                IoctlAttr::obj(ids::UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE, u64::from(cq)),
                IoctlAttr::obj(ids::UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE, u64::from(cq)),
                IoctlAttr::u64_in(ids::UVERBS_ATTR_CREATE_QP_TYPE, qp_type),
                IoctlAttr::u64_in(ids::UVERBS_ATTR_CREATE_QP_USER_HANDLE, 9),
                IoctlAttr::ptr_in(ids::UVERBS_ATTR_CREATE_QP_CAP, cap.as_bytes()),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_CREATE_QP_RESP_CAP,
                    (&mut cap_out as *mut uabi::QpCap).cast(),
                    20,
                ),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_CREATE_QP_RESP_QP_NUM,
                    (&mut qpn as *mut u32).cast(),
                    4,
                ),
                IoctlAttr::ptr_in(ids::UVERBS_ATTR_UHW_IN, ucmd.as_bytes()),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_UHW_OUT,
                    (&mut resp as *mut uabi::Mlx5CreateQpResp).cast(),
                    std::mem::size_of::<uabi::Mlx5CreateQpResp>(),
                ),
            ],
        );
        run(file, &mut cmd)?;
        assert_eq!(cap_out, cap);
        Ok((cmd.attrs[0].data as u32, qpn, resp))
    }

    /// A write command through INVOKE_WRITE with an optional core output.
    fn write_cmd(
        file: &UverbsFile,
        cmd: u32,
        core_in: &[u8],
        out: &mut [u8],
    ) -> Result<i32, Errno> {
        let mut c = IoctlCmd::new(
            ids::UVERBS_OBJECT_DEVICE,
            ids::UVERBS_METHOD_INVOKE_WRITE,
            [
                IoctlAttr::u64_in(ids::UVERBS_ATTR_WRITE_CMD, u64::from(cmd)),
                IoctlAttr::ptr_in(ids::UVERBS_ATTR_CORE_IN, core_in),
                IoctlAttr::ptr_out(ids::UVERBS_ATTR_CORE_OUT, out.as_mut_ptr(), out.len()),
            ],
        );
        run(file, &mut c)
    }

    fn modify(file: &UverbsFile, m: &uabi::ModifyQp) -> Result<i32, Errno> {
        write_cmd(
            file,
            ids::IB_USER_VERBS_CMD_MODIFY_QP,
            m.as_bytes(),
            &mut [],
        )
    }

    fn query(file: &UverbsFile, handle: u32) -> Result<uabi::QueryQpResp, Errno> {
        let q = uabi::QueryQp {
            response: 0,
            qp_handle: handle,
            attr_mask: 0,
        };
        let mut resp = uabi::QueryQpResp::default();
        let out = resp.as_mut_bytes();
        write_cmd(file, ids::IB_USER_VERBS_CMD_QUERY_QP, q.as_bytes(), out)?;
        Ok(resp)
    }

    fn geometry(page_id: u32) -> uabi::Mlx5CreateQp {
        uabi::Mlx5CreateQp {
            buf_addr: leak(16 * 16 + 16 * 64),
            db_addr: leak(8),
            sq_wqe_count: 16,
            rq_wqe_count: 16,
            rq_wqe_shift: 4,
            flags: cflags::UAR_PAGE_INDEX | cflags::SCATTER_CQE,
            uidx: 7,
            bfreg_index: page_id,
            ..Default::default()
        }
    }

    #[test]
    fn rc_uc_and_ud_qps_are_created_brought_up_queried_and_destroyed() {
        use qp_attr as a;
        let (file, _) = open_context();
        let (pd, _) = alloc_pd_cmd(&file).unwrap();
        let (page_id, cq) = uar_and_cq(&file);
        let ctx = file.ucontext().unwrap();
        let gid = ctx.verbs.query_gid(1, 1).unwrap().gid;
        for (t, qp_type) in [
            (ids::IB_UVERBS_QPT_RC, QpType::Rc),
            (ids::IB_UVERBS_QPT_UC, QpType::Uc),
            (ids::IB_UVERBS_QPT_UD, QpType::Ud),
        ] {
            let (h, qpn, resp) = create(&file, t, pd, cq, &geometry(page_id)).unwrap();
            assert_ne!(qpn, 0);
            assert_eq!(resp.bfreg_index, uabi::MLX5_IB_INVALID_BFREG);
            assert_eq!(query(&file, h).unwrap().qp_state, qp_state::RESET);

            let mut m = uabi::ModifyQp {
                qp_handle: h,
                qp_state: qp_state::INIT,
                port_num: 1,
                attr_mask: a::STATE | a::PKEY_INDEX | a::PORT,
                ..Default::default()
            };
            if qp_type == QpType::Ud {
                m.attr_mask |= a::QKEY;
                m.qkey = 0x1111;
            } else {
                m.attr_mask |= a::ACCESS_FLAGS;
                m.qp_access_flags = (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).bits();
            }
            // A mask the transition does not take: EINVAL, as Linux answers.
            let mut bad = m;
            bad.attr_mask |= a::SQ_PSN;
            assert_eq!(modify(&file, &bad), Err(libc::EINVAL));
            bad = m;
            bad.attr_mask &= !a::PORT;
            assert_eq!(modify(&file, &bad), Err(libc::EINVAL));
            assert_eq!(modify(&file, &m), Ok(0));

            m.qp_state = qp_state::RTR;
            m.attr_mask = a::STATE;
            if qp_type != QpType::Ud {
                m.attr_mask |= a::AV | a::PATH_MTU | a::DEST_QPN | a::RQ_PSN;
                m.dest = uabi::QpDest {
                    dgid: gid.0,
                    sgid_index: 1,
                    hop_limit: 64,
                    is_global: 1,
                    port_num: 1,
                    ..Default::default()
                };
                m.path_mtu = Mtu::Mtu1024 as u8;
                m.dest_qp_num = qpn;
                m.rq_psn = 0x42;
            }
            if qp_type == QpType::Rc {
                m.attr_mask |= a::MAX_DEST_RD_ATOMIC | a::MIN_RNR_TIMER;
                m.max_dest_rd_atomic = 1;
                m.min_rnr_timer = 12;
            }
            assert_eq!(modify(&file, &m), Ok(0));

            m.qp_state = qp_state::RTS;
            m.attr_mask = a::STATE | a::SQ_PSN;
            m.sq_psn = 0x77;
            if qp_type == QpType::Rc {
                m.attr_mask |= a::TIMEOUT | a::RETRY_CNT | a::RNR_RETRY | a::MAX_QP_RD_ATOMIC;
                m.timeout = 14;
                m.retry_cnt = 7;
                m.rnr_retry = 7;
                m.max_rd_atomic = 1;
            }
            assert_eq!(modify(&file, &m), Ok(0));

            let q = query(&file, h).unwrap();
            assert_eq!(q.qp_state, qp_state::RTS, "{qp_type:?}");
            assert_eq!(q.sq_psn, 0x77);
            assert_eq!(q.max_send_wr, 16);
            if qp_type == QpType::Ud {
                assert_eq!(q.qkey, 0x1111);
            } else {
                assert_eq!(q.dest_qp_num, qpn);
                assert_eq!(q.rq_psn, 0x42);
                assert_eq!(q.path_mtu, Mtu::Mtu1024 as u8);
                assert_eq!(q.dest.dgid, gid.0);
                assert_eq!(q.dest.is_global, 1);
            }
            // RTS back to INIT is no transition.
            m.qp_state = qp_state::INIT;
            m.attr_mask = a::STATE;
            assert_eq!(modify(&file, &m), Err(libc::EINVAL));

            // The CQ and PD are in use while the QP lives.
            let (cqo, cqd) = (ids::UVERBS_OBJECT_CQ, ids::UVERBS_METHOD_CQ_DESTROY);
            let mut counts = [0u8; 8];
            let mut dcq = IoctlCmd::new(
                cqo,
                cqd,
                [
                    IoctlAttr::obj(ids::UVERBS_ATTR_DESTROY_CQ_HANDLE, u64::from(cq)),
                    IoctlAttr::ptr_out(ids::UVERBS_ATTR_DESTROY_CQ_RESP, counts.as_mut_ptr(), 8),
                ],
            );
            assert_eq!(run(&file, &mut dcq), Err(libc::EBUSY));
            let (pdo, pdd) = (ids::UVERBS_OBJECT_PD, ids::UVERBS_METHOD_PD_DESTROY);
            assert_eq!(destroy(&file, pdo, pdd, pd), Err(libc::EBUSY));

            let mut events = 0u32;
            let mut d = IoctlCmd::new(
                ids::UVERBS_OBJECT_QP,
                ids::UVERBS_METHOD_QP_DESTROY,
                [
                    IoctlAttr::obj(ids::UVERBS_ATTR_DESTROY_QP_HANDLE, u64::from(h)),
                    IoctlAttr::ptr_out(
                        ids::UVERBS_ATTR_DESTROY_QP_RESP,
                        (&mut events as *mut u32).cast(),
                        4,
                    ),
                ],
            );
            assert_eq!(run(&file, &mut d), Ok(0));
            assert_eq!(run(&file, &mut d), Err(libc::ENOENT));
            assert_eq!(query(&file, h).err(), Some(libc::EINVAL));
        }
    }

    /// A small deterministic generator (xorshift) for the fuzz tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn bytes(&mut self, out: &mut [u8]) {
            for b in out {
                *b = self.next() as u8;
            }
        }
    }

    /// Random requests get an errno or succeed; none crashes the library.
    #[test]
    fn random_modify_and_create_requests_get_errnos() {
        let (file, _) = open_context();
        let (pd, _) = alloc_pd_cmd(&file).unwrap();
        let (page_id, cq) = uar_and_cq(&file);
        let (h, _, _) = create(&file, ids::IB_UVERBS_QPT_RC, pd, cq, &geometry(page_id)).unwrap();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for i in 0..2000 {
            let mut m = uabi::ModifyQp::default();
            rng.bytes(m.as_mut_bytes());
            // Mostly this QP, mostly known states and masks, so the
            // requests reach past the first checks.
            if i % 4 != 0 {
                m.qp_handle = h;
                m.qp_state %= 8;
                m.cur_qp_state %= 8;
                m.attr_mask &= qp_attr::KNOWN;
            }
            let _ = modify(&file, &m);
            let _ = query(&file, h);
        }
        // Driver data with random fields over a buffer too small for most.
        let buf = leak(1 << 16);
        for _ in 0..500 {
            let mut g = geometry(page_id);
            g.buf_addr = buf;
            g.sq_wqe_count = 1 << (rng.next() % 20);
            g.rq_wqe_count = (1 << (rng.next() % 20)) & !(rng.next() as u32 & 1);
            g.rq_wqe_shift = (rng.next() % 16) as u32;
            g.flags = rng.next() as u32 & 0xfff;
            g.uidx = rng.next() as u32;
            g.bfreg_index = (rng.next() % 4) as u32;
            if let Ok((qh, _, _)) = create(&file, ids::IB_UVERBS_QPT_UD, pd, cq, &g) {
                let mut events = [0u8; 4];
                let mut d = IoctlCmd::new(
                    ids::UVERBS_OBJECT_QP,
                    ids::UVERBS_METHOD_QP_DESTROY,
                    [
                        IoctlAttr::obj(ids::UVERBS_ATTR_DESTROY_QP_HANDLE, u64::from(qh)),
                        IoctlAttr::ptr_out(
                            ids::UVERBS_ATTR_DESTROY_QP_RESP,
                            events.as_mut_ptr(),
                            4,
                        ),
                    ],
                );
                let _ = run(&file, &mut d);
            }
        }
        // The QP still answers.
        assert!(query(&file, h).is_ok());
    }

    #[test]
    fn bad_driver_data_is_refused_before_the_device() {
        let (file, _) = open_context();
        let (pd, _) = alloc_pd_cmd(&file).unwrap();
        let (page_id, cq) = uar_and_cq(&file);
        let rc = ids::IB_UVERBS_QPT_RC;
        let mut g = geometry(page_id);
        g.sq_wqe_count = 24;
        assert_eq!(create(&file, rc, pd, cq, &g).unwrap_err(), libc::EINVAL);
        g = geometry(page_id);
        g.flags &= !cflags::UAR_PAGE_INDEX;
        assert_eq!(create(&file, rc, pd, cq, &g).unwrap_err(), libc::EINVAL);
        g = geometry(page_id);
        g.flags |= cflags::TYPE_DCI;
        assert_eq!(create(&file, rc, pd, cq, &g).unwrap_err(), libc::EOPNOTSUPP);
        g = geometry(page_id);
        g.buf_addr = 8;
        assert_eq!(create(&file, rc, pd, cq, &g).unwrap_err(), libc::EFAULT);
        // A PD handle that is a CQ, and an XRC QP type.
        assert_eq!(
            create(&file, rc, cq, cq, &geometry(page_id)).unwrap_err(),
            libc::EINVAL
        );
        let xrc_ini = 9;
        assert_eq!(
            create(&file, xrc_ini, pd, cq, &geometry(page_id)).unwrap_err(),
            libc::EOPNOTSUPP
        );
    }

    #[test]
    fn transitions_need_the_attributes_linux_requires() {
        use qp_attr as a;
        use qp_state as s;
        let init = a::STATE | a::PKEY_INDEX | a::PORT | a::ACCESS_FLAGS;
        assert!(transition_ok(s::RESET, s::INIT, QpType::Rc, init));
        assert!(!transition_ok(
            s::RESET,
            s::INIT,
            QpType::Rc,
            init & !a::PORT
        ));
        assert!(!transition_ok(
            s::RESET,
            s::INIT,
            QpType::Rc,
            init | a::QKEY
        ));
        assert!(!transition_ok(s::RESET, s::INIT, QpType::Ud, init));
        let rtr = a::STATE
            | a::AV
            | a::PATH_MTU
            | a::DEST_QPN
            | a::RQ_PSN
            | a::MAX_DEST_RD_ATOMIC
            | a::MIN_RNR_TIMER;
        assert!(transition_ok(s::INIT, s::RTR, QpType::Rc, rtr));
        assert!(!transition_ok(s::INIT, s::RTR, QpType::Uc, rtr));
        assert!(!transition_ok(s::RESET, s::RTR, QpType::Rc, rtr));
        assert!(transition_ok(s::RTS, s::ERR, QpType::Ud, a::STATE));
        assert!(transition_ok(
            s::RTR,
            s::RTS,
            QpType::Ud,
            a::STATE | a::SQ_PSN
        ));
    }
}
