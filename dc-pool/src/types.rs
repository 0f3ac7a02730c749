//! The pool's public values and the errors of its operations.
use sideway::ibverbs::device_context::Mtu;

use super::destinations::Refusal;
use super::path_mtus::mtu_bytes;
use sideway_ext::ibverbs::post_send_guard::TypedPostSendError;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::endpoint::CreateDcAddressHandleError;

/// How a [`DcInitiatorPool`](super::DcInitiatorPool) assigns its DC initiators to destinations
/// (UCX's `dc_mlx5` policies `dcs`, `dcs_quota`, hashing, `hw_dcs`). Each keeps the order of a
/// destination's requests (re-post its [retries](DcPoolEvent::Retry) before anything newer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DcPoolPolicy {
    /// A destination holds a DC initiator of its own while it has requests outstanding.
    Dedicated,
    /// As [`Dedicated`](Self::Dedicated), but a destination that posted `quota` requests while
    /// others are in line waits for its turn again ([`DcPoolWouldBlock::QuotaExhausted`]).
    DedicatedWithQuota {
        /// Requests a destination may post per holding while others wait (at least 1).
        quota: u32,
    },
    /// Each destination is bound by a hash to one initiator it shares: a slow or failing one
    /// delays, or hands back for a retry, the others' requests.
    Static,
    /// DCI streams (ConnectX-6 Dx and newer): bound by a hash to an initiator and one of its
    /// streams; an error completion errors the stream only (`mlx5dv_dci_stream_id_reset`).
    Streams,
}

impl DcPoolPolicy {
    /// Whether destinations hold initiators of their own (dedicated policies).
    pub(crate) fn is_dedicated(self) -> bool {
        matches!(self, Self::Dedicated | Self::DedicatedWithQuota { .. })
    }
}

/// A destination of a pool: a place and a generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DestinationId {
    index: u32,
    generation: u32,
}

impl DestinationId {
    #[inline]
    pub(crate) fn new(index: u32, generation: u32) -> Self {
        Self { index, generation }
    }

    /// Its place in the pool, from 0; a removed destination's place is reused.
    pub fn index(self) -> usize {
        self.index as usize
    }

    /// How many destinations had this place before it.
    pub fn generation(self) -> u32 {
        self.generation
    }
}

/// Why a post cannot go ahead now; each but `BatchFull` ends with a [`DcPoolEvent::Ready`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DcPoolWouldBlock {
    /// Dedicated policies: it is in line.
    #[error("no DC initiator is free for this destination now")]
    NoInitiator,
    /// Quota used.
    #[error("the destination used its quota while other destinations wait")]
    QuotaExhausted,
    /// Until requests complete.
    #[error("the DC initiator's send queue is full")]
    QueueFull,
    /// See [`room`](super::post_guard::DcPoolPostGuard::room).
    #[error("the batch is full: post it and start another")]
    BatchFull,
    /// Recovered once the device flushed its requests.
    #[error("DC initiator {initiator} (stream {stream:?}) is being recovered")]
    Recovering {
        /// The initiator.
        initiator: usize,
        /// Its stream in error, or `None` when the whole initiator is.
        stream: Option<u16>,
    },
}

/// Why a destination can or cannot post now, and what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DestinationState {
    /// It holds no initiator and is not in line (dedicated policies): post.
    Idle,
    /// It holds or is bound to `initiator`, which has room: post now.
    Holds {
        /// The initiator.
        initiator: usize,
        /// Its DCI stream (streams policy), else `None`.
        stream: Option<u16>,
    },
    /// It waits in line for an initiator: wait for its [`DcPoolEvent::Ready`], or
    /// [`cancel_wait`](super::DcInitiatorPool::cancel_wait).
    InLine {
        /// How many destinations are before it in line (0: it is next).
        place: usize,
    },
    /// It posted its quota while others are in line: poll until its [`DcPoolEvent::Ready`].
    OverQuota {
        /// The initiator it holds.
        initiator: usize,
    },
    /// The send queue of its initiator (stream) is full: poll until its [`DcPoolEvent::Ready`].
    QueueFull {
        /// The initiator.
        initiator: usize,
        /// Its DCI stream (streams policy), else `None`.
        stream: Option<u16>,
    },
    /// Its initiator (or DCI stream) is being recovered: poll until its [`DcPoolEvent::Ready`].
    Recovering {
        /// The initiator.
        initiator: usize,
        /// Its stream in error, or `None` when the whole initiator is.
        stream: Option<u16>,
    },
    /// It was reported unreachable ([`DcPoolEvent::Unreachable`]).
    Unreachable,
    /// It was retired: poll until its [`DcPoolEvent::Removed`].
    Retiring {
        /// Its requests not reported yet.
        outstanding: u64,
    },
    /// Every initiator of the pool is out of service ([`DcPoolEvent::InitiatorLost`]).
    NoInitiatorInService,
    /// It is not one of this pool's (a stale id, or another pool's).
    Unknown,
}

/// What happened to a request (exactly once: `Completed`, `Failed` or `Retry`) or destination.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DcPoolEvent {
    /// The request completed successfully.
    Completed {
        /// Its destination.
        destination: DestinationId,
        /// The `wr_id` it was posted with.
        wr_id: u64,
    },
    /// The request failed.
    Failed {
        /// Its destination.
        destination: DestinationId,
        /// The `wr_id` it was posted with.
        wr_id: u64,
        /// The `ibv_wc_status` of its error completion (`IBV_WC_WR_FLUSH_ERR` when flushed behind it).
        status: u32,
        /// The error completion's `vendor_err`; 0 for a request flushed behind it.
        vendor_err: u32,
    },
    /// Flushed for another destination's error: post it again, before its newer requests.
    Retry {
        /// Its destination.
        destination: DestinationId,
        /// The `wr_id` it was posted with.
        wr_id: u64,
    },
    /// The destination, refused with a [would-block](DcPoolWouldBlock), may post again.
    Ready {
        /// The destination.
        destination: DestinationId,
    },
    /// The destination's requests kept failing with retry counter exceeded or remote invalid
    /// request; reported once, just before that [`Failed`](Self::Failed).
    Unreachable {
        /// The destination.
        destination: DestinationId,
    },
    /// Oldest outstanding for the [stall timeout](super::settings::DcPoolSettings::setup_stall_timeout);
    /// reported once. Usually a SEND to a target whose receive queue ran dry (`rnr_retry` 7).
    Stalled {
        /// The destination.
        destination: DestinationId,
        /// The initiator it stalls.
        initiator: usize,
        /// Its DCI stream (streams policy), else `None`.
        stream: Option<u16>,
    },
    /// An initiator in ERR could not be recovered: it is out of service.
    InitiatorLost {
        /// Its index in the pool.
        initiator: usize,
        /// The recovery's error, as text.
        error: String,
    },
    /// The destination, [retired](super::DcInitiatorPool::retire_destination), is removed.
    Removed {
        /// The destination.
        destination: DestinationId,
    },
    /// A completion of another queue pair on the pool's CQ.
    OtherCompletion(WorkCompletion),
}

/// What a pool holds, to see that it stays bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DcPoolFootprint {
    /// Places for destinations: the most that were live at once.
    pub destination_places: usize,
    /// Destinations live now.
    pub live_destinations: usize,
    /// Address handles held.
    pub address_handles: usize,
    /// Destinations in line for an initiator.
    pub waiting: usize,
    /// Grants not known to be used yet.
    pub grant_timers: usize,
    /// Records of runs of requests in flight.
    pub batch_records: usize,
    /// Ready events not reported yet.
    pub ready_events: usize,
}

/// Error returned by [`DcInitiatorPool::start_post_send`](super::DcInitiatorPool::start_post_send).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
#[non_exhaustive]
pub struct PostToDestinationError(#[from] pub PostToDestinationErrorKind);

impl PostToDestinationError {
    /// Whether this is a would-block refusal.
    pub fn is_would_block(&self) -> bool {
        matches!(self.0, PostToDestinationErrorKind::WouldBlock(_))
    }
}

/// The enum type for [`PostToDestinationError`]; nothing was posted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostToDestinationErrorKind {
    /// Not now: no initiator, quota used, or send queue full.
    #[error(transparent)]
    WouldBlock(#[from] DcPoolWouldBlock),
    /// See [`DcPoolEvent::Unreachable`].
    #[error("the destination was reported unreachable")]
    Unreachable,
    /// Every initiator of the pool is out of service ([`DcPoolEvent::InitiatorLost`]).
    #[error("every DC initiator of the pool is out of service")]
    NoInitiatorInService,
    /// The destination is not one of this pool's.
    #[error("no such destination in this pool (removed, or another pool's)")]
    UnknownDestination,
    /// The destination was retired.
    #[error("the destination was retired")]
    Retiring,
    /// The wrong one of `start_post_send` and `start_post_send_on_stream`.
    #[error("{}", if *streams_pool { "a pool with DCI streams posts with start_post_send_on_stream" } else { "a pool without DCI streams posts with start_post_send" })]
    StreamsMismatch {
        /// Whether the pool has DCI streams.
        streams_pool: bool,
    },
    /// Its next post tries again.
    #[error(transparent)]
    AddressHandle(#[from] CreateDcAddressHandleError),
    /// [`PoolInitiator::address`](super::PoolInitiator::address) failed; retried on next post.
    #[error("the initiators could not make the destination's address")]
    Address {
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Its packets would be dropped there.
    #[error("the destination's path MTU is {destination:?}, the pool's initiators send {initiators:?}")]
    PathMtuTooSmall {
        /// The destination's path MTU.
        destination: Mtu,
        /// The initiators'.
        initiators: Mtu,
    },
}

impl From<Refusal> for PostToDestinationErrorKind {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::WouldBlock(reason) => Self::WouldBlock(reason),
            Refusal::Unreachable => Self::Unreachable,
            Refusal::NoInitiatorInService => Self::NoInitiatorInService,
            Refusal::Retiring => Self::Retiring,
            Refusal::StreamsMismatch { streams_pool } => Self::StreamsMismatch { streams_pool },
            // The pool resolves an address before asking again: never reported.
            Refusal::UnknownDestination | Refusal::Unresolved => Self::UnknownDestination,
        }
    }
}

/// Error returned by [`DcPoolPostGuard::post`](super::post_guard::DcPoolPostGuard::post) and
/// [`PoolBatch::post`](super::initiator::PoolBatch::post); a batch is posted whole or not at all.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
#[non_exhaustive]
pub struct PostBatchError(#[from] pub PostBatchErrorKind);

impl PostBatchError {
    /// How many requests the failed batch held (none of them was posted).
    pub fn batch_len(&self) -> usize {
        match &self.0 {
            PostBatchErrorKind::Post(err) => err.batch_len(),
            PostBatchErrorKind::ReadResponsesTooLarge { batch_len, .. } => *batch_len,
        }
    }
}

impl From<TypedPostSendError> for PostBatchError {
    fn from(err: TypedPostSendError) -> Self {
        Self(err.into())
    }
}

/// The enum type for [`PostBatchError`]; none of the batch was posted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostBatchErrorKind {
    /// Refused by the initiator's post guard, or by its provider.
    #[error(transparent)]
    Post(#[from] TypedPostSendError),
    /// An RDMA READ longer than the initiator's path MTU, to a destination whose path MTU is
    /// larger ([`PathMtus::read_fits`](crate::path_mtus::PathMtus::read_fits)): it would end in
    /// `IBV_WC_RETRY_EXC_ERR`. It never reached the provider. Read at most `path_mtu`'s bytes per
    /// request, or bring both ends up with one path MTU.
    #[error(
        "request {index} (wr_id {wr_id}) of a batch of {batch_len} reads {length} bytes from a responder whose path \
         MTU is {} bytes, larger than the initiator's {}: its responses would come in packets this side's path \
         drops; none was posted",
        mtu_bytes(*responder_path_mtu),
        mtu_bytes(*path_mtu)
    )]
    ReadResponsesTooLarge {
        /// Index in the batch of the first such request.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// The READ's length (its scatter/gather entries together).
        length: u64,
        /// The initiator's path MTU: the longest READ the batch may carry to this destination.
        path_mtu: Mtu,
        /// The destination's path MTU, larger.
        responder_path_mtu: Mtu,
        /// Requests in the batch.
        batch_len: usize,
    },
}

/// Error returned by [`DcInitiatorPool::remove_destination`](super::DcInitiatorPool::remove_destination).
#[derive(Debug, thiserror::Error)]
#[error("cannot remove the destination")]
#[non_exhaustive]
pub struct RemoveDestinationError(#[from] pub RemoveDestinationErrorKind);

/// The enum type for [`RemoveDestinationError`]; nothing was removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoveDestinationErrorKind {
    /// Requests of the destination are not reported yet.
    #[error("{requests} requests of the destination are not reported yet")]
    Outstanding {
        /// How many.
        requests: u64,
    },
    /// The destination is not one of this pool's.
    #[error("no such destination in this pool (removed already, or another pool's)")]
    UnknownDestination,
}
