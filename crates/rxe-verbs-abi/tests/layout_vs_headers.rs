//! The offsets and sizes this crate asserts, checked against the installed
//! rdma-core headers with a C compiler: a C program prints `offsetof` and
//! `sizeof` of every checked field, and they must equal the Rust numbers
//! (which the compile-time asserts tie to the Rust structs). Without
//! `<infiniband/verbs.h>` the test skips, loudly.

use std::path::Path;
use std::process::Command;

use rxe_verbs_abi::rdmacm::RDMACM_CHECKED_LAYOUT;
use rxe_verbs_abi::CHECKED_LAYOUT;

/// Compiles and runs a C program that includes `header` and prints each
/// of `exprs` (`sizeof`/`offsetof` expressions), one number a line.
fn c_numbers(tag: &str, header: &str, exprs: &[String]) -> Vec<usize> {
    let dir = std::env::temp_dir().join(format!("rxe-{tag}-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = format!(
        "#include <stdio.h>\n#include <stddef.h>\n#include <{header}>\nint main(void) {{\n"
    );
    for e in exprs {
        c.push_str(&format!("  printf(\"%zu\\n\", {e});\n"));
    }
    c.push_str("  return 0;\n}\n");
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c).unwrap();
    let cc = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("cc runs");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let got: Vec<usize> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(got.len(), exprs.len());
    got
}

/// Each (struct, field, offset) against C: `sizeof` for field "".
fn check(
    tag: &str,
    header: &str,
    table: &[(&str, &str, usize)],
    c_field: impl Fn(&str, &str) -> String,
) {
    let exprs: Vec<String> = table
        .iter()
        .map(|(s, f, _)| {
            if f.is_empty() {
                format!("sizeof(struct {s})")
            } else {
                format!("offsetof(struct {s}, {})", c_field(s, f))
            }
        })
        .collect();
    for ((s, f, want), got) in table.iter().zip(c_numbers(tag, header, &exprs)) {
        assert_eq!(got, *want, "{s}.{f}: C says {got}, rxe-verbs-abi {want}");
    }
}

#[test]
fn every_checked_offset_matches_the_installed_headers() {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        eprintln!("SKIPPED: no /usr/include/infiniband/verbs.h (install libibverbs-dev)");
        return;
    }
    // Fields of unions and renamed fields are spelled as C has them.
    check(
        "ibverbs",
        "infiniband/verbs.h",
        CHECKED_LAYOUT,
        |s, f| match (s, f) {
            ("ibv_send_wr", "imm_data") => "imm_data".to_string(),
            _ => f.to_string(),
        },
    );
}

/// The same for librdmacm's structs and `<rdma/rdma_cma.h>`
/// (librdmacm-dev).
#[test]
fn every_checked_rdmacm_offset_matches_the_installed_header() {
    if !Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        eprintln!("SKIPPED: no /usr/include/rdma/rdma_cma.h (install librdmacm-dev)");
        return;
    }
    check(
        "rdmacm",
        "rdma/rdma_cma.h",
        RDMACM_CHECKED_LAYOUT,
        |_, f| f.to_string(),
    );
}
