//! libmlx5 functions that rdma-mummy-sys does not bind, resolved at run time (with libloading)
//! from the library it loads (`libmlx5.so.1`), as rdma-mummy-sys does for the others: a missing
//! library or symbol is `None`, never a link error.
use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

use rdma_mummy_sys::{ibv_context, ibv_qp, mlx5dv_obj};

/// `int mlx5dv_dci_stream_id_reset(struct ibv_qp *qp, uint16_t stream_id)`.
pub(crate) type DciStreamIdReset = unsafe extern "C" fn(*mut ibv_qp, u16) -> c_int;

/// `int mlx5dv_init_obj(struct mlx5dv_obj *obj, uint64_t obj_type)`.
pub(crate) type InitObj = unsafe extern "C" fn(*mut mlx5dv_obj, u64) -> c_int;

/// `int mlx5dv_devx_general_cmd(struct ibv_context *context, const void *in, size_t inlen,
/// void *out, size_t outlen)`.
pub(crate) type DevxGeneralCmd =
    unsafe extern "C" fn(*mut ibv_context, *const c_void, usize, *mut c_void, usize) -> c_int;

const LIBRARY: &str = "libmlx5.so.1";

/// `mlx5dv_dci_stream_id_reset` (libmlx5 of rdma-core v37 and later: symbol version
/// `MLX5_1.21` in `libmlx5.map`), if libmlx5 has it.
pub(crate) fn dci_stream_id_reset() -> Option<DciStreamIdReset> {
    static RESOLVED: OnceLock<Option<DciStreamIdReset>> = OnceLock::new();
    *RESOLVED.get_or_init(|| {
        let symbol = resolve(LIBRARY, c"mlx5dv_dci_stream_id_reset")?;
        // SAFETY: the symbol is the C function of this signature (mlx5dv.h).
        Some(unsafe { std::mem::transmute::<*mut c_void, DciStreamIdReset>(symbol) })
    })
}

/// `mlx5dv_dci_stream_id_reset` as rdma-mummy-sys 0.2.7 binds it: `EOPNOTSUPP` where libmlx5
/// lacks the function, as libmlx5 itself answers where the device cannot reset streams.
///
/// # Safety
///
/// `qp` must be a live queue pair, not used by another thread during the call.
pub(crate) unsafe fn mlx5dv_dci_stream_id_reset(qp: *mut ibv_qp, stream_id: u16) -> c_int {
    match dci_stream_id_reset() {
        // SAFETY: the caller's promise; the function has the C signature it was resolved with.
        Some(reset) => unsafe { reset(qp, stream_id) },
        None => libc::EOPNOTSUPP,
    }
}

/// `mlx5dv_init_obj` (libmlx5's default version, `MLX5_1.2`), if libmlx5 is there.
pub(crate) fn init_obj() -> Option<InitObj> {
    static RESOLVED: OnceLock<Option<InitObj>> = OnceLock::new();
    *RESOLVED.get_or_init(|| {
        let symbol = resolve(LIBRARY, c"mlx5dv_init_obj")?;
        // SAFETY: the symbol is the C function of this signature (mlx5dv.h).
        Some(unsafe { std::mem::transmute::<*mut c_void, InitObj>(symbol) })
    })
}

/// `mlx5dv_devx_general_cmd` (libmlx5 of rdma-core v21 and later: symbol version `MLX5_1.7` in
/// `libmlx5.map`), if libmlx5 has it.
pub(crate) fn devx_general_cmd() -> Option<DevxGeneralCmd> {
    static RESOLVED: OnceLock<Option<DevxGeneralCmd>> = OnceLock::new();
    *RESOLVED.get_or_init(|| {
        let symbol = resolve(LIBRARY, c"mlx5dv_devx_general_cmd")?;
        // SAFETY: the symbol is the C function of this signature (mlx5dv.h).
        Some(unsafe { std::mem::transmute::<*mut c_void, DevxGeneralCmd>(symbol) })
    })
}

/// The address of `symbol` in `library`, loaded (or found loaded) as rdma-mummy-sys loads it
/// (`RTLD_NOW | RTLD_GLOBAL`); the library stays loaded.
fn resolve(library: &str, symbol: &CStr) -> Option<*mut c_void> {
    // SAFETY: loading runs the library's initialisers; for libmlx5 those rdma-mummy-sys runs when
    // it loads the same library.
    let library = unsafe { Library::open(Some(library), RTLD_NOW | RTLD_GLOBAL) }.ok()?;
    // SAFETY: the symbol is read as a plain address, never called here.
    let address = unsafe { library.get::<*mut c_void>(symbol.to_bytes_with_nul()) }.map(|address| *address);
    // Never closed, so that the address stays valid for the process's lifetime.
    library.into_raw();
    address.ok().filter(|address| !address.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_or_symbol_is_none() {
        assert!(resolve("libsideway-ext-no-such-library.so.1", c"mlx5dv_dci_stream_id_reset").is_none());
        assert!(resolve("libc.so.6", c"mlx5dv_dci_stream_id_reset").is_none());
        assert!(resolve("libc.so.6", c"getpid").is_some());
    }

    #[test]
    fn the_stream_reset_resolves_where_libmlx5_has_it() {
        // Debian's libmlx5 (rdma-core 44) has it; a machine without libmlx5 gets None.
        let installed = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libmlx5.so.1").exists();
        assert_eq!(dci_stream_id_reset().is_some(), installed);
    }

    #[test]
    fn the_general_command_resolves_where_libmlx5_has_it() {
        // Debian's libmlx5 (rdma-core 44) has it (since v21); a machine without libmlx5 gets None.
        let installed = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libmlx5.so.1").exists();
        assert_eq!(devx_general_cmd().is_some(), installed);
    }
}
