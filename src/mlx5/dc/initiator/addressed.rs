//! The DC transport of a batch whose requests all go to one address, set when its guard starts:
//! what a pool of initiators posts, one destination per batch, without a destination step.
use std::marker::PhantomData;

use super::{DcAddress, DcStreamAddress};
use crate::ibverbs::post_send_guard::{
    sealed, Destination, LocalBufferHandle, Operation, PendingRequest, RemoteMemoryAccess, Transport,
};

/// How the requests of a [`BatchAddressed`] batch are addressed: [`DcAddress`]
/// (`mlx5dv_wr_set_dc_addr`), or on DCI streams [`DcStreamAddress`]
/// (`mlx5dv_wr_set_dc_addr_stream`). Sealed, as [`Destination`] is: each address's setter is an
/// entry its queue pair was checked for.
pub trait DcAddressing: Destination + Copy + sealed::Sealed {
    /// Whether it addresses a DCI stream.
    const STREAMS: bool;
    /// `address`, on DCI stream `stream` when it addresses streams (ignored otherwise).
    fn new(address: DcAddress, stream: u16) -> Self;
}

impl DcAddressing for DcAddress {
    const STREAMS: bool = false;

    #[inline]
    fn new(address: DcAddress, _stream: u16) -> Self {
        address
    }
}

impl DcAddressing for DcStreamAddress {
    const STREAMS: bool = true;

    #[inline]
    fn new(address: DcAddress, stream: u16) -> Self {
        DcStreamAddress::new(address, stream)
    }
}

/// The DC transport of a batch to one destination: the guard's context is the address `A`, which
/// every request gets right after its operation (`construct_wr` → operation → data). A guard of
/// it is [`start`](crate::ibverbs::post_send_guard::PostSendGuard::start)ed on a DC initiator's
/// [`send_views`](super::DcInitiator::send_views). An RDMA READ whose responses would not reach
/// the initiator is refused where the guard knows both ends' path MTUs
/// ([`set_path_mtus`](crate::ibverbs::post_send_guard::PostSendGuard::set_path_mtus), as a pool
/// of initiators sets them):
///
/// ```no_run
/// use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
/// use sideway_ext::ibverbs::address_handle::AddressHandle;
/// use sideway_ext::ibverbs::post_send_guard::{PathMtus, PostSendGuard};
/// use sideway_ext::mlx5::dc::initiator::{BatchAddressed, DcAddress, DcInitiator};
///
/// fn send_all(dci: &mut DcInitiator, ah: &AddressHandle, dct_number: u32, dc_key: u64)
///     -> Result<(), Box<dyn std::error::Error>> {
///     let max_inline_data = dci.max_inline_data();
///     let (qp_ex, entries, mlx5_qp_ex) = dci.send_views();
///     // SAFETY: the views are the initiator's own and alive; `ah` outlives the batch.
///     let address = unsafe { DcAddress::new(mlx5_qp_ex, ah.ah(), dct_number, dc_key) };
///     // SAFETY: `dci` is borrowed mutably for as long as the guard lives; `entries` are its own.
///     let mut guard = unsafe { PostSendGuard::<BatchAddressed<DcAddress>>::start(qp_ex, entries, address) };
///     guard.set_max_inline_data(max_inline_data);
///     guard.set_path_mtus(PathMtus::known(dci.path_mtu(), ah.destination_path_mtu()));
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
    type AfterOperation<'g, O: Operation> = LocalBufferHandle<'g, O, A>;

    #[inline]
    fn after_operation<O: Operation>(request: PendingRequest<'_, O>, context: A) -> Self::AfterOperation<'_, O> {
        LocalBufferHandle::new(request, context)
    }
}

impl<A: DcAddressing> RemoteMemoryAccess for BatchAddressed<A> {}
