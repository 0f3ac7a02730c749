//! sideway-ext's DC post guard over libmlx5's own builders: for random requests of every shape
//! a DC initiator posts (RDMA WRITE and READ, SEND, the immediates, both atomics; scatter/gather
//! lists and inline data; with and without DCI streams), each WQE libmlx5 writes, decoded from
//! the mlx5 layout, says what the request asked.
use std::io::IoSlice;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdma_mummy_sys::ibv_sge;
use sideway::ibverbs::queue_pair::SendOperationFlags;
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::mlx5::dc::adopted::AdoptedDcSendViews;
use sideway_ext::mlx5::dc::initiator::DcPostSendGuard;
use softmlx5::oracle::decode::{self, decode_dc_wqe, Data, DecodedWqe};
use softmlx5::oracle::{DciShape, OracleAh, OracleDci};

#[derive(Debug, Clone, Copy)]
enum Operation {
    Write {
        rkey: u32,
        address: u64,
    },
    WriteImm {
        rkey: u32,
        address: u64,
        imm: u32,
    },
    Send,
    SendImm {
        imm: u32,
    },
    Read {
        rkey: u32,
        address: u64,
    },
    CompareSwap {
        rkey: u32,
        address: u64,
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        rkey: u32,
        address: u64,
        add: u64,
    },
}

/// A scatter/gather entry: (address, length, lkey).
type Sge = (u64, u32, u32);

#[derive(Debug, Clone)]
enum Payload {
    Gather(Vec<Sge>),
    Inline(Vec<u8>),
}

#[derive(Debug, Clone)]
struct Request {
    wr_id: u64,
    flags: WorkRequestFlags,
    operation: Operation,
    dct_number: u32,
    dc_key: u64,
    stream: Option<u16>,
    payload: Payload,
}

fn random_request(rng: &mut StdRng, dci: &OracleDci, streams: bool) -> Request {
    let rkey = rng.random();
    let address = rng.random();
    let operation = match rng.random_range(0..7) {
        0 => Operation::Write { rkey, address },
        1 => Operation::WriteImm {
            rkey,
            address,
            imm: rng.random(),
        },
        2 => Operation::Send,
        3 => Operation::SendImm { imm: rng.random() },
        4 => Operation::Read { rkey, address },
        5 => Operation::CompareSwap {
            rkey,
            address,
            compare: rng.random(),
            swap: rng.random(),
        },
        _ => Operation::FetchAdd {
            rkey,
            address,
            add: rng.random(),
        },
    };
    let may_inline = matches!(
        operation,
        Operation::Write { .. } | Operation::WriteImm { .. } | Operation::Send | Operation::SendImm { .. }
    );
    let atomic = matches!(operation, Operation::CompareSwap { .. } | Operation::FetchAdd { .. });
    let payload = if may_inline && rng.random_bool(0.5) {
        let length = rng.random_range(0..=dci.max_inline_data() as usize);
        Payload::Inline((0..length).map(|_| rng.random()).collect())
    } else {
        let count = if atomic {
            1
        } else {
            rng.random_range(1..=dci.shape().max_send_sge)
        };
        Payload::Gather(
            (0..count)
                .map(|_| {
                    let length = if atomic {
                        8
                    } else if rng.random_bool(0.1) {
                        0
                    } else {
                        rng.random_range(1..1 << 20)
                    };
                    (rng.random(), length, rng.random())
                })
                .collect(),
        )
    };
    let mut flags = WorkRequestFlags::none();
    if rng.random_bool(0.5) {
        flags |= WorkRequestFlags::Signaled;
    }
    if rng.random_bool(0.2) {
        flags |= WorkRequestFlags::Fence;
    }
    if rng.random_bool(0.2) {
        flags |= WorkRequestFlags::Solicited;
    }
    Request {
        wr_id: rng.random(),
        flags,
        operation,
        dct_number: rng.random_range(0..1 << 24),
        dc_key: rng.random(),
        stream: (streams && rng.random_bool(0.7)).then(|| rng.random()),
        payload,
    }
}

/// Posts `requests` as one batch through sideway-ext's DC guard over the oracle's libmlx5.
fn post(dci: &OracleDci, ah: &OracleAh, requests: &[Request]) {
    let granted = SendOperationFlags::Send
        | SendOperationFlags::SendWithImmediate
        | SendOperationFlags::Write
        | SendOperationFlags::WriteWithImmediate
        | SendOperationFlags::Read
        | SendOperationFlags::AtomicCompareAndSwap
        | SendOperationFlags::AtomicFetchAndAdd;
    // SAFETY: the oracle's DCI is alive and its builders installed.
    let views =
        unsafe { AdoptedDcSendViews::new(dci.qp_ex(), dci.mlx5_qp_ex(), granted) }.expect("libmlx5's DCI entries");
    // SAFETY: as above, and the DCI is used by this guard alone.
    let mut guard = unsafe { DcPostSendGuard::start_adopted(views) };
    for request in requests {
        let wr = guard.construct_wr(request.wr_id, request.flags);
        macro_rules! addressed {
            ($after:expr) => {{
                let after = $after;
                // SAFETY: the oracle's handle outlives the guard; a request on a stream only on
                // an oracle DCI with streams (libmlx5 fills the setter).
                let data = unsafe {
                    after.setup_dc_addr_adopted(ah.ibv_ah(), request.dct_number, request.dc_key, request.stream)
                };
                finish(data, &request.payload)
            }};
        }
        match request.operation {
            Operation::Write { rkey, address } => addressed!(wr.setup_write(rkey, address)),
            Operation::WriteImm { rkey, address, imm } => addressed!(wr.setup_write_imm(rkey, address, imm)),
            Operation::Send => addressed!(wr.setup_send()),
            Operation::SendImm { imm } => addressed!(wr.setup_send_imm(imm)),
            Operation::Read { rkey, address } => addressed!(wr.setup_read(rkey, address)),
            Operation::CompareSwap {
                rkey,
                address,
                compare,
                swap,
            } => {
                addressed!(wr.setup_atomic_compare_swap(rkey, address, compare, swap))
            },
            Operation::FetchAdd { rkey, address, add } => addressed!(wr.setup_atomic_fetch_add(rkey, address, add)),
        }
    }
    guard.post().expect("libmlx5 takes the batch");
}

fn finish<H: SetScatterGatherEntry + SetInlineData>(handle: H, payload: &Payload) {
    match payload {
        // SAFETY: libmlx5 only copies the entries into the WQE; nothing reads the addresses.
        Payload::Gather(list) if list.len() == 1 => unsafe { handle.setup_sge(list[0].2, list[0].0, list[0].1) },
        Payload::Gather(list) => {
            let list: Vec<ibv_sge> = list
                .iter()
                .map(|&(addr, length, lkey)| ibv_sge { addr, length, lkey })
                .collect();
            // SAFETY: as above.
            unsafe { handle.setup_sge_list(&list) }
        },
        Payload::Inline(bytes) if bytes.len() % 2 == 0 => handle.setup_inline_data(bytes),
        Payload::Inline(bytes) => {
            let (a, b) = bytes.split_at(bytes.len() / 3);
            handle.setup_inline_data_list(&[IoSlice::new(a), IoSlice::new(b)])
        },
    }
}

/// What the request's WQE must say.
fn check(wqe: &DecodedWqe, request: &Request, index: u32, dci: &OracleDci, av: &[u8; 48]) {
    let (opcode, remote, atomic, immediate) = match request.operation {
        Operation::Write { rkey, address } => (decode::opcode::RDMA_WRITE, Some((address, rkey)), None, None),
        Operation::WriteImm { rkey, address, imm } => {
            (decode::opcode::RDMA_WRITE_IMM, Some((address, rkey)), None, Some(imm))
        },
        Operation::Send => (decode::opcode::SEND, None, None, None),
        Operation::SendImm { imm } => (decode::opcode::SEND_IMM, None, None, Some(imm)),
        Operation::Read { rkey, address } => (decode::opcode::RDMA_READ, Some((address, rkey)), None, None),
        Operation::CompareSwap {
            rkey,
            address,
            compare,
            swap,
        } => (
            decode::opcode::ATOMIC_CS,
            Some((address, rkey)),
            Some((swap, compare)),
            None,
        ),
        Operation::FetchAdd { rkey, address, add } => (
            decode::opcode::ATOMIC_FA,
            Some((address, rkey)),
            Some((add, wqe.atomic.map_or(0, |a| a.1))),
            None,
        ),
    };
    assert_eq!(wqe.opcode, opcode, "{request:?}");
    assert_eq!(wqe.opmod, 0);
    assert_eq!(u32::from(wqe.index), index & 0xffff);
    assert_eq!(wqe.qp_number, dci.shape().qp_number);
    assert_eq!(wqe.signature, 0);
    assert_eq!(wqe.stream, request.stream.unwrap_or(0), "{request:?}");
    let signaled = request.flags.contains(WorkRequestFlags::Signaled) || dci.shape().sq_sig_all;
    assert_eq!(wqe.fm_ce_se & decode::CQ_UPDATE != 0, signaled, "{request:?}");
    assert_eq!(
        wqe.fm_ce_se & decode::SOLICITED != 0,
        request.flags.contains(WorkRequestFlags::Solicited)
    );
    let fence = if request.flags.contains(WorkRequestFlags::Fence) {
        0x80
    } else {
        0
    };
    assert_eq!(wqe.fm_ce_se & decode::FENCE_MODE, fence, "{request:?}");
    // The immediate goes to libmlx5 unchanged, as the guard documents: its bytes are the
    // number's in memory order (C callers pass `htonl(x)`).
    assert_eq!(wqe.immediate, immediate.map(u32::from_be));
    assert_eq!(wqe.dc_key, request.dc_key);
    assert_eq!(wqe.dct_number, request.dct_number);
    assert!(wqe.extended_av);
    assert_eq!(wqe.av_dqp_high, 0);
    assert_eq!(wqe.av_route[..], av[12..]);
    assert_eq!(wqe.remote, remote);
    assert_eq!(wqe.atomic, atomic);
    let data = match &request.payload {
        Payload::Gather(list) => {
            let entries: Vec<_> = list
                .iter()
                .filter(|s| s.1 != 0)
                .map(|&(addr, length, lkey)| (length, lkey, addr))
                .collect();
            if entries.is_empty() {
                Data::None
            } else {
                Data::Gather(entries)
            }
        },
        Payload::Inline(bytes) if bytes.is_empty() => Data::None,
        Payload::Inline(bytes) => Data::Inline(bytes.clone()),
    };
    assert_eq!(wqe.data, data, "{request:?}");
}

/// Posts `batches` random batches on a DCI of `shape`; returns how many requests were checked
/// and the posting index reached.
fn run(seed: u64, shape: DciShape, batches: usize) -> (usize, u32) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut dci = OracleDci::new(&shape);
    dci.fill_stale(seed);
    let mut av: [u8; 48] = std::array::from_fn(|_| rng.random());
    // mlx5_create_ah leaves dqp_dct zero: libmlx5 ORs the DCT number into it.
    av[8..12].fill(0);
    let ah = OracleAh::new(av);
    let mut posted = 0;
    for _ in 0..batches {
        let (head, tail) = dci.head_and_tail();
        let room = dci.max_post() - (head - tail);
        if room == 0 {
            dci.retire_all();
            continue;
        }
        let len = rng.random_range(1..=16.min(room as usize));
        let requests: Vec<Request> = (0..len)
            .map(|_| random_request(&mut rng, &dci, shape.streams))
            .collect();
        let start = dci.posting_index();
        post(&dci, &ah, &requests);
        let mut index = start;
        for request in &requests {
            let slot = index & (shape.wqe_count - 1);
            let wqe = decode_dc_wqe(dci.send_queue(), slot).expect("a WQE the decoder reads");
            check(&wqe, request, index, &dci, &av);
            assert_eq!(dci.wr_id(slot), request.wr_id);
            index += u32::from(wqe.ds).div_ceil(4);
        }
        assert_eq!(
            dci.posting_index(),
            index,
            "the batch's WQEs end where libmlx5's index does"
        );
        assert_eq!(dci.doorbell_record()[1], (index & 0xffff).to_be());
        posted += requests.len();
        // Nothing polls the oracle's queue: retire the requests as libmlx5's poller would, so
        // that the queue keeps turning over and its 16-bit index wraps.
        if rng.random_bool(0.5) {
            dci.retire_all();
        }
    }
    (posted, dci.posting_index())
}

fn random_shape(rng: &mut StdRng) -> DciShape {
    DciShape {
        wqe_count: [64, 128, 256][rng.random_range(0..3)],
        max_inline_data: [0, 16, 60, 188][rng.random_range(0..4)],
        max_send_sge: rng.random_range(1..=4),
        sq_sig_all: rng.random_bool(0.3),
        send_ops_flags: 0x7f, // WRITE, WRITE_IMM, SEND, SEND_IMM, READ, both atomics
        streams: rng.random_bool(0.5),
        blueflame_size: if rng.random_bool(0.8) { 256 } else { 0 },
        qp_number: rng.random_range(0..1 << 24),
    }
}

#[test]
fn every_dc_request_shape_reads_back_from_libmlx5s_wqes() {
    let mut posted = 0;
    for seed in 0..400u64 {
        let shape = random_shape(&mut StdRng::seed_from_u64(seed));
        posted += run(seed, shape, 100).0;
    }
    assert!(posted > 200_000, "{posted} requests checked");
}

#[test]
fn the_16_bit_wqe_index_wraps() {
    let seed = 4242;
    let shape = random_shape(&mut StdRng::seed_from_u64(seed));
    let (posted, index) = run(seed, shape, 10_000);
    assert!(index > 0x1_0000, "{posted} requests reached index {index:#x} only");
}
