//! [`PostingQueue`]: a direct initiator's send queue as it posts on it, entered in its completion
//! queue's table (which retires its requests as their completions are polled), each batch
//! borrowing the queue from its start to its end.
use std::rc::Rc;

use crate::completion_queue::SendQueueTable;
use crate::send_queue::shared::{DirectBatch, SharedSendQueue};
use crate::send_queue::{Addressing, SendQueue};

/// A send queue in a completion queue's table; taken out of the table when dropped.
#[derive(Debug)]
pub(crate) struct PostingQueue {
    queue: Rc<SharedSendQueue>,
    table: Rc<SendQueueTable>,
}

impl PostingQueue {
    /// `queue`, entered in `table` under its QP number.
    pub(crate) fn new(queue: SendQueue, table: &Rc<SendQueueTable>) -> Self {
        let qp_number = queue.qp_number();
        let queue = Rc::new(SharedSendQueue::new(queue));
        table.insert(qp_number, Rc::clone(&queue));
        Self {
            queue,
            table: Rc::clone(table),
        }
    }

    /// Opens a batch addressed as `addressing` says.
    #[inline]
    pub(crate) fn start_post_send<A: Addressing>(&mut self, addressing: A) -> DirectBatch<'_, A> {
        // SAFETY: `&mut self` for the guard's lifetime: no other batch is open (one would borrow `self`), and
        // the completion table borrows the queue only inside a poll, which is not running.
        unsafe { self.queue.start_post_send(addressing) }
    }

    /// Requests posted and not yet completed.
    pub(crate) fn outstanding(&self) -> u32 {
        // SAFETY: no `&mut` to the queue is alive: a batch would borrow `self` mutably, a poll is not running.
        unsafe { self.queue.get() }.outstanding()
    }

    /// Back to posting index 0 with nothing outstanding ([`SendQueue::reset`]).
    pub(crate) fn reset(&mut self) {
        // `&mut self` and no batch: the queue is free.
        self.queue.try_with_mut(SendQueue::reset);
    }
}

impl Drop for PostingQueue {
    fn drop(&mut self) {
        self.table.remove(&self.queue);
    }
}
