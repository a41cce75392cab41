//! Object families beyond the core set, one file each: SRQ/RMP/XRC_SRQ,
//! SQ/RQ, TIR/TIS/RQT, flow steering, counters, general objects and
//! multicast attachment.

pub mod counters;
pub mod flow;
pub mod general_obj;
pub mod mcg;
pub mod srq;
pub mod tir;
pub mod wq;
