//! A batch to one destination: the grant (`start_post_send`) and the guard that builds and posts
//! its requests.
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::assignment::{encode, Grant, PoolCore, Refusal};
use super::types::{DcPoolWouldBlock, DestinationId, PostToDestinationError, PostToDestinationErrorKind};
use super::{DcInitiatorPool, PoolInitiator};
use crate::ibverbs::post_send_guard::{
    sealed, Destination, LocalBufferHandle, Operation, PendingRequest, PostSendError, PostSendGuard,
    RemoteMemoryAccess, Transport, WorkRequestHandle,
};
use crate::mlx5::dc::initiator::{DcAddress, DcInitiator, DcStreamAddress};

impl<I: PoolInitiator> DcInitiatorPool<I> {
    /// Starts a batch of requests to `destination` on the initiator the policy grants it;
    /// every request of the batch goes there, and the pool sets its DC address
    /// (`mlx5dv_wr_set_dc_addr`). When the policy cannot grant one now, the typed
    /// [`WouldBlock`](PostToDestinationErrorKind::WouldBlock): nothing was posted. A pool of the
    /// [streams](super::types::DcPoolPolicy::Streams) policy posts with
    /// [`start_post_send_on_stream`](Self::start_post_send_on_stream) instead
    /// ([`StreamsMismatch`](PostToDestinationErrorKind::StreamsMismatch) here).
    #[inline(always)]
    pub fn start_post_send(
        &mut self, destination: DestinationId,
    ) -> Result<DcPoolPostGuard<'_, I, DcAddress>, PostToDestinationError> {
        self.start(destination)
    }

    /// As [`start_post_send`](Self::start_post_send), for a pool of the
    /// [streams](super::types::DcPoolPolicy::Streams) policy: every request of the batch goes to the
    /// destination's DCI stream (`mlx5dv_wr_set_dc_addr_stream`). The two are apart so that
    /// neither tests per request which setter to call.
    #[inline(always)]
    pub fn start_post_send_on_stream(
        &mut self, destination: DestinationId,
    ) -> Result<DcPoolPostGuard<'_, I, DcStreamAddress>, PostToDestinationError> {
        self.start(destination)
    }

    #[inline(always)]
    fn start<A: PoolAddressing>(
        &mut self, destination: DestinationId,
    ) -> Result<DcPoolPostGuard<'_, I, A>, PostToDestinationError> {
        // The grant is built in registers on the fast paths; the slow one returns it through
        // memory of its own. A batch not addressed as the pool's policy says misses both fast
        // paths' gates, and is refused on the slow one.
        let held = self.core.begin_held(destination, A::STREAMS);
        let grant = if held.room > 0 {
            held
        } else {
            let free = self.core.grant_from_free(destination, A::STREAMS);
            if free.room > 0 {
                free
            } else {
                self.begin_cold(destination, A::STREAMS)?
            }
        };
        let (ah, dct_number, dc_key) = grant.address;
        // SAFETY: a grant names one of the pool's initiators.
        let (qp_ex, entries, mlx5_qp_ex) =
            unsafe { self.core.initiators.get_unchecked_mut(grant.initiator) }.send_view();
        // The guard reaches the bookkeeping and the initiator's ring through raw pointers taken
        // from this one borrow, so that neither invalidates the other.
        let core = NonNull::from(&mut self.core);
        // SAFETY: `core` is the pool's, borrowed for the guard's lifetime, and the grant names one
        // of its initiators.
        let (ring, mask) = unsafe { (*core.as_ptr()).wr_id_ring(grant.initiator) };
        // SAFETY: the index is masked into the ring, and the grant's room ends at the ring's end.
        let slots = unsafe { ring.add((grant.first & mask) as usize) };
        let address = A::new(DcAddress::new(mlx5_qp_ex, ah, dct_number, dc_key), grant.stream());
        // SAFETY: the initiator is exclusively borrowed through the pool for the guard's lifetime;
        // its views and entries come from PostingInitiator's contract (with the stream setter
        // when it has streams, which the streams policy's initiators have).
        let inner = unsafe { PostSendGuard::<PooledDynamicallyConnected<A>>::start(qp_ex, entries, address) };
        Ok(DcPoolPostGuard {
            inner: ManuallyDrop::new(inner),
            slots,
            base: encode(grant.initiator, grant.first),
            room: grant.room,
            grant,
            core,
            _pool: PhantomData,
        })
    }

    /// A grant beyond [`PoolCore::begin_held`]'s and [`PoolCore::grant_from_free`]'s, for a
    /// batch addressed on a stream or not (`streams`): refused when that is not the pool's
    /// policy's way; else the bookkeeping's slow path, and for a first post the address handle.
    #[inline(never)]
    fn begin_cold(&mut self, destination: DestinationId, streams: bool) -> Result<Grant, PostToDestinationError> {
        if streams != self.streams {
            return Err(PostToDestinationErrorKind::StreamsMismatch { streams_pool: !streams }.into());
        }
        match self.core.begin_slow(destination) {
            Ok(grant) => Ok(grant),
            Err(refusal) => self.begin_refused(destination, refusal),
        }
    }

    /// A refused grant: for a first post, the address handle, then the grant; else the error.
    #[inline(never)]
    fn begin_refused(&mut self, destination: DestinationId, refusal: Refusal) -> Result<Grant, PostToDestinationError> {
        if refusal != Refusal::Unresolved {
            return Err(PostToDestinationErrorKind::from(refusal).into());
        }
        self.resolve_first(destination)?;
        Ok(self.core.begin(destination).map_err(PostToDestinationErrorKind::from)?)
    }
}

/// A batch of requests to one destination through a [`DcInitiatorPool`]: the request builder of a
/// [`DcInitiator`]'s guard, where the pool sets the DC address
/// (`construct_wr` → operation → data). Dropped unposted, it aborts the batch.
#[must_use = "the batch is posted only by post(); dropping the guard aborts it"]
pub struct DcPoolPostGuard<'p, I: PoolInitiator = DcInitiator, A: PoolAddressing = DcAddress> {
    inner: ManuallyDrop<PostSendGuard<'p, PooledDynamicallyConnected<A>>>,
    /// The batch's places in the initiator's ring of callers' `wr_id`s: `room` of them, in a row.
    slots: *mut u64,
    /// The provider-visible `wr_id` of the batch's first request; the others follow by one.
    base: u64,
    /// The grant's room, kept apart from it: read on every request, a field of its own costs
    /// fewer instructions than reaching it through the grant (measured: 6 per batch at batch 1).
    room: usize,
    grant: Grant,
    /// The pool's bookkeeping, borrowed for `'p`.
    core: NonNull<PoolCore<I>>,
    _pool: PhantomData<&'p mut PoolCore<I>>,
}

impl<I: PoolInitiator, A: PoolAddressing> DcPoolPostGuard<'_, I, A> {
    /// Starts a new request with the caller's `wr_id` (what [`DcPoolEvent`](super::types::DcPoolEvent)s report) and flags;
    /// continue with an operation, then the data. The request is signalled whatever `wr_flags`
    /// say (the pool needs a completion of every request to report it, and to give a dedicated
    /// destination's initiator back; UCX turns completion moderation off for DC too). When the
    /// batch holds [`room`](Self::room) requests already, [`DcPoolWouldBlock::BatchFull`]: post
    /// it and start another.
    #[inline]
    pub fn construct_wr(
        &mut self, wr_id: u64, wr_flags: WorkRequestFlags,
    ) -> Result<WorkRequestHandle<'_, PooledDynamicallyConnected<A>>, DcPoolWouldBlock> {
        let len = self.inner.batch_len();
        if len >= self.room {
            return Err(DcPoolWouldBlock::BatchFull);
        }
        // SAFETY: the `room` places from `slots` are the initiator's ring's, which this guard's
        // pool borrow keeps alive and unused elsewhere, and hold no live request.
        unsafe { *self.slots.add(len) = wr_id };
        Ok(self
            .inner
            .construct_wr(self.base + len as u64, wr_flags | WorkRequestFlags::Signaled))
    }

    /// How many requests the batch holds.
    #[inline]
    pub fn batch_len(&self) -> usize {
        self.inner.batch_len()
    }

    /// How many requests the batch may hold: the initiator's free send-queue room, up to where
    /// the pool's ring of `wr_id`s wraps around, and up to the destination's quota.
    #[inline]
    pub fn room(&self) -> usize {
        self.room
    }

    /// The initiator (and stream) the batch goes to.
    pub fn initiator(&self) -> (usize, Option<u16>) {
        // SAFETY: the bookkeeping is borrowed for the guard's lifetime; only read here.
        let core = unsafe { self.core.as_ref() };
        let initiator = self.grant.initiator;
        (initiator, core.has_streams(initiator).then_some(self.grant.stream()))
    }

    /// Posts the batch (`ibv_wr_complete`): all of it, or on error none of it, as
    /// [`PostSendGuard::post`].
    #[inline(always)]
    pub fn post(self) -> Result<(), PostSendError> {
        // Never dropped: the batch is posted here, and its bookkeeping ended.
        let mut this = ManuallyDrop::new(self);
        let len = this.inner.batch_len();
        let (grant, mut core) = (this.grant, this.core);
        // SAFETY: `this` is never dropped, so the inner guard is taken exactly once.
        let inner = unsafe { ManuallyDrop::take(&mut this.inner) };
        let result = inner.post();
        // SAFETY: the bookkeeping is borrowed for the guard's lifetime; the ring is not written
        // after this.
        let core = unsafe { core.as_mut() };
        // Each outcome commits on its own path: no merged "posted" count to test again.
        match result {
            Ok(()) if len > 0 => {
                core.commit(grant, len);
                Ok(())
            },
            Ok(()) => {
                core.commit(grant, 0);
                Ok(())
            },
            Err(error) => {
                core.commit(grant, 0);
                Err(error)
            },
        }
    }
}

impl<I: PoolInitiator, A: PoolAddressing> Drop for DcPoolPostGuard<'_, I, A> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: dropped only when not posted (post never drops the guard); dropping the inner
        // guard aborts the batch.
        unsafe { ManuallyDrop::drop(&mut self.inner) };
        // SAFETY: as in post.
        unsafe { self.core.as_mut() }.commit(self.grant, 0);
    }
}

/// How a pool batch's requests are addressed: [`DcAddress`] (`mlx5dv_wr_set_dc_addr`), or on
/// DCI streams [`DcStreamAddress`] (`mlx5dv_wr_set_dc_addr_stream`). Sealed.
pub trait PoolAddressing: Destination + Copy {
    /// Whether it addresses a DCI stream.
    #[doc(hidden)]
    const STREAMS: bool;
    /// The address of a batch's requests.
    #[doc(hidden)]
    fn new(address: DcAddress, stream: u16) -> Self;
}

impl PoolAddressing for DcAddress {
    const STREAMS: bool = false;

    #[inline(always)]
    fn new(address: DcAddress, _stream: u16) -> Self {
        address
    }
}

impl PoolAddressing for DcStreamAddress {
    const STREAMS: bool = true;

    #[inline(always)]
    fn new(address: DcAddress, stream: u16) -> Self {
        DcStreamAddress::new(address, stream)
    }
}

/// The DC transport as a pool posts it: the destination is the batch's, set by the pool, with
/// `A`'s setter.
#[derive(Debug)]
pub struct PooledDynamicallyConnected<A: PoolAddressing>(PhantomData<A>, std::convert::Infallible);

impl<A: PoolAddressing> sealed::Sealed for PooledDynamicallyConnected<A> {}

impl<A: PoolAddressing> Transport for PooledDynamicallyConnected<A> {
    type Context = A;
    type AfterOperation<'g, O: Operation> = LocalBufferHandle<'g, O, A>;

    #[inline(always)]
    fn after_operation<O: Operation>(request: PendingRequest<'_, O>, context: A) -> Self::AfterOperation<'_, O> {
        LocalBufferHandle::new(request, context)
    }
}

impl<A: PoolAddressing> RemoteMemoryAccess for PooledDynamicallyConnected<A> {}
