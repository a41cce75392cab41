//! Memory and QP access rights (`ibv_access_flags`).

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

/// Access rights of an MR, MW or QP; the bit values are those of `ibv_access_flags`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(u32);

impl AccessFlags {
    pub const NONE: AccessFlags = AccessFlags(0);
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(1);
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(2);
    pub const REMOTE_READ: AccessFlags = AccessFlags(4);
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(8);
    pub const MW_BIND: AccessFlags = AccessFlags(16);

    const ALL: u32 = 0x1f;

    /// From `ibv_access_flags` bits; `None` if unknown bits are set.
    pub fn from_bits(bits: u32) -> Option<AccessFlags> {
        (bits & !Self::ALL == 0).then_some(AccessFlags(bits))
    }

    pub fn bits(self) -> u32 {
        self.0
    }

    pub fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Remote write or atomic without local write is invalid for MRs (IB spec
    /// 10.6.3.1; `ibv_reg_mr` returns EINVAL).
    pub(crate) fn needs_local_write(self) -> bool {
        self.0 & (Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0) != 0
            && self.0 & Self::LOCAL_WRITE.0 == 0
    }

    /// Whether the device may write the memory at all.
    pub(crate) fn any_write(self) -> bool {
        self.0 & (Self::LOCAL_WRITE.0 | Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0) != 0
    }
}

impl BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for AccessFlags {
    fn bitor_assign(&mut self, rhs: AccessFlags) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(AccessFlags, &str); 5] = [
            (AccessFlags::LOCAL_WRITE, "LOCAL_WRITE"),
            (AccessFlags::REMOTE_WRITE, "REMOTE_WRITE"),
            (AccessFlags::REMOTE_READ, "REMOTE_READ"),
            (AccessFlags::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
            (AccessFlags::MW_BIND, "MW_BIND"),
        ];
        let names: Vec<&str> = NAMES
            .iter()
            .filter(|(b, _)| self.contains(*b))
            .map(|(_, n)| *n)
            .collect();
        if names.is_empty() {
            f.write_str("NONE")
        } else {
            f.write_str(&names.join(" | "))
        }
    }
}
