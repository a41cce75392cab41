//! `dev`, `link`, `res`: what `rdma dev`, `rdma link` and `rdma res show`
//! print, for mlx5 and emulated devices.

use devx::{Device, LiveObject};

use crate::fields::{enum_name, json_str};
use crate::CliResult;

pub const RES_HELP: &str = "\
Without a kind: one line per device with the count of each kind alive.
With one (qp, cq, pd, mr, umem, uar, eq, srq, sq, rq, tir, tis, rqt, …):
one line per object with its number, owner uid and a few attributes.
Objects of every user of the device are listed. Emulated devices answer
from their firmware tables; on a kernel mlx5 device listing is unsupported
(the kernel keeps them in RDMA netlink: use `rdma res`).
Examples:
  $ devx-cli res
  $ printf 'obj create alloc_pd\\nres pd\\n' | devx-cli shell";

/// The devices `dev`, `link` and `res` show: `--device`, else every one.
fn devices() -> CliResult<Vec<Device>> {
    match crate::session::device_name() {
        Some(name) => Ok(vec![Device::by_name(&name).map_err(|e| e.to_string())?]),
        None => Ok(Device::list()),
    }
}

pub fn dev(json: bool) -> CliResult {
    let mut items = Vec::new();
    for (i, d) in devices()?.iter().enumerate() {
        let info = d.info();
        if json {
            items.push(format!(
                "{{\"ifindex\": {i}, \"ifname\": {}, \"node_type\": \"ca\", \"fw\": {}, \"node_guid\": {}, \"emulated\": {}}}",
                json_str(&info.name),
                json_str(&info.fw_version),
                info.node_guid,
                info.emulated
            ));
        } else {
            println!(
                "{i}: {}: node_type ca fw {} node_guid {} {}",
                info.name,
                info.fw_version,
                guid(info.node_guid),
                if info.emulated { "emulated" } else { "mlx5" }
            );
        }
    }
    if json {
        println!("[{}]", items.join(", "));
    }
    Ok(())
}

/// `rdma` GUID text: four groups of four hex digits.
fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    b.chunks(2)
        .map(|p| format!("{:02x}{:02x}", p[0], p[1]))
        .collect::<Vec<_>>()
        .join(":")
}

pub fn link(json: bool) -> CliResult {
    let mut items = Vec::new();
    for d in devices()? {
        let ctx = verbs::Context::open(&d).map_err(|e| e.to_string())?;
        for port in 1..=ctx.num_ports() {
            let p = ctx.query_port(port).map_err(|e| e.to_string())?;
            let state = p.state.name().trim_start_matches("PORT_");
            let phys = verbs::phys_state_name(p.phys_state);
            if json {
                items.push(format!(
                    "{{\"ifname\": {}, \"port\": {port}, \"state\": {}, \"physical_state\": {}, \"link_layer\": {}, \"mtu\": {}}}",
                    json_str(d.name()),
                    json_str(state),
                    json_str(phys),
                    json_str(&p.link_layer.to_string()),
                    p.active_mtu.bytes()
                ));
            } else {
                println!(
                    "link {}/{port} state {state} physical_state {phys} link_layer {} mtu {}",
                    d.name(),
                    p.link_layer,
                    p.active_mtu.bytes()
                );
            }
        }
    }
    if json {
        println!("[{}]", items.join(", "));
    }
    Ok(())
}

/// The emulator's kind name for what a user types (`mr` is an mkey).
fn kind_name(kind: &str) -> String {
    match kind.to_ascii_lowercase().as_str() {
        "mr" => "mkey".into(),
        "ctx" => "uctx".into(),
        k => k.to_string(),
    }
}

/// Known kinds, for the error on an unknown one.
fn known_kinds() -> String {
    devx::sim::ObjKind::ALL
        .iter()
        .filter(|k| k.is_user_object() || **k == devx::sim::ObjKind::Eq)
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn res(kind: Option<&str>, json: bool) -> CliResult {
    let want = kind.map(kind_name);
    if let Some(w) = &want {
        if !devx::sim::ObjKind::ALL.iter().any(|k| k.name() == w) {
            return Err(format!(
                "unknown object kind '{}' (kinds: mr, {})",
                kind.unwrap_or_default(),
                known_kinds()
            ));
        }
    }
    let mut items = Vec::new();
    for (i, d) in devices()?.iter().enumerate() {
        let objs = devx::live_objects(d).map_err(|e| e.to_string())?;
        match &want {
            None => {
                let mut counts: Vec<(&str, usize)> = Vec::new();
                for o in &objs {
                    match counts.iter_mut().find(|(k, _)| *k == o.kind) {
                        Some((_, n)) => *n += 1,
                        None => counts.push((o.kind, 1)),
                    }
                }
                if json {
                    let body: Vec<String> = counts
                        .iter()
                        .map(|(k, n)| format!("{}: {n}", json_str(k)))
                        .collect();
                    items.push(format!(
                        "{{\"ifindex\": {i}, \"ifname\": {}, {}}}",
                        json_str(d.name()),
                        body.join(", ")
                    ));
                } else {
                    let body: Vec<String> =
                        counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
                    println!("{i}: {}: {}", d.name(), body.join(" "));
                }
            }
            Some(w) => {
                for o in objs.iter().filter(|o| o.kind == w) {
                    if json {
                        items.push(object_json(d.name(), o));
                    } else {
                        println!("{}", object_line(d.name(), o));
                    }
                }
            }
        }
    }
    if json {
        println!("[{}]", items.join(", "));
    }
    Ok(())
}

/// The layout field an attribute comes from, for naming its value.
fn attr_field(kind: &str, attr: &str) -> Option<&'static str> {
    match (kind, attr) {
        ("qp", "state") => Some("qpc.state"),
        ("qp", "st") => Some("qpc.st"),
        _ => None,
    }
}

fn object_line(dev: &str, o: &LiveObject) -> String {
    let mut line = format!(
        "dev {dev} {} {:#x} ({}) uid {} refs {}",
        o.kind, o.number, o.number, o.uid, o.refs
    );
    for (k, v) in &o.attrs {
        let named = attr_field(o.kind, k).and_then(|f| enum_name("", f, *v));
        match named {
            Some(n) => line.push_str(&format!(" {k} {n}")),
            None => line.push_str(&format!(" {k} {v:#x}")),
        }
    }
    line
}

fn object_json(dev: &str, o: &LiveObject) -> String {
    let mut s = format!(
        "{{\"ifname\": {}, \"kind\": {}, \"number\": {}, \"uid\": {}, \"refs\": {}",
        json_str(dev),
        json_str(o.kind),
        o.number,
        o.uid,
        o.refs
    );
    for (k, v) in &o.attrs {
        s.push_str(&format!(", {}: {v}", json_str(k)));
    }
    s.push('}');
    s
}
