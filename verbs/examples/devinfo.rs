//! `ibv_devinfo` over DEVX: device, firmware, GUIDs, limits, and every port
//! with its state, MTU, link layer and GID table.
//!
//! Usage: `cargo run -p verbs --example devinfo -- [-v] [-d DEVICE] [-i PORT] [-l] [--json]`
//! (default device: the first mlx5 device, else the emulated `sim0`).

use std::process::ExitCode;

use verbs::{Context, DeviceReport};

const USAGE: &str = "usage: devinfo [-v] [-d DEVICE] [-i PORT] [-l] [--json]";

#[derive(Default)]
struct Opts {
    json: bool,
    list: bool,
    name: Option<String>,
    port: Option<u8>,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => o.json = true,
            // The report is always the verbose one.
            "-v" | "--verbose" => {}
            "-l" | "--list" => o.list = true,
            "-d" | "--ib-dev" => o.name = Some(args.next().ok_or("-d needs a device name")?),
            "-i" | "--ib-port" => {
                let v = args.next().ok_or("-i needs a port number")?;
                let port = v
                    .parse()
                    .map_err(|_| format!("-i {v}: not a port number"))?;
                o.port = Some(port);
            }
            // The device as a plain argument, as earlier versions took it.
            a if !a.starts_with('-') => o.name = Some(a.to_string()),
            a => return Err(format!("unknown option '{a}'")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    // Die quietly when a pipe reader (`| head`) goes away, like other Unix tools.
    // SAFETY: first thing in main, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    if std::env::args().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let opts = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("devinfo: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinfo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Opts) -> Result<(), Box<dyn std::error::Error>> {
    if o.list {
        let devices = devx::Device::list();
        println!("{} HCAs found:", devices.len());
        for d in devices {
            println!("\t{}", d.name());
        }
        return Ok(());
    }
    let device = match &o.name {
        Some(n) => devx::Device::by_name(n)?,
        None => devx::Device::default_device()?.0,
    };
    let ctx = Context::open(&device)?;
    let mut report = DeviceReport::collect(&ctx)?;
    if let Some(p) = o.port {
        if !report.ports.iter().any(|r| r.port == p) {
            return Err(format!("{} has no port {p}", report.name).into());
        }
        report.ports.retain(|r| r.port == p);
    }
    if o.json {
        println!("{}", report.to_json());
    } else {
        print!("{report}");
    }
    Ok(())
}
