//! Cross-crate tests of rxe live in `tests/`; this library holds what they
//! share.

pub mod forge;
pub mod hostile;
pub mod lossy_relay;
pub mod netns;
pub mod peer;
pub mod tshark;
pub mod verbs_harness;
