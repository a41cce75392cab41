//! The classic RDMA verbs as thin builders over DEVX.
//!
//! Every verb builds its PRM mailboxes with `prm-layouts` and submits them
//! through the `devx` object API, so verbs objects and raw DEVX objects mix
//! freely: a verbs CQ's number can go into a raw DEVX QP, and a verbs
//! [`Context`] can be made from a DEVX context already in use.
//!
//! Ownership follows the verbs model with reference-counted handles and no
//! lifetimes in the handle types: every object keeps what it depends on alive
//! (a QP its PD, CQs and SRQ), dropping an object destroys it before anything
//! it uses, and an explicit `destroy`/`dealloc` returns the result (and the
//! object itself if it was refused). A constructor that issues several
//! commands releases whatever it already made when a later step fails.
//!
//! The multi-command verbs (CQ, QP and its transitions, MR, MW, SRQ, PD)
//! have `_async` forms whose commands queue on a [`devx::CmdComp`]
//! ([`Context::cmd_comp`]) and complete on the device's own command queue;
//! each returns a future (no runtime needed). The blocking verb and its
//! async form run the same description of the verb, and dropping the
//! future before it resolves leaves nothing behind.
//!
//! Registered memory is bytes shared with the device: safe code reads and
//! writes it by copy ([`Mr::write_at`], [`Mr::read_at`], [`Mr::read_vec`],
//! [`Mr::fill`]), never through a reference the device could write under,
//! and only memory a region owns exclusively can be registered writable;
//! memory the rest of the program shares is registered read-only. Memory the
//! device still uses when its owner drops it stays mapped until the device
//! lets go. See [`Mr`].
//!
//! Verbs mlx5 does not provide (RD, EE contexts, special QPs, local MADs,
//! physical MRs) return [`Error::Unsupported`] saying why.

mod access;
mod ah;
mod async_event;
mod comp_channel;
mod context;
mod cq;
mod cq_notify;
pub mod datapath;
mod device;
mod endpoint;
mod error;
mod exec;
mod mcast;
mod mr;
mod mw;
mod pd;
mod port;
mod qp;
mod report;
mod srq;
mod unsupported;
mod util;

/// The DEVX layer underneath, for raw objects beside verbs ones
/// ([`Context::devx`]) without a dependency of one's own.
pub use devx;

pub use access::AccessFlags;
pub use ah::{mac_from_gid, Ah, AhAttr, GlobalRoute};
pub use async_event::{
    AsyncElement, AsyncEvent, AsyncEventType, AsyncEvents, EventHandler, NextAsyncEvent,
};
pub use comp_channel::CompChannel;
pub use context::{Context, LinkLayer};
pub use cq::{Cq, CqAttr, CqInit, CQE_SIZE};
pub use datapath::{
    next_rkey, Completion, MwBind, Poll, RecvQueue, RecvWr, SendBatch, SendOp, SendQueue, SendWr,
    Sge, Wc, WcOpcode, WcStatus,
};
pub use device::{AtomicCap, DeviceAttr, DeviceCapFlags};
pub use endpoint::{Endpoint, ParseEndpointError};
pub use error::{DestroyError, Error, Result};
pub use exec::VERBS_WR_ID_BIT;
pub use mcast::McastAttachment;
pub use mr::{Mr, MrAttr};
pub use mw::{Mw, MwType};
pub use pd::{Pd, Td};
pub use port::{Gid, GidEntry, GidType, Mtu, PortAttr, PortState};
pub use qp::{
    ConnectOpts, InitAttr, Qp, QpAttr, QpCap, QpInit, QpServiceType, QpState, QpTarget, QpType,
    RtrAttr, RtsAttr, RtsModify,
};
pub use report::{phys_state_name, DeviceReport, PortReport};
pub use srq::{Srq, SrqAttr, SrqInit};
pub use unsupported::{Eec, PhysBuf, PortModify, Rdd, SpecialQp};
pub use util::QueueMemory;
