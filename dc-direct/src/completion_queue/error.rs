//! The errors of making a [`DirectCompletionQueue`](super::DirectCompletionQueue) and of
//! polling.
use sideway_ext::mlx5::direct_objects::InitObjectError;

/// Error returned by [`DirectCompletionQueue::new`](super::DirectCompletionQueue::new): the CQ's
/// memory could not be read, or is not what this poller reads.
#[derive(Debug, thiserror::Error)]
#[error("cannot poll this completion queue directly")]
#[non_exhaustive]
pub struct CreateDirectCompletionQueueError(#[from] pub CreateDirectCompletionQueueErrorKind);

/// The enum type for [`CreateDirectCompletionQueueError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateDirectCompletionQueueErrorKind {
    /// `mlx5dv_init_obj` refused the CQ (not an mlx5 device's, or libmlx5 missing: see
    /// [`InitObjectError::is_not_supported`]).
    #[error(transparent)]
    InitObject(#[from] InitObjectError),
    /// libmlx5 gave a null CQE ring or doorbell record.
    #[error("mlx5dv_init_obj gave no CQE ring or doorbell record")]
    MissingMemory,
    /// The poller's barrier is x86-64's alone (the crate documentation's "The CPU: x86-64
    /// only").
    #[error("the direct poller is built and checked for x86-64 only, not {architecture}")]
    UnsupportedArchitecture {
        /// The architecture this was built for (`std::env::consts::ARCH`).
        architecture: &'static str,
    },
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
/// on), but for [`SendQueueInUse`](PollDirectCompletionQueueErrorKind::SendQueueInUse); completions
/// before it were returned by the previous poll.
#[derive(Debug, thiserror::Error)]
#[error("failed to poll completion queue")]
#[non_exhaustive]
pub struct PollDirectCompletionQueueError(#[from] pub PollDirectCompletionQueueErrorKind);

/// The enum type for [`PollDirectCompletionQueueError`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PollDirectCompletionQueueErrorKind {
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
    /// `mlx5_find_qp` finds none): a direct initiator dropped before its completions came, or
    /// a queue pair posted some other way completing into this CQ.
    #[error("send completion for unknown QP {qp_number:#x}")]
    UnknownQueuePair {
        /// The QP number the CQE names.
        qp_number: u32,
    },
    /// A send completion naming a slot where no request of the QP's outstanding ones starts
    /// (libmlx5 does not check, and would move its queue's tail by the slot's stale entry): a
    /// completion of an earlier queue pair of the same number, or of the same queue pair before
    /// a reset this CQ was not cleaned of (libmlx5 cleans no CQ whose memory it handed out).
    #[error("send completion of QP {qp_number:#x} for slot {wqe_counter}, where no outstanding request starts")]
    UnexpectedWqeCounter {
        /// The QP number the CQE names.
        qp_number: u32,
        /// The CQE's `wqe_counter`.
        wqe_counter: u16,
    },
    /// A send completion of a direct initiator whose batch is open (its
    /// [`start_post_send`](crate::DirectDcInitiator::start_post_send) guard is alive): the CQE
    /// is not consumed, and the next poll after the batch is posted or dropped reads it.
    #[error("send completion of QP {qp_number:#x} while a batch is open on it: post or drop the batch, then poll")]
    SendQueueInUse {
        /// The QP number the CQE names.
        qp_number: u32,
    },
}
