//! The DC transport of the post guard: [`DynamicallyConnected`], its per-queue-pair context
//! (the mlx5 view), and the destination step that names each request's DC target
//! (`mlx5dv_wr_set_dc_addr`, with streams `mlx5dv_wr_set_dc_addr_stream`), which the data step
//! requires ([`Addressed`]).
use std::io::IoSlice;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, ibv_sge, mlx5dv_qp_ex, mlx5dv_wr_set_dc_addr, mlx5dv_wr_set_dc_addr_stream};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry};

use super::{dc_entries, DcRoute, SET_DC_ADDR, SET_DC_ADDR_STREAM};
#[allow(unused_imports)] // for the docs' links
use crate::ibverbs::post_send_guard::PostSendGuard;
use crate::ibverbs::post_send_guard::{
    entry, sealed, Destination, LocalBufferHandle, Operation, PathMtus, PendingRequest, RemoteMemoryAccess, Transport,
};

/// The DC transport, as posted by a [`DcInitiator`](super::DcInitiator): every request names its destination.
#[derive(Debug)]
pub enum DynamicallyConnected {}

/// The per-queue-pair context of the DC transport: the queue pair's mlx5 view, and the path MTU
/// it was brought up with, when known (an RDMA READ to a target whose path MTU is larger is then
/// refused where it would not fit: see [`DcDestination::setup_dc_addr`]).
#[derive(Debug, Clone, Copy)]
pub struct DcContext {
    pub(super) view: NonNull<mlx5dv_qp_ex>,
    pub(super) path_mtu: Option<Mtu>,
}

impl DcContext {
    /// The context of a DC initiator's mlx5 view, for a guard started with
    /// [`PostSendGuard::start`] on a DC initiator this crate did not create (or on a provider
    /// table of one's own); its path MTU is not known (see [`with_path_mtu`](Self::with_path_mtu)).
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

    /// The same context, of a DC initiator brought up with `path_mtu` (its INIT → RTR's): an
    /// RDMA READ longer than it, to a target whose path MTU is larger, is refused
    /// ([`ReadResponsesTooLarge`](crate::ibverbs::post_send_guard::PostSendErrorKind::ReadResponsesTooLarge)).
    #[inline]
    pub fn with_path_mtu(self, path_mtu: Option<Mtu>) -> Self {
        Self { path_mtu, ..self }
    }

    /// `ibv_entries` plus the DC setters this mlx5 view has (`wr_set_dc_addr`, and with
    /// `streams` `wr_set_dc_addr_stream`), or the name of the first one missing.
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
    /// (`mlx5dv_wr_set_dc_addr`).
    ///
    /// An RDMA READ is refused before the provider
    /// ([`ReadResponsesTooLarge`](crate::ibverbs::post_send_guard::PostSendErrorKind::ReadResponsesTooLarge))
    /// where its responses would not reach this DC initiator: when it is longer than the
    /// initiator's path MTU and the target's is larger (the target answers in packets of its own
    /// path MTU). Both must be known: the initiator's once brought up
    /// ([`DcInitiator::path_mtu`](super::DcInitiator::path_mtu)), the target's from the route
    /// ([`DcRoute::destination_path_mtu`]: an address handle from a
    /// [`DcEndpoint`](crate::mlx5::dc::endpoint::DcEndpoint) whose peer said it); otherwise
    /// nothing is refused for it. One comparison of two values known before the request, for a
    /// READ only.
    ///
    /// libmlx5 copies the address handle's address vector into the request when this is called
    /// (`mlx5_send_wr_set_dc_addr` in `qp.c`): the handle must outlive this call, not the
    /// request's completion. The borrow here lasts as long as the batch's guard, which is longer
    /// than needed but costs nothing (it exists only at compile time); dropping the handle after
    /// [`PostSendGuard::post`] is fine. Cache one handle per destination anyway: creating one is a
    /// system call.
    ///
    /// `ah` is any [`DcRoute`]: an [`AddressHandle`](crate::ibverbs::address_handle::AddressHandle)
    /// (or an `Arc` of one), or a simulated fabric's, which only a simulated initiator takes.
    #[inline]
    pub fn setup_dc_addr<R: DcRoute + ?Sized>(
        self, ah: &'g R, dct_number: u32, dc_key: u64,
    ) -> LocalBufferHandle<'g, O, R::Address> {
        let path_mtus = self.read_path_mtus(ah);
        LocalBufferHandle::between(
            self.request,
            ah.address(self.context.view, dct_number, dc_key),
            path_mtus,
        )
    }

    /// As [`setup_dc_addr`](Self::setup_dc_addr), on DCI stream `stream_id`
    /// (`mlx5dv_wr_set_dc_addr_stream`); the DC initiator must have been created with streams,
    /// else the request is refused at post.
    #[inline]
    pub fn setup_dc_addr_stream<R: DcRoute + ?Sized>(
        self, ah: &'g R, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> LocalBufferHandle<'g, O, R::StreamAddress> {
        let path_mtus = self.read_path_mtus(ah);
        let address = ah.stream_address(self.context.view, dct_number, dc_key, stream_id);
        LocalBufferHandle::between(self.request, address, path_mtus)
    }

    /// As [`setup_dc_addr`](Self::setup_dc_addr), with a raw address handle: one created outside
    /// this crate (`ibv_create_ah`), or whatever a provider table of one's own accepts. A raw
    /// handle says nothing of its target's path MTU: no READ is refused for it.
    ///
    /// # Safety
    ///
    /// `ah` must be a live address handle until the request's data step has run (libmlx5 copies
    /// its address vector then), or, over a hand-made table, whatever that table's setter
    /// accepts.
    #[inline]
    pub unsafe fn setup_dc_addr_raw(
        self, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64,
    ) -> LocalBufferHandle<'g, O, DcAddress> {
        self.address(ah, dct_number, dc_key)
    }

    /// The path MTUs a READ over `route` is held to: this initiator's and the route's target's,
    /// when both are known; for any other operation, nothing to read.
    #[inline]
    fn read_path_mtus<R: DcRoute + ?Sized>(&self, route: &R) -> Option<PathMtus> {
        if O::ENTRY != entry::RDMA_READ {
            return None;
        }
        PathMtus::known(self.context.path_mtu, route.destination_path_mtu())
    }

    #[inline]
    fn address(self, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64) -> LocalBufferHandle<'g, O, DcAddress> {
        // SAFETY: the view is the guard's own; `ah` is the caller's promise (setup_dc_addr_raw).
        let address = unsafe { DcAddress::new(self.context.view, ah, dct_number, dc_key) };
        // A raw handle says nothing of its target's MTU.
        LocalBufferHandle::between(self.request, address, None)
    }

    #[cfg(test)]
    fn stream_address(
        self, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> LocalBufferHandle<'g, O, DcStreamAddress> {
        // SAFETY: as in `address` (the tests' recording tables take any pointer).
        let address = unsafe { DcAddress::new(self.context.view, ah, dct_number, dc_key) };
        LocalBufferHandle::between(self.request, DcStreamAddress { address, stream_id }, None)
    }
}

/// A DC request that has its address: what the data step (`setup_sge`, `setup_inline_data`, …)
/// requires. The step after [`setup_dc_addr`](DcDestination::setup_dc_addr) (a
/// [`LocalBufferHandle`]) is `Addressed`; a [`DcDestination`], the step before it, never is.
///
/// It is there for the compiler's error: the data setters of a `DcDestination` require it, so a
/// request that skips its address fails to compile with a message that names the missing step,
/// not with "no method named `setup_sge`". No code runs through it.
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

impl<O: Operation, D: Destination> Addressed for LocalBufferHandle<'_, O, D> {
    type DataStep = Self;

    #[inline]
    fn into_data_step(self) -> Self {
        self
    }
}

// The data step before the address, for the compiler's error only: `Addressed` never holds for
// a `DcDestination`, so a call fails with its message, naming `setup_dc_addr`. (A bound on an
// impl of sideway's `SetInlineData` would fail as "method exists but its trait bounds were not
// satisfied", without the message: rustc shows it only for a bound on the method.)
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
    /// The address of one request: the DC initiator's mlx5 view, the route, the target; for a
    /// guard whose requests all go to one address ([`BatchAddressed`](super::BatchAddressed)).
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
    pub fn new(address: DcAddress, stream_id: u16) -> Self {
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
    //! The DC transport without a device: the requests it refuses never reach the provider,
    //! through hand-made `ibv_qp_ex` and `mlx5dv_qp_ex` tables that record the calls.
    use std::io::IoSlice;

    use rdma_mummy_sys::ibv_ah;
    use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};

    use super::*;
    use crate::ibverbs::post_send_guard::recording::take_calls;
    use crate::ibverbs::post_send_guard::{PostSendErrorKind, ProviderEntries};
    use crate::mlx5::dc::initiator::recording::recording_dci;
    use crate::mlx5::dc::initiator::DcRoute;
    use crate::mlx5::dc::initiator::DC_SEND_OPERATIONS;
    use sideway::ibverbs::queue_pair::SendOperationFlags;

    fn start(
        qp: &mut ibv_qp_ex, mlx5: &mut mlx5dv_qp_ex, granted: SendOperationFlags, streams: bool,
    ) -> PostSendGuard<'static, DynamicallyConnected> {
        start_with_path_mtu(qp, mlx5, granted, streams, None)
    }

    /// As `start`, on a DC initiator brought up with `path_mtu`.
    fn start_with_path_mtu(
        qp: &mut ibv_qp_ex, mlx5: &mut mlx5dv_qp_ex, granted: SendOperationFlags, streams: bool, path_mtu: Option<Mtu>,
    ) -> PostSendGuard<'static, DynamicallyConnected> {
        let (qp, mlx5) = (NonNull::from(qp), NonNull::from(mlx5));
        // SAFETY: the tables are live (boxes the tests keep until after the guard).
        let entries = unsafe { ProviderEntries::new(qp, granted) }.expect("recording entries");
        // SAFETY: as above.
        let dc = unsafe { dc_entries(mlx5, streams) }.expect("recording mlx5 entries");
        // SAFETY: the tables outlive the guard and nothing else uses them meanwhile; the
        // context is their mlx5 view.
        unsafe { PostSendGuard::start(qp, entries.with(dc), DcContext::from_raw(mlx5).with_path_mtu(path_mtu)) }
    }

    /// A fake address handle: the recorder only prints its address.
    fn fake_ah() -> NonNull<ibv_ah> {
        NonNull::dangling()
    }

    #[test]
    fn a_dropped_guard_aborts_and_refused_requests_never_reach_the_provider() {
        let (mut qp, mut mlx5) = recording_dci(false);
        take_calls();
        // Created with SEND only and without streams.
        let mut guard = start(&mut qp, &mut mlx5, SendOperationFlags::Send, false);
        let request = guard.construct_wr(1, WorkRequestFlags::Signaled).setup_write(1, 2);
        // SAFETY: the recorder does not touch the buffer.
        unsafe { request.address(fake_ah(), 1, 2).setup_sge(1, 2, 3) };
        let request = guard.construct_wr(2, WorkRequestFlags::Signaled).setup_send();
        request.stream_address(fake_ah(), 1, 2, 0).setup_inline_data(b"x");
        assert_eq!(guard.batch_len(), 2);
        let err = guard.post().unwrap_err();
        match err.0 {
            PostSendErrorKind::OperationNotEnabled {
                index, wr_id, entry, ..
            } => assert_eq!((index, wr_id, entry), (0, 1, "wr_rdma_write")),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(take_calls(), ["start", "abort"]);
        // The stream variant alone is refused by its own entry's name.
        let mut guard = start(&mut qp, &mut mlx5, SendOperationFlags::Send, false);
        let request = guard.construct_wr(3, WorkRequestFlags::Signaled).setup_send();
        request.stream_address(fake_ah(), 1, 2, 0).setup_inline_data(b"x");
        assert!(matches!(
            guard.post().unwrap_err().0,
            PostSendErrorKind::OperationNotEnabled {
                entry: "wr_set_dc_addr_stream",
                ..
            }
        ));
        assert_eq!(take_calls(), ["start", "abort"]);
        // A guard dropped unposted aborts its batch.
        let mut guard = start(&mut qp, &mut mlx5, SendOperationFlags::Send, false);
        let request = guard.construct_wr(4, WorkRequestFlags::Signaled).setup_send();
        request.address(fake_ah(), 1, 2).setup_inline_data(b"y");
        drop(guard);
        let calls = take_calls();
        assert_eq!(calls.first().map(String::as_str), Some("start"));
        assert_eq!(calls.last().map(String::as_str), Some("abort"));
        assert_eq!(calls.len(), 5, "start, send, dc_addr, inline, abort: {calls:?}");
    }

    #[test]
    fn inline_data_beyond_the_granted_size_is_refused_before_the_provider() {
        let (mut qp, mut mlx5) = recording_dci(false);
        take_calls();
        let mut guard = start(&mut qp, &mut mlx5, DC_SEND_OPERATIONS, false);
        guard.set_max_inline_data(4);
        let request = guard.construct_wr(1, WorkRequestFlags::Signaled).setup_send();
        request.address(fake_ah(), 1, 2).setup_inline_data(b"four");
        let request = guard.construct_wr(2, WorkRequestFlags::Signaled).setup_send();
        request.address(fake_ah(), 1, 2).setup_inline_data(b"fiveb");
        let err = guard.post().unwrap_err();
        match err.0 {
            PostSendErrorKind::InlineDataTooLong {
                index,
                wr_id,
                length,
                max_inline_data,
                batch_len,
            } => assert_eq!((index, wr_id, length, max_inline_data, batch_len), (1, 2, 5, 4, 2)),
            other => panic!("unexpected {other:?}"),
        }
        let calls = take_calls();
        assert_eq!(calls.first().map(String::as_str), Some("start"));
        assert_eq!(calls.last().map(String::as_str), Some("abort"));
        assert!(!calls.iter().any(|call| call.contains("fiveb")), "{calls:?}");
        // The list variant counts every slice.
        let mut guard = start(&mut qp, &mut mlx5, DC_SEND_OPERATIONS, false);
        guard.set_max_inline_data(4);
        let request = guard.construct_wr(3, WorkRequestFlags::Signaled).setup_send();
        request
            .address(fake_ah(), 1, 2)
            .setup_inline_data_list(&[IoSlice::new(b"abc"), IoSlice::new(b"de")]);
        assert!(matches!(
            guard.post().unwrap_err().0,
            PostSendErrorKind::InlineDataTooLong { length: 5, .. }
        ));
        assert_eq!(take_calls(), ["start", "abort"]);
    }

    /// A route to a target whose path MTU is known (or not), as the address handle a
    /// `DcEndpoint` makes says it.
    struct RouteTo(Option<Mtu>);

    impl DcRoute for RouteTo {
        type Address = DcAddress;
        type StreamAddress = DcStreamAddress;

        fn address(&self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64) -> DcAddress {
            // SAFETY: the recorders only print the handle's address.
            unsafe { DcAddress::new(mlx5_qp_ex, fake_ah(), dct_number, dc_key) }
        }

        fn stream_address(
            &self, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64, stream_id: u16,
        ) -> DcStreamAddress {
            DcStreamAddress::new(self.address(mlx5_qp_ex, dct_number, dc_key), stream_id)
        }

        fn destination_path_mtu(&self) -> Option<Mtu> {
            self.0
        }
    }

    #[test]
    fn a_read_whose_responses_would_not_reach_the_initiator_is_refused_before_the_provider() {
        use rdma_mummy_sys::ibv_sge;
        // A DC initiator brought up at 1024 (a 1500-byte Ethernet port) and a target at 4096 (a
        // 9000-byte one): the target answers a READ in packets of up to 4096 bytes.
        let (mut qp, mut mlx5) = recording_dci(true);
        let far = RouteTo(Some(Mtu::Mtu4096));
        let start_at = |qp: &mut ibv_qp_ex, mlx5: &mut mlx5dv_qp_ex, path_mtu| {
            start_with_path_mtu(qp, mlx5, DC_SEND_OPERATIONS, true, path_mtu)
        };
        take_calls();
        let mut guard = start_at(&mut qp, &mut mlx5, Some(Mtu::Mtu1024));
        // SAFETY (each data step): the recorder does not touch the buffers.
        // At most the initiator's MTU: one response packet of its own length, which fits.
        unsafe {
            let read = guard.construct_wr(1, WorkRequestFlags::Signaled).setup_read(5, 0x1000);
            read.setup_dc_addr(&far, 0x42, 7).setup_sge(3, 0x2000, 1024);
        }
        // Not a READ: sent at the initiator's own MTU, and the atomics' answer is 8 bytes.
        unsafe {
            let write = guard.construct_wr(2, WorkRequestFlags::Signaled).setup_write(5, 0x1000);
            write.setup_dc_addr(&far, 0x42, 7).setup_sge(3, 0x2000, 1 << 20);
            let add = guard
                .construct_wr(3, WorkRequestFlags::Signaled)
                .setup_atomic_fetch_add(5, 0x1000, 1);
            add.setup_dc_addr_stream(&far, 0x42, 7, 1).setup_sge(3, 0x2000, 8);
        }
        // One byte more: its first response packet is 1025 bytes, which the initiator's path drops.
        unsafe {
            let read = guard.construct_wr(4, WorkRequestFlags::Signaled).setup_read(5, 0x1000);
            read.setup_dc_addr(&far, 0x42, 7).setup_sge(3, 0x2000, 1025);
        }
        assert_eq!(guard.batch_len(), 4);
        let err = guard.post().unwrap_err();
        match &err.0 {
            PostSendErrorKind::ReadResponsesTooLarge {
                index,
                wr_id,
                length,
                path_mtu,
                responder_path_mtu,
                batch_len,
            } => assert_eq!(
                (*index, *wr_id, *length, *path_mtu, *responder_path_mtu, *batch_len),
                (3, 4, 1025, Mtu::Mtu1024, Mtu::Mtu4096, 4)
            ),
            other => panic!("unexpected {other:?}"),
        }
        assert!(
            err.0
                .to_string()
                .contains("path MTU is 4096 bytes, larger than this queue pair's 1024"),
            "{}",
            err.0
        );
        let calls = take_calls();
        assert_eq!(calls.last().map(String::as_str), Some("abort"), "{calls:?}");
        assert!(
            !calls.iter().any(|call| call.contains("wr_id=4") || call == "complete"),
            "{calls:?}"
        );
        // On a stream, with a list: the entries together are the READ's length.
        let mut guard = start_at(&mut qp, &mut mlx5, Some(Mtu::Mtu1024));
        let list = [
            ibv_sge {
                addr: 0x2000,
                length: 1000,
                lkey: 3,
            },
            ibv_sge {
                addr: 0x3000,
                length: 100,
                lkey: 3,
            },
        ];
        unsafe {
            let read = guard.construct_wr(5, WorkRequestFlags::Signaled).setup_read(5, 0x1000);
            read.setup_dc_addr_stream(&far, 0x42, 7, 1).setup_sge_list(&list);
        }
        assert!(matches!(
            guard.post().unwrap_err().0,
            PostSendErrorKind::ReadResponsesTooLarge {
                wr_id: 5,
                length: 1100,
                ..
            }
        ));
        assert_eq!(take_calls(), ["start", "abort"]);
        // Posted: a target at the initiator's MTU or below; a target, or an initiator, whose MTU
        // is not known (an older peer's endpoint, a handle made by hand, an initiator not
        // brought up): nothing to hold the READ to.
        for (initiator, target) in [
            (Some(Mtu::Mtu1024), Some(Mtu::Mtu1024)),
            (Some(Mtu::Mtu4096), Some(Mtu::Mtu1024)),
            (Some(Mtu::Mtu1024), None),
            (None, Some(Mtu::Mtu4096)),
        ] {
            let mut guard = start_at(&mut qp, &mut mlx5, initiator);
            unsafe {
                let read = guard.construct_wr(6, WorkRequestFlags::Signaled).setup_read(5, 0x1000);
                read.setup_dc_addr(&RouteTo(target), 0x42, 7)
                    .setup_sge(3, 0x2000, 1 << 20);
            }
            guard
                .post()
                .unwrap_or_else(|err| panic!("{initiator:?} from {target:?}: {err:?}"));
            assert_eq!(take_calls().last().map(String::as_str), Some("complete"));
        }
        // Each READ is held to its own target's: one addressed by a raw handle after one to the
        // larger target is not held to that target's MTU.
        let mut guard = start_at(&mut qp, &mut mlx5, Some(Mtu::Mtu1024));
        unsafe {
            let read = guard.construct_wr(7, WorkRequestFlags::Signaled).setup_read(5, 0x1000);
            read.setup_dc_addr(&far, 0x42, 7).setup_sge(3, 0x2000, 64);
            let read = guard.construct_wr(8, WorkRequestFlags::Signaled).setup_read(5, 0x1000);
            read.address(fake_ah(), 0x43, 7).setup_sge(3, 0x2000, 1 << 20);
        }
        guard
            .post()
            .expect("the second READ's target is not known to be larger");
        assert_eq!(take_calls().last().map(String::as_str), Some("complete"));
    }

    #[test]
    fn a_missing_dc_entry_is_named() {
        let (_, mut mlx5) = recording_dci(false);
        // SAFETY: the table is live.
        assert_eq!(
            unsafe { dc_entries(NonNull::from(&mut *mlx5), true) },
            Err("wr_set_dc_addr_stream")
        );
        mlx5.wr_set_dc_addr = None;
        // SAFETY: as above.
        assert_eq!(
            unsafe { dc_entries(NonNull::from(&mut *mlx5), false) },
            Err("wr_set_dc_addr")
        );
    }
}
