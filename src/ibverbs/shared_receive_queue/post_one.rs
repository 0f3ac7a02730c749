//! One receive request at the cost of the raw call
//! ([`post_recv_one`](SharedReceiveQueue::post_recv_one)), on a queue of this crate or, raw
//! ([`post_recv_one_raw`](SharedReceiveQueue::post_recv_one_raw)), on one created elsewhere.
use std::ptr::{null_mut, NonNull};

use rdma_mummy_sys::{ibv_post_srq_recv, ibv_recv_wr, ibv_sge, ibv_srq};

use super::post_error::Failure;
use super::{PostReceiveError, SharedReceiveQueue};
use crate::ibverbs::zeroed::Zeroed;

impl SharedReceiveQueue {
    /// Posts one receive request with `ibv_post_srq_recv`, at the cost of the raw call, with a
    /// batch's checks and errors (`failed_index` 0); on error nothing was posted.
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

    /// [`post_recv_one`](Self::post_recv_one) on a raw `ibv_srq` this crate did not create.
    ///
    /// # Safety
    ///
    /// - `srq` must be a live shared receive queue for the duration of the call;
    /// - `max_sge` must be at most the scatter/gather entries per request it was created with;
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
