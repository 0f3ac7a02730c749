//! DCI streams on the post guard: a request addressed on one stream of a DC initiator built with
//! streams ([`setup_dc_addr_stream`](DcDestinationHandle::setup_dc_addr_stream),
//! `mlx5dv_wr_set_dc_addr_stream`).
use rdma_mummy_sys::mlx5dv_wr_set_dc_addr_stream;

use super::initiator::{DcDestinationHandle, DcLocalBufferHandle};
use crate::ibverbs::address_handle::AddressHandle;

impl<'g> DcDestinationHandle<'g> {
    /// As [`setup_dc_addr`](Self::setup_dc_addr), on DCI stream `stream_id`
    /// (`mlx5dv_wr_set_dc_addr_stream`).
    ///
    /// # Safety
    ///
    /// The guard's DC initiator must have been built with streams (`setup_dci_streams`), whose
    /// build checked this setter (libmlx5 before rdma-core 37 has none, and nothing else tells:
    /// such a build is refused, `MissingProviderEntry`); for the guard of adopted views
    /// ([`start_adopted`](super::initiator::DcPostSendGuard::start_adopted)), created with
    /// streams by a provider that filled `wr_set_dc_addr_stream`.
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
