//! Address handles. On mlx5 an AH is no firmware object: it is the 48-byte
//! address vector a UD send WQE carries (the datagram segment), built here in
//! user space and checked against the port's GID table.

use std::fmt;

use prm_layouts::WqeDatagramSeg;

use crate::context::{Context, LinkLayer};
use crate::error::{Error, Result};
use crate::pd::Pd;
use crate::port::{Gid, GidType};

/// The global route header of a path (`ibv_global_route`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalRoute {
    pub dgid: Gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// Address attributes (`ibv_ah_attr`), for AHs and for the primary path of
/// connected QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    pub port_num: u8,
    /// Destination LID (InfiniBand).
    pub dlid: u16,
    /// Service level; on Ethernet its low 3 bits are the 802.1p priority.
    pub sl: u8,
    pub src_path_bits: u8,
    /// The mlx5 `stat_rate` encoding (0: the port's rate).
    pub static_rate: u8,
    /// Required on Ethernet (RoCE packets always carry a GRH).
    pub grh: Option<GlobalRoute>,
    /// Destination MAC (RoCE). Derived for multicast and link-local GIDs when
    /// absent; other unicast GIDs need it, as DEVX QPs get no neighbour
    /// resolution from the kernel. [`Qp::connect`](crate::Qp::connect) takes
    /// it from the peer's [`Endpoint`](crate::Endpoint) (the MAC of its GID
    /// table entry: right when both share a link; across a router pass the
    /// next hop's in `ConnectOpts::dmac`).
    pub dmac: Option<[u8; 6]>,
    /// RoCE v2 UDP source port; derived from the flow label when absent.
    pub udp_sport: Option<u16>,
}

impl AhAttr {
    /// A RoCE destination: GRH to `dgid` from GID table entry `sgid_index`.
    pub fn roce(port_num: u8, dgid: Gid, sgid_index: u8, dmac: Option<[u8; 6]>) -> AhAttr {
        AhAttr {
            port_num,
            grh: Some(GlobalRoute {
                dgid,
                sgid_index,
                hop_limit: 64,
                ..GlobalRoute::default()
            }),
            dmac,
            ..AhAttr::default()
        }
    }

    /// An InfiniBand destination by LID, without GRH.
    pub fn ib(port_num: u8, dlid: u16) -> AhAttr {
        AhAttr {
            port_num,
            dlid,
            ..AhAttr::default()
        }
    }
}

/// What validation learned about an address: what the PRM encodings need.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resolved {
    pub eth: bool,
    pub gid_type: Option<GidType>,
    pub dmac: Option<[u8; 6]>,
}

/// RoCE v2 UDP source ports live in [0xC000, 0xFFFF] (RROCE_UDP_SPORT_MIN/MAX).
const ROCE_UDP_SPORT_MIN: u16 = 0xC000;

/// `rdma_flow_label_to_udp_sport`: fold the 20-bit flow label into 14 bits.
pub(crate) fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let low = fl & 0x3fff;
    let high = fl & 0xfc000;
    ((low ^ (high >> 14)) as u16) | ROCE_UDP_SPORT_MIN
}

/// The MAC a GID maps to without neighbour resolution: IPv6/IPv4 multicast
/// and EUI-64 link-local addresses.
pub fn mac_from_gid(g: &Gid) -> Option<[u8; 6]> {
    let b = &g.0;
    if b[0] == 0xff {
        return Some([0x33, 0x33, b[12], b[13], b[14], b[15]]);
    }
    let v4_mapped = b[..10].iter().all(|&x| x == 0) && b[10] == 0xff && b[11] == 0xff;
    if v4_mapped && (224..240).contains(&b[12]) {
        return Some([0x01, 0x00, 0x5e, b[13] & 0x7f, b[14], b[15]]);
    }
    let link_local = b[0] == 0xfe && b[1] & 0xc0 == 0x80;
    if link_local && b[11] == 0xff && b[12] == 0xfe {
        return Some([b[8] ^ 0x02, b[9], b[10], b[13], b[14], b[15]]);
    }
    None
}

impl AhAttr {
    /// Checks the attributes against the device and the port's GID table.
    pub(crate) fn resolve(&self, ctx: &Context, verb: &'static str) -> Result<Resolved> {
        ctx.check_port(verb, self.port_num)?;
        if self.sl > 15 {
            return Err(Error::argument(verb, format!("sl {} exceeds 15", self.sl)));
        }
        if self.src_path_bits > 0x7f {
            return Err(Error::argument(verb, "src_path_bits exceeds 7 bits"));
        }
        if self.static_rate > 15 {
            return Err(Error::argument(
                verb,
                "static_rate exceeds the 4-bit mlx5 encoding",
            ));
        }
        if let Some(g) = &self.grh {
            if g.flow_label > 0xfffff {
                return Err(Error::argument(verb, "flow_label exceeds 20 bits"));
            }
        }
        let eth = ctx.link_layer() == LinkLayer::Ethernet;
        let Some(grh) = &self.grh else {
            if eth {
                return Err(Error::argument(
                    verb,
                    "RoCE paths need a GRH (grh: Some(..))",
                ));
            }
            if self.dlid == 0 {
                return Err(Error::argument(
                    verb,
                    "an InfiniBand path without GRH needs a dlid",
                ));
            }
            return Ok(Resolved {
                eth,
                gid_type: None,
                dmac: None,
            });
        };
        let sgid = ctx
            .query_gid(self.port_num, u16::from(grh.sgid_index))
            .map_err(|e| match e {
                Error::Device { source, .. } => Error::Device { verb, source },
                other => other,
            })?;
        if sgid.gid.is_zero() {
            return Err(Error::argument(
                verb,
                format!(
                    "sgid index {} is not in use in port {}'s GID table",
                    grh.sgid_index, self.port_num
                ),
            ));
        }
        if !eth {
            return Ok(Resolved {
                eth,
                gid_type: Some(sgid.gid_type),
                dmac: None,
            });
        }
        let dmac =
            match self.dmac.or_else(|| mac_from_gid(&grh.dgid)) {
                Some(m) => m,
                None => return Err(Error::argument(
                    verb,
                    "a unicast RoCE destination needs dmac (neighbour resolution is the caller's)",
                )),
            };
        Ok(Resolved {
            eth,
            gid_type: Some(sgid.gid_type),
            dmac: Some(dmac),
        })
    }

    /// The UDP source port for a RoCE v2 path; `salt` spreads paths without a
    /// flow label (QPs pass their QPN pair).
    pub(crate) fn udp_sport_for(&self, salt: u32) -> u16 {
        if let Some(p) = self.udp_sport {
            return p;
        }
        match self.grh {
            Some(g) if g.flow_label != 0 => flow_label_to_udp_sport(g.flow_label),
            _ => ROCE_UDP_SPORT_MIN | (salt & 0x3fff) as u16,
        }
    }

    /// The 48-byte address vector (`mlx5_wqe_av`) a UD send copies into its
    /// datagram segment; the remote QPN and Q_Key are filled in per send.
    pub(crate) fn address_vector(&self, r: &Resolved) -> WqeDatagramSeg {
        let mut av = WqeDatagramSeg::new();
        let grh_bit;
        if r.eth {
            if r.gid_type == Some(GidType::RoceV2) {
                av.set_rlid(self.udp_sport_for(0));
            }
            // RoCE packets always carry a GRH; the bit is reserved there.
            grh_bit = 0;
            av.set_stat_rate_sl((self.static_rate << 4) | ((self.sl & 0x7) << 1));
            if let Some(m) = &r.dmac {
                av.set_rmac(m);
            }
        } else {
            av.set_fl_mlid(self.src_path_bits & 0x7f);
            av.set_rlid(self.dlid);
            grh_bit = 1;
            av.set_stat_rate_sl((self.static_rate << 4) | (self.sl & 0xf));
        }
        if let Some(g) = &self.grh {
            av.set_tclass(g.traffic_class);
            av.set_hop_limit(g.hop_limit);
            av.set_grh_gid_fl((grh_bit << 30) | (u32::from(g.sgid_index) << 20) | g.flow_label);
            av.set_rgid(&g.dgid.0);
        }
        av
    }
}

/// An address handle (`ibv_ah`): a validated address vector for UD sends.
pub struct Ah {
    pd: Pd,
    attr: AhAttr,
    av: WqeDatagramSeg,
}

impl fmt::Debug for Ah {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ah").field("attr", &self.attr).finish()
    }
}

impl Ah {
    /// `ibv_create_ah`. Reads the source GID's table entry (the kernel's
    /// GID table, and QUERY_ROCE_ADDRESS on RoCE) when the address has a GRH.
    pub fn create(pd: &Pd, attr: &AhAttr) -> Result<Ah> {
        let r = attr.resolve(pd.context(), "create_ah")?;
        Ok(Ah {
            pd: pd.clone(),
            attr: resolved_attr(attr, &r),
            av: attr.address_vector(&r),
        })
    }

    /// `ibv_query_ah`: the attributes, with the derived MAC filled in.
    pub fn query(&self) -> AhAttr {
        self.attr
    }

    /// `ibv_modify_ah`: re-validates and rebuilds the address vector; on error
    /// the old one stays.
    pub fn modify(&mut self, attr: &AhAttr) -> Result<()> {
        let r = attr.resolve(self.pd.context(), "modify_ah")?;
        self.av = attr.address_vector(&r);
        self.attr = resolved_attr(attr, &r);
        Ok(())
    }

    /// `ibv_destroy_ah`: nothing to tell the device.
    pub fn destroy(self) -> Result<()> {
        Ok(())
    }

    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// The address vector as the datagram segment's first 48 bytes.
    pub fn av(&self) -> &WqeDatagramSeg {
        &self.av
    }
}

fn resolved_attr(attr: &AhAttr, r: &Resolved) -> AhAttr {
    AhAttr {
        dmac: attr.dmac.or(r.dmac),
        ..*attr
    }
}

impl Pd {
    /// `ibv_create_ah`.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        Ah::create(self, attr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_from_gids() {
        let mut mc = [0u8; 16];
        mc[0] = 0xff;
        mc[12..].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(mac_from_gid(&Gid(mc)), Some([0x33, 0x33, 1, 2, 3, 4]));
        let v4 = Gid::from_ipv4("239.1.2.3".parse().unwrap());
        assert_eq!(mac_from_gid(&v4), Some([0x01, 0x00, 0x5e, 1, 2, 3]));
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        ll[8..].copy_from_slice(&[0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55]);
        assert_eq!(
            mac_from_gid(&Gid(ll)),
            Some([0x00, 0x11, 0x22, 0x33, 0x44, 0x55])
        );
        assert_eq!(
            mac_from_gid(&Gid::from_ipv4("10.0.0.1".parse().unwrap())),
            None
        );
    }

    #[test]
    fn udp_sport_range() {
        assert_eq!(flow_label_to_udp_sport(0), 0xC000);
        for fl in [1u32, 0x3fff, 0x4000, 0xfffff] {
            assert!(flow_label_to_udp_sport(fl) >= 0xC000);
        }
    }
}
