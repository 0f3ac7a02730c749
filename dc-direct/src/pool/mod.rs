//! [`DirectDcInitiator`] and [`DirectCompletionQueue`] as sideway-ext-dc-pool's initiator and
//! completion queue (feature `pool`): see the crate documentation's "A pool of direct initiators".
use std::error::Error;
use std::io;
use std::sync::Arc;

use sideway::ibverbs::completion::PollCompletionQueueError;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::WorkRequestFlags;
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::ibverbs::post_send_guard::TypedPostSendError;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::initiator::{DcInitiator, ResetDciStreamErrorKind};
use sideway_ext_dc_pool::initiator::{PoolBatch, PoolCompletion, PoolCompletionQueue, StreamResetRefusal};
use sideway_ext_dc_pool::PoolInitiator;

use crate::completion_queue::{Completion, DirectCompletionQueue, PollDirectCompletionQueueErrorKind};
use crate::send_queue::{AddressVector, BatchAddress, DirectRequest, SendQueueBatch};
use crate::{DirectBatch, DirectDcInitiator};

/// The most completions one pool poll reads (the pool's own batch of work completions).
const MOST_PER_POLL: usize = 32;

impl PoolInitiator for DirectDcInitiator {
    type Address = AddressVector;
    type Batch<'a> = DirectBatch<'a, BatchAddress>;
    type CompletionQueue = DirectCompletionQueue;

    fn qp_number(&self) -> u32 {
        self.dc_initiator().qp_number()
    }

    fn max_send_wr(&self) -> u32 {
        self.dc_initiator().max_send_wr()
    }

    fn stream_count(&self) -> u32 {
        <DcInitiator as PoolInitiator>::stream_count(self.dc_initiator())
    }

    fn path_mtu(&self) -> Option<Mtu> {
        <DcInitiator as PoolInitiator>::path_mtu(self.dc_initiator())
    }

    fn source_gid_index(&self) -> u8 {
        <DcInitiator as PoolInitiator>::source_gid_index(self.dc_initiator())
    }

    fn recover(&mut self) -> Result<(), Box<dyn Error + Send + Sync>> {
        DirectDcInitiator::recover(self).map_err(Into::into)
    }

    fn reset_stream(&mut self, stream: u16) -> Result<(), StreamResetRefusal> {
        DirectDcInitiator::reset_stream(self, stream).map_err(|error| match error.0 {
            ResetDciStreamErrorKind::NotReadyToSend { .. } => StreamResetRefusal::NotReadyToSend,
            _ => StreamResetRefusal::Failed(error.into()),
        })
    }

    /// The address vector of `ah`, read once: each request copies it, and the handle itself is
    /// not needed after (libmlx5 copies the same bytes at each request).
    fn address(&self, ah: Arc<AddressHandle>) -> Result<AddressVector, Box<dyn Error + Send + Sync>> {
        Ok(AddressVector::from_address_handle(&ah)?)
    }

    #[inline]
    fn start_batch<'a>(
        &'a mut self, address: &'a AddressVector, dct_number: u32, dc_key: u64, stream: Option<u16>,
    ) -> Self::Batch<'a> {
        match stream {
            None => self.start_post_send_to(address, dct_number, dc_key),
            Some(stream) => self.start_post_send_to_stream(address, dct_number, dc_key, stream),
        }
    }
}

/// A batch to one address, as a pool posts it: one body for a direct initiator's
/// ([`DirectBatch`]) and a [`SendQueue`](crate::send_queue::SendQueue)'s
/// ([`SendQueueBatch`], for an initiator of one's own built on the writer over its queue pair's
/// parts), whose methods have the same names and signatures.
macro_rules! impl_pool_batch {
    ($($batch:ident),+) => {$(
        impl PoolBatch for $batch<'_, BatchAddress> {
            type Request<'r>
                = DirectRequest<'r, BatchAddress>
            where
                Self: 'r;

            #[inline]
            fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> Self::Request<'_> {
                $batch::construct_wr(self, wr_id, wr_flags)
            }

            #[inline]
            fn batch_len(&self) -> usize {
                $batch::batch_len(self)
            }

            /// Rings the doorbell; nothing to refuse here (each request was checked at its data
            /// step).
            #[inline]
            fn post(self) -> Result<(), TypedPostSendError> {
                $batch::post(self);
                Ok(())
            }
        }
    )+};
}

impl_pool_batch!(DirectBatch, SendQueueBatch);

/// The direct poller, as a pool polls it: each completion as a value; none is handed over
/// whole (a completion of another queue pair fails the poll, see the
/// [crate](crate#a-pool-of-direct-initiators) documentation).
impl PoolCompletionQueue for DirectCompletionQueue {
    fn poll(
        &mut self, mut each: impl FnMut(PoolCompletion, Option<&WorkCompletion>),
    ) -> Result<usize, PollCompletionQueueError> {
        let mut completions = [Completion::default(); MOST_PER_POLL];
        let polled = DirectCompletionQueue::poll(self, &mut completions).map_err(|error| {
            let kind = match error.0 {
                PollDirectCompletionQueueErrorKind::SendQueueInUse { .. } => io::ErrorKind::WouldBlock,
                _ => io::ErrorKind::InvalidData,
            };
            PollCompletionQueueError::Ibverbs(io::Error::new(kind, error))
        })?;
        for completion in &completions[..polled] {
            let status = completion.status() as u32;
            each(
                PoolCompletion::new(
                    completion.qp_number(),
                    completion.wr_id(),
                    status,
                    completion.vendor_err(),
                ),
                None,
            );
        }
        Ok(polled)
    }
}
