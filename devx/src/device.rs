//! Finding and opening devices: real mlx5 functions and the emulated ones.

use std::fmt;
use std::sync::Arc;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::provider::{DeviceInfo, Provider};

/// A device that can be opened: a real mlx5 function or an emulated ConnectX.
///
/// ```
/// # fn main() -> devx::Result<()> {
/// for d in devx::Device::list() {
///     println!("{} (emulated: {})", d.name(), d.is_emulated());
/// }
/// let dev = devx::Device::by_name("sim0")?; // or default_device()
/// let ctx = dev.open()?;
/// assert_eq!(ctx.device().name(), "sim0");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Device {
    provider: Arc<dyn Provider>,
    info: DeviceInfo,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device").field("info", &self.info).finish()
    }
}

impl Device {
    /// Wraps any provider as a device (record and replay use this).
    pub fn from_provider(provider: Arc<dyn Provider>) -> Device {
        let info = provider.info();
        Device { provider, info }
    }

    /// Every device the caller can open: real mlx5 devices first, then the
    /// emulated ones (`sim0` always exists).
    pub fn list() -> Vec<Device> {
        #[allow(unused_mut)] // Nothing is added without the emulator.
        let mut out = Device::list_real();
        #[cfg(feature = "emulator")]
        out.extend(crate::sim::devices().into_iter().map(Device::from_provider));
        out
    }

    /// The real mlx5 devices on this machine (possibly none).
    pub fn list_real() -> Vec<Device> {
        crate::kernel::discover_providers()
            .into_iter()
            .map(Device::from_provider)
            .collect()
    }

    /// The emulated device `simN`, created on first request. Without the
    /// `emulator` feature there is none: an error says so.
    pub fn emulated(name: &str) -> Result<Device> {
        #[cfg(feature = "emulator")]
        return crate::sim::device(name).map(Device::from_provider);
        #[cfg(not(feature = "emulator"))]
        return Err(Error::unsupported(
            format!("emulated device {name}"),
            NO_EMULATOR,
        ));
    }

    /// Finds a device by name: a real one, or `simN` (created on request).
    pub fn by_name(name: &str) -> Result<Device> {
        if let Some(d) = Device::list_real()
            .into_iter()
            .find(|d| d.info.name == name)
        {
            return Ok(d);
        }
        if is_sim_name(name) {
            return Device::emulated(name);
        }
        let known: Vec<String> = Device::list().into_iter().map(|d| d.info.name).collect();
        let emulated = if cfg!(feature = "emulator") {
            "emulated devices are sim0, sim1, …"
        } else {
            NO_EMULATOR
        };
        Err(Error::argument(format!(
            "no device named '{name}' (known: {}; {emulated})",
            known.join(", ")
        )))
    }

    /// The first real mlx5 device, else `sim0`. The flag says which.
    /// Without the `emulator` feature and with no mlx5 device, an error says
    /// there is none.
    pub fn default_device() -> Result<(Device, bool)> {
        match Device::list_real().into_iter().next() {
            Some(d) => Ok((d, false)),
            #[cfg(feature = "emulator")]
            None => Ok((Device::emulated("sim0")?, true)),
            #[cfg(not(feature = "emulator"))]
            None => Err(Error::Provider {
                provider: "kernel".into(),
                message: NO_EMULATOR.into(),
            }),
        }
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    pub fn is_emulated(&self) -> bool {
        self.info.emulated
    }

    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// Opens a context with its own DEVX uid.
    pub fn open(&self) -> Result<Context> {
        let inner = self.provider.open()?;
        Ok(Context::new(self.clone(), inner))
    }
}

/// Why there is no emulated device in a build without the emulator.
const NO_EMULATOR: &str = "no device; the emulated device needs the `emulator` feature";

fn is_sim_name(name: &str) -> bool {
    name.strip_prefix("sim")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}
