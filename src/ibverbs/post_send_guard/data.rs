//! The data step of a request ([`TypedLocalBufferHandle`]): its scatter/gather entries or inline
//! data, at which the request's C calls are made, in order.
use std::io::IoSlice;

use rdma_mummy_sys::{
    ibv_data_buf, ibv_qp_ex, ibv_send_flags, ibv_sge, ibv_wr_set_inline_data, ibv_wr_set_inline_data_list,
    ibv_wr_set_sge, ibv_wr_set_sge_list,
};
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry};

use super::{entry, Destination, Operation, PendingRequest};

/// The data step of a request: scatter/gather entries or inline data. Giving the data issues the
/// request's C calls.
#[must_use = "a request is added to the batch only at its data step"]
pub struct TypedLocalBufferHandle<'g, O: Operation, D: Destination> {
    request: PendingRequest<'g, O>,
    destination: D,
}

impl<'g, O: Operation, D: Destination> TypedLocalBufferHandle<'g, O, D> {
    /// The data step of `request`, sent to `destination`.
    #[inline]
    pub(crate) fn new(request: PendingRequest<'g, O>, destination: D) -> Self {
        Self { request, destination }
    }

    /// Makes the request's C calls in order: `wr_id` and `wr_flags` (with the inline bit set
    /// exactly when the data is inline), the builder, the destination setter, then `data` — or,
    /// when one of their entries is missing, none of them.
    #[inline]
    fn issue<const SETTER: u32, const INLINE: bool>(self, data: impl FnOnce(*mut ibv_qp_ex)) {
        let Self { request, destination } = self;
        let batch = request.batch;
        let needed = O::ENTRY | D::ENTRY | SETTER;
        if batch.missing & needed != 0 {
            batch.refuse(request.wr_id, needed);
            return;
        }
        let qp = batch.qp_ex.as_ptr();
        let inline_bit = ibv_send_flags::IBV_SEND_INLINE.0;
        let flags = if INLINE {
            request.wr_flags | inline_bit
        } else {
            request.wr_flags & !inline_bit
        };
        // SAFETY: the guard that made this request holds the live queue pair exclusively, inside
        // a batch started with ibv_wr_start; every entry called was checked above.
        unsafe {
            (*qp).wr_id = request.wr_id;
            (*qp).wr_flags = flags;
            request.operation.build(qp);
            destination.set(qp);
        }
        data(qp);
        batch.len += 1;
    }
}

// IoSlice is ABI-compatible with iovec, which has the layout of ibv_data_buf (pointer, length).
const _: () = assert!(std::mem::size_of::<IoSlice<'_>>() == std::mem::size_of::<ibv_data_buf>());

impl<O: Operation, D: Destination> SetInlineData for TypedLocalBufferHandle<'_, O, D> {
    /// Copies `buf` into the request (`ibv_wr_set_inline_data`): at most the queue pair's
    /// granted `max_inline_data` bytes.
    #[inline]
    fn setup_inline_data(self, buf: &[u8]) {
        if buf.len() > self.request.batch.max_inline_data as usize {
            return self.request.batch.refuse_inline(self.request.wr_id, buf.len());
        }
        // SAFETY: the data is copied during the call; the entry was checked by issue.
        self.issue::<{ entry::SET_INLINE_DATA }, true>(|qp| unsafe {
            ibv_wr_set_inline_data(qp, buf.as_ptr() as *mut _, buf.len())
        });
    }

    /// Copies the slices, one after the other, into the request (`ibv_wr_set_inline_data_list`).
    #[inline]
    fn setup_inline_data_list(self, bufs: &[IoSlice<'_>]) {
        let max = self.request.batch.max_inline_data as usize;
        if max != u32::MAX as usize {
            let length = bufs.iter().map(|buf| buf.len()).sum();
            if length > max {
                return self.request.batch.refuse_inline(self.request.wr_id, length);
            }
        }
        // SAFETY: IoSlice has ibv_data_buf's layout (checked above); the data is copied during
        // the call; the entry was checked by issue.
        self.issue::<{ entry::SET_INLINE_DATA_LIST }, true>(|qp| unsafe {
            ibv_wr_set_inline_data_list(qp, bufs.len(), bufs.as_ptr() as *const ibv_data_buf)
        });
    }
}

impl<O: Operation, D: Destination> SetScatterGatherEntry for TypedLocalBufferHandle<'_, O, D> {
    /// # Safety
    ///
    /// The buffer must lie in the memory region of `lkey` and stay valid until the request
    /// completes.
    #[inline]
    unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) {
        self.issue::<{ entry::SET_SGE }, false>(|qp| ibv_wr_set_sge(qp, lkey, addr, length));
    }

    /// # Safety
    ///
    /// Each buffer must lie in the memory region of its `lkey` and stay valid until the request
    /// completes; more entries than the queue pair's `max_send_sge` fail the post with
    /// [`InvalidWorkRequest`](super::TypedPostSendErrorKind::InvalidWorkRequest).
    #[inline]
    unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) {
        self.issue::<{ entry::SET_SGE_LIST }, false>(|qp| ibv_wr_set_sge_list(qp, sg_list.len(), sg_list.as_ptr()));
    }
}
