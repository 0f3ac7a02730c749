//! The reset of one errored DCI stream, `mlx5dv_dci_stream_id_reset` (libmlx5 of rdma-core v37
//! and later), which this crate resolves itself until rdma-mummy-sys binds it.
use std::io;

use sideway::ibverbs::queue_pair::QueuePairState;

use super::DcInitiator;

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

impl DcInitiator {
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
        let reset = crate::mlx5::library::dci_stream_id_reset().ok_or(ResetDciStreamErrorKind::NotSupported)?;
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
