//! Address handles: user-space address vectors checked against the GID table.

mod common;

use verbs::{AhAttr, Gid, GidType, GlobalRoute};

#[test]
fn roce_v2_address_vector() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let v2 = ctx.query_gid(1, 3).unwrap();
    assert_eq!(v2.gid_type, GidType::RoceV2);
    let dgid = Gid::from_ipv4([10, 9, 8, 7].into());
    let dmac = [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee];
    let attr = AhAttr {
        port_num: 1,
        sl: 5,
        grh: Some(GlobalRoute {
            dgid,
            flow_label: 0x12345,
            sgid_index: 3,
            hop_limit: 9,
            traffic_class: 0x28,
        }),
        dmac: Some(dmac),
        ..AhAttr::default()
    };
    let before = sim.commands_executed();
    let ah = pd.create_ah(&attr).unwrap();
    // One table lookup for the source GID; no firmware object.
    assert_eq!(sim.commands_executed(), before + 1);
    assert_eq!(sim.live_objects(), 1);
    let av = ah.av();
    assert_eq!(av.rmac(), &dmac);
    assert_eq!(av.rgid(), &dgid.0);
    assert_eq!(av.hop_limit(), 9);
    assert_eq!(av.tclass(), 0x28);
    // RoCE: no GRH bit, sgid index and flow label in grh_gid_fl.
    assert_eq!(av.grh_gid_fl(), (3 << 20) | 0x12345);
    // RoCE: priority in bits 3:1 of stat_rate_sl.
    assert_eq!(av.stat_rate_sl(), 5 << 1);
    // RoCE v2: the UDP source port rides in rlid.
    assert!(av.rlid() >= 0xC000);
    assert_eq!(ah.query(), attr);
}

#[test]
fn link_local_and_multicast_destinations_need_no_mac() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let ll = ctx.query_gid(1, 0).unwrap().gid;
    let ah = pd.create_ah(&AhAttr::roce(1, ll, 0, None)).unwrap();
    assert_eq!(ah.query().dmac, Some(sim.identity().mac));
    assert_eq!(ah.av().rmac(), &sim.identity().mac);
    // RoCE v1 keeps rlid zero.
    assert_eq!(ah.av().rlid(), 0);
    let mut mc = [0u8; 16];
    mc[0] = 0xff;
    mc[1] = 0x12;
    mc[12..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let mut ah = ah;
    ah.modify(&AhAttr::roce(1, Gid(mc), 1, None)).unwrap();
    assert_eq!(ah.av().rmac(), &[0x33, 0x33, 0xde, 0xad, 0xbe, 0xef]);
    ah.destroy().unwrap();
}

#[test]
fn bad_addresses_are_refused() {
    let (ctx, _sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let ll = ctx.query_gid(1, 0).unwrap().gid;
    let cases = [
        AhAttr {
            port_num: 1,
            dlid: 5,
            ..AhAttr::default()
        },
        AhAttr {
            port_num: 2,
            ..AhAttr::roce(1, ll, 0, None)
        },
        AhAttr::roce(1, ll, 9, None),
        AhAttr::roce(1, Gid::from_ipv4([10, 0, 0, 1].into()), 2, None),
        AhAttr {
            sl: 16,
            ..AhAttr::roce(1, ll, 0, None)
        },
        AhAttr {
            static_rate: 16,
            ..AhAttr::roce(1, ll, 0, None)
        },
    ];
    for a in &cases {
        let e = pd.create_ah(a).unwrap_err();
        assert!(e.is_argument() && e.verb() == "create_ah", "{a:?}: {e}");
    }
    // A failed modify keeps the old vector.
    let mut ah = pd.create_ah(&AhAttr::roce(1, ll, 0, None)).unwrap();
    let before = *ah.av();
    assert!(ah.modify(&cases[2]).is_err());
    assert_eq!(*ah.av(), before);
    assert_eq!(ah.pd().pdn(), pd.pdn());
}
