//! [`PostReceiveError`]: which request of a batch failed, and how many went in.
use std::io;

/// Error returned by [`SharedReceiveQueuePostGuard::post`](super::SharedReceiveQueuePostGuard::post) and
/// [`SharedReceiveQueue::post_recv_one`](super::SharedReceiveQueue::post_recv_one): which
/// request failed, and how many of the batch were [`posted`](Self::posted) (`ibv_post_srq_recv`
/// stops at `bad_wr`).
#[derive(Debug, thiserror::Error)]
#[error("failed to post receive request {} (wr_id {}); {} of the batch were posted", .0.failed_index(), .0.wr_id(), .0.posted())]
#[non_exhaustive]
pub struct PostReceiveError(#[from] pub PostReceiveErrorKind);

impl PostReceiveError {
    /// Index in the batch of the first request that was not posted.
    pub fn failed_index(&self) -> usize {
        self.0.failed_index()
    }

    /// How many requests of the batch were posted: none when the request was refused before the
    /// library ([`TooManyScatterGatherEntries`](PostReceiveErrorKind::TooManyScatterGatherEntries)),
    /// else all those before the failed one.
    pub fn posted(&self) -> usize {
        self.0.posted()
    }

    /// `wr_id` of the first request that was not posted.
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id()
    }
}

/// The enum type for [`PostReceiveError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostReceiveErrorKind {
    /// The request has more scatter/gather entries than the queue's `max_sge`; checked before the
    /// batch was handed to the library, so none of the batch was posted.
    #[error("request {index} (wr_id {wr_id}) has {requested} scatter/gather entries, the queue's max_sge is {max}")]
    TooManyScatterGatherEntries {
        /// Index of the request in the batch.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// Its number of entries.
        requested: usize,
        /// The queue's `max_sge`.
        max: u32,
    },
    /// The library rejected the request as invalid (EINVAL).
    #[error("request {index} (wr_id {wr_id}) is invalid")]
    InvalidWorkRequest {
        /// Index of the request in the batch.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// The library's error.
        source: io::Error,
    },
    /// The queue is full (ENOMEM).
    #[error("the queue is full at request {index} (wr_id {wr_id})")]
    QueueFull {
        /// Index of the request in the batch.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// The library's error.
        source: io::Error,
    },
    /// Any other error of the library.
    #[error("posting request {index} (wr_id {wr_id}) failed")]
    Ibverbs {
        /// Index of the request in the batch.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// The library's error.
        source: io::Error,
    },
}

impl PostReceiveErrorKind {
    fn failed_index(&self) -> usize {
        match self {
            Self::TooManyScatterGatherEntries { index, .. }
            | Self::InvalidWorkRequest { index, .. }
            | Self::QueueFull { index, .. }
            | Self::Ibverbs { index, .. } => *index,
        }
    }

    fn posted(&self) -> usize {
        match self {
            Self::TooManyScatterGatherEntries { .. } => 0,
            Self::InvalidWorkRequest { index, .. } | Self::QueueFull { index, .. } | Self::Ibverbs { index, .. } => {
                *index
            },
        }
    }

    fn wr_id(&self) -> u64 {
        match self {
            Self::TooManyScatterGatherEntries { wr_id, .. }
            | Self::InvalidWorkRequest { wr_id, .. }
            | Self::QueueFull { wr_id, .. }
            | Self::Ibverbs { wr_id, .. } => *wr_id,
        }
    }
}

/// The first request of a batch that failed: `ret` is the library's errno, or 0 for too many
/// entries (checked before the call).
#[derive(Debug, Clone, Copy)]
pub(super) struct Failure {
    pub(super) ret: i32,
    pub(super) index: usize,
    pub(super) wr_id: u64,
    pub(super) requested: usize,
    pub(super) max: u32,
}

impl Failure {
    #[cold]
    #[inline(never)]
    pub(super) fn into_error(self) -> PostReceiveError {
        let Self {
            ret,
            index,
            wr_id,
            requested,
            max,
        } = self;
        let source = || io::Error::from_raw_os_error(ret);
        match ret {
            0 => PostReceiveErrorKind::TooManyScatterGatherEntries {
                index,
                wr_id,
                requested,
                max,
            },
            libc::EINVAL => PostReceiveErrorKind::InvalidWorkRequest {
                index,
                wr_id,
                source: source(),
            },
            libc::ENOMEM => PostReceiveErrorKind::QueueFull {
                index,
                wr_id,
                source: source(),
            },
            _ => PostReceiveErrorKind::Ibverbs {
                index,
                wr_id,
                source: source(),
            },
        }
        .into()
    }
}
