//! The DC initiator (DCI): a send-only queue pair of the DC transport whose every request names
//! its destination with `mlx5dv_wr_set_dc_addr`.
//!
//! Build one with [`DcInitiatorBuilder`] (`pd.create_dci_builder()`): `mlx5dv_create_qp` creates
//! it in RESET; [`DcInitiator::modify`] moves it to RTS, its refusals explained by the DC
//! initiator's table (mlx5_ib's `modify_dci_qp_is_ok`). Then post with
//! [`DcInitiator::start_post_send`] ([`DcPostSendGuard`]): `construct_wr` → an operation →
//! `setup_dc_addr` → the data. A data step before the address does not compile.
//!
//! This module defines the builder and its errors and the DC initiator with its accessors;
//! `creation` holds the builder's settings and `build`, `post_send` the post guard.
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_qp, ibv_qp_init_attr_ex};
use sideway::ibverbs::completion::GenericCompletionQueue;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, QueuePairState, SendOperationFlags};

use self::creation::{DciInitParameters, DciRequest};
use self::post_send::DcSendView;
use super::queue_pair::DcQueuePair;
use crate::ibverbs::queue_pair::QueuePairAttribute;

pub(crate) mod creation;
pub(crate) mod post_send;

pub use self::post_send::{DcDestinationHandle, DcLocalBufferHandle, DcPostSendGuard, DcWorkRequestHandle};

// How it reaches RTS, and comes back after an error.
pub(crate) mod bring_up;
pub(crate) mod recovery;
pub use self::bring_up::{BringUpDcInitiatorError, BringUpDcInitiatorErrorKind, DcInitiatorBringUp};
pub use self::recovery::{DcRecovery, RecoverDcInitiatorError, RecoverDcInitiatorErrorKind};
// The reset of one errored DCI stream.
mod stream_reset;
pub use self::stream_reset::{ResetDciStreamError, ResetDciStreamErrorKind};
// This crate's own: a DC initiator on a thread domain of its own, a builder's settings on
// another protection domain, or checked against the device before it is built.
mod plan;
mod protection_domain;
pub use self::plan::{PlanDcInitiatorError, PlanDcInitiatorErrorKind};
pub mod thread_domain;

/// Every send operation a DC initiator can post (libmlx5's `MLX5_SUPPORTED_SEND_OPS_FLAGS_DCI`,
/// less send with invalidate, which DC cannot carry); the atomics need a device with atomics.
pub const DC_SEND_OPERATIONS: SendOperationFlags = SendOperationFlags::Write
    .or(SendOperationFlags::WriteWithImmediate)
    .or(SendOperationFlags::Send)
    .or(SendOperationFlags::SendWithImmediate)
    .or(SendOperationFlags::Read)
    .or(SendOperationFlags::AtomicCompareAndSwap)
    .or(SendOperationFlags::AtomicFetchAndAdd);

/// The atomic operations among [`DC_SEND_OPERATIONS`].
pub const DC_ATOMIC_OPERATIONS: SendOperationFlags =
    SendOperationFlags::AtomicCompareAndSwap.or(SendOperationFlags::AtomicFetchAndAdd);

/// Error returned by [`DcInitiatorBuilder::build`].
#[derive(Debug, thiserror::Error)]
#[error("failed to create DC initiator")]
#[non_exhaustive]
pub struct CreateDcInitiatorError(#[from] pub CreateDcInitiatorErrorKind);

impl CreateDcInitiatorError {
    /// Whether DC is not available at all (no mlx5, no libmlx5, or no DC transport).
    pub fn is_not_supported(&self) -> bool {
        matches!(
            self.0,
            CreateDcInitiatorErrorKind::NotSupported | CreateDcInitiatorErrorKind::DcNotSupportedByDevice
        )
    }
}

/// The enum type for [`CreateDcInitiatorError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateDcInitiatorErrorKind {
    /// `mlx5dv_query_device` returned `EOPNOTSUPP`.
    #[error("DC needs an mlx5 device and libmlx5")]
    NotSupported,
    /// `mlx5dv_create_qp` returned `EOPNOTSUPP` (the kernel's `set_mlx_qp_type` without the
    /// `dct` capability, e.g. a ConnectX-4 Lx).
    #[error("this mlx5 device has no DC transport (mlx5dv_create_qp: EOPNOTSUPP)")]
    DcNotSupportedByDevice,
    /// No send completion queue was set up.
    #[error("a send completion queue is required (setup_send_cq)")]
    MissingSendCompletionQueue,
    /// Atomics on a device without them, which libmlx5's `mlx5_qp_fill_wr_pfns` refuses.
    #[error(
        "atomic operations {requested:?} were asked for, but the device has no atomics (atomic_cap IBV_ATOMIC_NONE)"
    )]
    AtomicOperationsNotSupported {
        /// The atomic operations asked for.
        requested: SendOperationFlags,
    },
    /// Some send operations are not DC operations.
    #[error("send operations {requested:?} are not all DC operations (allowed: {allowed:?})")]
    UnsupportedSendOperations {
        /// What was asked for.
        requested: SendOperationFlags,
        /// What a DC initiator can post.
        allowed: SendOperationFlags,
    },
    /// The provider left an entry NULL that posting would call; the queue pair was destroyed.
    #[error("the provider does not implement `{entry}` for this DC initiator")]
    MissingProviderEntry {
        /// The entry's name.
        entry: &'static str,
    },
    /// The library call failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// DCI streams: 2^`log_num_concurrent` concurrent streams; 2^`log_num_errored` streams in error
/// move the DC initiator to ERR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DciStreams {
    /// log2 of the number of concurrent streams (`log_num_concurent`).
    pub log_num_concurrent: u8,
    /// log2 of the streams in error that move it to ERR (rdma-core `test_dc_stream_qp_recovery`).
    pub log_num_errored: u8,
}
/// Builds a [`DcInitiator`] on a protection domain; see `pd.create_dci_builder()`.
#[derive(Debug, Clone)]
pub struct DcInitiatorBuilder {
    pd: Arc<ProtectionDomain>,
    send_cq: Option<GenericCompletionQueue>,
    request: DciRequest,
}

/// A DC initiator (DCI), created by [`DcInitiatorBuilder::build`]; holds its protection domain
/// and send CQ.
pub struct DcInitiator {
    qp: DcQueuePair,
    granted: Granted,
    // The views its guards post through, their entries checked.
    send: DcSendView,
    /// What it was created with.
    params: DciInitParameters,
    read_atomic_depth: u8,
    brought_up_with: Option<Arc<bring_up::BringUpAttributes>>,
}

// SAFETY: the handles may be used from any thread; every call that lets the library write the
// queue pair (modify, posting) takes `&mut self`.
unsafe impl Send for DcInitiator {}
// SAFETY: `&self` methods read only Rust-side copies, never the C structs.
unsafe impl Sync for DcInitiator {}

impl std::fmt::Debug for DcInitiator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcInitiator")
            .field("qp_number", &self.qp_number())
            .field("state", &self.state())
            .field("streams", &self.params.streams)
            .finish_non_exhaustive()
    }
}

impl DcInitiator {
    /// # Safety
    ///
    /// Return the handle of the queue pair. We mark this method unsafe because the lifetime of
    /// `ibv_qp` is not associated with the return value.
    pub unsafe fn qp(&self) -> NonNull<ibv_qp> {
        self.qp.qp()
    }

    /// The queue pair number.
    pub fn qp_number(&self) -> u32 {
        self.qp.qp_number()
    }

    /// The state, as last modified or read from the device (this call asks the device nothing).
    pub fn state(&self) -> QueuePairState {
        self.qp.state()
    }

    /// The send queue capacity `mlx5dv_create_qp` granted: at least what was asked for.
    pub fn max_send_wr(&self) -> u32 {
        self.granted.max_send_wr
    }

    /// The inline data size granted: at least what was asked for (28 bytes when 0 was).
    pub fn max_inline_data(&self) -> u32 {
        self.granted.max_inline_data
    }

    /// The scatter/gather entries a request takes, granted as asked.
    pub fn max_send_sge(&self) -> u32 {
        self.params.max_send_sge
    }

    /// Whether every request is signaled, as created.
    pub fn sq_sig_all(&self) -> bool {
        self.params.sq_sig_all
    }

    /// The send operations it was created with (the builder's, or the device's default).
    pub fn send_ops_flags(&self) -> SendOperationFlags {
        self.params.send_ops
    }

    /// The DCI streams it was created with.
    pub fn streams(&self) -> Option<DciStreams> {
        self.params.streams
    }

    /// The deepest `max_rd_atomic` it takes: the
    /// smaller of `max_dc_rd_atom` and `max_dc_init_rd_atom` (mlx5_ib's `validate_rd_atomic`); 1
    /// before rdma-core 47.
    pub fn max_read_atomic(&self) -> u8 {
        self.read_atomic_depth
    }

    /// Modifies the queue pair with `ibv_modify_qp`, a refusal told apart by the DC initiator's
    /// table (mlx5_ib's `modify_dci_qp_is_ok`: RESET →
    /// INIT → RTR → RTS, INIT → INIT and RTS → RTS with their optional attributes, any state to
    /// RESET, any state but RESET to ERR; every modification carries the state).
    pub fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairError> {
        self.qp.modify(attr)
    }
}

/// What `mlx5dv_create_qp` granted, as libmlx5 wrote it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Granted {
    max_send_wr: u32,
    max_inline_data: u32,
}

impl Granted {
    /// The capacities of init attributes after `mlx5dv_create_qp` returned.
    fn of(init: &ibv_qp_init_attr_ex) -> Self {
        Self {
            max_send_wr: init.cap.max_send_wr,
            max_inline_data: init.cap.max_inline_data,
        }
    }
}
