//! Test-only CQ memory, CQE writer and send queue slot table.

use std::collections::HashMap;
use std::ptr::NonNull;

use crate::completion_queue::{
    CompletionQueueParts, CompletionQueuePoller, PollDirectCompletionQueueErrorKind, SendQueueSlots,
};

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

/// libmlx5's `sq.wrid[]`, `sq.wqe_head[]` and `sq.tail` per QP.
#[derive(Debug, Default)]
pub(crate) struct SlotTable {
    queues: HashMap<u32, TestSendQueue>,
}

#[derive(Debug)]
struct TestSendQueue {
    wr_ids: Vec<u64>,
    wqe_heads: Vec<u32>,
    tail: u32,
}

impl SlotTable {
    pub(crate) fn add(&mut self, qp_number: u32, wr_ids: Vec<u64>, wqe_heads: Vec<u32>) {
        assert!(wr_ids.len().is_power_of_two() && wr_ids.len() == wqe_heads.len());
        self.queues.insert(
            qp_number,
            TestSendQueue {
                wr_ids,
                wqe_heads,
                tail: 0,
            },
        );
    }

    pub(crate) fn tail(&self, qp_number: u32) -> u32 {
        self.queues[&qp_number].tail
    }
}

impl SendQueueSlots for SlotTable {
    fn retire(&mut self, qp_number: u32, wqe_counter: u16) -> Result<u64, PollDirectCompletionQueueErrorKind> {
        let queue = self
            .queues
            .get_mut(&qp_number)
            .ok_or(PollDirectCompletionQueueErrorKind::UnknownQueuePair { qp_number })?;
        let slot = usize::from(wqe_counter) & (queue.wr_ids.len() - 1);
        queue.tail = queue.wqe_heads[slot].wrapping_add(1);
        Ok(queue.wr_ids[slot])
    }
}
