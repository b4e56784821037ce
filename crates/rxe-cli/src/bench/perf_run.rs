//! The rxe side of `rxe bench`: `rxe perf` (this same executable) as a
//! server and a client, two child processes on 127.0.0.150 and .151, as a
//! user runs them. Each child's CPU time is what `getrusage
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

/// Runs `rxe perf ARGS` as server (with `server_args` too) and client on
/// TCP port `port`, both with the environment variables `env`; every wait
/// bounded by `limit`.
pub fn run(
    exe: &Path,
    args: &[String],
    server_args: &[String],
    env: &[(&str, &str)],
    port: u16,
    limit: Duration,
) -> Result<PerfRun> {
    let common = |ip: &str| {
        let mut v = vec!["perf".to_string()];
        v.extend(args.iter().cloned());
        v.extend(
            ["--ip", ip, "-p", &port.to_string(), "--timeout", "20"]
                .iter()
                .map(|s| s.to_string()),
        );
        v
    };
    let mut server = Command::new(exe)
        .args(common(SERVER_IP))
        .args(server_args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start the rxe perf server")?;
    let out = lines(&mut server);
    let mut server = Reaped(Some(server));
    let end = Instant::now() + limit;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match out.recv_timeout(left) {
            Ok(l) if l.contains(LISTENING) => break,
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout) => bail!("the rxe perf server did not listen"),
            Err(RecvTimeoutError::Disconnected) => {
                let err = server
                    .0
                    .take()
                    .and_then(|c| c.wait_with_output().ok())
                    .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_default();
                bail!("the rxe perf server ended: {}", err.trim());
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
        .context("cannot start the rxe perf client")?;
    let mut client = Reaped(Some(client));
    let c = wait(&mut client, end)?;
    let after_client = cpu::children();
    let s = wait(&mut server, end)?;
    let after_server = cpu::children();
    let text = String::from_utf8_lossy(&c.stdout);
    if !c.status.success() || !s.status.success() {
        bail!(
            "rxe perf {} failed: client {}, server {}: {}",
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
fn wait(child: &mut Reaped, end: Instant) -> Result<std::process::Output> {
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
                bail!("rxe perf did not finish in time");
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
