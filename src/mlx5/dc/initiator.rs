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
//! # Reference
//!
//! - rdma-core manpages: [`mlx5dv_create_qp`](https://man7.org/linux/man-pages/man3/mlx5dv_create_qp.3.html),
//!   [`mlx5dv_wr_post`](https://man7.org/linux/man-pages/man3/mlx5dv_wr_post.3.html)
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_mummy_sys::{
    ibv_ah, ibv_qp, ibv_qp_ex, ibv_qp_init_attr_ex, ibv_qp_init_attr_mask, ibv_qp_type, mlx5dv_dc_type, mlx5dv_qp_ex,
    mlx5dv_qp_init_attr, mlx5dv_qp_init_attr_mask, mlx5dv_wr_set_dc_addr, mlx5dv_wr_set_dc_addr_stream,
};
use sideway::ibverbs::completion::{CompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    ModifyQueuePairError, ModifyQueuePairErrorKind, QueryQueuePairError, QueuePairState, SendOperationFlags,
};

use super::state_table::DC_INITIATOR;
use crate::ibverbs::address_handle::{AddressHandle, AddressHandleAttribute};
use crate::ibverbs::post_send_guard::{
    entry, sealed, Destination, LocalBufferHandle, Operation, PendingRequest, PostSendGuard, ProviderEntries,
    RemoteMemoryAccess, Transport,
};
use crate::ibverbs::queue_pair::{QueuePairAttribute, QueuePairCore};
use crate::ibverbs::zeroed::Zeroed;
use crate::mlx5::device_attributes::DciStreamsCapabilities;
use crate::mlx5::device_context::query_device_raw;
use crate::mlx5::library::{DcVerbs, LIBMLX5};

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
/// many of them may be in error at once (2^`log_num_errored`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DciStreams {
    /// log2 of the number of concurrent streams (`log_num_concurent`).
    pub log_num_concurrent: u8,
    /// log2 of the number of streams that may be in error at once (`log_num_errored`).
    pub log_num_errored: u8,
}

/// What a DC initiator is created with: the parts of its init attributes that do not point at
/// other objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DciInitParameters {
    pub(crate) max_send_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_inline_data: u32,
    pub(crate) send_ops: SendOperationFlags,
    pub(crate) streams: Option<DciStreams>,
    pub(crate) sq_sig_all: bool,
}

/// What a [`DcInitiatorBuilder`] asks for: [`DciInitParameters`] with the send operations left to
/// the device when not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DciRequest {
    pub(crate) max_send_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_inline_data: u32,
    /// `None`: [`DC_SEND_OPERATIONS`], without the atomics on a device without atomics.
    pub(crate) send_ops: Option<SendOperationFlags>,
    pub(crate) streams: Option<DciStreams>,
    pub(crate) sq_sig_all: bool,
}

/// What the device reports that decides a DC initiator's creation: `ibv_query_device`'s
/// `max_qp_wr`, `max_sge` and `atomic_cap`, and `mlx5dv_query_device`'s `dci_streams_caps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DciDevice {
    pub(crate) max_qp_wr: u32,
    pub(crate) max_sge: u32,
    /// `atomic_cap` is not `IBV_ATOMIC_NONE` (libmlx5 sets `atomics_enabled` from it).
    pub(crate) atomics: bool,
    pub(crate) dci_streams: Option<DciStreamsCapabilities>,
}

/// Refuses send operations a DC initiator cannot post, whatever the device.
fn check_dc_operations(requested: SendOperationFlags) -> Result<(), CreateDcInitiatorErrorKind> {
    if requested.bits() & !DC_SEND_OPERATIONS.bits() != 0 {
        return Err(CreateDcInitiatorErrorKind::UnsupportedSendOperations {
            requested,
            allowed: DC_SEND_OPERATIONS,
        });
    }
    Ok(())
}

/// Decides a DC initiator's init parameters from the request and the device, or refuses it
/// before the library would: the send operations (default: every DC operation the device can
/// do), the capacities, the DCI streams.
pub(crate) fn plan_dci(
    request: &DciRequest, device: &DciDevice,
) -> Result<DciInitParameters, CreateDcInitiatorErrorKind> {
    let send_ops = match request.send_ops {
        Some(requested) => {
            check_dc_operations(requested)?;
            let atomics = requested.and(DC_ATOMIC_OPERATIONS);
            if !atomics.is_none() && !device.atomics {
                return Err(CreateDcInitiatorErrorKind::AtomicOperationsNotSupported { requested: atomics });
            }
            requested
        },
        None if device.atomics => DC_SEND_OPERATIONS,
        None => DC_SEND_OPERATIONS.and(DC_ATOMIC_OPERATIONS.not()),
    };
    if request.max_send_wr == 0 || request.max_send_wr > device.max_qp_wr {
        return Err(CreateDcInitiatorErrorKind::InvalidMaxSendWorkRequests {
            requested: request.max_send_wr,
            max: device.max_qp_wr,
        });
    }
    let request_size = dci_request_size(send_ops, request.max_send_sge, request.max_inline_data);
    let max = dci_max_send_wr(device.max_qp_wr, request_size);
    if request.max_send_wr > max {
        return Err(CreateDcInitiatorErrorKind::SendQueueTooLarge {
            requested: request.max_send_wr,
            max,
            request_size,
            max_qp_wr: device.max_qp_wr,
        });
    }
    if request.max_send_sge > device.max_sge {
        return Err(CreateDcInitiatorErrorKind::TooManyScatterGatherEntries {
            requested: request.max_send_sge,
            max: device.max_sge,
        });
    }
    if let Some(streams) = request.streams {
        check_streams(streams, device.dci_streams)?;
    }
    Ok(DciInitParameters {
        max_send_wr: request.max_send_wr,
        max_send_sge: request.max_send_sge,
        max_inline_data: request.max_inline_data,
        send_ops,
        streams: request.streams,
        sq_sig_all: request.sq_sig_all,
    })
}

/// The bytes one DC request takes in the send queue, as libmlx5 sizes it (`mlx5_calc_send_wqe`
/// in `verbs.c`): a 16-byte control segment, grown to the largest operation granted (16 more for
/// RDMA's remote address, 32 more for an atomic's), the 48-byte DC address vector, then the
/// larger of the scatter/gather entries (16 bytes each) and the inline data (a 4-byte header,
/// padded to 16), rounded up to 64-byte basic blocks: 128 bytes for the default initiator.
pub(crate) fn dci_request_size(send_ops: SendOperationFlags, max_send_sge: u32, max_inline_data: u32) -> u32 {
    let rdma = SendOperationFlags::Write | SendOperationFlags::WriteWithImmediate | SendOperationFlags::Read;
    let operation = if !send_ops.and(DC_ATOMIC_OPERATIONS).is_none() {
        48
    } else if !send_ops.and(rdma).is_none() {
        32
    } else {
        16
    };
    let overhead = operation + 48;
    let gather = overhead + max_send_sge.saturating_mul(16);
    let inline = match max_inline_data {
        0 => 0,
        bytes => overhead + (bytes.saturating_add(4 + 15) & !15),
    };
    gather.max(inline).saturating_add(63) & !63
}

/// The most requests of `request_size` bytes a send queue holds on a device whose `max_qp_wr` is
/// read as its number of 64-byte basic blocks (libmlx5 `mlx5_calc_sq_size`: the queue is the
/// requests' bytes rounded up to a power of two, at most `max_send_wqebb` blocks, which the
/// kernel's `mlx5_ib_alloc_ucontext` sets to `1 << log_max_qp_sz`, as `max_qp_wr` was before
/// kernels that report fewer): `max_qp_wr` itself at most.
pub(crate) fn dci_max_send_wr(max_qp_wr: u32, request_size: u32) -> u32 {
    let blocks = match max_qp_wr {
        0 => return 0,
        n => 1u64 << (31 - n.leading_zeros()),
    };
    ((blocks * 64) / u64::from(request_size.max(64))).min(u64::from(max_qp_wr)) as u32
}

/// The requests a send queue of `max_send_wr` requests of `request_size` bytes is granted
/// (libmlx5 `mlx5_calc_sq_size`: the queue is `max_send_wr` × `request_size` bytes rounded up to
/// a power of two, and `create_qp` writes back `max_post`, the requests it holds): at least
/// `max_send_wr`, e.g. 32 for 20 requests of 128 bytes.
pub(crate) fn dci_granted_send_wr(max_send_wr: u32, request_size: u32) -> u32 {
    let request_size = u64::from(request_size.max(64));
    ((u64::from(max_send_wr) * request_size).next_power_of_two() / request_size).min(u64::from(u32::MAX)) as u32
}

impl DciInitParameters {
    /// The send queue `mlx5dv_create_qp` grants these parameters ([`dci_granted_send_wr`]).
    pub(crate) fn granted_max_send_wr(&self) -> u32 {
        let request_size = dci_request_size(self.send_ops, self.max_send_sge, self.max_inline_data);
        dci_granted_send_wr(self.max_send_wr, request_size)
    }
}

/// The init attributes of a DC initiator, without the PD and CQ pointers (the caller sets
/// them): `IBV_QPT_DRIVER`, no receive queue, `SEND_OPS_FLAGS` with every granted operation,
/// the mlx5 DC attributes of type DCI, and the optional streams and create flags.
pub(crate) fn dci_init_attributes(
    params: &DciInitParameters,
) -> (Zeroed<ibv_qp_init_attr_ex>, Zeroed<mlx5dv_qp_init_attr>) {
    let (mut init, mut mlx5) = (
        Zeroed::<ibv_qp_init_attr_ex>::new(),
        Zeroed::<mlx5dv_qp_init_attr>::new(),
    );
    init.qp_type = ibv_qp_type::IBV_QPT_DRIVER;
    init.sq_sig_all = params.sq_sig_all as i32;
    init.cap.max_send_wr = params.max_send_wr;
    init.cap.max_send_sge = params.max_send_sge;
    init.cap.max_inline_data = params.max_inline_data;
    // A DCI has no receive queue: the kernel refuses one.
    init.cap.max_recv_wr = 0;
    init.cap.max_recv_sge = 0;
    init.comp_mask =
        (ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS).0;
    init.send_ops_flags = params.send_ops.bits();
    mlx5.comp_mask = mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DC.0 as u64;
    mlx5.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
    if let Some(streams) = params.streams {
        mlx5.comp_mask |= mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS.0 as u64;
        // SAFETY: the union's streams member is written for a DCI with streams.
        let dci_streams = unsafe { mlx5.dc_init_attr.__bindgen_anon_1.dci_streams.as_mut() };
        dci_streams.log_num_concurent = streams.log_num_concurrent;
        dci_streams.log_num_errored = streams.log_num_errored;
    }
    (init, mlx5)
}

/// `MLX5DV_DCTYPE_DCI`.
const MLX5DV_DCTYPE_DCI: mlx5dv_dc_type = rdma_mummy_sys::MLX5DV_DCTYPE_DCI;

/// Creates the queue pair of `init` and `mlx5` on the protection domain's context with
/// `mlx5dv_create_qp` (through `verbs`); `EOPNOTSUPP` comes back as `None` in the error (it is
/// called after `mlx5dv_query_device` succeeded, so it means the device has no DC).
///
/// # Safety
///
/// The pointers in `init` must be alive for the call; `context` must be open.
pub(crate) unsafe fn create_dc_qp(
    verbs: &DcVerbs, context: NonNull<rdma_mummy_sys::ibv_context>, init: &mut ibv_qp_init_attr_ex,
    mlx5: &mut mlx5dv_qp_init_attr,
) -> Result<NonNull<ibv_qp>, Option<io::Error>> {
    // SAFETY: the context is open; init and mlx5 are valid, writable structs.
    unsafe { (verbs.create)(context.as_ptr(), init, mlx5) }
        .map_err(|err| (err.raw_os_error() != Some(libc::EOPNOTSUPP)).then_some(err))
}

/// Builds a [`DcInitiator`] on a protection domain; see
/// [`DcProtectionDomainExt::create_dci_builder`](crate::mlx5::extension::DcProtectionDomainExt::create_dci_builder).
#[derive(Debug, Clone)]
pub struct DcInitiatorBuilder {
    pd: Arc<ProtectionDomain>,
    send_cq: Option<GenericCompletionQueue>,
    request: DciRequest,
}

impl DcInitiatorBuilder {
    /// A builder with the defaults: 16 send requests of 1 entry, no inline data, every DC
    /// operation the device can do, no streams.
    pub fn new(pd: &Arc<ProtectionDomain>) -> Self {
        Self {
            pd: Arc::clone(pd),
            send_cq: None,
            request: DciRequest {
                max_send_wr: 16,
                max_send_sge: 1,
                max_inline_data: 0,
                send_ops: None,
                streams: None,
                sq_sig_all: false,
            },
        }
    }

    /// The protection domain the initiators are created on (a pool's builder sets its own).
    pub(crate) fn setup_protection_domain(&mut self, pd: &Arc<ProtectionDomain>) -> &mut Self {
        self.pd = Arc::clone(pd);
        self
    }

    /// The DCI streams asked for.
    pub(crate) fn streams(&self) -> Option<DciStreams> {
        self.request.streams
    }

    /// The completion queue of send completions (required).
    pub fn setup_send_cq(&mut self, send_cq: impl Into<GenericCompletionQueue>) -> &mut Self {
        self.send_cq = Some(send_cq.into());
        self
    }

    /// Capacity of the send queue (default 16); [`DcInitiator::max_send_wr`] reads what was
    /// granted.
    ///
    /// A DC request takes at least two 64-byte basic blocks of the send queue (its control,
    /// operation and 48-byte address segments before any data: libmlx5's `mlx5_calc_send_wqe`),
    /// and the queue is rounded up to a power of two of bytes, while the device's `max_qp_wr`
    /// counts blocks. A request that would not fit is refused before the call with
    /// [`SendQueueTooLarge`](CreateDcInitiatorErrorKind::SendQueueTooLarge), which names the
    /// largest that fits (half of `max_qp_wr` for the default initiator).
    pub fn setup_max_send_wr(&mut self, max_send_wr: u32) -> &mut Self {
        self.request.max_send_wr = max_send_wr;
        self
    }

    /// Scatter/gather entries per send request (default 1).
    pub fn setup_max_send_sge(&mut self, max_send_sge: u32) -> &mut Self {
        self.request.max_send_sge = max_send_sge;
        self
    }

    /// Inline data per send request in bytes (default 0).
    pub fn setup_max_inline_data(&mut self, max_inline_data: u32) -> &mut Self {
        self.request.max_inline_data = max_inline_data;
        self
    }

    /// The send operations the DC initiator will post (every one used must be listed). A
    /// request for another one is refused at post.
    ///
    /// Default: every operation of [`DC_SEND_OPERATIONS`] the device can do — without the
    /// atomics on a device whose `atomic_cap` is `IBV_ATOMIC_NONE`, where libmlx5 refuses them
    /// (so the default never fails creation). Listing atomics on such a device is refused with
    /// [`AtomicOperationsNotSupported`](CreateDcInitiatorErrorKind::AtomicOperationsNotSupported).
    pub fn setup_send_ops_flags(&mut self, send_ops_flags: SendOperationFlags) -> &mut Self {
        self.request.send_ops = Some(send_ops_flags);
        self
    }

    /// DCI streams (`MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS`), checked against the device's
    /// `dci_streams_caps` before the call: a device whose `max_log_num_concurent` is 0 has no
    /// streams ([`DciStreamsNotSupported`](CreateDcInitiatorErrorKind::DciStreamsNotSupported)).
    /// Requests then address with `setup_dc_addr_stream`.
    pub fn setup_dci_streams(&mut self, streams: DciStreams) -> &mut Self {
        self.request.streams = Some(streams);
        self
    }

    /// Whether every send request generates a completion, whatever its flags (default false).
    pub fn setup_sq_sig_all(&mut self, sq_sig_all: bool) -> &mut Self {
        self.request.sq_sig_all = sq_sig_all;
        self
    }

    /// Creates the DC initiator with `mlx5dv_create_qp`, after checking the request against the
    /// device (send operations, capacities, DCI streams, see [`CreateDcInitiatorErrorKind`]). On
    /// a device that is not mlx5, or without libmlx5,
    /// [`NotSupported`](CreateDcInitiatorErrorKind::NotSupported).
    ///
    /// Scatter to CQE (small read responses written into the completion) is always off for a
    /// DC queue pair: libmlx5 turns it off for every DC queue pair created with send operations,
    /// because its DC data path does not support it (`create_qp` in `verbs.c`).
    pub fn build(&self) -> Result<DcInitiator, CreateDcInitiatorError> {
        let send_cq = self
            .send_cq
            .clone()
            .ok_or(CreateDcInitiatorErrorKind::MissingSendCompletionQueue)?;
        let DciPlan {
            context,
            max_dc_init_rd_atom,
            device,
            params,
        } = self.plan()?;
        let (mut init, mut mlx5_init) = dci_init_attributes(&params);
        // SAFETY: the PD and CQ are alive: self holds them, and the queue pair will too.
        unsafe {
            init.pd = self.pd.pd().as_ptr();
            init.send_cq = send_cq.cq().as_ptr();
            init.recv_cq = send_cq.cq().as_ptr();
        }
        let creation = DciCreation {
            init,
            mlx5: mlx5_init,
            params,
            max_log_num_errored: device.dci_streams.map_or(0, |caps| caps.max_log_num_errored),
        };
        // SAFETY: init's pointers are alive for the call.
        let qp = unsafe { create_dc_qp(&LIBMLX5, context, &mut init, &mut mlx5_init) }.map_err(|err| match err {
            None => CreateDcInitiatorErrorKind::DcNotSupportedByDevice,
            Some(err) => CreateDcInitiatorErrorKind::Ibverbs(err),
        })?;
        // libmlx5 wrote the granted sizes back (`create_qp`, `mlx5_calc_sq_size`).
        let granted = Granted::of(&init);
        // SAFETY: qp was just created on these parents, with these send operations, in RESET,
        // and is owned here (an error below destroys it).
        let core = unsafe {
            QueuePairCore::new(
                qp,
                &DC_INITIATOR,
                Some(params.send_ops),
                Arc::clone(&self.pd),
                Some(send_cq),
                None,
                None,
            )
        }
        .map_err(|err| CreateDcInitiatorErrorKind::MissingProviderEntry { entry: err.0 })?;
        DcInitiator::adopt(core, &LIBMLX5, creation, granted, max_dc_init_rd_atom)
            .map_err(|entry| CreateDcInitiatorErrorKind::MissingProviderEntry { entry }.into())
    }
}

impl DcInitiatorBuilder {
    /// The send queue [`build`](Self::build) will be granted ([`DcInitiator::max_send_wr`]),
    /// from the request and the device, before creating anything: a pool sizes its own send CQ
    /// with it.
    pub(crate) fn planned_max_send_wr(&self) -> Result<u32, CreateDcInitiatorError> {
        Ok(self.plan()?.params.granted_max_send_wr())
    }

    /// Queries the device (`mlx5dv_query_device`, `ibv_query_device`) and plans the creation
    /// ([`plan_dci`]), refusing input no device takes before any library call.
    fn plan(&self) -> Result<DciPlan, CreateDcInitiatorError> {
        if let Some(requested) = self.request.send_ops {
            check_dc_operations(requested)?;
        }
        // SAFETY: the PD's context is open while the PD is.
        let context = unsafe { NonNull::new_unchecked(self.pd.pd().as_ref().context) };
        // SAFETY: as above.
        let mlx5 = unsafe { query_device_raw(context) }.map_err(|err| match err.0 {
            crate::mlx5::device_context::QueryMlx5DeviceErrorKind::NotSupported => {
                CreateDcInitiatorErrorKind::NotSupported
            },
            crate::mlx5::device_context::QueryMlx5DeviceErrorKind::Ibverbs(err) => {
                CreateDcInitiatorErrorKind::Ibverbs(err)
            },
        })?;
        let device = crate::ibverbs::query_device_attr(&self.pd).map_err(CreateDcInitiatorErrorKind::Ibverbs)?;
        let device = DciDevice {
            max_qp_wr: device.max_qp_wr.max(0) as u32,
            max_sge: device.max_sge.max(0) as u32,
            atomics: device.atomic_cap != rdma_mummy_sys::ibv_atomic_cap::IBV_ATOMIC_NONE,
            dci_streams: mlx5.dci_streams_caps(),
        };
        let params = plan_dci(&self.request, &device)?;
        Ok(DciPlan {
            context,
            max_dc_init_rd_atom: mlx5.max_dc_init_rd_atom().filter(|&depth| depth > 0),
            device,
            params,
        })
    }
}

/// What [`DcInitiatorBuilder::build`] creates a DC initiator from: the device's context and
/// what it reported, and the planned parameters.
struct DciPlan {
    context: NonNull<rdma_mummy_sys::ibv_context>,
    max_dc_init_rd_atom: Option<u64>,
    device: DciDevice,
    params: DciInitParameters,
}

/// Checks DCI streams against the device's capabilities: none reported, or a concurrency of 0
/// (libmlx5's `_mlx5dv_query_device` reports the capability on every device, with zeros where
/// there are no streams), is a device without streams.
fn check_streams(streams: DciStreams, caps: Option<DciStreamsCapabilities>) -> Result<(), CreateDcInitiatorErrorKind> {
    let caps = caps
        .filter(|caps| caps.max_log_num_concurrent > 0)
        .ok_or(CreateDcInitiatorErrorKind::DciStreamsNotSupported)?;
    for (limit, requested, max) in [
        (
            "log_num_concurent",
            streams.log_num_concurrent,
            caps.max_log_num_concurrent,
        ),
        ("log_num_errored", streams.log_num_errored, caps.max_log_num_errored),
    ] {
        if requested > max {
            return Err(CreateDcInitiatorErrorKind::DciStreamsTooLarge { limit, requested, max });
        }
    }
    Ok(())
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

/// The attributes a DC initiator was brought up with, to bring it up again after an error.
#[derive(Debug, Clone)]
pub(crate) struct BringUpAttributes {
    init: QueuePairAttribute,
    rtr: QueuePairAttribute,
    rts: QueuePairAttribute,
}

impl BringUpAttributes {
    /// The three steps, in order: RESET → INIT, INIT → RTR, RTR → RTS.
    #[cfg(test)]
    pub(crate) fn steps(&self) -> [&QueuePairAttribute; 3] {
        [&self.init, &self.rtr, &self.rts]
    }
}

/// The first step of [`DcInitiator::recover`]: the move to RESET, with the state alone (mlx5_ib's
/// `modify_dci_qp_is_ok` allows nothing else with it).
pub(crate) fn reset_attribute() -> QueuePairAttribute {
    let mut reset = QueuePairAttribute::new();
    reset.setup_state(QueuePairState::Reset);
    reset
}

/// What a DC initiator was created with, to create it again where the kernel refuses its move
/// to RESET: the init attributes as handed to `mlx5dv_create_qp` (their PD and CQ pointers are
/// kept alive by the queue pair's parents).
#[derive(Clone, Copy)]
pub(crate) struct DciCreation {
    pub(crate) init: Zeroed<ibv_qp_init_attr_ex>,
    pub(crate) mlx5: Zeroed<mlx5dv_qp_init_attr>,
    pub(crate) params: DciInitParameters,
    /// The device's `dci_streams_caps.max_log_num_errored` (0: no stream can be reset).
    pub(crate) max_log_num_errored: u8,
}

/// What `mlx5dv_create_qp` granted, as libmlx5 wrote it back into the init attributes: at least
/// what was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Granted {
    pub(crate) max_send_wr: u32,
    pub(crate) max_inline_data: u32,
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
    max_dc_init_rd_atom: Option<u64>,
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
    /// Completes a DC initiator around a new queue-pair core: its mlx5 view and DC entries, or
    /// the name of the first entry the provider left NULL.
    fn adopt(
        mut core: QueuePairCore, verbs: &'static DcVerbs, creation: DciCreation, granted: Granted,
        max_dc_init_rd_atom: Option<u64>,
    ) -> Result<Self, &'static str> {
        let mlx5_qp_ex = Self::attach(&mut core, verbs, creation.params.streams.is_some())?;
        let send_view = core.send_view().ok_or("ibv_qp_to_qp_ex")?;
        Ok(Self {
            core,
            granted,
            send_view,
            mlx5_qp_ex,
            verbs,
            creation,
            max_dc_init_rd_atom,
            brought_up_with: None,
        })
    }

    /// Reads the mlx5 view of the core's queue pair and adds the DC setters to its entries.
    fn attach(core: &mut QueuePairCore, verbs: &DcVerbs, streams: bool) -> Result<NonNull<mlx5dv_qp_ex>, &'static str> {
        let (qp_ex, _) = core.send_view().ok_or("ibv_qp_to_qp_ex")?;
        // SAFETY: qp_ex is the extended view of a live mlx5 queue pair.
        let mlx5_qp_ex =
            NonNull::new(unsafe { (verbs.mlx5_view)(qp_ex.as_ptr()) }).ok_or("mlx5dv_qp_ex_from_ibv_qp_ex")?;
        // SAFETY: the mlx5 view lives as long as the queue pair; only its function pointers are
        // read.
        core.add_entries(unsafe { dc_entries(mlx5_qp_ex, streams) }?);
        Ok(mlx5_qp_ex)
    }

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

    /// The device's `max_dc_init_rd_atom`, when the library reports it (rdma-core 47 and later):
    /// labelled "as a responder" by mlx5dv_query_device(3), but read from
    /// `log_max_ra_res_dc`, the value mlx5_ib's `validate_rd_atomic` bounds a DC initiator's
    /// `max_rd_atomic` by, so the depth [`bring_up`](Self::bring_up) caps it with.
    pub fn max_dc_init_rd_atom(&self) -> Option<u64> {
        self.max_dc_init_rd_atom
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
    /// streams, after more than 2^`log_num_errored` streams are in error), so a single
    /// [`query_state`](Self::query_state) can still read RTS. pyverbs waits up to one second
    /// (`test_dc_stream_qp_recovery` in rdma-core's `tests/test_mlx5_dc.py`).
    pub fn wait_for_error(&mut self, timeout: Duration) -> Result<QueuePairState, QueryQueuePairError> {
        let deadline = Instant::now() + timeout;
        loop {
            let state = self.query_state()?;
            if state == QueuePairState::Error || Instant::now() >= deadline {
                return Ok(state);
            }
            std::thread::sleep(Duration::from_millis(1).min(deadline.saturating_duration_since(Instant::now())));
        }
    }

    /// Modifies the queue pair with `ibv_modify_qp`, after checking the transition and the
    /// attribute mask against the DC initiator's table (mlx5_ib's `modify_dci_qp_is_ok`: RESET →
    /// INIT → RTR → RTS, INIT → INIT and RTS → RTS with their optional attributes, any state to
    /// RESET, any state but RESET to ERR; every modification carries the state).
    pub fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairError> {
        self.core.modify(attr)
    }

    /// The extended and mlx5 views and their entries, for a pool's guard.
    pub(crate) fn pool_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        (self.send_view.0, self.send_view.1, self.mlx5_qp_ex)
    }

    /// Starts a batch of send requests (`ibv_wr_start`); each request is addressed with
    /// `setup_dc_addr` between its operation and its data.
    #[inline(always)]
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
    #[inline(always)]
    pub fn post_send_one(
        &mut self, wr_id: u64, wr_flags: sideway::ibverbs::queue_pair::WorkRequestFlags,
        request: impl FnOnce(crate::ibverbs::post_send_guard::WorkRequestHandle<'_, DynamicallyConnected>),
    ) -> Result<(), crate::ibverbs::post_send_guard::PostSendError> {
        let mut guard = self.start_post_send();
        request(guard.construct_wr(wr_id, wr_flags));
        guard.post()
    }
}

#[cfg(test)]
impl DcInitiator {
    /// A DC initiator planned from `request` on `device` as [`DcInitiatorBuilder::build`] does,
    /// created through `queue_pair` and `verbs` (a unit test's model of the library).
    pub(crate) fn modelled(
        request: &DciRequest, device: &DciDevice, queue_pair: &'static crate::ibverbs::queue_pair::QueuePairVerbs,
        verbs: &'static DcVerbs,
    ) -> Result<Self, CreateDcInitiatorErrorKind> {
        let params = plan_dci(request, device)?;
        let (mut init, mut mlx5) = dci_init_attributes(&params);
        let creation = DciCreation {
            init,
            mlx5,
            params,
            max_log_num_errored: device.dci_streams.map_or(0, |caps| caps.max_log_num_errored),
        };
        let context = NonNull::dangling();
        // SAFETY: the model takes any pointers.
        let qp = unsafe { create_dc_qp(verbs, context, &mut init, &mut mlx5) }.map_err(|err| match err {
            None => CreateDcInitiatorErrorKind::DcNotSupportedByDevice,
            Some(err) => CreateDcInitiatorErrorKind::Ibverbs(err),
        })?;
        let granted = Granted::of(&init);
        // SAFETY: the model's queue pair lives as long as the model.
        let core = unsafe { QueuePairCore::modelled(qp, &DC_INITIATOR, Some(params.send_ops), queue_pair, context) }
            .map_err(|err| CreateDcInitiatorErrorKind::MissingProviderEntry { entry: err.0 })?;
        Self::adopt(core, verbs, creation, granted, Some(16))
            .map_err(|entry| CreateDcInitiatorErrorKind::MissingProviderEntry { entry })
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
    /// The kernel refused the move to RTR with the address vector of
    /// [`setup_rtr_address_vector`](DcInitiatorBringUp::setup_rtr_address_vector) (`EINVAL`):
    /// `modify_dci_qp_is_ok` takes no address vector at a DC initiator's INIT → RTR before
    /// Linux v5.0 (nor in distribution kernels with an older mlx5_ib), or this one is invalid
    /// for the port. The DC initiator is left in INIT; bring it up without one, which every
    /// kernel takes.
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
    /// The DC initiator is not in RTS (libmlx5 refuses the reset with `EOPNOTSUPP`): too many
    /// streams errored and it went to ERR as a whole; [`DcInitiator::recover`] it instead.
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
/// the path MTU (default: the port's active MTU), and perftest's defaults for the rest (timeout
/// 14, retry count 7, RNR retry 7, PSN 0), the read/atomic depth capped by the device's DC
/// initiator depth.
#[derive(Debug, Clone, Copy)]
pub struct DcInitiatorBringUp {
    port: u8,
    pkey_index: u16,
    path_mtu: Option<Mtu>,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    max_read_atomic: Option<u8>,
    rtr_address_vector: Option<AddressHandleAttribute>,
}

impl DcInitiatorBringUp {
    /// The local port.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The defaults, on local port `port` (from 1).
    pub fn new(port: u8) -> Self {
        Self {
            port,
            pkey_index: 0,
            path_mtu: None,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_read_atomic: None,
            rtr_address_vector: None,
        }
    }

    /// An address vector for the move to RTR (`IBV_QP_AV`; default none). A DC initiator needs
    /// none — each request names its destination's address handle — and none is what every
    /// kernel takes. Set one where the DC initiator's own path matters: a service level
    /// ([`setup_service_level`](AddressHandleAttribute::setup_service_level)) on InfiniBand, or
    /// on RoCE a global address whose traffic class and source GID pick the priority and, under
    /// RoCE LAG, the port, as UCX and perftest send it (e.g. an endpoint's
    /// [`address_handle_attribute`](super::endpoint::DcEndpoint::address_handle_attribute)).
    ///
    /// mlx5_ib's `modify_dci_qp_is_ok` accepts it at INIT → RTR from Linux v5.0 on (v4.20 and
    /// older, and distribution kernels with an older mlx5_ib such as SLES 12 SP5's, refuse it
    /// with `EINVAL`), reported as
    /// [`RtrAddressVectorRefused`](BringUpDcInitiatorErrorKind::RtrAddressVectorRefused).
    pub fn setup_rtr_address_vector(&mut self, address_vector: AddressHandleAttribute) -> &mut Self {
        self.rtr_address_vector = Some(address_vector);
        self
    }

    /// The P_Key index (default 0).
    pub fn setup_pkey_index(&mut self, pkey_index: u16) -> &mut Self {
        self.pkey_index = pkey_index;
        self
    }

    /// The path MTU (default: the port's active MTU).
    pub fn setup_path_mtu(&mut self, path_mtu: Mtu) -> &mut Self {
        self.path_mtu = Some(path_mtu);
        self
    }

    /// The local ACK timeout, 4.096 µs · 2^timeout (default 14).
    pub fn setup_timeout(&mut self, timeout: u8) -> &mut Self {
        self.timeout = timeout;
        self
    }

    /// Retries after a timeout (default 7).
    pub fn setup_retry_cnt(&mut self, retry_cnt: u8) -> &mut Self {
        self.retry_cnt = retry_cnt;
        self
    }

    /// Retries after an RNR NAK, 7 meaning infinite (default 7).
    pub fn setup_rnr_retry(&mut self, rnr_retry: u8) -> &mut Self {
        self.rnr_retry = rnr_retry;
        self
    }

    /// Outstanding RDMA reads and atomics (default: the device's DC initiator depth, or 1 when
    /// the library does not report it); capped by the device's DC initiator depth either way.
    pub fn setup_max_read_atomic(&mut self, max_read_atomic: u8) -> &mut Self {
        self.max_read_atomic = Some(max_read_atomic);
        self
    }

    /// The three transitions' attributes: RESET → INIT, INIT → RTR, RTR → RTS.
    pub(crate) fn attributes(&self, path_mtu: Mtu, dc_init_depth: Option<u64>) -> BringUpAttributes {
        let cap = dc_init_depth.map_or(1, |depth| depth.min(u8::MAX as u64) as u8);
        let max_read_atomic = self.max_read_atomic.map_or(cap, |asked| asked.min(cap));
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(self.pkey_index)
            .setup_port(self.port);
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive).setup_path_mtu(path_mtu);
        if let Some(address_vector) = &self.rtr_address_vector {
            rtr.setup_address_vector(address_vector);
        }
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_timeout(self.timeout)
            .setup_retry_cnt(self.retry_cnt)
            .setup_rnr_retry(self.rnr_retry)
            .setup_max_read_atomic(max_read_atomic)
            .setup_sq_psn(0);
        BringUpAttributes { init, rtr, rts }
    }
}

/// A port's active MTU (`ibv_port_attr::active_mtu`).
pub(crate) fn active_mtu(attr: &rdma_mummy_sys::ibv_port_attr) -> Mtu {
    match attr.active_mtu {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        // A value this crate does not know: the smallest MTU every port supports.
        _ => Mtu::Mtu1024,
    }
}

impl DcInitiator {
    /// Brings the DC initiator from RESET to RTS in one call (RESET → INIT → RTR → RTS, each
    /// checked against the DC initiator's table), and keeps the attributes for
    /// [`recover`](Self::recover).
    pub fn bring_up(&mut self, params: &DcInitiatorBringUp) -> Result<(), BringUpDcInitiatorError> {
        let path_mtu = match params.path_mtu {
            Some(mtu) => mtu,
            None => self
                .core
                .query_port(params.port)
                .map(|attr| active_mtu(&attr))
                .map_err(|source| BringUpDcInitiatorErrorKind::InvalidPort {
                    port: params.port,
                    source,
                })?,
        };
        let attributes = params.attributes(path_mtu, self.max_dc_init_rd_atom);
        for attr in [&attributes.init, &attributes.rtr, &attributes.rts] {
            self.core.modify(attr).map_err(|err| {
                let refused_av = params.rtr_address_vector.is_some()
                    && attr.state() == QueuePairState::ReadyToReceive
                    && matches!(&err.0, ModifyQueuePairErrorKind::Ibverbs(errno) if errno.raw_os_error() == Some(libc::EINVAL));
                match refused_av {
                    true => BringUpDcInitiatorErrorKind::RtrAddressVectorRefused { source: err },
                    false => BringUpDcInitiatorErrorKind::Modify(err),
                }
            })?;
        }
        self.brought_up_with = Some(attributes);
        Ok(())
    }

    /// Brings a DC initiator in ERR (after an error completion, for every destination) back to
    /// RTS in one call, with the attributes of the last [`bring_up`](Self::bring_up): RESET →
    /// INIT → RTR → RTS ([`DcRecovery::Reset`]). Where the kernel refuses a DC initiator's move to
    /// RESET (`EINVAL`, kernels whose `modify_dci_qp_is_ok` has no RESET branch), it creates the
    /// DC initiator again with the same attributes and brings that one up instead
    /// ([`DcRecovery::Rebuilt`], with a new [`qp_number`](Self::qp_number)); either way this
    /// value stays the caller's handle.
    ///
    /// Poll its failed completions first: the reset (or the destruction) discards its send
    /// queue and libmlx5 cleans the send CQ of its completions.
    pub fn recover(&mut self) -> Result<DcRecovery, RecoverDcInitiatorError> {
        let attributes = self
            .brought_up_with
            .clone()
            .ok_or(RecoverDcInitiatorErrorKind::NotBroughtUp)?;
        let recovery = match self.core.modify(&reset_attribute()) {
            Ok(()) => DcRecovery::Reset,
            Err(err) if matches!(&err.0, ModifyQueuePairErrorKind::Ibverbs(errno) if errno.raw_os_error() == Some(libc::EINVAL)) => {
                self.rebuild()?
            },
            Err(err) => return Err(RecoverDcInitiatorErrorKind::Modify(err).into()),
        };
        for attr in [&attributes.init, &attributes.rtr, &attributes.rts] {
            self.core.modify(attr).map_err(RecoverDcInitiatorErrorKind::Modify)?;
        }
        Ok(recovery)
    }

    /// Creates the DC initiator again with its creation attributes and puts the new queue pair
    /// in the old one's place (which is destroyed).
    fn rebuild(&mut self) -> Result<DcRecovery, RecoverDcInitiatorError> {
        let previous_qp_number = self.core.qp_number();
        let (mut init, mut mlx5) = (self.creation.init, self.creation.mlx5);
        // SAFETY: init's PD and CQ pointers are this queue pair's parents, alive while the core
        // is; the context is theirs.
        let qp = unsafe { create_dc_qp(self.verbs, self.core.context(), &mut init, &mut mlx5) }.map_err(|err| {
            RecoverDcInitiatorErrorKind::Rebuild(err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP)))
        })?;
        // The same request is granted the same sizes; keep what this one was granted.
        self.granted = Granted::of(&init);
        // SAFETY: qp was just created on the core's parents with these send operations, in
        // RESET; the old views are replaced below before any use.
        let replaced = unsafe { self.core.replace(qp, Some(self.creation.params.send_ops)) };
        let attached = replaced
            .map_err(|err| err.0)
            .and_then(|()| Self::attach(&mut self.core, self.verbs, self.creation.params.streams.is_some()))
            .and_then(|mlx5_qp_ex| Ok((self.core.send_view().ok_or("ibv_qp_to_qp_ex")?, mlx5_qp_ex)));
        match attached {
            Ok((send_view, mlx5_qp_ex)) => {
                self.send_view = send_view;
                self.mlx5_qp_ex = mlx5_qp_ex;
                Ok(DcRecovery::Rebuilt { previous_qp_number })
            },
            Err(entry) => {
                // Posting must not reach the new queue pair's NULL entry: no entry is granted
                // until a later recover succeeds.
                self.send_view.1 = ProviderEntries::NONE;
                Err(RecoverDcInitiatorErrorKind::RebuildMissingProviderEntry { entry }.into())
            },
        }
    }

    /// Resets one errored DCI stream with `mlx5dv_dci_stream_id_reset` (libmlx5 v37 and later,
    /// resolved at run time), so that the stream can be used again while the others went on.
    /// Any `stream_id` a request was posted on with `setup_dc_addr_stream` can be reset (the
    /// provider writes it into the request as is).
    ///
    /// Reset a stream only once every request posted on it has completed — the error
    /// completion first, then the flush errors of the stream's later requests (man page
    /// `mlx5dv_dci_stream_id_reset(3)`): the stream's requests still queued are not flushed
    /// yet when its error completion arrives. Requests of other streams go on executing.
    ///
    /// # Errors
    ///
    /// - [`NoStreams`](ResetDciStreamErrorKind::NoStreams): created without streams;
    /// - [`DeviceCannotResetStreams`](ResetDciStreamErrorKind::DeviceCannotResetStreams);
    /// - [`NotSupported`](ResetDciStreamErrorKind::NotSupported): libmlx5 lacks the function;
    /// - [`NotReadyToSend`](ResetDciStreamErrorKind::NotReadyToSend): the DC initiator is not
    ///   in RTS (as last modified or queried; or libmlx5 said so and a query confirmed it):
    ///   [`recover`](Self::recover) it.
    pub fn reset_stream(&mut self, stream_id: u16) -> Result<(), ResetDciStreamError> {
        if self.creation.params.streams.is_none() {
            return Err(ResetDciStreamErrorKind::NoStreams.into());
        }
        if self.creation.max_log_num_errored == 0 {
            return Err(ResetDciStreamErrorKind::DeviceCannotResetStreams.into());
        }
        let reset = (self.verbs.stream_id_reset)().ok_or(ResetDciStreamErrorKind::NotSupported)?;
        // libmlx5 checks its cached state, which ibv_modify_qp and ibv_query_qp update as the
        // core does.
        let state = self.core.state();
        if state != QueuePairState::ReadyToSend {
            return Err(ResetDciStreamErrorKind::NotReadyToSend { state }.into());
        }
        // SAFETY: the queue pair is alive and exclusively borrowed; the function has the C
        // signature it was resolved with.
        match unsafe { reset(self.core.qp().as_ptr(), stream_id) } {
            0 => Ok(()),
            // The DC initiator may have gone to ERR since the state was last read (libmlx5
            // refuses with EOPNOTSUPP after a query, the device with a command error before).
            errno => match self.query_state() {
                Ok(state) if state != QueuePairState::ReadyToSend => {
                    Err(ResetDciStreamErrorKind::NotReadyToSend { state }.into())
                },
                _ if errno == libc::EOPNOTSUPP => Err(ResetDciStreamErrorKind::DeviceCannotResetStreams.into()),
                _ => Err(ResetDciStreamErrorKind::Ibverbs(io::Error::from_raw_os_error(errno)).into()),
            },
        }
    }
}

/// The DC transport, as posted by a [`DcInitiator`]: every request names its destination.
#[derive(Debug)]
pub enum DynamicallyConnected {}

/// The per-queue-pair context of the DC transport: the queue pair's mlx5 view.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct DcContext(NonNull<mlx5dv_qp_ex>);

impl DcContext {
    bench_visible! {
        /// The context of a DC initiator's mlx5 view, for benchmarks and tests that drive the guard
        /// over hand-made function tables ([`PostSendGuard::start`]).
        ///
        /// # Safety
        ///
        /// `mlx5_qp_ex` must point to a live `struct mlx5dv_qp_ex` for as long as guards use the
        /// context.
        pub unsafe fn from_raw(mlx5_qp_ex: NonNull<mlx5dv_qp_ex>) -> Self {
            Self(mlx5_qp_ex)
        }
    }

    bench_visible! {
        /// `ibv_entries` plus the DC setters this mlx5 view has (`wr_set_dc_addr`, and with
        /// `streams` `wr_set_dc_addr_stream`), or the name of the first one missing.
        ///
        /// # Safety
        ///
        /// The view must be live (see [`from_raw`](Self::from_raw)).
        pub unsafe fn entries(
            self, ibv_entries: crate::ibverbs::post_send_guard::ProviderEntries, streams: bool,
        ) -> Result<crate::ibverbs::post_send_guard::ProviderEntries, &'static str> {
            Ok(ibv_entries.with(dc_entries(self.0, streams)?))
        }
    }
}

impl sealed::Sealed for DynamicallyConnected {}

impl Transport for DynamicallyConnected {
    type Context = DcContext;
    type AfterOperation<'g, O: Operation> = DcDestination<'g, O>;

    #[inline(always)]
    fn after_operation<O: Operation>(request: PendingRequest<'_, O>, context: DcContext) -> DcDestination<'_, O> {
        DcDestination { request, context }
    }
}

impl RemoteMemoryAccess for DynamicallyConnected {}

/// The destination step of a DC request.
#[must_use = "a request is added to the batch only at its data step"]
pub struct DcDestination<'g, O: Operation> {
    request: PendingRequest<'g, O>,
    context: DcContext,
}

impl<'g, O: Operation> DcDestination<'g, O> {
    /// Sends to the DC target `dct_number` with access key `dc_key`, over the route of `ah`
    /// (`mlx5dv_wr_set_dc_addr`).
    ///
    /// libmlx5 copies the address handle's address vector into the request when this is called
    /// (`mlx5_send_wr_set_dc_addr` in `qp.c`): the handle must outlive this call, not the
    /// request's completion. The borrow here lasts as long as the batch's guard, which is longer
    /// than needed but costs nothing (it exists only at compile time); dropping the handle after
    /// [`post`](PostSendGuard::post) is fine. Cache one handle per destination anyway: creating
    /// one is a system call.
    #[inline(always)]
    pub fn setup_dc_addr(
        self, ah: &'g AddressHandle, dct_number: u32, dc_key: u64,
    ) -> LocalBufferHandle<'g, O, DcAddress> {
        // SAFETY: only the pointer is taken; the caller keeps the handle alive.
        self.address(unsafe { ah.ah() }, dct_number, dc_key)
    }

    /// As [`setup_dc_addr`](Self::setup_dc_addr), on DCI stream `stream_id`
    /// (`mlx5dv_wr_set_dc_addr_stream`); the DC initiator must have been created with streams,
    /// else the request is refused at post.
    #[inline(always)]
    pub fn setup_dc_addr_stream(
        self, ah: &'g AddressHandle, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> LocalBufferHandle<'g, O, DcStreamAddress> {
        // SAFETY: only the pointer is taken; the caller keeps the handle alive.
        self.stream_address(unsafe { ah.ah() }, dct_number, dc_key, stream_id)
    }

    bench_visible! {
        /// As [`setup_dc_addr`](Self::setup_dc_addr), with a raw address handle: for benchmarks and
        /// tests over hand-made function tables.
        ///
        /// # Safety
        ///
        /// `ah` must be a live address handle until the request's data step has run (libmlx5 copies
        /// its address vector then), or, over a hand-made table, whatever that table's setter
        /// accepts.
        #[inline(always)]
        pub unsafe fn setup_dc_addr_raw(
            self, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64,
        ) -> LocalBufferHandle<'g, O, DcAddress> {
            self.address(ah, dct_number, dc_key)
        }
    }

    #[inline(always)]
    fn address(self, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64) -> LocalBufferHandle<'g, O, DcAddress> {
        LocalBufferHandle::new(
            self.request,
            DcAddress {
                mlx5_qp_ex: self.context.0,
                ah,
                dct_number,
                dc_key,
            },
        )
    }

    #[inline(always)]
    fn stream_address(
        self, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> LocalBufferHandle<'g, O, DcStreamAddress> {
        let address = DcAddress {
            mlx5_qp_ex: self.context.0,
            ah,
            dct_number,
            dc_key,
        };
        LocalBufferHandle::new(self.request, DcStreamAddress { address, stream_id })
    }
}

/// A DC destination: `mlx5dv_wr_set_dc_addr(ah, dct_number, dc_key)`.
#[derive(Debug, Clone, Copy)]
pub struct DcAddress {
    mlx5_qp_ex: NonNull<mlx5dv_qp_ex>,
    ah: NonNull<ibv_ah>,
    dct_number: u32,
    dc_key: u64,
}

impl sealed::Sealed for DcAddress {}

impl DcAddress {
    /// The address of one request: the DC initiator's mlx5 view, the route, the target.
    #[inline(always)]
    pub(crate) fn new(mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64) -> Self {
        Self {
            mlx5_qp_ex,
            ah,
            dct_number,
            dc_key,
        }
    }
}

impl Destination for DcAddress {
    const ENTRY: u32 = SET_DC_ADDR;
    const ENTRY_NAME: &'static str = "wr_set_dc_addr";

    #[inline(always)]
    unsafe fn set(self, _qp: *mut ibv_qp_ex) {
        mlx5dv_wr_set_dc_addr(self.mlx5_qp_ex.as_ptr(), self.ah.as_ptr(), self.dct_number, self.dc_key)
    }
}

/// A DC destination on a DCI stream: `mlx5dv_wr_set_dc_addr_stream(ah, dct_number, dc_key,
/// stream_id)`.
#[derive(Debug, Clone, Copy)]
pub struct DcStreamAddress {
    address: DcAddress,
    stream_id: u16,
}

impl sealed::Sealed for DcStreamAddress {}

impl DcStreamAddress {
    /// `address` on DCI stream `stream_id`.
    #[inline(always)]
    pub(crate) fn new(address: DcAddress, stream_id: u16) -> Self {
        Self { address, stream_id }
    }
}

impl Destination for DcStreamAddress {
    const ENTRY: u32 = SET_DC_ADDR_STREAM;
    const ENTRY_NAME: &'static str = "wr_set_dc_addr_stream";

    #[inline(always)]
    unsafe fn set(self, _qp: *mut ibv_qp_ex) {
        let a = self.address;
        mlx5dv_wr_set_dc_addr_stream(
            a.mlx5_qp_ex.as_ptr(),
            a.ah.as_ptr(),
            a.dct_number,
            a.dc_key,
            self.stream_id,
        )
    }
}

#[cfg(test)]
mod tests {
    //! Everything of the DC initiator that runs without a device: its init attributes, its
    //! bring-up attributes against the DC table, and the exact provider calls its requests make,
    //! through hand-made `ibv_qp_ex` and `mlx5dv_qp_ex` tables that record them.
    use std::io::IoSlice;

    use rdma_mummy_sys::{ibv_send_flags, ibv_sge};
    use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};

    use super::*;
    use crate::ibverbs::post_send_guard::{PostSendErrorKind, ProviderEntries};
    use crate::test_support::dc::recording_dci;
    use crate::test_support::take_calls;

    fn params() -> DciInitParameters {
        DciInitParameters {
            max_send_wr: 64,
            max_send_sge: 2,
            max_inline_data: 32,
            send_ops: DC_SEND_OPERATIONS,
            streams: None,
            sq_sig_all: false,
        }
    }

    #[test]
    fn dci_init_attributes_follow_the_reference_rules() {
        let (init, mlx5) = dci_init_attributes(&params());
        assert_eq!(init.qp_type, ibv_qp_type::IBV_QPT_DRIVER);
        assert_eq!(
            (init.cap.max_recv_wr, init.cap.max_recv_sge),
            (0, 0),
            "no receive queue"
        );
        assert_eq!(
            (init.cap.max_send_wr, init.cap.max_send_sge, init.cap.max_inline_data),
            (64, 2, 32)
        );
        assert_eq!(
            init.comp_mask,
            (ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS).0
        );
        // Every granted operation is listed.
        assert_eq!(init.send_ops_flags, DC_SEND_OPERATIONS.bits());
        assert!(init.pd.is_null() && init.send_cq.is_null() && init.srq.is_null());
        assert_eq!(
            mlx5.comp_mask,
            mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DC.0 as u64
        );
        assert_eq!(mlx5.dc_init_attr.dc_type, MLX5DV_DCTYPE_DCI);
        assert_eq!(mlx5.create_flags, 0);

        let mut with = params();
        with.send_ops = SendOperationFlags::Write | SendOperationFlags::Read;
        with.streams = Some(DciStreams {
            log_num_concurrent: 3,
            log_num_errored: 1,
        });
        let (init, mlx5) = dci_init_attributes(&with);
        assert_eq!(init.send_ops_flags, with.send_ops.bits());
        assert_eq!(
            mlx5.comp_mask,
            (mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DC
                | mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS)
                .0 as u64
        );
        // SAFETY: the streams member was written.
        let streams = unsafe { *mlx5.dc_init_attr.__bindgen_anon_1.dci_streams.as_ref() };
        assert_eq!((streams.log_num_concurent, streams.log_num_errored), (3, 1));
        assert_eq!(mlx5.create_flags, 0);
    }

    #[test]
    fn streams_are_checked_against_the_device_with_the_limit_named() {
        use crate::mlx5::device_attributes::DciStreamsCapabilities;
        let caps = DciStreamsCapabilities {
            max_log_num_concurrent: 4,
            max_log_num_errored: 2,
        };
        let ok = DciStreams {
            log_num_concurrent: 4,
            log_num_errored: 2,
        };
        assert!(check_streams(ok, Some(caps)).is_ok());
        assert!(matches!(
            check_streams(ok, None),
            Err(CreateDcInitiatorErrorKind::DciStreamsNotSupported)
        ));
        let errored = DciStreams {
            log_num_errored: 3,
            ..ok
        };
        assert!(matches!(
            check_streams(errored, Some(caps)),
            Err(CreateDcInitiatorErrorKind::DciStreamsTooLarge {
                limit: "log_num_errored",
                requested: 3,
                max: 2
            })
        ));
    }

    #[test]
    fn bring_up_attributes_pass_the_dc_table_and_cap_the_read_atomic_depth() {
        let mut params = DcInitiatorBringUp::new(1);
        let attributes = params.attributes(Mtu::Mtu1024, Some(8));
        assert!(DC_INITIATOR.check(QueuePairState::Reset, &attributes.init).is_ok());
        assert!(DC_INITIATOR.check(QueuePairState::Init, &attributes.rtr).is_ok());
        assert!(DC_INITIATOR
            .check(QueuePairState::ReadyToReceive, &attributes.rts)
            .is_ok());
        assert_eq!(attributes.rts.max_read_atomic(), 8, "default: the device's DC depth");
        assert_eq!(
            (
                attributes.rts.timeout(),
                attributes.rts.retry_cnt(),
                attributes.rts.rnr_retry()
            ),
            (14, 7, 7)
        );
        params.setup_max_read_atomic(64);
        assert_eq!(
            params.attributes(Mtu::Mtu1024, Some(8)).rts.max_read_atomic(),
            8,
            "capped"
        );
        params.setup_max_read_atomic(2);
        assert_eq!(params.attributes(Mtu::Mtu1024, Some(8)).rts.max_read_atomic(), 2);
        // Unknown depth (rdma-core before 47): 1, never the RC depth.
        assert_eq!(
            DcInitiatorBringUp::new(1)
                .attributes(Mtu::Mtu1024, None)
                .rts
                .max_read_atomic(),
            1
        );
    }

    fn start(
        qp: &mut ibv_qp_ex, mlx5: &mut mlx5dv_qp_ex, granted: SendOperationFlags, streams: bool,
    ) -> PostSendGuard<'static, DynamicallyConnected> {
        let (qp, mlx5) = (NonNull::from(qp), NonNull::from(mlx5));
        // SAFETY: the tables are live (boxes the tests keep until after the guard).
        let entries = unsafe { ProviderEntries::new(qp, granted) }.expect("recording entries");
        // SAFETY: as above.
        let dc = unsafe { dc_entries(mlx5, streams) }.expect("recording mlx5 entries");
        // SAFETY: the tables outlive the guard and nothing else uses them meanwhile; the
        // context is their mlx5 view.
        unsafe { PostSendGuard::start(qp, entries.with(dc), DcContext(mlx5)) }
    }

    /// A fake address handle: the recorder only prints its address.
    fn fake_ah() -> NonNull<ibv_ah> {
        NonNull::dangling()
    }

    /// Posts one request of `operation` × `data` × `stream`, returns its recorded calls (without
    /// start and complete).
    fn one_request(operation: usize, data: usize, stream: bool) -> Vec<String> {
        let (mut qp, mut mlx5) = recording_dci(true);
        take_calls();
        let mut guard = start(&mut qp, &mut mlx5, DC_SEND_OPERATIONS, true);
        macro_rules! finish {
            ($step:expr) => {{
                let destination = $step;
                if stream {
                    data_step(destination.stream_address(fake_ah(), 0xabcdef, 0xdc, 5), data)
                } else {
                    data_step(destination.address(fake_ah(), 0xabcdef, 0xdc), data)
                }
            }};
        }
        let request = guard.construct_wr(7, WorkRequestFlags::Signaled);
        match operation {
            0 => finish!(request.setup_send()),
            1 => finish!(request.setup_send_imm(0x11)),
            2 => finish!(request.setup_write(0x22, 0x1000)),
            3 => finish!(request.setup_write_imm(0x22, 0x1000, 0x33)),
            4 => finish!(request.setup_read(0x22, 0x1000)),
            5 => finish!(request.setup_atomic_compare_swap(0x22, 0x1000, 1, 2)),
            _ => finish!(request.setup_atomic_fetch_add(0x22, 0x1000, 3)),
        }
        guard.post().expect("recorded complete");
        let calls = take_calls();
        assert_eq!(calls.first().map(String::as_str), Some("start"));
        assert_eq!(calls.last().map(String::as_str), Some("complete"));
        calls[1..calls.len() - 1].to_vec()
    }

    fn data_step<O: Operation, D: Destination>(handle: LocalBufferHandle<'_, O, D>, data: usize) {
        // SAFETY: the recorder does not touch the buffers.
        unsafe {
            match data {
                0 => handle.setup_sge(0x9, 0x2000, 64),
                1 => handle.setup_sge_list(&[ibv_sge {
                    addr: 0x2000,
                    length: 8,
                    lkey: 0x9,
                }]),
                2 => handle.setup_inline_data(b"dc"),
                _ => handle.setup_inline_data_list(&[IoSlice::new(b"d"), IoSlice::new(b"cc")]),
            }
        }
    }

    #[test]
    fn every_operation_data_setter_and_address_variant_calls_builder_address_then_data() {
        let builders = [
            "send ",
            "send_imm",
            "write ",
            "write_imm",
            "read ",
            "cmp_swp",
            "fetch_add",
        ];
        let data = ["sge ", "sge_list [8]", "inline \"dc\"", "inline_list 3"];
        for (operation, builder) in builders.iter().enumerate() {
            for (setter, data_call) in data.iter().enumerate() {
                for stream in [false, true] {
                    let calls = one_request(operation, setter, stream);
                    let what = format!("operation {operation}, data {setter}, stream {stream}: {calls:?}");
                    assert_eq!(calls.len(), 3, "{what}");
                    assert!(calls[0].starts_with(builder) && calls[0].contains("wr_id=7"), "{what}");
                    let address = if stream {
                        format!(
                            "dc_addr_stream ah={:#x} dctn=0xabcdef key=0xdc stream=5",
                            fake_ah().as_ptr() as usize
                        )
                    } else {
                        format!("dc_addr ah={:#x} dctn=0xabcdef key=0xdc", fake_ah().as_ptr() as usize)
                    };
                    assert_eq!(calls[1], address, "{what}");
                    assert!(calls[2].starts_with(data_call), "{what}");
                }
            }
        }
    }

    #[test]
    fn the_flags_match_the_data_step() {
        let calls = one_request(0, 2, false);
        let inline = (ibv_send_flags::IBV_SEND_SIGNALED | ibv_send_flags::IBV_SEND_INLINE).0;
        assert_eq!(calls[0], format!("send wr_id=7 flags={inline:#x}"));
        let calls = one_request(0, 0, false);
        assert_eq!(
            calls[0],
            format!("send wr_id=7 flags={:#x}", ibv_send_flags::IBV_SEND_SIGNALED.0)
        );
    }

    #[test]
    fn a_dropped_guard_aborts_and_refused_requests_never_reach_the_provider() {
        let (mut qp, mut mlx5) = recording_dci(false);
        take_calls();
        // Created with SEND only and without streams.
        let mut guard = start(&mut qp, &mut mlx5, SendOperationFlags::Send, false);
        let request = guard.construct_wr(1, WorkRequestFlags::Signaled).setup_write(1, 2);
        // SAFETY: the recorder does not touch the buffer.
        unsafe { request.address(fake_ah(), 1, 2).setup_sge(1, 2, 3) };
        let request = guard.construct_wr(2, WorkRequestFlags::Signaled).setup_send();
        request.stream_address(fake_ah(), 1, 2, 0).setup_inline_data(b"x");
        assert_eq!(guard.batch_len(), 2);
        let err = guard.post().unwrap_err();
        match err.0 {
            PostSendErrorKind::OperationNotEnabled {
                index, wr_id, entry, ..
            } => assert_eq!((index, wr_id, entry), (0, 1, "wr_rdma_write")),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(take_calls(), ["start", "abort"]);
        // The stream variant alone is refused by its own entry's name.
        let mut guard = start(&mut qp, &mut mlx5, SendOperationFlags::Send, false);
        let request = guard.construct_wr(3, WorkRequestFlags::Signaled).setup_send();
        request.stream_address(fake_ah(), 1, 2, 0).setup_inline_data(b"x");
        assert!(matches!(
            guard.post().unwrap_err().0,
            PostSendErrorKind::OperationNotEnabled {
                entry: "wr_set_dc_addr_stream",
                ..
            }
        ));
        assert_eq!(take_calls(), ["start", "abort"]);
        // A guard dropped unposted aborts its batch.
        let mut guard = start(&mut qp, &mut mlx5, SendOperationFlags::Send, false);
        let request = guard.construct_wr(4, WorkRequestFlags::Signaled).setup_send();
        request.address(fake_ah(), 1, 2).setup_inline_data(b"y");
        drop(guard);
        let calls = take_calls();
        assert_eq!(calls.first().map(String::as_str), Some("start"));
        assert_eq!(calls.last().map(String::as_str), Some("abort"));
        assert_eq!(calls.len(), 5, "start, send, dc_addr, inline, abort: {calls:?}");
    }

    #[test]
    fn inline_data_beyond_the_granted_size_is_refused_before_the_provider() {
        let (mut qp, mut mlx5) = recording_dci(false);
        take_calls();
        let mut guard = start(&mut qp, &mut mlx5, DC_SEND_OPERATIONS, false);
        guard.set_max_inline_data(4);
        let request = guard.construct_wr(1, WorkRequestFlags::Signaled).setup_send();
        request.address(fake_ah(), 1, 2).setup_inline_data(b"four");
        let request = guard.construct_wr(2, WorkRequestFlags::Signaled).setup_send();
        request.address(fake_ah(), 1, 2).setup_inline_data(b"fiveb");
        let err = guard.post().unwrap_err();
        match err.0 {
            PostSendErrorKind::InlineDataTooLong {
                index,
                wr_id,
                length,
                max_inline_data,
                batch_len,
            } => assert_eq!((index, wr_id, length, max_inline_data, batch_len), (1, 2, 5, 4, 2)),
            other => panic!("unexpected {other:?}"),
        }
        let calls = take_calls();
        assert_eq!(calls.first().map(String::as_str), Some("start"));
        assert_eq!(calls.last().map(String::as_str), Some("abort"));
        assert!(!calls.iter().any(|call| call.contains("fiveb")), "{calls:?}");
        // The list variant counts every slice.
        let mut guard = start(&mut qp, &mut mlx5, DC_SEND_OPERATIONS, false);
        guard.set_max_inline_data(4);
        let request = guard.construct_wr(3, WorkRequestFlags::Signaled).setup_send();
        request
            .address(fake_ah(), 1, 2)
            .setup_inline_data_list(&[IoSlice::new(b"abc"), IoSlice::new(b"de")]);
        assert!(matches!(
            guard.post().unwrap_err().0,
            PostSendErrorKind::InlineDataTooLong { length: 5, .. }
        ));
        assert_eq!(take_calls(), ["start", "abort"]);
    }

    #[test]
    fn a_missing_dc_entry_is_named() {
        let (_, mut mlx5) = recording_dci(false);
        // SAFETY: the table is live.
        assert_eq!(
            unsafe { dc_entries(NonNull::from(&mut *mlx5), true) },
            Err("wr_set_dc_addr_stream")
        );
        mlx5.wr_set_dc_addr = None;
        // SAFETY: as above.
        assert_eq!(
            unsafe { dc_entries(NonNull::from(&mut *mlx5), false) },
            Err("wr_set_dc_addr")
        );
    }
}
