//! The bookkeeping of a [`DcInitiatorPool`](super::DcInitiatorPool), apart
//! from any device: which DC initiator (and stream) a destination posts on, which requests each
//! initiator holds, what a completion settles, what an error completion fails or hands back for a
//! retry, and when an errored stream or initiator is reset.
//!
//! It is written against [`PooledInitiator`], a small trait over "a DCI" (recover it, reset a
//! stream), so that the pool's unit tests drive it with simulated initiators: a deterministic
//! scheduler with seeded latencies and injected error completions (`simulation`), and
//! property tests of any interleaving of posts, executions, completions and errors.
//!
//! # Request numbers
//!
//! Each initiator numbers its requests in posting order. The `wr_id` the provider sees is
//! `initiator << 48 | number` (the number taken modulo 2⁴⁸); the caller's own `wr_id` is kept in a
//! ring, at the request's number. A batch's requests take consecutive places in the ring (a batch
//! never wraps around its end), so a request costs the guard one store and one addition. A
//! completion thus names its request exactly, also with DCI streams (whose completions can come
//! out of posting order between streams).
//!
//! # Exactly once
//!
//! The pool signals every request (UCX turns completion moderation off for DC too), and in the
//! error state a queue pair completes every outstanding request with `IBV_WC_WR_FLUSH_ERR`,
//! signalled or not: each request gets a completion of its own. The pool reports a request on its
//! completion (or on a later one of the same stream, which completes in order), never by
//! inference: a successful completion is `Completed`, however late after another stream's error;
//! only a flushed request is `Retry` (or `Failed` for the destination at fault). A stream in error
//! is reset, and an initiator in ERR recovered, only once every request it held was reported:
//! resetting earlier would discard completions still in the CQ (`mlx5_cq_clean` at RESET) and
//! the man page asks for the flush first.
use std::collections::VecDeque;

use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_ah, ibv_wc_status};

use super::initiator::{PooledInitiator, StreamResetRefusal};
pub(crate) use super::types::{DcPoolEvent, DcPoolFootprint, DcPoolPolicy, DcPoolWouldBlock, DestinationId};

/// What a destination was granted for one batch: an initiator (and stream), the number of the
/// batch's first request, and how many requests the batch may hold.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    pub address: Address,
    pub initiator: usize,
    /// `destination << 16 | stream`, the key of its batch records ([`Grant::destination`],
    /// [`Grant::stream`]).
    pub key: u64,
    pub first: u64,
    pub room: usize,
}

impl Grant {
    /// No grant: no room (what [`PoolCore::begin_held`] and [`PoolCore::grant_from_free`] return
    /// when they do not grant).
    pub const NONE: Grant = Grant {
        address: (NonNull::dangling(), 0, 0),
        initiator: 0,
        key: 0,
        first: 0,
        room: 0,
    };

    /// The destination's place.
    #[inline(always)]
    pub fn destination(&self) -> u32 {
        (self.key >> 16) as u32
    }

    /// The destination's stream; 0 when the initiator has none (a destination's stream is 0
    /// then).
    #[inline(always)]
    pub fn stream(&self) -> u16 {
        self.key as u16
    }
}

/// The key of destination `d`'s batch records on stream `stream` (a grant's, the last record's).
#[inline(always)]
fn record_key(d: u32, stream: u16) -> u64 {
    (u64::from(d) << 16) | u64::from(stream)
}

/// Bits of the provider-visible `wr_id` that number an initiator's requests; the initiator takes
/// the 16 above them.
pub(crate) const NUMBER_BITS: u32 = 48;
const NUMBER_MASK: u64 = (1 << NUMBER_BITS) - 1;
/// The largest pool.
pub(crate) const MAX_INITIATORS: usize = 1 << (64 - NUMBER_BITS);
/// "No destination" in the wait line's links.
const NONE: u32 = u32::MAX;
/// A destination's gate: `generation << GATE_SHIFT | STREAMS | GRANTABLE | FAST` (at most one of
/// the last two bits). `FAST`: it posts on its initiator with no check but the initiator's room
/// and health (live, an initiator, reachable, its address resolved).
const FAST: u64 = 1;
/// `GRANTABLE`: a dedicated policy's destination that may take a free initiator with no other
/// check (live, no initiator, reachable, its address resolved).
const GRANTABLE: u64 = 2;
/// `STREAMS`: the destination is a streams policy pool's, whose batches are started with
/// `start_post_send_on_stream` (a batch started the other way misses the gate, and is refused
/// on the slow path).
const STREAMS: u64 = 4;
const GATE_SHIFT: u32 = 3;

/// The gate of a destination of generation `generation` with `bits` (`FAST` or `GRANTABLE`, and
/// `STREAMS`).
#[inline(always)]
fn gate(generation: u32, bits: u64) -> u64 {
    (u64::from(generation) << GATE_SHIFT) | bits
}

/// The `STREAMS` bit of a gate, for a pool (or a batch) of the streams policy.
#[inline(always)]
fn streams_bit(streams: bool) -> u64 {
    if streams {
        STREAMS
    } else {
        0
    }
}

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
/// exceeded: what a ConnectX reports for a DC target that was destroyed, as the hardware tests
/// found), no receive ever (RNR retry counter exceeded), or no such DC target (remote invalid
/// request). A remote access or remote operation error is not counted: a wrong DC key or rkey
/// says the target is there.
pub(crate) fn is_no_such_target(status: u32) -> bool {
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
    /// The first request not yet reported; the oldest record's is its initiator's `oldest`,
    /// written here by [`InitiatorRequests::sync`] before records are read.
    settled: u64,
}

/// A stream's error (the only one without streams: the initiator's).
#[derive(Debug, Clone, Copy, Default)]
struct LaneError {
    /// An error completion came; the stream's requests are being flushed.
    errored: bool,
    /// The destination whose request failed: its flushed requests fail too.
    at_fault: Option<u32>,
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
    /// [`room`](Self::room) does not reach into `batches` on every batch. It is the oldest
    /// record's `settled`, which the fast path of a completion moves here alone.
    oldest: u64,
    /// The oldest record's end when it is closed (another record follows it), `u64::MAX` when it
    /// is the open last record (its end is `head`), `head` when there is no record (then
    /// `oldest` too): a completion's fast path reaches no record, and finds the oldest record's
    /// span `min(front_end, head) - oldest` empty ([`refresh_front`](Self::refresh_front)).
    front_end: u64,
    /// The oldest record's destination (valid while there is one).
    front_destination: u32,
    /// The only record is kept in these fields alone, not in `batches` (which is empty then):
    /// its destination `front_destination`, its stream `last_key`'s, its first request
    /// `front_first`, its end `head`, its first not reported `oldest`. A batch on an initiator
    /// with no record pushes nothing, and the record's last report drops nothing; it is put
    /// in `batches` ([`materialize`](Self::materialize)) when another record follows it, or
    /// before records are read ([`sync`](Self::sync)).
    front_virtual: bool,
    /// The virtual only record's first request (valid while `front_virtual`).
    front_first: u64,
    /// Requests reported so far (`head - reported` are outstanding).
    reported: u64,
    /// The request number a batch may not reach: the send queue's free slots, the ring's free
    /// places and the ring's end, recomputed where requests are reported (and by the slow path
    /// when a batch stopped at the ring's end); 0 while it is troubled. A batch's room is
    /// `limit - head`, or 0.
    limit: u64,
    /// `destination << 16 | stream` of the last batch record, which is open: its `end` is
    /// `head` (synchronised before completions are read); `u64::MAX` when there is none.
    last_key: u64,
    /// `head` when the holder was granted it (dedicated policies): what it posted since.
    hold_start: u64,
    /// The pool's clock when it was last granted from the line: a grant timer of an older
    /// grant to the same destination does not revoke this one.
    granted_at: u64,
    /// Batches with requests not reported, in posting order.
    batches: VecDeque<BatchRecord>,
    /// The destination holding it (dedicated policies).
    holder: Option<u32>,
    streams: u32,
    /// Any of: a stream in error, the whole initiator in ERR, out of service. Posting takes the
    /// slow path then.
    troubled: bool,
    /// Per stream (one without streams).
    lanes: Box<[LaneError]>,
    /// The whole initiator is in ERR: recovered once it holds nothing.
    whole_error: bool,
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
            front_end: 0,
            front_destination: 0,
            front_virtual: false,
            front_first: 0,
            reported: 0,
            limit: u64::from(capacity.max(1)).min(size),
            last_key: u64::MAX,
            hold_start: 0,
            granted_at: u64::MAX,
            batches: VecDeque::new(),
            holder: None,
            streams,
            troubled: false,
            lanes: vec![LaneError::default(); streams.max(1) as usize].into_boxed_slice(),
            whole_error: false,
            out_of_service: false,
        }
    }

    /// How many more requests it can take now: free send-queue slots, and places in the ring up
    /// to its end (a batch does not wrap). The ring's size is a power of two that divides 2⁴⁸,
    /// so a batch that stops at the ring's end never crosses the numbers' wrap either.
    #[inline(always)]
    fn room(&self) -> usize {
        // 0 while troubled (its limit is 0; its healthy streams post through the slow path).
        self.limit.saturating_sub(self.head) as usize
    }

    /// Requests posted and not yet reported.
    #[inline(always)]
    fn outstanding(&self) -> u64 {
        self.head - self.reported
    }

    /// Recomputes `limit` after requests were reported (or the capacity changed).
    #[inline(always)]
    fn update_limit(&mut self) {
        self.limit = if self.troubled { 0 } else { self.healthy_limit() };
    }

    /// `limit` of a healthy initiator that holds nothing: `healthy_limit` where `reported` and
    /// `oldest` are `head`, and the capacity is at most the ring's size.
    #[inline(always)]
    fn idle_limit(&mut self) {
        debug_assert!(self.reported == self.head && self.oldest == self.head && self.capacity <= self.mask + 1);
        self.limit = (self.head + self.capacity).min((self.head | self.mask) + 1);
    }

    /// The limit as if it were not troubled (a stream in error leaves the others posting).
    #[inline(always)]
    fn healthy_limit(&self) -> u64 {
        // The ring's end after `head`: a batch does not wrap around it.
        let ring_end = (self.head | self.mask) + 1;
        (self.reported + self.capacity)
            .min(self.oldest + self.mask + 1)
            .min(ring_end)
    }

    /// [`materialize`](Self::materialize), out of line.
    #[cold]
    #[inline(never)]
    fn materialize_cold(&mut self) {
        self.materialize();
    }

    /// Puts the virtual only record (see `front_virtual`) in `batches`.
    #[inline(always)]
    fn materialize(&mut self) {
        if self.front_virtual {
            self.front_virtual = false;
            self.batches.push_back(BatchRecord {
                destination: self.front_destination,
                stream: self.last_key as u16,
                first: self.front_first,
                end: self.head,
                settled: self.oldest,
            });
        }
    }

    /// Puts a virtual only record in `batches`, sets the open last record's `end` to `head`,
    /// and the oldest record's `settled` to `oldest`, before records are read.
    #[inline(always)]
    fn sync(&mut self) {
        self.materialize();
        if let Some(last) = self.batches.back_mut() {
            last.end = self.head;
        }
        if let Some(front) = self.batches.front_mut() {
            front.settled = self.oldest;
        }
    }

    /// The first request of record `index` not yet reported, for readers that cannot sync.
    fn settled_of(&self, index: usize) -> u64 {
        if index == 0 {
            self.oldest
        } else {
            self.batches[index].settled
        }
    }

    /// Recomputes `front_end` and `front_destination` after the oldest record changed.
    #[inline(always)]
    fn refresh_front(&mut self) {
        match self.batches.len() {
            0 => self.front_end = self.head,
            len => {
                let front = self.batches[0];
                self.front_end = if len == 1 { u64::MAX } else { front.end };
                self.front_destination = front.destination;
            },
        }
    }

    /// The end of record `index` (the last one's is `head`), for readers that cannot sync.
    fn end_of(&self, index: usize) -> u64 {
        if index + 1 == self.batches.len() {
            self.head
        } else {
            self.batches[index].end
        }
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
    /// batch's `settled` is followed by it (the records synced before).
    #[inline]
    fn pop_settled(&mut self) {
        while self.batches.front().is_some_and(|b| b.settled == b.end) {
            self.batches.pop_front();
        }
        if self.batches.is_empty() {
            self.last_key = u64::MAX;
        }
        self.oldest = self.batches.front().map_or(self.head, |b| b.settled);
        self.refresh_front();
        self.update_limit();
    }

    /// Whether stream `lane` holds no request not yet reported.
    fn lane_idle(&self, lane: u16) -> bool {
        if self.front_virtual {
            return !(self.last_key as u16 == lane && self.oldest < self.head);
        }
        !self.batches.iter().any(|b| b.stream == lane && b.settled < b.end)
    }

    fn update_troubled(&mut self) {
        self.troubled = self.whole_error || self.out_of_service || self.lanes.iter().any(|l| l.errored);
        self.update_limit();
    }
}

/// Records a new batch (the common case extends the last one instead), closing the last record
/// at `first`.
#[inline(always)]
fn push_batch(requests: &mut InitiatorRequests, key: u64, first: u64, posted: u64) {
    // No record (`last_key` says so): the new one is the only one, kept virtual, in the front
    // fields alone (no push).
    if requests.last_key == u64::MAX {
        debug_assert!(requests.batches.is_empty() && !requests.front_virtual);
        requests.front_virtual = true;
        requests.front_first = first;
        requests.front_end = u64::MAX;
        requests.front_destination = (key >> 16) as u32;
        requests.last_key = key;
        return;
    }
    if requests.front_virtual {
        requests.materialize_cold();
    }
    if let Some(last) = requests.batches.back_mut() {
        last.end = first;
    }
    match requests.batches.len() {
        // The new record is the oldest, and open.
        0 => {
            requests.front_end = u64::MAX;
            requests.front_destination = (key >> 16) as u32;
        },
        // The oldest record, which was the last, is closed at `first`.
        1 => requests.front_end = first,
        _ => {},
    }
    requests.batches.push_back(BatchRecord {
        destination: (key >> 16) as u32,
        stream: key as u16,
        first,
        end: first + posted,
        settled: first,
    });
    requests.last_key = key;
}

/// A destination's place: its state while it lives, and its generation.
#[derive(Debug, Clone)]
struct DestinationState {
    generation: u32,
    live: bool,
    /// `generation << GATE_SHIFT | STREAMS | GRANTABLE | FAST` ([`gate`]): one comparison with
    /// the id's generation (and the batch's addressing) on the post path (fast), and on a
    /// dedicated policy's grant from the free initiators (grantable).
    gate: u64,
    /// Its initiator and address as the post path reads them (the initiator valid while the
    /// gate's fast bit is set, the address while either bit is): plain fields, no `Option` to
    /// test.
    post_initiator: u16,
    post_address: Address,
    /// `index << 16 | stream`, its grants' key (set by `refresh`).
    post_key: u64,
    /// The initiator it posts on: held (dedicated) or bound (static, streams).
    initiator: Option<u16>,
    stream: u16,
    /// Its address handle, DCT number and DC key, once resolved.
    address: Option<Address>,
    /// Consecutive errors that say the target is not there.
    retries_exceeded: u32,
    unreachable: bool,
    /// Its links in the wait line (dedicated policies), `NONE` at the ends.
    in_line: bool,
    previous: u32,
    next: u32,
}

impl DestinationState {
    fn new(generation: u32) -> Self {
        Self {
            generation,
            live: true,
            gate: gate(generation, 0),
            post_initiator: 0,
            post_address: (NonNull::dangling(), 0, 0),
            post_key: 0,
            initiator: None,
            stream: 0,
            address: None,
            retries_exceeded: 0,
            unreachable: false,
            in_line: false,
            previous: NONE,
            next: NONE,
        }
    }
}

/// Where a destination's requests go: its address handle, DCT number and DC key.
#[doc(hidden)]
pub type Address = (NonNull<ibv_ah>, u32, u64);

/// Why a post to a destination is refused, as the bookkeeping sees it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    WouldBlock(DcPoolWouldBlock),
    /// Its address is not resolved yet (the pool creates its address handle, then asks again).
    Unresolved,
    Unreachable,
    /// Every initiator is out of service.
    NoInitiatorInService,
    UnknownDestination,
}

/// Why a destination cannot be removed.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoveRefusal {
    /// Requests of it are not reported yet.
    Outstanding(u64),
    UnknownDestination,
}

/// The bookkeeping of a pool of initiators `I`.
#[doc(hidden)]
#[derive(Debug)]
pub struct PoolCore<I> {
    pub(crate) initiators: Vec<I>,
    requests: Vec<InitiatorRequests>,
    destinations: Vec<DestinationState>,
    /// Places of removed destinations, for reuse.
    free_places: Vec<u32>,
    policy: DcPoolPolicy,
    /// Initiators held by no destination (dedicated policies). Never not empty while a
    /// destination is in line: a freed initiator goes to the first in line at once.
    free: Vec<u16>,
    /// The wait line, linked through the destinations: first and last, and its length.
    line_head: u32,
    line_tail: u32,
    waiting_count: usize,
    /// The quota policy, with destinations in line: holders mind their quota (slow path).
    quota_active: bool,
    /// Destinations granted an initiator from the line, reported at the end of the `complete`
    /// that granted them, or at the next `poll`/`progress`.
    ready: VecDeque<DestinationId>,
    /// Grants from the line: (destination, generation, initiator, the clock when it was
    /// granted, the clock when it expires).
    grants: VecDeque<(u32, u32, u16, u64, u64)>,
    /// Counts `poll` and `progress` calls (the grant timeout's clock).
    clock: u64,
    grant_timeout: u64,
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
        // Every index fits in 16 bits (MAX_INITIATORS): 65 536 initiators are 0..=65 535.
        let free = if policy.is_dedicated() {
            (0..initiators.len()).rev().map(|i| i as u16).collect()
        } else {
            Vec::new()
        };
        Self {
            initiators,
            requests,
            destinations: Vec::new(),
            free_places: Vec::new(),
            policy,
            free,
            line_head: NONE,
            line_tail: NONE,
            waiting_count: 0,
            quota_active: false,
            ready: VecDeque::new(),
            grants: VecDeque::new(),
            clock: 0,
            grant_timeout: 64,
            unreachable_after: unreachable_after.max(1),
        }
    }

    pub fn policy(&self) -> DcPoolPolicy {
        self.policy
    }

    /// Keeps at most `max` requests in flight per initiator (the CQ was sized for that).
    pub fn limit_send_queue(&mut self, max: u32) {
        for requests in &mut self.requests {
            requests.capacity = requests.capacity.min(u64::from(max.max(1)));
            requests.update_limit();
        }
    }

    /// After how many `poll`/`progress` calls a grant from the line that was not used goes back.
    pub fn set_grant_timeout(&mut self, calls: u64) {
        self.grant_timeout = calls.max(1);
    }

    /// Recomputes destination `d`'s gate (after any change of what it depends on).
    fn refresh(&mut self, d: u32) {
        let dedicated = self.policy.is_dedicated();
        let streams = streams_bit(self.policy == DcPoolPolicy::Streams);
        let state = &mut self.destinations[d as usize];
        state.post_key = record_key(d, state.stream);
        let bits = match (state.live && !state.unreachable, state.initiator, state.address) {
            (true, Some(initiator), Some(address)) => {
                state.post_initiator = initiator;
                state.post_address = address;
                FAST
            },
            (true, None, Some(address)) if dedicated => {
                state.post_address = address;
                GRANTABLE
            },
            _ => 0,
        };
        state.gate = gate(state.generation, bits | streams);
    }

    /// Sets `destination`'s address (its address handle was created); false for a stale id.
    pub fn set_address(&mut self, destination: DestinationId, address: Address) -> bool {
        if self.live(destination).is_none() {
            return false;
        }
        self.destinations[destination.index()].address = Some(address);
        self.refresh(destination.index);
        true
    }

    /// `destination`'s address, if resolved.
    pub fn address(&self, destination: DestinationId) -> Option<Address> {
        self.live(destination)?.address
    }

    /// Requests of destination `d` not reported yet: on the initiator it posts on (it has none
    /// anywhere else: it leaves an initiator only with nothing outstanding there).
    fn outstanding_of(&self, d: u32) -> u64 {
        let Some(i) = self.destinations[d as usize].initiator else {
            return 0;
        };
        let requests = &self.requests[i as usize];
        if requests.front_virtual {
            return if requests.front_destination == d {
                requests.head - requests.oldest
            } else {
                0
            };
        }
        (0..requests.batches.len())
            .filter(|&k| requests.batches[k].destination == d)
            .map(|k| requests.end_of(k) - requests.settled_of(k))
            .sum()
    }

    /// Whether the dedicated holder of initiator `i` can give it back: nothing outstanding.
    fn holder_idle(&self, i: u16) -> bool {
        self.requests[i as usize].outstanding() == 0
    }

    /// The live state of `destination`, or `None` for a stale or unknown id.
    fn live(&self, destination: DestinationId) -> Option<&DestinationState> {
        self.destinations
            .get(destination.index())
            .filter(|s| s.live && s.generation == destination.generation)
    }

    /// Whether `destination` is one of this pool's live destinations.
    pub fn contains(&self, destination: DestinationId) -> bool {
        self.live(destination).is_some()
    }

    /// Adds a destination; the static and streams policies bind it to its initiator now.
    pub fn add_destination(&mut self) -> DestinationId {
        let (index, generation) = match self.free_places.pop() {
            Some(index) => {
                let state = &mut self.destinations[index as usize];
                let generation = state.generation.wrapping_add(1);
                *state = DestinationState::new(generation);
                (index, generation)
            },
            None => {
                let index = u32::try_from(self.destinations.len()).expect("fewer than 2³² destinations");
                self.destinations.push(DestinationState::new(0));
                (index, 0)
            },
        };
        self.bind(index);
        self.refresh(index);
        DestinationId { index, generation }
    }

    /// Binds destination `index` to an initiator in service and a stream by a hash of its index
    /// (static and streams policies); to none when none is in service.
    fn bind(&mut self, index: u32) {
        if self.policy.is_dedicated() || self.requests.is_empty() {
            return;
        }
        // Fibonacci hashing of the index spreads neighbours over the initiators.
        let hash = u64::from(index).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        let count = self.requests.len() as u64;
        let start = (hash % count) as usize;
        // The first in service from the hashed one on.
        let found = (0..self.requests.len())
            .map(|k| (start + k) % self.requests.len())
            .find(|&i| !self.requests[i].out_of_service);
        let state = &mut self.destinations[index as usize];
        match found {
            Some(i) => {
                let streams = u64::from(self.requests[i].streams.max(1));
                state.initiator = Some(i as u16);
                state.stream = ((hash / count) % streams) as u16;
            },
            None => {
                state.initiator = None;
                state.stream = 0;
            },
        }
    }

    /// Removes `destination`: refused while requests of it are not reported. Its place is reused
    /// by a later destination, under a new generation.
    pub fn remove_destination(&mut self, destination: DestinationId) -> Result<(), RemoveRefusal> {
        self.live(destination).ok_or(RemoveRefusal::UnknownDestination)?;
        let d = destination.index;
        let outstanding = self.outstanding_of(d);
        if outstanding > 0 {
            return Err(RemoveRefusal::Outstanding(outstanding));
        }
        self.unlink(d);
        // A dedicated destination with nothing outstanding holds at most a grant not used yet.
        if self.policy.is_dedicated() {
            if let Some(i) = self.destinations[d as usize].initiator.take() {
                self.requests[i as usize].holder = None;
                if !self.requests[i as usize].whole_error && !self.requests[i as usize].out_of_service {
                    self.give(i);
                }
            }
        }
        let state = &mut self.destinations[d as usize];
        state.live = false;
        state.initiator = None;
        state.address = None;
        self.refresh(d);
        self.free_places.push(d);
        Ok(())
    }

    /// What the bookkeeping holds (address handles are the pool's, counted there).
    pub fn footprint(&self) -> DcPoolFootprint {
        DcPoolFootprint {
            destination_places: self.destinations.len(),
            live_destinations: self.destinations.len() - self.free_places.len(),
            address_handles: 0,
            waiting: self.waiting_count,
            grant_timers: self.grants.len(),
            batch_records: self
                .requests
                .iter()
                .map(|r| r.batches.len() + usize::from(r.front_virtual))
                .sum(),
            ready_events: self.ready.len(),
        }
    }

    /// The initiator (and stream) `destination` posts on now, if any.
    pub fn assignment(&self, destination: DestinationId) -> Option<(usize, Option<u16>)> {
        let state = self.live(destination)?;
        let initiator = state.initiator? as usize;
        Some((
            initiator,
            (self.requests[initiator].streams > 0).then_some(state.stream),
        ))
    }

    /// Requests of `destination` posted and not yet reported.
    pub fn outstanding(&self, destination: DestinationId) -> u64 {
        self.live(destination)
            .map_or(0, |_| self.outstanding_of(destination.index))
    }

    /// Destinations in line for an initiator, first first.
    pub fn waiting(&self) -> impl Iterator<Item = DestinationId> + '_ {
        let mut at = self.line_head;
        std::iter::from_fn(move || {
            (at != NONE).then(|| {
                let state = &self.destinations[at as usize];
                let id = DestinationId {
                    index: at,
                    generation: state.generation,
                };
                at = state.next;
                id
            })
        })
    }

    /// Whether `destination` was reported unreachable.
    pub fn is_unreachable(&self, destination: DestinationId) -> bool {
        self.live(destination).is_some_and(|d| d.unreachable)
    }

    /// Lets an unreachable destination post again.
    pub fn revive(&mut self, destination: DestinationId) {
        if self.live(destination).is_some() {
            let state = &mut self.destinations[destination.index()];
            state.unreachable = false;
            state.retries_exceeded = 0;
            self.refresh(destination.index);
        }
    }

    /// Takes `destination` out of line for an initiator, and gives back a grant from the line it
    /// has not used.
    pub fn cancel_wait(&mut self, destination: DestinationId) {
        if self.live(destination).is_none() {
            return;
        }
        let d = destination.index;
        self.unlink(d);
        if self.policy.is_dedicated() {
            if let Some(i) = self.destinations[d as usize].initiator {
                if self.holder_idle(i) && !self.requests[i as usize].whole_error {
                    self.destinations[d as usize].initiator = None;
                    self.refresh(d);
                    self.requests[i as usize].holder = None;
                    self.give(i);
                }
            }
        }
    }

    /// Puts destination `d` at the end of the line.
    fn enqueue(&mut self, d: u32) {
        if self.destinations[d as usize].in_line {
            return;
        }
        let tail = self.line_tail;
        {
            let state = &mut self.destinations[d as usize];
            state.in_line = true;
            state.previous = tail;
            state.next = NONE;
        }
        if tail == NONE {
            self.line_head = d;
        } else {
            self.destinations[tail as usize].next = d;
        }
        self.line_tail = d;
        self.waiting_count += 1;
        self.quota_active = matches!(self.policy, DcPoolPolicy::DedicatedWithQuota { .. });
    }

    /// Takes destination `d` out of the line, if in it.
    fn unlink(&mut self, d: u32) {
        let state = &mut self.destinations[d as usize];
        if !state.in_line {
            return;
        }
        let (previous, next) = (state.previous, state.next);
        state.in_line = false;
        state.previous = NONE;
        state.next = NONE;
        if previous == NONE {
            self.line_head = next;
        } else {
            self.destinations[previous as usize].next = next;
        }
        if next == NONE {
            self.line_tail = previous;
        } else {
            self.destinations[next as usize].previous = previous;
        }
        self.waiting_count -= 1;
        self.quota_active = self.quota_active && self.waiting_count > 0;
    }

    /// [`give`](Self::give), with the common case (nobody in line) inline.
    #[inline(always)]
    fn give_back(&mut self, initiator: u16) {
        // At most every initiator is free: within the capacity it was created with (tested, so
        // that the push has no growth path, and saves no registers for one).
        if self.line_head == NONE && self.free.len() < self.free.capacity() {
            self.free.push(initiator);
        } else {
            self.give_cold(initiator);
        }
    }

    #[inline(never)]
    fn give_cold(&mut self, initiator: u16) {
        self.give(initiator);
    }

    /// A freed initiator (healthy, held by nobody): to the first destination in line, reported
    /// by `Ready` with a grant timer, or to the free ones.
    fn give(&mut self, initiator: u16) {
        let first = self.line_head;
        if first == NONE {
            self.free.push(initiator);
            return;
        }
        self.unlink(first);
        let state = &mut self.destinations[first as usize];
        state.initiator = Some(initiator);
        let generation = state.generation;
        self.refresh(first);
        let requests = &mut self.requests[initiator as usize];
        requests.holder = Some(first);
        requests.hold_start = requests.head;
        requests.granted_at = self.clock;
        self.ready.push_back(DestinationId {
            index: first,
            generation,
        });
        self.grants.push_back((
            first,
            generation,
            initiator,
            self.clock,
            self.clock + self.grant_timeout,
        ));
    }

    /// Grants `destination` an initiator for one batch, or says why not.
    #[inline(always)]
    pub fn begin(&mut self, destination: DestinationId) -> Result<Grant, Refusal> {
        let streams = self.policy == DcPoolPolicy::Streams;
        let grant = self.begin_held(destination, streams);
        if grant.room > 0 {
            return Ok(grant);
        }
        let grant = self.grant_from_free(destination, streams);
        if grant.room > 0 {
            return Ok(grant);
        }
        self.begin_slow(destination)
    }

    /// The common case of [`begin`](Self::begin), with no refusal to build: a grant of no room
    /// (and no other meaning) sends the caller to [`grant_from_free`](Self::grant_from_free),
    /// then to [`begin_slow`](Self::begin_slow). A grant that the caller builds a batch from in
    /// registers, not through memory shared with the slow path, and tests by its room (no
    /// `Option` whose niche, the address, would be tested again).
    ///
    /// `streams` says how the batch is addressed (with `start_post_send_on_stream`): a batch not
    /// addressed as its pool's policy says gets none.
    #[inline(always)]
    pub fn begin_held(&mut self, destination: DestinationId, streams: bool) -> Grant {
        // The common case: it posts on the initiator it holds or is bound to (its gate says
        // live, reachable, an initiator, an address), with no quota to mind and no error to
        // recover from.
        if let Some(state) = self.destinations.get(destination.index()) {
            if state.gate == gate(destination.generation, FAST | streams_bit(streams)) && !self.quota_active {
                // The fast bit says `post_initiator` and `post_address` are its initiator and
                // address.
                let i = state.post_initiator as usize;
                // SAFETY: a destination's initiator is one of the pool's (indices are never
                // removed).
                let requests = unsafe { self.requests.get_unchecked(i) };
                // A troubled initiator has no room (its limit is 0).
                let room = requests.room();
                if room > 0 {
                    return Grant {
                        address: state.post_address,
                        initiator: i,
                        key: state.post_key,
                        first: requests.head,
                        room,
                    };
                }
            }
        }
        Grant::NONE
    }

    /// [`begin`](Self::begin) beyond [`begin_held`](Self::begin_held) and
    /// [`grant_from_free`](Self::grant_from_free).
    #[inline(never)]
    pub(crate) fn begin_slow(&mut self, destination: DestinationId) -> Result<Grant, Refusal> {
        let state = self.live(destination).ok_or(Refusal::UnknownDestination)?;
        let d = destination.index;
        if state.unreachable {
            return Err(Refusal::Unreachable);
        }
        let Some(address) = state.address else {
            return Err(Refusal::Unresolved);
        };
        // What is left of the quota while others wait.
        let mut quota_left = u64::MAX;
        let initiator = match (self.policy, state.initiator) {
            (DcPoolPolicy::Static | DcPoolPolicy::Streams, Some(i)) => i as usize,
            (DcPoolPolicy::Static | DcPoolPolicy::Streams, None) => return Err(Refusal::NoInitiatorInService),
            (DcPoolPolicy::DedicatedWithQuota { quota }, Some(i)) => {
                // It is not in line while it holds an initiator: once it gave it back, its next
                // post goes to the end of the line if others wait.
                if self.waiting_count > 0 {
                    let requests = &self.requests[i as usize];
                    let posted_on_hold = requests.head - requests.hold_start;
                    quota_left = u64::from(quota.max(1)).saturating_sub(posted_on_hold);
                    if quota_left == 0 {
                        return Err(Refusal::WouldBlock(DcPoolWouldBlock::QuotaExhausted));
                    }
                }
                i as usize
            },
            (_, Some(i)) => i as usize,
            (_, None) => {
                // A free initiator means nobody is in line (a freed one goes to the line first).
                let Some(i) = self.free.pop() else {
                    if self.requests.iter().all(|r| r.out_of_service) {
                        return Err(Refusal::NoInitiatorInService);
                    }
                    self.enqueue(d);
                    return Err(Refusal::WouldBlock(DcPoolWouldBlock::NoInitiator));
                };
                if self.destinations[d as usize].in_line {
                    self.unlink(d);
                }
                let state = &mut self.destinations[d as usize];
                state.initiator = Some(i);
                // Live, reachable and resolved (checked above): fast from now on.
                state.post_initiator = i;
                state.post_address = address;
                state.gate = gate(state.generation, FAST);
                let requests = &mut self.requests[i as usize];
                requests.holder = Some(d);
                requests.hold_start = requests.head;
                i as usize
            },
        };
        let stream = self.destinations[d as usize].stream;
        let requests = &mut self.requests[initiator];
        if !requests.troubled && requests.limit <= requests.head {
            // A batch stopped at the ring's end: the limit again.
            requests.update_limit();
        }
        let requests = &self.requests[initiator];
        if requests.troubled {
            if requests.whole_error || requests.out_of_service {
                return Err(Refusal::WouldBlock(DcPoolWouldBlock::Recovering {
                    initiator,
                    stream: None,
                }));
            }
            if requests.lanes[stream as usize].errored {
                return Err(Refusal::WouldBlock(DcPoolWouldBlock::Recovering {
                    initiator,
                    stream: Some(stream),
                }));
            }
        }
        let room = (requests.healthy_limit() - requests.head) as usize;
        if room == 0 {
            return Err(Refusal::WouldBlock(DcPoolWouldBlock::QueueFull));
        }
        let room = room.min(usize::try_from(quota_left).unwrap_or(usize::MAX));
        Ok(Grant {
            address,
            initiator,
            key: record_key(d, stream),
            first: requests.head,
            room,
        })
    }

    /// The dedicated policies' common case: a live, reachable, resolved destination that holds
    /// no initiator (its gate says grantable) while one is free (so nobody is in line) takes it.
    /// As [`begin_held`](Self::begin_held), a grant of no room is none.
    #[inline(always)]
    pub fn grant_from_free(&mut self, destination: DestinationId, streams: bool) -> Grant {
        let Some(&i) = self.free.last() else {
            return Grant::NONE;
        };
        let Some(state) = self.destinations.get_mut(destination.index()) else {
            return Grant::NONE;
        };
        if state.gate != gate(destination.generation, GRANTABLE | streams_bit(streams)) {
            return Grant::NONE;
        }
        // A free initiator is healthy and holds nothing, and its limit is current: it was
        // recomputed when its last request was reported, and `head` has not moved since (checked
        // by `check_invariants`).
        let requests = &mut self.requests[i as usize];
        let room = requests.room();
        if room == 0 {
            return Grant::NONE;
        }
        requests.holder = Some(destination.index);
        requests.hold_start = requests.head;
        self.free.pop();
        state.initiator = Some(i);
        state.post_initiator = i;
        state.gate = gate(destination.generation, FAST);
        Grant {
            address: state.post_address,
            initiator: i as usize,
            key: state.post_key,
            first: requests.head,
            room,
        }
    }

    /// Whether `initiator` has DCI streams.
    pub fn has_streams(&self, initiator: usize) -> bool {
        self.requests[initiator].streams > 0
    }

    /// The ring of callers' `wr_id`s of `initiator` and its mask, for a guard that writes them.
    ///
    /// # Safety
    ///
    /// `initiator` must be one of the pool's (a grant's).
    pub unsafe fn wr_id_ring(&mut self, initiator: usize) -> (*mut u64, u64) {
        // SAFETY: the caller's promise.
        let requests = unsafe { self.requests.get_unchecked_mut(initiator) };
        (requests.wr_ids.as_mut_ptr(), requests.mask)
    }

    /// Ends a granted batch: `posted` requests went to the provider (0 when it was dropped or
    /// refused), their `wr_id`s in the ring from `grant.first` on.
    #[inline(always)]
    pub fn commit(&mut self, grant: Grant, posted: usize) {
        // SAFETY: the grant's initiator is one of the pool's.
        let requests = unsafe { self.requests.get_unchecked_mut(grant.initiator) };
        if posted > 0 {
            let posted = posted as u64;
            // The same destination and stream as the last record (open: its end is `head`): one
            // record.
            if requests.last_key != grant.key {
                push_batch(requests, grant.key, grant.first, posted);
            }
            requests.head += posted;
        } else {
            // A dedicated destination that posted nothing gives back what it was granted.
            self.release_if_idle_cold(grant.destination());
        }
    }

    /// [`release_if_idle`](Self::release_if_idle), out of line.
    #[inline(never)]
    fn release_if_idle_cold(&mut self, d: u32) {
        self.release_if_idle(d);
    }

    /// Gives a dedicated destination's initiator back once nothing of it is outstanding (and the
    /// initiator was recovered, if it needed to be).
    fn release_if_idle(&mut self, d: u32) {
        if !self.policy.is_dedicated() {
            return;
        }
        let Some(i) = self.destinations[d as usize].initiator else {
            return;
        };
        let requests = &self.requests[i as usize];
        if requests.outstanding() != 0 || requests.whole_error {
            // Recovered first (it holds nothing then: the holder's requests were all it carried).
            return;
        }
        let state = &mut self.destinations[d as usize];
        state.initiator = None;
        // No initiator: not fast any more, grantable if it was fast.
        state.gate += state.gate & FAST;
        let requests = &mut self.requests[i as usize];
        requests.holder = None;
        if !requests.out_of_service {
            self.give(i);
        }
    }

    /// One `poll` (or `progress`): the clock of grant timeouts moves on; grants from the line
    /// that were not used within the timeout go back; ready destinations are reported.
    pub fn tick(&mut self, sink: &mut impl FnMut(DcPoolEvent)) {
        self.clock += 1;
        while let Some(&(d, generation, initiator, granted_at, expires)) = self.grants.front() {
            if expires > self.clock {
                break;
            }
            self.grants.pop_front();
            let state = &self.destinations[d as usize];
            let requests = &self.requests[initiator as usize];
            let unused = state.live
                && state.generation == generation
                && state.initiator == Some(initiator)
                && requests.granted_at == granted_at
                && requests.head == requests.hold_start
                && requests.outstanding() == 0
                && !requests.whole_error;
            if unused {
                self.destinations[d as usize].initiator = None;
                self.refresh(d);
                self.requests[initiator as usize].holder = None;
                self.give(initiator);
            }
        }
        self.report_ready(sink);
    }

    /// Reports the destinations granted an initiator from the line.
    #[inline]
    fn report_ready(&mut self, sink: &mut impl FnMut(DcPoolEvent)) {
        while let Some(destination) = self.ready.pop_front() {
            // Still holding what it was granted (not cancelled, removed or expired since).
            let holds = self
                .live(destination)
                .and_then(|s| s.initiator)
                .is_some_and(|i| self.requests[i as usize].holder == Some(destination.index));
            if holds {
                sink(DcPoolEvent::Ready { destination });
            }
        }
    }

    /// Settles a completion of the provider-visible `wr_id` with `status` (an `ibv_wc_status`),
    /// reporting every request it settles to `sink`. A completion that names no live request
    /// is ignored; returns whether it named one.
    #[inline(always)]
    pub fn complete(&mut self, wr_id: u64, status: u32, sink: &mut impl FnMut(DcPoolEvent)) -> bool {
        self.complete_with_syndrome(wr_id, status, 0, sink)
    }

    /// As [`complete`](Self::complete), with the completion's vendor syndrome, which the failing
    /// request's [`DcPoolEvent::Failed`] carries.
    #[inline(always)]
    pub fn complete_with_syndrome(
        &mut self, wr_id: u64, status: u32, vendor_err: u32, sink: &mut impl FnMut(DcPoolEvent),
    ) -> bool {
        let initiator = initiator_of(wr_id);
        let Some(requests) = self.requests.get_mut(initiator) else {
            return false;
        };
        // The common case: a success in the oldest record of a healthy initiator. Its requests
        // up to this one are one destination's, on one stream: they executed.
        if status == ibv_wc_status::IBV_WC_SUCCESS && !requests.troubled {
            // The oldest record's end (the open last one's is `head`; none: `head`, which is
            // `oldest` then), and its first request not reported.
            let head = requests.head;
            let end = requests.front_end.min(head);
            let settled = requests.oldest;
            // The request's distance from `settled` in the 48 bits the provider gives back: it
            // is in the oldest record when that distance is within the record's span (`settled`
            // is within 2⁴⁸ of `head`: the ring holds them all, and is smaller).
            let offset = wr_id.wrapping_sub(settled) & NUMBER_MASK;
            if offset < end - settled {
                let d = requests.front_destination;
                let mask = requests.mask;
                // The bookkeeping first, from values at hand (before the sink, which may be
                // opaque): `reported` and `oldest` move up by the requests reported.
                let count = offset + 1;
                let oldest = settled + count;
                let reported = requests.reported + count;
                requests.reported = reported;
                // The oldest record's `settled`, kept here alone (synced before records are
                // read).
                requests.oldest = oldest;
                if oldest != end {
                    // Healthy (tested above): `healthy_limit`, from the values at hand.
                    requests.limit = (reported + requests.capacity)
                        .min(oldest + mask + 1)
                        .min((head | mask) + 1);
                }
                let state = &mut self.destinations[d as usize];
                let destination = DestinationId {
                    index: d,
                    generation: state.generation,
                };
                if state.retries_exceeded != 0 {
                    state.retries_exceeded = 0;
                }
                let ring = &requests.wr_ids;
                for n in settled..oldest {
                    // SAFETY: a masked number is within the ring (its length is mask + 1).
                    let wr_id = unsafe { *ring.get_unchecked((n & mask) as usize) };
                    sink(DcPoolEvent::Completed { destination, wr_id });
                }
                if oldest == end {
                    self.oldest_done(initiator);
                }
                if !self.ready.is_empty() {
                    self.report_ready_cold(sink);
                }
                return true;
            }
        }
        self.complete_slow(initiator, wr_id, status, vendor_err, sink)
    }

    /// The oldest record of healthy `initiator` was reported in full: the next one is the
    /// oldest; with none left, a held initiator goes back.
    #[inline(never)]
    fn oldest_done(&mut self, initiator: usize) {
        let requests = &mut self.requests[initiator];
        if requests.front_end != u64::MAX {
            self.next_record(initiator);
            return;
        }
        // Its only record was reported in full: nothing is outstanding now.
        if requests.front_virtual {
            requests.front_virtual = false;
        } else {
            requests.batches.clear();
        }
        requests.last_key = u64::MAX;
        requests.front_end = requests.head;
        requests.idle_limit();
        if let Some(holder) = requests.holder.take() {
            // A held initiator carries only its holder's requests, and this one is healthy and
            // idle: it goes back.
            let state = &mut self.destinations[holder as usize];
            state.initiator = None;
            // Not fast any more; grantable if it was fast.
            state.gate += state.gate & FAST;
            self.give_back(initiator as u16);
        }
    }

    /// [`oldest_done`](Self::oldest_done) when another record follows the oldest: out of line,
    /// so that the drained step saves no more registers than it uses.
    #[inline(never)]
    fn next_record(&mut self, initiator: usize) {
        let requests = &mut self.requests[initiator];
        requests.sync();
        requests.pop_settled();
        self.release_holder_if_idle(initiator);
    }

    /// [`report_ready`](Self::report_ready), out of line.
    #[inline(never)]
    fn report_ready_cold(&mut self, sink: &mut impl FnMut(DcPoolEvent)) {
        self.report_ready(sink);
    }

    /// [`complete_with_syndrome`](Self::complete_with_syndrome) beyond the oldest record, or in
    /// error.
    #[inline(never)]
    fn complete_slow(
        &mut self, initiator: usize, wr_id: u64, status: u32, vendor_err: u32, sink: &mut impl FnMut(DcPoolEvent),
    ) -> bool {
        let requests = &mut self.requests[initiator];
        requests.sync();
        let number = requests.unwrap_number(wr_id & NUMBER_MASK);
        let Some(index) = requests.find(number) else {
            return false;
        };
        let batch = requests.batches[index];
        if status == ibv_wc_status::IBV_WC_SUCCESS {
            self.settle_up_to(initiator, batch.stream, number + 1, sink);
        } else {
            self.fail(initiator, number, batch, (status, vendor_err), sink);
        }
        if !self.ready.is_empty() {
            self.report_ready(sink);
        }
        true
    }

    /// Reports as completed the requests of `initiator`'s stream `lane` before `end` (a stream
    /// completes in order: they executed).
    #[inline]
    fn settle_up_to(&mut self, initiator: usize, lane: u16, end: u64, sink: &mut impl FnMut(DcPoolEvent)) {
        let requests = &mut self.requests[initiator];
        let (ring, mask) = (&requests.wr_ids, requests.mask);
        let mut reported = 0;
        for batch in requests.batches.iter_mut() {
            if batch.first >= end {
                break;
            }
            if batch.stream != lane {
                continue;
            }
            let stop = batch.end.min(end);
            if batch.settled >= stop {
                continue;
            }
            let state = &mut self.destinations[batch.destination as usize];
            let destination = DestinationId {
                index: batch.destination,
                generation: state.generation,
            };
            for number in batch.settled..stop {
                // SAFETY: a masked number is within the ring (its length is mask + 1).
                let wr_id = unsafe { *ring.get_unchecked((number & mask) as usize) };
                sink(DcPoolEvent::Completed { destination, wr_id });
            }
            reported += stop - batch.settled;
            batch.settled = stop;
            if state.retries_exceeded != 0 {
                state.retries_exceeded = 0;
            }
        }
        requests.reported += reported;
        requests.pop_settled();
        if requests.troubled {
            self.maybe_recover(initiator, sink);
        }
        self.release_holder_if_idle(initiator);
    }

    /// Gives a held initiator back once its holder has nothing outstanding (dedicated policies:
    /// a held initiator carries only its holder's requests).
    #[inline]
    fn release_holder_if_idle(&mut self, initiator: usize) {
        let requests = &self.requests[initiator];
        if let (Some(holder), 0) = (requests.holder, requests.outstanding()) {
            self.release_if_idle_cold(holder);
        }
    }

    /// A completion in error of request `number` (in `batch`) of `initiator`: an error
    /// completion, or a flush.
    fn fail(
        &mut self, initiator: usize, number: u64, batch: BatchRecord, (status, vendor_err): (u32, u32),
        sink: &mut impl FnMut(DcPoolEvent),
    ) {
        let lane = batch.stream;
        let streams = self.requests[initiator].streams > 0;
        if status == ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
            let requests = &mut self.requests[initiator];
            if !requests.lanes[lane as usize].errored && !requests.whole_error {
                // A flush no error completion of its stream announced: the whole initiator went
                // to ERR (on its own, or after too many stream errors).
                requests.whole_error = true;
                requests.update_troubled();
            }
            self.flush_up_to(initiator, lane, number + 1, sink);
        } else {
            // Requests of its stream before it executed.
            self.settle_up_to(initiator, lane, number, sink);
            let d = batch.destination;
            let state = &mut self.destinations[d as usize];
            let destination = DestinationId {
                index: d,
                generation: state.generation,
            };
            if !is_no_such_target(status) {
                state.retries_exceeded = 0;
            } else {
                state.retries_exceeded += 1;
                if state.retries_exceeded >= self.unreachable_after && !state.unreachable {
                    state.unreachable = true;
                    sink(DcPoolEvent::Unreachable { destination });
                    self.refresh(d);
                }
            }
            let requests = &mut self.requests[initiator];
            let wr_id = requests.wr_ids[(number & requests.mask) as usize];
            sink(DcPoolEvent::Failed {
                destination,
                wr_id,
                status,
                vendor_err,
            });
            let index = requests.find(number).expect("the failing request is live");
            requests.batches[index].settled = number + 1;
            requests.reported += 1;
            let requests = &mut self.requests[initiator];
            requests.lanes[lane as usize] = LaneError {
                errored: true,
                at_fault: Some(d),
            };
            if !streams {
                // Without streams an error completion puts the initiator in ERR.
                requests.whole_error = true;
            }
            requests.update_troubled();
            requests.pop_settled();
        }
        self.maybe_recover(initiator, sink);
        self.release_holder_if_idle(initiator);
    }

    /// Reports the requests of `initiator`'s stream `lane` before `end` as flushed: failed for the
    /// destination at fault on that stream (or an unreachable one), handed back otherwise.
    fn flush_up_to(&mut self, initiator: usize, lane: u16, end: u64, sink: &mut impl FnMut(DcPoolEvent)) {
        let requests = &mut self.requests[initiator];
        let at_fault = requests.lanes[lane as usize].at_fault;
        for batch in requests.batches.iter_mut() {
            if batch.first >= end {
                break;
            }
            if batch.stream != lane {
                continue;
            }
            let stop = batch.end.min(end);
            if batch.settled >= stop {
                continue;
            }
            let state = &mut self.destinations[batch.destination as usize];
            let destination = DestinationId {
                index: batch.destination,
                generation: state.generation,
            };
            let fails = at_fault == Some(batch.destination) || state.unreachable;
            for number in batch.settled..stop {
                let wr_id = requests.wr_ids[(number & requests.mask) as usize];
                sink(if fails {
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
            requests.reported += stop - batch.settled;
            batch.settled = stop;
        }
        requests.pop_settled();
    }

    /// Resets an errored stream once it holds nothing, or recovers an initiator in ERR once it
    /// holds nothing.
    fn maybe_recover(&mut self, initiator: usize, sink: &mut impl FnMut(DcPoolEvent)) {
        let requests = &mut self.requests[initiator];
        if requests.out_of_service {
            return;
        }
        if !requests.whole_error {
            for lane in 0..requests.lanes.len() {
                let lane = lane as u16;
                if !self.requests[initiator].lanes[lane as usize].errored || !self.requests[initiator].lane_idle(lane) {
                    continue;
                }
                match self.initiators[initiator].reset_stream(lane) {
                    Ok(()) => self.requests[initiator].lanes[lane as usize] = LaneError::default(),
                    // It went to ERR as a whole (or cannot reset streams): recovered below once
                    // everything it holds was reported.
                    Err(StreamResetRefusal::NotReadyToSend | StreamResetRefusal::Failed(_)) => {
                        self.requests[initiator].whole_error = true;
                        break;
                    },
                }
            }
        }
        let requests = &mut self.requests[initiator];
        if requests.whole_error && requests.outstanding() == 0 {
            match self.initiators[initiator].recover() {
                Ok(()) => {
                    let requests = &mut self.requests[initiator];
                    requests.whole_error = false;
                    requests.lanes.iter_mut().for_each(|l| *l = LaneError::default());
                },
                Err(error) => self.lose(initiator, error.to_string(), sink),
            }
        }
        self.requests[initiator].update_troubled();
    }

    /// Takes an initiator that could not be recovered (and holds nothing) out of service.
    fn lose(&mut self, initiator: usize, error: String, sink: &mut impl FnMut(DcPoolEvent)) {
        let requests = &mut self.requests[initiator];
        requests.out_of_service = true;
        requests.whole_error = false;
        requests.update_troubled();
        if let Some(holder) = requests.holder.take() {
            self.destinations[holder as usize].initiator = None;
            self.refresh(holder);
        }
        self.free.retain(|&i| i as usize != initiator);
        if !self.policy.is_dedicated() {
            // Its destinations go to the others (they have nothing outstanding on it).
            for d in 0..self.destinations.len() {
                let state = &self.destinations[d];
                if state.live && state.initiator == Some(initiator as u16) {
                    self.bind(d as u32);
                    self.refresh(d as u32);
                }
            }
        }
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
            // The records as `sync` would leave them, a virtual only record included.
            let mut records: VecDeque<BatchRecord> = requests
                .batches
                .iter()
                .enumerate()
                .map(|(k, batch)| BatchRecord {
                    settled: requests.settled_of(k),
                    end: requests.end_of(k),
                    ..*batch
                })
                .collect();
            if requests.front_virtual {
                assert!(
                    requests.batches.is_empty(),
                    "initiator {i}: a virtual record is the only one"
                );
                records.push_back(BatchRecord {
                    destination: requests.front_destination,
                    stream: requests.last_key as u16,
                    first: requests.front_first,
                    end: requests.head,
                    settled: requests.oldest,
                });
            }
            let mut outstanding = 0;
            let mut previous_end = None;
            for batch in &records {
                let end = batch.end;
                assert!(batch.first <= batch.settled && batch.settled <= end, "{batch:?}");
                assert!(batch.first < end);
                if let Some(previous) = previous_end {
                    assert!(batch.first >= previous, "batches of initiator {i} overlap");
                }
                previous_end = Some(end);
                outstanding += end - batch.settled;
                per_destination[batch.destination as usize] += end - batch.settled;
                assert!(self.destinations[batch.destination as usize].live);
                if let Some(holder) = requests.holder {
                    if batch.settled < end {
                        assert_eq!(
                            holder, batch.destination,
                            "a held initiator carries only its holder's requests"
                        );
                    }
                }
            }
            assert_eq!(outstanding, requests.outstanding(), "initiator {i}");
            assert!(requests.outstanding() <= requests.capacity);
            if requests.troubled {
                assert_eq!(requests.limit, 0, "initiator {i}: limit");
            } else {
                let expected = (requests.reported + requests.capacity).min(requests.oldest + requests.mask + 1);
                // The ring's end as of the last recomputation may have been reached since.
                assert!(
                    requests.limit <= expected && requests.limit >= requests.head,
                    "initiator {i}: limit"
                );
            }
            match records.back() {
                Some(last) => assert_eq!(requests.last_key, record_key(last.destination, last.stream)),
                None => assert_eq!(requests.last_key, u64::MAX),
            }
            if let Some(front) = records.front() {
                assert!(requests.head - requests.oldest <= requests.mask + 1);
                assert!(
                    front.settled <= requests.oldest,
                    "initiator {i}: the oldest record's settled"
                );
                let end = if records.len() == 1 { u64::MAX } else { front.end };
                assert_eq!(requests.front_end, end, "initiator {i}: the oldest record's end");
                assert_eq!(requests.front_destination, front.destination, "initiator {i}");
            } else {
                assert_eq!(
                    requests.oldest, requests.head,
                    "initiator {i}: the oldest request not reported"
                );
                assert_eq!(requests.front_end, requests.head, "initiator {i}: no record");
            }
            let troubled = requests.whole_error || requests.out_of_service || requests.lanes.iter().any(|l| l.errored);
            assert_eq!(requests.troubled, troubled, "initiator {i}: troubled");
            if requests.out_of_service {
                assert_eq!(requests.outstanding(), 0, "a lost initiator holds nothing");
            }
        }
        for (d, state) in self.destinations.iter().enumerate() {
            assert_eq!(self.outstanding_of(d as u32), per_destination[d], "destination {d}");
            let fast = state.live && state.initiator.is_some() && !state.unreachable && state.address.is_some();
            let grantable = self.policy.is_dedicated()
                && state.live
                && state.initiator.is_none()
                && !state.unreachable
                && state.address.is_some();
            let bits = if fast {
                FAST
            } else if grantable {
                GRANTABLE
            } else {
                0
            };
            let bits = bits | streams_bit(self.policy == DcPoolPolicy::Streams);
            assert_eq!(state.gate, gate(state.generation, bits), "destination {d}: gate");
            assert_eq!(
                state.post_key,
                record_key(d as u32, state.stream),
                "destination {d}: key"
            );
            if fast || grantable {
                assert_eq!(Some(state.post_address), state.address, "destination {d}: address");
            }
            if !state.live {
                assert!(!state.in_line && state.initiator.is_none());
                continue;
            }
            if let Some(i) = state.initiator {
                // A grant names the stream as is: 0 on an initiator without streams.
                assert!(
                    state.stream < self.requests[i as usize].streams.max(1) as u16,
                    "destination {d}: stream {} on initiator {i}",
                    state.stream
                );
                if !self.policy.is_dedicated() {
                    assert!(!self.requests[i as usize].out_of_service, "bound to a lost initiator");
                }
            }
        }
        // The line, walked both ways, holds exactly the destinations marked in it.
        let mut count = 0;
        let mut at = self.line_head;
        let mut previous = NONE;
        while at != NONE {
            let state = &self.destinations[at as usize];
            assert!(state.live && state.in_line);
            assert_eq!(state.previous, previous);
            previous = at;
            at = state.next;
            count += 1;
            assert!(count <= self.destinations.len(), "the line loops");
        }
        assert_eq!(self.line_tail, previous);
        assert_eq!(count, self.waiting_count);
        assert_eq!(self.destinations.iter().filter(|s| s.in_line).count(), count);
        if self.policy.is_dedicated() {
            // Liveness: nobody waits while an initiator is free.
            assert!(
                self.free.is_empty() || self.waiting_count == 0,
                "{} destinations wait while {} initiators are free",
                self.waiting_count,
                self.free.len()
            );
            let held = self.requests.iter().filter(|r| r.holder.is_some()).count();
            let lost = self
                .requests
                .iter()
                .filter(|r| r.out_of_service && r.holder.is_none())
                .count();
            assert_eq!(
                held + self.free.len() + lost,
                self.requests.len(),
                "every initiator is held, free or lost"
            );
            for (i, requests) in self.requests.iter().enumerate() {
                if let Some(holder) = requests.holder {
                    let state = &self.destinations[holder as usize];
                    assert!(state.live);
                    assert_eq!(state.initiator, Some(i as u16));
                    assert!(!state.in_line, "a holder is not in line");
                    assert!(
                        requests.outstanding() > 0 || requests.whole_error || requests.head == requests.hold_start,
                        "a holder with nothing outstanding gave its initiator back"
                    );
                }
                if self.free.contains(&(i as u16)) {
                    assert!(!requests.troubled, "a free initiator is healthy");
                    assert_eq!(requests.outstanding(), 0, "a free initiator holds nothing");
                    assert_eq!(
                        requests.limit,
                        requests.healthy_limit(),
                        "a free initiator's limit is current"
                    );
                }
            }
        }
    }
}
