//! A stub `libmlx5.so.1`. Debian's perftest binaries link rdma-core's
//! mlx5 direct-verbs library and call it only for mlx5 features (DC
//! transport, AES-XTS, DEVX). Under rxe there is no mlx5 device, so every
//! entry fails: NULL or EOPNOTSUPP, with errno EOPNOTSUPP. The real
//! libmlx5 cannot be used instead: it needs private symbols of the real
//! libibverbs.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_int, c_void};

fn unsupported() {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
}

macro_rules! stub {
    ($ver:literal fn $name:ident($($a:ident: $t:ty),*) -> $ret:ty = $v:expr) => {
        #[doc = concat!("`", stringify!($name), "@@", $ver, "`: not available on rxe.")]
        #[export_name = concat!("__rxe_", stringify!($name))]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            let _ = ($($a,)*);
            unsupported();
            $v
        }
        // Unit-test executables have no version script to resolve it.
        #[cfg(not(test))]
        core::arch::global_asm!(concat!(".symver __rxe_", stringify!($name), ", ", stringify!($name), "@@", $ver));
    };
}

type P = *mut c_void;

stub!("MLX5_1.3" fn mlx5dv_create_qp(context: P, qp_attr: P, mlx5_qp_attr: P) -> P = std::ptr::null_mut());
stub!("MLX5_1.7" fn mlx5dv_open_device(device: P, attr: P) -> P = std::ptr::null_mut());
stub!("MLX5_1.7" fn mlx5dv_devx_general_cmd(context: P, cmd_in: P, inlen: usize, out: P, outlen: usize) -> c_int = libc::EOPNOTSUPP);
stub!("MLX5_1.10" fn mlx5dv_create_mkey(attr: P) -> P = std::ptr::null_mut());
stub!("MLX5_1.10" fn mlx5dv_destroy_mkey(mkey: P) -> c_int = libc::EOPNOTSUPP);
stub!("MLX5_1.10" fn mlx5dv_qp_ex_from_ibv_qp_ex(qp: P) -> P = std::ptr::null_mut());
stub!("MLX5_1.21" fn mlx5dv_crypto_login(context: P, login_attr: P) -> c_int = libc::EOPNOTSUPP);
stub!("MLX5_1.21" fn mlx5dv_dek_create(context: P, init_attr: P) -> P = std::ptr::null_mut());
stub!("MLX5_1.21" fn mlx5dv_dek_destroy(dek: P) -> c_int = libc::EOPNOTSUPP);

#[cfg(test)]
mod tests {
    #[test]
    fn every_entry_fails_with_eopnotsupp() {
        // SAFETY: the stubs ignore their arguments.
        unsafe {
            assert!(
                super::mlx5dv_open_device(std::ptr::null_mut(), std::ptr::null_mut()).is_null()
            );
            assert_eq!(*libc::__errno_location(), libc::EOPNOTSUPP);
            assert_eq!(
                super::mlx5dv_destroy_mkey(std::ptr::null_mut()),
                libc::EOPNOTSUPP
            );
        }
    }
}
