//! One send queue, two front ends: a direct initiator's [`PostingQueue`] posted on through its
//! C entries (as a pool's guard does) and natively, with its completions polled through the
//! completion queue's table. A batch of the C entries borrows the queue from `wr_start` to
//! `wr_complete` or `wr_abort`: a poll meanwhile leaves its completions for later, unconsumed; a
//! native batch and a reset end it.
use rdma_mummy_sys::{
    ibv_qp_ex, ibv_wr_complete, ibv_wr_rdma_write, ibv_wr_set_sge, ibv_wr_start, mlx5dv_qp_ex, mlx5dv_wr_set_dc_addr,
};
use sideway::ibverbs::queue_pair::{SendOperationFlags, WorkRequestFlags};
use sideway_ext_wqe_oracle::{DciShape, OracleAh, OracleDci};

use super::parts::send_queue_parts;
use super::parts::tests::{created_of, object_of};
use super::posting::PostingQueue;
use crate::completion_queue::tests::support::{CqMemory, CqeFields};
use crate::completion_queue::{Completion, PollCompletionQueueErrorKind, Polling};
use crate::send_queue::tests::entries_pair::oracle_lookup;
use crate::send_queue::{AddressVector, SendQueue};

const QP_NUMBER: u32 = 0x12_3456;

/// A posting queue over an oracle DCI's memory, in the table of a poller over a CQ's memory.
struct Bed {
    /// Dropped first: it writes `memory`.
    posting: Option<PostingQueue>,
    polling: Polling,
    cq: CqMemory,
    memory: OracleDci,
    route: OracleAh,
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
        let route = OracleAh::new([5; 48]);
        let mut cq = CqMemory::new(16, 64);
        // SAFETY: the CQ memory outlives the poller (the bed holds both); only it polls.
        let polling = unsafe { Polling::new(cq.parts(64)) }.unwrap();
        // SAFETY: the oracle's DCI is alive and outlives the queue (field order); nothing else
        // writes its memory.
        let queue =
            unsafe { SendQueue::from_parts(send_queue_parts(&object_of(&memory), created_of(&memory)).unwrap()) }
                .unwrap();
        let operations = SendOperationFlags::Write | SendOperationFlags::Send;
        let posting = PostingQueue::new(
            queue,
            operations,
            oracle_lookup(std::slice::from_ref(&route)),
            polling.table(),
        );
        Self {
            posting: Some(posting),
            polling,
            cq,
            memory,
            route,
            cqes: 0,
        }
    }

    fn posting(&mut self) -> &mut PostingQueue {
        self.posting.as_mut().unwrap()
    }

    /// `wr_start` and one signaled RDMA WRITE through the C entries, left open.
    fn start_c_batch(&mut self, wr_id: u64) -> *mut ibv_qp_ex {
        let ah = self.route.ibv_ah().as_ptr();
        let (qp, _, mlx5) = self.posting().send_views();
        let (qp, mlx5): (*mut ibv_qp_ex, *mut mlx5dv_qp_ex) = (qp.as_ptr(), mlx5.as_ptr());
        // SAFETY: the entries' live views and the route's handle; nothing reads the buffer.
        unsafe {
            ibv_wr_start(qp);
            (*qp).wr_id = wr_id;
            (*qp).wr_flags = WorkRequestFlags::Signaled.bits();
            ibv_wr_rdma_write(qp, 0x55, 0x1000);
            mlx5dv_wr_set_dc_addr(mlx5, ah, 0x77, 0xdc);
            ibv_wr_set_sge(qp, 3, 0x2000, 64);
        }
        qp
    }

    /// One signaled RDMA WRITE posted natively.
    fn post_native(&mut self, wr_id: u64) {
        let av = AddressVector::new([5; 48]);
        let mut guard = self.posting().start_post_send();
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

    fn poll(&mut self) -> Result<Vec<u64>, PollCompletionQueueErrorKind> {
        let mut completions = [Completion::default(); 4];
        let polled = self.polling.poll(&mut completions).map_err(|error| error.0)?;
        Ok(completions[..polled].iter().map(Completion::wr_id).collect())
    }

    /// The posting index the doorbell record holds.
    fn posted(&self) -> u32 {
        u32::from_be(self.memory.doorbell_record()[1])
    }
}

#[test]
fn a_poll_leaves_the_completions_of_a_queue_whose_c_batch_is_open_until_it_completes() {
    let mut bed = Bed::new();
    let qp = bed.start_c_batch(1);
    // SAFETY: the entries' live view, in a batch.
    assert_eq!(unsafe { ibv_wr_complete(qp) }, 0);
    assert_eq!((bed.posted(), bed.posting().outstanding()), (2, 1));
    bed.complete(0);
    let qp = bed.start_c_batch(2);
    assert_eq!(
        bed.posting().outstanding(),
        1,
        "the open batch's request is not posted yet"
    );
    assert_eq!(
        bed.poll(),
        Err(PollCompletionQueueErrorKind::SendQueueInUse { qp_number: QP_NUMBER })
    );
    assert_eq!(bed.cq.doorbell_record(), 0, "not consumed");
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_wr_complete(qp) }, 0);
    assert_eq!(bed.poll(), Ok(vec![1]));
    bed.complete(2);
    assert_eq!(bed.poll(), Ok(vec![2]));
    assert_eq!(bed.posting().outstanding(), 0);
}

#[test]
fn a_native_batch_or_a_reset_aborts_an_open_c_batch_and_frees_the_queue() {
    let mut bed = Bed::new();
    let qp = bed.start_c_batch(1);
    bed.post_native(2);
    // SAFETY: the entries' live view: the batch was aborted, so nothing to complete.
    assert_eq!(unsafe { ibv_wr_complete(qp) }, libc::EINVAL);
    assert_eq!(
        (bed.posted(), bed.posting().outstanding()),
        (2, 1),
        "the native request alone, at index 0"
    );
    bed.complete(0);
    assert_eq!(bed.poll(), Ok(vec![2]));
    let qp = bed.start_c_batch(3);
    bed.posting().reset();
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_wr_complete(qp) }, libc::EINVAL);
    let qp = bed.start_c_batch(4);
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_wr_complete(qp) }, 0);
    assert_eq!(bed.posted(), 2, "the reset queue posts at index 0 again");
    bed.complete(0);
    assert_eq!(bed.poll(), Ok(vec![4]));
}
