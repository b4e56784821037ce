//! Arbitrary bytes into the frame decoder and dissector: the first byte picks
//! the link type, the rest is the frame. Nothing may panic, and whatever is
//! found must lie inside the input.
//!
//! Run: `cargo +nightly fuzz run dissect` in this directory.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rxe_core::wire::dissect::dissect;
use rxe_core::wire::frame::LinkType;

const LINKS: [LinkType; 8] = {
    let d = LinkType::DECODED;
    [d[0], d[1], d[2], d[3], d[4], d[5], d[6], LinkType::Other(147)]
};

fuzz_target!(|data: &[u8]| {
    let Some((&first, frame)) = data.split_first() else {
        return;
    };
    let link = LINKS[usize::from(first) % LINKS.len()];
    let Ok(Some(d)) = dissect(link, frame) else {
        return;
    };
    let _ = d.is_good();
    let _ = d.problems();
    let _ = d.payload();
    let _ = d.carried_icrc();
    let _ = d.frame.addresses();
    let _ = d.frame.lids();
    let summary = d.summary();
    assert!(!summary.is_empty());
    let start = frame.as_ptr() as usize;
    for layer in d.layers() {
        assert!(layer.offset + layer.bytes.len() <= frame.len());
        assert_eq!(layer.bytes.as_ptr() as usize - start, layer.offset);
        for f in &layer.fields {
            let _ = f.bit_string();
        }
    }
    if let Ok(p) = &d.packet {
        let t = p.payload.as_ptr() as usize;
        assert!(t >= start && t + p.payload.len() <= start + frame.len());
    }
});
