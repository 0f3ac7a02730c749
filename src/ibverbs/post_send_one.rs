//! One-request posts on a raw queue pair ([`TypedPostSendGuard::post_one`]): the calls of a batch of
//! one.
use std::ptr::NonNull;

use rdma_mummy_sys::ibv_qp_ex;
use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::post_send_guard::{
    ProviderEntries, Transport, TypedPostSendError, TypedPostSendGuard, TypedWorkRequestHandle,
};

impl<T: Transport> TypedPostSendGuard<'_, T> {
    /// Posts one request on a raw queue pair: `ibv_wr_start`, the request described by `request`
    /// from its operation step on (as with [`construct_wr`](Self::construct_wr)), then
    /// `ibv_wr_complete`, on a queue pair this crate did not create (see [`start`](Self::start)).
    /// The queue pairs of this crate call it from their `post_send_one`.
    ///
    /// # Safety
    ///
    /// As [`start`](Self::start).
    #[inline]
    pub unsafe fn post_one(
        qp_ex: NonNull<ibv_qp_ex>, entries: ProviderEntries, wr_id: u64, wr_flags: WorkRequestFlags,
        request: impl FnOnce(TypedWorkRequestHandle<'_, T>),
    ) -> Result<(), TypedPostSendError> {
        let mut guard = Self::start(qp_ex, entries);
        request(guard.construct_wr(wr_id, wr_flags));
        guard.post()
    }
}
