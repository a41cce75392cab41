//! A preload library that makes the embedded emulated ConnectX look like a
//! real mlx5 device to unmodified rdma-core programs (libibverbs + libmlx5):
//! `LD_PRELOAD=libdevx_preload.so ibv_devices`.
//!
//! * [`paths`]: which paths are taken over (`/sys/class/infiniband*`,
//!   `/dev/infiniband`) and where they lead;
//! * [`tree`]: the private sysfs tree those paths resolve to;
//! * [`uverbs`]: the uverbs character device: the ioctl ABI of Linux 6.1's
//!   uverbs + mlx5_ib, answered by the emulator;
//! * [`doorbell`]: the watch thread through which the emulated device
//!   notices the doorbells a program stores into its mapped UAR pages;
//! * [`clock`]: the core-clock and clock-info pages of the device's
//!   free-running clock;
//! * [`faults`]: link changes and fatal errors a test program raises;
//! * `interpose` (only in the built library): the libc entry points.
//!
//! See the crate's README for what is intercepted and why.

pub mod abi;
pub mod clock;
pub mod doorbell;
pub mod faults;
mod methods;
pub mod paths;
pub mod state;
pub mod tree;
pub mod usermem;
pub mod uverbs;

// The interposed libc symbols exist only in the shared library: a test
// binary that exported `open` or `ioctl` would redirect its own calls.
#[cfg(not(test))]
mod interpose;
