//! The route of a request over the simulated fabric ([`SimulatedAddressHandle`]'s): its own
//! destinations, behind an entry only a simulated initiator has, so that a device's DC initiator
//! refuses them before the provider, and a simulated initiator routes them by DCT number.
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_ah, mlx5dv_qp_ex};
use sideway_ext::ibverbs::post_send_guard::{Destination, ProviderEntries};
use sideway_ext::mlx5::dc::initiator::{DcAddress, DcStreamAddress};

#[cfg(doc)]
use super::SimulatedAddressHandle;

/// The [`ProviderEntries`] bit that only a simulated initiator's entries carry: a request over a
/// simulated route needs it, so that a device's DC initiator refuses one before the provider.
pub(crate) const SIMULATED_ROUTE: u32 = ProviderEntries::FIRST_EXTERNAL_FREE;

/// A DC destination over a simulated fabric's route (`setup_dc_addr` with a simulated fabric's
/// address handle): `mlx5dv_wr_set_dc_addr` on the simulated initiator's own entry, which routes
/// by DCT number and never reads the address handle.
#[derive(Debug, Clone, Copy)]
pub struct SimulatedDcAddress(DcAddress);

/// As [`SimulatedDcAddress`], on a DCI stream (`mlx5dv_wr_set_dc_addr_stream`).
#[derive(Debug, Clone, Copy)]
pub struct SimulatedDcStreamAddress(DcStreamAddress);

impl SimulatedDcAddress {
    /// The address of one request on a simulated initiator's mlx5 view: the address handle is a
    /// placeholder its setter never reads.
    pub(crate) fn new(mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64) -> Self {
        // SAFETY: the setter is reached only through SIMULATED_ROUTE's entry, a simulated
        // initiator's own, which reads neither pointer's target beyond its own view.
        Self(unsafe { DcAddress::new(mlx5_qp_ex, NonNull::<ibv_ah>::dangling(), dct_number, dc_key) })
    }

    /// As `new`, on DCI stream `stream_id`.
    pub(crate) fn on_stream(self, stream_id: u16) -> SimulatedDcStreamAddress {
        SimulatedDcStreamAddress(DcStreamAddress::new(self.0, stream_id))
    }
}

// SAFETY: it calls the simulated initiator's `wr_set_dc_addr`, behind SIMULATED_ROUTE, which
// reads no address handle.
unsafe impl Destination for SimulatedDcAddress {
    const ENTRY: u32 = DcAddress::ENTRY | SIMULATED_ROUTE;
    const ENTRY_NAME: &'static str = "wr_set_dc_addr of a simulated fabric";

    #[inline]
    unsafe fn set(self, qp: *mut rdma_mummy_sys::ibv_qp_ex) {
        // SAFETY: the caller's promise; the entry is the simulated initiator's (checked through
        // SIMULATED_ROUTE), which reads no address handle.
        unsafe { self.0.set(qp) }
    }
}

// SAFETY: as for SimulatedDcAddress, through `wr_set_dc_addr_stream`.
unsafe impl Destination for SimulatedDcStreamAddress {
    const ENTRY: u32 = DcStreamAddress::ENTRY | SIMULATED_ROUTE;
    const ENTRY_NAME: &'static str = "wr_set_dc_addr_stream of a simulated fabric";

    #[inline]
    unsafe fn set(self, qp: *mut rdma_mummy_sys::ibv_qp_ex) {
        // SAFETY: as for SimulatedDcAddress.
        unsafe { self.0.set(qp) }
    }
}
