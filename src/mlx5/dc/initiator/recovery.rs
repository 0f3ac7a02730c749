//! How a DC initiator comes back after an error completion: its state read from the device,
//! and `recover`.
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
    /// a stream errored and it is still RTS.
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
