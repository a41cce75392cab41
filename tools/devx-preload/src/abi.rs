//! The kernel's answer structures of the verbs commands served here, as
//! `ib_user_verbs.h`, `ib_user_ioctl_verbs.h` and `mlx5-abi.h` (Linux 6.1)
//! lay them out: host-endian, no implicit padding. The framing and the mlx5
//! context structures are `devx::kernel::abi`'s, shared with the kernel
//! provider.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct ib_uverbs_query_device_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryDeviceResp {
    pub fw_ver: u64,
    /// Big-endian GUID (`__be64`), stored as its bytes.
    pub node_guid: [u8; 8],
    pub sys_image_guid: [u8; 8],
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub device_cap_flags: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_ee_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_ee_init_rd_atom: u32,
    pub atomic_cap: u32,
    pub max_ee: u32,
    pub max_rdd: u32,
    pub max_mw: u32,
    pub max_raw_ipv6_qp: u32,
    pub max_raw_ethy_qp: u32,
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
    pub max_ah: u32,
    pub max_fmr: u32,
    pub max_map_per_fmr: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    pub reserved: [u8; 4],
}

/// `struct ib_uverbs_ex_query_device_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ExQueryDeviceResp {
    pub base: QueryDeviceResp,
    pub comp_mask: u32,
    pub response_length: u32,
    /// `struct ib_uverbs_odp_caps`: general caps, rc/uc/ud caps, reserved.
    pub odp_general_caps: u64,
    pub odp_per_transport: [u32; 3],
    pub odp_reserved: u32,
    pub timestamp_mask: u64,
    /// kHz.
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `struct ib_uverbs_rss_caps`.
    pub rss_supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rss_reserved: u32,
    pub max_wq_type_rq: u32,
    pub raw_packet_caps: u32,
    /// `struct ib_uverbs_tm_caps`.
    pub tm_caps: [u32; 6],
    /// `struct ib_uverbs_cq_moderation_caps`: count, period, reserved.
    pub max_cq_moderation_count: u16,
    pub max_cq_moderation_period: u16,
    pub cq_moderation_reserved: u32,
    pub max_dm_size: u64,
    pub xrc_odp_caps: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_ex_query_device` (the extended command's core input).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ExQueryDevice {
    pub comp_mask: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_query_port_resp_ex` (the legacy response and
/// `port_cap_flags2`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryPortRespEx {
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub gid_tbl_len: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub state: u8,
    pub max_mtu: u8,
    pub active_mtu: u8,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub reserved: u8,
    pub port_cap_flags2: u16,
    pub reserved_ex: [u8; 6],
}

/// Size of the legacy `struct ib_uverbs_query_port_resp`.
pub const QUERY_PORT_RESP_LEN: usize = 40;

/// `struct mlx5_ib_query_device_resp` (driver part of the extended query).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Mlx5QueryDeviceResp {
    pub comp_mask: u32,
    pub response_length: u32,
    pub tso_caps: [u32; 2],
    pub rss_rx_hash_fields_mask: u64,
    pub rss_rx_hash_function: u8,
    pub rss_reserved: [u8; 7],
    pub cqe_comp_caps: [u32; 2],
    pub packet_pacing_caps: [u32; 4],
    pub mlx5_ib_support_multi_pkt_send_wqes: u32,
    pub flags: u32,
    pub sw_parsing_caps: [u32; 2],
    pub striding_rq_caps: [u32; 6],
    pub tunnel_offloads_caps: u32,
    pub dci_streams_caps: [u8; 2],
    pub reserved: u16,
}

/// `struct ib_uverbs_reg_mr` (the core request, response pointer first).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct RegMr {
    pub response: u64,
    pub start: u64,
    pub length: u64,
    pub hca_va: u64,
    pub pd_handle: u32,
    pub access_flags: u32,
}

/// `struct ib_uverbs_reg_mr_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct RegMrResp {
    pub mr_handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct mlx5_ib_create_cq` (driver part of CQ creation).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Mlx5CreateCq {
    pub buf_addr: u64,
    pub db_addr: u64,
    pub cqe_size: u32,
    pub cqe_comp_en: u8,
    pub cqe_comp_res_format: u8,
    pub flags: u16,
    pub uar_page_index: u16,
    pub reserved0: u16,
    pub reserved1: u32,
}

/// `MLX5_IB_CREATE_CQ_FLAGS_*`.
pub mod create_cq_flags {
    pub const CQE_128B_PAD: u16 = 1 << 0;
    pub const UAR_PAGE_INDEX: u16 = 1 << 1;
    pub const REAL_TIME_TS: u16 = 1 << 2;
}

/// `struct mlx5_ib_create_cq_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Mlx5CreateCqResp {
    pub cqn: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_qp_cap` (CREATE_QP's CAP and RESP_CAP).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct mlx5_ib_create_qp` (driver part of QP creation).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Mlx5CreateQp {
    pub buf_addr: u64,
    pub db_addr: u64,
    pub sq_wqe_count: u32,
    pub rq_wqe_count: u32,
    pub rq_wqe_shift: u32,
    pub flags: u32,
    pub uidx: u32,
    pub bfreg_index: u32,
    /// `sq_buf_addr` / `access_key` (raw packet and DCT QPs only).
    pub sq_buf_addr: u64,
    pub ece_options: u32,
    pub dci_streams: [u8; 2],
    pub reserved: u16,
}

/// `MLX5_QP_FLAG_*` of `mlx5_ib_create_qp.flags`.
pub mod create_qp_flags {
    pub const SIGNATURE: u32 = 1 << 0;
    pub const SCATTER_CQE: u32 = 1 << 1;
    pub const TUNNEL_OFFLOADS: u32 = 1 << 2;
    pub const BFREG_INDEX: u32 = 1 << 3;
    pub const TYPE_DCT: u32 = 1 << 4;
    pub const TYPE_DCI: u32 = 1 << 5;
    pub const TIR_ALLOW_SELF_LB_UC: u32 = 1 << 6;
    pub const TIR_ALLOW_SELF_LB_MC: u32 = 1 << 7;
    pub const ALLOW_SCATTER_CQE: u32 = 1 << 8;
    pub const PACKET_BASED_CREDIT_MODE: u32 = 1 << 9;
    pub const UAR_PAGE_INDEX: u32 = 1 << 10;
    pub const DCI_STREAM: u32 = 1 << 11;
}

/// `MLX5_IB_INVALID_BFREG`: the `bfreg_index` answered for a QP on a
/// dynamically allocated UAR page.
pub const MLX5_IB_INVALID_BFREG: u32 = 1 << 31;

/// `struct mlx5_ib_create_qp_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Mlx5CreateQpResp {
    pub bfreg_index: u32,
    pub ece_options: u32,
    pub comp_mask: u32,
    pub tirn: u32,
    pub tisn: u32,
    pub rqn: u32,
    pub sqn: u32,
    pub reserved1: u32,
    pub tir_icm_addr: u64,
}

/// `struct ib_uverbs_qp_dest`: an address vector of MODIFY_QP / QUERY_QP.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QpDest {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub dlid: u16,
    pub reserved: u16,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ib_uverbs_modify_qp` (the write command's core request).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ModifyQp {
    pub dest: QpDest,
    pub alt_dest: QpDest,
    pub qp_handle: u32,
    pub attr_mask: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub path_mig_state: u8,
    pub en_sqd_async_notify: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 2],
}

/// `struct ib_uverbs_query_qp` (response pointer first).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryQp {
    pub response: u64,
    pub qp_handle: u32,
    pub attr_mask: u32,
}

/// `struct ib_uverbs_query_qp_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryQpResp {
    pub dest: QpDest,
    pub alt_dest: QpDest,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub path_mig_state: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub sq_sig_all: u8,
    pub reserved: [u8; 5],
}

/// `struct mlx5_ib_create_srq`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Mlx5CreateSrq {
    pub buf_addr: u64,
    pub db_addr: u64,
    pub flags: u32,
    pub reserved0: u32,
    pub uidx: u32,
    pub reserved1: u32,
}

/// `MLX5_SRQ_FLAG_SIGNATURE`: the one flag of `mlx5_ib_create_srq`.
pub const MLX5_SRQ_FLAG_SIGNATURE: u32 = 1 << 0;

/// `struct mlx5_ib_create_srq_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Mlx5CreateSrqResp {
    pub srqn: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_ah_attr` (with its `ib_uverbs_global_route`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AhAttr {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub grh_reserved: u8,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_create_ah` (the write command's core request).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateAh {
    pub response: u64,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub reserved: u32,
    pub attr: AhAttr,
}

/// `struct mlx5_ib_create_ah_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Mlx5CreateAhResp {
    pub response_length: u32,
    pub dmac: [u8; 6],
    pub reserved: [u8; 6],
}

/// `enum ib_qp_attr_mask` bits of MODIFY_QP / QUERY_QP.
pub mod qp_attr {
    pub const STATE: u32 = 1 << 0;
    pub const CUR_STATE: u32 = 1 << 1;
    pub const EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const ALT_PATH: u32 = 1 << 14;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    pub const CAP: u32 = 1 << 19;
    pub const DEST_QPN: u32 = 1 << 20;
    /// Every bit `ib_modify_qp_is_ok` knows (`IB_QP_ATTR_STANDARD_BITS`
    /// before rate limit).
    pub const KNOWN: u32 = (1 << 21) - 1;
}

/// `enum ib_qp_state` as uverbs carries it.
pub mod qp_state {
    pub const RESET: u8 = 0;
    pub const INIT: u8 = 1;
    pub const RTR: u8 = 2;
    pub const RTS: u8 = 3;
    pub const SQD: u8 = 4;
    pub const SQE: u8 = 5;
    pub const ERR: u8 = 6;
}

/// `IB_MIG_MIGRATED`: the path migration state of a QP with no alternate path.
pub const MIG_MIGRATED: u8 = 0;

/// `IB_ACCESS_ON_DEMAND`: on-demand paging, which the emulated device does
/// not offer (no `IBK_ON_DEMAND_PAGING`).
pub const ACCESS_ON_DEMAND: u32 = 1 << 6;

/// `IB_UVERBS_ACCESS_OPTIONAL_RANGE`: access bits a kernel that does not
/// know them ignores.
pub const ACCESS_OPTIONAL_RANGE: u32 = (((1 << 29) << 1) - 1) & !((1 << 20) - 1);

/// `enum ib_uverbs_device_cap_flags` bits used here.
pub mod device_cap {
    pub const BAD_PKEY_CNTR: u64 = 1 << 1;
    pub const BAD_QKEY_CNTR: u64 = 1 << 2;
    pub const AUTO_PATH_MIG: u64 = 1 << 4;
    pub const CHANGE_PHY_PORT: u64 = 1 << 5;
    pub const PORT_ACTIVE_EVENT: u64 = 1 << 10;
    pub const SYS_IMAGE_GUID: u64 = 1 << 11;
    pub const RC_RNR_NAK_GEN: u64 = 1 << 12;
    pub const MEM_WINDOW: u64 = 1 << 17;
    pub const XRC: u64 = 1 << 20;
    pub const MEM_WINDOW_TYPE_2B: u64 = 1 << 24;
    pub const BLOCK_MULTICAST_LOOPBACK: u64 = 1 << 22;
}

/// `IB_UVERBS_PCF_IP_BASED_GIDS`: what uverbs adds for a RoCE port.
pub const PORT_CAP_IP_BASED_GIDS: u32 = 1 << 26;
/// `IB_PORT_CM_SUP`.
pub const PORT_CAP_CM_SUP: u32 = 1 << 16;
/// `IB_LINK_LAYER_*` as uverbs reports it.
pub mod link_layer {
    pub const INFINIBAND: u8 = 1;
    pub const ETHERNET: u8 = 2;
}
/// `IB_WIDTH_4X` and `IB_SPEED_EDR`: 100 Gb/s.
pub const ACTIVE_WIDTH_4X: u8 = 2;
pub const ACTIVE_SPEED_EDR: u8 = 32;

/// `MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_ECE`.
pub const UCONTEXT_RESP_MASK_ECE: u32 = 1 << 2;
/// `MLX5_ADAPTER_PAGE_SHIFT`: the 4 KiB UAR of `uar_4k` devices.
pub const MLX5_ADAPTER_PAGE_SHIFT: u32 = 12;
/// The cache line the kernel reports (`cache_line_size()` on x86-64 and arm64).
pub const CACHE_LINE_SIZE: u32 = 64;
/// `MLX5_MAX_CQ_COUNT` and `MLX5_MAX_CQ_PERIOD`: widths of the CQ context's
/// moderation fields.
pub const MLX5_MAX_CQ_COUNT: u16 = u16::MAX;
pub const MLX5_MAX_CQ_PERIOD: u16 = (1 << 12) - 1;
/// `IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION | IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN`.
pub const CREATE_CQ_FLAGS_KNOWN: u64 = (1 << 0) | (1 << 1);
/// Offset of `port_num` in `struct ib_uverbs_query_port` (after the
/// response pointer), and the struct's size.
pub const QUERY_PORT_PORT_NUM_OFFSET: usize = 8;
pub const QUERY_PORT_LEN: usize = 16;

/// `MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE` and `_CREATE_AH`.
pub const MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE: u8 = 1 << 0;
pub const MLX5_USER_CMDS_SUPP_UHW_CREATE_AH: u8 = 1 << 1;

/// First "command" byte of the mmap offsets handed out for dynamic entries
/// (`MLX5_IB_MMAP_OFFSET_START`), and the shift of that byte in a page offset
/// (`MLX5_IB_MMAP_CMD_SHIFT`).
pub const MLX5_IB_MMAP_OFFSET_START: u64 = 9;
pub const MLX5_IB_MMAP_CMD_SHIFT: u64 = 8;

/// The mmap offset (bytes) of dynamic entry `index`, as mlx5_ib encodes it
/// (`mlx5_entry_to_mmap_offset`) for `page_shift`.
pub fn dyn_mmap_offset(index: u64, page_shift: u32) -> u64 {
    (((index >> 8) << 16) | (MLX5_IB_MMAP_OFFSET_START << MLX5_IB_MMAP_CMD_SHIFT) | (index & 0xff))
        << page_shift
}

/// `MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET`: the response's
/// `hca_core_clock_offset` is valid and the core clock can be mapped.
pub const UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET: u32 = 1 << 0;
/// `MLX5_IB_MMAP_CORE_CLOCK` and `MLX5_IB_MMAP_CLOCK_INFO`: mmap commands
/// of the read-only clock pages.
pub const MLX5_IB_MMAP_CORE_CLOCK: u64 = 5;
pub const MLX5_IB_MMAP_CLOCK_INFO: u64 = 7;
/// Bit index of `clock_info_versions` (`MLX5_IB_CLOCK_INFO_V1`), also the
/// extended index of its mmap offset.
pub const MLX5_IB_CLOCK_INFO_V1: u8 = 0;
/// `MLX5_IB_CLOCK_INFO_KERNEL_UPDATING`: the `sign` bit set while the
/// clock-info page is rewritten.
pub const MLX5_IB_CLOCK_INFO_KERNEL_UPDATING: u32 = 1;
/// Offset of `internal_timer_h` in `struct mlx5_init_seg` (`internal_timer_l`
/// follows it); the core-clock page is the init-segment page holding it.
pub const INIT_SEG_INTERNAL_TIMER_H: u64 = 0x1000;

/// The mmap offset (bytes) of a fixed mlx5 mmap command (`cmd`) with
/// argument 0, as libmlx5 builds it (`set_command`) for `page_shift`.
pub fn cmd_mmap_offset(cmd: u64, page_shift: u32) -> u64 {
    (cmd << MLX5_IB_MMAP_CMD_SHIFT) << page_shift
}

/// `struct mlx5_ib_clock_info`: the clock-info page's contents, the
/// parameters of the kernel's timecounter for the device clock.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClockInfo {
    pub sign: u32,
    pub resv: u32,
    pub nsec: u64,
    pub cycles: u64,
    pub frac: u64,
    pub mult: u32,
    pub shift: u32,
    pub mask: u64,
    pub overflow_period: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_uapi() {
        assert_eq!(std::mem::size_of::<ClockInfo>(), 56);
        assert_eq!(std::mem::offset_of!(ClockInfo, mult), 32);
        assert_eq!(std::mem::size_of::<QueryDeviceResp>(), 176);
        assert_eq!(std::mem::size_of::<ExQueryDeviceResp>(), 304);
        assert_eq!(std::mem::size_of::<QueryPortRespEx>(), 48);
        assert_eq!(std::mem::size_of::<Mlx5QueryDeviceResp>(), 104);
        assert_eq!(std::mem::offset_of!(ExQueryDeviceResp, hca_core_clock), 216);
        assert_eq!(std::mem::offset_of!(QueryPortRespEx, port_cap_flags2), 40);
        assert_eq!(std::mem::size_of::<RegMr>(), 40);
        assert_eq!(std::mem::size_of::<RegMrResp>(), 12);
        assert_eq!(std::mem::size_of::<Mlx5CreateCq>(), 32);
        assert_eq!(std::mem::offset_of!(Mlx5CreateCq, flags), 22);
        assert_eq!(ACCESS_OPTIONAL_RANGE, 0x3ff0_0000);
        assert_eq!(std::mem::size_of::<QpCap>(), 20);
        assert_eq!(std::mem::size_of::<Mlx5CreateQp>(), 56);
        assert_eq!(std::mem::size_of::<Mlx5CreateQpResp>(), 40);
        assert_eq!(std::mem::size_of::<QpDest>(), 32);
        assert_eq!(std::mem::size_of::<ModifyQp>(), 112);
        assert_eq!(std::mem::offset_of!(ModifyQp, qp_state), 96);
        assert_eq!(std::mem::size_of::<QueryQp>(), 16);
        assert_eq!(std::mem::size_of::<QueryQpResp>(), 128);
        assert_eq!(std::mem::size_of::<AhAttr>(), 32);
        assert_eq!(std::mem::size_of::<Mlx5CreateSrq>(), 32);
        assert_eq!(std::mem::size_of::<CreateAh>(), 56);
        assert_eq!(std::mem::size_of::<Mlx5CreateAhResp>(), 16);
    }

    #[test]
    fn dynamic_mmap_offsets_follow_mlx5_ib() {
        assert_eq!(dyn_mmap_offset(0, 12), 0x90_0000);
        assert_eq!(dyn_mmap_offset(1, 12), 0x90_1000);
        assert_eq!(dyn_mmap_offset(0x100, 12), 0x1090_0000);
        assert_eq!(cmd_mmap_offset(MLX5_IB_MMAP_CORE_CLOCK, 12), 0x50_0000);
        assert_eq!(cmd_mmap_offset(MLX5_IB_MMAP_CLOCK_INFO, 12), 0x70_0000);
    }
}
