//! A DC initiator's send queue written directly: [`SendQueue`] writes each request's WQE into
//! the queue's memory and rings the doorbell itself, leaving exactly the bytes, doorbell record
//! and BlueFlame stores libmlx5's own post path (`ibv_wr_*` and `mlx5dv_wr_set_dc_addr` on a
//! DCI) leaves for the same requests, without its four indirect calls a request.
//!
//! ```no_run
//! use sideway::ibverbs::queue_pair::WorkRequestFlags;
//! use sideway_ext_dc_direct::send_queue::{AddressVector, SendQueue};
//!
//! # fn post(queue: &mut SendQueue, av: &AddressVector) -> Result<(), Box<dyn std::error::Error>> {
//! // `queue`: from `SendQueue::from_parts`; `av`: the target's address handle's address vector.
//! let mut guard = queue.start_post_send();
//! for i in 0..16u64 {
//!     let request = guard.construct_wr(i, WorkRequestFlags::Signaled).setup_write(0x1234, 0x10_0000 + 64 * i);
//!     // SAFETY: the 64 bytes at 0x20_0000 are registered under lkey 7 and outlive the requests.
//!     unsafe { request.setup_dc_addr(av, 0x00ab_cdef, 0xdc).setup_sge(7, 0x20_0000, 64) }?;
//! }
//! guard.post();
//! # Ok(()) }
//! ```
//!
//! A request is described in the order of sideway-ext's DC guard:
//! [`construct_wr`](SendQueueBatch::construct_wr) → an operation →
//! [`setup_dc_addr`](DirectRequestDestination::setup_dc_addr) (not in a batch to one target,
//! [`start_post_send_to`](SendQueue::start_post_send_to)) → the data, where the whole WQE is
//! written and the request answered ([`WorkRequestError`]: nothing written, the batch goes on).
//! [`post`](SendQueueBatch::post) rings the doorbell; dropping the guard gives the slots back.
//!
//! # What libmlx5 does that this mirrors
//!
//! | here | libmlx5 (`providers/mlx5/qp.c`, rdma-core 55) |
//! |---|---|
//! | [`start_post_send`](SendQueue::start_post_send), [`start_post_send_to`](SendQueue::start_post_send_to) | `mlx5_send_wr_start` (the lock aside: `&mut`) |
//! | the data step: checks | `mlx5_wq_overflow`, the SGE count of `_mlx5_send_wr_set_sge_list`, the inline length of `_mlx5_send_wr_set_inline_data(_list)` |
//! | the data step: control segment | `_common_wqe_init_op`, `_common_wqe_finalize` (`wr_id` into `sq.wrid[]`, `sq.wqe_head[]`) |
//! | the data step: operation | `_mlx5_send_wr_send`, `_mlx5_send_wr_rdma` (`set_raddr_seg`), `_mlx5_send_wr_atomic` (`_set_atomic_seg`), the `*_imm` builders |
//! | the data step: address (the request's or the batch's) | `mlx5_send_wr_set_dc_addr`, `mlx5_send_wr_set_dc_addr_stream` |
//! | the data step: data | `_mlx5_send_wr_set_sge`, `_mlx5_send_wr_set_sge_list`, `_mlx5_send_wr_set_inline_data(_list)`, `memcpy_to_wqe` |
//! | [`post`](SendQueueBatch::post) | `mlx5_send_wr_complete`, `post_send_db`, `mlx5_bf_copy` |
//! | dropping the guard | `mlx5_send_wr_abort` |
//!
//! # Not offered
//!
//! SEND with invalidate, memory-window binds and local invalidations (libmlx5 fences the request
//! after those through `fm_cache`, which this writer therefore never needs), TSO, masked atomics,
//! the mlx5 memory-key setters, WQE signatures (`wq_sig`); refused: [`WorkRequestErrorKind`]. A
//! refused request is that request alone (libmlx5 fails the whole batch at `ibv_wr_complete`).
//! `max_post` must be what libmlx5 granted (`sq.max_post`); the writer checks only that one of
//! the largest WQEs fits. It follows the defaults of `MLX5_SHUT_UP_BF` and
//! `MLX5_POST_SEND_PREFER_BF`.
mod address;
mod batch;
mod doorbell;
mod error;
pub mod operation;
mod ring;
pub(crate) mod shared;
mod wqe;

#[cfg(test)]
pub(crate) mod tests;

use std::ptr::NonNull;

pub use address::AddressVector;
pub use batch::{
    Addressing, BatchAddress, DirectRequest, DirectRequestData, DirectRequestDestination, EachRequest, SendQueueBatch,
};
pub use error::{CreateSendQueueError, CreateSendQueueErrorKind, WorkRequestError, WorkRequestErrorKind};

use crate::barrier::Hardware;
use doorbell::Doorbell;
use ring::{Ring, BASIC_BLOCK};

/// The raw parts of a DCI's send queue: `mlx5dv_init_obj`'s `struct mlx5dv_qp`, and what the
/// queue pair was created with.
#[derive(Debug, Clone, Copy)]
pub struct SendQueueParts {
    /// The send queue's buffer (`sq.buf`).
    pub buffer: NonNull<u8>,
    /// Its number of 64-byte basic blocks (`sq.wqe_cnt`), a power of two.
    pub wqe_count: u32,
    /// Its stride (`sq.stride`): 64.
    pub stride: u32,
    /// The doorbell record, two big-endian words (`dbrec`); the writer writes the second.
    pub doorbell_record: NonNull<u32>,
    /// The BlueFlame register (`bf.reg`), owned by this queue pair alone.
    pub blueflame: NonNull<u8>,
    /// Each of the register's two halves' size (`bf.size`); 0: no BlueFlame.
    pub blueflame_size: u32,
    /// The granted `max_send_wr`.
    pub max_post: u32,
    /// The granted `max_inline_data`.
    pub max_inline_data: u32,
    /// The granted `max_send_sge`.
    pub max_send_sge: u32,
    /// Whether every request is signaled (`sq_sig_all` at creation).
    pub sq_sig_all: bool,
    /// The queue pair's number.
    pub qp_number: u32,
    /// Whether the DCI has DCI streams.
    pub streams: bool,
}

/// A DCI's send queue, written directly; see the [module](self) documentation.
#[derive(Debug)]
pub struct SendQueue {
    limits: Limits,
    /// The posting index (`sq.cur_post`) after the last batch posted: in 64-byte blocks, from
    /// the queue's creation.
    posting_index: u32,
    /// Requests posted (`sq.head`).
    head: u32,
    /// Requests completed (`sq.tail`), advanced by the completion poller.
    tail: u32,
    /// Per slot, the `wr_id` of the request whose WQE starts there (`sq.wrid`).
    wr_ids: Box<[u64]>,
    /// Per slot, how many requests had been posted before that request (`sq.wqe_head`).
    wqe_heads: Box<[u32]>,
    doorbell: Doorbell,
}

/// What every request of a queue is checked against and written with; a batch holds a copy.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    ring: Ring,
    max_post: u32,
    max_inline_data: u32,
    max_send_sge: u32,
    /// `MLX5_WQE_CTRL_CQ_UPDATE` with signal-all, else 0 (`sq_signal_bits`).
    signal_all_bits: u8,
    qp_number: u32,
    streams: bool,
}

// SAFETY: the queue's memory is its own (`from_parts`' contract); moving it to another thread
// moves all access with it.
unsafe impl Send for SendQueue {}

/// The signaled bit of `fm_ce_se` (`MLX5_WQE_CTRL_CQ_UPDATE`).
const CQ_UPDATE: u8 = 2 << 2;

impl SendQueue {
    /// The send queue of these parts, at posting index 0.
    ///
    /// # Errors
    ///
    /// [`CreateSendQueueErrorKind`].
    ///
    /// # Safety
    ///
    /// - `buffer` must be valid for `wqe_count * 64` bytes, `doorbell_record` for two words, and
    ///   `blueflame` for `2 * blueflame_size` bytes (8 when 0), for the queue's lifetime;
    /// - nothing else may post on the queue pair, nor use its BlueFlame register, meanwhile
    ///   (libmlx5's post path included);
    /// - the limits must be those the queue pair was granted (see the [module](self)
    ///   documentation).
    pub unsafe fn from_parts(parts: SendQueueParts) -> Result<Self, CreateSendQueueError> {
        check(&parts)?;
        let Some(mmio) = Hardware::new() else {
            return Err(CreateSendQueueErrorKind::UnsupportedArchitecture {
                architecture: std::env::consts::ARCH,
            }
            .into());
        };
        Ok(Self {
            limits: Limits {
                ring: Ring::new(parts.buffer, parts.wqe_count),
                max_post: parts.max_post,
                max_inline_data: parts.max_inline_data,
                max_send_sge: parts.max_send_sge,
                signal_all_bits: if parts.sq_sig_all { CQ_UPDATE } else { 0 },
                qp_number: parts.qp_number,
                streams: parts.streams,
            },
            posting_index: 0,
            head: 0,
            tail: 0,
            wr_ids: vec![0; parts.wqe_count as usize].into_boxed_slice(),
            wqe_heads: vec![0; parts.wqe_count as usize].into_boxed_slice(),
            doorbell: Doorbell::new(parts.doorbell_record, parts.blueflame, parts.blueflame_size, mmio),
        })
    }

    /// Starts a batch of requests (`mlx5_send_wr_start`), each addressed at its own address
    /// step.
    #[inline]
    pub fn start_post_send(&mut self) -> SendQueueBatch<'_> {
        SendQueueBatch::new(self, EachRequest)
    }

    /// Starts a batch of requests to one DC address (`mlx5_send_wr_start`), written into each
    /// as `mlx5_send_wr_set_dc_addr(_stream)` writes it.
    #[inline]
    pub fn start_post_send_to(&mut self, address: BatchAddress) -> SendQueueBatch<'_, BatchAddress> {
        SendQueueBatch::new(self, address)
    }

    /// The queue pair's number.
    pub fn qp_number(&self) -> u32 {
        self.limits.qp_number
    }

    /// `max_post`.
    pub fn max_post(&self) -> u32 {
        self.limits.max_post
    }

    /// `max_inline_data`.
    pub fn max_inline_data(&self) -> u32 {
        self.limits.max_inline_data
    }

    /// `max_send_sge`.
    pub fn max_send_sge(&self) -> u32 {
        self.limits.max_send_sge
    }

    /// Completes the request whose WQE starts at a send CQE's `wqe_counter`, and every request
    /// before it (`sq.tail = sq.wqe_head[idx] + 1`, as `mlx5_parse_cqe`); returns its `wr_id`.
    /// `None`, and nothing completed, when no outstanding request starts there (libmlx5 does
    /// not check).
    pub fn complete(&mut self, wqe_counter: u16) -> Option<u64> {
        let behind = (self.posting_index as u16).wrapping_sub(wqe_counter);
        if behind == 0 || usize::from(behind) > self.wqe_heads.len() {
            return None;
        }
        let slot = self.limits.ring.slot_of(u32::from(wqe_counter)) as usize;
        if self.wqe_heads[slot].wrapping_sub(self.tail) >= self.outstanding() {
            return None;
        }
        self.tail = self.wqe_heads[slot].wrapping_add(1);
        Some(self.wr_ids[slot])
    }

    /// How many requests are posted and not completed (`sq.head - sq.tail`).
    pub(crate) fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// Back to posting index 0 with nothing outstanding, as libmlx5's `mlx5_init_qp_indices`
    /// leaves a queue pair moved to RESET (`mlx5_modify_qp`).
    pub(crate) fn reset(&mut self) {
        self.posting_index = 0;
        self.head = 0;
        self.tail = 0;
    }
}

/// The size in 16-byte units of the largest request the writer writes within these limits: an
/// atomic with `max_send_sge` entries, or a WRITE with `max_inline_data` bytes inline.
fn largest_request(max_inline_data: u32, max_send_sge: u32) -> u64 {
    let control_and_address = 4;
    let gather = 2 + u64::from(max_send_sge);
    let inline = 1 + (u64::from(max_inline_data) + 4).div_ceil(16);
    control_and_address + gather.max(inline)
}

fn check(parts: &SendQueueParts) -> Result<(), CreateSendQueueErrorKind> {
    use CreateSendQueueErrorKind::*;
    if parts.stride as usize != BASIC_BLOCK {
        return Err(UnsupportedStride { stride: parts.stride });
    }
    if !parts.wqe_count.is_power_of_two() || parts.wqe_count > 1 << 24 {
        return Err(InvalidWqeCount {
            wqe_count: parts.wqe_count,
        });
    }
    let misaligned = |pointer: *const u8, alignment: usize| pointer as usize % alignment != 0;
    if misaligned(parts.buffer.as_ptr(), BASIC_BLOCK) {
        return Err(Misaligned {
            part: "send queue buffer",
            alignment: BASIC_BLOCK,
        });
    }
    if misaligned(parts.doorbell_record.as_ptr().cast(), 4) {
        return Err(Misaligned {
            part: "doorbell record",
            alignment: 4,
        });
    }
    let register_alignment = if parts.blueflame_size == 0 { 8 } else { BASIC_BLOCK };
    if misaligned(parts.blueflame.as_ptr(), register_alignment) {
        return Err(Misaligned {
            part: "BlueFlame register",
            alignment: register_alignment,
        });
    }
    if parts.blueflame_size % BASIC_BLOCK as u32 != 0 || parts.blueflame_size > 2048 {
        return Err(InvalidBlueFlameSize {
            blueflame_size: parts.blueflame_size,
        });
    }
    if parts.qp_number >= 1 << 24 {
        return Err(InvalidQpNumber {
            qp_number: parts.qp_number,
        });
    }
    let largest_blocks = largest_request(parts.max_inline_data, parts.max_send_sge).div_ceil(4);
    if parts.max_post == 0 || parts.max_post > parts.wqe_count || largest_blocks > u64::from(parts.wqe_count) {
        return Err(LimitsDoNotFit {
            max_post: parts.max_post,
            max_inline_data: parts.max_inline_data,
            max_send_sge: parts.max_send_sge,
            wqe_count: parts.wqe_count,
        });
    }
    Ok(())
}
