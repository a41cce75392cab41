//! DEVX event channels of a context (a pollable eventfd plus a queue) and
//! the subscription rules of the kernel's SUBSCRIBE_EVENT (kernel-abi
//! §4.1, §4.5). Raised events reach the channels through the firmware's
//! [`EventHub`](crate::sim::fw::events::EventHub).

use std::any::Any;
use std::os::fd::RawFd;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::provider::{DevxEvent, EventChannel};
use crate::sim::fw::events::{ty, EvChanInner};

/// At most this many event numbers per subscription (the kernel's limit).
pub(crate) const MAX_EVENTS_PER_SUBSCRIBE: usize = 16;

/// Affiliated events the kernel accepts without firmware `event_cap`
/// (devx.c `is_legacy_obj_event_num`); the emulated profile has no event_cap.
fn legacy_affiliated(t: u16) -> bool {
    use ty::*;
    matches!(
        t,
        COMP | PATH_MIG
            | COMM_EST
            | SQ_DRAINED
            | CQ_ERROR
            | WQ_CATAS_ERROR
            | PATH_MIG_FAILED
            | WQ_INVAL_REQ_ERROR
            | WQ_ACCESS_ERROR
            | SRQ_CATAS_ERROR
            | SRQ_LAST_WQE
            | SRQ_RQ_LIMIT
            | XRQ_ERROR
            | DCT_DRAINED
            | DCT_KEY_VIOLATION
    )
}

/// The kernel's checks on a SUBSCRIBE_EVENT type list (EINVAL on failure).
pub(crate) fn check_event_types(event_types: &[u16], affiliated: bool) -> Result<()> {
    if event_types.is_empty() || event_types.len() > MAX_EVENTS_PER_SUBSCRIBE {
        return Err(Error::os(
            format!(
                "SUBSCRIBE_EVENT: {} event types (1 to {MAX_EVENTS_PER_SUBSCRIBE})",
                event_types.len()
            ),
            libc::EINVAL,
        ));
    }
    for &t in event_types {
        let ok = if affiliated {
            legacy_affiliated(t)
        } else {
            t == ty::PORT_CHANGE
        };
        if !ok {
            let what = if affiliated {
                "an object"
            } else {
                "the device (unaffiliated)"
            };
            return Err(Error::os(
                format!("SUBSCRIBE_EVENT: event type {t:#x} is not valid for {what}"),
                libc::EINVAL,
            ));
        }
    }
    Ok(())
}

/// A DEVX event channel of the emulated device.
pub(crate) struct SimEventChannel {
    pub(crate) inner: Arc<EvChanInner>,
}

impl SimEventChannel {
    pub(crate) fn new(ctx_id: u64, omit_data: bool) -> Result<SimEventChannel> {
        Ok(SimEventChannel {
            inner: Arc::new(EvChanInner::new(ctx_id, omit_data)?),
        })
    }
}

impl EventChannel for SimEventChannel {
    fn fd(&self) -> RawFd {
        self.inner.fd()
    }

    fn try_get(&self) -> Result<Option<DevxEvent>> {
        self.inner.pop(false)
    }

    fn get(&self) -> Result<DevxEvent> {
        self.inner
            .pop(true)
            .and_then(|e| e.ok_or_else(|| Error::argument("no event")))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
