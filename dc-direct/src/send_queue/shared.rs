//! A send queue shared between its poster and the completion queue's table, which retires its
//! requests as their completions are polled ([`SharedSendQueue`]); and the batch a program holds
//! open on it natively ([`DirectPostSendGuard`]). The C entries
//! ([`SendQueueEntries`](super::SendQueueEntries)) hold it too, and borrow it from `wr_start` to
//! `wr_complete` or `wr_abort`.
//!
//! Single-threaded (neither `Send` nor `Sync`): one `&mut SendQueue` at a time, as a `RefCell`
//! would give, except that a batch's borrow lasts from its start to its end, which a `RefCell`'s
//! could not while the guard is handed out by value or the batch spans several C calls.
use std::cell::{Cell, UnsafeCell};

use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::{PostSendGuard, SendQueue, WorkRequestHandle};

/// A send queue and whether it is borrowed: by an open batch (native or through the C entries),
/// or by the completion table for one completion.
///
/// A `&mut SendQueue` exists only inside [`try_with_mut`](Self::try_with_mut), for the life of a
/// [`DirectPostSendGuard`], or inside one C entry's call while the entries' batch holds the
/// borrow ([`acquire`](Self::acquire)); between those, the queue may be read
/// ([`read`](Self::read)).
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
    /// No `&mut` to the queue is alive while the reference is (one lives only inside
    /// [`try_with_mut`](Self::try_with_mut), for a [`DirectPostSendGuard`]'s life, and while a C
    /// entry writes a request into the entries' batch).
    #[inline]
    pub(crate) unsafe fn get(&self) -> &SendQueue {
        // SAFETY: the caller's promise.
        unsafe { &*self.queue.get() }
    }

    /// The queue, through `&mut`: nothing else can borrow it.
    pub(crate) fn get_mut(&mut self) -> &mut SendQueue {
        self.queue.get_mut()
    }

    /// Takes the borrow for a batch of the C entries, which then use
    /// [`borrowed_mut`](Self::borrowed_mut) until [`release`](Self::release); `false` when the
    /// queue is borrowed already.
    #[inline]
    pub(crate) fn acquire(&self) -> bool {
        !self.borrowed.replace(true)
    }

    /// Gives back the borrow [`acquire`](Self::acquire) took.
    #[inline]
    pub(crate) fn release(&self) {
        self.borrowed.set(false);
    }

    /// The queue, for one C entry's call.
    ///
    /// # Safety
    ///
    /// The caller took the borrow with [`acquire`](Self::acquire) and has not released it, and
    /// holds no other reference to the queue.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn borrowed_mut(&self) -> &mut SendQueue {
        // SAFETY: the caller's promise: the flag keeps `try_with_mut` and every other batch away.
        unsafe { &mut *self.queue.get() }
    }

    /// Opens a batch on the queue (`mlx5_send_wr_start`), borrowing it until the guard is posted
    /// or dropped.
    ///
    /// # Safety
    ///
    /// The caller has exclusive access to the queue's owner (the initiator, through `&mut`) for
    /// the guard's lifetime, and no batch is open or completion being retired: the flag is
    /// clear.
    pub(crate) unsafe fn start_post_send(&self) -> DirectPostSendGuard<'_> {
        let was_borrowed = self.borrowed.replace(true);
        debug_assert!(!was_borrowed, "a batch opened on a borrowed send queue");
        let borrow = Borrow(&self.borrowed);
        // SAFETY: the caller's promise: nothing else borrows the queue now, and the flag keeps
        // `try_with_mut` away until the guard (which holds this borrow) is gone.
        let queue = unsafe { &mut *self.queue.get() };
        DirectPostSendGuard {
            guard: queue.start_post_send(),
            _borrow: borrow,
        }
    }
}

/// A batch of requests on a direct DC initiator: [`post`](Self::post) rings the doorbell for
/// them; dropped without it, their slots are given back and the device is told nothing. It
/// describes requests as [`PostSendGuard`] does (`construct_wr` → an operation →
/// `setup_dc_addr` → the data), which it wraps.
///
/// While it is alive, completions of this initiator are not read: a poll of its completion
/// queue stops before the first of them
/// ([`SendQueueInUse`](crate::completion_queue::PollCompletionQueueErrorKind::SendQueueInUse)).
#[must_use = "the batch is posted only by post(); dropping the guard gives its slots back"]
#[derive(Debug)]
pub struct DirectPostSendGuard<'a> {
    /// Dropped before the borrow is released.
    guard: PostSendGuard<'a>,
    _borrow: Borrow<'a>,
}

impl DirectPostSendGuard<'_> {
    /// Starts a request ([`PostSendGuard::construct_wr`]).
    #[inline]
    pub fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> WorkRequestHandle<'_> {
        self.guard.construct_wr(wr_id, wr_flags)
    }

    /// How many requests the batch holds ([`PostSendGuard::batch_len`]).
    #[inline]
    pub fn batch_len(&self) -> usize {
        self.guard.batch_len()
    }

    /// Posts the batch ([`PostSendGuard::post`]): rings the doorbell for its requests.
    #[inline]
    pub fn post(self) {
        let Self { guard, _borrow } = self;
        guard.post();
    }
}
