//! libmlx5 functions that rdma-mummy-sys does not bind, resolved at run time from the library
//! it loads (`libmlx5.so.1`), as rdma-mummy-sys does for the others: a missing library or symbol
//! is `None`, never a link error.
use std::ffi::{c_int, CStr};
use std::sync::OnceLock;

use rdma_mummy_sys::ibv_qp;

/// `int mlx5dv_dci_stream_id_reset(struct ibv_qp *qp, uint16_t stream_id)`.
pub(crate) type DciStreamIdReset = unsafe extern "C" fn(*mut ibv_qp, u16) -> c_int;

const LIBRARY: &CStr = c"libmlx5.so.1";

/// `mlx5dv_dci_stream_id_reset` (rdma-core 38 and later), if libmlx5 has it.
pub(crate) fn dci_stream_id_reset() -> Option<DciStreamIdReset> {
    static RESOLVED: OnceLock<Option<DciStreamIdReset>> = OnceLock::new();
    *RESOLVED.get_or_init(|| {
        let symbol = resolve(LIBRARY, c"mlx5dv_dci_stream_id_reset")?;
        // SAFETY: the symbol is the C function of this signature (mlx5dv.h).
        Some(unsafe { std::mem::transmute::<*mut std::ffi::c_void, DciStreamIdReset>(symbol) })
    })
}

/// The address of `symbol` in `library`, loaded (or found loaded) with `dlopen`; the library
/// stays loaded.
fn resolve(library: &CStr, symbol: &CStr) -> Option<*mut std::ffi::c_void> {
    // SAFETY: both names are NUL-terminated; the handle is never closed, so the address stays
    // valid for the process's lifetime.
    unsafe {
        let handle = libc::dlopen(library.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL);
        if handle.is_null() {
            return None;
        }
        let address = libc::dlsym(handle, symbol.as_ptr());
        (!address.is_null()).then_some(address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_or_symbol_is_none() {
        assert!(resolve(c"libsideway-ext-no-such-library.so.1", c"mlx5dv_dci_stream_id_reset").is_none());
        assert!(resolve(c"libc.so.6", c"mlx5dv_dci_stream_id_reset").is_none());
        assert!(resolve(c"libc.so.6", c"getpid").is_some());
    }

    #[test]
    fn the_stream_reset_resolves_where_libmlx5_has_it() {
        // Debian's libmlx5 (rdma-core 44) has it; a machine without libmlx5 gets None.
        let installed = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libmlx5.so.1").exists();
        assert_eq!(dci_stream_id_reset().is_some(), installed);
    }
}
