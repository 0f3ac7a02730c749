//! A pool of DC initiators that serves many destinations: DC at scale. Built on
//! [sideway-ext](sideway_ext)'s public API alone (its DC initiators, post guards and completion
//! polling), as any crate could be.
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
//! destinations in line, tells a destination refused with a would-block when it may post again
//! ([`DcPoolEvent::Ready`]), and recovers errored streams and initiators once the device flushed
//! them. Destinations come and go ([`remove_destination`](DcInitiatorPool::remove_destination),
//! [`retire_destination`](DcInitiatorPool::retire_destination), generational ids); the send
//! CQ may be shared with other queue pairs ([`complete`](DcInitiatorPool::complete),
//! [`DcPoolEvent::OtherCompletion`]) or created by the pool
//! ([`setup_own_send_cq`](builder::DcInitiatorPoolBuilder::setup_own_send_cq)).
//!
//! The crate's root holds the pool and its methods; [`builder`] creates it, [`settings`] holds
//! every setting of a pool, [`post_guard`] is the post path (address, grant, the initiator's
//! batch), [`types`] its values and errors, [`initiator`] what the pool needs of an initiator, in
//! safe Rust ([`PoolInitiator`], [`PoolBatch`](initiator::PoolBatch),
//! [`PoolCompletionQueue`]). The bookkeeping, apart from any
//! device, is in private modules: destinations, the wait line and grants; each initiator's ring
//! of requests and batch records; completions and recovery.
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
//!     // On RoCE its address handles are sent from the port's RoCE v2 GID (or `setup_source_gid`);
//!     // its packets are no larger than the smallest destination takes.
//!     .setup_bring_up(DcInitiatorBringUp::new(1).setup_destination_path_mtu(Mtu::Mtu1024).clone())
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
//!     // Nothing was posted (no initiator, quota, queue full, recovery): `poll` reports `Ready`
//!     // for it when it may post again.
//!     Err(e) if e.is_would_block() => {},
//!     Err(e) => return Err(e.into()),
//! }
//! // The handler runs inside `poll`, which holds the pool: it notes what to post, and the posts
//! // come once `poll` returned.
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
//! # Policies
//!
//! | policy | a destination posts on | order per destination | when it cannot post |
//! |---|---|---|---|
//! | `Dedicated` | an initiator of its own while it has requests outstanding | kept | `WouldBlock(NoInitiator)`: it is in line |
//! | `DedicatedWithQuota { quota }` | as above, but it yields after `quota` requests when others are in line | kept | also `WouldBlock(QuotaExhausted)`: no starvation |
//! | `Static` | the initiator its number hashes to, shared | kept | `WouldBlock(QueueFull)`; a slow or failing destination delays or flushes the others on its initiator |
//! | `Streams` | a hashed initiator and DCI stream (ConnectX-6 Dx and newer; else "not supported" at creation) | kept (streams run concurrently) | `WouldBlock(QueueFull)`; an error resets one stream only |
//!
//! Every would-block a destination can wait out ends with a [`DcPoolEvent::Ready`] for it: post
//! then, once [`poll`](DcInitiatorPool::poll) returned (its documentation shows the loop).
//!
//! # What a caller can rely on
//!
//! - **Nobody stalls, with no caller discipline.** Initiators that free up go to the destinations
//!   in line at once, first first, as many as are free, inside the same `poll`. A destination is
//!   never refused while an initiator is free for it. One that was granted an initiator and posts
//!   nothing on it gives it back after the grant timeout (a time:
//!   [`setup_grant_timeout`](builder::DcInitiatorPoolBuilder::setup_grant_timeout)), or at once
//!   with [`cancel_wait`](DcInitiatorPool::cancel_wait).
//! - **Every request signalled.** The pool signals every request whatever its flags (UCX turns
//!   completion moderation off for DC too): a dedicated destination gives its initiator back
//!   when its last request completes. The send CQ holds initiators × the initiator's send queue;
//!   `build` refuses a smaller one.
//! - **Exactly once.** `poll` reports every request once, with its destination: `Completed` (it
//!   executed, also a completion of another stream that comes after an error), `Failed` (its
//!   error completion's status and vendor syndrome; the same destination's requests the device
//!   flushed behind it fail too), or `Retry` (the device flushed it for another destination's
//!   error: it did not execute; post it again, before the destination's newer requests). The
//!   pool reports a request on its own completion, never by inference, and resets a stream in
//!   error, or recovers an initiator in ERR, only once the device flushed everything it held;
//!   meanwhile its destinations get `WouldBlock(Recovering { .. })`.
//! - **Peers come and go.** Destination ids are generational: a removed destination's id is
//!   refused (`UnknownDestination`) everywhere, also once its place serves another destination.
//!   [`remove_destination`](DcInitiatorPool::remove_destination) is refused while requests of it
//!   are not reported; [`retire_destination`](DcInitiatorPool::retire_destination) removes it
//!   once they are, with a `Removed` event. [`footprint`](DcInitiatorPool::footprint) stays that
//!   of the live destinations however many came and went.
//! - **Unreachable targets.** A destination whose requests keep failing with errors that say its
//!   target is not there (transport retries exceeded: each fails, its initiator is recovered) is
//!   reported `Unreachable` once; its posts are then refused until [`revive`](DcInitiatorPool::revive).
//!   A live target whose DC key is not the endpoint's (recreated, or its key changed) most
//!   likely looks the same: mlx5 drops the packet (see [`DcTarget`](sideway_ext::mlx5::dc::target::DcTarget));
//!   get the peer's current endpoint, remove the destination and add it again with that one.
//! - **Stalls are seen.** A request outstanding longer than the stall timeout (default 5 s) is
//!   reported once, [`DcPoolEvent::Stalled`]: e.g. a target whose receive queue ran dry, which
//!   `rnr_retry` 7 retries for ever with no completion.
//!
//! # Posting
//!
//! A batch holds at most `guard.room()` requests (the initiator's free send queue, the pool's
//! ring of `wr_id`s, and the quota): beyond it `construct_wr` says `BatchFull`; post and start
//! another. [`prepare`](DcInitiatorPool::prepare) creates a destination's address handle ahead
//! of its first post, which keeps the kernel's wait for the peer's MAC address (RoCE) off the
//! posting path.
//!
//! # A CQ shared with other queue pairs
//!
//! Give the pool a CQ that other queue pairs complete on too (`setup_send_cq`); a caller that
//! polls it hands each completion to [`complete`](DcInitiatorPool::complete), which settles it
//! and returns `true` when it was the pool's, and calls [`progress`](DcInitiatorPool::progress)
//! once per polling round (grant timeouts, `Ready` events). `poll` on a shared CQ hands the
//! others' completions over whole, as `DcPoolEvent::OtherCompletion`. For completion events,
//! create the pool's CQ on a completion channel (`setup_own_send_cq(&ctx, Some((&channel, 0)))`),
//! arm it, sleep on the channel, then drain with `poll` and re-arm.
//!
//! # Initiators made elsewhere
//!
//! [`from_initiators`](DcInitiatorPool::from_initiators) makes a pool of initiators already
//! brought up, with the same [`DcPoolSettings`] as the builder's pool (the builder makes its own
//! pool with it): DC initiators created elsewhere, or initiators of one's own, which implement
//! the three safe traits of [`initiator`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use sideway::ibverbs::completion::GenericCompletionQueue;
//! use sideway::ibverbs::protection_domain::ProtectionDomain;
//! use sideway_ext::mlx5::dc::endpoint::DcServiceClass;
//! use sideway_ext::mlx5::dc::initiator::DcInitiator;
//! use sideway_ext_dc_pool::settings::DcPoolSettings;
//! use sideway_ext_dc_pool::types::DcPoolPolicy;
//! use sideway_ext_dc_pool::DcInitiatorPool;
//!
//! /// A pool of DC initiators brought up elsewhere on port 1, completing into `cq` (which holds
//! /// every request they may have in flight).
//! fn pool_of(
//!     initiators: Vec<DcInitiator>, cq: GenericCompletionQueue, pd: &Arc<ProtectionDomain>,
//! ) -> Result<DcInitiatorPool, Box<dyn std::error::Error>> {
//!     let mut settings = DcPoolSettings::default();
//!     settings
//!         .setup_policy(DcPoolPolicy::Static)
//!         .setup_stall_timeout(Some(Duration::from_secs(2)))
//!         .setup_protection_domain(pd, 1, DcServiceClass::new());
//!     Ok(DcInitiatorPool::from_initiators(initiators, Some(cq), &settings)?)
//! }
//! ```
//!
//! The provider sees `wr_id = initiator << 48 | request number`; the caller's `wr_id` is kept in
//! a ring per initiator, so a completion names its request exactly (also out of order between
//! DCI streams).
//!
//! # Checked without a ConnectX
//!
//! A pool loop is tested, unchanged, on the software ConnectX of this repository (softmlx5, a
//! test tool, not a dependency of this crate): it implements libmlx5's and the kernel's DC rules
//! behind the same verbs, so the program opens its device as on a ConnectX. Run any program or
//! test suite on it with `cargo run -q -p softmlx5 -- cargo test`, or have a program (or, with
//! `softmlx5::rerun_on_device`, a `#[test]`) run itself again there, as below. A fault is one
//! call of `softmlx5::Control`: here a killed target, whose requests then fail with "transport
//! retry counter exceeded" and, after `unreachable_after` of them in a row, make the pool report
//! the destination unreachable.
//!
//! ```
//! use sideway::ibverbs::device::{DeviceInfo, DeviceList};
//! use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
//! use sideway::ibverbs::AccessFlags;
//! use sideway_ext::ibverbs::extension::ProtectionDomainExt;
//! use sideway_ext::mlx5::dc::initiator::DcInitiatorBringUp;
//! use sideway_ext::mlx5::dc::target::DcTargetBringUp;
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
//!     .setup_srq(pd.create_srq_builder().setup_max_wr(16).build()?)
//!     .setup_dc_key(7)
//!     .setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite)
//!     .build()?;
//! target.bring_up(&DcTargetBringUp::new(1))?;
//! let memory = vec![0u8; 64];
//! let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
//! // SAFETY: `memory` outlives the region and is not moved.
//! let mr = unsafe { pd.reg_mr(memory.as_ptr() as usize, memory.len(), access) }?;
//! // A pool that gives up on a destination after one "retry exceeded" error, retrying briefly.
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
//!
//! The pool's own tests run there (tests/device_*.rs): every policy at 1 000 and 10 000
//! destinations, random fault schedules, stalls and lost initiators.
#![deny(missing_docs)]
use sideway::ibverbs::completion::PollCompletionQueueError;
use sideway::ibverbs::queue_pair::QueuePairState;

use self::builder::{check_streams, CreateDcInitiatorPoolError, CreateDcInitiatorPoolErrorKind};
use self::destinations::{PoolCore, RemoveRefusal, Target};
pub use self::initiator::PoolInitiator;
use self::initiator::{PoolCompletion, PoolCompletionQueue};
use self::requests::MAX_INITIATORS;
use self::requests::{initiator_of, WrIds};
use self::settings::DcPoolSettings;
use self::types::{
    DcPoolEvent, DcPoolFootprint, DcPoolPolicy, DestinationId, DestinationState, PostToDestinationError,
    PostToDestinationErrorKind, RemoveDestinationError, RemoveDestinationErrorKind,
};
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::DcInitiator;

pub mod builder;
mod destinations;
pub mod initiator;
pub mod post_guard;
mod requests;
pub mod settings;
#[cfg(test)]
mod tests;
pub mod types;

/// A pool of DC initiators on one send CQ serving many destinations; see the
/// [module](self) documentation.
pub struct DcInitiatorPool<I: PoolInitiator = DcInitiator> {
    /// Apart from `core`, as `addresses` and `wr_ids` are: an open batch borrows its initiator
    /// and its destination's address while it holds `core`.
    initiators: Vec<I>,
    /// Each destination's address once made, by place.
    addresses: Vec<Option<I::Address>>,
    core: PoolCore,
    /// The callers' `wr_id`s of the requests in flight, apart from `core` so that an open batch
    /// writes its places in them while it holds `core`.
    wr_ids: WrIds,
    send_cq: Option<I::CompletionQueue>,
}

impl<I: PoolInitiator> std::fmt::Debug for DcInitiatorPool<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcInitiatorPool")
            .field("policy", &self.core.policy())
            .field("initiators", &self.initiators.len())
            .field("footprint", &self.footprint())
            .finish_non_exhaustive()
    }
}

impl<I: PoolInitiator> DcInitiatorPool<I> {
    /// A pool over initiators already brought up, of any [`PoolInitiator`] (DC initiators made
    /// and brought up elsewhere, or initiators of one's own), completing into `send_cq`, which
    /// [`poll`](Self::poll) reads (`None`: the caller polls their completions and hands them to
    /// [`complete`](Self::complete)), with `settings`. The pool's builder
    /// ([`DcInitiatorPoolBuilder`](builder::DcInitiatorPoolBuilder)) creates and brings up DC
    /// initiators, then makes its pool here.
    ///
    /// The send CQ must hold every request in flight: the pool signals every request, and keeps
    /// at most the smallest [`max_send_wr`](PoolInitiator::max_send_wr) of them in flight on
    /// each. A pool of no initiator refuses every post (`NoInitiatorInService`).
    ///
    /// # Errors
    ///
    /// More initiators than a pool numbers
    /// ([`InvalidInitiatorCount`](builder::CreateDcInitiatorPoolErrorKind::InvalidInitiatorCount)),
    /// or initiators with DCI streams under another policy than the
    /// [streams](DcPoolPolicy::Streams) one, or without them under it
    /// ([`StreamsMismatch`](builder::CreateDcInitiatorPoolErrorKind::StreamsMismatch)).
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
        // Each keeps in flight the send queue it has (the smallest, were they to differ).
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

    /// Its settings (those it was made with).
    pub fn settings(&self) -> &DcPoolSettings {
        self.core.settings()
    }

    /// The policy it was created with.
    pub fn policy(&self) -> DcPoolPolicy {
        self.core.policy()
    }

    /// How many initiators it has.
    pub fn initiator_count(&self) -> usize {
        self.initiators.len()
    }

    /// Initiator `index`, to read what it was created with.
    pub fn initiator(&self, index: usize) -> Option<&I> {
        self.initiators.get(index)
    }

    /// The send completion queue of its initiators (the one given to the builder, or the one it
    /// created), e.g. to arm it for completion events
    /// ([`CompletionQueueEventExt::req_notify_cq`](sideway_ext::ibverbs::extension::CompletionQueueEventExt::req_notify_cq))
    /// when it was created on a completion channel.
    pub fn send_cq(&self) -> Option<&I::CompletionQueue> {
        self.send_cq.as_ref()
    }

    /// Adds the DC target of `endpoint` as a destination. Its address handle is created on its
    /// first post (or by [`prepare`](Self::prepare)) and kept until it is removed.
    pub fn add_destination(&mut self, endpoint: DcEndpoint) -> DestinationId {
        self.core.add_destination(Target::Endpoint {
            endpoint,
            resolved: false,
        })
    }

    /// Adds the DC target `dct_number` with access key `dc_key` as a destination, at `address`
    /// made elsewhere (e.g. with [`PoolInitiator::address`] from an address handle of one's own):
    /// for a pool without a protection domain, whose destinations the pool cannot resolve
    /// itself.
    pub fn add_destination_with_address(&mut self, address: I::Address, dct_number: u32, dc_key: u64) -> DestinationId {
        let destination = self.core.add_destination(Target::Addressed { dct_number, dc_key });
        self.keep_address(destination, address);
        destination
    }

    /// Keeps `address` as `destination`'s.
    fn keep_address(&mut self, destination: DestinationId, address: I::Address) {
        let index = destination.index();
        if self.addresses.len() <= index {
            self.addresses.resize_with(index + 1, || None);
        }
        self.addresses[index] = Some(address);
    }

    /// Drops the addresses of the destinations the bookkeeping removed (mostly none: tested
    /// here, the rest out of line).
    #[inline]
    fn drop_removed_addresses(&mut self) {
        if self.core.removed_any() {
            self.drop_addresses_of_removed();
        }
    }

    #[cold]
    #[inline(never)]
    fn drop_addresses_of_removed(&mut self) {
        for d in self.core.take_removed() {
            if let Some(address) = self.addresses.get_mut(d as usize) {
                *address = None;
            }
        }
    }

    /// Removes `destination`: its address handle and records are freed, and its id becomes stale
    /// (every method refuses it, or answers as for an unknown destination, also once its place
    /// serves another destination). Refused while requests of it are not reported yet
    /// ([`RemoveDestinationErrorKind::Outstanding`]): poll until [`outstanding`](Self::outstanding)
    /// is 0, or [`retire`](Self::retire_destination) it instead. A grant it holds and has not
    /// used goes to the next destination in line.
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

    /// Removes `destination` once every request of it was reported, with a
    /// [`DcPoolEvent::Removed`] from [`poll`](Self::poll) (or [`complete`](Self::complete), or
    /// [`progress`](Self::progress) when nothing was outstanding): no caller has to wait for
    /// [`outstanding`](Self::outstanding) to reach 0. From now on it posts nothing
    /// ([`Retiring`](PostToDestinationErrorKind::Retiring)) and leaves the line; its requests
    /// in flight are reported as usual.
    pub fn retire_destination(&mut self, destination: DestinationId) -> Result<(), RemoveDestinationError> {
        self.core
            .retire(destination)
            .map_err(|_| RemoveDestinationErrorKind::UnknownDestination)?;
        self.drop_removed_addresses();
        Ok(())
    }

    /// How many destinations it has now.
    pub fn destination_count(&self) -> usize {
        self.core.destination_count()
    }

    /// What the pool holds: destination places, address handles, the wait line, grant timers,
    /// records of requests in flight. Each stays bounded by what is live (destinations, requests
    /// in flight), however many destinations came and went.
    pub fn footprint(&self) -> DcPoolFootprint {
        self.core.footprint()
    }

    /// The endpoint of `destination`.
    pub fn endpoint(&self, destination: DestinationId) -> Option<&DcEndpoint> {
        self.core.endpoint(destination)
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

    /// Why `destination` can or cannot post now ("why is this destination blocked?"): what its
    /// next [`start_post_send`](Self::start_post_send) would meet, read from the pool's records
    /// without posting, with what to do about it ([`DestinationState`]).
    pub fn destination_state(&self, destination: DestinationId) -> DestinationState {
        self.core.state(destination)
    }

    /// Lets a destination reported unreachable post again (e.g. its peer is back).
    pub fn revive(&mut self, destination: DestinationId) {
        self.core.revive(destination);
    }

    /// Creates `destination`'s address handle now rather than on its first post (which then
    /// costs no `ibv_create_ah`), and reports an error in it here.
    ///
    /// On RoCE `ibv_create_ah` resolves the peer's MAC address in the kernel: it blocks until
    /// the peer answers ARP or neighbour discovery, or the kernel gives up. Resolving ahead, here,
    /// is how to keep that off the posting path. A peer that does not answer, or that no route
    /// reaches through the source GID's network device, is the address handle's
    /// [`PeerMacUnresolved`](sideway_ext::ibverbs::address_handle::CreateAddressHandleErrorKind::PeerMacUnresolved)
    /// (in [`PostToDestinationErrorKind::AddressHandle`]); the destination stays unresolved, and
    /// the next `prepare` or post to it tries again.
    pub fn prepare(&mut self, destination: DestinationId) -> Result<(), PostToDestinationError> {
        if !self.core.contains(destination) {
            return Err(PostToDestinationErrorKind::UnknownDestination.into());
        }
        if !self.core.is_resolved(destination) {
            self.resolve(destination)?;
        }
        Ok(())
    }

    /// Polls the send CQ once (up to 32 completions) and reports, through `sink`, every request
    /// they settle ([`DcPoolEvent`]), every destination in line that now holds an initiator
    /// ([`DcPoolEvent::Ready`]), and recovers errored streams and initiators once the device
    /// flushed them. A completion of a queue pair that is not the pool's is handed over as
    /// [`DcPoolEvent::OtherCompletion`], never dropped. Returns how many completions were polled.
    ///
    /// `sink` runs inside `poll`, which holds the pool mutably: it cannot post (the borrow
    /// checker refuses a second mutable borrow, E0499). Collect there what to post, the
    /// destinations of `Ready` and the requests of `Retry`, and post once `poll` returns. Here
    /// one initiator for two destinations: the second waits for it, and posts after the `poll`
    /// that reports it `Ready`.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    ///
    /// use sideway::ibverbs::protection_domain::ProtectionDomain;
    /// use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
    /// use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
    /// use sideway_ext_dc_pool::builder::DcPoolProtectionDomainExt;
    /// use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy, DestinationId};
    /// use sideway_ext_dc_pool::DcInitiatorPool;
    ///
    /// /// Writes "hello" at `(rkey, address)` of `destination`; `false` when it is to wait for
    /// /// its `Ready`.
    /// fn write(
    ///     pool: &mut DcInitiatorPool, destination: DestinationId, (rkey, address): (u32, u64),
    /// ) -> Result<bool, Box<dyn std::error::Error>> {
    ///     let mut guard = match pool.start_post_send(destination) {
    ///         Ok(guard) => guard,
    ///         Err(err) if err.is_would_block() => return Ok(false),
    ///         Err(err) => return Err(err.into()),
    ///     };
    ///     guard
    ///         .construct_wr(0, WorkRequestFlags::none())?
    ///         .setup_write(rkey, address)
    ///         .setup_inline_data(b"hello");
    ///     guard.post()?;
    ///     Ok(true)
    /// }
    ///
    /// /// Writes to two peers (their endpoint, rkey and address) through one initiator.
    /// fn hello_twice(
    ///     pd: &Arc<ProtectionDomain>, peers: [(DcEndpoint, (u32, u64)); 2],
    /// ) -> Result<(), Box<dyn std::error::Error>> {
    ///     let mut pool = pd
    ///         .create_dci_pool_builder()
    ///         .setup_initiators(1)
    ///         .setup_policy(DcPoolPolicy::Dedicated)
    ///         .build()?;
    ///     let ids: Vec<_> = peers
    ///         .iter()
    ///         .map(|(endpoint, _)| pool.add_destination(*endpoint))
    ///         .collect();
    ///     assert!(write(&mut pool, ids[0], peers[0].1)?);
    ///     assert!(!write(&mut pool, ids[1], peers[1].1)?, "the one initiator is the first's");
    ///     let mut completed = 0;
    ///     while completed < 2 {
    ///         let mut ready = Vec::new();
    ///         pool.poll(|event| match event {
    ///             DcPoolEvent::Completed { .. } => completed += 1,
    ///             // Not `write(&mut pool, …)` here: `poll` holds the pool.
    ///             DcPoolEvent::Ready { destination } => ready.push(destination),
    ///             other => panic!("{other:?}"),
    ///         })?;
    ///         for destination in ready {
    ///             let peer = ids.iter().position(|&id| id == destination).expect("a peer");
    ///             assert!(write(&mut pool, destination, peers[peer].1)?);
    ///         }
    ///     }
    ///     Ok(())
    /// }
    /// ```
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
                if !settle(core, initiators, wr_ids, completion, &mut sink) {
                    if let Some(wc) = whole {
                        sink(DcPoolEvent::OtherCompletion(*wc));
                    }
                }
            }),
            None => Ok(0),
        };
        self.drop_removed_addresses();
        polled
    }

    /// Settles one completion polled elsewhere: for a caller that polls a CQ it shares with
    /// other queue pairs (created with it and given to
    /// [`setup_send_cq`](builder::DcInitiatorPoolBuilder::setup_send_cq)). Reports what it settles
    /// through `sink`, as [`poll`](Self::poll) does (its status and vendor syndrome included);
    /// returns whether the completion was the pool's (its queue pair number is one of the
    /// pool's initiators' and its `wr_id` names a request in flight). A completion that is not
    /// the pool's is left to the caller. Such a caller calls [`progress`](Self::progress) once
    /// per round of its own polling instead of [`poll`](Self::poll).
    ///
    /// It takes sideway-ext's [`WorkCompletion`](sideway_ext::ibverbs::work_completion::WorkCompletion) (`&wc`), or a [`PoolCompletion`] made from a
    /// completion polled by other means (a completion queue of one's own).
    pub fn complete(&mut self, completion: impl Into<PoolCompletion>, mut sink: impl FnMut(DcPoolEvent)) -> bool {
        let settled = settle(
            &mut self.core,
            &mut self.initiators,
            &self.wr_ids,
            completion.into(),
            &mut sink,
        );
        self.drop_removed_addresses();
        settled
    }

    /// What [`poll`](Self::poll) does besides polling, for a caller that polls the CQ itself:
    /// moves the grant timeout's clock on (a grant from the line that was not used in time goes
    /// to the next destination in line), reports [`DcPoolEvent::Stalled`] and [`DcPoolEvent::Ready`].
    pub fn progress(&mut self, mut sink: impl FnMut(DcPoolEvent)) {
        self.core.tick(&mut sink);
        self.drop_removed_addresses();
    }
}

/// Settles `completion` if it is one of the pool's: its queue pair number is the initiator's
/// its `wr_id` names (as of now: a recovery may have rebuilt it with a new number).
fn settle<I: PoolInitiator>(
    core: &mut PoolCore, initiators: &mut [I], wr_ids: &WrIds, completion: PoolCompletion,
    sink: &mut impl FnMut(DcPoolEvent),
) -> bool {
    let wr_id = completion.wr_id();
    let initiator = initiators.get(initiator_of(wr_id));
    if initiator.map(PoolInitiator::qp_number) != Some(completion.qp_number()) {
        return false;
    }
    core.complete(
        initiators,
        wr_ids,
        wr_id,
        completion.status(),
        completion.vendor_err(),
        sink,
    )
}

impl DcInitiatorPool<DcInitiator> {
    /// Reads initiator `index`'s state from the device (`ibv_query_qp`), e.g. to see that the
    /// pool brought it back to RTS after an error; `None` for an index out of range.
    pub fn query_initiator_state(
        &mut self, index: usize,
    ) -> Option<Result<QueuePairState, sideway::ibverbs::queue_pair::QueryQueuePairError>> {
        self.initiators.get_mut(index).map(DcInitiator::query_state)
    }
}
