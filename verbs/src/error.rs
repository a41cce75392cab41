//! Errors of the verbs: every failure names the verb it came from.

use std::fmt;

/// Result of every verb.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a verb can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device (or the DEVX layer under it) refused; `source` says how, by
    /// command name, status and syndrome for firmware failures.
    #[error("{verb}: {source}")]
    Device {
        verb: &'static str,
        source: devx::Error,
    },
    /// The caller's attributes were rejected before any command was sent.
    #[error("{verb}: invalid argument: {msg}")]
    Argument { verb: &'static str, msg: String },
    /// mlx5 devices (or DEVX users) cannot do this at all.
    #[error("{verb} is not supported: {why}")]
    Unsupported { verb: &'static str, why: String },
    /// A work queue has no room for the request; poll completions first.
    #[error("{verb}: the {queue} is full")]
    QueueFull {
        verb: &'static str,
        queue: &'static str,
    },
    /// A work request was posted to a QP whose state does not accept it
    /// (IBA: an immediate error); `need` says which states do.
    #[error("{verb}: QP {qpn:#x} is in {state}; {need}")]
    QpState {
        verb: &'static str,
        qpn: u32,
        state: String,
        need: &'static str,
    },
    /// Nothing arrived within the time the caller allowed.
    #[error("{verb}: nothing arrived within {waited:?}")]
    Timeout {
        verb: &'static str,
        waited: std::time::Duration,
    },
    /// The wait was cancelled: what it waited on was closed.
    #[error("{verb}: cancelled: {why}")]
    Cancelled { verb: &'static str, why: String },
    /// An explicit destroy found the object still used by others.
    #[error("{verb}: {what} is still in use by {users} other object(s) or handle(s)")]
    Busy {
        verb: &'static str,
        what: &'static str,
        users: usize,
    },
}

impl Error {
    pub(crate) fn argument(verb: &'static str, msg: impl Into<String>) -> Error {
        Error::Argument {
            verb,
            msg: msg.into(),
        }
    }

    pub(crate) fn unsupported(verb: &'static str, why: impl Into<String>) -> Error {
        Error::Unsupported {
            verb,
            why: why.into(),
        }
    }

    /// The verb that failed (`create_cq`, `modify_qp`…).
    pub fn verb(&self) -> &'static str {
        match self {
            Error::Device { verb, .. }
            | Error::Argument { verb, .. }
            | Error::Unsupported { verb, .. }
            | Error::Busy { verb, .. }
            | Error::QpState { verb, .. }
            | Error::Timeout { verb, .. }
            | Error::Cancelled { verb, .. }
            | Error::QueueFull { verb, .. } => verb,
        }
    }

    /// The DEVX error underneath, if the device was involved.
    pub fn devx(&self) -> Option<&devx::Error> {
        match self {
            Error::Device { source, .. } => Some(source),
            _ => None,
        }
    }

    /// Firmware status of a refused command.
    pub fn status(&self) -> Option<u8> {
        self.devx().and_then(devx::Error::status)
    }

    /// Firmware syndrome of a refused command.
    pub fn syndrome(&self) -> Option<u32> {
        self.devx().and_then(devx::Error::syndrome)
    }

    /// The PRM name of the firmware status (`BAD_QP_STATE`…), if any.
    pub fn status_name(&self) -> Option<&'static str> {
        self.status()
            .and_then(prm_layouts::enums::CmdStatus::from_raw)
            .map(|s| s.name())
    }

    pub fn is_firmware(&self) -> bool {
        self.devx().is_some_and(devx::Error::is_firmware)
    }

    /// Bad attributes, whether the library or the DEVX layer caught them.
    pub fn is_argument(&self) -> bool {
        matches!(self, Error::Argument { .. }) || self.devx().is_some_and(devx::Error::is_argument)
    }

    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Unsupported { .. })
            || self.devx().is_some_and(devx::Error::is_unsupported)
    }

    /// True for a cancelled wait, here or in the DEVX layer.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled { .. })
            || self.devx().is_some_and(devx::Error::is_cancelled)
    }

    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy { .. })
    }

    /// The errno a C caller of the same verb would have seen.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Device { source, .. } => source.errno(),
            Error::Argument { .. } => libc::EINVAL,
            Error::Unsupported { .. } => libc::EOPNOTSUPP,
            Error::Busy { .. } => libc::EBUSY,
            Error::QueueFull { .. } => libc::ENOMEM,
            Error::QpState { .. } => libc::EINVAL,
            Error::Timeout { .. } => libc::ETIMEDOUT,
            Error::Cancelled { .. } => libc::ECANCELED,
        }
    }
}

/// Attaches a verb name to DEVX results.
pub(crate) trait VerbResult<T> {
    fn verb(self, verb: &'static str) -> Result<T>;
}

impl<T> VerbResult<T> for std::result::Result<T, devx::Error> {
    fn verb(self, verb: &'static str) -> Result<T> {
        self.map_err(|source| Error::Device { verb, source })
    }
}

/// An explicit destroy the device (or a remaining user) refused. The object
/// comes back alive, so the caller can release what still uses it and retry.
pub struct DestroyError<T> {
    pub object: Box<T>,
    pub error: Error,
}

impl<T> DestroyError<T> {
    pub(crate) fn new(object: T, error: Error) -> DestroyError<T> {
        DestroyError {
            object: Box::new(object),
            error,
        }
    }

    /// Drops the object (its drop retries the destroy) and keeps the error.
    pub fn into_error(self) -> Error {
        self.error
    }
}

impl<T> fmt::Debug for DestroyError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DestroyError({})", self.error)
    }
}

impl<T> fmt::Display for DestroyError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<T> std::error::Error for DestroyError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<T> From<DestroyError<T>> for Error {
    fn from(e: DestroyError<T>) -> Error {
        e.error
    }
}
