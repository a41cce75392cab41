//! GET_CONTEXT: the ucontext of a uverbs file, and the mlx5 driver request
//! check that both the ioctl and the write() command go through.

use crate::kernel::abi::{
    self, verbs, AllocUcontextReq, UcontextResp, ALLOC_UCONTEXT_RESP_LEN, MLX5_IB_ALLOC_UCTX_DEVX,
    MLX5_LIB_CAP_DYN_UAR,
};
use crate::kernel::fake::ctx::Ctx;
use crate::kernel::fake::state::{Config, State};
use crate::kernel::sys::{Errno, SysResult};

/// The ioctl GET_CONTEXT method.
pub(super) fn get_context(s: &mut State, file: u32, ctx: &mut Ctx<'_>) -> SysResult<i32> {
    if s.files.get(&file).is_some_and(|f| f.ctx.is_some()) {
        return Err(Errno::EINVAL);
    }
    let blob = ctx.input(verbs::UVERBS_ATTR_UHW_IN).unwrap_or(&[]).to_vec();
    let (resp, devx) = alloc_ucontext(&s.cfg, &blob)?;
    ctx.write_out(
        verbs::UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS,
        &s.cfg.num_comp_vectors.to_ne_bytes(),
    )?;
    ctx.write_out(
        verbs::UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT,
        &1u64.to_ne_bytes(),
    )?;
    ctx.write_out(verbs::UVERBS_ATTR_UHW_OUT, &resp.to_bytes())?;
    if let Some(f) = s.files.get_mut(&file) {
        f.ctx = Some(devx);
    }
    Ok(0)
}

/// `mlx5_ib_alloc_ucontext`: checks the driver request and builds the response.
pub(in crate::kernel::fake) fn alloc_ucontext(
    cfg: &Config,
    blob: &[u8],
) -> SysResult<(UcontextResp, bool)> {
    if blob.len() == 8 {
        // The v0 request: no flags, no DEVX, static bfregs.
        let mut resp = cfg.ucontext;
        resp.response_length = ALLOC_UCONTEXT_RESP_LEN as u32;
        return Ok((resp, false));
    }
    if blob.len() < 16 {
        return Err(Errno::EINVAL);
    }
    let (req, reserved) = AllocUcontextReq::from_bytes(blob);
    if req.flags & !MLX5_IB_ALLOC_UCTX_DEVX != 0 || req.comp_mask != 0 || reserved {
        return Err(Errno::EOPNOTSUPP);
    }
    if blob.len() > abi::ALLOC_UCONTEXT_REQ_LEN
        && blob[abi::ALLOC_UCONTEXT_REQ_LEN..].iter().any(|&b| b != 0)
    {
        return Err(Errno::EOPNOTSUPP);
    }
    let total = req.total_num_bfregs.saturating_add(1) & !1;
    if req.num_low_latency_bfregs > total.wrapping_sub(1) {
        return Err(Errno::EINVAL);
    }
    let dyn_uar = req.lib_caps & MLX5_LIB_CAP_DYN_UAR != 0;
    if !dyn_uar && total == 0 {
        return Err(Errno::EINVAL);
    }
    if !dyn_uar && total > 512 {
        return Err(Errno::ENOMEM);
    }
    let devx = req.flags & MLX5_IB_ALLOC_UCTX_DEVX != 0;
    if devx && !cfg.devx {
        return Err(Errno::EINVAL);
    }
    let mut resp = cfg.ucontext;
    resp.response_length = ALLOC_UCONTEXT_RESP_LEN as u32;
    resp.cqe_version = resp.cqe_version.min(req.max_cqe_version);
    resp.tot_bfregs = if dyn_uar { 0 } else { total };
    Ok((resp, devx))
}

/// QUERY_GID_TABLE: the configured entries, each cut or zero-padded to the
/// caller's entry size; EINVAL when they do not all fit, as in Linux.
pub(super) fn query_gid_table(s: &mut State, ctx: &mut Ctx<'_>) -> SysResult<i32> {
    let entry_size = ctx
        .input_u64(verbs::UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or(Errno::EINVAL)?;
    let room = ctx.out_len(verbs::UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES) / entry_size;
    let table = &s.cfg.gid_table;
    if room == 0 || table.len() > room {
        return Err(Errno::EINVAL);
    }
    let mut out = vec![0u8; table.len() * entry_size];
    for (dst, e) in out.chunks_exact_mut(entry_size).zip(table) {
        let b = abi::gid_entry_to_bytes(e);
        let n = b.len().min(entry_size);
        dst[..n].copy_from_slice(&b[..n]);
    }
    ctx.write_out(verbs::UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES, &out)?;
    ctx.write_out(
        verbs::UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES,
        &(table.len() as u64).to_ne_bytes(),
    )?;
    Ok(0)
}
