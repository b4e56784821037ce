//! SONAME libefa.so.1 and the version nodes of efa.map (see rxe-ibverbs'
//! build.rs: this needs rust-lld).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=efa.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/efa.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libefa.so.1");
}
