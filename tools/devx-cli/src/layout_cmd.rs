//! `layout`, `encode`, `decode`: PRM layouts by name from the shell.

use prm_layouts::{FieldKind, FieldValue, LayoutMeta};

use crate::fields;
use crate::values::{parse_hex, parse_hex_arg, parse_number, split_assignments};
use crate::CliResult;

/// Finds a layout (any case) or says which names come closest.
pub fn find_layout(name: &str) -> CliResult<&'static LayoutMeta> {
    let found = prm_layouts::find(name).or_else(|| prm_layouts::find(&name.to_ascii_lowercase()));
    found.ok_or_else(|| {
        let near = prm_layouts::nearest_layouts(name, 3);
        if near.is_empty() {
            format!("unknown layout '{name}'")
        } else {
            format!("unknown layout '{name}'; did you mean {}?", near.join(", "))
        }
    })
}

pub fn layout(name: Option<&str>, names_only: bool, json: bool) -> CliResult {
    let layouts: Vec<&LayoutMeta> = match name {
        Some(n) => vec![find_layout(n)?],
        None => prm_layouts::registry().to_vec(),
    };
    if names_only {
        if json {
            let names: Vec<String> = layouts.iter().map(|m| fields::json_str(m.name)).collect();
            println!("[{}]", names.join(", "));
        } else {
            for m in &layouts {
                println!("{}", m.name);
            }
        }
        return Ok(());
    }
    if json {
        println!("{}", layouts_json(&layouts));
        return Ok(());
    }
    for (i, m) in layouts.iter().enumerate() {
        if i > 0 {
            println!();
        }
        print_table(m);
    }
    Ok(())
}

fn print_table(m: &LayoutMeta) {
    let tail = m
        .tail
        .map(|t| format!(", then {}[] of {} bits each", t.name, t.elem_bits))
        .unwrap_or_default();
    println!(
        "{} ({} bytes, {} bits{tail})",
        m.name,
        m.size_bits / 8,
        m.size_bits
    );
    let width = m
        .fields
        .iter()
        .map(|f| f.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    println!(
        "  {:<width$}  {:>8}  {:>6}  {:>7}",
        "field", "bit", "width", "byte"
    );
    for f in m.fields {
        println!(
            "  {:<width$}  {:>#8x}  {:>6}  {:>7}",
            f.name,
            f.offset_bits,
            f.width_bits,
            f.offset_bits / 8
        );
    }
}

/// `{"NAME": {"size_bits": N, "fields": [{"name": ..., "offset_bits": ..., "width_bits": ...}]}}`.
pub fn layouts_json(layouts: &[&LayoutMeta]) -> String {
    let mut s = String::from("{");
    for (i, m) in layouts.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            "\n  \"{}\": {{\"size_bits\": {}, \"fields\": [",
            m.name, m.size_bits
        ));
        for (j, f) in m.fields.iter().enumerate() {
            if j > 0 {
                s.push_str(", ");
            }
            s.push_str(&format!(
                "{{\"name\": \"{}\", \"offset_bits\": {}, \"width_bits\": {}}}",
                f.name, f.offset_bits, f.width_bits
            ));
        }
        s.push_str("]}");
    }
    s.push_str("\n}");
    s
}

/// Parses a user's value for field `name` of `m`: numbers for scalars, hex for byte strings.
pub fn parse_field_value(m: &LayoutMeta, name: &str, text: &str) -> CliResult<FieldValue> {
    let field = m.field(name);
    match field.map(|f| f.kind) {
        Some(FieldKind::Bytes) => parse_hex(text)
            .map(FieldValue::Bytes)
            .map_err(|e| format!("field {name}: {e}")),
        _ => parse_number(text)
            .map(FieldValue::Scalar)
            .map_err(|e| format!("field {name}: {e}")),
    }
}

/// Builds a mailbox of layout `m` from `field=value` arguments.
pub fn build_mailbox(m: &LayoutMeta, assignments: &[String]) -> CliResult<Vec<u8>> {
    let mut buf = vec![0u8; m.size_bytes()];
    for (name, text) in split_assignments(assignments)? {
        let value = parse_field_value(m, name, text)?;
        m.set_value(&mut buf, name, &value)
            .map_err(|e| e.to_string())?;
    }
    Ok(buf)
}

pub fn encode(layout: &str, fields: &[String]) -> CliResult {
    let m = find_layout(layout)?;
    let buf = build_mailbox(m, fields)?;
    println!("{}", hex::encode(buf));
    Ok(())
}

/// The decoded fields of `buf` (only the non-zero ones unless `all`),
/// tail entries as `name[i]`.
pub fn decoded_fields(
    m: &LayoutMeta,
    buf: &[u8],
    all: bool,
) -> CliResult<Vec<(String, FieldValue)>> {
    let fields = m.decode(buf, all).map_err(|e| e.to_string())?;
    let mut out: Vec<(String, FieldValue)> = fields
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    if let Some(t) = m.tail {
        let tail = m.tail_values(buf).map_err(|e| e.to_string())?;
        for (i, v) in tail.into_iter().enumerate() {
            if all || !v.is_zero() {
                out.push((format!("{}[{i}]", t.name), v));
            }
        }
    }
    Ok(out)
}

/// `"name": value, …` of decoded fields (the inside of a JSON object).
pub fn fields_json(fields: &[(String, FieldValue)]) -> String {
    fields
        .iter()
        .map(|(n, v)| format!("{}: {}", fields::json_str(n), fields::json(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `name = value` lines, aligned, each prefixed with `indent`.
pub fn print_fields_text(m: &LayoutMeta, fields: &[(String, FieldValue)], indent: &str) {
    let width = fields.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (n, v) in fields {
        println!("{indent}{n:<width$} = {}", fields::text(m.name, n, v));
    }
}

pub fn print_decoded(m: &LayoutMeta, buf: &[u8], all: bool, json: bool) -> CliResult {
    let fields = decoded_fields(m, buf, all)?;
    if json {
        println!(
            "{{\"layout\": {}, \"fields\": {{{}}}}}",
            fields::json_str(m.name),
            fields_json(&fields)
        );
        return Ok(());
    }
    if fields.is_empty() {
        println!("{}: every field is zero", m.name);
    }
    print_fields_text(m, &fields, "");
    Ok(())
}

pub fn decode(layout: &str, hex_arg: &str, all: bool, json: bool) -> CliResult {
    let m = find_layout(layout)?;
    let buf = parse_hex_arg(hex_arg)?;
    print_decoded(m, &buf, all, json)
}
