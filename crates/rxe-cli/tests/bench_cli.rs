//! `rxe bench --quick`: the table's shape (not its numbers, which depend
//! on the machine): every figure present once per baseline, every number
//! a finite positive number, the ratio rxe / raw, each side's CPU; with
//! Debian's perftest installed (as the test command installs it), three
//! more rows of `ib_write_bw` and `ib_write_lat` over the drop-in library.
//! Addresses 127.0.0.150 to .153, TCP ports 18651 up: `rxe bench`'s own.

mod support;

use std::time::Duration;

const FIGURES: [&str; 9] = [
    "RC WRITE 1 MiB, 1 QP [Gb/s]",
    "RC WRITE 1 MiB, 1 QP [Gb/s]",
    "RC READ 1 MiB, 1 QP [Gb/s]",
    "RC SEND 1 MiB, 1 QP [Gb/s]",
    "RC WRITE 64 B pipelined [M msg/s]",
    "RC WRITE 64 B pipelined, server --busy [M msg/s]",
    "RC WRITE 2 B round trip [us]",
    "RC WRITE 64 KiB, 1000 QPs [Gb/s]",
    "RC WRITE 1 MiB, 1 % loss [Gb/s]",
];

/// The rows of Debian's perftest over `rxe exec`, after those.
const DROP_IN: [&str; 3] = [
    "ib_write_bw 1 MiB over rxe exec [Gb/s]",
    "ib_write_bw 64 B over rxe exec [M msg/s]",
    "ib_write_lat 2 B round trip over rxe exec [us]",
];

fn number(cell: &str, what: &str) -> f64 {
    let v: f64 = cell
        .parse()
        .unwrap_or_else(|_| panic!("{what}: {cell:?} is not a number"));
    assert!(v.is_finite() && v > 0.0, "{what}: {v}");
    v
}

/// Half the last printed digit of a number.
fn half_step(cell: &str) -> f64 {
    let decimals = cell.split_once('.').map_or(0, |(_, d)| d.len());
    0.5 * 10f64.powi(-(decimals as i32))
}

/// "a / b s/GB" or "a / b us/rt": both sides' CPU, each a number.
fn cpu(cell: &str, what: &str) {
    let (nums, unit) = cell
        .rsplit_once(' ')
        .unwrap_or_else(|| panic!("{what}: {cell:?}"));
    assert!(unit == "s/GB" || unit == "us/rt", "{what}: unit {unit:?}");
    let (a, b) = nums
        .split_once(" / ")
        .unwrap_or_else(|| panic!("{what}: {cell:?}"));
    for v in [a, b] {
        let v: f64 = v.parse().unwrap_or_else(|_| panic!("{what}: {cell:?}"));
        assert!(v.is_finite() && v >= 0.0, "{what}: {cell:?}");
    }
}

#[test]
fn bench_quick_prints_every_figure_beside_its_baseline() {
    let out = support::run(&["bench", "--quick"], Duration::from_secs(240));
    assert!(out.ok(), "rxe bench failed: {}\n{}", out.stderr, out.text());
    let rows: Vec<Vec<String>> = out
        .stdout
        .iter()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    assert_eq!(
        rows[0],
        [
            "figure",
            "rxe",
            "raw UDP",
            "rxe/raw",
            "goal",
            "rxe CPU (tx / rx)",
            "raw CPU (tx / rx)",
            "raw UDP baseline"
        ]
    );
    let body = &rows[2..];
    // Found as the bench finds them: on the PATH.
    let on_path = |tool: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
    };
    let perftest = on_path("ib_write_bw") && on_path("ib_write_lat");
    let mut figures = FIGURES.to_vec();
    if perftest {
        figures.extend(DROP_IN);
    } else {
        assert!(
            out.stderr.contains("no rows over rxe exec"),
            "without perftest the bench says why: {}",
            out.stderr
        );
    }
    assert_eq!(body.len(), figures.len(), "{}", out.text());
    for (row, &figure) in body.iter().zip(&figures) {
        assert_eq!(row.len(), 8, "{row:?}");
        assert_eq!(row[0], figure);
        let rxe = number(&row[1], figure);
        let raw = number(&row[2], figure);
        let ratio = number(&row[3], figure);
        // Each cell is rounded: the ratio of the unrounded values lies
        // between the ratios of the cells' bounds (and is printed to 0.01).
        let (hr, hw) = (half_step(&row[1]), half_step(&row[2]));
        let lo = (rxe - hr) / (raw + hw) - 0.005;
        let hi = (rxe + hr) / (raw - hw).max(f64::MIN_POSITIVE) + 0.005;
        assert!(
            (lo..=hi).contains(&ratio),
            "{figure}: {ratio} is not {rxe} / {raw}"
        );
        cpu(&row[5], figure);
        cpu(&row[6], figure);
        assert!(!row[7].is_empty());
    }
    // Two baselines for WRITE 1 MiB: GSO+GRO and sendmmsg.
    assert!(body[0][7].contains("GSO") && body[1][7].contains("sendmmsg"));
    // The last two compare rxe with itself, and say so; the lossless
    // figure is the first row's.
    assert!(body[7][7].contains("rxe itself") && body[8][7].contains("rxe itself"));
    assert_eq!(body[8][2], body[0][1]);
    // After the table, the idle QP's memory in KiB.
    let idle = out
        .stdout
        .iter()
        .find_map(|l| l.strip_prefix("Idle RC QP in RTS: "))
        .unwrap_or_else(|| panic!("no idle-QP line: {}", out.text()));
    let kib: f64 = idle
        .split_once(" KiB each")
        .and_then(|(v, _)| v.parse().ok())
        .unwrap_or_else(|| panic!("idle-QP line: {idle:?}"));
    assert!(kib >= 0.0 && kib.is_finite(), "{idle:?}");
}
