//! Unmodified rdma-core tools (ibverbs-utils) run on the emulated device
//! through the preload library. Each test skips, saying so, when the tools
//! are not installed.

mod common;

use common::{preload_lib, tool, SKIP};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `tool args` with the library preloaded and logging on.
fn run(tool: &Path, args: &[&str], devices: &str) -> Output {
    Command::new(tool)
        .args(args)
        .env("LD_PRELOAD", preload_lib())
        .env("DEVX_PRELOAD_DEVICES", devices)
        .env("DEVX_PRELOAD_LOG", "1")
        .output()
        .expect("run the tool")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The sysfs tree directory the library logged.
fn tree_dir(stderr: &str) -> PathBuf {
    let line = stderr
        .lines()
        .find(|l| l.contains(" device(s) under "))
        .unwrap_or_else(|| panic!("no tree line in stderr:\n{stderr}"));
    PathBuf::from(line.rsplit(" under ").next().unwrap_or_default())
}

#[test]
fn ibv_devices_lists_the_emulated_devices() {
    let Some(ibv_devices) = tool("ibv_devices") else {
        eprintln!("skipped: {SKIP}");
        return;
    };
    let out = run(&ibv_devices, &[], "sim0,sim1");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "ibv_devices failed:\n{stdout}\n{stderr}"
    );
    for name in ["sim0", "sim1"] {
        let guid = devx::sim::sim_device(name).unwrap().identity().node_guid;
        let guid = format!("{guid:016x}");
        assert!(
            stdout
                .lines()
                .any(|l| l.split_whitespace().eq([name, guid.as_str()])),
            "no row for {name} ({guid}) in:\n{stdout}"
        );
    }
    assert!(
        stderr.contains("RDMA netlink refused"),
        "libibverbs did not try netlink first:\n{stderr}"
    );
    // The private tree is removed when the program exits.
    let tree = tree_dir(&stderr);
    assert!(!tree.exists(), "{} left behind", tree.display());
}

#[test]
fn unknown_device_names_show_no_devices() {
    let Some(ibv_devices) = tool("ibv_devices") else {
        eprintln!("skipped: {SKIP}");
        return;
    };
    let out = run(&ibv_devices, &[], "mlx5_0");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no emulated devices: DEVX_PRELOAD_DEVICES")
            && stderr.contains("'mlx5_0' is not an emulated device name"),
        "{stderr}"
    );
    assert!(!text(&out.stdout).contains("mlx5_0"));
}

/// The value ibv_devinfo prints after `key:` (first such line).
fn field<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no '{key}' in:\n{out}"))
}

#[test]
fn ibv_devinfo_describes_the_emulated_device_and_port() {
    let Some(ibv_devinfo) = tool("ibv_devinfo") else {
        eprintln!("skipped: {SKIP}");
        return;
    };
    let out = run(&ibv_devinfo, &["-v", "-d", "sim0"], "sim0");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "ibv_devinfo failed:\n{stdout}\n{stderr}"
    );
    let sim = devx::sim::sim_device("sim0").unwrap();
    let profile = sim.profile();
    let ident = sim.identity();
    let g = ident.node_guid.to_be_bytes();
    let guid = format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]
    );
    assert_eq!(field(&stdout, "hca_id"), "sim0");
    assert_eq!(field(&stdout, "fw_ver"), profile.fw_version);
    assert_eq!(field(&stdout, "node_guid"), guid);
    assert_eq!(
        field(&stdout, "vendor_id"),
        format!("{:#06x}", profile.vendor_id)
    );
    assert_eq!(
        field(&stdout, "vendor_part_id"),
        profile.vendor_part_id.to_string()
    );
    assert_eq!(
        field(&stdout, "phys_port_cnt"),
        profile.num_ports.to_string()
    );
    assert_eq!(
        field(&stdout, "max_qp"),
        (1u32 << profile.log_max_qp).to_string()
    );
    assert_eq!(
        field(&stdout, "max_qp_wr"),
        (1u32 << profile.log_max_qp_sz).to_string()
    );
    assert_eq!(
        field(&stdout, "hca_core_clock"),
        format!("{}kHZ", profile.device_frequency_khz)
    );
    assert_eq!(
        field(&stdout, "num_comp_vectors"),
        profile.num_comp_vectors.to_string()
    );
    assert_eq!(field(&stdout, "state"), "PORT_ACTIVE (4)");
    assert_eq!(field(&stdout, "link_layer"), "Ethernet");
    assert_eq!(
        field(&stdout, "gid_tbl_len"),
        profile.roce_address_table_size.to_string()
    );
    // The RoCE v2 link-local GID, in ibv_devinfo's inet_ntop form.
    let ll = ident.gid_table()[1];
    let v6 = std::net::Ipv6Addr::from(ll.gid);
    assert!(
        stdout.contains(&format!("{v6}, RoCE v2")),
        "no RoCE v2 GID {v6} in:\n{stdout}"
    );
    // libibverbs took the ioctl write path after the INVOKE_WRITE probe.
    assert!(stderr.contains("ucontext (devx true)"), "{stderr}");
    assert!(!stderr.contains("not supported"), "{stderr}");
}

const SKIP_DEV: &str =
    "libibverbs-dev or a C compiler not installed; apt-get install libibverbs-dev gcc";

/// Builds `tests/c/<name>.c`, runs it on sim0 through the library and
/// fails the test unless it succeeds; its stdout and stderr (the library's
/// log). None (after saying so)
/// when the headers or a compiler are missing.
fn run_c_on_sim0(name: &str, libs: &[&str]) -> Option<(String, String)> {
    let Some(exe) = build_c(name, libs) else {
        eprintln!("skipped: {SKIP_DEV}");
        return None;
    };
    let out = run(&exe, &[], "sim0");
    let _ = std::fs::remove_file(&exe);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{name} failed:\n{stdout}\n{stderr}");
    Some((stdout, stderr))
}

/// Builds `tests/c/<name>.c` against the system's libibverbs, or None when
/// the headers or a compiler are missing.
fn build_c(name: &str, libs: &[&str]) -> Option<PathBuf> {
    for h in ["verbs.h", "mlx5dv.h"] {
        if !Path::new("/usr/include/infiniband").join(h).is_file() {
            return None;
        }
    }
    let cc = tool("cc").or_else(|| tool("gcc"))?;
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    // One executable per build: tests building the same program run at once.
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let exe = std::env::temp_dir().join(format!("devx-preload-{name}-{}-{n}", std::process::id()));
    let out = Command::new(cc)
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(libs)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "{} does not build:\n{}",
        src.display(),
        text(&out.stderr)
    );
    Some(exe)
}

#[test]
fn c_program_creates_pd_mr_and_cq_on_the_emulated_device() {
    let Some((stdout, stderr)) = run_c_on_sim0("verbs_objects", &["-libverbs"]) else {
        return;
    };
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"open sim0"), "{stdout}");
    // The MR's keys are the emulator's mkey (index << 8 | variant).
    let mr = lines
        .iter()
        .find(|l| l.starts_with("mr "))
        .unwrap_or_else(|| panic!("no mr line:\n{stdout}"));
    assert!(mr.ends_with("length 65536"), "{mr}");
    assert!(!mr.contains("lkey 0x0 "), "{mr}");
    // 64 requested: libmlx5 asks for 127, mlx5_ib rounds to 128 entries.
    assert!(lines.contains(&"cq cqe 127"), "{stdout}");
    assert_eq!(lines.last(), Some(&"done"), "{stdout}");
    // The CQ is the emulated device's, over the program's ring.
    assert!(
        stderr.contains("create_cq: cqn ") && stderr.contains("128 entries"),
        "{stderr}"
    );
    assert!(!stderr.contains("not supported"), "{stderr}");
}

#[test]
fn coreutils_see_the_tree_and_the_char_device() {
    let (Some(ls), Some(stat)) = (tool("ls"), tool("stat")) else {
        eprintln!("skipped: coreutils not installed");
        return;
    };
    let out = run(
        &ls,
        &["/sys/class/infiniband", "/sys/class/infiniband_verbs"],
        "sim0,sim2",
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for name in ["sim0", "sim2", "uverbs0", "uverbs1", "abi_version"] {
        assert!(stdout.lines().any(|l| l == name), "no {name} in:\n{stdout}");
    }
    // statx (coreutils) reports uverbs1 as char device 231:193.
    let out = run(
        &stat,
        &["-c", "%F %t:%T", "/dev/infiniband/uverbs1"],
        "sim0,sim2",
    );
    assert_eq!(text(&out.stdout).trim(), "character special file e7:c1");
}

#[test]
fn trees_of_dead_processes_are_removed() {
    let Some(cat) = tool("cat") else {
        eprintln!("skipped: coreutils not installed");
        return;
    };
    // A process that has exited: its pid names no process (until reused).
    let mut child = Command::new(&cat).arg("/dev/null").spawn().expect("spawn");
    let pid = child.id();
    child.wait().expect("wait");
    let stale = std::env::temp_dir().join(format!("devx-preload-{pid}-1"));
    std::fs::create_dir_all(stale.join("class")).unwrap();
    let out = run(&cat, &["/sys/class/infiniband/sim0/node_type"], "sim0");
    assert_eq!(text(&out.stdout).trim(), "1: CA");
    assert!(!stale.exists(), "{} left behind", stale.display());
}

#[test]
fn c_devx_program_runs_firmware_commands_through_libmlx5() {
    let Some((stdout, _)) = run_c_on_sim0("devx_objects", &["-libverbs", "-lmlx5"]) else {
        return;
    };
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"open sim0 devx"), "{stdout}");
    assert!(lines.contains(&"query_hca_cap status 0"), "{stdout}");
    let eqn = devx::Device::emulated("sim0")
        .and_then(|d| d.open())
        .and_then(|c| c.query_eqn(0))
        .unwrap();
    assert!(lines.contains(&format!("eqn {eqn}").as_str()), "{stdout}");
    // The refused CREATE_CQ: EREMOTEIO with the emulator's status and syndrome.
    let bad = lines
        .iter()
        .find_map(|l| l.strip_prefix("bad cq "))
        .unwrap_or_else(|| panic!("no bad cq line:\n{stdout}"));
    let words: Vec<&str> = bad.split_whitespace().collect();
    assert_eq!(words[..2], ["errno", &libc::EREMOTEIO.to_string()]);
    assert_ne!(words[3], "0x0", "status of a refused command: {bad}");
    let syndrome = u32::from_str_radix(words[5].trim_start_matches("0x"), 16).unwrap();
    assert!(devx::syndrome_name(syndrome).is_some(), "{bad}");
    assert_eq!(lines.last(), Some(&"done"), "{stdout}");
}

#[test]
fn c_devx_program_runs_an_rc_qp_with_raw_wqes_events_and_async_queries() {
    let Some((stdout, _)) = run_c_on_sim0("devx_rc_qp", &["-libverbs", "-lmlx5"]) else {
        return;
    };
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"open sim0 devx"), "{stdout}");
    assert!(lines.contains(&"rts"), "{stdout}");
    // The requester's CQE (MLX5_CQE_REQ) for WQE 0; the responder's
    // (MLX5_CQE_RESP_SEND_IMM) with the bytes, the immediate and the data.
    assert!(
        lines.contains(&"send cqe opcode 0 wqe_counter 0"),
        "{stdout}"
    );
    assert!(
        lines.contains(&"recv cqe opcode 3 byte_cnt 256 imm 0x3020100 data matches"),
        "{stdout}"
    );
    // The completion event of b's CQ: the cookie, a 64-byte EQE of type
    // COMP naming that CQ.
    let cqs = lines
        .iter()
        .find_map(|l| l.strip_prefix("qps "))
        .unwrap_or_else(|| panic!("no qps line:\n{stdout}"));
    let cq_b = cqs.split_whitespace().last().unwrap();
    assert!(
        lines.contains(&format!("event cookie 0xc0ffee bytes 72 type 0 cqn {cq_b}").as_str()),
        "{stdout}"
    );
    // QUERY_QP answered through the async command fd: RTS.
    assert!(
        lines.contains(&"async query_qp wr_id 42 status 0 state 3"),
        "{stdout}"
    );
    assert_eq!(lines.last(), Some(&"done"), "{stdout}");
}

#[test]
fn c_program_reads_qp_port_and_fatal_async_events() {
    let Some((stdout, stderr)) = run_c_on_sim0("async_events", &["-libverbs", "-ldl"]) else {
        return;
    };
    // ibv_event_type_str's words, in the order the program raised them: the
    // responder QP's access error (its user handle: QP b), the port down and
    // up, then the device-fatal error. ibv_destroy_qp returned, so the
    // library reported the one event the program acknowledged for QP b.
    let expected = [
        "open sim0",
        "wc remote access error",
        "event local access violation work queue error qp b",
        "event port error port 1",
        "event port active port 1",
        "qps destroyed",
        "event local catastrophic error",
        "done",
    ];
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected, "{stderr}");
}

#[test]
fn a_c_devx_program_records_a_fixture_that_replays() {
    let Some(exe) = build_c("devx_rc_qp", &["-libverbs", "-lmlx5"]) else {
        eprintln!("skipped: {SKIP_DEV}");
        return;
    };
    let fixture =
        std::env::temp_dir().join(format!("devx-preload-rec-{}.fixture", std::process::id()));
    let out = Command::new(&exe)
        .env("LD_PRELOAD", preload_lib())
        .env("DEVX_PRELOAD_DEVICES", "sim0")
        .env("DEVX_PRELOAD_RECORD", &fixture)
        .output()
        .expect("run the program");
    let _ = std::fs::remove_file(&exe);
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let recorded = std::fs::read_to_string(&fixture).expect("the fixture was written");
    // The program's own PRM commands are in it, and it is complete.
    for call in [
        "CREATE_QP",
        "INIT2RTR_QP",
        "RTR2RTS_QP",
        "QUERY_QP",
        "DESTROY_QP",
    ] {
        assert!(recorded.contains(call), "no {call} in:\n{recorded}");
    }
    assert!(
        recorded.lines().any(|l| l.starts_with("end ")),
        "{recorded}"
    );
    // With no device: every recorded call answered as recorded.
    let r = devx::fixture::drive::replay_file(&fixture).expect("replay");
    let _ = std::fs::remove_file(&fixture);
    assert!(r.passed(), "{:?}", r.error);
    assert_eq!(r.steps.len(), r.stanzas);
}

#[test]
fn c_program_reads_the_free_running_clock_and_converts_it_with_clock_info() {
    let Some((stdout, stderr)) = run_c_on_sim0("clock", &["-libverbs", "-lmlx5"]) else {
        return;
    };
    let lines: Vec<&str> = stdout.lines().collect();
    let khz = devx::sim::sim_device("sim0")
        .unwrap()
        .profile()
        .device_frequency_khz;
    assert!(
        lines.contains(&format!("hca_core_clock {khz} kHz").as_str()),
        "{stdout}"
    );
    // Linux 6.1 mlx5_core's timecounter: a 41-bit counter, MLX5_CYCLES_SHIFT 23.
    let info = lines
        .iter()
        .find(|l| l.starts_with("clock_info "))
        .unwrap_or_else(|| panic!("no clock_info line:\n{stdout}"));
    assert!(info.ends_with("shift 23 mask 0x1ffffffffff"), "{info}");
    assert!(lines.contains(&"plausible"), "{stdout}");
    assert_eq!(lines.last(), Some(&"done"), "{stdout}");
    assert!(!stderr.contains("no such entry"), "{stderr}");
}
