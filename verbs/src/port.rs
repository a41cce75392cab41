//! `query_port` and the GID table: vport state, MTU and addresses, read with
//! the general commands DEVX admits (QUERY_VPORT_STATE, QUERY_NIC_VPORT_CONTEXT,
//! QUERY_HCA_VPORT_CONTEXT, QUERY_ROCE_ADDRESS) and the kernel's GID table.

use std::fmt;

use prm_layouts::enums::{HcaCapType, Opcode, RoceL3Type, RoceVersion};
use prm_layouts::{
    CmdHcaCap, QueryHcaVportContextIn, QueryHcaVportContextOut, QueryNicVportContextIn,
    QueryNicVportContextOut, QueryRoceAddressIn, QueryRoceAddressOut, QueryVportStateIn,
    QueryVportStateOut,
};

use crate::context::{Context, LinkLayer};
use crate::error::{Error, Result, VerbResult};

/// Logical port state (`ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    Nop = 0,
    Down = 1,
    Init = 2,
    Armed = 3,
    Active = 4,
    ActiveDefer = 5,
}

impl PortState {
    fn from_ib(v: u8) -> PortState {
        match v {
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            _ => PortState::Nop,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PortState::Nop => "PORT_NOP",
            PortState::Down => "PORT_DOWN",
            PortState::Init => "PORT_INIT",
            PortState::Armed => "PORT_ARMED",
            PortState::Active => "PORT_ACTIVE",
            PortState::ActiveDefer => "PORT_ACTIVE_DEFER",
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), *self as u8)
    }
}

/// Path MTU (`ibv_mtu`); the value is also the PRM `qpc.mtu` encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl Mtu {
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    pub fn from_raw(v: u8) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }

    /// The largest MTU not above `bytes` (at least 256).
    pub fn at_most(bytes: u32) -> Mtu {
        [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
            .into_iter()
            .find(|m| m.bytes() <= bytes)
            .unwrap_or(Mtu::Mtu256)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.bytes(), *self as u8)
    }
}

/// A 128-bit GID.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    pub fn is_multicast(&self) -> bool {
        self.0[0] == 0xff
    }

    /// The interface id as an IPv6 address would carry it.
    pub fn to_ipv6(self) -> std::net::Ipv6Addr {
        std::net::Ipv6Addr::from(self.0)
    }

    /// An IPv4-mapped GID (`::ffff:a.b.c.d`), as RoCE v2 uses for IPv4 peers.
    pub fn from_ipv4(ip: std::net::Ipv4Addr) -> Gid {
        Gid(ip.to_ipv6_mapped().octets())
    }
}

impl From<[u8; 16]> for Gid {
    fn from(b: [u8; 16]) -> Gid {
        Gid(b)
    }
}

/// `ibv_devinfo` style: eight groups of four hex digits.
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// What kind of address a GID table entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    Ib,
    RoceV1,
    RoceV2,
}

impl GidType {
    pub fn name(self) -> &'static str {
        match self {
            GidType::Ib => "IB",
            GidType::RoceV1 => "RoCE v1",
            GidType::RoceV2 => "RoCE v2",
        }
    }
}

/// One GID table entry (`ibv_gid_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u16,
    pub port: u8,
    pub gid: Gid,
    pub gid_type: GidType,
    /// Source MAC of a RoCE entry.
    pub mac: Option<[u8; 6]>,
    pub vlan: Option<u16>,
}

/// Port attributes (`ibv_port_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    pub state: PortState,
    pub max_mtu: Mtu,
    pub active_mtu: Mtu,
    pub gid_tbl_len: u32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u64,
    pub pkey_tbl_len: u32,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    /// IB physical port state (5 = LinkUp, 3 = Disabled).
    pub phys_state: u8,
    pub link_layer: LinkLayer,
    /// The port's permanent MAC on Ethernet.
    pub mac: Option<[u8; 6]>,
}

/// `IB_PORT_CM_SUP`: RoCE ports always run a connection manager.
const PORT_CM_SUP: u32 = 1 << 16;
/// Bytes the NIC vport MTU counts beyond the IP MTU: Ethernet header, VLAN, FCS.
const ETH_L2_OVERHEAD: u32 = 14 + 4 + 4;
/// Bytes of RoCE headers inside the IP MTU (`iboe_get_mtu`): GRH/IP, UDP, BTH,
/// the largest extended header, ICRC.
const ROCE_OVERHEAD: u32 = 40 + 8 + 12 + 4 + 28 + 4;

/// GUIDs from the vport context.
pub(crate) struct VportGuids {
    pub node_guid: u64,
    pub sys_image_guid: u64,
}

/// GID table length of an InfiniBand port: `gid_table_size` encodes
/// 8 << n entries.
fn ib_gid_tbl_len(c: &CmdHcaCap) -> u32 {
    let log = c.gid_table_size();
    if log > 4 {
        0
    } else {
        8 << log
    }
}

fn short_outbox(verb: &'static str, what: &str) -> Error {
    Error::Device {
        verb,
        source: devx::Error::argument(format!("{what} returned a short outbox")),
    }
}

impl Context {
    /// Port attributes (`ibv_query_port`).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        const VERB: &str = "query_port";
        self.check_port(VERB, port)?;
        let c = self.caps();
        let max_msg_sz = 1u64 << c.log_max_msg().min(63);
        match self.link_layer() {
            LinkLayer::Ethernet => {
                let up = self.vport_state_up(VERB)?;
                let nic = self.query_nic_vport(VERB)?;
                let roce = self.query_caps(HcaCapType::Roce, true)?;
                let ctx = nic.nic_vport_context();
                let hw_mtu = u32::from(ctx.mtu());
                let active_mtu = if hw_mtu == 0 {
                    Mtu::Mtu1024
                } else {
                    Mtu::at_most(hw_mtu.saturating_sub(ETH_L2_OVERHEAD + ROCE_OVERHEAD))
                };
                let pa = ctx.permanent_address();
                let mac = mac_bytes(pa.mac_addr_47_32(), pa.mac_addr_31_0());
                Ok(PortAttr {
                    state: if up {
                        PortState::Active
                    } else {
                        PortState::Down
                    },
                    max_mtu: Mtu::Mtu4096,
                    active_mtu,
                    gid_tbl_len: u32::from(roce.roce_cap().roce_address_table_size()),
                    port_cap_flags: PORT_CM_SUP,
                    max_msg_sz,
                    pkey_tbl_len: 1,
                    lid: 0,
                    sm_lid: 0,
                    lmc: 0,
                    sm_sl: 0,
                    subnet_timeout: 0,
                    phys_state: if up { 5 } else { 3 },
                    link_layer: LinkLayer::Ethernet,
                    mac: Some(mac),
                })
            }
            LinkLayer::InfiniBand => {
                let out = self.query_hca_vport(VERB, port)?;
                let v = out.hca_vport_context();
                Ok(PortAttr {
                    state: PortState::from_ib(v.port_state()),
                    // The port MTU lives in the PMTU register (ACCESS_REG), which
                    // DEVX does not reliably admit; ConnectX IB ports run 4096.
                    max_mtu: Mtu::Mtu4096,
                    active_mtu: Mtu::Mtu4096,
                    gid_tbl_len: ib_gid_tbl_len(c),
                    port_cap_flags: v.cap_mask1(),
                    max_msg_sz,
                    pkey_tbl_len: if c.pkey_table_size() > 16 {
                        u32::MAX
                    } else {
                        128 << c.pkey_table_size()
                    },
                    lid: v.lid(),
                    sm_lid: v.sm_lid(),
                    lmc: v.lmc(),
                    sm_sl: v.sm_sl(),
                    subnet_timeout: v.subnet_timeout(),
                    phys_state: v.port_physical_state(),
                    link_layer: LinkLayer::InfiniBand,
                    mac: None,
                })
            }
        }
    }

    /// One GID table entry (`ibv_query_gid_ex`). An unused entry has a zero GID.
    ///
    /// The GID and its type come from the kernel's GID table on every port
    /// type, as rdma-core reads them (DEVX does not admit
    /// QUERY_HCA_VPORT_GID); a RoCE entry's source MAC and VLAN from the
    /// firmware's copy of the entry (QUERY_ROCE_ADDRESS).
    pub fn query_gid(&self, port: u8, index: u16) -> Result<GidEntry> {
        const VERB: &str = "query_gid";
        self.check_port(VERB, port)?;
        let table = self.devx().query_gid_table().verb(VERB)?;
        let kernel = table
            .iter()
            .find(|e| e.port == u32::from(port) && e.index == u32::from(index));
        self.gid_entry(VERB, port, index, kernel)
    }

    /// Every used entry of the port's GID table.
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        const VERB: &str = "gid_table";
        self.check_port(VERB, port)?;
        let table = self.devx().query_gid_table().verb(VERB)?;
        table
            .iter()
            .filter(|e| e.port == u32::from(port) && e.gid != [0; 16])
            .map(|e| {
                let index = u16::try_from(e.index).map_err(|_| {
                    Error::unsupported(VERB, format!("GID index {} does not fit 16 bits", e.index))
                })?;
                self.gid_entry(VERB, port, index, Some(e))
            })
            .collect()
    }

    /// Entry `index` of `port` from the kernel's entry (`None`: unused).
    fn gid_entry(
        &self,
        verb: &'static str,
        port: u8,
        index: u16,
        kernel: Option<&devx::GidTableEntry>,
    ) -> Result<GidEntry> {
        let gid_type = |k: &devx::GidTableEntry| match k.gid_type {
            devx::GidType::Ib => GidType::Ib,
            devx::GidType::RoceV1 => GidType::RoceV1,
            devx::GidType::RoceV2 => GidType::RoceV2,
        };
        match self.link_layer() {
            LinkLayer::Ethernet => {
                let fw = self.roce_address(verb, port, index)?;
                // Both are the same table (the kernel programs the firmware's),
                // an unused entry is zero in both.
                let gid = Gid(kernel.map(|k| k.gid).unwrap_or_default());
                if fw.gid != gid {
                    return Err(Error::unsupported(
                        verb,
                        format!(
                            "GID {index} of port {port} is {gid} in the kernel's table but {} \
                             in the firmware's RoCE address table",
                            fw.gid
                        ),
                    ));
                }
                Ok(GidEntry {
                    gid_type: kernel.map_or(fw.gid_type, gid_type),
                    ..fw
                })
            }
            LinkLayer::InfiniBand => {
                let len = ib_gid_tbl_len(self.caps());
                if u32::from(index) >= len {
                    return Err(Error::argument(
                        verb,
                        format!("GID index {index} is past the port's table of {len} entries"),
                    ));
                }
                Ok(GidEntry {
                    index,
                    port,
                    gid: Gid(kernel.map(|k| k.gid).unwrap_or_default()),
                    gid_type: kernel.map(gid_type).unwrap_or(GidType::Ib),
                    mac: None,
                    vlan: None,
                })
            }
        }
    }

    /// The firmware's RoCE address table entry `index` (QUERY_ROCE_ADDRESS).
    fn roce_address(&self, verb: &'static str, port: u8, index: u16) -> Result<GidEntry> {
        let mut inbox = QueryRoceAddressIn::new();
        inbox.set_opcode(Opcode::QueryRoceAddress.raw());
        inbox.set_roce_address_index(index);
        if self.caps().num_vhca_ports() > 0 {
            inbox.set_vhca_port_num(port);
        }
        let out = self
            .devx()
            .general_cmd(inbox.as_bytes(), QueryRoceAddressOut::SIZE_BYTES)
            .verb(verb)?;
        let out = QueryRoceAddressOut::from_slice(&out)
            .ok_or_else(|| short_outbox(verb, "QUERY_ROCE_ADDRESS"))?;
        let a = out.roce_address();
        // Firmware keeps only the four address bytes of an IPv4 entry.
        let l3_type = RoceL3Type::from_raw(a.roce_l3_type()).ok_or_else(|| {
            Error::unsupported(
                verb,
                format!(
                    "QUERY_ROCE_ADDRESS entry {index}: unknown roce_l3_type {}",
                    a.roce_l3_type()
                ),
            )
        })?;
        Ok(GidEntry {
            index,
            port,
            gid: Gid(l3_type.gid(a.source_l3_address())),
            gid_type: if a.roce_version() == RoceVersion::V2.raw() {
                GidType::RoceV2
            } else {
                GidType::RoceV1
            },
            mac: Some(mac_bytes(a.source_mac_47_32(), a.source_mac_31_0())),
            vlan: (a.vlan_valid() != 0).then(|| a.vlan_id()),
        })
    }

    fn vport_state_up(&self, verb: &'static str) -> Result<bool> {
        let mut inbox = QueryVportStateIn::new();
        inbox.set_opcode(Opcode::QueryVportState.raw());
        let out = self
            .devx()
            .general_cmd(inbox.as_bytes(), QueryVportStateOut::SIZE_BYTES)
            .verb(verb)?;
        let out = QueryVportStateOut::from_slice(&out)
            .ok_or_else(|| short_outbox(verb, "QUERY_VPORT_STATE"))?;
        Ok(out.state() == 1)
    }

    fn query_nic_vport(&self, verb: &'static str) -> Result<Box<QueryNicVportContextOut>> {
        let mut inbox = QueryNicVportContextIn::new();
        inbox.set_opcode(Opcode::QueryNicVportContext.raw());
        let out = self
            .devx()
            .general_cmd(inbox.as_bytes(), QueryNicVportContextOut::SIZE_BYTES)
            .verb(verb)?;
        QueryNicVportContextOut::from_slice(&out)
            .map(|o| Box::new(*o))
            .ok_or_else(|| short_outbox(verb, "QUERY_NIC_VPORT_CONTEXT"))
    }

    fn query_hca_vport(
        &self,
        verb: &'static str,
        port: u8,
    ) -> Result<Box<QueryHcaVportContextOut>> {
        let mut inbox = QueryHcaVportContextIn::new();
        inbox.set_opcode(Opcode::QueryHcaVportContext.raw());
        if self.num_ports() > 1 {
            inbox.set_port_num(port);
        }
        let out = self
            .devx()
            .general_cmd(inbox.as_bytes(), QueryHcaVportContextOut::SIZE_BYTES)
            .verb(verb)?;
        QueryHcaVportContextOut::from_slice(&out)
            .map(|o| Box::new(*o))
            .ok_or_else(|| short_outbox(verb, "QUERY_HCA_VPORT_CONTEXT"))
    }

    pub(crate) fn query_vport_guids(&self, verb: &'static str) -> Result<VportGuids> {
        match self.link_layer() {
            LinkLayer::Ethernet => {
                let out = self.query_nic_vport(verb)?;
                let v = out.nic_vport_context();
                Ok(VportGuids {
                    node_guid: v.node_guid(),
                    sys_image_guid: v.system_image_guid(),
                })
            }
            LinkLayer::InfiniBand => {
                let out = self.query_hca_vport(verb, 1)?;
                let v = out.hca_vport_context();
                Ok(VportGuids {
                    node_guid: v.node_guid(),
                    sys_image_guid: v.system_image_guid(),
                })
            }
        }
    }
}

pub(crate) fn mac_bytes(hi: u16, lo: u32) -> [u8; 6] {
    let h = hi.to_be_bytes();
    let l = lo.to_be_bytes();
    [h[0], h[1], l[0], l[1], l[2], l[3]]
}

pub(crate) fn mac_split(mac: &[u8; 6]) -> (u16, u32) {
    (
        u16::from_be_bytes([mac[0], mac[1]]),
        u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_rounding() {
        assert_eq!(Mtu::at_most(1500 - 96), Mtu::Mtu1024);
        assert_eq!(Mtu::at_most(9000), Mtu::Mtu4096);
        assert_eq!(Mtu::at_most(100), Mtu::Mtu256);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::from_raw(3), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::from_raw(6), None);
    }

    #[test]
    fn gid_text_and_macs() {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = 1;
        assert_eq!(
            Gid(g).to_string(),
            "fe80:0000:0000:0000:0000:0000:0000:0001"
        );
        let mac = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
        let (hi, lo) = mac_split(&mac);
        assert_eq!(mac_bytes(hi, lo), mac);
    }
}
