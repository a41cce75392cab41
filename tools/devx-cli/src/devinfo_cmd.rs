//! `devinfo`: what `ibv_devinfo -v` shows, gathered through the verbs layer.

use crate::device_cmd::choose_device;

/// Prints the device's identity, limits and ports (state, MTU, link layer,
/// GID table), as text or one JSON object.
pub fn devinfo(device: Option<&str>, json: bool) -> Result<(), String> {
    let dev = choose_device(device)?;
    let ctx = verbs::Context::open(&dev).map_err(|e| e.to_string())?;
    let report = verbs::DeviceReport::collect(&ctx).map_err(|e| e.to_string())?;
    if json {
        println!("{}", report.to_json());
    } else {
        print!("{report}");
    }
    Ok(())
}
