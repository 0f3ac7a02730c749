//! The DC transport of a batch whose requests all go to one address, set when its guard starts:
//! one destination per batch, without a destination step per request.
use std::marker::PhantomData;

use rdma_mummy_sys::ibv_qp_ex;

use super::{DcAddress, DcStreamAddress, SET_DC_ADDR};
use crate::ibverbs::post_send_guard::{
    sealed, Destination, Operation, PendingRequest, RemoteMemoryAccess, Transport, TypedLocalBufferHandle,
};

/// How the requests of a [`BatchAddressed`] batch are addressed: [`DcBatchAddress`], or for a
/// guard started by hand [`DcAddress`]. Sealed, as [`Destination`] is.
pub trait DcAddressing: Destination + Copy + sealed::Sealed {}

impl DcAddressing for DcAddress {}

impl DcAddressing for DcBatchAddress {}

/// The address of every request of a batch started with
/// [`start_post_send_to`](super::DcInitiator::start_post_send_to), on a DCI stream if given.
#[derive(Debug, Clone, Copy)]
pub struct DcBatchAddress {
    address: DcAddress,
    stream: Option<u16>,
}

impl sealed::Sealed for DcBatchAddress {}

impl DcBatchAddress {
    /// `address`, on DCI stream `stream` when given, for a guard started with
    /// [`TypedPostSendGuard::start`](crate::ibverbs::post_send_guard::TypedPostSendGuard::start).
    #[inline]
    pub fn new(address: DcAddress, stream: Option<u16>) -> Self {
        Self { address, stream }
    }
}

// SAFETY: it calls `wr_set_dc_addr`, or `wr_set_dc_addr_stream` for a stream, with the view and
// handle its DC initiator's borrow keeps alive; a batch lacking the stream setter is started
// without `wr_set_dc_addr`'s bit, so that each request is refused.
unsafe impl Destination for DcBatchAddress {
    const ENTRY: u32 = SET_DC_ADDR;
    const ENTRY_NAME: &'static str = "wr_set_dc_addr_stream";

    #[inline]
    unsafe fn set(self, qp: *mut ibv_qp_ex) {
        match self.stream {
            None => self.address.set(qp),
            Some(stream) => DcStreamAddress::new(self.address, stream).set(qp),
        }
    }
}

/// The DC transport of a batch to one destination: the guard's context is the address `A`, which
/// every request gets right after its operation (`construct_wr` → operation → data). A DC
/// initiator starts one with [`start_post_send_to`](super::DcInitiator::start_post_send_to),
/// which holds its RDMA READs to both ends' path MTUs (a READ whose responses would not reach
/// the initiator is refused before the provider):
///
/// ```no_run
/// use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
/// use sideway_ext::ibverbs::address_handle::AddressHandle;
/// use sideway_ext::mlx5::dc::initiator::DcInitiator;
///
/// fn send_all(dci: &mut DcInitiator, ah: &AddressHandle, dct_number: u32, dc_key: u64)
///     -> Result<(), Box<dyn std::error::Error>> {
///     let mut guard = dci.start_post_send_to(ah, dct_number, dc_key, None);
///     for wr_id in 0..4 {
///         guard.construct_wr(wr_id, WorkRequestFlags::Signaled).setup_send().setup_inline_data(b"hi");
///     }
///     guard.post()?;
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct BatchAddressed<A: DcAddressing>(PhantomData<A>, std::convert::Infallible);

impl<A: DcAddressing> sealed::Sealed for BatchAddressed<A> {}

impl<A: DcAddressing> Transport for BatchAddressed<A> {
    type Context = A;
    type AfterOperation<'g, O: Operation> = TypedLocalBufferHandle<'g, O, A>;

    #[inline]
    fn after_operation<O: Operation>(request: PendingRequest<'_, O>, context: A) -> Self::AfterOperation<'_, O> {
        TypedLocalBufferHandle::new(request, context)
    }
}

impl<A: DcAddressing> RemoteMemoryAccess for BatchAddressed<A> {}
