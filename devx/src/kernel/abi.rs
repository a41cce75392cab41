//! The uverbs ioctl framing and the mlx5 DEVX ids, as numbers.
//!
//! Values follow the kernel uapi headers (`rdma_user_ioctl_cmds.h`,
//! `ib_user_ioctl_cmds.h`, `mlx5_user_ioctl_cmds.h`, `mlx5-abi.h`); the build
//! never needs those headers. All uverbs structures are host-endian.

use std::os::fd::RawFd;

use super::sys::{Errno, Sys, SysResult};
use crate::provider::{GidTableEntry, GidType};

/// `_IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr)`.
pub const RDMA_VERBS_IOCTL: u64 = 0xC018_1B01;
/// `RDMA_DRIVER_MLX5`.
pub const RDMA_DRIVER_MLX5: u32 = 1;
/// Size of `struct ib_uverbs_ioctl_hdr`.
pub const HDR_LEN: usize = 24;
/// Size of `struct ib_uverbs_attr`.
pub const ATTR_LEN: usize = 16;

/// Attribute flag set by the caller: the kernel must know this attribute.
pub const UVERBS_ATTR_F_MANDATORY: u16 = 1 << 0;
/// Attribute flag set by the kernel: this output was written.
pub const UVERBS_ATTR_F_VALID_OUTPUT: u16 = 1 << 1;

/// Driver-namespace bit of object, method and attribute ids.
pub const UVERBS_ID_DRIVER_NS: u16 = 0x1000;

/// Core (verbs) object, method and attribute ids (`ib_user_ioctl_cmds.h`,
/// `ib_user_verbs.h`).
pub mod verbs {
    pub const UVERBS_OBJECT_DEVICE: u16 = 0;
    pub const UVERBS_OBJECT_PD: u16 = 1;
    pub const UVERBS_OBJECT_CQ: u16 = 3;
    pub const UVERBS_OBJECT_QP: u16 = 4;
    pub const UVERBS_OBJECT_SRQ: u16 = 5;
    pub const UVERBS_OBJECT_AH: u16 = 6;
    pub const UVERBS_OBJECT_MR: u16 = 7;
    pub const UVERBS_OBJECT_ASYNC_EVENT: u16 = 16;

    /// `UVERBS_METHOD_PD_DESTROY` and its handle.
    pub const UVERBS_METHOD_PD_DESTROY: u16 = 0;
    pub const UVERBS_ATTR_DESTROY_PD_HANDLE: u16 = 0;
    /// Methods of `UVERBS_OBJECT_CQ` and their attributes.
    pub const UVERBS_METHOD_CQ_CREATE: u16 = 0;
    pub const UVERBS_METHOD_CQ_DESTROY: u16 = 1;
    pub const UVERBS_ATTR_CREATE_CQ_HANDLE: u16 = 0;
    pub const UVERBS_ATTR_CREATE_CQ_CQE: u16 = 1;
    pub const UVERBS_ATTR_CREATE_CQ_USER_HANDLE: u16 = 2;
    pub const UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL: u16 = 3;
    pub const UVERBS_ATTR_CREATE_CQ_COMP_VECTOR: u16 = 4;
    pub const UVERBS_ATTR_CREATE_CQ_FLAGS: u16 = 5;
    pub const UVERBS_ATTR_CREATE_CQ_RESP_CQE: u16 = 6;
    pub const UVERBS_ATTR_CREATE_CQ_EVENT_FD: u16 = 7;
    pub const UVERBS_ATTR_DESTROY_CQ_HANDLE: u16 = 0;
    pub const UVERBS_ATTR_DESTROY_CQ_RESP: u16 = 1;
    /// `UVERBS_METHOD_MR_DESTROY` and its handle.
    pub const UVERBS_METHOD_MR_DESTROY: u16 = 1;
    pub const UVERBS_ATTR_DESTROY_MR_HANDLE: u16 = 0;
    /// Methods of `UVERBS_OBJECT_SRQ` and their attributes.
    pub const UVERBS_METHOD_SRQ_CREATE: u16 = 0;
    pub const UVERBS_METHOD_SRQ_DESTROY: u16 = 1;
    pub const UVERBS_ATTR_CREATE_SRQ_HANDLE: u16 = 0;
    pub const UVERBS_ATTR_CREATE_SRQ_PD_HANDLE: u16 = 1;
    pub const UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE: u16 = 2;
    pub const UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE: u16 = 3;
    pub const UVERBS_ATTR_CREATE_SRQ_USER_HANDLE: u16 = 4;
    pub const UVERBS_ATTR_CREATE_SRQ_MAX_WR: u16 = 5;
    pub const UVERBS_ATTR_CREATE_SRQ_MAX_SGE: u16 = 6;
    pub const UVERBS_ATTR_CREATE_SRQ_LIMIT: u16 = 7;
    pub const UVERBS_ATTR_CREATE_SRQ_MAX_NUM_TAGS: u16 = 8;
    pub const UVERBS_ATTR_CREATE_SRQ_TYPE: u16 = 9;
    pub const UVERBS_ATTR_CREATE_SRQ_EVENT_FD: u16 = 10;
    pub const UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR: u16 = 11;
    pub const UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE: u16 = 12;
    pub const UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM: u16 = 13;
    pub const UVERBS_ATTR_DESTROY_SRQ_HANDLE: u16 = 0;
    pub const UVERBS_ATTR_DESTROY_SRQ_RESP: u16 = 1;
    /// `IB_UVERBS_SRQT_BASIC`.
    pub const IB_UVERBS_SRQT_BASIC: u64 = 0;
    /// `UVERBS_METHOD_AH_DESTROY` and its handle.
    pub const UVERBS_METHOD_AH_DESTROY: u16 = 0;
    pub const UVERBS_ATTR_DESTROY_AH_HANDLE: u16 = 0;
    /// Methods of `UVERBS_OBJECT_QP` and their attributes.
    pub const UVERBS_METHOD_QP_CREATE: u16 = 0;
    pub const UVERBS_METHOD_QP_DESTROY: u16 = 1;
    pub const UVERBS_ATTR_CREATE_QP_HANDLE: u16 = 0;
    pub const UVERBS_ATTR_CREATE_QP_XRCD_HANDLE: u16 = 1;
    pub const UVERBS_ATTR_CREATE_QP_PD_HANDLE: u16 = 2;
    pub const UVERBS_ATTR_CREATE_QP_SRQ_HANDLE: u16 = 3;
    pub const UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE: u16 = 4;
    pub const UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE: u16 = 5;
    pub const UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE: u16 = 6;
    pub const UVERBS_ATTR_CREATE_QP_USER_HANDLE: u16 = 7;
    pub const UVERBS_ATTR_CREATE_QP_CAP: u16 = 8;
    pub const UVERBS_ATTR_CREATE_QP_TYPE: u16 = 9;
    pub const UVERBS_ATTR_CREATE_QP_FLAGS: u16 = 10;
    pub const UVERBS_ATTR_CREATE_QP_SOURCE_QPN: u16 = 11;
    pub const UVERBS_ATTR_CREATE_QP_EVENT_FD: u16 = 12;
    pub const UVERBS_ATTR_CREATE_QP_RESP_CAP: u16 = 13;
    pub const UVERBS_ATTR_CREATE_QP_RESP_QP_NUM: u16 = 14;
    pub const UVERBS_ATTR_DESTROY_QP_HANDLE: u16 = 0;
    pub const UVERBS_ATTR_DESTROY_QP_RESP: u16 = 1;
    /// `enum ib_uverbs_qp_type` values of the QPs mlx5_ib creates here.
    pub const IB_UVERBS_QPT_RC: u64 = 2;
    pub const IB_UVERBS_QPT_UC: u64 = 3;
    pub const IB_UVERBS_QPT_UD: u64 = 4;
    /// `IB_UVERBS_QP_CREATE_SQ_SIG_ALL`.
    pub const IB_UVERBS_QP_CREATE_SQ_SIG_ALL: u64 = 1 << 12;

    /// Methods of `UVERBS_OBJECT_DEVICE`.
    pub const UVERBS_METHOD_INVOKE_WRITE: u16 = 0;
    pub const UVERBS_METHOD_INFO_HANDLES: u16 = 1;
    pub const UVERBS_METHOD_QUERY_PORT: u16 = 2;
    pub const UVERBS_METHOD_GET_CONTEXT: u16 = 3;
    pub const UVERBS_METHOD_QUERY_CONTEXT: u16 = 4;
    pub const UVERBS_METHOD_QUERY_GID_TABLE: u16 = 5;
    pub const UVERBS_METHOD_QUERY_GID_ENTRY: u16 = 6;
    /// Method of `UVERBS_OBJECT_ASYNC_EVENT`.
    pub const UVERBS_METHOD_ASYNC_EVENT_ALLOC: u16 = 0;

    pub const UVERBS_ATTR_CORE_IN: u16 = 0;
    pub const UVERBS_ATTR_CORE_OUT: u16 = 1;
    pub const UVERBS_ATTR_WRITE_CMD: u16 = 2;

    pub const UVERBS_ATTR_QUERY_PORT_PORT_NUM: u16 = 0;
    pub const UVERBS_ATTR_QUERY_PORT_RESP: u16 = 1;

    pub const UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS: u16 = 0;
    pub const UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT: u16 = 1;
    /// Same ids for `UVERBS_METHOD_QUERY_CONTEXT`.
    pub const UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS: u16 = 0;
    pub const UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT: u16 = 1;

    pub const UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE: u16 = 0;
    pub const UVERBS_ATTR_QUERY_GID_TABLE_FLAGS: u16 = 1;
    pub const UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES: u16 = 2;
    pub const UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES: u16 = 3;

    pub const UVERBS_ATTR_QUERY_GID_ENTRY_PORT: u16 = 0;
    pub const UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX: u16 = 1;
    pub const UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS: u16 = 2;
    pub const UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY: u16 = 3;

    pub const UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE: u16 = 0;

    pub const UVERBS_ATTR_UHW_IN: u16 = 0x1000;
    pub const UVERBS_ATTR_UHW_OUT: u16 = 0x1001;

    /// `IB_USER_VERBS_CMD_*` of the write() interface (and INVOKE_WRITE).
    pub const IB_USER_VERBS_CMD_GET_CONTEXT: u32 = 0;
    pub const IB_USER_VERBS_CMD_QUERY_DEVICE: u32 = 1;
    pub const IB_USER_VERBS_CMD_QUERY_PORT: u32 = 2;
    pub const IB_USER_VERBS_CMD_ALLOC_PD: u32 = 3;
    pub const IB_USER_VERBS_CMD_DEALLOC_PD: u32 = 4;
    pub const IB_USER_VERBS_CMD_CREATE_AH: u32 = 5;
    pub const IB_USER_VERBS_CMD_REG_MR: u32 = 9;
    pub const IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL: u32 = 17;
    pub const IB_USER_VERBS_CMD_DEREG_MR: u32 = 13;
    pub const IB_USER_VERBS_CMD_QUERY_QP: u32 = 25;
    pub const IB_USER_VERBS_CMD_MODIFY_QP: u32 = 26;
    /// Marks an extended command (`IB_USER_VERBS_EX_CMD_*`).
    pub const IB_USER_VERBS_CMD_FLAG_EXTENDED: u32 = 0x8000_0000;
    /// `IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS`.
    pub const IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS: u64 = 1 << 0;

    /// `enum ib_uverbs_gid_type`.
    pub const IB_UVERBS_GID_TYPE_IB: u32 = 0;
    pub const IB_UVERBS_GID_TYPE_ROCE_V1: u32 = 1;
    pub const IB_UVERBS_GID_TYPE_ROCE_V2: u32 = 2;
}

/// `struct ib_uverbs_gid_entry`: one entry of the kernel's GID table, as
/// QUERY_GID_TABLE and QUERY_GID_ENTRY answer it (host byte order).
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    zerocopy::FromBytes,
    zerocopy::IntoBytes,
    zerocopy::Immutable,
    zerocopy::KnownLayout,
)]
pub struct UverbsGidEntry {
    pub gid: [u8; 16],
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub netdev_ifindex: u32,
}

/// Size of `struct ib_uverbs_gid_entry`.
pub const GID_ENTRY_LEN: usize = std::mem::size_of::<UverbsGidEntry>();

impl UverbsGidEntry {
    /// The entry as the library names it; `None` for a gid_type it does not
    /// know.
    pub fn decode(&self) -> Option<GidTableEntry> {
        Some(GidTableEntry {
            gid: self.gid,
            index: self.gid_index,
            port: self.port_num,
            gid_type: match self.gid_type {
                verbs::IB_UVERBS_GID_TYPE_IB => GidType::Ib,
                verbs::IB_UVERBS_GID_TYPE_ROCE_V1 => GidType::RoceV1,
                verbs::IB_UVERBS_GID_TYPE_ROCE_V2 => GidType::RoceV2,
                _ => return None,
            },
            netdev_ifindex: self.netdev_ifindex,
        })
    }

    /// The kernel's form of `e`.
    pub fn encode(e: &GidTableEntry) -> UverbsGidEntry {
        UverbsGidEntry {
            gid: e.gid,
            gid_index: e.index,
            port_num: e.port,
            gid_type: match e.gid_type {
                GidType::Ib => verbs::IB_UVERBS_GID_TYPE_IB,
                GidType::RoceV1 => verbs::IB_UVERBS_GID_TYPE_ROCE_V1,
                GidType::RoceV2 => verbs::IB_UVERBS_GID_TYPE_ROCE_V2,
            },
            netdev_ifindex: e.netdev_ifindex,
        }
    }
}

/// Decodes one `struct ib_uverbs_gid_entry`; `None` for a gid_type this
/// library does not know.
pub fn gid_entry_from_bytes(b: &[u8; GID_ENTRY_LEN]) -> Option<GidTableEntry> {
    zerocopy::FromBytes::read_from_bytes(b.as_slice())
        .ok()
        .and_then(|e: UverbsGidEntry| e.decode())
}

/// The `struct ib_uverbs_gid_entry` bytes of `e`.
pub fn gid_entry_to_bytes(e: &GidTableEntry) -> [u8; GID_ENTRY_LEN] {
    zerocopy::transmute!(UverbsGidEntry::encode(e))
}

/// mlx5 driver objects.
pub mod obj {
    pub const DEVX: u16 = 0x1000;
    pub const DEVX_OBJ: u16 = 0x1001;
    pub const DEVX_UMEM: u16 = 0x1002;
    pub const DEVX_ASYNC_CMD_FD: u16 = 0x1004;
    pub const DEVX_ASYNC_EVENT_FD: u16 = 0x1005;
    pub const UAR: u16 = 0x1008;
}

/// Methods of [`obj::DEVX`] and their attributes.
pub mod devx {
    pub const METHOD_OTHER: u16 = 0x1000;
    pub const METHOD_QUERY_UAR: u16 = 0x1001;
    pub const METHOD_QUERY_EQN: u16 = 0x1002;
    pub const METHOD_SUBSCRIBE_EVENT: u16 = 0x1003;

    pub const OTHER_CMD_IN: u16 = 0x1000;
    pub const OTHER_CMD_OUT: u16 = 0x1001;

    pub const QUERY_EQN_USER_VEC: u16 = 0x1000;
    pub const QUERY_EQN_DEV_EQN: u16 = 0x1001;

    pub const SUBSCRIBE_FD_HANDLE: u16 = 0x1000;
    pub const SUBSCRIBE_OBJ_HANDLE: u16 = 0x1001;
    pub const SUBSCRIBE_TYPE_NUM_LIST: u16 = 0x1002;
    pub const SUBSCRIBE_FD_NUM: u16 = 0x1003;
    pub const SUBSCRIBE_COOKIE: u16 = 0x1004;
}

/// Methods of [`obj::DEVX_OBJ`] and their attributes.
pub mod devx_obj {
    pub const METHOD_CREATE: u16 = 0x1000;
    pub const METHOD_DESTROY: u16 = 0x1001;
    pub const METHOD_MODIFY: u16 = 0x1002;
    pub const METHOD_QUERY: u16 = 0x1003;
    pub const METHOD_ASYNC_QUERY: u16 = 0x1004;

    /// HANDLE of CREATE, DESTROY, MODIFY, QUERY and ASYNC_QUERY.
    pub const HANDLE: u16 = 0x1000;
    /// CMD_IN of CREATE, MODIFY, QUERY and ASYNC_QUERY.
    pub const CMD_IN: u16 = 0x1001;
    /// CMD_OUT of CREATE, MODIFY and QUERY.
    pub const CMD_OUT: u16 = 0x1002;
    pub const ASYNC_FD: u16 = 0x1002;
    pub const ASYNC_WR_ID: u16 = 0x1003;
    pub const ASYNC_OUT_LEN: u16 = 0x1004;
}

/// Methods of [`obj::DEVX_UMEM`] and their attributes.
pub mod umem {
    pub const METHOD_REG: u16 = 0x1000;
    pub const METHOD_DEREG: u16 = 0x1001;

    pub const HANDLE: u16 = 0x1000;
    pub const ADDR: u16 = 0x1001;
    pub const LEN: u16 = 0x1002;
    pub const ACCESS: u16 = 0x1003;
    pub const OUT_ID: u16 = 0x1004;
    pub const PGSZ_BITMAP: u16 = 0x1005;
    pub const DMABUF_FD: u16 = 0x1006;

    /// Page sizes rdma-core's legacy `mlx5dv_devx_umem_reg` offers: every
    /// size from the 4 KiB adapter page up.
    pub const DEFAULT_PGSZ_BITMAP: u64 = !0xfff;
}

/// Async command and event channels.
pub mod async_fd {
    pub const METHOD_ALLOC: u16 = 0x1000;
    pub const HANDLE: u16 = 0x1000;
    /// FLAGS of the event channel allocation.
    pub const EVENT_FLAGS: u16 = 0x1001;
    /// `MLX5_IB_UAPI_DEVX_CR_EV_CH_FLAGS_OMIT_DATA`.
    pub const FLAG_OMIT_DATA: u32 = 1;
}

/// Methods of [`obj::UAR`] and their attributes.
pub mod uar {
    pub const METHOD_ALLOC: u16 = 0x1000;
    pub const METHOD_DESTROY: u16 = 0x1001;

    pub const HANDLE: u16 = 0x1000;
    pub const TYPE: u16 = 0x1001;
    pub const MMAP_OFFSET: u16 = 0x1002;
    pub const MMAP_LENGTH: u16 = 0x1003;
    pub const PAGE_ID: u16 = 0x1004;
}

/// `struct ib_uverbs_ioctl_hdr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoctlHdr {
    pub length: u16,
    pub object_id: u16,
    pub method_id: u16,
    pub num_attrs: u16,
    pub reserved1: u64,
    pub driver_id: u32,
    pub reserved2: u32,
}

/// `struct ib_uverbs_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoctlAttr {
    pub attr_id: u16,
    pub len: u16,
    pub flags: u16,
    pub attr_data: u16,
    pub data: u64,
}

const _: () = assert!(std::mem::size_of::<IoctlHdr>() == HDR_LEN);
const _: () = assert!(std::mem::size_of::<IoctlAttr>() == ATTR_LEN);

impl IoctlHdr {
    /// Decodes a header from its host-endian bytes.
    pub fn from_bytes(b: &[u8; HDR_LEN]) -> IoctlHdr {
        IoctlHdr {
            length: u16::from_ne_bytes([b[0], b[1]]),
            object_id: u16::from_ne_bytes([b[2], b[3]]),
            method_id: u16::from_ne_bytes([b[4], b[5]]),
            num_attrs: u16::from_ne_bytes([b[6], b[7]]),
            reserved1: u64::from_ne_bytes(b[8..16].try_into().unwrap_or_default()),
            driver_id: u32::from_ne_bytes(b[16..20].try_into().unwrap_or_default()),
            reserved2: u32::from_ne_bytes(b[20..24].try_into().unwrap_or_default()),
        }
    }

    /// The header's host-endian bytes.
    pub fn to_bytes(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0..2].copy_from_slice(&self.length.to_ne_bytes());
        b[2..4].copy_from_slice(&self.object_id.to_ne_bytes());
        b[4..6].copy_from_slice(&self.method_id.to_ne_bytes());
        b[6..8].copy_from_slice(&self.num_attrs.to_ne_bytes());
        b[8..16].copy_from_slice(&self.reserved1.to_ne_bytes());
        b[16..20].copy_from_slice(&self.driver_id.to_ne_bytes());
        b[20..24].copy_from_slice(&self.reserved2.to_ne_bytes());
        b
    }
}

impl IoctlAttr {
    /// Decodes an attribute from its host-endian bytes.
    pub fn from_bytes(b: &[u8; ATTR_LEN]) -> IoctlAttr {
        IoctlAttr {
            attr_id: u16::from_ne_bytes([b[0], b[1]]),
            len: u16::from_ne_bytes([b[2], b[3]]),
            flags: u16::from_ne_bytes([b[4], b[5]]),
            attr_data: u16::from_ne_bytes([b[6], b[7]]),
            data: u64::from_ne_bytes(b[8..16].try_into().unwrap_or_default()),
        }
    }

    /// The attribute's host-endian bytes.
    pub fn to_bytes(&self) -> [u8; ATTR_LEN] {
        let mut b = [0u8; ATTR_LEN];
        b[0..2].copy_from_slice(&self.attr_id.to_ne_bytes());
        b[2..4].copy_from_slice(&self.len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.flags.to_ne_bytes());
        b[6..8].copy_from_slice(&self.attr_data.to_ne_bytes());
        b[8..16].copy_from_slice(&self.data.to_ne_bytes());
        b
    }

    /// An IDR or FD attribute the kernel fills (`UVERBS_ACCESS_NEW`).
    #[inline]
    pub const fn new_obj(id: u16) -> IoctlAttr {
        IoctlAttr {
            attr_id: id,
            len: 0,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data: 0,
        }
    }

    /// An IDR handle or FD number the kernel reads.
    #[inline]
    pub const fn obj(id: u16, value: u64) -> IoctlAttr {
        IoctlAttr {
            attr_id: id,
            len: 0,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data: value,
        }
    }

    /// An inline 64-bit input (PTR_IN of a u64, CONST_IN).
    #[inline]
    pub const fn u64_in(id: u16, value: u64) -> IoctlAttr {
        IoctlAttr {
            attr_id: id,
            len: 8,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data: value,
        }
    }

    /// An inline 32-bit input (PTR_IN of a u32, 4-byte FLAGS_IN): the value's
    /// bytes sit at the start of the 8-byte data field.
    #[inline]
    pub fn u32_in(id: u16, value: u32) -> IoctlAttr {
        let mut d = [0u8; 8];
        d[..4].copy_from_slice(&value.to_ne_bytes());
        IoctlAttr {
            attr_id: id,
            len: 4,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data: u64::from_ne_bytes(d),
        }
    }

    /// A PTR_IN: inline when it fits in 8 bytes, else a pointer to `bytes`.
    /// `bytes.len()` must fit in a u16 (callers check).
    #[inline]
    pub fn ptr_in(id: u16, bytes: &[u8]) -> IoctlAttr {
        let data = if bytes.len() <= 8 {
            let mut d = [0u8; 8];
            d[..bytes.len()].copy_from_slice(bytes);
            u64::from_ne_bytes(d)
        } else {
            bytes.as_ptr() as u64
        };
        IoctlAttr {
            attr_id: id,
            len: bytes.len() as u16,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data,
        }
    }

    /// A PTR_OUT: always a pointer, even for 4 bytes. `len` must fit in a u16.
    #[inline]
    pub fn ptr_out(id: u16, ptr: *mut u8, len: usize) -> IoctlAttr {
        IoctlAttr {
            attr_id: id,
            len: len as u16,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data: ptr as u64,
        }
    }

    /// The same attribute without `UVERBS_ATTR_F_MANDATORY` (an older kernel
    /// that does not know it ignores it).
    #[inline]
    pub const fn optional(mut self) -> IoctlAttr {
        self.flags &= !UVERBS_ATTR_F_MANDATORY;
        self
    }

    /// True once the kernel has written this output.
    #[inline]
    pub const fn valid_output(&self) -> bool {
        self.flags & UVERBS_ATTR_F_VALID_OUTPUT != 0
    }
}

/// One ioctl command with `N` attributes, laid out exactly as the kernel
/// reads it, built on the stack.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IoctlCmd<const N: usize> {
    pub hdr: IoctlHdr,
    pub attrs: [IoctlAttr; N],
}

impl<const N: usize> IoctlCmd<N> {
    /// A command for the mlx5 driver.
    #[inline]
    pub const fn new(object_id: u16, method_id: u16, attrs: [IoctlAttr; N]) -> Self {
        IoctlCmd {
            hdr: IoctlHdr {
                length: (HDR_LEN + ATTR_LEN * N) as u16,
                object_id,
                method_id,
                num_attrs: N as u16,
                reserved1: 0,
                driver_id: RDMA_DRIVER_MLX5,
                reserved2: 0,
            },
            attrs,
        }
    }

    /// Issues the command on `fd`.
    ///
    /// # Safety
    /// Every pointer attribute must point to memory valid for its `len`
    /// bytes (writable for outputs) for the duration of the call.
    #[inline]
    pub unsafe fn exec(&mut self, sys: &dyn Sys, fd: RawFd) -> SysResult<()> {
        // SAFETY: `self` is a repr(C) header immediately followed by N
        // attributes, `hdr.length` bytes in all, and writable; pointer
        // attributes are valid per this function's contract.
        let r = unsafe { sys.ioctl(fd, RDMA_VERBS_IOCTL, (self as *mut Self).cast()) };
        match r {
            Ok(0) => Ok(()),
            // The uverbs ioctl returns 0 on success; anything else is a
            // kernel we do not understand.
            Ok(_) => Err(Errno::EPROTO),
            Err(e) => Err(e),
        }
    }
}

/// `MLX5_IB_ALLOC_UCTX_DEVX`.
pub const MLX5_IB_ALLOC_UCTX_DEVX: u32 = 1 << 0;
/// `MLX5_LIB_CAP_4K_UAR`.
pub const MLX5_LIB_CAP_4K_UAR: u64 = 1 << 0;
/// `MLX5_LIB_CAP_DYN_UAR`.
pub const MLX5_LIB_CAP_DYN_UAR: u64 = 1 << 1;

/// `struct mlx5_ib_alloc_ucontext_req_v2` (32 bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocUcontextReq {
    pub total_num_bfregs: u32,
    pub num_low_latency_bfregs: u32,
    pub flags: u32,
    pub comp_mask: u32,
    pub max_cqe_version: u8,
    pub lib_caps: u64,
}

/// Size of `struct mlx5_ib_alloc_ucontext_req_v2`.
pub const ALLOC_UCONTEXT_REQ_LEN: usize = 32;
/// Size of `struct mlx5_ib_alloc_ucontext_resp`.
pub const ALLOC_UCONTEXT_RESP_LEN: usize = 72;

impl AllocUcontextReq {
    /// What rdma-core's mlx5 provider asks for, with DEVX.
    pub const fn devx() -> AllocUcontextReq {
        AllocUcontextReq {
            total_num_bfregs: 16,
            num_low_latency_bfregs: 4,
            flags: MLX5_IB_ALLOC_UCTX_DEVX,
            comp_mask: 0,
            max_cqe_version: 1,
            lib_caps: MLX5_LIB_CAP_4K_UAR | MLX5_LIB_CAP_DYN_UAR,
        }
    }

    pub fn to_bytes(&self) -> [u8; ALLOC_UCONTEXT_REQ_LEN] {
        let mut b = [0u8; ALLOC_UCONTEXT_REQ_LEN];
        b[0..4].copy_from_slice(&self.total_num_bfregs.to_ne_bytes());
        b[4..8].copy_from_slice(&self.num_low_latency_bfregs.to_ne_bytes());
        b[8..12].copy_from_slice(&self.flags.to_ne_bytes());
        b[12..16].copy_from_slice(&self.comp_mask.to_ne_bytes());
        b[16] = self.max_cqe_version;
        b[24..32].copy_from_slice(&self.lib_caps.to_ne_bytes());
        b
    }

    /// Decodes up to 32 bytes; missing bytes read as zero. Returns the
    /// request and whether any reserved byte is non-zero.
    pub fn from_bytes(b: &[u8]) -> (AllocUcontextReq, bool) {
        let reserved = b.get(17..24).is_some_and(|r| r.iter().any(|&x| x != 0));
        let req = AllocUcontextReq {
            total_num_bfregs: ne32(b, 0),
            num_low_latency_bfregs: ne32(b, 4),
            flags: ne32(b, 8),
            comp_mask: ne32(b, 12),
            max_cqe_version: b.get(16).copied().unwrap_or(0),
            lib_caps: ne64(b, 24),
        };
        (req, reserved)
    }
}

/// `struct mlx5_ib_alloc_ucontext_resp`: what the kernel says about the new
/// context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UcontextResp {
    pub qp_tab_size: u32,
    pub bf_reg_size: u32,
    pub tot_bfregs: u32,
    pub cache_line_size: u32,
    pub max_sq_desc_sz: u16,
    pub max_rq_desc_sz: u16,
    pub max_send_wqebb: u32,
    pub max_recv_wr: u32,
    pub max_srq_recv_wr: u32,
    pub num_ports: u16,
    pub flow_action_flags: u16,
    pub comp_mask: u32,
    pub response_length: u32,
    pub cqe_version: u8,
    pub cmds_supp_uhw: u8,
    pub eth_min_inline: u8,
    pub clock_info_versions: u8,
    pub hca_core_clock_offset: u64,
    pub log_uar_size: u32,
    pub num_uars_per_page: u32,
    pub num_dyn_bfregs: u32,
    pub dump_fill_mkey: u32,
}

impl UcontextResp {
    /// Decodes a response; bytes past the end read as zero.
    pub fn from_bytes(b: &[u8]) -> UcontextResp {
        UcontextResp {
            qp_tab_size: ne32(b, 0),
            bf_reg_size: ne32(b, 4),
            tot_bfregs: ne32(b, 8),
            cache_line_size: ne32(b, 12),
            max_sq_desc_sz: ne16(b, 16),
            max_rq_desc_sz: ne16(b, 18),
            max_send_wqebb: ne32(b, 20),
            max_recv_wr: ne32(b, 24),
            max_srq_recv_wr: ne32(b, 28),
            num_ports: ne16(b, 32),
            flow_action_flags: ne16(b, 34),
            comp_mask: ne32(b, 36),
            response_length: ne32(b, 40),
            cqe_version: b.get(44).copied().unwrap_or(0),
            cmds_supp_uhw: b.get(45).copied().unwrap_or(0),
            eth_min_inline: b.get(46).copied().unwrap_or(0),
            clock_info_versions: b.get(47).copied().unwrap_or(0),
            hca_core_clock_offset: ne64(b, 48),
            log_uar_size: ne32(b, 56),
            num_uars_per_page: ne32(b, 60),
            num_dyn_bfregs: ne32(b, 64),
            dump_fill_mkey: ne32(b, 68),
        }
    }

    pub fn to_bytes(&self) -> [u8; ALLOC_UCONTEXT_RESP_LEN] {
        let mut b = [0u8; ALLOC_UCONTEXT_RESP_LEN];
        b[0..4].copy_from_slice(&self.qp_tab_size.to_ne_bytes());
        b[4..8].copy_from_slice(&self.bf_reg_size.to_ne_bytes());
        b[8..12].copy_from_slice(&self.tot_bfregs.to_ne_bytes());
        b[12..16].copy_from_slice(&self.cache_line_size.to_ne_bytes());
        b[16..18].copy_from_slice(&self.max_sq_desc_sz.to_ne_bytes());
        b[18..20].copy_from_slice(&self.max_rq_desc_sz.to_ne_bytes());
        b[20..24].copy_from_slice(&self.max_send_wqebb.to_ne_bytes());
        b[24..28].copy_from_slice(&self.max_recv_wr.to_ne_bytes());
        b[28..32].copy_from_slice(&self.max_srq_recv_wr.to_ne_bytes());
        b[32..34].copy_from_slice(&self.num_ports.to_ne_bytes());
        b[34..36].copy_from_slice(&self.flow_action_flags.to_ne_bytes());
        b[36..40].copy_from_slice(&self.comp_mask.to_ne_bytes());
        b[40..44].copy_from_slice(&self.response_length.to_ne_bytes());
        b[44] = self.cqe_version;
        b[45] = self.cmds_supp_uhw;
        b[46] = self.eth_min_inline;
        b[47] = self.clock_info_versions;
        b[48..56].copy_from_slice(&self.hca_core_clock_offset.to_ne_bytes());
        b[56..60].copy_from_slice(&self.log_uar_size.to_ne_bytes());
        b[60..64].copy_from_slice(&self.num_uars_per_page.to_ne_bytes());
        b[64..68].copy_from_slice(&self.num_dyn_bfregs.to_ne_bytes());
        b[68..72].copy_from_slice(&self.dump_fill_mkey.to_ne_bytes());
        b
    }
}

/// Legacy write() command header + response pointer (16 bytes), then the
/// driver request: `GET_CONTEXT` is 48 bytes in all.
pub const WRITE_GET_CONTEXT_LEN: usize = 16 + ALLOC_UCONTEXT_REQ_LEN;
/// Legacy `GET_CONTEXT` response: async_fd, num_comp_vectors, driver response.
pub const WRITE_GET_CONTEXT_RESP_LEN: usize = 8 + ALLOC_UCONTEXT_RESP_LEN;

pub(crate) fn ne16(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map_or(0, |s| u16::from_ne_bytes([s[0], s[1]]))
}

pub(crate) fn ne32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

pub(crate) fn ne64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_ne_bytes)
}

/// Readable name of a DEVX (object, method) pair, as error messages show it.
pub fn method_name(object_id: u16, method_id: u16) -> &'static str {
    match (object_id, method_id) {
        (verbs::UVERBS_OBJECT_DEVICE, verbs::UVERBS_METHOD_INVOKE_WRITE) => "INVOKE_WRITE",
        (verbs::UVERBS_OBJECT_DEVICE, verbs::UVERBS_METHOD_INFO_HANDLES) => "INFO_HANDLES",
        (verbs::UVERBS_OBJECT_DEVICE, verbs::UVERBS_METHOD_QUERY_PORT) => "QUERY_PORT",
        (verbs::UVERBS_OBJECT_DEVICE, verbs::UVERBS_METHOD_GET_CONTEXT) => "GET_CONTEXT",
        (verbs::UVERBS_OBJECT_DEVICE, verbs::UVERBS_METHOD_QUERY_CONTEXT) => "QUERY_CONTEXT",
        (verbs::UVERBS_OBJECT_DEVICE, verbs::UVERBS_METHOD_QUERY_GID_TABLE) => "QUERY_GID_TABLE",
        (verbs::UVERBS_OBJECT_DEVICE, verbs::UVERBS_METHOD_QUERY_GID_ENTRY) => "QUERY_GID_ENTRY",
        (verbs::UVERBS_OBJECT_PD, verbs::UVERBS_METHOD_PD_DESTROY) => "PD_DESTROY",
        (verbs::UVERBS_OBJECT_MR, verbs::UVERBS_METHOD_MR_DESTROY) => "MR_DESTROY",
        (verbs::UVERBS_OBJECT_CQ, verbs::UVERBS_METHOD_CQ_CREATE) => "CQ_CREATE",
        (verbs::UVERBS_OBJECT_CQ, verbs::UVERBS_METHOD_CQ_DESTROY) => "CQ_DESTROY",
        (verbs::UVERBS_OBJECT_AH, verbs::UVERBS_METHOD_AH_DESTROY) => "AH_DESTROY",
        (verbs::UVERBS_OBJECT_SRQ, verbs::UVERBS_METHOD_SRQ_CREATE) => "SRQ_CREATE",
        (verbs::UVERBS_OBJECT_SRQ, verbs::UVERBS_METHOD_SRQ_DESTROY) => "SRQ_DESTROY",
        (verbs::UVERBS_OBJECT_QP, verbs::UVERBS_METHOD_QP_CREATE) => "QP_CREATE",
        (verbs::UVERBS_OBJECT_QP, verbs::UVERBS_METHOD_QP_DESTROY) => "QP_DESTROY",
        (verbs::UVERBS_OBJECT_ASYNC_EVENT, verbs::UVERBS_METHOD_ASYNC_EVENT_ALLOC) => {
            "ASYNC_EVENT_ALLOC"
        }
        (obj::DEVX, devx::METHOD_OTHER) => "DEVX_OTHER",
        (obj::DEVX, devx::METHOD_QUERY_UAR) => "DEVX_QUERY_UAR",
        (obj::DEVX, devx::METHOD_QUERY_EQN) => "DEVX_QUERY_EQN",
        (obj::DEVX, devx::METHOD_SUBSCRIBE_EVENT) => "DEVX_SUBSCRIBE_EVENT",
        (obj::DEVX_OBJ, devx_obj::METHOD_CREATE) => "DEVX_OBJ_CREATE",
        (obj::DEVX_OBJ, devx_obj::METHOD_DESTROY) => "DEVX_OBJ_DESTROY",
        (obj::DEVX_OBJ, devx_obj::METHOD_MODIFY) => "DEVX_OBJ_MODIFY",
        (obj::DEVX_OBJ, devx_obj::METHOD_QUERY) => "DEVX_OBJ_QUERY",
        (obj::DEVX_OBJ, devx_obj::METHOD_ASYNC_QUERY) => "DEVX_OBJ_ASYNC_QUERY",
        (obj::DEVX_UMEM, umem::METHOD_REG) => "DEVX_UMEM_REG",
        (obj::DEVX_UMEM, umem::METHOD_DEREG) => "DEVX_UMEM_DEREG",
        (obj::DEVX_ASYNC_CMD_FD, async_fd::METHOD_ALLOC) => "DEVX_ASYNC_CMD_FD_ALLOC",
        (obj::DEVX_ASYNC_EVENT_FD, async_fd::METHOD_ALLOC) => "DEVX_ASYNC_EVENT_FD_ALLOC",
        (obj::UAR, uar::METHOD_ALLOC) => "UAR_OBJ_ALLOC",
        (obj::UAR, uar::METHOD_DESTROY) => "UAR_OBJ_DESTROY",
        _ => "UNKNOWN_METHOD",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_offsets_match_the_uapi() {
        let cmd = IoctlCmd::new(
            obj::DEVX_OBJ,
            devx_obj::METHOD_CREATE,
            [IoctlAttr::default(); 3],
        );
        assert_eq!(std::mem::size_of_val(&cmd), 72);
        assert_eq!(cmd.hdr.length, 72);
        let base = &cmd as *const _ as usize;
        assert_eq!(&cmd.attrs[0] as *const _ as usize - base, 24);
        assert_eq!(std::mem::offset_of!(IoctlHdr, reserved1), 8);
        assert_eq!(std::mem::offset_of!(IoctlHdr, driver_id), 16);
        assert_eq!(std::mem::offset_of!(IoctlAttr, data), 8);
    }

    #[test]
    fn header_round_trips() {
        let h = IoctlHdr {
            length: 40,
            object_id: 0x1001,
            method_id: 0x1001,
            num_attrs: 1,
            reserved1: 0,
            driver_id: 1,
            reserved2: 0,
        };
        assert_eq!(IoctlHdr::from_bytes(&h.to_bytes()), h);
        let a = IoctlAttr::u32_in(0x1000, 0xdead_beef);
        assert_eq!(IoctlAttr::from_bytes(&a.to_bytes()), a);
        assert_eq!(&a.to_bytes()[8..12], &0xdead_beefu32.to_ne_bytes());
    }

    #[test]
    fn ptr_in_inlines_up_to_eight_bytes() {
        let small = [1u8, 2, 3, 4];
        let a = IoctlAttr::ptr_in(7, &small);
        assert_eq!(a.len, 4);
        assert_eq!(&a.data.to_ne_bytes()[..4], &small);
        let big = [9u8; 16];
        let b = IoctlAttr::ptr_in(7, &big);
        assert_eq!(b.data, big.as_ptr() as u64);
        assert_eq!(b.len, 16);
    }

    #[test]
    fn ucontext_structs_round_trip() {
        let req = AllocUcontextReq::devx();
        let bytes = req.to_bytes();
        assert_eq!(&bytes[8..12], &1u32.to_ne_bytes());
        assert_eq!(bytes[16], 1);
        assert_eq!(&bytes[24..32], &3u64.to_ne_bytes());
        assert_eq!(AllocUcontextReq::from_bytes(&bytes), (req, false));
        let resp = UcontextResp {
            qp_tab_size: 1 << 18,
            num_ports: 1,
            response_length: 72,
            cqe_version: 1,
            log_uar_size: 12,
            num_uars_per_page: 1,
            dump_fill_mkey: 0x100,
            ..Default::default()
        };
        assert_eq!(UcontextResp::from_bytes(&resp.to_bytes()), resp);
        assert_eq!(UcontextResp::from_bytes(&[0xff; 3]).qp_tab_size, 0);
    }
}
