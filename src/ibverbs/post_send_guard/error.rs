//! [`TypedPostSendError`]: why a batch was not posted (none of it was).
use std::io;

/// Error returned by [`TypedPostSendGuard::post`](super::TypedPostSendGuard::post);
/// `ibv_wr_complete` posts a batch whole or not at all.
#[derive(Debug, thiserror::Error)]
#[error("failed to post a batch of {} send requests; none was posted", .0.batch_len())]
#[non_exhaustive]
pub struct TypedPostSendError(#[from] pub TypedPostSendErrorKind);

impl TypedPostSendError {
    /// How many requests the failed batch held (none of them was posted).
    pub fn batch_len(&self) -> usize {
        self.0.batch_len()
    }
}

/// The enum type for [`TypedPostSendError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TypedPostSendErrorKind {
    /// A request used an operation or data setter the queue pair was not created with, or that its
    /// provider does not implement. It never reached the provider.
    #[error("request {index} (wr_id {wr_id}) needs `{entry}`, which this queue pair was not created with")]
    OperationNotEnabled {
        /// Index in the batch of the first such request.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// The `ibv_qp_ex` entry it needed (`wr_rdma_write`, `wr_set_inline_data_list`, …).
        entry: &'static str,
        /// Requests in the batch.
        batch_len: usize,
    },
    /// A request was invalid (EINVAL): too many scatter/gather entries, inline data over the
    /// queue pair's limit, a missing destination.
    #[error("a request in the batch of {batch_len} is invalid")]
    InvalidWorkRequest {
        /// Requests in the batch.
        batch_len: usize,
        /// The library's error.
        source: io::Error,
    },
    /// A request's inline data is longer than the queue pair's granted `max_inline_data`
    /// (libmlx5 would fail the batch with `ENOMEM`, as if the queue were full). It never reached
    /// the provider.
    #[error("request {index} (wr_id {wr_id}) has {length} bytes of inline data; the queue pair takes at most {max_inline_data}")]
    InlineDataTooLong {
        /// Index in the batch of the first such request.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// Its inline data's length (all slices together).
        length: usize,
        /// The queue pair's granted `max_inline_data`.
        max_inline_data: u32,
        /// Requests in the batch.
        batch_len: usize,
    },
    /// The send queue is full (ENOMEM); on a queue pair whose granted inline size this crate
    /// does not know, also inline data over it.
    #[error("the send queue has no room for the batch of {batch_len}")]
    QueueFull {
        /// Requests in the batch.
        batch_len: usize,
        /// The library's error.
        source: io::Error,
    },
    /// Any other error of the library.
    #[error("posting the batch of {batch_len} failed")]
    Ibverbs {
        /// Requests in the batch.
        batch_len: usize,
        /// The library's error.
        source: io::Error,
    },
}

impl TypedPostSendErrorKind {
    fn batch_len(&self) -> usize {
        match self {
            Self::OperationNotEnabled { batch_len, .. }
            | Self::InlineDataTooLong { batch_len, .. }
            | Self::InvalidWorkRequest { batch_len, .. }
            | Self::QueueFull { batch_len, .. }
            | Self::Ibverbs { batch_len, .. } => *batch_len,
        }
    }
}

#[cold]
#[inline(never)]
pub(super) fn complete_error(ret: i32, batch_len: usize) -> TypedPostSendError {
    let source = io::Error::from_raw_os_error(ret);
    match ret {
        libc::EINVAL => TypedPostSendErrorKind::InvalidWorkRequest { batch_len, source },
        libc::ENOMEM => TypedPostSendErrorKind::QueueFull { batch_len, source },
        _ => TypedPostSendErrorKind::Ibverbs { batch_len, source },
    }
    .into()
}
