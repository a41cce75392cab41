//! Completion event channels: where CQ events will be delivered.

use std::fmt;
use std::os::fd::RawFd;
use std::sync::Arc;

use crate::context::Context;
use crate::error::{Result, VerbResult};

/// A completion event channel (`ibv_comp_channel`): a DEVX event channel the
/// CQs created with it report their completion events to.
#[derive(Clone)]
pub struct CompChannel {
    channel: Arc<dyn devx::EventChannel>,
}

impl fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CompChannel(fd {})", self.channel.fd())
    }
}

impl CompChannel {
    /// `ibv_create_comp_channel`.
    pub fn new(ctx: &Context) -> Result<CompChannel> {
        let channel = ctx
            .devx()
            .provider()
            .create_event_channel(false)
            .verb("create_comp_channel")?;
        Ok(CompChannel { channel })
    }

    /// Wraps an event channel made through DEVX directly.
    pub fn from_devx(channel: Arc<dyn devx::EventChannel>) -> CompChannel {
        CompChannel { channel }
    }

    pub fn fd(&self) -> RawFd {
        self.channel.fd()
    }

    pub fn channel(&self) -> &Arc<dyn devx::EventChannel> {
        &self.channel
    }
}
