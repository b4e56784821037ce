//! The rxe side of `rxe bench`: `rxe perf` (this same executable) as a
//! server and a client, two child processes on 127.0.0.150 and .151, as a
//! user runs them; or one of Debian's perftest tools over the drop-in
//! libibverbs (`rxe exec --ip .. -- ib_write_bw ..`, [`Program::Perftest`]),
//! the same way. Each child's CPU time is what `getrusage
//! (RUSAGE_CHILDREN)` gains when it is reaped, every thread of its device
//! counted (driver, monitor, events), and its start-up and TCP exchange
//! with them.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::cpu;

pub const SERVER_IP: &str = "127.0.0.150";
pub const CLIENT_IP: &str = "127.0.0.151";
/// What `rxe perf`'s server prints once it listens (as perftest does).
const LISTENING: &str = "Waiting for client to connect";
/// How often the server's TCP port is looked at while waiting for it.
const LISTEN_POLL: Duration = Duration::from_millis(20);

/// Whether a TCP socket of this host listens on `port` (`/proc/net/tcp`
/// and `tcp6`: the local address's port, state 0A).
fn tcp_listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
            })
    })
}

/// One client table row and each side's CPU time.
#[derive(Debug, Clone)]
pub struct PerfRun {
    /// The numbers of the client's table row (`#bytes` first).
    pub row: Vec<f64>,
    pub client_cpu: Duration,
    pub server_cpu: Duration,
}

impl PerfRun {
    /// A column of the row.
    pub fn col(&self, i: usize) -> Result<f64> {
        self.row
            .get(i)
            .copied()
            .ok_or_else(|| anyhow!("the table row has no column {i}: {:?}", self.row))
    }
}

/// A child killed if it is still running when dropped (a failed run).
struct Reaped(Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn lines(child: &mut Child) -> Receiver<String> {
    let (tx, rx) = channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// What runs on each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// `rxe perf`, this executable's perftest.
    RxePerf,
    /// A perftest tool (`ib_write_bw`, `ib_write_lat`, ...) found on the
    /// `PATH`, run over rxe's drop-in libibverbs by `rxe exec` on device
    /// `rxe0` (GID index 0, no frequency check).
    Perftest(&'static str),
}

impl Program {
    /// The arguments of this executable for one side: `args`, then where
    /// it sits and the TCP port.
    fn argv(self, args: &[String], ip: &str, port: u16) -> Vec<String> {
        let port = port.to_string();
        let mut v: Vec<String> = match self {
            Program::RxePerf => vec!["perf".into()],
            Program::Perftest(tool) => [
                "exec", "--ip", ip, "--", tool, "-d", "rxe0", "-x", "0", "-F",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        };
        v.extend(args.iter().cloned());
        let place: &[&str] = match self {
            Program::RxePerf => &["--ip", ip, "-p", &port, "--timeout", "20"],
            Program::Perftest(_) => &["-p", &port],
        };
        v.extend(place.iter().map(|s| s.to_string()));
        v
    }

    pub fn name(self) -> &'static str {
        match self {
            Program::RxePerf => "rxe perf",
            Program::Perftest(tool) => tool,
        }
    }
}

/// Runs `program ARGS` as server (with `server_args` too) and client on
/// TCP port `port`, both with the environment variables `env`; every wait
/// bounded by `limit`.
pub fn run(
    exe: &Path,
    program: Program,
    args: &[String],
    server_args: &[String],
    env: &[(&str, &str)],
    port: u16,
    limit: Duration,
) -> Result<PerfRun> {
    let common = |ip: &str| program.argv(args, ip, port);
    let name = program.name();
    let mut server = Command::new(exe)
        .args(common(SERVER_IP))
        .args(server_args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start the {name} server"))?;
    let out = lines(&mut server);
    let mut server = Reaped(Some(server));
    let end = Instant::now() + limit;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match out.recv_timeout(left.min(LISTEN_POLL)) {
            Ok(l) if l.contains(LISTENING) => break,
            Ok(_) => {}
            // A C program's stdout is a buffered pipe here: perftest's
            // banner comes at its exit. Its socket tells.
            Err(RecvTimeoutError::Timeout) if tcp_listening(port) => break,
            Err(RecvTimeoutError::Timeout) if Instant::now() < end => {}
            Err(RecvTimeoutError::Timeout) => bail!("the {name} server did not listen"),
            Err(RecvTimeoutError::Disconnected) => {
                let err = server
                    .0
                    .take()
                    .and_then(|c| c.wait_with_output().ok())
                    .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_default();
                bail!("the {name} server ended: {}", err.trim());
            }
        }
    }
    let before = cpu::children();
    let mut cargs = common(CLIENT_IP);
    cargs.push(SERVER_IP.to_string());
    let client = Command::new(exe)
        .args(&cargs)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start the {name} client"))?;
    let mut client = Reaped(Some(client));
    let c = wait(&mut client, end, name)?;
    let after_client = cpu::children();
    let s = wait(&mut server, end, name)?;
    let after_server = cpu::children();
    let text = String::from_utf8_lossy(&c.stdout);
    if !c.status.success() || !s.status.success() {
        bail!(
            "{name} {} failed: client {}, server {}: {}",
            args.join(" "),
            c.status,
            s.status,
            String::from_utf8_lossy(&c.stderr).trim()
        );
    }
    Ok(PerfRun {
        row: table_row(&text).ok_or_else(|| anyhow!("no table in the client's output:\n{text}"))?,
        client_cpu: after_client.saturating_sub(before),
        server_cpu: after_server.saturating_sub(after_client),
    })
}

/// Waits for a child until `end`, then kills it. Its pipes are drained
/// meanwhile: `rxe perf -q 1000` prints a line per QP, more than a pipe
/// holds, and would block on a full one.
fn wait(child: &mut Reaped, end: Instant, name: &str) -> Result<std::process::Output> {
    let Some(mut c) = child.0.take() else {
        bail!("no child")
    };
    fn drain(r: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    }
    let (out, err) = (drain(c.stdout.take()), drain(c.stderr.take()));
    loop {
        match c.try_wait()? {
            Some(status) => {
                return Ok(std::process::Output {
                    status,
                    stdout: out.join().unwrap_or_default(),
                    stderr: err.join().unwrap_or_default(),
                })
            }
            None if Instant::now() >= end => {
                let _ = c.kill();
                let _ = c.wait();
                bail!("{name} did not finish in time");
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// The numbers of the row under perftest's `#bytes` header.
pub fn table_row(text: &str) -> Option<Vec<f64>> {
    let mut it = text.lines();
    it.find(|l| l.trim_start().starts_with("#bytes"))?;
    let row: Vec<f64> = it
        .next()?
        .split_whitespace()
        .map(|w| w.parse::<f64>())
        .collect::<std::result::Result<_, _>>()
        .ok()?;
    (!row.is_empty()).then_some(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_side_runs_its_program_where_it_sits() {
        let args = ["-s".to_string(), "64".to_string()];
        assert_eq!(
            Program::RxePerf.argv(&args, "127.0.0.150", 18660),
            [
                "perf",
                "-s",
                "64",
                "--ip",
                "127.0.0.150",
                "-p",
                "18660",
                "--timeout",
                "20"
            ]
        );
        assert_eq!(
            Program::Perftest("ib_write_bw").argv(&args, "127.0.0.151", 18661),
            [
                "exec",
                "--ip",
                "127.0.0.151",
                "--",
                "ib_write_bw",
                "-d",
                "rxe0",
                "-x",
                "0",
                "-F",
                "-s",
                "64",
                "-p",
                "18661"
            ]
        );
    }

    #[test]
    fn a_listening_socket_is_seen() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(tcp_listening(port));
        drop(l);
        assert!(!tcp_listening(port));
    }

    #[test]
    fn the_row_under_the_header_is_read_and_nothing_else() {
        let bw = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 1048576    100          6.51               6.40\t\t   0.000763\n---";
        assert_eq!(
            table_row(bw),
            Some(vec![1048576.0, 100.0, 6.51, 6.40, 0.000763])
        );
        assert_eq!(table_row("no table here"), None);
        assert_eq!(table_row(" #bytes x\n not numbers"), None);
        assert_eq!(table_row(" #bytes x"), None);
    }
}
