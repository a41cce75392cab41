//! Shared receive queues through mlx5_ib: SRQ_CREATE and SRQ_DESTROY
//! (ioctl), as `mlx5_ib_create_srq`'s user path answers them for basic
//! SRQs. The ring (a linked list of WQEs libmlx5 has already chained) and
//! the doorbell record are the program's memory, registered as UMEMs; the
//! device object is an RMP, as the Rust verbs' SRQs are.

use devx::kernel::abi::verbs as ids;
use prm_layouts::{CreateRmpIn, CreateRmpOut, Opcode};
use zerocopy::{FromBytes, IntoBytes};

use super::qp::verbs_errno;
use super::{put_back, take, Object, ProgramMemory, Ucontext};
use crate::abi as uabi;
use crate::state;
use crate::uverbs::{Errno, Request};

/// `rmpc.state`: ready.
const RMP_STATE_RDY: u8 = 1;
/// `wq.wq_type`: the WQEs form a linked list (their next-segment indexes).
const WQ_TYPE_LINKED_LIST: u8 = 0;
/// Smallest SRQ WQE (`mlx5_ib_create_srq`: at least 32 bytes).
const MIN_WQE: u32 = 32;
/// The next segment, and each data segment, of an SRQ WQE.
const NEXT_SEG: u32 = 16;
const DATA_SEG: u32 = 16;

/// An SRQ of the file (fields drop in order: the RMP before its memory).
pub(super) struct SrqObj {
    obj: devx::Obj,
    _buf: devx::Umem<ProgramMemory>,
    _dbr: devx::Umem<ProgramMemory>,
    pub(super) pd_handle: u32,
}

impl SrqObj {
    pub(super) fn srqn(&self) -> u32 {
        self.obj.id()
    }
}

fn u32_attr(req: &Request, id: u16) -> Result<Option<u32>, Errno> {
    req.const_in(id)?
        .map(|v| u32::try_from(v).map_err(|_| libc::EINVAL))
        .transpose()
}

/// SRQ_CREATE for a basic SRQ.
pub(super) fn create_srq(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        ids::UVERBS_ATTR_CREATE_SRQ_HANDLE,
        ids::UVERBS_ATTR_CREATE_SRQ_PD_HANDLE,
        ids::UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE,
        ids::UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE,
        ids::UVERBS_ATTR_CREATE_SRQ_USER_HANDLE,
        ids::UVERBS_ATTR_CREATE_SRQ_MAX_WR,
        ids::UVERBS_ATTR_CREATE_SRQ_MAX_SGE,
        ids::UVERBS_ATTR_CREATE_SRQ_LIMIT,
        ids::UVERBS_ATTR_CREATE_SRQ_MAX_NUM_TAGS,
        ids::UVERBS_ATTR_CREATE_SRQ_TYPE,
        ids::UVERBS_ATTR_CREATE_SRQ_EVENT_FD,
        ids::UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR,
        ids::UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE,
        ids::UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM,
        ids::UVERBS_ATTR_UHW_IN,
        ids::UVERBS_ATTR_UHW_OUT,
    ])?;
    req.need(ids::UVERBS_ATTR_CREATE_SRQ_HANDLE)?;
    req.need(ids::UVERBS_ATTR_CREATE_SRQ_USER_HANDLE)?;
    let srq_type = req
        .const_in(ids::UVERBS_ATTR_CREATE_SRQ_TYPE)?
        .ok_or(libc::EINVAL)?;
    if srq_type != ids::IB_UVERBS_SRQT_BASIC
        || req.attr(ids::UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE).is_some()
        || req.attr(ids::UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE).is_some()
        || req.attr(ids::UVERBS_ATTR_CREATE_SRQ_MAX_NUM_TAGS).is_some()
    {
        state::log(|| "create_srq: XRC and tag-matching SRQs are not served".into());
        return Err(libc::EOPNOTSUPP);
    }
    let pd_handle = u32::try_from(req.need(ids::UVERBS_ATTR_CREATE_SRQ_PD_HANDLE)?.data)
        .map_err(|_| libc::EINVAL)?;
    let pdn = match ctx.objects().table.get(&pd_handle) {
        Some(Object::Pd(pd)) => pd.pdn(),
        _ => return Err(libc::EINVAL),
    };
    let max_wr = u32_attr(req, ids::UVERBS_ATTR_CREATE_SRQ_MAX_WR)?.ok_or(libc::EINVAL)?;
    let max_sge = u32_attr(req, ids::UVERBS_ATTR_CREATE_SRQ_MAX_SGE)?.ok_or(libc::EINVAL)?;
    let limit = u32_attr(req, ids::UVERBS_ATTR_CREATE_SRQ_LIMIT)?.unwrap_or(0);
    for id in [
        ids::UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR,
        ids::UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE,
    ] {
        req.need(id)?;
    }
    let dev = ctx.verbs.query_device().map_err(|e| e.errno())?;
    if max_wr == 0 || max_wr > dev.max_srq_wr || max_sge > dev.max_srq_sge || limit > max_wr {
        return Err(libc::EINVAL);
    }
    let blob = req.input(ids::UVERBS_ATTR_UHW_IN)?.unwrap_or_default();
    let mut padded = [0u8; std::mem::size_of::<uabi::Mlx5CreateSrq>()];
    if blob.len() < std::mem::offset_of!(uabi::Mlx5CreateSrq, uidx) {
        return Err(libc::EINVAL);
    }
    let n = blob.len().min(padded.len());
    padded[..n].copy_from_slice(&blob[..n]);
    let ucmd = uabi::Mlx5CreateSrq::read_from_bytes(&padded).map_err(|_| libc::EINVAL)?;
    if ucmd.flags & !uabi::MLX5_SRQ_FLAG_SIGNATURE != 0
        || ucmd.reserved0 != 0
        || ucmd.reserved1 != 0
    {
        return Err(libc::EINVAL);
    }
    if ucmd.flags != 0 {
        state::log(|| "create_srq: WQE signatures are not served".into());
        return Err(libc::EOPNOTSUPP);
    }
    // The geometry libmlx5 laid out, as mlx5_ib derives it.
    let count = (max_wr + 1)
        .checked_next_power_of_two()
        .ok_or(libc::EINVAL)?;
    let desc = (NEXT_SEG + max_sge * DATA_SEG)
        .checked_next_power_of_two()
        .ok_or(libc::EINVAL)?
        .max(MIN_WQE);
    let program = |addr: u64, len: u64| -> Result<ProgramMemory, Errno> {
        Ok(ProgramMemory {
            addr: usize::try_from(addr).map_err(|_| libc::EFAULT)?,
            len: usize::try_from(len).map_err(|_| libc::EINVAL)?,
        })
    };
    let devx_ctx = ctx.verbs.devx();
    let rw = devx::access::LOCAL_WRITE | devx::access::REMOTE_WRITE | devx::access::REMOTE_READ;
    let buf_len = u64::from(count) * u64::from(desc);
    let buf = devx::Umem::register(devx_ctx, program(ucmd.buf_addr, buf_len)?, rw)
        .map_err(|e| verbs_errno(&e))?;
    // The doorbell record: the big-endian receive counter, in the 8-byte
    // record the device reads (libmlx5 hands out records a cache line apart).
    let dbr = devx::Umem::register(devx_ctx, program(ucmd.db_addr, 8)?, rw)
        .map_err(|e| verbs_errno(&e))?;

    let mut inbox = CreateRmpIn::new();
    inbox.set_opcode(Opcode::CreateRmp.raw());
    let rmpc = inbox.ctx_mut();
    rmpc.set_state(RMP_STATE_RDY);
    let wq = rmpc.wq_mut();
    wq.set_wq_type(WQ_TYPE_LINKED_LIST);
    wq.set_pd(pdn);
    wq.set_log_wq_stride(desc.trailing_zeros() as u8);
    wq.set_log_wq_sz(count.trailing_zeros() as u8);
    wq.set_log_wq_pg_sz(0);
    wq.set_lwm(u16::try_from(limit).map_err(|_| libc::EINVAL)?);
    wq.set_dbr_umem_valid(1);
    wq.set_wq_umem_valid(1);
    wq.set_dbr_umem_id(dbr.id());
    wq.set_dbr_addr(0);
    wq.set_wq_umem_id(buf.id());
    wq.set_wq_umem_offset(0);
    let obj = devx_ctx
        .create(inbox.as_bytes(), CreateRmpOut::SIZE_BYTES)
        .map_err(|e| verbs_errno(&e))?;
    let srqn = obj.id();
    let handle = ctx.objects().insert(Object::Srq(Box::new(SrqObj {
        obj,
        _buf: buf,
        _dbr: dbr,
        pd_handle,
    })));
    req.output(
        ids::UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR,
        &(count - 1).to_ne_bytes(),
    )?;
    req.output(
        ids::UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE,
        &((desc - NEXT_SEG) / DATA_SEG).to_ne_bytes(),
    )?;
    req.output(
        ids::UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM,
        &srqn.to_ne_bytes(),
    )?;
    let resp = uabi::Mlx5CreateSrqResp { srqn, reserved: 0 };
    req.output(ids::UVERBS_ATTR_UHW_OUT, resp.as_bytes())?;
    req.set_data(ids::UVERBS_ATTR_CREATE_SRQ_HANDLE, u64::from(handle));
    state::log(|| format!("create_srq: srqn {srqn:#x}, {count} WQEs of {desc} bytes"));
    Ok(())
}

/// SRQ_DESTROY: EBUSY while a QP receives from it.
pub(super) fn destroy_srq(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[
        ids::UVERBS_ATTR_DESTROY_SRQ_HANDLE,
        ids::UVERBS_ATTR_DESTROY_SRQ_RESP,
    ])?;
    let handle = req.need(ids::UVERBS_ATTR_DESTROY_SRQ_HANDLE)?.data;
    let in_use = ctx
        .objects()
        .table
        .values()
        .any(|o| matches!(o, Object::Qp(q) if q.srq.is_some_and(|s| u64::from(s) == handle)));
    if in_use {
        return Err(libc::EBUSY);
    }
    let Object::Srq(srq) = take(ctx, handle, |o| matches!(o, Object::Srq(_)))? else {
        return Err(libc::EINVAL);
    };
    let SrqObj {
        obj,
        _buf,
        _dbr,
        pd_handle,
    } = *srq;
    if let Err(e) = obj.destroy() {
        let back = Object::Srq(Box::new(SrqObj {
            obj: *e.obj,
            _buf,
            _dbr,
            pd_handle,
        }));
        return Err(put_back(ctx, handle, back, verbs_errno(&e.error)));
    }
    // `struct ib_uverbs_destroy_srq_resp`: async events reported (none).
    req.output(ids::UVERBS_ATTR_DESTROY_SRQ_RESP, &0u32.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::tests::{alloc_pd_cmd, destroy, open_context, run};
    use crate::uverbs::UverbsFile;
    use devx::kernel::abi::{IoctlAttr, IoctlCmd};

    fn leak(len: usize) -> u64 {
        Box::leak(vec![0u8; len].into_boxed_slice()).as_ptr() as u64
    }

    /// SRQ_CREATE as libibverbs sends it: (handle, max_wr, max_sge, srqn).
    fn create(
        file: &UverbsFile,
        pd: u32,
        max_wr: u32,
        max_sge: u32,
        ucmd: &uabi::Mlx5CreateSrq,
    ) -> Result<(u32, u32, u32, u32), Errno> {
        let (mut wr, mut sge) = (0u32, 0u32);
        let mut resp = uabi::Mlx5CreateSrqResp::default();
        let mut cmd = IoctlCmd::new(
            ids::UVERBS_OBJECT_SRQ,
            ids::UVERBS_METHOD_SRQ_CREATE,
            [
                IoctlAttr::new_obj(ids::UVERBS_ATTR_CREATE_SRQ_HANDLE),
                IoctlAttr::obj(ids::UVERBS_ATTR_CREATE_SRQ_PD_HANDLE, u64::from(pd)),
                IoctlAttr::u64_in(ids::UVERBS_ATTR_CREATE_SRQ_TYPE, ids::IB_UVERBS_SRQT_BASIC),
                IoctlAttr::u64_in(ids::UVERBS_ATTR_CREATE_SRQ_USER_HANDLE, 5),
                IoctlAttr::u32_in(ids::UVERBS_ATTR_CREATE_SRQ_MAX_WR, max_wr),
                IoctlAttr::u32_in(ids::UVERBS_ATTR_CREATE_SRQ_MAX_SGE, max_sge),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR,
                    (&mut wr as *mut u32).cast(),
                    4,
                ),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE,
                    (&mut sge as *mut u32).cast(),
                    4,
                ),
                IoctlAttr::ptr_in(ids::UVERBS_ATTR_UHW_IN, ucmd.as_bytes()),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_UHW_OUT,
                    (&mut resp as *mut uabi::Mlx5CreateSrqResp).cast(),
                    8,
                ),
            ],
        );
        run(file, &mut cmd).map(|_| (cmd.attrs[0].data as u32, wr, sge, resp.srqn))
    }

    #[test]
    fn srqs_report_their_geometry_and_refuse_bad_requests() {
        let (file, _) = open_context();
        let (pd, _) = alloc_pd_cmd(&file).unwrap();
        let ucmd = uabi::Mlx5CreateSrq {
            buf_addr: leak(128 * 64),
            db_addr: leak(8),
            ..Default::default()
        };
        // 100 WRs: 128 WQEs, one kept unused; 3 SGEs: 64-byte WQEs.
        let (h, wr, sge, srqn) = create(&file, pd, 100, 3, &ucmd).unwrap();
        assert_eq!((wr, sge), (127, 3));
        assert_ne!(srqn, 0);
        assert_eq!(create(&file, pd, 0, 1, &ucmd).unwrap_err(), libc::EINVAL);
        assert_eq!(
            create(&file, pd, 1 << 30, 1, &ucmd).unwrap_err(),
            libc::EINVAL
        );
        let mut bad = ucmd;
        bad.flags = 1 << 5;
        assert_eq!(create(&file, pd, 100, 1, &bad).unwrap_err(), libc::EINVAL);
        bad = ucmd;
        bad.db_addr = 8;
        assert_eq!(create(&file, pd, 100, 1, &bad).unwrap_err(), libc::EFAULT);
        assert_eq!(create(&file, h, 100, 1, &ucmd).unwrap_err(), libc::EINVAL);

        let (pdo, pdd) = (ids::UVERBS_OBJECT_PD, ids::UVERBS_METHOD_PD_DESTROY);
        assert_eq!(destroy(&file, pdo, pdd, pd), Err(libc::EBUSY));
        let mut events = 0u32;
        let mut d = IoctlCmd::new(
            ids::UVERBS_OBJECT_SRQ,
            ids::UVERBS_METHOD_SRQ_DESTROY,
            [
                IoctlAttr::obj(ids::UVERBS_ATTR_DESTROY_SRQ_HANDLE, u64::from(h)),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_DESTROY_SRQ_RESP,
                    (&mut events as *mut u32).cast(),
                    4,
                ),
            ],
        );
        assert_eq!(run(&file, &mut d), Ok(0));
        assert_eq!(run(&file, &mut d), Err(libc::ENOENT));
        assert_eq!(destroy(&file, pdo, pdd, pd), Ok(0));
    }
}
