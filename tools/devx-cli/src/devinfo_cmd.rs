//! `devinfo`: what `ibv_devinfo -v` shows, gathered through the verbs layer,
//! with its `-d DEV`, `-i PORT` and `-l` flags.

use crate::fields::json_str;
use crate::CliResult;

/// Prints the device's identity, limits and ports (state, MTU, link layer,
/// GID table), as text or one JSON object; `port` keeps only that port;
/// `list` prints device names only, as `ibv_devinfo -l` does.
pub fn devinfo(json: bool, port: Option<u8>, list: bool) -> CliResult {
    if list {
        let names: Vec<String> = devx::Device::list()
            .iter()
            .map(|d| d.name().to_string())
            .collect();
        if json {
            let items: Vec<String> = names.iter().map(|n| json_str(n)).collect();
            println!("[{}]", items.join(", "));
        } else {
            println!("{} HCAs found:", names.len());
            for n in names {
                println!("\t{n}");
            }
        }
        return Ok(());
    }
    // The session's context, so `--record` captures these queries too.
    let ctx = verbs::Context::from_devx(crate::session::context()?).map_err(|e| e.to_string())?;
    let mut report = verbs::DeviceReport::collect(&ctx).map_err(|e| e.to_string())?;
    if let Some(p) = port {
        if !report.ports.iter().any(|r| r.port == p) {
            return Err(format!(
                "{} has no port {p} (ports 1..={})",
                report.name,
                report.ports.len()
            ));
        }
        report.ports.retain(|r| r.port == p);
    }
    if json {
        println!("{}", report.to_json());
    } else {
        print!("{report}");
    }
    Ok(())
}
