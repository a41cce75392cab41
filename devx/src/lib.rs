//! The mlx5 DEVX object API: devices, contexts, firmware objects with RAII
//! destroy, general and asynchronous commands, UMEM and UAR, behind one
//! provider seam served by the kernel, the embedded emulated device, or
//! recorded fixtures.

pub mod admission;
pub mod async_event;
pub mod cmd_comp;
pub mod context;
mod deferred;
pub mod device;
mod devmem;
pub mod error;
mod eventfd;
pub mod events;
pub mod fixture;
pub mod kernel;
pub mod live;
pub mod obj;
pub mod pending;
pub mod provider;
pub mod reactor;
pub mod sim;
pub mod uar;
pub mod umem;

pub use async_event::{ib_event, AsyncEventDesc, AsyncEventFile};
pub use cmd_comp::CmdComp;
pub use context::Context;
pub use device::Device;
pub use error::{Error, FwReport, Result};
pub use events::{event_type, Events};
pub use live::{live_objects, LiveObject};
pub use obj::{DestroyFailed, Obj};
pub use pending::Pending;
pub use provider::{
    AsyncCompletion, CmdChannel, DeviceInfo, DevxEvent, EventChannel, GidTableEntry, GidType,
    Handle, Provider, ProviderContext, UarAlloc, UarKind, UarPage,
};
/// Names the emulated device's syndromes (`sim::syndrome::name`).
pub use sim::syndrome::name as syndrome_name;
pub use uar::{BlueFlame, Uar};
pub use umem::{access, ExclusiveMemory, SharedMemory, StableMemory, Umem};
