//! Running the `rxe` binary as a user would, with every wait bounded and
//! every child killed if a test fails.

#![allow(dead_code)]

pub mod tools;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running `rxe`: killed when dropped, stdout read line by line.
pub struct Rxe {
    child: Child,
    lines: Receiver<String>,
    stdout: Vec<String>,
    stderr: Option<JoinHandle<String>>,
    /// stderr line by line too, for [`Rxe::wait_for_stderr`].
    err_lines: Receiver<String>,
    args: Vec<String>,
}

/// How a finished `rxe` ended.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<String>,
    pub stderr: String,
    pub args: Vec<String>,
}

impl Finished {
    pub fn ok(&self) -> bool {
        self.status.success()
    }

    pub fn text(&self) -> String {
        self.stdout.join("\n")
    }
}

impl Rxe {
    pub fn spawn(args: &[&str]) -> Rxe {
        Rxe::spawn_with_env(args, &[])
    }

    /// [`Rxe::spawn`] with more environment variables.
    pub fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> Rxe {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rxe"))
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start rxe");
        let out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(l) = line else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let (etx, err_lines) = channel();
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let mut r = BufReader::new(&mut err);
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                let _ = etx.send(line.trim_end().to_string());
                s.push_str(&line);
                line.clear();
            }
            let mut rest = String::new();
            let _ = r.read_to_string(&mut rest);
            s.push_str(&rest);
            s
        });
        Rxe {
            child,
            lines,
            stdout: vec![],
            stderr: Some(stderr),
            err_lines,
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Waits for a stderr line that contains `text` (a log line of the
    /// library, which C stdio does not buffer); false if the process ended
    /// or `timeout` passed first.
    pub fn wait_for_stderr(&mut self, text: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.err_lines.recv_timeout(left) {
                Ok(l) if l.contains(text) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    }

    /// Waits for a stdout line that starts with `prefix`.
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.stdout.push(l.clone());
                    if l.starts_with(prefix) {
                        return l;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("rxe {:?}: no line {prefix:?} within {timeout:?}", self.args)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let f = self.finish(Duration::from_secs(5));
                    panic!(
                        "rxe {:?} ended before printing {prefix:?}: {f:#?}",
                        self.args
                    )
                }
            }
        }
    }

    /// Waits for the process to end (killing it after `timeout`).
    pub fn finish(&mut self, timeout: Duration) -> Finished {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let s = self.child.wait().unwrap();
                let mut stdout = std::mem::take(&mut self.stdout);
                stdout.extend(self.lines.try_iter());
                panic!(
                    "rxe {:?} still running after {timeout:?}; killed ({s}). stdout so far:\n{}",
                    self.args,
                    stdout.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // The reader thread ends at EOF; take every line.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.stdout.push(l);
        }
        let stderr = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        Finished {
            status,
            stdout: std::mem::take(&mut self.stdout),
            stderr,
            args: self.args.clone(),
        }
    }
}

impl Drop for Rxe {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `rxe` to the end.
pub fn run(args: &[&str], timeout: Duration) -> Finished {
    Rxe::spawn(args).finish(timeout)
}
