//! The provider seam: every device backend (kernel, emulated, record, replay)
//! implements these traits, and every command crosses them as a mailbox in and
//! a mailbox out — the same bytes whatever the backend.

use std::any::Any;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::live::LiveObject;
use crate::uar::{BfHalf, BfStore};

/// A provider's name for an object it created (the kernel's IDR handle, the
/// emulator's table key). Not the PRM object number.
pub type Handle = u32;

/// What a device is and where it lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Name used to open it: `mlx5_0`, `sim0`…
    pub name: String,
    /// Which provider serves it: `kernel`, `sim`, `replay`…
    pub provider: String,
    /// True for the embedded emulated device (and fixtures recorded from it).
    pub emulated: bool,
    /// Where it was found (`/dev/infiniband/uverbs0`) or what it models.
    pub location: String,
    pub node_guid: u64,
    pub fw_version: String,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub num_ports: u8,
}

/// A device backend: opens contexts.
pub trait Provider: Send + Sync {
    fn info(&self) -> DeviceInfo;
    /// A new context with its own DEVX uid.
    fn open(&self) -> Result<Arc<dyn ProviderContext>>;
    /// Every live firmware object of the device, all users together (see
    /// [`crate::live_objects`]). Only the emulated device can tell; the
    /// kernel tracks them in RDMA netlink, which this library does not read.
    fn live_objects(&self) -> Result<Vec<LiveObject>> {
        Err(Error::unsupported(
            format!("listing the live objects of {}", self.info().name),
            "the kernel tracks them in RDMA netlink (`rdma res`), which this library does not read",
        ))
    }
}

/// Kind of UAR page to allocate (mlx5 `MLX5DV_UAR_ALLOC_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UarKind {
    /// Write-combining page with BlueFlame registers.
    BlueFlame = 0,
    /// Non-cached page, plain doorbells only.
    NonCached = 1,
}

/// A mapped UAR page. Writes to it are doorbells.
pub trait UarPage: Send + Sync {
    /// Start of the page as mapped into this process.
    fn base(&self) -> *mut u8;
    /// 64-bit doorbell store at `offset` within the page. `value` is written
    /// exactly as its bytes are laid out in memory (callers pre-swap to big
    /// endian). A store outside an aligned 8-byte slot of the page is dropped.
    fn write64(&self, offset: usize, value: u64);
    /// A send doorbell: [`UarPage::write64`] at `half`'s offset, which is
    /// always in the page and aligned, so a page may store it unchecked.
    #[inline]
    fn write_bf(&self, half: BfHalf, value: u64) {
        self.write64(half.offset(), value);
    }
    /// How a send doorbell may be stored into the page without a call
    /// through it: only [`UarPage::write_bf`] unless the page says so.
    fn bf_store(&self) -> BfStore {
        BfStore::Call
    }
    /// The program polled and found nothing to do: a device that runs in
    /// software (the emulated one) does the work pending for it on the
    /// caller's thread, such as receiving what arrived at its network
    /// port. Whether it did any, so that a poll looks again. Hardware
    /// needs nothing.
    fn progress(&self) -> bool {
        false
    }
    /// Whether the page is write-combining device memory (a mapped BAR),
    /// whose stores need `sfence` around them to leave the CPU in order.
    /// A page in ordinary memory, read by a device that runs in program
    /// order with its writer, says `false`: plain store order suffices.
    fn write_combining(&self) -> bool {
        true
    }
}

/// An allocated UAR.
pub struct UarAlloc {
    pub handle: Handle,
    /// The UAR index PRM fields such as `uar_page` want.
    pub page_id: u32,
    pub page: Arc<dyn UarPage>,
}

/// Kind of a GID table entry (`enum ib_uverbs_gid_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand port GID.
    Ib,
    RoceV1,
    RoceV2,
}

/// One valid entry of the kernel's GID table (`struct ib_uverbs_gid_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GidTableEntry {
    /// The GID as it goes on the wire (an IPv4 address as `::ffff:a.b.c.d`).
    pub gid: [u8; 16],
    pub index: u32,
    /// Port number, from 1.
    pub port: u32,
    pub gid_type: GidType,
    /// The network device the entry belongs to (0 on InfiniBand).
    pub netdev_ifindex: u32,
}

/// Result of one asynchronous command: its `wr_id` and the outbox or the error.
pub type AsyncCompletion = (u64, Result<Vec<u8>>);

/// A completion channel for asynchronous commands (kernel: a DEVX async cmd fd).
pub trait CmdChannel: Send + Sync {
    /// A file descriptor that polls readable while a completion is queued.
    fn fd(&self) -> RawFd;
    /// Next completion, without blocking.
    fn try_get(&self) -> Result<Option<AsyncCompletion>>;
    /// Next completion, blocking until one arrives.
    fn get(&self) -> Result<AsyncCompletion>;
    /// The next completion if the channel holds one in memory already,
    /// found without a system call; `None` when it does not (or cannot
    /// tell: then [`CmdChannel::try_get`] is the way to ask).
    fn try_get_queued(&self) -> Option<AsyncCompletion> {
        None
    }
    /// Wakes `waker` on the next completion pushed (at once if one is
    /// queued). `false`: the channel cannot, and the caller waits for its
    /// fd's readiness instead.
    fn wake_on_completion(&self, waker: &std::task::Waker) -> bool {
        let _ = waker;
        false
    }
    /// The fd a future registers with the reactor when
    /// [`CmdChannel::wake_on_completion`] returns `false`.
    fn wait_fd(&self) -> RawFd {
        self.fd()
    }
    /// Lets a provider find its own channel type behind the trait object.
    fn as_any(&self) -> &dyn Any;
}

/// One opened context on a device. Methods mirror the DEVX ioctl methods.
pub trait ProviderContext: Send + Sync {
    /// The device this context was opened on.
    fn info(&self) -> DeviceInfo;
    /// OBJ_CREATE: run a create command; the outbox is filled even on firmware failure.
    fn create(&self, inbox: &[u8], outbox: &mut [u8]) -> Result<Handle>;
    /// OBJ_QUERY on an object created by this context.
    fn query(&self, obj: Handle, inbox: &[u8], outbox: &mut [u8]) -> Result<()>;
    /// OBJ_MODIFY on an object created by this context.
    fn modify(&self, obj: Handle, inbox: &[u8], outbox: &mut [u8]) -> Result<()>;
    /// OBJ_DESTROY. `destroy_inbox` is the command the library derived at create
    /// time; the kernel runs its own copy, the emulator runs this one.
    fn destroy(&self, obj: Handle, destroy_inbox: &[u8]) -> Result<()>;
    /// OTHER: a command that names no object.
    fn general(&self, inbox: &[u8], outbox: &mut [u8]) -> Result<()>;
    /// A new completion channel for `query_async`.
    fn create_cmd_channel(&self) -> Result<Arc<dyn CmdChannel>>;
    /// ASYNC_QUERY: queue a query; its completion arrives on `channel`.
    fn query_async(
        &self,
        obj: Handle,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<()>;
    /// A modify of `obj`, queued like `query_async`.
    fn modify_async(
        &self,
        obj: Handle,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<()> {
        let _ = (obj, inbox, outlen, wr_id, channel);
        Err(crate::Error::unsupported(
            "asynchronous modify",
            "this provider queues only queries",
        ))
    }
    /// A command that names no object, queued like `query_async`. Its
    /// completion's outbox is `outbox` (whose length is the outbox length)
    /// filled, so a caller reusing one buffer allocates nothing for it.
    fn general_async(
        &self,
        inbox: &[u8],
        outbox: Vec<u8>,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<()> {
        let _ = (inbox, outbox, wr_id, channel);
        Err(crate::Error::unsupported(
            "asynchronous general commands",
            "this provider queues only queries",
        ))
    }
    /// A create queued like `query_async`. Returns the handle the object
    /// has once its completion (the create's outbox, or the error) arrives
    /// on `channel` tagged `wr_id`. Releasing the handle (`destroy`) before
    /// that destroys the object as soon as the firmware makes it. `None`:
    /// this provider cannot queue creates; the caller runs `create`.
    fn create_async(
        &self,
        inbox: &[u8],
        outlen: usize,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<Option<Handle>> {
        let _ = (inbox, outlen, wr_id, channel);
        Ok(None)
    }
    /// A destroy queued like `query_async`: the handle is gone once its
    /// completion reports success, and names the object again when it
    /// reports a refusal. `false`: this provider cannot queue destroys
    /// (the caller runs `destroy`).
    fn destroy_async(
        &self,
        obj: Handle,
        destroy_inbox: &[u8],
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<bool> {
        let _ = (obj, destroy_inbox, wr_id, channel);
        Ok(false)
    }
    /// UMEM_REG queued like `create_async`; the completion carries a
    /// CREATE_UMEM outbox naming the umem id. `None`: run `umem_reg`.
    fn umem_reg_async(
        &self,
        addr: usize,
        len: usize,
        access: u32,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<Option<Handle>> {
        let _ = (addr, len, access, wr_id, channel);
        Ok(None)
    }
    /// UMEM_DEREG queued like `destroy_async`: the registration is gone
    /// once its completion reports success, and the handle names it again
    /// when it reports a refusal. `false`: this provider cannot queue it
    /// (the caller runs `umem_dereg`).
    fn umem_dereg_async(&self, umem: Handle, wr_id: u64, channel: &dyn CmdChannel) -> Result<bool> {
        let _ = (umem, wr_id, channel);
        Ok(false)
    }
    /// UAR allocation queued like `create_async`; the completion carries
    /// the ALLOC_UAR outbox, then `uar_allocated` gives the mapped page.
    /// `None`: run `uar_alloc`.
    fn uar_alloc_async(
        &self,
        kind: UarKind,
        wr_id: u64,
        channel: &dyn CmdChannel,
    ) -> Result<Option<Handle>> {
        let _ = (kind, wr_id, channel);
        Ok(None)
    }
    /// The page of a UAR whose queued allocation completed.
    fn uar_allocated(&self, uar: Handle) -> Result<UarAlloc> {
        let _ = uar;
        Err(crate::Error::unsupported(
            "queued UAR allocation",
            "this provider allocates UARs synchronously",
        ))
    }
    /// UMEM_REG of `len` bytes at `addr` in this process; returns (handle, umem id).
    fn umem_reg(&self, addr: usize, len: usize, access: u32) -> Result<(Handle, u32)>;
    fn umem_dereg(&self, umem: Handle) -> Result<()>;
    fn uar_alloc(&self, kind: UarKind) -> Result<UarAlloc>;
    fn uar_free(&self, uar: Handle) -> Result<()>;
    /// EQ number serving completion vector `vector`.
    fn query_eqn(&self, vector: u32) -> Result<u32>;
    /// The valid entries of every port's GID table, as the kernel keeps it
    /// (uverbs QUERY_GID_TABLE): the way to read GIDs on any port type, since
    /// DEVX does not admit QUERY_HCA_VPORT_GID.
    fn query_gid_table(&self) -> Result<Vec<GidTableEntry>>;
    /// The context's async-event file (port changes, device fatal).
    fn async_event_file(&self) -> Result<Arc<dyn crate::AsyncEventFile>> {
        Err(crate::Error::unsupported(
            "the async-event file",
            "this provider reports no port or device events",
        ))
    }
    /// A new event channel; `omit_data` delivers only cookies.
    fn create_event_channel(&self, omit_data: bool) -> Result<Arc<dyn EventChannel>> {
        let _ = omit_data;
        Err(crate::Error::unsupported(
            "event channels",
            "this provider has no firmware events",
        ))
    }
    /// Subscribes `channel` to `event_types`, for `obj` or device-wide when `None`.
    fn subscribe_event(
        &self,
        channel: &dyn EventChannel,
        obj: Option<Handle>,
        event_types: &[u16],
        cookie: u64,
    ) -> Result<()> {
        let _ = (channel, obj, event_types, cookie);
        Err(crate::Error::unsupported(
            "event subscription",
            "this provider has no firmware events",
        ))
    }
    /// Subscribes `event_types` (for `obj`, device-wide when `None`) with
    /// delivery redirected to `eventfd`: each event adds 1 to its counter
    /// and nothing is queued on `channel` (the kernel's FD_NUM redirect,
    /// `mlx5dv_devx_subscribe_devx_event_fd`). The subscription holds its
    /// own reference to the eventfd and lasts as long as `channel`.
    fn subscribe_event_fd(
        &self,
        channel: &dyn EventChannel,
        obj: Option<Handle>,
        event_types: &[u16],
        eventfd: BorrowedFd<'_>,
    ) -> Result<()> {
        let _ = (channel, obj, event_types, eventfd);
        Err(crate::Error::unsupported(
            "event subscription to an eventfd",
            "this provider has no firmware events",
        ))
    }
}

/// One firmware event read from an event channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevxEvent {
    /// The cookie given at subscription.
    pub cookie: u64,
    /// The raw 64-byte EQE, empty when the channel omits data.
    pub eqe: Vec<u8>,
}

/// An event channel (kernel: a DEVX async event fd).
pub trait EventChannel: Send + Sync {
    fn fd(&self) -> RawFd;
    fn try_get(&self) -> Result<Option<DevxEvent>>;
    fn get(&self) -> Result<DevxEvent>;
    fn as_any(&self) -> &dyn Any;
}
