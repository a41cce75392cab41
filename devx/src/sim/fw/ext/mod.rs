//! Object families beyond the core set, one file each: SRQ/RMP/XRC_SRQ,
//! SQ/RQ, TIR/TIS/RQT, flow steering, counters, general objects and
//! multicast attachment.

pub(crate) mod counters;
pub(crate) mod flow;
pub(crate) mod general_obj;
pub(crate) mod mcg;
pub(crate) mod srq;
pub(crate) mod tir;
pub(crate) mod wq;
