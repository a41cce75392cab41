//! `devices`, `caps`, `cmd`: devices and raw commands.

use devx::{Context, Device};

use prm_layouts::enums::HcaCapType;
use prm_layouts::{NopIn, NopOut, Opcode, QueryHcaCapIn, QueryHcaCapOut};

use crate::fields::{json_str, status_text};
use crate::layout_cmd::{decoded_fields, fields_json, print_decoded, print_fields_text};
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
                    "{{\"name\": {}, \"provider\": {}, \"emulated\": {}, \"location\": {}, \"node_guid\": {}, \"fw_version\": {}, \"vendor_id\": {}, \"vendor_part_id\": {}, \"num_ports\": {}{}}}",
                    json_str(&i.name), json_str(&i.provider), i.emulated, json_str(&i.location),
                    i.node_guid, json_str(&i.fw_version), i.vendor_id, i.vendor_part_id, i.num_ports,
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
    println!(
        "Any sim0 … sim{} names an emulated device, created on first use \
         (rc_pingpong uses sim1 and sim2); only those made so far are listed.",
        devx::sim::MAX_DEVICE_INDEX
    );
    Ok(())
}

/// Which values `caps` shows: what the device can do, or what is set now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CapMode {
    /// The maximum the device supports.
    Max,
    /// The values currently in effect.
    Cur,
}

/// The capability pages `caps --page` knows, with the layout each decodes by.
const CAP_PAGES: &[(HcaCapType, &str)] = &[
    (HcaCapType::General, "cmd_hca_cap"),
    (
        HcaCapType::EthernetOffloads,
        "per_protocol_networking_offload_caps",
    ),
    (HcaCapType::Odp, "odp_cap"),
    (HcaCapType::Atomic, "atomic_caps"),
    (HcaCapType::Roce, "roce_cap"),
    (HcaCapType::FlowTable, "flow_table_nic_cap"),
    (HcaCapType::General2, "cmd_hca_cap_2"),
];

/// Names `caps --page` accepts, for its help and errors.
pub fn cap_page_names() -> String {
    CAP_PAGES
        .iter()
        .map(|(t, _)| t.name().to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A capability page by name: any case, `-` or `_`, or a unique prefix (`eth`).
pub fn parse_cap_page(name: &str) -> CliResult<HcaCapType> {
    let want = name.to_ascii_uppercase().replace('-', "_");
    let exact = CAP_PAGES.iter().find(|(t, _)| t.name() == want);
    let prefixed: Vec<_> = CAP_PAGES
        .iter()
        .filter(|(t, _)| t.name().starts_with(&want))
        .collect();
    match (exact, prefixed.as_slice()) {
        (Some((t, _)), _) | (None, [(t, _)]) => Ok(*t),
        _ => Err(format!(
            "unknown capability page '{name}' (pages: {})",
            cap_page_names()
        )),
    }
}

/// The layout a capability page decodes by.
fn cap_page_layout(page: HcaCapType) -> Option<&'static prm_layouts::LayoutMeta> {
    CAP_PAGES
        .iter()
        .find(|(t, _)| *t == page)
        .and_then(|(_, name)| prm_layouts::find(name))
}

/// QUERY_HCA_CAP for one page; returns the whole outbox.
pub fn query_caps(ctx: &Context, page: HcaCapType, mode: CapMode) -> devx::Result<Vec<u8>> {
    let mut inbox = QueryHcaCapIn::new();
    inbox.set_opcode(Opcode::QueryHcaCap.raw());
    inbox.set_op_mod(page.op_mod(mode == CapMode::Cur));
    ctx.general_cmd(inbox.as_bytes(), QueryHcaCapOut::SIZE_BYTES)
}

/// The capability page inside a QUERY_HCA_CAP outbox.
fn page_bytes(out: &[u8]) -> CliResult<&[u8]> {
    QueryHcaCapOut::from_slice(out)
        .map(|o| o.capability().as_bytes())
        .ok_or_else(|| {
            format!(
                "QUERY_HCA_CAP answered {} bytes; its outbox is {}",
                out.len(),
                QueryHcaCapOut::SIZE_BYTES
            )
        })
}

pub fn caps(page: &str, mode: CapMode, json: bool, all: bool) -> CliResult {
    let page = parse_cap_page(page)?;
    let meta = cap_page_layout(page).ok_or_else(|| format!("no layout for page {page}"))?;
    let ctx = crate::session::context()?;
    let out = query_caps(&ctx, page, mode).map_err(crate::session::dev_err)?;
    print_decoded(meta, &page_bytes(&out)?[..meta.size_bytes()], all, json)
}

/// Status and syndrome, the header every outbox starts with.
fn out_header(out: &[u8]) -> (u8, u32) {
    NopOut::from_slice(out)
        .map(|h| (h.status(), h.syndrome()))
        .unwrap_or_default()
}

/// Prints status and syndrome (text) or adds them to a JSON object.
fn header_text(out: &[u8]) -> String {
    let (status, syndrome) = out_header(out);
    format!("status = {}, syndrome = {syndrome:#x}", status_text(status))
}

pub fn cmd(hex_arg: &str, outlen: Option<usize>, json: bool) -> CliResult {
    let inbox = parse_hex_arg(hex_arg)?;
    // Every inbox starts with opcode and op_mod (NOP's inbox is only that).
    let Some(head) = NopIn::from_slice(&inbox) else {
        return Err(format!(
            "the inbox is {} bytes; a command needs at least its {}-byte header",
            inbox.len(),
            NopIn::SIZE_BYTES
        ));
    };
    let (opcode, op_mod) = (head.opcode(), head.op_mod());
    let layouts = prm_layouts::mailbox_layouts(opcode);
    // Every outbox starts with status and syndrome (NOP's outbox is only
    // that): enough for the device to answer an opcode we have no layout for.
    let outlen = outlen
        .or(layouts.map(|(_, out)| out.size_bytes()))
        .unwrap_or(NopOut::SIZE_BYTES);
    let ctx = crate::session::context()?;
    let out = ctx
        .general_cmd(&inbox, outlen)
        .map_err(crate::session::dev_err)?;
    let (status, syndrome) = out_header(&out);
    if opcode == Opcode::QueryHcaCap.raw() {
        let page = HcaCapType::from_raw(op_mod >> 1).and_then(cap_page_layout);
        if let (Some(page), Ok(bytes)) = (page, page_bytes(&out)) {
            let fields = decoded_fields(page, &bytes[..page.size_bytes()], false)?;
            if json {
                println!(
                    "{{\"layout\": {}, \"status\": {status}, \"syndrome\": {syndrome}, \"fields\": {{{}}}}}",
                    json_str(page.name),
                    fields_json(&fields)
                );
            } else {
                println!("{}", header_text(&out));
                print_fields_text(page, &fields, "");
            }
            return Ok(());
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
            if json {
                println!(
                    "{{\"opcode\": {opcode}, \"status\": {status}, \"syndrome\": {syndrome}, \"outbox\": {}}}",
                    json_str(&hex::encode(&out))
                );
            } else {
                println!("{}", header_text(&out));
                println!("outbox = {}", hex::encode(&out));
            }
            Ok(())
        }
    }
}
