//! The table `rxe bench` prints: one Markdown table (it goes straight into
//! docs/performance.md), one row per figure, rxe next to its raw UDP
//! baseline, the ratio, the goal of issue #14 for it, and the CPU time of
//! each side.

use std::fmt::Write as _;
use std::time::Duration;

/// The CPU time of the two sides of a figure, per unit of work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cpu {
    /// Seconds per 10^9 bytes of payload, the data's sender then receiver.
    PerGb(f64, f64),
    /// Microseconds per round trip, each side.
    PerRoundTrip(f64, f64),
}

impl Cpu {
    pub fn per_gb(tx: Duration, rx: Duration, bytes: f64) -> Cpu {
        let gb = (bytes / 1e9).max(1e-12);
        Cpu::PerGb(tx.as_secs_f64() / gb, rx.as_secs_f64() / gb)
    }

    pub fn per_round_trip(a: Duration, b: Duration, round_trips: f64) -> Cpu {
        let n = round_trips.max(1.0);
        Cpu::PerRoundTrip(a.as_secs_f64() * 1e6 / n, b.as_secs_f64() * 1e6 / n)
    }

    fn cell(&self) -> String {
        match *self {
            Cpu::PerGb(a, b) => format!("{a:.2} / {b:.2} s/GB"),
            Cpu::PerRoundTrip(a, b) => format!("{a:.1} / {b:.1} us/rt"),
        }
    }
}

/// One figure.
#[derive(Debug, Clone)]
pub struct Row {
    pub figure: &'static str,
    pub rxe: f64,
    pub raw: f64,
    pub goal: &'static str,
    pub rxe_cpu: Cpu,
    pub raw_cpu: Cpu,
    pub baseline: &'static str,
}

impl Row {
    pub fn new(
        figure: &'static str,
        rxe: f64,
        raw: f64,
        goal: &'static str,
        rxe_cpu: Cpu,
        raw_cpu: Cpu,
        baseline: &'static str,
    ) -> Row {
        Row {
            figure,
            rxe,
            raw,
            goal,
            rxe_cpu,
            raw_cpu,
            baseline,
        }
    }
}

pub const HEADER: &str = "| figure | rxe | raw UDP | rxe/raw | goal | rxe CPU (tx / rx) | raw CPU (tx / rx) | raw UDP baseline |";

/// The whole table, with a line saying how long each measurement ran.
pub fn render(rows: &[Row], secs: f64) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{HEADER}");
    let _ = writeln!(s, "|---|---:|---:|---:|---|---:|---:|---|");
    for r in rows {
        let ratio = if r.raw > 0.0 { r.rxe / r.raw } else { f64::NAN };
        let goal = if r.goal.is_empty() { "-" } else { r.goal };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {ratio:.2} | {goal} | {} | {} | {} |",
            r.figure,
            num(r.rxe),
            num(r.raw),
            r.rxe_cpu.cell(),
            r.raw_cpu.cell(),
            r.baseline
        );
    }
    let _ = writeln!(
        s,
        "\n{secs} s per measurement; rxe: two `rxe perf` processes (127.0.0.150, .151), CPU of each process (getrusage of the reaped child); raw UDP: two threads (127.0.0.152, .153), CPU of each thread. tx / rx: the data's sender / receiver (round trips: client / server)."
    );
    s
}

/// Three significant digits or so, never scientific notation.
fn num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_the_header_s_columns_and_its_ratio() {
        let rows = [
            Row::new(
                "a [Gb/s]",
                5.0,
                10.0,
                ">= 0.5",
                Cpu::PerGb(0.5, 0.25),
                Cpu::PerGb(0.1, 0.1),
                "x",
            ),
            Row::new(
                "b [us]",
                30.0,
                6.0,
                "",
                Cpu::PerRoundTrip(12.0, 11.0),
                Cpu::PerRoundTrip(3.0, 3.0),
                "y",
            ),
        ];
        let t = render(&rows, 1.0);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], HEADER);
        let cols = HEADER.matches('|').count();
        for l in &lines[1..4] {
            assert_eq!(l.matches('|').count(), cols, "{l}");
        }
        assert!(lines[2].contains("| 0.50 |"), "{}", lines[2]);
        assert!(lines[2].contains("0.50 / 0.25 s/GB"));
        assert!(
            lines[3].contains("| 5.00 |")
                && lines[2].contains("| 5.00 | 10.0 |")
                && lines[3].contains("| - |")
        );
        assert!(lines[3].contains("12.0 / 11.0 us/rt"));
    }

    #[test]
    fn cpu_per_gb_divides_by_the_bytes() {
        let c = Cpu::per_gb(Duration::from_secs(2), Duration::from_secs(1), 4e9);
        assert_eq!(c, Cpu::PerGb(0.5, 0.25));
    }
}
