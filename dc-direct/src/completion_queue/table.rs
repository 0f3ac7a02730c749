//! [`SendQueueTable`]: the send queues of the direct initiators completing into one completion
//! queue, by QP number, shared between the completion queue (which retires their requests) and
//! each initiator (which adds itself when made and takes itself out when dropped).
use std::cell::RefCell;
use std::rc::Rc;

use super::PollDirectCompletionQueueErrorKind;
use crate::send_queue::shared::SharedSendQueue;

/// The send queues of one completion queue.
#[derive(Debug, Default)]
pub(crate) struct SendQueueTable {
    /// Borrowed mutably only by `insert` and `remove`, never during a poll (which borrows it shared).
    entries: RefCell<Vec<Entry>>,
}

#[derive(Debug)]
struct Entry {
    qp_number: u32,
    queue: Rc<SharedSendQueue>,
}

impl SendQueueTable {
    /// Adds the send queue of QP `qp_number`, which completes into this CQ.
    pub(crate) fn insert(&self, qp_number: u32, queue: Rc<SharedSendQueue>) {
        let mut entries = self.entries.borrow_mut();
        debug_assert!(entries.iter().all(|entry| entry.qp_number != qp_number));
        entries.push(Entry { qp_number, queue });
    }

    /// Takes `queue` out (its initiator is dropped).
    pub(crate) fn remove(&self, queue: &Rc<SharedSendQueue>) {
        self.entries
            .borrow_mut()
            .retain(|entry| !Rc::ptr_eq(&entry.queue, queue));
    }

    /// The `wr_id` of the request whose WQE starts at slot `wqe_counter` of QP `qp_number`, after
    /// retiring it and every request posted before it on that QP: `mlx5_parse_cqe`'s send side,
    /// which takes it from `sq.wrid[]` and sets `sq.tail = sq.wqe_head[slot] + 1`.
    ///
    /// # Errors
    ///
    /// Nothing is retired then: [`UnknownQueuePair`](PollDirectCompletionQueueErrorKind::UnknownQueuePair)
    /// when QP `qp_number` is not one of these send queues; and, checks libmlx5 does not make,
    /// [`UnexpectedWqeCounter`](PollDirectCompletionQueueErrorKind::UnexpectedWqeCounter) when no
    /// outstanding request starts at that slot, and
    /// [`SendQueueInUse`](PollDirectCompletionQueueErrorKind::SendQueueInUse) when a batch is open
    /// on the send queue (it is then left as it is).
    #[inline]
    pub(crate) fn retire(&self, qp_number: u32, wqe_counter: u16) -> Result<u64, PollDirectCompletionQueueErrorKind> {
        let entries = self.entries.borrow();
        let entry = entries
            .iter()
            .find(|entry| entry.qp_number == qp_number)
            .ok_or(PollDirectCompletionQueueErrorKind::UnknownQueuePair { qp_number })?;
        entry
            .queue
            .try_with_mut(|queue| {
                queue
                    .complete(wqe_counter)
                    .ok_or(PollDirectCompletionQueueErrorKind::UnexpectedWqeCounter { qp_number, wqe_counter })
            })
            .unwrap_or(Err(PollDirectCompletionQueueErrorKind::SendQueueInUse { qp_number }))
    }
}
