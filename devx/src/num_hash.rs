//! One hash for maps keyed by numbers the program hands out itself (object
//! numbers, QPNs, `wr_id`s): a single multiply. These maps are looked up on
//! hot paths (every WQE, every packet, every awaited command), where
//! SipHash dominated; their keys are never chosen by an adversary against
//! this process, so flooding resistance buys nothing.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing: the high bits (which hashbrown uses for its control
/// bytes) depend on every bit of the number.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NumHasher(u64);

impl Hasher for NumHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by numbers this process hands out.
pub(crate) type NumMap<K, V> = HashMap<K, V, BuildHasherDefault<NumHasher>>;

/// A set of numbers this process hands out.
pub(crate) type NumSet<K> = HashSet<K, BuildHasherDefault<NumHasher>>;
