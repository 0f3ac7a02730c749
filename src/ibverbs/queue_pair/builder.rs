//! [`SharedReceiveQueuePairBuilder`], which creates RC and UD queue pairs on a shared receive
//! queue ([`SharedReceiveQueue::create_qp_builder`]), and its [`CreateQueuePairError`].
use std::io;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_qp_init_attr_ex, ibv_qp_init_attr_mask, ibv_qp_type};
use sideway::ibverbs::completion::{CompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::queue_pair::SendOperationFlags;

use super::core::QueuePairCore;
use super::transition::{TransitionTable, RELIABLE_CONNECTION, UNRELIABLE_DATAGRAM};
use super::SharedReceiveQueuePair;
use crate::ibverbs::post_send_guard::{entry, ReliableConnection, Transport, UnreliableDatagram};
use crate::ibverbs::shared_receive_queue::SharedReceiveQueue;
use crate::ibverbs::zeroed::Zeroed;

/// Error returned by [`SharedReceiveQueuePairBuilder::build_rc`] and
/// [`build_ud`](SharedReceiveQueuePairBuilder::build_ud).
#[derive(Debug, thiserror::Error)]
#[error("failed to create queue pair")]
#[non_exhaustive]
pub struct CreateQueuePairError(#[from] pub CreateQueuePairErrorKind);

/// The enum type for [`CreateQueuePairError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateQueuePairErrorKind {
    /// No send completion queue was set up.
    #[error("a send completion queue is required (setup_send_cq)")]
    MissingSendCompletionQueue,
    /// No receive completion queue was set up.
    #[error("a receive completion queue is required (setup_recv_cq)")]
    MissingReceiveCompletionQueue,
    /// The send operations asked for are not all available on this queue-pair type.
    #[error("send operations {requested:?} are not available on this queue pair type (allowed: {allowed:?})")]
    UnsupportedSendOperations {
        /// What was asked for.
        requested: SendOperationFlags,
        /// What the type allows.
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
    /// `max_send_sge` is above the device's `max_sge`.
    #[error("max_send_sge {requested} is above the device's max_sge {max}")]
    TooManyScatterGatherEntries {
        /// What was asked for.
        requested: u32,
        /// The device's limit.
        max: u32,
    },
    /// The provider left an `ibv_qp_ex` entry NULL that the queue pair needs (the builder of a
    /// requested send operation, a batch or data setter): posting would call through it. The
    /// queue pair was destroyed.
    #[error("the provider does not implement `{entry}` for this queue pair")]
    MissingProviderEntry {
        /// The entry's name in `struct ibv_qp_ex`.
        entry: &'static str,
    },
    /// The library call failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}
impl SharedReceiveQueue {
    /// Creates a builder for RC and UD queue pairs that receive through this queue.
    pub fn create_qp_builder(self: &Arc<Self>) -> SharedReceiveQueuePairBuilder {
        SharedReceiveQueuePairBuilder::new(self)
    }
}

/// Builds RC or UD queue pairs that receive through a [`SharedReceiveQueue`], on its protection
/// domain; created by [`SharedReceiveQueue::create_qp_builder`].
#[derive(Debug)]
pub struct SharedReceiveQueuePairBuilder {
    srq: Arc<SharedReceiveQueue>,
    send_cq: Option<GenericCompletionQueue>,
    recv_cq: Option<GenericCompletionQueue>,
    max_send_wr: u32,
    max_send_sge: u32,
    max_inline_data: u32,
    send_ops_flags: Option<SendOperationFlags>,
    sq_sig_all: bool,
}

impl SharedReceiveQueuePairBuilder {
    pub(crate) fn new(srq: &Arc<SharedReceiveQueue>) -> Self {
        Self {
            srq: Arc::clone(srq),
            send_cq: None,
            recv_cq: None,
            max_send_wr: 16,
            max_send_sge: 1,
            max_inline_data: 0,
            send_ops_flags: None,
            sq_sig_all: false,
        }
    }

    /// The completion queue of send completions (required).
    pub fn setup_send_cq(&mut self, send_cq: impl Into<GenericCompletionQueue>) -> &mut Self {
        self.send_cq = Some(send_cq.into());
        self
    }

    /// The completion queue of receive completions (required); receives come from the SRQ.
    pub fn setup_recv_cq(&mut self, recv_cq: impl Into<GenericCompletionQueue>) -> &mut Self {
        self.recv_cq = Some(recv_cq.into());
        self
    }

    /// Capacity of the send queue (default 16).
    pub fn setup_max_send_wr(&mut self, max_send_wr: u32) -> &mut Self {
        self.max_send_wr = max_send_wr;
        self
    }

    /// Scatter/gather entries per send request (default 1).
    pub fn setup_max_send_sge(&mut self, max_send_sge: u32) -> &mut Self {
        self.max_send_sge = max_send_sge;
        self
    }

    /// Inline data per send request in bytes (default 0).
    pub fn setup_max_inline_data(&mut self, max_inline_data: u32) -> &mut Self {
        self.max_inline_data = max_inline_data;
        self
    }

    /// The send operations the queue pair will post, every opcode used (default: all the type has:
    /// sends and writes with and without immediate, reads and atomics on RC; sends on UD).
    pub fn setup_send_ops_flags(&mut self, send_ops_flags: SendOperationFlags) -> &mut Self {
        self.send_ops_flags = Some(send_ops_flags);
        self
    }

    /// Whether every send request generates a completion, whatever its flags (default false).
    pub fn setup_sq_sig_all(&mut self, sq_sig_all: bool) -> &mut Self {
        self.sq_sig_all = sq_sig_all;
        self
    }

    /// Creates a reliable-connection (RC) queue pair.
    pub fn build_rc(&self) -> Result<SharedReceiveQueuePair<ReliableConnection>, CreateQueuePairError> {
        let all = SendOperationFlags::Send
            | SendOperationFlags::SendWithImmediate
            | SendOperationFlags::Write
            | SendOperationFlags::WriteWithImmediate
            | SendOperationFlags::Read
            | SendOperationFlags::AtomicCompareAndSwap
            | SendOperationFlags::AtomicFetchAndAdd;
        self.build(ibv_qp_type::IBV_QPT_RC, &RELIABLE_CONNECTION, all)
    }

    /// Creates an unreliable-datagram (UD) queue pair; its receives include the 40-byte GRH
    /// headroom at the start of each buffer.
    pub fn build_ud(&self) -> Result<SharedReceiveQueuePair<UnreliableDatagram>, CreateQueuePairError> {
        let all = SendOperationFlags::Send | SendOperationFlags::SendWithImmediate;
        self.build(ibv_qp_type::IBV_QPT_UD, &UNRELIABLE_DATAGRAM, all)
    }

    fn build<T: Transport>(
        &self, qp_type: u32, table: &'static TransitionTable, allowed: SendOperationFlags,
    ) -> Result<SharedReceiveQueuePair<T>, CreateQueuePairError> {
        use CreateQueuePairErrorKind as Kind;
        let send_cq = self.send_cq.clone().ok_or(Kind::MissingSendCompletionQueue)?;
        let recv_cq = self.recv_cq.clone().ok_or(Kind::MissingReceiveCompletionQueue)?;
        let send_ops = self.send_ops_flags.unwrap_or(allowed);
        if send_ops.bits() & !allowed.bits() != 0 {
            return Err(Kind::UnsupportedSendOperations {
                requested: send_ops,
                allowed,
            }
            .into());
        }
        let pd = Arc::clone(self.srq.pd());
        let device = crate::ibverbs::query_device_attr(&pd).map_err(Kind::Ibverbs)?;
        let max_qp_wr = device.max_qp_wr.max(0) as u32;
        if self.max_send_wr == 0 || self.max_send_wr > max_qp_wr {
            return Err(Kind::InvalidMaxSendWorkRequests {
                requested: self.max_send_wr,
                max: max_qp_wr,
            }
            .into());
        }
        let max_sge = device.max_sge.max(0) as u32;
        if self.max_send_sge > max_sge {
            return Err(Kind::TooManyScatterGatherEntries {
                requested: self.max_send_sge,
                max: max_sge,
            }
            .into());
        }
        let mut init = Zeroed::<ibv_qp_init_attr_ex>::new();
        // SAFETY: the CQs, SRQ and PD are alive: self holds them, and the queue pair will too.
        unsafe {
            init.send_cq = send_cq.cq().as_ptr();
            init.recv_cq = recv_cq.cq().as_ptr();
            init.srq = self.srq.srq().as_ptr();
            init.pd = pd.pd().as_ptr();
        }
        init.qp_type = qp_type;
        init.sq_sig_all = self.sq_sig_all as i32;
        init.cap.max_send_wr = self.max_send_wr;
        init.cap.max_send_sge = self.max_send_sge;
        init.cap.max_inline_data = self.max_inline_data;
        init.comp_mask =
            (ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS).0;
        init.send_ops_flags = send_ops.bits();
        // SAFETY: init is fully set up and its pointers are alive for the call.
        let qp = unsafe { rdma_mummy_sys::ibv_create_qp_ex(pd.pd().as_ref().context, init.as_mut_ptr()) };
        let qp = NonNull::new(qp).ok_or_else(|| Kind::Ibverbs(io::Error::last_os_error()))?;
        // SAFETY: qp was just created on these parents, with these send operations, and is owned
        // here (a missing provider entry destroys it).
        let mut core =
            unsafe { QueuePairCore::new(qp, table, pd, Some(send_cq), Some(recv_cq), Some(Arc::clone(&self.srq))) };
        // SAFETY: created with these send operations.
        unsafe { core.read_send_view(send_ops) }.map_err(|missing| Kind::MissingProviderEntry { entry: missing.0 })?;
        if qp_type == ibv_qp_type::IBV_QPT_UD && !core.entries().contains(entry::SET_UD_ADDR) {
            return Err(Kind::MissingProviderEntry {
                entry: "wr_set_ud_addr",
            }
            .into());
        }
        let send_view = core.send_view().ok_or(Kind::MissingProviderEntry {
            entry: "ibv_qp_to_qp_ex",
        })?;
        Ok(SharedReceiveQueuePair {
            core,
            send_view,
            max_send_wr: init.cap.max_send_wr,
            max_inline_data: init.cap.max_inline_data,
            _transport: PhantomData,
        })
    }
}
