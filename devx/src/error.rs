//! Errors of the DEVX API.
//!
//! Firmware failures keep what the device said (opcode, op_mod, status,
//! syndrome) and print it by name, so nobody has to decode `EREMOTEIO` by hand.

use prm_layouts::commands::header;
use prm_layouts::enums::{opcode_name, CmdStatus};

/// Result of every DEVX call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a firmware failure reached us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FwReport {
    /// Status and syndrome were read from the returned outbox.
    Outbox,
    /// Only a translated errno came back (the kernel's destroy and UMEM paths);
    /// status and syndrome are the best reconstruction of it.
    ErrnoOnly,
}

/// Everything a DEVX call can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device ran the command and refused it.
    #[error("{}{}: {} ({:#x}), syndrome {:#x}{}", opcode_name(*opcode), op_mod_suffix(*op_mod), status_name(*status), status, syndrome, report_suffix(*report))]
    Firmware {
        opcode: u16,
        op_mod: u16,
        status: u8,
        syndrome: u32,
        report: FwReport,
    },
    /// A system call failed (or a provider answered as the kernel would, with an errno).
    #[error("{op}: {} ({})", errno_name(*errno), errno_text(*errno))]
    Os { op: String, errno: i32 },
    /// The caller passed something unusable: a short buffer, an object of another context…
    #[error("invalid argument: {0}")]
    Argument(String),
    /// The device or provider cannot do this at all.
    #[error("{what} is not supported: {why}")]
    Unsupported { what: String, why: String },
    /// An asynchronous command that never ran because its context went away.
    #[error("{0}: cancelled because its context was closed")]
    Cancelled(String),
    /// The device hit an internal (fatal) error: every later command fails
    /// with this, and only destroying what is left still works.
    #[error("{0}: the device is no longer functional (fatal internal error)")]
    DeviceFatal(String),
    /// A provider-level failure that is neither firmware nor OS (e.g. a fixture mismatch).
    #[error("{provider}: {message}")]
    Provider { provider: String, message: String },
}

fn op_mod_suffix(op_mod: u16) -> String {
    if op_mod == 0 {
        String::new()
    } else {
        format!(" (op_mod {op_mod:#x})")
    }
}

fn report_suffix(report: FwReport) -> &'static str {
    match report {
        FwReport::Outbox => "",
        FwReport::ErrnoOnly => " [errno only, no outbox]",
    }
}

/// The PRM name of a command status, or `UNKNOWN_STATUS`.
pub fn status_name(status: u8) -> &'static str {
    CmdStatus::from_raw(status)
        .map(|s| s.name())
        .unwrap_or("UNKNOWN_STATUS")
}

/// `strerror`-like text for an errno, without touching libc's global state.
pub fn errno_text(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    // std appends " (os error N)"; the name already says which errno it is.
    match text.rfind(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Symbolic names of the errnos a DEVX stack returns.
const ERRNO_NAMES: &[(i32, &str)] = &[
    (libc::EPERM, "EPERM"),
    (libc::ENOENT, "ENOENT"),
    (libc::EIO, "EIO"),
    (libc::ENXIO, "ENXIO"),
    (libc::EBADF, "EBADF"),
    (libc::EAGAIN, "EAGAIN"),
    (libc::ENOMEM, "ENOMEM"),
    (libc::EACCES, "EACCES"),
    (libc::EFAULT, "EFAULT"),
    (libc::EBUSY, "EBUSY"),
    (libc::EEXIST, "EEXIST"),
    (libc::ENODEV, "ENODEV"),
    (libc::EINVAL, "EINVAL"),
    (libc::ENOTTY, "ENOTTY"),
    (libc::ENOSPC, "ENOSPC"),
    (libc::ERANGE, "ERANGE"),
    (libc::ENOSYS, "ENOSYS"),
    (libc::ENODATA, "ENODATA"),
    (libc::EPROTO, "EPROTO"),
    (libc::EOVERFLOW, "EOVERFLOW"),
    (libc::EPROTONOSUPPORT, "EPROTONOSUPPORT"),
    (libc::EOPNOTSUPP, "EOPNOTSUPP"),
    (libc::ETIMEDOUT, "ETIMEDOUT"),
    (libc::EREMOTEIO, "EREMOTEIO"),
    (libc::ECANCELED, "ECANCELED"),
];

/// `EINVAL` for 22, or `errno 1234` for ones outside the table.
pub fn errno_name(errno: i32) -> String {
    ERRNO_NAMES
        .iter()
        .find(|(n, _)| *n == errno)
        .map(|(_, s)| (*s).to_string())
        .unwrap_or_else(|| format!("errno {errno}"))
}

impl Error {
    /// Builds a firmware error from an inbox/outbox pair whose status is non-zero.
    pub fn from_outbox(inbox: &[u8], outbox: &[u8]) -> Error {
        Error::Firmware {
            opcode: crate::admission::opcode_of(inbox),
            op_mod: crate::admission::op_mod_of(inbox),
            status: header::STATUS.get_or_zero(outbox) as u8,
            syndrome: header::SYNDROME.get_or_zero(outbox) as u32,
            report: FwReport::Outbox,
        }
    }

    /// `Ok` when the outbox says OK, else the firmware error it carries.
    pub fn check_outbox(inbox: &[u8], outbox: &[u8]) -> Result<()> {
        match outbox.first() {
            Some(0) => Ok(()),
            Some(_) => Err(Error::from_outbox(inbox, outbox)),
            None => Err(Error::Argument("outbox is empty".into())),
        }
    }

    pub fn os(op: impl Into<String>, errno: i32) -> Error {
        Error::Os {
            op: op.into(),
            errno,
        }
    }

    pub fn argument(msg: impl Into<String>) -> Error {
        Error::Argument(msg.into())
    }

    pub fn unsupported(what: impl Into<String>, why: impl Into<String>) -> Error {
        Error::Unsupported {
            what: what.into(),
            why: why.into(),
        }
    }

    pub fn is_firmware(&self) -> bool {
        matches!(self, Error::Firmware { .. })
    }
    pub fn is_os(&self) -> bool {
        matches!(self, Error::Os { .. })
    }
    pub fn is_argument(&self) -> bool {
        matches!(self, Error::Argument(_))
    }
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Unsupported { .. })
    }
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled(_))
    }
    pub fn is_device_fatal(&self) -> bool {
        matches!(self, Error::DeviceFatal(_))
    }

    /// Firmware status, when this is a firmware failure.
    pub fn status(&self) -> Option<u8> {
        match self {
            Error::Firmware { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Firmware syndrome, when this is a firmware failure.
    pub fn syndrome(&self) -> Option<u32> {
        match self {
            Error::Firmware { syndrome, .. } => Some(*syndrome),
            _ => None,
        }
    }

    /// The errno a C caller would have seen (EREMOTEIO for firmware failures).
    pub fn errno(&self) -> i32 {
        match self {
            Error::Firmware {
                report: FwReport::Outbox,
                ..
            } => libc::EREMOTEIO,
            Error::Firmware { status, .. } => CmdStatus::from_raw(*status)
                .map(|s| s.errno())
                .unwrap_or(libc::EIO),
            Error::Os { errno, .. } => *errno,
            Error::Argument(_) => libc::EINVAL,
            Error::Unsupported { .. } => libc::EOPNOTSUPP,
            Error::Cancelled(_) => libc::ECANCELED,
            Error::DeviceFatal(_) => libc::EIO,
            Error::Provider { .. } => libc::EPROTO,
        }
    }
}
