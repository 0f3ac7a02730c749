//! Test-only CQ memory, CQE writer, and a send queue table holding a send queue the crate's
//! writer posts on.

use std::ptr::NonNull;
use std::rc::Rc;

use sideway::ibverbs::queue_pair::WorkRequestFlags;

use crate::completion_queue::{
    Completion, CompletionQueueParts, CompletionQueuePoller, PollDirectCompletionQueueError, SendQueueTable,
};
use crate::send_queue::shared::SharedSendQueue;
use crate::send_queue::tests::{Limits, Memory};
use crate::send_queue::AddressVector;

/// A CQ's ring and doorbell record in plain memory, filled as `mlx5_alloc_cq_buf` leaves it.
pub(crate) struct CqMemory {
    ring: Vec<u64>,
    doorbell_record: Box<[u32; 2]>,
    cqe_count: u32,
    cqe_size: u32,
}

impl CqMemory {
    pub(crate) fn new(cqe_count: u32, cqe_size: u32) -> Self {
        let mut memory = Self {
            ring: vec![0; (cqe_count * cqe_size / 8) as usize],
            doorbell_record: Box::new([0; 2]),
            cqe_count,
            cqe_size,
        };
        for slot in 0..cqe_count {
            memory.cqe_mut(slot)[63] = 15 << 4;
        }
        memory
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.ring.len() * 8;
        // SAFETY: the ring's u64s are plain bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ring.as_mut_ptr().cast::<u8>(), len) }
    }

    /// The 64 bytes of `struct mlx5_cqe64` of slot `slot` (masked).
    pub(crate) fn cqe_mut(&mut self, slot: u32) -> &mut [u8] {
        let (size, count) = (self.cqe_size as usize, self.cqe_count);
        let start = (slot & (count - 1)) as usize * size + size - 64;
        &mut self.bytes_mut()[start..start + 64]
    }

    pub(crate) fn cqe_count(&self) -> u32 {
        self.cqe_count
    }

    pub(crate) fn set_doorbell_record(&mut self, word: u32) {
        self.doorbell_record[0] = word.to_be();
    }

    /// The doorbell record's consumer-index word, as a value.
    pub(crate) fn doorbell_record(&self) -> u32 {
        u32::from_be(self.doorbell_record[0])
    }

    pub(crate) fn arm_word(&self) -> u32 {
        self.doorbell_record[1]
    }

    pub(crate) fn parts(&mut self, cqe_size: u32) -> CompletionQueueParts {
        CompletionQueueParts {
            buffer: NonNull::new(self.ring.as_mut_ptr().cast()).unwrap(),
            cqe_count: self.cqe_count,
            cqe_size,
            doorbell_record: NonNull::new(self.doorbell_record.as_mut_ptr()).unwrap(),
            cq_number: 0x4d2,
        }
    }

    pub(crate) fn poller(&mut self) -> CompletionQueuePoller {
        let parts = self.parts(self.cqe_size);
        // SAFETY: the memory outlives the poller in every test, which polls nothing else.
        unsafe { CompletionQueuePoller::new(parts) }.unwrap()
    }
}

/// The fields of a CQE a test writes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CqeFields {
    pub(crate) cqe_opcode: u8,
    pub(crate) format: u8,
    pub(crate) owner: bool,
    pub(crate) wqe_opcode: u8,
    pub(crate) qp_number: u32,
    pub(crate) wqe_counter: u16,
    pub(crate) byte_count: u32,
    pub(crate) syndrome: u8,
    pub(crate) vendor_err: u8,
}

impl CqeFields {
    /// A successful RDMA WRITE of QP `qp_number`'s slot `wqe_counter`.
    pub(crate) fn write(qp_number: u32, wqe_counter: u16, owner: bool) -> Self {
        Self {
            cqe_opcode: 0,
            format: 0,
            owner,
            wqe_opcode: 0x08,
            qp_number,
            wqe_counter,
            byte_count: 0,
            syndrome: 0,
            vendor_err: 0,
        }
    }

    /// Writes the fields at their `mlx5dv.h` offsets into `cqe` (64 bytes), leaving the others.
    pub(crate) fn store(&self, cqe: &mut [u8]) {
        cqe[44..48].copy_from_slice(&self.byte_count.to_be_bytes());
        cqe[54] = self.vendor_err;
        cqe[55] = self.syndrome;
        cqe[56..60].copy_from_slice(&((u32::from(self.wqe_opcode) << 24) | self.qp_number).to_be_bytes());
        cqe[60..62].copy_from_slice(&self.wqe_counter.to_be_bytes());
        cqe[63] = self.cqe_opcode << 4 | (self.format & 3) << 2 | u8::from(self.owner);
    }
}

/// A completion queue's send queue table holding one send queue over plain memory, which the
/// crate's writer posts on: the requests the poller retires are real ones, their `wr_id`s and
/// posting counts (`sq.wrid[]`, `sq.wqe_head[]`) the writer's.
pub(crate) struct TableWithQueue {
    pub(crate) table: SendQueueTable,
    queue: Rc<SharedSendQueue>,
    /// The queue's memory, kept until after the queue (which writes it) is dropped.
    _memory: Memory,
}

impl TableWithQueue {
    /// QP `qp_number`'s send queue of `wqe_count` slots, room for `wqe_count / 2` requests (one
    /// scatter/gather entry, no inline data: every request takes two slots), in a table.
    pub(crate) fn new(qp_number: u32, wqe_count: u32) -> Self {
        let limits = Limits {
            max_post: wqe_count / 2,
            max_inline_data: 0,
            max_send_sge: 1,
            qp_number,
            ..Limits::default()
        };
        let mut memory = Memory::new(wqe_count, 0, 0);
        let queue = Rc::new(SharedSendQueue::new(memory.queue(0, limits)));
        let table = SendQueueTable::default();
        table.insert(qp_number, Rc::clone(&queue));
        Self {
            table,
            queue,
            _memory: memory,
        }
    }

    /// Posts a signaled DC RDMA WRITE for each of `wr_ids`, each in a batch of its own; returns
    /// the posting index each one's WQE starts at (what its CQE's `wqe_counter` names).
    pub(crate) fn post(&self, wr_ids: impl IntoIterator<Item = u64>) -> Vec<u16> {
        let av = AddressVector::new([5; 48]);
        let mut indices = Vec::new();
        for wr_id in wr_ids {
            let index = self
                .queue
                .try_with_mut(|queue| {
                    let index = queue.posting_index() as u16;
                    let mut guard = queue.start_post_send();
                    let request = guard
                        .construct_wr(wr_id, WorkRequestFlags::Signaled)
                        .setup_write(0x55, 0x1000)
                        .setup_dc_addr(&av, 0x77, 0xdc);
                    // SAFETY: nothing reads the buffer.
                    unsafe { request.setup_sge(3, 0x2000, 64) }.expect("room for the request");
                    guard.post();
                    index
                })
                .unwrap();
            indices.push(index);
        }
        indices
    }

    /// Posts a signaled DC RDMA WRITE for `wr_id`; returns the posting index its WQE starts at.
    pub(crate) fn post_one(&self, wr_id: u64) -> u16 {
        self.post([wr_id])[0]
    }

    /// Posts and completes requests (as their completions would, `SendQueue::complete`) until
    /// the next request starts at posting index `index`.
    pub(crate) fn advance_to(&self, index: u32) {
        while self.queue.try_with_mut(|queue| queue.posting_index()).unwrap() < index {
            let at = self.post_one(0);
            self.queue.try_with_mut(|queue| queue.complete(at)).unwrap().unwrap();
        }
        let at = self.queue.try_with_mut(|queue| queue.posting_index()).unwrap();
        assert_eq!((at, self.outstanding()), (index, 0));
    }

    /// Requests posted and not completed (`sq.head - sq.tail`): the room completions free.
    pub(crate) fn outstanding(&self) -> u32 {
        self.queue.try_with_mut(|queue| queue.outstanding()).unwrap()
    }
}

/// A poller over CQ memory and the table of the send queues completing into it: a direct CQ
/// without its sideway CQ.
#[derive(Debug)]
pub(crate) struct Polling {
    poller: CompletionQueuePoller,
    table: Rc<SendQueueTable>,
}

impl Polling {
    /// # Safety
    ///
    /// As [`CompletionQueuePoller::new`].
    pub(crate) unsafe fn new(
        parts: CompletionQueueParts,
    ) -> Result<Self, crate::completion_queue::CreateDirectCompletionQueueError> {
        Ok(Self {
            // SAFETY: the caller's promise.
            poller: unsafe { CompletionQueuePoller::new(parts) }?,
            table: Rc::default(),
        })
    }

    pub(crate) fn poll(&mut self, completions: &mut [Completion]) -> Result<usize, PollDirectCompletionQueueError> {
        self.poller.poll(&self.table, completions)
    }

    pub(crate) fn table(&self) -> &Rc<SendQueueTable> {
        &self.table
    }
}
