//! Where each emulated device's network port lives.
//!
//! * `DEVX_SIM_CONFIG=path`: a file with one device per line,
//!   `sim1 127.0.0.2` or `sim1 127.0.0.2:4792` (`#` starts a comment). The
//!   entries for devices of other processes tell this one which UDP port to
//!   send to for their address (4791 otherwise).
//! * `DEVX_SIM_ADDR_<dev>=address[:port]` (`DEVX_SIM_ADDR_sim1=127.0.0.2`):
//!   the address of one device; it wins over the file.
//!
//! A device with no address has no network port; it still reaches the
//! devices of its own process over the in-memory link.

use std::net::{IpAddr, SocketAddr};

use super::flow::{canonical, ROCE_V2_PORT};

pub(crate) const CONFIG_VAR: &str = "DEVX_SIM_CONFIG";
pub(crate) const ADDR_VAR_PREFIX: &str = "DEVX_SIM_ADDR_";
/// `DEVX_SIM_PCAP_<dev>=path`: capture what the device sends and receives.
pub(crate) const PCAP_VAR_PREFIX: &str = "DEVX_SIM_PCAP_";

/// Device names and their UDP addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NetConfig {
    entries: Vec<(String, SocketAddr)>,
}

/// `address` or `address:port` (IPv6 with a port in brackets).
pub(crate) fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, ROCE_V2_PORT))
        .map_err(|_| format!("'{s}' is not an IP address or address:port"))
}

impl NetConfig {
    /// Parses a config file's text; errors name the line.
    pub(crate) fn parse(text: &str) -> Result<NetConfig, String> {
        let mut c = NetConfig::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(dev), Some(addr), None) = (words.next(), words.next(), words.next()) else {
                return Err(format!(
                    "line {}: expected 'device address[:port]', got '{line}'",
                    n + 1
                ));
            };
            let addr = parse_addr(addr).map_err(|e| format!("line {}: {e}", n + 1))?;
            c.set(dev, addr);
        }
        Ok(c)
    }

    /// The configuration in the environment (file, then per-device
    /// variables over it).
    pub(crate) fn from_env() -> Result<NetConfig, String> {
        let mut c = match std::env::var_os(CONFIG_VAR) {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    format!(
                        "{CONFIG_VAR}={}: {e}",
                        std::path::Path::new(&path).display()
                    )
                })?;
                NetConfig::parse(&text)
                    .map_err(|e| format!("{CONFIG_VAR}={}: {e}", path.to_string_lossy()))?
            }
            None => NetConfig::default(),
        };
        for (k, v) in std::env::vars_os() {
            let (Some(k), Some(v)) = (k.to_str(), v.to_str()) else {
                continue;
            };
            if let Some(dev) = k.strip_prefix(ADDR_VAR_PREFIX) {
                let addr = parse_addr(v).map_err(|e| format!("{k}: {e}"))?;
                c.set(&dev.to_ascii_lowercase(), addr);
            }
        }
        Ok(c)
    }

    pub(crate) fn set(&mut self, dev: &str, addr: SocketAddr) {
        self.entries.retain(|(d, _)| d != dev);
        self.entries.push((dev.to_string(), addr));
    }

    /// The address device `dev` binds.
    pub(crate) fn addr_of(&self, dev: &str) -> Option<SocketAddr> {
        self.entries.iter().find(|(d, _)| d == dev).map(|(_, a)| *a)
    }

    /// Where to send a packet for the device at `ip`.
    pub(crate) fn peer(&self, ip: IpAddr) -> SocketAddr {
        let ip = canonical(ip);
        let port = self
            .entries
            .iter()
            .find(|(_, a)| canonical(a.ip()) == ip)
            .map_or(ROCE_V2_PORT, |(_, a)| a.port());
        SocketAddr::new(ip, port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_lines_and_errors() {
        let c =
            NetConfig::parse("# devices\nsim0 127.0.0.2\n\nsim1 127.0.0.3:5000 # peer\n").unwrap();
        assert_eq!(c.addr_of("sim0"), Some("127.0.0.2:4791".parse().unwrap()));
        assert_eq!(c.peer("127.0.0.3".parse().unwrap()).port(), 5000);
        assert_eq!(c.peer("127.0.0.9".parse().unwrap()).port(), ROCE_V2_PORT);
        let e = NetConfig::parse("sim0 127.0.0.2\nsim1 nowhere\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("nowhere"), "{e}");
        let e = NetConfig::parse("sim0\n").unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        assert_eq!(
            parse_addr("[::1]:7").unwrap(),
            "[::1]:7".parse::<SocketAddr>().unwrap()
        );
    }
}
