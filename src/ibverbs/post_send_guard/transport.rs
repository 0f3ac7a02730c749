//! The transports of the guard ([`Transport`]; RC here, each other transport in a file of its
//! own) and where their requests go ([`Destination`]), set by a transport's destination step.
use rdma_mummy_sys::ibv_qp_ex;

use super::{sealed, Operation, PendingRequest, TypedLocalBufferHandle};
use sideway::ibverbs::queue_pair::QueuePairType;

/// How the requests of a queue-pair type are addressed: nothing for RC (the connection is the
/// address), an address handle and remote QPN/Q_Key for UD. Sealed.
pub trait Transport: sealed::Sealed + Sized {
    /// The type of the queue pairs whose requests it posts.
    const QP_TYPE: QueuePairType;
    /// What an operation leads to: the data step, or first the destination step.
    type AfterOperation<'g, O: Operation>;
    /// The step after the operation of `request`.
    fn after_operation<O: Operation>(request: PendingRequest<'_, O>) -> Self::AfterOperation<'_, O>;
}

/// Transports on which RDMA reads, writes and atomics can be posted.
pub trait RemoteMemoryAccess: Transport {}

/// The reliable-connection transport (RC).
#[derive(Debug)]
pub enum ReliableConnection {}

impl sealed::Sealed for ReliableConnection {}

impl Transport for ReliableConnection {
    const QP_TYPE: QueuePairType = QueuePairType::ReliableConnection;
    type AfterOperation<'g, O: Operation> = TypedLocalBufferHandle<'g, O, Connected>;

    #[inline]
    fn after_operation<O: Operation>(request: PendingRequest<'_, O>) -> TypedLocalBufferHandle<'_, O, Connected> {
        TypedLocalBufferHandle::new(request, Connected)
    }
}

impl RemoteMemoryAccess for ReliableConnection {}

/// Where a request goes, set at its data step right after the operation's builder. Sealed.
///
/// # Safety
///
/// `set` calls nothing but the entries `ENTRY` names (which the guard checked the queue pair
/// has), with handles alive as long as the destination is used.
pub unsafe trait Destination: sealed::Sealed + Copy {
    /// The [`ProviderEntries`](super::ProviderEntries) bits of its setter.
    const ENTRY: u32;
    /// Calls the setter.
    ///
    /// # Safety
    ///
    /// `qp` must be a live queue pair inside a batch, right after a builder, with the setter's
    /// entry filled; the handles the destination names must be alive.
    unsafe fn set(self, qp: *mut ibv_qp_ex);
}

/// The destination of a connected queue pair's requests: the connection itself.
#[derive(Debug, Clone, Copy)]
pub struct Connected;

impl sealed::Sealed for Connected {}

// SAFETY: it calls nothing.
unsafe impl Destination for Connected {
    const ENTRY: u32 = 0;

    #[inline]
    unsafe fn set(self, _qp: *mut ibv_qp_ex) {}
}
