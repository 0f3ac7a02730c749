//! [`DriverQueuePair`], what the queue pairs a provider's direct verbs create (`IBV_QPT_DRIVER`,
//! such as mlx5's DC target) share: the handle and the `Arc`s of its parents, released after it
//! is destroyed, its state, and `ibv_modify_qp` whose refusals the provider type's transition
//! table explains.
//!
//! Such a queue pair does not implement [`QueuePair`](super::queue_pair::QueuePair): its type is
//! [`Driver`](super::queue_pair::QueuePairType::Driver), whose transitions sideway's tables do not
//! know, and its posting is the provider's. Its public type wraps this core and says which table
//! applies.
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_context, ibv_destroy_qp, ibv_gid_entry, ibv_port_attr, ibv_qp};

use super::completion::GenericCompletionQueue;
use super::protection_domain::ProtectionDomain;
use super::queue_pair::{
    modify_qp, ModifyQueuePairError, QueuePairAttribute, QueuePairAttributeMask, QueuePairState, QueuePairStateTable,
};
use super::shared_receive_queue::SharedReceiveQueue;
use super::source_gid::{query_gid_entry, read_gid_table, SourceGidError};

/// A queue pair created by a provider's direct verbs, owned: destroyed on drop, before its
/// parents.
///
/// Its state is kept here, as of the last [`modify`](Self::modify), rather than read from the C
/// struct that libibverbs writes during `ibv_modify_qp`: every call that lets the library write
/// the queue pair takes `&mut self`.
pub(crate) struct DriverQueuePair {
    qp: NonNull<ibv_qp>,
    state_table: &'static QueuePairStateTable,
    state: QueuePairState,
    pd: Arc<ProtectionDomain>,
    _send_cq: Option<GenericCompletionQueue>,
    _recv_cq: Option<GenericCompletionQueue>,
    _srq: Option<Arc<SharedReceiveQueue>>,
}

impl Drop for DriverQueuePair {
    fn drop(&mut self) {
        // SAFETY: the handle came from a create call and is destroyed once, before the parents
        // (the fields are dropped after this).
        let ret = unsafe { ibv_destroy_qp(self.qp.as_ptr()) };
        super::check_destroy("ibv_destroy_qp", ret);
    }
}

impl DriverQueuePair {
    /// Takes ownership of a new queue pair, whose transitions are those of `state_table`.
    ///
    /// # Safety
    ///
    /// `qp` must be a live queue pair created on `pd` with the given CQs and SRQ, in RESET, and
    /// owned by the returned value (it destroys it).
    pub(crate) unsafe fn new(
        qp: NonNull<ibv_qp>, state_table: &'static QueuePairStateTable, pd: Arc<ProtectionDomain>,
        send_cq: Option<GenericCompletionQueue>, recv_cq: Option<GenericCompletionQueue>,
        srq: Option<Arc<SharedReceiveQueue>>,
    ) -> Self {
        Self {
            qp,
            state_table,
            state: QueuePairState::Reset,
            pd,
            _send_cq: send_cq,
            _recv_cq: recv_cq,
            _srq: srq,
        }
    }

    pub(crate) fn qp(&self) -> NonNull<ibv_qp> {
        self.qp
    }

    /// The queue pair number as the library holds it now (a DC target gets its number at RTR).
    pub(crate) fn live_qp_number(&self) -> u32 {
        // SAFETY: the handle is alive; the library writes `qp_num` only inside `ibv_modify_qp`,
        // which takes `&mut self`; the field is read through a raw pointer, no reference.
        unsafe { std::ptr::addr_of!((*self.qp.as_ptr()).qp_num).read() }
    }

    /// The state as of the last [`modify`](Self::modify).
    pub(crate) fn state(&self) -> QueuePairState {
        self.state
    }

    /// `ibv_modify_qp`; a refusal with `EINVAL` is explained by the queue pair's table.
    pub(crate) fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairError> {
        // SAFETY: the handle is alive and exclusively borrowed; `modify_qp` does not keep it.
        unsafe { modify_qp(self.qp, attr, Some(self.state_table)) }?;
        if attr.attr_mask.contains(QueuePairAttributeMask::State) {
            // The library took it, so it is one of the states.
            self.state = attr.attr.qp_state.into();
        }
        Ok(())
    }

    /// `ibv_query_port` on the context of the queue pair's protection domain.
    pub(crate) fn query_port(&self, port: u8) -> io::Result<ibv_port_attr> {
        // SAFETY: the context is open while the protection domain is.
        unsafe { super::query_port(self.context(), port) }
    }

    /// The set slots of local `port`'s GID table ([`read_gid_table`]), `port_attr` its attributes.
    pub(crate) fn gid_table(&self, port: u8, port_attr: &ibv_port_attr) -> Result<Vec<ibv_gid_entry>, SourceGidError> {
        // SAFETY: the context is open while the protection domain is; `query_gid_entry` is
        // libibverbs'.
        unsafe { read_gid_table(self.context(), port, port_attr.gid_tbl_len, query_gid_entry) }
    }

    /// The device context of the queue pair's protection domain.
    fn context(&self) -> NonNull<ibv_context> {
        self.pd._dev_ctx.context
    }
}
