//! The C entries and libmlx5 side by side: an oracle DCI driven by libmlx5, and
//! [`SendQueueEntries`] over a second one's memory (same shape, same stale bytes), both posted
//! on through sideway-ext's guards; and what is compared after each batch.
use std::collections::HashMap;
use std::io::IoSlice;
use std::ptr::NonNull;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rdma_mummy_sys::{ibv_qp_create_send_ops_flags as ops, ibv_qp_ex, mlx5dv_qp_ex};
use sideway::ibverbs::queue_pair::{SendOperationFlags, SetInlineData, SetScatterGatherEntry};
use sideway_ext::ibverbs::post_send_guard::{PostSendError, PostSendGuard, ProviderEntries};
use sideway_ext::mlx5::dc::initiator::{
    BatchAddressed, DcAddress, DcAddressing, DcContext, DcRoute, DcStreamAddress, DynamicallyConnected,
};
use sideway_ext_wqe_oracle::{DciShape, MmioEvent, OracleAh, OracleDci};

use super::requests::{flags_of, pieces, raw, Draw, Op, Operations, Payload, Request};
use crate::send_queue::address_cache::AddressLookup;
use crate::send_queue::{SendQueue, SendQueueEntries, SendQueueParts};

/// What a guard is started on: the extended view, its entries, the mlx5 view.
pub(super) type Views = (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>);

/// Every operation a DCI posts.
pub(super) const ALL_OPERATIONS: SendOperationFlags = SendOperationFlags::Send
    .or(SendOperationFlags::SendWithImmediate)
    .or(SendOperationFlags::Write)
    .or(SendOperationFlags::WriteWithImmediate)
    .or(SendOperationFlags::Read)
    .or(SendOperationFlags::AtomicCompareAndSwap)
    .or(SendOperationFlags::AtomicFetchAndAdd);

const ALL_OPS_FLAGS: u64 = ops::IBV_QP_EX_WITH_SEND.0 as u64
    | ops::IBV_QP_EX_WITH_RDMA_WRITE.0 as u64
    | ops::IBV_QP_EX_WITH_SEND_WITH_IMM.0 as u64
    | ops::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0 as u64
    | ops::IBV_QP_EX_WITH_RDMA_READ.0 as u64
    | ops::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP.0 as u64
    | ops::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD.0 as u64;

/// A queue to compare on: `(wqe_count, max_inline_data asked, max_send_sge, sq_sig_all,
/// streams, blueflame_size)`.
pub(super) type Shape = (u32, u32, u32, bool, bool, u32);

/// An oracle address handle as a DC route (a device's needs a device).
struct OracleRoute<'a>(&'a OracleAh);

impl DcRoute for OracleRoute<'_> {
    type Address = DcAddress;
    type StreamAddress = DcStreamAddress;

    fn address(&self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64) -> DcAddress {
        // SAFETY: the handle outlives the guard that uses the address; the view is the guard's.
        unsafe { DcAddress::new(mlx5_qp_ex, self.0.ibv_ah(), dct_number, dc_key) }
    }

    fn stream_address(
        &self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> DcStreamAddress {
        DcStreamAddress::new(self.address(mlx5_qp_ex, dct_number, dc_key), stream_id)
    }
}

/// The address vectors of oracle address handles, as the entries find them (a device's through
/// `mlx5dv_init_obj`); each handle's vector at a place of its own, for as long as the lookup.
pub(crate) fn oracle_lookup(routes: &[OracleAh]) -> AddressLookup {
    let places: HashMap<usize, Box<[u8; 48]>> = routes
        .iter()
        .map(|route| (route.ibv_ah().as_ptr() as usize, Box::new(route.av())))
        .collect();
    Box::new(move |ah| places.get(&(ah.as_ptr() as usize)).map(|av| NonNull::from(&**av)))
}

/// The operation step of `$wr` for `$op`, bound to `$after` in `$body`.
macro_rules! with_operation {
    ($wr:expr, $op:expr, $after:ident => $body:expr) => {
        match $op {
            $crate::send_queue::tests::requests::Op::Send => {
                let $after = $wr.setup_send();
                $body
            },
            $crate::send_queue::tests::requests::Op::SendImm(imm) => {
                let $after = $wr.setup_send_imm(imm);
                $body
            },
            $crate::send_queue::tests::requests::Op::Write(rkey, addr) => {
                let $after = $wr.setup_write(rkey, addr);
                $body
            },
            $crate::send_queue::tests::requests::Op::WriteImm(rkey, addr, imm) => {
                let $after = $wr.setup_write_imm(rkey, addr, imm);
                $body
            },
            $crate::send_queue::tests::requests::Op::Read(rkey, addr) => {
                let $after = $wr.setup_read(rkey, addr);
                $body
            },
            $crate::send_queue::tests::requests::Op::CompareSwap(rkey, addr, compare, swap) => {
                let $after = $wr.setup_atomic_compare_swap(rkey, addr, compare, swap);
                $body
            },
            $crate::send_queue::tests::requests::Op::FetchAdd(rkey, addr, add) => {
                let $after = $wr.setup_atomic_fetch_add(rkey, addr, add);
                $body
            },
        }
    };
}

pub(super) use with_operation;

/// The data step of a guard's request.
pub(super) fn data<H: SetScatterGatherEntry + SetInlineData>(handle: H, payload: &Payload) {
    match payload {
        // SAFETY: the buffers are only described, never read.
        Payload::Sge(entry) => unsafe { handle.setup_sge(entry.lkey, entry.addr, entry.length) },
        // SAFETY: as above.
        Payload::SgeList(list) => unsafe { handle.setup_sge_list(&raw(list)) },
        Payload::Inline(bytes) => handle.setup_inline_data(bytes),
        Payload::InlineList(bytes, cuts) => {
            let slices: Vec<IoSlice<'_>> = pieces(bytes, cuts).into_iter().map(IoSlice::new).collect();
            handle.setup_inline_data_list(&slices)
        },
    }
}

/// Posts `batch` as one batch of sideway-ext's DC guard (`PostSendGuard<DynamicallyConnected>`)
/// on `views`, telling it the granted inline size when given.
pub(super) fn post_dc_guard(
    views: Views, max_inline_data: Option<u32>, routes: &[OracleAh], batch: &[Request],
) -> Result<(), PostSendError> {
    let (qp_ex, entries, mlx5_qp_ex) = views;
    let routes: Vec<OracleRoute<'_>> = routes.iter().map(OracleRoute).collect();
    // SAFETY: the views are live and used by this guard alone; the context is their mlx5 view.
    let mut guard =
        unsafe { PostSendGuard::<DynamicallyConnected>::start(qp_ex, entries, DcContext::from_raw(mlx5_qp_ex)) };
    if let Some(max_inline_data) = max_inline_data {
        guard.set_max_inline_data(max_inline_data);
    }
    for request in batch {
        let wr = guard.construct_wr(request.wr_id, flags_of(request.flags));
        let route = &routes[request.route];
        let (dct_number, dc_key) = (request.dct_number, request.dc_key);
        with_operation!(wr, request.op, after => match request.stream_id {
            Some(stream) => data(after.setup_dc_addr_stream(route, dct_number, dc_key, stream), &request.payload),
            None => data(after.setup_dc_addr(route, dct_number, dc_key), &request.payload),
        });
    }
    guard.post()
}

/// Posts `batch` as one batch of a guard whose requests all go to one address, as a pool posts
/// (`PostSendGuard<BatchAddressed<A>>`): `route`, `dct_number`, `dc_key`, and `stream` when `A`
/// addresses streams; each request's own address is ignored.
pub(super) fn post_batch_addressed<A: DcAddressing>(
    views: Views, max_inline_data: u32, route: &OracleAh, dct_number: u32, dc_key: u64, stream: u16, batch: &[Request],
) -> Result<(), PostSendError> {
    let (qp_ex, entries, mlx5_qp_ex) = views;
    // SAFETY: the view is live, the handle outlives the guard.
    let address = A::new(
        unsafe { DcAddress::new(mlx5_qp_ex, route.ibv_ah(), dct_number, dc_key) },
        stream,
    );
    // SAFETY: the views are live and used by this guard alone.
    let mut guard = unsafe { PostSendGuard::<BatchAddressed<A>>::start(qp_ex, entries, address) };
    guard.set_max_inline_data(max_inline_data);
    for request in batch {
        let wr = guard.construct_wr(request.wr_id, flags_of(request.flags));
        with_operation!(wr, request.op, after => data(after, &request.payload));
    }
    guard.post()
}

/// libmlx5 on one oracle DCI, the C entries over a second one's memory.
pub(super) struct EntriesPair {
    /// Dropped first: its queue points into `memory`.
    pub(super) entries: SendQueueEntries,
    pub(super) libmlx5: OracleDci,
    /// Only its memory is used: the entries' queue writes it.
    pub(super) memory: OracleDci,
    pub(super) routes: Vec<OracleAh>,
    pub(super) draw: Draw,
    granted: SendOperationFlags,
}

impl EntriesPair {
    /// A pair of `shape`, whose DCI was created with (and whose guards are told of) `granted`.
    pub(super) fn new(shape: Shape, operations: Operations, granted: SendOperationFlags, rng: &mut SmallRng) -> Self {
        let routes: Vec<OracleAh> = (0..3)
            .map(|_| OracleAh::new(std::array::from_fn(|_| rng.random())))
            .collect();
        let (entries, libmlx5, memory, draw) = Self::parts(shape, operations, granted, &routes, rng);
        Self {
            entries,
            libmlx5,
            memory,
            routes,
            draw,
            granted,
        }
    }

    /// The parts of a pair posting to `routes`: the entries, the DCI libmlx5 posts on, the DCI
    /// whose memory the entries write, and requests within their limits.
    pub(super) fn parts(
        shape: Shape, operations: Operations, granted: SendOperationFlags, routes: &[OracleAh], rng: &mut SmallRng,
    ) -> (SendQueueEntries, OracleDci, OracleDci, Draw) {
        let (wqe_count, max_inline_data, max_send_sge, sq_sig_all, streams, blueflame_size) = shape;
        let shape = DciShape {
            wqe_count,
            max_inline_data,
            max_send_sge,
            sq_sig_all,
            send_ops_flags: ALL_OPS_FLAGS,
            streams,
            blueflame_size,
            qp_number: rng.random_range(0..1 << 24),
        };
        let seed = rng.random();
        let mut libmlx5 = OracleDci::new(&shape);
        let mut memory = OracleDci::new(&shape);
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
            max_send_sge,
            sq_sig_all,
            qp_number: shape.qp_number,
            streams,
        };
        // SAFETY: the second DCI's memory outlives the queue (its holders drop the entries
        // first) and nothing else posts on it.
        let queue = unsafe { SendQueue::from_parts(parts) }.expect("the oracle's shape");
        // SAFETY: the lookup's places are its own boxes, alive as long as it.
        let entries = unsafe { SendQueueEntries::with_address_lookup(queue, granted, oracle_lookup(routes)) };
        let draw = Draw {
            operations,
            max_inline_data: libmlx5.max_inline_data(),
            max_send_sge,
            streams,
            routes: routes.len(),
        };
        (entries, libmlx5, memory, draw)
    }

    /// The views of libmlx5's DCI, with the entries a DC initiator of it would read.
    pub(super) fn libmlx5_views(&self) -> Views {
        let (qp_ex, mlx5) = (self.libmlx5.qp_ex(), self.libmlx5.mlx5_qp_ex());
        // SAFETY: the oracle's tables are alive.
        let entries = unsafe {
            let ibv = ProviderEntries::new(qp_ex, self.granted).expect("libmlx5's DCI entries");
            DcContext::from_raw(mlx5)
                .entries(ibv, self.libmlx5.shape().streams)
                .expect("libmlx5's DC setters")
        };
        (qp_ex, entries, mlx5)
    }

    /// The C entries' views.
    pub(super) fn direct_views(&mut self) -> Views {
        self.entries.send_views()
    }

    fn queue(&mut self) -> &mut SendQueue {
        self.entries.queue_mut()
    }

    /// Everything but the send queue's bytes and slots: posting index, doorbell record,
    /// BlueFlame register and offset, the barriers and stores; returns the events.
    pub(super) fn compare_doorbell(&mut self, context: &dyn Fn() -> String) -> Vec<MmioEvent> {
        assert_eq!(
            self.queue().posting_index(),
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
        let offset = self.queue().blueflame_offset();
        assert_eq!(offset, self.libmlx5.blueflame_offset(), "{}: offset", context());
        let events = self.queue().take_events();
        assert_eq!(events, self.libmlx5.take_events(), "{}: barriers and stores", context());
        events
    }

    /// Everything: the send queue's bytes, and each slot's `wr_id` and `wqe_head`, then
    /// [`compare_doorbell`](Self::compare_doorbell).
    pub(super) fn compare(&mut self, context: &dyn Fn() -> String) -> Vec<MmioEvent> {
        let (expected, actual) = (self.libmlx5.send_queue(), self.memory.send_queue());
        if let Some(at) = expected.iter().zip(actual).position(|(a, b)| a != b) {
            let row = at / 16 * 16;
            panic!(
                "{}: send queues differ at byte {at} (slot {}): libmlx5 {:02x?}, entries {:02x?}",
                context(),
                at / 64,
                &expected[row..row + 16],
                &actual[row..row + 16]
            );
        }
        for slot in 0..self.libmlx5.layout().wqe_count {
            let (wr_id, wqe_head) = (self.queue().wr_id(slot), self.queue().wqe_head(slot));
            assert_eq!(wr_id, self.libmlx5.wr_id(slot), "{}: wr_id at {slot}", context());
            assert_eq!(
                wqe_head,
                self.libmlx5.wqe_head(slot),
                "{}: wqe_head at {slot}",
                context()
            );
        }
        self.compare_doorbell(context)
    }

    /// After a batch libmlx5 refused: the queue's memory past the posting index is what each
    /// wrote of the batch before rolling it back (libmlx5 writes refused requests too); made
    /// libmlx5's again, with its slots' `wr_id`s, so that stale bytes stay equal.
    pub(super) fn resync(&mut self) {
        let bytes = self.libmlx5.send_queue().to_vec();
        self.memory.send_queue_mut().copy_from_slice(&bytes);
        for slot in 0..self.libmlx5.layout().wqe_count {
            let (wr_id, wqe_head) = (self.libmlx5.wr_id(slot), self.libmlx5.wqe_head(slot));
            let queue = self.queue();
            queue.wr_ids[slot as usize] = wr_id;
            queue.wqe_heads[slot as usize] = wqe_head;
        }
    }

    /// Every posted request completes, both ways (`sq.tail = sq.head`).
    pub(super) fn retire(&mut self, context: &dyn Fn() -> String) {
        self.libmlx5.retire_all();
        let queue = self.queue();
        queue.tail = queue.head;
        let direct = (queue.head, queue.tail);
        assert_eq!(self.libmlx5.head_and_tail(), direct, "{}: head and tail", context());
    }

    /// The 16-bit posting index of each of the last `count` requests posted, from `before`.
    pub(super) fn starts(&self, before: u32, count: usize) -> Vec<u32> {
        let ring = self.libmlx5.send_queue();
        let wqe_count = self.libmlx5.layout().wqe_count;
        let mut index = before;
        (0..count)
            .map(|_| {
                let start = index;
                let size = u32::from(ring[((index & (wqe_count - 1)) * 64 + 7) as usize] & 0x3f);
                index = index.wrapping_add(size.div_ceil(4));
                start
            })
            .collect()
    }
}

/// Whether `request`, whose WQE starts at posting index `index`, has inline data that crosses
/// the queue's end.
pub(super) fn inline_crosses_end(request: &Request, index: u32, wqe_count: u32) -> bool {
    let length = match &request.payload {
        Payload::Inline(bytes) | Payload::InlineList(bytes, _) => bytes.len(),
        _ => return false,
    };
    let header = if matches!(request.op, Op::Send | Op::SendImm(_)) {
        64
    } else {
        80
    };
    let end = wqe_count as usize * 64;
    let start = (index & (wqe_count - 1)) as usize * 64 + header + 4;
    length > 0 && start < end && start + length > end
}

/// A batch length: 1, 16 or random, up to `most`.
pub(super) fn batch_len(rng: &mut SmallRng, most: u32) -> usize {
    match rng.random_range(0..3) {
        0 => 1,
        1 => 16,
        _ => rng.random_range(1..=64),
    }
    .min(most as usize)
}

/// A generator for a test's seed.
pub(super) fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}
