//! What the benchmarks in `benches/` take on their command line.

/// The seconds each case or phase runs: `--secs N` (after `cargo bench
/// ... --`), else `default`.
pub fn secs(default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--secs")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
