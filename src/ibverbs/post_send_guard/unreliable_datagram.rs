//! The unreliable-datagram transport ([`UnreliableDatagram`]): every request names its
//! destination ([`DatagramAddress`]) at its destination step
//! ([`setup_ud_addr`](UnreliableDatagramDestination::setup_ud_addr)).
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, ibv_wr_set_ud_addr};

use super::{entry, sealed, Destination, LocalBufferHandle, Operation, PendingRequest, Transport};
use crate::ibverbs::address_handle::AddressHandle;

/// The unreliable-datagram transport (UD): every request names its destination.
#[derive(Debug)]
pub enum UnreliableDatagram {}

impl sealed::Sealed for UnreliableDatagram {}

impl Transport for UnreliableDatagram {
    type Context = ();
    type AfterOperation<'g, O: Operation> = UnreliableDatagramDestination<'g, O>;

    #[inline]
    fn after_operation<O: Operation>(
        request: PendingRequest<'_, O>, _context: (),
    ) -> UnreliableDatagramDestination<'_, O> {
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
    const ENTRY_NAME: &'static str = "wr_set_ud_addr";

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
    /// [`post`](super::PostSendGuard::post). Holding the `Arc<AddressHandle>` in a per-destination cache
    /// does that.
    #[inline]
    pub fn setup_ud_addr(
        self, ah: &'g AddressHandle, remote_qpn: u32, remote_qkey: u32,
    ) -> LocalBufferHandle<'g, O, DatagramAddress> {
        // SAFETY: only the pointer is taken; the caller keeps the handle alive (see above).
        let ah = unsafe { ah.ah() };
        LocalBufferHandle::new(
            self.request,
            DatagramAddress {
                ah,
                remote_qpn,
                remote_qkey,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    //! A UD request driven through a recording function table: the destination between the
    //! operation and the data.
    use rdma_mummy_sys::ibv_send_flags;
    use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};

    use super::*;
    use crate::ibverbs::post_send_guard::recording::{all_entries, recording_qp, take_calls};
    use crate::ibverbs::post_send_guard::PostSendGuard;

    #[test]
    fn ud_requests_set_the_address_between_opcode_and_data_and_drop_aborts() {
        let mut qp = recording_qp();
        take_calls();
        // SAFETY: the recording queue pair outlives the guard; UD needs no context.
        let mut guard =
            unsafe { PostSendGuard::<UnreliableDatagram>::start(NonNull::from(&mut *qp), all_entries(&mut qp), ()) };
        let request = guard.construct_wr(3, WorkRequestFlags::none()).setup_send();
        // The address handle is only passed through; a dangling but non-null pointer is never used
        // by the recorder.
        let data = LocalBufferHandle::new(
            request.request,
            DatagramAddress {
                ah: NonNull::dangling(),
                remote_qpn: 77,
                remote_qkey: 0x1111,
            },
        );
        data.setup_inline_data(b"datagram");
        drop(guard);
        let inline = ibv_send_flags::IBV_SEND_INLINE.0;
        assert_eq!(
            take_calls(),
            [
                "start".to_string(),
                format!("send wr_id=3 flags={inline:#x}"),
                format!(
                    "ud_addr ah={:#x} qpn=77 qkey=0x1111",
                    NonNull::<ibv_ah>::dangling().as_ptr() as usize
                ),
                "inline \"datagram\"".to_string(),
                "abort".to_string(),
            ]
        );
    }
}
