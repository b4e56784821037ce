//! The offsets and sizes this crate asserts, checked against the installed
//! rdma-core headers with a C compiler: a C program prints `offsetof` and
//! `sizeof` of every checked field, and they must equal the Rust numbers
//! (which the compile-time asserts tie to the Rust structs). Without
//! `<infiniband/verbs.h>` the test skips, loudly.

use std::path::Path;
use std::process::Command;

use rxe_verbs_abi::rdmacm::RDMACM_CHECKED_LAYOUT;
use rxe_verbs_abi::CHECKED_LAYOUT;

#[test]
fn every_checked_offset_matches_the_installed_headers() {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        eprintln!("SKIPPED: no /usr/include/infiniband/verbs.h (install libibverbs-dev)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("rxe-abi-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for (s, f, _) in CHECKED_LAYOUT {
        if f.is_empty() {
            c.push_str(&format!(
                "  printf(\"{s} . %zu\\n\", sizeof(struct {s}));\n"
            ));
        } else {
            // Fields of unions and renamed fields are spelled as C has them.
            let cf = match (*s, *f) {
                ("ibv_send_wr", "imm_data") => "imm_data",
                _ => f,
            };
            c.push_str(&format!(
                "  printf(\"{s} {f} %zu\\n\", offsetof(struct {s}, {cf}));\n"
            ));
        }
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
    let text = String::from_utf8(out.stdout).unwrap();
    let mut checked = 0;
    for ((s, f, want), line) in CHECKED_LAYOUT.iter().zip(text.lines()) {
        let got: usize = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert_eq!(got, *want, "{s}.{f}: C says {got}, rxe-verbs-abi {want}");
        checked += 1;
    }
    assert_eq!(checked, CHECKED_LAYOUT.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The same for librdmacm's structs and `<rdma/rdma_cma.h>`
/// (librdmacm-dev).
#[test]
fn every_checked_rdmacm_offset_matches_the_installed_header() {
    if !Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        eprintln!("SKIPPED: no /usr/include/rdma/rdma_cma.h (install librdmacm-dev)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("rxe-rdmacm-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/rdma_cma.h>\nint main(void) {\n",
    );
    for (s, f, _) in RDMACM_CHECKED_LAYOUT {
        if f.is_empty() {
            c.push_str(&format!("  printf(\"%zu\\n\", sizeof(struct {s}));\n"));
        } else {
            c.push_str(&format!(
                "  printf(\"%zu\\n\", offsetof(struct {s}, {f}));\n"
            ));
        }
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
    let text = String::from_utf8(out.stdout).unwrap();
    let got: Vec<usize> = text.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(got.len(), RDMACM_CHECKED_LAYOUT.len());
    for ((s, f, want), got) in RDMACM_CHECKED_LAYOUT.iter().zip(got) {
        assert_eq!(got, *want, "{s}.{f}: C says {got}, rxe-verbs-abi {want}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
