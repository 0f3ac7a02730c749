//! What a DC request's address step takes as its route: [`DcRoute`], an address handle a device
//! made, or one a simulated fabric made (sideway-ext-dc-pool's). The DC transport's
//! `setup_dc_addr` is generic over it, so that one program posts on a [`DcInitiator`] and on a
//! simulated initiator alike.
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::mlx5dv_qp_ex;
use sideway::ibverbs::device_context::Mtu;

use super::{DcAddress, DcStreamAddress};
#[cfg(doc)]
use super::{DcDestination, DcInitiator};
use crate::ibverbs::address_handle::AddressHandle;
use crate::ibverbs::post_send_guard::Destination;

/// The route a DC request is sent over, as [`DcDestination::setup_dc_addr`] takes it: an
/// [`AddressHandle`] (from a [`DcEndpoint`](crate::mlx5::dc::endpoint::DcEndpoint)'s
/// `create_ah`), or the simulated DC fabric's of `sideway-ext-dc-pool`
/// (`SimulatedFabric::create_ah`), or an [`Arc`] of either.
///
/// Open: a route only hands out destinations, [`DcAddress`]es (through `unsafe`
/// [`DcAddress::new`]) or [`Destination`]s of one's own (an `unsafe` trait), such as the
/// simulated fabric's, which need an entry of the simulated initiators' own.
///
/// A simulated fabric's address handle names no route a device knows: a [`DcInitiator`] refuses
/// a request addressed with one before the provider
/// ([`OperationNotEnabled`](crate::ibverbs::post_send_guard::PostSendErrorKind::OperationNotEnabled)).
/// A simulated initiator takes both kinds: the fabric routes by DCT number.
pub trait DcRoute {
    /// The destination a request addressed over this route has.
    type Address: Destination;
    /// The destination a request addressed over this route on a DCI stream has.
    type StreamAddress: Destination;

    /// The destination of a request on the DC initiator whose mlx5 view is `mlx5_qp_ex`.
    fn address(&self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64) -> Self::Address;

    /// As `address`, on DCI stream `stream_id`.
    fn stream_address(
        &self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> Self::StreamAddress;

    /// The path MTU of the target this route reaches, when known: an RDMA READ whose responses
    /// (at that MTU) would not reach the DC initiator is refused
    /// ([`DcDestination::setup_dc_addr`]). By default unknown, and nothing is refused for it.
    #[inline]
    fn destination_path_mtu(&self) -> Option<Mtu> {
        None
    }
}

impl DcRoute for AddressHandle {
    type Address = DcAddress;
    type StreamAddress = DcStreamAddress;

    #[inline]
    fn address(&self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64) -> DcAddress {
        // SAFETY: only the pointer is taken; the guard's borrow keeps the handle alive until the
        // request's data step, where libmlx5 copies its address vector; the view is the guard's.
        unsafe { DcAddress::new(mlx5_qp_ex, self.ah(), dct_number, dc_key) }
    }

    #[inline]
    fn stream_address(
        &self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> DcStreamAddress {
        DcStreamAddress::new(self.address(mlx5_qp_ex, dct_number, dc_key), stream_id)
    }

    /// What [`DcEndpoint::create_ah`](crate::mlx5::dc::endpoint::DcEndpoint::create_ah) took
    /// from its endpoint ([`AddressHandle::destination_path_mtu`]).
    #[inline]
    fn destination_path_mtu(&self) -> Option<Mtu> {
        AddressHandle::destination_path_mtu(self)
    }
}

impl<R: DcRoute + ?Sized> DcRoute for Arc<R> {
    type Address = R::Address;
    type StreamAddress = R::StreamAddress;

    #[inline]
    fn address(&self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64) -> R::Address {
        R::address(self, mlx5_qp_ex, dct_number, dc_key)
    }

    #[inline]
    fn stream_address(
        &self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> R::StreamAddress {
        R::stream_address(self, mlx5_qp_ex, dct_number, dc_key, stream_id)
    }

    #[inline]
    fn destination_path_mtu(&self) -> Option<Mtu> {
        R::destination_path_mtu(self)
    }
}
