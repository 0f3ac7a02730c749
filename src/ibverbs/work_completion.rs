//! Work completions with every field of `struct ibv_wc`, polled with `ibv_poll_cq` into a buffer
//! the caller owns (see [`CompletionQueueExt::poll_work_completions`]).
//!
//! sideway's pollers do not expose the queue pair number or the source queue pair of a
//! completion, which receive completions from a shared receive queue need (which queue pair did
//! this message arrive on?).
//!
//! [`CompletionQueueExt::poll_work_completions`]: super::extension::CompletionQueueExt::poll_work_completions
//!
//! # Reference
//!
//! - RDMAmojo: [`ibv_poll_cq`](https://www.rdmamojo.com/2013/02/15/ibv_poll_cq/)
use std::mem::MaybeUninit;

use rdma_mummy_sys::ibv_wc;
use sideway::ibverbs::completion::{WorkCompletionOperationType, WorkCompletionStatus};

/// `IBV_WC_GRH`: the receive buffer starts with the 40-byte GRH (UD).
const WC_GRH: u32 = 1 << 0;
/// `IBV_WC_WITH_IMM`: the completion carries immediate data.
const WC_WITH_IMM: u32 = 1 << 1;

/// One work completion (`struct ibv_wc`).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct WorkCompletion(ibv_wc);

impl Default for WorkCompletion {
    fn default() -> Self {
        // SAFETY: ibv_wc is plain data for which all zeroes is valid.
        Self(unsafe { MaybeUninit::zeroed().assume_init() })
    }
}

impl std::fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkCompletion")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status())
            .field("opcode", &self.0.opcode)
            .field("byte_len", &self.byte_len())
            .field("qp_number", &self.qp_number())
            .field("src_qp", &self.src_qp())
            .finish()
    }
}

impl WorkCompletion {
    /// The `wr_id` of the request that completed (for a receive on a shared receive queue: of the
    /// receive request posted on the SRQ).
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    /// The completion's status.
    pub fn status(&self) -> WorkCompletionStatus {
        WorkCompletionStatus::from(self.0.status)
    }

    /// Whether the status is success.
    pub fn is_success(&self) -> bool {
        self.0.status == 0
    }

    /// The raw status value (`enum ibv_wc_status`).
    pub fn status_raw(&self) -> u32 {
        self.0.status
    }

    /// The operation that completed (valid only on success).
    pub fn opcode(&self) -> WorkCompletionOperationType {
        WorkCompletionOperationType::from(self.0.opcode)
    }

    /// The vendor's error syndrome, for failed completions.
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }

    /// Bytes received (receive completions; includes the 40-byte GRH on UD).
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// The number of the local queue pair the request was on: for a receive through a shared
    /// receive queue, the queue pair the message arrived on.
    pub fn qp_number(&self) -> u32 {
        self.0.qp_num
    }

    /// The remote queue pair that sent the message (UD receives).
    pub fn src_qp(&self) -> u32 {
        self.0.src_qp
    }

    /// The immediate data, in host byte order, when the completion carries some.
    pub fn imm_data(&self) -> Option<u32> {
        // SAFETY: the union holds immediate data when IBV_WC_WITH_IMM is set.
        (self.0.wc_flags & WC_WITH_IMM != 0)
            .then(|| u32::from_be(unsafe { self.0.imm_data_invalidated_rkey_union.imm_data }))
    }

    /// Whether the receive buffer starts with a 40-byte GRH (UD).
    pub fn has_grh(&self) -> bool {
        self.0.wc_flags & WC_GRH != 0
    }

    /// The sender's LID (UD receives on InfiniBand).
    pub fn slid(&self) -> u16 {
        self.0.slid
    }

    /// The service level (UD receives).
    pub fn sl(&self) -> u8 {
        self.0.sl
    }

    /// The P_Key index (GSI queue pairs).
    pub fn pkey_index(&self) -> u16 {
        self.0.pkey_index
    }
}
