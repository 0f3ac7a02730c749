//! [`SendQueueTable`]: the send queues of the direct initiators completing into one completion
//! queue, by QP number, shared between the completion queue (which retires their requests) and
//! each initiator (which adds itself when made and takes itself out when dropped).
use std::cell::RefCell;
use std::rc::Rc;

use super::{PollDirectCompletionQueueErrorKind, SendQueueSlots};
use crate::send_queue::shared::SharedSendQueue;

/// The send queues of one completion queue.
#[derive(Debug, Default)]
pub(crate) struct SendQueueTable {
    /// Borrowed mutably only by `insert` and `remove` (an initiator made or dropped), never
    /// during a poll, which borrows it shared.
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

    /// Takes `queue` out (its initiator is dropped); its later completions are then of an
    /// unknown QP.
    pub(crate) fn remove(&self, queue: &Rc<SharedSendQueue>) {
        self.entries
            .borrow_mut()
            .retain(|entry| !Rc::ptr_eq(&entry.queue, queue));
    }
}

impl SendQueueSlots for &SendQueueTable {
    /// `mlx5_parse_cqe`'s send side, with checks libmlx5 does not make: the slot must start an
    /// outstanding request, and the queue must not be in a batch (it is then left as it is).
    #[inline]
    fn retire(&mut self, qp_number: u32, wqe_counter: u16) -> Result<u64, PollDirectCompletionQueueErrorKind> {
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
