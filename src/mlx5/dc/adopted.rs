//! The DC post guard on a DC initiator created elsewhere, not by this crate (libibverbs and
//! libmlx5 called directly, or provider tables of one's own): its send views checked once
//! ([`AdoptedDcSendViews`]), each batch started on them ([`DcPostSendGuard::start_adopted`]),
//! each request addressed with a raw address handle
//! ([`setup_dc_addr_adopted`](DcDestinationHandle::setup_dc_addr_adopted)).
//!
//! This is sideway-ext's own API, beside the guard of a [`DcInitiator`](super::initiator::DcInitiator):
//! the checks a built DC initiator makes at creation, made here on views the caller vouches for.
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, mlx5dv_qp_ex, mlx5dv_wr_set_dc_addr, mlx5dv_wr_set_dc_addr_stream};
use sideway::ibverbs::queue_pair::SendOperationFlags;

use super::initiator::post_send::DcSendView;
use super::initiator::{DcDestinationHandle, DcLocalBufferHandle, DcPostSendGuard};

/// The extended and mlx5 views of a DC initiator created elsewhere, every entry the guard calls
/// checked filled: the batch entries, the builders of its send operations, the four data setters
/// and `wr_set_dc_addr`.
#[derive(Debug, Clone, Copy)]
pub struct AdoptedDcSendViews(DcSendView);

impl AdoptedDcSendViews {
    /// Checks the views of a DC initiator created with `send_ops`, or names the first entry its
    /// provider left NULL.
    ///
    /// # Safety
    ///
    /// `qp_ex` and `mlx5_qp_ex` must be the extended and mlx5 views of a live DC initiator created
    /// with `send_ops`.
    pub unsafe fn new(
        qp_ex: NonNull<ibv_qp_ex>, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, send_ops: SendOperationFlags,
    ) -> Result<Self, &'static str> {
        // SAFETY: the caller's promise.
        Ok(Self(unsafe { DcSendView::new(qp_ex, mlx5_qp_ex, send_ops, false) }?))
    }
}

impl DcPostSendGuard<'_> {
    /// Starts a batch (`ibv_wr_start`) on the views of a DC initiator created elsewhere.
    ///
    /// # Safety
    ///
    /// The DC initiator of `views` must still be alive, and used by nothing else while the
    /// guard lives.
    #[inline]
    pub unsafe fn start_adopted(views: AdoptedDcSendViews) -> Self {
        // SAFETY: the caller's promise; the views' entries were checked.
        unsafe { Self::start(views.0) }
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
    /// initiator created with streams whose provider filled `wr_set_dc_addr_stream`.
    #[inline]
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
