//! Address handles through mlx5_ib: CREATE_AH (write command carried by
//! INVOKE_WRITE) and AH_DESTROY (ioctl). On mlx5 an AH is no device object:
//! libmlx5 builds the address vector itself and asks the kernel only for
//! the destination MAC of a RoCE address, which `mlx5_ib_create_ah`
//! returns in its driver response. The attributes are checked by
//! `verbs::Ah::create`, the Rust verbs' own AH.

use devx::kernel::abi::verbs as ids;
use verbs::{Gid, GlobalRoute, LinkLayer};
use zerocopy::{FromBytes, IntoBytes};

use super::qp::{resolve_dmac, verbs_err};
use super::{require_out, take, Object, Ucontext};
use crate::abi as uabi;
use crate::uverbs::{Errno, Request};

/// CREATE_AH: the AH handle, and the destination MAC for RoCE.
pub(super) fn create_ah(ctx: &Ucontext, req: &mut Request, core_in: &[u8]) -> Result<(), Errno> {
    let cmd = uabi::CreateAh::read_from_prefix(core_in)
        .map(|(c, _)| c)
        .map_err(|_| libc::EINVAL)?;
    require_out(req, ids::UVERBS_ATTR_CORE_OUT, 4)?;
    let a = cmd.attr;
    let pd = match ctx.objects().table.get(&cmd.pd_handle) {
        Some(Object::Pd(pd)) => pd.clone(),
        _ => return Err(libc::EINVAL),
    };
    if a.port_num == 0 || a.port_num > ctx.verbs.num_ports() {
        return Err(libc::EINVAL);
    }
    let eth = ctx.verbs.link_layer() == LinkLayer::Ethernet;
    let grh = (a.is_global != 0).then_some(GlobalRoute {
        dgid: Gid(a.dgid),
        flow_label: a.flow_label,
        sgid_index: a.sgid_index,
        hop_limit: a.hop_limit,
        traffic_class: a.traffic_class,
    });
    let dmac = match (&grh, eth) {
        (Some(g), true) => Some(resolve_dmac(&ctx.verbs, a.port_num, &g.dgid)),
        // RoCE addresses carry a GRH (rdma_check_ah_attr).
        (None, true) => return Err(libc::EINVAL),
        (_, false) => None,
    };
    let attr = verbs::AhAttr {
        port_num: a.port_num,
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        grh,
        dmac,
        udp_sport: None,
    };
    let ah = verbs::Ah::create(&pd, &attr).map_err(verbs_err)?;
    let handle = ctx.objects().insert(Object::Ah {
        _ah: ah,
        pd_handle: cmd.pd_handle,
    });
    req.output(ids::UVERBS_ATTR_CORE_OUT, &handle.to_ne_bytes())?;
    if let Some(n) = req.out_len(ids::UVERBS_ATTR_UHW_OUT) {
        // mlx5_ib answers up to the MAC and refuses a shorter buffer.
        let min = std::mem::offset_of!(uabi::Mlx5CreateAhResp, reserved);
        if n < min {
            let _ = take(ctx, u64::from(handle), |o| matches!(o, Object::Ah { .. }));
            return Err(libc::EINVAL);
        }
        let resp = uabi::Mlx5CreateAhResp {
            response_length: min as u32,
            dmac: dmac.unwrap_or_default(),
            reserved: [0; 6],
        };
        req.output(ids::UVERBS_ATTR_UHW_OUT, &resp.as_bytes()[..min])?;
    }
    Ok(())
}

/// AH_DESTROY.
pub(super) fn destroy_ah(ctx: &Ucontext, req: &mut Request) -> Result<(), Errno> {
    req.known(&[ids::UVERBS_ATTR_DESTROY_AH_HANDLE])?;
    let handle = req.need(ids::UVERBS_ATTR_DESTROY_AH_HANDLE)?.data;
    take(ctx, handle, |o| matches!(o, Object::Ah { .. })).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::tests::{alloc_pd_cmd, destroy, open_context, run};
    use devx::kernel::abi::{IoctlAttr, IoctlCmd};

    fn create(
        file: &crate::uverbs::UverbsFile,
        cmd: &uabi::CreateAh,
    ) -> Result<(u32, uabi::Mlx5CreateAhResp), Errno> {
        let (mut handle, mut resp) = (0u32, uabi::Mlx5CreateAhResp::default());
        let mut c = IoctlCmd::new(
            ids::UVERBS_OBJECT_DEVICE,
            ids::UVERBS_METHOD_INVOKE_WRITE,
            [
                IoctlAttr::u64_in(
                    ids::UVERBS_ATTR_WRITE_CMD,
                    u64::from(ids::IB_USER_VERBS_CMD_CREATE_AH),
                ),
                IoctlAttr::ptr_in(ids::UVERBS_ATTR_CORE_IN, cmd.as_bytes()),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_CORE_OUT,
                    (&mut handle as *mut u32).cast(),
                    4,
                ),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_UHW_OUT,
                    (&mut resp as *mut uabi::Mlx5CreateAhResp).cast(),
                    std::mem::size_of::<uabi::Mlx5CreateAhResp>(),
                ),
            ],
        );
        run(file, &mut c).map(|_| (handle, resp))
    }

    #[test]
    fn roce_address_handles_answer_the_destination_mac() {
        let (file, _) = open_context();
        let (pd, _) = alloc_pd_cmd(&file).unwrap();
        let ctx = file.ucontext().unwrap();
        let own = ctx.verbs.query_gid(1, 1).unwrap();
        let mut cmd = uabi::CreateAh {
            pd_handle: pd,
            attr: uabi::AhAttr {
                dgid: own.gid.0,
                sgid_index: 1,
                hop_limit: 64,
                is_global: 1,
                port_num: 1,
                ..Default::default()
            },
            ..Default::default()
        };
        let (h, resp) = create(&file, &cmd).unwrap();
        assert_eq!(Some(resp.dmac), own.mac);
        assert_eq!(resp.response_length, 10);
        // RoCE needs a GRH; the port and the PD must exist.
        cmd.attr.is_global = 0;
        assert_eq!(create(&file, &cmd).unwrap_err(), libc::EINVAL);
        cmd.attr.is_global = 1;
        cmd.attr.port_num = 2;
        assert_eq!(create(&file, &cmd).unwrap_err(), libc::EINVAL);
        cmd.attr.port_num = 1;
        cmd.pd_handle = h;
        assert_eq!(create(&file, &cmd).unwrap_err(), libc::EINVAL);

        let (pdo, pdd) = (ids::UVERBS_OBJECT_PD, ids::UVERBS_METHOD_PD_DESTROY);
        assert_eq!(destroy(&file, pdo, pdd, pd), Err(libc::EBUSY));
        let (aho, ahd) = (ids::UVERBS_OBJECT_AH, ids::UVERBS_METHOD_AH_DESTROY);
        assert_eq!(destroy(&file, aho, ahd, h), Ok(0));
        assert_eq!(destroy(&file, aho, ahd, h), Err(libc::ENOENT));
        assert_eq!(destroy(&file, pdo, pdd, pd), Ok(0));
    }
}
