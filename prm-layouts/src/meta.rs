//! Layout metadata and by-name field access.

use core::fmt;

/// How a field is accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldKind {
    /// Unsigned integer of at most 64 bits.
    Scalar,
    /// Byte string (GIDs, MAC blocks, opaque blobs): byte aligned, whole bytes.
    Bytes,
}

/// One named field, flattened: nested fields are `outer.inner`, array
/// elements `name[i]`, offsets are absolute within the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FieldMeta {
    /// Dotted field path.
    pub name: &'static str,
    /// First bit (MSB-first numbering).
    pub offset_bits: u32,
    /// Width in bits.
    pub width_bits: u32,
    /// Scalar or byte string.
    pub kind: FieldKind,
}

/// Variable-length array after the fixed part of a mailbox (e.g. `pas[]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TailMeta {
    /// Dotted path of the flexible member (e.g. `ctx.wq.pas`).
    pub name: &'static str,
    /// Bits per element.
    pub elem_bits: u32,
    /// Element layout when the elements are structured.
    pub elem_layout: Option<&'static str>,
}

/// Static description of one layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LayoutMeta {
    /// Spec name, e.g. `create_cq_in`.
    pub name: &'static str,
    /// Size of the fixed part in bits.
    pub size_bits: u32,
    /// Named fields in wire order (reserved bits omitted).
    pub fields: &'static [FieldMeta],
    /// Flexible tail, if any; it starts at `size_bits`.
    pub tail: Option<TailMeta>,
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl FieldMeta {
    /// First byte of the field (byte-string fields are byte aligned).
    #[must_use]
    pub const fn byte_offset(&self) -> usize {
        self.offset_bits as usize / 8
    }

    /// Reads this scalar field from a mailbox; `None` when `buf` ends before
    /// the field or the field is a byte string.
    #[must_use]
    pub fn get(&self, buf: &[u8]) -> Option<u64> {
        match self.kind {
            FieldKind::Scalar => crate::bits::get(buf, self.offset_bits, self.width_bits),
            FieldKind::Bytes => None,
        }
    }

    /// Reads this scalar field, as 0 when `buf` ends before it (the way a
    /// short mailbox reads as zero-padded).
    #[must_use]
    pub fn get_or_zero(&self, buf: &[u8]) -> u64 {
        self.get(buf).unwrap_or(0)
    }

    /// The bytes of this field in `buf`, or `None` when `buf` ends before it.
    #[must_use]
    pub fn bytes<'a>(&self, buf: &'a [u8]) -> Option<&'a [u8]> {
        let at = self.byte_offset();
        buf.get(at..at + self.width_bits as usize / 8)
    }

    /// Writes the low bits of `v` into this scalar field (the `DEVX_SET` rule).
    ///
    /// # Errors
    /// `buf` ends before the field, or the field is wider than 64 bits.
    pub fn set(&self, buf: &mut [u8], v: u64) -> Result<(), crate::bits::BitsError> {
        crate::bits::set_masked(buf, self.offset_bits, self.width_bits, v)
    }

    /// Copies this field of `src` into field `to` of `dst` (same width:
    /// a header field repeated in another command).
    ///
    /// Returns `None` when either buffer ends before its field or the widths
    /// differ.
    pub fn copy_to(&self, src: &[u8], to: &FieldMeta, dst: &mut [u8]) -> Option<()> {
        if self.width_bits != to.width_bits {
            return None;
        }
        match (self.kind, to.kind) {
            (FieldKind::Bytes, FieldKind::Bytes) => {
                let from = self.bytes(src)?;
                let at = to.byte_offset();
                dst.get_mut(at..at + from.len())?.copy_from_slice(from);
                Some(())
            }
            _ => to.set(dst, self.get(src)?).ok(),
        }
    }
}

/// A value read from or written to a field.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FieldValue {
    /// Scalar field.
    Scalar(u64),
    /// Byte-string field.
    Bytes(Vec<u8>),
}

impl FieldValue {
    /// The scalar value, if this is one.
    #[must_use]
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Self::Scalar(v) => Some(*v),
            Self::Bytes(_) => None,
        }
    }

    /// The bytes, if this is a byte string.
    #[must_use]
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Self::Scalar(_) => None,
            Self::Bytes(b) => Some(b),
        }
    }

    /// True when every bit is zero.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        match self {
            Self::Scalar(v) => *v == 0,
            Self::Bytes(b) => b.iter().all(|&x| x == 0),
        }
    }
}

impl From<u64> for FieldValue {
    fn from(v: u64) -> Self {
        Self::Scalar(v)
    }
}

impl From<Vec<u8>> for FieldValue {
    fn from(v: Vec<u8>) -> Self {
        Self::Bytes(v)
    }
}

impl From<&[u8]> for FieldValue {
    fn from(v: &[u8]) -> Self {
        Self::Bytes(v.to_vec())
    }
}

impl fmt::Display for FieldValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Scalar(v) => write!(f, "{v:#x}"),
            Self::Bytes(b) => {
                for x in b {
                    write!(f, "{x:02x}")?;
                }
                Ok(())
            }
        }
    }
}

/// A typed setter refused a value wider than its field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldOverflow {
    /// Layout name.
    pub layout: &'static str,
    /// Field name.
    pub field: &'static str,
    /// Field width in bits.
    pub width: u32,
    /// Rejected value.
    pub value: u64,
}

impl fmt::Display for FieldOverflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}: value {:#x} does not fit in {} bits",
            self.layout, self.field, self.value, self.width
        )
    }
}

impl std::error::Error for FieldOverflow {}

/// Errors of the by-name API.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// No such field; `suggestions` holds the closest names.
    UnknownField {
        /// Layout name.
        layout: &'static str,
        /// Requested field.
        field: String,
        /// Closest existing names, best first.
        suggestions: Vec<&'static str>,
    },
    /// Scalar value with bits above the field width.
    ValueTooWide {
        /// Field name.
        field: String,
        /// Field width in bits.
        width: u32,
        /// Rejected value.
        value: u64,
    },
    /// A scalar given for a byte-string field, or the reverse.
    WrongKind {
        /// Field name.
        field: String,
        /// What the field holds.
        expected: FieldKind,
    },
    /// Byte string of the wrong length.
    BytesLength {
        /// Field name.
        field: String,
        /// Field length in bytes.
        need: usize,
        /// Given length.
        got: usize,
    },
    /// Buffer shorter than the layout.
    TooShort {
        /// Layout name.
        layout: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        got: usize,
    },
    /// Buffer longer than a layout without a tail, or a tail cut mid-element.
    TooLong {
        /// Layout name.
        layout: &'static str,
        /// Largest acceptable length (the fixed size).
        max: usize,
        /// Bytes given.
        got: usize,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownField {
                layout,
                field,
                suggestions,
            } => {
                write!(f, "layout {layout} has no field `{field}`")?;
                if !suggestions.is_empty() {
                    write!(f, "; did you mean {}?", suggestions.join(", "))?;
                }
                Ok(())
            }
            Self::ValueTooWide {
                field,
                width,
                value,
            } => write!(
                f,
                "field {field}: value {value:#x} does not fit in {width} bits"
            ),
            Self::WrongKind { field, expected } => {
                let what = match expected {
                    FieldKind::Scalar => "an integer",
                    FieldKind::Bytes => "a byte string",
                };
                write!(f, "field {field} holds {what}")
            }
            Self::BytesLength { field, need, got } => {
                write!(f, "field {field} is {need} bytes, got {got}")
            }
            Self::TooShort { layout, need, got } => {
                write!(f, "{layout} needs {need} bytes, buffer has {got}")
            }
            Self::TooLong { layout, max, got } => write!(
                f,
                "{got} bytes is longer than layout {layout} ({max} bytes, no matching tail)"
            ),
        }
    }
}

impl std::error::Error for LayoutError {}

impl LayoutMeta {
    /// Size of the fixed part in bytes.
    #[must_use]
    pub const fn size_bytes(&self) -> usize {
        self.size_bits as usize / 8
    }

    /// Field by flattened name (`cq_context.log_cq_size`, `pas[3]`).
    #[must_use]
    pub fn field(&self, name: &str) -> Option<&'static FieldMeta> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Field by flattened name, resolved at compile time: used in constants
    /// (`const CQN: &FieldMeta = CreateCqOut::META.named("cqn")`), where an
    /// unknown name fails the build.
    ///
    /// # Panics
    /// When the layout has no field `name` (a compile error in a constant).
    #[must_use]
    pub const fn named(&self, name: &str) -> &'static FieldMeta {
        let fields: &'static [FieldMeta] = self.fields;
        let mut i = 0;
        while i < fields.len() {
            if str_eq(fields[i].name, name) {
                return &fields[i];
            }
            i += 1;
        }
        panic!("layout has no field of that name");
    }

    /// Up to `n` field names closest to `name` (edit distance), best first.
    #[must_use]
    pub fn nearest_names(&self, name: &str, n: usize) -> Vec<&'static str> {
        nearest(self.fields.iter().map(|f| f.name), name, n)
    }

    fn check_len(&self, buf: &[u8]) -> Result<(), LayoutError> {
        if buf.len() < self.size_bytes() {
            return Err(LayoutError::TooShort {
                layout: self.name,
                need: self.size_bytes(),
                got: buf.len(),
            });
        }
        Ok(())
    }

    /// Finds a field, or a tail element `name[i]` (scalar tails only).
    fn resolve(&self, field: &str, buf_len: usize) -> Result<FieldMeta, LayoutError> {
        if let Some(f) = self.field(field) {
            return Ok(*f);
        }
        if let Some(t) = self
            .tail
            .filter(|t| t.elem_layout.is_none() && t.elem_bits <= 64)
        {
            let leaf = t.name.rsplit('.').next().unwrap_or(t.name);
            for prefix in [t.name, leaf] {
                if let Some(i) = field
                    .strip_prefix(prefix)
                    .and_then(|r| r.strip_prefix('['))
                    .and_then(|r| r.strip_suffix(']'))
                    .and_then(|r| r.parse::<u32>().ok())
                {
                    // The index comes from the caller: a huge one must not
                    // overflow the bit offset (it can never fit a buffer).
                    let offset_bits = i
                        .checked_mul(t.elem_bits)
                        .and_then(|o| o.checked_add(self.size_bits))
                        .filter(|o| o.checked_add(t.elem_bits).is_some())
                        .ok_or_else(|| {
                            let end = (u64::from(i) + 1) * u64::from(t.elem_bits)
                                + u64::from(self.size_bits);
                            LayoutError::TooShort {
                                layout: self.name,
                                need: usize::try_from(end.div_ceil(8)).unwrap_or(usize::MAX),
                                got: buf_len,
                            }
                        })?;
                    return Ok(FieldMeta {
                        name: t.name,
                        offset_bits,
                        width_bits: t.elem_bits,
                        kind: FieldKind::Scalar,
                    });
                }
            }
        }
        Err(LayoutError::UnknownField {
            layout: self.name,
            field: field.to_string(),
            suggestions: self.nearest_names(field, 3),
        })
    }

    /// Reads a field (or scalar tail element `name[i]`) of the mailbox in `buf`.
    ///
    /// # Errors
    /// Unknown field, or `buf` shorter than the layout or the tail element.
    pub fn get(&self, buf: &[u8], field: &str) -> Result<FieldValue, LayoutError> {
        self.check_len(buf)?;
        let f = self.resolve(field, buf.len())?;
        read(self, buf, &f)
    }

    /// Writes a scalar field, rejecting values wider than it.
    ///
    /// # Errors
    /// Unknown field, byte-string field, value too wide, or `buf` too short.
    pub fn set(&self, buf: &mut [u8], field: &str, value: u64) -> Result<(), LayoutError> {
        self.set_value(buf, field, &FieldValue::Scalar(value))
    }

    /// Writes a scalar or byte-string field.
    ///
    /// # Errors
    /// Unknown field, kind or length mismatch, value too wide, or `buf` too short.
    pub fn set_value(
        &self,
        buf: &mut [u8],
        field: &str,
        value: &FieldValue,
    ) -> Result<(), LayoutError> {
        self.check_len(buf)?;
        let f = self.resolve(field, buf.len())?;
        let end = (f.offset_bits + f.width_bits).div_ceil(8) as usize;
        if end > buf.len() {
            return Err(LayoutError::TooShort {
                layout: self.name,
                need: end,
                got: buf.len(),
            });
        }
        match (f.kind, value) {
            (FieldKind::Scalar, FieldValue::Scalar(v)) => {
                if f.width_bits < 64 && v >> f.width_bits != 0 {
                    return Err(LayoutError::ValueTooWide {
                        field: field.to_string(),
                        width: f.width_bits,
                        value: *v,
                    });
                }
                crate::bits::set_unchecked(buf, f.offset_bits as usize, f.width_bits, *v);
                Ok(())
            }
            (FieldKind::Bytes, FieldValue::Bytes(b)) => {
                let need = f.width_bits as usize / 8;
                if b.len() != need {
                    return Err(LayoutError::BytesLength {
                        field: field.to_string(),
                        need,
                        got: b.len(),
                    });
                }
                let start = f.offset_bits as usize / 8;
                buf[start..start + need].copy_from_slice(b);
                Ok(())
            }
            (expected, _) => Err(LayoutError::WrongKind {
                field: field.to_string(),
                expected,
            }),
        }
    }

    /// Every field of the mailbox in `buf` (only non-zero ones unless `all`).
    ///
    /// `buf` must hold at least the fixed part. Extra bytes are accepted only
    /// as whole tail elements of a layout that has a tail (see [`Self::tail_values`]).
    ///
    /// # Errors
    /// Buffer too short, or too long for the layout.
    pub fn decode(
        &self,
        buf: &[u8],
        all: bool,
    ) -> Result<Vec<(&'static str, FieldValue)>, LayoutError> {
        self.check_len(buf)?;
        self.check_extra(buf)?;
        let mut out = Vec::new();
        for f in self.fields {
            let v = read(self, buf, f)?;
            if all || !v.is_zero() {
                out.push((f.name, v));
            }
        }
        Ok(out)
    }

    fn check_extra(&self, buf: &[u8]) -> Result<(), LayoutError> {
        let extra = buf.len() - self.size_bytes();
        let ok = match self.tail {
            None => extra == 0,
            Some(t) => (extra * 8) % t.elem_bits as usize == 0,
        };
        if ok {
            Ok(())
        } else {
            Err(LayoutError::TooLong {
                layout: self.name,
                max: self.size_bytes(),
                got: buf.len(),
            })
        }
    }

    /// The tail elements present after the fixed part of `buf` (scalars for
    /// tails of at most 64-bit elements, otherwise raw element bytes).
    ///
    /// # Errors
    /// Buffer too short, or extra bytes that are not whole tail elements.
    pub fn tail_values(&self, buf: &[u8]) -> Result<Vec<FieldValue>, LayoutError> {
        self.check_len(buf)?;
        self.check_extra(buf)?;
        let Some(t) = self.tail else {
            return Ok(Vec::new());
        };
        let extra_bits = (buf.len() - self.size_bytes()) * 8;
        let n = extra_bits / t.elem_bits as usize;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let off = self.size_bits as usize + i * t.elem_bits as usize;
            if t.elem_layout.is_none() && t.elem_bits <= 64 {
                out.push(FieldValue::Scalar(crate::bits::get_unchecked(
                    buf,
                    off,
                    t.elem_bits,
                )));
            } else {
                let s = off / 8;
                out.push(FieldValue::Bytes(
                    buf[s..s + t.elem_bits as usize / 8].to_vec(),
                ));
            }
        }
        Ok(out)
    }
}

fn read(meta: &LayoutMeta, buf: &[u8], f: &FieldMeta) -> Result<FieldValue, LayoutError> {
    let end = (f.offset_bits + f.width_bits).div_ceil(8) as usize;
    if end > buf.len() {
        return Err(LayoutError::TooShort {
            layout: meta.name,
            need: end,
            got: buf.len(),
        });
    }
    Ok(match f.kind {
        FieldKind::Scalar => FieldValue::Scalar(crate::bits::get_unchecked(
            buf,
            f.offset_bits as usize,
            f.width_bits,
        )),
        FieldKind::Bytes => {
            let s = f.offset_bits as usize / 8;
            FieldValue::Bytes(buf[s..s + f.width_bits as usize / 8].to_vec())
        }
    })
}

/// Levenshtein distance, for "did you mean" hints.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        core::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The `n` candidates closest to `name`; exact suffix/substring matches rank first.
pub(crate) fn nearest(
    candidates: impl Iterator<Item = &'static str>,
    name: &str,
    n: usize,
) -> Vec<&'static str> {
    let mut scored: Vec<(usize, &'static str)> = candidates
        .map(|c| {
            // A bare leaf name ("log_cq_size") should find "cq_context.log_cq_size".
            let d = if c.ends_with(&format!(".{name}")) {
                0
            } else {
                distance(c, name)
            };
            (d, c)
        })
        .collect();
    scored.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then(a.1.len().cmp(&b.1.len()))
            .then(a.1.cmp(b.1))
    });
    scored.into_iter().take(n).map(|(_, c)| c).collect()
}

/// `Debug` body shared by all layouts: the type name and its non-zero fields.
pub(crate) fn debug_fields(
    f: &mut fmt::Formatter<'_>,
    ty: &str,
    meta: &LayoutMeta,
    buf: &[u8],
) -> fmt::Result {
    let mut d = f.debug_struct(ty);
    for field in meta.fields {
        if let Ok(v) = read(meta, buf, field) {
            if !v.is_zero() {
                d.field(field.name, &format_args!("{v}"));
            }
        }
    }
    d.finish()
}

/// Tail element `i` (scalar, `elem_bits` wide) after `fixed_bits` of `buf`.
pub(crate) fn tail_get(buf: &[u8], fixed_bits: u32, elem_bits: u32, i: usize) -> Option<u64> {
    let off = u32::try_from(i)
        .ok()?
        .checked_mul(elem_bits)?
        .checked_add(fixed_bits)?;
    crate::bits::get(buf, off, elem_bits)
}

/// Writes tail element `i`, keeping the low `elem_bits` of `v`.
pub(crate) fn tail_set(
    buf: &mut [u8],
    fixed_bits: u32,
    elem_bits: u32,
    i: usize,
    v: u64,
) -> Option<()> {
    let off = u32::try_from(i)
        .ok()?
        .checked_mul(elem_bits)?
        .checked_add(fixed_bits)?;
    crate::bits::set_masked(buf, off, elem_bits, v).ok()
}
