//! A batch to one destination, the post path from the API to the C calls: the destination's
//! address handle on its first post, one grant from the bookkeeping (`begin`), and the guard that
//! builds its requests and posts them (`ibv_wr_*`, `mlx5dv_wr_set_dc_addr`).
use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::destination::Handle;
use super::destinations::{PoolCore, Refusal};
use super::requests::encode;
use super::types::{DcPoolPolicy, DcPoolWouldBlock, DestinationId, PostToDestinationError, PostToDestinationErrorKind};
use super::{DcInitiatorPool, PoolInitiator};
use sideway_ext::ibverbs::post_send_guard::{PathMtus, PostSendError, PostSendGuard, WorkRequestHandle};
use sideway_ext::mlx5::dc::initiator::{BatchAddressed, DcAddress, DcInitiator, DcStreamAddress};

impl<I: PoolInitiator> DcInitiatorPool<I> {
    /// Starts a batch of requests to `destination` on the initiator the policy grants it;
    /// every request of the batch goes there, and the pool sets its DC address
    /// (`mlx5dv_wr_set_dc_addr`). When the policy cannot grant one now, the typed
    /// [`WouldBlock`](PostToDestinationErrorKind::WouldBlock): nothing was posted. A pool of the
    /// [streams](super::types::DcPoolPolicy::Streams) policy posts with
    /// [`start_post_send_on_stream`](Self::start_post_send_on_stream) instead
    /// ([`StreamsMismatch`](PostToDestinationErrorKind::StreamsMismatch) here).
    #[inline]
    pub fn start_post_send(
        &mut self, destination: DestinationId,
    ) -> Result<DcPoolPostGuard<'_, I, DcAddress>, PostToDestinationError> {
        self.start(destination)
    }

    /// As [`start_post_send`](Self::start_post_send), for a pool of the
    /// [streams](super::types::DcPoolPolicy::Streams) policy: every request of the batch goes to the
    /// destination's DCI stream (`mlx5dv_wr_set_dc_addr_stream`). The two are apart so that
    /// neither tests per request which setter to call.
    #[inline]
    pub fn start_post_send_on_stream(
        &mut self, destination: DestinationId,
    ) -> Result<DcPoolPostGuard<'_, I, DcStreamAddress>, PostToDestinationError> {
        self.start(destination)
    }

    /// Creates `destination`'s address handle (its first post, or `prepare`).
    pub(super) fn resolve(&mut self, destination: DestinationId) -> Result<(), PostToDestinationErrorKind> {
        let Some(endpoint) = self.core.endpoint(destination) else {
            return Err(PostToDestinationErrorKind::UnknownDestination);
        };
        // Brought up alike: the first initiator's path MTU and source GID are every one's.
        let first = self.core.initiators.first();
        let (path_mtu, src_gid_index) = first.map_or((None, 0), |i| (i.path_mtu(), i.source_gid_index()));
        if let (Some(destination), Some(initiators)) = (endpoint.path_mtu(), path_mtu) {
            if destination < initiators {
                return Err(PostToDestinationErrorKind::PathMtuTooSmall {
                    destination,
                    initiators,
                });
            }
        }
        let Some(pd) = &self.pd else {
            // A pool without a protection domain (the simulated fabric's) names every
            // destination through its initiators' own address handle.
            let ah = I::address_handle_without_pd().ok_or(PostToDestinationErrorKind::UnknownDestination)?;
            self.core.resolve(destination, Handle::Borrowed(ah));
            return Ok(());
        };
        // Kept until the destination is removed (libmlx5 copies the address into each request).
        let ah = endpoint.create_ah_with_class(pd, self.port, src_gid_index, &self.service_class)?;
        self.core.resolve(destination, Handle::Owned(ah));
        Ok(())
    }

    /// The post path: one grant (or refusal) from the bookkeeping (after creating the
    /// destination's address handle on its first post), then the guard over the granted
    /// initiator, holding the batch's places in the initiator's ring of `wr_id`s.
    // inline(always): with #[inline] it is called, not inlined, and the pool rows of
    // `scripts/bench` (counting, send_dc_pool_*) go over 3 times their floor per batch.
    #[inline(always)]
    fn start<A: PoolAddressing>(
        &mut self, destination: DestinationId,
    ) -> Result<DcPoolPostGuard<'_, I, A>, PostToDestinationError> {
        if A::STREAMS != (self.core.policy() == DcPoolPolicy::Streams) {
            return Err(PostToDestinationErrorKind::StreamsMismatch {
                streams_pool: !A::STREAMS,
            }
            .into());
        }
        let grant = match self.core.begin(destination) {
            Ok(grant) => grant,
            Err(Refusal::Unresolved) => {
                self.resolve(destination)?;
                self.core.begin(destination).map_err(PostToDestinationErrorKind::from)?
            },
            Err(refusal) => return Err(PostToDestinationErrorKind::from(refusal).into()),
        };
        // The batch's places, before the provider's calls (which the compiler cannot see into).
        let wr_ids = self.wr_ids.batch(grant.slot, grant.room);
        let (ah, dct_number, dc_key, target_path_mtu) = grant.address;
        let initiator = &mut self.core.initiators[grant.initiator];
        let (max_inline_data, path_mtu) = (initiator.max_inline_data(), initiator.path_mtu());
        let (qp_ex, entries, mlx5_qp_ex) = initiator.send_view();
        // SAFETY: the view is the initiator's own, alive while it is; the pool keeps `ah` alive
        // while the destination is (PostingInitiator's contract for a pool without a PD).
        let address = A::new(
            unsafe { DcAddress::new(mlx5_qp_ex, ah, dct_number, dc_key) },
            grant.stream,
        );
        // SAFETY: the initiator's queue pair is exclusively borrowed through the pool for the
        // guard's lifetime; its views and entries come from PostingInitiator's contract (with the
        // stream setter when it has streams, which the streams policy's initiators have).
        let mut inner = unsafe { PostSendGuard::<BatchAddressed<A>>::start(qp_ex, entries, address) };
        // As the DC initiator's own guard: longer inline data is its own error, not QueueFull.
        inner.set_max_inline_data(max_inline_data);
        // A READ whose responses, at the target's MTU, would not reach the initiator is refused.
        inner.set_path_mtus(PathMtus::known(path_mtu, target_path_mtu));
        Ok(DcPoolPostGuard {
            inner,
            batch: PoolBatch {
                core: &mut self.core,
                wr_ids,
                base: encode(grant.initiator, grant.first),
                destination: grant.destination,
                // Every index fits in 16 bits (MAX_INITIATORS).
                initiator: grant.initiator as u16,
                stream: grant.stream,
            },
        })
    }
}

/// A batch to one destination through a [`DcInitiatorPool`]: the request builder of a
/// [`DcInitiator`]'s guard, where the pool sets the DC address
/// (`construct_wr` → operation → data). Dropped unposted, it aborts the batch.
#[must_use = "the batch is posted only by post(); dropping the guard aborts it"]
pub struct DcPoolPostGuard<'p, I: PoolInitiator = DcInitiator, A: PoolAddressing = DcAddress> {
    // Dropped first: an unposted batch is aborted before the pool ends it.
    inner: PostSendGuard<'p, BatchAddressed<A>>,
    batch: PoolBatch<'p, I>,
}

/// The pool's side of a batch: where it goes, and its places in the initiator's ring of
/// `wr_id`s, with the bookkeeping borrowed until the batch ends: posted, it records what was
/// posted; refused or dropped, it gives back what an unused grant holds.
struct PoolBatch<'p, I: PoolInitiator> {
    core: &'p mut PoolCore<I>,
    /// The callers' `wr_id`s of the batch's requests, in a row (a batch does not wrap): as many
    /// places as the batch may hold requests.
    wr_ids: &'p mut [u64],
    /// The provider-visible `wr_id` of the batch's first request; the others follow by one.
    base: u64,
    destination: u32,
    /// Below [`MAX_INITIATORS`](super::requests::MAX_INITIATORS).
    initiator: u16,
    stream: u16,
}

impl<I: PoolInitiator> PoolBatch<'_, I> {
    /// Ends the batch unposted, and gives back `err` with the caller's `wr_id` of the refused
    /// request, where the guard named the provider-visible one the pool gave it.
    #[cold]
    #[inline(never)]
    fn refused(self, mut err: PostSendError) -> PostSendError {
        use sideway_ext::ibverbs::post_send_guard::PostSendErrorKind as Kind;
        if let Kind::OperationNotEnabled { index, wr_id, .. }
        | Kind::InlineDataTooLong { index, wr_id, .. }
        | Kind::ReadResponsesTooLarge { index, wr_id, .. } = &mut err.0
        {
            if let Some(callers) = self.wr_ids.get(*index) {
                *wr_id = *callers;
            }
        }
        err
    }
}

impl<I: PoolInitiator> Drop for PoolBatch<'_, I> {
    #[inline]
    fn drop(&mut self) {
        // Nothing was posted (a posted batch does not come here).
        self.core
            .commit(usize::from(self.initiator), self.destination, self.stream, 0);
    }
}

impl<I: PoolInitiator, A: PoolAddressing> DcPoolPostGuard<'_, I, A> {
    /// Starts a new request with the caller's `wr_id` (what
    /// [`DcPoolEvent`](super::types::DcPoolEvent)s report) and flags; continue with an operation,
    /// then the data. The request is signalled whatever `wr_flags` say (the pool needs a
    /// completion of every request to report it, and to give a dedicated destination's initiator
    /// back; UCX turns completion moderation off for DC too). When the batch holds
    /// [`room`](Self::room) requests already, [`DcPoolWouldBlock::BatchFull`]: post it and start
    /// another.
    #[inline]
    pub fn construct_wr(
        &mut self, wr_id: u64, wr_flags: WorkRequestFlags,
    ) -> Result<WorkRequestHandle<'_, BatchAddressed<A>>, DcPoolWouldBlock> {
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

    /// How many requests the batch may hold: the initiator's free send-queue room, up to where
    /// the pool's ring of `wr_id`s wraps around, and up to the destination's quota.
    pub fn room(&self) -> usize {
        self.batch.wr_ids.len()
    }

    /// The initiator (and stream) the batch goes to.
    pub fn initiator(&self) -> (usize, Option<u16>) {
        let batch = &self.batch;
        let initiator = usize::from(batch.initiator);
        (initiator, batch.core.has_streams(initiator).then_some(batch.stream))
    }

    /// Posts the batch (`ibv_wr_complete`): all of it, or on error none of it, as
    /// [`PostSendGuard::post`]. A request refused before the provider is named by the `wr_id`
    /// its caller gave.
    // inline(always): with #[inline] it is called, not inlined, and the pool rows of
    // `scripts/bench` (counting, send_dc_pool_*) go over 3 times their floor per batch.
    #[inline(always)]
    pub fn post(self) -> Result<(), PostSendError> {
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

/// How a pool batch's requests are addressed: sideway-ext's [`DcAddressing`](sideway_ext::mlx5::dc::initiator::DcAddressing) ([`DcAddress`],
/// or on DCI streams [`DcStreamAddress`]).
pub use sideway_ext::mlx5::dc::initiator::DcAddressing as PoolAddressing;
