//! `obj`: firmware objects by layout and field name, and the UMEMs, UARs and
//! EQ numbers they need, held by the session so later lines can use them.

use clap::{Args, Subcommand};
use devx::{Obj, Uar, UarKind, Umem};
use prm_layouts::commands;
use prm_layouts::{FieldValue, LayoutMeta, Opcode};

use crate::fields::json_str;
use crate::layout_cmd::{
    decoded_fields, fields_json, find_layout, parse_field_value, print_fields_text,
};
use crate::session::{self, Resource, Slot};
use crate::values::{parse_number, split_assignments};
use crate::CliResult;

#[derive(Args)]
#[command(after_help = "\
Objects are numbered $1, $2… in the order they are made, and can be named:
`cq = obj create create_cq_in …` or `obj cq=create create_cq_in …` (in a
shell or script). Field values may name them: `$cq` is the CQ's number,
`$buf` a UMEM's id, `$buf.addr` its address (`$buf.addr+0x40`), `$buf.len`
its size, `$u` a UAR's page id, `$e` an EQ number. Objects die with the
process: use `devx-cli shell` or `devx-cli script FILE` to keep them
across commands.

Examples:
  $ devx-cli obj create alloc_pd
  $ printf 'e = obj eqn 0\\nu = obj uar\\nb = obj umem 4096\\nd = obj umem 64\\ncq = obj create create_cq cq_context.log_cq_size=5 cq_context.c_eqn_or_apu_element=$e cq_context.uar_page=$u cq_umem_valid=1 cq_umem_id=$b cq_context.dbr_umem_valid=1 cq_context.dbr_umem_id=$d\\nobj query $cq\\n' | devx-cli shell")]
pub struct ObjArgs {
    #[command(subcommand)]
    cmd: ObjCmd,
}

#[derive(Subcommand)]
enum ObjCmd {
    /// Create an object: `obj create alloc_pd` (the opcode is filled in from
    /// the layout unless given; a CQ needs its EQ, UAR and memory, see `obj --help`).
    Create {
        /// Input layout (`create_cq_in`; `create_cq` and `CREATE_CQ` work too).
        layout: String,
        /// field=value pairs; values in decimal, 0x-hex, or `$ref`.
        fields: Vec<String>,
        /// Outbox length in bytes (default: the output layout's size).
        #[arg(long)]
        outlen: Option<usize>,
        /// Name to refer to the object by (`$NAME`).
        #[arg(long)]
        name: Option<String>,
        #[arg(long, short)]
        json: bool,
    },
    /// Query an object: `obj query $cq` (layout and object number are filled in).
    Query {
        /// `$N` or `$NAME`.
        obj: String,
        /// Optional input layout, then field=value pairs.
        args: Vec<String>,
        #[arg(long)]
        outlen: Option<usize>,
        #[arg(long, short)]
        json: bool,
    },
    /// Modify an object: `obj modify $qp rst2init_qp_in qpc.pm_state=3 …`.
    Modify {
        obj: String,
        /// Input layout.
        layout: String,
        fields: Vec<String>,
        #[arg(long)]
        outlen: Option<usize>,
        #[arg(long, short)]
        json: bool,
    },
    /// Destroy an object (or deregister a UMEM, free a UAR).
    Destroy { obj: String },
    /// Register SIZE bytes of zeroed memory as a UMEM.
    Umem {
        size: String,
        /// Access flags (1 local write, 2 remote write, 4 remote read).
        #[arg(long, default_value = "7")]
        access: String,
        #[arg(long)]
        name: Option<String>,
    },
    /// Allocate a UAR (doorbell page).
    Uar {
        /// A non-cached page instead of a BlueFlame one.
        #[arg(long)]
        noncached: bool,
        #[arg(long)]
        name: Option<String>,
    },
    /// The EQ number serving a completion vector.
    Eqn {
        #[arg(default_value = "0")]
        vector: String,
        #[arg(long)]
        name: Option<String>,
    },
    /// List what the session holds.
    List,
}

impl ObjArgs {
    /// Whether `--json` was asked for.
    pub fn json(&self) -> bool {
        match &self.cmd {
            ObjCmd::Create { json, .. }
            | ObjCmd::Query { json, .. }
            | ObjCmd::Modify { json, .. } => *json,
            _ => false,
        }
    }
}

pub fn run(args: ObjArgs) -> CliResult {
    match args.cmd {
        ObjCmd::Create {
            layout,
            fields,
            outlen,
            name,
            json,
        } => create(&layout, &fields, outlen, name, json),
        ObjCmd::Query {
            obj,
            args,
            outlen,
            json,
        } => {
            let (layout, fields) = match args.first() {
                Some(a) if !a.contains('=') => (Some(a.as_str()), &args[1..]),
                _ => (None, &args[..]),
            };
            command(&obj, Verb::Query, layout, fields, outlen, json)
        }
        ObjCmd::Modify {
            obj,
            layout,
            fields,
            outlen,
            json,
        } => command(&obj, Verb::Modify, Some(&layout), &fields, outlen, json),
        ObjCmd::Destroy { obj } => destroy(&obj),
        ObjCmd::Umem { size, access, name } => umem(&size, &access, name),
        ObjCmd::Uar { noncached, name } => uar(noncached, name),
        ObjCmd::Eqn { vector, name } => eqn(&vector, name),
        ObjCmd::List => list(),
    }
}

/// A layout by PRM name, forgiving case and a missing `_in`.
fn input_layout(name: &str) -> CliResult<&'static LayoutMeta> {
    let lower = name.to_ascii_lowercase();
    if let Some(m) = prm_layouts::find(&lower) {
        return Ok(m);
    }
    if let Some(m) = prm_layouts::find(&format!("{lower}_in")) {
        return Ok(m);
    }
    find_layout(name)
}

/// The opcode whose input layout is `m`.
fn opcode_of_layout(m: &LayoutMeta) -> Option<u16> {
    prm_layouts::MAILBOX_OPCODES
        .iter()
        .map(|op| op.raw())
        .find(|op| prm_layouts::mailbox_layouts(*op).is_some_and(|(i, _)| i.name == m.name))
}

/// The value of `$ref[.attr][+offset]`.
fn resolve_ref(text: &str) -> CliResult<u64> {
    let (base, plus) = match text.split_once('+') {
        Some((b, p)) => (b, parse_number(p)?),
        None => (text, 0),
    };
    let (reference, attr) = match base.split_once('.') {
        Some((r, a)) => (r, Some(a)),
        None => (base, None),
    };
    let n = session::lookup(reference)?;
    let v = session::with_slot(n, |slot| match (&slot.res, attr) {
        (Resource::Obj(o), None | Some("id")) => Ok(u64::from(o.id())),
        (Resource::Obj(o), Some("handle")) => Ok(u64::from(o.handle())),
        (Resource::Umem(u), None | Some("id")) => Ok(u64::from(u.id())),
        (Resource::Umem(u), Some("addr")) => Ok(u.addr() as u64),
        (Resource::Umem(u), Some("len")) => Ok(u.len() as u64),
        (Resource::Uar(u), None | Some("id" | "page")) => Ok(u64::from(u.page_id())),
        (Resource::Eqn(e, _), None | Some("id")) => Ok(u64::from(*e)),
        (_, Some(a)) => Err(format!("'{reference}' has no attribute '.{a}'")),
    })??;
    v.checked_add(plus)
        .ok_or_else(|| format!("'{text}' overflows 64 bits"))
}

/// Builds a mailbox of `m` from `field=value` pairs (values may be `$refs`).
/// Returns the buffer and the names the user set.
fn build(m: &LayoutMeta, fields: &[String]) -> CliResult<(Vec<u8>, Vec<String>)> {
    let mut buf = vec![0u8; m.size_bytes()];
    let mut set = Vec::new();
    for (name, text) in split_assignments(fields)? {
        let value = if text.starts_with('$') {
            FieldValue::Scalar(resolve_ref(text).map_err(|e| format!("field {name}: {e}"))?)
        } else {
            parse_field_value(m, name, text)?
        };
        m.set_value(&mut buf, name, &value)
            .map_err(|e| e.to_string())?;
        set.push(name.to_string());
    }
    Ok((buf, set))
}

/// Fills the opcode from the layout unless the user set it.
fn fill_opcode(m: &LayoutMeta, buf: &mut [u8], set: &[String]) -> CliResult<u16> {
    if set.iter().any(|s| s == "opcode") {
        return prm_layouts::NopIn::from_slice(buf)
            .map(|h| h.opcode())
            .ok_or_else(|| format!("layout {} is too short to be a command", m.name));
    }
    let op = opcode_of_layout(m).ok_or_else(|| {
        format!(
            "layout {} is not a command's input; give opcode=… or use a *_in layout",
            m.name
        )
    })?;
    m.set(buf, "opcode", u64::from(op))
        .map_err(|e| e.to_string())?;
    Ok(op)
}

fn out_len(opcode: u16, given: Option<usize>) -> CliResult<usize> {
    match (given, prm_layouts::mailbox_layouts(opcode)) {
        (Some(n), _) => Ok(n),
        (None, Some((_, out))) => Ok(out.size_bytes()),
        (None, None) => Err(format!(
            "no output layout known for opcode {opcode:#x}; give --outlen"
        )),
    }
}

/// Prints an outbox decoded by its layout (hex when there is none).
fn print_out(head: &str, opcode: u16, out: &[u8], json: bool, extra_json: &str) -> CliResult {
    let meta = prm_layouts::mailbox_layouts(opcode).map(|(_, o)| o);
    let (meta, fields) = match meta {
        Some(m) if out.len() >= m.size_bytes() => {
            let fixed = if m.tail.is_some() {
                out
            } else {
                &out[..m.size_bytes()]
            };
            (Some(m), decoded_fields(m, fixed, false)?)
        }
        _ => (
            None,
            vec![("hex".to_string(), FieldValue::Bytes(out.to_vec()))],
        ),
    };
    if json {
        println!(
            "{{{extra_json}\"opcode\": {}, \"outbox\": {{{}}}}}",
            json_str(&prm_layouts::enums::opcode_name(opcode)),
            fields_json(&fields)
        );
        return Ok(());
    }
    println!("{head}");
    match meta {
        Some(m) => print_fields_text(m, &fields, "  "),
        None => println!("  hex = {}", hex::encode(out)),
    }
    Ok(())
}

/// ` (name)` after a `$N`, or nothing.
fn label(name: Option<&str>) -> String {
    name.map(|s| format!(" ({s})")).unwrap_or_default()
}

fn note_lifetime() {
    if !session::interactive() {
        eprintln!(
            "devx-cli: note: objects die with the process; `devx-cli shell` or `script` keeps them"
        );
    }
}

fn create(
    layout: &str,
    fields: &[String],
    outlen: Option<usize>,
    name: Option<String>,
    json: bool,
) -> CliResult {
    let m = input_layout(layout)?;
    let (mut buf, set) = build(m, fields)?;
    let opcode = fill_opcode(m, &mut buf, &set)?;
    let outlen = out_len(opcode, outlen)?;
    let ctx = session::context()?;
    let obj = ctx.create(&buf, outlen).map_err(session::dev_err)?;
    let (id, handle, out) = (obj.id(), obj.handle(), obj.out().to_vec());
    let label = label(name.as_deref());
    let n = session::add(name, Resource::Obj(obj))?;
    let head = format!(
        "${n}{label} = {} {id:#x} (handle {handle})",
        prm_layouts::enums::opcode_name(opcode)
    );
    let extra = format!("\"ref\": \"${n}\", \"id\": {id}, \"handle\": {handle}, ");
    print_out(&head, opcode, &out, json, &extra)?;
    note_lifetime();
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Verb {
    Query,
    Modify,
}

/// The object type made by a raw create opcode.
fn object_type(create: u16) -> Option<&'static commands::ObjectType> {
    commands::object(Opcode::from_raw(create)?)
}

/// The query opcode for objects made by `create`.
fn query_opcode(create: u16) -> Option<u16> {
    object_type(create)?.query.map(Opcode::raw)
}

/// The field a command names an object by, for objects made by `create`.
fn id_field(create: u16) -> &'static str {
    object_type(create).map_or("", |o| o.number.name)
}

/// Header fields that name where an object lives (its table, its vport,
/// its general-object type), copied from the create unless the user set them.
const CONTEXT_FIELDS: &[&str] = &["table_type", "table_id", "vport_number", "other_vport"];

fn command(
    reference: &str,
    verb: Verb,
    layout: Option<&str>,
    fields: &[String],
    outlen: Option<usize>,
    json: bool,
) -> CliResult {
    let n = session::lookup(reference)?;
    let (create_in, id) = session::with_slot(n, |slot| match &slot.res {
        Resource::Obj(o) => Ok((o.create_inbox().to_vec(), o.id())),
        _ => Err(format!("'{reference}' is not a firmware object")),
    })??;
    let create_op = commands::header::OPCODE.get_or_zero(&create_in) as u16;
    let m = match layout {
        Some(l) => input_layout(l)?,
        None => {
            let q = query_opcode(create_op).ok_or_else(|| {
                format!(
                    "{} objects have no query command; give the layout",
                    prm_layouts::enums::opcode_name(create_op)
                )
            })?;
            prm_layouts::mailbox_layouts(q)
                .map(|(i, _)| i)
                .ok_or("no query layout")?
        }
    };
    let (mut buf, set) = build(m, fields)?;
    let opcode = fill_opcode(m, &mut buf, &set)?;
    let given = |f: &str| set.iter().any(|s| s == f);
    let idf = id_field(create_op);
    if !idf.is_empty() && m.field(idf).is_some() && !given(idf) {
        m.set(&mut buf, idf, u64::from(id))
            .map_err(|e| e.to_string())?;
    }
    let create_meta = prm_layouts::mailbox_layouts(create_op).map(|(i, _)| i);
    for f in CONTEXT_FIELDS.iter().filter(|f| **f != idf && !given(f)) {
        if let (Some(cm), Some(_)) = (create_meta, m.field(f)) {
            if let Ok(v) = cm.get(&create_in, f) {
                let _ = m.set_value(&mut buf, f, &v);
            }
        }
    }
    // General objects are numbered per type: the query names the type too.
    let typed = object_type(create_op).is_some_and(|o| o.typed);
    if typed && !given("obj_type") && !given("op_mod") {
        let op_mod = commands::header::OP_MOD;
        let _ = op_mod.set(&mut buf, op_mod.get_or_zero(&create_in));
    }
    let outlen = out_len(opcode, outlen)?;
    let out = session::with_slot(n, |slot| match &slot.res {
        Resource::Obj(o) => match verb {
            Verb::Query => o.query(&buf, outlen),
            Verb::Modify => o.modify(&buf, outlen),
        },
        _ => unreachable_resource(),
    })?
    .map_err(session::dev_err)?;
    let head = format!("${n}: {}", prm_layouts::enums::opcode_name(opcode));
    print_out(&head, opcode, &out, json, &format!("\"ref\": \"${n}\", "))
}

fn unreachable_resource() -> devx::Result<Vec<u8>> {
    Err(devx::Error::argument("not a firmware object"))
}

fn destroy(reference: &str) -> CliResult {
    let n = session::lookup(reference)?;
    let slot = session::take(n)?;
    let Slot { name, res } = slot;
    let result = match res {
        Resource::Obj(o) => match o.destroy() {
            Ok(()) => Ok(()),
            Err(failed) => {
                let msg = session::dev_err(failed.error);
                session::put_back(
                    n,
                    Slot {
                        name,
                        res: Resource::Obj(*failed.obj),
                    },
                );
                Err(msg)
            }
        },
        Resource::Umem(u) => match u.deregister() {
            Ok(_) => Ok(()),
            Err((u, e)) => {
                session::put_back(
                    n,
                    Slot {
                        name,
                        res: Resource::Umem(u),
                    },
                );
                Err(session::dev_err(e))
            }
        },
        Resource::Uar(u) => {
            drop(u);
            Ok(())
        }
        Resource::Eqn(..) => Ok(()),
    };
    result.map_err(|e| format!("destroying ${n}: {e}"))?;
    println!("${n} destroyed");
    Ok(())
}

fn umem(size: &str, access: &str, name: Option<String>) -> CliResult {
    let size = parse_number(size)?;
    let access = u32::try_from(parse_number(access)?).map_err(|_| "access flags are 32 bits")?;
    if size == 0 || size > 1 << 32 {
        return Err(format!(
            "umem size {size:#x} must be between 1 byte and 4 GiB"
        ));
    }
    let ctx = session::context()?;
    let u = Umem::register(&ctx, vec![0u8; size as usize], access).map_err(session::dev_err)?;
    let (id, addr) = (u.id(), u.addr());
    let label = label(name.as_deref());
    let n = session::add(name, Resource::Umem(u))?;
    println!("${n}{label} = umem {id:#x}, {size:#x} bytes at {addr:#x}");
    Ok(())
}

fn uar(noncached: bool, name: Option<String>) -> CliResult {
    let kind = if noncached {
        UarKind::NonCached
    } else {
        UarKind::BlueFlame
    };
    let ctx = session::context()?;
    let u = Uar::alloc_kind(&ctx, kind).map_err(session::dev_err)?;
    let page = u.page_id();
    let label = label(name.as_deref());
    let n = session::add(name, Resource::Uar(u))?;
    println!("${n}{label} = uar page {page:#x}");
    Ok(())
}

fn eqn(vector: &str, name: Option<String>) -> CliResult {
    let vector = u32::try_from(parse_number(vector)?).map_err(|_| "vector is 32 bits")?;
    let ctx = session::context()?;
    let e = ctx.query_eqn(vector).map_err(session::dev_err)?;
    let label = label(name.as_deref());
    let n = session::add(name, Resource::Eqn(e, vector))?;
    println!("${n}{label} = eqn {e:#x} (vector {vector})");
    Ok(())
}

fn list() -> CliResult {
    let mut any = false;
    session::each(|n, slot| {
        any = true;
        let name = label(slot.name.as_deref());
        let what = match &slot.res {
            Resource::Obj(o) => describe_obj(o),
            Resource::Umem(u) => format!(
                "umem {:#x}, {:#x} bytes at {:#x}",
                u.id(),
                u.len(),
                u.addr()
            ),
            Resource::Uar(u) => format!("uar page {:#x}", u.page_id()),
            Resource::Eqn(e, v) => format!("eqn {e:#x} (vector {v})"),
        };
        println!("${n}{name} = {what}");
    });
    if !any {
        println!("(nothing yet)");
    }
    Ok(())
}

fn describe_obj(o: &Obj) -> String {
    format!(
        "{} {:#x} (handle {})",
        prm_layouts::enums::opcode_name(o.create_opcode()),
        o.id(),
        o.handle()
    )
}
