//! The `extern "C"` entries of [`SendQueueEntries`](super::SendQueueEntries)' tables: each
//! finds the tables' state from the pointer it is called with and hands its arguments on.
//!
//! Each is called through the pointers the entries handed out, by a caller that holds them
//! exclusively for the batch (libibverbs' `ibv_wr_*` contract, and the guard's `start`): the
//! SAFETY of each call to `state` and `state_of_mlx5`.
use std::ffi::c_void;
use std::io::IoSlice;

use rdma_mummy_sys::{ibv_ah, ibv_data_buf, ibv_qp_ex, ibv_sge, mlx5dv_qp_ex};

use super::{state, state_of_mlx5};
use crate::send_queue::operation::{self, Operation};
use crate::send_queue::wqe::Data;

/// Fills every entry the tables offer, as `mlx5_qp_fill_wr_pfns` fills a DCI's.
pub(super) fn fill(qp_ex: &mut ibv_qp_ex, mlx5: &mut mlx5dv_qp_ex) {
    qp_ex.wr_start = Some(wr_start);
    qp_ex.wr_complete = Some(wr_complete);
    qp_ex.wr_abort = Some(wr_abort);
    qp_ex.wr_send = Some(wr_send);
    qp_ex.wr_send_imm = Some(wr_send_imm);
    qp_ex.wr_rdma_write = Some(wr_rdma_write);
    qp_ex.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    qp_ex.wr_rdma_read = Some(wr_rdma_read);
    qp_ex.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    qp_ex.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    qp_ex.wr_set_sge = Some(wr_set_sge);
    qp_ex.wr_set_sge_list = Some(wr_set_sge_list);
    qp_ex.wr_set_inline_data = Some(wr_set_inline_data);
    qp_ex.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    mlx5.wr_set_dc_addr = Some(wr_set_dc_addr);
    mlx5.wr_set_dc_addr_stream = Some(wr_set_dc_addr_stream);
}

/// `count` items at `items`, or none (a NULL list of none is allowed).
///
/// # Safety
///
/// Unless `count` is 0, `items` must be valid for `count` items for `'a`.
#[inline]
unsafe fn list<'a, T>(items: *const T, count: usize) -> &'a [T] {
    if count == 0 {
        return &[];
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(items, count) }
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: see the module documentation.
    unsafe { state(qp) }.start();
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> i32 {
    // SAFETY: see the module documentation.
    unsafe { state(qp) }.complete()
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: see the module documentation.
    unsafe { state(qp) }.abort();
}

/// A builder: the request's `wr_id` and flags as the caller set them in `qp_ex`, and
/// `operation`.
///
/// # Safety
///
/// See the module documentation.
#[inline]
unsafe fn begin<O: Operation>(qp: *mut ibv_qp_ex, operation: O) {
    // SAFETY: see the module documentation; the two fields are read before the state is borrowed.
    unsafe {
        let (wr_id, wr_flags) = ((*qp).wr_id, (*qp).wr_flags);
        state(qp).begin(wr_id, wr_flags, operation.segments());
    }
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    // SAFETY: see the module documentation.
    unsafe { begin(qp, operation::Send {}) }
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm_data: u32) {
    // SAFETY: see the module documentation.
    unsafe { begin(qp, operation::SendWithImmediate { imm_data }) }
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: see the module documentation.
    unsafe { begin(qp, operation::Write { rkey, remote_addr }) }
}

unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm_data: u32) {
    let operation = operation::WriteWithImmediate {
        rkey,
        remote_addr,
        imm_data,
    };
    // SAFETY: see the module documentation.
    unsafe { begin(qp, operation) }
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: see the module documentation.
    unsafe { begin(qp, operation::Read { rkey, remote_addr }) }
}

unsafe extern "C" fn wr_atomic_cmp_swp(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, compare: u64, swap: u64) {
    let operation = operation::AtomicCompareAndSwap {
        rkey,
        remote_addr,
        compare,
        swap,
    };
    // SAFETY: see the module documentation.
    unsafe { begin(qp, operation) }
}

unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64) {
    // SAFETY: see the module documentation.
    unsafe { begin(qp, operation::AtomicFetchAndAdd { rkey, remote_addr, add }) }
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: see the module documentation.
    unsafe { state(qp) }.set_data(Data::Sge { lkey, addr, length });
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    // SAFETY: see the module documentation; ibv_wr_set_sge_list(3): the list is valid for the
    // call.
    unsafe { state(qp).set_data(Data::SgeList(list(sg_list, num_sge))) };
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    // SAFETY: see the module documentation; ibv_wr_set_inline_data(3): the buffer is valid for
    // the call (copied during it).
    unsafe { state(qp).set_data(Data::Inline(list(addr.cast::<u8>(), length))) };
}

unsafe extern "C" fn wr_set_inline_data_list(qp: *mut ibv_qp_ex, num_buf: usize, buf_list: *const ibv_data_buf) {
    // SAFETY: ibv_wr_set_inline_data_list(3): the list and its buffers are valid for the call.
    let buffers = unsafe { list(buf_list, num_buf) };
    // An ibv_data_buf is an iovec (pointer, length), which IoSlice is ABI-compatible with on
    // Unix; a NULL pointer (allowed with length 0) is not a slice, so such a list is copied.
    if buffers.iter().all(|buffer| !buffer.addr.is_null()) {
        // SAFETY: as above, every buffer a valid slice.
        let slices = unsafe { std::slice::from_raw_parts(buffers.as_ptr().cast::<IoSlice<'_>>(), buffers.len()) };
        // SAFETY: see the module documentation.
        unsafe { state(qp) }.set_data(Data::InlineList(slices));
    } else {
        let bytes: Vec<u8> = buffers
            .iter()
            // SAFETY: as above (a NULL buffer has length 0).
            .flat_map(|buffer| unsafe { list(buffer.addr.cast::<u8>(), buffer.length) })
            .copied()
            .collect();
        // SAFETY: see the module documentation.
        unsafe { state(qp) }.set_data(Data::Inline(&bytes));
    }
}

unsafe extern "C" fn wr_set_dc_addr(mqp: *mut mlx5dv_qp_ex, ah: *mut ibv_ah, remote_dctn: u32, remote_dc_key: u64) {
    // SAFETY: see the module documentation; mlx5dv_wr_set_dc_addr(3): `ah` is a live address
    // handle.
    unsafe { state_of_mlx5(mqp).set_address(ah, remote_dctn, remote_dc_key, None) };
}

unsafe extern "C" fn wr_set_dc_addr_stream(
    mqp: *mut mlx5dv_qp_ex, ah: *mut ibv_ah, remote_dctn: u32, remote_dc_key: u64, stream_id: u16,
) {
    // SAFETY: as for wr_set_dc_addr.
    unsafe { state_of_mlx5(mqp).set_address(ah, remote_dctn, remote_dc_key, Some(stream_id)) };
}
