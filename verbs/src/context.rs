//! An opened device: the DEVX context plus the capabilities every verb checks
//! its arguments against.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use prm_layouts::enums::{HcaCapType, Opcode};
use prm_layouts::{CmdHcaCap, HcaCapUnion, QueryHcaCapIn, QueryHcaCapOut};

use crate::async_event::{AsyncEvent, AsyncEvents, EventHandler, HandlerEntry, Subscriber};
use crate::error::{Error, Result, VerbResult};
use crate::port::GidEntry;
use crate::qp::gid_rank;
use crate::util::outbox;

/// How a port carries packets (`cmd_hca_cap.port_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    InfiniBand,
    Ethernet,
}

impl LinkLayer {
    pub fn name(self) -> &'static str {
        match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
        }
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

struct ContextInner {
    devx: devx::Context,
    caps: CmdHcaCap,
    key_variant: AtomicU8,
    /// Made by the first use of async events.
    async_events: Mutex<Option<Arc<AsyncEvents>>>,
}

/// An open device (`ibv_context`). Cheap to clone; every object keeps the
/// context it was made in alive, so closing is simply dropping the last handle.
///
/// ```
/// # fn main() -> verbs::Result<()> {
/// let ctx = verbs::Context::open_by_name("sim0")?; // or open_default()
/// let port = ctx.query_port(1)?;
/// let gid = ctx.default_gid(1)?; // what connections send from
/// println!(
///     "{}: {}, MTU {}, GID {} ({})",
///     ctx.device().name(),
///     port.state,
///     port.active_mtu,
///     gid.gid,
///     gid.gid_type.name()
/// );
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.device().name())
            .finish()
    }
}

impl Context {
    /// Opens the first real mlx5 device, or the emulated `sim0` when the
    /// machine has none ([`devx::Device::default_device`]).
    ///
    /// ```
    /// # fn main() -> verbs::Result<()> {
    /// let ctx = verbs::Context::open_default()?;
    /// println!("{} ({})", ctx.device().name(), ctx.link_layer());
    /// # Ok(()) }
    /// ```
    pub fn open_default() -> Result<Context> {
        let (device, _emulated) = devx::Device::default_device().verb("open_device")?;
        Context::open(&device)
    }

    /// Opens a device by name: a real one (`mlx5_0`) or an emulated one
    /// (`sim0`, `sim1`, …, created on first use).
    ///
    /// ```
    /// # fn main() -> verbs::Result<()> {
    /// let ctx = verbs::Context::open_by_name("sim0")?;
    /// assert_eq!(ctx.device().name(), "sim0");
    /// assert!(verbs::Context::open_by_name("no-such-device").is_err());
    /// # Ok(()) }
    /// ```
    pub fn open_by_name(name: &str) -> Result<Context> {
        let device = devx::Device::by_name(name).verb("open_device")?;
        Context::open(&device)
    }

    /// Opens `device` (`ibv_open_device`) and reads its current general
    /// capabilities, which later verbs validate their attributes against.
    pub fn open(device: &devx::Device) -> Result<Context> {
        let devx = device.open().verb("open_device")?;
        Context::from_devx(devx)
    }

    /// Builds verbs on a DEVX context the caller already uses for raw objects,
    /// so both kinds live under one uid and can name each other.
    pub fn from_devx(devx: devx::Context) -> Result<Context> {
        let page = query_cap_page(&devx, HcaCapType::General, true, "open_device")?;
        let caps = *page.cmd_hca_cap();
        Ok(Context {
            inner: Arc::new(ContextInner {
                devx,
                caps,
                key_variant: AtomicU8::new(0),
                async_events: Mutex::new(None),
            }),
        })
    }

    /// The DEVX context underneath, for raw commands and objects.
    pub fn devx(&self) -> &devx::Context {
        &self.inner.devx
    }

    /// A command channel for the `_async` verbs of this context (raw DEVX
    /// commands may share it: the verbs tag theirs with
    /// [`crate::VERBS_WR_ID_BIT`] set).
    pub fn cmd_comp(&self) -> Result<devx::CmdComp> {
        devx::CmdComp::new(self.devx()).verb("create_cmd_comp")
    }

    pub fn device(&self) -> &devx::Device {
        self.inner.devx.device()
    }

    /// Current general capabilities (`QUERY_HCA_CAP`, op_mod 1) as read at open.
    pub fn caps(&self) -> &CmdHcaCap {
        &self.inner.caps
    }

    /// Queries one capability page (`QUERY_HCA_CAP` with `op_mod = type << 1 | cur`).
    pub fn query_caps(&self, page: HcaCapType, current: bool) -> Result<Box<HcaCapUnion>> {
        query_cap_page(&self.inner.devx, page, current, "query_hca_cap")
    }

    pub fn link_layer(&self) -> LinkLayer {
        if self.inner.caps.port_type() == 1 {
            LinkLayer::Ethernet
        } else {
            LinkLayer::InfiniBand
        }
    }

    /// Physical ports of this function (at least 1).
    pub fn num_ports(&self) -> u8 {
        self.inner.caps.num_ports().max(1)
    }

    /// The context's async-event queue (`ibv_get_async_event`), made on
    /// first use. Port and device events reach it from the moment the
    /// context opened; CQs, QPs and SRQs report their events only when
    /// created after this first use.
    ///
    /// ```
    /// # fn main() -> verbs::Result<()> {
    /// let ctx = verbs::Context::open_by_name("sim0")?;
    /// let events = ctx.async_events()?;
    /// assert!(events.try_get()?.is_none());
    /// events.close(); // waiters wake with `Error::Cancelled`
    /// assert!(events.get().unwrap_err().is_cancelled());
    /// # Ok(()) }
    /// ```
    pub fn async_events(&self) -> Result<Arc<AsyncEvents>> {
        let mut slot = self
            .inner
            .async_events
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(q) = &*slot {
            return Ok(Arc::clone(q));
        }
        let q = Arc::new(AsyncEvents::open(&self.inner.devx)?);
        *slot = Some(Arc::clone(&q));
        Ok(q)
    }

    /// `ibv_get_async_event`: blocks until the next async event.
    pub fn get_async_event(&self) -> Result<AsyncEvent> {
        self.async_events()?.get()
    }

    /// The next async event, as a future (no async runtime needed).
    pub async fn next_async_event(&self) -> Result<AsyncEvent> {
        self.async_events()?.next().await
    }

    /// Closes the async-event queue: every waiter wakes with
    /// [`Error::Cancelled`], as do later waits.
    pub fn close_async_events(&self) -> Result<()> {
        self.async_events()?.close();
        Ok(())
    }

    /// Subscribes a new object's affiliated events: to its own `handler`
    /// (opening the queue if needed; the entry lasts as long as what this
    /// returns), else to the queue if there is one.
    pub(crate) fn subscribe_async(
        &self,
        verb: &'static str,
        obj: &devx::Obj,
        kind: Subscriber,
        handler: Option<&EventHandler>,
    ) -> Result<Option<HandlerEntry>> {
        if let Some(h) = handler {
            let q = self.async_events()?;
            q.subscribe(obj, kind).verb(verb)?;
            return q.register(obj, kind, h.clone()).map(Some);
        }
        let q = self
            .inner
            .async_events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match q {
            Some(q) => q.subscribe(obj, kind).verb(verb).map(|()| None),
            None => Ok(None),
        }
    }

    /// True when both handles name the same open context.
    pub fn same_as(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The next `mkey_7_0` byte, so a recycled mkey index gets a fresh key.
    pub(crate) fn next_key_variant(&self) -> u8 {
        self.inner.key_variant.fetch_add(1, Ordering::Relaxed)
    }

    /// The GID a connection from `port` sends from by default: RoCE v2 with
    /// an IPv4-mapped address first, then RoCE v2 with another IPv6 address
    /// (global before link-local), then RoCE v1 or InfiniBand; the lowest
    /// index among equals. Reads the port's GID table
    /// ([`Context::gid_table`]).
    pub fn default_gid(&self, port: u8) -> Result<GidEntry> {
        self.gid_table(port)?
            .into_iter()
            .min_by_key(|e| (gid_rank(e), e.index))
            .ok_or_else(|| {
                Error::argument(
                    "query_gid",
                    format!("port {port}'s GID table has no entry in use"),
                )
            })
    }

    pub(crate) fn check_port(&self, verb: &'static str, port: u8) -> Result<()> {
        if port == 0 || port > self.num_ports() {
            return Err(Error::argument(
                verb,
                format!(
                    "port {port} does not exist (the device has {} port(s), numbered from 1)",
                    self.num_ports()
                ),
            ));
        }
        Ok(())
    }
}

fn query_cap_page(
    devx: &devx::Context,
    page: HcaCapType,
    current: bool,
    verb: &'static str,
) -> Result<Box<HcaCapUnion>> {
    let mut inbox = QueryHcaCapIn::new();
    inbox.set_opcode(Opcode::QueryHcaCap.raw());
    inbox.set_op_mod(page.op_mod(current));
    let out = devx
        .general_cmd(inbox.as_bytes(), QueryHcaCapOut::SIZE_BYTES)
        .verb(verb)?;
    let out: &QueryHcaCapOut = outbox(verb, "QUERY_HCA_CAP", &out)?;
    Ok(Box::new(*out.capability()))
}
