//! The reset of one errored DCI stream (`mlx5dv_dci_stream_id_reset`, libmlx5 of rdma-core v37
//! and later), which brings a DC initiator with DCI streams back without touching its other
//! streams.
use std::io;

use sideway::ibverbs::queue_pair::QueuePairState;

use super::DcInitiator;
use crate::mlx5::library::mlx5dv_dci_stream_id_reset;

/// Error returned by [`DcInitiator::reset_stream`].
#[derive(Debug, thiserror::Error)]
#[error("failed to reset DCI stream")]
#[non_exhaustive]
pub struct ResetDciStreamError(#[from] pub ResetDciStreamErrorKind);

/// The enum type for [`ResetDciStreamError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResetDciStreamErrorKind {
    /// The DC initiator was created without streams.
    #[error("the DC initiator has no DCI streams")]
    NoStreams,
    /// The DC initiator is not in RTS (2^`log_num_errored` streams errored): recover it instead.
    #[error("the DC initiator is in {state:?}, not RTS: recover it instead of resetting a stream")]
    NotReadyToSend {
        /// The state read from the device.
        state: QueuePairState,
    },
    /// The device, or libmlx5 before rdma-core v37, cannot reset streams (`EOPNOTSUPP` while the
    /// DC initiator is in RTS).
    #[error(
        "the device cannot reset DCI streams (max_log_num_errored 0, no QP context extension, or libmlx5 before v37)"
    )]
    DeviceCannotResetStreams,
    /// The library call failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

impl DcInitiator {
    /// Resets one errored DCI stream with `mlx5dv_dci_stream_id_reset` (libmlx5 v37 and later),
    /// once every request posted on it has completed, flush errors included (its man page).
    ///
    /// # Errors
    ///
    /// [`ResetDciStreamErrorKind`]; [`NotReadyToSend`](ResetDciStreamErrorKind::NotReadyToSend):
    /// [`recover`](Self::recover) it.
    pub fn reset_stream(&mut self, stream_id: u16) -> Result<(), ResetDciStreamError> {
        if self.params.streams.is_none() {
            return Err(ResetDciStreamErrorKind::NoStreams.into());
        }
        // The device's limit, read now (`dci_streams_caps.max_log_num_errored`; 0: no stream can
        // be reset). Not an mlx5 device, which a DC initiator is on, would be one without.
        // SAFETY: the queue pair's context is open while it is.
        let max_log_num_errored = unsafe { crate::mlx5::device_context::query_device_raw(self.qp.context()) }
            .map(|device| device.dci_streams_caps().map_or(0, |caps| caps.max_log_num_errored))
            .or_else(|err| match err.0 {
                crate::mlx5::device_context::QueryMlx5DeviceErrorKind::NotSupported => Ok(0),
                crate::mlx5::device_context::QueryMlx5DeviceErrorKind::Ibverbs(err) => {
                    Err(ResetDciStreamErrorKind::Ibverbs(err))
                },
            })?;
        if max_log_num_errored == 0 {
            return Err(ResetDciStreamErrorKind::DeviceCannotResetStreams.into());
        }
        // libmlx5 checks its cached state, which ibv_modify_qp and ibv_query_qp update as the
        // handle does.
        let state = self.qp.state();
        if state != QueuePairState::ReadyToSend {
            return Err(ResetDciStreamErrorKind::NotReadyToSend { state }.into());
        }
        // SAFETY: the queue pair is alive and exclusively borrowed.
        match unsafe { mlx5dv_dci_stream_id_reset(self.qp.qp().as_ptr(), stream_id) } {
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
