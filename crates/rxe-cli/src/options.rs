//! Options that `pingpong` and `perf` share, checked alike: `-i`
//! (`--ib-port`), `-m` (`--mtu`) and `--timeout`.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use rxe_verbs::PathMtu;

/// `-i`: an rxe device has port 1 only.
pub fn check_ib_port(ib_port: u8) -> Result<()> {
    if ib_port != rxe_verbs::PORT {
        bail!("invalid --ib-port {ib_port}: an rxe device has port 1 only");
    }
    Ok(())
}

/// `-m`: one of the five IB MTUs, in bytes.
pub fn path_mtu(bytes: u32) -> Result<PathMtu> {
    PathMtu::from_bytes(bytes)
        .ok_or_else(|| anyhow!("invalid MTU {bytes}: use 256, 512, 1024, 2048 or 4096"))
}

/// `--timeout SECS`: a positive, finite number of seconds, or no bound.
pub fn timeout(secs: Option<f64>) -> Result<Option<Duration>> {
    match secs {
        None => Ok(None),
        Some(t) if t.is_finite() && t > 0.0 => Ok(Some(Duration::from_secs_f64(t))),
        Some(t) => bail!("invalid timeout {t}: a positive number of seconds"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_options_are_checked() {
        assert!(check_ib_port(1).is_ok());
        let e = check_ib_port(2).unwrap_err().to_string();
        assert_eq!(e, "invalid --ib-port 2: an rxe device has port 1 only");
        assert_eq!(path_mtu(4096).unwrap(), PathMtu::Mtu4096);
        assert!(path_mtu(1500).is_err());
        assert_eq!(timeout(None).unwrap(), None);
        assert_eq!(
            timeout(Some(0.5)).unwrap(),
            Some(Duration::from_millis(500))
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(timeout(Some(bad)).is_err(), "{bad}");
        }
    }
}
