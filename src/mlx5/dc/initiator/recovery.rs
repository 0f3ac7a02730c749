//! How a DC initiator comes back after an error completion: its state read from the device,
//! `recover`, and the reset of one errored DCI stream (`mlx5dv_dci_stream_id_reset`, resolved
//! here until rdma-mummy-sys binds it).
use std::io;
use std::time::{Duration, Instant};

use sideway::ibverbs::queue_pair::{
    ModifyQueuePairError, ModifyQueuePairErrorKind, QueryQueuePairError, QueuePairState,
};

use super::creation::dci_init_attributes;
use super::{DcInitiator, Granted};
use crate::ibverbs::queue_pair::QueuePairAttribute;
use crate::mlx5::dc::queue_pair::create_dc_qp;

/// Error returned by [`DcInitiator::recover`].
#[derive(Debug, thiserror::Error)]
#[error("failed to recover DC initiator")]
#[non_exhaustive]
pub struct RecoverDcInitiatorError(#[from] pub RecoverDcInitiatorErrorKind);

/// The enum type for [`RecoverDcInitiatorError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoverDcInitiatorErrorKind {
    /// The DC initiator was never brought up with [`DcInitiator::bring_up`].
    #[error("the DC initiator was not brought up with bring_up")]
    NotBroughtUp,
    /// A transition failed.
    #[error(transparent)]
    Modify(#[from] ModifyQueuePairError),
    /// Creating the DC initiator again failed: it is still the old queue pair, in its old state.
    #[error("the kernel refused the move to RESET, and creating the DC initiator again failed")]
    Rebuild(#[source] io::Error),
    /// The new queue pair lacked a provider entry and was destroyed: the DC initiator is still the
    /// old queue pair, in its old state.
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
    /// had a RESET branch), so the DC initiator was created again and brought up: a new queue
    /// pair, whose number is [`DcInitiator::qp_number`] now.
    Rebuilt {
        /// The number of the queue pair it replaced.
        previous_qp_number: u32,
    },
}

impl DcInitiator {
    /// Reads the state from the device (`ibv_query_qp`): after an error completion, whether the
    /// whole DC initiator is in ERR ([`recover`](Self::recover) it) or, with DCI streams, only
    /// a stream errored ([`reset_stream`](Self::reset_stream)) and it is still RTS.
    pub fn query_state(&mut self) -> Result<QueuePairState, QueryQueuePairError> {
        self.qp.query_state()
    }

    /// Reads the state every millisecond until it is ERR or `timeout` has passed, and returns the
    /// last one read (pyverbs' `test_dc_stream_qp_recovery` waits up to one second).
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

    /// Brings a DC initiator in ERR back to RTS in one call, with the attributes of the last
    /// [`bring_up`](Self::bring_up), through RESET or by creating it again ([`DcRecovery`]).
    ///
    /// Poll its failed completions first: libmlx5 cleans the send CQ of its completions.
    pub fn recover(&mut self) -> Result<DcRecovery, RecoverDcInitiatorError> {
        let attributes = self
            .brought_up_with
            .clone()
            .ok_or(RecoverDcInitiatorErrorKind::NotBroughtUp)?;
        let recovery = match self.qp.modify(&reset_attribute()) {
            Ok(()) => DcRecovery::Reset,
            Err(err) if matches!(&err.0, ModifyQueuePairErrorKind::Ibverbs(errno) if errno.raw_os_error() == Some(libc::EINVAL)) => {
                self.rebuild()?
            },
            Err(err) => return Err(RecoverDcInitiatorErrorKind::Modify(err).into()),
        };
        for attr in attributes.steps() {
            self.qp.modify(attr).map_err(RecoverDcInitiatorErrorKind::Modify)?;
        }
        Ok(recovery)
    }

    /// Creates the DC initiator again and puts the new queue pair in the old one's place.
    fn rebuild(&mut self) -> Result<DcRecovery, RecoverDcInitiatorError> {
        let previous_qp_number = self.qp.qp_number();
        let (mut init, mut mlx5) = dci_init_attributes(&self.params);
        // SAFETY: the queue pair is alive; its PD and CQ fields are read.
        let old = unsafe { self.qp.qp().as_ref() };
        // On the same parents (the PD may be a parent domain).
        (init.pd, init.send_cq, init.recv_cq) = (old.pd, old.send_cq, old.recv_cq);
        // SAFETY: init's PD and CQ pointers are this queue pair's parents, alive while it is; the
        // context is theirs.
        let qp = unsafe { create_dc_qp(self.qp.context(), &mut init, &mut mlx5) }.map_err(|err| {
            RecoverDcInitiatorErrorKind::Rebuild(err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP)))
        })?;
        // The new queue pair's entries are checked before it takes the old one's place: a
        // failed check leaves the DC initiator as it was, the old queue pair and its views.
        // SAFETY: a DC initiator's queue pair, created with these send operations.
        let send = match unsafe { Self::attach(qp, &self.params) } {
            Ok(send) => send,
            Err(entry) => {
                // SAFETY: the new handle came from the create call above, is owned by no one and
                // is destroyed once.
                let ret = unsafe { rdma_mummy_sys::ibv_destroy_qp(qp.as_ptr()) };
                crate::ibverbs::check_destroy("ibv_destroy_qp", ret);
                return Err(RecoverDcInitiatorErrorKind::RebuildMissingProviderEntry { entry }.into());
            },
        };
        // SAFETY: qp was just created on the same parents, in RESET; its views replace the old
        // ones at once.
        unsafe { self.qp.replace(qp) };
        self.send = send;
        // The same request is granted the same sizes; keep what this one was granted.
        self.granted = Granted::of(&init);
        Ok(DcRecovery::Rebuilt { previous_qp_number })
    }
}

/// The first step of [`DcInitiator::recover`]: the move to RESET, with the state alone (mlx5_ib's
/// `modify_dci_qp_is_ok` allows nothing else with it).
pub(crate) fn reset_attribute() -> QueuePairAttribute {
    let mut reset = QueuePairAttribute::new();
    reset.setup_state(QueuePairState::Reset);
    reset
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
    /// The DC initiator is not in RTS (2^`log_num_errored` streams errored): recover it instead.
    #[error("the DC initiator is in {state:?}, not RTS: recover it instead of resetting a stream")]
    NotReadyToSend {
        /// The state read from the device.
        state: QueuePairState,
    },
    /// The device cannot reset streams (`EOPNOTSUPP` while the DC initiator is in RTS).
    #[error("the device cannot reset DCI streams (max_log_num_errored 0 or no QP context extension)")]
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
        let reset = crate::mlx5::library::dci_stream_id_reset().ok_or(ResetDciStreamErrorKind::NotSupported)?;
        // libmlx5 checks its cached state, which ibv_modify_qp and ibv_query_qp update as the
        // handle does.
        let state = self.qp.state();
        if state != QueuePairState::ReadyToSend {
            return Err(ResetDciStreamErrorKind::NotReadyToSend { state }.into());
        }
        // SAFETY: the queue pair is alive and exclusively borrowed; the function has the C
        // signature it was resolved with.
        match unsafe { reset(self.qp.qp().as_ptr(), stream_id) } {
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
