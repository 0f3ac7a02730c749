//! The errors of making and of polling a [`DirectCompletionQueue`](super::DirectCompletionQueue).
use sideway_ext::mlx5::direct_objects::InitObjectError;

/// Error returned by [`DirectCompletionQueue::new`](super::DirectCompletionQueue::new).
#[derive(Debug, thiserror::Error)]
#[error("cannot poll this completion queue directly")]
#[non_exhaustive]
pub struct CreateDirectCompletionQueueError(#[from] pub CreateDirectCompletionQueueErrorKind);

/// The enum type for [`CreateDirectCompletionQueueError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateDirectCompletionQueueErrorKind {
    /// `mlx5dv_init_obj` refused the CQ ([`InitObjectError::is_not_supported`]).
    #[error(transparent)]
    InitObject(#[from] InitObjectError),
    /// A null CQE ring or doorbell record.
    #[error("mlx5dv_init_obj gave no CQE ring or doorbell record")]
    MissingMemory,
    /// The poller's barrier is x86-64's alone.
    #[error("the direct poller is built and checked for x86-64 only, not {architecture}")]
    UnsupportedArchitecture {
        /// The architecture this was built for (`std::env::consts::ARCH`).
        architecture: &'static str,
    },
    /// Not one of the two CQE sizes libmlx5 creates.
    #[error("unsupported CQE size {cqe_size} (64 or 128 bytes)")]
    UnsupportedCqeSize {
        /// The size given (`mlx5dv_cq`'s `cqe_size`).
        cqe_size: u32,
    },
    /// The 24-bit consumer index must hold the owner bit's parity.
    #[error("unsupported CQE count {cqe_count} (a power of two, at most 2^23)")]
    UnsupportedCqeCount {
        /// The count given (`mlx5dv_cq`'s `cqe_cnt`).
        cqe_count: u32,
    },
}

/// Error returned by a direct poll on a CQE it cannot report, consumed as `mlx5_poll_one` does.
#[derive(Debug, thiserror::Error)]
#[error("failed to poll completion queue")]
#[non_exhaustive]
pub struct PollDirectCompletionQueueError(#[from] pub PollDirectCompletionQueueErrorKind);

/// The enum type for [`PollDirectCompletionQueueError`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PollDirectCompletionQueueErrorKind {
    /// CQE format 3.
    #[error("compressed CQE (op_own {opcode_format_owner:#04x}) in a CQ polled without compression")]
    CompressedCqe {
        /// The CQE's `op_own` byte.
        opcode_format_owner: u8,
    },
    /// Not a send completion.
    #[error("unexpected CQE opcode {cqe_opcode} for QP {qp_number:#x}")]
    UnexpectedCqeOpcode {
        /// The CQE opcode (`mlx5dv_get_cqe_opcode`).
        cqe_opcode: u8,
        /// The QP number the CQE names.
        qp_number: u32,
    },
    /// No send queue of this CQ has that number (`mlx5_find_qp` finds none).
    #[error("send completion for unknown QP {qp_number:#x}")]
    UnknownQueuePair {
        /// The QP number the CQE names.
        qp_number: u32,
    },
    /// libmlx5 does not check; e.g. of the queue pair before a reset this CQ was not cleaned of.
    #[error("send completion of QP {qp_number:#x} for slot {wqe_counter}, where no outstanding request starts")]
    UnexpectedWqeCounter {
        /// The QP number the CQE names.
        qp_number: u32,
        /// The CQE's `wqe_counter`.
        wqe_counter: u16,
    },
    /// Not consumed: the next poll reads it.
    #[error("send completion of QP {qp_number:#x} while a batch is open on it: post or drop the batch, then poll")]
    SendQueueInUse {
        /// The QP number the CQE names.
        qp_number: u32,
    },
}
