//! An initiator's requests: the ring of the callers' `wr_id`s, numbered in posting order, and the
//! batch records that say whose requests they are and which were reported.
//!
//! # Request numbers
//!
//! Each initiator numbers its requests in posting order. The `wr_id` the provider sees is
//! `initiator << 48 | number` (the number taken modulo 2⁴⁸); the caller's own `wr_id` is kept in
//! the ring, at the request's number. A batch's requests take consecutive places in the ring (a
//! batch never wraps around its end). A completion thus names its request exactly, also with DCI
//! streams (whose completions can come out of posting order between streams).
use std::collections::VecDeque;

/// Bits of the provider-visible `wr_id` that number an initiator's requests; the initiator takes
/// the 16 above them.
const NUMBER_BITS: u32 = 48;
const NUMBER_MASK: u64 = (1 << NUMBER_BITS) - 1;
/// The largest pool.
pub(crate) const MAX_INITIATORS: usize = 1 << (64 - NUMBER_BITS);

/// The provider-visible `wr_id` of request `number` of initiator `initiator`.
#[inline]
pub(crate) fn encode(initiator: usize, number: u64) -> u64 {
    ((initiator as u64) << NUMBER_BITS) | (number & NUMBER_MASK)
}

/// The initiator a provider-visible `wr_id` names.
#[inline]
pub(crate) fn initiator_of(wr_id: u64) -> usize {
    (wr_id >> NUMBER_BITS) as usize
}

/// A run of requests of one destination on one stream, posted on one initiator in one or more
/// consecutive batches.
#[derive(Debug, Clone, Copy)]
pub(super) struct BatchRecord {
    pub(super) destination: u32,
    /// The stream, or 0 without streams.
    pub(super) stream: u16,
    pub(super) first: u64,
    pub(super) end: u64,
    /// The first request not yet reported.
    pub(super) settled: u64,
}

/// A stream's error (the only one without streams: the initiator's).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LaneError {
    /// An error completion came; the stream's requests are being flushed.
    pub(super) errored: bool,
    /// The destination whose request failed: its flushed requests fail too.
    pub(super) at_fault: Option<u32>,
}

/// The callers' `wr_id`s of every initiator's requests: a ring per initiator, each request's at
/// its place ([`InitiatorRequests::slot`]). Apart from the bookkeeping so that an open batch can
/// hold its places while it borrows the bookkeeping to end the batch.
#[derive(Debug)]
pub(super) struct WrIds(Vec<Box<[u64]>>);

impl WrIds {
    /// A ring for each of `requests`.
    pub(super) fn new(requests: &[InitiatorRequests]) -> Self {
        Self(
            requests
                .iter()
                .map(|r| vec![0; r.mask as usize + 1].into_boxed_slice())
                .collect(),
        )
    }

    /// The places of a batch on `initiator`: `room` of them from `slot` on.
    #[inline]
    pub(super) fn batch(&mut self, initiator: usize, slot: usize, room: usize) -> &mut [u64] {
        &mut self.0[initiator][slot..slot + room]
    }

    /// `initiator`'s ring: the caller's `wr_id` of each request at its place.
    #[inline]
    pub(super) fn ring(&self, initiator: usize) -> &[u64] {
        &self.0[initiator]
    }

    /// Keeps a caller's `wr_id` at place `slot` of `initiator`'s ring (the simulation, which
    /// posts without a guard).
    #[cfg(test)]
    pub(super) fn set(&mut self, initiator: usize, slot: usize, wr_id: u64) {
        self.0[initiator][slot] = wr_id;
    }
}

/// One initiator's requests, and its state.
#[derive(Debug)]
pub(super) struct InitiatorRequests {
    /// The size of its ring of `wr_id`s ([`WrIds`]) less one.
    mask: u64,
    /// Requests it may hold at once (its send queue).
    pub(super) capacity: u64,
    /// The number of the next request.
    pub(super) head: u64,
    /// Requests reported so far (`head - reported` are outstanding).
    pub(super) reported: u64,
    /// Records of the requests not reported yet, in posting order.
    pub(super) batches: VecDeque<BatchRecord>,
    /// The destination holding it (dedicated policies).
    pub(super) holder: Option<u32>,
    /// `head` when the holder was granted it: what it posted since.
    pub(super) hold_start: u64,
    /// Which grant from the line it holds (a grant timer of an older grant does not revoke it).
    pub(super) grant: u64,
    pub(super) streams: u32,
    /// Per stream (one without streams).
    pub(super) lanes: Box<[LaneError]>,
    /// The whole initiator is in ERR: recovered once it holds nothing.
    pub(super) whole_error: bool,
    pub(super) out_of_service: bool,
    /// Destinations (place, generation) refused a batch on it (queue full, recovering), waiting
    /// for a `Ready`.
    pub(super) blocked: Vec<(u32, u32)>,
    /// Destinations with requests on it, removed once those are reported.
    pub(super) retiring: Vec<u32>,
}

impl InitiatorRequests {
    pub(super) fn new(capacity: u32, streams: u32) -> Self {
        // Twice the send queue, and with streams one send queue per stream: a request that
        // completed out of order (another stream) frees its send-queue slot at once, but its
        // place in the ring only once every request before it was reported. (At most 2⁴⁸, which
        // it then divides.)
        let size = (u64::from(capacity.max(1)) * u64::from(streams.max(2)))
            .next_power_of_two()
            .min(NUMBER_MASK + 1);
        Self {
            mask: size - 1,
            capacity: u64::from(capacity.max(1)),
            head: 0,
            reported: 0,
            batches: VecDeque::new(),
            holder: None,
            hold_start: 0,
            grant: 0,
            streams,
            lanes: vec![LaneError::default(); streams.max(1) as usize].into_boxed_slice(),
            whole_error: false,
            out_of_service: false,
            blocked: Vec::new(),
            retiring: Vec::new(),
        }
    }

    /// Requests posted and not yet reported.
    #[inline]
    pub(super) fn outstanding(&self) -> u64 {
        self.head - self.reported
    }

    /// The oldest request not reported yet (`head` when none is): the ring holds the callers'
    /// `wr_id`s from here to `head`.
    #[inline]
    pub(super) fn oldest(&self) -> u64 {
        self.batches.front().map_or(self.head, |b| b.settled)
    }

    /// Whether a stream, or the whole initiator, is in error or out of service.
    #[cfg(test)]
    pub(super) fn troubled(&self) -> bool {
        self.whole_error || self.out_of_service || self.lanes.iter().any(|l| l.errored)
    }

    /// How many more requests a batch may hold now: free send-queue slots, and places in the ring
    /// up to its end (a batch does not wrap). The ring's size is a power of two that divides 2⁴⁸,
    /// so a batch that stops at the ring's end never crosses the numbers' wrap either.
    #[inline]
    pub(super) fn room(&self) -> usize {
        let ring_end = (self.head | self.mask) + 1;
        let mut limit = (self.reported + self.capacity).min(ring_end);
        if self.streams > 0 {
            // Streams complete out of order between them: the oldest request not reported can
            // hold its place in the ring longer than the send queue holds requests. Without
            // streams every request before the oldest was reported, and the ring holds twice
            // the send queue.
            limit = limit.min(self.oldest() + self.mask + 1);
        }
        limit.saturating_sub(self.head) as usize
    }

    /// The place of request `number` in the ring.
    #[inline]
    pub(super) fn slot(&self, number: u64) -> usize {
        (number & self.mask) as usize
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
            _ => self.batches.push_back(BatchRecord {
                destination,
                stream,
                first,
                end: first + posted,
                settled: first,
            }),
        }
        self.head += posted;
    }

    /// The full number of a request from the 48 bits the provider gives back.
    #[inline]
    pub(super) fn unwrap_number(&self, low: u64) -> u64 {
        let distance = self.head.wrapping_sub(low) & NUMBER_MASK;
        self.head.wrapping_sub(distance)
    }

    /// The record holding request `number`, and its index, unless it was already reported.
    #[inline]
    pub(super) fn find(&self, number: u64) -> Option<(usize, BatchRecord)> {
        // Completions mostly settle the oldest record.
        let (index, batch) = match self.batches.front() {
            Some(front) if number < front.end => (0, *front),
            _ => {
                let index = self.batches.partition_point(|b| b.end <= number);
                (index, *self.batches.get(index)?)
            },
        };
        (batch.first <= number && number >= batch.settled).then_some((index, batch))
    }

    /// Drops the fully reported records at the front.
    #[inline]
    pub(super) fn pop_settled(&mut self) {
        while self.batches.front().is_some_and(|b| b.settled == b.end) {
            self.batches.pop_front();
        }
    }

    /// Whether stream `lane` holds no request not yet reported.
    pub(super) fn lane_idle(&self, lane: u16) -> bool {
        !self.batches.iter().any(|b| b.stream == lane && b.settled < b.end)
    }

    /// Requests of destination `d` not reported yet.
    pub(super) fn outstanding_of(&self, d: u32) -> u64 {
        self.batches
            .iter()
            .filter(|b| b.destination == d)
            .map(|b| b.end - b.settled)
            .sum()
    }

    /// Checks what is derived: the records lie in posting order between the reported and the
    /// posted, and count what is outstanding; for tests.
    #[cfg(test)]
    pub(super) fn check_invariants(&self, i: usize) {
        if self.streams == 0 {
            // One stream completes in order: every request before the oldest was reported.
            assert_eq!(self.oldest(), self.reported, "initiator {i}: reported out of order");
        }
        let mut previous_end = None;
        let mut outstanding = 0;
        for batch in &self.batches {
            assert!(batch.first <= batch.settled && batch.settled <= batch.end && batch.first < batch.end);
            assert!(batch.end <= self.head, "initiator {i}: a record past head");
            if let Some(previous) = previous_end {
                assert!(batch.first >= previous, "records of initiator {i} overlap");
            }
            previous_end = Some(batch.end);
            outstanding += batch.end - batch.settled;
        }
        assert_eq!(outstanding, self.outstanding(), "initiator {i}: outstanding");
        assert!(
            self.outstanding() <= self.capacity,
            "initiator {i}: over its send queue"
        );
        assert!(
            self.head - self.oldest() <= self.mask + 1,
            "initiator {i}: over its ring"
        );
        if self.out_of_service {
            assert_eq!(self.outstanding(), 0, "a lost initiator holds nothing");
        }
    }
}
