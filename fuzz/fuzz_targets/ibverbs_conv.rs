//! Arbitrary values into the drop-in libibverbs' C-struct conversions
//! (the harness, `harness/ibverbs_conv.rs`, says the input format, the
//! invariants and what is not fuzzed).
//!
//! Run: `cargo +nightly fuzz run ibverbs_conv corpus/ibverbs_conv
//! seeds/ibverbs_conv` in this directory.

#![no_main]

use libfuzzer_sys::fuzz_target;

// The replay test reads the outcome; the fuzzer does not.
#[allow(dead_code)]
#[path = "../harness/ibverbs_conv.rs"]
mod harness;

fuzz_target!(|data: &[u8]| {
    harness::run(data);
});
