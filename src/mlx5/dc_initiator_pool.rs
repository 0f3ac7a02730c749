//! A pool of DC initiators that serves many destinations: DC at scale.
//!
//! One [`DcInitiator`] serialises every destination behind it: a slow peer stalls the others, and
//! one error completion puts it in ERR for all of them. A [`DcInitiatorPool`] creates several on
//! one send CQ, assigns them to destinations by a [`DcPoolPolicy`], keeps one address handle per
//! destination, maps every completion back to its request and destination, and recovers an
//! initiator an error put in ERR (UCX's `dc_mlx5` transport does the same for its endpoints).
//!
//! A batch goes to one destination: [`start_post_send`](DcInitiatorPool::start_post_send) (or,
//! for the [streams](DcPoolPolicy::Streams) policy,
//! [`start_post_send_on_stream`](DcInitiatorPool::start_post_send_on_stream)) → `construct_wr` →
//! operation → data → `post`. [`poll`](DcInitiatorPool::poll) reports every request exactly once
//! from its own completion (the pool signals them all), hands initiators that free up to the
//! destinations in line ([`DcPoolEvent::Ready`]), and recovers errored streams and initiators
//! once the device flushed them. Destinations come and go
//! ([`remove_destination`](DcInitiatorPool::remove_destination), generational ids); the send
//! CQ may be shared with other queue pairs ([`complete`](DcInitiatorPool::complete),
//! [`DcPoolEvent::OtherCompletion`]) or created by the pool
//! ([`setup_own_send_cq`](DcInitiatorPoolBuilder::setup_own_send_cq)).
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use sideway::ibverbs::device::DeviceList;
//! use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
//! use sideway_ext::mlx5::dc_endpoint::DcEndpoint;
//! use sideway_ext::mlx5::dc_initiator::DcInitiatorBringUp;
//! use sideway_ext::mlx5::dc_initiator_pool::{DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, PostToDestinationErrorKind};
//! use sideway_ext::mlx5::extension::DcProtectionDomainExt;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let endpoints: Vec<DcEndpoint> = Vec::new();
//! # let (lkey, addr, rkey, remote_addr) = (0u32, 0u64, 0u32, 0u64);
//! let ctx = DeviceList::new()?.iter().next().expect("a device").open()?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq_builder().setup_cqe(4096).build()?;
//! let mut pool = pd
//!     .create_dci_pool_builder()
//!     .setup_send_cq(cq)
//!     .setup_initiators(16)
//!     .setup_policy(DcPoolPolicy::DedicatedWithQuota { quota: 64 })
//!     .setup_max_send_wr(128)
//!     .setup_bring_up(DcInitiatorBringUp::new(1))
//!     .setup_src_gid_index(3)
//!     .build()?;
//! // One destination per peer's DC target (its endpoint came over the wire).
//! let peers: Vec<_> = endpoints.iter().map(|e| pool.add_destination(e.clone())).collect();
//! match pool.start_post_send(peers[0]) {
//!     Ok(mut guard) => {
//!         // The same request builder as a DC initiator's, minus the address: the pool sets it.
//!         // SAFETY: the buffer is registered and outlives the request.
//!         unsafe { guard.construct_wr(1, WorkRequestFlags::Signaled)?.setup_write(rkey, remote_addr).setup_sge(lkey, addr, 64) };
//!         guard.post()?;
//!     },
//!     // In line: `poll` reports `Ready` for it when it holds an initiator.
//!     Err(e) if matches!(e.0, PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)) => {},
//!     // Nothing was posted (queue full, quota, recovery): try again after polling.
//!     Err(e) if e.is_would_block() => {},
//!     Err(e) => return Err(e.into()),
//! }
//! pool.poll(|event| match event {
//!     DcPoolEvent::Completed { destination, wr_id } => println!("{wr_id} reached {destination:?}"),
//!     DcPoolEvent::Retry { destination, wr_id } => println!("post {wr_id} to {destination:?} again"),
//!     DcPoolEvent::Ready { destination } => println!("post to {destination:?} now"),
//!     other => println!("{other:?}"),
//! })?;
//! # Ok(())
//! # }
//! ```
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, mlx5dv_qp_ex};
use sideway::ibverbs::completion::{
    CompletionChannel, CompletionQueue, CreateCompletionQueueError, CreateCompletionQueueErrorKind,
    GenericCompletionQueue, PollCompletionQueueError,
};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{QueuePairState, SendOperationFlags, WorkRequestFlags};

use super::dc_endpoint::{CreateDcAddressHandleError, DcEndpoint};
use super::dc_initiator::{
    BringUpDcInitiatorError, CreateDcInitiatorError, DcAddress, DcInitiator, DcInitiatorBringUp, DcInitiatorBuilder,
    DcStreamAddress, DciStreams,
};
use super::dc_pool_assignment::{encode, initiator_of, Grant, PoolCore, Refusal, RemoveRefusal, MAX_INITIATORS};
pub use super::dc_pool_assignment::{DcPoolEvent, DcPoolFootprint, DcPoolPolicy, DcPoolWouldBlock, DestinationId};
// The supertrait of `PostingInitiator`: reachable, so that hand-made initiators outside the crate
// (the benchmarks') can implement both.
#[doc(hidden)]
pub use super::dc_pool_assignment::{PooledInitiator, StreamResetRefusal};
use crate::ibverbs::address_handle::AddressHandle;
use crate::ibverbs::extension::CompletionQueueExt;
use crate::ibverbs::post_send_guard::{
    sealed, Destination, LocalBufferHandle, Operation, PendingRequest, PostSendError, PostSendGuard, ProviderEntries,
    RemoteMemoryAccess, Transport, WorkRequestHandle,
};
use crate::ibverbs::work_completion::WorkCompletion;

/// Error returned by [`DcInitiatorPoolBuilder::build`].
#[derive(Debug, thiserror::Error)]
#[error("failed to create DC initiator pool")]
#[non_exhaustive]
pub struct CreateDcInitiatorPoolError(#[from] pub CreateDcInitiatorPoolErrorKind);

impl CreateDcInitiatorPoolError {
    /// Whether the device is not mlx5, libmlx5 is missing, the device has no DC, or (streams
    /// policy) the device has no DCI streams (its `dci_streams_caps.max_log_num_concurent` is 0
    /// or not reported: [`DciStreamsNotSupported`](super::dc_initiator::CreateDcInitiatorErrorKind::DciStreamsNotSupported)).
    pub fn is_not_supported(&self) -> bool {
        use super::dc_initiator::CreateDcInitiatorErrorKind as Kind;
        match &self.0 {
            CreateDcInitiatorPoolErrorKind::Initiator { source, .. } => {
                source.is_not_supported() || matches!(source.0, Kind::DciStreamsNotSupported)
            },
            _ => false,
        }
    }
}

/// The enum type for [`CreateDcInitiatorPoolError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateDcInitiatorPoolErrorKind {
    /// The number of initiators is 0 or above the pool's limit of 65 536.
    #[error("a pool holds 1 to {max} DC initiators, not {requested}")]
    InvalidInitiatorCount {
        /// What was asked for.
        requested: usize,
        /// The limit.
        max: usize,
    },
    /// The streams policy needs DCI streams (`setup_dci_streams`), and the other policies must
    /// not have them.
    #[error("the {policy:?} policy {requirement}")]
    StreamsMismatch {
        /// The policy.
        policy: DcPoolPolicy,
        /// What it requires.
        requirement: &'static str,
    },
    /// No send completion queue was given (`setup_send_cq`) nor asked for
    /// (`setup_own_send_cq`).
    #[error("a send completion queue is required (setup_send_cq or setup_own_send_cq)")]
    MissingSendCompletionQueue,
    /// The send completion queue given holds fewer completions than can be in flight: every
    /// request is signalled, so it needs initiators × send queue entries.
    #[error("the send completion queue holds {cqe} completions; {needed} requests can be in flight")]
    SendCompletionQueueTooSmall {
        /// What it holds (`ibv_cq.cqe`).
        cqe: u32,
        /// Initiators × send queue.
        needed: u64,
    },
    /// Creating the pool's own send completion queue (`setup_own_send_cq`) failed, e.g. larger
    /// than the device's `max_cqe`.
    #[error("creating the pool's send completion queue of {cqe} entries failed")]
    SendCompletionQueue {
        /// The size asked for (initiators × send queue).
        cqe: u64,
        /// Why.
        #[source]
        source: CreateCompletionQueueError,
    },
    /// No bring-up parameters were given (`setup_bring_up`).
    #[error("the pool brings its initiators up: setup_bring_up is required")]
    MissingBringUp,
    /// Creating initiator `index` failed (the ones before it were destroyed).
    #[error("creating DC initiator {index} failed")]
    Initiator {
        /// Which one.
        index: usize,
        /// Why.
        #[source]
        source: CreateDcInitiatorError,
    },
    /// Bringing initiator `index` up failed.
    #[error("bringing DC initiator {index} up failed")]
    BringUp {
        /// Which one.
        index: usize,
        /// Why.
        #[source]
        source: BringUpDcInitiatorError,
    },
}

/// Builds a [`DcInitiatorPool`]; see
/// [`DcProtectionDomainExt::create_dci_pool_builder`](super::extension::DcProtectionDomainExt::create_dci_pool_builder).
#[derive(Debug)]
pub struct DcInitiatorPoolBuilder {
    pd: Arc<ProtectionDomain>,
    initiator: DcInitiatorBuilder,
    send_cq: Option<GenericCompletionQueue>,
    streams: Option<DciStreams>,
    count: usize,
    policy: DcPoolPolicy,
    bring_up: Option<DcInitiatorBringUp>,
    src_gid_index: u8,
    unreachable_after: u32,
    max_send_wr: u32,
    grant_timeout: u64,
    own_send_cq: Option<OwnSendCq>,
}

/// What the pool's own send CQ is created on: the device, and a completion channel with its
/// completion vector.
type OwnSendCq = (Arc<DeviceContext>, Option<(Arc<CompletionChannel>, u32)>);

impl DcInitiatorPoolBuilder {
    /// A builder with the defaults: 8 initiators, the [dedicated](DcPoolPolicy::Dedicated)
    /// policy, each initiator as [`DcInitiatorBuilder::new`] makes it, GID index 0 for address
    /// handles, unreachable after 3 consecutive "retry exceeded" errors.
    pub fn new(pd: &Arc<ProtectionDomain>) -> Self {
        Self {
            pd: Arc::clone(pd),
            initiator: DcInitiatorBuilder::new(pd),
            send_cq: None,
            streams: None,
            count: 8,
            policy: DcPoolPolicy::Dedicated,
            bring_up: None,
            src_gid_index: 0,
            unreachable_after: 3,
            max_send_wr: 16,
            grant_timeout: 64,
            own_send_cq: None,
        }
    }

    /// The completion queue of every initiator's send completions (this, or
    /// [`setup_own_send_cq`](Self::setup_own_send_cq), is required). It may be shared with other
    /// queue pairs: [`DcInitiatorPool::poll`] hands their completions over
    /// ([`DcPoolEvent::OtherCompletion`]), and a caller that polls it itself feeds the pool with
    /// [`DcInitiatorPool::complete`]. It must hold every request that can be in flight (the pool
    /// signals every request): initiators × [`setup_max_send_wr`](Self::setup_max_send_wr)
    /// (the pool keeps no more in flight per initiator, even when the device granted a larger
    /// send queue), plus what the other queue pairs need; [`build`](Self::build) refuses a CQ
    /// smaller than the pool's part ([`SendCompletionQueueTooSmall`](CreateDcInitiatorPoolErrorKind::SendCompletionQueueTooSmall)).
    pub fn setup_send_cq(&mut self, send_cq: impl Into<GenericCompletionQueue>) -> &mut Self {
        let send_cq = send_cq.into();
        self.initiator.setup_send_cq(send_cq.clone());
        self.send_cq = Some(send_cq);
        self.own_send_cq = None;
        self
    }

    /// Lets [`build`](Self::build) create the send completion queue on `context` (the protection
    /// domain's device), sized initiators × [`setup_max_send_wr`](Self::setup_max_send_wr), and,
    /// with a `channel`, on that completion channel and completion vector: arm it through
    /// [`DcInitiatorPool::send_cq`] with
    /// [`req_notify_cq`](crate::ibverbs::extension::CompletionQueueEventExt::req_notify_cq) and
    /// wait for its events with [`CompletionChannelExt`](crate::ibverbs::extension::CompletionChannelExt).
    pub fn setup_own_send_cq(
        &mut self, context: &Arc<DeviceContext>, channel: Option<(&Arc<CompletionChannel>, u32)>,
    ) -> &mut Self {
        self.own_send_cq = Some((
            Arc::clone(context),
            channel.map(|(channel, vector)| (Arc::clone(channel), vector)),
        ));
        self.send_cq = None;
        self
    }

    /// After how many calls of [`poll`](DcInitiatorPool::poll) (or
    /// [`progress`](DcInitiatorPool::progress)) a destination that
    /// was granted an initiator from the line ([`DcPoolEvent::Ready`]) and posted nothing on it
    /// gives it back, to the next in line (default 64, at least 1). It keeps it as long as it
    /// has requests outstanding once it posted.
    pub fn setup_grant_timeout(&mut self, calls: u64) -> &mut Self {
        self.grant_timeout = calls;
        self
    }

    /// How many DC initiators (default 8).
    pub fn setup_initiators(&mut self, count: usize) -> &mut Self {
        self.count = count;
        self
    }

    /// How initiators are assigned to destinations (default dedicated).
    pub fn setup_policy(&mut self, policy: DcPoolPolicy) -> &mut Self {
        self.policy = policy;
        self
    }

    /// Each initiator's send queue capacity (default 16).
    pub fn setup_max_send_wr(&mut self, max_send_wr: u32) -> &mut Self {
        self.max_send_wr = max_send_wr;
        self.initiator.setup_max_send_wr(max_send_wr);
        self
    }

    /// Scatter/gather entries per request (default 1).
    pub fn setup_max_send_sge(&mut self, max_send_sge: u32) -> &mut Self {
        self.initiator.setup_max_send_sge(max_send_sge);
        self
    }

    /// Inline data per request in bytes (default 0).
    pub fn setup_max_inline_data(&mut self, max_inline_data: u32) -> &mut Self {
        self.initiator.setup_max_inline_data(max_inline_data);
        self
    }

    /// The send operations requests may use (default: every DC operation).
    pub fn setup_send_ops_flags(&mut self, send_ops_flags: SendOperationFlags) -> &mut Self {
        self.initiator.setup_send_ops_flags(send_ops_flags);
        self
    }

    /// DCI streams of every initiator: required by, and only allowed with, the
    /// [streams](DcPoolPolicy::Streams) policy. On a device without them, creation fails with
    /// [`is_not_supported`](CreateDcInitiatorPoolError::is_not_supported).
    pub fn setup_dci_streams(&mut self, streams: DciStreams) -> &mut Self {
        self.streams = Some(streams);
        self.initiator.setup_dci_streams(streams);
        self
    }

    /// How every initiator is brought up to RTS, and recovered (required).
    pub fn setup_bring_up(&mut self, bring_up: DcInitiatorBringUp) -> &mut Self {
        self.bring_up = Some(bring_up);
        self
    }

    /// The local GID index of the address handles to destinations on RoCE (default 0).
    pub fn setup_src_gid_index(&mut self, src_gid_index: u8) -> &mut Self {
        self.src_gid_index = src_gid_index;
        self
    }

    /// After how many consecutive "transport retry counter exceeded" errors a destination is
    /// reported unreachable (default 3; at least 1).
    pub fn setup_unreachable_after(&mut self, errors: u32) -> &mut Self {
        self.unreachable_after = errors;
        self
    }

    /// Creates the initiators on the send CQ and brings each up to RTS.
    pub fn build(&self) -> Result<DcInitiatorPool, CreateDcInitiatorPoolError> {
        if self.count == 0 || self.count > MAX_INITIATORS {
            return Err(CreateDcInitiatorPoolErrorKind::InvalidInitiatorCount {
                requested: self.count,
                max: MAX_INITIATORS,
            }
            .into());
        }
        match (self.policy, self.streams) {
            (DcPoolPolicy::Streams, None) => {
                return Err(CreateDcInitiatorPoolErrorKind::StreamsMismatch {
                    policy: self.policy,
                    requirement: "needs DCI streams (setup_dci_streams)",
                }
                .into())
            },
            (DcPoolPolicy::Streams, Some(_)) | (_, None) => {},
            (_, Some(_)) => {
                return Err(CreateDcInitiatorPoolErrorKind::StreamsMismatch {
                    policy: self.policy,
                    requirement: "does not use DCI streams (only the streams policy does)",
                }
                .into())
            },
        }
        let bring_up = self.bring_up.ok_or(CreateDcInitiatorPoolErrorKind::MissingBringUp)?;
        // Every request is signalled: the CQ holds up to initiators × send queue of the pool's.
        let needed = self.count as u64 * u64::from(self.max_send_wr.max(1));
        let mut initiator_builder = self.initiator.clone();
        let send_cq = match (&self.send_cq, &self.own_send_cq) {
            (Some(cq), _) => {
                // SAFETY: the CQ is alive while `cq` is; only its size is read.
                let cqe = unsafe { (*cq.cq().as_ptr()).cqe };
                let cqe = u32::try_from(cqe).unwrap_or(0);
                if u64::from(cqe) < needed {
                    return Err(CreateDcInitiatorPoolErrorKind::SendCompletionQueueTooSmall { cqe, needed }.into());
                }
                cq.clone()
            },
            (None, Some((context, channel))) => {
                let cqe = u32::try_from(needed)
                    .ok()
                    .filter(|&cqe| cqe <= i32::MAX as u32)
                    .ok_or_else(|| CreateDcInitiatorPoolErrorKind::SendCompletionQueue {
                        cqe: needed,
                        source: CreateCompletionQueueErrorKind::Ibverbs(std::io::Error::from_raw_os_error(
                            libc::EINVAL,
                        ))
                        .into(),
                    })?;
                let mut builder = context.create_cq_builder();
                builder.setup_cqe(cqe);
                if let Some((channel, vector)) = channel {
                    builder.setup_comp_channel(channel, *vector);
                }
                let cq: GenericCompletionQueue = builder
                    .build()
                    .map_err(|source| CreateDcInitiatorPoolErrorKind::SendCompletionQueue { cqe: needed, source })?
                    .into();
                initiator_builder.setup_send_cq(cq.clone());
                cq
            },
            (None, None) => return Err(CreateDcInitiatorPoolErrorKind::MissingSendCompletionQueue.into()),
        };
        let mut initiators = Vec::with_capacity(self.count);
        for index in 0..self.count {
            let mut initiator = initiator_builder
                .build()
                .map_err(|source| CreateDcInitiatorPoolErrorKind::Initiator { index, source })?;
            initiator
                .bring_up(&bring_up)
                .map_err(|source| CreateDcInitiatorPoolErrorKind::BringUp { index, source })?;
            initiators.push(initiator);
        }
        let mut pool = DcInitiatorPool::from_initiators(initiators, self.policy, self.unreachable_after);
        // No more in flight per initiator than the CQ was sized for.
        pool.core.limit_send_queue(self.max_send_wr);
        pool.core.set_grant_timeout(self.grant_timeout);
        pool.send_cq = Some(send_cq);
        pool.pd = Some(Arc::clone(&self.pd));
        pool.port = bring_up.port();
        pool.src_gid_index = self.src_gid_index;
        Ok(pool)
    }
}

/// Error returned by [`DcInitiatorPool::start_post_send`].
#[derive(Debug, thiserror::Error)]
#[error("cannot post to the destination")]
#[non_exhaustive]
pub struct PostToDestinationError(#[from] pub PostToDestinationErrorKind);

impl PostToDestinationError {
    /// Whether this is a would-block refusal (post again after
    /// [`poll`](DcInitiatorPool::poll)).
    pub fn is_would_block(&self) -> bool {
        matches!(self.0, PostToDestinationErrorKind::WouldBlock(_))
    }
}

/// The enum type for [`PostToDestinationError`]. Nothing was posted in every case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostToDestinationErrorKind {
    /// Not now: no initiator, quota used, or send queue full.
    #[error(transparent)]
    WouldBlock(#[from] DcPoolWouldBlock),
    /// The destination was reported unreachable ([`DcPoolEvent::Unreachable`]).
    #[error("the destination was reported unreachable")]
    Unreachable,
    /// Every initiator of the pool is out of service ([`DcPoolEvent::InitiatorLost`]).
    #[error("every DC initiator of the pool is out of service")]
    NoInitiatorInService,
    /// The destination is not one of this pool's: removed (a stale id), or another pool's.
    #[error("no such destination in this pool (removed, or another pool's)")]
    UnknownDestination,
    /// A pool of the streams policy posts with `start_post_send_on_stream`, the others with
    /// `start_post_send`.
    #[error("{}", if *streams_pool { "a pool with DCI streams posts with start_post_send_on_stream" } else { "a pool without DCI streams posts with start_post_send" })]
    StreamsMismatch {
        /// Whether the pool has DCI streams.
        streams_pool: bool,
    },
    /// The destination's address handle could not be created (first post).
    #[error(transparent)]
    AddressHandle(#[from] CreateDcAddressHandleError),
}

impl From<Refusal> for PostToDestinationErrorKind {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::WouldBlock(reason) => Self::WouldBlock(reason),
            Refusal::Unreachable => Self::Unreachable,
            Refusal::NoInitiatorInService => Self::NoInitiatorInService,
            // The pool resolves an address before asking again: never reported.
            Refusal::UnknownDestination | Refusal::Unresolved => Self::UnknownDestination,
        }
    }
}

/// Error returned by [`DcInitiatorPool::remove_destination`].
#[derive(Debug, thiserror::Error)]
#[error("cannot remove the destination")]
#[non_exhaustive]
pub struct RemoveDestinationError(#[from] pub RemoveDestinationErrorKind);

/// The enum type for [`RemoveDestinationError`]. Nothing was removed in every case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoveDestinationErrorKind {
    /// Requests of the destination are not reported yet: poll, then remove it.
    #[error("{requests} requests of the destination are not reported yet")]
    Outstanding {
        /// How many.
        requests: u64,
    },
    /// The destination is not one of this pool's: removed already (a stale id), or another
    /// pool's.
    #[error("no such destination in this pool (removed already, or another pool's)")]
    UnknownDestination,
}

/// A DC initiator the pool can post on: [`DcInitiator`], or a hand-made one in benchmarks.
///
/// # Safety
///
/// `send_view` must return the live extended and mlx5 views of a queue pair owned by the
/// implementor, exclusively usable while the implementor is mutably borrowed, with at least the
/// entries named (including `wr_set_dc_addr`, and `wr_set_dc_addr_stream` when `stream_count` is
/// not 0).
#[doc(hidden)]
pub unsafe trait PostingInitiator: PooledInitiator {
    /// The queue pair number its completions carry.
    fn qp_number(&self) -> u32;
    /// The views and entries posting uses.
    fn send_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>);
}

impl PooledInitiator for DcInitiator {
    fn max_send_wr(&self) -> u32 {
        DcInitiator::max_send_wr(self)
    }

    fn stream_count(&self) -> u32 {
        self.streams().map_or(0, |s| 1u32 << s.log_num_concurrent.min(16))
    }

    fn recover(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        // Reset or rebuilt: either way the pool reads the (maybe new) number from the initiator.
        DcInitiator::recover(self).map(drop).map_err(Into::into)
    }

    fn reset_stream(&mut self, stream: u16) -> Result<(), StreamResetRefusal> {
        use super::dc_initiator::ResetDciStreamErrorKind as Kind;
        DcInitiator::reset_stream(self, stream).map_err(|e| match e.0 {
            Kind::NotReadyToSend { .. } => StreamResetRefusal::NotReadyToSend,
            _ => StreamResetRefusal::Failed(e.into()),
        })
    }
}

// SAFETY: the views are the DC initiator's own, read at creation with their entries.
unsafe impl PostingInitiator for DcInitiator {
    fn qp_number(&self) -> u32 {
        DcInitiator::qp_number(self)
    }

    fn send_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        self.pool_view()
    }
}

/// Where a destination's requests go: its address handle, DCT number and DC key.
#[derive(Debug, Default)]
struct DestinationAddress {
    endpoint: Option<DcEndpoint>,
    /// Created on the first post (or `prepare`), kept until the destination is removed (requests
    /// in flight do not need it: libmlx5 copies the address into each request).
    ah: Option<Arc<AddressHandle>>,
}

/// A pool of DC initiators on one send CQ serving many destinations; see the
/// [module](self) documentation.
pub struct DcInitiatorPool<I: PostingInitiator = DcInitiator> {
    core: PoolCore<I>,
    /// By destination place; emptied when a destination is removed.
    addresses: Vec<DestinationAddress>,
    address_handles: usize,
    send_cq: Option<GenericCompletionQueue>,
    pd: Option<Arc<ProtectionDomain>>,
    port: u8,
    src_gid_index: u8,
    /// Whether the policy is the streams policy (which posts with `start_post_send_on_stream`).
    streams: bool,
}

// SAFETY: the raw address-handle pointers are owned through `addresses`' Arcs (or, for hand-made
// pools, by the caller); every method that posts or recovers takes `&mut self`.
unsafe impl<I: PostingInitiator + Send> Send for DcInitiatorPool<I> {}

impl<I: PostingInitiator> std::fmt::Debug for DcInitiatorPool<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcInitiatorPool")
            .field("policy", &self.core.policy())
            .field("initiators", &self.core.initiators.len())
            .field("footprint", &self.footprint())
            .finish_non_exhaustive()
    }
}

impl<I: PostingInitiator> DcInitiatorPool<I> {
    /// A pool over initiators already brought up (for benchmarks and tests over hand-made
    /// tables; [`DcInitiatorPoolBuilder`] makes real ones).
    #[doc(hidden)]
    pub fn from_initiators(initiators: Vec<I>, policy: DcPoolPolicy, unreachable_after: u32) -> Self {
        Self {
            core: PoolCore::new(initiators, policy, unreachable_after),
            addresses: Vec::new(),
            address_handles: 0,
            send_cq: None,
            pd: None,
            port: 1,
            src_gid_index: 0,
            streams: policy == DcPoolPolicy::Streams,
        }
    }

    /// Gives a hand-made pool a send CQ to poll (for tests of the progress path on a device
    /// without DC).
    #[doc(hidden)]
    pub fn set_send_cq(&mut self, send_cq: impl Into<GenericCompletionQueue>) {
        self.send_cq = Some(send_cq.into());
    }

    /// Sets the grant timeout ([`DcInitiatorPoolBuilder::setup_grant_timeout`]) of a hand-made
    /// pool.
    #[doc(hidden)]
    pub fn set_grant_timeout(&mut self, calls: u64) {
        self.core.set_grant_timeout(calls);
    }

    /// The policy it was created with.
    pub fn policy(&self) -> DcPoolPolicy {
        self.core.policy()
    }

    /// How many initiators it has.
    pub fn initiator_count(&self) -> usize {
        self.core.initiators.len()
    }

    /// Initiator `index`, to read what it was created with.
    pub fn initiator(&self, index: usize) -> Option<&I> {
        self.core.initiators.get(index)
    }

    /// The send completion queue of its initiators (the one given to the builder, or the one it
    /// created), e.g. to arm it for completion events
    /// ([`CompletionQueueEventExt::req_notify_cq`](crate::ibverbs::extension::CompletionQueueEventExt::req_notify_cq))
    /// when it was created on a completion channel.
    pub fn send_cq(&self) -> Option<&GenericCompletionQueue> {
        self.send_cq.as_ref()
    }

    /// Keeps `address` at the place of the destination just added.
    fn place(&mut self, destination: DestinationId, address: DestinationAddress) {
        let index = destination.index();
        if index == self.addresses.len() {
            self.addresses.push(address);
        } else {
            self.addresses[index] = address;
        }
    }

    /// Adds the DC target of `endpoint` as a destination. Its address handle is created on its
    /// first post (or by [`prepare`](Self::prepare)) and kept until it is removed.
    pub fn add_destination(&mut self, endpoint: DcEndpoint) -> DestinationId {
        let id = self.core.add_destination();
        self.place(
            id,
            DestinationAddress {
                endpoint: Some(endpoint),
                ..DestinationAddress::default()
            },
        );
        id
    }

    /// Adds a destination by a raw address handle (for benchmarks and tests over hand-made
    /// tables).
    ///
    /// # Safety
    ///
    /// `ah` must stay a live address handle (or whatever a hand-made table accepts) while the
    /// pool posts to the destination.
    #[doc(hidden)]
    pub unsafe fn add_destination_raw(&mut self, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64) -> DestinationId {
        let id = self.core.add_destination();
        self.place(id, DestinationAddress::default());
        self.core.set_address(id, (ah, dct_number, dc_key));
        id
    }

    /// Removes `destination`: its address handle and records are freed, and its id becomes stale
    /// (every method refuses it, or answers as for an unknown destination, also once its place
    /// serves another destination). Refused while requests of it are not reported yet
    /// ([`RemoveDestinationErrorKind::Outstanding`]): poll until [`outstanding`](Self::outstanding)
    /// is 0. A grant it holds and has not used goes to the next destination in line.
    pub fn remove_destination(&mut self, destination: DestinationId) -> Result<(), RemoveDestinationError> {
        self.core
            .remove_destination(destination)
            .map_err(|refusal| match refusal {
                RemoveRefusal::Outstanding(requests) => RemoveDestinationErrorKind::Outstanding { requests },
                RemoveRefusal::UnknownDestination => RemoveDestinationErrorKind::UnknownDestination,
            })?;
        let address = std::mem::take(&mut self.addresses[destination.index()]);
        if address.ah.is_some() {
            self.address_handles -= 1;
        }
        Ok(())
    }

    /// How many destinations it has now.
    pub fn destination_count(&self) -> usize {
        self.core.footprint().live_destinations
    }

    /// What the pool holds: destination places, address handles, the wait line, grant timers,
    /// records of requests in flight. Each stays bounded by what is live (destinations, requests
    /// in flight), however many destinations came and went.
    pub fn footprint(&self) -> DcPoolFootprint {
        DcPoolFootprint {
            address_handles: self.address_handles,
            ..self.core.footprint()
        }
    }

    /// The endpoint of `destination`.
    pub fn endpoint(&self, destination: DestinationId) -> Option<&DcEndpoint> {
        if !self.core.contains(destination) {
            return None;
        }
        self.addresses.get(destination.index())?.endpoint.as_ref()
    }

    /// The initiator (and DCI stream) `destination` posts on now: none for a dedicated policy's
    /// destination that holds none.
    pub fn assignment(&self, destination: DestinationId) -> Option<(usize, Option<u16>)> {
        self.core.assignment(destination)
    }

    /// Requests of `destination` posted and not yet reported by [`poll`](Self::poll).
    pub fn outstanding(&self, destination: DestinationId) -> u64 {
        self.core.outstanding(destination)
    }

    /// The destinations in line for an initiator (dedicated policies), first first. Initiators
    /// that free up go to them in this order, each reported by [`DcPoolEvent::Ready`]: no caller
    /// has to try them in order, and a destination in line that is never served again holds
    /// nobody up (its grant goes back after the grant timeout).
    pub fn waiting(&self) -> impl Iterator<Item = DestinationId> + '_ {
        self.core.waiting()
    }

    /// Takes `destination` out of line for an initiator (nothing is left of it in the line), and
    /// gives back an initiator it was granted ([`DcPoolEvent::Ready`]) and has not posted on.
    pub fn cancel_wait(&mut self, destination: DestinationId) {
        self.core.cancel_wait(destination);
    }

    /// Whether `destination` was reported unreachable.
    pub fn is_unreachable(&self, destination: DestinationId) -> bool {
        self.core.is_unreachable(destination)
    }

    /// Lets a destination reported unreachable post again (e.g. its peer is back).
    pub fn revive(&mut self, destination: DestinationId) {
        self.core.revive(destination);
    }

    /// Creates `destination`'s address handle now rather than on its first post (which then
    /// costs no `ibv_create_ah`), and reports an error in it here.
    pub fn prepare(&mut self, destination: DestinationId) -> Result<(), PostToDestinationError> {
        if !self.core.contains(destination) {
            return Err(PostToDestinationErrorKind::UnknownDestination.into());
        }
        self.resolve(destination)?;
        Ok(())
    }

    /// The destination's address, creating its address handle on first use.
    fn resolve(&mut self, destination: DestinationId) -> Result<(), PostToDestinationErrorKind> {
        if self.core.address(destination).is_some() {
            return Ok(());
        }
        self.resolve_first(destination)
    }

    #[inline(never)]
    fn resolve_first(&mut self, destination: DestinationId) -> Result<(), PostToDestinationErrorKind> {
        if !self.core.contains(destination) {
            return Err(PostToDestinationErrorKind::UnknownDestination);
        }
        let address = self
            .addresses
            .get_mut(destination.index())
            .ok_or(PostToDestinationErrorKind::UnknownDestination)?;
        let (Some(endpoint), Some(pd)) = (&address.endpoint, &self.pd) else {
            return Err(PostToDestinationErrorKind::UnknownDestination);
        };
        let ah = endpoint.create_ah(pd, self.port, self.src_gid_index)?;
        // SAFETY: the pointer is used while the pool keeps the Arc (until the destination is
        // removed; libmlx5 copies the address into each request).
        let resolved = (unsafe { ah.ah() }, endpoint.dct_number(), endpoint.dc_key());
        address.ah = Some(ah);
        self.address_handles += 1;
        self.core.set_address(destination, resolved);
        Ok(())
    }

    /// Starts a batch of requests to `destination` on the initiator the policy grants it;
    /// every request of the batch goes there, and the pool sets its DC address
    /// (`mlx5dv_wr_set_dc_addr`). When the policy cannot grant one now, the typed
    /// [`WouldBlock`](PostToDestinationErrorKind::WouldBlock): nothing was posted. A pool of the
    /// [streams](DcPoolPolicy::Streams) policy posts with
    /// [`start_post_send_on_stream`](Self::start_post_send_on_stream) instead
    /// ([`StreamsMismatch`](PostToDestinationErrorKind::StreamsMismatch) here).
    #[inline(always)]
    pub fn start_post_send(
        &mut self, destination: DestinationId,
    ) -> Result<DcPoolPostGuard<'_, I, DcAddress>, PostToDestinationError> {
        self.start(destination)
    }

    /// As [`start_post_send`](Self::start_post_send), for a pool of the
    /// [streams](DcPoolPolicy::Streams) policy: every request of the batch goes to the
    /// destination's DCI stream (`mlx5dv_wr_set_dc_addr_stream`). The two are apart so that
    /// neither tests per request which setter to call.
    #[inline(always)]
    pub fn start_post_send_on_stream(
        &mut self, destination: DestinationId,
    ) -> Result<DcPoolPostGuard<'_, I, DcStreamAddress>, PostToDestinationError> {
        self.start(destination)
    }

    #[inline(always)]
    fn start<A: PoolAddressing>(
        &mut self, destination: DestinationId,
    ) -> Result<DcPoolPostGuard<'_, I, A>, PostToDestinationError> {
        // The grant is built in registers on the fast paths; the slow one returns it through
        // memory of its own. A batch not addressed as the pool's policy says misses both fast
        // paths' gates, and is refused on the slow one.
        let held = self.core.begin_held(destination, A::STREAMS);
        let grant = if held.room > 0 {
            held
        } else {
            let free = self.core.grant_from_free(destination, A::STREAMS);
            if free.room > 0 {
                free
            } else {
                self.begin_cold(destination, A::STREAMS)?
            }
        };
        let (ah, dct_number, dc_key) = grant.address;
        // SAFETY: a grant names one of the pool's initiators.
        let (qp_ex, entries, mlx5_qp_ex) =
            unsafe { self.core.initiators.get_unchecked_mut(grant.initiator) }.send_view();
        // The guard reaches the bookkeeping and the initiator's ring through raw pointers taken
        // from this one borrow, so that neither invalidates the other.
        let core = NonNull::from(&mut self.core);
        // SAFETY: `core` is the pool's, borrowed for the guard's lifetime, and the grant names one
        // of its initiators.
        let (ring, mask) = unsafe { (*core.as_ptr()).wr_id_ring(grant.initiator) };
        // SAFETY: the index is masked into the ring, and the grant's room ends at the ring's end.
        let slots = unsafe { ring.add((grant.first & mask) as usize) };
        let address = A::new(DcAddress::new(mlx5_qp_ex, ah, dct_number, dc_key), grant.stream());
        // SAFETY: the initiator is exclusively borrowed through the pool for the guard's lifetime;
        // its views and entries come from PostingInitiator's contract (with the stream setter
        // when it has streams, which the streams policy's initiators have).
        let inner = unsafe { PostSendGuard::<PooledDynamicallyConnected<A>>::start(qp_ex, entries, address) };
        Ok(DcPoolPostGuard {
            inner: ManuallyDrop::new(inner),
            slots,
            base: encode(grant.initiator, grant.first),
            room: grant.room,
            grant,
            core,
            _pool: PhantomData,
        })
    }

    /// A grant beyond [`PoolCore::begin_held`]'s and [`PoolCore::grant_from_free`]'s, for a
    /// batch addressed on a stream or not (`streams`): refused when that is not the pool's
    /// policy's way; else the bookkeeping's slow path, and for a first post the address handle.
    #[inline(never)]
    fn begin_cold(&mut self, destination: DestinationId, streams: bool) -> Result<Grant, PostToDestinationError> {
        if streams != self.streams {
            return Err(PostToDestinationErrorKind::StreamsMismatch { streams_pool: !streams }.into());
        }
        match self.core.begin_slow(destination) {
            Ok(grant) => Ok(grant),
            Err(refusal) => self.begin_refused(destination, refusal),
        }
    }

    /// A refused grant: for a first post, the address handle, then the grant; else the error.
    #[inline(never)]
    fn begin_refused(&mut self, destination: DestinationId, refusal: Refusal) -> Result<Grant, PostToDestinationError> {
        if refusal != Refusal::Unresolved {
            return Err(PostToDestinationErrorKind::from(refusal).into());
        }
        self.resolve_first(destination)?;
        Ok(self.core.begin(destination).map_err(PostToDestinationErrorKind::from)?)
    }

    /// Polls the send CQ once (up to 32 completions) and reports, through `sink`, every request
    /// they settle ([`DcPoolEvent`]), every destination in line that now holds an initiator
    /// ([`DcPoolEvent::Ready`]), and recovers errored streams and initiators once the device
    /// flushed them. A completion of a queue pair that is not the pool's is handed over as
    /// [`DcPoolEvent::OtherCompletion`], never dropped. Returns how many completions were polled.
    pub fn poll(&mut self, mut sink: impl FnMut(DcPoolEvent)) -> Result<usize, PollCompletionQueueError> {
        self.core.tick(&mut sink);
        let Some(cq) = &self.send_cq else {
            return Ok(0);
        };
        let mut wcs = [WorkCompletion::default(); 32];
        let polled = cq.poll_work_completions(&mut wcs)?;
        for wc in polled.iter() {
            if !self.settle(wc, &mut sink) {
                sink(DcPoolEvent::OtherCompletion(*wc));
            }
        }
        Ok(polled.len())
    }

    /// Settles one completion polled elsewhere: for a caller that polls a CQ it shares with
    /// other queue pairs (created with it and given to
    /// [`setup_send_cq`](DcInitiatorPoolBuilder::setup_send_cq)). Reports what it settles
    /// through `sink`, as [`poll`](Self::poll) does (its status and vendor syndrome included);
    /// returns whether the completion was the pool's (its queue pair number is one of the
    /// pool's initiators' and its `wr_id` names a request in flight). A completion that is not
    /// the pool's is left to the caller. Such a caller calls [`progress`](Self::progress) once
    /// per round of its own polling instead of [`poll`](Self::poll).
    pub fn complete(&mut self, wc: &WorkCompletion, mut sink: impl FnMut(DcPoolEvent)) -> bool {
        self.settle(wc, &mut sink)
    }

    /// What [`poll`](Self::poll) does besides polling, for a caller that polls the CQ itself:
    /// moves the grant timeout's clock on (a grant from the line that was not used in time goes
    /// to the next destination in line) and reports [`DcPoolEvent::Ready`] destinations.
    pub fn progress(&mut self, mut sink: impl FnMut(DcPoolEvent)) {
        self.core.tick(&mut sink);
    }

    #[inline]
    fn settle(&mut self, wc: &WorkCompletion, sink: &mut impl FnMut(DcPoolEvent)) -> bool {
        // The initiator's number as of now: a recovery may have rebuilt it with a new one.
        let initiator = self.core.initiators.get(initiator_of(wc.wr_id()));
        if initiator.map(PostingInitiator::qp_number) != Some(wc.qp_number()) {
            return false;
        }
        self.core
            .complete_with_syndrome(wc.wr_id(), wc.status_raw(), wc.vendor_err(), sink)
    }

    /// Settles one completion by hand (for tests and benchmarks over hand-made tables, which
    /// have no CQ): the provider-visible `wr_id` and an `ibv_wc_status`.
    #[doc(hidden)]
    #[inline]
    pub fn complete_raw(&mut self, wr_id: u64, status: u32, mut sink: impl FnMut(DcPoolEvent)) -> bool {
        self.core.complete(wr_id, status, &mut sink)
    }
}

impl DcInitiatorPool<DcInitiator> {
    /// Reads initiator `index`'s state from the device (`ibv_query_qp`), e.g. to see that the
    /// pool brought it back to RTS after an error; `None` for an index out of range.
    pub fn query_initiator_state(
        &mut self, index: usize,
    ) -> Option<Result<QueuePairState, sideway::ibverbs::queue_pair::QueryQueuePairError>> {
        self.core.initiators.get_mut(index).map(DcInitiator::query_state)
    }
}

/// A batch of requests to one destination through a [`DcInitiatorPool`]: the request builder of a
/// [`DcInitiator`]'s guard, where the pool sets the DC address
/// (`construct_wr` → operation → data). Dropped unposted, it aborts the batch.
#[must_use = "the batch is posted only by post(); dropping the guard aborts it"]
pub struct DcPoolPostGuard<'p, I: PostingInitiator = DcInitiator, A: PoolAddressing = DcAddress> {
    inner: ManuallyDrop<PostSendGuard<'p, PooledDynamicallyConnected<A>>>,
    /// The batch's places in the initiator's ring of callers' `wr_id`s: `room` of them, in a row.
    slots: *mut u64,
    /// The provider-visible `wr_id` of the batch's first request; the others follow by one.
    base: u64,
    /// The grant's room, kept apart from it: read on every request, a field of its own costs
    /// fewer instructions than reaching it through the grant (measured: 6 per batch at batch 1).
    room: usize,
    grant: Grant,
    /// The pool's bookkeeping, borrowed for `'p`.
    core: NonNull<PoolCore<I>>,
    _pool: PhantomData<&'p mut PoolCore<I>>,
}

impl<I: PostingInitiator, A: PoolAddressing> DcPoolPostGuard<'_, I, A> {
    /// Starts a new request with the caller's `wr_id` (what [`DcPoolEvent`]s report) and flags;
    /// continue with an operation, then the data. The request is signalled whatever `wr_flags`
    /// say (the pool needs a completion of every request to report it, and to give a dedicated
    /// destination's initiator back; UCX turns completion moderation off for DC too). When the
    /// batch holds [`room`](Self::room) requests already, [`DcPoolWouldBlock::BatchFull`]: post
    /// it and start another.
    #[inline]
    pub fn construct_wr(
        &mut self, wr_id: u64, wr_flags: WorkRequestFlags,
    ) -> Result<WorkRequestHandle<'_, PooledDynamicallyConnected<A>>, DcPoolWouldBlock> {
        let len = self.inner.batch_len();
        if len >= self.room {
            return Err(DcPoolWouldBlock::BatchFull);
        }
        // SAFETY: the `room` places from `slots` are the initiator's ring's, which this guard's
        // pool borrow keeps alive and unused elsewhere, and hold no live request.
        unsafe { *self.slots.add(len) = wr_id };
        Ok(self
            .inner
            .construct_wr(self.base + len as u64, wr_flags | WorkRequestFlags::Signaled))
    }

    /// How many requests the batch holds.
    #[inline]
    pub fn batch_len(&self) -> usize {
        self.inner.batch_len()
    }

    /// How many requests the batch may hold: the initiator's free send-queue room, up to where
    /// the pool's ring of `wr_id`s wraps around, and up to the destination's quota.
    #[inline]
    pub fn room(&self) -> usize {
        self.room
    }

    /// The initiator (and stream) the batch goes to.
    pub fn initiator(&self) -> (usize, Option<u16>) {
        // SAFETY: the bookkeeping is borrowed for the guard's lifetime; only read here.
        let core = unsafe { self.core.as_ref() };
        let initiator = self.grant.initiator;
        (initiator, core.has_streams(initiator).then_some(self.grant.stream()))
    }

    /// Posts the batch (`ibv_wr_complete`): all of it, or on error none of it, as
    /// [`PostSendGuard::post`].
    #[inline(always)]
    pub fn post(self) -> Result<(), PostSendError> {
        // Never dropped: the batch is posted here, and its bookkeeping ended.
        let mut this = ManuallyDrop::new(self);
        let len = this.inner.batch_len();
        let (grant, mut core) = (this.grant, this.core);
        // SAFETY: `this` is never dropped, so the inner guard is taken exactly once.
        let inner = unsafe { ManuallyDrop::take(&mut this.inner) };
        let result = inner.post();
        // SAFETY: the bookkeeping is borrowed for the guard's lifetime; the ring is not written
        // after this.
        let core = unsafe { core.as_mut() };
        // Each outcome commits on its own path: no merged "posted" count to test again.
        match result {
            Ok(()) if len > 0 => {
                core.commit(grant, len);
                Ok(())
            },
            Ok(()) => {
                core.commit(grant, 0);
                Ok(())
            },
            Err(error) => {
                core.commit(grant, 0);
                Err(error)
            },
        }
    }
}

impl<I: PostingInitiator, A: PoolAddressing> Drop for DcPoolPostGuard<'_, I, A> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: dropped only when not posted (post never drops the guard); dropping the inner
        // guard aborts the batch.
        unsafe { ManuallyDrop::drop(&mut self.inner) };
        // SAFETY: as in post.
        unsafe { self.core.as_mut() }.commit(self.grant, 0);
    }
}

/// How a pool batch's requests are addressed: [`DcAddress`] (`mlx5dv_wr_set_dc_addr`), or on
/// DCI streams [`DcStreamAddress`] (`mlx5dv_wr_set_dc_addr_stream`). Sealed.
pub trait PoolAddressing: Destination + Copy {
    /// Whether it addresses a DCI stream.
    #[doc(hidden)]
    const STREAMS: bool;
    /// The address of a batch's requests.
    #[doc(hidden)]
    fn new(address: DcAddress, stream: u16) -> Self;
}

impl PoolAddressing for DcAddress {
    const STREAMS: bool = false;

    #[inline(always)]
    fn new(address: DcAddress, _stream: u16) -> Self {
        address
    }
}

impl PoolAddressing for DcStreamAddress {
    const STREAMS: bool = true;

    #[inline(always)]
    fn new(address: DcAddress, stream: u16) -> Self {
        DcStreamAddress::new(address, stream)
    }
}

/// The DC transport as a pool posts it: the destination is the batch's, set by the pool, with
/// `A`'s setter.
#[derive(Debug)]
pub struct PooledDynamicallyConnected<A: PoolAddressing>(PhantomData<A>, std::convert::Infallible);

impl<A: PoolAddressing> sealed::Sealed for PooledDynamicallyConnected<A> {}

impl<A: PoolAddressing> Transport for PooledDynamicallyConnected<A> {
    type Context = A;
    type AfterOperation<'g, O: Operation> = LocalBufferHandle<'g, O, A>;

    #[inline(always)]
    fn after_operation<O: Operation>(request: PendingRequest<'_, O>, context: A) -> Self::AfterOperation<'_, O> {
        LocalBufferHandle::new(request, context)
    }
}

impl<A: PoolAddressing> RemoteMemoryAccess for PooledDynamicallyConnected<A> {}

#[cfg(test)]
mod tests {
    //! The pool over hand-made DC initiators whose `ibv_qp_ex` and `mlx5dv_qp_ex` tables record
    //! every provider call (no device): the exact calls of each request, the completions mapped
    //! back to the callers' `wr_id`s, and the pool's answers when it cannot post.
    use std::cell::Cell;
    use std::mem::MaybeUninit;

    use rdma_mummy_sys::{ibv_send_flags, ibv_wc_status};
    use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry};

    use super::super::dc_initiator::dc_entries;
    use super::*;
    use crate::ibverbs::post_send_guard::tests::{record, recording_qp, take_calls};
    use crate::ibverbs::post_send_guard::PostSendErrorKind;

    thread_local! {
        /// What the recorded `wr_complete` returns (0, or an errno).
        static COMPLETE_RETURNS: Cell<i32> = const { Cell::new(0) };
    }

    const SIGNALED: u32 = ibv_send_flags::IBV_SEND_SIGNALED.0;
    const INLINE: u32 = ibv_send_flags::IBV_SEND_INLINE.0;
    const REM_ACCESS_ERR: u32 = ibv_wc_status::IBV_WC_REM_ACCESS_ERR;
    const FLUSH_ERR: u32 = ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
    const RETRY_EXC_ERR: u32 = ibv_wc_status::IBV_WC_RETRY_EXC_ERR;

    /// The `wr_id` the provider should see: request `number` of initiator `initiator`, written
    /// out here rather than taken from the pool's own encoder.
    fn provider_wr_id(initiator: usize, number: u64) -> u64 {
        ((initiator as u64) << 48) | number
    }

    // Each recorder names its queue pair by number, so that a test sees which initiator a call
    // went to.
    /// The number of the recording queue pair `qp`.
    ///
    /// # Safety
    ///
    /// `qp` must point to a live `ibv_qp_ex` (one of the recording initiators').
    unsafe fn qpn(qp: *mut ibv_qp_ex) -> u32 {
        (*qp).qp_base.qp_num
    }
    unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
        record(format!("qp{} start", qpn(qp)));
    }
    unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> i32 {
        record(format!("qp{} complete", qpn(qp)));
        COMPLETE_RETURNS.with(Cell::get)
    }
    unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
        record(format!("qp{} abort", qpn(qp)));
    }
    unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
        record(format!(
            "qp{} send wr_id={:#x} flags={:#x}",
            qpn(qp),
            (*qp).wr_id,
            (*qp).wr_flags
        ));
    }
    unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
        record(format!(
            "qp{} write wr_id={:#x} flags={:#x} rkey={rkey:#x} addr={addr:#x}",
            qpn(qp),
            (*qp).wr_id,
            (*qp).wr_flags
        ));
    }
    unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
        record(format!(
            "qp{} read wr_id={:#x} flags={:#x} rkey={rkey:#x} addr={addr:#x}",
            qpn(qp),
            (*qp).wr_id,
            (*qp).wr_flags
        ));
    }
    unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
        record(format!("qp{} sge lkey={lkey:#x} addr={addr:#x} len={length}", qpn(qp)));
    }
    unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut std::ffi::c_void, length: usize) {
        let data = std::slice::from_raw_parts(addr as *const u8, length);
        record(format!("qp{} inline {:?}", qpn(qp), String::from_utf8_lossy(data)));
    }

    /// An `mlx5dv_qp_ex` followed by the number of its queue pair (for the recorders).
    #[repr(C)]
    struct RecordingView {
        view: mlx5dv_qp_ex,
        qp_number: u32,
    }

    /// The queue pair number kept after the recording view.
    ///
    /// # Safety
    ///
    /// `view` must point to the `view` field of a live `RecordingView`.
    unsafe fn view_qpn(view: *mut mlx5dv_qp_ex) -> u32 {
        (*view.cast::<RecordingView>()).qp_number
    }
    unsafe extern "C" fn wr_set_dc_addr(view: *mut mlx5dv_qp_ex, ah: *mut ibv_ah, dctn: u32, key: u64) {
        record(format!(
            "qp{} dc_addr ah={:#x} dctn={dctn:#x} key={key:#x}",
            view_qpn(view),
            ah as usize
        ));
    }
    unsafe extern "C" fn wr_set_dc_addr_stream(
        view: *mut mlx5dv_qp_ex, ah: *mut ibv_ah, dctn: u32, key: u64, stream: u16,
    ) {
        record(format!(
            "qp{} dc_addr_stream ah={:#x} dctn={dctn:#x} key={key:#x} stream={stream}",
            view_qpn(view),
            ah as usize
        ));
    }

    /// A hand-made DC initiator: recording tables, and a recovery that is recorded (and fails
    /// when told to).
    struct RecordingInitiator {
        qp: Box<ibv_qp_ex>,
        view: Box<RecordingView>,
        entries: ProviderEntries,
        max_send_wr: u32,
        streams: u32,
        /// Whether it is in ERR as a whole (a stream reset is refused).
        in_error: Cell<bool>,
        /// Whether `recover` and `reset_stream` fail.
        recovery_fails: Cell<bool>,
    }

    impl RecordingInitiator {
        /// Queue pair number `qp_number`, a send queue of `max_send_wr`, `streams` DCI streams (0:
        /// none); writes, sends and reads.
        fn new(qp_number: u32, max_send_wr: u32, streams: u32) -> Self {
            let mut qp = recording_qp();
            qp.qp_base.qp_num = qp_number;
            qp.wr_start = Some(wr_start);
            qp.wr_complete = Some(wr_complete);
            qp.wr_abort = Some(wr_abort);
            qp.wr_send = Some(wr_send);
            qp.wr_rdma_write = Some(wr_rdma_write);
            qp.wr_rdma_read = Some(wr_rdma_read);
            qp.wr_set_sge = Some(wr_set_sge);
            qp.wr_set_inline_data = Some(wr_set_inline_data);
            // SAFETY: zeroes are valid for mlx5dv_qp_ex (an integer and optional functions).
            let mut view: Box<RecordingView> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
            view.qp_number = qp_number;
            view.view.wr_set_dc_addr = Some(wr_set_dc_addr);
            if streams > 0 {
                view.view.wr_set_dc_addr_stream = Some(wr_set_dc_addr_stream);
            }
            let granted = SendOperationFlags::Write | SendOperationFlags::Send | SendOperationFlags::Read;
            // SAFETY: both tables are live boxes.
            let entries = unsafe {
                let ibv = ProviderEntries::new(NonNull::from(&mut *qp), granted).expect("recording entries");
                ibv.with(dc_entries(NonNull::from(&mut view.view), streams > 0).expect("recording mlx5 entries"))
            };
            Self {
                qp,
                view,
                entries,
                max_send_wr,
                streams,
                in_error: Cell::new(false),
                recovery_fails: Cell::new(false),
            }
        }
    }

    #[derive(Debug)]
    struct RecoveryFailed;

    impl std::fmt::Display for RecoveryFailed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("recovery refused by the test")
        }
    }

    impl std::error::Error for RecoveryFailed {}

    impl PooledInitiator for RecordingInitiator {
        fn max_send_wr(&self) -> u32 {
            self.max_send_wr
        }

        fn stream_count(&self) -> u32 {
            self.streams
        }

        fn recover(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            record(format!("qp{} recover", self.qp.qp_base.qp_num));
            if self.recovery_fails.get() {
                return Err(Box::new(RecoveryFailed));
            }
            Ok(())
        }

        fn reset_stream(&mut self, stream: u16) -> Result<(), StreamResetRefusal> {
            record(format!("qp{} reset_stream {stream}", self.qp.qp_base.qp_num));
            if self.in_error.get() {
                return Err(StreamResetRefusal::NotReadyToSend);
            }
            if self.recovery_fails.get() {
                return Err(StreamResetRefusal::Failed(Box::new(RecoveryFailed)));
            }
            Ok(())
        }
    }

    // SAFETY: the views are the boxes this initiator owns, with the entries read from them; the
    // stream setter is filled when `streams` is not 0.
    unsafe impl PostingInitiator for RecordingInitiator {
        fn qp_number(&self) -> u32 {
            self.qp.qp_base.qp_num
        }

        fn send_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
            (
                NonNull::from(&mut *self.qp),
                self.entries,
                NonNull::from(&mut self.view.view),
            )
        }
    }

    /// The pool's initiators are queue pairs 0x10 and 0x11 (`qp16`, `qp17` in the records).
    fn pool(policy: DcPoolPolicy, max_send_wr: u32, streams: u32) -> DcInitiatorPool<RecordingInitiator> {
        COMPLETE_RETURNS.with(|r| r.set(0));
        take_calls();
        let initiators = vec![
            RecordingInitiator::new(0x10, max_send_wr, streams),
            RecordingInitiator::new(0x11, max_send_wr, streams),
        ];
        DcInitiatorPool::from_initiators(initiators, policy, 2)
    }

    /// A destination's address: a fake address handle (only its value is recorded), a DCT
    /// number and a DC key, all derived from `n`.
    struct Address {
        ah: NonNull<ibv_ah>,
        dct_number: u32,
        dc_key: u64,
    }

    impl Address {
        fn new(n: usize) -> Self {
            Self {
                ah: NonNull::new(std::ptr::without_provenance_mut(0xa000 + 0x100 * n)).expect("not null"),
                dct_number: 0x00d0_0000 + n as u32,
                dc_key: 0xdc00 + n as u64,
            }
        }

        fn add_to(&self, pool: &mut DcInitiatorPool<RecordingInitiator>) -> DestinationId {
            // SAFETY: the recorders never dereference the handle.
            unsafe { pool.add_destination_raw(self.ah, self.dct_number, self.dc_key) }
        }

        /// The recorded `wr_set_dc_addr` call on queue pair `qp`.
        fn call(&self, qp: u32) -> String {
            format!(
                "qp{qp} dc_addr ah={:#x} dctn={:#x} key={:#x}",
                self.ah.as_ptr() as usize,
                self.dct_number,
                self.dc_key
            )
        }

        /// The recorded `wr_set_dc_addr_stream` call on queue pair `qp`.
        fn stream_call(&self, qp: u32, stream: u16) -> String {
            format!(
                "qp{qp} dc_addr_stream ah={:#x} dctn={:#x} key={:#x} stream={stream}",
                self.ah.as_ptr() as usize,
                self.dct_number,
                self.dc_key
            )
        }
    }

    /// Posts one signalled RDMA write of 64 bytes per caller `wr_id` to `destination`, in one
    /// batch; returns the initiator it went to.
    fn post_writes(
        pool: &mut DcInitiatorPool<RecordingInitiator>, destination: DestinationId, wr_ids: &[u64],
    ) -> usize {
        if pool.policy() == DcPoolPolicy::Streams {
            let guard = pool
                .start_post_send_on_stream(destination)
                .expect("the pool grants a batch");
            write_and_post(guard, wr_ids)
        } else {
            let guard = pool.start_post_send(destination).expect("the pool grants a batch");
            write_and_post(guard, wr_ids)
        }
    }

    /// Adds one signalled RDMA write of 64 bytes per caller `wr_id` to `guard`, posts it, and
    /// returns the initiator it went to.
    fn write_and_post<A: PoolAddressing>(
        mut guard: DcPoolPostGuard<'_, RecordingInitiator, A>, wr_ids: &[u64],
    ) -> usize {
        for &wr_id in wr_ids {
            // SAFETY: the recorders never touch the buffers.
            unsafe {
                guard
                    .construct_wr(wr_id, WorkRequestFlags::Signaled)
                    .expect("room in the send queue")
                    .setup_write(0x77, 0x9000 + wr_id)
                    .setup_sge(0x5, 0x1000 + wr_id, 64)
            };
        }
        let (initiator, _) = guard.initiator();
        guard.post().expect("the recorded post succeeds");
        initiator
    }

    /// Settles the provider `wr_id` with `status`, returns the events.
    fn complete(pool: &mut DcInitiatorPool<RecordingInitiator>, wr_id: u64, status: u32) -> Vec<DcPoolEvent> {
        let mut events = Vec::new();
        assert!(
            pool.complete_raw(wr_id, status, |event| events.push(event)),
            "{wr_id:#x} names a live request"
        );
        pool.core.check_invariants();
        events
    }

    fn completed(destination: DestinationId, wr_id: u64) -> DcPoolEvent {
        DcPoolEvent::Completed { destination, wr_id }
    }

    #[test]
    fn write_send_and_read_go_out_with_the_encoded_wr_id_the_address_then_the_data() {
        let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
        let (a, b) = (Address::new(1), Address::new(2));
        let (da, db) = (a.add_to(&mut pool), b.add_to(&mut pool));

        let mut guard = pool.start_post_send(da).expect("an initiator is free");
        assert_eq!(guard.initiator(), (0, None));
        // SAFETY: the recorders never touch the buffers.
        unsafe {
            guard
                .construct_wr(100, WorkRequestFlags::Signaled)
                .expect("room")
                .setup_write(0x77, 0x9000)
                .setup_sge(0x5, 0x1000, 64);
            // Inline data: the pool keeps the guard's inline bit handling.
            guard
                .construct_wr(101, WorkRequestFlags::none())
                .expect("room")
                .setup_send()
                .setup_inline_data(b"hi");
            guard
                .construct_wr(102, WorkRequestFlags::Signaled | WorkRequestFlags::Inline)
                .expect("room")
                .setup_read(0x78, 0xa000)
                .setup_sge(0x6, 0x2000, 32);
        }
        assert_eq!(guard.batch_len(), 3);
        guard.post().expect("recorded post");
        let ah = a.call(16);
        assert_eq!(
            take_calls(),
            [
                "qp16 start".to_string(),
                format!("qp16 write wr_id=0x0 flags={SIGNALED:#x} rkey=0x77 addr=0x9000"),
                ah.clone(),
                "qp16 sge lkey=0x5 addr=0x1000 len=64".to_string(),
                // Signalled although the flags did not ask: the pool signals every request.
                format!(
                    "qp16 send wr_id={:#x} flags={:#x}",
                    provider_wr_id(0, 1),
                    SIGNALED | INLINE
                ),
                ah.clone(),
                "qp16 inline \"hi\"".to_string(),
                // Scatter/gather data: the inline bit asked for is cleared.
                format!(
                    "qp16 read wr_id={:#x} flags={SIGNALED:#x} rkey=0x78 addr=0xa000",
                    provider_wr_id(0, 2)
                ),
                ah.clone(),
                "qp16 sge lkey=0x6 addr=0x2000 len=32".to_string(),
                "qp16 complete".to_string(),
            ]
        );
        assert_eq!(pool.outstanding(da), 3);
        assert_eq!(pool.assignment(da), Some((0, None)));

        // The second destination gets the other initiator; its numbers start at 0 there.
        assert_eq!(post_writes(&mut pool, db, &[200]), 1);
        assert_eq!(
            take_calls(),
            [
                "qp17 start".to_string(),
                format!(
                    "qp17 write wr_id={:#x} flags={SIGNALED:#x} rkey=0x77 addr=0x90c8",
                    provider_wr_id(1, 0)
                ),
                b.call(17),
                "qp17 sge lkey=0x5 addr=0x10c8 len=64".to_string(),
                "qp17 complete".to_string(),
            ]
        );
        // The first one keeps its initiator while it has requests outstanding; numbering goes on.
        assert_eq!(post_writes(&mut pool, da, &[103]), 0);
        let calls = take_calls();
        assert_eq!(
            calls[1],
            format!(
                "qp16 write wr_id={:#x} flags={SIGNALED:#x} rkey=0x77 addr=0x9067",
                provider_wr_id(0, 3)
            )
        );
        assert_eq!(calls[2], ah);

        // Completions come back by provider wr_id and are reported with the callers' wr_ids.
        assert_eq!(complete(&mut pool, provider_wr_id(1, 0), 0), [completed(db, 200)]);
        assert_eq!(pool.outstanding(db), 0);
        assert_eq!(
            pool.assignment(db),
            None,
            "an idle dedicated destination gives its initiator back"
        );
        // A completion also reports the requests of its initiator (stream) before it.
        assert_eq!(complete(&mut pool, provider_wr_id(0, 0), 0), [completed(da, 100)]);
        assert_eq!(
            complete(&mut pool, provider_wr_id(0, 2), 0),
            [completed(da, 101), completed(da, 102)]
        );
        assert_eq!(complete(&mut pool, provider_wr_id(0, 3), 0), [completed(da, 103)]);
        assert_eq!((pool.outstanding(da), pool.assignment(da)), (0, None));
        // A completion of a request already reported names nothing.
        assert!(!pool.complete_raw(provider_wr_id(0, 3), 0, |e| panic!("reported {e:?} twice")));
        assert!(!pool.complete_raw(provider_wr_id(5, 0), 0, |e| panic!("no initiator 5: {e:?}")));
        assert!(take_calls().is_empty(), "completions make no provider call");
    }

    #[test]
    fn requests_are_signalled_whatever_the_flags_so_a_dedicated_destination_gives_its_initiator_back() {
        for policy in [
            DcPoolPolicy::Dedicated,
            DcPoolPolicy::DedicatedWithQuota { quota: 2 },
            DcPoolPolicy::Static,
        ] {
            let mut pool = pool(policy, 16, 0);
            let (da, db, dc) = (
                Address::new(1).add_to(&mut pool),
                Address::new(2).add_to(&mut pool),
                Address::new(3).add_to(&mut pool),
            );
            // Only unsignalled requests, from every destination (the third waits in line under the
            // dedicated policies).
            for (d, wr_id) in [(da, 10), (db, 20)] {
                let mut guard = pool.start_post_send(d).expect("an initiator");
                for k in 0..2 {
                    // SAFETY: the recorders never touch the buffers.
                    unsafe {
                        guard
                            .construct_wr(wr_id + k, WorkRequestFlags::none())
                            .expect("room")
                            .setup_write(1, 2)
                            .setup_sge(3, 4, 5)
                    };
                }
                guard.post().expect("recorded post");
            }
            let calls = take_calls();
            let writes: Vec<&String> = calls.iter().filter(|c| c.contains(" write ")).collect();
            assert_eq!(writes.len(), 4);
            assert!(
                writes.iter().all(|w| w.contains(&format!("flags={SIGNALED:#x} "))),
                "{policy:?}: {writes:?}"
            );
            let dedicated = policy != DcPoolPolicy::Static;
            if dedicated {
                assert!(pool.start_post_send(dc).is_err_and(|e| e.is_would_block()));
            }
            let (ia, _) = pool.assignment(da).expect("held");
            let (ib, _) = pool.assignment(db).expect("held");
            // Each request completes; the last one gives the initiator back (to the one in line).
            let mut events = complete(&mut pool, provider_wr_id(ia, 0), 0);
            if ia == ib {
                events.extend(complete(&mut pool, provider_wr_id(ia, 1), 0));
                events.extend(complete(&mut pool, provider_wr_id(ib, 2), 0));
                events.extend(complete(&mut pool, provider_wr_id(ib, 3), 0));
            } else {
                events.extend(complete(&mut pool, provider_wr_id(ia, 1), 0));
                events.extend(complete(&mut pool, provider_wr_id(ib, 0), 0));
                events.extend(complete(&mut pool, provider_wr_id(ib, 1), 0));
            }
            let mut expected = vec![completed(da, 10), completed(da, 11)];
            if dedicated {
                expected.push(DcPoolEvent::Ready { destination: dc });
            }
            expected.extend([completed(db, 20), completed(db, 21)]);
            assert_eq!(events, expected, "{policy:?}");
            assert_eq!(pool.outstanding(da) + pool.outstanding(db), 0);
            if dedicated {
                assert_eq!(pool.assignment(da), None, "{policy:?}: da gave its initiator back");
                assert_eq!(pool.assignment(db), None, "{policy:?}: db gave its initiator back");
                assert_eq!(pool.assignment(dc), Some((ia, None)), "{policy:?}: dc holds da's");
            }
        }
    }

    #[test]
    fn a_guard_dropped_unposted_aborts_and_leaves_nothing_outstanding() {
        let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
        let a = Address::new(1);
        let da = a.add_to(&mut pool);
        let mut guard = pool.start_post_send(da).expect("an initiator is free");
        // A request dropped before its data step adds nothing.
        let _ = guard
            .construct_wr(1, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_write(1, 2);
        assert_eq!(guard.batch_len(), 0);
        // SAFETY: the recorders never touch the buffers.
        unsafe {
            guard
                .construct_wr(2, WorkRequestFlags::Signaled)
                .expect("room")
                .setup_write(1, 2)
                .setup_sge(3, 4, 5)
        };
        assert_eq!(guard.batch_len(), 1);
        drop(guard);
        let calls = take_calls();
        assert_eq!(calls.first().map(String::as_str), Some("qp16 start"));
        assert_eq!(calls.last().map(String::as_str), Some("qp16 abort"));
        assert!(!calls.iter().any(|c| c.ends_with("complete")), "{calls:?}");
        assert_eq!(pool.outstanding(da), 0);
        assert_eq!(pool.assignment(da), None, "the initiator went back");
        assert!(!pool.complete_raw(provider_wr_id(0, 0), 0, |e| panic!("aborted request reported: {e:?}")));

        // The next batch starts at number 0 again: nothing was counted.
        post_writes(&mut pool, da, &[3]);
        assert!(take_calls()[1].contains(&format!("wr_id={:#x} ", provider_wr_id(0, 0))));
        assert_eq!(complete(&mut pool, provider_wr_id(0, 0), 0), [completed(da, 3)]);
    }

    #[test]
    fn a_failed_post_counts_nothing_and_releases_the_initiator() {
        let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
        let da = Address::new(1).add_to(&mut pool);
        COMPLETE_RETURNS.with(|r| r.set(libc::ENOMEM));
        let mut guard = pool.start_post_send(da).expect("an initiator is free");
        // SAFETY: the recorders never touch the buffers.
        unsafe {
            guard
                .construct_wr(1, WorkRequestFlags::Signaled)
                .expect("room")
                .setup_write(1, 2)
                .setup_sge(3, 4, 5)
        };
        let err = guard.post().unwrap_err();
        assert!(
            matches!(err.0, PostSendErrorKind::QueueFull { batch_len: 1, .. }),
            "{err:?}"
        );
        COMPLETE_RETURNS.with(|r| r.set(0));
        assert_eq!((pool.outstanding(da), pool.assignment(da)), (0, None));
        assert!(!pool.complete_raw(provider_wr_id(0, 0), 0, |e| panic!("unposted request reported: {e:?}")));
        pool.core.check_invariants();
    }

    #[test]
    fn construct_wr_beyond_the_room_is_batch_full_and_the_batch_so_far_posts() {
        let mut pool = pool(DcPoolPolicy::Dedicated, 4, 0);
        let da = Address::new(1).add_to(&mut pool);
        let mut guard = pool.start_post_send(da).expect("an initiator is free");
        assert_eq!(guard.room(), 4);
        for wr_id in 0..4 {
            // SAFETY: the recorders never touch the buffers.
            unsafe {
                guard
                    .construct_wr(wr_id, WorkRequestFlags::Signaled)
                    .expect("room")
                    .setup_write(1, 2)
                    .setup_sge(3, 4, 5)
            };
        }
        assert!(matches!(
            guard.construct_wr(4, WorkRequestFlags::Signaled),
            Err(DcPoolWouldBlock::BatchFull)
        ));
        assert_eq!(guard.batch_len(), 4);
        guard.post().expect("the requests before the refusal post");
        let calls = take_calls();
        let writes: Vec<&String> = calls.iter().filter(|c| c.contains(" write ")).collect();
        assert_eq!(writes.len(), 4, "{calls:?}");
        for (n, write) in writes.iter().enumerate() {
            assert!(
                write.contains(&format!("wr_id={:#x} ", provider_wr_id(0, n as u64))),
                "{write}"
            );
        }
        assert_eq!(calls.last().map(String::as_str), Some("qp16 complete"));
        assert_eq!(pool.outstanding(da), 4);

        // A full send queue refuses the next batch before starting it.
        match pool.start_post_send(da) {
            Err(PostToDestinationError(PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::QueueFull))) => {},
            Err(other) => panic!("unexpected {other:?}"),
            Ok(_) => panic!("a full initiator granted a batch"),
        }
        assert!(take_calls().is_empty(), "nothing was started");

        // One completion makes room for one.
        assert_eq!(complete(&mut pool, provider_wr_id(0, 0), 0), [completed(da, 0)]);
        let mut guard = pool.start_post_send(da).expect("room for one");
        assert_eq!(guard.room(), 1);
        // SAFETY: the recorders never touch the buffers.
        unsafe {
            guard
                .construct_wr(4, WorkRequestFlags::Signaled)
                .expect("room")
                .setup_write(1, 2)
                .setup_sge(3, 4, 5)
        };
        assert!(matches!(
            guard.construct_wr(5, WorkRequestFlags::Signaled),
            Err(DcPoolWouldBlock::BatchFull)
        ));
        guard.post().expect("recorded post");
        assert_eq!(
            complete(&mut pool, provider_wr_id(0, 4), 0),
            [1, 2, 3, 4].map(|wr_id| completed(da, wr_id))
        );
    }

    #[test]
    fn freed_initiators_go_to_the_destinations_in_line_first_first_with_a_ready_event() {
        let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
        let addresses: Vec<Address> = (0..4).map(Address::new).collect();
        let ids: Vec<DestinationId> = addresses.iter().map(|a| a.add_to(&mut pool)).collect();
        let (a, b, c, d) = (ids[0], ids[1], ids[2], ids[3]);
        assert_eq!(post_writes(&mut pool, a, &[1]), 0);
        assert_eq!(post_writes(&mut pool, b, &[2]), 1);
        take_calls();

        match pool.start_post_send(c) {
            Err(e) => {
                assert!(e.is_would_block());
                assert!(matches!(
                    e.0,
                    PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)
                ));
            },
            Ok(_) => panic!("both initiators are held"),
        }
        assert!(take_calls().is_empty(), "nothing was started for it");
        assert_eq!(pool.waiting().collect::<Vec<_>>(), [c]);
        assert!(pool.start_post_send(d).is_err_and(|e| e.is_would_block()));
        assert_eq!(pool.waiting().collect::<Vec<_>>(), [c, d]);

        // b's completion frees initiator 1: it goes to c, first in line, at once.
        assert_eq!(
            complete(&mut pool, provider_wr_id(1, 0), 0),
            [completed(b, 2), DcPoolEvent::Ready { destination: c }]
        );
        assert_eq!(pool.assignment(c), Some((1, None)));
        assert!(matches!(
            pool.start_post_send(d).map(|_| ()).unwrap_err().0,
            PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)
        ));
        assert_eq!(post_writes(&mut pool, c, &[3]), 1);
        let calls = take_calls();
        assert_eq!(calls[0], "qp17 start");
        assert_eq!(calls[2], addresses[2].call(17));
        assert_eq!(pool.waiting().collect::<Vec<_>>(), [d]);
        // The numbering of initiator 1 went on from b's request.
        assert!(
            calls[1].contains(&format!("wr_id={:#x} ", provider_wr_id(1, 1))),
            "{calls:?}"
        );
        // a's completion frees initiator 0 for d; c's then goes back to the free ones.
        assert_eq!(
            complete(&mut pool, provider_wr_id(0, 0), 0),
            [completed(a, 1), DcPoolEvent::Ready { destination: d }]
        );
        assert_eq!(complete(&mut pool, provider_wr_id(1, 1), 0), [completed(c, 3)]);
        assert_eq!(post_writes(&mut pool, d, &[4]), 0);
        assert_eq!(pool.waiting().count(), 0);
        // A destination not first in line is not refused while an initiator is free.
        assert_eq!(post_writes(&mut pool, b, &[5]), 1);
    }

    #[test]
    fn a_grant_never_used_goes_back_after_the_timeout_and_cancel_wait_leaves_nothing() {
        let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
        pool.set_grant_timeout(3);
        let ids: Vec<DestinationId> = (0..5).map(|n| Address::new(n).add_to(&mut pool)).collect();
        let (a, b, c, d, e) = (ids[0], ids[1], ids[2], ids[3], ids[4]);
        post_writes(&mut pool, a, &[1]);
        post_writes(&mut pool, b, &[2]);
        for x in [c, d, e] {
            assert!(pool.start_post_send(x).is_err_and(|e| e.is_would_block()));
        }
        take_calls();
        // d leaves the line: nothing of it is left there.
        pool.cancel_wait(d);
        assert_eq!(pool.waiting().collect::<Vec<_>>(), [c, e]);
        assert_eq!(pool.footprint().waiting, 2);
        // a's initiator goes to c, which never posts (a forgotten waiter).
        assert_eq!(
            complete(&mut pool, provider_wr_id(0, 0), 0),
            [completed(a, 1), DcPoolEvent::Ready { destination: c }]
        );
        let mut events = Vec::new();
        for _ in 0..2 {
            pool.progress(|event| events.push(event));
        }
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(pool.assignment(c), Some((0, None)));
        // The third call after the grant: it goes back, to e.
        pool.progress(|event| events.push(event));
        assert_eq!(events, [DcPoolEvent::Ready { destination: e }]);
        assert_eq!(pool.assignment(c), None);
        assert_eq!(pool.assignment(e), Some((0, None)));
        // A grant cancelled goes back at once.
        pool.cancel_wait(e);
        assert_eq!(pool.assignment(e), None);
        assert_eq!(post_writes(&mut pool, d, &[3]), 0);
        pool.core.check_invariants();
        // Churn: waiting and cancelling many times keeps the line at its waiters.
        for _ in 0..1000 {
            assert!(pool.start_post_send(c).is_err_and(|e| e.is_would_block()));
            pool.cancel_wait(c);
        }
        assert_eq!(pool.footprint().waiting, 0);
        take_calls();
    }

    #[test]
    fn the_streams_policy_addresses_each_request_on_the_destinations_stream() {
        let mut pool = pool(DcPoolPolicy::Streams, 16, 4);
        // Destinations until one lands on a stream other than 0 (the hash is deterministic).
        let mut addresses = Vec::new();
        let (address, id, initiator, stream) = loop {
            let address = Address::new(addresses.len());
            let id = address.add_to(&mut pool);
            let (initiator, stream) = pool.assignment(id).expect("streams bind at once");
            let stream = stream.expect("an initiator with streams gives a stream");
            assert!(stream < 4 && initiator < 2);
            if stream != 0 {
                break (address, id, initiator, stream);
            }
            addresses.push(address);
        };
        let qp = 16 + initiator as u32;
        // A pool without streams posts with start_post_send; this one is refused there.
        assert!(matches!(
            pool.start_post_send(id).map(|_| ()).unwrap_err().0,
            PostToDestinationErrorKind::StreamsMismatch { streams_pool: true }
        ));
        let mut guard = pool.start_post_send_on_stream(id).expect("bound");
        assert_eq!(guard.initiator(), (initiator, Some(stream)));
        // SAFETY: the recorders never touch the buffers.
        unsafe {
            guard
                .construct_wr(7, WorkRequestFlags::Signaled)
                .expect("room")
                .setup_write(0x77, 0x9000)
                .setup_sge(0x5, 0x1000, 64)
        };
        guard
            .construct_wr(8, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_send()
            .setup_inline_data(b"s");
        guard.post().expect("recorded post");
        assert_eq!(
            take_calls(),
            [
                format!("qp{qp} start"),
                format!(
                    "qp{qp} write wr_id={:#x} flags={SIGNALED:#x} rkey=0x77 addr=0x9000",
                    provider_wr_id(initiator, 0)
                ),
                address.stream_call(qp, stream),
                format!("qp{qp} sge lkey=0x5 addr=0x1000 len=64"),
                format!(
                    "qp{qp} send wr_id={:#x} flags={:#x}",
                    provider_wr_id(initiator, 1),
                    SIGNALED | INLINE
                ),
                address.stream_call(qp, stream),
                format!("qp{qp} inline \"s\""),
                format!("qp{qp} complete"),
            ]
        );
        // A destination on stream 0 also goes through the stream setter.
        let first = addresses.first().expect("destination 0 is on stream 0");
        let first_id = DestinationId {
            index: 0,
            generation: 0,
        };
        let (first_initiator, first_stream) = pool.assignment(first_id).expect("bound");
        assert_eq!(first_stream, Some(0));
        post_writes(&mut pool, first_id, &[9]);
        let calls = take_calls();
        assert_eq!(calls[2], first.stream_call(16 + first_initiator as u32, 0));
        assert_eq!(
            complete(&mut pool, provider_wr_id(initiator, 1), 0),
            [completed(id, 7), completed(id, 8)]
        );
    }

    #[test]
    fn a_stream_in_error_is_reset_only_once_flushed_and_other_streams_completions_count() {
        let mut pool = pool(DcPoolPolicy::Streams, 16, 4);
        // Two destinations on one initiator, on different streams.
        let mut seen: Vec<(DestinationId, usize, u16)> = Vec::new();
        let ((x, xs), (y, ys), initiator) = loop {
            let id = Address::new(seen.len()).add_to(&mut pool);
            let (initiator, stream) = pool.assignment(id).expect("bound");
            let stream = stream.expect("streams");
            if let Some(&(other, _, other_stream)) = seen.iter().find(|(_, i, s)| *i == initiator && *s != stream) {
                break ((other, other_stream), (id, stream), initiator);
            }
            seen.push((id, initiator, stream));
            assert!(seen.len() < 64, "the hash spreads destinations over streams");
        };
        post_writes(&mut pool, x, &[1, 2]);
        post_writes(&mut pool, y, &[3]);
        take_calls();
        // x's first request fails: reported at once; its second is not flushed yet, so the
        // stream is not reset, and x is refused naming the recovery.
        assert_eq!(
            complete(&mut pool, provider_wr_id(initiator, 0), REM_ACCESS_ERR),
            [DcPoolEvent::Failed {
                destination: x,
                wr_id: 1,
                status: REM_ACCESS_ERR,
                vendor_err: 0
            }]
        );
        assert!(take_calls().is_empty(), "no reset before the flush");
        assert!(matches!(
            pool.start_post_send_on_stream(x).map(|_| ()).unwrap_err().0,
            PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::Recovering { initiator: i, stream: Some(s) })
                if i == initiator && s == xs
        ));
        // The other stream's request executed: its completion after the error counts.
        assert_eq!(complete(&mut pool, provider_wr_id(initiator, 2), 0), [completed(y, 3)]);
        // y's stream posts on meanwhile.
        post_writes(&mut pool, y, &[4]);
        take_calls();
        // The flush of x's second request: failed (x is at fault), then the stream is reset.
        assert_eq!(
            complete(&mut pool, provider_wr_id(initiator, 1), FLUSH_ERR),
            [DcPoolEvent::Failed {
                destination: x,
                wr_id: 2,
                status: FLUSH_ERR,
                vendor_err: 0
            }]
        );
        assert_eq!(take_calls(), [format!("qp{} reset_stream {xs}", 16 + initiator)]);
        assert_eq!(pool.outstanding(y), 1);
        assert_eq!(complete(&mut pool, provider_wr_id(initiator, 3), 0), [completed(y, 4)]);
        assert_ne!(xs, ys);
        post_writes(&mut pool, x, &[5]);
        take_calls();
    }

    #[test]
    fn a_stream_reset_refused_in_err_recovers_the_initiator_once_everything_completed() {
        let mut pool = pool(DcPoolPolicy::Streams, 16, 4);
        let mut seen: Vec<(DestinationId, usize, u16)> = Vec::new();
        let (x, y, initiator) = loop {
            let id = Address::new(seen.len()).add_to(&mut pool);
            let (initiator, stream) = pool.assignment(id).expect("bound");
            let stream = stream.expect("streams");
            if let Some(&(other, _, _)) = seen.iter().find(|(_, i, s)| *i == initiator && *s != stream) {
                break (other, id, initiator);
            }
            seen.push((id, initiator, stream));
        };
        let qp = 16 + initiator;
        post_writes(&mut pool, x, &[1]);
        post_writes(&mut pool, y, &[2, 3]);
        take_calls();
        // The initiator went to ERR after the error (too many streams errored): the reset is
        // refused, and the pool waits for the other stream's requests.
        pool.initiator(initiator).expect("initiator").in_error.set(true);
        assert_eq!(
            complete(&mut pool, provider_wr_id(initiator, 0), REM_ACCESS_ERR),
            [DcPoolEvent::Failed {
                destination: x,
                wr_id: 1,
                status: REM_ACCESS_ERR,
                vendor_err: 0
            }]
        );
        assert_eq!(
            take_calls(),
            [format!(
                "qp{qp} reset_stream {}",
                pool.assignment(x).unwrap().1.unwrap()
            )]
        );
        assert!(matches!(
            pool.start_post_send_on_stream(y).map(|_| ()).unwrap_err().0,
            PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::Recovering { stream: None, .. })
        ));
        // y's first executed before the move to ERR, its second was flushed: completed, retry.
        assert_eq!(complete(&mut pool, provider_wr_id(initiator, 1), 0), [completed(y, 2)]);
        assert!(take_calls().is_empty(), "no recovery while a request is in flight");
        assert_eq!(
            complete(&mut pool, provider_wr_id(initiator, 2), FLUSH_ERR),
            [DcPoolEvent::Retry {
                destination: y,
                wr_id: 3
            }]
        );
        assert_eq!(take_calls(), [format!("qp{qp} recover")]);
        pool.initiator(initiator).expect("initiator").in_error.set(false);
        post_writes(&mut pool, y, &[3]);
        take_calls();
    }

    #[test]
    fn an_error_completion_fails_the_destination_hands_back_the_flushed_others_and_recovers() {
        let mut pool = pool(DcPoolPolicy::Static, 16, 0);
        // Two destinations bound to one initiator (and one elsewhere).
        let ids: Vec<DestinationId> = (0..3).map(|n| Address::new(n).add_to(&mut pool)).collect();
        let shared: Vec<DestinationId> = ids
            .iter()
            .copied()
            .filter(|&d| pool.assignment(d) == pool.assignment(ids[0]))
            .collect();
        let (a, b) = (shared[0], shared[1]);
        let (initiator, _) = pool.assignment(a).expect("bound");
        let qp = 16 + initiator;

        post_writes(&mut pool, a, &[10, 11, 12]);
        post_writes(&mut pool, b, &[20]);
        post_writes(&mut pool, a, &[13]);
        take_calls();
        assert_eq!(complete(&mut pool, provider_wr_id(initiator, 0), 0), [completed(a, 10)]);
        // Request 1 (a's 11) fails: reported with its status; the initiator is in ERR, and
        // nothing else is reported before the device flushes it.
        assert_eq!(
            complete(&mut pool, provider_wr_id(initiator, 1), REM_ACCESS_ERR),
            [DcPoolEvent::Failed {
                destination: a,
                wr_id: 11,
                status: REM_ACCESS_ERR,
                vendor_err: 0
            }]
        );
        assert!(take_calls().is_empty(), "no recovery before the flush");
        assert!(matches!(
            pool.start_post_send(b).map(|_| ()).unwrap_err().0,
            PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::Recovering { stream: None, .. })
        ));
        // The flushes: a's fail, b's is handed back; the last one recovers the initiator.
        let mut events = Vec::new();
        for n in 2..5 {
            events.extend(complete(&mut pool, provider_wr_id(initiator, n), FLUSH_ERR));
        }
        assert_eq!(
            events,
            [
                DcPoolEvent::Failed {
                    destination: a,
                    wr_id: 12,
                    status: FLUSH_ERR,
                    vendor_err: 0
                },
                DcPoolEvent::Retry {
                    destination: b,
                    wr_id: 20
                },
                DcPoolEvent::Failed {
                    destination: a,
                    wr_id: 13,
                    status: FLUSH_ERR,
                    vendor_err: 0
                },
            ]
        );
        assert_eq!(take_calls(), [format!("qp{qp} recover")]);
        assert_eq!((pool.outstanding(a), pool.outstanding(b)), (0, 0));
        // The recovered initiator posts on, numbering on.
        post_writes(&mut pool, b, &[20]);
        assert!(take_calls()[1].contains(&format!("wr_id={:#x} ", provider_wr_id(initiator, 5))));
        assert_eq!(complete(&mut pool, provider_wr_id(initiator, 5), 0), [completed(b, 20)]);
    }

    #[test]
    fn an_initiator_that_cannot_be_recovered_is_lost_and_its_destinations_move_to_the_others() {
        for policy in [DcPoolPolicy::Static, DcPoolPolicy::Streams] {
            let streams = if policy == DcPoolPolicy::Streams { 4 } else { 0 };
            let mut pool = pool(policy, 16, streams);
            let a = Address::new(0).add_to(&mut pool);
            let (initiator, _) = pool.assignment(a).expect("bound");
            post_writes(&mut pool, a, &[1, 2]);
            let recorder = pool.initiator(initiator).expect("initiator");
            recorder.recovery_fails.set(true);
            // With streams the stream reset is refused as in ERR: the initiator is recovered.
            recorder.in_error.set(streams > 0);
            let mut events = complete(&mut pool, provider_wr_id(initiator, 0), REM_ACCESS_ERR);
            events.extend(complete(&mut pool, provider_wr_id(initiator, 1), FLUSH_ERR));
            assert_eq!(
                events,
                [
                    DcPoolEvent::Failed {
                        destination: a,
                        wr_id: 1,
                        status: REM_ACCESS_ERR,
                        vendor_err: 0
                    },
                    DcPoolEvent::Failed {
                        destination: a,
                        wr_id: 2,
                        status: FLUSH_ERR,
                        vendor_err: 0
                    },
                    DcPoolEvent::InitiatorLost {
                        initiator,
                        error: "recovery refused by the test".into()
                    },
                ],
                "{policy:?}"
            );
            take_calls();
            // Rehashed onto the other initiator: it posts there.
            let (moved, _) = pool.assignment(a).expect("bound to another");
            assert_ne!(moved, initiator);
            assert_eq!(post_writes(&mut pool, a, &[3]), moved);
            take_calls();
        }
    }

    #[test]
    fn retry_exceeded_errors_make_a_destination_unreachable_until_revived() {
        // The pool of these tests reports after 2 consecutive errors.
        let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
        let a = Address::new(0).add_to(&mut pool);
        post_writes(&mut pool, a, &[1]);
        let first = complete(&mut pool, provider_wr_id(0, 0), RETRY_EXC_ERR);
        assert_eq!(
            first,
            [DcPoolEvent::Failed {
                destination: a,
                wr_id: 1,
                status: RETRY_EXC_ERR,
                vendor_err: 0
            }]
        );
        assert!(!pool.is_unreachable(a));
        post_writes(&mut pool, a, &[2]);
        let second = complete(&mut pool, provider_wr_id(0, 1), RETRY_EXC_ERR);
        assert_eq!(
            second,
            [
                DcPoolEvent::Unreachable { destination: a },
                DcPoolEvent::Failed {
                    destination: a,
                    wr_id: 2,
                    status: RETRY_EXC_ERR,
                    vendor_err: 0
                },
            ]
        );
        take_calls();
        assert!(matches!(
            pool.start_post_send(a).map(|_| ()).unwrap_err().0,
            PostToDestinationErrorKind::Unreachable
        ));
        assert!(take_calls().is_empty());
        pool.revive(a);
        post_writes(&mut pool, a, &[3]);
        assert_eq!(complete(&mut pool, provider_wr_id(0, 2), 0), [completed(a, 3)]);
    }

    /// Posts `count` signalled writes in one batch to `destination`; returns the batch's room.
    fn post_counted_writes(
        pool: &mut DcInitiatorPool<RecordingInitiator>, destination: DestinationId, first_wr_id: u64, count: u64,
    ) -> usize {
        let mut guard = pool.start_post_send(destination).expect("a batch");
        let room = guard.room();
        for wr_id in first_wr_id..first_wr_id + count {
            // SAFETY: the recorders never touch the buffers.
            unsafe {
                guard
                    .construct_wr(wr_id, WorkRequestFlags::Signaled)
                    .expect("room")
                    .setup_write(1, 2)
                    .setup_sge(3, 4, 5)
            };
        }
        guard.post().expect("recorded post");
        room
    }

    #[test]
    fn a_batch_ends_where_the_ring_wraps_and_the_next_one_starts_at_its_beginning() {
        // A send queue of 4: a ring of 8 places.
        let mut pool = pool(DcPoolPolicy::Static, 4, 0);
        let da = Address::new(1).add_to(&mut pool);
        let (initiator, _) = pool.assignment(da).expect("bound");
        assert_eq!(post_counted_writes(&mut pool, da, 0, 3), 4);
        let settled = complete(&mut pool, provider_wr_id(initiator, 2), 0);
        assert_eq!(settled, [0, 1, 2].map(|wr_id| completed(da, wr_id)));
        assert_eq!(post_counted_writes(&mut pool, da, 3, 3), 4);
        let settled = complete(&mut pool, provider_wr_id(initiator, 5), 0);
        assert_eq!(settled, [3, 4, 5].map(|wr_id| completed(da, wr_id)));
        // Requests 6 and 7 fill the ring to its end: the send queue is empty, the batch has 2.
        assert_eq!(post_counted_writes(&mut pool, da, 6, 2), 2);
        // The next batch starts at the ring's beginning, with the send queue's 2 free places.
        assert_eq!(post_counted_writes(&mut pool, da, 8, 2), 2);
        take_calls();
        let settled = complete(&mut pool, provider_wr_id(initiator, 9), 0);
        assert_eq!(settled, [6, 7, 8, 9].map(|wr_id| completed(da, wr_id)));
        assert_eq!(pool.outstanding(da), 0);
    }

    #[test]
    fn a_quota_caps_a_batch_while_others_wait() {
        let mut pool = pool(DcPoolPolicy::DedicatedWithQuota { quota: 3 }, 16, 0);
        let (da, db, dc) = (
            Address::new(1).add_to(&mut pool),
            Address::new(2).add_to(&mut pool),
            Address::new(3).add_to(&mut pool),
        );
        // Nobody waits: the whole send queue.
        assert_eq!(post_counted_writes(&mut pool, da, 0, 2), 16);
        assert_eq!(post_counted_writes(&mut pool, db, 100, 1), 16);
        // Both initiators are held: the third destination is in line.
        match pool.start_post_send(dc) {
            Err(PostToDestinationError(PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator))) => {},
            other => panic!("unexpected {:?}", other.map(|g| g.room())),
        }
        // Now the first destination has 1 request left of its quota, however large the batch.
        assert_eq!(post_counted_writes(&mut pool, da, 2, 1), 1);
        match pool.start_post_send(da) {
            Err(PostToDestinationError(PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::QuotaExhausted))) => {},
            other => panic!("unexpected {:?}", other.map(|g| g.room())),
        }
        take_calls();
    }

    #[test]
    fn a_failed_request_carries_its_completions_vendor_syndrome() {
        let mut pool = pool(DcPoolPolicy::Static, 16, 0);
        let da = Address::new(1).add_to(&mut pool);
        let (initiator, _) = pool.assignment(da).expect("bound");
        post_counted_writes(&mut pool, da, 0, 2);
        take_calls();
        let mut events = Vec::new();
        assert!(pool
            .core
            .complete_with_syndrome(provider_wr_id(initiator, 0), REM_ACCESS_ERR, 0x15, &mut |e| events
                .push(e)));
        assert_eq!(
            events,
            [DcPoolEvent::Failed {
                destination: da,
                wr_id: 0,
                status: REM_ACCESS_ERR,
                vendor_err: 0x15
            },]
        );
        // The request flushed behind it fails with the flush's status and no syndrome.
        assert!(pool
            .core
            .complete_with_syndrome(provider_wr_id(initiator, 1), FLUSH_ERR, 0x99, &mut |e| events.push(e)));
        assert_eq!(
            events[1],
            DcPoolEvent::Failed {
                destination: da,
                wr_id: 1,
                status: FLUSH_ERR,
                vendor_err: 0
            }
        );
        pool.core.check_invariants();
    }

    /// A work completion as a CQ shared with other queue pairs returns it.
    fn work_completion(qp_number: u32, wr_id: u64, status: u32, vendor_err: u32) -> WorkCompletion {
        // SAFETY: zeroes are valid for ibv_wc (plain data).
        let mut wc: rdma_mummy_sys::ibv_wc = unsafe { MaybeUninit::zeroed().assume_init() };
        wc.qp_num = qp_number;
        wc.wr_id = wr_id;
        wc.status = status;
        wc.vendor_err = vendor_err;
        WorkCompletion::from(wc)
    }

    #[test]
    fn complete_takes_the_pools_completions_from_a_shared_cq_and_leaves_the_others() {
        let mut pool = pool(DcPoolPolicy::Static, 16, 0);
        let da = Address::new(1).add_to(&mut pool);
        let (initiator, _) = pool.assignment(da).expect("bound");
        post_writes(&mut pool, da, &[7, 8]);
        take_calls();
        let qp = 16 + initiator as u32;
        let mut events = Vec::new();
        // Another queue pair's completion, with a wr_id that looks like the pool's: not the pool's.
        assert!(
            !pool.complete(&work_completion(0x99, provider_wr_id(initiator, 0), 0, 0), |e| events
                .push(e))
        );
        assert!(events.is_empty());
        // The pool's, with status and vendor syndrome.
        assert!(
            pool.complete(&work_completion(qp, provider_wr_id(initiator, 0), 0, 0), |e| events
                .push(e))
        );
        assert!(pool.complete(
            &work_completion(qp, provider_wr_id(initiator, 1), REM_ACCESS_ERR, 0x22),
            |e| events.push(e)
        ));
        assert_eq!(
            events,
            [
                completed(da, 7),
                DcPoolEvent::Failed {
                    destination: da,
                    wr_id: 8,
                    status: REM_ACCESS_ERR,
                    vendor_err: 0x22
                }
            ]
        );
        // Reported already: no longer the pool's.
        assert!(
            !pool.complete(&work_completion(qp, provider_wr_id(initiator, 1), 0, 0), |e| panic!(
                "{e:?}"
            ))
        );
        take_calls();
    }

    #[test]
    fn a_removed_destination_is_stale_and_its_place_serves_another() {
        let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
        let da = Address::new(1).add_to(&mut pool);
        post_writes(&mut pool, da, &[1]);
        take_calls();
        assert!(matches!(
            pool.remove_destination(da).unwrap_err().0,
            RemoveDestinationErrorKind::Outstanding { requests: 1 }
        ));
        assert_eq!(complete(&mut pool, provider_wr_id(0, 0), 0), [completed(da, 1)]);
        pool.remove_destination(da).expect("nothing outstanding");
        assert!(matches!(
            pool.remove_destination(da).unwrap_err().0,
            RemoveDestinationErrorKind::UnknownDestination
        ));
        let db = Address::new(2).add_to(&mut pool);
        assert_eq!((db.index(), db.generation()), (da.index(), da.generation() + 1));
        for result in [pool.start_post_send(da).map(|_| ()), pool.prepare(da)] {
            assert!(matches!(
                result.unwrap_err().0,
                PostToDestinationErrorKind::UnknownDestination
            ));
        }
        assert_eq!((pool.outstanding(da), pool.assignment(da)), (0, None));
        assert!(take_calls().is_empty(), "nothing was posted for the stale id");
        // The new destination posts to its own address.
        post_writes(&mut pool, db, &[2]);
        assert_eq!(take_calls()[2], Address::new(2).call(16));
        assert_eq!(pool.footprint().live_destinations, 1);
    }

    #[test]
    fn a_million_destinations_through_the_pool_leave_its_footprint_at_the_live_ones() {
        let mut pool = pool(DcPoolPolicy::Static, 16, 0);
        let mut live = std::collections::VecDeque::new();
        for n in 0..1_000_000usize {
            live.push_back(Address::new(n % 4096).add_to(&mut pool));
            if live.len() > 10_000 {
                let old = live.pop_front().expect("live");
                pool.remove_destination(old).expect("nothing outstanding");
            }
        }
        let footprint = pool.footprint();
        assert_eq!(footprint.live_destinations, 10_000);
        assert_eq!(pool.destination_count(), 10_000);
        assert!(footprint.destination_places <= 10_001, "{footprint:?}");
        assert!(
            pool.addresses.len() <= 10_001,
            "{} address records",
            pool.addresses.len()
        );
        assert_eq!(
            (footprint.waiting, footprint.grant_timers, footprint.batch_records),
            (0, 0, 0)
        );
        pool.core.check_invariants();
    }

    #[test]
    fn a_pool_without_streams_refuses_to_post_on_a_stream() {
        let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
        let da = Address::new(1).add_to(&mut pool);
        assert!(matches!(
            pool.start_post_send_on_stream(da).map(|_| ()).unwrap_err().0,
            PostToDestinationErrorKind::StreamsMismatch { streams_pool: false }
        ));
        // Refused before anything: no initiator held, nothing started.
        assert_eq!(pool.assignment(da), None);
        assert!(take_calls().is_empty());
    }
}
