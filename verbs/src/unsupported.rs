//! Verbs of the channel interface that mlx5 devices do not provide. Each
//! returns `Unsupported` with the reason; handle types that can never exist
//! are uninhabited, so their operations type-check but cannot be reached.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::pd::Pd;
use crate::qp::Qp;

const NO_RD: &str = "RD transport is not implemented by mlx5 devices \
                     (no reliable datagram domains or EE contexts)";
const NO_SPECIAL_QP: &str = "QP0/QP1 belong to the kernel driver and its MAD agents; \
                             DEVX cannot create special QPs";
const NO_LOCAL_MAD: &str = "MAD_IFC is a driver command that DEVX does not reliably admit, \
                            and mlx5 firmware runs the subnet management agent itself";
const NO_PMR: &str = "DEVX users cannot name physical addresses: the kernel forces \
                      UMEM-backed MKEYs, so only virtual memory can be registered";
const NO_MODIFY_PORT: &str = "port attributes belong to the kernel driver and the subnet \
                              manager; MODIFY_HCA_VPORT_CONTEXT and MODIFY_NIC_VPORT_CONTEXT \
                              are not DEVX commands";

/// A reliable datagram domain. mlx5 implements no RD transport: no value exists.
#[derive(Debug)]
pub enum Rdd {}

/// An end-to-end context (RD). mlx5 implements no RD transport: no value exists.
#[derive(Debug)]
pub enum Eec {}

/// Which special QP `create_spl_qp` would make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialQp {
    /// QP0, subnet management.
    Smi,
    /// QP1, general services.
    Gsi,
}

/// Port attribute changes (`ci_modify_ca`'s `ib_port_attr_mod_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortModify {
    pub set_port_cap_mask: u32,
    pub clr_port_cap_mask: u32,
    pub reset_qkey_counter: bool,
    pub reset_pkey_counter: bool,
}

impl Context {
    /// `ci_allocate_rdd`.
    pub fn alloc_rdd(&self) -> Result<Rdd> {
        Err(Error::unsupported("alloc_rdd", NO_RD))
    }

    /// `ci_create_eec`: needs an RDD, which cannot exist.
    pub fn create_eec(&self, rdd: &Rdd) -> Result<Eec> {
        match *rdd {}
    }

    /// `ci_create_spl_qp`.
    pub fn create_spl_qp(&self, _pd: &Pd, _kind: SpecialQp, port: u8) -> Result<Qp> {
        self.check_port("create_spl_qp", port)?;
        Err(Error::unsupported("create_spl_qp", NO_SPECIAL_QP))
    }

    /// `ci_local_mad`.
    pub fn local_mad(&self, port: u8, _mad_in: &[u8; 256]) -> Result<[u8; 256]> {
        self.check_port("local_mad", port)?;
        Err(Error::unsupported("local_mad", NO_LOCAL_MAD))
    }

    /// `ci_modify_ca` (`ibv_modify_port`).
    pub fn modify_port(&self, port: u8, _change: &PortModify) -> Result<()> {
        self.check_port("modify_port", port)?;
        Err(Error::unsupported("modify_port", NO_MODIFY_PORT))
    }
}

impl Rdd {
    /// `ci_deallocate_rdd`.
    pub fn dealloc(self) -> Result<()> {
        match self {}
    }
}

impl Eec {
    /// `ci_modify_eec`.
    pub fn modify(&self) -> Result<()> {
        match *self {}
    }

    /// `ci_query_eec`.
    pub fn query(&self) -> Result<()> {
        match *self {}
    }

    /// `ci_destroy_eec`.
    pub fn destroy(self) -> Result<()> {
        match self {}
    }
}

/// One physical buffer of a `register_pmr` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhysBuf {
    pub addr: u64,
    pub size: u64,
}

impl Pd {
    /// `ci_register_pmr`.
    pub fn register_pmr(&self, _bufs: &[PhysBuf], _iova: u64) -> Result<()> {
        Err(Error::unsupported("register_pmr", NO_PMR))
    }

    /// `ci_modify_pmr`.
    pub fn modify_pmr(&self, _bufs: &[PhysBuf], _iova: u64) -> Result<()> {
        Err(Error::unsupported("modify_pmr", NO_PMR))
    }
}
