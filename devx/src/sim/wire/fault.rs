//! Faults injected into what a port sends, for testing the transport:
//! a seeded fraction of packets dropped, duplicated, or held back (sent
//! after the next packet, or after a delay when none follows).
//!
//! `DEVX_SIM_FAULT_<dev>=drop=0.1,dup=0.05,reorder=0.1,hold_us=500,seed=7,to=127.0.0.3`
//! (every key optional; `to` limits the faults to the link towards one
//! address).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// `DEVX_SIM_FAULT_<dev>`: the faults of one device's port.
pub(crate) const FAULT_VAR_PREFIX: &str = "DEVX_SIM_FAULT_";
const DEFAULT_HOLD: Duration = Duration::from_millis(1);
/// Spreads a small seed over the generator's 64 bits (the golden ratio).
const SEED_SPREAD: u64 = 0x9e37_79b9_7f4a_7c15;
/// xorshift64*'s output multiplier (Vigna).
const XORSHIFT_STAR: u64 = 0x2545_f491_4f6c_dd1d;
/// Bits of a uniform f64 mantissa.
const F64_BITS: u32 = 53;

/// What to inject.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FaultSpec {
    pub(crate) drop: f64,
    pub(crate) dup: f64,
    pub(crate) reorder: f64,
    /// How long a held packet waits for one to overtake it.
    pub(crate) hold: Duration,
    pub(crate) seed: u64,
    /// Only packets to this address.
    pub(crate) to: Option<IpAddr>,
}

impl FaultSpec {
    /// Parses `key=value,…`; errors name the bad part.
    pub(crate) fn parse(s: &str) -> Result<FaultSpec, String> {
        let mut f = FaultSpec {
            drop: 0.0,
            dup: 0.0,
            reorder: 0.0,
            hold: DEFAULT_HOLD,
            seed: 1,
            to: None,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("'{part}' is not key=value"))?;
            let fraction = || -> Result<f64, String> {
                let x: f64 = v
                    .parse()
                    .map_err(|_| format!("{k}: '{v}' is not a number"))?;
                if (0.0..=1.0).contains(&x) {
                    Ok(x)
                } else {
                    Err(format!("{k}: {x} is not a fraction in 0..=1"))
                }
            };
            match k {
                "drop" => f.drop = fraction()?,
                "dup" => f.dup = fraction()?,
                "reorder" => f.reorder = fraction()?,
                "hold_us" => {
                    let us: u64 = v
                        .parse()
                        .map_err(|_| format!("hold_us: '{v}' is not a count"))?;
                    f.hold = Duration::from_micros(us);
                }
                "seed" => {
                    f.seed = v
                        .parse()
                        .map_err(|_| format!("seed: '{v}' is not a count"))?
                }
                "to" => {
                    f.to = Some(
                        v.parse()
                            .map_err(|_| format!("to: '{v}' is not an address"))?,
                    )
                }
                _ => {
                    return Err(format!(
                        "unknown fault '{k}' (drop, dup, reorder, hold_us, seed, to)"
                    ))
                }
            }
        }
        if f.drop + f.dup + f.reorder > 1.0 {
            return Err("drop + dup + reorder exceeds 1".into());
        }
        Ok(f)
    }
}

/// What happens to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Send,
    Drop,
    Duplicate,
    /// Held back; [`Faults::hold`] keeps it.
    Hold,
}

/// The injector's state: its random sequence and the packet held back.
pub(crate) struct Faults {
    spec: FaultSpec,
    rng: u64,
    held: Vec<u8>,
    held_to: Option<(SocketAddr, Instant)>,
}

impl Faults {
    pub(crate) fn new(spec: FaultSpec) -> Faults {
        // xorshift must not start at 0.
        let rng = spec.seed.wrapping_mul(SEED_SPREAD) | 1;
        Faults {
            spec,
            rng,
            held: Vec::new(),
            held_to: None,
        }
    }

    fn next(&mut self) -> f64 {
        // xorshift64*: reproducible, dependency-free.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(XORSHIFT_STAR) >> (64 - F64_BITS)) as f64 / (1u64 << F64_BITS) as f64
    }

    /// The fate of a packet to `dst`.
    pub(crate) fn decide(&mut self, dst: SocketAddr) -> Fate {
        if self.spec.to.is_some_and(|t| t != dst.ip()) {
            return Fate::Send;
        }
        let r = self.next();
        let s = &self.spec;
        if r < s.drop {
            Fate::Drop
        } else if r < s.drop + s.dup {
            Fate::Duplicate
        } else if r < s.drop + s.dup + s.reorder && self.held_to.is_none() {
            Fate::Hold
        } else {
            Fate::Send
        }
    }

    /// Keeps `pkt` until the next packet overtakes it or its time is up.
    pub(crate) fn hold(&mut self, pkt: &[u8], dst: SocketAddr) {
        self.held.clear();
        self.held.extend_from_slice(pkt);
        self.held_to = Some((dst, Instant::now() + self.spec.hold));
    }

    /// The held packet, if it should go now (`overtaken`: another packet
    /// just went out).
    pub(crate) fn release(&mut self, overtaken: bool) -> Option<(&[u8], SocketAddr)> {
        let (dst, at) = self.held_to?;
        if !overtaken && Instant::now() < at {
            return None;
        }
        self.held_to = None;
        Some((&self.held, dst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_fractions() {
        let f = FaultSpec::parse("drop=0.1, dup=0.05,reorder=0.2,seed=9,to=127.0.0.3").unwrap();
        assert_eq!((f.drop, f.dup, f.reorder, f.seed), (0.1, 0.05, 0.2, 9));
        assert!(FaultSpec::parse("drop=2").unwrap_err().contains("drop"));
        assert!(FaultSpec::parse("loss=0.1")
            .unwrap_err()
            .contains("unknown"));
        assert!(FaultSpec::parse("drop=0.6,dup=0.6").is_err());
        let dst: SocketAddr = "127.0.0.3:4791".parse().unwrap();
        let mut x = Faults::new(FaultSpec::parse("drop=0.25,seed=3").unwrap());
        let drops = (0..10_000).filter(|_| x.decide(dst) == Fate::Drop).count();
        assert!((2000..3000).contains(&drops), "{drops}");
        let mut y = Faults::new(FaultSpec::parse("drop=0.5,to=127.0.0.9").unwrap());
        assert!((0..100).all(|_| y.decide(dst) == Fate::Send));
    }
}
