//! Firmware events: an event channel (kernel: a DEVX async event fd) and
//! subscriptions of objects or of the device to event types. Thin over
//! [`ProviderContext::create_event_channel`] and
//! [`ProviderContext::subscribe_event`].
//!
//! [`ProviderContext::create_event_channel`]: crate::ProviderContext::create_event_channel
//! [`ProviderContext::subscribe_event`]: crate::ProviderContext::subscribe_event

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::Arc;

use prm_layouts::{Eqe, FieldMeta};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::obj::Obj;
use crate::provider::{DevxEvent, EventChannel};
use crate::reactor::NextReady;

/// EQE types (`MLX5_EVENT_TYPE_*`).
pub mod event_type {
    pub const COMP: u16 = 0x00;
    pub const COMM_EST: u16 = 0x02;
    pub const SQ_DRAINED: u16 = 0x03;
    pub const CQ_ERROR: u16 = 0x04;
    pub const WQ_CATAS_ERROR: u16 = 0x05;
    pub const PORT_CHANGE: u16 = 0x09;
    pub const WQ_INVAL_REQ_ERROR: u16 = 0x10;
    pub const WQ_ACCESS_ERROR: u16 = 0x11;
    pub const SRQ_CATAS_ERROR: u16 = 0x12;
    pub const SRQ_LAST_WQE: u16 = 0x13;
    pub const SRQ_RQ_LIMIT: u16 = 0x14;
}

/// Sub types of a [`event_type::PORT_CHANGE`] event
/// (`MLX5_PORT_CHANGE_SUBTYPE_*`).
pub mod port_change {
    pub const DOWN: u8 = 1;
    pub const ACTIVE: u8 = 4;
}

// EQE fields, read by name so a channel that delivers a truncated EQE gives
// `None` instead of a wrong value.
const EVENT_TYPE: &FieldMeta = Eqe::META.named("event_type");
const EVENT_SUB_TYPE: &FieldMeta = Eqe::META.named("event_sub_type");
const COMP_CQ_NUMBER: &FieldMeta = Eqe::META.named("event_data.comp.cq_number");

impl DevxEvent {
    /// EQE type; `None` when the channel omits data.
    pub fn event_type(&self) -> Option<u8> {
        Some(EVENT_TYPE.get(&self.eqe)? as u8)
    }

    /// EQE sub-type.
    pub fn sub_type(&self) -> Option<u8> {
        Some(EVENT_SUB_TYPE.get(&self.eqe)? as u8)
    }

    /// The CQ a completion event names.
    pub fn comp_cqn(&self) -> Option<u32> {
        if self.event_type()? != event_type::COMP as u8 {
            return None;
        }
        Some(COMP_CQ_NUMBER.get(&self.eqe)? as u32)
    }
}

/// An event channel of one context. Its fd polls readable while an event is
/// queued; `get` blocks, `try_get` does not.
///
/// ```
/// # fn main() -> devx::Result<()> {
/// let ctx = devx::Device::by_name("sim0")?.open()?;
/// let events = devx::Events::new(&ctx, false)?;
/// // Device-wide events; `obj.subscribe(&events, ..)` for one object's.
/// ctx.subscribe_unaffiliated(&events, &[devx::event_type::PORT_CHANGE], 7)?;
/// assert!(events.try_get()?.is_none(), "no port changed yet");
/// # Ok(()) }
/// ```
pub struct Events {
    ctx: Context,
    channel: Arc<dyn EventChannel>,
    omit_data: bool,
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Events(fd {}, omit_data {})",
            self.channel.fd(),
            self.omit_data
        )
    }
}

impl Events {
    /// A new channel; with `omit_data` reads carry only the cookie and
    /// repeats of one subscription collapse into one unread event.
    pub fn new(ctx: &Context, omit_data: bool) -> Result<Events> {
        let channel = ctx.inner.provider.create_event_channel(omit_data)?;
        Ok(Events {
            ctx: ctx.clone(),
            channel,
            omit_data,
        })
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    pub fn omits_data(&self) -> bool {
        self.omit_data
    }

    /// The provider's channel (for `subscribe_event` and wrappers).
    pub fn channel(&self) -> &Arc<dyn EventChannel> {
        &self.channel
    }

    pub fn try_get(&self) -> Result<Option<DevxEvent>> {
        self.channel.try_get()
    }

    pub fn get(&self) -> Result<DevxEvent> {
        self.channel.get()
    }

    /// The next event, as a future woken when the channel's fd polls
    /// readable; needs no async runtime.
    pub fn next(&self) -> NextReady<impl FnMut() -> Result<Option<DevxEvent>> + Unpin + '_> {
        NextReady::new(self.as_raw_fd(), move || self.try_get())
    }

    fn check_ctx(&self, ctx: &Context) -> Result<()> {
        if !self.ctx.same_as(ctx) {
            return Err(Error::argument(
                "the event channel belongs to another context",
            ));
        }
        Ok(())
    }
}

impl AsRawFd for Events {
    fn as_raw_fd(&self) -> RawFd {
        self.channel.fd()
    }
}

impl Obj {
    /// Subscribes `events` to `types` of this object (0 = completion, for a
    /// CQ); each event read carries `cookie`.
    pub fn subscribe(&self, events: &Events, types: &[u16], cookie: u64) -> Result<()> {
        events.check_ctx(self.context())?;
        self.context().inner.provider.subscribe_event(
            &*events.channel,
            Some(self.handle()),
            types,
            cookie,
        )
    }

    /// Subscribes `types` of this object to signal `eventfd` instead of
    /// queueing on `events`: each event adds 1 to the eventfd's counter
    /// (`mlx5dv_devx_subscribe_devx_event_fd`). The subscription keeps its
    /// own reference to the eventfd and ends with `events`.
    pub fn subscribe_fd(&self, events: &Events, types: &[u16], eventfd: impl AsFd) -> Result<()> {
        events.check_ctx(self.context())?;
        self.context().inner.provider.subscribe_event_fd(
            &*events.channel,
            Some(self.handle()),
            types,
            eventfd.as_fd(),
        )
    }
}

impl Context {
    /// Subscribes `events` to device-wide (unaffiliated) event `types`.
    pub fn subscribe_unaffiliated(
        &self,
        events: &Events,
        types: &[u16],
        cookie: u64,
    ) -> Result<()> {
        events.check_ctx(self)?;
        self.inner
            .provider
            .subscribe_event(&*events.channel, None, types, cookie)
    }

    /// Subscribes device-wide event `types` to signal `eventfd` instead of
    /// queueing on `events` (see [`Obj::subscribe_fd`]).
    pub fn subscribe_unaffiliated_fd(
        &self,
        events: &Events,
        types: &[u16],
        eventfd: impl AsFd,
    ) -> Result<()> {
        events.check_ctx(self)?;
        self.inner
            .provider
            .subscribe_event_fd(&*events.channel, None, types, eventfd.as_fd())
    }
}
