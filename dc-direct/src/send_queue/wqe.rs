//! Writing one request's WQE into the ring, byte for byte as libmlx5's DC post path leaves it:
//!
//! - the control segment: `_common_wqe_init_op` (bytes 8 to 11 zeroed, then `fm_ce_se`; the
//!   opcode and the 16-bit posting index), the `*_imm` builders (bytes 12 to 15, left as they
//!   were otherwise), `mlx5_send_wr_set_dc_addr_stream` (the stream id in bytes 9 and 10) and
//!   `_common_wqe_finalize` (the queue pair number and the size in 16-byte units);
//! - the datagram segment: `mlx5_send_wr_set_dc_addr` (the address vector, the DCT number OR-ed
//!   into its `dqp_dct` with bit 31, the DC key over its first 8 bytes);
//! - the remote segments: `_mlx5_send_wr_rdma` (`set_raddr_seg`) and `_mlx5_send_wr_atomic`
//!   (`_set_atomic_seg`);
//! - the data: `_mlx5_send_wr_set_sge` (a zero-length entry writes nothing),
//!   `_mlx5_send_wr_set_sge_list` (zero-length entries skipped, each entry wrapping at the end),
//!   `_mlx5_send_wr_set_inline_data(_list)` (a 4-byte header, the data split across the end, the
//!   padding after it left as it was; zero bytes write nothing).
//!
//! The checks are made first, so that a refused request writes nothing. The order of the stores
//! is not libmlx5's (nothing reads the WQE before the doorbell).
use std::io::IoSlice;
use std::ptr::NonNull;

use rdma_mummy_sys::ibv_sge;

use super::batch::Batch;
use super::operation::{Remote, Segments};
use super::ring::{store_be32, store_be64};
use super::{AddressVector, Limits, SendQueue, WorkRequestError, WorkRequestErrorKind};

/// The bit of the inline segment's byte count that marks it inline (`MLX5_INLINE_SEG`).
const INLINE_SEGMENT: u32 = 0x8000_0000;
/// The bit OR-ed with the DCT number into the address vector (`MLX5_EXTENDED_UD_AV`).
const EXTENDED_ADDRESS_VECTOR: u32 = 0x8000_0000;

/// One request as its data step hands it to the writer.
#[derive(Clone, Copy)]
pub(super) struct Request<'a> {
    pub(super) wr_id: u64,
    /// `fm_ce_se` from the request's flags; the queue's signal-all bit is added when written.
    pub(super) fm_ce_se: u8,
    pub(super) segments: Segments,
    pub(super) datagram: Datagram<'a>,
    pub(super) stream_id: Option<u16>,
}

/// The data of a request.
#[derive(Clone, Copy)]
pub(super) enum Data<'d> {
    Sge { lkey: u32, addr: u64, length: u32 },
    SgeList(&'d [ibv_sge]),
    Inline(&'d [u8]),
    InlineList(&'d [IoSlice<'d>]),
}

/// Where a written request is: its control segment's slot and its size in 16-byte units
/// (libmlx5's `cur_ctrl` and `cur_size`, what the doorbell of a batch of one needs).
#[derive(Debug, Clone, Copy)]
pub(super) struct Written {
    pub(super) slot: u32,
    pub(super) size: u32,
}

impl SendQueue {
    /// Writes `request` with `data` as the next request of `batch` (checks first, then the WQE).
    // inline(always): with #[inline] the wqe_instructions bench showed it called, not inlined.
    #[inline(always)]
    pub(super) fn write(
        &mut self, batch: &mut Batch, request: Request<'_>, data: Data<'_>,
    ) -> Result<(), WorkRequestError> {
        let limits = batch.limits;
        limits.check(batch, &request, data)?;
        let ring = limits.ring;
        let index = batch.posting_index;
        let slot = ring.slot_of(index);
        // SAFETY: a slot is below the ring's count, both tables' length (`from_parts`).
        unsafe {
            *self.wr_ids.get_unchecked_mut(slot as usize) = request.wr_id;
            *self.wqe_heads.get_unchecked_mut(slot as usize) = batch.head.wrapping_add(batch.len);
        }
        let control = ring.slot(slot);
        let mut size = 4;
        // SAFETY: the control segment is a slot's first 16 bytes, the datagram segment its other
        // 48 (64-byte aligned slots); every other segment starts where `ring` says, 16-byte
        // aligned in the buffer, and a WQE of this queue's limits fits in the ring
        // (`SendQueue::from_parts` checked it).
        unsafe {
            let segments = request.segments;
            let fm_ce_se = limits.signal_all_bits | request.fm_ce_se;
            write_control(control, index, &segments, request.stream_id, fm_ce_se);
            write_address(control.add(16), request.datagram);
            let (data_at, remote_size) = limits.write_remote(slot, segments.remote);
            size += remote_size;
            size += limits.write_data(data_at, data);
            store_be32(control.add(4), size | (limits.qp_number << 8));
        }
        batch.posting_index = index.wrapping_add(size.div_ceil(4));
        batch.len += 1;
        batch.last = Written { slot, size };
        Ok(())
    }
}

/// The checks and the segments that depend on the queue's limits and ring alone.
impl Limits {
    /// The checks libmlx5 makes for this request: its own first (the stream id, then the data
    /// setter's), then the queue's room (`mlx5_wq_overflow`, which libmlx5 makes first).
    #[inline]
    fn check(&self, batch: &Batch, request: &Request<'_>, data: Data<'_>) -> Result<(), WorkRequestError> {
        self.check_stream(request.stream_id)?;
        self.check_data(data)?;
        batch.check_room(self.max_post)
    }

    /// A stream id only on a queue with streams (`mlx5_send_wr_set_dc_addr_stream`).
    #[inline]
    pub(super) fn check_stream(&self, stream_id: Option<u16>) -> Result<(), WorkRequestError> {
        if let (Some(stream_id), false) = (stream_id, self.streams) {
            return Err(WorkRequestErrorKind::StreamsNotEnabled { stream_id }.into());
        }
        Ok(())
    }

    /// The data setters' checks: the SGE count of `_mlx5_send_wr_set_sge_list`, the inline
    /// length of `_mlx5_send_wr_set_inline_data(_list)`.
    #[inline]
    pub(super) fn check_data(&self, data: Data<'_>) -> Result<(), WorkRequestError> {
        match data {
            Data::Sge { .. } => self.check_sge_count(1),
            Data::SgeList(list) => self.check_sge_count(list.len()),
            Data::Inline(bytes) => self.check_inline(bytes.len()),
            Data::InlineList(slices) => self.check_inline(slices.iter().map(|slice| slice.len()).sum()),
        }
    }

    #[inline]
    fn check_sge_count(&self, count: usize) -> Result<(), WorkRequestError> {
        if count > self.max_send_sge as usize {
            return Err(WorkRequestErrorKind::TooManyScatterGatherEntries {
                count,
                max_send_sge: self.max_send_sge,
            }
            .into());
        }
        Ok(())
    }

    #[inline]
    fn check_inline(&self, length: usize) -> Result<(), WorkRequestError> {
        if length > self.max_inline_data as usize {
            return Err(WorkRequestErrorKind::InlineDataTooLong {
                length,
                max_inline_data: self.max_inline_data,
            }
            .into());
        }
        Ok(())
    }

    /// Writes the remote segments of a request at slot `slot` (`set_raddr_seg`, `_set_atomic_seg`);
    /// returns where its data goes and their size in 16-byte units.
    ///
    /// # Safety
    ///
    /// `slot` is a slot of the ring, and the request's WQE fits in the ring from it.
    #[inline]
    pub(super) unsafe fn write_remote(&self, slot: u32, remote: Remote) -> (NonNull<u8>, u32) {
        let ring = self.ring;
        // The next slot: the block after this one, or the first at the ring's end (libmlx5's
        // `seg == qend` check). Taken as a slot, the compiler sees that a segment there is at
        // least 64 bytes from the end: short inline data skips `Ring::copy`'s wrapping.
        let after_address = ring.slot(ring.slot_of(slot + 1));
        // SAFETY: the caller's promise: the segments are in the ring, 16-byte aligned.
        unsafe {
            match remote {
                Remote::None => (after_address, 0),
                Remote::Memory { rkey, remote_addr } => {
                    write_remote_address(after_address, rkey, remote_addr);
                    (after_address.add(16), 1)
                },
                Remote::Atomic {
                    rkey,
                    remote_addr,
                    swap_add,
                    compare,
                } => {
                    write_remote_address(after_address, rkey, remote_addr);
                    store_be64(after_address.add(16), swap_add);
                    if let Some(compare) = compare {
                        store_be64(after_address.add(24), compare);
                    }
                    // 32 bytes into a block: never the ring's end.
                    (after_address.add(32), 2)
                },
            }
        }
    }

    /// Writes the data segments at `at` (never the ring's end); returns their size in 16-byte units.
    ///
    /// # Safety
    ///
    /// `at` is 16-byte aligned in the ring, and the data was checked against the queue's limits.
    #[inline]
    pub(super) unsafe fn write_data(&self, at: NonNull<u8>, data: Data<'_>) -> u32 {
        let ring = self.ring;
        match data {
            Data::Sge { lkey, addr, length } => {
                if length == 0 {
                    return 0;
                }
                // SAFETY: the caller's promise.
                unsafe { write_data_segment(at, lkey, addr, length) };
                1
            },
            Data::SgeList(list) => {
                let mut segment = at;
                let mut written = 0;
                for sge in list {
                    segment = ring.wrap(segment);
                    if sge.length == 0 {
                        continue;
                    }
                    // SAFETY: the caller's promise; the list is no longer than the queue allows.
                    unsafe {
                        write_data_segment(segment, sge.lkey, sge.addr, sge.length);
                        segment = segment.add(16);
                    }
                    written += 1;
                }
                written
            },
            Data::Inline(bytes) => {
                if bytes.is_empty() {
                    return 0;
                }
                // SAFETY: the caller's promise; the header is 4 bytes into a 16-byte aligned
                // segment, never past the end.
                unsafe { ring.copy(at.add(4), bytes) };
                // SAFETY: as above.
                unsafe { inline_header(at, bytes.len()) }
            },
            Data::InlineList(slices) => {
                // SAFETY: as for Inline, slice after slice.
                let mut next = unsafe { at.add(4) };
                let mut length = 0;
                for slice in slices {
                    // SAFETY: as above; all slices together are within the inline limit.
                    next = unsafe { ring.copy(next, slice) };
                    length += slice.len();
                }
                if length == 0 {
                    return 0;
                }
                // SAFETY: as above.
                unsafe { inline_header(at, length) }
            },
        }
    }
}

/// The control segment's first word (opmod 0, the posting index's low 16 bits, the opcode:
/// `_common_wqe_init_op`) and its third (signature 0, the stream id of
/// `mlx5_send_wr_set_dc_addr_stream`, `fm_ce_se`), and its fourth for the `*_imm` builders.
///
/// # Safety
///
/// `control` is a slot of the ring.
#[inline]
pub(super) unsafe fn write_control(
    control: NonNull<u8>, index: u32, segments: &Segments, stream_id: Option<u16>, fm_ce_se: u8,
) {
    // SAFETY: the caller's promise: 16 bytes, 64-byte aligned.
    unsafe {
        let [index_high, index_low] = (index as u16).to_be_bytes();
        control
            .cast::<[u8; 4]>()
            .write([0, index_high, index_low, segments.opcode]);
        let stream = stream_id.unwrap_or(0).to_be_bytes();
        let word = u32::from_ne_bytes([0, stream[0], stream[1], fm_ce_se]);
        control.add(8).cast::<u32>().write(word);
        if let Some(immediate) = segments.immediate {
            control.add(12).cast::<u32>().write(immediate);
        }
    }
}

/// The datagram segment of a DC request, as `mlx5_send_wr_set_dc_addr` writes it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Datagram<'a> {
    /// A request's own address step: its parts, combined as they are written.
    Parts {
        address: &'a AddressVector,
        dct_number: u32,
        dc_key: u64,
    },
    /// A batch's address: the segment made once, copied into each request.
    Made(&'a Made),
}

/// A datagram segment made once ([`Made::new`]), for the requests of a batch.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(16))]
pub(super) struct Made([u8; 48]);

impl Made {
    /// The segment of these parts.
    #[inline]
    pub(super) fn new(address: &AddressVector, dct_number: u32, dc_key: u64) -> Self {
        let mut bytes = *address.bytes();
        bytes[..8].copy_from_slice(&dc_key.to_be_bytes());
        bytes[8..16].copy_from_slice(&dqp_dct_and_next(address, dct_number));
        Self(bytes)
    }
}

/// Bytes 8 to 15 of the segment: the vector's, `dqp_dct` OR-ed with the DCT number and bit 31.
#[inline]
fn dqp_dct_and_next(address: &AddressVector, dct_number: u32) -> [u8; 8] {
    let mut word = [0; 8];
    word.copy_from_slice(&address.bytes()[8..16]);
    let [dct0, dct1, dct2, dct3] = (dct_number | EXTENDED_ADDRESS_VECTOR).to_be_bytes();
    let dct = u64::from_ne_bytes([dct0, dct1, dct2, dct3, 0, 0, 0, 0]);
    (u64::from_ne_bytes(word) | dct).to_ne_bytes()
}

/// Writes the datagram segment of a DC request.
///
/// # Safety
///
/// `at` is 16-byte aligned with 48 bytes of the ring after it.
// inline(always): with #[inline] the wqe_instructions bench's pool row costs more a request.
#[inline(always)]
pub(super) unsafe fn write_address(at: NonNull<u8>, datagram: Datagram<'_>) {
    // SAFETY: the caller's promise.
    unsafe {
        match datagram {
            Datagram::Parts {
                address,
                dct_number,
                dc_key,
            } => {
                // Bytes 0 to 7: the DC key, in place of the vector's.
                store_be64(at, dc_key);
                at.add(8).cast::<[u8; 8]>().write(dqp_dct_and_next(address, dct_number));
                // Bytes 16 to 47: the vector's, read as a value (not copied memory to memory),
                // which the compiler may keep in registers while a batch goes to one route.
                let av = address.bytes();
                let rest: [u8; 32] = std::array::from_fn(|i| av[16 + i]);
                at.add(16).cast::<[u8; 32]>().write(rest);
            },
            Datagram::Made(made) => at.cast::<[u8; 48]>().write(made.0),
        }
    }
}

/// A remote address segment (`set_raddr_seg`).
///
/// # Safety
///
/// `at` is 16-byte aligned with 16 bytes of the ring after it.
#[inline]
unsafe fn write_remote_address(at: NonNull<u8>, rkey: u32, remote_addr: u64) {
    // SAFETY: the caller's promise.
    unsafe {
        store_be64(at, remote_addr);
        // rkey and the reserved word after it, big-endian in one store.
        store_be64(at.add(8), u64::from(rkey) << 32);
    }
}

/// A data segment (`_mlx5_send_wr_set_sge`).
///
/// # Safety
///
/// `at` is 16-byte aligned with 16 bytes of the ring after it.
#[inline]
unsafe fn write_data_segment(at: NonNull<u8>, lkey: u32, addr: u64, length: u32) {
    // SAFETY: the caller's promise.
    unsafe {
        // byte_count then lkey, big-endian in one store.
        store_be64(at, (u64::from(length) << 32) | u64::from(lkey));
        store_be64(at.add(8), addr);
    }
}

/// The inline segment's header for `length` (non-zero) bytes; returns its size in 16-byte units.
///
/// # Safety
///
/// `at` is 4-byte aligned in the ring.
#[inline]
unsafe fn inline_header(at: NonNull<u8>, length: usize) -> u32 {
    // The inline limit is a u32: the length fits.
    let length = length as u32;
    // SAFETY: the caller's promise.
    unsafe { store_be32(at, length | INLINE_SEGMENT) };
    (length + 4).div_ceil(16)
}
