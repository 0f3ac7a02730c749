//! [`Ring`]: the send queue's memory, 64-byte basic blocks in a ring, and the stores the writer
//! makes into it. libmlx5's `mlx5_get_send_wqe` (a slot's address), its `sq.qend` checks (a
//! segment that would start at the end starts at the beginning) and `memcpy_to_wqe` (inline data
//! split across the end).
use std::ptr::NonNull;

/// The size of a basic block (`MLX5_SEND_WQE_BB`), the send queue's stride.
pub(super) const BASIC_BLOCK: usize = 64;

/// The send queue's buffer: `wqe_count` basic blocks from `start`.
///
/// Every store goes through a raw pointer: the device reads this memory, so no Rust reference to it is made.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ring {
    start: NonNull<u8>,
    /// A power of two.
    wqe_count: u32,
}

impl Ring {
    /// The ring of `wqe_count` blocks at `start` (64-byte aligned, valid for the queue's lifetime, as
    /// the caller of [`SendQueue::from_parts`](super::SendQueue::from_parts) promised).
    pub(super) fn new(start: NonNull<u8>, wqe_count: u32) -> Self {
        debug_assert!(wqe_count.is_power_of_two() && start.as_ptr() as usize % BASIC_BLOCK == 0);
        Self { start, wqe_count }
    }

    /// The slot of a posting index: the index modulo the count.
    #[inline]
    pub(super) fn slot_of(&self, index: u32) -> u32 {
        index & (self.wqe_count - 1)
    }

    /// The start of a slot (`mlx5_get_send_wqe`).
    #[inline]
    pub(super) fn slot(&self, slot: u32) -> NonNull<u8> {
        debug_assert!(slot < self.wqe_count);
        // SAFETY: the slot is inside the buffer of wqe_count blocks.
        unsafe { self.start.add(slot as usize * BASIC_BLOCK) }
    }

    /// The first byte past the buffer (`sq.qend`).
    #[inline]
    pub(super) fn end(&self) -> NonNull<u8> {
        // SAFETY: one past the end of the buffer.
        unsafe { self.start.add(self.wqe_count as usize * BASIC_BLOCK) }
    }

    /// `at`, or the buffer's start if `at` is its end: where a segment that would start at the
    /// end starts (libmlx5's `if (seg == sq.qend) seg = mlx5_get_send_wqe(qp, 0)`).
    #[inline]
    pub(super) fn wrap(&self, at: NonNull<u8>) -> NonNull<u8> {
        if at == self.end() {
            self.start
        } else {
            at
        }
    }

    /// Copies `bytes` to `at`, wrapping at the buffer's end (`memcpy_to_wqe_and_update`); returns where
    /// the copy ended.
    ///
    /// # Safety
    ///
    /// `at` must be in the buffer (or at its end), and `bytes` shorter than the buffer.
    #[inline]
    pub(super) unsafe fn copy(&self, at: NonNull<u8>, bytes: &[u8]) -> NonNull<u8> {
        let room = self.end().as_ptr() as usize - at.as_ptr() as usize;
        if bytes.len() <= room {
            // SAFETY: `room` bytes from `at` are in the buffer; the source is the caller's slice,
            // which does not overlap the device's memory it is copied into.
            unsafe { at.copy_from_nonoverlapping(NonNull::from(bytes).cast(), bytes.len()) };
            // SAFETY: at most the buffer's end.
            return unsafe { at.add(bytes.len()) };
        }
        let (before, after) = bytes.split_at(room);
        // SAFETY: as above, for the part up to the end, then from the start (the caller's
        // promise: the rest is shorter than the buffer).
        unsafe {
            at.copy_from_nonoverlapping(NonNull::from(before).cast(), before.len());
            self.start
                .copy_from_nonoverlapping(NonNull::from(after).cast(), after.len());
            self.start.add(after.len())
        }
    }
}

/// Stores a big-endian `u32` at `at`.
///
/// # Safety
///
/// `at` must be 4-byte aligned and in the buffer.
#[inline]
pub(super) unsafe fn store_be32(at: NonNull<u8>, value: u32) {
    // SAFETY: the caller's promise.
    unsafe { at.cast::<u32>().write(value.to_be()) }
}

/// Stores a big-endian `u64` at `at`.
///
/// # Safety
///
/// `at` must be 8-byte aligned and in the buffer.
#[inline]
pub(super) unsafe fn store_be64(at: NonNull<u8>, value: u64) {
    // SAFETY: the caller's promise.
    unsafe { at.cast::<u64>().write(value.to_be()) }
}
