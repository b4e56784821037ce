//! Cross-crate tests of rxe live in `tests/` and benchmarks in `benches/`;
//! this library holds what they share.

pub mod bench_args;
pub mod forge;
pub mod hostile;
pub mod lossy_relay;
pub mod netns;
pub mod peer;
pub mod tshark;
pub mod verbs_harness;
