//! Random DC requests within a queue's limits, and posting them two ways: through libmlx5's
//! builders on an oracle DCI (`ibv_wr_*`, `mlx5dv_wr_set_dc_addr(_stream)`), and through the
//! direct writer's guards: each request addressed at its address step, or a batch to one
//! address.
use std::io::IoSlice;

use rand::rngs::SmallRng;
use rand::Rng;
use rdma_mummy_sys::{
    ibv_data_buf, ibv_send_flags, ibv_sge, ibv_wr_atomic_cmp_swp, ibv_wr_atomic_fetch_add, ibv_wr_complete,
    ibv_wr_rdma_read, ibv_wr_rdma_write, ibv_wr_rdma_write_imm, ibv_wr_send, ibv_wr_send_imm, ibv_wr_set_inline_data,
    ibv_wr_set_inline_data_list, ibv_wr_set_sge, ibv_wr_set_sge_list, ibv_wr_start, mlx5dv_wr_set_dc_addr,
    mlx5dv_wr_set_dc_addr_stream,
};
use sideway::ibverbs::queue_pair::WorkRequestFlags;
use softmlx5::oracle::{OracleAh, OracleDci};

use crate::send_queue::operation::{InlineOperation, WqeOperation};
use crate::send_queue::{
    AddressVector, BatchAddress, DirectRequestData, DirectRequestDestination, SendQueue, WorkRequestError,
};

/// The operations a queue is tried with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operations {
    /// SEND and RDMA WRITE.
    SendWrite,
    /// Those, their immediates, RDMA READ and both atomics.
    All,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Send,
    SendImm(u32),
    Write(u32, u64),
    WriteImm(u32, u64, u32),
    Read(u32, u64),
    CompareSwap(u32, u64, u64, u64),
    FetchAdd(u32, u64, u64),
}

impl Op {
    fn takes_inline(self) -> bool {
        matches!(self, Op::Send | Op::SendImm(_) | Op::Write(..) | Op::WriteImm(..))
    }
}

/// A scatter/gather entry (`ibv_sge` has no `Debug`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub(crate) lkey: u32,
    pub(crate) addr: u64,
    pub(crate) length: u32,
}

pub(crate) fn raw(list: &[Entry]) -> Vec<ibv_sge> {
    list.iter()
        .map(|entry| ibv_sge {
            addr: entry.addr,
            length: entry.length,
            lkey: entry.lkey,
        })
        .collect()
}

#[derive(Debug, Clone)]
pub(crate) enum Payload {
    Sge(Entry),
    SgeList(Vec<Entry>),
    Inline(Vec<u8>),
    /// The inline bytes, cut at these lengths.
    InlineList(Vec<u8>, Vec<usize>),
}

/// One request, as both posting paths take it.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) wr_id: u64,
    pub(crate) flags: u32,
    pub(crate) op: Op,
    /// Index of its address handle.
    pub(crate) route: usize,
    pub(crate) dct_number: u32,
    pub(crate) dc_key: u64,
    pub(crate) stream_id: Option<u16>,
    pub(crate) payload: Payload,
}

/// The limits requests are drawn within.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Draw {
    pub(crate) operations: Operations,
    pub(crate) max_inline_data: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) streams: bool,
    pub(crate) routes: usize,
}

pub(crate) fn sge(rng: &mut SmallRng) -> Entry {
    // A zero length now and then: libmlx5 leaves such an entry out.
    let length = if rng.random_ratio(1, 8) {
        0
    } else {
        rng.random_range(1..=1 << 20)
    };
    Entry {
        addr: rng.random(),
        length,
        lkey: rng.random(),
    }
}

/// Inline lengths favour the edges: empty, the maximum, and around 16-byte boundaries.
fn inline_length(rng: &mut SmallRng, max: u32) -> usize {
    let max = max as usize;
    match rng.random_range(0..8) {
        0 => 0,
        1 => max,
        2 => max.saturating_sub(rng.random_range(0..4)),
        _ => rng.random_range(0..=max),
    }
}

impl Draw {
    pub(crate) fn request(&self, rng: &mut SmallRng, wr_id: u64) -> Request {
        let op = match (self.operations, rng.random_range(0..7)) {
            (Operations::SendWrite, n) if n % 2 == 0 => Op::Send,
            (Operations::SendWrite, _) => Op::Write(rng.random(), rng.random()),
            (_, 0) => Op::Send,
            (_, 1) => Op::SendImm(rng.random()),
            (_, 2) => Op::Write(rng.random(), rng.random()),
            (_, 3) => Op::WriteImm(rng.random(), rng.random(), rng.random()),
            (_, 4) => Op::Read(rng.random(), rng.random()),
            (_, 5) => Op::CompareSwap(rng.random(), rng.random(), rng.random(), rng.random()),
            _ => Op::FetchAdd(rng.random(), rng.random(), rng.random()),
        };
        let kinds = if op.takes_inline() { 4 } else { 2 };
        let payload = match rng.random_range(0..kinds) {
            0 if self.max_send_sge > 0 => Payload::Sge(sge(rng)),
            0 | 1 => {
                let count = rng.random_range(0..=self.max_send_sge as usize);
                Payload::SgeList((0..count).map(|_| sge(rng)).collect())
            },
            2 => Payload::Inline(
                (0..inline_length(rng, self.max_inline_data))
                    .map(|_| rng.random())
                    .collect(),
            ),
            _ => {
                let bytes: Vec<u8> = (0..inline_length(rng, self.max_inline_data))
                    .map(|_| rng.random())
                    .collect();
                let mut cuts: Vec<usize> = (0..rng.random_range(0..4))
                    .map(|_| rng.random_range(0..=bytes.len()))
                    .collect();
                cuts.sort_unstable();
                Payload::InlineList(bytes, cuts)
            },
        };
        let flag_bits = [
            ibv_send_flags::IBV_SEND_FENCE.0,
            ibv_send_flags::IBV_SEND_SIGNALED.0,
            ibv_send_flags::IBV_SEND_SOLICITED.0,
            ibv_send_flags::IBV_SEND_INLINE.0,
        ];
        let flags = flag_bits
            .iter()
            .filter(|_| rng.random_bool(0.5))
            .fold(0, |all, bit| all | bit);
        Request {
            wr_id,
            flags,
            op,
            route: rng.random_range(0..self.routes),
            dct_number: rng.random_range(0..1 << 24),
            dc_key: rng.random(),
            stream_id: (self.streams && rng.random_bool(0.7)).then(|| rng.random()),
            payload,
        }
    }
}

/// The slices of an inline list.
pub(crate) fn pieces<'b>(bytes: &'b [u8], cuts: &[usize]) -> Vec<&'b [u8]> {
    let mut pieces = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for &cut in cuts {
        pieces.push(&bytes[start..cut]);
        start = cut;
    }
    pieces.push(&bytes[start..]);
    pieces
}

/// Posts `batch` through libmlx5's builders, as sideway-ext's DC guard calls them (builder,
/// address, data).
pub(crate) fn post_libmlx5(dci: &OracleDci, routes: &[OracleAh], batch: &[Request]) {
    let (qp, mlx5) = (dci.qp_ex().as_ptr(), dci.mlx5_qp_ex().as_ptr());
    // SAFETY: the oracle's DCI and address handles are alive and its builders installed; the
    // buffers are only described (and inline bytes copied during the calls).
    unsafe {
        ibv_wr_start(qp);
        for request in batch {
            (*qp).wr_id = request.wr_id;
            (*qp).wr_flags = request.flags;
            match request.op {
                Op::Send => ibv_wr_send(qp),
                Op::SendImm(imm) => ibv_wr_send_imm(qp, imm),
                Op::Write(rkey, addr) => ibv_wr_rdma_write(qp, rkey, addr),
                Op::WriteImm(rkey, addr, imm) => ibv_wr_rdma_write_imm(qp, rkey, addr, imm),
                Op::Read(rkey, addr) => ibv_wr_rdma_read(qp, rkey, addr),
                Op::CompareSwap(rkey, addr, compare, swap) => ibv_wr_atomic_cmp_swp(qp, rkey, addr, compare, swap),
                Op::FetchAdd(rkey, addr, add) => ibv_wr_atomic_fetch_add(qp, rkey, addr, add),
            }
            let ah = routes[request.route].ibv_ah().as_ptr();
            match request.stream_id {
                Some(stream) => mlx5dv_wr_set_dc_addr_stream(mlx5, ah, request.dct_number, request.dc_key, stream),
                None => mlx5dv_wr_set_dc_addr(mlx5, ah, request.dct_number, request.dc_key),
            }
            match &request.payload {
                Payload::Sge(sge) => ibv_wr_set_sge(qp, sge.lkey, sge.addr, sge.length),
                Payload::SgeList(list) => ibv_wr_set_sge_list(qp, list.len(), raw(list).as_ptr()),
                Payload::Inline(bytes) => ibv_wr_set_inline_data(qp, bytes.as_ptr() as *mut _, bytes.len()),
                Payload::InlineList(bytes, cuts) => {
                    let list: Vec<ibv_data_buf> = pieces(bytes, cuts)
                        .iter()
                        .map(|piece| ibv_data_buf {
                            addr: piece.as_ptr() as *mut _,
                            length: piece.len(),
                        })
                        .collect();
                    ibv_wr_set_inline_data_list(qp, list.len(), list.as_ptr())
                },
            }
        }
        assert_eq!(ibv_wr_complete(qp), 0, "libmlx5 refused a batch within its limits");
    }
}

pub(crate) fn flags_of(bits: u32) -> WorkRequestFlags {
    [
        WorkRequestFlags::Fence,
        WorkRequestFlags::Signaled,
        WorkRequestFlags::Solicited,
        WorkRequestFlags::Inline,
    ]
    .into_iter()
    .filter(|flag| bits & flag.bits() != 0)
    .fold(WorkRequestFlags::none(), |all, flag| all | flag)
}

fn addressed<'g, 'a, O: WqeOperation>(
    destination: DirectRequestDestination<'g, O>, request: &Request, address: &'a AddressVector,
) -> DirectRequestData<'g, 'a, O> {
    match request.stream_id {
        Some(stream) => destination.setup_dc_addr_stream(address, request.dct_number, request.dc_key, stream),
        None => destination.setup_dc_addr(address, request.dct_number, request.dc_key),
    }
}

fn gather<O: WqeOperation>(handle: DirectRequestData<'_, '_, O>, payload: &Payload) -> Result<(), WorkRequestError> {
    // SAFETY: the writer only describes the buffers.
    unsafe {
        match payload {
            Payload::Sge(sge) => handle.setup_sge(sge.lkey, sge.addr, sge.length),
            Payload::SgeList(list) => handle.setup_sge_list(&raw(list)),
            Payload::Inline(_) | Payload::InlineList(..) => unreachable!("no inline data for {payload:?}"),
        }
    }
}

fn any_data<O: InlineOperation>(
    handle: DirectRequestData<'_, '_, O>, payload: &Payload,
) -> Result<(), WorkRequestError> {
    match payload {
        Payload::Inline(bytes) => handle.setup_inline_data(bytes),
        Payload::InlineList(bytes, cuts) => {
            let slices: Vec<IoSlice<'_>> = pieces(bytes, cuts).into_iter().map(IoSlice::new).collect();
            handle.setup_inline_data_list(&slices)
        },
        _ => gather(handle, payload),
    }
}

/// Posts `batch` through the direct writer, each request addressed at its address step.
pub(crate) fn post_direct(queue: &mut SendQueue, routes: &[AddressVector], batch: &[Request]) {
    let mut guard = queue.start_post_send();
    for request in batch {
        let handle = guard.construct_wr(request.wr_id, flags_of(request.flags));
        let address = &routes[request.route];
        let payload = &request.payload;
        let result = match request.op {
            Op::Send => any_data(addressed(handle.setup_send(), request, address), payload),
            Op::SendImm(imm) => any_data(addressed(handle.setup_send_imm(imm), request, address), payload),
            Op::Write(rkey, addr) => any_data(addressed(handle.setup_write(rkey, addr), request, address), payload),
            Op::WriteImm(rkey, addr, imm) => any_data(
                addressed(handle.setup_write_imm(rkey, addr, imm), request, address),
                payload,
            ),
            Op::Read(rkey, addr) => gather(addressed(handle.setup_read(rkey, addr), request, address), payload),
            Op::CompareSwap(rkey, addr, compare, swap) => {
                let destination = handle.setup_atomic_compare_swap(rkey, addr, compare, swap);
                gather(addressed(destination, request, address), payload)
            },
            Op::FetchAdd(rkey, addr, add) => gather(
                addressed(handle.setup_atomic_fetch_add(rkey, addr, add), request, address),
                payload,
            ),
        };
        if let Err(error) = result {
            panic!("the writer refused {request:?}: {error}");
        }
    }
    guard.post();
}

/// Posts `batch`, whose requests share one address (the first's), through the direct writer's
/// batch to that address: each request from its operation to its data.
pub(crate) fn post_direct_to(queue: &mut SendQueue, routes: &[AddressVector], batch: &[Request]) {
    let Some(first) = batch.first() else { return };
    let address = BatchAddress::new(&routes[first.route], first.dct_number, first.dc_key, first.stream_id);
    let mut guard = queue.start_post_send_to(address);
    for request in batch {
        let handle = guard.construct_wr(request.wr_id, flags_of(request.flags));
        let payload = &request.payload;
        let result = match request.op {
            Op::Send => any_data(handle.setup_send(), payload),
            Op::SendImm(imm) => any_data(handle.setup_send_imm(imm), payload),
            Op::Write(rkey, addr) => any_data(handle.setup_write(rkey, addr), payload),
            Op::WriteImm(rkey, addr, imm) => any_data(handle.setup_write_imm(rkey, addr, imm), payload),
            Op::Read(rkey, addr) => gather(handle.setup_read(rkey, addr), payload),
            Op::CompareSwap(rkey, addr, compare, swap) => {
                gather(handle.setup_atomic_compare_swap(rkey, addr, compare, swap), payload)
            },
            Op::FetchAdd(rkey, addr, add) => gather(handle.setup_atomic_fetch_add(rkey, addr, add), payload),
        };
        if let Err(error) = result {
            panic!("the writer refused {request:?}: {error}");
        }
    }
    guard.post();
}
