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
    /// IPv4 address: link-local v1, link-local v2, IPv4-mapped v1, IPv4-mapped v2.
    /// Other indices below the table size are empty (all-zero GID).
    pub fn gid_table(&self) -> [GidEntry; 4] {
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        let mut iid = eui64(&self.mac);
        iid[0] ^= 0x02; // modified EUI-64: flip the universal/local bit
        ll[8..].copy_from_slice(&iid);
        let mut v4 = [0u8; 16];
        v4[10] = 0xff;
        v4[11] = 0xff;
        v4[12..].copy_from_slice(&self.ipv4);
        [
            GidEntry {
                gid: ll,
                version: RoceVersion::V1,
                l3_type: RoceL3Type::Ipv6,
            },
            GidEntry {
                gid: ll,
                version: RoceVersion::V2,
                l3_type: RoceL3Type::Ipv6,
            },
            GidEntry {
                gid: v4,
                version: RoceVersion::V1,
                l3_type: RoceL3Type::Ipv4,
            },
            GidEntry {
                gid: v4,
                version: RoceVersion::V2,
                l3_type: RoceL3Type::Ipv4,
            },
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
    }
}
