//! Queued commands in fixtures: recorded on the emulated device as a
//! `general_async` / `create_async` / `destroy_async` / `umem_reg_async` /
//! `uar_alloc_async` submission and its `completion` (which defines a
//! created object, UMEM or UAR), replayed with no device, through the
//! application and through `drive::replay_file`, and on the emulated
//! device again through `live::replay_file_on`.

use devx::fixture::{self, drive};
use devx::{CmdComp, Device, Uar, UarKind, Umem};
use prm_layouts::enums::{HcaCapType, Opcode};
use prm_layouts::{AllocPdIn, AllocPdOut, NopIn, NopOut, QueryHcaCapIn, QueryHcaCapOut};

/// The recorded text parses and writes back unchanged.
fn reads_back(text: &str) {
    let f = fixture::parse(text).unwrap();
    assert_eq!(fixture::fixture_text(&f), text);
}

/// Records `app` on the emulated device `name`, checks the text reads back
/// unchanged, replays it through the application (and, with `drive_too`,
/// through `drive::replay_file`; with `live_too`, on the emulated device
/// again through `live::replay_file_on`) and returns the recorded text.
fn record_and_replay(
    name: &str,
    drive_too: bool,
    live_too: bool,
    app: impl Fn(&Device) -> devx::Result<()>,
) -> String {
    let path = std::env::temp_dir().join(format!(
        "devx-fixture-async-{name}-{}.fixture",
        std::process::id()
    ));
    let dev = fixture::record(&Device::by_name(name).unwrap(), &path).unwrap();
    app(&dev).unwrap();
    // Not broken: finishing the recording succeeds.
    fixture::finish(&dev).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    reads_back(&text);
    let dev = fixture::replay(&path).unwrap();
    app(&dev).unwrap();
    fixture::finish(&dev).unwrap();
    if drive_too {
        let r = drive::replay_file(&path).unwrap();
        assert!(r.passed(), "{:?}", r.error);
        assert_eq!(r.steps.len(), r.stanzas);
    }
    if live_too {
        let r = fixture::live::replay_file_on(&path, &Device::by_name(name).unwrap()).unwrap();
        assert!(r.passed(), "{:?}", r.error);
        assert_eq!(r.steps.len(), r.stanzas);
    }
    let _ = std::fs::remove_file(&path);
    text
}

fn app(dev: &Device) -> devx::Result<()> {
    let ctx = dev.open()?;
    let comp = CmdComp::new(&ctx)?;
    let mut nop = NopIn::new();
    nop.set_opcode(Opcode::Nop.raw());
    let mut cap = QueryHcaCapIn::new();
    cap.set_opcode(Opcode::QueryHcaCap.raw());
    cap.set_op_mod(HcaCapType::General.op_mod(true));
    ctx.general_async(nop.as_bytes(), NopOut::SIZE_BYTES, 1, &comp)?;
    let (w, out) = comp.get()?;
    out?;
    // An owned outbox (with room for the emulator's copy of the inbox):
    // recorded and replayed as `general_async`, handed back filled.
    let mut outbox = Vec::with_capacity(cap.as_bytes().len() + QueryHcaCapOut::SIZE_BYTES);
    outbox.resize(QueryHcaCapOut::SIZE_BYTES, 0);
    let buf = outbox.as_ptr();
    ctx.general_async_into(cap.as_bytes(), outbox, 2, &comp)?;
    let (w2, out) = comp.get()?;
    let out = out?;
    let caps = QueryHcaCapOut::from_slice(&out).expect("a full outbox");
    if (w, w2) != (1, 2) || caps.capability().cmd_hca_cap().log_max_cq() == 0 {
        return Err(devx::Error::argument("wrong completions"));
    }
    if out.as_ptr() != buf {
        return Err(devx::Error::argument("the outbox was not handed back"));
    }
    let mut pd = AllocPdIn::new();
    pd.set_opcode(Opcode::AllocPd.raw());
    let pd = ctx
        .create_async(pd.as_bytes(), AllocPdOut::SIZE_BYTES, 3, &comp)?
        .wait()?;
    pd.destroy()?;
    Ok(())
}

#[test]
fn queued_general_commands_and_creates_record_and_replay() {
    devx::sim::sim_device("sim14000").unwrap();
    let text = record_and_replay("sim14000", true, true, app);
    assert!(
        text.contains("general_async $ctx0 NOP chan=$chan0 wr_id=0x1"),
        "{text}"
    );
    assert!(
        text.contains("completion $ctx0 $chan0 QUERY_HCA_CAP wr_id=0x2"),
        "{text}"
    );
    for line in [
        "create_async $ctx0 ALLOC_PD chan=$chan0 wr_id=0x3",
        "completion $ctx0 $chan0 ALLOC_PD wr_id=0x3 opcode=0x800 -> $obj0=",
        "destroy $ctx0 $obj0 DEALLOC_PD",
    ] {
        assert!(text.contains(line), "{line}:\n{text}");
    }
}

/// Queued destroy, UMEM registration and UAR allocation (and the UMEM's
/// deregistration and the UAR's release, which have no queued form).
fn resources_app(dev: &Device) -> devx::Result<()> {
    let ctx = dev.open()?;
    let comp = CmdComp::new(&ctx)?;
    let umem =
        Umem::register_async(&ctx, vec![0u8; 8192], devx::access::LOCAL_WRITE, 5, &comp)?.wait()?;
    let uar = Uar::alloc_async(&ctx, UarKind::BlueFlame, 6, &comp)?.wait()?;
    if umem.id() == 0 || uar.page_id() == 0 {
        return Err(devx::Error::argument("no UMEM or UAR number"));
    }
    let mut pd = AllocPdIn::new();
    pd.set_opcode(Opcode::AllocPd.raw());
    let pd = ctx
        .create_async(pd.as_bytes(), AllocPdOut::SIZE_BYTES, 7, &comp)?
        .wait()?;
    pd.destroy_async(8, &comp).wait().map_err(|f| f.error)?;
    drop((umem, uar));
    Ok(())
}

#[test]
fn queued_destroys_umem_registrations_and_uar_allocations_record_and_replay() {
    devx::sim::sim_device("sim14001").unwrap();
    let text = record_and_replay("sim14001", true, true, resources_app);
    for line in [
        "umem_reg_async $ctx0 addr=$addr0 len=0x2000 access=0x1 chan=$chan0 wr_id=0x5",
        "completion $ctx0 $chan0 CREATE_UMEM wr_id=0x5 opcode=0xa08 -> $umem0=",
        "uar_alloc_async $ctx0 kind=blueflame chan=$chan0 wr_id=0x6",
        "completion $ctx0 $chan0 ALLOC_UAR wr_id=0x6 opcode=0x802 -> $uar0=",
        "destroy_async $ctx0 $obj0 DEALLOC_PD chan=$chan0 wr_id=0x8",
        "completion $ctx0 $chan0 DEALLOC_PD wr_id=0x8 opcode=0x801",
        "umem_dereg $ctx0 $umem0",
        "uar_free $ctx0 $uar0",
    ] {
        assert!(text.contains(line), "{line}:\n{text}");
    }
    // Nothing of these ran as its blocking form.
    for blocking in [" umem_reg $ctx0", " uar_alloc $ctx0", " destroy $ctx0"] {
        assert!(!text.contains(blocking), "{blocking}:\n{text}");
    }
}

/// A queued create dropped after the firmware made its object.
fn dropped_create_app(dev: &Device) -> devx::Result<()> {
    let ctx = dev.open()?;
    let comp = CmdComp::new(&ctx)?;
    let mut pd = AllocPdIn::new();
    pd.set_opcode(Opcode::AllocPd.raw());
    // Dropped at once: on an idle emulated device the firmware's answer is
    // already on the channel, unread.
    drop(ctx.create_async(pd.as_bytes(), AllocPdOut::SIZE_BYTES, 8, &comp)?);
    let pending = ctx.create_async(pd.as_bytes(), AllocPdOut::SIZE_BYTES, 9, &comp)?;
    // Its completion is on the channel once NOP (queued behind it) completes.
    let mut nop = NopIn::new();
    nop.set_opcode(Opcode::Nop.raw());
    ctx.general_async(nop.as_bytes(), NopOut::SIZE_BYTES, 10, &comp)?;
    devx::reactor::block_on(comp.completion(10))?;
    drop(pending);
    Ok(())
}

#[test]
fn a_queued_create_dropped_after_it_completed_records_its_completion_and_destroy() {
    let sim = devx::sim::sim_device("sim14002").unwrap();
    // `drive::replay_file` replays it too: it holds the second create's
    // future while the NOP queued behind it is submitted.
    let text = record_and_replay("sim14002", true, true, dropped_create_app);
    assert_eq!(sim.live_objects(), 0);
    for line in [
        "@3 create_async $ctx0 ALLOC_PD chan=$chan0 wr_id=0x8",
        "@4 completion $ctx0 $chan0 ALLOC_PD wr_id=0x8 opcode=0x800 -> $obj0=",
        "@5 destroy $ctx0 $obj0 DEALLOC_PD",
        "create_async $ctx0 ALLOC_PD chan=$chan0 wr_id=0x9",
        "completion $ctx0 $chan0 ALLOC_PD wr_id=0x9 opcode=0x800 -> $obj1=",
        "destroy $ctx0 $obj1 DEALLOC_PD",
    ] {
        assert!(text.contains(line), "{line}:\n{text}");
    }
    let created = text
        .find("completion $ctx0 $chan0 ALLOC_PD wr_id=0x9")
        .unwrap();
    assert!(
        created < text.find("destroy $ctx0 $obj1").unwrap(),
        "{text}"
    );
}

/// A queued create dropped before the firmware ran it (`sim` holds its
/// command queue meanwhile, so it cannot have).
fn cancelled_create_app(dev: &Device, sim: &devx::sim::SimDevice) -> devx::Result<()> {
    let ctx = dev.open()?;
    let comp = CmdComp::new(&ctx)?;
    let mut pd = AllocPdIn::new();
    pd.set_opcode(Opcode::AllocPd.raw());
    sim.pause_async(true);
    drop(ctx.create_async(pd.as_bytes(), AllocPdOut::SIZE_BYTES, 12, &comp)?);
    sim.pause_async(false);
    let mut nop = NopIn::new();
    nop.set_opcode(Opcode::Nop.raw());
    ctx.general_async(nop.as_bytes(), NopOut::SIZE_BYTES, 13, &comp)?;
    devx::reactor::block_on(comp.completion(13))?;
    Ok(())
}

#[test]
fn a_queued_create_dropped_before_the_firmware_ran_it_records_a_cancel() {
    let sim = devx::sim::sim_device("sim14003").unwrap();
    // `drive::replay_file` replays it too: it drops the create's future at
    // the `cancel`, and its channel discards the completion as it reads it.
    // Holding the emulated device's queue during the replay changes nothing.
    // (A live replay cannot cancel it: there the create runs at once.)
    let text = record_and_replay("sim14003", true, false, |dev| {
        cancelled_create_app(dev, &sim)
    });
    assert_eq!(sim.live_objects(), 0);
    for line in [
        "@3 create_async $ctx0 ALLOC_PD chan=$chan0 wr_id=0xc",
        "@4 cancel $ctx0 $chan0 wr_id=0xc",
        "@5 general_async $ctx0 NOP chan=$chan0 wr_id=0xd",
    ] {
        assert!(text.contains(line), "{line}:\n{text}");
    }
    // Its completion (the firmware made the object and destroyed it at
    // once) is recorded where the application's channel read it, and
    // defines nothing.
    assert!(
        text.contains("@6 completion $ctx0 $chan0 ALLOC_PD wr_id=0xc opcode=0x800\n"),
        "{text}"
    );
    assert!(!text.contains("$obj0"), "{text}");
}
