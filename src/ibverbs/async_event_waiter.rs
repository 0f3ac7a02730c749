//! Waiting for asynchronous events from a tokio task (feature `tokio`): an [`AsyncEventWaiter`]
//! puts a device context's asynchronous event file descriptor, made non-blocking, in tokio's
//! reactor ([`AsyncFd`]), so that `waiter.wait().await` sleeps the task, not the thread, until
//! the device raises an event (a shared receive queue below its limit, a queue pair's last WQE,
//! a port change). It is the [`AsyncEventReader`] of the [`async_event`](super::async_event)
//! module, awaited, as [`AsyncCompletionChannel`](super::async_completion_channel::AsyncCompletionChannel)
//! is the completion channel awaited.
//!
//! [`wait`](AsyncEventWaiter::wait) is cancel safe: dropping its future (a `select!` branch that
//! lost, a timeout) consumes no event; the next `wait` or [`try_read`](AsyncEventWaiter::try_read)
//! gets it. The reactor's readiness is cleared only after `ibv_get_async_event` found nothing
//! (`EAGAIN`), so an event that arrives meanwhile is never missed.
//!
//! # The limit-event refill loop
//!
//! A server that receives through a [`SharedReceiveQueue`](super::shared_receive_queue::SharedReceiveQueue)
//! can let the device say when to refill it instead of reposting every receive as it completes:
//! post `max_wr` receives, arm the limit (`srq.modify(ArmLimit(low))`), and when the
//! `SharedReceiveQueueLimitReached` event comes, post receives back up to `max_wr` and arm the
//! limit again (it is one-shot: the device disarms it when it fires).
//!
//! **Under steady traffic, check for the limit event on every drain of the completion queue,
//! not only in `select!`**: while completions keep coming, `select!` may pick the completion
//! branch turn after turn while the queue runs empty, and a UD (or DC) datagram that finds no
//! receive is dropped without a trace. After each drain, look with
//! [`try_read`](AsyncEventWaiter::try_read) (one non-blocking read) and refill at once; keep the
//! `select!` branch for an idle server:
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use sideway::ibverbs::device::{DeviceInfo, DeviceList};
//! use sideway_ext::ibverbs::async_completion_channel::AsyncCompletionChannel;
//! use sideway_ext::ibverbs::async_event::{AsyncEvent, AsyncEventElement, AsyncEventType};
//! use sideway_ext::ibverbs::async_event_waiter::AsyncEventWaiter;
//! use sideway_ext::ibverbs::extension::{
//!     CompletionQueueEventExt, CompletionQueueExt, DeviceContextExt, ProtectionDomainExt,
//! };
//! use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueueModification;
//! use sideway_ext::ibverbs::work_completion::WorkCompletion;
//!
//! let devices = DeviceList::new()?;
//! let ctx = devices.iter().next().ok_or("no RDMA device")?.open()?;
//! let pd = ctx.alloc_pd()?;
//! let events = AsyncEventWaiter::new(ctx.async_event_reader())?;
//! let channel = AsyncCompletionChannel::new(ctx.create_comp_channel()?)?;
//! let cq = ctx.create_cq_builder().setup_cqe(256).setup_comp_channel(channel.channel(), 0).build()?;
//! let srq = pd.create_srq_builder().setup_max_wr(128).build()?;
//! // ... post 128 receives, create the queue pairs, bring them up ...
//! srq.modify(SharedReceiveQueueModification::ArmLimit(32))?;
//! let is_limit = |event: &AsyncEvent| {
//!     event.event_type() == AsyncEventType::SharedReceiveQueueLimitReached
//!         && event.element() == AsyncEventElement::SharedReceiveQueue(srq.id())
//! };
//! let refill = |event: AsyncEvent| -> Result<(), Box<dyn std::error::Error>> {
//!     if is_limit(&event) {
//!         // ... post receives back up to 128 ...
//!         srq.modify(SharedReceiveQueueModification::ArmLimit(32))?;
//!     }
//!     Ok(())
//! };
//! let mut wcs = [WorkCompletion::default(); 32];
//! cq.req_notify_cq(false)?;
//! loop {
//!     while !cq.poll_work_completions(&mut wcs)?.is_empty() { /* handle them */ }
//!     // Every drain: the limit may have fired while the completion queue kept us busy.
//!     while let Some(event) = events.try_read()? {
//!         refill(event)?;
//!     }
//!     tokio::select! {
//!         event = channel.wait() => event?.cq().req_notify_cq(false)?,
//!         // An idle server sleeps here too.
//!         event = events.wait() => refill(event?)?,
//!     }
//! }
//! # }
//! ```
//!
//! `examples/ud_echo.rs` is this loop in full: four UD queue pairs on one shared receive queue.
//!
//! # Reference
//!
//! - rdma-core manpage: [`ibv_get_async_event`](https://man7.org/linux/man-pages/man3/ibv_get_async_event.3.html)
//!   (its non-blocking example), RDMAmojo:
//!   [`ibv_get_async_event`](https://www.rdmamojo.com/2012/08/11/ibv_get_async_event/),
//!   [`ibv_modify_srq`](https://www.rdmamojo.com/2012/12/01/ibv_modify_srq/)
//! - tokio: [`AsyncFd`](https://docs.rs/tokio/1/tokio/io/unix/struct.AsyncFd.html)
use std::io;
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
    /// Called outside a tokio runtime, or in one built without its I/O driver
    /// (`enable_io`/`enable_all`).
    #[error("no tokio runtime with its I/O driver enabled")]
    NoReactor,
    /// Making the descriptor non-blocking, or registering it, failed (`EEXIST`: another
    /// waiter of the same context is registered with this runtime).
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// A device context's asynchronous events, awaited from a tokio task; see the [module](self)
/// documentation.
///
/// It holds the reader (and so the context) and leaves the context's event descriptor
/// non-blocking: every reader of the context shares it. One waiter per context and runtime.
/// Dropping it removes the descriptor from the reactor before the context is released.
#[derive(Debug)]
pub struct AsyncEventWaiter {
    fd: AsyncFd<AsyncEventReader>,
}

impl AsyncEventWaiter {
    /// Makes the context's event descriptor non-blocking and registers it with the current
    /// tokio runtime's reactor; call it from inside the runtime.
    ///
    /// # Errors
    ///
    /// - [`NoReactor`](CreateAsyncEventWaiterErrorKind::NoReactor): not inside a tokio runtime
    ///   with I/O enabled;
    /// - [`Ibverbs`](CreateAsyncEventWaiterErrorKind::Ibverbs): `fcntl` or the reactor's
    ///   registration failed.
    pub fn new(reader: AsyncEventReader) -> Result<Self, CreateAsyncEventWaiterError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(CreateAsyncEventWaiterErrorKind::NoReactor.into());
        }
        reader
            .set_nonblocking(true)
            .map_err(CreateAsyncEventWaiterErrorKind::Ibverbs)?;
        // Registration panics in a runtime built without its I/O driver: that is reported as
        // NoReactor instead of unwinding through the caller.
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

    /// The reader, for its blocking and timed reads (the descriptor stays non-blocking).
    pub fn reader(&self) -> &AsyncEventReader {
        self.fd.get_ref()
    }

    /// Waits, without blocking the thread, for the next asynchronous event of the context.
    ///
    /// Cancel safe: a future dropped before it completes has consumed no event.
    ///
    /// # Errors
    ///
    /// As [`AsyncEventReader::read`], and the reactor's errors, as
    /// [`Ibverbs`](ReadAsyncEventErrorKind::Ibverbs).
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

    /// Reads an event if one is pending, without waiting: one non-blocking `ibv_get_async_event`.
    /// Under steady traffic, call it after every drain (see the [module](self) documentation).
    ///
    /// # Errors
    ///
    /// As [`AsyncEventReader::read`] (never [`io::ErrorKind::WouldBlock`]: that is `Ok(None)`).
    pub fn try_read(&self) -> Result<Option<AsyncEvent>, ReadAsyncEventError> {
        match self.fd.get_ref().read() {
            Ok(event) => Ok(Some(event)),
            Err(ReadAsyncEventError(ReadAsyncEventErrorKind::Ibverbs(err)))
                if err.kind() == io::ErrorKind::WouldBlock =>
            {
                Ok(None)
            },
            Err(err) => Err(err),
        }
    }
}
