//! The DC initiator (DCI): a send-only queue pair of the DC (Dynamically Connected) transport,
//! whose every work request names its destination (address handle, DCT number, DC key) with
//! `mlx5dv_wr_set_dc_addr`.
//!
//! Build one with [`DcInitiatorBuilder`] (from a protection domain), bring it to RTS with
//! [`DcInitiator::bring_up`] (or step by step with [`DcInitiator::modify`]), then post with
//! [`DcInitiator::start_post_send`]: `construct_wr` → an operation → `setup_dc_addr` → the data.
//! A request without its address or its data does not compile (`tests/compile_fail/` pins it).
//!
//! After an error completion a DC initiator is in ERR for every destination:
//! [`DcInitiator::recover`] brings it back in one call; with DCI streams, one errored stream is
//! reset with [`DcInitiator::reset_stream`].
//!
//! This module defines the public types: the builder and its errors, the DC initiator (its
//! accessors and posting), its bring-up parameters and errors, and the DC transport of the post
//! guard (a request's address step, `mlx5dv_wr_set_dc_addr`). Their behaviour is in two private
//! rooms: `creation`, the builder's settings and `build` (the plan from a request and the device
//! to `mlx5dv_create_qp`, sized as libmlx5 sizes it, so what it will grant is known before the
//! call); `bring_up`, the bring-up parameters, the transitions to RTS, recovery after an error
//! and stream resets.
//!
//! # Reference
//!
//! - rdma-core manpages: [`mlx5dv_create_qp`](https://man7.org/linux/man-pages/man3/mlx5dv_create_qp.3.html),
//!   [`mlx5dv_wr_post`](https://man7.org/linux/man-pages/man3/mlx5dv_wr_post.3.html)
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_mummy_sys::{ibv_qp, ibv_qp_ex, mlx5dv_qp_ex};
use sideway::ibverbs::completion::GenericCompletionQueue;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, QueryQueuePairError, QueuePairState, SendOperationFlags};

use self::bring_up::BringUpAttributes;
use self::creation::{DciCreation, Granted};
use crate::ibverbs::address::AddressHandleAttribute;
use crate::ibverbs::post_send_guard::{entry, PostSendGuard, ProviderEntries};
use crate::ibverbs::queue_pair::{QueuePairAttribute, QueuePairCore};
use crate::ibverbs::source_gid::{SourceGid, SourceGidEntry, SourceGidError};
use crate::mlx5::library::DcVerbs;

mod addressed;
pub(crate) mod bring_up;
pub(crate) mod creation;
mod plan;
mod route;
mod send;
mod transport;

pub use self::addressed::{BatchAddressed, DcAddressing};
pub use self::plan::{plan_dci, DciDevice, DciInitParameters, DciRequest};
pub use self::route::DcRoute;
pub use self::send::DcSend;
pub use self::transport::{DcAddress, DcContext, DcDestination, DcStreamAddress, DynamicallyConnected};
pub use super::queue_pair::PortNotReady;

/// The [`ProviderEntries`](crate::ibverbs::post_send_guard::ProviderEntries) bit of
/// `mlx5dv_qp_ex::wr_set_dc_addr`.
pub(crate) const SET_DC_ADDR: u32 = entry::FIRST_EXTERNAL;
/// The bit of `mlx5dv_qp_ex::wr_set_dc_addr_stream`.
const SET_DC_ADDR_STREAM: u32 = entry::FIRST_EXTERNAL << 1;

/// Every send operation a DC initiator can post (libmlx5's `MLX5_SUPPORTED_SEND_OPS_FLAGS_DCI`,
/// less send with invalidate, which DC cannot carry). The atomics need a device with atomics
/// (`ibv_device_attr::atomic_cap` not `IBV_ATOMIC_NONE`); see
/// [`DcInitiatorBuilder::setup_send_ops_flags`].
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
    /// Whether DC is not available at all: the device is not mlx5, libmlx5 is missing
    /// ([`NotSupported`](CreateDcInitiatorErrorKind::NotSupported)), or the mlx5 device has no DC
    /// transport ([`DcNotSupportedByDevice`](CreateDcInitiatorErrorKind::DcNotSupportedByDevice)).
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
    /// The device is not an mlx5 device, or libmlx5 could not be loaded (`mlx5dv_query_device`
    /// returned `EOPNOTSUPP`).
    #[error("DC needs an mlx5 device and libmlx5")]
    NotSupported,
    /// The device is mlx5 but has no DC transport: `mlx5dv_create_qp` returned `EOPNOTSUPP`
    /// after every other check passed (the kernel's `set_mlx_qp_type` without the `dct`
    /// capability, e.g. a ConnectX-4 Lx or some virtual functions).
    #[error("this mlx5 device has no DC transport (mlx5dv_create_qp: EOPNOTSUPP)")]
    DcNotSupportedByDevice,
    /// No send completion queue was set up.
    #[error("a send completion queue is required (setup_send_cq)")]
    MissingSendCompletionQueue,
    /// Atomic operations were asked for on a device without atomics
    /// (`ibv_device_attr::atomic_cap` is `IBV_ATOMIC_NONE`): libmlx5's `mlx5_qp_fill_wr_pfns`
    /// refuses them (`EOPNOTSUPP`). The default operations leave them out on such a device.
    #[error(
        "atomic operations {requested:?} were asked for, but the device has no atomics (atomic_cap IBV_ATOMIC_NONE)"
    )]
    AtomicOperationsNotSupported {
        /// The atomic operations asked for.
        requested: SendOperationFlags,
    },
    /// The send operations asked for include some a DC initiator cannot post.
    #[error("send operations {requested:?} are not all DC operations (allowed: {allowed:?})")]
    UnsupportedSendOperations {
        /// What was asked for.
        requested: SendOperationFlags,
        /// What a DC initiator can post.
        allowed: SendOperationFlags,
    },
    /// `max_send_wr` is 0 or above the device's `max_qp_wr`.
    #[error("max_send_wr {requested} must be between 1 and the device's max_qp_wr {max}")]
    InvalidMaxSendWorkRequests {
        /// What was asked for.
        requested: u32,
        /// The device's limit.
        max: u32,
    },
    /// `max_send_wr` requests would take more of the send queue's 64-byte basic blocks than the
    /// device has: libmlx5's `mlx5_calc_sq_size` refuses it (`EINVAL`). A DC request takes
    /// `request_size` bytes (at least 2 blocks: see [`DcInitiatorBuilder::setup_max_send_wr`]),
    /// and the queue is rounded up to a power of two.
    #[error(
        "max_send_wr {requested} does not fit: a DC request takes {request_size} bytes, and the device's \
         {max_qp_wr} send queue blocks of 64 bytes hold at most {max} of them"
    )]
    SendQueueTooLarge {
        /// What was asked for.
        requested: u32,
        /// The largest `max_send_wr` that fits.
        max: u32,
        /// The size of one request, in bytes (a multiple of 64).
        request_size: u32,
        /// The device's `max_qp_wr`, read as its number of basic blocks.
        max_qp_wr: u32,
    },
    /// `max_send_sge` is above the device's `max_sge`.
    #[error("max_send_sge {requested} is above the device's max_sge {max}")]
    TooManyScatterGatherEntries {
        /// What was asked for.
        requested: u32,
        /// The device's limit.
        max: u32,
    },
    /// libmlx5 refused the size of a request (`EINVAL` from `mlx5_calc_send_wqe`): with
    /// `max_send_sge` entries or `max_inline_data` bytes inline, and this initiator's overhead,
    /// a request takes `request_bytes`, more than the device's largest send request
    /// (`max_wqe_sz_sq`, which no query reports; every device takes `guaranteed`). See
    /// [`DcInitiatorBuilder::setup_max_send_sge`].
    #[error(
        "a request of {request_bytes} bytes (max_send_sge {max_send_sge}, max_inline_data {max_inline_data}) \
         is larger than the device's largest send request; {guaranteed} bytes fit every device"
    )]
    RequestTooLarge {
        /// The scatter/gather entries asked for.
        max_send_sge: u32,
        /// The inline bytes asked for.
        max_inline_data: u32,
        /// What a request takes (libmlx5's sizing, before rounding to 64-byte blocks).
        request_bytes: u32,
        /// What every device with this `max_sge` takes (`16 · max_sge + 32`).
        guaranteed: u32,
    },
    /// DCI streams were asked for on a device without them: `dci_streams_caps` was not reported,
    /// or reported `max_log_num_concurent` 0 (libmlx5 sets the capability's bit on every device
    /// and reports zeros where there are none, e.g. a ConnectX-6 that is not a Dx; the kernel
    /// would refuse the creation with `EINVAL`).
    #[error("the device has no DCI streams (dci_streams_caps.max_log_num_concurent is 0 or not reported)")]
    DciStreamsNotSupported,
    /// A DCI-streams size is above the device's limit (`dci_streams_caps`).
    #[error("DCI streams: {limit} {requested} is above the device's {max}")]
    DciStreamsTooLarge {
        /// Which limit: `log_num_concurent` or `log_num_errored`.
        limit: &'static str,
        /// What was asked for.
        requested: u8,
        /// The device's maximum.
        max: u8,
    },
    /// The provider left an entry NULL that posting would call (a builder of a requested
    /// operation, a data setter, `wr_set_dc_addr` or, with streams, `wr_set_dc_addr_stream`).
    /// The queue pair was destroyed.
    #[error("the provider does not implement `{entry}` for this DC initiator")]
    MissingProviderEntry {
        /// The entry's name.
        entry: &'static str,
    },
    /// The library call failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// DCI streams: how many concurrent streams a DC initiator has (2^`log_num_concurrent`) and how
/// many streams in error move it to ERR as a whole (2^`log_num_errored`; 0: the first stream
/// error does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DciStreams {
    /// log2 of the number of concurrent streams (`log_num_concurent`).
    pub log_num_concurrent: u8,
    /// log2 of the number of streams in error that move the DC initiator to ERR
    /// (`log_num_errored`; rdma-core `test_dc_stream_qp_recovery`).
    pub log_num_errored: u8,
}
/// Builds a [`DcInitiator`] on a protection domain; see
/// [`DcProtectionDomainExt::create_dci_builder`](crate::mlx5::extension::DcProtectionDomainExt::create_dci_builder).
#[derive(Debug, Clone)]
pub struct DcInitiatorBuilder {
    pd: Arc<ProtectionDomain>,
    send_cq: Option<GenericCompletionQueue>,
    request: DciRequest,
}

/// A DC initiator (DCI): a send-only queue pair whose every request names its destination.
/// Created by [`DcInitiatorBuilder::build`]; holds its protection domain and send CQ.
pub struct DcInitiator {
    core: QueuePairCore,
    granted: Granted,
    // The core's extended view and entries (the DC setters included), which every DCI has.
    send_view: (NonNull<ibv_qp_ex>, ProviderEntries),
    mlx5_qp_ex: NonNull<mlx5dv_qp_ex>,
    verbs: &'static DcVerbs,
    creation: DciCreation,
    read_atomic_depth: u8,
    brought_up_with: Option<BringUpAttributes>,
}

// SAFETY: the handles may be used from any thread; every call that lets the library write the
// queue pair (modify, posting) takes `&mut self`; the creation attributes' pointers are only
// handed to the library again, from `&mut self`.
unsafe impl Send for DcInitiator {}
// SAFETY: `&self` methods read only Rust-side copies, never the C structs.
unsafe impl Sync for DcInitiator {}

impl std::fmt::Debug for DcInitiator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcInitiator")
            .field("qp_number", &self.qp_number())
            .field("state", &self.state())
            .field("streams", &self.creation.params.streams)
            .finish_non_exhaustive()
    }
}

impl DcInitiator {
    /// # Safety
    ///
    /// Return the handle of the queue pair. We mark this method unsafe because the lifetime of
    /// `ibv_qp` is not associated with the return value.
    pub unsafe fn qp(&self) -> NonNull<ibv_qp> {
        self.core.qp()
    }

    /// The queue pair number (a new one after [`recover`](Self::recover) rebuilt the DC
    /// initiator).
    pub fn qp_number(&self) -> u32 {
        self.core.qp_number()
    }

    /// The state, as of the last [`modify`](Self::modify) or [`query_state`](Self::query_state)
    /// through this value.
    pub fn state(&self) -> QueuePairState {
        self.core.state()
    }

    /// The send queue capacity `mlx5dv_create_qp` granted: at least the
    /// [`setup_max_send_wr`](DcInitiatorBuilder::setup_max_send_wr) asked for, often more
    /// (libmlx5 rounds the queue up to a power of two of bytes).
    pub fn max_send_wr(&self) -> u32 {
        self.granted.max_send_wr
    }

    /// The inline data size `mlx5dv_create_qp` granted: at least the
    /// [`setup_max_inline_data`](DcInitiatorBuilder::setup_max_inline_data) asked for, and what
    /// the request's basic blocks leave after its other segments (28 bytes when 0 was asked,
    /// for the default operations and one scatter/gather entry). Longer inline data is refused
    /// at post ([`InlineDataTooLong`](crate::ibverbs::post_send_guard::PostSendErrorKind::InlineDataTooLong)).
    pub fn max_inline_data(&self) -> u32 {
        self.granted.max_inline_data
    }

    /// The send operations it was created with (the builder's, or the device's default).
    pub fn send_ops_flags(&self) -> SendOperationFlags {
        self.creation.params.send_ops
    }

    /// The DCI streams it was created with.
    pub fn streams(&self) -> Option<DciStreams> {
        self.creation.params.streams
    }

    /// The deepest `max_rd_atomic` (outstanding RDMA reads and atomics) this DC initiator
    /// takes, which [`bring_up`](Self::bring_up) caps the asked depth with: the smaller of the
    /// device's `max_dc_rd_atom` (as a requester) and `max_dc_init_rd_atom` (read from
    /// `log_max_ra_res_dc`, the bound mlx5_ib's `validate_rd_atomic` puts on a DC initiator),
    /// each when libmlx5 reports it; 1 before rdma-core 47, which reports neither.
    pub fn max_read_atomic(&self) -> u8 {
        self.read_atomic_depth
    }

    /// The local GID its requests' address handles are sent from, resolved by
    /// [`bring_up`](Self::bring_up) ([`DcInitiatorBringUp::setup_source_gid`]): on RoCE a
    /// RoCE v2 GID; `None` on InfiniBand without one, and before bring-up.
    pub fn source_gid(&self) -> Option<SourceGidEntry> {
        self.brought_up_with.as_ref()?.source_gid()
    }

    /// The path MTU it was brought up with: the largest packets it sends (`None` before
    /// [`bring_up`](Self::bring_up)).
    pub fn path_mtu(&self) -> Option<Mtu> {
        Some(self.brought_up_with.as_ref()?.path_mtu())
    }

    /// Reads the state from the device (`ibv_query_qp`): after an error completion, whether the
    /// whole DC initiator is in ERR ([`recover`](Self::recover) it) or, with DCI streams, only
    /// a stream errored ([`reset_stream`](Self::reset_stream)) and it is still RTS.
    ///
    /// With streams the move to ERR is asynchronous: one query right after the error completion
    /// can still read RTS. Use [`wait_for_error`](Self::wait_for_error) where a whole-DCI error
    /// is expected.
    pub fn query_state(&mut self) -> Result<QueuePairState, QueryQueuePairError> {
        self.core
            .query(sideway::ibverbs::queue_pair::QueuePairAttributeMask::State)
            .map(|attr| attr.state())
    }

    /// Reads the state until it is ERR or `timeout` has passed, a millisecond apart, and returns
    /// the last state read: the DC initiator goes to ERR some time after its error (with DCI
    /// streams, once 2^`log_num_errored` streams are in error), so a single
    /// [`query_state`](Self::query_state) can still read RTS. pyverbs waits up to one second
    /// (`test_dc_stream_qp_recovery` in rdma-core's `tests/test_mlx5_dc.py`). A timeout past the
    /// clock's end (`Duration::MAX`) waits until ERR.
    pub fn wait_for_error(&mut self, timeout: Duration) -> Result<QueuePairState, QueryQueuePairError> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let state = self.query_state()?;
            let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
            if state == QueuePairState::Error || left.is_zero() {
                return Ok(state);
            }
            std::thread::sleep(Duration::from_millis(1).min(left));
        }
    }

    /// Modifies the queue pair with `ibv_modify_qp`, after checking the transition and the
    /// attribute mask against the DC initiator's table (mlx5_ib's `modify_dci_qp_is_ok`: RESET →
    /// INIT → RTR → RTS, INIT → INIT and RTS → RTS with their optional attributes, any state to
    /// RESET, any state but RESET to ERR; every modification carries the state).
    pub fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairError> {
        self.core.modify(attr)
    }

    /// The queue pair's extended and mlx5 views and the entries their provider filled (the DC
    /// setters included), for a guard [`start`](PostSendGuard::start)ed by hand: one whose
    /// requests all go to one address ([`BatchAddressed`]), as a pool of initiators posts.
    /// Using them needs `unsafe` (see [`PostSendGuard::start`]); reading them does not.
    pub fn send_views(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        (self.send_view.0, self.send_view.1, self.mlx5_qp_ex)
    }

    /// Starts a batch of send requests (`ibv_wr_start`); each request is addressed with
    /// `setup_dc_addr` between its operation and its data.
    #[inline]
    pub fn start_post_send(&mut self) -> PostSendGuard<'_, DynamicallyConnected> {
        let (qp_ex, entries) = self.send_view;
        // SAFETY: the queue pair is alive and exclusively borrowed for the guard's lifetime; its
        // provider filled the entries read at creation; the context is its mlx5 view.
        let mut guard = unsafe { PostSendGuard::start(qp_ex, entries, DcContext(self.mlx5_qp_ex)) };
        guard.set_max_inline_data(self.granted.max_inline_data);
        guard
    }

    /// Posts one send request at the cost of the raw calls, as
    /// [`SharedReceiveQueuePair::post_send_one`](crate::ibverbs::queue_pair::SharedReceiveQueuePair::post_send_one):
    /// `request` describes it from its operation on, its DC address included
    /// (`wr.setup_send().setup_dc_addr(&ah, dct_number, dc_key).setup_inline_data(b"hi")`); an
    /// operation or setter the DC initiator was not created with never reaches the provider.
    #[inline]
    pub fn post_send_one(
        &mut self, wr_id: u64, wr_flags: sideway::ibverbs::queue_pair::WorkRequestFlags,
        request: impl FnOnce(crate::ibverbs::post_send_guard::WorkRequestHandle<'_, DynamicallyConnected>),
    ) -> Result<(), crate::ibverbs::post_send_guard::PostSendError> {
        let mut guard = self.start_post_send();
        request(guard.construct_wr(wr_id, wr_flags));
        guard.post()
    }
}

/// Error returned by [`DcInitiator::bring_up`].
#[derive(Debug, thiserror::Error)]
#[error("failed to bring up DC initiator")]
#[non_exhaustive]
pub struct BringUpDcInitiatorError(#[from] pub BringUpDcInitiatorErrorKind);

/// The enum type for [`BringUpDcInitiatorError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BringUpDcInitiatorErrorKind {
    /// The port is 0 or the device has no such port.
    #[error("port {port} does not exist on this device")]
    InvalidPort {
        /// The port asked for.
        port: u8,
        /// The library's error from querying it.
        source: io::Error,
    },
    /// The port cannot carry DC traffic yet (not active, or an InfiniBand port without a LID),
    /// found before any transition.
    #[error(transparent)]
    PortNotReady(PortNotReady),
    /// The address vector of
    /// [`setup_rtr_address_vector`](DcInitiatorBringUp::setup_rtr_address_vector) is not global
    /// on a RoCE port, where every address vector must carry a GRH; found before any transition.
    #[error(
        "port {port} is RoCE: the RTR address vector must be global (setup_grh_dest_gid and setup_grh_src_gid_index)"
    )]
    RtrAddressVectorNotGlobal {
        /// The port.
        port: u8,
    },
    /// The RTR address vector's source GID index names a slot of the port's GID table that
    /// cannot be read, is empty, or on RoCE is not RoCE v2; found before any transition.
    #[error("the RTR address vector's source GID is not usable")]
    RtrAddressVectorGid(#[source] SourceGidError),
    /// The source GID ([`DcInitiatorBringUp::setup_source_gid`]) is not in the port's GID
    /// table, or on RoCE is not RoCE v2 (or the port has none); found before any transition.
    #[error(transparent)]
    SourceGid(#[from] SourceGidError),
    /// The kernel refused the move to RTR with the address vector of
    /// [`setup_rtr_address_vector`](DcInitiatorBringUp::setup_rtr_address_vector) (`EINVAL`):
    /// `modify_dci_qp_is_ok` takes no address vector at a DC initiator's INIT → RTR before
    /// Linux v5.0 (nor in distribution kernels with an older mlx5_ib). The address vector was
    /// checked first ([`RtrAddressVectorNotGlobal`](Self::RtrAddressVectorNotGlobal),
    /// [`RtrAddressVectorGid`](Self::RtrAddressVectorGid)), so an old kernel is the likely cause.
    /// The DC initiator is left in INIT; bring it up without one, which every kernel takes.
    #[error(
        "the kernel refused the address vector at the DC initiator's INIT -> RTR (EINVAL): kernels before \
         Linux 5.0 take none there; bring it up without setup_rtr_address_vector"
    )]
    RtrAddressVectorRefused {
        /// The library's error.
        source: ModifyQueuePairError,
    },
    /// A transition failed (checked against the DC initiator's table first).
    #[error(transparent)]
    Modify(#[from] ModifyQueuePairError),
}

/// Error returned by [`DcInitiator::recover`].
#[derive(Debug, thiserror::Error)]
#[error("failed to recover DC initiator")]
#[non_exhaustive]
pub struct RecoverDcInitiatorError(#[from] pub RecoverDcInitiatorErrorKind);

/// The enum type for [`RecoverDcInitiatorError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoverDcInitiatorErrorKind {
    /// The DC initiator was never brought up with [`DcInitiator::bring_up`]: there are no
    /// attributes to bring it up again with.
    #[error("the DC initiator was not brought up with bring_up")]
    NotBroughtUp,
    /// A transition failed.
    #[error(transparent)]
    Modify(#[from] ModifyQueuePairError),
    /// The kernel refused the move to RESET and creating the DC initiator again
    /// (`mlx5dv_create_qp`) failed: it is still the old queue pair, in its old state.
    #[error("the kernel refused the move to RESET, and creating the DC initiator again failed")]
    Rebuild(#[source] io::Error),
    /// The DC initiator was created again, but its provider left `entry` NULL: the new queue
    /// pair was destroyed, and posting is refused until a later `recover` succeeds.
    #[error("the rebuilt DC initiator lacks the provider entry `{entry}`")]
    RebuildMissingProviderEntry {
        /// The entry's name.
        entry: &'static str,
    },
}

/// How [`DcInitiator::recover`] brought a DC initiator back to RTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DcRecovery {
    /// Through RESET → INIT → RTR → RTS, as UCX (`uct_dc_mlx5_iface_reset_dci`) and pyverbs
    /// (`reset_qp`) do: the same queue pair and number.
    Reset,
    /// The kernel refused the move to RESET (`EINVAL`: mlx5_ib's `modify_dci_qp_is_ok` before it
    /// had a RESET branch), so the DC initiator was created again with the same attributes and
    /// brought up: a new queue pair, whose number is [`DcInitiator::qp_number`] now. The
    /// `DcInitiator` value stays valid; completions still queued for the old number were
    /// discarded with the old queue pair.
    Rebuilt {
        /// The number of the queue pair it replaced.
        previous_qp_number: u32,
    },
}

/// Error returned by [`DcInitiator::reset_stream`].
#[derive(Debug, thiserror::Error)]
#[error("failed to reset DCI stream")]
#[non_exhaustive]
pub struct ResetDciStreamError(#[from] pub ResetDciStreamErrorKind);

/// The enum type for [`ResetDciStreamError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResetDciStreamErrorKind {
    /// libmlx5 has no `mlx5dv_dci_stream_id_reset` (before rdma-core v37, or no libmlx5).
    #[error("libmlx5 has no mlx5dv_dci_stream_id_reset (rdma-core v37 or later needed)")]
    NotSupported,
    /// The DC initiator was created without streams.
    #[error("the DC initiator has no DCI streams")]
    NoStreams,
    /// The DC initiator is not in RTS (libmlx5 refuses the reset with `EOPNOTSUPP`):
    /// 2^`log_num_errored` streams errored and it went to ERR as a whole; [`DcInitiator::recover`] it instead.
    #[error("the DC initiator is in {state:?}, not RTS: recover it instead of resetting a stream")]
    NotReadyToSend {
        /// The state read from the device.
        state: QueuePairState,
    },
    /// The device cannot reset streams: its `dci_streams_caps.max_log_num_errored` is 0, or it
    /// lacks the QP context extension (`EOPNOTSUPP` from `mlx5dv_dci_stream_id_reset` while the
    /// DC initiator is in RTS). Only [`DcInitiator::recover`] brings an errored stream back.
    #[error("the device cannot reset DCI streams (max_log_num_errored 0 or no QP context extension)")]
    DeviceCannotResetStreams,
    /// The library call failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// How [`DcInitiator::bring_up`] brings a DC initiator to RTS: the local port and P_Key index,
/// the path MTU (default: the port's active MTU, no larger than its destinations'), the source
/// GID of its requests (default: on RoCE the port's RoCE v2 GID), and perftest's defaults for
/// the rest (timeout 14, retry count 7, RNR retry 7, PSN 0), the read/atomic depth capped by the
/// device's DC initiator depth.
#[derive(Debug, Clone)]
pub struct DcInitiatorBringUp {
    port: u8,
    pkey_index: u16,
    path_mtu: Option<Mtu>,
    destination_path_mtu: Option<Mtu>,
    source_gid: SourceGid,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    max_read_atomic: Option<u8>,
    rtr_address_vector: Option<AddressHandleAttribute>,
}

/// The mlx5 entries a DC initiator's requests call: `wr_set_dc_addr`, and with streams
/// `wr_set_dc_addr_stream`; the name of the first missing one otherwise.
///
/// # Safety
///
/// `mlx5_qp_ex` must point to a live `struct mlx5dv_qp_ex`.
pub(crate) unsafe fn dc_entries(mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, streams: bool) -> Result<u32, &'static str> {
    let view = mlx5_qp_ex.as_ref();
    if view.wr_set_dc_addr.is_none() {
        return Err("wr_set_dc_addr");
    }
    if !streams {
        return Ok(SET_DC_ADDR);
    }
    if view.wr_set_dc_addr_stream.is_none() {
        return Err("wr_set_dc_addr_stream");
    }
    Ok(SET_DC_ADDR | SET_DC_ADDR_STREAM)
}
