//! The DC post guard on a DC initiator this crate did not create
//! ([`DcPostSendGuard::start_adopted`]): libmlx5's tables of one's own.
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, mlx5dv_qp_ex, mlx5dv_wr_set_dc_addr, mlx5dv_wr_set_dc_addr_stream};
use sideway::ibverbs::queue_pair::SendOperationFlags;

use super::initiator::post_send::DcSendView;
use super::initiator::{DcDestinationHandle, DcLocalBufferHandle, DcPostSendGuard};

impl DcPostSendGuard<'_> {
    /// Starts a batch (`ibv_wr_start`) on the extended and mlx5 views of a DC initiator created
    /// elsewhere with `send_ops`, after the checks of a built one (every entry the guard calls, or the
    /// name of the first the provider left NULL).
    ///
    /// # Safety
    ///
    /// The views must be a live DC initiator's, created with `send_ops`, used by nothing else
    /// while the guard lives.
    pub unsafe fn start_adopted(
        qp_ex: NonNull<ibv_qp_ex>, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, send_ops: SendOperationFlags,
    ) -> Result<Self, &'static str> {
        // SAFETY: the caller's promise.
        Ok(unsafe { Self::start(DcSendView::new(qp_ex, mlx5_qp_ex, send_ops)?) })
    }
}

impl<'g> DcDestinationHandle<'g> {
    /// As [`setup_dc_addr`](Self::setup_dc_addr) with an address handle created elsewhere
    /// (`ibv_create_ah`), on DCI stream `stream_id` when given
    /// (`mlx5dv_wr_set_dc_addr_stream`).
    ///
    /// # Safety
    ///
    /// `ah` must be a live address handle until the request's data step; a stream only on a DC
    /// initiator created with streams.
    pub unsafe fn setup_dc_addr_adopted(
        self, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64, stream_id: Option<u16>,
    ) -> DcLocalBufferHandle<'g> {
        // SAFETY: right after the request's builder on the guard's live queue pair; the handle
        // and the stream setter are the caller's promise.
        self.setup_address(|mlx5| unsafe {
            match stream_id {
                None => mlx5dv_wr_set_dc_addr(mlx5.as_ptr(), ah.as_ptr(), dct_number, dc_key),
                Some(id) => mlx5dv_wr_set_dc_addr_stream(mlx5.as_ptr(), ah.as_ptr(), dct_number, dc_key, id),
            }
        })
    }
}
