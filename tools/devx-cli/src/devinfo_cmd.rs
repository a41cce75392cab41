//! `devinfo`: what `ibv_devinfo -v` shows, gathered through the verbs layer.

/// Prints the device's identity, limits and ports (state, MTU, link layer,
/// GID table), as text or one JSON object.
pub fn devinfo(json: bool) -> Result<(), String> {
    // The session's context, so `--record` captures these queries too.
    let ctx = verbs::Context::from_devx(crate::session::context()?).map_err(|e| e.to_string())?;
    let report = verbs::DeviceReport::collect(&ctx).map_err(|e| e.to_string())?;
    if json {
        println!("{}", report.to_json());
    } else {
        print!("{report}");
    }
    Ok(())
}
