//! A seeded fault layer on the receive path, off unless asked: drops,
//! duplicates and reorders packets that arrived intact, so that tests and
//! benchmarks can show the transport's recovery (retransmission, duplicate
//! detection, sequence NAKs) on real sockets, the way the simulator's
//! network does in `rxe-core/tests/sim`.
//!
//! # Decisions, with their sources
//! - **After the ICRC check, before the engine.** A fault stands for what a
//!   network does to good packets (loss, duplication, reordering), not for
//!   corruption, which the ICRC check already catches and counts.
//! - **Reordering swaps neighbours**: a packet chosen for it is held and
//!   handed over after the next packet, or at the end of the receive call
//!   if none follows, so nothing is held longer than one batch.
//! - **Seeded** (xorshift64*): the same seed and the same arrivals give the
//!   same faults. Arrivals themselves depend on timing, so a run on real
//!   sockets is repeatable in its rates, not packet for packet.
//! - **Set by the environment** for whole programs: `RXE_FAULTS=drop=0.01,
//!   dup=0.001,reorder=0.01,seed=7` (rxe-verbs' `DeviceConfig`), also for
//!   programs on the drop-in libibverbs.

use std::fmt;
use std::str::FromStr;

/// Rates (0 to 1, of the packets that arrived intact) and the seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    pub drop: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub seed: u64,
}

/// Why a fault specification was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad fault specification {spec:?}: {why} (want drop=R,dup=R,reorder=R,seed=N with rates 0..=1)"
)]
pub struct FaultsError {
    spec: String,
    why: &'static str,
}

impl FromStr for Faults {
    type Err = FaultsError;

    fn from_str(s: &str) -> Result<Faults, FaultsError> {
        let err = |why| FaultsError {
            spec: s.to_string(),
            why,
        };
        let mut f = Faults {
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            seed: 1,
        };
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| err("an item without '='"))?;
            let rate = || {
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| err("a rate outside 0..=1"))
            };
            match k.trim() {
                "drop" => f.drop = rate()?,
                "dup" | "duplicate" => f.duplicate = rate()?,
                "reorder" => f.reorder = rate()?,
                "seed" => {
                    f.seed = v
                        .trim()
                        .parse()
                        .map_err(|_| err("a seed that is no number"))?
                }
                _ => return Err(err("an unknown key")),
            }
        }
        Ok(f)
    }
}

impl fmt::Display for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "drop={},dup={},reorder={},seed={}",
            self.drop, self.duplicate, self.reorder, self.seed
        )
    }
}

/// What happens to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Deliver,
    Drop,
    Duplicate,
    Reorder,
}

/// The layer's state: the generator.
#[derive(Debug)]
pub(crate) struct FaultState {
    faults: Faults,
    rng: u64,
}

impl FaultState {
    pub(crate) fn new(faults: Faults) -> FaultState {
        FaultState {
            faults,
            // xorshift needs a state other than 0.
            rng: faults.seed | 1,
        }
    }

    /// A uniform draw in [0, 1).
    fn unit(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(crate) fn fate(&mut self) -> Fate {
        let f = self.faults;
        let r = self.unit();
        if r < f.drop {
            Fate::Drop
        } else if r < f.drop + f.duplicate {
            Fate::Duplicate
        } else if r < f.drop + f.duplicate + f.reorder {
            Fate::Reorder
        } else {
            Fate::Deliver
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let f: Faults = "drop=0.01, dup=0.002,reorder=0.5,seed=9".parse().unwrap();
        assert_eq!(
            f,
            Faults {
                drop: 0.01,
                duplicate: 0.002,
                reorder: 0.5,
                seed: 9
            }
        );
        assert_eq!(f.to_string().parse::<Faults>().unwrap(), f);
        for bad in ["drop", "drop=2", "drop=-0.1", "loss=0.1", "seed=x"] {
            assert!(bad.parse::<Faults>().is_err(), "{bad}");
        }
        assert_eq!("".parse::<Faults>().unwrap().drop, 0.0);
    }

    #[test]
    fn rates_come_out_as_asked_and_seeds_repeat() {
        let f: Faults = "drop=0.1,dup=0.05,reorder=0.2,seed=3".parse().unwrap();
        let run = |f| {
            let mut s = FaultState::new(f);
            (0..100_000).map(|_| s.fate()).collect::<Vec<_>>()
        };
        let a = run(f);
        assert_eq!(a, run(f), "the same seed gives the same fates");
        let share = |x| a.iter().filter(|y| **y == x).count() as f64 / a.len() as f64;
        assert!((share(Fate::Drop) - 0.1).abs() < 0.01);
        assert!((share(Fate::Duplicate) - 0.05).abs() < 0.01);
        assert!((share(Fate::Reorder) - 0.2).abs() < 0.01);
        assert_ne!(a, run(Faults { seed: 4, ..f }));
    }
}
