//! Port state changes on an emulated device: the link goes down and up
//! through the device's control API, each change raises one PORT_CHANGE
//! event on subscribed channels, and an awaited `Events::next` wakes for it.

use devx::event_type;
use devx::port_change;
use devx::reactor::block_on;
use prm_layouts::enums::Opcode;
use prm_layouts::*;

fn vport_state(ctx: &devx::Context) -> u8 {
    let mut q = QueryVportStateIn::new();
    q.set_opcode(Opcode::QueryVportState.raw());
    let out = ctx
        .general_cmd(q.as_bytes(), QueryVportStateOut::SIZE_BYTES)
        .unwrap();
    QueryVportStateOut::from_slice(&out).unwrap().state()
}

#[test]
fn link_down_and_up_raise_one_port_change_each() {
    let sim = devx::sim::SimDevice::new(devx::sim::Profile::connectx6_dx());
    let ctx = sim.device().open().unwrap();
    let events = devx::Events::new(&ctx, false).unwrap();
    ctx.subscribe_unaffiliated(&events, &[event_type::PORT_CHANGE], 77)
        .unwrap();
    assert_eq!(vport_state(&ctx), 1);

    // The waiter parks before the link changes: only the fd's readiness wakes it.
    let down = std::thread::scope(|s| {
        let waiter = s.spawn(|| block_on(events.next()));
        sim.set_link(false);
        waiter.join().unwrap().unwrap()
    });
    assert_eq!(down.cookie, 77);
    assert_eq!(down.event_type(), Some(event_type::PORT_CHANGE as u8));
    assert_eq!(down.sub_type(), Some(port_change::DOWN));
    assert_eq!(vport_state(&ctx), 0);

    // No change, no event.
    sim.set_link(false);
    assert!(events.try_get().unwrap().is_none());

    sim.set_link(true);
    let up = block_on(events.next()).unwrap();
    assert_eq!(up.sub_type(), Some(port_change::ACTIVE));
    assert_eq!(vport_state(&ctx), 1);
    assert!(events.try_get().unwrap().is_none());
}
