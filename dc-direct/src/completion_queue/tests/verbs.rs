//! The poller behind its `struct ibv_cq` ([`VerbsCompletionQueue`]), polled with `ibv_poll_cq`,
//! beside the same poller polled natively over the same CQEs: two send queues posted alike, two
//! CQ memories written alike (every CQE kind a send completion comes as: each WQE opcode, each
//! error syndrome, byte counts, vendor syndromes); each `ibv_wc` says what its `Completion`
//! says (and `oracle.rs` holds the `Completion`s to libmlx5's own `ibv_wc`s), every other byte 0.
//! Refused CQEs fail the call with their errno, and arming is refused.
use std::mem::MaybeUninit;
use std::rc::Rc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rdma_mummy_sys::{ibv_poll_cq, ibv_req_notify_cq, ibv_wc, ibv_wc_flags};

use super::sharing::Queue;
use super::support::{CqMemory, CqeFields};
use crate::completion_queue::{Completion, Polling, VerbsCompletionQueue};

const QP_NUMBER: u32 = 0x00_4242;
/// WQE opcodes a requester CQE may echo: each one `handle_good_req` names, and others.
const WQE_OPCODES: [u8; 12] = [0x08, 0x09, 0x0a, 0x0b, 0x01, 0x0e, 0x10, 0x11, 0x12, 0x00, 0x25, 0xff];

/// One side: a send queue, its CQ's memory, the device's next CQE index.
struct Side {
    queue: Queue,
    cq: CqMemory,
    write_index: u32,
}

impl Side {
    fn new() -> Self {
        Self {
            queue: Queue::new(QP_NUMBER, 64, 256),
            cq: CqMemory::new(32, 64),
            write_index: 0,
        }
    }

    /// Writes `fields` for the request at `wqe_counter` at the next index.
    fn write(&mut self, fields: CqeFields) {
        let index = self.write_index;
        self.write_index += 1;
        let owner = index & self.cq.cqe_count() != 0;
        CqeFields { owner, ..fields }.store(self.cq.cqe_mut(index));
    }
}

/// A random send completion of `wqe_counter`.
fn random_cqe(wqe_counter: u16, rng: &mut SmallRng) -> CqeFields {
    let mut fields = CqeFields::write(QP_NUMBER, wqe_counter, false);
    fields.byte_count = rng.random();
    if rng.random_bool(0.3) {
        fields.cqe_opcode = 13;
        fields.syndrome = if rng.random_bool(0.7) {
            [
                0x01, 0x02, 0x04, 0x05, 0x06, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x22,
            ][rng.random_range(0..13)]
        } else {
            rng.random()
        };
        fields.vendor_err = rng.random();
        fields.wqe_opcode = rng.random();
    } else {
        fields.wqe_opcode = WQE_OPCODES[rng.random_range(0..WQE_OPCODES.len())];
    }
    fields
}

/// `ibv_poll_cq` of at most `max` on `cq`.
fn poll(cq: &VerbsCompletionQueue, max: i32) -> Result<Vec<ibv_wc>, i32> {
    // SAFETY: ibv_wc is plain C data; the buffer holds 64, at least `max` when it is positive.
    let mut wcs = [unsafe { MaybeUninit::<ibv_wc>::zeroed().assume_init() }; 64];
    // SAFETY: the CQ is alive, its context's poll_cq filled.
    let polled = unsafe { ibv_poll_cq(cq.raw().as_ptr(), max, wcs.as_mut_ptr()) };
    match usize::try_from(polled) {
        Ok(polled) => Ok(wcs[..polled].to_vec()),
        Err(_) => Err(polled),
    }
}

/// `wc` says what `completion` says, and nothing else.
fn assert_same(wc: &ibv_wc, completion: &Completion) {
    let flags = if completion.with_immediate() {
        ibv_wc_flags::IBV_WC_WITH_IMM.0
    } else {
        0
    };
    let context = format!("{completion:?}");
    assert_eq!(
        (wc.wr_id, wc.status),
        (completion.wr_id(), completion.status() as u32),
        "{context}"
    );
    assert_eq!(
        wc.opcode,
        completion.opcode().map_or(0, |opcode| opcode as u32),
        "{context}"
    );
    assert_eq!(wc.byte_len, completion.byte_len().unwrap_or(0), "{context}");
    assert_eq!(
        (wc.qp_num, wc.vendor_err, wc.wc_flags),
        (completion.qp_number(), completion.vendor_err(), flags),
        "{context}"
    );
    // SAFETY: the union's either field is a u32.
    let immediate = unsafe { wc.imm_data_invalidated_rkey_union.imm_data };
    let rest = (immediate, wc.src_qp, wc.pkey_index, wc.slid, wc.sl, wc.dlid_path_bits);
    assert_eq!(rest, (0, 0, 0, 0, 0, 0), "{context}");
}

#[test]
fn ibv_poll_cq_fills_each_work_completion_as_the_poller_reports_it() {
    let (mut native, mut verbs) = (Side::new(), Side::new());
    // SAFETY: each side's CQ memory outlives its poller (the test holds both); only it polls.
    let mut polling = unsafe { Polling::new(native.cq.parts(64)) }.unwrap();
    // SAFETY: as above.
    let cq = VerbsCompletionQueue::new(unsafe { Polling::new(verbs.cq.parts(64)) }.unwrap());
    polling.table().insert(QP_NUMBER, Rc::clone(&native.queue.queue));
    cq.polling().table().insert(QP_NUMBER, Rc::clone(&verbs.queue.queue));
    let mut rng = SmallRng::seed_from_u64(0x1bc);
    let (mut compared, mut with_byte_len, mut with_immediate, mut errors) = (0, 0, 0, 0);
    for _ in 0..3000 {
        let (count, seed) = (rng.random_range(0..=8), rng.random());
        let taken = native.queue.post(count, true, &mut SmallRng::seed_from_u64(seed));
        assert_eq!(verbs.queue.post(count, true, &mut SmallRng::seed_from_u64(seed)), taken);
        // The device completes the signaled requests, at most what the CQ holds unpolled.
        while let Some(at) = native.queue.posted.iter().position(|posted| posted.signaled) {
            let done = native.queue.posted[at];
            native.queue.posted.drain(..=at);
            verbs.queue.posted.drain(..=at);
            let fields = random_cqe(done.index, &mut rng);
            native.write(fields);
            verbs.write(fields);
        }
        let max = rng.random_range(1..=40);
        loop {
            let mut completions = [Completion::default(); 64];
            let polled = polling.poll(&mut completions[..max.min(32)]).unwrap();
            let wcs = poll(&cq, max as i32).ok().unwrap();
            assert_eq!(wcs.len(), polled, "of at most {max} (32 a call)");
            for (wc, completion) in wcs.iter().zip(&completions[..polled]) {
                assert_same(wc, completion);
                with_byte_len += usize::from(completion.byte_len().is_some());
                with_immediate += usize::from(completion.with_immediate());
                errors += usize::from(completion.vendor_err() != 0);
            }
            compared += polled;
            if polled < max.min(32) {
                break;
            }
        }
        assert_eq!(
            native.cq.doorbell_record(),
            verbs.cq.doorbell_record(),
            "consumer index"
        );
        assert_eq!(native.queue.outstanding(), verbs.queue.outstanding(), "room");
    }
    assert!(
        compared > 5000 && with_byte_len > 500 && with_immediate > 500 && errors > 1000,
        "{compared} compared, {with_byte_len} byte counts, {with_immediate} immediates, {errors} errors"
    );
}

#[test]
fn a_refused_cqe_fails_ibv_poll_cq_with_its_errno_and_arming_is_refused() {
    let mut side = Side::new();
    // SAFETY: the CQ memory outlives the poller (the test holds both); only it polls.
    let cq = VerbsCompletionQueue::new(unsafe { Polling::new(side.cq.parts(64)) }.unwrap());
    cq.polling().table().insert(QP_NUMBER, Rc::clone(&side.queue.queue));
    assert_eq!(poll(&cq, 4).map(|wcs| wcs.len()), Ok(0), "nothing yet");
    let mut rng = SmallRng::seed_from_u64(1);
    assert_eq!(side.queue.post(2, true, &mut rng), 2);
    let last = *side.queue.posted.back().unwrap();
    // An unknown QP, a receive CQE, a compressed CQE, the posting index (no request starts there).
    side.write(CqeFields::write(0x99, 0, false));
    side.write(CqeFields {
        cqe_opcode: 2,
        ..CqeFields::write(QP_NUMBER, last.index, false)
    });
    side.write(CqeFields {
        format: 3,
        ..CqeFields::write(QP_NUMBER, last.index, false)
    });
    side.write(CqeFields::write(QP_NUMBER, last.index + 2, false));
    for errno in [libc::ENOENT, libc::EPROTO, libc::EOPNOTSUPP, libc::EIO] {
        assert_eq!(poll(&cq, 4).map(|wcs| wcs.len()), Err(-errno));
    }
    // A queue a batch holds: not consumed, read once the batch is done.
    side.write(CqeFields::write(QP_NUMBER, last.index, false));
    {
        // SAFETY: the test holds the queue exclusively and is not inside the table.
        let _batch = unsafe { side.queue.queue.start_post_send() };
        assert_eq!(poll(&cq, 4).map(|wcs| wcs.len()), Err(-libc::EBUSY));
    }
    let wcs = poll(&cq, 4).ok().unwrap();
    assert_eq!(wcs.iter().map(|wc| wc.wr_id).collect::<Vec<_>>(), [last.wr_id]);
    assert_eq!(poll(&cq, 0).map(|wcs| wcs.len()), Ok(0));
    assert_eq!(poll(&cq, -1).map(|wcs| wcs.len()), Ok(0));
    // SAFETY: as for `poll`.
    assert_eq!(unsafe { ibv_req_notify_cq(cq.raw().as_ptr(), 0) }, libc::EOPNOTSUPP);
}
