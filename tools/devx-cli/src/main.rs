//! `devx-cli`: layouts, raw commands and objects on mlx5 devices (real or
//! emulated) from the shell.

mod bench;
mod bench_cmd;
mod bench_datapath;
mod bench_wire;
mod device_cmd;
mod devinfo_cmd;
mod layout_cmd;
mod net_info;
mod obj_cmd;
mod replay_cmd;
mod session;
mod values;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// What went wrong, as one line for the user.
pub type CliResult<T = ()> = Result<T, String>;

#[derive(Parser)]
#[command(
    name = "devx-cli",
    version,
    about = "mlx5 DEVX commands, objects and PRM layouts"
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
        #[arg(long)]
        json: bool,
    },
    /// Show the device's general capabilities by name.
    Caps {
        #[arg(long)]
        json: bool,
        /// Show every field, zero or not.
        #[arg(long)]
        all: bool,
    },
    /// Run a raw general command given as hex; prints the outbox decoded.
    Cmd {
        /// The inbox as hex (or `-` for stdin).
        hex: String,
        /// Outbox length in bytes (default: the opcode's output layout size).
        #[arg(long)]
        outlen: Option<usize>,
        #[arg(long)]
        json: bool,
    },
    /// Show one PRM layout, or all of them.
    Layout {
        name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Build a mailbox: `encode create_cq_in opcode=0x400 cq_context.log_cq_size=5`.
    Encode {
        layout: String,
        /// field=value pairs; values in decimal or 0x-hex, byte fields in hex.
        fields: Vec<String>,
    },
    /// Decode a mailbox given as hex (or `-` for stdin).
    Decode {
        layout: String,
        hex: String,
        /// Print every field, not only the non-zero ones.
        #[arg(long)]
        all: bool,
        #[arg(long)]
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
    /// Replay a fixture through the devx API and report each command; fails on any mismatch.
    Replay {
        file: String,
        #[arg(long)]
        json: bool,
    },
    /// Device identity, limits and ports, like `ibv_devinfo -v`.
    Devinfo {
        #[arg(long)]
        json: bool,
    },
    /// Measure the library: `mailbox`, `cmd`, `kernel`.
    Bench {
        what: bench::BenchKind,
        #[arg(long)]
        json: bool,
        /// Iterations (default depends on the benchmark).
        #[arg(long)]
        iterations: Option<u64>,
    },
}

fn run(cli: Cli) -> CliResult {
    session::configure(cli.device.as_deref(), cli.record.as_deref());
    if cli.record.is_some() && matches!(cli.command, Command::Replay { .. }) {
        return Err("--record cannot be used with replay".into());
    }
    let result = dispatch(cli.command);
    session::close(result)
}

/// Runs one command (also each line of a shell or script).
fn dispatch(command: Command) -> CliResult {
    match command {
        Command::Devices { json } => device_cmd::devices(json),
        Command::Devinfo { json } => devinfo_cmd::devinfo(json),
        Command::Caps { json, all } => device_cmd::caps(json, all),
        Command::Cmd { hex, outlen, json } => device_cmd::cmd(&hex, outlen, json),
        Command::Layout { name, json } => layout_cmd::layout(name.as_deref(), json),
        Command::Encode { layout, fields } => layout_cmd::encode(&layout, &fields),
        Command::Decode {
            layout,
            hex,
            all,
            json,
        } => layout_cmd::decode(&layout, &hex, all, json),
        Command::Bench {
            what,
            json,
            iterations,
        } => bench::run(what, json, iterations),
        Command::Obj(args) => obj_cmd::run(args),
        Command::Shell => session::shell(),
        Command::Script { file } => session::script(&file),
        Command::Replay { file, json } => replay_cmd::run(&file, json),
    }
}

fn main() -> ExitCode {
    // Die quietly when a pipe reader (`| head`) goes away, like other Unix tools.
    // SAFETY: called first thing in main, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprintln!("devx-cli: error: {}", session::clap_one_line(&e));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("devx-cli: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
