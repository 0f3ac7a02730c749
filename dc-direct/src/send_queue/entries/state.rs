//! What [`SendQueueEntries`](super::SendQueueEntries)' entries keep between calls, as
//! libmlx5's builders keep it in `struct mlx5_qp` (`cur_ctrl`, `cur_data`, `cur_size`,
//! `cur_setters_cnt`, `err`, …): the batch, the request being written and how far it is, the
//! batch's first error; and how each call changes it. Each call writes its part of the WQE at
//! once, through the writer's steps (`steps.rs`).
//!
//! The send queue is shared ([`SharedSendQueue`]): with a direct initiator's completion queue,
//! which retires its requests. A batch borrows it from `wr_start` to `wr_complete` or `wr_abort`
//! (libmlx5 holds its queue's lock as long: `mlx5_send_wr_start` to `mlx5_send_wr_complete`), so
//! that a poll meanwhile leaves it alone, as it leaves a native batch's.
use std::ptr::NonNull;
use std::rc::Rc;

use rdma_mummy_sys::ibv_ah;

use crate::send_queue::address_cache::AddressCache;
use crate::send_queue::batch::{Batch, FM_CE_SE};
use crate::send_queue::operation::Segments;
use crate::send_queue::shared::SharedSendQueue;
use crate::send_queue::steps::Started;
use crate::send_queue::wqe::Data;
use crate::send_queue::{SendQueue, WorkRequestError, WorkRequestErrorKind};

/// What the entries keep between calls.
pub(super) struct State {
    queue: Rc<SharedSendQueue>,
    /// The batch between `wr_start` and `wr_complete` or `wr_abort`; while there is one, it
    /// holds the queue's borrow ([`SharedSendQueue::acquire`]).
    batch: Option<Batch>,
    /// How far the request being built is.
    stage: Stage,
    /// Its WQE, while it is written: not before its builder, nor after an error, nor outside a
    /// batch.
    started: Option<Started>,
    /// The batch's first error (libmlx5's `mqp->err`), 0 for none.
    error: i32,
    addresses: AddressCache,
}

/// How far the request being built is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// No request is: none begun since the batch started, or the last one finished or refused.
    None,
    /// Its builder was called, neither setter yet.
    Begun,
    /// Its address is in, its data not yet.
    Addressed,
    /// Its data is in, its address not yet.
    DataIn,
}

/// The errno libmlx5 returns for what the writer refused.
fn errno(error: WorkRequestError) -> i32 {
    match error.0 {
        WorkRequestErrorKind::QueueFull { .. }
        | WorkRequestErrorKind::InlineDataTooLong { .. }
        | WorkRequestErrorKind::TooManyScatterGatherEntries { .. } => libc::ENOMEM,
        WorkRequestErrorKind::StreamsNotEnabled { .. } => libc::EINVAL,
    }
}

impl State {
    /// The state of entries over `queue`, finding address vectors with `addresses`.
    pub(super) fn new(queue: Rc<SharedSendQueue>, addresses: AddressCache) -> Self {
        Self {
            queue,
            batch: None,
            stage: Stage::None,
            started: None,
            error: 0,
            addresses,
        }
    }

    /// The shared queue.
    pub(super) fn shared(&self) -> &Rc<SharedSendQueue> {
        &self.queue
    }

    /// The queue, between calls, when these entries are its only holder (`None` when a
    /// completion queue's table holds it too).
    pub(super) fn queue(&self) -> Option<&SendQueue> {
        // SAFETY: nobody else holds the queue, and between calls these entries hold no `&mut`
        // to it: none is alive.
        (Rc::strong_count(&self.queue) == 1).then(|| unsafe { self.queue.get() })
    }

    /// The queue, to use natively, when these entries are its only holder: a batch started
    /// through the entries is aborted.
    pub(super) fn take_over(&mut self) -> Option<&mut SendQueue> {
        self.abort();
        Rc::get_mut(&mut self.queue).map(SharedSendQueue::get_mut)
    }

    /// Keeps the batch's first error; the request being written is not written further.
    #[inline]
    fn fail(&mut self, errno: i32) {
        self.started = None;
        if self.error == 0 {
            self.error = errno;
        }
    }

    /// The queue, for one call of a batch.
    ///
    /// # Safety
    ///
    /// The batch holds the queue's borrow (`self.batch` is `Some`), and the reference is the
    /// only one to the queue while it lives.
    // inline(always): with #[inline] on the entries' steps, the DC pool row of `scripts/bench`
    // (direct) goes over its limit.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    unsafe fn writer(&self) -> &mut SendQueue {
        // SAFETY: the caller's promise.
        unsafe { self.queue.borrowed_mut() }
    }

    /// Starts a batch (another one's unposted requests are dropped), taking the queue's borrow;
    /// `EBUSY` at `wr_complete` when something else holds it.
    pub(super) fn start(&mut self) {
        self.stage = Stage::None;
        self.started = None;
        self.error = 0;
        if self.batch.is_none() && !self.queue.acquire() {
            return self.fail(libc::EBUSY);
        }
        // SAFETY: the batch holds the borrow (taken now, or by the batch it replaces).
        self.batch = Some(Batch::start(unsafe { self.queue.borrowed_mut() }));
    }

    /// Ends the batch: posted, or rolled back with its first error; gives the borrow back.
    pub(super) fn complete(&mut self) -> i32 {
        let Some(batch) = self.batch.take() else {
            return match std::mem::take(&mut self.error) {
                0 => libc::EINVAL,
                error => error,
            };
        };
        if std::mem::replace(&mut self.stage, Stage::None) != Stage::None {
            self.fail(libc::EINVAL);
        }
        self.started = None;
        let error = std::mem::take(&mut self.error);
        if error == 0 {
            // SAFETY: the batch held the borrow until now.
            unsafe { self.queue.borrowed_mut() }.post_batch(&batch);
        }
        self.queue.release();
        error
    }

    /// Drops the batch, if any, and gives the borrow back.
    pub(super) fn abort(&mut self) {
        if self.batch.take().is_some() {
            self.queue.release();
        }
        self.stage = Stage::None;
        self.started = None;
        self.error = 0;
    }

    /// A builder: a new request (the last one, still pending, was missing a setter), written
    /// from here on when the batch has had no error and has room for it.
    // inline(always): with #[inline] on the entries' steps, the DC pool row of `scripts/bench`
    // (direct) goes over its limit.
    #[inline(always)]
    pub(super) fn begin(&mut self, wr_id: u64, wr_flags: u32, segments: Segments) {
        if std::mem::replace(&mut self.stage, Stage::Begun) != Stage::None {
            self.fail(libc::EINVAL);
        }
        self.started = None;
        let (Some(batch), 0) = (self.batch.as_ref(), self.error) else {
            return;
        };
        // SAFETY: the batch holds the borrow; the reference lives for this call.
        match unsafe { self.writer() }.start_request(batch, wr_id, FM_CE_SE[(wr_flags & 7) as usize], segments) {
            Ok(started) => self.started = Some(started),
            Err(refused) => self.fail(errno(refused)),
        }
    }

    /// The DC setter: the address written; the request finished when its data is in already.
    ///
    /// # Safety
    ///
    /// `ah` must be a live address handle (on a device, libmlx5's).
    // inline(always): with #[inline] on the entries' steps, the DC pool row of `scripts/bench`
    // (direct) goes over its limit.
    #[inline(always)]
    pub(super) unsafe fn set_address(&mut self, ah: *mut ibv_ah, dct_number: u32, dc_key: u64, stream_id: Option<u16>) {
        let stage = self.stage;
        if !matches!(stage, Stage::Begun | Stage::DataIn) {
            return self.fail(libc::EINVAL);
        }
        let vector = match NonNull::new(ah) {
            // SAFETY: the caller's promise.
            Some(ah) => unsafe { self.addresses.read(ah) },
            None => None,
        };
        let Some(vector) = vector else {
            return self.fail(libc::EINVAL);
        };
        if let Some(started) = &self.started {
            // SAFETY: a started request's batch holds the borrow; the reference lives for this
            // call.
            let written =
                unsafe { self.writer() }.write_request_address(started, &vector, dct_number, dc_key, stream_id);
            if let Err(refused) = written {
                self.fail(errno(refused));
            }
        }
        match stage {
            Stage::DataIn => self.finish(),
            _ => self.stage = Stage::Addressed,
        }
    }

    /// A data setter: the data written (a refused one ends the request); the request finished
    /// when its address is in already.
    // inline(always): into each data entry, so that the writer is made for its kind of data
    // (the DC pool row of `scripts/bench`, direct: through the pool).
    #[inline(always)]
    pub(super) fn set_data(&mut self, data: Data<'_>) {
        let stage = self.stage;
        if !matches!(stage, Stage::Begun | Stage::Addressed) {
            return self.fail(libc::EINVAL);
        }
        if let Some(started) = self.started.as_mut() {
            // SAFETY: a started request's batch holds the borrow; the reference lives for this
            // call.
            if let Err(refused) = unsafe { self.queue.borrowed_mut() }.write_request_data(started, data) {
                self.stage = Stage::None;
                return self.fail(errno(refused));
            }
        }
        match stage {
            Stage::Addressed => self.finish(),
            _ => self.stage = Stage::DataIn,
        }
    }

    /// The request's last setter was called: finished into the batch, if it was written.
    // inline(always): with #[inline] on the entries' steps, the DC pool row of `scripts/bench`
    // (direct) goes over its limit.
    #[inline(always)]
    fn finish(&mut self) {
        self.stage = Stage::None;
        if let (Some(started), Some(batch)) = (self.started.take(), self.batch.as_mut()) {
            // SAFETY: a started request's batch holds the borrow; the reference lives for this
            // call.
            unsafe { self.queue.borrowed_mut() }.finish_request(batch, started);
        }
    }
}
