//! The pool's bookkeeping, apart from any device: its destinations, which initiator (and
//! stream) each posts on, and the grant of one batch (`begin`) or the refusal. It holds no
//! initiator, so that a batch borrows its initiator while the bookkeeping records it.
use std::collections::VecDeque;
use std::time::Instant;

use sideway_ext::mlx5::dc::endpoint::DcEndpoint;

use self::destination::{Assignment, Reach};
use self::stall::StallWatch;
use crate::initiator::PoolInitiator;
use crate::requests::{Health, InitiatorRequests};
use crate::settings::DcPoolSettings;
use crate::types::{DcPoolEvent, DcPoolFootprint, DcPoolPolicy, DcPoolWouldBlock, DestinationId};

mod completions;
mod destination;
mod holds;
mod stall;

/// Why a post to a destination is refused, as the bookkeeping sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    WouldBlock(DcPoolWouldBlock),
    Unresolved,
    Unreachable,
    /// It is removed once its requests are reported ([`PoolCore::retire`]).
    Retiring,
    NoInitiatorInService,
    UnknownDestination,
    StreamsMismatch {
        streams_pool: bool,
    },
}

/// What a destination was granted for one batch ([`PoolCore::begin`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    /// Its place.
    pub(crate) destination: u32,
    pub(crate) initiator: usize,
    pub(crate) stream: u16,
    /// The DCT number and DC key.
    pub(crate) address: (u32, u64),
    /// The batch's first request number, its place in the pool's rings, and how many it may hold.
    pub(crate) first: u64,
    pub(crate) slot: usize,
    pub(crate) room: usize,
}

/// Why a destination cannot be removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RemoveRefusal {
    Outstanding(u64),
    UnknownDestination,
}

/// One live destination.
#[derive(Debug)]
pub(crate) struct Destination {
    /// Its DC target's endpoint, unless it was added by its address alone.
    endpoint: Option<DcEndpoint>,
    /// The DCT number and DC key its requests name, once its address is made.
    address: Option<(u32, u64)>,
    assignment: Assignment,
    reach: Reach,
    /// It posts no more, and is removed once its requests were reported.
    retiring: bool,
}

/// A place for a destination: the one living there, if any, and how many lived there before.
#[derive(Debug)]
pub(crate) struct Place {
    generation: u32,
    destination: Option<Destination>,
}

/// The bookkeeping of a pool of initiators.
#[derive(Debug)]
pub(crate) struct PoolCore {
    requests: Vec<InitiatorRequests>,
    places: Vec<Place>,
    /// Places of removed destinations, for reuse.
    free_places: Vec<u32>,
    /// Places removed since the pool last dropped their addresses ([`take_removed`](Self::take_removed)).
    removed_places: Vec<u32>,
    /// Initiators held by no destination (dedicated policies); empty while a destination is in line.
    free: Vec<u16>,
    /// The ends of the wait line, linked through its destinations ([`Assignment::InLine`]).
    line_ends: Option<(u32, u32)>,
    /// Destinations granted an initiator from the line, by which grant, to report.
    ready: VecDeque<(DestinationId, u64)>,
    /// Destinations that may post again after a would-block, and retired ones removed, to report.
    unblocked: VecDeque<DestinationId>,
    removed: VecDeque<DestinationId>,
    /// Retiring destinations whose requests a completion just reported: removed if none is left.
    retiring_settled: Vec<u32>,
    /// Grants from the line, oldest first: destination, initiator, which grant, when it expires.
    grants: VecDeque<(DestinationId, u16, u64, Instant)>,
    /// How many grants from the line were made (names each).
    granted: u64,
    settings: DcPoolSettings,
    stalls: StallWatch,
}

/// The live destination `id` names in `places`, or `None` for a stale or unknown id.
#[inline]
fn live(places: &[Place], id: DestinationId) -> Option<&Destination> {
    let place = places.get(id.index())?;
    (place.generation == id.generation()).then_some(place.destination.as_ref()?)
}

impl PoolCore {
    pub(crate) fn new<I: PoolInitiator>(initiators: &[I], settings: &DcPoolSettings) -> Self {
        let policy = settings.policy();
        let mut requests: Vec<InitiatorRequests> = Vec::with_capacity(initiators.len());
        for initiator in initiators {
            let ring_start = requests.last().map_or(0, InitiatorRequests::ring_end);
            requests.push(InitiatorRequests::new(
                initiator.qp_number(),
                initiator.max_send_wr(),
                initiator.stream_count(),
                ring_start,
            ));
        }
        // Every index fits in 16 bits (MAX_INITIATORS): 65 536 initiators are 0..=65 535.
        let free = if policy.is_dedicated() {
            (0..initiators.len()).rev().map(|i| i as u16).collect()
        } else {
            Vec::new()
        };
        Self {
            requests,
            places: Vec::new(),
            free_places: Vec::new(),
            removed_places: Vec::new(),
            free,
            line_ends: None,
            ready: VecDeque::new(),
            unblocked: VecDeque::new(),
            removed: VecDeque::new(),
            retiring_settled: Vec::new(),
            grants: VecDeque::new(),
            granted: 0,
            settings: settings.clone(),
            stalls: StallWatch::new(),
        }
    }

    pub(crate) fn settings(&self) -> &DcPoolSettings {
        &self.settings
    }

    /// Keeps at most `max` requests in flight per initiator (the CQ was sized for that).
    pub(crate) fn limit_send_queue(&mut self, max: u32) {
        self.requests.iter_mut().for_each(|requests| requests.limit(max));
    }

    /// The rings of the callers' `wr_id`s of its initiators, one after another.
    pub(crate) fn wr_ids(&self) -> Box<[u64]> {
        vec![0; self.requests.last().map_or(0, InitiatorRequests::ring_end)].into_boxed_slice()
    }

    #[inline]
    pub(crate) fn live(&self, id: DestinationId) -> Option<&Destination> {
        live(&self.places, id)
    }

    fn live_mut(&mut self, id: DestinationId) -> Option<&mut Destination> {
        let place = self.places.get_mut(id.index())?;
        (place.generation == id.generation()).then_some(place.destination.as_mut()?)
    }

    #[inline]
    fn at(&mut self, d: u32) -> &mut Destination {
        self.places[d as usize]
            .destination
            .as_mut()
            .expect("a destination with requests or a hold lives")
    }

    fn id(&self, d: u32) -> DestinationId {
        DestinationId::new(d, self.places[d as usize].generation)
    }

    pub(crate) fn contains(&self, destination: DestinationId) -> bool {
        self.live(destination).is_some()
    }

    /// Records that `destination`'s address was made from its endpoint.
    pub(crate) fn resolve(&mut self, destination: DestinationId) {
        if let Some(live) = self.live_mut(destination) {
            live.address = live.endpoint.as_ref().map(|e| (e.dct_number(), e.dc_key()));
        }
    }

    pub(crate) fn is_resolved(&self, destination: DestinationId) -> bool {
        self.live(destination).is_some_and(|l| l.address.is_some())
    }

    /// Whether places were removed since the last [`take_removed`](Self::take_removed).
    #[inline]
    pub(crate) fn removed_any(&self) -> bool {
        !self.removed_places.is_empty()
    }

    /// The places removed since the last call, whose addresses the pool drops.
    pub(crate) fn take_removed(&mut self) -> std::vec::Drain<'_, u32> {
        self.removed_places.drain(..)
    }

    pub(crate) fn endpoint(&self, destination: DestinationId) -> Option<&DcEndpoint> {
        self.live(destination)?.endpoint.as_ref()
    }

    fn outstanding_of(&self, d: u32) -> u64 {
        let assignment = self.places[d as usize].destination.as_ref().map(|l| l.assignment);
        assignment
            .and_then(Assignment::initiator)
            .map_or(0, |(i, _)| self.requests[i as usize].outstanding_of(d))
    }

    /// Adds a destination; the static and streams policies bind it to its initiator now.
    pub(crate) fn add_destination(
        &mut self, endpoint: Option<DcEndpoint>, address: Option<(u32, u64)>,
    ) -> DestinationId {
        let destination = Some(Destination {
            endpoint,
            address,
            assignment: Assignment::None,
            reach: Reach::Answering { retries_exceeded: 0 },
            retiring: false,
        });
        let (index, generation) = match self.free_places.pop() {
            Some(index) => {
                let place = &mut self.places[index as usize];
                place.generation = place.generation.wrapping_add(1);
                place.destination = destination;
                (index, place.generation)
            },
            None => {
                let index = u32::try_from(self.places.len()).expect("fewer than 2³² destinations");
                self.places.push(Place {
                    generation: 0,
                    destination,
                });
                (index, 0)
            },
        };
        self.bind(index);
        DestinationId::new(index, generation)
    }

    /// Binds destination `index` by a hash of it to an initiator in service and a stream, or to none.
    fn bind(&mut self, index: u32) {
        if self.settings.policy().is_dedicated() || self.requests.is_empty() {
            return;
        }
        // Fibonacci hashing of the index spreads neighbours over the initiators.
        let hash = u64::from(index).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        let count = self.requests.len() as u64;
        let start = (hash % count) as usize;
        let found = (0..self.requests.len())
            .map(|k| (start + k) % self.requests.len())
            .find(|&i| self.requests[i].health() != Health::OutOfService);
        let assignment = match found {
            Some(i) => Assignment::Bound {
                initiator: i as u16,
                stream: ((hash / count) % u64::from(self.requests[i].lane_count())) as u16,
            },
            None => Assignment::None,
        };
        self.at(index).assignment = assignment;
    }

    pub(crate) fn remove_destination(&mut self, destination: DestinationId) -> Result<(), RemoveRefusal> {
        if !self.contains(destination) {
            return Err(RemoveRefusal::UnknownDestination);
        }
        let outstanding = self.outstanding_of(destination.index() as u32);
        if outstanding > 0 {
            return Err(RemoveRefusal::Outstanding(outstanding));
        }
        self.remove(destination.index() as u32);
        Ok(())
    }

    /// Removes destination `d`, which has nothing outstanding.
    fn remove(&mut self, d: u32) {
        self.unlink(d);
        if let Assignment::Holds { initiator, .. } = self.at(d).assignment {
            // Nothing of it goes in line for a quota it used.
            self.at(d).assignment = Assignment::None;
            self.give_back(initiator);
        }
        self.places[d as usize].destination = None;
        self.free_places.push(d);
        self.removed_places.push(d);
    }

    pub(crate) fn retire(&mut self, destination: DestinationId) -> Result<(), RemoveRefusal> {
        match self.live_mut(destination) {
            Some(live) if !live.retiring => live.retiring = true,
            _ => return Err(RemoveRefusal::UnknownDestination),
        }
        let d = destination.index() as u32;
        self.unlink(d);
        if self.outstanding_of(d) == 0 {
            self.remove(d);
            self.removed.push_back(destination);
        }
        Ok(())
    }

    /// Removes the retiring destinations a completion reported requests of, once none is outstanding.
    fn remove_retired(&mut self) {
        while let Some(d) = self.retiring_settled.pop() {
            let retired = self.places[d as usize].destination.as_ref().is_some_and(|l| l.retiring);
            if retired && self.outstanding_of(d) == 0 {
                let id = self.id(d);
                self.remove(d);
                self.removed.push_back(id);
            }
        }
    }

    pub(crate) fn footprint(&self) -> DcPoolFootprint {
        let live = || self.places.iter().filter_map(|p| p.destination.as_ref());
        DcPoolFootprint {
            destination_places: self.places.len(),
            live_destinations: self.places.len() - self.free_places.len(),
            address_handles: live().filter(|l| l.endpoint.is_some() && l.address.is_some()).count(),
            waiting: self.waiting().count(),
            grant_timers: self.grants.len(),
            batch_records: self.requests.iter().map(InitiatorRequests::record_count).sum(),
            ready_events: self.ready.len() + self.unblocked.len() + self.removed.len(),
        }
    }

    pub(crate) fn destination_count(&self) -> usize {
        self.places.len() - self.free_places.len()
    }

    pub(crate) fn assignment(&self, destination: DestinationId) -> Option<(usize, Option<u16>)> {
        let (initiator, stream) = self.live(destination)?.assignment.initiator()?;
        let initiator = initiator as usize;
        Some((initiator, self.requests[initiator].has_streams().then_some(stream)))
    }

    pub(crate) fn has_streams(&self, initiator: usize) -> bool {
        self.requests[initiator].has_streams()
    }

    pub(crate) fn outstanding(&self, destination: DestinationId) -> u64 {
        self.live(destination)
            .map_or(0, |_| self.outstanding_of(destination.index() as u32))
    }

    /// Why `destination` can or cannot post now, read as [`begin`](Self::begin) reads it.
    pub(crate) fn state(&self, destination: DestinationId) -> crate::types::DestinationState {
        use crate::types::DestinationState as Answer;
        let Some(live) = self.live(destination) else {
            return Answer::Unknown;
        };
        if live.is_unreachable() {
            return Answer::Unreachable;
        }
        if live.retiring {
            return Answer::Retiring {
                outstanding: self.outstanding_of(destination.index() as u32),
            };
        }
        let (initiator, stream) = match live.assignment {
            Assignment::InLine { .. } => {
                return Answer::InLine {
                    place: self.waiting().position(|id| id == destination).unwrap_or(0),
                }
            },
            Assignment::None if self.requests.iter().all(|r| r.health() == Health::OutOfService) => {
                return Answer::NoInitiatorInService
            },
            Assignment::None => return Answer::Idle,
            Assignment::Holds { initiator, since, .. } => {
                if self.quota_left(initiator as usize, since) == 0 {
                    return Answer::OverQuota {
                        initiator: initiator as usize,
                    };
                }
                (initiator as usize, 0)
            },
            Assignment::Bound { initiator, stream } => (initiator as usize, stream),
        };
        let stream_if_any = self.requests[initiator].has_streams().then_some(stream);
        let requests = &self.requests[initiator];
        if requests.open(stream).is_some() {
            return Answer::Holds {
                initiator,
                stream: stream_if_any,
            };
        }
        match requests.refusal(initiator, stream) {
            DcPoolWouldBlock::Recovering { initiator, stream } => Answer::Recovering { initiator, stream },
            // The only other reason an initiator gives.
            _ => Answer::QueueFull {
                initiator,
                stream: stream_if_any,
            },
        }
    }

    /// What is left of the quota of `initiator`'s holder while others wait in line (`usize::MAX`
    /// without a quota or a line).
    #[inline]
    fn quota_left(&self, initiator: usize, since: u64) -> usize {
        match (self.settings.policy(), self.line_ends.is_some()) {
            (DcPoolPolicy::DedicatedWithQuota { quota }, true) => {
                let posted = self.requests[initiator].head() - since;
                u64::from(quota.max(1)).saturating_sub(posted) as usize
            },
            _ => usize::MAX,
        }
    }

    pub(crate) fn is_unreachable(&self, destination: DestinationId) -> bool {
        self.live(destination).is_some_and(Destination::is_unreachable)
    }

    pub(crate) fn revive(&mut self, destination: DestinationId) {
        if let Some(live) = self.live_mut(destination) {
            live.reach = Reach::Answering { retries_exceeded: 0 };
        }
    }

    /// Grants `destination` an initiator (and stream) for one batch, or says why not; `streams`:
    /// the caller posts on a stream (a pool of the streams policy must).
    // inline(always): with #[inline] the post path's steps stayed calls; the pool rows of
    // `scripts/bench` then broke their limits.
    #[inline(always)]
    pub(crate) fn begin(&mut self, destination: DestinationId, streams: bool) -> Result<Grant, Refusal> {
        if streams != (self.settings.policy() == DcPoolPolicy::Streams) {
            return Err(Refusal::StreamsMismatch { streams_pool: !streams });
        }
        let live = live(&self.places, destination).ok_or(Refusal::UnknownDestination)?;
        let d = destination.index() as u32;
        if live.reach == Reach::Unreachable {
            return Err(Refusal::Unreachable);
        }
        if live.retiring {
            return Err(Refusal::Retiring);
        }
        let address = live.address.ok_or(Refusal::Unresolved)?;
        let (initiator, stream, quota_left) = match live.assignment {
            Assignment::Holds { initiator, since, .. } => {
                let quota_left = self.quota_left(initiator as usize, since);
                if quota_left == 0 {
                    if let Assignment::Holds { over_quota, .. } = &mut self.at(d).assignment {
                        *over_quota = true;
                    }
                    return Err(Refusal::WouldBlock(DcPoolWouldBlock::QuotaExhausted));
                }
                (initiator as usize, 0, quota_left)
            },
            Assignment::Bound { initiator, stream } => (initiator as usize, stream, usize::MAX),
            Assignment::None | Assignment::InLine { .. } if !self.settings.policy().is_dedicated() => {
                return Err(Refusal::NoInitiatorInService)
            },
            Assignment::None | Assignment::InLine { .. } => (self.take_free(d)? as usize, 0, usize::MAX),
        };
        let Some((first, slot, room)) = self.requests[initiator].open(stream) else {
            let reason = self.requests[initiator].refusal(initiator, stream);
            self.requests[initiator].block(destination);
            return Err(Refusal::WouldBlock(reason));
        };
        Ok(Grant {
            destination: d,
            initiator,
            stream,
            address,
            first,
            slot,
            room: room.min(quota_left),
        })
    }

    /// Ends a batch granted to destination `d`, of `posted` requests (0 when dropped or refused).
    #[inline]
    pub(crate) fn commit(&mut self, initiator: usize, d: u32, stream: u16, posted: usize) {
        if posted > 0 {
            self.requests[initiator].record(d, stream, posted as u64);
        } else {
            self.end_unposted(initiator, d);
        }
    }

    /// Out of line, keeping the post guard in registers.
    #[inline(never)]
    fn end_unposted(&mut self, initiator: usize, d: u32) {
        self.release_if_idle(d, initiator);
    }

    /// One `poll` (or `progress`): unused grants expire, stalls and ready destinations are reported.
    pub(crate) fn tick(&mut self, sink: &mut impl FnMut(DcPoolEvent)) {
        if !self.grants.is_empty() {
            self.expire_grants();
        }
        self.watch_stalls(sink);
        self.report_ready(sink);
    }

    fn report_ready(&mut self, sink: &mut impl FnMut(DcPoolEvent)) {
        while let Some(destination) = self.removed.pop_front() {
            sink(DcPoolEvent::Removed { destination });
        }
        while let Some(destination) = self.unblocked.pop_front() {
            if self.contains(destination) {
                sink(DcPoolEvent::Ready { destination });
            }
        }
        while let Some((destination, granted)) = self.ready.pop_front() {
            // Still holding what it was granted (not cancelled, removed or expired since).
            let Some(Assignment::Holds { initiator, grant, .. }) = self.live(destination).map(|l| l.assignment) else {
                continue;
            };
            if grant != granted {
                continue;
            }
            // The grant's timer runs from here; past the clock's end (`Duration::MAX`), never.
            if let Some(expires) = self.settings.now().checked_add(self.settings.grant_timeout()) {
                self.grants.push_back((destination, initiator, grant, expires));
            }
            sink(DcPoolEvent::Ready { destination });
        }
    }
}
