//! How a Rust function becomes a libibverbs symbol.
//!
//! `export!` defines `extern "C" fn NAME`, its exported shim
//! `__rxe_NAME` and a `.symver` line
//! that makes it `NAME@@VERSION` (the version script libibverbs.map
//! declares the nodes). The body runs inside [`guard`]: a panic is caught,
//! logged to stderr, `errno` becomes EIO and the function returns its
//! failure value, so no unwind ever crosses into C.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`, turning a panic into `fail()` with errno EIO.
pub fn guard<R>(name: &str, f: impl FnOnce() -> R, fail: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            eprintln!("rxe libibverbs: internal error in {name}: {msg}");
            crate::errno::set_errno(libc::EIO);
            fail()
        }
    }
}

/// `export! { "IBVERBS_1.1" fn ibv_x(a: T) -> R, fail = VALUE, { body } }`:
/// the symbol `ibv_x@@IBVERBS_1.1`, whose body runs under [`guard`].
///
/// Rust code of this crate calls `ibv_x` itself, an ordinary function;
/// the exported symbol is a shim beside the `.symver` line that names it,
/// so the two always land in one object file (the assembler wants a
/// symbol's default version defined where the `.symver` is).
#[macro_export]
macro_rules! export {
    ($ver:literal fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty, fail = $fail:expr, $body:block) => {
        #[doc = concat!("`", stringify!($name), "@@", $ver, "`, as the rdma-core man pages document it.")]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            $crate::exports::guard(stringify!($name), move || -> $ret { $body }, || $fail)
        }
        /// The exported shim of the function of the same name (modules
        /// and functions have separate namespaces).
        #[doc(hidden)]
        #[allow(unused_imports)]
        pub mod $name {
            use super::*;
            #[export_name = concat!("__rxe_", stringify!($name))]
            unsafe extern "C" fn shim($($arg: $ty),*) -> $ret {
                // SAFETY: C calls it with the exported function's contract.
                unsafe { super::$name($($arg),*) }
            }
            // Unit-test executables have no version script to resolve it.
            #[cfg(not(test))]
            core::arch::global_asm!(concat!(
                ".symver __rxe_", stringify!($name), ", ", stringify!($name), "@@", $ver
            ));
        }
    };
}

/// An `extern "C"` function that C reaches through a pointer (an ops
/// table slot), not by name; its body runs under [`guard`] too.
#[macro_export]
macro_rules! callback {
    (fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty, fail = $fail:expr, $body:block) => {
        pub(crate) unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            $crate::exports::guard(stringify!($name), move || -> $ret { $body }, || $fail)
        }
    };
}
