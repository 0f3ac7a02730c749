//! The errors of creating a completion queue poller and of polling.

/// Error returned when a completion queue poller is created over a CQ's raw parts.
#[derive(Debug, thiserror::Error)]
#[error("cannot poll this completion queue directly")]
#[non_exhaustive]
pub struct CreateCompletionQueuePollerError(#[from] pub CreateCompletionQueuePollerErrorKind);

/// The enum type for [`CreateCompletionQueuePollerError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateCompletionQueuePollerErrorKind {
    /// The CQE size is neither 64 nor 128 bytes, the two sizes libmlx5 creates.
    #[error("unsupported CQE size {cqe_size} (64 or 128 bytes)")]
    UnsupportedCqeSize {
        /// The size given (`mlx5dv_cq`'s `cqe_size`).
        cqe_size: u32,
    },
    /// The CQE count is not a power of two of at most 2^23: the owner bit's pass parity could
    /// not be read from the 24-bit consumer index the doorbell record holds.
    #[error("unsupported CQE count {cqe_count} (a power of two, at most 2^23)")]
    UnsupportedCqeCount {
        /// The count given (`mlx5dv_cq`'s `cqe_cnt`).
        cqe_count: u32,
    },
}

/// Error returned when polling a completion queue directly meets a CQE it cannot report as a
/// send completion. The CQE is consumed (as libmlx5's `mlx5_poll_one` consumes a CQE it fails
/// on); completions before it were returned by the previous poll.
#[derive(Debug, thiserror::Error)]
#[error("failed to poll completion queue")]
#[non_exhaustive]
pub struct PollCompletionQueueError(#[from] pub PollCompletionQueueErrorKind);

/// The enum type for [`PollCompletionQueueError`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PollCompletionQueueErrorKind {
    /// A compressed CQE (an array of mini CQEs, CQE format 3): the CQ was created with CQE
    /// compression, which this poller does not read.
    #[error("compressed CQE (op_own {opcode_format_owner:#04x}) in a CQ polled without compression")]
    CompressedCqe {
        /// The CQE's `op_own` byte.
        opcode_format_owner: u8,
    },
    /// A CQE that is not a send completion: a receive, resize, signature error or unknown CQE
    /// opcode, none of which a CQ serving only DC initiators receives.
    #[error("unexpected CQE opcode {cqe_opcode} for QP {qp_number:#x}")]
    UnexpectedCqeOpcode {
        /// The CQE opcode (`mlx5dv_get_cqe_opcode`).
        cqe_opcode: u8,
        /// The QP number the CQE names.
        qp_number: u32,
    },
    /// A send completion for a QP whose send queue this poller was not given (libmlx5's
    /// `mlx5_find_qp` finds none).
    #[error("send completion for unknown QP {qp_number:#x}")]
    UnknownQueuePair {
        /// The QP number the CQE names.
        qp_number: u32,
    },
}
