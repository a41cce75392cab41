//! General objects on the emulated device, through the public API: the
//! GENEVE_TLV_OPT type (0x000b) the profile advertises.

#[path = "sim_support.rs"]
mod support;

use devx::sim::syndrome as syn;
use devx::{Context, Device};
use prm_layouts::*;
use support::*;

const GENEVE: u16 = 0x000b;
/// General object header plus the 64-byte `geneve_tlv_option` context.
const CREATE_LEN: usize = 16 + 64;

fn open(name: &str) -> (Context, std::sync::Arc<devx::sim::SimDevice>) {
    let ctx = Device::emulated(name).unwrap().open().unwrap();
    (ctx, devx::sim::sim_device(name).unwrap())
}

/// CREATE_GENERAL_OBJECT for a GENEVE option of `words` data words.
fn create_in(class: u16, opt_type: u8, words: u8) -> Vec<u8> {
    let mut b = hdr(Opcode::CreateGeneralObject.raw(), GENEVE, CREATE_LEN);
    b[16 + 12..16 + 14].copy_from_slice(&class.to_be_bytes());
    b[16 + 14] = opt_type;
    b[16 + 15] = words;
    b
}

fn obj_cmd(opcode: u16, obj_type: u16, id: u32, len: usize) -> Vec<u8> {
    let mut b = hdr(opcode, obj_type, len);
    b[8..12].copy_from_slice(&id.to_be_bytes());
    b
}

#[test]
fn profile_advertises_geneve_tlv_opt() {
    let (ctx, dev) = open("sim951");
    let out = ctx
        .general_cmd(
            &hdr(Opcode::QueryHcaCap.raw(), 1, 16),
            QueryHcaCapOut::SIZE_BYTES,
        )
        .unwrap();
    let c = *QueryHcaCapOut::from_slice(&out)
        .unwrap()
        .capability()
        .cmd_hca_cap();
    assert_eq!(c.general_obj_types(), 1 << GENEVE);
    let p = dev.profile();
    assert_eq!(c.max_geneve_tlv_options(), p.max_geneve_tlv_options);
    assert_eq!(
        c.max_geneve_tlv_option_data_len(),
        p.max_geneve_tlv_option_data_len
    );
}

#[test]
fn create_query_modify_destroy() {
    let (ctx, dev) = open("sim952");
    let inbox = create_in(0x0102, 0x80, 3);
    let obj = ctx.create(&inbox, 16).unwrap();
    let id = be32(obj.out(), 8);
    assert_ne!(id, 0);
    assert_eq!(dev.live_objects(), 1);
    assert_eq!(obj.destroy_inbox(), &obj_cmd(0xa03, GENEVE, id, 16)[..]);

    // The context comes back field for field after the 16-byte header.
    let out = obj
        .query(&obj_cmd(0xa02, GENEVE, id, 16), CREATE_LEN)
        .unwrap();
    assert_eq!(be32(&out, 8), id);
    let ctx_bytes = &out[16..];
    assert_eq!(&ctx_bytes[0..8], &[0; 8], "modify_field_select");
    assert_eq!(ctx_bytes[11], 0, "geneve_option_fte_index");
    assert_eq!(be16(ctx_bytes, 12), 0x0102, "option_class");
    assert_eq!(ctx_bytes[14], 0x80, "option_type");
    assert_eq!(ctx_bytes[15] & 0x1f, 3, "option_data_length");
    assert_eq!(ctx_bytes, &inbox[16..]);

    // An outbox without room for the context is refused.
    check(
        &obj.query(&obj_cmd(0xa02, GENEVE, id, 16), 16).unwrap_err(),
        syn::OUTBOX_SHORT,
    );

    // The type has no modifiable fields.
    let mut m = create_in(0x0102, 0x80, 4);
    m[0..2].copy_from_slice(&0xa01u16.to_be_bytes());
    m[8..12].copy_from_slice(&id.to_be_bytes());
    m[16 + 7] = 1;
    check(&obj.modify(&m, 16).unwrap_err(), syn::GENERAL_OBJ_NO_MODIFY);

    drop(obj);
    assert_eq!(dev.live_objects(), 0);
}

#[test]
fn unknown_and_unadvertised_types_are_refused() {
    let (ctx, dev) = open("sim953");
    for t in [0x000c, 0x000d, 0x0040, 0xffff] {
        let mut b = create_in(1, 1, 1);
        b[6..8].copy_from_slice(&u16::to_be_bytes(t));
        let e = ctx.create(&b, 16).unwrap_err();
        assert_eq!(e.status(), Some(syn::status::BAD_PARAM));
        check(&e, syn::GENERAL_OBJ_TYPE);
    }
    assert_eq!(dev.live_objects(), 0);
}

#[test]
fn context_checks() {
    let (ctx, dev) = open("sim954");
    let max = dev.profile().max_geneve_tlv_option_data_len;
    // Header only, and a context cut short.
    check(
        &ctx.create(&hdr(Opcode::CreateGeneralObject.raw(), GENEVE, 16), 16)
            .unwrap_err(),
        syn::INBOX_SHORT,
    );
    let short = create_in(1, 1, 1)[..CREATE_LEN - 8].to_vec();
    check(&ctx.create(&short, 16).unwrap_err(), syn::INBOX_SHORT);
    // Data length outside 1..=max.
    for words in [0, max + 1] {
        check(
            &ctx.create(&create_in(1, 1, words), 16).unwrap_err(),
            syn::GENEVE_OPT_DATA_LEN,
        );
    }
    // Reserved bits, modify_field_select, a chosen obj_id, log_obj_range.
    for at in [16 + 9, 16 + 3, 16 + 15, 16 + 40, 8, 12 + 3] {
        let mut b = create_in(1, 1, 1);
        b[at] |= 0x80;
        check(&ctx.create(&b, 16).unwrap_err(), syn::RESERVED_NONZERO);
    }
    assert_eq!(dev.live_objects(), 0);
}

#[test]
fn option_limit_is_device_wide() {
    let (a, dev) = open("sim955");
    let (b, _) = open("sim955");
    let n = usize::from(dev.profile().max_geneve_tlv_options);
    let objs: Vec<_> = (0..n)
        .map(|i| a.create(&create_in(i as u16, 1, 1), 16).unwrap())
        .collect();
    let e = b.create(&create_in(0x77, 1, 1), 16).unwrap_err();
    assert_eq!(e.status(), Some(syn::status::LIM));
    check(&e, syn::GENEVE_OPT_LIMIT);
    drop(objs);
    let again = b.create(&create_in(0x77, 1, 1), 16).unwrap();
    drop(again);
    assert_eq!(dev.live_objects(), 0);
}

#[test]
fn other_contexts_cannot_reach_it() {
    let env = Env::new(956);
    let other = env.sibling();
    let (h, out) = env.create(&create_in(5, 6, 2), 16).unwrap();
    let id = be32(&out, 8);
    let q = obj_cmd(0xa02, GENEVE, id, 16);
    // Another context's handle table does not know it.
    let e = other.query(h, &q, CREATE_LEN).unwrap_err();
    assert!([libc::EINVAL, libc::ENOENT].contains(&errno(&e)), "got {e}");
    // Nor can the owner reach it under another type or number.
    let e = env
        .query(h, &obj_cmd(0xa02, 0x000c, id, 16), CREATE_LEN)
        .unwrap_err();
    assert!([libc::EINVAL, libc::ENOENT].contains(&errno(&e)), "got {e}");
    env.query(h, &q, CREATE_LEN).unwrap();
    env.destroy(h).unwrap();
    assert_eq!(env.dev.live_objects(), 0);
}
