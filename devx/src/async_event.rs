//! A context's asynchronous events as the uverbs async-event file reports
//! them (`struct ib_uverbs_async_event_desc`): port state changes and the
//! device-fatal error, which do not come through DEVX event channels.
//! The kernel provider reads the file the kernel gives the context; the
//! emulated device keeps one per context and raises the same events for
//! the same causes (its link going down or up, an injected fatal error).

use std::any::Any;
use std::os::fd::RawFd;

use crate::error::Result;

/// `enum ib_event_type`: what an async event reports.
pub mod ib_event {
    pub const CQ_ERR: u32 = 0;
    pub const QP_FATAL: u32 = 1;
    pub const QP_REQ_ERR: u32 = 2;
    pub const QP_ACCESS_ERR: u32 = 3;
    pub const COMM_EST: u32 = 4;
    pub const SQ_DRAINED: u32 = 5;
    pub const PATH_MIG: u32 = 6;
    pub const PATH_MIG_ERR: u32 = 7;
    pub const DEVICE_FATAL: u32 = 8;
    pub const PORT_ACTIVE: u32 = 9;
    pub const PORT_ERR: u32 = 10;
    pub const LID_CHANGE: u32 = 11;
    pub const PKEY_CHANGE: u32 = 12;
    pub const SM_CHANGE: u32 = 13;
    pub const SRQ_ERR: u32 = 14;
    pub const SRQ_LIMIT_REACHED: u32 = 15;
    pub const QP_LAST_WQE_REACHED: u32 = 16;
    pub const CLIENT_REREGISTER: u32 = 17;
    pub const GID_CHANGE: u32 = 18;
    pub const WQ_FATAL: u32 = 19;
}

/// One event read from the async-event file (`struct
/// ib_uverbs_async_event_desc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AsyncEventDesc {
    /// The port number for port events, the user handle of the object for
    /// object events, 0 for the device.
    pub element: u64,
    /// An [`ib_event`] value.
    pub event_type: u32,
}

/// A context's async-event file. Its fd polls readable while an event is
/// queued.
pub trait AsyncEventFile: Send + Sync {
    fn fd(&self) -> RawFd;
    /// The next event, without blocking.
    fn try_get(&self) -> Result<Option<AsyncEventDesc>>;
    fn as_any(&self) -> &dyn Any;
}
