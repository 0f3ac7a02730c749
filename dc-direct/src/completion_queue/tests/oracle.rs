//! The poller against libmlx5's own `mlx5_poll_cq_v1` (the oracle's `OracleCq`) over the same
//! CQEs: the same random requests are posted through libmlx5's builders on an `OracleDci`
//! (filling its `sq.wrid[]` and `sq.wqe_head[]`) and through the crate's writer on a send queue
//! of the same shape in the poller's table, both holding them at the same slots; random CQEs for
//! them are written into the oracle CQ's ring; libmlx5 and the poller (over the same ring, with a
//! doorbell record of its own) poll the same counts in turn, and every completion, the consumer
//! index, the doorbell record and the requests left outstanding (the room the completions freed:
//! libmlx5's `sq.head - sq.tail`, the writer's queue's) must agree. libmlx5's barriers are checked to be
//! what the poller is written after (one `udma_from_device_barrier` per CQE it read past the
//! owner check); the poller's own are the hardware's, which memory does not show. cq.c's
//! `update_cons_index` is a plain store, not one of `util/mmio.h`'s; the comparison of the
//! doorbell records covers it.
//!
//! Fair because libmlx5's poll writes nothing in the ring: each poller reads the same bytes; only
//! the doorbell record and the send queue's tail are written, and each has its own.
//!
//! Requester CQEs with scattered data (`MLX5_INLINE_SCATTER_32`/`_64`) are among them: libmlx5's
//! `mlx5_copy_to_send_wqe` fails them for any QP that is not RC, as the poller does.
//!
//! Left to `layout`'s tests, because the oracle cannot take them: compressed CQEs, CQEs
//! that are not send completions and CQEs of unknown QPs (libmlx5 fails or fills half an
//! `ibv_wc`), 128-byte CQEs (the oracle's are 64 bytes).

use std::collections::VecDeque;
use std::ptr::NonNull;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rdma_mummy_sys::{ibv_wc, ibv_wc_flags, ibv_wc_opcode};
use softmlx5::oracle::{Barrier, DciShape, MmioEvent, OracleCq, OracleDci};

use super::oracle_support::{with_stderr_muted, Posted, Posting, MLX5_OPCODE_SEND};
use crate::completion_queue::{Completion, CompletionQueueParts, CompletionQueuePoller};

/// `IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND`.
const WRITE_AND_SEND: u64 = 1 | 1 << 3;
/// The syndromes `mlx5_handle_error_cqe` names.
const SYNDROMES: [u8; 13] = [
    0x01, 0x02, 0x04, 0x05, 0x06, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x22,
];
/// WQE opcodes a requester CQE may echo besides the posted one: the ones `handle_good_req`
/// names, the four whose opcode it takes from `sq.wr_data[]`, and unknown ones.
const OTHER_WQE_OPCODES: [u8; 14] = [
    0x01, 0x09, 0x0b, 0x0e, 0x10, 0x11, 0x12, 0x00, 0x25, 0x20, 0x2f, 0x14, 0x1b, 0xff,
];
/// UMR, SET_PSV, NOP, MMO.
const WR_DATA_OPCODES: [u8; 4] = [0x25, 0x20, 0x00, 0x2f];

/// A CQE the test wrote, to tell which fields libmlx5 sets in its `ibv_wc`.
#[derive(Debug, Clone, Copy)]
enum Written {
    Requester { wqe_opcode: u8 },
    RequesterError,
}

#[derive(Debug)]
struct Coverage {
    syndromes: [u32; 256],
    wqe_opcodes: [u32; 256],
    passes: u32,
    not_owned_stops: u32,
    completions: u32,
    barriers: u32,
}

impl Default for Coverage {
    fn default() -> Self {
        Self {
            syndromes: [0; 256],
            wqe_opcodes: [0; 256],
            passes: 0,
            not_owned_stops: 0,
            completions: 0,
            barriers: 0,
        }
    }
}

struct Run {
    rng: SmallRng,
    /// libmlx5's DCI and the writer's queue in the poller's table.
    posting: Posting,
    cq: OracleCq,
    poller: CompletionQueuePoller,
    /// The poller's doorbell record (the oracle CQ has its own).
    doorbell_record: Box<[u32; 2]>,
    posted: VecDeque<Posted>,
    written: VecDeque<Written>,
    /// The index of the next CQE the "device" writes.
    write_index: u32,
    /// Whether the CQE at `write_index` is one the device has not handed over yet.
    not_owned_written: bool,
    coverage: Coverage,
}

impl Run {
    fn new(seed: u64, cqe_count: u32, wqe_count: u32, sq_sig_all: bool) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let shape = DciShape {
            wqe_count,
            max_inline_data: [0, 28, 60, 124][rng.random_range(0..4)],
            max_send_sge: 1,
            sq_sig_all,
            send_ops_flags: WRITE_AND_SEND,
            streams: false,
            blueflame_size: if rng.random_bool(0.5) { 256 } else { 0 },
            qp_number: rng.random::<u32>() & 0x00ff_ffff,
        };
        let dci = OracleDci::new(&shape);
        let mut cq = OracleCq::new(cqe_count);
        cq.attach(&dci);
        let posting = Posting::new(dci, &mut rng);
        let mut doorbell_record = Box::new([0u32; 2]);
        let layout = cq.layout();
        let parts = CompletionQueueParts {
            buffer: layout.buffer,
            cqe_count: layout.cqe_count,
            cqe_size: layout.cqe_size,
            doorbell_record: NonNull::from(&mut doorbell_record[0]),
            cq_number: layout.cq_number,
        };
        // SAFETY: the oracle CQ's ring and the boxed doorbell record live as long as the run;
        // libmlx5's poll only reads the ring.
        let poller = unsafe { CompletionQueuePoller::new(parts) }.unwrap();
        Self {
            rng,
            posting,
            cq,
            poller,
            doorbell_record,
            posted: VecDeque::new(),
            written: VecDeque::new(),
            write_index: 0,
            not_owned_written: false,
            coverage: Coverage::default(),
        }
    }

    /// One round: post a batch, write CQEs for some of the posted requests (maybe followed by
    /// one the device does not yet hand over), and poll them with both, in random counts.
    fn round(&mut self) {
        let count = self.rng.random_range(0..=8);
        self.posting.post_batch(count, &mut self.rng, &mut self.posted);
        let cqe_count = self.cq.layout().cqe_count;
        let room = cqe_count - self.write_index.wrapping_sub(self.poller.consumer_index);
        let cqes = self.rng.random_range(0..=self.posted.len().min(room as usize));
        for _ in 0..cqes {
            if self.posted.is_empty() {
                break;
            }
            // The device completes in order; unsignaled requests before get no CQE of their own.
            let skipped = self.rng.random_range(0..self.posted.len().min(3));
            self.posted.drain(..skipped);
            let request = self.posted.pop_front().unwrap();
            self.write_cqe(request);
        }
        let unpolled = self.write_index.wrapping_sub(self.poller.consumer_index);
        if unpolled < cqe_count && self.rng.random_bool(0.3) {
            self.write_not_owned();
        }
        let drain = self.rng.random_bool(0.8);
        loop {
            let max = self.rng.random_range(0..=cqes.min(15) + 1);
            let polled = self.poll_both(max);
            if (polled == 0 && max > 0) || !drain {
                break;
            }
        }
    }

    fn write_cqe(&mut self, request: Posted) {
        let cqe_count = self.cq.layout().cqe_count;
        let index = self.write_index;
        self.write_index = index.wrapping_add(1);
        self.not_owned_written = false;
        if index & (cqe_count - 1) == 0 && index != 0 {
            self.coverage.passes += 1;
        }
        let owner = u8::from(index & cqe_count != 0);
        let user_index = self.posting.dci.user_index();
        let qp_number = self.posting.dci.shape().qp_number;
        let rng = &mut self.rng;
        let mut cqe: [u8; 64] = std::array::from_fn(|_| rng.random());
        // CQE version 1: the user index (the top byte is not the index's) names the QP for
        // libmlx5; this poller reads the QP number.
        cqe[32..36].copy_from_slice(&(user_index | (rng.random::<u32>() & 0xff00_0000)).to_be_bytes());
        cqe[60..62].copy_from_slice(&(request.index as u16).to_be_bytes());
        let solicited = rng.random::<u8>() & 0x2;
        let (cqe_opcode, wqe_opcode) = if rng.random_bool(0.3) {
            let syndrome = if rng.random_bool(0.8) {
                SYNDROMES[rng.random_range(0..SYNDROMES.len())]
            } else {
                rng.random()
            };
            cqe[55] = syndrome;
            self.coverage.syndromes[usize::from(syndrome)] += 1;
            self.written.push_back(Written::RequesterError);
            (13, rng.random())
        } else {
            let wqe_opcode = if rng.random_bool(0.7) {
                request.wqe_opcode
            } else {
                OTHER_WQE_OPCODES[rng.random_range(0..OTHER_WQE_OPCODES.len())]
            };
            self.coverage.wqe_opcodes[usize::from(wqe_opcode)] += 1;
            self.written.push_back(Written::Requester { wqe_opcode });
            (0, wqe_opcode)
        };
        cqe[56..60].copy_from_slice(&(u32::from(wqe_opcode) << 24 | qp_number).to_be_bytes());
        // Scattered data now and then: MLX5_INLINE_SCATTER_32 or _64 (only requesters carry it).
        let scatter = if cqe_opcode == 0 && rng.random_bool(0.1) {
            [0x4, 0x8][rng.random_range(0..2)]
        } else {
            0
        };
        cqe[63] = cqe_opcode << 4 | scatter | solicited | owner;
        let slot = (index & (cqe_count - 1)) as usize * 64;
        self.cq.buffer_mut()[slot..slot + 64].copy_from_slice(&cqe);
    }

    /// A CQE at the next index the device has not handed over: the owner bit of the pass
    /// before, or `MLX5_CQE_INVALID` with either owner bit.
    fn write_not_owned(&mut self) {
        let cqe_count = self.cq.layout().cqe_count;
        let index = self.write_index;
        let rng = &mut self.rng;
        let mut cqe: [u8; 64] = std::array::from_fn(|_| rng.random());
        let owner = u8::from(index & cqe_count != 0);
        cqe[63] = if rng.random_bool(0.5) {
            [0u8, 13][rng.random_range(0..2)] << 4 | (owner ^ 1)
        } else {
            0xf0 | rng.random::<u8>() & 0x3
        };
        let slot = (index & (cqe_count - 1)) as usize * 64;
        self.cq.buffer_mut()[slot..slot + 64].copy_from_slice(&cqe);
        self.not_owned_written = true;
    }

    /// Polls at most `max` with libmlx5 and the poller; returns how many, after comparing them.
    fn poll_both(&mut self, max: usize) -> usize {
        // The events of libmlx5's posts are not the poll's.
        self.posting.dci.take_events();
        let theirs = with_stderr_muted(|| self.cq.poll(max));
        let their_events = self.posting.dci.take_events();
        let mut ours = [Completion::default(); 16];
        let polled = self.poller.poll(&self.posting.table, &mut ours[..max]).unwrap();
        assert_eq!(polled, theirs.len(), "completions polled of at most {max}");
        assert_eq!(
            their_events,
            vec![MmioEvent::Barrier(Barrier::FromDevice); polled],
            "libmlx5's barriers of a poll of at most {max}"
        );
        self.coverage.barriers += their_events.len() as u32;
        for (completion, wc) in ours[..polled].iter().zip(&theirs) {
            let written = self.written.pop_front().unwrap();
            compare(completion, wc, written);
            self.coverage.completions += 1;
        }
        if polled < max {
            assert!(
                self.written.is_empty(),
                "both stopped before a CQE the device handed over"
            );
            self.coverage.not_owned_stops += u32::from(self.not_owned_written);
        }
        assert_eq!(self.poller.consumer_index, self.cq.consumer_index(), "consumer index");
        assert_eq!(
            *self.doorbell_record,
            self.cq.doorbell_record(),
            "doorbell record words"
        );
        let (head, tail) = self.posting.dci.head_and_tail();
        assert_eq!(
            self.posting.outstanding(),
            head.wrapping_sub(tail),
            "requests outstanding: the room the completions freed"
        );
        polled
    }
}

/// One completion against libmlx5's `ibv_wc`, reading only the fields `mlx5_parse_cqe` sets
/// for the CQE written (the others are left as the caller's memory had them).
fn compare(completion: &Completion, wc: &ibv_wc, written: Written) {
    let context = format!("{written:?}: {completion:?}");
    assert_eq!(completion.wr_id(), wc.wr_id, "{context}");
    assert_eq!(completion.status() as u32, wc.status, "{context}");
    assert_eq!(completion.qp_number(), wc.qp_num, "{context}");
    let with_immediate = ibv_wc_flags::IBV_WC_WITH_IMM.0;
    assert_eq!(wc.wc_flags & !with_immediate, 0, "{context}");
    assert_eq!(
        completion.with_immediate(),
        wc.wc_flags & with_immediate != 0,
        "{context}"
    );
    match written {
        Written::Requester { wqe_opcode } => {
            assert_eq!(completion.vendor_err(), 0, "{context}");
            match completion.opcode() {
                Some(opcode) => assert_eq!(opcode as u32, wc.opcode, "{context}"),
                // The opcode libmlx5's builders kept for the slot: 0 for every ibv_wr_* request.
                None if WR_DATA_OPCODES.contains(&wqe_opcode) => {
                    assert_eq!(wc.opcode, ibv_wc_opcode::IBV_WC_SEND, "{context}")
                },
                None => {},
            }
            if let Some(byte_len) = completion.byte_len() {
                assert_eq!(byte_len, wc.byte_len, "{context}");
            }
            if [0x08, 0x09, MLX5_OPCODE_SEND, 0x0b, 0x01].contains(&wqe_opcode) {
                assert!(
                    completion.opcode().is_some() && completion.byte_len().is_none(),
                    "{context}"
                );
            }
            if [0x10, 0x11, 0x12].contains(&wqe_opcode) {
                assert!(completion.byte_len().is_some(), "{context}");
            }
        },
        Written::RequesterError => {
            assert_eq!(completion.vendor_err(), wc.vendor_err, "{context}");
            assert_eq!((completion.opcode(), completion.byte_len()), (None, None), "{context}");
        },
    }
}

fn run(seed: u64, cqe_count: u32, wqe_count: u32, sq_sig_all: bool, rounds: u32) -> Coverage {
    let mut run = Run::new(seed, cqe_count, wqe_count, sq_sig_all);
    for round in 0..rounds {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run.round()));
        if let Err(panic) = result {
            eprintln!("seed {seed}, CQ of {cqe_count}, SQ of {wqe_count}: round {round} failed");
            std::panic::resume_unwind(panic);
        }
    }
    run.coverage
}

#[test]
fn the_poller_reports_what_libmlx5_reports_over_random_cqes() {
    let mut total = Coverage::default();
    for (seed, (cqe_count, wqe_count, sq_sig_all)) in [
        (2, 16, false),
        (4, 64, true),
        (8, 16, false),
        (16, 256, true),
        (64, 64, false),
        (256, 32, true),
    ]
    .into_iter()
    .enumerate()
    {
        let coverage = run(seed as u64, cqe_count, wqe_count, sq_sig_all, 4000);
        assert!(coverage.passes >= 10, "CQ of {cqe_count}: {} passes", coverage.passes);
        for (counts, added) in [
            (&mut total.syndromes, &coverage.syndromes),
            (&mut total.wqe_opcodes, &coverage.wqe_opcodes),
        ] {
            counts.iter_mut().zip(added).for_each(|(count, added)| *count += added);
        }
        total.not_owned_stops += coverage.not_owned_stops;
        total.completions += coverage.completions;
        total.barriers += coverage.barriers;
    }
    for syndrome in SYNDROMES {
        assert!(
            total.syndromes[usize::from(syndrome)] > 0,
            "syndrome {syndrome:#x} never written"
        );
    }
    let unknown = (0..=u8::MAX)
        .filter(|s| !SYNDROMES.contains(s) && total.syndromes[usize::from(*s)] > 0)
        .count();
    assert!(unknown >= 20, "{unknown} unknown syndromes written");
    for wqe_opcode in OTHER_WQE_OPCODES {
        assert!(
            total.wqe_opcodes[usize::from(wqe_opcode)] > 0,
            "WQE opcode {wqe_opcode:#x} never written"
        );
    }
    assert!(total.not_owned_stops > 1000 && total.completions > 10_000, "{total:?}");
    assert!(
        total.barriers >= total.completions,
        "a barrier for each CQE read: {total:?}"
    );
}
