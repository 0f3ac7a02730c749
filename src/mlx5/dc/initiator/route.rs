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

#[cfg(test)]
mod tests {
    //! A simulated route on a device's DC initiator (the recording tables of the unit tests,
    //! which stand for libmlx5's): refused before the provider.
    use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};

    use super::*;
    use crate::ibverbs::post_send_guard::recording::take_calls;
    use crate::ibverbs::post_send_guard::{PostSendErrorKind, PostSendGuard, ProviderEntries};
    use crate::mlx5::dc::initiator::recording::recording_dci;
    use crate::mlx5::dc::initiator::{dc_entries, DcContext, DynamicallyConnected, DC_SEND_OPERATIONS};

    /// A route of another crate's, as sideway-ext-dc-pool's simulated fabric has: its
    /// destinations need an entry of their own, beside the DC setter's.
    struct ByDctNumber;

    /// The entry only the other crate's initiators carry.
    const OWN_ROUTE: u32 = ProviderEntries::FIRST_EXTERNAL_FREE;

    #[derive(Debug, Clone, Copy)]
    struct ByDctNumberAddress(DcAddress);

    #[derive(Debug, Clone, Copy)]
    struct ByDctNumberStreamAddress(DcStreamAddress);

    // SAFETY: the setters the DC addresses call, behind an entry no device's initiator has.
    unsafe impl Destination for ByDctNumberAddress {
        const ENTRY: u32 = DcAddress::ENTRY | OWN_ROUTE;
        const ENTRY_NAME: &'static str = "wr_set_dc_addr of a simulated fabric";

        unsafe fn set(self, qp: *mut rdma_mummy_sys::ibv_qp_ex) {
            // SAFETY: the caller's promise.
            unsafe { self.0.set(qp) }
        }
    }

    // SAFETY: as above.
    unsafe impl Destination for ByDctNumberStreamAddress {
        const ENTRY: u32 = DcStreamAddress::ENTRY | OWN_ROUTE;
        const ENTRY_NAME: &'static str = "wr_set_dc_addr_stream of a simulated fabric";

        unsafe fn set(self, qp: *mut rdma_mummy_sys::ibv_qp_ex) {
            // SAFETY: the caller's promise.
            unsafe { self.0.set(qp) }
        }
    }

    impl DcRoute for ByDctNumber {
        type Address = ByDctNumberAddress;
        type StreamAddress = ByDctNumberStreamAddress;

        fn address(&self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64) -> ByDctNumberAddress {
            // SAFETY: never set: the guard refuses it (no initiator here has OWN_ROUTE).
            ByDctNumberAddress(unsafe { DcAddress::new(mlx5_qp_ex, NonNull::dangling(), dct_number, dc_key) })
        }

        fn stream_address(
            &self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64, stream_id: u16,
        ) -> ByDctNumberStreamAddress {
            ByDctNumberStreamAddress(DcStreamAddress::new(
                self.address(mlx5_qp_ex, dct_number, dc_key).0,
                stream_id,
            ))
        }
    }

    /// Posts one inline SEND over a simulated fabric's route on a device's DC initiator, on a
    /// stream or not; returns the error and the provider calls made.
    fn post_simulated_route(stream: bool) -> (PostSendErrorKind, Vec<String>) {
        let ah = ByDctNumber;
        let dct_number = 0x42;
        let (mut qp, mut mlx5) = recording_dci(true);
        let (qp, mlx5) = (NonNull::from(&mut *qp), NonNull::from(&mut *mlx5));
        take_calls();
        // SAFETY: the recording tables are live until the end of this function, used by the
        // guard alone; the context is their mlx5 view.
        let mut guard: PostSendGuard<'_, DynamicallyConnected> = unsafe {
            let entries = ProviderEntries::new(qp, DC_SEND_OPERATIONS).expect("recording entries");
            let dc = dc_entries(mlx5, true).expect("recording mlx5 entries");
            PostSendGuard::start(qp, entries.with(dc), DcContext::from_raw(mlx5))
        };
        let request = guard.construct_wr(7, WorkRequestFlags::Signaled).setup_send();
        if stream {
            request
                .setup_dc_addr_stream(&ah, dct_number, 0, 1)
                .setup_inline_data(b"x");
        } else {
            request.setup_dc_addr(&ah, dct_number, 0).setup_inline_data(b"x");
        }
        let err = guard.post().expect_err("a simulated route on a device's DC initiator");
        (err.0, take_calls())
    }

    #[test]
    fn a_simulated_route_is_refused_by_a_devices_dc_initiator_before_the_provider() {
        for (stream, setter) in [(false, "wr_set_dc_addr"), (true, "wr_set_dc_addr_stream")] {
            let (err, calls) = post_simulated_route(stream);
            match err {
                PostSendErrorKind::OperationNotEnabled {
                    index: 0,
                    wr_id: 7,
                    entry,
                    batch_len: 1,
                } => assert_eq!(entry, format!("{setter} of a simulated fabric")),
                other => panic!("stream {stream}: {other:?}"),
            }
            assert_eq!(
                calls,
                ["start", "abort"],
                "stream {stream}: nothing reached the provider"
            );
        }
    }
}
