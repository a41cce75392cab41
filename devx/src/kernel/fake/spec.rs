//! Attribute specs of each uverbs method the fake implements, as in Linux
//! 6.1's method declarations: which attributes exist, their kinds and sizes,
//! which are mandatory, and how rdma-core flags them.

use crate::kernel::abi::{async_fd, devx, devx_obj, obj, uar, umem, verbs};

/// Where an object handle may come from (uverbs object types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ObjType {
    DevxObj,
    Umem,
    Uar,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FdType {
    AsyncCmd,
    AsyncEvent,
}

/// Attribute kinds of the kernel's method specs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    IdrNew,
    IdrRead(Option<ObjType>),
    IdrDestroy(ObjType),
    FdNew,
    FdRead(FdType),
    /// PTR_IN with `min..=max` bytes.
    PtrIn(u16, u16),
    /// PTR_OUT with `min..=max` bytes.
    PtrOut(u16, u16),
    ConstIn,
    /// FLAGS_IN with these bits allowed.
    FlagsIn(u64),
    RawFd,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct AttrSpec {
    pub(super) id: u16,
    pub(super) kind: Kind,
    /// The kernel refuses the call when this attribute is missing.
    pub(super) mandatory: bool,
    /// rdma-core sends it with UVERBS_ATTR_F_MANDATORY.
    pub(super) rdma_core_mandatory: bool,
}

const fn m(id: u16, kind: Kind) -> AttrSpec {
    AttrSpec {
        id,
        kind,
        mandatory: true,
        rdma_core_mandatory: true,
    }
}

const fn o(id: u16, kind: Kind) -> AttrSpec {
    AttrSpec {
        id,
        kind,
        mandatory: false,
        rdma_core_mandatory: true,
    }
}

const ANY: u16 = u16::MAX;
const MAILBOX_IN: Kind = Kind::PtrIn(16, ANY);
const MAILBOX_OUT: Kind = Kind::PtrOut(16, ANY);
const U32_IN: Kind = Kind::PtrIn(4, 4);
const U64_IN: Kind = Kind::PtrIn(8, 8);
const U32_OUT: Kind = Kind::PtrOut(4, 4);
const U64_OUT: Kind = Kind::PtrOut(8, 8);

/// IB access flags UMEM_REG admits.
const UMEM_ACCESS: u64 = 0x1 | 0x2 | 0x4 | 0x0010_0000;

static GET_CONTEXT: &[AttrSpec] = &[
    o(verbs::UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS, U32_OUT),
    o(verbs::UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT, U64_OUT),
    o(verbs::UVERBS_ATTR_UHW_IN, Kind::PtrIn(0, ANY)),
    o(verbs::UVERBS_ATTR_UHW_OUT, Kind::PtrOut(0, ANY)),
];
static OTHER: &[AttrSpec] = &[
    m(devx::OTHER_CMD_IN, MAILBOX_IN),
    m(devx::OTHER_CMD_OUT, MAILBOX_OUT),
];
static QUERY_GID_TABLE: &[AttrSpec] = &[
    m(verbs::UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE, Kind::ConstIn),
    o(verbs::UVERBS_ATTR_QUERY_GID_TABLE_FLAGS, Kind::FlagsIn(0)),
    m(
        verbs::UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES,
        Kind::PtrOut(0, ANY),
    ),
    m(verbs::UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES, U64_OUT),
];
static QUERY_UAR: &[AttrSpec] = &[m(0x1000, U32_IN), m(0x1001, U32_OUT)];
static QUERY_EQN: &[AttrSpec] = &[
    m(devx::QUERY_EQN_USER_VEC, U32_IN),
    m(devx::QUERY_EQN_DEV_EQN, U32_OUT),
];
static SUBSCRIBE: &[AttrSpec] = &[
    m(devx::SUBSCRIBE_FD_HANDLE, Kind::FdRead(FdType::AsyncEvent)),
    o(
        devx::SUBSCRIBE_OBJ_HANDLE,
        Kind::IdrRead(Some(ObjType::DevxObj)),
    ),
    m(devx::SUBSCRIBE_TYPE_NUM_LIST, Kind::PtrIn(2, ANY)),
    o(devx::SUBSCRIBE_FD_NUM, U32_IN),
    o(devx::SUBSCRIBE_COOKIE, U64_IN),
];
static OBJ_CREATE: &[AttrSpec] = &[
    m(devx_obj::HANDLE, Kind::IdrNew),
    m(devx_obj::CMD_IN, MAILBOX_IN),
    m(devx_obj::CMD_OUT, MAILBOX_OUT),
];
static OBJ_DESTROY: &[AttrSpec] = &[m(devx_obj::HANDLE, Kind::IdrDestroy(ObjType::DevxObj))];
static OBJ_QUERY_MODIFY: &[AttrSpec] = &[
    m(devx_obj::HANDLE, Kind::IdrRead(None)),
    m(devx_obj::CMD_IN, MAILBOX_IN),
    m(devx_obj::CMD_OUT, MAILBOX_OUT),
];
static OBJ_ASYNC_QUERY: &[AttrSpec] = &[
    m(devx_obj::HANDLE, Kind::IdrRead(None)),
    m(devx_obj::CMD_IN, MAILBOX_IN),
    m(devx_obj::ASYNC_FD, Kind::FdRead(FdType::AsyncCmd)),
    m(devx_obj::ASYNC_WR_ID, U64_IN),
    m(devx_obj::ASYNC_OUT_LEN, Kind::ConstIn),
];
static UMEM_REG: &[AttrSpec] = &[
    m(umem::HANDLE, Kind::IdrNew),
    m(umem::ADDR, U64_IN),
    m(umem::LEN, U64_IN),
    o(umem::ACCESS, Kind::FlagsIn(UMEM_ACCESS)),
    m(umem::OUT_ID, U32_OUT),
    AttrSpec {
        id: umem::PGSZ_BITMAP,
        kind: Kind::ConstIn,
        mandatory: false,
        rdma_core_mandatory: false,
    },
    o(umem::DMABUF_FD, Kind::RawFd),
];
static UMEM_DEREG: &[AttrSpec] = &[m(umem::HANDLE, Kind::IdrDestroy(ObjType::Umem))];
static ASYNC_CMD_ALLOC: &[AttrSpec] = &[m(async_fd::HANDLE, Kind::FdNew)];
static ASYNC_EVENT_ALLOC: &[AttrSpec] = &[
    m(async_fd::HANDLE, Kind::FdNew),
    m(
        async_fd::EVENT_FLAGS,
        Kind::FlagsIn(async_fd::FLAG_OMIT_DATA as u64),
    ),
];
static VERBS_ASYNC_EVENT_ALLOC: &[AttrSpec] = &[m(
    verbs::UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE,
    Kind::FdNew,
)];
static UAR_ALLOC: &[AttrSpec] = &[
    m(uar::HANDLE, Kind::IdrNew),
    m(uar::TYPE, Kind::ConstIn),
    m(uar::MMAP_OFFSET, U64_OUT),
    m(uar::MMAP_LENGTH, U32_OUT),
    m(uar::PAGE_ID, U32_OUT),
];
static UAR_DESTROY: &[AttrSpec] = &[m(uar::HANDLE, Kind::IdrDestroy(ObjType::Uar))];

pub(super) fn method_spec(object: u16, method: u16) -> Option<&'static [AttrSpec]> {
    Some(match (object, method) {
        (verbs::UVERBS_OBJECT_DEVICE, verbs::UVERBS_METHOD_GET_CONTEXT) => GET_CONTEXT,
        (verbs::UVERBS_OBJECT_DEVICE, verbs::UVERBS_METHOD_QUERY_GID_TABLE) => QUERY_GID_TABLE,
        (verbs::UVERBS_OBJECT_ASYNC_EVENT, verbs::UVERBS_METHOD_ASYNC_EVENT_ALLOC) => {
            VERBS_ASYNC_EVENT_ALLOC
        }
        (obj::DEVX, devx::METHOD_OTHER) => OTHER,
        (obj::DEVX, devx::METHOD_QUERY_UAR) => QUERY_UAR,
        (obj::DEVX, devx::METHOD_QUERY_EQN) => QUERY_EQN,
        (obj::DEVX, devx::METHOD_SUBSCRIBE_EVENT) => SUBSCRIBE,
        (obj::DEVX_OBJ, devx_obj::METHOD_CREATE) => OBJ_CREATE,
        (obj::DEVX_OBJ, devx_obj::METHOD_DESTROY) => OBJ_DESTROY,
        (obj::DEVX_OBJ, devx_obj::METHOD_MODIFY) => OBJ_QUERY_MODIFY,
        (obj::DEVX_OBJ, devx_obj::METHOD_QUERY) => OBJ_QUERY_MODIFY,
        (obj::DEVX_OBJ, devx_obj::METHOD_ASYNC_QUERY) => OBJ_ASYNC_QUERY,
        (obj::DEVX_UMEM, umem::METHOD_REG) => UMEM_REG,
        (obj::DEVX_UMEM, umem::METHOD_DEREG) => UMEM_DEREG,
        (obj::DEVX_ASYNC_CMD_FD, async_fd::METHOD_ALLOC) => ASYNC_CMD_ALLOC,
        (obj::DEVX_ASYNC_EVENT_FD, async_fd::METHOD_ALLOC) => ASYNC_EVENT_ALLOC,
        (obj::UAR, uar::METHOD_ALLOC) => UAR_ALLOC,
        (obj::UAR, uar::METHOD_DESTROY) => UAR_DESTROY,
        _ => return None,
    })
}
