//! The send queue's tests: its own layout tests over plain memory (`layout`, `refusals`), and
//! the comparison with libmlx5's post path (`oracle`, with random requests from `requests`).
mod layout;
mod oracle;
mod refusals;
pub(crate) mod requests;

use std::ptr::NonNull;

use super::{SendQueue, SendQueueParts};

/// 64-byte aligned memory, as a queue's buffer and register are.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// Plain memory standing in for a DCI's send queue, doorbell record and BlueFlame register.
pub(crate) struct Memory {
    buffer: Box<[Block]>,
    record: Box<[u32; 2]>,
    register: Box<[Block]>,
}

impl Memory {
    /// `wqe_count` blocks filled with `stale`, a zero record, a register of two halves of
    /// `blueflame_size` bytes (one block when 0) filled with `stale` too.
    pub(crate) fn new(wqe_count: u32, blueflame_size: u32, stale: u8) -> Self {
        let register_blocks = (2 * blueflame_size as usize / 64).max(1);
        Self {
            buffer: vec![Block([stale; 64]); wqe_count as usize].into_boxed_slice(),
            record: Box::new([0; 2]),
            register: vec![Block([stale; 64]); register_blocks].into_boxed_slice(),
        }
    }

    /// Parts over this memory, with the given limits.
    pub(super) fn parts(&mut self, blueflame_size: u32, limits: Limits) -> SendQueueParts {
        SendQueueParts {
            buffer: NonNull::from(&mut self.buffer[0]).cast(),
            wqe_count: self.buffer.len() as u32,
            stride: 64,
            doorbell_record: NonNull::from(&mut *self.record).cast(),
            blueflame: NonNull::from(&mut self.register[0]).cast(),
            blueflame_size,
            max_post: limits.max_post,
            max_inline_data: limits.max_inline_data,
            max_send_sge: limits.max_send_sge,
            sq_sig_all: limits.sq_sig_all,
            qp_number: limits.qp_number,
            streams: limits.streams,
        }
    }

    /// The send queue over this memory.
    pub(crate) fn queue(&mut self, blueflame_size: u32, limits: Limits) -> SendQueue {
        let parts = self.parts(blueflame_size, limits);
        // SAFETY: the memory outlives the queue in every test (the test keeps both), and nothing
        // else writes it meanwhile (the tests read it only between batches).
        unsafe { SendQueue::from_parts(parts) }.expect("valid parts")
    }

    /// The send queue's bytes.
    pub(super) fn buffer(&self) -> Vec<u8> {
        self.buffer.iter().flat_map(|block| block.0).collect()
    }

    /// The doorbell record's words as stored.
    pub(super) fn record(&self) -> [u32; 2] {
        *self.record
    }

    /// The register's bytes.
    pub(super) fn register(&self) -> Vec<u8> {
        self.register.iter().flat_map(|block| block.0).collect()
    }
}

/// The limits of a test queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_post: u32,
    pub(crate) max_inline_data: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) sq_sig_all: bool,
    pub(crate) qp_number: u32,
    pub(crate) streams: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_post: 4,
            max_inline_data: 124,
            max_send_sge: 4,
            sq_sig_all: false,
            qp_number: 0x12_3456,
            streams: false,
        }
    }
}

impl SendQueue {
    /// The posting index (`sq.cur_post`).
    pub(crate) fn posting_index(&self) -> u32 {
        self.posting_index
    }

    /// The `wr_id` of the request starting at `slot` (`sq.wrid[slot]`).
    pub(crate) fn wr_id(&self, slot: u32) -> u64 {
        self.wr_ids[slot as usize]
    }

    /// `sq.wqe_head[slot]`.
    pub(crate) fn wqe_head(&self, slot: u32) -> u32 {
        self.wqe_heads[slot as usize]
    }
}
