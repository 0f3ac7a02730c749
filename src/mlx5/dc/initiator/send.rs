//! [`DcSend`]: what a program posts DC requests on, a [`DcInitiator`] or a simulated one, so that
//! one program (or one test) runs on a ConnectX and on a simulated fabric.

use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::{
    BatchAddressed, DcAddress, DcBatchAddress, DcContext, DcInitiator, DcRoute, DynamicallyConnected, SET_DC_ADDR,
    SET_DC_ADDR_STREAM,
};
use crate::ibverbs::address_handle::AddressHandle;
use crate::ibverbs::post_send_guard::{PathMtus, PostSendError, PostSendGuard, ProviderEntries, WorkRequestHandle};

/// A DC initiator a program posts on: [`DcInitiator`] on a device, and a simulated fabric's
/// initiator (sideway-ext-dc-pool's `SimulatedFabric::create_dci_builder`).
/// Both post through the same guard (`construct_wr` → operation → `setup_dc_addr` → data →
/// `post`), so code generic over `I: DcSend` builds its requests once for both. Creating,
/// bringing up and polling stay each side's own: a device's initiator completes into the CQ its
/// builder was given, a simulated one into its fabric's.
///
/// ```
/// use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
/// use sideway_ext::ibverbs::post_send_guard::PostSendError;
/// use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
/// use sideway_ext::mlx5::dc::initiator::DcSend;
///
/// /// One RDMA WRITE of `bytes` to `rkey`/`address` at the target of `endpoint`.
/// fn write<I: DcSend>(
///     dci: &mut I, ah: &I::AddressHandle, endpoint: &DcEndpoint, rkey: u32, address: u64, bytes: &[u8],
/// ) -> Result<(), PostSendError> {
///     dci.post_send_one(1, WorkRequestFlags::Signaled, |wr| {
///         wr.setup_write(rkey, address)
///             .setup_dc_addr(ah, endpoint.dct_number(), endpoint.dc_key())
///             .setup_inline_data(bytes);
///     })
/// }
/// ```
pub trait DcSend {
    /// The address handle its requests are routed by: [`AddressHandle`] on a device, the
    /// fabric's on a simulated fabric (`Arc`s of them are routes too).
    type AddressHandle: DcRoute + ?Sized;

    /// The queue pair number its completions carry.
    fn qp_number(&self) -> u32;

    /// How many requests its send queue holds.
    fn max_send_wr(&self) -> u32;

    /// The longest inline data one request takes; longer is refused at post.
    fn max_inline_data(&self) -> u32;

    /// Starts a batch of send requests (`ibv_wr_start`).
    fn start_post_send(&mut self) -> PostSendGuard<'_, DynamicallyConnected>;

    /// Posts one send request described by `request` from its operation on (its DC address
    /// included).
    ///
    /// # Errors
    ///
    /// As [`PostSendGuard::post`].
    fn post_send_one(
        &mut self, wr_id: u64, wr_flags: WorkRequestFlags,
        request: impl FnOnce(WorkRequestHandle<'_, DynamicallyConnected>),
    ) -> Result<(), PostSendError> {
        let mut guard = self.start_post_send();
        request(guard.construct_wr(wr_id, wr_flags));
        guard.post()
    }
}

impl DcInitiator {
    /// Starts a batch of send requests (`ibv_wr_start`) that all go to the DC target
    /// `dct_number` with access key `dc_key`, over the route of `ah`
    /// (`mlx5dv_wr_set_dc_addr`), or, with a `stream`, on that DCI stream
    /// (`mlx5dv_wr_set_dc_addr_stream`): `construct_wr` → operation → data, with no address
    /// step. What a pool of initiators posts, one destination per batch.
    ///
    /// As [`start_post_send`](Self::start_post_send)'s, its requests are refused before the
    /// provider for an operation the initiator was not created with, for inline data beyond its
    /// granted size, and for an RDMA READ whose responses would not reach it (its path MTU and
    /// the target's, [`AddressHandle::destination_path_mtu`], both known); a `stream` on an
    /// initiator created without DCI streams refuses each request
    /// ([`OperationNotEnabled`](crate::ibverbs::post_send_guard::PostSendErrorKind::OperationNotEnabled)
    /// naming `wr_set_dc_addr_stream`).
    #[inline]
    pub fn start_post_send_to<'g>(
        &'g mut self, ah: &'g AddressHandle, dct_number: u32, dc_key: u64, stream: Option<u16>,
    ) -> PostSendGuard<'g, BatchAddressed<DcBatchAddress>> {
        let (qp_ex, mut entries) = self.send_view;
        if stream.is_some() && !entries.contains(SET_DC_ADDR_STREAM) {
            // Refused under the stream setter's name (DcBatchAddress).
            entries = ProviderEntries::NONE.with(entries.bits() & !SET_DC_ADDR);
        }
        // SAFETY: the mlx5 view is this initiator's own, and `ah` is borrowed for as long as the
        // guard lives (libmlx5 copies its address vector at each request's data step).
        let address = unsafe { DcAddress::new(self.mlx5_qp_ex, ah.ah(), dct_number, dc_key) };
        // SAFETY: the queue pair is alive and exclusively borrowed for the guard's lifetime; its
        // provider filled the entries read at creation (the DC setters checked as above).
        let mut guard = unsafe { PostSendGuard::start(qp_ex, entries, DcBatchAddress::new(address, stream)) };
        guard.set_max_inline_data(self.granted.max_inline_data);
        guard.set_path_mtus(PathMtus::known(self.path_mtu(), ah.destination_path_mtu()));
        guard
    }

    /// Starts a batch of send requests (`ibv_wr_start`); each request is addressed with
    /// `setup_dc_addr` between its operation and its data.
    #[inline]
    pub fn start_post_send(&mut self) -> PostSendGuard<'_, DynamicallyConnected> {
        let (qp_ex, entries) = self.send_view;
        // Its mlx5 view, and the path MTU its READs are held to.
        let context = DcContext {
            view: self.mlx5_qp_ex,
            path_mtu: self.path_mtu(),
        };
        // SAFETY: the queue pair is alive and exclusively borrowed for the guard's lifetime; its
        // provider filled the entries read at creation; the context is its mlx5 view.
        let mut guard = unsafe { PostSendGuard::start(qp_ex, entries, context) };
        guard.set_max_inline_data(self.granted.max_inline_data);
        guard
    }

    /// Posts one send request at the cost of the raw calls, as
    /// [`SharedReceiveQueuePair::post_send_one`](crate::ibverbs::queue_pair::SharedReceiveQueuePair::post_send_one):
    /// `request` describes it from its operation on, its DC address included
    /// (`wr.setup_send().setup_dc_addr(&ah, dct_number, dc_key).setup_inline_data(b"hi")`); an
    /// operation or setter the DC initiator was not created with never reaches the provider.
    #[inline]
    pub fn post_send_one(
        &mut self, wr_id: u64, wr_flags: sideway::ibverbs::queue_pair::WorkRequestFlags,
        request: impl FnOnce(crate::ibverbs::post_send_guard::WorkRequestHandle<'_, DynamicallyConnected>),
    ) -> Result<(), crate::ibverbs::post_send_guard::PostSendError> {
        let mut guard = self.start_post_send();
        request(guard.construct_wr(wr_id, wr_flags));
        guard.post()
    }
}

impl DcSend for DcInitiator {
    type AddressHandle = AddressHandle;

    fn qp_number(&self) -> u32 {
        DcInitiator::qp_number(self)
    }

    fn max_send_wr(&self) -> u32 {
        DcInitiator::max_send_wr(self)
    }

    fn max_inline_data(&self) -> u32 {
        DcInitiator::max_inline_data(self)
    }

    #[inline]
    fn start_post_send(&mut self) -> PostSendGuard<'_, DynamicallyConnected> {
        DcInitiator::start_post_send(self)
    }

    #[inline]
    fn post_send_one(
        &mut self, wr_id: u64, wr_flags: WorkRequestFlags,
        request: impl FnOnce(WorkRequestHandle<'_, DynamicallyConnected>),
    ) -> Result<(), PostSendError> {
        DcInitiator::post_send_one(self, wr_id, wr_flags, request)
    }
}
