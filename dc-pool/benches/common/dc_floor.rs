//! A floor for the DC initiator pool's limits: less bookkeeping than any pool that
//! maps completions back can do, written plainly, with none of the pool's generality. It posts
//! with the direct DC initiator's guard (the pool rows' "raw" side), so that what it adds above
//! that guard is bookkeeping alone, measured in the same harness as the pool rows (the same
//! loops, the same CQ stand-in), and derived per batch and per request as they are.
//!
//! What it does, because every such pool must: a destination looked up by place and generation
//! (a stale id refused), its initiator (a dedicated one popped from a free stack and bound to
//! it), the initiator's send views and the destination's address read per batch (they differ
//! from batch to batch in a pool; the direct guard reads them once), the initiator's room, per
//! request the caller's `wr_id` stored in a ring (a batch's places in a row, as the pool's) and
//! the provider `wr_id` (`initiator << 48 | number`) given; per completion the initiator from the
//! `wr_id`, a test that it names a request in flight, the requests up to it reported, the room
//! recomputed, and a drained dedicated initiator given back.
//!
//! What it leaves out, and a pool cannot: which destination each request was for (the pool
//! keeps it per run of requests and reports it), error completions (refused here), DCI streams,
//! quotas, the wait line and its `Ready` events, grant timeouts, address resolution, removal,
//! recovery, a CQ shared with other queue pairs. So it is a lower bound to read the pool's
//! figures and limits against (BENCHMARKS.md), not a pool anyone could use.
use std::ptr::NonNull;

use rdma_mummy_sys::ibv_ah;
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::mlx5::dc::adopted::AdoptedDcSendViews;
use sideway_ext::mlx5::dc::initiator::DcPostSendGuard;

use super::dc::{
    CountingDc, DedicatedRows, PoolRow, SendDcWrite, StaticRows, DEDICATED_DESTINATIONS, DEDICATED_INITIATORS,
};
use super::{failed, Buffers, CountingQp, Workload, STRIDE};

/// Bits of the provider `wr_id` that number an initiator's requests (the pool's layout).
const NUMBER_BITS: u32 = 48;
const NUMBER_MASK: u64 = (1 << NUMBER_BITS) - 1;
/// "No initiator".
const NONE: u32 = u32::MAX;

/// A destination's id: its place and generation.
#[derive(Clone, Copy)]
pub struct FloorId {
    index: u32,
    generation: u32,
}

struct FloorDestination {
    generation: u32,
    /// Its initiator, or `NONE`.
    initiator: u32,
    address: (NonNull<ibv_ah>, u32, u64),
}

struct FloorInitiator {
    views: AdoptedDcSendViews,
    /// The next request's number, the oldest not reported, and the number a batch may not
    /// reach: `min(oldest + capacity, the ring's end after head)` (a batch does not wrap).
    head: u64,
    oldest: u64,
    limit: u64,
    capacity: u64,
    /// Per request, at `number & mask`: the caller's `wr_id`.
    wr_ids: Box<[u64]>,
    mask: u64,
    /// The destination holding it (dedicated), `NONE` when free.
    holder: u32,
    /// The counting tables behind the views.
    tables: (Box<CountingQp>, Box<CountingDc>),
}

impl FloorInitiator {
    fn new(capacity: u64) -> Self {
        let mut qp = CountingQp::new();
        let mut view = CountingDc::new();
        let views = view.views(&mut qp);
        let size = (2 * capacity).next_power_of_two();
        Self {
            views,
            head: 0,
            oldest: 0,
            limit: capacity,
            capacity,
            wr_ids: vec![0; size as usize].into_boxed_slice(),
            mask: size - 1,
            holder: NONE,
            tables: (qp, view),
        }
    }

    /// The limit from `oldest` and `head`.
    // inline(always): into its measured_* function, as the rows it is compared with; with
    // #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
    #[inline(always)]
    fn update_limit(&mut self) {
        self.limit = (self.oldest + self.capacity).min((self.head | self.mask) + 1);
    }
}

/// The floor's bookkeeping: `DEDICATED` grants a free initiator to a destination that holds none
/// and takes it back once drained; else every destination is bound to its initiator once.
pub struct FloorPool<const DEDICATED: bool> {
    initiators: Vec<FloorInitiator>,
    destinations: Vec<FloorDestination>,
    free: Vec<u32>,
}

impl<const DEDICATED: bool> FloorPool<DEDICATED> {
    fn new(initiators: usize, capacity: u64) -> Self {
        let initiators: Vec<_> = (0..initiators).map(|_| FloorInitiator::new(capacity)).collect();
        let free = (0..initiators.len() as u32).rev().collect();
        Self {
            initiators,
            destinations: Vec::new(),
            free: if DEDICATED { free } else { Vec::new() },
        }
    }

    fn add_destination(&mut self, address: (NonNull<ibv_ah>, u32, u64)) -> FloorId {
        let index = self.destinations.len() as u32;
        let initiator = if DEDICATED {
            NONE
        } else {
            index % self.initiators.len() as u32
        };
        self.destinations.push(FloorDestination {
            generation: 1,
            initiator,
            address,
        });
        FloorId { index, generation: 1 }
    }

    /// Posts `batch` DC writes to `id` (the callers' `wr_id`s from `first`), as the pool rows
    /// do; returns the initiator.
    // inline(always): into its measured_* function, as the rows it is compared with; with
    // #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
    #[inline(always)]
    fn post(&mut self, id: FloorId, first: u64, batch: usize, b: Buffers) -> usize {
        let Some(destination) = self.destinations.get_mut(id.index as usize) else {
            failed("floor: unknown destination")
        };
        if destination.generation != id.generation {
            failed("floor: stale destination");
        }
        let mut i = destination.initiator;
        if DEDICATED && i == NONE {
            let Some(free) = self.free.pop() else {
                failed("floor: no free initiator")
            };
            i = free;
            destination.initiator = i;
            self.initiators[i as usize].holder = id.index;
        }
        let (ah, dct_number, dc_key) = destination.address;
        let Some(initiator) = self.initiators.get_mut(i as usize) else {
            failed("floor: no such initiator")
        };
        let head = initiator.head;
        // No slow path (the pool's recomputes the limit when a batch stopped at the ring's end):
        // the rows' runs never fill the send queue nor reach the ring's end, so a batch that
        // does not fit is a failure here.
        if (initiator.limit.saturating_sub(head) as usize) < batch {
            failed("floor: no room");
        }
        let start = (head & initiator.mask) as usize;
        let slots = initiator.wr_ids[start..start + batch].as_mut_ptr();
        let base = ((i as u64) << NUMBER_BITS) | head;
        // SAFETY: the counting tables are live and not used elsewhere during the batch.
        let mut guard = unsafe { DcPostSendGuard::start_adopted(initiator.views) };
        for n in first..first + batch as u64 {
            // SAFETY: `slots` holds `batch` places (checked above), and `n - first` is below it.
            unsafe { *slots.add((n - first) as usize) = n };
            // SAFETY: the counting provider never touches the buffers or the handle.
            unsafe {
                guard
                    .construct_wr(base + (n - first), WorkRequestFlags::Signaled)
                    .setup_write(b.rkey, b.remote + n * STRIDE)
                    .setup_dc_addr_adopted(ah, dct_number, dc_key, None)
                    .setup_sge(b.lkey, b.local + n * STRIDE, STRIDE as u32)
            };
        }
        if guard.post().is_err() {
            failed("floor: post");
        }
        initiator.head = head + batch as u64;
        i as usize
    }

    /// Settles a successful completion of the provider `wr_id`: every request of its initiator
    /// up to it is reported to `sink` (its caller's `wr_id`); a drained dedicated
    /// initiator goes back. Returns whether it named a request in flight.
    // inline(always): into its measured_* function, as the rows it is compared with; with
    // #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
    #[inline(always)]
    fn complete(&mut self, wr_id: u64, status: u32, mut sink: impl FnMut(u64)) -> bool {
        let i = (wr_id >> NUMBER_BITS) as usize;
        let Some(initiator) = self.initiators.get_mut(i) else {
            return false;
        };
        if status != 0 {
            failed("floor: error completions are the pool's, not the floor's");
        }
        let (oldest, head) = (initiator.oldest, initiator.head);
        let offset = wr_id.wrapping_sub(oldest) & NUMBER_MASK;
        if offset >= head - oldest {
            return false;
        }
        let end = oldest + offset + 1;
        // The reported places, in at most two runs (the ring may wrap between batches).
        let mask = initiator.mask;
        let (from, to) = ((oldest & mask) as usize, (end & mask) as usize);
        if from < to {
            report(&initiator.wr_ids[from..to], &mut sink);
        } else {
            report(&initiator.wr_ids[from..], &mut sink);
            report(&initiator.wr_ids[..to], &mut sink);
        }
        initiator.oldest = end;
        initiator.update_limit();
        if DEDICATED && end == head {
            let holder = std::mem::replace(&mut initiator.holder, NONE);
            if let Some(destination) = self.destinations.get_mut(holder as usize) {
                destination.initiator = NONE;
            }
            self.free.push(i as u32);
        }
        true
    }
}

impl<const DEDICATED: bool> PoolRow for FloorPool<DEDICATED> {
    type Destination = FloorId;

    // inline(always): into its measured_* function, as the rows it is compared with; with
    // #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
    #[inline(always)]
    fn post_batch(&mut self, destination: FloorId, first: u64, batch: usize, b: Buffers) {
        self.post(destination, first, batch, b);
    }

    // inline(always): into its measured_* function, as the rows it is compared with; with
    // #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
    #[inline(always)]
    fn post_batch_on(&mut self, destination: FloorId, first: u64, batch: usize, b: Buffers) -> usize {
        self.post(destination, first, batch, b)
    }

    type Event = u64;

    // inline(always): into its measured_* function, as the rows it is compared with; with
    // #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
    #[inline(always)]
    fn settle(&mut self, wr_id: u64, sink: impl FnMut(u64)) -> bool {
        self.complete(wr_id, 0, sink)
    }

    fn posted_requests(&self) -> u64 {
        self.initiators
            .iter()
            .map(|initiator| {
                let (qp, view) = &initiator.tables;
                assert_eq!(view.addresses(), qp.requests(), "one DC address per request");
                qp.requests()
            })
            .sum()
    }
}

/// Reports the requests of one run of ring places.
// inline(always): into its measured_* function, as the rows it is compared with; with
// #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
#[inline(always)]
fn report(wr_ids: &[u64], sink: &mut impl FnMut(u64)) {
    for wr_id in wr_ids {
        sink(*wr_id);
    }
}

/// The floor of `send_dc_pool_write` (`SETTLE` false) and `send_dc_pool_write_settled`: one
/// initiator, one destination bound to it, the pool rows' loop.
pub enum SendDcFloor<const SETTLE: bool> {}

/// The floor of `send_dc_pool_write`.
pub type SendDcFloorWrite = SendDcFloor<false>;
/// The floor of `send_dc_pool_write_settled`.
pub type SendDcFloorWriteSettled = SendDcFloor<true>;

impl<const SETTLE: bool> Workload for SendDcFloor<SETTLE> {
    const NAME: &'static str = if SETTLE {
        "send_dc_floor_write_settled"
    } else {
        "send_dc_floor_write"
    };
    type State = StaticRows<FloorPool<false>>;

    fn setup(batch: usize) -> Self::State {
        // The pool rows' send queue: every request of a run fits.
        let mut pool = FloorPool::new(1, 8192);
        let direct = SendDcWrite::setup(batch);
        let destination = pool.add_destination(direct.address());
        StaticRows::new::<SETTLE>(pool, destination, direct, batch, Self::guard)
    }

    #[inline(never)]
    fn guard(state: &mut Self::State, requests: usize) {
        state.run::<SETTLE>(requests);
    }

    #[inline(never)]
    fn raw(state: &mut Self::State, requests: usize) {
        SendDcWrite::guard(&mut state.direct, requests);
    }

    fn posted(state: &Self::State) -> u64 {
        state.posted()
    }
}

/// The floor of `send_dc_pool_dedicated_write_settled`: 16 initiators, 1 024 destinations
/// posted to round robin, each batch granted a free initiator and the oldest of the 16 in flight
/// settled after it, in the pool row's loop with its CQ stand-in.
pub enum SendDcFloorDedicatedSettled {}

impl Workload for SendDcFloorDedicatedSettled {
    const NAME: &'static str = "send_dc_floor_dedicated_write_settled";
    type State = DedicatedRows<FloorPool<true>>;

    fn setup(batch: usize) -> Self::State {
        let mut pool = FloorPool::new(DEDICATED_INITIATORS, 8192);
        let direct = SendDcWrite::setup(batch);
        let destinations = (0..DEDICATED_DESTINATIONS)
            .map(|_| pool.add_destination(direct.address()))
            .collect();
        DedicatedRows::new(pool, destinations, direct, batch, Self::guard)
    }

    #[inline(never)]
    fn guard(state: &mut Self::State, requests: usize) {
        state.run(requests);
    }

    #[inline(never)]
    fn raw(state: &mut Self::State, requests: usize) {
        SendDcWrite::guard(&mut state.direct, requests);
    }

    fn posted(state: &Self::State) -> u64 {
        state.posted()
    }
}
