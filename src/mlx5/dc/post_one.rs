//! One-request posts on a DC initiator ([`DcInitiator::post_send_one`]): a batch of one.
use sideway::ibverbs::queue_pair::{PostSendError, WorkRequestFlags};

use super::initiator::{DcInitiator, DcWorkRequestHandle};

impl DcInitiator {
    /// Posts one send request: `ibv_wr_start`, the request described by `request` from its
    /// operation on (its DC address included), then `ibv_wr_complete`.
    #[inline]
    pub fn post_send_one(
        &mut self, wr_id: u64, wr_flags: WorkRequestFlags, request: impl FnOnce(DcWorkRequestHandle<'_>),
    ) -> Result<(), PostSendError> {
        let mut guard = self.start_post_send();
        request(guard.construct_wr(wr_id, wr_flags));
        guard.post()
    }
}
