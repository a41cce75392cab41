//! Turns `spec/*.spec` into typed layout structs, accessors and metadata.
//!
//! Spec grammar (one item per line, `#` starts a comment):
//!
//! ```text
//! layout NAME SIZE_BITS          # struct: members follow in wire order
//! union NAME SIZE_BITS           # union: every member starts at bit 0
//!   reserved WIDTH               # padding, no accessor
//!   field WIDTH [bytes]          # scalar (<= 64 bits) or byte string
//!   field LAYOUT                 # nested layout
//!   field[N] WIDTH|LAYOUT        # array
//!   field[] WIDTH|LAYOUT         # flexible tail (0 bits, must be last)
//! ```

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

#[derive(Clone, Debug)]
enum Ty {
    Bits(u32),
    Layout(String),
}

#[derive(Clone, Debug)]
struct Member {
    name: Option<String>,
    count: Option<u32>,
    tail: bool,
    ty: Ty,
    bytes: bool,
    line: String,
}

#[derive(Clone, Debug)]
struct Layout {
    name: String,
    is_union: bool,
    size: u32,
    members: Vec<Member>,
    origin: String,
}

struct Flat {
    name: String,
    off: u32,
    width: u32,
    bytes: bool,
}

struct Tail {
    path: String,
    leaf: String,
    elem_bits: u32,
    elem_layout: Option<String>,
}

fn fail(msg: String) -> ! {
    panic!("prm-layouts spec error: {msg}")
}

fn parse_spec(path: &Path, out: &mut BTreeMap<String, Layout>) {
    let text = std::fs::read_to_string(path).expect("read spec");
    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let mut cur: Option<Layout> = None;
    for (lineno, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap();
        if line.trim().is_empty() {
            continue;
        }
        let where_ = format!("{}:{}", file, lineno + 1);
        let toks: Vec<&str> = line.split_whitespace().collect();
        if !line.starts_with(' ') && !line.starts_with('\t') {
            if let Some(l) = cur.take() {
                insert(out, l);
            }
            if toks.len() != 3 || (toks[0] != "layout" && toks[0] != "union") {
                fail(format!("{where_}: expected `layout|union NAME SIZE`"));
            }
            let size = toks[2]
                .parse()
                .unwrap_or_else(|_| fail(format!("{where_}: bad size")));
            cur = Some(Layout {
                name: toks[1].to_string(),
                is_union: toks[0] == "union",
                size,
                members: Vec::new(),
                origin: where_,
            });
            continue;
        }
        let Some(l) = cur.as_mut() else {
            fail(format!("{where_}: member outside a layout"));
        };
        if toks.len() < 2 || toks.len() > 3 || (toks.len() == 3 && toks[2] != "bytes") {
            fail(format!("{where_}: expected `NAME TYPE [bytes]`"));
        }
        let (name, count, tail) = match toks[0].split_once('[') {
            None => (toks[0].to_string(), None, false),
            Some((n, rest)) => {
                let inner = rest
                    .strip_suffix(']')
                    .unwrap_or_else(|| fail(format!("{where_}: bad array")));
                if inner.is_empty() {
                    (n.to_string(), None, true)
                } else {
                    let c: u32 = inner
                        .parse()
                        .unwrap_or_else(|_| fail(format!("{where_}: bad count")));
                    (n.to_string(), Some(c), false)
                }
            }
        };
        let ty = match toks[1].parse::<u32>() {
            Ok(w) => Ty::Bits(w),
            Err(_) => Ty::Layout(toks[1].to_string()),
        };
        let bytes = toks.len() == 3;
        let name = if name == "reserved" { None } else { Some(name) };
        l.members.push(Member {
            name,
            count,
            tail,
            ty,
            bytes,
            line: where_,
        });
    }
    if let Some(l) = cur.take() {
        insert(out, l);
    }
}

fn insert(out: &mut BTreeMap<String, Layout>, l: Layout) {
    if let Some(prev) = out.get(&l.name) {
        fail(format!(
            "{}: duplicate layout {} (first at {})",
            l.origin, l.name, prev.origin
        ));
    }
    out.insert(l.name.clone(), l);
}

fn camel(name: &str) -> String {
    let mut s = String::new();
    for part in name.split('_') {
        let mut ch = part.chars();
        if let Some(c) = ch.next() {
            s.extend(c.to_uppercase());
            s.push_str(ch.as_str());
        }
    }
    s
}

fn elem_bits(layouts: &BTreeMap<String, Layout>, m: &Member) -> u32 {
    match &m.ty {
        Ty::Bits(w) => *w,
        Ty::Layout(n) => {
            layouts
                .get(n)
                .unwrap_or_else(|| fail(format!("{}: unknown layout {n}", m.line)))
                .size
        }
    }
}

fn member_bits(layouts: &BTreeMap<String, Layout>, m: &Member) -> u32 {
    if m.tail {
        0
    } else {
        elem_bits(layouts, m) * m.count.unwrap_or(1)
    }
}

/// Bit offset of every member, checking the declared size.
fn offsets(layouts: &BTreeMap<String, Layout>, l: &Layout) -> Vec<u32> {
    let mut off = 0;
    let mut out = Vec::new();
    let mut max = 0;
    for m in &l.members {
        let b = member_bits(layouts, m);
        if l.is_union {
            out.push(0);
            max = max.max(b);
        } else {
            out.push(off);
            off += b;
        }
    }
    if l.is_union {
        if max > l.size {
            fail(format!(
                "{}: union {} members exceed {} bits",
                l.origin, l.name, l.size
            ));
        }
    } else if off != l.size {
        fail(format!(
            "{}: layout {} members add up to {off} bits, declared {}",
            l.origin, l.name, l.size
        ));
    }
    out
}

fn is_bytes(m: &Member, w: u32) -> bool {
    m.bytes || w > 64
}

fn flatten(
    layouts: &BTreeMap<String, Layout>,
    l: &Layout,
    prefix: &str,
    base: u32,
    out: &mut Vec<Flat>,
) {
    let offs = offsets(layouts, l);
    for (m, off) in l.members.iter().zip(offs) {
        let Some(name) = &m.name else { continue };
        if m.tail {
            continue;
        }
        let eb = elem_bits(layouts, m);
        let names: Vec<(String, u32)> = match m.count {
            None => vec![(format!("{prefix}{name}"), base + off)],
            Some(c) => (0..c)
                .map(|i| (format!("{prefix}{name}[{i}]"), base + off + i * eb))
                .collect(),
        };
        for (n, o) in names {
            match &m.ty {
                Ty::Bits(w) => out.push(Flat {
                    name: n,
                    off: o,
                    width: *w,
                    bytes: is_bytes(m, *w),
                }),
                Ty::Layout(sub) => flatten(layouts, &layouts[sub], &format!("{n}."), o, out),
            }
        }
    }
}

fn tail_of(layouts: &BTreeMap<String, Layout>, l: &Layout) -> Option<Tail> {
    if l.is_union {
        return None;
    }
    let last = l.members.last()?;
    let name = last.name.as_ref()?;
    if last.tail {
        let (elem_bits, elem_layout) = match &last.ty {
            Ty::Bits(w) => (*w, None),
            Ty::Layout(n) => (layouts[n].size, Some(n.clone())),
        };
        return Some(Tail {
            path: name.clone(),
            leaf: name.clone(),
            elem_bits,
            elem_layout,
        });
    }
    if let (Ty::Layout(n), None) = (&last.ty, last.count) {
        let mut t = tail_of(layouts, &layouts[n])?;
        t.path = format!("{name}.{}", t.path);
        return Some(t);
    }
    None
}

const KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn", "for",
    "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where",
    "while", "async", "await", "dyn", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen",
];

/// Method names every layout already has.
const INHERENT: &[&str] = &[
    "new",
    "as_bytes",
    "as_mut_bytes",
    "from_slice",
    "from_slice_mut",
    "meta",
    "clone",
    "default",
    "fmt",
];

fn ident(name: &str) -> String {
    if KEYWORDS.contains(&name) {
        format!("r#{name}")
    } else {
        name.to_string()
    }
}

fn uint_for(w: u32) -> &'static str {
    match w {
        0..=8 => "u8",
        9..=16 => "u16",
        17..=32 => "u32",
        _ => "u64",
    }
}

struct Gen {
    out: String,
    meta: String,
    /// `pub mod fields`: field positions as constants, per layout.
    fields: String,
}

fn gen_scalar(
    g: &mut Gen,
    l: &Layout,
    name: &str,
    off: u32,
    w: u32,
    methods: &mut HashSet<String>,
) {
    let t = uint_for(w);
    let id = ident(name);
    let bit = off % 32;
    // Read/write expressions with compile-time constant positions.
    let (get, set_arg_ty) = if bit + w <= 32 {
        let byte = off / 32 * 4;
        let shift = 32 - bit - w;
        (
            format!("crate::rt::get32(&self.0, {byte}, {shift}, {w})"),
            "u32",
        )
    } else if w == 64 && off % 8 == 0 {
        (format!("crate::rt::get64(&self.0, {})", off / 8), "u64")
    } else {
        (format!("crate::rt::get_span(&self.0, {off}, {w})"), "u64")
    };
    let get_ret = if set_arg_ty == t {
        get.clone()
    } else {
        format!("{get} as {t}")
    };
    let set_call = if bit + w <= 32 {
        let byte = off / 32 * 4;
        let shift = 32 - bit - w;
        format!("crate::rt::set32(&mut self.0, {byte}, {shift}, {w}, {{V}})")
    } else if w == 64 && off % 8 == 0 {
        format!("crate::rt::set64(&mut self.0, {}, {{V}})", off / 8)
    } else {
        format!("crate::rt::set_span(&mut self.0, {off}, {w}, {{V}})")
    };
    let conv = if set_arg_ty == t {
        "v".to_string()
    } else {
        format!("{set_arg_ty}::from(v)")
    };
    let set_call = set_call.replace("{V}", &conv);
    for m in [
        name.to_string(),
        format!("set_{name}"),
        format!("try_set_{name}"),
        format!("with_{name}"),
    ] {
        claim(methods, l, &m);
    }
    let lname = &l.name;
    let cname = name.to_uppercase();
    if bit + w <= 32 {
        let _ = writeln!(
            g.fields,
            "        /// `{name}`.\n        pub const {cname}: Field32 = Field32::new({}, {}, {w});",
            off / 32 * 4,
            32 - bit - w
        );
    } else if w == 64 && off % 32 == 0 {
        let _ = writeln!(
            g.fields,
            "        /// `{name}`.\n        pub const {cname}: Field64 = Field64::new({});",
            off / 8
        );
    }
    let _ = write!(
        g.out,
        "    /// `{name}`: bits {off:#x}..{end:#x} ({w} bit{s}).\n    #[inline]\n    #[must_use]\n    pub fn {id}(&self) -> {t} {{\n        {get_ret}\n    }}\n",
        end = off + w,
        s = if w == 1 { "" } else { "s" }
    );
    let _ = write!(
        g.out,
        "    /// Sets `{name}`, keeping only the low {w} bit{s} of `v` (like `DEVX_SET`).\n    #[inline]\n    pub fn set_{name}(&mut self, v: {t}) {{\n        {set_call};\n    }}\n",
        s = if w == 1 { "" } else { "s" }
    );
    let check = if w == 64 {
        String::new()
    } else {
        format!(
            "        if v >> {w} != 0 {{\n            return Err(crate::FieldOverflow {{ layout: \"{lname}\", field: \"{name}\", width: {w}, value: v }});\n        }}\n"
        )
    };
    let narrow = if t == "u64" {
        "v".to_string()
    } else {
        format!("v as {t}")
    };
    let _ = write!(
        g.out,
        "    /// Sets `{name}`, rejecting values wider than {w} bits.\n    #[inline]\n    pub fn try_set_{name}(&mut self, v: u64) -> Result<(), crate::FieldOverflow> {{\n{check}        self.set_{name}({narrow});\n        Ok(())\n    }}\n"
    );
    let _ = write!(
        g.out,
        "    /// Builder form of [`Self::set_{name}`].\n    #[inline]\n    #[must_use]\n    pub fn with_{name}(mut self, v: {t}) -> Self {{\n        self.set_{name}(v);\n        self\n    }}\n"
    );
}

fn claim(methods: &mut HashSet<String>, l: &Layout, m: &str) {
    if INHERENT.contains(&m) || !methods.insert(m.to_string()) {
        fail(format!(
            "{}: layout {} has clashing method name {m}",
            l.origin, l.name
        ));
    }
}

fn gen_layout(layouts: &BTreeMap<String, Layout>, l: &Layout, g: &mut Gen) {
    if l.size % 8 != 0 {
        fail(format!(
            "{}: {} is not a whole number of bytes",
            l.origin, l.name
        ));
    }
    let ty = camel(&l.name);
    let nbytes = l.size / 8;
    let upper = l.name.to_uppercase();
    let offs = offsets(layouts, l);
    let mut flat = Vec::new();
    flatten(layouts, l, "", 0, &mut flat);
    let tail = tail_of(layouts, l);

    // Metadata.
    let _ = writeln!(g.meta, "const FIELDS_{upper}: &[FieldMeta] = &[");
    let mut seen = HashSet::new();
    for f in &flat {
        if !seen.insert(f.name.clone()) {
            fail(format!(
                "{}: {} has duplicate field {}",
                l.origin, l.name, f.name
            ));
        }
        if f.off + f.width > l.size {
            fail(format!("{}: {}.{} out of range", l.origin, l.name, f.name));
        }
        let kind = if f.bytes { "Bytes" } else { "Scalar" };
        let _ = writeln!(
            g.meta,
            "    FieldMeta {{ name: \"{}\", offset_bits: {}, width_bits: {}, kind: FieldKind::{kind} }},",
            f.name, f.off, f.width
        );
    }
    let _ = writeln!(g.meta, "];");
    let tail_expr = match &tail {
        None => "None".to_string(),
        Some(t) => format!(
            "Some(TailMeta {{ name: \"{}\", elem_bits: {}, elem_layout: {} }})",
            t.path,
            t.elem_bits,
            match &t.elem_layout {
                Some(n) => format!("Some(\"{n}\")"),
                None => "None".into(),
            }
        ),
    };

    let _ = write!(
        g.out,
        "/// `{name}` ({nbytes} bytes{u}).\n#[repr(C)]\n#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, PartialEq, Eq, Hash)]\npub struct {ty}(pub [u8; {nbytes}]);\n\nconst _: () = assert!(core::mem::size_of::<{ty}>() == {nbytes});\n\n",
        name = l.name,
        u = if l.is_union { ", union" } else { "" }
    );
    let _ = write!(
        g.out,
        "impl Default for {ty} {{\n    fn default() -> Self {{\n        Self([0; {nbytes}])\n    }}\n}}\n\nimpl core::fmt::Debug for {ty} {{\n    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {{\n        crate::meta::debug_fields(f, \"{ty}\", Self::META, &self.0)\n    }}\n}}\n\n"
    );
    let _ = write!(
        g.out,
        "impl {ty} {{\n    /// Size in bytes of the fixed part.\n    pub const SIZE_BYTES: usize = {nbytes};\n    /// Size in bits of the fixed part.\n    pub const SIZE_BITS: usize = {bits};\n    /// Field table of this layout.\n    pub const META: &'static LayoutMeta = &LayoutMeta {{ name: \"{name}\", size_bits: {bits}, fields: FIELDS_{upper}, tail: {tail_expr} }};\n\n    /// All-zero value.\n    #[inline]\n    #[must_use]\n    pub const fn new() -> Self {{\n        Self([0; {nbytes}])\n    }}\n\n    /// The raw big-endian bytes.\n    #[inline]\n    #[must_use]\n    pub fn as_bytes(&self) -> &[u8] {{\n        &self.0\n    }}\n\n    /// The raw big-endian bytes, writable.\n    #[inline]\n    pub fn as_mut_bytes(&mut self) -> &mut [u8] {{\n        &mut self.0\n    }}\n\n    /// Views the first {nbytes} bytes of `buf`; `None` if it is shorter.\n    #[inline]\n    #[must_use]\n    pub fn from_slice(buf: &[u8]) -> Option<&Self> {{\n        Self::ref_from_prefix(buf).ok().map(|(r, _)| r)\n    }}\n\n    /// Mutable view of the first {nbytes} bytes of `buf`; `None` if it is shorter.\n    #[inline]\n    pub fn from_slice_mut(buf: &mut [u8]) -> Option<&mut Self> {{\n        Self::mut_from_prefix(buf).ok().map(|(r, _)| r)\n    }}\n\n",
        name = l.name,
        bits = l.size
    );

    let mut methods: HashSet<String> = HashSet::new();
    for (m, off) in l.members.iter().zip(offs.iter().copied()) {
        let Some(name) = &m.name else { continue };
        let id = ident(name);
        if m.tail {
            continue;
        }
        match (&m.ty, m.count) {
            (Ty::Bits(w), None) if !is_bytes(m, *w) => {
                if *w == 0 {
                    fail(format!("{}: zero width", m.line));
                }
                gen_scalar(g, l, name, off, *w, &mut methods);
            }
            (Ty::Bits(w), None) => {
                if off % 8 != 0 || w % 8 != 0 {
                    fail(format!("{}: byte field {name} is not byte aligned", m.line));
                }
                let (b, n) = (off / 8, w / 8);
                for s in [name.clone(), format!("set_{name}"), format!("{name}_mut")] {
                    claim(&mut methods, l, &s);
                }
                let _ = write!(
                    g.out,
                    "    /// `{name}`: bytes {b}..{e}.\n    #[inline]\n    #[must_use]\n    pub fn {id}(&self) -> &[u8; {n}] {{\n        crate::rt::sub(&self.0, {b})\n    }}\n    /// Overwrites `{name}`.\n    #[inline]\n    pub fn set_{name}(&mut self, v: &[u8; {n}]) {{\n        *crate::rt::sub_mut(&mut self.0, {b}) = *v;\n    }}\n    /// `{name}`, writable in place.\n    #[inline]\n    pub fn {name}_mut(&mut self) -> &mut [u8; {n}] {{\n        crate::rt::sub_mut(&mut self.0, {b})\n    }}\n",
                    e = b + n
                );
            }
            (Ty::Bits(w), Some(c)) => {
                if is_bytes(m, *w) {
                    fail(format!(
                        "{}: arrays of byte strings are not supported",
                        m.line
                    ));
                }
                let t = uint_for(*w);
                let lenc = format!("{}_LEN", name.to_uppercase());
                for s in [name.clone(), format!("set_{name}"), lenc.clone()] {
                    claim(&mut methods, l, &s);
                }
                let get = if t == "u64" {
                    format!("crate::rt::get_span(&self.0, {off} + i * {w}, {w})")
                } else {
                    format!("crate::rt::get_span(&self.0, {off} + i * {w}, {w}) as {t}")
                };
                let conv = if t == "u64" { "v" } else { "u64::from(v)" };
                let _ = write!(
                    g.out,
                    "    /// Number of `{name}` elements.\n    pub const {lenc}: usize = {c};\n    /// `{name}[i]` ({w} bits each, from bit {off:#x}).\n    ///\n    /// # Panics\n    /// If `i >= {c}`, like slice indexing.\n    #[inline]\n    #[must_use]\n    pub fn {id}(&self, i: usize) -> {t} {{\n        assert!(i < {c}, \"{name} index out of range\");\n        {get}\n    }}\n    /// Sets `{name}[i]`, keeping only the low {w} bits of `v`.\n    ///\n    /// # Panics\n    /// If `i >= {c}`, like slice indexing.\n    #[inline]\n    pub fn set_{name}(&mut self, i: usize, v: {t}) {{\n        assert!(i < {c}, \"{name} index out of range\");\n        crate::rt::set_span(&mut self.0, {off} + i * {w}, {w}, {conv});\n    }}\n"
                );
            }
            (Ty::Layout(sub), count) => {
                let sl = &layouts[sub];
                if off % 8 != 0 {
                    fail(format!(
                        "{}: nested layout {name} is not byte aligned",
                        m.line
                    ));
                }
                let st = camel(sub);
                let sb = sl.size / 8;
                let b = off / 8;
                match count {
                    None => {
                        for s in [name.clone(), format!("{name}_mut")] {
                            claim(&mut methods, l, &s);
                        }
                        let _ = write!(
                            g.out,
                            "    /// `{name}` ([`{st}`] at byte {b}).\n    #[inline]\n    #[must_use]\n    pub fn {id}(&self) -> &{st} {{\n        zerocopy::transmute_ref!(crate::rt::sub::<{nbytes}, {sb}>(&self.0, {b}))\n    }}\n    /// `{name}`, writable in place.\n    #[inline]\n    pub fn {name}_mut(&mut self) -> &mut {st} {{\n        zerocopy::transmute_mut!(crate::rt::sub_mut::<{nbytes}, {sb}>(&mut self.0, {b}))\n    }}\n"
                        );
                    }
                    Some(c) => {
                        let lenc = format!("{}_LEN", name.to_uppercase());
                        for s in [name.clone(), format!("{name}_mut"), lenc.clone()] {
                            claim(&mut methods, l, &s);
                        }
                        let _ = write!(
                            g.out,
                            "    /// Number of `{name}` elements.\n    pub const {lenc}: usize = {c};\n    /// `{name}[i]` ([`{st}`] from byte {b}).\n    ///\n    /// # Panics\n    /// If `i >= {c}`, like slice indexing.\n    #[inline]\n    #[must_use]\n    pub fn {id}(&self, i: usize) -> &{st} {{\n        assert!(i < {c}, \"{name} index out of range\");\n        zerocopy::transmute_ref!(crate::rt::sub::<{nbytes}, {sb}>(&self.0, {b} + i * {sb}))\n    }}\n    /// `{name}[i]`, writable in place.\n    ///\n    /// # Panics\n    /// If `i >= {c}`, like slice indexing.\n    #[inline]\n    pub fn {name}_mut(&mut self, i: usize) -> &mut {st} {{\n        assert!(i < {c}, \"{name} index out of range\");\n        zerocopy::transmute_mut!(crate::rt::sub_mut::<{nbytes}, {sb}>(&mut self.0, {b} + i * {sb}))\n    }}\n"
                        );
                    }
                }
            }
        }
    }

    if let Some(t) = &tail {
        let leaf = &t.leaf;
        let (get_fn, set_fn) = (format!("{leaf}_in"), format!("set_{leaf}_in"));
        claim(&mut methods, l, &get_fn);
        let path = &t.path;
        match &t.elem_layout {
            None if t.elem_bits <= 64 => {
                claim(&mut methods, l, &set_fn);
                let eb = t.elem_bits;
                let _ = write!(
                    g.out,
                    "    /// Tail element `{path}[i]` ({eb} bits) of a mailbox in `buf`; `None` past its end.\n    #[must_use]\n    pub fn {get_fn}(buf: &[u8], i: usize) -> Option<u64> {{\n        crate::meta::tail_get(buf, {bits}, {eb}, i)\n    }}\n    /// Writes tail element `{path}[i]`, keeping the low {eb} bits of `v`; `None` past the end of `buf`.\n    pub fn {set_fn}(buf: &mut [u8], i: usize, v: u64) -> Option<()> {{\n        crate::meta::tail_set(buf, {bits}, {eb}, i, v)\n    }}\n",
                    bits = l.size
                );
            }
            None => fail(format!("{}: wide tail elements unsupported", l.origin)),
            Some(el) => {
                let et = camel(el);
                let eb = t.elem_bits / 8;
                let mut_fn = format!("{leaf}_in_mut");
                claim(&mut methods, l, &mut_fn);
                let _ = write!(
                    g.out,
                    "    /// Tail element `{path}[i]` of a mailbox in `buf`; `None` past its end.\n    #[must_use]\n    pub fn {get_fn}(buf: &[u8], i: usize) -> Option<&{et}> {{\n        {et}::from_slice(buf.get({nbytes} + i * {eb}..)?)\n    }}\n    /// Tail element `{path}[i]`, writable; `None` past the end of `buf`.\n    pub fn {mut_fn}(buf: &mut [u8], i: usize) -> Option<&mut {et}> {{\n        {et}::from_slice_mut(buf.get_mut({nbytes} + i * {eb}..)?)\n    }}\n"
                );
            }
        }
    }
    let _ = writeln!(g.out, "}}\n");
}

fn main() {
    println!("cargo:rerun-if-changed=spec");
    println!("cargo:rerun-if-changed=build.rs");
    let mut files: Vec<_> = std::fs::read_dir("spec")
        .expect("spec dir")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "spec"))
        .collect();
    files.sort();
    let mut layouts = BTreeMap::new();
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        parse_spec(f, &mut layouts);
    }
    // Structural checks: sizes, tails, unique Rust names.
    let mut rust_names = BTreeMap::new();
    for l in layouts.values() {
        offsets(&layouts, l);
        for (i, m) in l.members.iter().enumerate() {
            if m.tail && (i + 1 != l.members.len() || l.is_union || m.name.is_none()) {
                fail(format!(
                    "{}: tail {:?} must be the last named member",
                    m.line, m.name
                ));
            }
            if let Ty::Layout(n) = &m.ty {
                let sub = &layouts[n];
                if tail_of(&layouts, sub).is_some()
                    && (i + 1 != l.members.len() || m.count.is_some() || l.is_union)
                {
                    fail(format!("{}: {n} has a tail but is not last", m.line));
                }
            }
        }
        if let Some(prev) = rust_names.insert(camel(&l.name), l.name.clone()) {
            fail(format!("{} and {} map to the same Rust name", prev, l.name));
        }
    }

    let mut g = Gen {
        out: String::new(),
        meta: String::new(),
        fields: String::new(),
    };
    for l in layouts.values() {
        let _ = writeln!(
            g.fields,
            "    /// Field positions of [`{ty}`](crate::{ty}).\n    pub mod {m} {{\n        #[allow(unused_imports)]\n        use crate::words::{{Field32, Field64}};",
            ty = camel(&l.name),
            m = ident(&l.name)
        );
        gen_layout(&layouts, l, &mut g);
        let _ = writeln!(g.fields, "    }}");
    }
    let mut reg = String::new();
    let _ = writeln!(
        reg,
        "/// Every layout, sorted by name.\npub static REGISTRY: [&LayoutMeta; {}] = [",
        layouts.len()
    );
    for l in layouts.values() {
        let _ = writeln!(reg, "    {}::META,", camel(&l.name));
    }
    let _ = writeln!(reg, "];");

    let out_dir = std::env::var("OUT_DIR").unwrap();
    let fields = format!(
        "/// Where each field of a layout lies, as constants for [`crate::words`]:\n/// `fields::wqe_ctrl_seg::OPCODE`. Fields inside one dword and aligned\n/// 64-bit fields.\npub mod fields {{\n{}}}\n",
        g.fields
    );
    let code = format!("{}\n{}\n{}\n{}", g.out, g.meta, reg, fields);
    std::fs::write(Path::new(&out_dir).join("layouts.rs"), code).unwrap();
    gen_typed_checks(&layouts, &out_dir);
}

/// Test code comparing typed accessors with the metadata path for a sample of layouts.
fn gen_typed_checks(layouts: &BTreeMap<String, Layout>, out_dir: &str) {
    const SAMPLE: &[&str] = &[
        "cqc",
        "qpc",
        "ads",
        "mkc",
        "wq",
        "sqc",
        "rqc",
        "rmpc",
        "eqc",
        "create_cq_in",
        "create_qp_in",
        "create_mkey_in",
        "rst2init_qp_in",
        "query_hca_cap_in",
        "cmd_hca_cap",
        "roce_cap",
        "nic_vport_context",
        "hca_vport_context",
        "cqe64",
        "err_cqe",
        "wqe_ctrl_seg",
        "wqe_datagram_seg",
        "wqe_eth_seg",
    ];
    let mut s = String::from(
        "/// Sets each scalar field through the typed setter and reads it back both ways.\npub fn typed_vs_dynamic(seed: u64) {\n    let mut rng = seed | 1;\n    let mut next = move || { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; rng };\n",
    );
    for name in SAMPLE {
        let Some(l) = layouts.get(*name) else {
            fail(format!("sample layout {name} missing"));
        };
        let ty = camel(name);
        let offs = offsets(layouts, l);
        let _ = writeln!(s, "    {{\n        let meta = {ty}::META;");
        for (m, off) in l.members.iter().zip(offs) {
            let (Some(fname), Ty::Bits(w), None, false) = (&m.name, &m.ty, m.count, m.tail) else {
                continue;
            };
            if is_bytes(m, *w) {
                continue;
            }
            let _ = off;
            let t = uint_for(*w);
            let id = ident(fname);
            // Spell each check without no-op masks or conversions.
            let (rand, widen, max, cast) = if *w == 64 {
                (
                    "next()".to_string(),
                    "",
                    "u64::MAX".to_string(),
                    String::new(),
                )
            } else {
                let mask = format!("((1u64 << {w}) - 1)");
                (
                    format!("next() & {mask}"),
                    "u64::from",
                    mask,
                    format!(" as {t}"),
                )
            };
            let overflow = if *w == 64 {
                String::new()
            } else {
                format!("            assert!(z.try_set_{fname}({max} + 1).is_err());\n")
            };
            let _ = write!(
                s,
                "        {{\n            let mut x = {ty}::new();\n            let v = {rand};\n            x.set_{fname}(v{cast});\n            assert_eq!({widen}(x.{id}()), v, \"{name}.{fname} typed\");\n            assert_eq!(meta.get(x.as_bytes(), \"{fname}\").unwrap().as_u64(), Some(v), \"{name}.{fname} dynamic\");\n            let mut y = {ty}::new();\n            let w = {rand};\n            meta.set(y.as_mut_bytes(), \"{fname}\", w).unwrap();\n            assert_eq!({widen}(y.{id}()), w, \"{name}.{fname} set dynamically\");\n            let mut z = {ty}::new();\n            z.set_{fname}({t}::MAX);\n            assert_eq!({widen}(z.{id}()), {max}, \"{name}.{fname} masks\");\n{overflow}        }}\n"
            );
        }
        let _ = writeln!(s, "        let _ = meta;\n    }}");
    }
    s.push_str("}\n");
    std::fs::write(Path::new(out_dir).join("typed_checks.rs"), s).unwrap();
}
