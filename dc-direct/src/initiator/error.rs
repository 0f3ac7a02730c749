//! The errors of making and of recovering a direct DC initiator.
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, QueryQueuePairError, QueuePairState};
use sideway_ext::mlx5::dc::initiator::BringUpDcInitiatorError;
use sideway_ext::mlx5::direct_objects::InitObjectError;

use crate::send_queue::CreateSendQueueError;

/// Error returned by [`DirectDcInitiator::new`](super::DirectDcInitiator::new) and
/// [`new_with_blueflame`](super::DirectDcInitiator::new_with_blueflame); the DC initiator was
/// dropped.
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
    /// `MLX5_QP_SIGNATURE` is set: libmlx5 signs each WQE (`qp_sig_enabled` in `verbs.c`,
    /// `wq_sig` in `qp.c`).
    #[error("MLX5_QP_SIGNATURE is set: libmlx5 created the queue pair with WQE signatures, which this writer does not write")]
    WqeSignatures,
    /// The DC initiator is not in RESET, where libmlx5's indices are 0 (`mlx5_init_qp_indices`).
    #[error("the DC initiator is in {state:?}, not RESET: make the direct initiator before bring-up")]
    NotInReset {
        /// The state the device reported.
        state: QueuePairState,
    },
    /// Reading the DC initiator's state failed.
    #[error(transparent)]
    QueryState(#[from] QueryQueuePairError),
    /// The DC initiator completes into another CQ than the direct completion queue given.
    #[error("the DC initiator's send CQ is not the direct completion queue's")]
    DifferentCompletionQueue,
    /// `mlx5dv_init_obj` refused the queue pair.
    #[error(transparent)]
    InitObject(#[from] InitObjectError),
    /// libmlx5 gave a null send queue, doorbell record or register.
    #[error("mlx5dv_init_obj gave no {part}")]
    MissingMemory {
        /// Which: `"send queue"`, `"doorbell record"` or `"BlueFlame register"`.
        part: &'static str,
    },
    /// The doorbell record's send word is not 0: requests were posted through libmlx5.
    #[error("the DC initiator was posted on through libmlx5 (doorbell record {posting_index:#06x})")]
    AlreadyPosted {
        /// The posting index's low 16 bits, as the record holds them.
        posting_index: u16,
    },
    /// The send queue has more basic blocks than a completion's 16-bit `wqe_counter` names.
    #[error("a send queue of {wqe_count} basic blocks is larger than a completion's 16-bit index names")]
    QueueTooLarge {
        /// `sq.wqe_cnt`.
        wqe_count: u32,
    },
    /// The DC initiator has no thread domain of its own and its register is a BlueFlame register,
    /// which libmlx5 may share ([`new_with_blueflame`](super::DirectDcInitiator::new_with_blueflame)).
    #[error(
        "the queue pair's register is a BlueFlame register of {blueflame_size} bytes a half, which libmlx5 may share: \
         create the DC initiator on a thread domain of its own (setup_thread_domain)"
    )]
    BlueFlameRegisterNotOwned {
        /// `bf.size`.
        blueflame_size: u32,
    },
    /// Another live direct initiator writes the same BlueFlame register.
    #[error("another direct DC initiator writes the BlueFlame register at {register:#x}")]
    BlueFlameRegisterShared {
        /// The register's address (`bf.reg`).
        register: usize,
    },
    /// The send queue's parts are not a queue this writer writes.
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
    /// It was never brought up with [`bring_up`](super::DirectDcInitiator::bring_up).
    #[error("the direct DC initiator was not brought up with bring_up")]
    NotBroughtUp,
    /// Requests are still outstanding: their completions would stay in the CQ, which libmlx5
    /// does not clean once its memory is handed out.
    #[error("{outstanding} requests are outstanding: poll their completions before recovering")]
    RequestsOutstanding {
        /// Requests posted and not completed.
        outstanding: u32,
    },
    /// The move to RESET failed; nothing changed. `EINVAL` from a kernel whose
    /// `modify_dci_qp_is_ok` has no RESET branch: a direct initiator is not created again in its
    /// place (its memory would change); make a new one.
    #[error("the move to RESET failed")]
    Reset(#[source] ModifyQueuePairError),
    /// The DC initiator was reset but bringing it up again failed: recover again.
    #[error(transparent)]
    BringUp(#[from] BringUpDcInitiatorError),
}
