//! The direct writer against libmlx5's own post path (softmlx5's oracle): the same random
//! requests posted through libmlx5's builders on one oracle DCI and through the writer over a
//! second DCI's memory (same shape, same stale bytes) leave the same send queue, doorbell
//! record, BlueFlame register (both halves: a write on the wrong half shows), posting index,
//! `wr_id`s and `wqe_head`s; through the writer's batches to one address too
//! (`start_post_send_to`), whose requests libmlx5 addresses one by one. The writer rings the
//! hardware stores into the second DCI's plain memory; the order of its barriers and stores is
//! not seen in memory, and is not compared (`barrier.rs`).
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rdma_mummy_sys::ibv_qp_create_send_ops_flags as ops;
use softmlx5::oracle::{Barrier, DciShape, MmioEvent, OracleAh, OracleDci};

use super::requests::{post_direct, post_direct_to, post_libmlx5, Draw, Operations, Payload, Request};
use crate::send_queue::{AddressVector, SendQueue, SendQueueParts};

/// What a run saw, so that a run that skipped a case fails instead of passing.
#[derive(Debug, Default)]
struct Seen {
    requests: u64,
    batches_of_one: u64,
    batches_of_sixteen: u64,
    blueflame_writes: u64,
    doorbell_writes: u64,
    /// Batches of one request of exactly the register's size, and of one unit more.
    blueflame_at_limit: u64,
    doorbell_past_limit: u64,
    index_wraps: u64,
    inline_split_at_end: u64,
}

/// One oracle DCI driven by libmlx5, and the writer over a second one's memory.
struct Pair {
    /// Dropped first: it points into `memory`.
    direct: SendQueue,
    libmlx5: OracleDci,
    /// Only its memory is used: the writer's queue writes it.
    memory: OracleDci,
    wqe_count: u32,
    oracle_routes: Vec<OracleAh>,
    routes: Vec<AddressVector>,
    draw: Draw,
}

impl Pair {
    fn new(shape: &DciShape, operations: Operations, rng: &mut SmallRng) -> Self {
        let seed = rng.random();
        let mut libmlx5 = OracleDci::new(shape);
        let mut memory = OracleDci::new(shape);
        libmlx5.fill_stale(seed);
        memory.fill_stale(seed);
        libmlx5.take_events();
        let layout = memory.layout();
        let parts = SendQueueParts {
            buffer: layout.buffer,
            wqe_count: layout.wqe_count,
            stride: layout.stride,
            doorbell_record: layout.doorbell_record,
            blueflame: layout.blueflame,
            blueflame_size: layout.blueflame_size,
            max_post: libmlx5.max_post(),
            max_inline_data: libmlx5.max_inline_data(),
            max_send_sge: shape.max_send_sge,
            sq_sig_all: shape.sq_sig_all,
            qp_number: shape.qp_number,
            streams: shape.streams,
        };
        // SAFETY: the second DCI's memory outlives the queue (both are the pair's, the queue is
        // dropped first) and nothing else posts on it.
        let direct = unsafe { SendQueue::from_parts(parts) }.expect("the oracle's shape");
        let routes: Vec<AddressVector> = (0..3)
            .map(|_| AddressVector::new(std::array::from_fn(|_| rng.random())))
            .collect();
        let oracle_routes = routes.iter().map(|route| OracleAh::new(*route.bytes())).collect();
        let draw = Draw {
            operations,
            max_inline_data: libmlx5.max_inline_data(),
            max_send_sge: shape.max_send_sge,
            streams: shape.streams,
            routes: routes.len(),
        };
        Self {
            direct,
            libmlx5,
            memory,
            wqe_count: layout.wqe_count,
            oracle_routes,
            routes,
            draw,
        }
    }

    /// Posts `batch` both ways and compares everything; `context` names the batch on failure.
    /// Returns the posting index of its last request.
    fn post_and_compare(
        &mut self, batch: &[Request], addressing: Addressing, seen: &mut Seen, context: &dyn Fn() -> String,
    ) -> u32 {
        let index_before = self.direct.posting_index();
        let wqe_count = self.wqe_count;
        post_libmlx5(&self.libmlx5, &self.oracle_routes, batch);
        match addressing {
            Addressing::EachRequest => post_direct(&mut self.direct, &self.routes, batch),
            Addressing::Batch => post_direct_to(&mut self.direct, &self.routes, batch),
        }

        let expected = self.libmlx5.send_queue();
        let actual = self.memory.send_queue();
        if let Some(at) = expected.iter().zip(actual).position(|(a, b)| a != b) {
            panic!(
                "{}: send queues differ at byte {at} (slot {}, offset {}): libmlx5 {:02x?}, direct {:02x?}",
                context(),
                at / 64,
                at % 64,
                &expected[at / 16 * 16..at / 16 * 16 + 16],
                &actual[at / 16 * 16..at / 16 * 16 + 16]
            );
        }
        assert_eq!(
            self.direct.posting_index(),
            self.libmlx5.posting_index(),
            "{}: posting index",
            context()
        );
        assert_eq!(
            self.memory.doorbell_record(),
            self.libmlx5.doorbell_record(),
            "{}: doorbell record",
            context()
        );
        assert!(
            self.memory.blueflame() == self.libmlx5.blueflame(),
            "{}: BlueFlame register",
            context()
        );
        // libmlx5's doorbell is the one `doorbell.rs` is written after: two barriers, 8-byte
        // stores, each of which the writer's register holds too, one barrier.
        let events = self.libmlx5.take_events();
        let stores = events
            .strip_prefix(
                &[
                    MmioEvent::Barrier(Barrier::ToDevice),
                    MmioEvent::Barrier(Barrier::WcStart),
                ][..],
            )
            .and_then(|rest| rest.strip_suffix(&[MmioEvent::Barrier(Barrier::FlushWrites)][..]))
            .unwrap_or_else(|| panic!("{}: libmlx5's doorbell {events:?}", context()));
        assert!(!stores.is_empty(), "{}: libmlx5 stored nothing", context());
        for store in stores {
            let MmioEvent::Store { offset, bytes } = store else {
                panic!("{}: libmlx5's doorbell {events:?}", context());
            };
            assert_eq!(
                self.memory.blueflame()[*offset..*offset + 8],
                *bytes,
                "{}: store at {offset}",
                context()
            );
        }
        // Each request's slot: its wr_id and wqe_head.
        let mut index = index_before;
        let mut last_index = index;
        for request in batch {
            last_index = index;
            let slot = index & (wqe_count - 1);
            assert_eq!(
                self.direct.wr_id(slot),
                self.libmlx5.wr_id(slot),
                "{}: wr_id at {slot}",
                context()
            );
            assert_eq!(self.direct.wr_id(slot), request.wr_id, "{}: wr_id at {slot}", context());
            assert_eq!(
                self.direct.wqe_head(slot),
                self.libmlx5.wqe_head(slot),
                "{}: wqe_head at {slot}",
                context()
            );
            let size = u32::from(actual[slot as usize * 64 + 7] & 0x3f);
            if inline_crosses_end(request, slot, wqe_count) {
                seen.inline_split_at_end += 1;
            }
            index = index.wrapping_add(size.div_ceil(4));
        }
        assert_eq!(index, self.direct.posting_index(), "{}: sizes", context());

        seen.requests += batch.len() as u64;
        match batch.len() {
            1 => seen.batches_of_one += 1,
            16 => seen.batches_of_sixteen += 1,
            _ => {},
        }
        let last_size = u32::from(actual[((index_before & (wqe_count - 1)) * 64 + 7) as usize] & 0x3f);
        let limit = self.libmlx5.layout().blueflame_size / 16;
        if batch.len() == 1 && last_size <= limit {
            seen.blueflame_writes += 1;
        } else {
            seen.doorbell_writes += 1;
        }
        if batch.len() == 1 && limit > 0 {
            seen.blueflame_at_limit += u64::from(last_size == limit);
            seen.doorbell_past_limit += u64::from(last_size == limit + 1);
        }
        if (index_before & 0xffff) > (self.direct.posting_index() & 0xffff) {
            seen.index_wraps += 1;
        }
        last_index
    }

    /// Every request posted is complete: libmlx5's tail as its poller sets it, and the writer's
    /// through the completion of the last posted request.
    fn retire(&mut self, last_index: u32, context: &dyn Fn() -> String) {
        self.libmlx5.retire_all();
        self.direct.complete(last_index as u16);
        let direct = (self.direct.head, self.direct.tail);
        assert_eq!(self.libmlx5.head_and_tail(), direct, "{}: head and tail", context());
    }
}

/// Whether the inline data of `request` at `slot` crosses the end of the queue.
fn inline_crosses_end(request: &Request, slot: u32, wqe_count: u32) -> bool {
    let length = match &request.payload {
        Payload::Inline(bytes) | Payload::InlineList(bytes, _) => bytes.len(),
        _ => return false,
    };
    let header = match request.op {
        super::requests::Op::Send | super::requests::Op::SendImm(_) => 64,
        _ => 80,
    };
    let start = slot as usize * 64 + header + 4;
    length > 0 && start < wqe_count as usize * 64 && start + length > wqe_count as usize * 64
}

const SEND_WRITE: u64 = ops::IBV_QP_EX_WITH_SEND.0 as u64 | ops::IBV_QP_EX_WITH_RDMA_WRITE.0 as u64;
const ALL: u64 = SEND_WRITE
    | ops::IBV_QP_EX_WITH_SEND_WITH_IMM.0 as u64
    | ops::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0 as u64
    | ops::IBV_QP_EX_WITH_RDMA_READ.0 as u64
    | ops::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP.0 as u64
    | ops::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD.0 as u64;

/// How the writer's requests are addressed: each at its address step, or by a batch to one
/// address (then every request of a batch is drawn to the first's address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Addressing {
    EachRequest,
    Batch,
}

/// A queue to compare on: `(wqe_count, max_inline_data asked, max_send_sge, sq_sig_all,
/// streams, blueflame_size)`.
type Shape = (u32, u32, u32, bool, bool, u32);

/// Posts `requests` random requests on each shape, in batches of 1, 16 and random sizes,
/// comparing after each batch.
fn compare(seed: u64, requests: u64, shapes: &[Shape], operations: Operations, addressing: Addressing) -> Seen {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut seen = Seen::default();
    let mut wr_id = 0u64;
    for (run, &(wqe_count, max_inline_data, max_send_sge, sq_sig_all, streams, blueflame_size)) in
        shapes.iter().enumerate()
    {
        let shape = DciShape {
            wqe_count,
            max_inline_data,
            max_send_sge,
            sq_sig_all,
            send_ops_flags: if operations == Operations::All { ALL } else { SEND_WRITE },
            streams,
            blueflame_size,
            qp_number: rng.random_range(0..1 << 24),
        };
        let mut pair = Pair::new(&shape, operations, &mut rng);
        let max_post = pair.libmlx5.max_post();
        let mut posted = 0;
        while posted < requests {
            let len = match rng.random_range(0..3) {
                0 => 1,
                1 => 16,
                _ => rng.random_range(1..=64),
            }
            .min(max_post as usize);
            let mut batch: Vec<Request> = (0..len)
                .map(|_| {
                    wr_id += 1;
                    pair.draw.request(&mut rng, wr_id)
                })
                .collect();
            if addressing == Addressing::Batch {
                let (route, dct_number, dc_key, stream_id) =
                    (batch[0].route, batch[0].dct_number, batch[0].dc_key, batch[0].stream_id);
                for request in &mut batch {
                    (request.route, request.dct_number, request.dc_key, request.stream_id) =
                        (route, dct_number, dc_key, stream_id);
                }
            }
            let context = || format!("seed {seed:#x}, run {run} ({shape:?}), after {posted} requests");
            let last_index = pair.post_and_compare(&batch, addressing, &mut seen, &context);
            pair.retire(last_index, &context);
            posted += len as u64;
        }
    }
    seen
}

#[test]
fn writes_and_sends_leave_what_libmlx5_leaves() {
    let shapes = [
        (16, 0, 1, false, false, 256),
        (64, 220, 4, true, false, 256),
        (256, 60, 6, false, true, 0),
        (32, 200, 16, true, true, 256),
        (16, 100, 2, false, true, 256),
        (64, 12, 0, true, false, 0),
        (128, 220, 3, false, false, 256),
        (16, 44, 1, true, true, 256),
    ];
    let seen = compare(
        0x5eed_0001,
        125_000,
        &shapes,
        Operations::SendWrite,
        Addressing::EachRequest,
    );
    assert!(seen.requests >= 1_000_000, "{seen:?}");
    assert!(seen.batches_of_one > 0 && seen.batches_of_sixteen > 0, "{seen:?}");
    assert!(seen.blueflame_writes > 0 && seen.doorbell_writes > 0, "{seen:?}");
    assert!(seen.blueflame_at_limit > 0 && seen.doorbell_past_limit > 0, "{seen:?}");
    assert!(seen.index_wraps > 0 && seen.inline_split_at_end > 0, "{seen:?}");
}

#[test]
fn every_operation_leaves_what_libmlx5_leaves() {
    let shapes = [
        (64, 220, 4, false, true, 256),
        (16, 60, 2, true, false, 256),
        (256, 100, 8, true, true, 0),
        (32, 0, 1, false, false, 256),
    ];
    let seen = compare(0x5eed_0002, 100_000, &shapes, Operations::All, Addressing::EachRequest);
    assert!(seen.requests >= 400_000, "{seen:?}");
    assert!(seen.blueflame_at_limit > 0 && seen.doorbell_past_limit > 0, "{seen:?}");
    assert!(seen.index_wraps > 0 && seen.inline_split_at_end > 0, "{seen:?}");
}

#[test]
fn batches_to_one_address_leave_what_libmlx5_leaves() {
    let shapes = [
        (16, 0, 1, false, false, 256),
        (64, 220, 4, true, true, 256),
        (256, 60, 6, false, true, 0),
        (32, 100, 2, true, false, 256),
    ];
    let seen = compare(0x5eed_0003, 100_000, &shapes, Operations::All, Addressing::Batch);
    assert!(seen.requests >= 400_000, "{seen:?}");
    assert!(seen.batches_of_one > 0 && seen.batches_of_sixteen > 0, "{seen:?}");
    assert!(seen.blueflame_at_limit > 0 && seen.doorbell_past_limit > 0, "{seen:?}");
    assert!(seen.index_wraps > 0 && seen.inline_split_at_end > 0, "{seen:?}");
}
