//! One-request posts on a raw queue pair ([`PostSendGuard::post_one`]): the calls of a batch of
//! one.
use std::ptr::NonNull;

use rdma_mummy_sys::ibv_qp_ex;
use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::{PostSendError, PostSendGuard, ProviderEntries, Transport, WorkRequestHandle};

impl<T: Transport> PostSendGuard<'_, T> {
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
        qp_ex: NonNull<ibv_qp_ex>, entries: ProviderEntries, context: T::Context, wr_id: u64,
        wr_flags: WorkRequestFlags, request: impl FnOnce(WorkRequestHandle<'_, T>),
    ) -> Result<(), PostSendError> {
        let mut guard = Self::start(qp_ex, entries, context);
        request(guard.construct_wr(wr_id, wr_flags));
        guard.post()
    }
}

#[cfg(test)]
mod tests {
    //! One-request posts: the same calls as a batch of one.
    use rdma_mummy_sys::ibv_send_flags;
    use sideway::ibverbs::queue_pair::{SendOperationFlags, SetScatterGatherEntry};

    use super::*;
    use crate::ibverbs::post_send_guard::recording::{all_entries, recording_qp, send_only_recording_qp, take_calls};
    use crate::ibverbs::post_send_guard::{PostSendErrorKind, ReliableConnection};

    #[test]
    fn one_request_makes_the_batch_calls_in_order() {
        let mut qp = recording_qp();
        let entries = all_entries(&mut qp);
        take_calls();
        // SAFETY: the recording table outlives the call; RC needs no context; the recorder does
        // not touch the buffer.
        unsafe {
            PostSendGuard::<ReliableConnection>::post_one(
                NonNull::from(&mut *qp),
                entries,
                (),
                5,
                WorkRequestFlags::Signaled,
                |wr| wr.setup_write(0x77, 0x3000).setup_sge(0x9, 0x4000, 16),
            )
        }
        .expect("recorded complete returns 0");
        let signaled = ibv_send_flags::IBV_SEND_SIGNALED.0;
        assert_eq!(
            take_calls(),
            [
                "start".to_string(),
                format!("write wr_id=5 flags={signaled:#x} rkey=0x77 addr=0x3000"),
                "sge lkey=0x9 addr=0x4000 len=16".to_string(),
                "complete".to_string(),
            ]
        );
    }

    #[test]
    fn a_refused_request_reaches_no_null_entry_and_names_its_wr_id() {
        let mut qp = send_only_recording_qp();
        qp.wr_set_inline_data = None;
        // SAFETY: qp is a live ibv_qp_ex.
        let entries = unsafe { ProviderEntries::new(NonNull::from(&mut *qp), SendOperationFlags::Send) }.unwrap();
        take_calls();
        // SAFETY: as above.
        let err = unsafe {
            PostSendGuard::<ReliableConnection>::post_one(
                NonNull::from(&mut *qp),
                entries,
                (),
                9,
                WorkRequestFlags::Signaled,
                |wr| wr.setup_write(1, 2).setup_sge(3, 4, 5),
            )
        }
        .unwrap_err();
        assert!(
            matches!(
                err.0,
                PostSendErrorKind::OperationNotEnabled {
                    index: 0,
                    wr_id: 9,
                    entry: "wr_rdma_write",
                    batch_len: 1
                }
            ),
            "{err:?}"
        );
        // The NULL builder was never called; the batch was aborted.
        assert_eq!(take_calls(), ["start", "abort"]);
        // A request that never reaches its data step posts nothing (an empty batch).
        // SAFETY: as above.
        unsafe {
            PostSendGuard::<ReliableConnection>::post_one(
                NonNull::from(&mut *qp),
                entries,
                (),
                10,
                WorkRequestFlags::Signaled,
                |wr| drop(wr.setup_send()),
            )
        }
        .expect("nothing to post");
        assert_eq!(take_calls(), ["start", "complete"]);
    }
}
