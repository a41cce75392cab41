//! `devx-cli`: layouts, raw commands and objects on mlx5 devices (real or
//! emulated) from the shell.

mod bench;
mod bench_async;
mod bench_cmd;
mod bench_datapath;
mod bench_wire;
mod device_cmd;
mod devinfo_cmd;
mod fields;
mod layout_cmd;
mod net_info;
mod obj_cmd;
mod rdma_cmd;
mod replay_cmd;
mod session;
mod values;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Parser, Subcommand};

/// What went wrong, as one line for the user.
pub type CliResult<T = ()> = Result<T, String>;

#[derive(Parser)]
#[command(
    name = "devx-cli",
    version,
    about = "mlx5 DEVX commands, objects and PRM layouts",
    arg_required_else_help = true,
    after_help = "\
Examples:
  $ devx-cli devices
  $ devx-cli caps --page roce --mode max
  $ devx-cli --device sim0 obj create alloc_pd
  $ devx-cli layout --names

JSON (--json, -j): every value is a number (byte strings longer than 64 bits
are hex strings); errors are {\"error\": …, \"kind\": …} with a non-zero exit."
)]
struct Cli {
    /// Device to use; default: the first real mlx5 device, else the emulated sim0.
    #[arg(long, global = true)]
    device: Option<String>,
    /// Record every command sent to the device into this fixture file.
    #[arg(long, global = true, value_name = "FILE")]
    record: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List devices (real and emulated).
    Devices {
        #[arg(long, short)]
        json: bool,
    },
    /// One line per device, like `rdma dev`.
    #[command(after_help = "Example:\n  $ devx-cli dev -j")]
    Dev {
        #[arg(long, short)]
        json: bool,
    },
    /// Port state, physical state and MTU per port, like `rdma link`.
    #[command(after_help = "Example:\n  $ devx-cli link")]
    Link {
        #[arg(long, short)]
        json: bool,
    },
    /// Live firmware objects of the device, like `rdma res` and `rdma res show qp`.
    #[command(after_help = rdma_cmd::RES_HELP)]
    Res {
        /// Only objects of this kind (qp, cq, pd, mr, umem, uar, srq, …); every
        /// kind's count without it.
        kind: Option<String>,
        #[arg(long, short)]
        json: bool,
    },
    /// Show a capability page by name, like `mlx5ctl DEV cap --id=ROCE --mode=max`.
    #[command(after_help = "Example:\n  $ devx-cli caps --page roce --mode max")]
    Caps {
        #[arg(long, short)]
        json: bool,
        /// Show every field, zero or not.
        #[arg(long)]
        all: bool,
        /// Capability page: general, ethernet_offloads, odp, atomic, roce,
        /// flow_table, general_2 (any case; a unique prefix such as `eth` works).
        #[arg(long, default_value = "general")]
        page: String,
        /// Maximum supported values or the current ones.
        #[arg(long, value_enum, default_value = "cur")]
        mode: device_cmd::CapMode,
    },
    /// Run a raw general command given as hex; prints the outbox decoded.
    #[command(after_help = "\
An opcode with no known output layout is sent with a 16-byte outbox (status
and syndrome) and the device's answer is shown.
Example:
  $ devx-cli cmd 01000000000000010000000000000000")]
    Cmd {
        /// The inbox as hex (or `-` for stdin).
        hex: String,
        /// Outbox length in bytes (default: the opcode's output layout size).
        #[arg(long)]
        outlen: Option<usize>,
        #[arg(long, short)]
        json: bool,
    },
    /// Show one PRM layout (any case), or all of them.
    #[command(
        after_help = "Examples:\n  $ devx-cli layout CREATE_CQ_IN\n  $ devx-cli layout --names"
    )]
    Layout {
        name: Option<String>,
        /// Layout names only.
        #[arg(long)]
        names: bool,
        #[arg(long, short)]
        json: bool,
    },
    /// Build a mailbox from field=value pairs.
    #[command(after_help = "\
Numbers are decimal or 0x-hex; a leading zero (0800) is refused as ambiguous.
Example:
  $ devx-cli encode create_cq_in opcode=0x400 cq_context.log_cq_size=5")]
    Encode {
        layout: String,
        /// field=value pairs; values in decimal or 0x-hex, byte fields in hex.
        fields: Vec<String>,
    },
    /// Decode a mailbox given as hex (or `-` for stdin).
    #[command(
        after_help = "Example:\n  $ devx-cli decode alloc_pd_out 05000000000000420000000000000000"
    )]
    Decode {
        layout: String,
        hex: String,
        /// Print every field, not only the non-zero ones.
        #[arg(long)]
        all: bool,
        #[arg(long, short)]
        json: bool,
    },
    /// Create, query, modify and destroy firmware objects by layout and field name.
    Obj(obj_cmd::ObjArgs),
    /// Run devx-cli commands line by line from stdin, sharing one device and
    /// its objects (a prompt appears when stdin is a terminal).
    #[command(after_help = session::HELP)]
    Shell,
    /// Run the lines of FILE (`-`: stdin) as `shell` does, stopping at the first error.
    #[command(after_help = session::HELP)]
    Script { file: String },
    /// Check a fixture, or replay it against a live device with --device.
    #[command(after_help = replay_cmd::HELP)]
    Replay {
        file: String,
        #[arg(long, short)]
        json: bool,
    },
    /// Device identity, limits and ports, like `ibv_devinfo -v`.
    #[command(
        after_help = "Examples:\n  $ devx-cli devinfo -v -d sim0 -i 1\n  $ devx-cli devinfo -l"
    )]
    Devinfo {
        #[arg(long, short)]
        json: bool,
        /// Accepted for `ibv_devinfo -v` habits: the report is always verbose.
        #[arg(short, long)]
        verbose: bool,
        /// Device (as `ibv_devinfo -d`; same as the global --device).
        #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
        ib_dev: Option<String>,
        /// Only this port.
        #[arg(short = 'i', long = "ib-port", value_name = "PORT")]
        ib_port: Option<u8>,
        /// Only list device names.
        #[arg(short, long)]
        list: bool,
    },
    /// Measure the library: `mailbox`, `cmd`, `kernel`, `datapath` (on emulated devices).
    #[command(after_help = "Example:\n  $ devx-cli bench mailbox --iterations 1000 --json")]
    Bench {
        what: bench::BenchKind,
        #[arg(long, short)]
        json: bool,
        /// Iterations, at least 1 (default depends on the benchmark).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        iterations: Option<u64>,
        /// `datapath` only: build the C twins in tools/bench-c with `cc`
        /// (or $CC), run them and the benchmark alternately, print ratios.
        #[arg(long)]
        compare_c: bool,
        /// Runs of each side for `--compare-c`.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
        runs: u32,
        /// `wire` only: 1 MiB WRITEs kept in flight, 1 to 256 (default: all
        /// of them, 64 with the default iterations, posted at once).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
        depth: Option<u32>,
    },
}

impl Command {
    /// The subcommand's name, for messages.
    fn name(&self) -> &'static str {
        match self {
            Command::Devices { .. } => "devices",
            Command::Dev { .. } => "dev",
            Command::Link { .. } => "link",
            Command::Res { .. } => "res",
            Command::Caps { .. } => "caps",
            Command::Cmd { .. } => "cmd",
            Command::Layout { .. } => "layout",
            Command::Encode { .. } => "encode",
            Command::Decode { .. } => "decode",
            Command::Obj(_) => "obj",
            Command::Shell => "shell",
            Command::Script { .. } => "script",
            Command::Replay { .. } => "replay",
            Command::Devinfo { .. } => "devinfo",
            Command::Bench { .. } => "bench",
        }
    }

    /// Whether `--json` was asked for.
    fn json(&self) -> bool {
        match self {
            Command::Devices { json }
            | Command::Dev { json }
            | Command::Link { json }
            | Command::Res { json, .. }
            | Command::Caps { json, .. }
            | Command::Cmd { json, .. }
            | Command::Layout { json, .. }
            | Command::Decode { json, .. }
            | Command::Replay { json, .. }
            | Command::Devinfo { json, .. }
            | Command::Bench { json, .. } => *json,
            Command::Obj(o) => o.json(),
            Command::Encode { .. } | Command::Shell | Command::Script { .. } => false,
        }
    }

    /// Whether the command can use `--device` (and `--record` the commands it sends).
    fn uses_device(&self) -> (bool, bool) {
        match self {
            Command::Layout { .. }
            | Command::Encode { .. }
            | Command::Decode { .. }
            | Command::Devices { .. }
            | Command::Bench { .. } => (false, false),
            // Listings open devices of their own (every one unless --device);
            // replay sends the fixture's commands, not a session's.
            Command::Dev { .. }
            | Command::Link { .. }
            | Command::Res { .. }
            | Command::Replay { .. } => (true, false),
            _ => (true, true),
        }
    }
}

fn run(cli: Cli) -> CliResult {
    let (device_ok, record_ok) = cli.command.uses_device();
    let cmd = cli.command.name();
    if cli.device.is_some() && !device_ok {
        return Err(format!(
            "{cmd} uses no device; --device does not apply to it"
        ));
    }
    if cli.record.is_some() && !record_ok {
        return Err(format!(
            "--record does not apply to {cmd}; it records what caps, cmd, obj, devinfo, \
             shell and script send"
        ));
    }
    let mut device = cli.device;
    if let Command::Devinfo {
        ib_dev: Some(d), ..
    } = &cli.command
    {
        if device.as_ref().is_some_and(|g| g != d) {
            return Err(format!(
                "devinfo -d {d} and --device {} disagree",
                device.unwrap_or_default()
            ));
        }
        device = Some(d.clone());
    }
    session::configure(device.as_deref(), cli.record.as_deref());
    let result = dispatch(cli.command);
    session::close(result)
}

/// Runs one command (also each line of a shell or script).
fn dispatch(command: Command) -> CliResult {
    match command {
        Command::Devices { json } => device_cmd::devices(json),
        Command::Dev { json } => rdma_cmd::dev(json),
        Command::Link { json } => rdma_cmd::link(json),
        Command::Res { kind, json } => rdma_cmd::res(kind.as_deref(), json),
        Command::Devinfo {
            json,
            ib_port,
            list,
            ..
        } => devinfo_cmd::devinfo(json, ib_port, list),
        Command::Caps {
            json,
            all,
            page,
            mode,
        } => device_cmd::caps(&page, mode, json, all),
        Command::Cmd { hex, outlen, json } => device_cmd::cmd(&hex, outlen, json),
        Command::Layout { name, names, json } => layout_cmd::layout(name.as_deref(), names, json),
        Command::Encode { layout, fields } => layout_cmd::encode(&layout, &fields),
        Command::Decode {
            layout,
            hex,
            all,
            json,
        } => layout_cmd::decode(&layout, &hex, all, json),
        Command::Bench {
            what: bench::BenchKind::Datapath,
            json,
            iterations,
            compare_c: true,
            runs,
            ..
        } => bench_datapath::compare_c(iterations.unwrap_or(1_000_000), runs, json),
        Command::Bench {
            compare_c: true, ..
        } => Err("--compare-c is for `bench datapath` (the C twins are data-path loops)".into()),
        Command::Bench {
            what,
            depth: Some(_),
            ..
        } if !matches!(what, bench::BenchKind::Wire) => {
            Err("--depth is for `bench wire` (1 MiB WRITEs in flight)".into())
        }
        Command::Bench {
            what,
            json,
            iterations,
            depth,
            ..
        } => bench::run(what, json, iterations, depth),
        Command::Obj(args) => obj_cmd::run(args),
        Command::Shell => session::shell(),
        Command::Script { file } => session::script(&file),
        Command::Replay { file, json } => replay_cmd::run(&file, session::device_name(), json),
    }
}

/// Set by a command whose JSON output already carries its failure (a
/// replay report), so that stdout holds one JSON value.
pub static JSON_REPORTED_ERROR: AtomicBool = AtomicBool::new(false);

/// An error for programs reading `--json` output: one object on stdout.
fn json_error(message: &str, kind: &str) {
    println!(
        "{{\"error\": {}, \"kind\": {}}}",
        fields::json_str(message),
        fields::json_str(kind)
    );
}

/// Whether the raw arguments ask for JSON (for errors before parsing succeeds).
fn args_want_json() -> bool {
    std::env::args().skip(1).any(|a| a == "--json" || a == "-j")
}

fn main() -> ExitCode {
    // Die quietly when a pipe reader (`| head`) goes away, like other Unix tools.
    // SAFETY: called first thing in main, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version, and `devx-cli` alone (help, exit 2): clap's own output.
        Err(e)
            if !e.use_stderr()
                || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            e.exit()
        }
        Err(e) => {
            let text = session::clap_message(&e);
            if args_want_json() {
                json_error(&text, "usage");
            }
            eprintln!("devx-cli: {}", e.render().to_string().trim_end());
            return ExitCode::from(2);
        }
    };
    let json = cli.command.json();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            if json && !JSON_REPORTED_ERROR.load(Ordering::Relaxed) {
                json_error(&msg, "failed");
            }
            eprintln!("devx-cli: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
