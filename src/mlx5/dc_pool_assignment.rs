//! The bookkeeping of a [`DcInitiatorPool`](super::dc_initiator_pool::DcInitiatorPool), apart
//! from any device: which DC initiator (and stream) a destination posts on, which requests each
//! initiator holds, what a completion settles, and what an error completion fails, hands back for
//! a retry, or recovers.
//!
//! It is written against [`PooledInitiator`], a small trait over "a DCI" (is it in ERR, recover
//! it, reset a stream), so that the pool's unit tests drive it with simulated initiators: a
//! deterministic scheduler with seeded latencies and injected error completions
//! (`dc_pool_simulation`), and property tests of any interleaving of posts, completions and
//! errors.
//!
//! # Request numbers
//!
//! Each initiator numbers its requests in posting order. The `wr_id` the provider sees is
//! `initiator << 48 | number` (the number taken modulo 2⁴⁸); the caller's own `wr_id` is kept in a
//! ring, at the request's number. A batch's requests take consecutive places in the ring (a batch
//! never wraps around its end), so a request costs the guard one store and one addition. A completion thus names its request exactly, also with DCI
//! streams (whose completions can come out of posting order between streams), and completions
//! left from before a recovery (flushed requests already accounted for) match no live request and
//! are ignored.
use std::collections::VecDeque;
use std::error::Error;

use rdma_mummy_sys::ibv_wc_status;

/// How a [`DcInitiatorPool`](super::dc_initiator_pool::DcInitiatorPool) assigns its DC initiators
/// to destinations (UCX's `dc_mlx5` policies `dcs`, `dcs_quota`, hashing, `hw_dcs`).
///
/// Every policy keeps the order of a destination's requests: its requests that complete
/// successfully complete in the order they were posted, and a request handed back for a retry
/// ([`DcPoolEvent::Retry`]) is followed by no successful request of the same destination that was
/// posted after it (re-post the retries before anything newer). Between destinations, no policy
/// orders anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DcPoolPolicy {
    /// A destination holds a DC initiator of its own while it has requests outstanding and gives
    /// it back when they all completed. Order per destination: kept (one initiator at a time, and
    /// a new one only once the last completed). A slow or failing destination delays and fails
    /// only its own requests. When every initiator is held, [`DcPoolWouldBlock::NoInitiator`];
    /// initiators are then handed out in the order destinations asked
    /// ([`waiting`](super::dc_initiator_pool::DcInitiatorPool::waiting)).
    Dedicated,
    /// As [`Dedicated`](Self::Dedicated), but once a destination posted `quota` requests on the
    /// initiator it holds and other destinations are waiting, it posts no more
    /// ([`DcPoolWouldBlock::QuotaExhausted`]) until it gave the initiator back and its turn comes
    /// again. Bounds how long any destination waits (no starvation).
    DedicatedWithQuota {
        /// Requests a destination may post per holding while others wait (at least 1).
        quota: u32,
    },
    /// Each destination is bound to one initiator by a hash of its number, shared by many
    /// destinations, and never waits for one. Order per destination: kept (one initiator). A
    /// slow destination delays, and an error completion hands back for a retry, the requests of
    /// the other destinations on its initiator.
    Static,
    /// Hardware DCI streams (ConnectX-6 Dx and newer): each destination is bound by a hash to an
    /// initiator and one of its streams. Order per destination: kept (one stream; streams of one
    /// initiator run concurrently). An error completion errors its stream only, which is reset
    /// with `mlx5dv_dci_stream_id_reset`, unless the whole initiator went to ERR.
    Streams,
}

/// The number of a destination in a pool, from
/// [`add_destination`](super::dc_initiator_pool::DcInitiatorPool::add_destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DestinationId(pub(crate) u32);

impl DestinationId {
    /// The number, from 0 in the order destinations were added.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Why a post to a destination cannot go ahead now; nothing was posted, and posting again after
/// [`poll`](super::dc_initiator_pool::DcInitiatorPool::poll) freed resources may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DcPoolWouldBlock {
    /// Every DC initiator is held by another destination (dedicated policies), or destinations
    /// that asked earlier are first in line; the destination is now in line.
    #[error("no DC initiator is free for this destination now")]
    NoInitiator,
    /// The destination posted its quota on the initiator it holds while others wait.
    #[error("the destination used its quota while other destinations wait")]
    QuotaExhausted,
    /// The initiator's send queue holds as many requests as it can until some complete.
    #[error("the DC initiator's send queue is full")]
    QueueFull,
    /// The batch holds as many requests as it may
    /// ([`room`](super::dc_initiator_pool::DcPoolPostGuard::room)): post it, and start another
    /// (which may say [`QueueFull`](Self::QueueFull)). A batch ends early where the pool's ring of
    /// `wr_id`s wraps around, and at the quota.
    #[error("the batch is full: post it and start another")]
    BatchFull,
}

/// What happened to a request posted through a pool, or to a destination, as reported by
/// [`poll`](super::dc_initiator_pool::DcInitiatorPool::poll). Every request posted is reported
/// exactly once: completed, failed or handed back for a retry (signalled or not: a request not
/// signalled is reported when a later completion of its initiator, or stream, covers it).
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
    /// The request failed. `status` is the `ibv_wc_status` of its error completion, or
    /// `IBV_WC_WR_FLUSH_ERR` for a request of the same destination flushed behind it (or of a
    /// destination reported unreachable).
    Failed {
        /// Its destination.
        destination: DestinationId,
        /// The `wr_id` it was posted with.
        wr_id: u64,
        /// The `ibv_wc_status` (e.g. `IBV_WC_RETRY_EXC_ERR` = 12 for a target that does not
        /// answer, `IBV_WC_REM_ACCESS_ERR` = 10 for a wrong DC key).
        status: u32,
        /// The error completion's vendor syndrome (`vendor_err`, what the mlx5 documentation
        /// and UCX's logs name errors by); 0 for a request flushed behind it.
        vendor_err: u32,
    },
    /// The request was flushed by another destination's error (or by an initiator error no
    /// request caused) and did not execute: post it again, before the destination's newer
    /// requests.
    Retry {
        /// Its destination.
        destination: DestinationId,
        /// The `wr_id` it was posted with.
        wr_id: u64,
    },
    /// The destination's requests kept failing with errors that say its target is not there
    /// (transport or RNR retry counter exceeded, remote invalid request), as many times in a row
    /// as the pool was set up with: it is reported once, its requests now fail at post
    /// ([`Unreachable`](super::dc_initiator_pool::PostToDestinationErrorKind::Unreachable)) until
    /// [`revive`](super::dc_initiator_pool::DcInitiatorPool::revive).
    Unreachable {
        /// The destination.
        destination: DestinationId,
    },
    /// An initiator that an error put in ERR (or a stream of it) could not be recovered; it is
    /// out of service, and the destinations bound to it (static and streams policies) are
    /// refused at post.
    InitiatorLost {
        /// Its index in the pool.
        initiator: usize,
        /// The recovery's error, as text.
        error: String,
    },
}

/// "A DCI", as the pool's bookkeeping needs it: the DC initiator, or a simulated one.
#[doc(hidden)]
pub trait PooledInitiator {
    /// How many requests its send queue holds.
    fn max_send_wr(&self) -> u32;
    /// How many DCI streams it has (0 without).
    fn stream_count(&self) -> u32;
    /// After an error completion: whether the whole initiator is in ERR (else only a stream
    /// errored). Without streams an error always puts it in ERR, and this is not asked.
    fn is_in_error(&mut self) -> bool;
    /// Brings it back from ERR to RTS.
    fn recover(&mut self) -> Result<(), Box<dyn Error + Send + Sync>>;
    /// Resets one errored stream.
    fn reset_stream(&mut self, stream: u16) -> Result<(), Box<dyn Error + Send + Sync>>;
}

/// What a destination was granted for one batch: an initiator (and stream), the number of the
/// batch's first request, and how many requests the batch may hold.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    pub initiator: usize,
    /// The destination's stream; 0 when the initiator has none (a destination's stream is 0
    /// then).
    pub stream: u16,
    pub destination: DestinationId,
    pub first: u64,
    pub room: usize,
}

/// Bits of the provider-visible `wr_id` that number an initiator's requests; the initiator takes
/// the 16 above them.
pub(crate) const NUMBER_BITS: u32 = 48;
const NUMBER_MASK: u64 = (1 << NUMBER_BITS) - 1;
/// The largest pool.
pub(crate) const MAX_INITIATORS: usize = 1 << (64 - NUMBER_BITS);

/// The provider-visible `wr_id` of request `number` of initiator `initiator`.
#[doc(hidden)]
#[inline(always)]
pub fn encode(initiator: usize, number: u64) -> u64 {
    ((initiator as u64) << NUMBER_BITS) | (number & NUMBER_MASK)
}

/// The initiator a provider-visible `wr_id` names.
#[inline(always)]
pub(crate) fn initiator_of(wr_id: u64) -> usize {
    (wr_id >> NUMBER_BITS) as usize
}

/// Whether an error status says the target is not there: no answer (transport retry counter
/// exceeded), no receive ever (RNR retry counter exceeded), or no such DC target (remote invalid
/// request).
fn is_no_such_target(status: u32) -> bool {
    matches!(
        status,
        ibv_wc_status::IBV_WC_RETRY_EXC_ERR
            | ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR
            | ibv_wc_status::IBV_WC_REM_INV_REQ_ERR
    )
}

/// A run of requests of one destination, posted on one initiator in one or more consecutive
/// batches.
#[derive(Debug, Clone, Copy)]
struct BatchRecord {
    destination: u32,
    /// The stream, or 0 without streams.
    stream: u16,
    first: u64,
    end: u64,
    /// The first request not yet reported.
    settled: u64,
}

/// One initiator's requests.
#[derive(Debug)]
struct InitiatorRequests {
    /// The callers' `wr_id`s, at `number & mask`.
    wr_ids: Box<[u64]>,
    mask: u64,
    /// Requests it may hold at once (its send queue).
    capacity: u64,
    /// The number of the next request.
    head: u64,
    /// The oldest request not yet reported (`head` when none is): the ring holds the callers'
    /// `wr_id`s from here to `head`. Kept by [`pop_settled`](Self::pop_settled), so that
    /// [`room`](Self::room) does not reach into `batches` on every batch.
    oldest: u64,
    /// Requests posted and not yet reported.
    outstanding: u64,
    /// Batches with requests not reported, in posting order.
    batches: VecDeque<BatchRecord>,
    /// The destination holding it (dedicated policies).
    holder: Option<u32>,
    streams: u32,
    out_of_service: bool,
}

impl InitiatorRequests {
    fn new(capacity: u32, streams: u32) -> Self {
        // Twice the send queue, and with streams one send queue per stream: a request that
        // completed out of order (another stream) frees its send-queue slot at once, but its
        // place in the ring only once every request before it completed. (At most 2⁴⁸, which
        // it then divides.)
        let size = (u64::from(capacity.max(1)) * u64::from(streams.max(2)))
            .next_power_of_two()
            .min(NUMBER_MASK + 1);
        Self {
            wr_ids: vec![0; size as usize].into_boxed_slice(),
            mask: size - 1,
            capacity: u64::from(capacity.max(1)),
            head: 0,
            oldest: 0,
            outstanding: 0,
            batches: VecDeque::new(),
            holder: None,
            streams,
            out_of_service: false,
        }
    }

    /// How many more requests it can take now: free send-queue slots, and places in the ring up
    /// to its end (a batch does not wrap). The ring's size is a power of two that divides 2⁴⁸,
    /// so a batch that stops at the ring's end never crosses the numbers' wrap either.
    #[inline]
    fn room(&self) -> usize {
        let ring = (self.mask + 1) - (self.head - self.oldest);
        let to_ring_end = (self.mask + 1) - (self.head & self.mask);
        (self.capacity - self.outstanding).min(ring).min(to_ring_end) as usize
    }

    /// The full number of a request from the 48 bits the provider gives back.
    fn unwrap_number(&self, low: u64) -> u64 {
        let distance = self.head.wrapping_sub(low) & NUMBER_MASK;
        self.head.wrapping_sub(distance)
    }

    /// The index of the live batch holding request `number`, unless it was already reported.
    #[inline]
    fn find(&self, number: u64) -> Option<usize> {
        // Completions mostly settle the oldest batch.
        let index = match self.batches.front() {
            Some(front) if number < front.end => 0,
            _ => self.batches.partition_point(|b| b.end <= number),
        };
        let batch = self.batches.get(index)?;
        (batch.first <= number && number >= batch.settled).then_some(index)
    }

    /// Drops the fully reported batches at the front, and moves `oldest` up. Every change of a
    /// batch's `settled` is followed by it.
    fn pop_settled(&mut self) {
        while self.batches.front().is_some_and(|b| b.settled == b.end) {
            self.batches.pop_front();
        }
        self.oldest = self.batches.front().map_or(self.head, |b| b.settled);
    }
}

/// Records a new batch (out of line: the common case extends the last one).
#[inline(never)]
fn push_batch(batches: &mut VecDeque<BatchRecord>, destination: u32, stream: u16, first: u64, posted: u64) {
    batches.push_back(BatchRecord {
        destination,
        stream,
        first,
        end: first + posted,
        settled: first,
    });
}

/// A destination's state.
#[derive(Debug, Clone, Default)]
struct DestinationState {
    /// The initiator it posts on: held (dedicated) or bound (static, streams).
    initiator: Option<u16>,
    stream: u16,
    outstanding: u64,
    /// Requests posted on the initiator it holds now (quota).
    posted_on_hold: u64,
    /// Consecutive errors that say the target is not there.
    retries_exceeded: u32,
    unreachable: bool,
    /// Its place in line for an initiator (dedicated policies).
    ticket: Option<u64>,
}

/// Why a post to a destination is refused, as the bookkeeping sees it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    WouldBlock(DcPoolWouldBlock),
    Unreachable,
    InitiatorLost(usize),
    UnknownDestination,
}

/// The bookkeeping of a pool of initiators `I`.
#[doc(hidden)]
#[derive(Debug)]
pub struct PoolCore<I> {
    pub(crate) initiators: Vec<I>,
    requests: Vec<InitiatorRequests>,
    destinations: Vec<DestinationState>,
    policy: DcPoolPolicy,
    /// Initiators held by no destination (dedicated policies).
    free: Vec<u16>,
    /// Destinations in line for an initiator, with their tickets (entries whose ticket no longer
    /// matches the destination's are left-overs, skipped).
    waiting: VecDeque<(u32, u64)>,
    waiting_count: usize,
    next_ticket: u64,
    unreachable_after: u32,
}

impl<I: PooledInitiator> PoolCore<I> {
    /// The bookkeeping of `initiators` under `policy`; a destination is reported unreachable after
    /// `unreachable_after` consecutive "retry exceeded" errors.
    pub fn new(initiators: Vec<I>, policy: DcPoolPolicy, unreachable_after: u32) -> Self {
        let requests = initiators
            .iter()
            .map(|i| InitiatorRequests::new(i.max_send_wr(), i.stream_count()))
            .collect();
        let free = (0..initiators.len() as u16).rev().collect();
        Self {
            initiators,
            requests,
            destinations: Vec::new(),
            policy,
            free,
            waiting: VecDeque::new(),
            waiting_count: 0,
            next_ticket: 0,
            unreachable_after: unreachable_after.max(1),
        }
    }

    pub fn policy(&self) -> DcPoolPolicy {
        self.policy
    }

    /// Adds a destination; the static and streams policies bind it to its initiator now.
    pub fn add_destination(&mut self) -> DestinationId {
        let id = self.destinations.len() as u32;
        let mut state = DestinationState::default();
        if matches!(self.policy, DcPoolPolicy::Static | DcPoolPolicy::Streams) && !self.initiators.is_empty() {
            // Fibonacci hashing of the number spreads neighbours over the initiators.
            let hash = u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
            let count = self.initiators.len() as u64;
            let initiator = hash % count;
            state.initiator = Some(initiator as u16);
            let streams = u64::from(self.requests[initiator as usize].streams.max(1));
            state.stream = ((hash / count) % streams) as u16;
        }
        self.destinations.push(state);
        DestinationId(id)
    }

    /// The initiator (and stream) `destination` posts on now, if any.
    pub fn assignment(&self, destination: DestinationId) -> Option<(usize, Option<u16>)> {
        let state = self.destinations.get(destination.index())?;
        let initiator = state.initiator? as usize;
        Some((
            initiator,
            (self.requests[initiator].streams > 0).then_some(state.stream),
        ))
    }

    /// Requests of `destination` posted and not yet reported.
    pub fn outstanding(&self, destination: DestinationId) -> u64 {
        self.destinations.get(destination.index()).map_or(0, |d| d.outstanding)
    }

    /// Destinations in line for an initiator, first first.
    pub fn waiting(&self) -> impl Iterator<Item = DestinationId> + '_ {
        self.waiting
            .iter()
            .filter(|(d, ticket)| self.destinations[*d as usize].ticket == Some(*ticket))
            .map(|(d, _)| DestinationId(*d))
    }

    /// Whether `destination` was reported unreachable.
    pub fn is_unreachable(&self, destination: DestinationId) -> bool {
        self.destinations
            .get(destination.index())
            .is_some_and(|d| d.unreachable)
    }

    /// Lets an unreachable destination post again.
    pub fn revive(&mut self, destination: DestinationId) {
        if let Some(state) = self.destinations.get_mut(destination.index()) {
            state.unreachable = false;
            state.retries_exceeded = 0;
        }
    }

    /// Takes `destination` out of line for an initiator.
    pub fn cancel_wait(&mut self, destination: DestinationId) {
        if let Some(state) = self.destinations.get_mut(destination.index()) {
            if state.ticket.take().is_some() {
                self.waiting_count -= 1;
            }
        }
    }

    fn enqueue(&mut self, destination: u32) {
        let state = &mut self.destinations[destination as usize];
        if state.ticket.is_none() {
            state.ticket = Some(self.next_ticket);
            self.waiting.push_back((destination, self.next_ticket));
            self.next_ticket += 1;
            self.waiting_count += 1;
        }
    }

    /// The first destination in line, after dropping left-overs.
    fn first_waiting(&mut self) -> Option<u32> {
        while let Some(&(d, ticket)) = self.waiting.front() {
            if self.destinations[d as usize].ticket == Some(ticket) {
                return Some(d);
            }
            self.waiting.pop_front();
        }
        None
    }

    /// Grants `destination` an initiator for one batch, or says why not.
    #[inline(always)]
    pub fn begin(&mut self, destination: DestinationId) -> Result<Grant, Refusal> {
        // The common case: it posts on the initiator it holds or is bound to, with no quota to
        // mind.
        if let Some(state) = self.destinations.get(destination.index()) {
            let quota_applies =
                matches!(self.policy, DcPoolPolicy::DedicatedWithQuota { .. }) && self.waiting_count > 0;
            if let (Some(i), false, false) = (state.initiator, state.unreachable, quota_applies) {
                let requests = &self.requests[i as usize];
                let room = requests.room();
                if room > 0 && !requests.out_of_service {
                    return Ok(Grant {
                        initiator: i as usize,
                        stream: state.stream,
                        destination,
                        first: requests.head,
                        room,
                    });
                }
            }
        }
        self.begin_slow(destination)
    }

    #[inline(never)]
    fn begin_slow(&mut self, destination: DestinationId) -> Result<Grant, Refusal> {
        let d = destination.0;
        let state = self.destinations.get(d as usize).ok_or(Refusal::UnknownDestination)?;
        if state.unreachable {
            return Err(Refusal::Unreachable);
        }
        // What is left of the quota while others wait.
        let mut quota_left = u64::MAX;
        let initiator = match (self.policy, state.initiator) {
            (DcPoolPolicy::Static | DcPoolPolicy::Streams, Some(i)) => i as usize,
            (DcPoolPolicy::DedicatedWithQuota { quota }, Some(i)) => {
                // It is not in line while it holds an initiator: once it gave it back, its next
                // post goes to the end of the line if others wait.
                if self.waiting_count > 0 {
                    quota_left = u64::from(quota.max(1)).saturating_sub(state.posted_on_hold);
                    if quota_left == 0 {
                        return Err(Refusal::WouldBlock(DcPoolWouldBlock::QuotaExhausted));
                    }
                }
                i as usize
            },
            (_, Some(i)) => i as usize,
            (_, None) => {
                let first = self.first_waiting();
                if first.is_some_and(|f| f != d) || self.free.is_empty() {
                    self.enqueue(d);
                    return Err(Refusal::WouldBlock(DcPoolWouldBlock::NoInitiator));
                }
                if first == Some(d) {
                    self.waiting.pop_front();
                    self.waiting_count -= 1;
                }
                let Some(i) = self.free.pop() else {
                    return Err(Refusal::WouldBlock(DcPoolWouldBlock::NoInitiator));
                };
                let state = &mut self.destinations[d as usize];
                state.ticket = None;
                state.initiator = Some(i);
                state.posted_on_hold = 0;
                self.requests[i as usize].holder = Some(d);
                i as usize
            },
        };
        let requests = &self.requests[initiator];
        if requests.out_of_service {
            return Err(Refusal::InitiatorLost(initiator));
        }
        let room = requests.room();
        if room == 0 {
            return Err(Refusal::WouldBlock(DcPoolWouldBlock::QueueFull));
        }
        let room = room.min(usize::try_from(quota_left).unwrap_or(usize::MAX));
        let stream = self.destinations[d as usize].stream;
        Ok(Grant {
            initiator,
            stream,
            destination,
            first: requests.head,
            room,
        })
    }

    /// Whether `initiator` has DCI streams.
    pub fn has_streams(&self, initiator: usize) -> bool {
        self.requests[initiator].streams > 0
    }

    /// The ring of callers' `wr_id`s of `initiator` and its mask, for a guard that writes them.
    pub fn wr_id_ring(&mut self, initiator: usize) -> (*mut u64, u64) {
        let requests = &mut self.requests[initiator];
        (requests.wr_ids.as_mut_ptr(), requests.mask)
    }

    /// Ends a granted batch: `posted` requests went to the provider (0 when it was dropped or
    /// refused), their `wr_id`s in the ring from `grant.first` on.
    #[inline(always)]
    pub fn commit(&mut self, grant: Grant, posted: usize) {
        let requests = &mut self.requests[grant.initiator];
        let d = grant.destination.0;
        if posted > 0 {
            let posted = posted as u64;
            let stream = grant.stream;
            match requests.batches.back_mut() {
                // The same destination and stream right after its last batch: one record.
                Some(last) if last.end == grant.first && last.destination == d && last.stream == stream => {
                    last.end += posted;
                },
                _ => push_batch(&mut requests.batches, d, stream, grant.first, posted),
            }
            requests.head += posted;
            requests.outstanding += posted;
            let state = &mut self.destinations[d as usize];
            state.outstanding += posted;
            state.posted_on_hold += posted;
        } else {
            // A dedicated destination that posted nothing gives back what it was granted.
            self.release_if_idle_cold(d);
        }
    }

    /// [`release_if_idle`](Self::release_if_idle), out of line.
    #[inline(never)]
    fn release_if_idle_cold(&mut self, d: u32) {
        self.release_if_idle(d);
    }

    /// Gives a dedicated destination's initiator back once nothing of it is outstanding.
    fn release_if_idle(&mut self, d: u32) {
        if !matches!(
            self.policy,
            DcPoolPolicy::Dedicated | DcPoolPolicy::DedicatedWithQuota { .. }
        ) {
            return;
        }
        let state = &mut self.destinations[d as usize];
        if state.outstanding == 0 {
            if let Some(i) = state.initiator.take() {
                self.requests[i as usize].holder = None;
                self.free.push(i);
            }
        }
    }

    /// Settles a completion of the provider-visible `wr_id` with `status` (an `ibv_wc_status`),
    /// reporting every request it settles to `sink`. A completion that names no live request
    /// (left from before a recovery) is ignored; returns whether it named one.
    pub fn complete(&mut self, wr_id: u64, status: u32, sink: &mut impl FnMut(DcPoolEvent)) -> bool {
        self.complete_with_syndrome(wr_id, status, 0, sink)
    }

    /// As [`complete`](Self::complete), with the completion's vendor syndrome, which the failing
    /// request's [`DcPoolEvent::Failed`] carries.
    pub fn complete_with_syndrome(
        &mut self, wr_id: u64, status: u32, vendor_err: u32, sink: &mut impl FnMut(DcPoolEvent),
    ) -> bool {
        let initiator = initiator_of(wr_id);
        let Some(requests) = self.requests.get(initiator) else {
            return false;
        };
        let number = requests.unwrap_number(wr_id & NUMBER_MASK);
        let Some(index) = requests.find(number) else {
            return false;
        };
        let batch = requests.batches[index];
        if status == ibv_wc_status::IBV_WC_SUCCESS {
            self.settle_up_to(initiator, Some(batch.stream), number + 1, sink);
        } else {
            self.fail(initiator, number, batch, (status, vendor_err), sink);
        }
        true
    }

    /// Reports as completed the requests of `initiator` before `end` (of `stream`, or all).
    fn settle_up_to(&mut self, initiator: usize, stream: Option<u16>, end: u64, sink: &mut impl FnMut(DcPoolEvent)) {
        let requests = &mut self.requests[initiator];
        for batch in requests.batches.iter_mut() {
            if batch.first >= end {
                break;
            }
            if stream.is_some_and(|s| s != batch.stream) {
                continue;
            }
            let stop = batch.end.min(end);
            if batch.settled >= stop {
                continue;
            }
            for number in batch.settled..stop {
                sink(DcPoolEvent::Completed {
                    destination: DestinationId(batch.destination),
                    wr_id: requests.wr_ids[(number & requests.mask) as usize],
                });
            }
            let count = stop - batch.settled;
            batch.settled = stop;
            requests.outstanding -= count;
            let state = &mut self.destinations[batch.destination as usize];
            state.outstanding -= count;
            state.retries_exceeded = 0;
        }
        requests.pop_settled();
        self.release_holder_if_idle(initiator);
    }

    /// Gives a held initiator back once its holder has nothing outstanding (dedicated policies:
    /// a held initiator carries only its holder's requests).
    fn release_holder_if_idle(&mut self, initiator: usize) {
        if let Some(holder) = self.requests[initiator].holder {
            self.release_if_idle(holder);
        }
    }

    /// An error completion of request `number` (in `batch`) of `initiator`.
    fn fail(
        &mut self, initiator: usize, number: u64, batch: BatchRecord, (status, vendor_err): (u32, u32),
        sink: &mut impl FnMut(DcPoolEvent),
    ) {
        let streams = self.requests[initiator].streams > 0;
        // Requests before it completed (completions come in order within a stream).
        self.settle_up_to(initiator, Some(batch.stream), number, sink);
        let flush = status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
        // A flush that no error completion announced: the initiator went to ERR on its own; no
        // destination is at fault.
        let at_fault = (!flush).then_some(batch.destination);
        if let Some(d) = at_fault {
            let state = &mut self.destinations[d as usize];
            if !is_no_such_target(status) {
                state.retries_exceeded = 0;
            } else {
                state.retries_exceeded += 1;
                if state.retries_exceeded >= self.unreachable_after && !state.unreachable {
                    state.unreachable = true;
                    sink(DcPoolEvent::Unreachable {
                        destination: DestinationId(d),
                    });
                }
            }
        }
        let whole = !streams || flush || self.initiators[initiator].is_in_error();
        let scope = (!whole).then_some(batch.stream);
        // A flush is nobody's failure: the flushed request is handed back like the others.
        let failing = if flush {
            (u64::MAX, status, 0)
        } else {
            (number, status, vendor_err)
        };
        self.flush(initiator, scope, at_fault, failing, sink);
        let recovered = if whole {
            self.initiators[initiator].recover()
        } else {
            self.initiators[initiator].reset_stream(batch.stream)
        };
        if let Err(error) = recovered {
            self.lose(initiator, error.to_string(), sink);
        }
    }

    /// Reports every live request of `initiator` (of stream `scope`, or all): the failing one with
    /// its status, those of the destination at fault (or unreachable) as failed, the others as
    /// retries.
    fn flush(
        &mut self, initiator: usize, scope: Option<u16>, at_fault: Option<u32>, failing: (u64, u32, u32),
        sink: &mut impl FnMut(DcPoolEvent),
    ) {
        let requests = &mut self.requests[initiator];
        for batch in requests.batches.iter_mut() {
            if scope.is_some_and(|s| s != batch.stream) || batch.settled == batch.end {
                continue;
            }
            let state = &mut self.destinations[batch.destination as usize];
            let fails = at_fault == Some(batch.destination) || state.unreachable;
            for number in batch.settled..batch.end {
                let destination = DestinationId(batch.destination);
                let wr_id = requests.wr_ids[(number & requests.mask) as usize];
                sink(if number == failing.0 {
                    DcPoolEvent::Failed {
                        destination,
                        wr_id,
                        status: failing.1,
                        vendor_err: failing.2,
                    }
                } else if fails {
                    DcPoolEvent::Failed {
                        destination,
                        wr_id,
                        status: ibv_wc_status::IBV_WC_WR_FLUSH_ERR,
                        vendor_err: 0,
                    }
                } else {
                    DcPoolEvent::Retry { destination, wr_id }
                });
            }
            let count = batch.end - batch.settled;
            batch.settled = batch.end;
            requests.outstanding -= count;
            state.outstanding -= count;
        }
        requests.pop_settled();
        self.release_holder_if_idle(initiator);
    }

    /// Takes an initiator that could not be recovered out of service.
    fn lose(&mut self, initiator: usize, error: String, sink: &mut impl FnMut(DcPoolEvent)) {
        // Whatever it still held is flushed; no destination is at fault.
        self.flush(initiator, None, None, (u64::MAX, 0, 0), sink);
        let requests = &mut self.requests[initiator];
        requests.out_of_service = true;
        self.free.retain(|&i| i as usize != initiator);
        sink(DcPoolEvent::InitiatorLost { initiator, error });
    }

    /// Keeps the caller's `wr_id` of request `number` of `initiator`; for the simulation, which
    /// posts without a guard.
    #[cfg(test)]
    pub(crate) fn set_wr_id(&mut self, initiator: usize, number: u64, wr_id: u64) {
        let requests = &mut self.requests[initiator];
        requests.wr_ids[(number & requests.mask) as usize] = wr_id;
    }

    /// Checks the bookkeeping's invariants; for tests.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let mut per_destination = vec![0u64; self.destinations.len()];
        for (i, requests) in self.requests.iter().enumerate() {
            let mut outstanding = 0;
            let mut previous_end = None;
            for batch in &requests.batches {
                assert!(batch.first <= batch.settled && batch.settled <= batch.end, "{batch:?}");
                assert!(batch.first < batch.end);
                if let Some(end) = previous_end {
                    assert!(batch.first >= end, "batches of initiator {i} overlap");
                }
                previous_end = Some(batch.end);
                outstanding += batch.end - batch.settled;
                per_destination[batch.destination as usize] += batch.end - batch.settled;
                if let Some(holder) = requests.holder {
                    assert_eq!(
                        holder, batch.destination,
                        "a held initiator carries only its holder's requests"
                    );
                }
            }
            assert_eq!(outstanding, requests.outstanding, "initiator {i}");
            assert!(requests.outstanding <= requests.capacity);
            if let Some(front) = requests.batches.front() {
                assert!(requests.head - front.settled <= requests.mask + 1);
            }
            assert_eq!(
                requests.oldest,
                requests.batches.front().map_or(requests.head, |b| b.settled),
                "initiator {i}: the oldest request not reported"
            );
        }
        for (d, state) in self.destinations.iter().enumerate() {
            assert_eq!(state.outstanding, per_destination[d], "destination {d}");
            if let Some(i) = state.initiator {
                // A grant names the stream as is: 0 on an initiator without streams.
                assert!(
                    state.stream < self.requests[i as usize].streams.max(1) as u16,
                    "destination {d}: stream {} on initiator {i}",
                    state.stream
                );
            }
        }
        if matches!(
            self.policy,
            DcPoolPolicy::Dedicated | DcPoolPolicy::DedicatedWithQuota { .. }
        ) {
            let held = self.requests.iter().filter(|r| r.holder.is_some()).count();
            let lost = self
                .requests
                .iter()
                .filter(|r| r.out_of_service && r.holder.is_none())
                .count();
            assert_eq!(
                held + self.free.len() + lost,
                self.requests.len(),
                "every initiator is held or free"
            );
            for (i, requests) in self.requests.iter().enumerate() {
                if let Some(holder) = requests.holder {
                    assert_eq!(self.destinations[holder as usize].initiator, Some(i as u16));
                    assert_eq!(
                        self.destinations[holder as usize].ticket, None,
                        "a holder is not in line"
                    );
                    assert!(
                        self.destinations[holder as usize].outstanding > 0,
                        "a holder with nothing outstanding gave its initiator back"
                    );
                }
            }
            let live = self
                .waiting
                .iter()
                .filter(|(d, t)| self.destinations[*d as usize].ticket == Some(*t))
                .count();
            assert_eq!(live, self.waiting_count);
        }
    }
}
