//! `ibv_devinfo` over DEVX: device, firmware, GUIDs, limits, and every port
//! with its state, MTU, link layer and GID table.
//!
//! Usage: `cargo run -p verbs --example devinfo -- [DEVICE] [--json]`
//! (default device: the first mlx5 device, else the emulated `sim0`).

use std::process::ExitCode;

use verbs::{Context, DeviceReport};

fn main() -> ExitCode {
    // Die quietly when a pipe reader (`| head`) goes away, like other Unix tools.
    // SAFETY: first thing in main, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let mut json = false;
    let mut name = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => json = true,
            "-h" | "--help" => {
                println!("usage: devinfo [DEVICE] [--json]");
                return ExitCode::SUCCESS;
            }
            _ => name = Some(arg),
        }
    }
    match run(name.as_deref(), json) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinfo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(name: Option<&str>, json: bool) -> Result<(), Box<dyn std::error::Error>> {
    let device = match name {
        Some(n) => devx::Device::by_name(n)?,
        None => devx::Device::default_device()?.0,
    };
    let ctx = Context::open(&device)?;
    let report = DeviceReport::collect(&ctx)?;
    if json {
        println!("{}", report.to_json());
    } else {
        print!("{report}");
    }
    Ok(())
}
