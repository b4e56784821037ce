//! Arbitrary packets into a transport `Endpoint` with live RC, UC and UD
//! QPs and real regions; the invariants are the harness's
//! (`harness/endpoint.rs`): no panic, no write outside a region that grants
//! it, one packet counted once, everything sent parses.
//!
//! Run: `cargo +nightly fuzz run endpoint corpus/endpoint` in this
//! directory (seed the corpus first, see `docs/security.md`).

#![no_main]

use libfuzzer_sys::fuzz_target;

// The seed encoder in it is the replay test's, unused here.
#[allow(dead_code)]
#[path = "../harness/endpoint.rs"]
mod harness;

fuzz_target!(|data: &[u8]| {
    harness::Harness::new().run(data);
});
