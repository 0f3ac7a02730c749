//! DCI streams on the post guard: a request addressed on one stream of a DC initiator built with
//! streams ([`setup_dc_addr_stream`](DcDestinationHandle::setup_dc_addr_stream),
//! `mlx5dv_wr_set_dc_addr_stream`).
use std::ptr::NonNull;

use rdma_mummy_sys::{mlx5dv_qp_ex, mlx5dv_wr_set_dc_addr_stream};

use super::initiator::{DcDestinationHandle, DcLocalBufferHandle};
use crate::ibverbs::address_handle::AddressHandle;

impl<'g> DcDestinationHandle<'g> {
    /// As [`setup_dc_addr`](Self::setup_dc_addr), on DCI stream `stream_id`
    /// (`mlx5dv_wr_set_dc_addr_stream`).
    ///
    /// # Safety
    ///
    /// The guard's DC initiator must have been built with streams (`setup_dci_streams`), whose
    /// build checked this setter: libmlx5 before rdma-core 37 has none, and nothing else tells.
    #[inline]
    pub unsafe fn setup_dc_addr_stream(
        self, ah: &'g AddressHandle, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> DcLocalBufferHandle<'g> {
        // SAFETY: right after the request's builder on the guard's live queue pair; the setter
        // is the caller's promise; `ah` is borrowed until the data step (libmlx5 copies it here).
        self.setup_address(|mlx5| unsafe {
            mlx5dv_wr_set_dc_addr_stream(mlx5.as_ptr(), ah.ah().as_ptr(), dct_number, dc_key, stream_id)
        })
    }
}

/// Whether the provider filled `wr_set_dc_addr_stream` for a DC initiator built with streams.
///
/// # Safety
///
/// `mlx5_qp_ex` must be the mlx5 view of a live DC initiator.
pub(crate) unsafe fn check_stream_setter(mlx5_qp_ex: NonNull<mlx5dv_qp_ex>) -> Result<(), &'static str> {
    match mlx5_qp_ex.as_ref().wr_set_dc_addr_stream {
        Some(_) => Ok(()),
        None => Err("wr_set_dc_addr_stream"),
    }
}
