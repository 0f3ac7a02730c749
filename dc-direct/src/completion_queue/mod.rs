//! Polling a DC initiator's completion queue directly: reading its CQEs from the memory
//! `mlx5dv_init_obj` gives (`struct mlx5dv_cq`), as libmlx5's `mlx5_poll_cq` reads them.
//!
//! libmlx5 cannot poll the completions of a QP whose WQEs this crate writes: it takes the
//! `wr_id` from its own `sq.wrid[]`. [`DirectCompletionQueue`] takes it from the send queue that
//! wrote the WQE.
//!
//! # What it mirrors (rdma-core 55, `providers/mlx5/cq.c`)
//! - `get_sw_cqe` / `next_cqe_sw`: the CQE at `consumer_index & (cqe_count - 1)` is software's
//!   when its opcode is not `MLX5_CQE_INVALID` and its owner bit equals the consumer index's bit
//!   `cqe_count`; for a 128-byte CQE, the second 64 bytes are the CQE read.
//! - `mlx5_get_next_cqe`: the consumer index is advanced, then `udma_from_device_barrier` orders
//!   the reads of the CQE after the owner check.
//! - `mlx5_parse_cqe`, send side, with `handle_good_req`: a requester CQE (`MLX5_CQE_REQ`) gives
//!   the opcode from the WQE opcode it echoes, the byte count of a READ (`byte_cnt`) or an atomic
//!   (8), `IBV_WC_WITH_IMM` for the immediate variants, and the `wr_id` of the slot its
//!   `wqe_counter` names; the send queue's tail moves past that request
//!   (`sq.tail = sq.wqe_head[slot] + 1`). A CQE with scattered data (`MLX5_INLINE_SCATTER_32` or
//!   `_64`) completes with `IBV_WC_GENERAL_ERR`, as `mlx5_copy_to_send_wqe` returns for any QP
//!   that is not RC.
//! - `mlx5_handle_error_cqe`: a requester error CQE (`MLX5_CQE_REQ_ERR`) gives the status of its
//!   syndrome (unknown syndromes: `IBV_WC_GENERAL_ERR`), its `vendor_err_synd`, and the slot's
//!   `wr_id`, the tail moving as for a requester CQE.
//! - `poll_cq`: at most the requested number of CQEs per poll, then `update_cons_index` stores
//!   the low 24 bits of the consumer index, big-endian, in the doorbell record's first word,
//!   once per poll, also when nothing was polled. cq.c puts no barrier around this store.
//!
//! # Where it differs from libmlx5
//! - CQEs libmlx5 does not report as send completions are refused
//!   ([`PollDirectCompletionQueueErrorKind`]; libmlx5 would read a compressed requester CQE as
//!   scattered data), consumed as libmlx5 consumes them. libmlx5 fails the whole poll on a CQE
//!   of an unknown QP (and discards the completions polled before it) and returns a partly filled
//!   `ibv_wc` for resize and unknown opcodes; here the completions before the refused CQE are
//!   returned first, and the next poll returns the error.
//! - For the WQE opcodes whose completion opcode libmlx5 takes from `sq.wr_data[]` (UMR,
//!   SET_PSV, NOP, MMO) and those it leaves unset, [`Completion::opcode`] is `None`.
//! - libmlx5 finds the QP by the CQE's QP number (`mlx5_poll_cq`, CQE version 0) or by its user
//!   index (`mlx5_poll_cq_v1`); this poller always uses the QP number, which names the same QP.
//! - The consumer index starts from the doorbell record (libmlx5 keeps the full index in
//!   `struct mlx5_cq`, which `mlx5dv_cq` does not give; its low 24 bits are all the owner check
//!   needs). libmlx5 must not poll the CQ once this poller does.

mod completion;
mod cqe;
pub(crate) mod direct;
mod error;
mod table;
#[cfg(test)]
pub(crate) mod tests;

use std::ptr::NonNull;

pub use completion::Completion;
pub use direct::DirectCompletionQueue;
pub(crate) use table::SendQueueTable;

use crate::barrier::Hardware;
use cqe::{cqe_opcode, Cqe, FORMAT_COMPRESSED};
pub use error::{
    CreateDirectCompletionQueueError, CreateDirectCompletionQueueErrorKind, PollDirectCompletionQueueError,
    PollDirectCompletionQueueErrorKind,
};

/// The largest CQE count whose owner-bit parity the doorbell record's 24 bits hold.
const MAX_CQE_COUNT: u32 = 1 << 23;

/// A completion queue's memory as `mlx5dv_init_obj` gives it (`struct mlx5dv_cq`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CompletionQueueParts {
    /// `buf`: the CQE ring.
    pub(crate) buffer: NonNull<u8>,
    /// `cqe_cnt`: the number of CQEs in the ring.
    pub(crate) cqe_count: u32,
    /// `cqe_size`: 64 or 128 bytes.
    pub(crate) cqe_size: u32,
    /// `dbrec`: the doorbell record, two big-endian words (consumer index, arm).
    pub(crate) doorbell_record: NonNull<u32>,
    /// `cqn`: the CQ number.
    pub(crate) cq_number: u32,
}

/// Reads send completions from a completion queue's memory.
#[derive(Debug)]
pub(crate) struct CompletionQueuePoller {
    parts: CompletionQueueParts,
    /// libmlx5's `cons_index`: CQEs consumed since the CQ was created, modulo 2^32 (from 2^24
    /// on, as the doorbell record gave it at creation).
    consumer_index: u32,
    /// The barrier between the owner check and the CQE's other fields.
    mmio: Hardware,
}

impl CompletionQueuePoller {
    /// A poller over a CQ's memory, starting from the consumer index its doorbell record holds.
    ///
    /// # Safety
    /// - `parts.buffer` points to `cqe_count * cqe_size` bytes and `parts.doorbell_record` to
    ///   two 4-byte-aligned words, readable and writable (the doorbell record) for the poller's
    ///   lifetime, written otherwise only by the device;
    /// - nothing else (libmlx5 included) polls the CQ while the poller exists.
    pub(crate) unsafe fn new(parts: CompletionQueueParts) -> Result<Self, CreateDirectCompletionQueueError> {
        if parts.cqe_size != 64 && parts.cqe_size != 128 {
            return Err(CreateDirectCompletionQueueErrorKind::UnsupportedCqeSize {
                cqe_size: parts.cqe_size,
            }
            .into());
        }
        if !parts.cqe_count.is_power_of_two() || parts.cqe_count > MAX_CQE_COUNT {
            return Err(CreateDirectCompletionQueueErrorKind::UnsupportedCqeCount {
                cqe_count: parts.cqe_count,
            }
            .into());
        }
        let Some(mmio) = Hardware::new() else {
            return Err(CreateDirectCompletionQueueErrorKind::UnsupportedArchitecture {
                architecture: std::env::consts::ARCH,
            }
            .into());
        };
        // SAFETY: the caller gives a readable, aligned doorbell record.
        let stored = unsafe { parts.doorbell_record.read_volatile() };
        Ok(Self {
            parts,
            consumer_index: u32::from_be(stored) & 0x00ff_ffff,
            mmio,
        })
    }

    /// Polls at most `completions.len()` CQEs into `completions` and returns how many it filled
    /// (`mlx5_poll_cq`), then stores the consumer index in the doorbell record. A CQE it refuses
    /// stops the poll before it when completions were filled; otherwise it is consumed (but for
    /// [`SendQueueInUse`](PollDirectCompletionQueueErrorKind::SendQueueInUse)) and returned.
    pub(crate) fn poll(
        &mut self, table: &SendQueueTable, completions: &mut [Completion],
    ) -> Result<usize, PollDirectCompletionQueueError> {
        let mut polled = 0;
        let mut refused = None;
        while polled < completions.len() {
            let Some(cqe) = self.next_software_cqe() else { break };
            // mlx5_get_next_cqe: the reads of the CQE's contents come after its owner bit's.
            self.mmio.udma_from_device_barrier();
            match Self::parse(cqe, table) {
                Ok(completion) => {
                    completions[polled] = completion;
                    polled += 1;
                    self.consumer_index = self.consumer_index.wrapping_add(1);
                },
                Err(kind @ PollDirectCompletionQueueErrorKind::SendQueueInUse { .. }) => {
                    refused = (polled == 0).then_some(kind);
                    break;
                },
                Err(kind) if polled == 0 => {
                    self.consumer_index = self.consumer_index.wrapping_add(1);
                    refused = Some(kind);
                    break;
                },
                Err(_) => break,
            }
        }
        self.store_consumer_index();
        match refused {
            Some(kind) => Err(kind.into()),
            None => Ok(polled),
        }
    }

    /// The CQ number (`mlx5dv_cq`'s `cqn`).
    pub(crate) fn cq_number(&self) -> u32 {
        self.parts.cq_number
    }

    /// The CQE at the consumer index, if software owns it (`next_cqe_sw`).
    #[inline]
    fn next_software_cqe(&self) -> Option<Cqe> {
        let CompletionQueueParts {
            buffer,
            cqe_count,
            cqe_size,
            ..
        } = self.parts;
        let slot = (self.consumer_index & (cqe_count - 1)) as usize;
        // A 128-byte CQE's `struct mlx5_cqe64` is its second half (get_sw_cqe).
        let offset = slot * cqe_size as usize + (cqe_size as usize - 64);
        // SAFETY: slot < cqe_count, so the 64 bytes at offset are inside the ring `new`'s caller
        // gave.
        unsafe { Cqe::software_owned(buffer.add(offset), self.consumer_index, cqe_count) }
    }

    /// The completion a software-owned CQE reports (`mlx5_parse_cqe`, send side).
    #[inline]
    fn parse(cqe: Cqe, table: &SendQueueTable) -> Result<Completion, PollDirectCompletionQueueErrorKind> {
        if cqe.format() == FORMAT_COMPRESSED {
            return Err(PollDirectCompletionQueueErrorKind::CompressedCqe {
                opcode_format_owner: cqe.opcode_format_owner(),
            });
        }
        let qp_number = cqe.qp_number();
        let build = match cqe.opcode() {
            cqe_opcode::REQUESTER => Completion::requester,
            cqe_opcode::REQUESTER_ERROR => Completion::requester_error,
            cqe_opcode => {
                return Err(PollDirectCompletionQueueErrorKind::UnexpectedCqeOpcode { cqe_opcode, qp_number })
            },
        };
        let wr_id = table.retire(qp_number, cqe.wqe_counter())?;
        Ok(build(cqe, wr_id))
    }

    /// Stores the consumer index's low 24 bits, big-endian, in the doorbell record's first word
    /// (`update_cons_index`).
    #[inline]
    fn store_consumer_index(&mut self) {
        // SAFETY: `new`'s caller gives a writable, aligned doorbell record; the device reads it.
        unsafe {
            self.parts
                .doorbell_record
                .write_volatile((self.consumer_index & 0x00ff_ffff).to_be())
        };
    }
}
