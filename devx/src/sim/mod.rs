//! The embedded emulated ConnectX (placeholder until the emulator lands).

use std::sync::Arc;

use crate::{Error, Provider, Result};

pub fn device(name: &str) -> Result<Arc<dyn Provider>> {
    Err(Error::unsupported(format!("emulated device {name}"), "the emulator is not built yet"))
}

pub fn devices() -> Vec<Arc<dyn Provider>> {
    Vec::new()
}
