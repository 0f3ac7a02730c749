//! A send queue shared between its poster and the completion queue's table, which retires its
//! requests as their completions are polled ([`SharedSendQueue`]); and the batch a program holds
//! open on it ([`DirectBatch`]).
//!
//! Single-threaded (neither `Send` nor `Sync`): one `&mut SendQueue` at a time, as a `RefCell`
//! would give, except that a batch's borrow lasts from its start to its end, which a `RefCell`'s
//! could not while the guard is handed out by value.
use std::cell::{Cell, UnsafeCell};

use sideway::ibverbs::queue_pair::WorkRequestFlags;

#[cfg(feature = "pool")]
use super::BatchAddress;
use super::{Addressing, DirectRequest, EachRequest, SendQueue, SendQueueBatch};

/// A send queue and whether it is borrowed (by an open batch, or the completion table for one).
///
/// A `&mut SendQueue` exists only inside [`try_with_mut`](Self::try_with_mut) or for the life of
/// a [`DirectBatch`]; between those, the queue may be read ([`get`](Self::get)).
#[derive(Debug)]
pub(crate) struct SharedSendQueue {
    queue: UnsafeCell<SendQueue>,
    borrowed: Cell<bool>,
}

/// Clears the borrow flag when dropped (also when unwinding).
#[derive(Debug)]
struct Borrow<'a>(&'a Cell<bool>);

impl Drop for Borrow<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl SharedSendQueue {
    pub(crate) fn new(queue: SendQueue) -> Self {
        Self {
            queue: UnsafeCell::new(queue),
            borrowed: Cell::new(false),
        }
    }

    /// `f` with the queue, unless a batch is open on it (then `None`).
    #[inline]
    pub(crate) fn try_with_mut<R>(&self, f: impl FnOnce(&mut SendQueue) -> R) -> Option<R> {
        if self.borrowed.replace(true) {
            return None;
        }
        let _borrow = Borrow(&self.borrowed);
        // SAFETY: the flag was clear, so no other `&mut` to the queue exists (an open batch and
        // this function are its only borrowers, and each sets the flag for as long as it holds
        // one); it stays set until `_borrow` is dropped, after `f`'s borrow ended.
        Some(f(unsafe { &mut *self.queue.get() }))
    }

    /// The queue, read.
    ///
    /// # Safety
    ///
    /// No `&mut` to the queue is alive while the reference is.
    #[inline]
    pub(crate) unsafe fn get(&self) -> &SendQueue {
        // SAFETY: the caller's promise.
        unsafe { &*self.queue.get() }
    }

    /// Opens a batch on the queue (`mlx5_send_wr_start`), borrowing it until the guard is posted or dropped.
    ///
    /// # Safety
    ///
    /// The caller has exclusive access to the queue's owner (the initiator, through `&mut`) for the
    /// guard's lifetime, and no batch is open or completion being retired: the flag is clear.
    #[inline]
    pub(crate) unsafe fn start_post_send<A: Addressing>(&self, addressing: A) -> DirectBatch<'_, A> {
        let was_borrowed = self.borrowed.replace(true);
        debug_assert!(!was_borrowed, "a batch opened on a borrowed send queue");
        let borrow = Borrow(&self.borrowed);
        // SAFETY: the caller's promise: nothing else borrows the queue now, and the flag keeps
        // `try_with_mut` away until the guard (which holds this borrow) is gone.
        let queue = unsafe { &mut *self.queue.get() };
        DirectBatch {
            guard: SendQueueBatch::new(queue, addressing),
            _borrow: borrow,
        }
    }
}

/// A batch of requests on a direct DC initiator's send queue. While it is alive, a poll of its completion
/// queue stops before this initiator's first completion
/// ([`SendQueueInUse`](crate::completion_queue::PollDirectCompletionQueueErrorKind::SendQueueInUse)).
#[must_use = "the batch is posted only by post(); dropping the guard gives its slots back"]
#[derive(Debug)]
pub struct DirectBatch<'a, A: Addressing = EachRequest> {
    /// Dropped before the borrow is released.
    guard: SendQueueBatch<'a, A>,
    _borrow: Borrow<'a>,
}

impl<A: Addressing> DirectBatch<'_, A> {
    /// Starts a request ([`SendQueueBatch::construct_wr`]).
    #[inline]
    pub fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> DirectRequest<'_, A> {
        self.guard.construct_wr(wr_id, wr_flags)
    }

    /// How many requests the batch holds ([`SendQueueBatch::batch_len`]).
    #[inline]
    pub fn batch_len(&self) -> usize {
        self.guard.batch_len()
    }

    /// Posts the batch ([`SendQueueBatch::post`]): rings the doorbell for its requests.
    #[inline]
    pub fn post(self) {
        let Self { guard, _borrow } = self;
        guard.post();
    }
}

/// The pool's batch: its steps go straight to the guard; `post` cannot fail (each request was
/// answered at its data step).
#[cfg(feature = "pool")]
impl sideway_ext_dc_pool::initiator::PoolBatch for DirectBatch<'_, BatchAddress> {
    type Request<'r>
        = DirectRequest<'r, BatchAddress>
    where
        Self: 'r;

    #[inline]
    fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> Self::Request<'_> {
        self.guard.construct_wr(wr_id, wr_flags)
    }

    #[inline]
    fn batch_len(&self) -> usize {
        self.guard.batch_len()
    }

    #[inline]
    fn post(self) -> Result<(), sideway_ext_dc_pool::types::PostBatchError> {
        let Self { guard, _borrow } = self;
        guard.post();
        Ok(())
    }
}
