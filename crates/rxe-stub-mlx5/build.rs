//! SONAME libmlx5.so.1 and the version nodes of mlx5.map (see rxe-ibverbs'
//! build.rs: this needs rust-lld).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=mlx5.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/mlx5.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmlx5.so.1");
}
