//! One receive request at the cost of the raw call
//! ([`post_recv_one`](SharedReceiveQueue::post_recv_one)), on a queue of this crate or, raw
//! ([`post_recv_one_raw`](SharedReceiveQueue::post_recv_one_raw)), on one created elsewhere.
use std::ptr::{null_mut, NonNull};

use rdma_mummy_sys::{ibv_post_srq_recv, ibv_recv_wr, ibv_sge, ibv_srq};

use super::post_error::Failure;
use super::{PostReceiveError, SharedReceiveQueue};
use crate::ibverbs::zeroed::Zeroed;

impl SharedReceiveQueue {
    /// Posts one receive request with `ibv_post_srq_recv`, at the cost of the raw call: for the
    /// everyday "repost the receive that just completed". Its entries are read from `sg_list`
    /// during the call (nothing is copied first); an empty list receives zero-length messages
    /// only.
    ///
    /// The same guarantees as a batch: a list longer than the queue's
    /// [`max_sge`](Self::max_sge) is refused before the library
    /// ([`TooManyScatterGatherEntries`](super::PostReceiveErrorKind::TooManyScatterGatherEntries)), and
    /// an error names the request (`failed_index` 0, its `wr_id`); on error nothing was posted.
    ///
    /// # Safety
    ///
    /// Each entry's buffer must lie in the memory region registered with its `lkey` and stay
    /// valid until the receive completes (or the queue is destroyed).
    #[inline]
    pub unsafe fn post_recv_one(&self, wr_id: u64, sg_list: &[ibv_sge]) -> Result<(), PostReceiveError> {
        // SAFETY: the queue is alive during the call and its max_sge is the granted one; the
        // caller keeps the buffers valid.
        unsafe { Self::post_recv_one_raw(self.srq, self.max_sge, wr_id, sg_list) }
    }

    /// [`post_recv_one`](Self::post_recv_one) on a shared receive queue this crate did not
    /// create (by C code, another binding, or a provider's own tables): the same checks and
    /// errors, on the raw `ibv_srq`.
    ///
    /// # Safety
    ///
    /// - `srq` must be a live shared receive queue for the duration of the call;
    /// - `max_sge` must be at most the scatter/gather entries per request it was created with
    ///   (the check against it is the only one before the library);
    /// - the buffers as for [`post_recv_one`](Self::post_recv_one).
    #[inline]
    pub unsafe fn post_recv_one_raw(
        srq: NonNull<ibv_srq>, max_sge: u32, wr_id: u64, sg_list: &[ibv_sge],
    ) -> Result<(), PostReceiveError> {
        let mut wr = Zeroed::<ibv_recv_wr>::new();
        wr.wr_id = wr_id;
        wr.sg_list = sg_list.as_ptr().cast_mut();
        wr.num_sge = sg_list.len() as i32;
        // Checked once the request is written, as raw code writes it first.
        if sg_list.len() > max_sge as usize {
            return Err(one_failed(0, wr.wr_id, sg_list.len(), max_sge));
        }
        let mut bad_wr: *mut ibv_recv_wr = null_mut();
        // SAFETY: a one-request list whose entries (read, never written, by the provider) live
        // until the call returns; the SRQ is alive (the caller's promise).
        let ret = unsafe { ibv_post_srq_recv(srq.as_ptr(), wr.as_mut_ptr(), &mut bad_wr) };
        if ret != 0 {
            // Read back from the request, so that nothing needs to stay live across the call
            // (`max` only matters for too many entries).
            return Err(one_failed(ret, wr.wr_id, 0, 0));
        }
        Ok(())
    }
}

/// The error of a one-request post (`ret` as in [`Failure`]).
#[cold]
#[inline(never)]
fn one_failed(ret: i32, wr_id: u64, requested: usize, max: u32) -> PostReceiveError {
    Failure {
        ret,
        index: 0,
        wr_id,
        requested,
        max,
    }
    .into_error()
}
