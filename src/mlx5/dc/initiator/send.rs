//! How a [`DcInitiator`] starts its batches: each request addressed at its own step, or a batch
//! to one DC address.

use super::{
    BatchAddressed, DcAddress, DcBatchAddress, DcContext, DcInitiator, DynamicallyConnected, SET_DC_ADDR,
    SET_DC_ADDR_STREAM,
};
use crate::ibverbs::address_handle::AddressHandle;
use crate::ibverbs::post_send_guard::{PathMtus, ProviderEntries, TypedPostSendGuard};

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
    /// ([`OperationNotEnabled`](crate::ibverbs::post_send_guard::TypedPostSendErrorKind::OperationNotEnabled)
    /// naming `wr_set_dc_addr_stream`).
    #[inline]
    pub fn start_post_send_to<'g>(
        &'g mut self, ah: &'g AddressHandle, dct_number: u32, dc_key: u64, stream: Option<u16>,
    ) -> TypedPostSendGuard<'g, BatchAddressed<DcBatchAddress>> {
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
        let mut guard = unsafe { TypedPostSendGuard::start(qp_ex, entries, DcBatchAddress::new(address, stream)) };
        guard.set_max_inline_data(self.granted.max_inline_data);
        guard.set_path_mtus(PathMtus::known(self.path_mtu(), ah.destination_path_mtu()));
        guard
    }

    /// Starts a batch of send requests (`ibv_wr_start`); each request is addressed with
    /// `setup_dc_addr` between its operation and its data.
    #[inline]
    pub fn start_post_send(&mut self) -> TypedPostSendGuard<'_, DynamicallyConnected> {
        let (qp_ex, entries) = self.send_view;
        // Its mlx5 view, and the path MTU its READs are held to.
        let context = DcContext {
            view: self.mlx5_qp_ex,
            path_mtu: self.path_mtu(),
        };
        // SAFETY: the queue pair is alive and exclusively borrowed for the guard's lifetime; its
        // provider filled the entries read at creation; the context is its mlx5 view.
        let mut guard = unsafe { TypedPostSendGuard::start(qp_ex, entries, context) };
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
        request: impl FnOnce(crate::ibverbs::post_send_guard::TypedWorkRequestHandle<'_, DynamicallyConnected>),
    ) -> Result<(), crate::ibverbs::post_send_guard::TypedPostSendError> {
        let mut guard = self.start_post_send();
        request(guard.construct_wr(wr_id, wr_flags));
        guard.post()
    }
}
