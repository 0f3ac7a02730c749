//! The writer in steps, for the C entries ([`SendQueueEntries`](super::SendQueueEntries)): the
//! WQE [`SendQueue::write`] writes at a request's data step, written call by call as libmlx5's
//! builders write it, so that nothing a call is given waits for the next one:
//!
//! | step | libmlx5 (`providers/mlx5/qp.c`) | writes |
//! |---|---|---|
//! | [`start_request`](SendQueue::start_request): the builder | `_common_wqe_init_op` (its `mlx5_wq_overflow`), the operation | the control segment but its size, the remote segments |
//! | [`write_request_address`](SendQueue::write_request_address): the DC setter | `mlx5_send_wr_set_dc_addr(_stream)` | the datagram segment, the stream id |
//! | [`write_request_data`](SendQueue::write_request_data): the data setter | `_mlx5_send_wr_set_sge(_list)`, `_mlx5_send_wr_set_inline_data(_list)` | the data segments |
//! | [`finish_request`](SendQueue::finish_request): the last setter | `_common_wqe_finalize` | the size and QP number, the slot's `wr_id` |
//!
//! Each step writes with the writer's own functions (`wqe.rs`), into the slot at the batch's
//! posting index, which the room check of the first step found free: a request refused at a
//! later step leaves bytes there, in room no posted request holds (libmlx5 leaves them too), and
//! is not posted. The two setters come in either order: the data's place follows from the
//! operation, known at the first step.
use std::ptr::NonNull;

use super::batch::Batch;
use super::operation::Segments;
use super::ring::store_be32;
use super::wqe::{write_address, write_control, Data, Written};
use super::{AddressVector, SendQueue, WorkRequestError};

/// A request whose WQE is being written: its slot, `wr_id`, where its data goes and its size so
/// far in 16-byte units.
#[derive(Debug, Clone, Copy)]
pub(super) struct Started {
    slot: u32,
    wr_id: u64,
    data_at: NonNull<u8>,
    size: u32,
}

impl SendQueue {
    /// The builder's step: the room for one more request in `batch`, then the control segment
    /// (all but its size and QP number) and the remote segments of `segments`' operation.
    ///
    /// # Errors
    ///
    /// [`QueueFull`](super::WorkRequestErrorKind::QueueFull): nothing is written.
    // inline(always): with #[inline] on the entries' steps, the DC pool row of `scripts/bench`
    // (direct) goes over its limit.
    #[inline(always)]
    pub(super) fn start_request(
        &mut self, batch: &Batch, wr_id: u64, fm_ce_se: u8, segments: Segments,
    ) -> Result<Started, WorkRequestError> {
        self.check_room(batch.len)?;
        let index = batch.posting_index;
        let slot = self.ring.slot_of(index);
        // SAFETY: the slot's request has room (checked), and a WQE of this queue's limits fits in
        // the ring (`SendQueue::from_parts` checked it).
        unsafe {
            write_control(
                self.ring.slot(slot),
                index,
                &segments,
                None,
                self.signal_all_bits | fm_ce_se,
            );
            let (data_at, remote_size) = self.write_remote(slot, segments.remote);
            Ok(Started {
                slot,
                wr_id,
                data_at,
                size: 4 + remote_size,
            })
        }
    }

    /// The DC setter's step: the datagram segment, and the stream id.
    ///
    /// # Errors
    ///
    /// [`StreamsNotEnabled`](super::WorkRequestErrorKind::StreamsNotEnabled): nothing is written.
    // inline(always): with #[inline] on the entries' steps, the DC pool row of `scripts/bench`
    // (direct) goes over its limit.
    #[inline(always)]
    pub(super) fn write_request_address(
        &mut self, started: &Started, address: &AddressVector, dct_number: u32, dc_key: u64, stream_id: Option<u16>,
    ) -> Result<(), WorkRequestError> {
        self.check_stream(stream_id)?;
        let control = self.ring.slot(started.slot);
        // SAFETY: the datagram segment is the slot's last 48 bytes, the stream id bytes 9 and
        // 10 of its control segment.
        unsafe {
            write_address(control.add(16), address, dct_number, dc_key);
            if let Some(stream_id) = stream_id {
                control.add(9).cast::<[u8; 2]>().write(stream_id.to_be_bytes());
            }
        }
        Ok(())
    }

    /// The data setter's step: the data segments.
    ///
    /// # Errors
    ///
    /// [`TooManyScatterGatherEntries`](super::WorkRequestErrorKind::TooManyScatterGatherEntries),
    /// [`InlineDataTooLong`](super::WorkRequestErrorKind::InlineDataTooLong): nothing is written.
    // inline(always): with #[inline] on the entries' steps, the DC pool row of `scripts/bench`
    // (direct) goes over its limit.
    #[inline(always)]
    pub(super) fn write_request_data(&mut self, started: &mut Started, data: Data<'_>) -> Result<(), WorkRequestError> {
        self.check_data(data)?;
        // SAFETY: `data_at` is where the request's data goes (16-byte aligned in the ring, not
        // its end), and the data was checked against the queue's limits.
        started.size += unsafe { self.write_data(started.data_at, data) };
        Ok(())
    }

    /// The last setter's step: the control segment's size and QP number, the slot's `wr_id`,
    /// and `batch` past the request.
    // inline(always): with #[inline] on the entries' steps, the DC pool row of `scripts/bench`
    // (direct) goes over its limit.
    #[inline(always)]
    pub(super) fn finish_request(&mut self, batch: &mut Batch, started: Started) {
        let Started { slot, wr_id, size, .. } = started;
        // SAFETY: the control segment is the slot's first 16 bytes.
        unsafe { store_be32(self.ring.slot(slot).add(4), size | (self.qp_number << 8)) };
        // SAFETY: a slot is below the ring's count, both tables' length (`from_parts`).
        unsafe {
            *self.wr_ids.get_unchecked_mut(slot as usize) = wr_id;
            *self.wqe_heads.get_unchecked_mut(slot as usize) = self.head.wrapping_add(batch.len);
        }
        batch.posting_index = batch.posting_index.wrapping_add(size.div_ceil(4));
        batch.len += 1;
        batch.last = Written { slot, size };
    }
}
