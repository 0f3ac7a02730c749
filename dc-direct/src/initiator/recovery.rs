//! [`DirectDcInitiator::recover`]: back to RTS after an error, the send queue reset as libmlx5
//! resets its own.
//!
//! libmlx5's `mlx5_modify_qp` (`verbs.c`), on a successful move to RESET, cleans the queue
//! pair's CQs (not one whose memory it handed out: `__mlx5_cq_clean` skips
//! `MLX5_CQ_FLAGS_DV_OWNED`), sets its indices to 0 (`mlx5_init_qp_indices`: `sq.head`,
//! `sq.tail`, `sq.cur_post`) and both doorbell-record words to 0; the device starts over at
//! index 0 once the queue pair is brought up again. The direct initiator does the same to its
//! send queue after the move, and refuses to recover while requests are outstanding, whose
//! completions the uncleaned CQ would otherwise still hold. Unlike
//! [`DcInitiator::recover`](sideway_ext::mlx5::dc::initiator::DcInitiator::recover), it never
//! creates the queue pair again where the kernel refuses the move to RESET: the send queue's
//! memory would change under it.
use sideway::ibverbs::queue_pair::QueuePairState;
use sideway_ext::ibverbs::queue_pair::QueuePairAttribute;

use super::{DirectDcInitiator, RecoverDirectDcInitiatorError, RecoverDirectDcInitiatorErrorKind};

impl DirectDcInitiator {
    /// Brings the DC initiator back to RTS after an error completion: RESET, the send queue
    /// back to index 0 with it, then the bring-up of the last [`bring_up`](Self::bring_up).
    /// Poll every outstanding request's completion first (the device completes them all,
    /// flushed, after an error).
    ///
    /// # Errors
    ///
    /// [`RecoverDirectDcInitiatorErrorKind`]: not brought up, requests outstanding, the move to
    /// RESET refused (nothing changed; `EINVAL` from a kernel that cannot reset a DC initiator:
    /// make a new one), or the bring-up after it failed (recover again).
    pub fn recover(&mut self) -> Result<(), RecoverDirectDcInitiatorError> {
        use RecoverDirectDcInitiatorErrorKind::*;
        let params = self.brought_up_with.clone().ok_or(NotBroughtUp)?;
        let outstanding = self.outstanding();
        if outstanding != 0 {
            return Err(RequestsOutstanding { outstanding }.into());
        }
        let mut reset = QueuePairAttribute::new();
        reset.setup_state(QueuePairState::Reset);
        self.dci.modify(&reset).map_err(Reset)?;
        self.posting.reset();
        self.dci.bring_up(&params).map_err(BringUp)?;
        Ok(())
    }
}
