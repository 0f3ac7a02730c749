//! The errors of making and of recovering a direct DC initiator.
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, QueryQueuePairError, QueuePairState};
use sideway_ext::mlx5::dc::initiator::BringUpDcInitiatorError;
use sideway_ext::mlx5::direct_objects::InitObjectError;

use crate::send_queue::CreateSendQueueError;

/// Error returned by [`DirectDcInitiator::new`](super::DirectDcInitiator::new) (and `_with_blueflame`).
#[derive(Debug, thiserror::Error)]
#[error("cannot post on this DC initiator directly")]
#[non_exhaustive]
pub struct CreateDirectDcInitiatorError(#[from] pub CreateDirectDcInitiatorErrorKind);

/// The enum type for [`CreateDirectDcInitiatorError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateDirectDcInitiatorErrorKind {
    /// The writer's barriers and stores are x86-64's alone.
    #[error("the direct writer is built and checked for x86-64 only, not {architecture}")]
    UnsupportedArchitecture {
        /// The architecture this was built for (`std::env::consts::ARCH`).
        architecture: &'static str,
    },
    /// `qp_sig_enabled` in `verbs.c`, `wq_sig` in `qp.c`.
    #[error("MLX5_QP_SIGNATURE is set: libmlx5 created the queue pair with WQE signatures, which this writer does not write")]
    WqeSignatures,
    /// Only in RESET are libmlx5's indices 0 (`mlx5_init_qp_indices`).
    #[error("the DC initiator is in {state:?}, not RESET: make the direct initiator before bring-up")]
    NotInReset {
        /// The state the device reported.
        state: QueuePairState,
    },
    /// Reading the state failed.
    #[error(transparent)]
    QueryState(#[from] QueryQueuePairError),
    /// Another send CQ.
    #[error("the DC initiator's send CQ is not the direct completion queue's")]
    DifferentCompletionQueue,
    /// `mlx5dv_init_obj` refused the queue pair.
    #[error(transparent)]
    InitObject(#[from] InitObjectError),
    /// A null pointer.
    #[error("mlx5dv_init_obj gave no {part}")]
    MissingMemory {
        /// Which: `"send queue"`, `"doorbell record"` or `"BlueFlame register"`.
        part: &'static str,
    },
    /// The doorbell record's send word is not 0.
    #[error("the DC initiator was posted on through libmlx5 (doorbell record {posting_index:#06x})")]
    AlreadyPosted {
        /// The posting index's low 16 bits, as the record holds them.
        posting_index: u16,
    },
    /// More than 2^16 basic blocks.
    #[error("a send queue of {wqe_count} basic blocks is larger than a completion's 16-bit index names")]
    QueueTooLarge {
        /// `sq.wqe_cnt`.
        wqe_count: u32,
    },
    /// See [`new_with_blueflame`](super::DirectDcInitiator::new_with_blueflame).
    #[error(
        "the queue pair's register is a BlueFlame register of {blueflame_size} bytes a half, which libmlx5 may share: \
         create the DC initiator on a thread domain of its own (build_on_thread_domain)"
    )]
    BlueFlameRegisterNotOwned {
        /// `bf.size`.
        blueflame_size: u32,
    },
    /// Another live direct initiator's.
    #[error("another direct DC initiator writes the BlueFlame register at {register:#x}")]
    BlueFlameRegisterShared {
        /// The register's address (`bf.reg`).
        register: usize,
    },
    /// Not a queue this writer writes.
    #[error(transparent)]
    SendQueue(#[from] CreateSendQueueError),
}

/// Error returned by [`DirectDcInitiator::recover`](super::DirectDcInitiator::recover).
#[derive(Debug, thiserror::Error)]
#[error("failed to recover direct DC initiator")]
#[non_exhaustive]
pub struct RecoverDirectDcInitiatorError(#[from] pub RecoverDirectDcInitiatorErrorKind);

/// The enum type for [`RecoverDirectDcInitiatorError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoverDirectDcInitiatorErrorKind {
    /// Not brought up with [`bring_up`](super::DirectDcInitiator::bring_up).
    #[error("the direct DC initiator was not brought up with bring_up")]
    NotBroughtUp,
    /// Their completions would stay in the CQ, which libmlx5 no longer cleans.
    #[error("{outstanding} requests are outstanding: poll their completions before recovering")]
    RequestsOutstanding {
        /// Requests posted and not completed.
        outstanding: u32,
    },
    /// Nothing changed. `EINVAL` from a kernel whose `modify_dci_qp_is_ok` has no RESET
    /// branch: make a new direct initiator (one made again in its place would move its memory).
    #[error("the move to RESET failed")]
    Reset(#[source] ModifyQueuePairError),
    /// Reset, not brought up again: recover again.
    #[error(transparent)]
    BringUp(#[from] BringUpDcInitiatorError),
}
