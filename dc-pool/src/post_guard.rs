//! A batch to one destination: its address on its first post, a grant from the bookkeeping
//! (`begin`), and the initiator's [`PoolBatch`].
use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::destinations::{PoolCore, Refusal};
use super::initiator::PoolBatch;
use super::requests::encode;
use super::types::{
    DcPoolWouldBlock, DestinationId, PostBatchError, PostBatchErrorKind, PostToDestinationError,
    PostToDestinationErrorKind,
};
use super::{DcInitiatorPool, PoolInitiator};
use sideway_ext::ibverbs::post_send_guard::TypedPostSendErrorKind;
use sideway_ext::mlx5::dc::initiator::DcInitiator;

impl<I: PoolInitiator> DcInitiatorPool<I> {
    /// Starts a batch of requests to `destination` on the initiator the policy grants it; the
    /// pool sets its DC address (`mlx5dv_wr_set_dc_addr`).
    ///
    /// # Errors
    ///
    /// [`PostToDestinationErrorKind`]; nothing was posted.
    #[inline]
    pub fn start_post_send(
        &mut self, destination: DestinationId,
    ) -> Result<DcPoolPostGuard<'_, I>, PostToDestinationError> {
        self.start(destination, false)
    }

    /// As [`start_post_send`](Self::start_post_send), for a pool of the
    /// [streams](super::types::DcPoolPolicy::Streams) policy (`mlx5dv_wr_set_dc_addr_stream`).
    #[inline]
    pub fn start_post_send_on_stream(
        &mut self, destination: DestinationId,
    ) -> Result<DcPoolPostGuard<'_, I>, PostToDestinationError> {
        self.start(destination, true)
    }

    /// Makes `destination`'s address from an address handle on the pool's protection domain.
    pub(super) fn resolve(&mut self, destination: DestinationId) -> Result<(), PostToDestinationErrorKind> {
        let Some(endpoint) = self.core.endpoint(destination) else {
            return Err(PostToDestinationErrorKind::UnknownDestination);
        };
        // Brought up alike: the first initiator's path MTU, source GID and addresses are every
        // one's. A pool of none has none in service.
        let Some(first) = self.initiators.first() else {
            return Err(PostToDestinationErrorKind::NoInitiatorInService);
        };
        let (path_mtu, src_gid_index) = (first.path_mtu(), first.source_gid_index());
        if let (Some(destination), Some(initiators)) = (endpoint.path_mtu(), path_mtu) {
            if destination < initiators {
                return Err(PostToDestinationErrorKind::PathMtuTooSmall {
                    destination,
                    initiators,
                });
            }
        }
        let Some((pd, port, service_class)) = self.core.settings().protection_domain() else {
            return Err(PostToDestinationErrorKind::UnknownDestination);
        };
        // Kept until the destination is removed (libmlx5 copies the address into each request).
        let ah = endpoint.create_ah_with_class(pd, port, src_gid_index, service_class)?;
        let address = first
            .address(ah, endpoint.path_mtu())
            .map_err(|source| PostToDestinationErrorKind::Address { source })?;
        self.core.resolve(destination);
        self.keep_address(destination, address);
        Ok(())
    }

    // inline(always): with #[inline] the post path's steps stayed calls; the pool rows of
    // `scripts/bench` then broke their limits.
    #[inline(always)]
    fn start(
        &mut self, destination: DestinationId, streams: bool,
    ) -> Result<DcPoolPostGuard<'_, I>, PostToDestinationError> {
        let grant = match self.core.begin(destination, streams) {
            Ok(grant) => grant,
            Err(Refusal::Unresolved) => {
                self.resolve(destination)?;
                self.core
                    .begin(destination, streams)
                    .map_err(PostToDestinationErrorKind::from)?
            },
            Err(refusal) => return Err(PostToDestinationErrorKind::from(refusal).into()),
        };
        // The batch's places, before the initiator's calls (which the compiler may not see into).
        let wr_ids = &mut self.wr_ids[grant.slot..grant.slot + grant.room];
        let ((dct_number, dc_key), (initiator, stream)) = (grant.address, (grant.initiator, grant.stream));
        let destination = grant.destination;
        let Self {
            initiators,
            addresses,
            core,
            ..
        } = self;
        let Some(Some(address)) = addresses.get(destination as usize) else {
            // Resolved in the bookkeeping, so kept here: not reached.
            core.commit(initiator, destination, stream, 0);
            return Err(PostToDestinationErrorKind::UnknownDestination.into());
        };
        let inner = initiators[initiator].start_batch(address, dct_number, dc_key, streams.then_some(stream));
        Ok(DcPoolPostGuard {
            inner,
            batch: BatchRecord {
                core,
                wr_ids,
                base: encode(initiator, grant.first),
                destination,
                // Every index fits in 16 bits (MAX_INITIATORS).
                initiator: initiator as u16,
                stream,
            },
        })
    }
}

/// A batch to one destination through a [`DcInitiatorPool`], building requests with its
/// initiator's [`PoolBatch::Request`] (`construct_wr` → operation → data); dropped unposted, it
/// aborts.
#[must_use = "the batch is posted only by post(); dropping the guard aborts it"]
pub struct DcPoolPostGuard<'p, I: PoolInitiator + 'p = DcInitiator> {
    // Dropped first: an unposted batch is aborted before the pool ends it.
    inner: I::Batch<'p>,
    batch: BatchRecord<'p>,
}

/// The pool's side of a batch, with the bookkeeping borrowed until the batch ends.
struct BatchRecord<'p> {
    core: &'p mut PoolCore,
    /// The callers' `wr_id`s of the batch's requests, as many places as it may hold.
    wr_ids: &'p mut [u64],
    /// The provider-visible `wr_id` of the batch's first request; the others follow by one.
    base: u64,
    destination: u32,
    initiator: u16,
    stream: u16,
}

impl BatchRecord<'_> {
    /// Ends the batch unposted; gives back `err` naming the caller's `wr_id` of the refused request.
    #[cold]
    #[inline(never)]
    fn refused(self, mut err: PostBatchError) -> PostBatchError {
        use TypedPostSendErrorKind as Kind;
        let named = match &mut err.0 {
            PostBatchErrorKind::ReadResponsesTooLarge { index, wr_id, .. } => Some((index, wr_id)),
            PostBatchErrorKind::Post(err) => match &mut err.0 {
                Kind::OperationNotEnabled { index, wr_id, .. } | Kind::InlineDataTooLong { index, wr_id, .. } => {
                    Some((index, wr_id))
                },
                _ => None,
            },
        };
        if let Some((index, wr_id)) = named {
            if let Some(callers) = self.wr_ids.get(*index) {
                *wr_id = *callers;
            }
        }
        err
    }
}

impl Drop for BatchRecord<'_> {
    #[inline]
    fn drop(&mut self) {
        self.core
            .commit(usize::from(self.initiator), self.destination, self.stream, 0);
    }
}

impl<'p, I: PoolInitiator + 'p> DcPoolPostGuard<'p, I> {
    /// Starts a new request with the caller's `wr_id` and flags, signalled whatever they say.
    ///
    /// # Errors
    ///
    /// [`DcPoolWouldBlock::BatchFull`] once the batch holds [`room`](Self::room) requests.
    #[inline]
    pub fn construct_wr(
        &mut self, wr_id: u64, wr_flags: WorkRequestFlags,
    ) -> Result<<I::Batch<'p> as PoolBatch>::Request<'_>, DcPoolWouldBlock> {
        let len = self.inner.batch_len();
        let Some(place) = self.batch.wr_ids.get_mut(len) else {
            return Err(DcPoolWouldBlock::BatchFull);
        };
        *place = wr_id;
        Ok(self
            .inner
            .construct_wr(self.batch.base + len as u64, wr_flags | WorkRequestFlags::Signaled))
    }

    /// How many requests the batch holds.
    pub fn batch_len(&self) -> usize {
        self.inner.batch_len()
    }

    /// How many requests the batch may hold (send-queue room, ring end, quota).
    pub fn room(&self) -> usize {
        self.batch.wr_ids.len()
    }

    /// The initiator (and stream) the batch goes to.
    pub fn initiator(&self) -> (usize, Option<u16>) {
        let batch = &self.batch;
        let initiator = usize::from(batch.initiator);
        (initiator, batch.core.has_streams(initiator).then_some(batch.stream))
    }

    /// Posts the batch (for a [`DcInitiator`], `ibv_wr_complete`): all of it, or on error none
    /// of it. A request refused before the provider is named by the `wr_id` its caller gave.
    // inline(always): with #[inline] the post path's steps stayed calls; the pool rows of
    // `scripts/bench` then broke their limits.
    #[inline(always)]
    pub fn post(self) -> Result<(), PostBatchError> {
        let Self { inner, batch } = self;
        let len = inner.batch_len();
        if let Err(err) = inner.post() {
            // Refused: `batch` ends unposted.
            return Err(batch.refused(err));
        }
        batch
            .core
            .commit(usize::from(batch.initiator), batch.destination, batch.stream, len);
        // Ended: it holds only borrows, nothing to free.
        std::mem::forget(batch);
        Ok(())
    }
}
