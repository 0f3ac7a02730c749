//! [`Doorbell`]: telling the device about a batch, as libmlx5's `post_send_db` does (called by
//! `mlx5_send_wr_complete`), with `mlx5_bf_copy` for a BlueFlame write:
//!
//! 1. `udma_to_device_barrier()`, then the doorbell record's send word (`db[MLX5_SND_DBR]`, the
//!    second) becomes the posting index's low 16 bits, big-endian;
//! 2. `mmio_wc_start()`;
//! 3. a batch of one request of at most `blueflame_size / 16` 16-byte units on a queue with
//!    BlueFlame: the request itself, rounded up to 64 bytes, copied into the register 64 bytes
//!    at a time (`mmio_memcpy_x64`), its source wrapping at the ring's end; otherwise the first
//!    8 bytes of the batch's last control segment (`mmio_write64_be`);
//! 4. `mmio_flush_writes()`, and the register's half flips (`bf->offset ^= bf->buf_size`).
//!
//! libmlx5 also requires, for BlueFlame, `!ctx->shut_up_bf` (`MLX5_SHUT_UP_BF`) and
//! `inl || ctx->prefer_bf` (`MLX5_POST_SEND_PREFER_BF`): this writer follows both defaults and
//! copies whenever the register has halves (the crate documentation's "The BlueFlame register").
//! Its lock around steps 2 to 4 (`mmio_wc_spinlock`) is not taken: the writer owns its register.
use std::ptr::NonNull;

use super::ring::{Ring, BASIC_BLOCK};
use super::wqe::Written;
use crate::barrier::Hardware;

/// The index of the send queue's word in the doorbell record (`MLX5_SND_DBR`).
const SEND_DOORBELL_RECORD: usize = 1;

/// The doorbell record and the BlueFlame register of a send queue.
#[derive(Debug)]
pub(super) struct Doorbell {
    record: NonNull<u32>,
    register: NonNull<u8>,
    /// Each half's size (`bf->buf_size`); 0: no BlueFlame, the doorbell only.
    blueflame_size: u32,
    /// The half the next write goes to (`bf->offset`): 0 or `blueflame_size`.
    offset: u32,
    mmio: Hardware,
}

impl Doorbell {
    /// The doorbell of `record` (2 words) and `register` (2 halves of `blueflame_size` bytes, or one
    /// 8-byte word when 0), both checked by the caller of [`SendQueue::from_parts`](super::SendQueue::from_parts).
    pub(super) fn new(record: NonNull<u32>, register: NonNull<u8>, blueflame_size: u32, mmio: Hardware) -> Self {
        Self {
            record,
            register,
            blueflame_size,
            offset: 0,
            mmio,
        }
    }

    /// Rings for a batch of `count` (non-zero) requests whose last is `last`, with the queue's
    /// posting index now at `posting_index` (`post_send_db`).
    ///
    /// # Safety
    ///
    /// `last` was written into `ring` by this batch.
    #[inline]
    pub(super) unsafe fn ring(&mut self, ring: &Ring, posting_index: u32, count: u32, last: Written) {
        self.mmio.udma_to_device_barrier();
        // SAFETY: the record has two words (the caller of `from_parts` promised it); a volatile
        // store, as the device reads it.
        unsafe {
            let word = self.record.add(SEND_DOORBELL_RECORD);
            word.write_volatile((posting_index & 0xffff).to_be());
        }
        self.mmio.mmio_wc_start();
        let control = ring.slot(last.slot);
        let offset = self.offset as usize;
        if count == 1 && last.size <= self.blueflame_size / 16 {
            // mlx5_bf_copy: align(size * 16, 64) bytes, 64 at a time (size is at least 4).
            let mut source = control;
            for block in 0..(last.size as usize).div_ceil(4) {
                // SAFETY: the register's half holds blueflame_size bytes, at least this many;
                // the source is a 64-byte block of the ring.
                unsafe {
                    self.mmio
                        .mmio_memcpy_x64(self.register, offset + block * BASIC_BLOCK, source);
                    source = ring.wrap(source.add(BASIC_BLOCK));
                }
            }
        } else {
            // SAFETY: the control segment's first 8 bytes; the register's current half holds at least 8.
            unsafe {
                let bytes = control.cast::<[u8; 8]>().read();
                self.mmio.mmio_write64_be(self.register, offset, bytes);
            }
        }
        self.mmio.mmio_flush_writes();
        self.offset ^= self.blueflame_size;
    }
}
