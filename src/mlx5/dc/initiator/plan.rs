//! This crate's own: a DC initiator's request checked against the device before it is built
//! ([`DcInitiatorBuilder::planned_max_send_wr`]), every refusal named, its send queue sized as
//! libmlx5 sizes it (`mlx5_calc_send_wqe`, `mlx5_calc_sq_size`), so that a pool sizes its
//! completion queue before it creates anything. `build` itself leaves these limits to libmlx5
//! and the kernel, as sideway's queue pair builder does.
use sideway::ibverbs::queue_pair::SendOperationFlags;

use super::creation::{check_dc_operations, DciInitParameters, DciRequest};
use super::{CreateDcInitiatorErrorKind, DcInitiatorBuilder, DciStreams, DC_ATOMIC_OPERATIONS};
use crate::mlx5::device_attributes::DciStreamsCapabilities;

/// Error returned by [`DcInitiatorBuilder::planned_max_send_wr`].
#[derive(Debug, thiserror::Error)]
#[error("the DC initiator asked for does not fit the device")]
#[non_exhaustive]
pub struct PlanDcInitiatorError(#[from] pub PlanDcInitiatorErrorKind);

impl PlanDcInitiatorError {
    /// Whether DC, or the DCI streams asked for, is not available on this device.
    pub fn is_not_supported(&self) -> bool {
        matches!(
            self.0,
            PlanDcInitiatorErrorKind::Create(CreateDcInitiatorErrorKind::NotSupported)
                | PlanDcInitiatorErrorKind::DciStreamsNotSupported
        )
    }
}

/// The enum type for [`PlanDcInitiatorError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanDcInitiatorErrorKind {
    /// What `build` refuses before the library: send operations that are not DC operations,
    /// atomics on a device without them, no mlx5 device or library.
    #[error(transparent)]
    Create(#[from] CreateDcInitiatorErrorKind),
    /// `max_send_wr` is out of range.
    #[error("max_send_wr {requested} must be between 1 and the device's max_qp_wr {max}")]
    InvalidMaxSendWorkRequests {
        /// What was asked for.
        requested: u32,
        /// The device's limit.
        max: u32,
    },
    /// The send queue would take more basic blocks than the device has (libmlx5's `mlx5_calc_sq_size`).
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
    /// `max_send_sge` is above the device's.
    #[error("max_send_sge {requested} is above the device's max_sge {max}")]
    TooManyScatterGatherEntries {
        /// What was asked for.
        requested: u32,
        /// The device's limit.
        max: u32,
    },
    /// DCI streams on a device without them (e.g. a ConnectX-6 that is not a Dx).
    #[error("the device has no DCI streams (dci_streams_caps.max_log_num_concurent is 0 or not reported)")]
    DciStreamsNotSupported,
    /// A DCI-streams size is above the device's.
    #[error("DCI streams: {limit} {requested} is above the device's {max}")]
    DciStreamsTooLarge {
        /// Which limit: `log_num_concurent` or `log_num_errored`.
        limit: &'static str,
        /// What was asked for.
        requested: u8,
        /// The device's maximum.
        max: u8,
    },
}

/// What the device reports that decides a DC initiator's limits: `ibv_query_device`'s
/// `max_qp_wr`, `max_sge` and `atomic_cap`, and `mlx5dv_query_device`'s `dci_streams_caps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DciDevice {
    max_qp_wr: u32,
    max_sge: u32,
    /// `atomic_cap` is not `IBV_ATOMIC_NONE` (libmlx5 sets `atomics_enabled` from it).
    atomics: bool,
    dci_streams: Option<DciStreamsCapabilities>,
}

impl DcInitiatorBuilder {
    /// The send queue [`build`](Self::build) will be granted (libmlx5 rounds the queue's bytes up
    /// to a power of two), after checking the request against the device (`ibv_query_device`,
    /// `mlx5dv_query_device`): each limit `build` leaves to libmlx5 and the kernel, which refuse
    /// it with a bare `EINVAL`, is refused here by name. Creates nothing.
    pub fn planned_max_send_wr(&self) -> Result<u32, PlanDcInitiatorError> {
        if let Some(requested) = self.request.send_ops {
            check_dc_operations(requested).map_err(PlanDcInitiatorErrorKind::from)?;
        }
        let device = self.query_dci_device().map_err(PlanDcInitiatorErrorKind::from)?;
        Ok(plan_dci(&self.request, &device)?.granted_max_send_wr())
    }

    /// What the device reports that decides a DC initiator's limits.
    fn query_dci_device(&self) -> Result<DciDevice, CreateDcInitiatorErrorKind> {
        let (mlx5, device) = self.query_device()?;
        Ok(DciDevice {
            max_qp_wr: device.max_qp_wr.max(0) as u32,
            max_sge: device.max_sge.max(0) as u32,
            atomics: device.atomic_cap != rdma_mummy_sys::ibv_atomic_cap::IBV_ATOMIC_NONE,
            dci_streams: mlx5.dci_streams_caps(),
        })
    }
}

/// Decides a DC initiator's init parameters from the request and the device.
fn plan_dci(request: &DciRequest, device: &DciDevice) -> Result<DciInitParameters, PlanDcInitiatorErrorKind> {
    let params = request.init_parameters(device.atomics)?;
    if request.max_send_wr == 0 || request.max_send_wr > device.max_qp_wr {
        return Err(PlanDcInitiatorErrorKind::InvalidMaxSendWorkRequests {
            requested: request.max_send_wr,
            max: device.max_qp_wr,
        });
    }
    if request.max_send_sge > device.max_sge {
        return Err(PlanDcInitiatorErrorKind::TooManyScatterGatherEntries {
            requested: request.max_send_sge,
            max: device.max_sge,
        });
    }
    let request_size = dci_request_size(params.send_ops, request.max_send_sge, request.max_inline_data);
    let max = dci_max_send_wr(device.max_qp_wr, request_size);
    if request.max_send_wr > max {
        return Err(PlanDcInitiatorErrorKind::SendQueueTooLarge {
            requested: request.max_send_wr,
            max,
            request_size,
            max_qp_wr: device.max_qp_wr,
        });
    }
    if let Some(streams) = request.streams {
        check_streams(streams, device.dci_streams)?;
    }
    Ok(params)
}

/// The bytes one DC request takes before rounding, as libmlx5 sizes it (`mlx5_calc_send_wqe`
/// in `verbs.c`): a 16-byte control segment, grown to the largest operation granted (16 more for
/// RDMA's remote address, 32 more for an atomic's), the 48-byte DC address vector, then the
/// larger of the scatter/gather entries (16 bytes each) and the inline data (a 4-byte header,
/// padded to 16). It must not exceed the device's `max_sq_desc_sz` (`max_wqe_sz_sq`, which libmlx5
/// checks) nor its `max_wqe_sz_sq_dc` (which nothing before the device checks).
fn dci_request_bytes(send_ops: SendOperationFlags, max_send_sge: u32, max_inline_data: u32) -> u32 {
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
fn dci_request_size(send_ops: SendOperationFlags, max_send_sge: u32, max_inline_data: u32) -> u32 {
    dci_request_bytes(send_ops, max_send_sge, max_inline_data).saturating_add(63) & !63
}

/// The most requests of `request_size` bytes a send queue holds on a device whose `max_qp_wr` is
/// read as its number of 64-byte basic blocks (libmlx5 `mlx5_calc_sq_size`: the queue is the
/// requests' bytes rounded up to a power of two, at most `max_send_wqebb` blocks, which the
/// kernel's `mlx5_ib_alloc_ucontext` sets to `1 << log_max_qp_sz`, as `max_qp_wr` was before
/// kernels that report fewer): `max_qp_wr` itself at most.
fn dci_max_send_wr(max_qp_wr: u32, request_size: u32) -> u32 {
    let blocks = match max_qp_wr {
        0 => return 0,
        n => 1u64 << (31 - n.leading_zeros()),
    };
    ((blocks * 64) / u64::from(request_size.max(64))).min(u64::from(max_qp_wr)) as u32
}

/// The requests a send queue of `max_send_wr` requests of `request_size` bytes is granted
/// (libmlx5's `mlx5_calc_sq_size` rounds its bytes up to a power of two).
fn dci_granted_send_wr(max_send_wr: u32, request_size: u32) -> u32 {
    let request_size = u64::from(request_size.max(64));
    ((u64::from(max_send_wr) * request_size).next_power_of_two() / request_size).min(u64::from(u32::MAX)) as u32
}

impl DciInitParameters {
    /// The send queue `mlx5dv_create_qp` grants these parameters.
    fn granted_max_send_wr(&self) -> u32 {
        let request_size = dci_request_size(self.send_ops, self.max_send_sge, self.max_inline_data);
        dci_granted_send_wr(self.max_send_wr, request_size)
    }
}

/// Checks DCI streams against the device's capabilities: none reported, or a concurrency of 0
/// (libmlx5's `_mlx5dv_query_device` reports the capability on every device, with zeros where
/// there are no streams), is a device without streams.
fn check_streams(streams: DciStreams, caps: Option<DciStreamsCapabilities>) -> Result<(), PlanDcInitiatorErrorKind> {
    let caps = caps
        .filter(|caps| caps.max_log_num_concurrent > 0)
        .ok_or(PlanDcInitiatorErrorKind::DciStreamsNotSupported)?;
    for (limit, requested, max) in [
        (
            "log_num_concurent",
            streams.log_num_concurrent,
            caps.max_log_num_concurrent,
        ),
        ("log_num_errored", streams.log_num_errored, caps.max_log_num_errored),
    ] {
        if requested > max {
            return Err(PlanDcInitiatorErrorKind::DciStreamsTooLarge { limit, requested, max });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The plan's refusals and its sizing, against the reference rules.
    use super::*;

    #[test]
    fn streams_are_checked_against_the_device_with_the_limit_named() {
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
            Err(PlanDcInitiatorErrorKind::DciStreamsNotSupported)
        ));
        let errored = DciStreams {
            log_num_errored: 3,
            ..ok
        };
        assert!(matches!(
            check_streams(errored, Some(caps)),
            Err(PlanDcInitiatorErrorKind::DciStreamsTooLarge {
                limit: "log_num_errored",
                requested: 3,
                max: 2
            })
        ));
    }

    /// libmlx5 rounds the queue's bytes up to a power of two (20 requests of 128 bytes: 32).
    #[test]
    fn the_plan_rounds_the_send_queue_as_libmlx5() {
        let request = DciRequest {
            max_send_wr: 20,
            max_send_sge: 1,
            max_inline_data: 0,
            send_ops: None,
            streams: None,
            sq_sig_all: false,
        };
        let device = DciDevice {
            max_qp_wr: 1 << 15,
            max_sge: 30,
            atomics: false,
            dci_streams: None,
        };
        let planned = plan_dci(&request, &device).expect("planned");
        assert_eq!(planned.granted_max_send_wr(), 32);
    }
}
