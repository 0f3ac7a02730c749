//! A pool of DC initiators that serves many destinations: DC at scale.
//!
//! One [`DcInitiator`] serialises every destination behind it: a slow peer stalls the others, and
//! one error completion puts it in ERR for all of them. A [`DcInitiatorPool`] creates several on
//! one send CQ, assigns them to destinations by a [`DcPoolPolicy`], keeps one address handle per
//! destination, maps every completion back to its request and destination, and recovers an
//! initiator an error put in ERR (UCX's `dc_mlx5` transport does the same for its endpoints).
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use sideway::ibverbs::device::DeviceList;
//! use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
//! use sideway_ext::mlx5::dc_endpoint::DcEndpoint;
//! use sideway_ext::mlx5::dc_initiator::DcInitiatorBringUp;
//! use sideway_ext::mlx5::dc_initiator_pool::{DcPoolEvent, DcPoolPolicy, PostToDestinationErrorKind};
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
//!     // Nothing was posted: try again after polling.
//!     Err(e) if matches!(e.0, PostToDestinationErrorKind::WouldBlock(_)) => {},
//!     Err(e) => return Err(e.into()),
//! }
//! pool.poll(|event| match event {
//!     DcPoolEvent::Completed { destination, wr_id } => println!("{wr_id} reached {destination:?}"),
//!     DcPoolEvent::Retry { destination, wr_id } => println!("post {wr_id} to {destination:?} again"),
//!     other => println!("{other:?}"),
//! })?;
//! # Ok(())
//! # }
//! ```
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, mlx5dv_qp_ex, mlx5dv_wr_set_dc_addr, mlx5dv_wr_set_dc_addr_stream};
use sideway::ibverbs::completion::{GenericCompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{QueuePairState, SendOperationFlags, WorkRequestFlags};

use super::dc_endpoint::{CreateDcAddressHandleError, DcEndpoint};
use super::dc_initiator::{
    BringUpDcInitiatorError, CreateDcInitiatorError, DcInitiator, DcInitiatorBringUp, DcInitiatorBuilder, DciStreams,
    SET_DC_ADDR,
};
use super::dc_pool_assignment::{encode, Grant, PoolCore, PooledInitiator, Refusal, INITIATOR_BITS, MAX_INITIATORS};
pub use super::dc_pool_assignment::{DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId};
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
    /// Whether the device is not mlx5, libmlx5 is missing, or (streams policy) the device has no
    /// DCI streams.
    pub fn is_not_supported(&self) -> bool {
        use super::dc_initiator::CreateDcInitiatorErrorKind as Kind;
        match &self.0 {
            CreateDcInitiatorPoolErrorKind::Initiator { source, .. } => {
                matches!(source.0, Kind::NotSupported | Kind::DciStreamsNotSupported)
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
}

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
        }
    }

    /// The completion queue of every initiator's send completions (required). The pool polls it
    /// ([`DcInitiatorPool::poll`]): no other queue pair may complete on it.
    pub fn setup_send_cq(&mut self, send_cq: impl Into<GenericCompletionQueue>) -> &mut Self {
        let send_cq = send_cq.into();
        self.initiator.setup_send_cq(send_cq.clone());
        self.send_cq = Some(send_cq);
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

    /// Disables scatter to CQE on every initiator (as perftest does).
    pub fn setup_disable_scatter_to_cqe(&mut self, disable: bool) -> &mut Self {
        self.initiator.setup_disable_scatter_to_cqe(disable);
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
        let mut initiators = Vec::with_capacity(self.count);
        for index in 0..self.count {
            let mut initiator = self
                .initiator
                .build()
                .map_err(|source| CreateDcInitiatorPoolErrorKind::Initiator { index, source })?;
            initiator
                .bring_up(&bring_up)
                .map_err(|source| CreateDcInitiatorPoolErrorKind::BringUp { index, source })?;
            initiators.push(initiator);
        }
        let mut pool = DcInitiatorPool::from_initiators(initiators, self.policy, self.unreachable_after);
        pool.send_cq = self.send_cq.clone();
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
    /// The destination is bound to an initiator that could not be recovered
    /// ([`DcPoolEvent::InitiatorLost`]).
    #[error("the destination's DC initiator {initiator} is out of service")]
    InitiatorLost {
        /// The initiator.
        initiator: usize,
    },
    /// The destination is not one of this pool's.
    #[error("no such destination in this pool")]
    UnknownDestination,
    /// The destination's address handle could not be created (first post).
    #[error(transparent)]
    AddressHandle(#[from] CreateDcAddressHandleError),
}

impl From<Refusal> for PostToDestinationErrorKind {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::WouldBlock(reason) => Self::WouldBlock(reason),
            Refusal::Unreachable => Self::Unreachable,
            Refusal::InitiatorLost(initiator) => Self::InitiatorLost { initiator },
            Refusal::UnknownDestination => Self::UnknownDestination,
        }
    }
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

    fn is_in_error(&mut self) -> bool {
        // If the state cannot be read, recover the whole initiator.
        !matches!(self.query_state(), Ok(QueuePairState::ReadyToSend))
    }

    fn recover(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        DcInitiator::recover(self).map_err(Into::into)
    }

    fn reset_stream(&mut self, stream: u16) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        DcInitiator::reset_stream(self, stream).map_err(Into::into)
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
#[derive(Debug)]
struct DestinationAddress {
    endpoint: Option<DcEndpoint>,
    /// Created on the first post, kept for the pool's lifetime (requests in flight use it).
    ah: Option<Arc<AddressHandle>>,
    resolved: Option<(NonNull<ibv_ah>, u32, u64)>,
}

/// A pool of DC initiators on one send CQ serving many destinations; see the
/// [module](self) documentation.
pub struct DcInitiatorPool<I: PostingInitiator = DcInitiator> {
    core: PoolCore<I>,
    addresses: Vec<DestinationAddress>,
    qp_numbers: Vec<u32>,
    send_cq: Option<GenericCompletionQueue>,
    pd: Option<Arc<ProtectionDomain>>,
    port: u8,
    src_gid_index: u8,
}

// SAFETY: the raw address-handle pointers are owned through `addresses`' Arcs (or, for hand-made
// pools, by the caller); every method that posts or recovers takes `&mut self`.
unsafe impl<I: PostingInitiator + Send> Send for DcInitiatorPool<I> {}

impl<I: PostingInitiator> std::fmt::Debug for DcInitiatorPool<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcInitiatorPool")
            .field("policy", &self.core.policy())
            .field("initiators", &self.qp_numbers)
            .field("destinations", &self.addresses.len())
            .finish_non_exhaustive()
    }
}

impl<I: PostingInitiator> DcInitiatorPool<I> {
    /// A pool over initiators already brought up (for benchmarks and tests over hand-made
    /// tables; [`DcInitiatorPoolBuilder`] makes real ones).
    #[doc(hidden)]
    pub fn from_initiators(initiators: Vec<I>, policy: DcPoolPolicy, unreachable_after: u32) -> Self {
        let qp_numbers = initiators.iter().map(PostingInitiator::qp_number).collect();
        Self {
            core: PoolCore::new(initiators, policy, unreachable_after),
            addresses: Vec::new(),
            qp_numbers,
            send_cq: None,
            pd: None,
            port: 1,
            src_gid_index: 0,
        }
    }

    /// The policy it was created with.
    pub fn policy(&self) -> DcPoolPolicy {
        self.core.policy()
    }

    /// How many initiators it has.
    pub fn initiator_count(&self) -> usize {
        self.qp_numbers.len()
    }

    /// Initiator `index`, to query it.
    pub fn initiator(&self, index: usize) -> Option<&I> {
        self.core.initiators.get(index)
    }

    /// Adds the DC target of `endpoint` as a destination. Its address handle is created on its
    /// first post and kept while the pool lives.
    pub fn add_destination(&mut self, endpoint: DcEndpoint) -> DestinationId {
        self.addresses.push(DestinationAddress {
            endpoint: Some(endpoint),
            ah: None,
            resolved: None,
        });
        self.core.add_destination()
    }

    /// Adds a destination by a raw address handle (for benchmarks and tests over hand-made
    /// tables).
    ///
    /// # Safety
    ///
    /// `ah` must stay a live address handle (or whatever a hand-made table accepts) while the
    /// pool posts to the destination and its requests are in flight.
    #[doc(hidden)]
    pub unsafe fn add_destination_raw(&mut self, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64) -> DestinationId {
        self.addresses.push(DestinationAddress {
            endpoint: None,
            ah: None,
            resolved: Some((ah, dct_number, dc_key)),
        });
        self.core.add_destination()
    }

    /// How many destinations it has.
    pub fn destination_count(&self) -> usize {
        self.addresses.len()
    }

    /// The endpoint of `destination`.
    pub fn endpoint(&self, destination: DestinationId) -> Option<&DcEndpoint> {
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

    /// The destinations in line for an initiator (dedicated policies), first first: initiators
    /// are handed out in this order, so post to them first. A destination that no longer has
    /// anything to post should leave the line ([`cancel_wait`](Self::cancel_wait)), or it holds
    /// up those behind it.
    pub fn waiting(&self) -> impl Iterator<Item = DestinationId> + '_ {
        self.core.waiting()
    }

    /// Takes `destination` out of line for an initiator.
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

    /// The destination's address, creating its address handle on first use.
    fn resolve(
        &mut self, destination: DestinationId,
    ) -> Result<(NonNull<ibv_ah>, u32, u64), PostToDestinationErrorKind> {
        let address = self
            .addresses
            .get_mut(destination.index())
            .ok_or(PostToDestinationErrorKind::UnknownDestination)?;
        if let Some(resolved) = address.resolved {
            return Ok(resolved);
        }
        let (Some(endpoint), Some(pd)) = (&address.endpoint, &self.pd) else {
            return Err(PostToDestinationErrorKind::UnknownDestination);
        };
        let ah = endpoint.create_ah(pd, self.port, self.src_gid_index)?;
        // SAFETY: the pointer is used while the pool keeps the Arc.
        let resolved = (unsafe { ah.ah() }, endpoint.dct_number(), endpoint.dc_key());
        address.ah = Some(ah);
        address.resolved = Some(resolved);
        Ok(resolved)
    }

    /// Starts a batch of requests to `destination` on the initiator (and stream) the policy
    /// grants it; every request of the batch goes there, and the pool sets its DC address. When
    /// the policy cannot grant one now, the typed
    /// [`WouldBlock`](PostToDestinationErrorKind::WouldBlock): nothing was posted.
    pub fn start_post_send(
        &mut self, destination: DestinationId,
    ) -> Result<DcPoolPostGuard<'_, I>, PostToDestinationError> {
        let (ah, dct_number, dc_key) = self.resolve(destination)?;
        let grant = self.core.begin(destination).map_err(PostToDestinationErrorKind::from)?;
        let (qp_ex, entries, mlx5_qp_ex) = self.core.initiators[grant.initiator].send_view();
        // The guard reaches the bookkeeping and the initiator's ring through raw pointers taken
        // from this one borrow, so that neither invalidates the other.
        let core = NonNull::from(&mut self.core);
        // SAFETY: `core` is the pool's, borrowed for the guard's lifetime.
        let (ring, mask) = unsafe { (*core.as_ptr()).wr_id_ring(grant.initiator) };
        let address = PoolAddress {
            mlx5_qp_ex,
            ah,
            dct_number,
            dc_key,
            stream: grant.stream.map_or(NO_STREAM, u32::from),
        };
        // SAFETY: the initiator is exclusively borrowed through the pool for the guard's lifetime;
        // its views and entries come from PostingInitiator's contract.
        let inner = unsafe { PostSendGuard::<PooledDynamicallyConnected>::start(qp_ex, entries, address) };
        Ok(DcPoolPostGuard {
            inner: ManuallyDrop::new(inner),
            ring,
            mask,
            base: encode(grant.initiator, grant.first),
            first: grant.first,
            room: grant.room,
            grant,
            core,
            _pool: PhantomData,
            ended: false,
        })
    }

    /// Polls the send CQ once (up to 32 completions) and reports, through `sink`, every request
    /// they settle ([`DcPoolEvent`]) — with DCI streams, or requests not signalled, one completion
    /// can settle several — and recovers initiators an error put in ERR. Completions of queue
    /// pairs that are not the pool's are skipped. Returns how many completions were polled.
    pub fn poll(&mut self, mut sink: impl FnMut(DcPoolEvent)) -> Result<usize, PollCompletionQueueError> {
        let Some(cq) = &self.send_cq else {
            return Ok(0);
        };
        let mut wcs = [WorkCompletion::default(); 32];
        let polled = cq.poll_work_completions(&mut wcs)?;
        for wc in polled.iter() {
            let initiator = (wc.wr_id() & (MAX_INITIATORS as u64 - 1)) as usize;
            if self.qp_numbers.get(initiator) != Some(&wc.qp_number()) {
                continue;
            }
            self.core.complete(wc.wr_id(), wc.status_raw(), &mut sink);
        }
        Ok(polled.len())
    }

    /// Settles one completion by hand (for tests and benchmarks over hand-made tables, which
    /// have no CQ): the provider-visible `wr_id` and an `ibv_wc_status`.
    #[doc(hidden)]
    pub fn complete(&mut self, wr_id: u64, status: u32, mut sink: impl FnMut(DcPoolEvent)) -> bool {
        self.core.complete(wr_id, status, &mut sink)
    }
}

/// A batch of requests to one destination through a [`DcInitiatorPool`]: the request builder of a
/// [`DcInitiator`]'s guard, where the pool sets the DC address
/// (`construct_wr` → operation → data). Dropped unposted, it aborts the batch.
#[must_use = "the batch is posted only by post(); dropping the guard aborts it"]
pub struct DcPoolPostGuard<'p, I: PostingInitiator = DcInitiator> {
    inner: ManuallyDrop<PostSendGuard<'p, PooledDynamicallyConnected>>,
    /// The initiator's ring of callers' `wr_id`s, and its mask.
    ring: *mut u64,
    mask: u64,
    /// The provider-visible `wr_id` of the batch's first request.
    base: u64,
    first: u64,
    room: usize,
    grant: Grant,
    /// The pool's bookkeeping, borrowed for `'p`.
    core: NonNull<PoolCore<I>>,
    _pool: PhantomData<&'p mut PoolCore<I>>,
    ended: bool,
}

impl<I: PostingInitiator> DcPoolPostGuard<'_, I> {
    /// Starts a new request with the caller's `wr_id` (what [`DcPoolEvent`]s report) and flags;
    /// continue with an operation, then the data. When the initiator's send queue has no room
    /// for it, [`DcPoolWouldBlock::QueueFull`]: post the batch so far, poll, and go on.
    #[inline]
    pub fn construct_wr(
        &mut self, wr_id: u64, wr_flags: WorkRequestFlags,
    ) -> Result<WorkRequestHandle<'_, PooledDynamicallyConnected>, DcPoolWouldBlock> {
        let len = self.inner.batch_len();
        if len >= self.room {
            return Err(DcPoolWouldBlock::QueueFull);
        }
        let number = self.first.wrapping_add(len as u64);
        // SAFETY: the ring is the initiator's, which this guard's pool borrow keeps alive and
        // unused elsewhere; the index is masked into it; `room` keeps live entries unwritten.
        unsafe { *self.ring.add((number & self.mask) as usize) = wr_id };
        let provider_wr_id = self.base.wrapping_add((len as u64) << INITIATOR_BITS);
        Ok(self.inner.construct_wr(provider_wr_id, wr_flags))
    }

    /// How many requests the batch holds.
    #[inline]
    pub fn batch_len(&self) -> usize {
        self.inner.batch_len()
    }

    /// How many requests the batch may hold (the initiator's free send-queue room).
    #[inline]
    pub fn room(&self) -> usize {
        self.room
    }

    /// The initiator (and stream) the batch goes to.
    pub fn initiator(&self) -> (usize, Option<u16>) {
        (self.grant.initiator, self.grant.stream)
    }

    /// Posts the batch (`ibv_wr_complete`): all of it, or on error none of it, as
    /// [`PostSendGuard::post`].
    #[inline]
    pub fn post(mut self) -> Result<(), PostSendError> {
        let len = self.inner.batch_len();
        // SAFETY: taken once; `ended` keeps Drop from touching it again.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        self.ended = true;
        let result = inner.post();
        // SAFETY: the bookkeeping is borrowed for the guard's lifetime; the ring is not written
        // after this.
        unsafe { self.core.as_mut() }.commit(self.grant, if result.is_ok() { len } else { 0 });
        result
    }
}

impl<I: PostingInitiator> Drop for DcPoolPostGuard<'_, I> {
    fn drop(&mut self) {
        if !self.ended {
            // SAFETY: not taken by post (ended is false); dropping it aborts the batch.
            unsafe { ManuallyDrop::drop(&mut self.inner) };
            // SAFETY: as in post.
            unsafe { self.core.as_mut() }.commit(self.grant, 0);
        }
    }
}

/// No DCI stream: the address is set with `mlx5dv_wr_set_dc_addr`.
const NO_STREAM: u32 = u32::MAX;

/// The DC transport as a pool posts it: the destination is the batch's, set by the pool.
#[derive(Debug)]
pub enum PooledDynamicallyConnected {}

impl sealed::Sealed for PooledDynamicallyConnected {}

impl Transport for PooledDynamicallyConnected {
    type Context = PoolAddress;
    type AfterOperation<'g, O: Operation> = LocalBufferHandle<'g, O, PoolAddress>;

    #[inline(always)]
    fn after_operation<O: Operation>(
        request: PendingRequest<'_, O>, context: PoolAddress,
    ) -> Self::AfterOperation<'_, O> {
        LocalBufferHandle::new(request, context)
    }
}

impl RemoteMemoryAccess for PooledDynamicallyConnected {}

/// A pool batch's DC address: `mlx5dv_wr_set_dc_addr`, or on a DCI stream
/// `mlx5dv_wr_set_dc_addr_stream`.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct PoolAddress {
    mlx5_qp_ex: NonNull<mlx5dv_qp_ex>,
    ah: NonNull<ibv_ah>,
    dct_number: u32,
    dc_key: u64,
    stream: u32,
}

impl sealed::Sealed for PoolAddress {}

impl Destination for PoolAddress {
    // The stream setter is checked when the initiator is created with streams, the only case it
    // is called.
    const ENTRY: u32 = SET_DC_ADDR;
    const ENTRY_NAME: &'static str = "wr_set_dc_addr";

    #[inline(always)]
    unsafe fn set(self, _qp: *mut ibv_qp_ex) {
        if self.stream == NO_STREAM {
            mlx5dv_wr_set_dc_addr(self.mlx5_qp_ex.as_ptr(), self.ah.as_ptr(), self.dct_number, self.dc_key)
        } else {
            mlx5dv_wr_set_dc_addr_stream(
                self.mlx5_qp_ex.as_ptr(),
                self.ah.as_ptr(),
                self.dct_number,
                self.dc_key,
                self.stream as u16,
            )
        }
    }
}
