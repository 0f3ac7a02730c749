//! A WQE decoder written from the mlx5 layout (`mlx5dv.h`'s `struct mlx5_wqe_ctrl_seg`,
//! `mlx5_wqe_av` inside the datagram segment, `mlx5_wqe_raddr_seg`, `mlx5_wqe_atomic_seg`,
//! `mlx5_wqe_data_seg`, `mlx5_wqe_inl_data_seg`): what a DC initiator's request says, read back
//! from its send queue's bytes, for tests that check a request's bytes say what was asked.
//!
//! The send queue is a ring: a request's 16-byte segments, and its inline data byte by byte,
//! continue at the queue's start after its end.

/// mlx5 opcodes of the requests a DC initiator sends (`MLX5_OPCODE_*`).
pub mod opcode {
    /// `MLX5_OPCODE_RDMA_WRITE`.
    pub const RDMA_WRITE: u8 = 0x08;
    /// `MLX5_OPCODE_RDMA_WRITE_IMM`.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// `MLX5_OPCODE_SEND`.
    pub const SEND: u8 = 0x0a;
    /// `MLX5_OPCODE_SEND_IMM`.
    pub const SEND_IMM: u8 = 0x0b;
    /// `MLX5_OPCODE_RDMA_READ`.
    pub const RDMA_READ: u8 = 0x10;
    /// `MLX5_OPCODE_ATOMIC_CS`.
    pub const ATOMIC_CS: u8 = 0x11;
    /// `MLX5_OPCODE_ATOMIC_FA`.
    pub const ATOMIC_FA: u8 = 0x12;
}

/// `fm_ce_se`'s completion-update bits (`MLX5_WQE_CTRL_CQ_UPDATE`).
pub const CQ_UPDATE: u8 = 2 << 2;
/// `fm_ce_se`'s solicited-event bit (`MLX5_WQE_CTRL_SOLICITED`).
pub const SOLICITED: u8 = 1 << 1;
/// `fm_ce_se`'s fence mode mask (bits 7:5; `MLX5_WQE_CTRL_FENCE` is 4 << 5).
pub const FENCE_MODE: u8 = 0xe0;
/// The top bit of a data segment's byte count that makes it inline (`MLX5_INLINE_SEG`).
pub const INLINE_SEG: u32 = 0x8000_0000;

/// A DC request, as its WQE says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedWqe {
    /// The mlx5 opcode ([`opcode`]).
    pub opcode: u8,
    /// The opcode modifier (bits 31:24 of the first word).
    pub opmod: u8,
    /// The WQE index (the posting index, 16 bits).
    pub index: u16,
    /// The queue pair number.
    pub qp_number: u32,
    /// Its size in 16-byte units (`ds`).
    pub ds: u8,
    /// The signature byte.
    pub signature: u8,
    /// The DCI stream (`dci_stream_channel_id`).
    pub stream: u16,
    /// The fence, completion and solicited bits (`fm_ce_se`).
    pub fm_ce_se: u8,
    /// The immediate data, for the `_IMM` opcodes (the field holds stale bytes otherwise).
    pub immediate: Option<u32>,
    /// The DC key.
    pub dc_key: u64,
    /// The DCT number (24 bits of `dqp_dct`).
    pub dct_number: u32,
    /// `dqp_dct`'s top bit (`MLX5_EXTENDED_UD_AV`).
    pub extended_av: bool,
    /// The address vector's remaining bytes (12..48 of `struct mlx5_wqe_av`: SL, rate, LID,
    /// MAC, traffic class, hop limit, flow label, GID), and the top byte of `dqp_dct` below the
    /// extended bit.
    pub av_route: [u8; 36],
    /// `dqp_dct`'s bits 30:24 (zero in an address vector libmlx5 made).
    pub av_dqp_high: u8,
    /// The remote address and key, for RDMA and atomics.
    pub remote: Option<(u64, u32)>,
    /// The atomic operands: (swap or add, compare).
    pub atomic: Option<(u64, u64)>,
    /// The data.
    pub data: Data,
}

/// A request's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// None: no data segment (a zero-length SGE or zero-length inline data leaves none).
    None,
    /// Scatter/gather entries: (length, lkey, address).
    Gather(Vec<(u32, u32, u64)>),
    /// Inline data.
    Inline(Vec<u8>),
}

/// Why a WQE could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Its opcode is none a DC initiator sends.
    UnknownOpcode(u8),
    /// Its `ds` is smaller than its segments.
    TooShort {
        /// The `ds` it says.
        ds: u8,
    },
    /// Its inline data runs past its `ds`.
    InlineOverrun {
        /// The inline byte count.
        length: u32,
    },
}

/// The send queue as a ring of bytes from one request's start.
struct Ring<'a> {
    queue: &'a [u8],
    start: usize,
}

impl Ring<'_> {
    fn byte(&self, offset: usize) -> u8 {
        self.queue[(self.start + offset) % self.queue.len()]
    }

    fn bytes<const N: usize>(&self, offset: usize) -> [u8; N] {
        std::array::from_fn(|i| self.byte(offset + i))
    }

    fn be32(&self, offset: usize) -> u32 {
        u32::from_be_bytes(self.bytes(offset))
    }

    fn be64(&self, offset: usize) -> u64 {
        u64::from_be_bytes(self.bytes(offset))
    }
}

/// Decodes the DC request whose WQE starts at slot `slot` (of 64 bytes) of `send_queue`.
pub fn decode_dc_wqe(send_queue: &[u8], slot: u32) -> Result<DecodedWqe, DecodeError> {
    let ring = Ring {
        queue: send_queue,
        start: slot as usize * 64,
    };
    let first = ring.be32(0);
    let qpn_ds = ring.be32(4);
    let opcode = first as u8;
    let ds = (qpn_ds & 0x3f) as u8;
    let (has_remote, has_atomic, has_immediate) = match opcode {
        opcode::RDMA_WRITE | opcode::RDMA_READ => (true, false, false),
        opcode::RDMA_WRITE_IMM => (true, false, true),
        opcode::SEND => (false, false, false),
        opcode::SEND_IMM => (false, false, true),
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => (true, true, false),
        other => return Err(DecodeError::UnknownOpcode(other)),
    };
    // Control segment (1 unit) and the datagram segment's address vector (3 units).
    let mut unit = 4usize;
    let dqp_dct = ring.be32(24);
    let mut wqe = DecodedWqe {
        opcode,
        opmod: (first >> 24) as u8,
        index: (first >> 8) as u16,
        qp_number: qpn_ds >> 8,
        ds,
        signature: ring.byte(8),
        stream: u16::from_be_bytes(ring.bytes(9)),
        fm_ce_se: ring.byte(11),
        immediate: has_immediate.then(|| ring.be32(12)),
        dc_key: ring.be64(16),
        dct_number: dqp_dct & 0x00ff_ffff,
        extended_av: dqp_dct & 0x8000_0000 != 0,
        av_route: ring.bytes(28),
        av_dqp_high: ((dqp_dct >> 24) & 0x7f) as u8,
        remote: None,
        atomic: None,
        data: Data::None,
    };
    if has_remote {
        wqe.remote = Some((ring.be64(unit * 16), ring.be32(unit * 16 + 8)));
        unit += 1;
    }
    if has_atomic {
        wqe.atomic = Some((ring.be64(unit * 16), ring.be64(unit * 16 + 8)));
        unit += 1;
    }
    if (ds as usize) < unit {
        return Err(DecodeError::TooShort { ds });
    }
    let data_units = ds as usize - unit;
    if data_units == 0 {
        return Ok(wqe);
    }
    let count = ring.be32(unit * 16);
    if count & INLINE_SEG != 0 {
        let length = count & !INLINE_SEG;
        if (4 + length as usize).div_ceil(16) != data_units {
            return Err(DecodeError::InlineOverrun { length });
        }
        wqe.data = Data::Inline((0..length as usize).map(|i| ring.byte(unit * 16 + 4 + i)).collect());
    } else {
        wqe.data = Data::Gather(
            (0..data_units)
                .map(|i| {
                    let at = (unit + i) * 16;
                    (ring.be32(at), ring.be32(at + 4), ring.be64(at + 8))
                })
                .collect(),
        );
    }
    Ok(wqe)
}
