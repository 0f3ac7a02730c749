//! An initiator's requests: its ring of the callers' `wr_id`s, the records that say whose
//! requests they are and which were reported, and the errors of its streams.
//!
//! The provider-visible `wr_id` is `initiator << 48 | number` (requests numbered in posting order,
//! modulo 2⁴⁸); the caller's `wr_id` is kept in the ring at that number, so a completion names its
//! request exactly, also when DCI streams complete out of posting order.
use std::collections::VecDeque;

use super::types::{DcPoolWouldBlock, DestinationId};

/// Bits of the provider-visible `wr_id` that number an initiator's requests.
const NUMBER_BITS: u32 = 48;
const NUMBER_MASK: u64 = (1 << NUMBER_BITS) - 1;
/// The largest pool.
pub(crate) const MAX_INITIATORS: usize = 1 << (64 - NUMBER_BITS);

#[inline]
pub(crate) fn encode(initiator: usize, number: u64) -> u64 {
    ((initiator as u64) << NUMBER_BITS) | (number & NUMBER_MASK)
}

#[inline]
pub(crate) fn initiator_of(wr_id: u64) -> usize {
    (wr_id >> NUMBER_BITS) as usize
}

/// A run of one destination's requests on one stream, over one or more consecutive batches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    /// The destination's place, and the stream (0 without streams).
    destination: u32,
    stream: u16,
    first: u64,
    end: u64,
    /// The first request not yet reported.
    settled: u64,
}

impl Record {
    pub(crate) fn destination(&self) -> u32 {
        self.destination
    }

    pub(crate) fn stream(&self) -> u16 {
        self.stream
    }

    fn unsettled(&self) -> u64 {
        self.end - self.settled
    }
}

/// The callers' `wr_id`s of a run of requests being reported, in order.
#[derive(Debug)]
pub(super) struct Run<'a> {
    ring: &'a [u64],
    numbers: std::ops::Range<u64>,
}

impl Iterator for Run<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        let number = self.numbers.next()?;
        // The mask from the ring's length (a power of two), so that the read needs no bounds check.
        Some(self.ring[(number & (self.ring.len() as u64 - 1)) as usize])
    }
}

/// Whether an initiator can take requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Health {
    /// In service; some of its streams may be in error.
    InService,
    /// In ERR: recovered once it holds nothing.
    Error,
    /// Its recovery failed.
    OutOfService,
}

/// One initiator's requests, and its state.
#[derive(Debug)]
pub(super) struct InitiatorRequests {
    /// The queue pair number its completions carry (changed only by a recovery).
    qp_number: u32,
    /// Where its ring starts in the pool's rings (kept apart from the bookkeeping, so that an open
    /// batch writes its places while it holds the bookkeeping to end the batch).
    ring_start: usize,
    /// Its ring's size less one: a power of two that divides 2⁴⁸.
    mask: u64,
    /// Requests it may hold at once (its send queue), and the number of the next.
    capacity: u64,
    head: u64,
    /// How many requests were reported (a count, so that no grant walks the records).
    reported: u64,
    batches: VecDeque<Record>,
    streams: u32,
    /// Per stream (one without streams): the destination whose request failed, while it is flushed.
    lanes: Box<[Option<u32>]>,
    health: Health,
    /// Destinations refused a batch on it, each once, waiting for a `Ready`.
    blocked: Vec<DestinationId>,
}

impl InitiatorRequests {
    /// An initiator's requests, its ring from `ring_start` on; the next one's starts at
    /// [`ring_end`](Self::ring_end).
    pub(super) fn new(qp_number: u32, capacity: u32, streams: u32, ring_start: usize) -> Self {
        // Twice the send queue, and with streams one send queue per stream: a request completed
        // out of order frees its send-queue slot at once, but its place in the ring only once
        // every request before it was reported. (At most 2⁴⁸, which it then divides.)
        let size = (u64::from(capacity.max(1)) * u64::from(streams.max(2)))
            .next_power_of_two()
            .min(NUMBER_MASK + 1);
        Self {
            qp_number,
            ring_start,
            mask: size - 1,
            capacity: u64::from(capacity.max(1)),
            head: 0,
            reported: 0,
            batches: VecDeque::new(),
            streams,
            lanes: vec![None; streams.max(1) as usize].into_boxed_slice(),
            health: Health::InService,
            blocked: Vec::new(),
        }
    }

    pub(super) fn ring_end(&self) -> usize {
        self.ring_start + self.mask as usize + 1
    }

    pub(super) fn limit(&mut self, max: u32) {
        self.capacity = self.capacity.min(u64::from(max.max(1)));
    }

    #[inline]
    pub(super) fn head(&self) -> u64 {
        self.head
    }

    #[inline]
    pub(super) fn has_streams(&self) -> bool {
        self.streams > 0
    }

    /// How many streams a destination may be bound to (1 without streams).
    pub(super) fn lane_count(&self) -> u32 {
        self.streams.max(1)
    }

    pub(super) fn health(&self) -> Health {
        self.health
    }

    pub(super) fn record_count(&self) -> usize {
        self.batches.len()
    }

    /// Whether stream `lane` had an error completion and is being flushed.
    #[inline]
    pub(super) fn lane_errored(&self, lane: u16) -> bool {
        self.lanes[lane as usize].is_some()
    }

    #[inline]
    pub(super) fn outstanding(&self) -> u64 {
        self.head - self.reported
    }

    pub(super) fn outstanding_of(&self, d: u32) -> u64 {
        self.batches
            .iter()
            .filter(|b| b.destination == d)
            .map(Record::unsettled)
            .sum()
    }

    /// The oldest request not reported yet (`head` when none is).
    #[inline]
    fn oldest(&self) -> u64 {
        self.batches.front().map_or(self.head, |b| b.settled)
    }

    /// How many more requests a batch may hold now: free send-queue slots, and places in the ring
    /// up to its end (a batch does not wrap). The ring's size divides 2⁴⁸, so a batch that stops
    /// at the ring's end never crosses the numbers' wrap either.
    #[inline]
    pub(super) fn room(&self) -> usize {
        let mask = self.mask;
        let ring_end = (self.head | mask) + 1;
        let mut limit = (self.reported + self.capacity).min(ring_end);
        if self.streams > 0 {
            // Streams complete out of order between them: the oldest request not reported can
            // hold its place in the ring longer than the send queue holds requests.
            limit = limit.min(self.oldest() + mask + 1);
        }
        limit.saturating_sub(self.head) as usize
    }

    /// Records `posted` requests of `destination` on `stream` from `head` on: the last record
    /// (which ends at `head`) grows when it is the same destination's and stream's.
    #[inline]
    pub(super) fn record(&mut self, destination: u32, stream: u16, posted: u64) {
        let first = self.head;
        match self.batches.back_mut() {
            Some(last) if last.destination == destination && last.stream == stream => {
                last.end += posted;
            },
            _ => self.batches.push_back(Record {
                destination,
                stream,
                first,
                end: first + posted,
                settled: first,
            }),
        }
        self.head += posted;
    }

    /// The full number of the request a completion names by its 48-bit `wr_id`; `None` when
    /// `qp_number` is not this initiator's queue pair (a recovery may have rebuilt it).
    #[inline]
    pub(super) fn number_of(&self, qp_number: u32, wr_id: u64) -> Option<u64> {
        let distance = self.head.wrapping_sub(wr_id) & NUMBER_MASK;
        (qp_number == self.qp_number).then_some(self.head.wrapping_sub(distance))
    }

    #[inline]
    fn position(&self, number: u64) -> Option<usize> {
        // Completions mostly settle the oldest record.
        let index = match self.batches.front() {
            Some(front) if number < front.end => 0,
            _ => self.batches.partition_point(|b| b.end <= number),
        };
        let batch = self.batches.get(index)?;
        (batch.first <= number && number >= batch.settled).then_some(index)
    }

    /// The record holding request `number`, unless it was reported.
    #[inline]
    pub(super) fn find(&self, number: u64) -> Option<Record> {
        self.position(number).map(|index| self.batches[index])
    }

    /// Reports the requests of stream `lane` before `end`, oldest first, to `report`, a run of one
    /// destination at a time (a stream completes in order: before a completion, they executed).
    #[inline]
    pub(super) fn settle(&mut self, wr_ids: &[u64], lane: u16, end: u64, mut report: impl FnMut(u32, Run<'_>)) {
        let ring = &wr_ids[self.ring_start..=self.ring_start + self.mask as usize];
        // Walked by index: mostly one record, where an iterator's set-up costs more than the walk.
        let mut k = 0;
        while let Some(batch) = self.batches.get_mut(k) {
            k += 1;
            if batch.first >= end {
                break;
            }
            let stop = batch.end.min(end);
            if batch.stream != lane || batch.settled >= stop {
                continue;
            }
            report(
                batch.destination,
                Run {
                    ring,
                    numbers: batch.settled..stop,
                },
            );
            self.reported += stop - batch.settled;
            batch.settled = stop;
        }
        self.drop_reported();
    }

    /// Request `number` completed: reports it and its stream's requests before it as
    /// [`settle`](Self::settle). Returns its destination's place, and whether its stream (or the
    /// whole initiator) is in error; `None` when it was already reported (or never posted).
    #[inline]
    pub(super) fn settle_through(
        &mut self, wr_ids: &[u64], number: u64, mut report: impl FnMut(u32, Run<'_>),
    ) -> Option<(u32, bool)> {
        let front = self.batches.front_mut()?;
        let batch = if number >= front.end {
            // On another record than the oldest: its stream's records before it are walked too.
            let batch = self.find(number)?;
            self.settle(wr_ids, batch.stream, number + 1, report);
            batch
        } else {
            // Mostly the oldest record: nothing of its stream is before it.
            if number < front.settled {
                return None;
            }
            let batch = *front;
            let ring = &wr_ids[self.ring_start..=self.ring_start + self.mask as usize];
            report(
                batch.destination,
                Run {
                    ring,
                    numbers: batch.settled..number + 1,
                },
            );
            front.settled = number + 1;
            self.reported += number + 1 - batch.settled;
            if front.settled == front.end {
                // Done: dropped, with the records after it that other streams' completions reported.
                self.batches.pop_front();
                self.drop_reported();
            }
            batch
        };
        let in_error = self.health == Health::Error || self.lanes[batch.stream as usize].is_some();
        Some((batch.destination, in_error))
    }

    #[inline]
    fn drop_reported(&mut self) {
        while self.batches.front().is_some_and(|b| b.settled == b.end) {
            self.batches.pop_front();
        }
    }

    /// Reports the requests of stream `lane` before `end` as flushed, with whether their
    /// destination's request failed on this stream. A flush no error completion announced puts
    /// the whole initiator in error (on its own, or after 2^`log_num_errored` stream errors).
    pub(super) fn flush(&mut self, wr_ids: &[u64], lane: u16, end: u64, mut report: impl FnMut(u32, Run<'_>, bool)) {
        let at_fault = self.lanes[lane as usize];
        if at_fault.is_none() {
            self.enter_error();
        }
        self.settle(wr_ids, lane, end, |d, run| report(d, run, at_fault == Some(d)));
    }

    /// Request `number` of destination `d` on stream `lane` failed: it is reported (its caller's
    /// `wr_id` returned) and its stream is in error, the whole initiator without streams.
    pub(super) fn fail(&mut self, wr_ids: &[u64], number: u64, d: u32, lane: u16) -> u64 {
        let wr_id = wr_ids[self.ring_start + (number & self.mask) as usize];
        if let Some(index) = self.position(number) {
            // The requests before it on its stream were settled: it is the record's first.
            self.batches[index].settled = number + 1;
            self.reported += 1;
        }
        self.drop_reported();
        self.lanes[lane as usize] = Some(d);
        if self.streams == 0 {
            self.enter_error();
        }
        wr_id
    }

    pub(super) fn enter_error(&mut self) {
        if self.health == Health::InService {
            self.health = Health::Error;
        }
    }

    /// Whether stream `lane` is in error and holds no request any more: time to reset it.
    pub(super) fn lane_needs_reset(&self, lane: u16) -> bool {
        self.lane_errored(lane) && !self.batches.iter().any(|b| b.stream == lane && b.settled < b.end)
    }

    pub(super) fn lane_reset(&mut self, lane: u16) {
        self.lanes[lane as usize] = None;
    }

    /// Whether the whole initiator is in ERR and holds nothing: time to recover it.
    pub(super) fn ready_to_recover(&self) -> bool {
        self.health == Health::Error && self.outstanding() == 0
    }

    /// It was recovered, as queue pair `qp_number`: every stream takes requests again.
    pub(super) fn recovered(&mut self, qp_number: u32) {
        self.qp_number = qp_number;
        self.health = Health::InService;
        self.lanes.iter_mut().for_each(|lane| *lane = None);
    }

    pub(super) fn take_out_of_service(&mut self) {
        self.health = Health::OutOfService;
    }

    /// A batch on stream `lane`: its first request's number, that request's place in the pool's
    /// rings, and how many it may hold; `None` when [`refusal`](Self::refusal) says why not.
    #[inline]
    pub(super) fn open(&self, lane: u16) -> Option<(u64, usize, usize)> {
        if self.health != Health::InService || self.lanes[lane as usize].is_some() {
            return None;
        }
        let room = self.room();
        if room == 0 {
            return None;
        }
        Some((self.head, self.ring_start + (self.head & self.mask) as usize, room))
    }

    /// Why no batch can be posted on stream `lane` now.
    pub(super) fn refusal(&self, initiator: usize, lane: u16) -> DcPoolWouldBlock {
        if self.health != Health::InService || self.lanes[lane as usize].is_some() {
            let stream = (self.health == Health::InService).then_some(lane);
            return DcPoolWouldBlock::Recovering { initiator, stream };
        }
        DcPoolWouldBlock::QueueFull
    }

    pub(super) fn block(&mut self, destination: DestinationId) {
        if !self.blocked.contains(&destination) {
            self.blocked.push(destination);
        }
    }

    #[inline]
    pub(super) fn has_blocked(&self) -> bool {
        !self.blocked.is_empty()
    }

    /// Takes out the destinations waiting for it for which `ready` says whether they may post
    /// again (or `None`: they are gone), and hands those that may to `unblocked`.
    pub(super) fn unblock(
        &mut self, mut ready: impl FnMut(&Self, DestinationId) -> Option<bool>,
        mut unblocked: impl FnMut(DestinationId),
    ) {
        let mut k = 0;
        while k < self.blocked.len() {
            let destination = self.blocked[k];
            match ready(self, destination) {
                None => {
                    self.blocked.swap_remove(k);
                },
                Some(true) => {
                    self.blocked.swap_remove(k);
                    unblocked(destination);
                },
                Some(false) => k += 1,
            }
        }
    }

    /// The oldest unreported request of each stream holding one: (stream, number, destination).
    pub(super) fn heads(&self) -> impl Iterator<Item = (u16, u64, u32)> + '_ {
        let mut seen = Vec::new();
        self.batches
            .iter()
            .filter(|b| b.settled < b.end)
            .filter(move |b| {
                let first = !seen.contains(&b.stream);
                seen.push(b.stream);
                first
            })
            .map(|b| (b.stream, b.settled, b.destination))
    }
}
