//! [`QueuePairCore`], the part every queue pair of this crate shares (RC and UD here, DC in mlx5).
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

/// The part every queue pair of this crate shares. Nothing here reads the C struct through a Rust
/// reference: libibverbs writes `ibv_qp::state` in `ibv_modify_qp` and `ibv_query_qp`, which
/// take `&mut self`.
#[derive(Debug)]
pub(crate) struct QueuePairCore {
    qp: NonNull<ibv_qp>,
    qp_ex: Option<(NonNull<ibv_qp_ex>, ProviderEntries)>,
    table: &'static TransitionTable,
    /// Kept open by `_pd`.
    context: NonNull<rdma_mummy_sys::ibv_context>,
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
        let context = NonNull::new_unchecked(pd.pd().as_ref().context);
        Self {
            qp,
            qp_ex: None,
            table,
            context,
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

    /// Destroys the queue pair and adopts `qp`, a new one on the same parents (a DC initiator
    /// rebuilt where the kernel refuses its move to RESET): the parents stay, the number and
    /// views are the new queue pair's, the state RESET.
    ///
    /// # Safety
    ///
    /// As [`new`](Self::new), for `qp` on this core's parents (with `granted`, created with those
    /// `send_ops_flags`), and no view of the old queue pair may be used afterwards.
    #[allow(dead_code)] // used by the DC initiator of the mlx5 module
    pub(crate) unsafe fn replace(
        &mut self, qp: NonNull<ibv_qp>, granted: Option<SendOperationFlags>,
    ) -> Result<(), MissingProviderEntry> {
        let old = std::mem::replace(&mut self.qp, qp);
        let ret = rdma_mummy_sys::ibv_destroy_qp(old.as_ptr());
        crate::ibverbs::check_destroy("ibv_destroy_qp", ret);
        self.qp_number = (*qp.as_ptr()).qp_num;
        self.state = QueuePairState::Reset;
        self.qp_ex = None;
        match granted {
            Some(granted) => self.read_send_view(granted),
            None => Ok(()),
        }
    }

    pub(crate) fn qp(&self) -> NonNull<ibv_qp> {
        self.qp
    }

    /// The provider entries of a queue pair created with send operations (none otherwise).
    pub(crate) fn entries(&self) -> ProviderEntries {
        self.qp_ex.map_or(ProviderEntries::NONE, |(_, entries)| entries)
    }

    /// The device context the queue pair was created on.
    #[allow(dead_code)] // used by the DC queue pairs of the mlx5 module
    pub(crate) fn context(&self) -> NonNull<rdma_mummy_sys::ibv_context> {
        self.context
    }

    /// `ibv_query_port` on the queue pair's context.
    #[allow(dead_code)] // used by the DC queue pairs of the mlx5 module
    pub(crate) fn query_port(&self, port: u8) -> io::Result<rdma_mummy_sys::ibv_port_attr> {
        // SAFETY: the context is open while the protection domain is.
        unsafe { crate::ibverbs::query_port(self.context, port) }
    }

    /// The set slots of local `port`'s GID table
    /// ([`read_gid_table`](crate::ibverbs::source_gid::read_gid_table)).
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub(crate) fn gid_table(
        &self, port: u8, port_attr: &rdma_mummy_sys::ibv_port_attr,
    ) -> Result<Vec<rdma_mummy_sys::ibv_gid_entry>, crate::ibverbs::source_gid::SourceGidError> {
        // SAFETY: the context is open while the protection domain is.
        unsafe {
            crate::ibverbs::source_gid::read_gid_table(
                self.context,
                port,
                port_attr.gid_tbl_len,
                crate::ibverbs::source_gid::query_gid_entry,
            )
        }
    }

    /// The extended view of a queue pair created with send operations, and its entries.
    pub(crate) fn send_view(&self) -> Option<(NonNull<ibv_qp_ex>, ProviderEntries)> {
        self.qp_ex
    }

    /// Adds entries the queue pair's provider filled outside `ibv_qp_ex` (checked by the caller).
    #[allow(dead_code)] // used by the DC queue pairs of the mlx5 module
    pub(crate) fn add_entries(&mut self, bits: u32) {
        if let Some((_, entries)) = &mut self.qp_ex {
            *entries = entries.with(bits);
        }
    }

    /// The queue pair number as the library holds it now (a DC target gets its number at RTR).
    #[allow(dead_code)] // used by the DC queue pairs of the mlx5 module
    pub(crate) fn live_qp_number(&self) -> u32 {
        // SAFETY: the handle is alive; the library writes qp_num only inside ibv_modify_qp, which
        // takes `&mut self`; the field is read through a raw pointer, no reference.
        unsafe { std::ptr::addr_of!((*self.qp.as_ptr()).qp_num).read() }
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

    /// The state read from the device (`ibv_query_qp`), kept as the state from then on.
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))] // used by the DC initiator of the mlx5 module
    pub(crate) fn query_state(&mut self) -> Result<QueuePairState, QueryQueuePairError> {
        self.query(QueuePairAttributeMask::State).map(|attr| attr.state())
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
