//! One receive request at the cost of the raw call: [`SharedReceiveQueue::post_recv_one`], on
//! the queue's public API.
use std::ptr::null_mut;

use rdma_mummy_sys::{ibv_post_srq_recv, ibv_recv_wr, ibv_sge};

use super::shared_receive_queue::{PostSrqRecvError, SharedReceiveQueue};
use super::zeroed::Zeroed;

impl SharedReceiveQueue {
    /// Posts one receive request with `ibv_post_srq_recv`, allocating nothing; on error (index 0)
    /// nothing was posted.
    ///
    /// # Safety
    ///
    /// Each entry's buffer must lie in the memory region registered with its `lkey` and stay
    /// valid until the receive completes (or the queue is destroyed).
    #[inline]
    pub unsafe fn post_recv_one(&self, wr_id: u64, sg_list: &[ibv_sge]) -> Result<(), PostSrqRecvError> {
        let mut wr = Zeroed::<ibv_recv_wr>::new();
        wr.wr_id = wr_id;
        wr.sg_list = sg_list.as_ptr().cast_mut();
        // Past i32::MAX entries, the provider refuses the request (and reads none of them).
        wr.num_sge = sg_list.len().min(i32::MAX as usize) as i32;
        let mut bad_wr = null_mut();
        // SAFETY: a one-request list whose entries (read, never written, by the provider) live
        // until the call returns; the queue is alive while `self` is.
        let ret = unsafe { ibv_post_srq_recv(self.srq().as_ptr(), wr.as_mut_ptr(), &mut bad_wr) };
        if ret != 0 {
            return Err(PostSrqRecvError::new(0, wr_id, ret));
        }
        Ok(())
    }
}
