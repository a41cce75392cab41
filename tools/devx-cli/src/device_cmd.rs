//! `devices`, `caps`, `cmd`: devices and raw commands.

use devx::{Context, Device};

use crate::layout_cmd::print_decoded;
use crate::values::parse_hex_arg;
use crate::CliResult;

/// Opens the device the user chose, or the default one (saying which on stderr).
pub fn choose_device(name: Option<&str>) -> CliResult<Device> {
    match name {
        Some(n) => Device::by_name(n).map_err(|e| e.to_string()),
        None => {
            let (dev, fallback) = Device::default_device().map_err(|e| e.to_string())?;
            if fallback {
                eprintln!(
                    "devx-cli: using emulated device {} (no mlx5 device found)",
                    dev.name()
                );
            }
            Ok(dev)
        }
    }
}

pub fn devices(json: bool) -> CliResult {
    let real = Device::list_real();
    let all = Device::list();
    if json {
        let items: Vec<String> = all
            .iter()
            .map(|d| {
                let i = d.info();
                format!(
                    "{{\"name\": \"{}\", \"provider\": \"{}\", \"emulated\": {}, \"location\": \"{}\", \"node_guid\": \"{:016x}\", \"fw_version\": \"{}\", \"vendor_id\": {}, \"vendor_part_id\": {}, \"num_ports\": {}{}}}",
                    i.name, i.provider, i.emulated, i.location.replace('"', "'"), i.node_guid,
                    i.fw_version, i.vendor_id, i.vendor_part_id, i.num_ports,
                    crate::net_info::json_fields(&i.name, i.emulated)
                )
            })
            .collect();
        println!("[{}]", items.join(", "));
        return Ok(());
    }
    if real.is_empty() {
        println!("No mlx5 device found on this machine; emulated devices are available.");
    }
    println!(
        "{:<10} {:<9} {:<18} {:<12} where",
        "device", "kind", "node_guid", "firmware"
    );
    for d in &all {
        let i = d.info();
        let kind = if i.emulated { "emulated" } else { "mlx5" };
        println!(
            "{:<10} {:<9} {:016x}   {:<12} {}",
            i.name, kind, i.node_guid, i.fw_version, i.location
        );
    }
    for i in all.iter().map(|d| d.info()).filter(|i| i.emulated) {
        if let Some((gid, addr)) = crate::net_info::describe(&i.name) {
            println!("{:<10} gid {gid}  address {addr}", i.name);
        }
    }
    Ok(())
}

/// QUERY_HCA_CAP for the general capabilities, current values.
pub fn query_general_caps(ctx: &Context) -> devx::Result<Vec<u8>> {
    let mut inbox = prm_layouts::QueryHcaCapIn::new();
    inbox.set_opcode(prm_layouts::Opcode::QueryHcaCap as u16);
    inbox.set_op_mod(0x01);
    ctx.general_cmd(inbox.as_bytes(), prm_layouts::QueryHcaCapOut::SIZE_BYTES)
}

pub fn caps(json: bool, all: bool) -> CliResult {
    let ctx = crate::session::context()?;
    let out = query_general_caps(&ctx).map_err(|e| e.to_string())?;
    // The capability page starts at byte 16 of the outbox.
    let meta = prm_layouts::CmdHcaCap::META;
    let page = &out[16..16 + meta.size_bytes()];
    print_decoded(meta, page, all, json)
}

pub fn cmd(hex_arg: &str, outlen: Option<usize>, json: bool) -> CliResult {
    let inbox = parse_hex_arg(hex_arg)?;
    if inbox.len() < 16 {
        return Err(format!(
            "the inbox is {} bytes; a command needs at least its 16-byte header",
            inbox.len()
        ));
    }
    let opcode = u16::from_be_bytes([inbox[0], inbox[1]]);
    let layouts = prm_layouts::mailbox_layouts(opcode);
    let outlen = match (outlen, layouts) {
        (Some(n), _) => n,
        (None, Some((_, out))) => out.size_bytes(),
        (None, None) => {
            return Err(format!(
                "no known output layout for opcode {opcode:#x}; give --outlen"
            ))
        }
    };
    let ctx = crate::session::context()?;
    let out = ctx.general_cmd(&inbox, outlen).map_err(|e| e.to_string())?;
    if opcode == prm_layouts::Opcode::QueryHcaCap as u16 {
        if let Some(page) = cap_page_layout(u16::from_be_bytes([inbox[6], inbox[7]]) >> 1) {
            if out.len() >= 16 + page.size_bytes() {
                println!(
                    "status = {:#x}, syndrome = {:#x}",
                    out[0],
                    u32::from_be_bytes([out[4], out[5], out[6], out[7]])
                );
                return print_decoded(page, &out[16..16 + page.size_bytes()], false, json);
            }
        }
    }
    match layouts {
        Some((_, meta)) if out.len() >= meta.size_bytes() => {
            let fixed = if meta.tail.is_some() {
                &out[..]
            } else {
                &out[..meta.size_bytes()]
            };
            print_decoded(meta, fixed, false, json)
        }
        _ => {
            println!("{}", hex::encode(&out));
            Ok(())
        }
    }
}

/// The capability page layout QUERY_HCA_CAP returns for a cap type.
fn cap_page_layout(cap_type: u16) -> Option<&'static prm_layouts::LayoutMeta> {
    let name = match cap_type {
        0x00 => "cmd_hca_cap",
        0x01 => "per_protocol_networking_offload_caps",
        0x02 => "odp_cap",
        0x03 => "atomic_caps",
        0x04 => "roce_cap",
        0x07 => "flow_table_nic_cap",
        0x20 => "cmd_hca_cap_2",
        _ => return None,
    };
    prm_layouts::find(name)
}
