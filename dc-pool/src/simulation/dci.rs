//! One simulated DC initiator without a pool: what a program that posts on one
//! [`DcInitiator`](sideway_ext::mlx5::dc::initiator::DcInitiator) runs on the fabric. The builder, the
//! fabric's address handles (the route `setup_dc_addr` takes) and its completion queue, and the
//! initiator's posting, through the guard a `DcInitiator` posts with.
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::mlx5dv_qp_ex;
use sideway::ibverbs::address::Gid;
use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::completion_queue::SimulatedCompletionQueue;
use super::initiator::SimulatedInitiator;
use super::{Shared, SimulatedFabric};
use crate::initiator::{PoolInitiator, StreamResetRefusal};
use sideway_ext::ibverbs::post_send_guard::{PostSendError, PostSendGuard, WorkRequestHandle};
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
#[cfg(doc)]
use sideway_ext::mlx5::dc::initiator::CreateDcInitiatorErrorKind;
use sideway_ext::mlx5::dc::initiator::{plan_dci, DciDevice, DciRequest};
use sideway_ext::mlx5::dc::initiator::{
    CreateDcInitiatorError, DcContext, DcRecovery, DcRoute, DcSend, DciStreams, DynamicallyConnected,
};

use super::route::{SimulatedDcAddress, SimulatedDcStreamAddress};
use sideway_ext::mlx5::device_attributes::DciStreamsCapabilities;
use sideway_ext::mlx5::send_wqe_sizes::SendWqeSizes;

/// The device the fabric's initiators are created on, as the hardware builder's rules read one
/// (`plan_dci`): a ConnectX's `max_qp_wr` of 2^15 (mlx5_ib's `1 << log_max_qp_sz`), no atomics
/// (not simulated), DCI streams up to the fabric's 2^16, and send request sizes it does not report
/// (the fabric does not simulate them), so no request is refused for its size.
const FABRIC_DEVICE: DciDevice = DciDevice {
    max_qp_wr: 1 << 15,
    max_sge: 1,
    atomics: false,
    dci_streams: Some(DciStreamsCapabilities::new(16, 16)),
    read_atomic_depth: 1,
    send_wqe_sizes: SendWqeSizes::guaranteed(1),
};

impl SimulatedFabric {
    /// Creates one DC initiator on it, without a pool, as
    /// [`create_dci_builder`](sideway_ext::mlx5::extension::DcProtectionDomainExt::create_dci_builder)
    /// does on a device; post on it as on a
    /// [`DcInitiator`](sideway_ext::mlx5::dc::initiator::DcInitiator) and poll its completions from
    /// [`create_cq`](Self::create_cq). Defaults as a simulated pool's initiators: 64 requests,
    /// 64 bytes of inline data, no streams.
    pub fn create_dci_builder(&self) -> SimulatedDciBuilder {
        SimulatedDciBuilder {
            fabric: Shared::clone(&self.fabric),
            max_send_wr: 64,
            max_inline_data: 64,
            streams: None,
        }
    }

    /// The address handle that reaches `endpoint` on this fabric, what
    /// [`DcEndpoint::create_ah`] makes on a device: the route a request's `setup_dc_addr` takes.
    /// The fabric routes by DCT number, so the handle names no target: any endpoint has one.
    pub fn create_ah(&self, endpoint: &DcEndpoint) -> Arc<SimulatedAddressHandle> {
        Arc::new(SimulatedAddressHandle {
            lid: endpoint.lid(),
            gid: endpoint.gid(),
        })
    }

    /// A handle on its completion queue: the fabric has one, which every initiator on it completes
    /// into (as initiators sharing one send CQ do). Poll it with
    /// [`poll_work_completions`](sideway_ext::ibverbs::extension::CompletionQueueExt::poll_work_completions);
    /// each poll is one tick, as for a pool.
    pub fn create_cq(&self) -> SimulatedCompletionQueue {
        SimulatedCompletionQueue::new(&self.fabric)
    }
}

/// Builds one [`SimulatedInitiator`] without a pool, as
/// [`DcInitiatorBuilder`](sideway_ext::mlx5::dc::initiator::DcInitiatorBuilder) builds a DC initiator
/// (from [`SimulatedFabric::create_dci_builder`]). It is created in RTS (the fabric models no
/// bring-up), and completes into the fabric's completion queue.
#[derive(Debug, Clone)]
pub struct SimulatedDciBuilder {
    fabric: Shared,
    max_send_wr: u32,
    max_inline_data: u32,
    streams: Option<DciStreams>,
}

impl SimulatedDciBuilder {
    /// Its send queue (`max_send_wr`, default 64): at least 1, and as many as the queue's basic
    /// blocks hold (see [`build`](Self::build)).
    pub fn setup_max_send_wr(&mut self, max_send_wr: u32) -> &mut Self {
        self.max_send_wr = max_send_wr;
        self
    }

    /// Its inline data (`max_inline_data`, default 64): more in one request is refused at post.
    pub fn setup_max_inline_data(&mut self, max_inline_data: u32) -> &mut Self {
        self.max_inline_data = max_inline_data;
        self
    }

    /// DCI streams (default none).
    pub fn setup_dci_streams(&mut self, streams: DciStreams) -> &mut Self {
        self.streams = Some(streams);
        self
    }

    /// Creates the initiator on the fabric, in RTS, held to the hardware builder's rules: its
    /// send queue is what libmlx5 would grant (the requests' bytes rounded up to a power of two,
    /// so often more than asked: [`max_send_wr`](SimulatedInitiator::max_send_wr)); its inline
    /// data is what was asked.
    ///
    /// # Errors
    ///
    /// As [`DcInitiatorBuilder::build`](sideway_ext::mlx5::dc::initiator::DcInitiatorBuilder::build)
    /// on a device with a `max_qp_wr` of 2^15 and no atomics:
    /// [`InvalidMaxSendWorkRequests`](CreateDcInitiatorErrorKind::InvalidMaxSendWorkRequests)
    /// (0, or over 2^15), [`SendQueueTooLarge`](CreateDcInitiatorErrorKind::SendQueueTooLarge)
    /// (more requests than the queue's basic blocks hold),
    /// [`DciStreamsTooLarge`](CreateDcInitiatorErrorKind::DciStreamsTooLarge) (over 2^16 streams).
    pub fn build(&self) -> Result<SimulatedInitiator, CreateDcInitiatorError> {
        let request = DciRequest {
            max_send_wr: self.max_send_wr,
            max_send_sge: 1,
            max_inline_data: self.max_inline_data,
            send_ops: None,
            streams: self.streams,
            sq_sig_all: false,
        };
        let params = plan_dci(&request, &FABRIC_DEVICE)?;
        let streams = params
            .streams
            .map(|streams| (streams.log_num_concurrent, streams.log_num_errored));
        Ok(SimulatedInitiator::new(
            &self.fabric,
            params.granted_max_send_wr(),
            params.max_inline_data,
            streams,
        ))
    }
}

/// A simulated fabric's address handle ([`SimulatedFabric::create_ah`]): the route of a request
/// to a simulated target, which only a simulated initiator takes (a
/// [`DcInitiator`](sideway_ext::mlx5::dc::initiator::DcInitiator) refuses a request routed by one at
/// post, before the provider: `OperationNotEnabled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulatedAddressHandle {
    lid: u16,
    gid: Gid,
}

impl DcRoute for SimulatedAddressHandle {
    type Address = SimulatedDcAddress;
    type StreamAddress = SimulatedDcStreamAddress;

    fn address(&self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64) -> Self::Address {
        SimulatedDcAddress::new(mlx5_qp_ex, dct_number, dc_key)
    }

    fn stream_address(
        &self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> Self::StreamAddress {
        SimulatedDcAddress::new(mlx5_qp_ex, dct_number, dc_key).on_stream(stream_id)
    }
}

/// Error returned by [`SimulatedInitiator::recover`].
#[derive(Debug, thiserror::Error)]
#[error("failed to recover simulated DC initiator")]
#[non_exhaustive]
pub struct RecoverSimulatedInitiatorError(#[from] pub RecoverSimulatedInitiatorErrorKind);

/// The enum type for [`RecoverSimulatedInitiatorError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoverSimulatedInitiatorErrorKind {
    /// The fabric refused it: a [`refuse_recovery`](SimulatedInitiator::refuse_recovery) fault,
    /// or a step the kernel's transition table does not take.
    #[error("the fabric refused the recovery: {reason}")]
    Refused {
        /// Why.
        reason: String,
    },
}

/// Error returned by [`SimulatedInitiator::reset_stream`].
#[derive(Debug, thiserror::Error)]
#[error("failed to reset simulated DCI stream")]
#[non_exhaustive]
pub struct ResetSimulatedStreamError(#[from] pub ResetSimulatedStreamErrorKind);

/// The enum type for [`ResetSimulatedStreamError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResetSimulatedStreamErrorKind {
    /// The initiator was created without streams.
    #[error("the simulated DC initiator has no DCI streams")]
    NoStreams,
    /// The initiator is in ERR, not RTS: 2^`log_num_errored` streams errored; recover it
    /// instead (libmlx5 refuses the reset with `EOPNOTSUPP`).
    #[error("the simulated DC initiator is in ERR: recover it instead of resetting a stream")]
    NotReadyToSend,
    /// The stream still holds requests not yet flushed: poll their flush completions first
    /// (mlx5dv_dci_stream_id_reset(3): "once all stream_id WR's are flushed").
    #[error("the stream still holds requests not flushed")]
    NotFlushed,
}

impl SimulatedInitiator {
    /// Starts a batch of send requests, as
    /// [`DcInitiator::start_post_send`](sideway_ext::mlx5::dc::initiator::DcInitiator::start_post_send):
    /// each request is addressed with `setup_dc_addr` (a [`SimulatedAddressHandle`], the DCT
    /// number and the DC key) between its operation and its data.
    pub fn start_post_send(&mut self) -> PostSendGuard<'_, DynamicallyConnected> {
        let max_inline_data = self.granted_inline_data();
        let (qp_ex, entries, mlx5) = self.send_view();
        // SAFETY: the views are this initiator's own tables, alive and exclusively borrowed for
        // the guard's lifetime (`&mut self`), with the entries read from them; the context is its
        // mlx5 view.
        let mut guard = unsafe { PostSendGuard::start(qp_ex, entries, DcContext::from_raw(mlx5)) };
        guard.set_max_inline_data(max_inline_data);
        guard
    }

    /// Posts one send request described by `request` from its operation on, as
    /// [`DcInitiator::post_send_one`](sideway_ext::mlx5::dc::initiator::DcInitiator::post_send_one).
    ///
    /// # Errors
    ///
    /// As [`PostSendGuard::post`].
    pub fn post_send_one(
        &mut self, wr_id: u64, wr_flags: WorkRequestFlags,
        request: impl FnOnce(WorkRequestHandle<'_, DynamicallyConnected>),
    ) -> Result<(), PostSendError> {
        let mut guard = self.start_post_send();
        request(guard.construct_wr(wr_id, wr_flags));
        guard.post()
    }

    /// Its send queue's capacity.
    pub fn max_send_wr(&self) -> u32 {
        PoolInitiator::max_send_wr(self)
    }

    /// The longest inline data one request takes.
    pub fn max_inline_data(&self) -> u32 {
        self.granted_inline_data()
    }

    /// Brings it back to RTS after an error, as
    /// [`DcInitiator::recover`](sideway_ext::mlx5::dc::initiator::DcInitiator::recover): its
    /// completions not yet polled leave the CQ and its send queue empties; on a kernel without
    /// the RESET branch ([`SimulatedFabric::set_kernel_without_dci_reset`]) it is created again,
    /// with a new queue pair number ([`DcRecovery::Rebuilt`]).
    ///
    /// # Errors
    ///
    /// The fabric refused it: [`RecoverSimulatedInitiatorError`].
    pub fn recover(&mut self) -> Result<DcRecovery, RecoverSimulatedInitiatorError> {
        let previous_qp_number = self.qp_number();
        self.recover_in_fabric()
            .map_err(|e| RecoverSimulatedInitiatorErrorKind::Refused { reason: e.to_string() })?;
        Ok(if self.qp_number() == previous_qp_number {
            DcRecovery::Reset
        } else {
            DcRecovery::Rebuilt { previous_qp_number }
        })
    }
}

impl SimulatedInitiator {
    /// Resets DCI stream `stream_id` after its error, as
    /// [`DcInitiator::reset_stream`](sideway_ext::mlx5::dc::initiator::DcInitiator::reset_stream): its
    /// later requests execute again.
    ///
    /// # Errors
    ///
    /// No streams, the initiator in ERR, or requests of the stream not flushed yet:
    /// [`ResetSimulatedStreamError`].
    pub fn reset_stream(&mut self, stream_id: u16) -> Result<(), ResetSimulatedStreamError> {
        if PoolInitiator::stream_count(self) == 0 {
            return Err(ResetSimulatedStreamErrorKind::NoStreams.into());
        }
        self.reset_stream_in_fabric(stream_id).map_err(|refusal| {
            match refusal {
                StreamResetRefusal::NotReadyToSend => ResetSimulatedStreamErrorKind::NotReadyToSend,
                // The fabric's only other refusal.
                StreamResetRefusal::Failed(_) => ResetSimulatedStreamErrorKind::NotFlushed,
            }
            .into()
        })
    }
}

impl DcSend for SimulatedInitiator {
    type AddressHandle = SimulatedAddressHandle;

    fn qp_number(&self) -> u32 {
        SimulatedInitiator::qp_number(self)
    }

    fn max_send_wr(&self) -> u32 {
        SimulatedInitiator::max_send_wr(self)
    }

    fn max_inline_data(&self) -> u32 {
        SimulatedInitiator::max_inline_data(self)
    }

    fn start_post_send(&mut self) -> PostSendGuard<'_, DynamicallyConnected> {
        SimulatedInitiator::start_post_send(self)
    }
}
