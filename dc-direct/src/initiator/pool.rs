//! [`DirectDcInitiator`] as sideway-ext-dc-pool's initiator (feature `pool`): see the crate
//! documentation's "A pool of direct initiators".
use std::error::Error;
use std::sync::Arc;

use sideway::ibverbs::device_context::Mtu;
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::mlx5::dc::initiator::{DcInitiator, ResetDciStreamErrorKind};
use sideway_ext_dc_pool::initiator::StreamResetRefusal;
use sideway_ext_dc_pool::PoolInitiator;

use super::DirectDcInitiator;
use crate::completion_queue::DirectCompletionQueue;
use crate::send_queue::{AddressVector, BatchAddress};
use crate::DirectBatch;

impl PoolInitiator for DirectDcInitiator {
    type Address = AddressVector;
    type Batch<'a> = DirectBatch<'a, BatchAddress>;
    type CompletionQueue = DirectCompletionQueue;

    fn qp_number(&self) -> u32 {
        self.dci.qp_number()
    }

    fn max_send_wr(&self) -> u32 {
        self.dci.max_send_wr()
    }

    fn stream_count(&self) -> u32 {
        <DcInitiator as PoolInitiator>::stream_count(&self.dci)
    }

    fn path_mtu(&self) -> Option<Mtu> {
        <DcInitiator as PoolInitiator>::path_mtu(&self.dci)
    }

    fn source_gid_index(&self) -> u8 {
        <DcInitiator as PoolInitiator>::source_gid_index(&self.dci)
    }

    fn recover(&mut self) -> Result<(), Box<dyn Error + Send + Sync>> {
        DirectDcInitiator::recover(self).map_err(Into::into)
    }

    fn reset_stream(&mut self, stream: u16) -> Result<(), StreamResetRefusal> {
        self.dci.reset_stream(stream).map_err(|error| match error.0 {
            ResetDciStreamErrorKind::NotReadyToSend { .. } => StreamResetRefusal::NotReadyToSend,
            _ => StreamResetRefusal::Failed(error.into()),
        })
    }

    /// The address vector of `ah`, read once: each request copies it, and the handle itself is
    /// not needed after (libmlx5 copies the same bytes at each request).
    fn address(&self, ah: Arc<AddressHandle>, _: Option<Mtu>) -> Result<AddressVector, Box<dyn Error + Send + Sync>> {
        Ok(AddressVector::from_address_handle(&ah)?)
    }

    #[inline]
    fn start_batch<'a>(
        &'a mut self, address: &'a AddressVector, dct_number: u32, dc_key: u64, stream: Option<u16>,
    ) -> Self::Batch<'a> {
        self.posting
            .start_post_send(BatchAddress::new(address, dct_number, dc_key, stream))
    }
}
