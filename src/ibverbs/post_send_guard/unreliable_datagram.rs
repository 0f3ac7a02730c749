//! The unreliable-datagram transport ([`UnreliableDatagram`]): every request names its
//! destination ([`DatagramAddress`]) at its destination step
//! ([`setup_ud_addr`](UnreliableDatagramDestination::setup_ud_addr)).
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, ibv_wr_set_ud_addr};

use super::{entry, sealed, Destination, Operation, PendingRequest, Transport, TypedLocalBufferHandle};
use crate::ibverbs::address_handle::AddressHandle;
use sideway::ibverbs::queue_pair::QueuePairType;

/// The unreliable-datagram transport (UD): every request names its destination.
#[derive(Debug)]
pub enum UnreliableDatagram {}

impl sealed::Sealed for UnreliableDatagram {}

impl Transport for UnreliableDatagram {
    const QP_TYPE: QueuePairType = QueuePairType::UnreliableDatagram;
    type AfterOperation<'g, O: Operation> = UnreliableDatagramDestination<'g, O>;

    #[inline]
    fn after_operation<O: Operation>(request: PendingRequest<'_, O>) -> UnreliableDatagramDestination<'_, O> {
        UnreliableDatagramDestination { request }
    }
}

/// A UD destination: `ibv_wr_set_ud_addr(ah, remote_qpn, remote_qkey)`.
#[derive(Debug, Clone, Copy)]
pub struct DatagramAddress {
    pub(super) ah: NonNull<ibv_ah>,
    pub(super) remote_qpn: u32,
    pub(super) remote_qkey: u32,
}

impl sealed::Sealed for DatagramAddress {}

// SAFETY: it calls `wr_set_ud_addr`, its entry, with the address handle the guard's borrow keeps.
unsafe impl Destination for DatagramAddress {
    const ENTRY: u32 = entry::SET_UD_ADDR;

    #[inline]
    unsafe fn set(self, qp: *mut ibv_qp_ex) {
        ibv_wr_set_ud_addr(qp, self.ah.as_ptr(), self.remote_qpn, self.remote_qkey)
    }
}

/// The destination step of a UD request.
#[must_use = "a request is added to the batch only at its data step"]
pub struct UnreliableDatagramDestination<'g, O: Operation> {
    pub(super) request: PendingRequest<'g, O>,
}

impl<'g, O: Operation> UnreliableDatagramDestination<'g, O> {
    /// Sends to queue pair `remote_qpn` with Q_Key `remote_qkey`, over the route of `ah`
    /// (`ibv_wr_set_ud_addr`).
    ///
    /// The provider may resolve the address handle after the post (rxe reads it when it builds
    /// the packet): keep `ah` alive until the request's completion has been polled, not only until
    /// [`post`](super::TypedPostSendGuard::post). Holding the `Arc<AddressHandle>` in a per-destination cache
    /// does that.
    #[inline]
    pub fn setup_ud_addr(
        self, ah: &'g AddressHandle, remote_qpn: u32, remote_qkey: u32,
    ) -> TypedLocalBufferHandle<'g, O, DatagramAddress> {
        // SAFETY: only the pointer is taken; the caller keeps the handle alive (see above).
        let ah = unsafe { ah.ah() };
        TypedLocalBufferHandle::new(
            self.request,
            DatagramAddress {
                ah,
                remote_qpn,
                remote_qkey,
            },
        )
    }
}
