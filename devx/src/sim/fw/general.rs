//! Commands that name no object: capabilities, adapter, ISSI, vport and
//! RoCE address queries, NOP. All answers come from the profile and the
//! device identity.

use prm_layouts::{
    HcaCapType, QueryAdapterOut, QueryHcaCapIn, QueryHcaCapOut, QueryHcaVportContextIn,
    QueryHcaVportContextOut, QueryHcaVportGidIn, QueryHcaVportGidOut, QueryIssiOut,
    QueryNicVportContextIn, QueryNicVportContextOut, QueryRoceAddressIn, QueryRoceAddressOut,
    QueryVportStateIn, QueryVportStateOut,
};

use super::cmd::{ensure, fail, out_view, put, Cmd, FwResult};
use super::state::State;
use crate::sim::syndrome;

/// Cap types this device answers (general_2 is not advertised: `hca_cap_2` = 0).
fn cap_supported(t: u16) -> bool {
    [
        HcaCapType::General,
        HcaCapType::EthernetOffloads,
        HcaCapType::Odp,
        HcaCapType::Atomic,
        HcaCapType::Roce,
        HcaCapType::FlowTable,
    ]
    .iter()
    .any(|c| c.raw() == t)
}

/// QUERY_HCA_CAP: `op_mod = cap_type << 1 | cur`. MAX and CUR are the same:
/// nobody can SET_HCA_CAP through DEVX.
pub(crate) fn query_hca_cap(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<QueryHcaCapIn>()?;
    ensure(inp.other_function() == 0, syndrome::OTHER_FUNCTION)?;
    let cap_type = cmd.op_mod >> 1;
    ensure(cap_supported(cap_type), syndrome::UNKNOWN_CAP_TYPE)?;
    let p = &st.profile;
    let o = out_view::<QueryHcaCapOut>(out)?;
    let u = o.capability_mut();
    match HcaCapType::from_raw(cap_type) {
        Some(HcaCapType::General) => *u.cmd_hca_cap_mut() = p.general_caps(),
        Some(HcaCapType::EthernetOffloads) => {
            *u.per_protocol_networking_offload_caps_mut() = p.ethernet_caps()
        }
        Some(HcaCapType::Atomic) => *u.atomic_caps_mut() = p.atomic_caps(),
        Some(HcaCapType::Roce) => *u.roce_cap_mut() = p.roce_caps(),
        Some(HcaCapType::FlowTable) => *u.flow_table_nic_cap_mut() = *p.nic_flow_table_caps(),
        // ODP: no on-demand paging; an all-zero page is a valid answer.
        _ => {}
    }
    Ok(())
}

pub(crate) fn query_adapter(st: &mut State, _cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let o = out_view::<QueryAdapterOut>(out)?;
    let a = o.query_adapter_struct_mut();
    a.set_ieee_vendor_id(st.profile.vendor_id);
    a.set_vsd_vendor_id(0x15b3);
    let mut psid = [0u8; 16];
    let name = b"SIM_CX6DX_0001";
    psid[..name.len()].copy_from_slice(name);
    a.set_vsd_contd_psid(&psid);
    Ok(())
}

/// QUERY_ISSI: ISSI 0 and 1 supported, 1 in use (the driver set it at boot).
pub(crate) fn query_issi(_st: &mut State, _cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let o = out_view::<QueryIssiOut>(out)?;
    o.set_current_issi(1);
    o.set_supported_issi_dw0(0b11);
    Ok(())
}

/// QUERY_VPORT_STATE: op_mod 0 (own vNIC) and 2 (uplink); up while the
/// link is (admin state stays up).
pub(crate) fn query_vport_state(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<QueryVportStateIn>()?;
    ensure(inp.other_vport() == 0, syndrome::OTHER_FUNCTION)?;
    let o = out_view::<QueryVportStateOut>(out)?;
    o.set_admin_state(1);
    o.set_state(u8::from(st.link_up));
    Ok(())
}

pub(crate) fn query_nic_vport_context(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<QueryNicVportContextIn>()?;
    ensure(inp.other_vport() == 0, syndrome::OTHER_FUNCTION)?;
    let (hi, lo) = st.ident.mac_halves();
    let guid = st.ident.node_guid;
    let o = out_view::<QueryNicVportContextOut>(out)?;
    let c = o.nic_vport_context_mut();
    c.set_roce_en(1);
    c.set_mtu(st.profile.nic_vport_mtu);
    c.set_system_image_guid(guid);
    c.set_port_guid(guid);
    c.set_node_guid(guid);
    c.set_allowed_list_type(inp.allowed_list_type());
    let mac = c.permanent_address_mut();
    mac.set_mac_addr_47_32(hi);
    mac.set_mac_addr_31_0(lo);
    Ok(())
}

fn check_port(st: &State, port: u8) -> FwResult {
    // Single-port functions leave the port number 0.
    ensure(port <= st.profile.num_ports, syndrome::BAD_PORT)
}

pub(crate) fn query_hca_vport_context(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<QueryHcaVportContextIn>()?;
    ensure(inp.other_vport() == 0, syndrome::OTHER_FUNCTION)?;
    check_port(st, inp.port_num())?;
    let guid = st.ident.node_guid;
    let o = out_view::<QueryHcaVportContextOut>(out)?;
    let c = o.hca_vport_context_mut();
    c.set_has_raw(1);
    c.set_grh_required(1);
    if st.link_up {
        c.set_port_physical_state(5); // LinkUp
        c.set_port_state(4); // Active
        c.set_vport_state(4);
    } else {
        c.set_port_physical_state(3); // Disabled
        c.set_port_state(1); // Down
        c.set_vport_state(1);
    }
    c.set_system_image_guid(guid);
    c.set_port_guid(guid);
    c.set_node_guid(guid);
    Ok(())
}

/// QUERY_HCA_VPORT_GID: one GID, or the whole table with gid_index 0xffff.
pub(crate) fn query_hca_vport_gid(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<QueryHcaVportGidIn>()?;
    ensure(inp.other_vport() == 0, syndrome::OTHER_FUNCTION)?;
    check_port(st, inp.port_num())?;
    let size = usize::from(st.profile.roce_address_table_size);
    let index = usize::from(inp.gid_index());
    let range = if index == 0xffff {
        0..size
    } else {
        ensure(index < size, syndrome::BAD_GID_INDEX)?;
        index..index + 1
    };
    let count = range.len();
    ensure(out.len() >= 16 + 16 * count, syndrome::OUTBOX_SHORT)?;
    out_view::<QueryHcaVportGidOut>(out)?.set_gids_num(count as u16);
    for (slot, i) in range.enumerate() {
        if let Some(g) = st.ident.gid(i) {
            put(out, 16 + 16 * slot, &g.gid)?;
        }
    }
    Ok(())
}

pub(crate) fn query_roce_address(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<QueryRoceAddressIn>()?;
    check_port(st, inp.vhca_port_num())?;
    let index = usize::from(inp.roce_address_index());
    if index >= usize::from(st.profile.roce_address_table_size) {
        return fail(syndrome::BAD_GID_INDEX);
    }
    let (hi, lo) = st.ident.mac_halves();
    let entry = st.ident.gid(index);
    let o = out_view::<QueryRoceAddressOut>(out)?;
    if let Some(g) = entry {
        let a = o.roce_address_mut();
        // Stored as Linux's mlx5 driver writes it with SET_ROCE_ADDRESS.
        a.set_source_l3_address(&g.l3_type.l3_address(&g.gid));
        a.set_source_mac_47_32(hi);
        a.set_source_mac_31_0(lo);
        a.set_roce_l3_type(g.l3_type.raw());
        a.set_roce_version(g.version.raw());
    }
    Ok(())
}

pub(crate) fn nop(_st: &mut State, _cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    Ok(())
}
