//! Linux kernel provider: mlx5 devices through `/dev/infiniband/uverbsN` and
//! the uverbs ioctl ABI, with no rdma-core underneath.
//!
//! * [`discover`] / [`discover_in`] find mlx5 devices in sysfs (by driver and
//!   PCI vendor, never by name); each [`KernelDevice`] is a [`Provider`].
//! * [`KernelContext`] is one open uverbs file with a DEVX ucontext; its
//!   methods are the DEVX ioctls (object create/query/modify/destroy, general
//!   commands, async queries, UMEM, UAR, EQN, events).
//! * Every system call goes through the [`Sys`] trait. With the
//!   `fake-kernel` feature (off by default; the tests turn it on),
//!   `fake::FakeKernel` answers like the kernel, and `bench_overhead`
//!   measures the provider's own cost per command against an instant fake.
//!
//! [`Provider`]: crate::provider::Provider

pub mod abi;
#[cfg(feature = "fake-kernel")]
mod bench;
mod context;
mod discover;
#[cfg(feature = "fake-kernel")]
pub mod fake;
mod sys;

#[cfg(feature = "fake-kernel")]
pub use bench::{bench_overhead, BenchResult};
pub use context::{AllocPath, KernelCmdChannel, KernelContext, KernelEventChannel, KernelUarPage};
pub use discover::{
    discover, discover_in, discover_providers, discover_with, Discovery, KernelDevice, LinkLayer,
    PortInfo, PortState, Skipped, MELLANOX_IEEE_VENDOR, MELLANOX_PCI_VENDOR, MLX5_UVERBS_ABI,
};
pub use sys::{real as real_sys, Errno, RealSys, Sys, SysResult};
