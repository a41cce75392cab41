//! Record an application's commands, replay them, and check what a replay
//! says when the application does something else.

#[path = "fixture_toy.rs"]
mod toy;

use devx::fixture::{self, drive, Recorder, Replayer, StepOutcome};
use devx::{CmdComp, Device, Uar, Umem};
use toy::{mailbox, temp_path, toy, BAD_OPCODE};

/// What the application under test does; `variant` changes one thing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    AsRecorded,
    BiggerCq,
    SwapQueries,
    StopEarly,
    OneMore,
}

fn app(dev: &Device, v: Variant) -> devx::Result<()> {
    let ctx = dev.open()?;
    let eqn = ctx.query_eqn(0)?;
    let uar = Uar::alloc(&ctx)?;
    let umem = Umem::register(&ctx, vec![0u8; 8192], devx::access::LOCAL_WRITE)?;
    let pd = ctx.create(&mailbox("alloc_pd_in", &[("opcode", 0x800)]), 16)?;
    let log_cq_size = if v == Variant::BiggerCq { 6 } else { 5 };
    let cq = ctx.create(
        &mailbox(
            "create_cq_in",
            &[
                ("opcode", 0x400),
                ("cq_context.log_cq_size", log_cq_size),
                ("cq_context.uar_page", u64::from(uar.page_id())),
                ("cq_context.c_eqn_or_apu_element", u64::from(eqn)),
                ("cq_context.dbr_umem_id", u64::from(umem.id())),
                ("cq_context.dbr_addr", 4096),
                ("cq_umem_id", u64::from(umem.id())),
                ("cq_umem_valid", 1),
            ],
        ),
        16,
    )?;
    let mkey = ctx.create(
        &mailbox(
            "create_mkey_in",
            &[
                ("opcode", 0x200),
                ("memory_key_mkey_entry.pd", u64::from(pd.id())),
                (
                    "memory_key_mkey_entry.start_addr",
                    umem.addr() as u64 + 0x40,
                ),
                ("memory_key_mkey_entry.len", 0x100),
                ("memory_key_mkey_entry.qpn", 0xff_ffff),
                ("mkey_umem_id", u64::from(umem.id())),
                ("mkey_umem_valid", 1),
            ],
        ),
        16,
    )?;
    let query_cq = mailbox(
        "query_cq_in",
        &[("opcode", 0x402), ("cqn", u64::from(cq.id()))],
    );
    let query_mkey = mailbox(
        "query_mkey_in",
        &[("opcode", 0x201), ("mkey_index", u64::from(mkey.id()))],
    );
    if v == Variant::SwapQueries {
        mkey.query(&query_mkey, 304)?;
        cq.query(&query_cq, 272)?;
    } else {
        cq.query(&query_cq, 272)?;
        mkey.query(&query_mkey, 304)?;
    }
    let caps = mailbox("query_hca_cap_in", &[("opcode", 0x100), ("op_mod", 1)]);
    ctx.general_cmd(&caps, 4112)?;
    let mut bad = vec![0u8; 16];
    bad[0..2].copy_from_slice(&BAD_OPCODE.to_be_bytes());
    let e = ctx.general_cmd(&bad, 16).unwrap_err();
    assert_eq!(e.status(), Some(2), "{e}");
    if v == Variant::StopEarly {
        return Ok(());
    }
    let comp = CmdComp::new(&ctx)?;
    cq.query_async(&query_cq, 272, 0x77, &comp)?;
    let (wr_id, out) = comp.get()?;
    assert_eq!(wr_id, 0x77);
    assert_eq!(out?.len(), 272);
    mkey.destroy().map_err(devx::Error::from)?;
    cq.destroy().map_err(devx::Error::from)?;
    drop(pd);
    drop(umem);
    drop(uar);
    if v == Variant::OneMore {
        ctx.general_cmd(&caps, 4112)?;
    }
    Ok(())
}

/// Records `app` on the toy device; returns the fixture path.
fn record_app(tag: &str) -> std::path::PathBuf {
    let path = temp_path(tag);
    let toy = Device::from_provider(toy());
    let dev = fixture::record(&toy, &path).unwrap();
    app(&dev, Variant::AsRecorded).unwrap();
    fixture::finish(&dev).unwrap();
    path
}

#[test]
fn recorded_commands_replay_and_name_their_symbols() {
    let path = record_app("roundtrip");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("devx-fixture 1\n"), "{text}");
    for needle in [
        "device \"toy0\"",
        "recorded-on emulated",
        "@1 open -> $ctx0",
        "query_eqn $ctx0 vector=0 -> $eqn0=0x7",
        "umem_reg $ctx0 addr=$addr0 len=0x2000 access=0x1 -> $umem0=",
        "create $ctx0 CREATE_CQ -> $obj1=",
        "sym cq_context.c_eqn_or_apu_element @0x120/32 = $eqn0",
        "sym cq_context.uar_page @0xe8/24 = $uar0",
        "sym cq_umem_id @0x2c0/32 = $umem0",
        "sym memory_key_mkey_entry.start_addr @0x100/64 = $addr0+0x40",
        "sym memory_key_mkey_entry.pd @0xe8/24 = $obj0",
        "query $ctx0 $obj1 QUERY_CQ",
        "error firmware status=0x2 syndrome=0xc0ffee",
        "query_async $ctx0 $obj1 QUERY_CQ chan=$chan0 wr_id=0x77 outlen=272",
        "completion $ctx0 $chan0 QUERY_CQ wr_id=0x77 opcode=0x402",
        "destroy $ctx0 $obj2 DESTROY_MKEY",
        "umem_dereg $ctx0 $umem0",
        "uar_free $ctx0 $uar0",
    ] {
        assert!(text.contains(needle), "fixture lacks `{needle}`:\n{text}");
    }
    // Hex rows and decoded comments wrap: the text stays readable in a diff.
    assert!(text.lines().all(|l| l.len() <= 110), "a line is too long");

    let dev = fixture::replay(&path).unwrap();
    app(&dev, Variant::AsRecorded).unwrap();
    fixture::finish(&dev).unwrap();

    let report = drive::replay_file(&path).unwrap();
    assert!(report.passed(), "{:?}", report.error);
    assert_eq!(report.steps.len(), report.stanzas);
    assert!(report
        .steps
        .iter()
        .any(|s| matches!(s.outcome, StepOutcome::ExpectedError(_))));
    let _ = std::fs::remove_file(path);
}

#[test]
fn recording_twice_gives_the_same_text() {
    let a = record_app("same-a");
    let b = record_app("same-b");
    let (ta, tb) = (
        std::fs::read_to_string(&a).unwrap(),
        std::fs::read_to_string(&b).unwrap(),
    );
    // The toy numbers objects from a shared counter, so only the symbols
    // and shapes must agree; strip the values to compare the structure.
    let shape = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.trim_start().starts_with('@'))
            .map(|l| l.split(" -> ").next().unwrap().to_string())
            .collect()
    };
    assert_eq!(shape(&ta), shape(&tb));
    let _ = std::fs::remove_file(a);
    let _ = std::fs::remove_file(b);
}

#[test]
fn a_changed_field_is_named_with_both_values() {
    let path = record_app("tamper-app");
    let dev = fixture::replay(&path).unwrap();
    let e = app(&dev, Variant::BiggerCq).unwrap_err().to_string();
    assert!(
        e.contains(
            "CREATE_CQ inbox differs at create_cq_in.cq_context.log_cq_size: recorded 5, got 6"
        ),
        "{e}"
    );
    assert!(e.starts_with("replay: "), "{e}");
    assert!(e.contains("stanza 6 (line "), "{e}");
    let f = fixture::finish(&dev).unwrap_err().to_string();
    assert!(f.contains("log_cq_size"), "{f}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_tampered_fixture_fails_at_that_field() {
    let path = record_app("tamper-file");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let head = lines
        .iter()
        .position(|l| l.contains("CREATE_CQ -> "))
        .unwrap();
    let row = head
        + lines[head..]
            .iter()
            .position(|l| l.starts_with("    0000 "))
            .unwrap();
    // log_cq_size is the low 5 bits of byte 0x1c: the first byte of the
    // eighth dword of row 0 (after the offset column).
    let mut groups: Vec<String> = lines[row].split_whitespace().map(String::from).collect();
    assert_eq!(&groups[8][0..2], "05", "{}", lines[row]);
    groups[8].replace_range(0..2, "07");
    lines[row] = format!("    {}", groups.join(" "));
    let tampered = lines.join("\n") + "\n";
    // The application is unchanged, so it now differs from the fixture.
    let rep = Replayer::from_text(&tampered, "tampered.fixture").unwrap();
    let err = app(&rep.device(), Variant::AsRecorded)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "CREATE_CQ inbox differs at create_cq_in.cq_context.log_cq_size: recorded 7, got 5"
        ),
        "{err}"
    );
    assert!(
        err.contains(&format!("tampered.fixture stanza 6 (line {})", head + 1)),
        "{err}"
    );
    // Replaying the fixture on its own is consistent: both sides read 7.
    let rep = Replayer::from_text(&tampered, "tampered.fixture").unwrap();
    assert!(drive::run(&rep).passed());
    let _ = std::fs::remove_file(path);
}

#[test]
fn reordered_missing_and_extra_commands_are_named() {
    let path = record_app("order");

    let dev = fixture::replay(&path).unwrap();
    let e = app(&dev, Variant::SwapQueries).unwrap_err().to_string();
    assert!(
        e.contains("recorded query $ctx0 $obj1 QUERY_CQ, got query $ctx0 QUERY_MKEY"),
        "{e}"
    );

    let dev = fixture::replay(&path).unwrap();
    app(&dev, Variant::StopEarly).unwrap();
    // Dropping the objects early destroys them where the recording queued
    // an async query; finish() names the first departure.
    let e = fixture::finish(&dev).unwrap_err().to_string();
    assert!(
        e.contains("recorded cmd_channel $ctx0, got destroy $ctx0 DESTROY_MKEY"),
        "{e}"
    );

    let dev = fixture::replay(&path).unwrap();
    let e = app(&dev, Variant::OneMore).unwrap_err().to_string();
    assert!(
        e.contains("got general $ctx0 QUERY_HCA_CAP after the last recorded command"),
        "{e}"
    );
    let _ = std::fs::remove_file(path);
}

#[test]
fn unfinished_replays_name_the_next_stanza() {
    let path = record_app("unfinished");
    let dev = fixture::replay(&path).unwrap();
    let ctx = dev.open().unwrap();
    let _ = ctx.query_eqn(0).unwrap();
    let e = fixture::finish(&dev).unwrap_err().to_string();
    assert!(
        e.contains("recorded commands were not replayed; the next is stanza 3 (line "),
        "{e}"
    );
    assert!(e.contains("uar_alloc $ctx0"), "{e}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_recorder_over_a_writer_and_finish_twice() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let rec = Recorder::to_writer(toy(), sink.clone()).unwrap();
    let dev = rec.device();
    app(&dev, Variant::AsRecorded).unwrap();
    rec.finish().unwrap();
    rec.finish().unwrap();
    let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    assert_eq!(text.matches("\nend ").count(), 1);
    let f = fixture::parse(&text).unwrap();
    assert_eq!(f.stanzas.len(), rec.stanzas());
    // Text → fixture → text is the identity.
    assert_eq!(fixture::fixture_text(&f), text);
}

/// Event channels and subscriptions (queued with a cookie, or redirected to
/// an eventfd) are stanzas; a replay subscribing otherwise is refused with
/// both values.
#[test]
fn event_subscriptions_are_recorded_and_checked() {
    use devx::event_type::PORT_CHANGE;
    use nix::sys::eventfd::{EfdFlags, EventFd};
    let app = |dev: &Device, cookie: u64| -> devx::Result<()> {
        let ctx = dev.open()?;
        let events = devx::Events::new(&ctx, false)?;
        ctx.subscribe_unaffiliated(&events, &[PORT_CHANGE], cookie)?;
        let efd = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC).unwrap();
        ctx.subscribe_unaffiliated_fd(&events, &[PORT_CHANGE], &efd)?;
        assert!(events.try_get()?.is_none());
        Ok(())
    };
    let path = temp_path("events");
    let sim = Device::emulated("sim5300").unwrap();
    let dev = fixture::record(&sim, &path).unwrap();
    app(&dev, 0x77).unwrap();
    fixture::finish(&dev).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    for needle in [
        "@2 event_channel $ctx0 omit_data=0 -> $chan0",
        "@3 subscribe $ctx0 $chan0 types=0x9 cookie=0x77",
        "@4 subscribe $ctx0 $chan0 types=0x9 redirect=eventfd",
    ] {
        assert!(text.contains(needle), "fixture lacks `{needle}`:\n{text}");
    }

    let dev = fixture::replay(&path).unwrap();
    app(&dev, 0x77).unwrap();
    fixture::finish(&dev).unwrap();
    assert!(drive::replay_file(&path).unwrap().passed());

    let dev = fixture::replay(&path).unwrap();
    let e = app(&dev, 0x78).unwrap_err().to_string();
    assert!(
        e.contains("stanza 3 (line ") && e.contains("recorded cookie=0x77, got cookie=0x78"),
        "{e}"
    );
    let _ = std::fs::remove_file(path);
}
