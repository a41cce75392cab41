//! A fatal internal error injected into an emulated device: every later
//! command fails fast with a device-fatal error, queued asynchronous commands
//! complete with it, and dropping what is left still cleans up.

use prm_layouts::enums::Opcode;
use prm_layouts::*;

#[test]
fn after_a_fatal_error_every_call_fails_and_drop_still_cleans_up() {
    // A device of its own: the fatal state is for good.
    let sim = devx::sim::SimDevice::new(devx::sim::Profile::connectx6_dx());
    let ctx = sim.device().open().unwrap();
    let mut pd_in = AllocPdIn::new();
    pd_in.set_opcode(Opcode::AllocPd.raw());
    let pd = ctx
        .create(pd_in.as_bytes(), AllocPdOut::SIZE_BYTES)
        .unwrap();
    let comp = devx::CmdComp::new(&ctx).unwrap();
    let mut caps = QueryHcaCapIn::new();
    caps.set_opcode(Opcode::QueryHcaCap.raw());
    caps.set_op_mod(1);
    sim.pause_async(true);
    for wr_id in 0..5 {
        ctx.general_async(caps.as_bytes(), QueryHcaCapOut::SIZE_BYTES, wr_id, &comp)
            .unwrap();
    }
    assert!(!sim.is_fatal());

    sim.inject_fatal_error();
    assert!(sim.is_fatal());
    // Every queued command wakes its waiter with the fatal error.
    for _ in 0..5 {
        let (_, out) = comp.get().unwrap();
        let e = out.unwrap_err();
        assert!(e.is_device_fatal(), "{e}");
        assert!(e.to_string().contains("no longer functional"), "{e}");
    }
    // New commands of every kind fail fast.
    let e = ctx
        .create(pd_in.as_bytes(), AllocPdOut::SIZE_BYTES)
        .unwrap_err();
    assert!(e.is_device_fatal(), "{e}");
    let e = ctx
        .general_cmd(caps.as_bytes(), QueryHcaCapOut::SIZE_BYTES)
        .unwrap_err();
    assert!(e.is_device_fatal(), "{e}");
    let e = ctx
        .general_async(caps.as_bytes(), QueryHcaCapOut::SIZE_BYTES, 9, &comp)
        .unwrap_err();
    assert!(e.is_device_fatal(), "{e}");
    let e = sim.device().open().unwrap_err();
    assert!(e.is_device_fatal(), "{e}");

    // Destroying what is left still works: nothing leaks.
    assert_eq!(sim.live_objects(), 1);
    pd.destroy().unwrap();
    assert_eq!(sim.live_objects(), 0);
    drop(comp);
    drop(ctx);
    assert_eq!(sim.open_contexts(), 0);
}
