//! The mlx5 DEVX object API: devices, contexts, firmware objects with RAII
//! destroy, general and asynchronous commands, UMEM and UAR, behind one
//! provider seam served by the kernel, the embedded emulated device (the
//! `emulator` feature, on by default), or recorded fixtures.

pub mod admission;
pub mod async_event;
pub mod cmd_comp;
pub mod context;
mod deferred;
pub mod device;
mod devmem;
pub mod error;
#[cfg(any(feature = "emulator", feature = "fake-kernel"))]
mod eventfd;
pub mod events;
pub mod fixture;
pub mod kernel;
pub mod live;
mod num_hash;
pub mod obj;
pub mod pending;
pub mod provider;
pub mod reactor;
#[cfg(feature = "emulator")]
pub mod sim;
pub mod uar;
pub mod umem;

pub use async_event::{ib_event, AsyncEventDesc, AsyncEventFile};
pub use cmd_comp::CmdComp;
pub use context::Context;
pub use device::Device;
pub use error::{Error, FwReport, Result};
pub use events::{event_type, port_change, Events};
pub use live::{live_objects, LiveObject};
pub use obj::{DestroyFailed, Obj};
pub use pending::Pending;
pub use provider::{
    AsyncCompletion, CmdChannel, DeviceInfo, DevxEvent, EventChannel, GidTableEntry, GidType,
    Handle, Provider, ProviderContext, UarAlloc, UarKind, UarPage,
};
/// Names the emulated device's syndromes (`sim::syndrome::name`).
#[cfg(feature = "emulator")]
pub use sim::syndrome::name as syndrome_name;
pub use uar::{BfStore, BlueFlame, HeldDoorbell, Uar};
pub use umem::{access, ExclusiveMemory, SharedMemory, StableMemory, Umem};
