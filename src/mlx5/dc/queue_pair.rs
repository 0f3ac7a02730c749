//! What the DC queue pairs, target and initiator, share: their creation with
//! `mlx5dv_create_qp` and [`DcQueuePair`], the handle that owns one.
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_qp, ibv_qp_attr, ibv_qp_init_attr_ex, mlx5dv_qp_init_attr};
use sideway::ibverbs::completion::GenericCompletionQueue;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    ModifyQueuePairError, ModifyQueuePairErrorKind, QueuePairAttributeMask, QueuePairState,
};

use super::state_table::{check, DcTransition};
use crate::ibverbs::queue_pair::QueuePairAttribute;
use crate::ibverbs::shared_receive_queue::SharedReceiveQueue;

// SAFETY: a bindgen struct of integers, raw pointers and unions of these; zero is valid.
unsafe impl crate::ibverbs::zeroed::PlainData for mlx5dv_qp_init_attr {}

/// A DC queue pair, owned: destroyed on drop, before the parents it holds. Its state is kept
/// here, as of the last [`modify`](Self::modify) or [`query_state`](Self::query_state): the
/// library writes the C struct's during the call, which takes `&mut self`.
#[derive(Debug)]
pub(crate) struct DcQueuePair {
    qp: NonNull<ibv_qp>,
    transitions: &'static [DcTransition],
    state: QueuePairState,
    _cq: GenericCompletionQueue,
    _srq: Option<Arc<SharedReceiveQueue>>,
    _pd: Arc<ProtectionDomain>,
}

impl Drop for DcQueuePair {
    fn drop(&mut self) {
        // SAFETY: the handle came from a create call and is destroyed once, before the parents.
        let ret = unsafe { rdma_mummy_sys::ibv_destroy_qp(self.qp.as_ptr()) };
        crate::ibverbs::check_destroy("ibv_destroy_qp", ret);
    }
}

impl DcQueuePair {
    /// Takes ownership of a new DC queue pair, whose transitions are `transitions`.
    ///
    /// # Safety
    ///
    /// `qp` must be a live queue pair created on `pd` with `cq` (and `srq`), in RESET, owned by
    /// the returned value (it destroys it).
    pub(crate) unsafe fn new(
        qp: NonNull<ibv_qp>, transitions: &'static [DcTransition], pd: Arc<ProtectionDomain>,
        cq: GenericCompletionQueue, srq: Option<Arc<SharedReceiveQueue>>,
    ) -> Self {
        Self {
            qp,
            transitions,
            state: QueuePairState::Reset,
            _cq: cq,
            _srq: srq,
            _pd: pd,
        }
    }

    pub(crate) fn qp(&self) -> NonNull<ibv_qp> {
        self.qp
    }

    /// The queue pair number as the library holds it now (a DC target gets its number at RTR).
    pub(crate) fn qp_number(&self) -> u32 {
        // SAFETY: the handle is alive; the library writes qp_num only inside ibv_modify_qp, which
        // takes `&mut self`; the field is read through a raw pointer, no reference.
        unsafe { std::ptr::addr_of!((*self.qp.as_ptr()).qp_num).read() }
    }

    pub(crate) fn state(&self) -> QueuePairState {
        self.state
    }

    /// `ibv_modify_qp`, as sideway's queue pairs call it: the library's `EINVAL` explained by
    /// the queue pair's transitions (`InvalidTransition`, `InvalidAttributeMask`, or the bare
    /// errno where they see nothing wrong), so a kernel that takes more is never refused here.
    pub(crate) fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairError> {
        let given: &ibv_qp_attr = &attr.attr;
        let mut raw = ibv_qp_attr { ..*given };
        // SAFETY: the handle is alive and exclusively borrowed; raw is a valid ibv_qp_attr.
        let ret = unsafe { rdma_mummy_sys::ibv_modify_qp(self.qp.as_ptr(), &mut raw, attr.attr_mask.bits()) };
        let errno = |errno| io::Error::from_raw_os_error(errno);
        let (sgid_index, gid) = (attr.attr.ah_attr.grh.sgid_index, attr.attr.ah_attr.grh.dgid.into());
        let to = match attr.attr_mask.contains(QueuePairAttributeMask::State) {
            true => attr.state(),
            false => self.state,
        };
        Err(match ret {
            0 => {
                self.state = to;
                return Ok(());
            },
            libc::EINVAL => match check(self.transitions, self.state, to, attr.attr_mask) {
                Ok(()) => ModifyQueuePairErrorKind::Ibverbs(errno(ret)),
                Err(kind) => kind,
            },
            libc::ETIMEDOUT => ModifyQueuePairErrorKind::ResolveRouteTimedout {
                sgid_index,
                gid,
                source: errno(ret),
            },
            libc::ENETUNREACH => ModifyQueuePairErrorKind::NetworkUnreachable {
                sgid_index,
                gid,
                source: errno(ret),
            },
            _ => ModifyQueuePairErrorKind::Ibverbs(errno(ret)),
        }
        .into())
    }

    /// The device context of the queue pair.
    pub(crate) fn context(&self) -> NonNull<rdma_mummy_sys::ibv_context> {
        // SAFETY: the handle is alive; libibverbs sets its context at creation and never changes it,
        // and the context is open while the queue pair's protection domain is.
        unsafe { NonNull::new_unchecked(std::ptr::addr_of!((*self.qp.as_ptr()).context).read()) }
    }

    /// `ibv_query_port` on the queue pair's context.
    pub(crate) fn query_port(&self, port: u8) -> io::Result<rdma_mummy_sys::ibv_port_attr> {
        // SAFETY: the context is open while the protection domain is.
        unsafe { crate::ibverbs::query_port(self.context(), port) }
    }

    /// The set slots of local `port`'s GID table, `port_attr` its attributes.
    pub(crate) fn gid_table(
        &self, port: u8, port_attr: &rdma_mummy_sys::ibv_port_attr,
    ) -> Result<Vec<rdma_mummy_sys::ibv_gid_entry>, crate::ibverbs::source_gid::SourceGidError> {
        use crate::ibverbs::source_gid::{query_gid_entry, read_gid_table};
        // SAFETY: the context is open while the protection domain is.
        unsafe { read_gid_table(self.context(), port, port_attr.gid_tbl_len, query_gid_entry) }
    }

    /// Destroys the queue pair and takes `qp`, created again on the same parents (a DC initiator
    /// where the kernel refuses its move to RESET), in RESET.
    ///
    /// # Safety
    ///
    /// As [`new`](Self::new), for `qp` on this queue pair's parents; no view of the old one may
    /// be used afterwards.
    pub(crate) unsafe fn replace(&mut self, qp: NonNull<ibv_qp>) {
        let old = std::mem::replace(&mut self.qp, qp);
        // SAFETY: the old handle came from a create call and is destroyed once.
        let ret = unsafe { rdma_mummy_sys::ibv_destroy_qp(old.as_ptr()) };
        crate::ibverbs::check_destroy("ibv_destroy_qp", ret);
        self.state = QueuePairState::Reset;
    }

    /// The state read from the device (`ibv_query_qp`), kept as the state from then on: the
    /// device moves a queue pair to ERR on its own.
    pub(crate) fn query_state(&mut self) -> Result<QueuePairState, sideway::ibverbs::queue_pair::QueryQueuePairError> {
        use sideway::ibverbs::queue_pair::QueryQueuePairErrorKind;
        let (mut attr, mask) = (QueuePairAttribute::new(), QueuePairAttributeMask::State.bits());
        // SAFETY: ibv_qp_init_attr is plain data for which all zeroes is valid.
        let mut init_attr: rdma_mummy_sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let raw = std::ptr::addr_of_mut!(attr.attr).cast();
        // SAFETY: the handle is alive and exclusively borrowed (libibverbs updates its cached
        // state); both structs are writable (`attr.attr` is an ibv_qp_attr).
        let ret = unsafe { rdma_mummy_sys::ibv_query_qp(self.qp.as_ptr(), raw, mask, &mut init_attr) };
        if ret != 0 {
            return Err(QueryQueuePairErrorKind::Ibverbs(io::Error::from_raw_os_error(ret)).into());
        }
        self.state = attr.state();
        Ok(self.state)
    }
}

/// Creates the queue pair of `init` and `mlx5` with `mlx5dv_create_qp`; `EOPNOTSUPP` (a device
/// without DC, as `mlx5dv_query_device` succeeded before) comes back as `None`.
///
/// # Safety
///
/// The pointers in `init` must be alive for the call; `context` must be open.
pub(crate) unsafe fn create_dc_qp(
    context: NonNull<rdma_mummy_sys::ibv_context>, init: &mut ibv_qp_init_attr_ex, mlx5: &mut mlx5dv_qp_init_attr,
) -> Result<NonNull<ibv_qp>, Option<io::Error>> {
    // SAFETY: the context is open; init and mlx5 are valid, writable structs.
    NonNull::new(unsafe { rdma_mummy_sys::mlx5dv_create_qp(context.as_ptr(), init, mlx5) })
        .ok_or_else(io::Error::last_os_error)
        .map_err(|err| (err.raw_os_error() != Some(libc::EOPNOTSUPP)).then_some(err))
}
