//! Waiting for completion events from a tokio task (feature `tokio`): an
//! [`AsyncCompletionChannel`] puts a completion channel's descriptor, made non-blocking, in
//! tokio's reactor ([`AsyncFd`]). The loop is [`completion_channel`]'s with
//! `channel.wait().await`; [`async_event_waiter`](super::async_event_waiter) shows it beside
//! the SRQ limit event. The reactor's readiness is cleared only after `ibv_get_cq_event` found
//! nothing (`EAGAIN`), so an event that arrives meanwhile is never missed.
use std::io::{self, ErrorKind::WouldBlock};
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
    /// Outside a tokio runtime, or in one without its I/O driver.
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
    /// Makes `channel` non-blocking and registers its descriptor with the tokio reactor.
    ///
    /// # Errors
    ///
    /// [`NoReactor`](CreateAsyncCompletionChannelErrorKind::NoReactor) outside a runtime with
    /// I/O enabled, else `fcntl`'s or the reactor's error.
    pub fn new(channel: Arc<CompletionChannel>) -> Result<Self, CreateAsyncCompletionChannelError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(CreateAsyncCompletionChannelErrorKind::NoReactor.into());
        }
        channel
            .set_nonblocking(true)
            .map_err(CreateAsyncCompletionChannelErrorKind::Ibverbs)?;
        // Registration panics in a runtime without its I/O driver: reported as NoReactor instead.
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

    /// The completion channel, to create CQs on.
    pub fn channel(&self) -> &Arc<CompletionChannel> {
        self.fd.get_ref()
    }

    /// Awaits the next completion event of any CQ of the channel; cancel safe: a dropped future
    /// has consumed no event.
    ///
    /// # Errors
    ///
    /// As [`get_cq_event`](super::extension::CompletionChannelExt::get_cq_event), and the
    /// reactor's errors as [`Ibverbs`](GetCompletionEventErrorKind::Ibverbs).
    pub async fn wait(&self) -> Result<CompletionEvent, GetCompletionEventError> {
        loop {
            let mut ready = self.fd.readable().await.map_err(GetCompletionEventErrorKind::Ibverbs)?;
            match self.try_get_cq_event()? {
                Some(event) => return Ok(event),
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
        use GetCompletionEventErrorKind as Kind;
        match completion_channel::get_cq_event(self.fd.get_ref()) {
            Ok(event) => Ok(Some(event)),
            Err(GetCompletionEventError(Kind::Ibverbs(err))) if err.kind() == WouldBlock => Ok(None),
            Err(err) => Err(err),
        }
    }
}
