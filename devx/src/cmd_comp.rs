//! Completion channels for asynchronous commands.

use std::fmt;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use crate::context::Context;
use crate::error::Result;
use crate::provider::{AsyncCompletion, CmdChannel};

/// A completion channel: `Obj::query_async` queues commands, `get`/`try_get`
/// return `(wr_id, outbox or error)` in completion order. The fd polls
/// readable while a completion waits, so any event loop can watch it.
pub struct CmdComp {
    ctx: Context,
    channel: Arc<dyn CmdChannel>,
}

impl fmt::Debug for CmdComp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CmdComp(fd {})", self.channel.fd())
    }
}

impl CmdComp {
    pub fn new(ctx: &Context) -> Result<CmdComp> {
        let channel = ctx.inner.provider.create_cmd_channel()?;
        Ok(CmdComp {
            ctx: ctx.clone(),
            channel,
        })
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    pub(crate) fn channel(&self) -> &dyn CmdChannel {
        &*self.channel
    }

    /// Waits for the next completion.
    pub fn get(&self) -> Result<AsyncCompletion> {
        self.channel.get()
    }

    /// The next completion if one is ready.
    pub fn try_get(&self) -> Result<Option<AsyncCompletion>> {
        self.channel.try_get()
    }
}

impl AsRawFd for CmdComp {
    fn as_raw_fd(&self) -> RawFd {
        self.channel.fd()
    }
}
