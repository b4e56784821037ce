//! Links the cdylib as rdma-core's library: SONAME libibverbs.so.1 and the
//! version nodes of libibverbs.map (the `.symver` lines in exports give
//! each symbol its node). This needs rust-lld, rustc's default linker on
//! x86_64 Linux; GNU ld refuses rustc's own version script next to ours.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}
