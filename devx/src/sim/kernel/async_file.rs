//! Per-context async-event files of the emulated device (the uverbs
//! async-event file's counterpart): port state changes and the
//! device-fatal error, raised to every open context of the device.

use std::any::Any;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::async_event::{AsyncEventDesc, AsyncEventFile};
use crate::error::{Error, Result};

/// Events a file holds unread; later ones are dropped (the kernel's
/// allocation failure, made deterministic).
pub const MAX_QUEUED_ASYNC_EVENTS: usize = 1 << 12;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) struct FileInner {
    q: Mutex<VecDeque<AsyncEventDesc>>,
    efd: EventFd,
}

impl FileInner {
    fn push(&self, d: AsyncEventDesc) {
        let mut q = lock(&self.q);
        if q.len() >= MAX_QUEUED_ASYNC_EVENTS {
            return;
        }
        if q.is_empty() {
            // Readable while anything is queued.
            let _ = self.efd.write(1);
        }
        q.push_back(d);
    }
}

/// One context's async-event file.
pub struct SimAsyncFile {
    inner: Arc<FileInner>,
}

impl AsyncEventFile for SimAsyncFile {
    fn fd(&self) -> RawFd {
        self.inner.efd.as_raw_fd()
    }

    fn try_get(&self) -> Result<Option<AsyncEventDesc>> {
        let mut q = lock(&self.inner.q);
        let d = q.pop_front();
        if d.is_some() && q.is_empty() {
            // Drain the counter: the fd stops polling readable.
            let _ = self.inner.efd.read();
        }
        Ok(d)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The device's open async-event files.
#[derive(Default)]
pub(crate) struct AsyncFiles(Mutex<Vec<Weak<FileInner>>>);

impl AsyncFiles {
    /// A new file, raised to from now on.
    pub(crate) fn open(&self) -> Result<Arc<SimAsyncFile>> {
        let efd = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| Error::os("eventfd", e as i32))?;
        let inner = Arc::new(FileInner {
            q: Mutex::new(VecDeque::new()),
            efd,
        });
        let mut files = lock(&self.0);
        files.retain(|f| f.strong_count() > 0);
        files.push(Arc::downgrade(&inner));
        Ok(Arc::new(SimAsyncFile { inner }))
    }

    /// Queues `event_type` about `element` on every open file.
    pub(crate) fn raise(&self, event_type: u32, element: u64) {
        let files: Vec<Arc<FileInner>> = lock(&self.0).iter().filter_map(Weak::upgrade).collect();
        for f in files {
            f.push(AsyncEventDesc {
                element,
                event_type,
            });
        }
    }
}
