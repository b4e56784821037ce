//! Debian's RDMA programs under `rxe exec`, for the ibverbs_tools and
//! rdmacm_tools tests: taking turns, finding the programs and the built
//! libraries, starting one.

use std::path::{Path, PathBuf};

use super::Rxe;

/// One test at a time: every test runs busy-polling C programs in pairs,
/// and on a small machine several pairs at once only starve each other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the Debian tool `name` can run; panics with what to install if
/// not, unless RXE_SKIP_IBVERBS_TOOLS=1.
pub fn have(name: &str) -> bool {
    if Path::new("/usr/bin").join(name).exists() {
        return true;
    }
    if std::env::var("RXE_SKIP_IBVERBS_TOOLS").as_deref() == Ok("1") {
        eprintln!("SKIPPED: /usr/bin/{name} is missing (RXE_SKIP_IBVERBS_TOOLS=1)");
        return false;
    }
    panic!(
        "/usr/bin/{name} is missing: install ibverbs-utils, perftest, rdmacm-utils and qperf \
         (scripts/setup.sh), or set RXE_SKIP_IBVERBS_TOOLS=1 to skip these tests"
    );
}

/// The directory with the built libraries (cargo builds the dev-dependency
/// cdylibs into target/<profile>/deps): the newer of the two, as `rxe
/// exec` chooses.
pub fn lib_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_rxe"));
    let dir = exe.parent().unwrap().to_path_buf();
    [dir.clone(), dir.join("deps")]
        .into_iter()
        .filter(|d| d.join("libibverbs.so").exists())
        .max_by_key(|d| {
            std::fs::metadata(d.join("libibverbs.so"))
                .and_then(|m| m.modified())
                .ok()
        })
        .unwrap_or_else(|| panic!("no libibverbs.so near {}", exe.display()))
}

/// Builds `tests/c/NAME.c` against the installed verbs.h, rdma_cma.h and
/// the real libibverbs.so and librdmacm.so, into its own temporary
/// directory (returned with the program; remove it when done). `None`,
/// loudly, without the headers when RXE_SKIP_IBVERBS_TOOLS=1; a panic
/// saying what to install otherwise.
pub fn build_c(name: &str) -> Option<(PathBuf, PathBuf)> {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        if std::env::var("RXE_SKIP_IBVERBS_TOOLS").as_deref() == Ok("1") {
            eprintln!("SKIPPED: no verbs.h (RXE_SKIP_IBVERBS_TOOLS=1)");
            return None;
        }
        panic!("no /usr/include/infiniband/verbs.h: install libibverbs-dev (scripts/setup.sh), or set RXE_SKIP_IBVERBS_TOOLS=1");
    }
    let dir = std::env::temp_dir().join(format!("rxe-c-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let cc = std::process::Command::new("cc")
        .args(["-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-libverbs", "-lrdmacm"])
        .output()
        .expect("cc runs");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    Some((dir, exe))
}

/// `rxe exec --ip ADDR -- PROGRAM ARGS`.
pub fn exec(addr: &str, prog: &str, args: &[&str]) -> Rxe {
    let mut a = vec!["exec", "--ip", addr, "--", prog];
    a.extend_from_slice(args);
    Rxe::spawn(&a)
}

/// `objdump -T` of an ELF file: its dynamic symbol table as text.
pub fn dynamic_symbols(p: &Path) -> String {
    let out = std::process::Command::new("objdump")
        .arg("-T")
        .arg(p)
        .output()
        .expect("objdump runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether a dump of [`dynamic_symbols`] defines `name` at version `ver`.
pub fn exports(dump: &str, name: &str, ver: &str) -> bool {
    dump.lines().any(|l| {
        !l.contains("*UND*")
            && l.split_whitespace().last() == Some(name)
            && (l.contains(&format!(" {ver} ")) || l.contains(&format!("({ver})")))
    })
}

/// The (name, version) pairs a dump imports at versions starting with
/// `prefix` (`IBVERBS_`, `RDMACM_`).
pub fn versioned_imports(dump: &str, prefix: &str) -> Vec<(String, String)> {
    dump.lines()
        .filter(|l| l.contains("*UND*") && l.contains(prefix))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let v = f[f.len() - 2].trim_matches(|c| c == '(' || c == ')');
            (f[f.len() - 1].to_string(), v.to_string())
        })
        .collect()
}
