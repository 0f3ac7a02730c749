//! The pool's bookkeeping, apart from any device, and its destinations: which DC initiator (and
//! stream) each destination posts on, the line of destinations waiting for one (dedicated
//! policies), and the grant of one batch (`begin`) or the refusal.
//!
//! It is written against [`PooledInitiator`], a small trait over "a DCI" (recover it, reset a
//! stream), so that the unit tests drive it with simulated initiators: a deterministic scheduler
//! with seeded latencies and injected error completions (`simulation`), and property tests of
//! any interleaving of posts, executions, completions and errors. Completions and recovery are
//! in `completions`; each initiator's requests in `requests`.
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use rdma_mummy_sys::ibv_ah;

use super::clock::Clock;
use super::initiator::PooledInitiator;
use super::requests::InitiatorRequests;
use super::stall::StallWatch;
use super::types::{DcPoolEvent, DcPoolFootprint, DcPoolPolicy, DcPoolWouldBlock, DestinationId};

/// Where a destination's requests go: its address handle, DCT number and DC key.
pub(crate) type Address = (NonNull<ibv_ah>, u32, u64);

/// "No destination" in the wait line's links.
const NONE: u32 = u32::MAX;

/// What a destination was granted for one batch: an initiator (and stream), its address, the
/// number of the batch's first request, and how many requests the batch may hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    pub(crate) destination: u32,
    pub(crate) initiator: usize,
    pub(crate) stream: u16,
    pub(crate) address: Address,
    pub(crate) first: u64,
    /// The place of the first in the initiator's ring of `wr_id`s.
    pub(crate) slot: usize,
    pub(crate) room: usize,
}

/// Why a post to a destination is refused, as the bookkeeping sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    WouldBlock(DcPoolWouldBlock),
    /// Its address is not resolved yet.
    Unresolved,
    Unreachable,
    /// It is removed once its requests are reported ([`PoolCore::retire`]).
    Retiring,
    /// Every initiator is out of service.
    NoInitiatorInService,
    UnknownDestination,
}

/// Why a destination cannot be removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RemoveRefusal {
    /// Requests of it are not reported yet.
    Outstanding(u64),
    UnknownDestination,
}

/// A destination's place: its state while it lives, and its generation.
#[derive(Debug, Clone)]
pub(super) struct DestinationState {
    pub(super) generation: u32,
    pub(super) live: bool,
    /// The initiator it posts on: held (dedicated) or bound (static, streams).
    pub(super) initiator: Option<u16>,
    pub(super) stream: u16,
    /// Its address handle, DCT number and DC key, once resolved.
    pub(super) address: Option<Address>,
    /// Consecutive errors that say the target is not there.
    pub(super) retries_exceeded: u32,
    pub(super) unreachable: bool,
    /// Refused with a would-block it waits out on its initiator (queue full, recovering): in its
    /// initiator's `blocked`, reported `Ready` once it may post again.
    blocked: bool,
    /// Refused for its quota: goes in line when it gives its initiator back.
    over_quota: bool,
    /// Removed once every request of it was reported.
    pub(super) retiring: bool,
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
            initiator: None,
            stream: 0,
            address: None,
            retries_exceeded: 0,
            unreachable: false,
            blocked: false,
            over_quota: false,
            retiring: false,
            in_line: false,
            previous: NONE,
            next: NONE,
        }
    }
}

/// A grant from the line not known to be used yet: destination, generation, initiator, which
/// grant, and when it expires.
type GrantTimer = (u32, u32, u16, u64, Instant);

/// The bookkeeping of a pool of initiators `I`.
#[derive(Debug)]
pub(crate) struct PoolCore<I> {
    pub(crate) initiators: Vec<I>,
    pub(super) requests: Vec<InitiatorRequests>,
    pub(super) destinations: Vec<DestinationState>,
    /// Places of removed destinations, for reuse.
    free_places: Vec<u32>,
    pub(super) policy: DcPoolPolicy,
    /// Initiators held by no destination (dedicated policies). Empty while a destination is in
    /// line: a freed initiator goes to the first in line at once.
    pub(super) free: Vec<u16>,
    /// The wait line, linked through the destinations: first and last, and its length.
    line_head: u32,
    line_tail: u32,
    waiting_count: usize,
    /// Destinations granted an initiator from the line, reported at the end of the completion
    /// that granted them, or at the next `poll`/`progress`.
    pub(super) ready: VecDeque<DestinationId>,
    /// Destinations that may post again after a would-block they waited out, reported as `ready`.
    unblocked: VecDeque<DestinationId>,
    /// Destinations removed once their requests were reported, reported as `ready`.
    removed: VecDeque<DestinationId>,
    /// Grants from the line, oldest first.
    grants: VecDeque<GrantTimer>,
    /// How many grants from the line were made (names each).
    granted: u64,
    /// Read while a grant from the line is outstanding, and by stall reports.
    pub(super) clock: Clock,
    grant_timeout: Duration,
    pub(super) unreachable_after: u32,
    pub(super) stalls: StallWatch,
}

impl<I: PooledInitiator> PoolCore<I> {
    /// The bookkeeping of `initiators` under `policy`; a destination is reported unreachable after
    /// `unreachable_after` consecutive "retry exceeded" errors.
    pub(crate) fn new(initiators: Vec<I>, policy: DcPoolPolicy, unreachable_after: u32) -> Self {
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
            ready: VecDeque::new(),
            unblocked: VecDeque::new(),
            removed: VecDeque::new(),
            grants: VecDeque::new(),
            granted: 0,
            clock: Clock::new(Instant::now),
            grant_timeout: Duration::from_millis(10),
            unreachable_after: unreachable_after.max(1),
            stalls: StallWatch::default(),
        }
    }

    pub(crate) fn policy(&self) -> DcPoolPolicy {
        self.policy
    }

    /// Keeps at most `max` requests in flight per initiator (the CQ was sized for that).
    pub(crate) fn limit_send_queue(&mut self, max: u32) {
        for requests in &mut self.requests {
            requests.capacity = requests.capacity.min(u64::from(max.max(1)));
        }
    }

    /// How long a grant from the line that is not used is kept.
    pub(crate) fn set_grant_timeout(&mut self, timeout: Duration) {
        self.grant_timeout = timeout;
    }

    /// Reads the grant timeout's time from `now` (tests: a clock they move; the simulated
    /// fabric: its ticks).
    pub(crate) fn set_clock(&mut self, now: impl Fn() -> Instant + Send + 'static) {
        self.clock = Clock::new(now);
    }

    /// The live state of `destination`, or `None` for a stale or unknown id.
    fn live(&self, destination: DestinationId) -> Option<&DestinationState> {
        self.destinations
            .get(destination.index())
            .filter(|s| s.live && s.generation == destination.generation)
    }

    /// The id of the destination at place `d`.
    pub(super) fn id(&self, d: u32) -> DestinationId {
        DestinationId {
            index: d,
            generation: self.destinations[d as usize].generation,
        }
    }

    /// Whether `destination` is one of this pool's live destinations.
    pub(crate) fn contains(&self, destination: DestinationId) -> bool {
        self.live(destination).is_some()
    }

    /// Sets `destination`'s address (its address handle was created); false for a stale id.
    pub(crate) fn set_address(&mut self, destination: DestinationId, address: Address) -> bool {
        if !self.contains(destination) {
            return false;
        }
        self.destinations[destination.index()].address = Some(address);
        true
    }

    /// `destination`'s address, if resolved.
    pub(crate) fn address(&self, destination: DestinationId) -> Option<Address> {
        self.live(destination)?.address
    }

    /// Requests of destination `d` not reported yet: on the initiator it posts on (it has none
    /// anywhere else: it leaves an initiator only with nothing outstanding there).
    fn outstanding_of(&self, d: u32) -> u64 {
        self.destinations[d as usize]
            .initiator
            .map_or(0, |i| self.requests[i as usize].outstanding_of(d))
    }

    /// Adds a destination; the static and streams policies bind it to its initiator now.
    pub(crate) fn add_destination(&mut self) -> DestinationId {
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
        DestinationId { index, generation }
    }

    /// Binds destination `index` to an initiator in service and a stream by a hash of its index
    /// (static and streams policies); to none when none is in service.
    pub(super) fn bind(&mut self, index: u32) {
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
    pub(crate) fn remove_destination(&mut self, destination: DestinationId) -> Result<(), RemoveRefusal> {
        if !self.contains(destination) {
            return Err(RemoveRefusal::UnknownDestination);
        }
        let d = destination.index;
        let outstanding = self.outstanding_of(d);
        if outstanding > 0 {
            return Err(RemoveRefusal::Outstanding(outstanding));
        }
        self.remove(d);
        Ok(())
    }

    /// Removes destination `d`, which has nothing outstanding.
    fn remove(&mut self, d: u32) {
        // Nothing of it goes in line (a quota it used) nor waits for a Ready.
        let state = &mut self.destinations[d as usize];
        state.over_quota = false;
        state.blocked = false;
        self.unlink(d);
        // A dedicated destination with nothing outstanding holds at most a grant not used yet.
        if self.policy.is_dedicated() {
            if let Some(i) = self.destinations[d as usize].initiator {
                self.release(d, i);
            }
        }
        let state = &mut self.destinations[d as usize];
        state.live = false;
        state.initiator = None;
        state.address = None;
        self.free_places.push(d);
    }

    /// Removes `destination` once every request of it was reported, with a
    /// [`DcPoolEvent::Removed`] (at once when none is outstanding: reported by the next
    /// `poll`/`progress`). It posts nothing from now on.
    pub(crate) fn retire(&mut self, destination: DestinationId) -> Result<(), RemoveRefusal> {
        if !self.contains(destination) || self.destinations[destination.index()].retiring {
            return Err(RemoveRefusal::UnknownDestination);
        }
        let d = destination.index;
        self.destinations[d as usize].retiring = true;
        self.unlink(d);
        match self.destinations[d as usize].initiator {
            Some(i) if self.outstanding_of(d) > 0 => self.requests[i as usize].retiring.push(d),
            _ => {
                self.remove(d);
                self.removed.push_back(destination);
            },
        }
        Ok(())
    }

    /// Removes the destinations retiring on `initiator` whose requests were all reported.
    pub(super) fn remove_retired(&mut self, initiator: usize) {
        let mut k = 0;
        while k < self.requests[initiator].retiring.len() {
            let d = self.requests[initiator].retiring[k];
            if self.requests[initiator].outstanding_of(d) > 0 {
                k += 1;
                continue;
            }
            self.requests[initiator].retiring.swap_remove(k);
            let id = self.id(d);
            self.remove(d);
            self.removed.push_back(id);
        }
    }

    /// What the bookkeeping holds (address handles are the pool's, counted there).
    pub(crate) fn footprint(&self) -> DcPoolFootprint {
        DcPoolFootprint {
            destination_places: self.destinations.len(),
            live_destinations: self.destinations.len() - self.free_places.len(),
            address_handles: 0,
            waiting: self.waiting_count,
            grant_timers: self.grants.len(),
            batch_records: self.requests.iter().map(|r| r.batches.len()).sum(),
            ready_events: self.ready.len() + self.unblocked.len() + self.removed.len(),
        }
    }

    /// The initiator (and stream) `destination` posts on now, if any.
    pub(crate) fn assignment(&self, destination: DestinationId) -> Option<(usize, Option<u16>)> {
        let state = self.live(destination)?;
        let initiator = state.initiator? as usize;
        Some((
            initiator,
            (self.requests[initiator].streams > 0).then_some(state.stream),
        ))
    }

    /// Whether `initiator` has DCI streams.
    pub(crate) fn has_streams(&self, initiator: usize) -> bool {
        self.requests[initiator].streams > 0
    }

    /// Requests of `destination` posted and not yet reported.
    pub(crate) fn outstanding(&self, destination: DestinationId) -> u64 {
        self.live(destination)
            .map_or(0, |_| self.outstanding_of(destination.index))
    }

    /// Destinations in line for an initiator, first first.
    pub(crate) fn waiting(&self) -> impl Iterator<Item = DestinationId> + '_ {
        let mut at = self.line_head;
        std::iter::from_fn(move || {
            (at != NONE).then(|| {
                let id = self.id(at);
                at = self.destinations[at as usize].next;
                id
            })
        })
    }

    /// Why `destination` can or cannot post now, read from the same records (and in the same
    /// order) as [`begin`](Self::begin) reads them.
    pub(crate) fn state(&self, destination: DestinationId) -> super::types::DestinationState {
        use super::types::DestinationState as Answer;
        let Some(state) = self.live(destination) else {
            return Answer::Unknown;
        };
        if state.unreachable {
            return Answer::Unreachable;
        }
        if state.retiring {
            return Answer::Retiring {
                outstanding: self.outstanding_of(destination.index),
            };
        }
        let Some(i) = state.initiator else {
            if state.in_line {
                // Its place: how many are before it, counted back along the line's links.
                let mut place = 0;
                let mut at = state.previous;
                while at != NONE {
                    place += 1;
                    at = self.destinations[at as usize].previous;
                }
                return Answer::InLine { place };
            }
            if self.requests.iter().all(|r| r.out_of_service) {
                return Answer::NoInitiatorInService;
            }
            return Answer::Idle;
        };
        let initiator = i as usize;
        let stream = (self.requests[initiator].streams > 0).then_some(state.stream);
        if self.quota_left(initiator) == 0 {
            return Answer::OverQuota { initiator };
        }
        match self.initiator_refusal(initiator, state.stream) {
            Some(DcPoolWouldBlock::Recovering { initiator, stream }) => Answer::Recovering { initiator, stream },
            // The only other reason an initiator gives.
            Some(_) => Answer::QueueFull { initiator, stream },
            None => Answer::Holds { initiator, stream },
        }
    }

    /// What is left of the quota of initiator `initiator`'s holder while others wait in line
    /// (`usize::MAX` without a quota or a line). The holder is not in line while it holds an
    /// initiator: once it gave it back, its next post goes to the end of the line.
    #[inline]
    fn quota_left(&self, initiator: usize) -> usize {
        match (self.policy, self.waiting_count > 0) {
            (DcPoolPolicy::DedicatedWithQuota { quota }, true) => {
                let requests = &self.requests[initiator];
                let posted = requests.head - requests.hold_start;
                u64::from(quota.max(1)).saturating_sub(posted) as usize
            },
            _ => usize::MAX,
        }
    }

    /// Why nothing can be posted on initiator `initiator` (on `stream`) now: it or the stream
    /// is being recovered, or its send queue is full.
    #[inline]
    fn initiator_refusal(&self, initiator: usize, stream: u16) -> Option<DcPoolWouldBlock> {
        let requests = &self.requests[initiator];
        if requests.whole_error || requests.out_of_service {
            Some(DcPoolWouldBlock::Recovering {
                initiator,
                stream: None,
            })
        } else if requests.lanes[stream as usize].errored {
            Some(DcPoolWouldBlock::Recovering {
                initiator,
                stream: Some(stream),
            })
        } else if requests.room() == 0 {
            Some(DcPoolWouldBlock::QueueFull)
        } else {
            None
        }
    }

    /// Whether `destination` was reported unreachable.
    pub(crate) fn is_unreachable(&self, destination: DestinationId) -> bool {
        self.live(destination).is_some_and(|d| d.unreachable)
    }

    /// Lets an unreachable destination post again.
    pub(crate) fn revive(&mut self, destination: DestinationId) {
        if self.contains(destination) {
            let state = &mut self.destinations[destination.index()];
            state.unreachable = false;
            state.retries_exceeded = 0;
        }
    }

    /// Takes `destination` out of line for an initiator, and gives back a grant from the line it
    /// has not used.
    pub(crate) fn cancel_wait(&mut self, destination: DestinationId) {
        if !self.contains(destination) {
            return;
        }
        let d = destination.index;
        self.unlink(d);
        if let (true, Some(i)) = (self.policy.is_dedicated(), self.destinations[d as usize].initiator) {
            let requests = &self.requests[i as usize];
            if requests.outstanding() == 0 && !requests.whole_error {
                self.release(d, i);
            }
        }
    }

    /// Grants `destination` an initiator (and stream) for one batch, or says why not. A
    /// dedicated policy's destination without an initiator takes a free one, or goes in line.
    #[inline(always)]
    pub(crate) fn begin(&mut self, destination: DestinationId) -> Result<Grant, Refusal> {
        let state = self.live(destination).ok_or(Refusal::UnknownDestination)?;
        let d = destination.index;
        if state.unreachable {
            return Err(Refusal::Unreachable);
        }
        if state.retiring {
            return Err(Refusal::Retiring);
        }
        let address = state.address.ok_or(Refusal::Unresolved)?;
        let stream = state.stream;
        let mut quota_left = usize::MAX;
        let initiator = match (self.policy, state.initiator) {
            (_, Some(i)) => {
                quota_left = self.quota_left(i as usize);
                if quota_left == 0 {
                    self.destinations[d as usize].over_quota = true;
                    return Err(Refusal::WouldBlock(DcPoolWouldBlock::QuotaExhausted));
                }
                i as usize
            },
            (DcPoolPolicy::Static | DcPoolPolicy::Streams, None) => return Err(Refusal::NoInitiatorInService),
            (_, None) => self.take_free(d)? as usize,
        };
        if let Some(reason) = self.initiator_refusal(initiator, stream) {
            self.block(d, initiator);
            return Err(Refusal::WouldBlock(reason));
        }
        let requests = &self.requests[initiator];
        let room = requests.room().min(quota_left);
        Ok(Grant {
            destination: d,
            initiator,
            stream,
            address,
            first: requests.head,
            slot: requests.slot(requests.head),
            room,
        })
    }

    /// Destination `d` waits for initiator `initiator` (room, or its recovery).
    fn block(&mut self, d: u32, initiator: usize) {
        let state = &mut self.destinations[d as usize];
        if !state.blocked {
            state.blocked = true;
            self.requests[initiator].blocked.push((d, state.generation));
        }
    }

    /// Reports `Ready` for the destinations waiting for `initiator` that may post again: it has
    /// room and is not in error (their stream not either), or it is out of service (they were
    /// bound to others, or hold nothing).
    pub(super) fn unblock(&mut self, initiator: usize) {
        let requests = &self.requests[initiator];
        if requests.blocked.is_empty() || requests.whole_error {
            return;
        }
        let lost = requests.out_of_service;
        let room = lost || requests.room() > 0;
        let mut k = 0;
        while k < self.requests[initiator].blocked.len() {
            let requests = &mut self.requests[initiator];
            let (d, generation) = requests.blocked[k];
            let state = &mut self.destinations[d as usize];
            if !state.live || state.generation != generation {
                // Removed since.
                requests.blocked.swap_remove(k);
            } else if room && (lost || !requests.lanes[state.stream as usize].errored) {
                requests.blocked.swap_remove(k);
                state.blocked = false;
                self.unblocked.push_back(DestinationId { index: d, generation });
            } else {
                k += 1;
            }
        }
    }

    /// A free initiator for dedicated destination `d`, which holds it from now on; none free: `d`
    /// goes in line.
    fn take_free(&mut self, d: u32) -> Result<u16, Refusal> {
        let Some(i) = self.free.pop() else {
            if self.requests.iter().all(|r| r.out_of_service) {
                return Err(Refusal::NoInitiatorInService);
            }
            self.enqueue(d);
            return Err(Refusal::WouldBlock(DcPoolWouldBlock::NoInitiator));
        };
        self.hold(d, i);
        Ok(i)
    }

    /// Destination `d` holds initiator `i` from now on.
    fn hold(&mut self, d: u32, i: u16) {
        self.unlink(d);
        self.destinations[d as usize].initiator = Some(i);
        let requests = &mut self.requests[i as usize];
        requests.holder = Some(d);
        requests.hold_start = requests.head;
    }

    /// Ends a batch granted to destination `d` on `initiator`'s `stream`: `posted` requests
    /// went to the provider (0 when it was dropped or refused), their `wr_id`s kept from the
    /// grant's first on.
    #[inline(always)]
    pub(crate) fn commit(&mut self, initiator: usize, d: u32, stream: u16, posted: usize) {
        if posted > 0 {
            self.requests[initiator].record(d, stream, posted as u64);
        } else {
            // A dedicated destination that posted nothing gives back what it was granted.
            self.release_holder_if_idle(initiator);
        }
    }

    /// Gives a held initiator back once its holder has nothing outstanding and it needs no
    /// recovery (dedicated policies: a held initiator carries only its holder's requests).
    #[inline]
    pub(super) fn release_holder_if_idle(&mut self, initiator: usize) {
        let requests = &self.requests[initiator];
        if let (Some(holder), 0, false) = (requests.holder, requests.outstanding(), requests.whole_error) {
            self.release(holder, initiator as u16);
        }
    }

    /// Destination `d` gives initiator `i` back: to the line or the free ones (unless it is out
    /// of service).
    fn release(&mut self, d: u32, i: u16) {
        self.unhold(d);
        let requests = &mut self.requests[i as usize];
        requests.holder = None;
        if !requests.out_of_service {
            self.give(i);
        }
    }

    /// Destination `d` holds its initiator no more (given back or lost): refused for its quota,
    /// it waits for a `Ready`, so it goes in line, its turn coming again after those in line.
    fn unhold(&mut self, d: u32) {
        let state = &mut self.destinations[d as usize];
        state.initiator = None;
        if std::mem::take(&mut state.over_quota) && state.live && !state.retiring {
            self.enqueue(d);
        }
    }

    /// A freed initiator (healthy, held by nobody): to the first destination in line, reported
    /// by `Ready` with a grant timer, or to the free ones.
    fn give(&mut self, initiator: u16) {
        let first = self.line_head;
        if first == NONE {
            self.free.push(initiator);
            return;
        }
        self.hold(first, initiator);
        self.granted += 1;
        self.requests[initiator as usize].grant = self.granted;
        let id = self.id(first);
        self.ready.push_back(id);
        // A timeout past the clock's end (`Duration::MAX`): the grant never expires.
        if let Some(expires) = self.clock.now().checked_add(self.grant_timeout) {
            self.grants
                .push_back((first, id.generation, initiator, self.granted, expires));
        }
    }

    /// Puts destination `d` at the end of the line.
    fn enqueue(&mut self, d: u32) {
        if self.destinations[d as usize].in_line {
            return;
        }
        let tail = self.line_tail;
        let state = &mut self.destinations[d as usize];
        state.in_line = true;
        state.previous = tail;
        state.next = NONE;
        if tail == NONE {
            self.line_head = d;
        } else {
            self.destinations[tail as usize].next = d;
        }
        self.line_tail = d;
        self.waiting_count += 1;
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
    }

    /// Takes initiator `initiator`, which holds nothing, out of service: its holder loses it, and
    /// the destinations bound to it (static and streams policies) are bound to the others.
    pub(super) fn take_out_of_service(&mut self, initiator: usize) {
        let requests = &mut self.requests[initiator];
        requests.out_of_service = true;
        requests.whole_error = false;
        let holder = requests.holder.take();
        self.free.retain(|&i| i as usize != initiator);
        if let Some(holder) = holder {
            self.unhold(holder);
            // Back in line, it takes a free initiator if there is one.
            if self.line_head != NONE {
                if let Some(free) = self.free.pop() {
                    self.give(free);
                }
            }
        }
        self.unblock(initiator);
        if !self.policy.is_dedicated() {
            // They have nothing outstanding on it.
            for d in 0..self.destinations.len() {
                let state = &self.destinations[d];
                if state.live && state.initiator == Some(initiator as u16) {
                    self.bind(d as u32);
                }
            }
        }
    }

    /// One `poll` (or `progress`): grants from the line that were not used within the timeout
    /// go back (the clock is read only while there are any); stalled destinations and ready
    /// destinations are reported.
    pub(crate) fn tick(&mut self, sink: &mut impl FnMut(DcPoolEvent)) {
        let now = if self.grants.is_empty() {
            None
        } else {
            Some(self.clock.now())
        };
        while let (Some(&(d, generation, initiator, grant, expires)), Some(now)) = (self.grants.front(), now) {
            if expires > now {
                break;
            }
            self.grants.pop_front();
            let state = &self.destinations[d as usize];
            let requests = &self.requests[initiator as usize];
            let unused = state.live
                && state.generation == generation
                && state.initiator == Some(initiator)
                && requests.grant == grant
                && requests.head == requests.hold_start
                && requests.outstanding() == 0
                && !requests.whole_error;
            if unused {
                self.release(d, initiator);
            }
        }
        self.watch_stalls(sink);
        self.report_ready(sink);
    }

    /// Reports the destinations granted an initiator from the line, those that may post again
    /// after a would-block, and those removed once their requests were reported.
    pub(super) fn report_ready(&mut self, sink: &mut impl FnMut(DcPoolEvent)) {
        while let Some(destination) = self.removed.pop_front() {
            sink(DcPoolEvent::Removed { destination });
        }
        while let Some(destination) = self.unblocked.pop_front() {
            if self.contains(destination) {
                sink(DcPoolEvent::Ready { destination });
            }
        }
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
}

/// What the bookkeeping's records say together, checked by the tests after every step.
#[cfg(test)]
mod invariants {
    use super::*;

    impl<I: PooledInitiator> PoolCore<I> {
        /// Whether `destination` waits out a would-block on an initiator, or its `Ready` for
        /// one it waited out is to be reported: either way a `Ready` comes.
        pub(crate) fn awaits_ready(&self, destination: DestinationId) -> bool {
            let waits_out = self
                .requests
                .iter()
                .any(|r| r.blocked.contains(&(destination.index, destination.generation)));
            self.contains(destination) && (waits_out || self.unblocked.contains(&destination))
        }

        /// Checks what is derived from more than one record.
        pub(crate) fn check_invariants(&self) {
            for (i, requests) in self.requests.iter().enumerate() {
                requests.check_invariants(i);
                // A reported batch stays behind one of another stream that is not, whatever
                // became of its destination.
                for batch in requests.batches.iter().filter(|b| b.settled < b.end) {
                    assert!(self.destinations[batch.destination as usize].live);
                    if let Some(holder) = requests.holder {
                        assert_eq!(
                            holder, batch.destination,
                            "a held initiator carries only its holder's requests"
                        );
                    }
                }
            }
            for (d, state) in self.destinations.iter().enumerate() {
                if !state.live {
                    assert!(!state.in_line && state.initiator.is_none(), "destination {d}: removed");
                    continue;
                }
                if let Some(i) = state.initiator {
                    // A grant names the stream as is: 0 on an initiator without streams.
                    assert!(state.stream < self.requests[i as usize].streams.max(1) as u16);
                    if !self.policy.is_dedicated() {
                        assert!(!self.requests[i as usize].out_of_service, "bound to a lost initiator");
                    }
                }
            }
            // The line, walked both ways, holds exactly the destinations marked in it.
            let mut count = 0;
            let (mut at, mut previous) = (self.line_head, NONE);
            while at != NONE {
                let state = &self.destinations[at as usize];
                assert!(state.live && state.in_line && state.previous == previous);
                (previous, at) = (at, state.next);
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
                    "waiting while initiators are free"
                );
                let held = self.requests.iter().filter(|r| r.holder.is_some()).count();
                let lost = self
                    .requests
                    .iter()
                    .filter(|r| r.out_of_service && r.holder.is_none())
                    .count();
                assert_eq!(held + self.free.len() + lost, self.requests.len(), "held, free or lost");
                for (i, requests) in self.requests.iter().enumerate() {
                    if let Some(holder) = requests.holder {
                        let state = &self.destinations[holder as usize];
                        assert!(state.live && !state.in_line && state.initiator == Some(i as u16));
                        assert!(
                            requests.outstanding() > 0 || requests.whole_error || requests.head == requests.hold_start,
                            "a holder with nothing outstanding gave its initiator back"
                        );
                    }
                    if self.free.contains(&(i as u16)) {
                        assert!(!requests.troubled() && requests.outstanding() == 0, "a free initiator");
                    }
                }
            }
        }
    }
}
