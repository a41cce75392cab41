//! Addresses of an emulated device, derived from its index so that every
//! `simN` in a process is distinct and stable across runs.

use prm_layouts::{RoceL3Type, RoceVersion};

/// MAC, GUIDs and the RoCE GID table of one emulated port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub index: u32,
    /// Permanent MAC: Mellanox OUI 0c:42:a1, then the 24-bit index.
    pub mac: [u8; 6],
    /// EUI-64 of the MAC, as mlx5 derives node and port GUIDs.
    pub node_guid: u64,
    /// The port's IPv4 address (10.200.x.y), for the IPv4-mapped GIDs.
    pub ipv4: [u8; 4],
    /// The port's IPv6 address, when the device was given one: the address
    /// GIDs then name it instead of the IPv4-mapped address.
    pub ipv6: Option<[u8; 16]>,
}

/// One RoCE address table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    pub gid: [u8; 16],
    pub version: RoceVersion,
    pub l3_type: RoceL3Type,
}

impl Identity {
    pub(crate) fn new(index: u32) -> Identity {
        let i = index & 0x00ff_ffff;
        let mac = [0x0c, 0x42, 0xa1, (i >> 16) as u8, (i >> 8) as u8, i as u8];
        let eui = eui64(&mac);
        let host = index.wrapping_add(1);
        Identity {
            index,
            mac,
            node_guid: u64::from_be_bytes(eui),
            ipv4: [10, 200, (host >> 8) as u8, host as u8],
            ipv6: None,
        }
    }

    /// The MAC as the two PRM fields `*_47_32` and `*_31_0`.
    pub fn mac_halves(&self) -> (u16, u32) {
        let m = self.mac;
        (
            u16::from_be_bytes([m[0], m[1]]),
            u32::from_be_bytes([m[2], m[3], m[4], m[5]]),
        )
    }

    /// The populated RoCE GID table, as Linux fills it for a port with one
    /// IP address: link-local v1, link-local v2, then the address as RoCE v1
    /// and v2 (IPv4-mapped for an IPv4 address). Other indices below the
    /// table size are empty (all-zero GID).
    pub fn gid_table(&self) -> [GidEntry; 4] {
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        let mut iid = eui64(&self.mac);
        iid[0] ^= 0x02; // modified EUI-64: flip the universal/local bit
        ll[8..].copy_from_slice(&iid);
        let (addr, l3_type) = match self.ipv6 {
            Some(v6) => (v6, RoceL3Type::Ipv6),
            None => (
                std::net::Ipv4Addr::from(self.ipv4)
                    .to_ipv6_mapped()
                    .octets(),
                RoceL3Type::Ipv4,
            ),
        };
        let entry = |gid, version, l3_type| GidEntry {
            gid,
            version,
            l3_type,
        };
        [
            entry(ll, RoceVersion::V1, RoceL3Type::Ipv6),
            entry(ll, RoceVersion::V2, RoceL3Type::Ipv6),
            entry(addr, RoceVersion::V1, l3_type),
            entry(addr, RoceVersion::V2, l3_type),
        ]
    }

    /// GID table entry `index`, or `None` when that entry is empty.
    pub(crate) fn gid(&self, index: usize) -> Option<GidEntry> {
        self.gid_table().get(index).copied()
    }
}

fn eui64(mac: &[u8; 6]) -> [u8; 8] {
    [mac[0], mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_follow_the_index() {
        let a = Identity::new(0);
        let b = Identity::new(1);
        assert_eq!(a.mac, [0x0c, 0x42, 0xa1, 0, 0, 0]);
        assert_eq!(b.mac[5], 1);
        assert_eq!(a.node_guid, 0x0c42_a1ff_fe00_0000);
        let t = b.gid_table();
        assert_eq!(&t[0].gid[..8], &[0xfe, 0x80, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&t[0].gid[8..], &[0x0e, 0x42, 0xa1, 0xff, 0xfe, 0, 0, 1]);
        assert_eq!(&t[3].gid[10..], &[0xff, 0xff, 10, 200, 0, 2]);
        assert_eq!(t[3].version, RoceVersion::V2);
        assert_eq!(t[3].l3_type, RoceL3Type::Ipv4);
    }

    #[test]
    fn an_ipv6_address_takes_the_address_entries() {
        let mut a = Identity::new(0);
        let v6: std::net::Ipv6Addr = "fd00::2".parse().unwrap();
        a.ipv6 = Some(v6.octets());
        let t = a.gid_table();
        assert_eq!(&t[0].gid[..2], &[0xfe, 0x80]);
        for e in &t[2..] {
            assert_eq!(e.gid, v6.octets());
            assert_eq!(e.l3_type, RoceL3Type::Ipv6);
        }
        assert_eq!(t[3].version, RoceVersion::V2);
    }
}
