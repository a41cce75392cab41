//! What `ibv_devinfo -v` prints, gathered with the verbs in one call, as text
//! or JSON; the `devinfo` example and `devx-cli devinfo` both print this.

use std::fmt::{self, Write as _};

use prm_layouts::{Opcode, QueryAdapterIn, QueryAdapterOut};

use crate::context::Context;
use crate::device::{AtomicCap, DeviceAttr};
use crate::error::Result;
use crate::port::{GidEntry, PortAttr};

/// One port: its attributes and its used GID table entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortReport {
    pub port: u8,
    pub attr: PortAttr,
    pub gids: Vec<GidEntry>,
}

/// A device's identity, limits and ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceReport {
    pub name: String,
    pub provider: String,
    pub emulated: bool,
    /// The board's PSID (`board_id`), when the device answers QUERY_ADAPTER.
    pub board_id: Option<String>,
    pub attr: DeviceAttr,
    pub ports: Vec<PortReport>,
}

impl DeviceReport {
    /// Queries the device and every port of `ctx`.
    pub fn collect(ctx: &Context) -> Result<DeviceReport> {
        let info = ctx.device().info().clone();
        let attr = ctx.query_device()?;
        let mut ports = Vec::new();
        for port in 1..=ctx.num_ports() {
            let pattr = ctx.query_port(port)?;
            let gids = ctx.gid_table(port)?;
            ports.push(PortReport {
                port,
                attr: pattr,
                gids,
            });
        }
        Ok(DeviceReport {
            name: info.name,
            provider: info.provider,
            emulated: info.emulated,
            board_id: board_id(ctx),
            attr,
            ports,
        })
    }

    /// The report as one JSON object (every value a number, GUIDs and GIDs
    /// as strings).
    pub fn to_json(&self) -> String {
        let a = &self.attr;
        let mut s = String::new();
        let _ = write!(
            s,
            "{{\"hca_id\": {}, \"provider\": {}, \"emulated\": {}, \"fw_ver\": {}, \
             \"board_id\": {}, \"node_guid\": \"{}\", \"sys_image_guid\": \"{}\", \"vendor_id\": {}, \
             \"vendor_part_id\": {}, \"hw_ver\": {}, \"phys_port_cnt\": {}, \
             \"link_layer\": \"{}\", \"limits\": {{",
            json_str(&self.name),
            json_str(&self.provider),
            self.emulated,
            json_str(&a.fw_ver),
            self.board_id
                .as_deref()
                .map(json_str)
                .unwrap_or_else(|| "null".into()),
            guid(a.node_guid),
            guid(a.sys_image_guid),
            a.vendor_id,
            a.vendor_part_id,
            a.hw_ver,
            a.phys_port_cnt,
            a.link_layer,
        );
        let limits = limit_rows(a);
        for (i, (k, v)) in limits.iter().enumerate() {
            let _ = write!(s, "{}\"{k}\": {v}", if i > 0 { ", " } else { "" });
        }
        let _ = write!(
            s,
            "}}, \"atomic_cap\": \"{}\", \"ports\": [",
            atomic_name(a.atomic_cap)
        );
        for (i, p) in self.ports.iter().enumerate() {
            let pa = &p.attr;
            let _ = write!(
                s,
                "{}{{\"port\": {}, \"state\": \"{}\", \"max_mtu\": {}, \"active_mtu\": {}, \
                 \"sm_lid\": {}, \"port_lid\": {}, \"port_lmc\": {}, \"link_layer\": \"{}\", \
                 \"max_msg_sz\": {}, \"gid_tbl_len\": {}, \"pkey_tbl_len\": {}, \
                 \"phys_state\": {}, \"port_cap_flags\": {}, \"gids\": [",
                if i > 0 { ", " } else { "" },
                p.port,
                pa.state.name(),
                pa.max_mtu.bytes(),
                pa.active_mtu.bytes(),
                pa.sm_lid,
                pa.lid,
                pa.lmc,
                pa.link_layer,
                pa.max_msg_sz,
                pa.gid_tbl_len,
                pa.pkey_tbl_len,
                pa.phys_state,
                pa.port_cap_flags,
            );
            for (j, g) in p.gids.iter().enumerate() {
                let _ = write!(
                    s,
                    "{}{{\"index\": {}, \"gid\": \"{}\", \"type\": \"{}\"}}",
                    if j > 0 { ", " } else { "" },
                    g.index,
                    g.gid.to_ipv6(),
                    g.gid_type.name()
                );
            }
            s.push_str("]}");
        }
        s.push_str("]}");
        s
    }
}

/// QUERY_ADAPTER's PSID, what `ibv_devinfo` prints as `board_id`.
fn board_id(ctx: &Context) -> Option<String> {
    let mut inbox = QueryAdapterIn::new();
    inbox.set_opcode(Opcode::QueryAdapter.raw());
    let out = ctx
        .devx()
        .general_cmd(inbox.as_bytes(), QueryAdapterOut::SIZE_BYTES)
        .ok()?;
    let psid = *QueryAdapterOut::from_slice(&out)?
        .query_adapter_struct()
        .vsd_contd_psid();
    let end = psid.iter().position(|b| *b == 0).unwrap_or(psid.len());
    let text = String::from_utf8_lossy(&psid[..end]).trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// The name of an IB physical port state (`ibv_devinfo`'s `phys_state`).
pub fn phys_state_name(v: u8) -> &'static str {
    match v {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION_TRAINING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY_TEST",
        _ => "NOP",
    }
}

fn json_str(v: &str) -> String {
    let mut out = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `ibv_devinfo` GUID text: four groups of four hex digits.
fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

fn atomic_name(a: AtomicCap) -> &'static str {
    match a {
        AtomicCap::None => "ATOMIC_NONE",
        AtomicCap::Hca => "ATOMIC_HCA",
        AtomicCap::Global => "ATOMIC_GLOB",
    }
}

fn limit_rows(a: &DeviceAttr) -> Vec<(&'static str, u64)> {
    vec![
        ("max_mr_size", a.max_mr_size),
        ("page_size_cap", a.page_size_cap),
        ("max_qp", a.max_qp.into()),
        ("max_qp_wr", a.max_qp_wr.into()),
        ("max_send_sge", a.max_send_sge.into()),
        ("max_recv_sge", a.max_recv_sge.into()),
        ("max_sge_rd", a.max_sge_rd.into()),
        ("max_cq", a.max_cq.into()),
        ("max_cqe", a.max_cqe.into()),
        ("max_mr", a.max_mr.into()),
        ("max_pd", a.max_pd.into()),
        ("max_qp_rd_atom", a.max_qp_rd_atom.into()),
        ("max_ee_rd_atom", a.max_ee_rd_atom.into()),
        ("max_res_rd_atom", a.max_res_rd_atom),
        ("max_qp_init_rd_atom", a.max_qp_init_rd_atom.into()),
        ("max_ee_init_rd_atom", a.max_ee_init_rd_atom.into()),
        ("max_ee", a.max_ee.into()),
        ("max_rdd", a.max_rdd.into()),
        ("max_mw", a.max_mw.into()),
        ("max_raw_ipv6_qp", a.max_raw_ipv6_qp.into()),
        ("max_raw_ethy_qp", a.max_raw_ethy_qp.into()),
        ("max_mcast_grp", a.max_mcast_grp.into()),
        ("max_mcast_qp_attach", a.max_mcast_qp_attach.into()),
        ("max_total_mcast_qp_attach", a.max_total_mcast_qp_attach),
        ("max_ah", a.max_ah.into()),
        ("max_srq", a.max_srq.into()),
        ("max_srq_wr", a.max_srq_wr.into()),
        ("max_srq_sge", a.max_srq_sge.into()),
        ("max_pkeys", a.max_pkeys.into()),
        ("local_ca_ack_delay", a.local_ca_ack_delay.into()),
        ("hca_core_clock_khz", a.hca_core_clock_khz),
    ]
}

/// `ibv_devinfo -v` layout.
impl fmt::Display for DeviceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.attr;
        writeln!(
            f,
            "hca_id:\t{}{}",
            self.name,
            if self.emulated { " (emulated)" } else { "" }
        )?;
        writeln!(f, "\ttransport:\t\t\tInfiniBand (0)")?;
        writeln!(f, "\tfw_ver:\t\t\t\t{}", a.fw_ver)?;
        if let Some(b) = &self.board_id {
            writeln!(f, "\tboard_id:\t\t\t{b}")?;
        }
        writeln!(f, "\tnode_guid:\t\t\t{}", guid(a.node_guid))?;
        writeln!(f, "\tsys_image_guid:\t\t\t{}", guid(a.sys_image_guid))?;
        writeln!(f, "\tvendor_id:\t\t\t{:#06x}", a.vendor_id)?;
        writeln!(f, "\tvendor_part_id:\t\t\t{}", a.vendor_part_id)?;
        writeln!(f, "\thw_ver:\t\t\t\t{:#x}", a.hw_ver)?;
        writeln!(f, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt)?;
        for (k, v) in limit_rows(a) {
            if k == "page_size_cap" || k == "max_mr_size" {
                writeln!(f, "\t{k}:{}{v:#x}", tabs(k))?;
            } else {
                writeln!(f, "\t{k}:{}{v}", tabs(k))?;
            }
        }
        writeln!(
            f,
            "\tatomic_cap:\t\t\t{} ({})",
            atomic_name(a.atomic_cap),
            a.atomic_cap as u8
        )?;
        let c = &a.cap_flags;
        let flags: Vec<&str> = [
            (c.rc, "RC"),
            (c.uc, "UC"),
            (c.ud, "UD"),
            (c.xrc, "XRC"),
            (c.dc, "DC"),
            (c.raw_packet, "RAW_PACKET"),
            (c.roce, "ROCE"),
            (c.resize_cq, "RESIZE_MAX_WR"),
            (c.cq_moderation, "CQ_MODERATION"),
            (c.mem_window, "MEM_WINDOW"),
            (c.auto_path_migration, "AUTO_PATH_MIG"),
            (c.bad_pkey_counter, "BAD_PKEY_CNTR"),
            (c.bad_qkey_counter, "BAD_QKEY_CNTR"),
            (c.block_multicast_loopback, "BLOCK_MULTICAST_LOOPBACK"),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| n)
        .collect();
        writeln!(f, "\tdevice_cap_flags:\t\t{}", flags.join(" "))?;
        for p in &self.ports {
            let pa = &p.attr;
            writeln!(f, "\t\tport:\t{}", p.port)?;
            writeln!(f, "\t\t\tstate:\t\t\t{}", pa.state)?;
            writeln!(
                f,
                "\t\t\tphys_state:\t\t{} ({})",
                phys_state_name(pa.phys_state),
                pa.phys_state
            )?;
            writeln!(f, "\t\t\tport_cap_flags:\t\t{:#010x}", pa.port_cap_flags)?;
            writeln!(f, "\t\t\tmax_mtu:\t\t{}", pa.max_mtu)?;
            writeln!(f, "\t\t\tactive_mtu:\t\t{}", pa.active_mtu)?;
            writeln!(f, "\t\t\tsm_lid:\t\t\t{}", pa.sm_lid)?;
            writeln!(f, "\t\t\tport_lid:\t\t{}", pa.lid)?;
            writeln!(f, "\t\t\tport_lmc:\t\t{:#04x}", pa.lmc)?;
            writeln!(f, "\t\t\tlink_layer:\t\t{}", pa.link_layer)?;
            writeln!(f, "\t\t\tmax_msg_sz:\t\t{:#x}", pa.max_msg_sz)?;
            writeln!(f, "\t\t\tgid_tbl_len:\t\t{}", pa.gid_tbl_len)?;
            writeln!(f, "\t\t\tpkey_tbl_len:\t\t{}", pa.pkey_tbl_len)?;
            if let Some(m) = pa.mac {
                writeln!(
                    f,
                    "\t\t\tmac:\t\t\t{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                    m[0], m[1], m[2], m[3], m[4], m[5]
                )?;
            }
            for g in &p.gids {
                writeln!(
                    f,
                    "\t\t\tGID[{:>3}]:\t\t{}, {}",
                    g.index,
                    g.gid.to_ipv6(),
                    g.gid_type.name()
                )?;
            }
        }
        Ok(())
    }
}

/// Tabs that put a value at column 40 after `\t{key}:`, as `ibv_devinfo` aligns.
fn tabs(key: &str) -> String {
    let used = key.len() + 1;
    "\t".repeat(4usize.saturating_sub(used / 8).max(1))
}
