//! `mlx5dv_dci_stream_id_reset` reaches libmlx5 where libmlx5 has it (rdma-core v37 and later,
//! symbol version `MLX5_1.21`), and is `EOPNOTSUPP`, returned and in `errno`, where it does not,
//! as the other mlx5dv wrappers of rdma-core-mummy are.
//!
//! No device is needed: the queue pair belongs to a context whose device is not an mlx5 one, for
//! which libmlx5 returns `EOPNOTSUPP` and leaves `errno` alone, while rdma-core-mummy's wrapper,
//! when it did not load the symbol, sets `errno` to `EOPNOTSUPP`.

use rdma_mummy_sys::*;
use std::ffi::c_void;
use std::io::Error;
use std::mem::zeroed;

/// `struct verbs_device` as far as libmlx5 reads it to tell an mlx5 device: the device, then its
/// provider's operations (none here).
#[repr(C)]
struct NotMlx5Device {
    device: ibv_device,
    ops: *const c_void,
}

fn libmlx5_has_stream_id_reset() -> bool {
    // SAFETY: C strings; the handle is only tested and looked up in, never closed.
    unsafe {
        let handle = libc::dlopen(c"libmlx5.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        !handle.is_null() && !libc::dlsym(handle, c"mlx5dv_dci_stream_id_reset".as_ptr()).is_null()
    }
}

#[test]
fn dci_stream_id_reset_calls_libmlx5_where_it_has_it() {
    // SAFETY (the three `zeroed`): plain C structs of pointers and integers, all-zero valid.
    let mut device: NotMlx5Device = unsafe { zeroed() };
    let mut context: ibv_context = unsafe { zeroed() };
    context.device = &mut device.device;
    let mut qp: ibv_qp = unsafe { zeroed() };
    qp.context = &mut context;

    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: `qp` and what it points to live through the call; libmlx5 only reads them.
    let ret = unsafe { mlx5dv_dci_stream_id_reset(&mut qp, 1) };
    let errno = Error::last_os_error().raw_os_error();

    assert_eq!(ret, libc::EOPNOTSUPP);
    if libmlx5_has_stream_id_reset() {
        assert_eq!(errno, Some(0), "the wrapper did not reach libmlx5");
    } else {
        assert_eq!(errno, Some(libc::EOPNOTSUPP));
    }
}
