//! What the poller asks the send queues whose completions it reads.

use super::PollDirectCompletionQueueErrorKind;

/// The send queues a completion queue serves, as the poller sees them: for a completed WQE, the
/// `wr_id` its request was posted with, and the room its completion frees.
///
/// libmlx5 keeps both in `struct mlx5_qp`: `sq.wrid[]` (the `wr_id` of the request whose WQE
/// starts at each slot) and `sq.wqe_head[]` (the posting count after that request), and on each
/// send completion sets `sq.tail = sq.wqe_head[slot] + 1` (`mlx5_parse_cqe`).
pub(crate) trait SendQueueSlots {
    /// The `wr_id` of the request whose WQE starts at slot `wqe_counter` (masked by the send
    /// queue's WQE count) of QP `qp_number`, after retiring that request and every request
    /// posted before it on that QP.
    ///
    /// # Errors
    ///
    /// Nothing is retired then: [`UnknownQueuePair`](PollDirectCompletionQueueErrorKind::UnknownQueuePair)
    /// when QP `qp_number` is not one of these send queues; for a table that checks it,
    /// [`UnexpectedWqeCounter`](PollDirectCompletionQueueErrorKind::UnexpectedWqeCounter) when no
    /// outstanding request starts at that slot, and
    /// [`SendQueueInUse`](PollDirectCompletionQueueErrorKind::SendQueueInUse) when the send queue is
    /// being posted on.
    fn retire(&mut self, qp_number: u32, wqe_counter: u16) -> Result<u64, PollDirectCompletionQueueErrorKind>;
}
