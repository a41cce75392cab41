//! Layouts built and read as host-order dwords, for hot paths.
//!
//! The typed accessors read-modify-write bytes of a `[u8; N]`; where a
//! segment is built from scratch on every call (a WQE segment) or one field
//! is read straight from shared memory (a CQE), the same positions as
//! constants ([`crate::fields`]) let the compiler place each value with a
//! shift and store whole words:
//!
//! ```
//! use prm_layouts::fields::wqe_ctrl_seg as ctrl;
//! use prm_layouts::{words::Words, SendOpcode, WqeCtrlSeg};
//!
//! let seg: [u8; 16] = Words::<4>::new()
//!     .with(ctrl::WQE_INDEX, 7)
//!     .with(ctrl::OPCODE, SendOpcode::RdmaWrite.raw().into())
//!     .with(ctrl::QPN, 0x123)
//!     .with(ctrl::DS, 3)
//!     .to_be_bytes();
//! let typed = WqeCtrlSeg(seg);
//! assert_eq!((typed.wqe_index(), typed.opcode(), typed.qpn(), typed.ds()), (7, 0x08, 0x123, 3));
//! ```

/// A field that lies inside one big-endian dword.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Field32 {
    /// Byte offset of the dword holding the field (a multiple of 4).
    pub byte: usize,
    /// Bits between the field's LSB and the dword's LSB.
    pub shift: u32,
    /// Width in bits (1..=32).
    pub width: u32,
}

impl Field32 {
    /// The field `width` bits wide, `shift` bits above the LSB of the dword at `byte`.
    #[must_use]
    pub const fn new(byte: usize, shift: u32, width: u32) -> Field32 {
        Field32 { byte, shift, width }
    }

    /// The field's bits, in place, within its host-order dword.
    #[inline(always)]
    #[must_use]
    pub const fn mask(self) -> u32 {
        (u32::MAX >> (32 - self.width)) << self.shift
    }

    /// `v` (masked to the width) placed in a host-order dword.
    #[inline(always)]
    #[must_use]
    pub const fn put(self, v: u32) -> u32 {
        (v << self.shift) & self.mask()
    }

    /// The field out of its host-order dword.
    #[inline(always)]
    #[must_use]
    pub const fn get(self, dword: u32) -> u32 {
        (dword & self.mask()) >> self.shift
    }
}

/// A 64-bit field on a dword boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Field64 {
    /// Byte offset (a multiple of 4).
    pub byte: usize,
}

impl Field64 {
    /// The 64-bit field at `byte`.
    #[must_use]
    pub const fn new(byte: usize) -> Field64 {
        Field64 { byte }
    }
}

/// `N` dwords of a layout in host order, all fields zero to begin with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Words<const N: usize>(pub [u32; N]);

impl<const N: usize> Default for Words<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Words<N> {
    /// All fields zero.
    #[inline(always)]
    #[must_use]
    pub const fn new() -> Self {
        Words([0; N])
    }

    /// Sets field `f` (to `v` masked to its width), replacing what was there.
    ///
    /// # Panics
    /// If `f` lies outside the `N` dwords: a constant position and a fixed
    /// `N`, so this folds away or fails every time.
    #[inline(always)]
    #[must_use]
    pub const fn with(mut self, f: Field32, v: u32) -> Self {
        let i = f.byte / 4;
        self.0[i] = (self.0[i] & !f.mask()) | f.put(v);
        self
    }

    /// Sets 64-bit field `f`.
    ///
    /// # Panics
    /// As [`Words::with`].
    #[inline(always)]
    #[must_use]
    pub const fn with64(mut self, f: Field64, v: u64) -> Self {
        let i = f.byte / 4;
        self.0[i] = (v >> 32) as u32;
        self.0[i + 1] = v as u32;
        self
    }

    /// The dwords of wire bytes `b` (`M` must be `4 * N`).
    #[inline(always)]
    #[must_use]
    pub fn from_be_bytes<const M: usize>(b: &[u8; M]) -> Self {
        const { assert!(M == 4 * N, "M must be 4 * N") };
        let mut w = [0u32; N];
        for (d, chunk) in w.iter_mut().zip(b.chunks_exact(4)) {
            *d = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        Words(w)
    }

    /// Dwords `2i` and `2i + 1` as one host-order u64, the first on top:
    /// the 8 bytes at `8 * i` as a big-endian value.
    ///
    /// # Panics
    /// If `2i + 1 >= N`.
    #[inline(always)]
    #[must_use]
    pub const fn pair(self, i: usize) -> u64 {
        ((self.0[2 * i] as u64) << 32) | self.0[2 * i + 1] as u64
    }

    /// The wire bytes (`M` must be `4 * N`), stored 8 at a time where it can.
    #[inline(always)]
    #[must_use]
    pub fn to_be_bytes<const M: usize>(self) -> [u8; M] {
        const { assert!(M == 4 * N, "M must be 4 * N") };
        let mut out = [0u8; M];
        let mut pairs = out.chunks_exact_mut(8);
        for (i, chunk) in (&mut pairs).enumerate() {
            chunk.copy_from_slice(&self.pair(i).to_be_bytes());
        }
        if let Some(w) = self.0.get(N & !1) {
            pairs.into_remainder().copy_from_slice(&w.to_be_bytes());
        }
        out
    }
}
