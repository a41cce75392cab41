//! No inbox bytes make the emulated device panic: random mailboxes for every
//! opcode the layouts know, through the kernel layer and straight into the
//! firmware. Failures must be well-formed firmware or OS errors.

#[path = "sim_support.rs"]
mod support;

use std::sync::{Arc, OnceLock};

use devx::sim::{SimContext, SimDevice};
use devx::{Error, ProviderContext};
use proptest::prelude::*;
use support::*;

/// A device with a few live objects of every core kind, shared by all cases.
fn fixture() -> &'static (Arc<SimDevice>, Arc<SimContext>, Vec<devx::Handle>) {
    static F: OnceLock<(Arc<SimDevice>, Arc<SimContext>, Vec<devx::Handle>)> = OnceLock::new();
    F.get_or_init(|| {
        let mut env = Env::new(701);
        let mut handles = Vec::new();
        let (pd_h, pd) = env.pd();
        handles.push(pd_h);
        let (cq_h, cqn) = env.cq(4);
        handles.push(cq_h);
        let inbox = env.qp_inbox(0, pd, cqn);
        handles.push(env.create(&inbox, 16).unwrap().0);
        let inbox = env.mkey_inbox(pd, 4096, LOCAL_WRITE);
        handles.push(env.create(&inbox, 16).unwrap().0);
        let ctx = Arc::clone(&env.ctx);
        let dev = Arc::clone(&env.dev);
        // The UMEM memory must outlive the objects: keep the Env alive forever.
        std::mem::forget(env);
        (dev, ctx, handles)
    })
}

fn opcodes() -> Vec<u16> {
    let mut v: Vec<u16> = prm_layouts::MAILBOX_OPCODES
        .iter()
        .map(|o| *o as u16)
        .collect();
    v.extend([0x0000, 0x0b00, 0x0cff, 0x0d00, 0xffff]);
    v
}

fn well_formed(r: &Result<(), Error>, out: &[u8]) {
    match r {
        Ok(()) => assert_eq!(out.first().copied().unwrap_or(0), 0),
        Err(Error::Firmware {
            status, syndrome, ..
        }) => {
            assert_ne!(*status, 0);
            if out.len() >= 8 {
                assert_eq!(out[0], *status);
                assert_eq!(be32(out, 4), *syndrome);
            }
        }
        Err(Error::Os { .. }) | Err(Error::Argument(_)) => {}
        Err(other) => panic!("unexpected error kind: {other:?}"),
    }
}

fn mailbox(op: u16, op_mod: u16, body: &[u8], len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    for (i, x) in body.iter().enumerate().take(len) {
        b[i] = *x;
    }
    if len >= 2 {
        b[0..2].copy_from_slice(&op.to_be_bytes());
    }
    if len >= 8 {
        b[6..8].copy_from_slice(&op_mod.to_be_bytes());
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn random_mailboxes_never_panic(
        op_index in 0usize..200,
        op_mod in prop_oneof![Just(0u16), Just(1u16), any::<u16>()],
        body in proptest::collection::vec(any::<u8>(), 0..2300),
        inlen in prop_oneof![Just(None), (0usize..2300).prop_map(Some)],
        outlen in prop_oneof![Just(16usize), Just(272usize), Just(4112usize), 0usize..5000],
        method in 0u8..5,
        handle_index in 0usize..6,
    ) {
        let (dev, ctx, handles) = fixture();
        let ops = opcodes();
        let op = ops[op_index % ops.len()];
        let len = inlen.unwrap_or_else(|| {
            prm_layouts::mailbox_layouts(op).map_or(16, |(i, _)| (i.size_bits / 8) as usize)
        });
        let inbox = mailbox(op, op_mod, &body, len);
        let mut out = vec![0u8; outlen];
        let h = handles.get(handle_index).copied().unwrap_or(9999);
        let r = match method {
            0 => ctx.general(&inbox, &mut out),
            1 => ctx.create(&inbox, &mut out).map(|_| ()),
            2 => ctx.query(h, &inbox, &mut out),
            3 => ctx.modify(h, &inbox, &mut out),
            // Straight into the firmware: its answer names status and syndrome
            // even when the outbox is too short to carry them.
            _ => dev.execute_firmware(&inbox, &mut out),
        };
        well_formed(&r, &out);
    }

    #[test]
    fn random_bytes_straight_into_the_firmware(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        outlen in 0usize..600,
    ) {
        let (dev, _, _) = fixture();
        let mut out = vec![0u8; outlen];
        let _ = dev.execute_firmware(&bytes, &mut out);
    }
}
