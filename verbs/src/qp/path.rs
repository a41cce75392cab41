//! The primary address path (`ads`) of a connected QP, from and to `AhAttr`,
//! following the mlx5 kernel driver's `mlx5_set_path`.

use prm_layouts::Ads;

use crate::ah::{AhAttr, GlobalRoute, Resolved};
use crate::port::{mac_bytes, mac_split, Gid, GidType};

/// Fills `path` from `ah`. `salt` picks a RoCE v2 UDP source port when the
/// caller gave neither one nor a flow label.
pub(crate) fn encode(path: &mut Ads, ah: &AhAttr, r: &Resolved, connected: bool, salt: u32) {
    path.set_vhca_port_num(ah.port_num);
    path.set_stat_rate(ah.static_rate);
    if r.eth {
        if let Some(m) = &r.dmac {
            let (hi, lo) = mac_split(m);
            path.set_rmac_47_32(hi);
            path.set_rmac_31_0(lo);
        }
        if connected && r.gid_type == Some(GidType::RoceV2) {
            path.set_udp_sport(ah.udp_sport_for(salt));
        }
        path.set_eth_prio(ah.sl & 0x7);
        if let (Some(GidType::RoceV2), Some(g)) = (r.gid_type, &ah.grh) {
            path.set_dscp(g.traffic_class >> 2);
        }
    } else {
        path.set_rlid(ah.dlid);
        path.set_mlid(ah.src_path_bits & 0x7f);
        path.set_grh(u8::from(ah.grh.is_some()));
        path.set_sl(ah.sl & 0xf);
    }
    if let Some(g) = &ah.grh {
        path.set_src_addr_index(g.sgid_index);
        path.set_hop_limit(g.hop_limit);
        path.set_tclass(g.traffic_class);
        path.set_flow_label(g.flow_label);
        path.set_rgid_rip(&g.dgid.0);
    }
}

/// Reads an address path back as `AhAttr` (`ibv_query_qp`'s `ah_attr`).
pub(crate) fn decode(path: &Ads, eth: bool) -> AhAttr {
    let grh = GlobalRoute {
        dgid: Gid(*path.rgid_rip()),
        flow_label: path.flow_label(),
        sgid_index: path.src_addr_index(),
        hop_limit: path.hop_limit(),
        traffic_class: path.tclass(),
    };
    if eth {
        AhAttr {
            port_num: path.vhca_port_num(),
            dlid: 0,
            sl: path.eth_prio(),
            src_path_bits: 0,
            static_rate: path.stat_rate(),
            grh: Some(grh),
            dmac: Some(mac_bytes(path.rmac_47_32(), path.rmac_31_0())),
            udp_sport: (path.udp_sport() != 0).then(|| path.udp_sport()),
        }
    } else {
        AhAttr {
            port_num: path.vhca_port_num(),
            dlid: path.rlid(),
            sl: path.sl(),
            src_path_bits: path.mlid(),
            static_rate: path.stat_rate(),
            grh: (path.grh() != 0).then_some(grh),
            dmac: None,
            udp_sport: None,
        }
    }
}
