//! The DC transport of the post guard: [`DynamicallyConnected`], its context, and the destination
//! step that names each request's DC target, which the data step requires ([`Addressed`]).
use std::io::IoSlice;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, ibv_sge, mlx5dv_qp_ex, mlx5dv_wr_set_dc_addr, mlx5dv_wr_set_dc_addr_stream};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry};

use super::{dc_entries, SET_DC_ADDR, SET_DC_ADDR_STREAM};
use crate::ibverbs::address_handle::AddressHandle;
#[allow(unused_imports)] // for the docs' links
use crate::ibverbs::post_send_guard::TypedPostSendGuard;
use crate::ibverbs::post_send_guard::{
    entry, sealed, Destination, Operation, PathMtus, PendingRequest, RemoteMemoryAccess, Transport,
    TypedLocalBufferHandle,
};

/// The DC transport, as posted by a [`DcInitiator`](super::DcInitiator): every request names its destination.
#[derive(Debug)]
pub enum DynamicallyConnected {}

/// The per-queue-pair context of the DC transport: the queue pair's mlx5 view, and the path MTU
/// it was brought up with, when known.
#[derive(Debug, Clone, Copy)]
pub struct DcContext {
    view: NonNull<mlx5dv_qp_ex>,
    path_mtu: Option<Mtu>,
}

impl DcContext {
    /// The context of a DC initiator of this crate: its mlx5 view and the path MTU it was brought
    /// up with.
    pub(super) fn new(view: NonNull<mlx5dv_qp_ex>, path_mtu: Option<Mtu>) -> Self {
        Self { view, path_mtu }
    }

    /// The context of a DC initiator's mlx5 view, for a guard started with
    /// [`TypedPostSendGuard::start`] on a DC initiator this crate did not create. Its path MTU is
    /// not known, so no RDMA READ is refused for it.
    ///
    /// # Safety
    ///
    /// `mlx5_qp_ex` must point to a live `struct mlx5dv_qp_ex` for as long as guards use the
    /// context.
    pub unsafe fn from_raw(mlx5_qp_ex: NonNull<mlx5dv_qp_ex>) -> Self {
        Self {
            view: mlx5_qp_ex,
            path_mtu: None,
        }
    }

    /// `ibv_entries` plus the DC setters this mlx5 view has, or the name of the first one missing:
    /// the entries [`TypedPostSendGuard::start`] takes for a context from [`from_raw`](Self::from_raw).
    ///
    /// # Safety
    ///
    /// The view must be live (see [`from_raw`](Self::from_raw)).
    pub unsafe fn entries(
        self, ibv_entries: crate::ibverbs::post_send_guard::ProviderEntries, streams: bool,
    ) -> Result<crate::ibverbs::post_send_guard::ProviderEntries, &'static str> {
        Ok(ibv_entries.with(dc_entries(self.view, streams)?))
    }
}

impl sealed::Sealed for DynamicallyConnected {}

impl Transport for DynamicallyConnected {
    type Context = DcContext;
    type AfterOperation<'g, O: Operation> = DcDestination<'g, O>;

    #[inline]
    fn after_operation<O: Operation>(request: PendingRequest<'_, O>, context: DcContext) -> DcDestination<'_, O> {
        DcDestination { request, context }
    }
}

impl RemoteMemoryAccess for DynamicallyConnected {}

/// The destination step of a DC request.
#[must_use = "a request is added to the batch only at its data step"]
pub struct DcDestination<'g, O: Operation> {
    request: PendingRequest<'g, O>,
    context: DcContext,
}

impl<'g, O: Operation> DcDestination<'g, O> {
    /// Sends to the DC target `dct_number` with access key `dc_key`, over the route of `ah`
    /// (`mlx5dv_wr_set_dc_addr`, which copies the handle's address vector: the handle must outlive
    /// this call, not the request's completion).
    ///
    /// An RDMA READ whose responses would not reach this DC initiator is refused before the
    /// provider
    /// ([`ReadResponsesTooLarge`](crate::ibverbs::post_send_guard::TypedPostSendErrorKind::ReadResponsesTooLarge)),
    /// where both path MTUs are known; a READ only.
    #[inline]
    pub fn setup_dc_addr(
        self, ah: &'g AddressHandle, dct_number: u32, dc_key: u64,
    ) -> TypedLocalBufferHandle<'g, O, DcAddress> {
        let path_mtus = self.read_path_mtus(ah);
        let address = self.route(ah, dct_number, dc_key);
        TypedLocalBufferHandle::between(self.request, address, path_mtus)
    }

    /// As [`setup_dc_addr`](Self::setup_dc_addr), on DCI stream `stream_id`
    /// (`mlx5dv_wr_set_dc_addr_stream`); refused at post without streams.
    #[inline]
    pub fn setup_dc_addr_stream(
        self, ah: &'g AddressHandle, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> TypedLocalBufferHandle<'g, O, DcStreamAddress> {
        let path_mtus = self.read_path_mtus(ah);
        let address = DcStreamAddress::new(self.route(ah, dct_number, dc_key), stream_id);
        TypedLocalBufferHandle::between(self.request, address, path_mtus)
    }

    /// As [`setup_dc_addr`](Self::setup_dc_addr), with a raw address handle: public for a
    /// runtime that creates its address handles itself (`ibv_create_ah`). A raw handle says
    /// nothing of its target's path MTU: no READ is refused for it.
    ///
    /// # Safety
    ///
    /// `ah` must be a live address handle until the request's data step has run (libmlx5 copies
    /// its address vector then), or, over a hand-made table, whatever that table's setter
    /// accepts.
    #[inline]
    pub unsafe fn setup_dc_addr_raw(
        self, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64,
    ) -> TypedLocalBufferHandle<'g, O, DcAddress> {
        // SAFETY: the view is the guard's own; `ah` is the caller's promise.
        let address = unsafe { DcAddress::new(self.context.view, ah, dct_number, dc_key) };
        // A raw handle says nothing of its target's MTU.
        TypedLocalBufferHandle::between(self.request, address, None)
    }

    /// As [`setup_dc_addr_stream`](Self::setup_dc_addr_stream), with a raw address handle, as
    /// [`setup_dc_addr_raw`](Self::setup_dc_addr_raw).
    ///
    /// # Safety
    ///
    /// As [`setup_dc_addr_raw`](Self::setup_dc_addr_raw).
    #[inline]
    pub unsafe fn setup_dc_addr_stream_raw(
        self, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> TypedLocalBufferHandle<'g, O, DcStreamAddress> {
        // SAFETY: the view is the guard's own; `ah` is the caller's promise.
        let address = unsafe { DcAddress::new(self.context.view, ah, dct_number, dc_key) };
        // A raw handle says nothing of its target's MTU.
        TypedLocalBufferHandle::between(self.request, DcStreamAddress::new(address, stream_id), None)
    }

    /// The path MTUs a READ over `ah` is held to: this initiator's and the handle's target's,
    /// when both are known; for any other operation, nothing to read.
    #[inline]
    fn read_path_mtus(&self, ah: &AddressHandle) -> Option<PathMtus> {
        if O::ENTRY != entry::RDMA_READ {
            return None;
        }
        PathMtus::known(self.context.path_mtu, ah.destination_path_mtu())
    }

    /// The address of a request over `ah` on this initiator's view.
    #[inline]
    fn route(&self, ah: &AddressHandle, dct_number: u32, dc_key: u64) -> DcAddress {
        // SAFETY: only the pointer is taken; the guard's borrow keeps the handle alive until the
        // request's data step, where libmlx5 copies its address vector; the view is the guard's.
        unsafe { DcAddress::new(self.context.view, ah.ah(), dct_number, dc_key) }
    }
}

/// A DC request that has its address: what the data step requires. It is there for the
/// compiler's error: a request that skips its address fails to compile with a message that names
/// the missing step, not with "no method named `setup_sge`".
#[diagnostic::on_unimplemented(
    message = "a DC request needs its address before its data: call `setup_dc_addr` after the operation",
    label = "no `setup_dc_addr(&ah, dct_number, dc_key)` before this data step",
    note = "a DC request is `construct_wr` → operation → `setup_dc_addr` (or `setup_dc_addr_stream`) → data"
)]
pub trait Addressed {
    /// The data step.
    type DataStep: SetInlineData + SetScatterGatherEntry;
    /// The request at its data step.
    fn into_data_step(self) -> Self::DataStep;
}

impl<O: Operation, D: Destination> Addressed for TypedLocalBufferHandle<'_, O, D> {
    type DataStep = Self;

    #[inline]
    fn into_data_step(self) -> Self {
        self
    }
}

// The data step before the address, for the compiler's error only (rustc shows `Addressed`'s
// message only for a bound on the method, not on an impl of sideway's `SetInlineData`).
impl<O: Operation> DcDestination<'_, O> {
    /// Not callable: a DC request's data comes after its address ([`Addressed`]).
    pub fn setup_inline_data(self, buf: &[u8])
    where
        Self: Addressed,
    {
        self.into_data_step().setup_inline_data(buf)
    }

    /// Not callable: a DC request's data comes after its address ([`Addressed`]).
    pub fn setup_inline_data_list(self, bufs: &[IoSlice<'_>])
    where
        Self: Addressed,
    {
        self.into_data_step().setup_inline_data_list(bufs)
    }

    /// Not callable: a DC request's data comes after its address ([`Addressed`]).
    ///
    /// # Safety
    ///
    /// As [`SetScatterGatherEntry::setup_sge`] after the address.
    pub unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32)
    where
        Self: Addressed,
    {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.into_data_step().setup_sge(lkey, addr, length) }
    }

    /// Not callable: a DC request's data comes after its address ([`Addressed`]).
    ///
    /// # Safety
    ///
    /// As [`SetScatterGatherEntry::setup_sge_list`] after the address.
    pub unsafe fn setup_sge_list(self, sg_list: &[ibv_sge])
    where
        Self: Addressed,
    {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.into_data_step().setup_sge_list(sg_list) }
    }
}

/// A DC destination: `mlx5dv_wr_set_dc_addr(ah, dct_number, dc_key)`.
#[derive(Debug, Clone, Copy)]
pub struct DcAddress {
    mlx5_qp_ex: NonNull<mlx5dv_qp_ex>,
    ah: NonNull<ibv_ah>,
    dct_number: u32,
    dc_key: u64,
}

impl sealed::Sealed for DcAddress {}

impl DcAddress {
    /// The address of every request of a [`BatchAddressed`](super::BatchAddressed) guard.
    ///
    /// # Safety
    ///
    /// `mlx5_qp_ex` must be the live mlx5 view of the queue pair the address is set on, and `ah`
    /// a live address handle (or whatever that view's `wr_set_dc_addr` accepts) until each
    /// request's data step has run (libmlx5 copies its address vector then).
    #[inline]
    pub unsafe fn new(mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64) -> Self {
        Self {
            mlx5_qp_ex,
            ah,
            dct_number,
            dc_key,
        }
    }
}

// SAFETY: it calls `wr_set_dc_addr`, its entry, with the views and handle `DcAddress::new`
// promises alive.
unsafe impl Destination for DcAddress {
    const ENTRY: u32 = SET_DC_ADDR;
    const ENTRY_NAME: &'static str = "wr_set_dc_addr";

    #[inline]
    unsafe fn set(self, _qp: *mut ibv_qp_ex) {
        mlx5dv_wr_set_dc_addr(self.mlx5_qp_ex.as_ptr(), self.ah.as_ptr(), self.dct_number, self.dc_key)
    }
}

/// A DC destination on a DCI stream: `mlx5dv_wr_set_dc_addr_stream(ah, dct_number, dc_key,
/// stream_id)`.
#[derive(Debug, Clone, Copy)]
pub struct DcStreamAddress {
    address: DcAddress,
    stream_id: u16,
}

impl sealed::Sealed for DcStreamAddress {}

impl DcStreamAddress {
    /// `address` on DCI stream `stream_id`.
    #[inline]
    pub(super) fn new(address: DcAddress, stream_id: u16) -> Self {
        Self { address, stream_id }
    }
}

// SAFETY: as for DcAddress, through `wr_set_dc_addr_stream`.
unsafe impl Destination for DcStreamAddress {
    const ENTRY: u32 = SET_DC_ADDR_STREAM;
    const ENTRY_NAME: &'static str = "wr_set_dc_addr_stream";

    #[inline]
    unsafe fn set(self, _qp: *mut ibv_qp_ex) {
        let a = self.address;
        mlx5dv_wr_set_dc_addr_stream(
            a.mlx5_qp_ex.as_ptr(),
            a.ah.as_ptr(),
            a.dct_number,
            a.dc_key,
            self.stream_id,
        )
    }
}

#[cfg(test)]
mod tests {
    //! The DC setters a DC initiator needs, read from its mlx5 view.
    use super::*;

    unsafe extern "C" fn set_dc_addr(_: *mut mlx5dv_qp_ex, _: *mut rdma_mummy_sys::ibv_ah, _: u32, _: u64) {}

    #[test]
    fn a_missing_dc_entry_is_named() {
        // SAFETY: zeroes are valid for mlx5dv_qp_ex (an integer and optional functions).
        let mut mlx5: mlx5dv_qp_ex = unsafe { std::mem::zeroed() };
        mlx5.wr_set_dc_addr = Some(set_dc_addr);
        // SAFETY: the view is live; only its function pointers are read.
        assert_eq!(
            unsafe { dc_entries(NonNull::from(&mut mlx5), true) },
            Err("wr_set_dc_addr_stream")
        );
        // SAFETY: as above.
        assert!(unsafe { dc_entries(NonNull::from(&mut mlx5), false) }.is_ok());
        mlx5.wr_set_dc_addr = None;
        // SAFETY: as above.
        assert_eq!(
            unsafe { dc_entries(NonNull::from(&mut mlx5), false) },
            Err("wr_set_dc_addr")
        );
    }
}
