//! DCI streams on the post guard: a request addressed on one stream of a DC initiator built with
//! streams ([`setup_dc_addr_stream`](DcDestinationHandle::setup_dc_addr_stream),
//! `mlx5dv_wr_set_dc_addr_stream`).
use std::ptr::NonNull;

use rdma_mummy_sys::mlx5dv_qp_ex;

use super::initiator::{DcDestinationHandle, DcLocalBufferHandle};
use crate::ibverbs::address_handle::AddressHandle;

impl<'g> DcDestinationHandle<'g> {
    /// As [`setup_dc_addr`](Self::setup_dc_addr), on DCI stream `stream_id`
    /// (`mlx5dv_wr_set_dc_addr_stream`). Where the provider left `wr_set_dc_addr_stream` NULL
    /// (libmlx5 before rdma-core 37 has none), the request is refused: its batch is aborted at
    /// [`post`](super::initiator::DcPostSendGuard::post), `EOPNOTSUPP`.
    ///
    /// # Safety
    ///
    /// The guard's DC initiator must have been built with streams (`setup_dci_streams`).
    #[inline]
    pub unsafe fn setup_dc_addr_stream(
        self, ah: &'g AddressHandle, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> DcLocalBufferHandle<'g> {
        self.setup_address(|mlx5| {
            // SAFETY: the guard's live queue pair, whose views are read.
            let Some(set) = (unsafe { stream_setter(mlx5) }) else {
                return false;
            };
            // SAFETY: right after the request's builder on the guard's live queue pair, built
            // with streams (the caller's promise); `ah` is borrowed until the data step (libmlx5
            // copies it here).
            unsafe { set(mlx5.as_ptr(), ah.ah().as_ptr(), dct_number, dc_key, stream_id) };
            true
        })
    }
}

/// The provider's `wr_set_dc_addr_stream`, which `mlx5dv_wr_set_dc_addr_stream` calls, if it
/// filled it.
///
/// # Safety
///
/// `mlx5_qp_ex` must be the mlx5 view of a live DC initiator.
unsafe fn stream_setter(mlx5_qp_ex: NonNull<mlx5dv_qp_ex>) -> StreamSetter {
    // SAFETY: the caller's promise; a plain field read.
    unsafe { mlx5_qp_ex.as_ref().wr_set_dc_addr_stream }
}

/// The type of `mlx5dv_qp_ex`'s `wr_set_dc_addr_stream`.
type StreamSetter = Option<unsafe extern "C" fn(*mut mlx5dv_qp_ex, *mut rdma_mummy_sys::ibv_ah, u32, u64, u16)>;
