//! The uverbs async-event file (`ibv_get_async_event`).
//!
//! The kernel answers an fd from which each read returns one 16-byte
//! `ib_uverbs_async_event_desc` (element, event type), readable while one
//! waits. Here the program gets one end of a stream socket pair (libibverbs
//! reads exactly one descriptor at a time); the doorbell watch thread
//! forwards into it the events of the context's async-event file on the
//! emulated device (port active / port error on link changes, device fatal)
//! and the error events of the context's QPs, which the device raises on a
//! DEVX event channel the library subscribes each QP to (element: the QP's
//! user handle, as mlx5_ib reports them). QP_DESTROY reports how many
//! events of the QP the program has read (`ibv_destroy_qp` waits until it
//! has acknowledged that many): those forwarded less those still unread in
//! the socket.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use devx::async_event::ib_event;
use devx::event_type;

use super::program_fd::ProgramFd;
use crate::doorbell::EventSource;
use crate::uverbs::Errno;

/// `struct ib_uverbs_async_event_desc`.
const DESC_LEN: usize = 16;

/// The QP events mlx5_ib reports through the async-event file, and the
/// `ib_event_type` each becomes.
const QP_EVENTS: [(u16, u32); 3] = [
    (event_type::WQ_CATAS_ERROR, ib_event::QP_FATAL),
    (event_type::WQ_INVAL_REQ_ERROR, ib_event::QP_REQ_ERR),
    (event_type::WQ_ACCESS_ERROR, ib_event::QP_ACCESS_ERR),
];

fn desc(element: u64, event_type: u32) -> [u8; DESC_LEN] {
    let mut d = [0u8; DESC_LEN];
    d[..8].copy_from_slice(&element.to_ne_bytes());
    d[8..12].copy_from_slice(&event_type.to_ne_bytes());
    d
}

/// A QP whose events are forwarded: its user handle and how many were.
struct QpEntry {
    user_handle: u64,
    forwarded: Arc<AtomicU32>,
}

pub struct AsyncEvents {
    file: Arc<dyn devx::AsyncEventFile>,
    qp_events: devx::Events,
    /// The program's end of the file, stream records of 16 bytes.
    pub out: ProgramFd,
    qps: Mutex<HashMap<u32, QpEntry>>,
}

impl AsyncEvents {
    pub fn new(ctx: &devx::Context) -> Result<AsyncEvents, Errno> {
        let file = ctx.async_event_file().map_err(|e| e.errno())?;
        let qp_events = devx::Events::new(ctx, false).map_err(|e| e.errno())?;
        Ok(AsyncEvents {
            file,
            qp_events,
            out: ProgramFd::new(libc::SOCK_STREAM)?,
            qps: Mutex::new(HashMap::new()),
        })
    }

    fn qps(&self) -> MutexGuard<'_, HashMap<u32, QpEntry>> {
        self.qps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reports QP `qp`'s error events as `user_handle`'s.
    pub fn attach_qp(&self, qp: &devx::Obj, user_handle: u64) -> Result<(), Errno> {
        let types: Vec<u16> = QP_EVENTS.iter().map(|(t, _)| *t).collect();
        qp.subscribe(&self.qp_events, &types, u64::from(qp.id()))
            .map_err(|e| e.errno())?;
        self.qps().insert(
            qp.id(),
            QpEntry {
                user_handle,
                forwarded: Arc::new(AtomicU32::new(0)),
            },
        );
        Ok(())
    }

    /// Stops reporting QP `qpn`'s events; returns how many the program read.
    pub fn detach_qp(&self, qpn: u32) -> u32 {
        // Under the lock `forward` holds while it sends and counts.
        let mut qps = self.qps();
        let Some(e) = qps.remove(&qpn) else {
            return 0;
        };
        e.forwarded
            .load(Ordering::Acquire)
            .saturating_sub(self.unread(e.user_handle))
    }

    /// QP events for `user_handle` forwarded but not read yet.
    fn unread(&self, user_handle: u64) -> u32 {
        self.out
            .unread()
            .chunks_exact(DESC_LEN)
            .filter(|d| {
                let element = u64::from_ne_bytes(d[..8].try_into().unwrap_or_default());
                let ty = u32::from_ne_bytes(d[8..12].try_into().unwrap_or_default());
                element == user_handle && QP_EVENTS.iter().any(|(_, t)| *t == ty)
            })
            .count() as u32
    }

    fn send(&self, d: &[u8; DESC_LEN]) -> bool {
        self.out.send(d)
    }
}

impl EventSource for AsyncEvents {
    fn forward(&self) -> usize {
        let mut n = 0;
        // Bounded: at most what is queued now; an event the socket refuses
        // (the program closed its end) is dropped.
        while let Ok(Some(ev)) = self.file.try_get() {
            n += usize::from(self.send(&desc(ev.element, ev.event_type)));
        }
        while let Ok(Some(ev)) = self.qp_events.try_get() {
            let Some(ty) = ev.event_type() else { continue };
            let Some((_, ib)) = QP_EVENTS.iter().find(|(t, _)| *t == u16::from(ty)) else {
                continue;
            };
            let qps = self.qps();
            let Some(e) = u32::try_from(ev.cookie).ok().and_then(|q| qps.get(&q)) else {
                continue;
            };
            if self.send(&desc(e.user_handle, *ib)) {
                e.forwarded.fetch_add(1, Ordering::AcqRel);
                n += 1;
            }
        }
        n
    }
}
