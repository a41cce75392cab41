//! `query_device`: the verbs limits, derived from the general capabilities the
//! way the mlx5 kernel driver derives `ib_device_attr` (prm-guide §7).

use prm_layouts::enums::HcaCapType;
use prm_layouts::CmdHcaCap;

use crate::context::{Context, LinkLayer};
use crate::error::Result;

/// Atomic operation support (`ibv_atomic_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicCap {
    /// No atomics.
    None,
    /// Atomic within this HCA (8-byte compare-and-swap and fetch-and-add,
    /// with responses in host endianness).
    Hca,
    /// Atomic with respect to the CPU as well.
    Global,
}

/// Device capability flags (`ibv_device_cap_flags`), one field per feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceCapFlags {
    pub rc: bool,
    pub uc: bool,
    pub ud: bool,
    pub xrc: bool,
    pub dc: bool,
    /// Raw Ethernet queues (SQ/RQ/TIR/TIS) exist.
    pub raw_packet: bool,
    pub roce: bool,
    pub atomic: bool,
    pub resize_cq: bool,
    pub cq_moderation: bool,
    /// Memory windows of type 1 and 2B.
    pub mem_window: bool,
    pub auto_path_migration: bool,
    pub bad_pkey_counter: bool,
    pub bad_qkey_counter: bool,
    pub block_multicast_loopback: bool,
    pub ud_source_qpn: bool,
}

/// Device attributes (`ibv_device_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    pub fw_ver: String,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub cap_flags: DeviceCapFlags,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    /// RD is not implemented by mlx5: always 0.
    pub max_ee_rd_atom: u32,
    pub max_res_rd_atom: u64,
    pub max_qp_init_rd_atom: u32,
    pub max_ee_init_rd_atom: u32,
    pub atomic_cap: AtomicCap,
    pub max_ee: u32,
    pub max_rdd: u32,
    pub max_mw: u32,
    pub max_raw_ipv6_qp: u32,
    pub max_raw_ethy_qp: u32,
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u64,
    /// Address handles are user-space address vectors: no device limit.
    pub max_ah: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_pkeys: u32,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    /// Free-running clock frequency (`device_frequency_khz`).
    pub hca_core_clock_khz: u64,
    pub link_layer: LinkLayer,
}

/// Bytes of a send WQE before its scatter/gather list: ctrl + raddr segments.
const SQ_SGE_OVERHEAD: u32 = 32;
/// The kernel caps send WQEs at 512 bytes when deriving SGE limits.
const SQ_WQE_SGE_CAP: u32 = 512;
/// `MLX5_MAX_SGE_RD`: RDMA read SGEs that fit a 512-byte WQE.
const MAX_SGE_RD: u32 = (512 - 16 - 16) / 16;

fn pow2(log: u32) -> u32 {
    if log >= 32 {
        u32::MAX
    } else {
        1 << log
    }
}

/// Limits derived from the general capabilities alone; shared by
/// `query_device` and the argument checks of the object builders.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_qp_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_cqe: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_wqe_sz_sq: u32,
    pub max_wqe_sz_rq: u32,
    pub max_qp_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
}

impl Limits {
    pub(crate) fn from_caps(c: &CmdHcaCap) -> Limits {
        let max_wqe_sz_sq = u32::from(c.max_wqe_sz_sq());
        let max_wqe_sz_rq = u32::from(c.max_wqe_sz_rq());
        let max_recv_sge = max_wqe_sz_rq / 16;
        Limits {
            max_qp_wr: pow2(u32::from(c.log_max_qp_sz())),
            max_send_sge: max_wqe_sz_sq
                .min(SQ_WQE_SGE_CAP)
                .saturating_sub(SQ_SGE_OVERHEAD)
                / 16,
            max_recv_sge,
            max_cqe: pow2(u32::from(c.log_max_cq_sz())).saturating_sub(1),
            max_srq_wr: pow2(u32::from(c.log_max_srq_sz())).saturating_sub(1),
            max_srq_sge: max_recv_sge.saturating_sub(1),
            max_wqe_sz_sq,
            max_wqe_sz_rq,
            max_qp_rd_atom: pow2(u32::from(c.log_max_ra_req_qp())),
            max_qp_init_rd_atom: pow2(u32::from(c.log_max_ra_res_qp())),
        }
    }
}

/// `MLX5_ATOMIC_OPS_CMP_SWAP | MLX5_ATOMIC_OPS_FETCH_ADD`.
const ATOMIC_OPS_STANDARD: u16 = 0x3;
/// `MLX5_ATOMIC_SIZE_QP_8BYTES`.
const ATOMIC_SIZE_QP_8B: u16 = 1 << 3;

impl Context {
    pub(crate) fn limits(&self) -> Limits {
        Limits::from_caps(self.caps())
    }

    /// Device attributes (`ibv_query_device`). Reads the vport context for the
    /// GUIDs and, when the device has atomics, the ATOMIC capability page.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let c = self.caps();
        let l = self.limits();
        let info = self.device().info().clone();
        let vport = self.query_vport_guids("query_device")?;
        let atomic_cap = self.atomic_cap()?;
        let max_qp = pow2(u32::from(c.log_max_qp()));
        let max_mcast_grp = pow2(u32::from(c.log_max_mcg()));
        let max_mcast_qp_attach = c.max_qp_mcg();
        let mem_window = c.imaicl() != 0;
        let cap_flags = DeviceCapFlags {
            rc: c.rc() != 0,
            uc: c.uc() != 0,
            ud: c.ud() != 0,
            xrc: c.xrc() != 0,
            dc: c.dct() != 0,
            raw_packet: c.eth_net_offloads() != 0,
            roce: c.roce() != 0,
            atomic: atomic_cap != AtomicCap::None,
            resize_cq: c.cq_resize() != 0,
            cq_moderation: c.cq_moderation() != 0,
            mem_window,
            auto_path_migration: c.apm() != 0,
            bad_pkey_counter: c.pkv() != 0,
            bad_qkey_counter: c.qkv() != 0,
            block_multicast_loopback: c.block_lb_mc() != 0,
            ud_source_qpn: c.set_deth_sqpn() != 0,
        };
        let log_pg_sz = u32::from(c.log_pg_sz()).min(63);
        Ok(DeviceAttr {
            fw_ver: info.fw_version,
            node_guid: if vport.node_guid != 0 {
                vport.node_guid
            } else {
                info.node_guid
            },
            sys_image_guid: if vport.sys_image_guid != 0 {
                vport.sys_image_guid
            } else {
                info.node_guid
            },
            max_mr_size: u64::MAX,
            page_size_cap: !((1u64 << log_pg_sz) - 1),
            vendor_id: info.vendor_id,
            vendor_part_id: info.vendor_part_id,
            hw_ver: 0,
            max_qp,
            max_qp_wr: l.max_qp_wr,
            cap_flags,
            max_send_sge: l.max_send_sge,
            max_recv_sge: l.max_recv_sge,
            max_sge_rd: MAX_SGE_RD,
            max_cq: pow2(u32::from(c.log_max_cq())),
            max_cqe: l.max_cqe,
            max_mr: pow2(u32::from(c.log_max_mkey())),
            max_pd: pow2(u32::from(c.log_max_pd())),
            max_qp_rd_atom: l.max_qp_rd_atom,
            max_ee_rd_atom: 0,
            max_res_rd_atom: u64::from(l.max_qp_rd_atom) * u64::from(max_qp),
            max_qp_init_rd_atom: l.max_qp_init_rd_atom,
            max_ee_init_rd_atom: 0,
            atomic_cap,
            max_ee: 0,
            max_rdd: 0,
            max_mw: if mem_window {
                pow2(u32::from(c.log_max_mkey()))
            } else {
                0
            },
            max_raw_ipv6_qp: 0,
            max_raw_ethy_qp: 0,
            max_mcast_grp,
            max_mcast_qp_attach,
            max_total_mcast_qp_attach: u64::from(max_mcast_qp_attach) * u64::from(max_mcast_grp),
            max_ah: i32::MAX as u32,
            max_srq: pow2(u32::from(c.log_max_srq())),
            max_srq_wr: l.max_srq_wr,
            max_srq_sge: l.max_srq_sge,
            max_pkeys: if c.pkey_table_size() > 16 {
                u32::MAX
            } else {
                128 << c.pkey_table_size()
            },
            local_ca_ack_delay: c.local_ca_ack_delay(),
            phys_port_cnt: self.num_ports(),
            hca_core_clock_khz: u64::from(c.device_frequency_khz()),
            link_layer: self.link_layer(),
        })
    }

    /// The kernel's rule: standard 8-byte atomics, 8-byte QP atomic size and a
    /// host-endian responder make `IBV_ATOMIC_HCA`.
    fn atomic_cap(&self) -> Result<AtomicCap> {
        if self.caps().atomic() == 0 {
            return Ok(AtomicCap::None);
        }
        let page = self.query_caps(HcaCapType::Atomic, true)?;
        let a = page.atomic_caps();
        let standard = a.atomic_operations() & ATOMIC_OPS_STANDARD == ATOMIC_OPS_STANDARD;
        let size_8b = a.atomic_size_qp() & ATOMIC_SIZE_QP_8B != 0;
        Ok(
            if standard && size_8b && a.atomic_req_8B_endianness_mode() != 0 {
                AtomicCap::Hca
            } else {
                AtomicCap::None
            },
        )
    }
}
