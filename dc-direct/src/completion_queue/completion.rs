//! What a polled CQE says: [`Completion`], built as libmlx5's `mlx5_parse_cqe` fills a
//! `struct ibv_wc` for the send side (`handle_good_req`, `mlx5_handle_error_cqe`).

use sideway::ibverbs::completion::{WorkCompletionOperationType, WorkCompletionStatus};

use super::cqe::{Cqe, INLINE_SCATTER_32, INLINE_SCATTER_64};

/// The WQE opcodes of `mlx5dv.h` (`MLX5_OPCODE_*`) a requester CQE echoes.
mod wqe_opcode {
    pub(super) const SEND_INVALIDATE: u8 = 0x01;
    pub(super) const RDMA_WRITE: u8 = 0x08;
    pub(super) const RDMA_WRITE_IMMEDIATE: u8 = 0x09;
    pub(super) const SEND: u8 = 0x0a;
    pub(super) const SEND_IMMEDIATE: u8 = 0x0b;
    pub(super) const TCP_SEGMENTATION_OFFLOAD: u8 = 0x0e;
    pub(super) const RDMA_READ: u8 = 0x10;
    pub(super) const ATOMIC_COMPARE_AND_SWAP: u8 = 0x11;
    pub(super) const ATOMIC_FETCH_AND_ADD: u8 = 0x12;
}

/// The error syndromes of `mlx5dv.h` (`MLX5_CQE_SYNDROME_*`).
mod syndrome {
    pub(super) const LOCAL_LENGTH: u8 = 0x01;
    pub(super) const LOCAL_QP_OPERATION: u8 = 0x02;
    pub(super) const LOCAL_PROTECTION: u8 = 0x04;
    pub(super) const WORK_REQUEST_FLUSHED: u8 = 0x05;
    pub(super) const MEMORY_WINDOW_BIND: u8 = 0x06;
    pub(super) const BAD_RESPONSE: u8 = 0x10;
    pub(super) const LOCAL_ACCESS: u8 = 0x11;
    pub(super) const REMOTE_INVALID_REQUEST: u8 = 0x12;
    pub(super) const REMOTE_ACCESS: u8 = 0x13;
    pub(super) const REMOTE_OPERATION: u8 = 0x14;
    pub(super) const TRANSPORT_RETRY_EXCEEDED: u8 = 0x15;
    pub(super) const RNR_RETRY_EXCEEDED: u8 = 0x16;
    pub(super) const REMOTE_ABORTED: u8 = 0x22;
}

/// One completed send request, as `ibv_poll_cq` on libmlx5 would report it.
///
/// As in `struct ibv_wc`, only [`wr_id`](Self::wr_id), [`status`](Self::status),
/// [`qp_number`](Self::qp_number) and [`vendor_err`](Self::vendor_err) are defined for every
/// completion; the opcode and byte count are given where libmlx5 sets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    wr_id: u64,
    status: WorkCompletionStatus,
    opcode: Option<WorkCompletionOperationType>,
    byte_len: Option<u32>,
    qp_number: u32,
    vendor_err: u32,
    with_immediate: bool,
}

impl Default for Completion {
    /// A placeholder to fill a buffer of completions with before polling into it.
    fn default() -> Self {
        Self {
            wr_id: 0,
            status: WorkCompletionStatus::Success,
            opcode: None,
            byte_len: None,
            qp_number: 0,
            vendor_err: 0,
            with_immediate: false,
        }
    }
}

impl Completion {
    /// The completion of a requester CQE (`MLX5_CQE_REQ`) as `handle_good_req` sets it; the
    /// general error for scattered data, as `mlx5_copy_to_send_wqe` returns for a non-RC QP.
    #[inline]
    pub(super) fn requester(cqe: Cqe, wr_id: u64) -> Self {
        let (opcode, byte_len, with_immediate) = match cqe.wqe_opcode() {
            wqe_opcode::RDMA_WRITE_IMMEDIATE => (Some(WorkCompletionOperationType::Write), None, true),
            wqe_opcode::RDMA_WRITE => (Some(WorkCompletionOperationType::Write), None, false),
            wqe_opcode::SEND_IMMEDIATE => (Some(WorkCompletionOperationType::Send), None, true),
            wqe_opcode::SEND | wqe_opcode::SEND_INVALIDATE => (Some(WorkCompletionOperationType::Send), None, false),
            wqe_opcode::RDMA_READ => (Some(WorkCompletionOperationType::Read), Some(cqe.byte_count()), false),
            wqe_opcode::ATOMIC_COMPARE_AND_SWAP => (Some(WorkCompletionOperationType::CompareAndSwap), Some(8), false),
            wqe_opcode::ATOMIC_FETCH_AND_ADD => (Some(WorkCompletionOperationType::FetchAndAdd), Some(8), false),
            wqe_opcode::TCP_SEGMENTATION_OFFLOAD => {
                (Some(WorkCompletionOperationType::TcpSegmentationOffload), None, false)
            },
            // UMR, SET_PSV, NOP and MMO: libmlx5 reports the opcode its poster kept for the
            // slot (sq.wr_data), which this crate's writer, posting none of them, does not
            // keep. Any other opcode: libmlx5 leaves the opcode unset.
            _ => (None, None, false),
        };
        let scattered = cqe.opcode_format_owner() & (INLINE_SCATTER_32 | INLINE_SCATTER_64) != 0;
        Self {
            wr_id,
            status: if scattered {
                WorkCompletionStatus::GeneralError
            } else {
                WorkCompletionStatus::Success
            },
            opcode,
            byte_len,
            qp_number: cqe.qp_number(),
            vendor_err: 0,
            with_immediate,
        }
    }

    /// The completion of a requester error CQE (`MLX5_CQE_REQ_ERR`) whose request had `wr_id`:
    /// the status `mlx5_handle_error_cqe` maps its syndrome to, its vendor syndrome, no opcode.
    #[inline]
    pub(super) fn requester_error(cqe: Cqe, wr_id: u64) -> Self {
        Self {
            wr_id,
            status: error_status(cqe.syndrome()),
            opcode: None,
            byte_len: None,
            qp_number: cqe.qp_number(),
            vendor_err: u32::from(cqe.vendor_error_syndrome()),
            with_immediate: false,
        }
    }

    /// The `wr_id` the request was posted with.
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// Whether the request succeeded, or why not.
    pub fn status(&self) -> WorkCompletionStatus {
        self.status
    }

    /// The operation, for a completion without an error CQE; `None` for an error CQE, and for
    /// WQE opcodes libmlx5 does not name from the CQE alone.
    pub fn opcode(&self) -> Option<WorkCompletionOperationType> {
        self.opcode
    }

    /// The number of bytes transferred, where libmlx5 sets it: a READ's length and an atomic's 8
    /// bytes; `None` for other operations (ibv_wc's `byte_len` is undefined for them).
    pub fn byte_len(&self) -> Option<u32> {
        self.byte_len
    }

    /// The number of the QP the request was posted on (ibv_wc's `qp_num`).
    pub fn qp_number(&self) -> u32 {
        self.qp_number
    }

    /// The vendor error syndrome of an error completion; 0 without an error CQE.
    pub fn vendor_err(&self) -> u32 {
        self.vendor_err
    }

    /// Whether the request carried immediate data (ibv_wc's `IBV_WC_WITH_IMM` flag).
    pub fn with_immediate(&self) -> bool {
        self.with_immediate
    }
}

/// The status of an error CQE's syndrome (`mlx5_handle_error_cqe`); any other is a general error.
fn error_status(cqe_syndrome: u8) -> WorkCompletionStatus {
    match cqe_syndrome {
        syndrome::LOCAL_LENGTH => WorkCompletionStatus::LocalLengthError,
        syndrome::LOCAL_QP_OPERATION => WorkCompletionStatus::LocalQueuePairOperationError,
        syndrome::LOCAL_PROTECTION => WorkCompletionStatus::LocalProtectionError,
        syndrome::WORK_REQUEST_FLUSHED => WorkCompletionStatus::WorkRequestFlushedError,
        syndrome::MEMORY_WINDOW_BIND => WorkCompletionStatus::MemoryWindowBindError,
        syndrome::BAD_RESPONSE => WorkCompletionStatus::BadResponseError,
        syndrome::LOCAL_ACCESS => WorkCompletionStatus::LocalAccessError,
        syndrome::REMOTE_INVALID_REQUEST => WorkCompletionStatus::RemoteInvalidRequestError,
        syndrome::REMOTE_ACCESS => WorkCompletionStatus::RemoteAccessError,
        syndrome::REMOTE_OPERATION => WorkCompletionStatus::RemoteOperationError,
        syndrome::TRANSPORT_RETRY_EXCEEDED => WorkCompletionStatus::RetryCounterExceededError,
        syndrome::RNR_RETRY_EXCEEDED => WorkCompletionStatus::ResponderNotReadyRetryCounterExceededError,
        syndrome::REMOTE_ABORTED => WorkCompletionStatus::RemoteAbortedError,
        _ => WorkCompletionStatus::GeneralError,
    }
}
