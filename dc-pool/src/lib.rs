//! A pool of DC initiators that serves many destinations, built on [sideway-ext](sideway_ext)'s
//! public API alone.
//!
//! One [`DcInitiator`] serialises every destination behind it: a slow peer stalls the others, and
//! one error completion puts it in ERR for all of them. A [`DcInitiatorPool`] creates several on
//! one send CQ, assigns them to destinations by a [`DcPoolPolicy`], keeps one address handle per
//! destination, maps every completion back to its request and destination, and recovers
//! initiators in ERR (as UCX's `dc_mlx5` transport does).
//!
//! A batch goes to one destination: [`start_post_send`](DcInitiatorPool::start_post_send) →
//! `construct_wr` → operation → data → `post`; [`poll`](DcInitiatorPool::poll) reports what
//! became of it ([`DcPoolEvent`]). Initiators of one's own are pooled through the traits of
//! [`initiator`].
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use sideway::ibverbs::device::DeviceList;
//! use sideway::ibverbs::device_context::Mtu;
//! use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
//! use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
//! use sideway_ext::mlx5::dc::initiator::DcInitiatorBringUp;
//! use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy};
//! use sideway_ext::mlx5::extension::DcProtectionDomainExt;
//! use sideway_ext_dc_pool::builder::DcPoolProtectionDomainExt;
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
//!     .setup_initiator(pd.create_dci_builder().setup_max_send_wr(128))
//!     // Its path MTU: the smallest destination's.
//!     .setup_bring_up(DcInitiatorBringUp::new(1).setup_destination_path_mtu(Mtu::Mtu1024).clone())
//!     .build()?;
//! // One destination per peer's DC target (its endpoint came over the wire).
//! let peers: Vec<_> = endpoints.iter().map(|e| pool.add_destination(e.clone())).collect();
//! match pool.start_post_send(peers[0]) {
//!     Ok(mut guard) => {
//!         // SAFETY: the buffer is registered and outlives the request.
//!         unsafe { guard.construct_wr(1, WorkRequestFlags::Signaled)?.setup_write(rkey, remote_addr).setup_sge(lkey, addr, 64) };
//!         guard.post()?;
//!     },
//!     // Nothing was posted: `poll` reports `Ready` for it when it may post again.
//!     Err(e) if e.is_would_block() => {},
//!     Err(e) => return Err(e.into()),
//! }
//! // The handler runs inside `poll`, which holds the pool: post once it returned.
//! let mut to_post = Vec::new();
//! pool.poll(|event| match event {
//!     DcPoolEvent::Completed { destination, wr_id } => println!("{wr_id} reached {destination:?}"),
//!     DcPoolEvent::Retry { destination, wr_id } => to_post.push((destination, Some(wr_id))),
//!     DcPoolEvent::Ready { destination } => to_post.push((destination, None)),
//!     other => println!("{other:?}"),
//! })?;
//! for (destination, retry) in to_post {
//!     println!("post to {destination:?} now (again: {retry:?}, before its newer requests)");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # What a caller can rely on
//!
//! - **Nobody stalls.** Initiators that free up go to the destinations in line at once, first
//!   first, inside the same `poll`; a destination is never refused while an initiator is free for
//!   it. A grant not posted on goes back after the
//!   [grant timeout](builder::DcInitiatorPoolBuilder::setup_grant_timeout), or at once with
//!   [`cancel_wait`](DcInitiatorPool::cancel_wait).
//! - **Every request signalled**, whatever its flags (as UCX does for DC); `build` refuses a
//!   send CQ smaller than initiators × the initiator's send queue.
//! - **Exactly once.** `poll` reports every request once, with its destination: `Completed`,
//!   `Failed` (with its status and vendor syndrome; the same destination's requests flushed
//!   behind it fail too), or `Retry` (flushed for another destination's error: post it again,
//!   before the destination's newer requests). A request is reported on its own completion,
//!   never by inference; a stream or initiator in error is reset or recovered only once the
//!   device flushed everything it held (meanwhile `WouldBlock(Recovering { .. })`).
//! - **Peers come and go.** A removed destination's id is refused everywhere, also once its place
//!   serves another; [`footprint`](DcInitiatorPool::footprint) stays that of the live ones.
//! - **Unreachable targets.** A destination whose requests keep failing with "retry exceeded"
//!   is reported `Unreachable` once; its posts are refused until
//!   [`revive`](DcInitiatorPool::revive). A wrong DC key most likely looks the same (mlx5 drops
//!   the packet: [`DcTarget`](sideway_ext::mlx5::dc::target::DcTarget)): add the destination
//!   again with the peer's current endpoint.
//! - **Stalls are seen.** A request outstanding past the stall timeout is reported once
//!   ([`DcPoolEvent::Stalled`]).
//!
//! # Checked without a ConnectX
//!
//! A pool loop runs unchanged on this repository's software ConnectX (softmlx5, a test tool),
//! and a fault is one call of `softmlx5::Control`: here a killed target, reported unreachable.
//!
//! ```
//! use sideway::ibverbs::device::{DeviceInfo, DeviceList};
//! use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
//! use sideway::ibverbs::AccessFlags;
//! use sideway_ext::ibverbs::extension::ProtectionDomainExt;
//! use sideway_ext::mlx5::dc::initiator::DcInitiatorBringUp;
//! use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
//! use sideway_ext::mlx5::extension::DcProtectionDomainExt;
//! use sideway_ext_dc_pool::builder::DcPoolProtectionDomainExt;
//! use sideway_ext_dc_pool::types::{DcPoolEvent, PostToDestinationErrorKind};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The libraries are chosen when a process starts: run this program again on the device.
//! let Some(device) = softmlx5::Control::loaded() else {
//!     assert!(softmlx5::command(std::env::current_exe()?).status()?.success());
//!     return Ok(());
//! };
//! let devices = DeviceList::new()?;
//! let ctx = devices.iter().find(|d| d.name() == "softmlx5_0").expect("softmlx5_0").open()?;
//! let pd = ctx.alloc_pd()?;
//! // The peer: a DC target on a shared receive queue.
//! let mut target = pd
//!     .create_dct_builder()
//!     .setup_recv_cq(ctx.create_cq_builder().setup_cqe(16).build()?)
//!     .setup_srq(&pd.create_srq_builder().setup_max_wr(16).build()?)
//!     .setup_dc_key(7)
//!     .setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite)
//!     .build()?;
//! target.bring_up(&DcTargetBringUp::new(1))?;
//! let memory = vec![0u8; 64];
//! let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
//! // SAFETY: `memory` outlives the region and is not moved.
//! let mr = unsafe { pd.reg_mr(memory.as_ptr() as usize, memory.len(), access) }?;
//! // Unreachable after one "retry exceeded" error, retrying briefly.
//! let mut bring_up = DcInitiatorBringUp::new(1);
//! bring_up.setup_timeout(8).setup_retry_cnt(2);
//! let mut pool = pd
//!     .create_dci_pool_builder()
//!     .setup_own_send_cq(&ctx, None)
//!     .setup_initiators(1)
//!     .setup_initiator(pd.create_dci_builder().setup_max_inline_data(16))
//!     .setup_unreachable_after(1)
//!     .setup_bring_up(bring_up)
//!     .build()?;
//! let peer = pool.add_destination(target.endpoint()?);
//!
//! // The fault: the target is gone.
//! device.kill_target(target.dct_number().expect("brought up"), true)?;
//! let mut guard = pool.start_post_send(peer)?;
//! guard
//!     .construct_wr(1, WorkRequestFlags::none())?
//!     .setup_write(mr.rkey(), memory.as_ptr() as u64)
//!     .setup_inline_data(b"hello");
//! guard.post()?;
//! let mut events = Vec::new();
//! while events.len() < 2 {
//!     pool.poll(|event| events.push(event))?;
//! }
//! assert!(matches!(
//!     events[..],
//!     [DcPoolEvent::Unreachable { destination }, DcPoolEvent::Failed { wr_id: 1, status: 12, .. }]
//!         if destination == peer
//! ));
//! let refused = pool.start_post_send(peer).err().expect("an unreachable destination");
//! assert!(matches!(refused.0, PostToDestinationErrorKind::Unreachable));
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
use sideway::ibverbs::completion::PollCompletionQueueError;

use self::builder::{check_streams, CreateDcInitiatorPoolError, CreateDcInitiatorPoolErrorKind};
use self::destinations::{PoolCore, RemoveRefusal};
pub use self::initiator::PoolInitiator;
use self::initiator::{PoolCompletion, PoolCompletionQueue};
use self::requests::MAX_INITIATORS;
use self::settings::DcPoolSettings;
use self::types::{
    DcPoolEvent, DcPoolFootprint, DcPoolPolicy, DestinationId, DestinationState, PostToDestinationError,
    PostToDestinationErrorKind, RemoveDestinationError, RemoveDestinationErrorKind,
};
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::DcInitiator;

pub mod builder;
pub mod dc_batch;
mod destinations;
pub mod initiator;
pub mod path_mtus;
pub mod post_guard;
mod requests;
pub mod settings;
#[cfg(test)]
mod tests;
pub mod types;

/// A pool of DC initiators on one send CQ serving many destinations; see the [crate].
pub struct DcInitiatorPool<I: PoolInitiator = DcInitiator> {
    /// Apart from `core`, as `addresses` and `wr_ids`: an open batch borrows them and `core`.
    initiators: Vec<I>,
    /// Each destination's address once made, by place.
    addresses: Vec<Option<I::Address>>,
    core: PoolCore,
    /// The callers' `wr_id`s of every initiator's requests, one ring after another.
    wr_ids: Box<[u64]>,
    send_cq: Option<I::CompletionQueue>,
}

impl<I: PoolInitiator> std::fmt::Debug for DcInitiatorPool<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcInitiatorPool")
            .field("policy", &self.policy())
            .field("initiators", &self.initiators.len())
            .field("footprint", &self.footprint())
            .finish_non_exhaustive()
    }
}

impl<I: PoolInitiator> DcInitiatorPool<I> {
    /// A pool over [`PoolInitiator`]s already brought up, completing into `send_cq`, which
    /// [`poll`](Self::poll) reads (`None`: the caller hands their completions to
    /// [`complete`](Self::complete)). It must hold initiators × the smallest
    /// [`max_send_wr`](PoolInitiator::max_send_wr), the most each keeps in flight.
    ///
    /// # Errors
    ///
    /// [`InvalidInitiatorCount`](builder::CreateDcInitiatorPoolErrorKind::InvalidInitiatorCount),
    /// [`StreamsMismatch`](builder::CreateDcInitiatorPoolErrorKind::StreamsMismatch).
    pub fn from_initiators(
        initiators: Vec<I>, send_cq: Option<I::CompletionQueue>, settings: &DcPoolSettings,
    ) -> Result<Self, CreateDcInitiatorPoolError> {
        if initiators.len() > MAX_INITIATORS {
            return Err(CreateDcInitiatorPoolErrorKind::InvalidInitiatorCount {
                requested: initiators.len(),
                max: MAX_INITIATORS,
            }
            .into());
        }
        if !initiators.is_empty() {
            let streams = |i: &I| i.stream_count() > 0;
            let with_streams = if settings.policy() == DcPoolPolicy::Streams {
                initiators.iter().all(streams)
            } else {
                initiators.iter().any(streams)
            };
            check_streams(settings.policy(), with_streams)?;
        }
        let mut core = PoolCore::new(&initiators, settings);
        let per_initiator = initiators.iter().map(I::max_send_wr).min().unwrap_or(0).max(1);
        core.limit_send_queue(per_initiator);
        Ok(Self {
            wr_ids: core.wr_ids(),
            initiators,
            addresses: Vec::new(),
            core,
            send_cq,
        })
    }

    /// Its settings.
    pub fn settings(&self) -> &DcPoolSettings {
        self.core.settings()
    }

    /// The policy it was created with.
    pub fn policy(&self) -> DcPoolPolicy {
        self.core.settings().policy()
    }

    /// How many initiators it has.
    pub fn initiator_count(&self) -> usize {
        self.initiators.len()
    }

    /// Initiator `index`, to read what it was created with.
    pub fn initiator(&self, index: usize) -> Option<&I> {
        self.initiators.get(index)
    }

    /// The send completion queue of its initiators, e.g. to arm it for completion events.
    pub fn send_cq(&self) -> Option<&I::CompletionQueue> {
        self.send_cq.as_ref()
    }

    /// Adds the DC target of `endpoint` as a destination; its address handle is made on its first
    /// post (or [`prepare`](Self::prepare)).
    pub fn add_destination(&mut self, endpoint: DcEndpoint) -> DestinationId {
        self.core.add_destination(Some(endpoint), None)
    }

    /// Adds the DC target `dct_number` with access key `dc_key` as a destination at `address`
    /// made elsewhere ([`PoolInitiator::address`]): for a pool without a protection domain.
    pub fn add_destination_with_address(&mut self, address: I::Address, dct_number: u32, dc_key: u64) -> DestinationId {
        let destination = self.core.add_destination(None, Some((dct_number, dc_key)));
        self.keep_address(destination, address);
        destination
    }

    fn keep_address(&mut self, destination: DestinationId, address: I::Address) {
        let index = destination.index();
        if self.addresses.len() <= index {
            self.addresses.resize_with(index + 1, || None);
        }
        self.addresses[index] = Some(address);
    }

    #[cold]
    #[inline(never)]
    fn drop_removed_addresses(&mut self) {
        for d in self.core.take_removed() {
            if let Some(address) = self.addresses.get_mut(d as usize) {
                *address = None;
            }
        }
    }

    /// Removes `destination`, freeing its address handle; an unused grant goes to the next in
    /// line.
    ///
    /// # Errors
    ///
    /// [`RemoveDestinationErrorKind::Outstanding`]: poll until [`outstanding`](Self::outstanding)
    /// is 0, or [`retire`](Self::retire_destination) it instead.
    pub fn remove_destination(&mut self, destination: DestinationId) -> Result<(), RemoveDestinationError> {
        self.core
            .remove_destination(destination)
            .map_err(|refusal| match refusal {
                RemoveRefusal::Outstanding(requests) => RemoveDestinationErrorKind::Outstanding { requests },
                RemoveRefusal::UnknownDestination => RemoveDestinationErrorKind::UnknownDestination,
            })?;
        self.drop_removed_addresses();
        Ok(())
    }

    /// Removes `destination` once every request of it was reported ([`DcPoolEvent::Removed`]);
    /// it posts nothing meanwhile.
    pub fn retire_destination(&mut self, destination: DestinationId) -> Result<(), RemoveDestinationError> {
        self.core
            .retire(destination)
            .map_err(|_| RemoveDestinationErrorKind::UnknownDestination)?;
        self.drop_removed_addresses();
        Ok(())
    }

    /// How many destinations it has.
    pub fn destination_count(&self) -> usize {
        self.core.destination_count()
    }

    /// What the pool holds; each count stays bounded by what is live.
    pub fn footprint(&self) -> DcPoolFootprint {
        self.core.footprint()
    }

    /// The endpoint of `destination`.
    pub fn endpoint(&self, destination: DestinationId) -> Option<&DcEndpoint> {
        self.core.endpoint(destination)
    }

    /// The initiator (and DCI stream) `destination` posts on now, if any.
    pub fn assignment(&self, destination: DestinationId) -> Option<(usize, Option<u16>)> {
        self.core.assignment(destination)
    }

    /// Requests of `destination` posted and not yet reported by [`poll`](Self::poll).
    pub fn outstanding(&self, destination: DestinationId) -> u64 {
        self.core.outstanding(destination)
    }

    /// The destinations in line for an initiator (dedicated policies), first first.
    pub fn waiting(&self) -> impl Iterator<Item = DestinationId> + '_ {
        self.core.waiting()
    }

    /// Takes `destination` out of line, and gives back a grant it has not posted on.
    pub fn cancel_wait(&mut self, destination: DestinationId) {
        self.core.cancel_wait(destination);
    }

    /// Whether `destination` was reported unreachable.
    pub fn is_unreachable(&self, destination: DestinationId) -> bool {
        self.core.is_unreachable(destination)
    }

    /// What the next [`start_post_send`](Self::start_post_send) to `destination` would meet.
    pub fn destination_state(&self, destination: DestinationId) -> DestinationState {
        self.core.state(destination)
    }

    /// Lets a destination reported unreachable post again (e.g. its peer is back).
    pub fn revive(&mut self, destination: DestinationId) {
        self.core.revive(destination);
    }

    /// Creates `destination`'s address handle now (on RoCE `ibv_create_ah` blocks until the peer
    /// answers ARP or neighbour discovery).
    ///
    /// # Errors
    ///
    /// [`UnknownDestination`](PostToDestinationErrorKind::UnknownDestination),
    /// [`AddressHandle`](PostToDestinationErrorKind::AddressHandle).
    pub fn prepare(&mut self, destination: DestinationId) -> Result<(), PostToDestinationError> {
        if !self.core.contains(destination) {
            return Err(PostToDestinationErrorKind::UnknownDestination.into());
        }
        if !self.core.is_resolved(destination) {
            self.resolve(destination)?;
        }
        Ok(())
    }

    /// Polls the send CQ once (up to 32 completions), reports through `sink` what they settle
    /// and what [`progress`](Self::progress) reports, recovers what the device flushed, and
    /// returns how many it polled.
    pub fn poll(&mut self, sink: impl FnMut(DcPoolEvent)) -> Result<usize, PollCompletionQueueError> {
        let Self {
            initiators,
            core,
            wr_ids,
            send_cq,
            ..
        } = self;
        let mut sink = sink;
        core.tick(&mut sink);
        let polled = match send_cq {
            Some(cq) => cq.poll(|completion, whole| {
                if !core.complete(initiators, wr_ids, completion, &mut sink) {
                    if let Some(wc) = whole {
                        sink(DcPoolEvent::OtherCompletion(*wc));
                    }
                }
            }),
            None => Ok(0),
        };
        if self.core.removed_any() {
            self.drop_removed_addresses();
        }
        polled
    }

    /// Settles one completion polled elsewhere, as [`poll`](Self::poll) does; returns whether it
    /// was the pool's. Such a caller calls [`progress`](Self::progress) once per round.
    pub fn complete(&mut self, completion: impl Into<PoolCompletion>, mut sink: impl FnMut(DcPoolEvent)) -> bool {
        let settled = self
            .core
            .complete(&mut self.initiators, &self.wr_ids, completion.into(), &mut sink);
        if self.core.removed_any() {
            self.drop_removed_addresses();
        }
        settled
    }

    /// What [`poll`](Self::poll) does besides polling: expires grants, reports
    /// [`DcPoolEvent::Stalled`] and [`DcPoolEvent::Ready`].
    pub fn progress(&mut self, mut sink: impl FnMut(DcPoolEvent)) {
        self.core.tick(&mut sink);
        if self.core.removed_any() {
            self.drop_removed_addresses();
        }
    }
}
