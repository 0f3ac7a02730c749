//! libmlx5 functions that rdma-mummy-sys does not bind, resolved at run time (with libloading)
//! from the library it loads (`libmlx5.so.1`), as rdma-mummy-sys does for the others: a missing
//! library or symbol is `None`, never a link error.
use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

use std::io;
use std::ptr::NonNull;

use rdma_mummy_sys::{
    ibv_context, ibv_qp, ibv_qp_ex, ibv_qp_init_attr_ex, mlx5dv_obj, mlx5dv_qp_ex, mlx5dv_qp_init_attr,
};

/// `int mlx5dv_dci_stream_id_reset(struct ibv_qp *qp, uint16_t stream_id)`.
pub(crate) type DciStreamIdReset = unsafe extern "C" fn(*mut ibv_qp, u16) -> c_int;

/// `int mlx5dv_init_obj(struct mlx5dv_obj *obj, uint64_t obj_type)`.
pub(crate) type InitObj = unsafe extern "C" fn(*mut mlx5dv_obj, u64) -> c_int;

/// `int mlx5dv_devx_general_cmd(struct ibv_context *context, const void *in, size_t inlen,
/// void *out, size_t outlen)`.
pub(crate) type DevxGeneralCmd =
    unsafe extern "C" fn(*mut ibv_context, *const c_void, usize, *mut c_void, usize) -> c_int;

const LIBRARY: &str = "libmlx5.so.1";

/// The libmlx5 calls of the DC queue pairs outside the data path, as a table of functions:
/// libmlx5's ([`LIBMLX5`]), or in unit tests a model of libmlx5's rules, so that the public API of
/// the DC queue pairs can be driven without a device (their libibverbs calls go through the
/// queue-pair core's [`QueuePairVerbs`](crate::ibverbs::queue_pair::verbs::QueuePairVerbs)).
#[derive(Debug)]
pub(crate) struct DcVerbs {
    /// `mlx5dv_create_qp`: the queue pair, or the error (`errno`).
    pub(crate) create: unsafe fn(
        *mut ibv_context,
        *mut ibv_qp_init_attr_ex,
        *mut mlx5dv_qp_init_attr,
    ) -> Result<NonNull<ibv_qp>, io::Error>,
    /// `mlx5dv_qp_ex_from_ibv_qp_ex`.
    pub(crate) mlx5_view: unsafe fn(*mut ibv_qp_ex) -> *mut mlx5dv_qp_ex,
    /// `mlx5dv_dci_stream_id_reset`, where libmlx5 has it.
    pub(crate) stream_id_reset: fn() -> Option<DciStreamIdReset>,
}

/// libmlx5 itself, as rdma-mummy-sys loads them.
pub(crate) static LIBMLX5: DcVerbs = DcVerbs {
    create: create_qp,
    mlx5_view,
    stream_id_reset: dci_stream_id_reset,
};

/// `mlx5dv_create_qp`, its NULL return turned into `errno`.
///
/// # Safety
///
/// As `mlx5dv_create_qp`: an open context, valid attribute structs whose pointers are alive.
unsafe fn create_qp(
    context: *mut ibv_context, init: *mut ibv_qp_init_attr_ex, mlx5: *mut mlx5dv_qp_init_attr,
) -> Result<NonNull<ibv_qp>, io::Error> {
    NonNull::new(rdma_mummy_sys::mlx5dv_create_qp(context, init, mlx5)).ok_or_else(io::Error::last_os_error)
}

/// `mlx5dv_qp_ex_from_ibv_qp_ex`.
///
/// # Safety
///
/// `qp_ex` must be the extended view of a live mlx5 queue pair.
unsafe fn mlx5_view(qp_ex: *mut ibv_qp_ex) -> *mut mlx5dv_qp_ex {
    rdma_mummy_sys::mlx5dv_qp_ex_from_ibv_qp_ex(qp_ex)
}

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
