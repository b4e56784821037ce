//! rxe-verbs: the verbs frontend of rxe (devices, ports, PDs, AHs, MRs, CQs,
//! QPs, SRQs, work requests and completions).
//!
//! Nothing is implemented here yet: the crate exists so that the workspace has
//! its final shape. The transport engine (`rxe-core::transport`) and the UDP
//! device (`rxe-net`) come first; this crate is built on top of them.
