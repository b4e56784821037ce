//! Arbitrary bytes into the CM MAD decoders: every message decoded,
//! re-encoded and decoded again (the harness, `harness/cm_mad.rs`, says
//! the input format and the invariants).
//!
//! Run: `cargo +nightly fuzz run cm_mad corpus/cm_mad seeds/cm_mad` in this
//! directory.

#![no_main]

use libfuzzer_sys::fuzz_target;

// The replay test reads the outcome; the fuzzer does not.
#[allow(dead_code)]
#[path = "../harness/cm_mad.rs"]
mod harness;

fuzz_target!(|data: &[u8]| {
    harness::run(data);
});
