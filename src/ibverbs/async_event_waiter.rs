//! Waiting for asynchronous events from a tokio task (feature `tokio`): an [`AsyncEventWaiter`]
//! puts a device context's event descriptor, made non-blocking, in tokio's reactor ([`AsyncFd`]).
//!
//! # The limit-event refill loop
//!
//! The SRQ limit event is one-shot: refill, then arm the limit again. Under steady traffic
//! `select!` may pick the completion branch turn after turn while the SRQ runs empty (a datagram
//! that finds no receive is dropped): look with [`try_read`](AsyncEventWaiter::try_read) after
//! every drain of the CQ. `examples/ud_echo.rs` is this loop in full.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use sideway::ibverbs::completion::BasicCompletionQueue;
//! use sideway_ext::ibverbs::async_completion_channel::AsyncCompletionChannel;
//! use sideway_ext::ibverbs::async_event::AsyncEventType;
//! use sideway_ext::ibverbs::async_event_waiter::AsyncEventWaiter;
//! use sideway_ext::ibverbs::extension::{CompletionQueueEventExt, CompletionQueueExt};
//! use sideway_ext::ibverbs::shared_receive_queue::{SharedReceiveQueue, SharedReceiveQueueModification};
//! use sideway_ext::ibverbs::work_completion::WorkCompletion;
//!
//! async fn serve(
//!     cq: Arc<BasicCompletionQueue>, channel: AsyncCompletionChannel, events: AsyncEventWaiter,
//!     srq: Arc<SharedReceiveQueue>,
//! ) -> Result<(), Box<dyn std::error::Error>> {
//!     let mut wcs = [WorkCompletion::default(); 32];
//!     cq.req_notify_cq(false)?;
//!     loop {
//!         while !cq.poll_work_completions(&mut wcs)?.is_empty() { /* handle them */ }
//!         let event = match events.try_read()? {
//!             Some(event) => event, // looked for after every drain
//!             None => tokio::select! {
//!                 event = channel.wait() => { event?.cq().req_notify_cq(false)?; continue }
//!                 event = events.wait() => event?,
//!             },
//!         };
//!         if event.event_type() == AsyncEventType::SharedReceiveQueueLimitReached {
//!             // ... post receives back up to max_wr ...
//!             srq.modify(SharedReceiveQueueModification::ArmLimit(32))?;
//!         }
//!     }
//! }
//! ```
use std::io::{self, ErrorKind::WouldBlock};
use std::panic::{catch_unwind, AssertUnwindSafe};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::async_event::{AsyncEvent, AsyncEventReader, ReadAsyncEventError, ReadAsyncEventErrorKind};

/// Error returned by [`AsyncEventWaiter::new`].
#[derive(Debug, thiserror::Error)]
#[error("failed to register the asynchronous event reader with the tokio runtime")]
#[non_exhaustive]
pub struct CreateAsyncEventWaiterError(#[from] pub CreateAsyncEventWaiterErrorKind);

/// The enum type for [`CreateAsyncEventWaiterError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateAsyncEventWaiterErrorKind {
    /// Outside a tokio runtime, or in one without its I/O driver.
    #[error("no tokio runtime with its I/O driver enabled")]
    NoReactor,
    /// Making the descriptor non-blocking, or registering it, failed (`EEXIST`: the context has
    /// a waiter in this runtime).
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// A device context's [`AsyncEventReader`], awaited from a tokio task. It leaves the context's
/// event descriptor (shared by its every reader) non-blocking.
#[derive(Debug)]
pub struct AsyncEventWaiter {
    fd: AsyncFd<AsyncEventReader>,
}

impl AsyncEventWaiter {
    /// Makes the context's event descriptor non-blocking and registers it with the tokio reactor.
    ///
    /// # Errors
    ///
    /// [`NoReactor`](CreateAsyncEventWaiterErrorKind::NoReactor) outside a runtime with I/O
    /// enabled, else `fcntl`'s or the reactor's error.
    pub fn new(reader: AsyncEventReader) -> Result<Self, CreateAsyncEventWaiterError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(CreateAsyncEventWaiterErrorKind::NoReactor.into());
        }
        reader
            .set_nonblocking(true)
            .map_err(CreateAsyncEventWaiterErrorKind::Ibverbs)?;
        // Registration panics in a runtime without its I/O driver: reported as NoReactor instead.
        let registered = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: the descriptor is the context's `async_fd`, open until the context is
            // closed, which the Arc the reader holds prevents for the AsyncFd's lifetime;
            // `as_raw_fd` always returns it (the field is set once, at open).
            unsafe { AsyncFd::register_with_interest(reader, Interest::READABLE) }
        }));
        match registered {
            Ok(Ok(fd)) => Ok(Self { fd }),
            Ok(Err(err)) => Err(CreateAsyncEventWaiterErrorKind::Ibverbs(err.into()).into()),
            Err(_) => Err(CreateAsyncEventWaiterErrorKind::NoReactor.into()),
        }
    }

    /// Awaits the context's next event; cancel safe: a dropped future has consumed no event.
    ///
    /// # Errors
    ///
    /// As [`AsyncEventReader::read`], and the reactor's as [`Ibverbs`](ReadAsyncEventErrorKind::Ibverbs).
    pub async fn wait(&self) -> Result<AsyncEvent, ReadAsyncEventError> {
        loop {
            let mut ready = self.fd.readable().await.map_err(ReadAsyncEventErrorKind::Ibverbs)?;
            match self.try_read()? {
                // Readiness is kept: more events may be queued, and the next wait reads them.
                Some(event) => return Ok(event),
                // Only now that the descriptor said EAGAIN: an event that comes later sets it again.
                None => ready.clear_ready(),
            }
        }
    }

    /// Reads an event if one is pending, without waiting.
    ///
    /// # Errors
    ///
    /// As [`AsyncEventReader::read`] (never [`io::ErrorKind::WouldBlock`]: that is `Ok(None)`).
    pub fn try_read(&self) -> Result<Option<AsyncEvent>, ReadAsyncEventError> {
        match self.fd.get_ref().read() {
            Ok(event) => Ok(Some(event)),
            Err(ReadAsyncEventError(ReadAsyncEventErrorKind::Ibverbs(err))) if err.kind() == WouldBlock => Ok(None),
            Err(err) => Err(err),
        }
    }
}
