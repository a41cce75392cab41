//! Completion event channels (`ibv_comp_channel`): a DEVX event channel each
//! CQ created with it is subscribed to for completion events (cookie = CQN).
//! Reading an event bumps that CQ's arm sequence number, as rdma-core's
//! `mlx5_cq_event` does inside `ibv_get_cq_event`.

use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, Weak};

use crate::context::Context;
use crate::cq_notify::CqNotify;
use crate::error::{Result, VerbResult};

/// A completion event channel. Clones share the channel.
#[derive(Clone)]
pub struct CompChannel {
    events: Arc<devx::Events>,
    /// The CQs subscribed through this channel, by CQN (their cookie).
    cqs: Arc<Mutex<HashMap<u32, Weak<CqNotify>>>>,
}

impl fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CompChannel(fd {})", self.fd())
    }
}

impl CompChannel {
    /// `ibv_create_comp_channel`.
    pub fn new(ctx: &Context) -> Result<CompChannel> {
        let events = devx::Events::new(ctx.devx(), false).verb("create_comp_channel")?;
        Ok(CompChannel::from_devx(events))
    }

    /// Wraps an event channel made through DEVX directly (it must deliver
    /// event data: completion events are told apart by their cookie).
    pub fn from_devx(events: devx::Events) -> CompChannel {
        CompChannel {
            events: Arc::new(events),
            cqs: Arc::default(),
        }
    }

    pub fn fd(&self) -> RawFd {
        self.events.as_raw_fd()
    }

    /// The DEVX event channel underneath.
    pub fn events(&self) -> &devx::Events {
        &self.events
    }

    /// `ibv_get_cq_event`: blocks until a CQ of this channel reports a
    /// completion event and returns its CQN. The CQ is disarmed until the
    /// next `Cq::req_notify`.
    pub fn get_cq_event(&self) -> Result<u32> {
        let ev = self.events.get().verb("get_cq_event")?;
        Ok(self.delivered(ev.cookie))
    }

    /// `ibv_get_cq_event` on a non-blocking channel: `None` when no event
    /// is queued.
    pub fn try_get_cq_event(&self) -> Result<Option<u32>> {
        let ev = self.events.try_get().verb("get_cq_event")?;
        Ok(ev.map(|e| self.delivered(e.cookie)))
    }

    /// `ibv_get_cq_event` as a future: resolves when a CQ of this channel
    /// reports a completion event, woken by the channel fd's readiness
    /// (no async runtime needed).
    pub async fn next_cq_event(&self) -> Result<u32> {
        let ev = self.events.next().await.verb("get_cq_event")?;
        Ok(self.delivered(ev.cookie))
    }

    fn delivered(&self, cookie: u64) -> u32 {
        let cqn = cookie as u32;
        let cq = self.lock().get(&cqn).and_then(Weak::upgrade);
        if let Some(n) = cq {
            n.event();
        }
        cqn
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Weak<CqNotify>>> {
        self.cqs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Files a CQ subscribed through this channel.
    pub(crate) fn register(&self, cqn: u32, notify: &Arc<CqNotify>) {
        let mut cqs = self.lock();
        cqs.retain(|_, w| w.strong_count() > 0);
        cqs.insert(cqn, Arc::downgrade(notify));
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.fd()
    }
}
