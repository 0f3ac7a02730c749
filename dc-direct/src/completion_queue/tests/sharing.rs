//! One completion queue shared by several send queues, as direct initiators share one: requests
//! posted through the send queues (over oracle DCIs' memory, as `mlx5dv_init_obj` would give
//! it), CQEs written as the device writes them (in order per queue pair, one for each signaled
//! request, retiring the unsignaled ones before it), polled through the table the initiators
//! share: every `wr_id` comes back in order, room comes back, and what the table refuses it
//! refuses without moving anything.
use std::collections::VecDeque;
use std::rc::Rc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sideway::ibverbs::queue_pair::WorkRequestFlags;
use softmlx5::oracle::decode::decode_dc_wqe;
use softmlx5::oracle::{DciShape, OracleDci};

use super::support::{CqMemory, CqeFields, Polling};
use crate::completion_queue::{Completion, PollDirectCompletionQueueErrorKind};
use crate::initiator::parts::send_queue_parts;
use crate::initiator::parts::tests::{created_of, object_of};
use crate::send_queue::shared::SharedSendQueue;
use crate::send_queue::{AddressVector, EachRequest, SendQueue, WorkRequestErrorKind};

/// A posted request the device has not completed yet.
#[derive(Debug, Clone, Copy)]
pub(super) struct Posted {
    pub(super) index: u16,
    pub(super) wr_id: u64,
    pub(super) signaled: bool,
}

/// A send queue over an oracle DCI's memory, in a shared cell as an initiator holds it.
pub(super) struct Queue {
    /// Dropped after `queue`, which writes it.
    memory: OracleDci,
    pub(super) queue: Rc<SharedSendQueue>,
    pub(super) qp_number: u32,
    pub(super) max_post: u32,
    pub(super) posted: VecDeque<Posted>,
}

impl Queue {
    pub(super) fn new(qp_number: u32, wqe_count: u32, blueflame_size: u32) -> Self {
        let memory = OracleDci::new(&DciShape {
            wqe_count,
            max_inline_data: 60,
            max_send_sge: 1,
            sq_sig_all: false,
            send_ops_flags: 1 | 1 << 3,
            streams: false,
            blueflame_size,
            qp_number,
        });
        // SAFETY: the oracle's DCI is alive and outlives the queue (field order).
        let parts = unsafe { send_queue_parts(&object_of(&memory), created_of(&memory)) }.unwrap();
        // SAFETY: as above; nothing else writes the memory.
        let queue = unsafe { SendQueue::from_parts(parts) }.unwrap();
        Self {
            max_post: memory.max_post(),
            memory,
            queue: Rc::new(SharedSendQueue::new(queue)),
            qp_number,
            posted: VecDeque::new(),
        }
    }

    pub(super) fn outstanding(&self) -> u32 {
        self.queue.try_with_mut(|queue| queue.outstanding()).unwrap()
    }

    /// Posts up to `count` requests in one batch (RDMA WRITEs of one entry and 16-byte inline
    /// SENDs), signaled at random, but for the last one the queue has room for and, with
    /// `signal_last`, the batch's last; returns how many the queue took.
    pub(super) fn post(&mut self, count: usize, signal_last: bool, rng: &mut SmallRng) -> usize {
        let room = (self.max_post - self.outstanding()) as usize;
        let av = AddressVector::new([7; 48]);
        let before = self.memory.doorbell_record()[1];
        let mut wr_ids = Vec::new();
        {
            // SAFETY: the test holds the queue exclusively and is not inside the table.
            let mut guard = unsafe { self.queue.start_post_send(EachRequest) };
            for i in 0..count {
                let last = i + 1 == room || (signal_last && i + 1 == count);
                let (wr_id, signaled) = (rng.random::<u64>(), last || rng.random_bool(0.5));
                let flags = if signaled {
                    WorkRequestFlags::Signaled
                } else {
                    WorkRequestFlags::none()
                };
                let request = guard.construct_wr(wr_id, flags);
                let taken = if rng.random_bool(0.5) {
                    let request = request.setup_write(0x55, 0x1000).setup_dc_addr(&av, 0x77, 0xdc);
                    // SAFETY: the device is the test: nothing reads the buffer.
                    unsafe { request.setup_sge(3, 0x2000, 64) }
                } else {
                    request
                        .setup_send()
                        .setup_dc_addr(&av, 0x77, 0xdc)
                        .setup_inline_data(&[9; 16])
                };
                match taken {
                    Ok(()) => wr_ids.push((wr_id, signaled)),
                    Err(err) => {
                        assert!(matches!(err.0, WorkRequestErrorKind::QueueFull { .. }), "{err:?}");
                        break;
                    },
                }
            }
            guard.post();
        }
        // The WQEs of the batch, one after the other from the index before it.
        let mut index = u32::from_be(before);
        let wqe_count = self.memory.shape().wqe_count;
        for &(wr_id, signaled) in &wr_ids {
            let wqe = decode_dc_wqe(self.memory.send_queue(), index & (wqe_count - 1)).unwrap();
            assert_eq!((wqe.index, wqe.qp_number), (index as u16, self.qp_number));
            self.posted.push_back(Posted {
                index: index as u16,
                wr_id,
                signaled,
            });
            index += u32::from(wqe.ds).div_ceil(4);
        }
        wr_ids.len()
    }
}

/// The CQ's memory, the direct poller over it, and the device writing its CQEs.
struct Device {
    memory: CqMemory,
    polling: Polling,
    /// The index of the next CQE the device writes.
    write_index: u32,
    /// The `wr_id`s of the CQEs written and not polled, in order.
    expected: VecDeque<u64>,
}

impl Device {
    fn new(cqe_count: u32) -> Self {
        let mut memory = CqMemory::new(cqe_count, 64);
        // SAFETY: the memory outlives the poller (dropped with it, field order aside: the poller
        // reads it only when polled).
        let polling = unsafe { Polling::new(memory.parts(64)) }.unwrap();
        Self {
            memory,
            polling,
            write_index: 0,
            expected: VecDeque::new(),
        }
    }

    fn add(&self, queue: &Queue) {
        self.polling.table().insert(queue.qp_number, Rc::clone(&queue.queue));
    }

    /// A CQE for `wqe_counter` of QP `qp_number` at the next index.
    fn write(&mut self, qp_number: u32, wqe_counter: u16) {
        let index = self.write_index;
        self.write_index += 1;
        let owner = index & 1 << self.memory.cqe_count().trailing_zeros() != 0;
        let cqe = self.memory.cqe_mut(index);
        CqeFields::write(qp_number, wqe_counter, owner).store(cqe);
    }

    /// Executes `queue`'s requests up to and including its `count`-th signaled one, writing a
    /// CQE for each signaled one.
    fn complete(&mut self, queue: &mut Queue, count: usize) {
        for _ in 0..count {
            let Some(at) = queue.posted.iter().position(|posted| posted.signaled) else {
                return;
            };
            let done = queue.posted[at];
            queue.posted.drain(..=at);
            self.write(queue.qp_number, done.index);
            self.expected.push_back(done.wr_id);
        }
    }

    fn poll(&mut self, max: usize) -> Result<Vec<u64>, PollDirectCompletionQueueErrorKind> {
        let mut completions = [Completion::default(); 32];
        let polled = self.polling.poll(&mut completions[..max]).map_err(|err| err.0)?;
        Ok(completions[..polled].iter().map(Completion::wr_id).collect())
    }

    /// Polls everything written, in random counts, checking each `wr_id`.
    fn drain(&mut self, rng: &mut SmallRng) {
        while !self.expected.is_empty() {
            let max = rng.random_range(1..=8);
            for wr_id in self.poll(max).unwrap() {
                assert_eq!(Some(wr_id), self.expected.pop_front());
            }
        }
        assert_eq!(self.poll(4), Ok(vec![]), "nothing more");
    }
}

#[test]
fn send_queues_sharing_a_cq_get_their_wr_ids_back_in_order_and_their_room() {
    let mut rng = SmallRng::seed_from_u64(37);
    let mut device = Device::new(64);
    let mut queues = [
        Queue::new(0x10, 64, 256),
        Queue::new(0x11, 16, 0),
        Queue::new(0x0a_bcde, 128, 256),
    ];
    queues.iter().for_each(|queue| device.add(queue));
    let (mut completions, mut full) = (0, 0);
    for round in 0..3000 {
        let queue = &mut queues[rng.random_range(0..3)];
        let room = queue.max_post - queue.outstanding();
        let asked = rng.random_range(0..=room as usize + 2);
        let taken = queue.post(asked, false, &mut rng);
        assert_eq!(taken, asked.min(room as usize), "round {round}: the queue's room");
        full += usize::from(asked > room as usize);
        // The device works through some signaled requests of each queue, never more than the
        // CQ holds unpolled.
        for queue in queues.iter_mut() {
            let unpolled = device.expected.len();
            let count = rng.random_range(0..=4).min(60usize.saturating_sub(unpolled));
            device.complete(queue, count);
        }
        completions += device.expected.len();
        device.drain(&mut rng);
        for queue in &queues {
            let left = queue.posted.len() as u32;
            assert_eq!(queue.outstanding(), left, "round {round}: QP {:#x}", queue.qp_number);
        }
    }
    assert!(
        completions > 5000 && full > 300,
        "{completions} completions, {full} full queues"
    );
    // Room comes back whole: once its last request completes, a queue takes max_post again.
    for queue in queues.iter_mut() {
        if !queue.posted.is_empty() && !queue.posted.back().unwrap().signaled {
            assert_eq!(
                queue.post(1, true, &mut rng),
                1,
                "a queue with unsignaled requests is not full"
            );
        }
        device.complete(queue, queue.max_post as usize);
        device.drain(&mut rng);
        assert_eq!(queue.outstanding(), 0);
        let max_post = queue.max_post as usize;
        assert_eq!(
            queue.post(max_post + 1, false, &mut rng),
            max_post,
            "QP {:#x}",
            queue.qp_number
        );
    }
}

#[test]
fn a_completion_of_a_queue_in_a_batch_waits_unconsumed_until_the_batch_is_done() {
    let mut rng = SmallRng::seed_from_u64(3);
    let mut device = Device::new(16);
    let (mut first, mut second) = (Queue::new(0x21, 16, 256), Queue::new(0x22, 16, 0));
    device.add(&first);
    device.add(&second);
    first.post(2, true, &mut rng);
    second.post(1, true, &mut rng);
    device.complete(&mut second, 1);
    device.complete(&mut first, 1);
    let (second_wr_id, first_wr_id) = (device.expected[0], device.expected[1]);
    // The consumer index, as the poller stores it in the doorbell record.
    let consumer_index = |device: &mut Device| device.memory.doorbell_record();
    {
        // SAFETY: the test holds the queue exclusively and is not inside the table.
        let _batch = unsafe { first.queue.start_post_send(EachRequest) };
        // The other queue's completion comes first; the poll stops before this one's.
        assert_eq!(device.poll(4), Ok(vec![second_wr_id]));
        assert_eq!(
            device.poll(4),
            Err(PollDirectCompletionQueueErrorKind::SendQueueInUse { qp_number: 0x21 })
        );
        assert_eq!(consumer_index(&mut device), 1, "not consumed");
    }
    assert_eq!(device.poll(4), Ok(vec![first_wr_id]));
    assert_eq!(consumer_index(&mut device), 2);
}

#[test]
fn completions_of_a_dropped_queue_or_of_no_outstanding_request_are_refused_and_move_nothing() {
    let mut rng = SmallRng::seed_from_u64(5);
    let mut device = Device::new(16);
    let (mut kept, dropped) = (Queue::new(0x31, 16, 256), Queue::new(0x32, 16, 256));
    device.add(&kept);
    device.add(&dropped);
    assert_eq!(kept.post(3, true, &mut rng), 3);
    device.polling.table().remove(&dropped.queue);
    assert_eq!(Rc::strong_count(&dropped.queue), 1, "the table let go of it");
    drop(dropped);
    device.write(0x32, 0);
    assert_eq!(
        device.poll(4),
        Err(PollDirectCompletionQueueErrorKind::UnknownQueuePair { qp_number: 0x32 })
    );
    // A slot past the posted requests, and the slot of a request already completed.
    let past = kept.posted.back().unwrap().index + 2;
    device.write(0x31, past);
    assert_eq!(
        device.poll(4),
        Err(PollDirectCompletionQueueErrorKind::UnexpectedWqeCounter {
            qp_number: 0x31,
            wqe_counter: past
        })
    );
    assert_eq!(kept.outstanding(), 3, "nothing retired");
    let last = *kept.posted.back().unwrap();
    device.write(0x31, last.index);
    device.expected.push_back(last.wr_id);
    device.drain(&mut rng);
    assert_eq!(kept.outstanding(), 0);
    device.write(0x31, last.index);
    assert_eq!(
        device.poll(4),
        Err(PollDirectCompletionQueueErrorKind::UnexpectedWqeCounter {
            qp_number: 0x31,
            wqe_counter: last.index
        })
    );
    assert_eq!(Rc::strong_count(&kept.queue), 2, "the table still holds the kept queue");
}
