//! The layout of a 64-byte CQE (`struct mlx5_cqe64` and `struct mlx5_err_cqe` of rdma-core's
//! `providers/mlx5/mlx5dv.h`), read in place from the completion queue's memory.
//!
//! Offsets are from the start of the 64-byte CQE; multi-byte fields are big-endian.

use std::ptr::NonNull;

/// `byte_cnt` of `struct mlx5_cqe64`: the length a READ returned.
const BYTE_COUNT: usize = 44;
/// `vendor_err_synd` of `struct mlx5_err_cqe`.
const VENDOR_ERROR_SYNDROME: usize = 54;
/// `syndrome` of `struct mlx5_err_cqe`.
const SYNDROME: usize = 55;
/// `sop_drop_qpn` of `struct mlx5_cqe64` (`s_wqe_opcode_qpn` of `struct mlx5_err_cqe`).
const OPCODE_QP_NUMBER: usize = 56;
/// `wqe_counter` of `struct mlx5_cqe64`: the index of the completed WQE's first building block.
const WQE_COUNTER: usize = 60;
/// `op_own`: the CQE opcode in the top nibble, the format in bits 2–3, the owner in bit 0.
pub(super) const OPCODE_FORMAT_OWNER: usize = 63;

/// `MLX5_CQE_OWNER_MASK`.
const OWNER_MASK: u8 = 0x1;
/// `MLX5_INLINE_SCATTER_32`: the data of a READ or atomic is in this CQE.
pub(super) const INLINE_SCATTER_32: u8 = 0x4;
/// `MLX5_INLINE_SCATTER_64`: the data of a READ or atomic is in the 64 bytes before this CQE.
pub(super) const INLINE_SCATTER_64: u8 = 0x8;
/// Both format bits: a compressed CQE (an array of mini CQEs; `mlx5dv_get_cqe_format` 3).
pub(super) const FORMAT_COMPRESSED: u8 = 0x3;

/// The CQE opcodes of `mlx5dv.h` (`MLX5_CQE_*`, the top nibble of `op_own`).
pub(super) mod cqe_opcode {
    /// `MLX5_CQE_REQ`: a send request completed.
    pub(crate) const REQUESTER: u8 = 0;
    /// `MLX5_CQE_REQ_ERR`: a send request completed in error.
    pub(crate) const REQUESTER_ERROR: u8 = 13;
    /// `MLX5_CQE_INVALID`: never written by the device; `mlx5_create_cq` fills every CQE with it.
    pub(crate) const INVALID: u8 = 15;
}

/// A CQE software owns, read only after the owner check and its barrier (`mlx5_get_next_cqe`).
#[derive(Clone, Copy)]
pub(super) struct Cqe {
    /// The first byte of the 64-byte `struct mlx5_cqe64` (the second half of a 128-byte CQE).
    start: NonNull<u8>,
    /// `op_own`, as read for the owner check.
    opcode_format_owner: u8,
}

impl Cqe {
    /// The CQE at `start` if software owns it for the pass `consumer_index` is in: its opcode is
    /// not `MLX5_CQE_INVALID`, and its owner bit equals the consumer index's bit `cqe_count`
    /// (`get_sw_cqe`). `cqe_count` is a power of two.
    ///
    /// # Safety
    /// `start` points to 64 readable bytes.
    #[inline]
    pub(super) unsafe fn software_owned(start: NonNull<u8>, consumer_index: u32, cqe_count: u32) -> Option<Self> {
        // SAFETY: the caller gives 64 readable bytes; the device writes op_own, so it is read
        // volatile.
        let opcode_format_owner = unsafe { start.add(OPCODE_FORMAT_OWNER).read_volatile() };
        let cqe = Self {
            start,
            opcode_format_owner,
        };
        let pass_parity = u8::from(consumer_index & cqe_count != 0);
        (cqe.opcode() != cqe_opcode::INVALID && opcode_format_owner & OWNER_MASK == pass_parity).then_some(cqe)
    }

    /// The CQE opcode (`mlx5dv_get_cqe_opcode`).
    #[inline]
    pub(super) fn opcode(self) -> u8 {
        self.opcode_format_owner >> 4
    }

    /// The CQE format (`mlx5dv_get_cqe_format`).
    #[inline]
    pub(super) fn format(self) -> u8 {
        (self.opcode_format_owner >> 2) & 0x3
    }

    /// `op_own` as read for the owner check.
    #[inline]
    pub(super) fn opcode_format_owner(self) -> u8 {
        self.opcode_format_owner
    }

    /// The opcode of the completed WQE (`MLX5_OPCODE_*`, the top byte of `sop_drop_qpn`).
    #[inline]
    pub(super) fn wqe_opcode(self) -> u8 {
        self.read::<4>(OPCODE_QP_NUMBER)[0]
    }

    /// The QP number (the low 24 bits of `sop_drop_qpn`).
    #[inline]
    pub(super) fn qp_number(self) -> u32 {
        u32::from_be_bytes(self.read(OPCODE_QP_NUMBER)) & 0x00ff_ffff
    }

    /// `wqe_counter`.
    #[inline]
    pub(super) fn wqe_counter(self) -> u16 {
        u16::from_be_bytes(self.read(WQE_COUNTER))
    }

    /// `byte_cnt`.
    #[inline]
    pub(super) fn byte_count(self) -> u32 {
        u32::from_be_bytes(self.read(BYTE_COUNT))
    }

    /// `syndrome` of an error CQE.
    #[inline]
    pub(super) fn syndrome(self) -> u8 {
        self.read::<1>(SYNDROME)[0]
    }

    /// `vendor_err_synd` of an error CQE.
    #[inline]
    pub(super) fn vendor_error_syndrome(self) -> u8 {
        self.read::<1>(VENDOR_ERROR_SYNDROME)[0]
    }

    /// `N` bytes at `offset`, read volatile: the memory is the device's.
    #[inline]
    fn read<const N: usize>(self, offset: usize) -> [u8; N] {
        debug_assert!(offset + N <= 64);
        // SAFETY: `software_owned` was given 64 readable bytes and every offset here is inside
        // them; [u8; N] has alignment 1.
        unsafe { self.start.add(offset).cast::<[u8; N]>().read_volatile() }
    }
}
