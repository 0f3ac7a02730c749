//! A direct initiator's [`PostingQueue`] posted on, by batches addressed per request and to one
//! address, with its completions polled through the completion queue's table. A batch borrows
//! the queue from its start to its post or drop: a poll meanwhile leaves its completions for
//! later, unconsumed; a reset starts the queue over at index 0.
use sideway::ibverbs::queue_pair::WorkRequestFlags;
use softmlx5::oracle::{DciShape, OracleDci};

use super::parts::send_queue_parts;
use super::parts::tests::{created_of, object_of};
use super::posting::PostingQueue;
use crate::completion_queue::tests::support::{CqMemory, CqeFields, Polling};
use crate::completion_queue::{Completion, PollDirectCompletionQueueErrorKind};
use crate::send_queue::{AddressVector, BatchAddress, EachRequest, SendQueue};

const QP_NUMBER: u32 = 0x12_3456;

/// A posting queue over an oracle DCI's memory, in the table of a poller over a CQ's memory.
struct Bed {
    /// Dropped first: it writes `memory`.
    posting: Option<PostingQueue>,
    polling: Polling,
    cq: CqMemory,
    memory: OracleDci,
    /// The next CQE's index.
    cqes: u32,
}

impl Bed {
    fn new() -> Self {
        let memory = OracleDci::new(&DciShape {
            wqe_count: 64,
            max_inline_data: 60,
            max_send_sge: 1,
            sq_sig_all: false,
            send_ops_flags: 1 | 1 << 3,
            streams: false,
            blueflame_size: 0,
            qp_number: QP_NUMBER,
        });
        let mut cq = CqMemory::new(16, 64);
        // SAFETY: the CQ memory outlives the poller (the bed holds both); only it polls.
        let polling = unsafe { Polling::new(cq.parts(64)) }.unwrap();
        // SAFETY: the oracle's DCI is alive and outlives the queue (field order); nothing else
        // writes its memory.
        let queue =
            unsafe { SendQueue::from_parts(send_queue_parts(&object_of(&memory), created_of(&memory)).unwrap()) }
                .unwrap();
        let posting = PostingQueue::new(queue, polling.table());
        Self {
            posting: Some(posting),
            polling,
            cq,
            memory,
            cqes: 0,
        }
    }

    fn posting(&mut self) -> &mut PostingQueue {
        self.posting.as_mut().unwrap()
    }

    /// One signaled RDMA WRITE, addressed at its address step.
    fn post_each_addressed(&mut self, wr_id: u64) {
        let av = AddressVector::new([5; 48]);
        let mut guard = self.posting().start_post_send(EachRequest);
        let request = guard
            .construct_wr(wr_id, WorkRequestFlags::Signaled)
            .setup_write(0x55, 0x1000)
            .setup_dc_addr(&av, 0x77, 0xdc);
        // SAFETY: nothing reads the buffer.
        unsafe { request.setup_sge(3, 0x2000, 64) }.unwrap();
        guard.post();
    }

    /// The device completes the request at `wqe_counter`.
    fn complete(&mut self, wqe_counter: u16) {
        let index = self.cqes;
        self.cqes += 1;
        CqeFields::write(QP_NUMBER, wqe_counter, index & 16 != 0).store(self.cq.cqe_mut(index));
    }

    fn poll(&mut self) -> Result<Vec<u64>, PollDirectCompletionQueueErrorKind> {
        let mut completions = [Completion::default(); 4];
        let polled = self.polling.poll(&mut completions).map_err(|error| error.0)?;
        Ok(completions[..polled].iter().map(Completion::wr_id).collect())
    }

    /// The posting index the doorbell record holds.
    fn posted(&self) -> u32 {
        u32::from_be(self.memory.doorbell_record()[1])
    }
}

/// One signaled RDMA WRITE in a batch to one address: `count` of them, the batch then posted.
fn post_batch_addressed(posting: &mut PostingQueue, wr_id: u64, count: u64) {
    let av = AddressVector::new([5; 48]);
    let mut guard = posting.start_post_send(BatchAddress::new(&av, 0x77, 0xdc, None));
    for wr_id in wr_id..wr_id + count {
        let request = guard
            .construct_wr(wr_id, WorkRequestFlags::Signaled)
            .setup_write(0x55, 0x1000);
        // SAFETY: nothing reads the buffer.
        unsafe { request.setup_sge(3, 0x2000, 64) }.unwrap();
    }
    guard.post();
}

#[test]
fn a_poll_leaves_the_completions_of_a_queue_whose_batch_is_open_until_it_is_posted() {
    let mut bed = Bed::new();
    post_batch_addressed(bed.posting(), 1, 1);
    assert_eq!((bed.posted(), bed.posting().outstanding()), (2, 1));
    bed.complete(0);
    let av = AddressVector::new([5; 48]);
    let Bed { posting, polling, .. } = &mut bed;
    let mut guard = posting
        .as_mut()
        .unwrap()
        .start_post_send(BatchAddress::new(&av, 0x77, 0xdc, None));
    let request = guard
        .construct_wr(2, WorkRequestFlags::Signaled)
        .setup_write(0x55, 0x1000);
    // SAFETY: nothing reads the buffer.
    unsafe { request.setup_sge(3, 0x2000, 64) }.unwrap();
    let mut completions = [Completion::default(); 4];
    assert_eq!(
        polling.poll(&mut completions).map_err(|error| error.0),
        Err(PollDirectCompletionQueueErrorKind::SendQueueInUse { qp_number: QP_NUMBER })
    );
    guard.post();
    assert_eq!(bed.cq.doorbell_record(), 0, "not consumed");
    assert_eq!(bed.poll(), Ok(vec![1]));
    bed.complete(2);
    assert_eq!(bed.poll(), Ok(vec![2]));
    assert_eq!(bed.posting().outstanding(), 0);
}

#[test]
fn a_reset_queue_posts_at_index_0_again_and_a_dropped_batch_posts_nothing() {
    let mut bed = Bed::new();
    bed.post_each_addressed(1);
    post_batch_addressed(bed.posting(), 2, 2);
    assert_eq!((bed.posted(), bed.posting().outstanding()), (6, 3));
    for wqe_counter in [0, 2, 4] {
        bed.complete(wqe_counter);
    }
    assert_eq!(bed.poll(), Ok(vec![1, 2, 3]));
    bed.posting().reset();
    {
        let av = AddressVector::new([5; 48]);
        let mut guard = bed.posting().start_post_send(BatchAddress::new(&av, 0x77, 0xdc, None));
        let request = guard
            .construct_wr(9, WorkRequestFlags::Signaled)
            .setup_write(0x55, 0x1000);
        // SAFETY: nothing reads the buffer.
        unsafe { request.setup_sge(3, 0x2000, 64) }.unwrap();
        assert_eq!(guard.batch_len(), 1);
        // Dropped unposted: its slot is given back.
    }
    assert_eq!(bed.posting().outstanding(), 0);
    post_batch_addressed(bed.posting(), 4, 1);
    assert_eq!(bed.posted(), 2, "the reset queue posts at index 0 again");
    bed.complete(0);
    assert_eq!(bed.poll(), Ok(vec![4]));
}
