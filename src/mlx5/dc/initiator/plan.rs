//! How a DC initiator is planned before it is created ([`plan_dci`]), its send queue sized as
//! libmlx5 sizes it (`mlx5_calc_send_wqe`, `mlx5_calc_sq_size`).
use sideway::ibverbs::queue_pair::SendOperationFlags;

#[cfg(doc)]
use super::DcInitiatorBuilder;
use super::{CreateDcInitiatorErrorKind, DciStreams, DC_ATOMIC_OPERATIONS, DC_SEND_OPERATIONS};
use crate::mlx5::device_attributes::DciStreamsCapabilities;

/// The init attributes of a DC initiator but the pointers (`cap`, `send_ops_flags`, streams,
/// `sq_sig_all`), as a [`DcInitiatorBuilder`] asks for them ([`DciRequest`]) and as planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DciParameters<SendOps> {
    pub max_send_wr: u32,
    pub max_send_sge: u32,
    pub max_inline_data: u32,
    pub send_ops: SendOps,
    pub streams: Option<DciStreams>,
    pub sq_sig_all: bool,
}

/// What a builder asks for; send operations `None`: [`DC_SEND_OPERATIONS`] the device can do.
pub(crate) type DciRequest = DciParameters<Option<SendOperationFlags>>;

/// What a DC initiator is created with.
pub(crate) type DciInitParameters = DciParameters<SendOperationFlags>;

/// What the device reports that decides a DC initiator's creation: `ibv_query_device`'s
/// `max_qp_wr`, `max_sge` and `atomic_cap`, and `mlx5dv_query_device`'s `dci_streams_caps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DciDevice {
    pub max_qp_wr: u32,
    pub max_sge: u32,
    /// `atomic_cap` is not `IBV_ATOMIC_NONE` (libmlx5 sets `atomics_enabled` from it).
    pub atomics: bool,
    pub dci_streams: Option<DciStreamsCapabilities>,
    /// The deepest `max_rd_atomic` a DC initiator takes ([`dci_read_atomic_depth`]).
    pub read_atomic_depth: u8,
}

/// A DC initiator's read/atomic depth from what libmlx5 reports (0 or absent: unknown): the
/// smaller known of `max_dc_rd_atom` and `max_dc_init_rd_atom` (`1 << log_max_ra_res_dc`, the
/// bound of mlx5_ib's `validate_rd_atomic`); 1, which every device takes, before rdma-core 47.
pub(crate) fn dci_read_atomic_depth(max_dc_rd_atom: Option<u64>, max_dc_init_rd_atom: Option<u64>) -> u8 {
    [max_dc_rd_atom, max_dc_init_rd_atom]
        .into_iter()
        .flatten()
        .filter(|&depth| depth > 0)
        .min()
        .map_or(1, |depth| depth.min(u64::from(u8::MAX)) as u8)
}

/// Refuses send operations a DC initiator cannot post, whatever the device.
pub(super) fn check_dc_operations(requested: SendOperationFlags) -> Result<(), CreateDcInitiatorErrorKind> {
    if requested.bits() & !DC_SEND_OPERATIONS.bits() != 0 {
        return Err(CreateDcInitiatorErrorKind::UnsupportedSendOperations {
            requested,
            allowed: DC_SEND_OPERATIONS,
        });
    }
    Ok(())
}

/// Decides a DC initiator's init parameters from the request and the device.
///
/// # Errors
///
/// What [`DcInitiatorBuilder::build`] refuses before the library.
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
    if request.max_send_sge > device.max_sge {
        return Err(CreateDcInitiatorErrorKind::TooManyScatterGatherEntries {
            requested: request.max_send_sge,
            max: device.max_sge,
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

/// The largest send request every device with this `max_sge` takes, in bytes: the kernel's
/// `mlx5_ib_query_device` derives `max_sge` as `(min(max_wqe_sz_sq, 512) − 32) / 16`, and its
/// `mlx5_ib_alloc_ucontext` hands libmlx5 `max_wqe_sz_sq` itself as `max_sq_desc_sz`, the bound
/// of `mlx5_calc_send_wqe`: so `max_sq_desc_sz ≥ 16 · max_sge + 32`.
pub(crate) fn guaranteed_request_bytes(max_sge: u32) -> u32 {
    max_sge.saturating_mul(16).saturating_add(32)
}

/// The bytes one DC request takes before rounding, as libmlx5 sizes it (`mlx5_calc_send_wqe`
/// in `verbs.c`): a 16-byte control segment, grown to the largest operation granted (16 more for
/// RDMA's remote address, 32 more for an atomic's), the 48-byte DC address vector, then the
/// larger of the scatter/gather entries (16 bytes each) and the inline data (a 4-byte header,
/// padded to 16). It must not exceed the device's `max_sq_desc_sz` (`max_wqe_sz_sq`, which libmlx5
/// checks) nor its `max_wqe_sz_sq_dc` (which nothing before the device checks).
pub(crate) fn dci_request_bytes(send_ops: SendOperationFlags, max_send_sge: u32, max_inline_data: u32) -> u32 {
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
    gather.max(inline)
}

/// The bytes one DC request takes in the send queue: [`dci_request_bytes`] in 64-byte blocks.
pub(crate) fn dci_request_size(send_ops: SendOperationFlags, max_send_sge: u32, max_inline_data: u32) -> u32 {
    dci_request_bytes(send_ops, max_send_sge, max_inline_data).saturating_add(63) & !63
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
/// (libmlx5's `mlx5_calc_sq_size` rounds its bytes up to a power of two).
pub(crate) fn dci_granted_send_wr(max_send_wr: u32, request_size: u32) -> u32 {
    let request_size = u64::from(request_size.max(64));
    ((u64::from(max_send_wr) * request_size).next_power_of_two() / request_size).min(u64::from(u32::MAX)) as u32
}

impl DciInitParameters {
    /// The send queue `mlx5dv_create_qp` grants these parameters.
    pub(crate) fn granted_max_send_wr(&self) -> u32 {
        let request_size = dci_request_size(self.send_ops, self.max_send_sge, self.max_inline_data);
        dci_granted_send_wr(self.max_send_wr, request_size)
    }
}

/// Checks DCI streams against the device's capabilities: none reported, or a concurrency of 0
/// (libmlx5's `_mlx5dv_query_device` reports the capability on every device, with zeros where
/// there are no streams), is a device without streams.
pub(super) fn check_streams(
    streams: DciStreams, caps: Option<DciStreamsCapabilities>,
) -> Result<(), CreateDcInitiatorErrorKind> {
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
