//! The network face of an emulated device for `devices`: its RoCE v2 GID
//! and the UDP address of its port.

use std::net::Ipv6Addr;

use crate::fields::json_str;

/// GID table index of the RoCE v2 entry of the device's address
/// (IPv4-mapped, or its IPv6 address).
const GID_ROCE_V2_ADDR: usize = 3;

/// (GID, address or why there is none) of emulated device `name`.
pub fn describe(name: &str) -> Option<(String, String)> {
    let sim = devx::sim::sim_device(name).ok()?;
    let gid = sim.identity().gid_table().get(GID_ROCE_V2_ADDR)?.gid;
    let addr = match (sim.net_addr(), sim.net_error()) {
        (Some(a), _) => a.to_string(),
        (None, Some(e)) => format!("none ({e})"),
        (None, None) => "none (in-process link only)".into(),
    };
    Some((Ipv6Addr::from(gid).to_string(), addr))
}

/// `, "gid": …, "net_addr": …` for a device's JSON object (empty for a
/// real device).
pub fn json_fields(name: &str, emulated: bool) -> String {
    match describe(name).filter(|_| emulated) {
        Some((gid, addr)) => format!(
            ", \"gid\": {}, \"net_addr\": {}",
            json_str(&gid),
            json_str(&addr)
        ),
        None => String::new(),
    }
}
