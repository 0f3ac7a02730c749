//! [`QueuePairCore`], the part this crate's RC and UD queue pairs share.
use std::io;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_qp, ibv_qp_ex, ibv_qp_init_attr};
use sideway::ibverbs::completion::GenericCompletionQueue;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    ModifyQueuePairError, ModifyQueuePairErrorKind, QueryQueuePairError, QueryQueuePairErrorKind,
    QueuePairAttributeMask, QueuePairState, SendOperationFlags,
};

use super::attribute::state_from_raw;
use super::transition::TransitionTable;
use super::QueuePairAttribute;
use crate::ibverbs::post_send_guard::{MissingProviderEntry, ProviderEntries};
use crate::ibverbs::shared_receive_queue::SharedReceiveQueue;

/// The part this crate's RC and UD queue pairs share. Nothing here reads the C struct through a
/// Rust reference: libibverbs writes `ibv_qp::state` in `ibv_modify_qp` and `ibv_query_qp`, which
/// take `&mut self`.
#[derive(Debug)]
pub(crate) struct QueuePairCore {
    qp: NonNull<ibv_qp>,
    qp_ex: Option<(NonNull<ibv_qp_ex>, ProviderEntries)>,
    table: &'static TransitionTable,
    qp_number: u32,
    state: QueuePairState,
    _srq: Option<Arc<SharedReceiveQueue>>,
    _send_cq: Option<GenericCompletionQueue>,
    _recv_cq: Option<GenericCompletionQueue>,
    _pd: Arc<ProtectionDomain>,
}

impl Drop for QueuePairCore {
    fn drop(&mut self) {
        // SAFETY: the handle came from a create call and is destroyed once, before the parents.
        let ret = unsafe { rdma_mummy_sys::ibv_destroy_qp(self.qp.as_ptr()) };
        crate::ibverbs::check_destroy("ibv_destroy_qp", ret);
    }
}

impl QueuePairCore {
    /// Takes ownership of a new queue pair, without a send view ([`read_send_view`](Self::read_send_view)).
    ///
    /// # Safety
    ///
    /// `qp` must be a live queue pair created on `pd` with the given CQs and SRQ, in RESET, owned
    /// by the returned value (it destroys it).
    pub(crate) unsafe fn new(
        qp: NonNull<ibv_qp>, table: &'static TransitionTable, pd: Arc<ProtectionDomain>,
        send_cq: Option<GenericCompletionQueue>, recv_cq: Option<GenericCompletionQueue>,
        srq: Option<Arc<SharedReceiveQueue>>,
    ) -> Self {
        Self {
            qp,
            qp_ex: None,
            table,
            qp_number: (*qp.as_ptr()).qp_num,
            state: QueuePairState::Reset,
            _srq: srq,
            _send_cq: send_cq,
            _recv_cq: recv_cq,
            _pd: pd,
        }
    }

    /// Reads the extended view (`ibv_qp_to_qp_ex`) and its provider entries; on a missing entry
    /// the caller drops the core, which destroys the queue pair.
    ///
    /// # Safety
    ///
    /// The queue pair must have been created with `granted` as its `send_ops_flags`.
    pub(crate) unsafe fn read_send_view(&mut self, granted: SendOperationFlags) -> Result<(), MissingProviderEntry> {
        self.qp_ex = None;
        let qp_ex = NonNull::new(rdma_mummy_sys::ibv_qp_to_qp_ex(self.qp.as_ptr()))
            .ok_or(MissingProviderEntry("ibv_qp_to_qp_ex"))?;
        self.qp_ex = Some((qp_ex, ProviderEntries::new(qp_ex, granted)?));
        Ok(())
    }

    pub(crate) fn qp(&self) -> NonNull<ibv_qp> {
        self.qp
    }

    /// The provider entries of a queue pair created with send operations (none otherwise).
    pub(crate) fn entries(&self) -> ProviderEntries {
        self.qp_ex.map_or(ProviderEntries::NONE, |(_, entries)| entries)
    }

    /// The extended view of a queue pair created with send operations, and its entries.
    pub(crate) fn send_view(&self) -> Option<(NonNull<ibv_qp_ex>, ProviderEntries)> {
        self.qp_ex
    }

    pub(crate) fn qp_number(&self) -> u32 {
        self.qp_number
    }

    pub(crate) fn state(&self) -> QueuePairState {
        self.state
    }

    pub(crate) fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairError> {
        self.table.check(self.state, attr)?;
        let mut raw = attr.attr.clone();
        // SAFETY: the handle is alive and exclusively borrowed; raw is a valid ibv_qp_attr.
        let ret = unsafe { rdma_mummy_sys::ibv_modify_qp(self.qp.as_ptr(), raw.as_mut_ptr(), attr.attr_mask.bits()) };
        if ret != 0 {
            return Err(ModifyQueuePairErrorKind::Ibverbs(io::Error::from_raw_os_error(ret)).into());
        }
        if attr.attr_mask.contains(QueuePairAttributeMask::State) {
            self.state = attr.state();
        }
        Ok(())
    }

    pub(crate) fn query(&mut self, mask: QueuePairAttributeMask) -> Result<QueuePairAttribute, QueryQueuePairError> {
        let mut attr = QueuePairAttribute::new();
        // SAFETY: ibv_qp_init_attr is plain data for which all zeroes is valid.
        let mut init_attr: ibv_qp_init_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: the handle is alive and exclusively borrowed (libibverbs updates its cached
        // state); both structs are writable.
        let ret = unsafe {
            rdma_mummy_sys::ibv_query_qp(self.qp.as_ptr(), attr.attr.as_mut_ptr(), mask.bits(), &mut init_attr)
        };
        if ret != 0 {
            return Err(QueryQueuePairErrorKind::Ibverbs(io::Error::from_raw_os_error(ret)).into());
        }
        attr.attr_mask = mask;
        if mask.contains(QueuePairAttributeMask::State) {
            self.state = state_from_raw(attr.attr.qp_state);
        }
        Ok(attr)
    }
}
