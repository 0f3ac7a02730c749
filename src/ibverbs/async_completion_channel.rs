//! Waiting for completion events from a tokio task (feature `tokio`): an
//! [`AsyncCompletionChannel`] puts a completion channel's file descriptor, made non-blocking, in
//! tokio's reactor ([`AsyncFd`]), so that `channel.wait().await` sleeps the task, not the thread,
//! until a CQ of the channel gets a completion.
//!
//! The loop is [`completion_channel`]'s, with `.await`:
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use sideway::ibverbs::device::{DeviceInfo, DeviceList};
//! use sideway_ext::ibverbs::async_completion_channel::AsyncCompletionChannel;
//! use sideway_ext::ibverbs::extension::{CompletionQueueEventExt, CompletionQueueExt};
//! use sideway_ext::ibverbs::work_completion::WorkCompletion;
//!
//! let devices = DeviceList::new()?;
//! let ctx = devices.iter().next().ok_or("no RDMA device")?.open()?;
//! let channel = AsyncCompletionChannel::new(ctx.create_comp_channel()?)?;
//! let cq = ctx.create_cq_builder().setup_cqe(256).setup_comp_channel(channel.channel(), 0).build()?;
//! cq.req_notify_cq(false)?;
//! let mut wcs = [WorkCompletion::default(); 32];
//! loop {
//!     while !cq.poll_work_completions(&mut wcs)?.is_empty() { /* handle them */ }
//!     let event = channel.wait().await?; // the task sleeps here
//!     event.cq().req_notify_cq(false)?; // re-arm, then drain at the top of the loop
//! }
//! # }
//! ```
//!
//! [`wait`](AsyncCompletionChannel::wait) is cancel safe: dropping its future consumes no
//! event. The reactor's readiness is cleared only after `ibv_get_cq_event` found nothing
//! (`EAGAIN`), so an event that arrives meanwhile is never missed.
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use sideway::ibverbs::completion::CompletionChannel;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::completion_channel::{self, CompletionEvent, GetCompletionEventError, GetCompletionEventErrorKind};

/// Error returned by [`AsyncCompletionChannel::new`].
#[derive(Debug, thiserror::Error)]
#[error("failed to register the completion channel with the tokio runtime")]
#[non_exhaustive]
pub struct CreateAsyncCompletionChannelError(#[from] pub CreateAsyncCompletionChannelErrorKind);

/// The enum type for [`CreateAsyncCompletionChannelError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateAsyncCompletionChannelErrorKind {
    /// Called outside a tokio runtime, or in one built without its I/O driver
    /// (`enable_io`/`enable_all`).
    #[error("no tokio runtime with its I/O driver enabled")]
    NoReactor,
    /// Making the descriptor non-blocking, or registering it, failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// A completion channel whose events a tokio task awaits. It leaves the channel non-blocking.
#[derive(Debug)]
pub struct AsyncCompletionChannel {
    fd: AsyncFd<Arc<CompletionChannel>>,
}

impl AsyncCompletionChannel {
    /// Makes `channel` non-blocking and registers its descriptor with the current tokio
    /// runtime's reactor; call it from inside the runtime.
    ///
    /// # Errors
    ///
    /// - [`NoReactor`](CreateAsyncCompletionChannelErrorKind::NoReactor): not inside a tokio
    ///   runtime with I/O enabled;
    /// - [`Ibverbs`](CreateAsyncCompletionChannelErrorKind::Ibverbs): `fcntl` or the reactor's
    ///   registration failed.
    pub fn new(channel: Arc<CompletionChannel>) -> Result<Self, CreateAsyncCompletionChannelError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(CreateAsyncCompletionChannelErrorKind::NoReactor.into());
        }
        channel
            .set_nonblocking(true)
            .map_err(CreateAsyncCompletionChannelErrorKind::Ibverbs)?;
        // Registration panics in a runtime built without its I/O driver: that is reported as
        // NoReactor instead of unwinding through the caller.
        let registered = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: the descriptor is the channel's, open until the channel is destroyed, which
            // the Arc held by the AsyncFd prevents for the AsyncFd's lifetime; `as_raw_fd`
            // always returns it (the channel's `fd` field is never changed).
            unsafe { AsyncFd::register_with_interest(channel, Interest::READABLE) }
        }));
        match registered {
            Ok(Ok(fd)) => Ok(Self { fd }),
            Ok(Err(err)) => Err(CreateAsyncCompletionChannelErrorKind::Ibverbs(err.into()).into()),
            Err(_) => Err(CreateAsyncCompletionChannelErrorKind::NoReactor.into()),
        }
    }

    /// The completion channel, to create CQs on
    /// ([`setup_comp_channel`](sideway::ibverbs::completion::CompletionQueueBuilder::setup_comp_channel)).
    pub fn channel(&self) -> &Arc<CompletionChannel> {
        self.fd.get_ref()
    }

    /// Waits, without blocking the thread, for the next completion event of any CQ of the
    /// channel. Cancel safe: a dropped future has consumed no event.
    ///
    /// # Errors
    ///
    /// As [`get_cq_event`](super::extension::CompletionChannelExt::get_cq_event), and the
    /// reactor's errors as [`Ibverbs`](GetCompletionEventErrorKind::Ibverbs).
    pub async fn wait(&self) -> Result<CompletionEvent, GetCompletionEventError> {
        loop {
            let mut ready = self.fd.readable().await.map_err(GetCompletionEventErrorKind::Ibverbs)?;
            match self.try_get_cq_event()? {
                // Readiness is kept: more events may be queued, and the next wait reads them.
                Some(event) => return Ok(event),
                // Only now that the channel said EAGAIN: an event that comes later sets it again.
                None => ready.clear_ready(),
            }
        }
    }

    /// Reads an event if one is pending, without waiting.
    ///
    /// # Errors
    ///
    /// As [`wait`](Self::wait).
    pub fn try_get_cq_event(&self) -> Result<Option<CompletionEvent>, GetCompletionEventError> {
        match completion_channel::get_cq_event(self.fd.get_ref()) {
            Ok(event) => Ok(Some(event)),
            Err(GetCompletionEventError(GetCompletionEventErrorKind::Ibverbs(err)))
                if err.kind() == io::ErrorKind::WouldBlock =>
            {
                Ok(None)
            },
            Err(err) => Err(err),
        }
    }
}
