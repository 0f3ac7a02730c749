//! [`PostingQueue`]: a direct initiator's send queue as it posts on it, entered in its completion
//! queue's table (which retires its requests as their completions are polled), written through
//! the native guard or through the C entries ([`SendQueueEntries`]): one queue, one writer, two
//! front ends, each batch borrowing the queue from its start to its end.
use std::ptr::NonNull;
use std::rc::Rc;

use rdma_mummy_sys::{ibv_qp_ex, mlx5dv_qp_ex};
use sideway::ibverbs::queue_pair::SendOperationFlags;
use sideway_ext::ibverbs::post_send_guard::ProviderEntries;

use crate::completion_queue::SendQueueTable;
use crate::send_queue::address_cache::AddressLookup;
use crate::send_queue::shared::{DirectPostSendGuard, SharedSendQueue};
use crate::send_queue::{SendQueue, SendQueueEntries};

/// A send queue in a completion queue's table, behind its C entries; taken out of the table when
/// dropped.
#[derive(Debug)]
pub(crate) struct PostingQueue {
    entries: SendQueueEntries,
    table: Rc<SendQueueTable>,
}

impl PostingQueue {
    /// `queue`, entered in `table` under its QP number, behind entries offering `operations`
    /// (the DCI's `send_ops_flags`) that find address vectors with `lookup`.
    pub(crate) fn new(
        queue: SendQueue, operations: SendOperationFlags, lookup: AddressLookup, table: &Rc<SendQueueTable>,
    ) -> Self {
        let qp_number = queue.qp_number();
        let shared = Rc::new(SharedSendQueue::new(queue));
        table.insert(qp_number, Rc::clone(&shared));
        Self {
            entries: SendQueueEntries::over_shared(shared, operations, lookup),
            table: Rc::clone(table),
        }
    }

    /// The C entries' views ([`SendQueueEntries::send_views`]).
    #[inline]
    pub(crate) fn send_views(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        self.entries.send_views()
    }

    /// Opens a native batch, after aborting one the C entries left open.
    #[inline]
    pub(crate) fn start_post_send(&mut self) -> DirectPostSendGuard<'_> {
        self.entries.abort();
        // SAFETY: `&mut self` for the guard's lifetime: no other batch is open (the entries' was
        // just aborted, a native one would borrow `self`), and the completion table borrows the
        // queue only inside a poll, which is not running.
        unsafe { self.entries.shared().start_post_send() }
    }

    /// Requests posted and not yet completed.
    pub(crate) fn outstanding(&self) -> u32 {
        // SAFETY: no `&mut` to the queue is alive: a native batch would borrow `self` mutably, a
        // poll or a C entry's call is not running (this is neither).
        unsafe { self.entries.shared().get() }.outstanding()
    }

    /// Back to posting index 0 with nothing outstanding ([`SendQueue::reset`]), after aborting
    /// a batch the C entries left open.
    pub(crate) fn reset(&mut self) {
        self.entries.abort();
        // `&mut self` and no batch: the queue is free.
        self.entries.shared().try_with_mut(SendQueue::reset);
    }
}

impl Drop for PostingQueue {
    fn drop(&mut self) {
        self.table.remove(self.entries.shared());
    }
}
