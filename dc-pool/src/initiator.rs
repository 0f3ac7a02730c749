//! What the pool needs of its DC initiators, as safe Rust: [`PoolInitiator`], [`PoolBatch`] and
//! [`PoolCompletionQueue`]. [`DcInitiator`] implements them on sideway's
//! [`GenericCompletionQueue`]; an initiator of one's own implements them to be pooled the same
//! way ([`DcInitiatorPool::from_initiators`](super::DcInitiatorPool::from_initiators)).
use std::error::Error;
use std::sync::Arc;

use sideway::ibverbs::completion::{GenericCompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::WorkRequestFlags;

use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::ibverbs::extension::CompletionQueueExt;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::initiator::DcInitiator;

use super::dc_batch::{DcAddress, DcBatch};
use super::types::PostBatchError;

/// Why [`PoolInitiator::reset_stream`] refused.
#[derive(Debug)]
pub enum StreamResetRefusal {
    /// Not in RTS: recover the initiator.
    NotReadyToSend,
    /// Anything else.
    Failed(Box<dyn Error + Send + Sync>),
}

/// A DC initiator a [`DcInitiatorPool`](super::DcInitiatorPool) is made of.
pub trait PoolInitiator {
    /// A destination's address, made once ([`address`](Self::address)) and kept.
    type Address;
    /// A batch of requests to one DC address.
    type Batch<'a>: PoolBatch
    where
        Self: 'a;
    /// The send completion queue a pool of these initiators polls.
    type CompletionQueue: PoolCompletionQueue;

    /// The queue pair number its completions carry; only [`recover`](Self::recover) may change it.
    fn qp_number(&self) -> u32;

    /// How many requests its send queue holds: the pool keeps no more in flight on it.
    fn max_send_wr(&self) -> u32;

    /// How many DCI streams it has (0 without).
    fn stream_count(&self) -> u32;

    /// The path MTU it sends with, if known: the pool refuses destinations announcing less.
    fn path_mtu(&self) -> Option<Mtu> {
        None
    }

    /// The index of the GID its requests are sent from, named by the pool's address handles (default 0).
    fn source_gid_index(&self) -> u8 {
        0
    }

    /// Brings it back from ERR to RTS (every request it held was reported).
    fn recover(&mut self) -> Result<(), Box<dyn Error + Send + Sync>>;

    /// Resets one errored stream (every request of it was reported).
    fn reset_stream(&mut self, stream: u16) -> Result<(), StreamResetRefusal>;

    /// Its address of the address handle the pool created for a destination, whose path MTU is
    /// `path_mtu` where the destination announced one.
    fn address(
        &self, ah: Arc<AddressHandle>, path_mtu: Option<Mtu>,
    ) -> Result<Self::Address, Box<dyn Error + Send + Sync>>;

    /// Starts a batch to DC target `dct_number` with key `dc_key` at `address`, on `stream` if given.
    fn start_batch<'a>(
        &'a mut self, address: &'a Self::Address, dct_number: u32, dc_key: u64, stream: Option<u16>,
    ) -> Self::Batch<'a>;
}

/// A batch of requests to one DC address, rung once at [`post`](Self::post); dropped unposted,
/// it posts nothing. Errors name a refused request by its index in the batch.
pub trait PoolBatch {
    /// A request after `construct_wr`: an operation, then its data, where it joins the batch.
    type Request<'r>
    where
        Self: 'r;

    /// Starts a request with the provider-visible `wr_id` (the caller's is kept in the pool).
    fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> Self::Request<'_>;

    /// How many requests the batch holds (those that reached their data step).
    fn batch_len(&self) -> usize;

    /// Posts the batch: all of it, or on error none of it.
    fn post(self) -> Result<(), PostBatchError>;
}

/// The send completion queue of a pool's initiators ([`PoolInitiator::CompletionQueue`]).
pub trait PoolCompletionQueue {
    /// Polls at most 32 completions into `each` (with the whole completion where there is one).
    fn poll(
        &mut self, each: impl FnMut(PoolCompletion, Option<&WorkCompletion>),
    ) -> Result<usize, PollCompletionQueueError>;
}

/// One send completion as the pool reads it, made from a completion polled by other means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolCompletion {
    qp_number: u32,
    wr_id: u64,
    status: u32,
    vendor_err: u32,
}

impl PoolCompletion {
    /// The completion of the request `wr_id` on queue pair `qp_number`.
    #[inline]
    pub fn new(qp_number: u32, wr_id: u64, status: u32, vendor_err: u32) -> Self {
        Self {
            qp_number,
            wr_id,
            status,
            vendor_err,
        }
    }

    /// The queue pair number.
    pub fn qp_number(&self) -> u32 {
        self.qp_number
    }

    /// The request's provider-visible `wr_id`.
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// Its `ibv_wc_status` (e.g.
    /// [`WorkCompletionStatus`](sideway::ibverbs::completion::WorkCompletionStatus)` as u32`).
    pub fn status(&self) -> u32 {
        self.status
    }

    /// Its vendor syndrome.
    pub fn vendor_err(&self) -> u32 {
        self.vendor_err
    }
}

impl From<&WorkCompletion> for PoolCompletion {
    #[inline]
    fn from(wc: &WorkCompletion) -> Self {
        Self::new(wc.qp_number(), wc.wr_id(), wc.status_raw(), wc.vendor_err())
    }
}

impl PoolInitiator for DcInitiator {
    type Address = DcAddress;
    type Batch<'a> = DcBatch<'a>;
    type CompletionQueue = GenericCompletionQueue;

    fn qp_number(&self) -> u32 {
        DcInitiator::qp_number(self)
    }

    fn max_send_wr(&self) -> u32 {
        DcInitiator::max_send_wr(self)
    }

    fn stream_count(&self) -> u32 {
        self.streams().map_or(0, |s| 1u32 << s.log_num_concurrent.min(16))
    }

    fn path_mtu(&self) -> Option<Mtu> {
        DcInitiator::path_mtu(self)
    }

    fn source_gid_index(&self) -> u8 {
        self.source_gid().map_or(0, |entry| entry.index())
    }

    fn recover(&mut self) -> Result<(), Box<dyn Error + Send + Sync>> {
        // Reset or rebuilt: either way the pool reads the (maybe new) number from the initiator.
        DcInitiator::recover(self).map(drop).map_err(Into::into)
    }

    fn reset_stream(&mut self, stream: u16) -> Result<(), StreamResetRefusal> {
        use sideway_ext::mlx5::dc::initiator::ResetDciStreamErrorKind as Kind;
        DcInitiator::reset_stream(self, stream).map_err(|e| match e.0 {
            Kind::NotReadyToSend { .. } => StreamResetRefusal::NotReadyToSend,
            _ => StreamResetRefusal::Failed(e.into()),
        })
    }

    fn address(
        &self, ah: Arc<AddressHandle>, path_mtu: Option<Mtu>,
    ) -> Result<DcAddress, Box<dyn Error + Send + Sync>> {
        Ok(DcAddress::new(ah, path_mtu))
    }

    #[inline]
    fn start_batch<'a>(
        &'a mut self, address: &'a DcAddress, dct_number: u32, dc_key: u64, stream: Option<u16>,
    ) -> Self::Batch<'a> {
        DcBatch::new(self, address, dct_number, dc_key, stream)
    }
}

/// sideway's completion queue, polled into sideway-ext's [`WorkCompletion`]s.
impl PoolCompletionQueue for GenericCompletionQueue {
    fn poll(
        &mut self, mut each: impl FnMut(PoolCompletion, Option<&WorkCompletion>),
    ) -> Result<usize, PollCompletionQueueError> {
        let mut wcs = [WorkCompletion::default(); 32];
        let polled = self.poll_work_completions(&mut wcs)?;
        for wc in polled {
            each(PoolCompletion::from(wc), Some(wc));
        }
        Ok(polled.len())
    }
}
