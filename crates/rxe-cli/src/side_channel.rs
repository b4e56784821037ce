//! The TCP side channel that the pingpong tools and perftest exchange
//! their QP numbers, PSNs and keys over: accepting and connecting with an
//! optional deadline, the random initial PSN each side announces, and the
//! check of the GIDs the peer announced.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rxe_verbs::Gid;

/// Waits for one client, at most `timeout` (without end if `None`).
pub fn accept(listener: &TcpListener, timeout: Option<Duration>) -> Result<TcpStream> {
    let Some(t) = timeout else {
        return Ok(listener.accept().context("accept() failed")?.0);
    };
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + t;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    bail!("no client connected within {:.1} s", t.as_secs_f64());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e).context("accept() failed"),
        }
    }
}

/// Connects to `host:port`, IPv4 addresses first: the tools' servers
/// listen on IPv4 only, even when their RoCE traffic uses an IPv6 GID.
pub fn connect_to(host: &str, port: u16, timeout: Option<Duration>) -> Result<TcpStream> {
    let mut addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?
        .collect();
    addrs.sort_by_key(|a| !a.is_ipv4());
    let mut last = None;
    for a in &addrs {
        let r = match timeout {
            Some(t) => TcpStream::connect_timeout(a, t),
            None => TcpStream::connect(a),
        };
        match r {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => Err(e).with_context(|| format!("couldn't connect to {host}:{port}")),
        None => bail!("couldn't connect to {host}:{port}: no address"),
    }
}

/// Reads until `buf` is full or the peer closes; how many bytes came
/// (fewer than `buf.len()` only at end of stream). Unlike
/// `Read::read_exact`, a short message says how short it was.
pub fn read_full<S: Read>(stream: &mut S, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Why this side cannot reach the QPs the peer described.
#[derive(Debug, thiserror::Error)]
pub enum PeerGidError {
    #[error("the peer sent no GID: RoCE needs one, run the peer with {flag} <gid index>")]
    Missing {
        /// The peer tool's GID index option (`-g`, `-x`).
        flag: &'static str,
    },
    #[error("the peer's GID is of the other IP family than ours ({flag} {gid_index})")]
    OtherFamily { flag: &'static str, gid_index: u8 },
}

/// Refuses peer GIDs that RoCEv2 from `mine` (of index `gid_index`)
/// cannot reach: none at all, or of the other IP family. `flag` is the
/// tools' GID index option, for the hint.
pub fn check_peer_gids(
    mine: Gid,
    gid_index: u8,
    theirs: impl IntoIterator<Item = Gid>,
    flag: &'static str,
) -> Result<(), PeerGidError> {
    let v4 = mine.to_ip().is_ipv4();
    let theirs: Vec<Gid> = theirs.into_iter().collect();
    if theirs.contains(&Gid::ZERO) {
        return Err(PeerGidError::Missing { flag });
    }
    if theirs.iter().any(|g| (*g).to_ip().is_ipv4() != v4) {
        return Err(PeerGidError::OtherFamily { flag, gid_index });
    }
    Ok(())
}

/// A random 24-bit initial PSN (the tools use `lrand48() & 0xffffff`);
/// `salt` tells apart the QPs of one run.
pub fn random_psn(salt: u64) -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(salt);
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() & 0xff_ffff) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_gids_must_be_there_and_of_our_family() {
        let v4 = Gid::from("10.0.0.1".parse::<std::net::IpAddr>().unwrap());
        let v6 = Gid::from("fd00::1".parse::<std::net::IpAddr>().unwrap());
        assert!(check_peer_gids(v4, 1, [v4, v4], "-g").is_ok());
        let e = check_peer_gids(v4, 1, [v4, Gid::ZERO], "-x").unwrap_err();
        assert!(matches!(e, PeerGidError::Missing { flag: "-x" }), "{e}");
        let e = check_peer_gids(v4, 3, [v6], "-g").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the peer's GID is of the other IP family than ours (-g 3)"
        );
    }
}
