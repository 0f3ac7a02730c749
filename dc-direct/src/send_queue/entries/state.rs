//! What [`SendQueueEntries`](super::SendQueueEntries)' entries keep between calls, as
//! libmlx5's builders keep it in `struct mlx5_qp` (`cur_ctrl`, `cur_setters_cnt`, `err`, …): the
//! batch, the request being built, the batch's first error; and how each call changes it.
//!
//! The send queue is shared ([`SharedSendQueue`]): with a direct initiator's completion queue,
//! which retires its requests. A batch borrows it from `wr_start` to `wr_complete` or `wr_abort`
//! (libmlx5 holds its queue's lock as long: `mlx5_send_wr_start` to `mlx5_send_wr_complete`), so
//! that a poll meanwhile leaves it alone, as it leaves a native batch's.
use std::ptr::NonNull;
use std::rc::Rc;

use rdma_mummy_sys::{ibv_ah, ibv_sge};

use crate::send_queue::address_cache::AddressCache;
use crate::send_queue::batch::{fm_ce_se, Batch};
use crate::send_queue::operation::Segments;
use crate::send_queue::shared::SharedSendQueue;
use crate::send_queue::wqe::{Data, Request};
use crate::send_queue::{AddressVector, SendQueue, WorkRequestError, WorkRequestErrorKind};

/// What the entries keep between calls.
pub(super) struct State {
    queue: Rc<SharedSendQueue>,
    /// The batch between `wr_start` and `wr_complete` or `wr_abort`; while there is one, it
    /// holds the queue's borrow ([`SharedSendQueue::acquire`]).
    batch: Option<Batch>,
    /// The request whose builder was called and whose setters are not all in yet.
    pending: Option<Pending>,
    /// The batch's first error (libmlx5's `mqp->err`), 0 for none.
    error: i32,
    addresses: AddressCache,
    /// Data given before the address, kept until it comes (room for the queue's limits, made
    /// once).
    held: Held,
}

/// A request between its builder and its last setter.
struct Pending {
    wr_id: u64,
    fm_ce_se: u8,
    segments: Segments,
    address: Option<Address>,
    /// Whether its data came first and waits in [`State::held`].
    data_held: bool,
}

/// A request's DC address, as its setter gave it.
struct Address {
    vector: AddressVector,
    dct_number: u32,
    dc_key: u64,
    stream_id: Option<u16>,
}

/// Data given before the address: one entry, or the entries or inline bytes in the buffers.
struct Held {
    kind: HeldKind,
    entries: Vec<ibv_sge>,
    bytes: Vec<u8>,
}

#[derive(Clone, Copy)]
enum HeldKind {
    Sge { lkey: u32, addr: u64, length: u32 },
    SgeList,
    Inline,
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
    /// The state of entries over `queue`, finding address vectors with `addresses`; the buffers
    /// for data given before the address made to the queue's limits.
    pub(super) fn new(queue: Rc<SharedSendQueue>, addresses: AddressCache) -> Self {
        // SAFETY: nothing borrows the queue mutably: the entries are being made, outside any
        // call, batch or poll.
        let (max_send_sge, max_inline_data) = unsafe { (queue.get().max_send_sge, queue.get().max_inline_data) };
        let held = Held {
            kind: HeldKind::SgeList,
            entries: Vec::with_capacity(max_send_sge as usize),
            bytes: Vec::with_capacity(max_inline_data as usize),
        };
        Self {
            queue,
            batch: None,
            pending: None,
            error: 0,
            addresses,
            held,
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

    /// Keeps the batch's first error.
    #[inline]
    fn fail(&mut self, errno: i32) {
        if self.error == 0 {
            self.error = errno;
        }
    }

    /// Starts a batch (another one's unposted requests are dropped), taking the queue's borrow;
    /// `EBUSY` at `wr_complete` when something else holds it.
    pub(super) fn start(&mut self) {
        self.pending = None;
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
        if self.pending.take().is_some() {
            self.fail(libc::EINVAL);
        }
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
        self.pending = None;
        self.error = 0;
    }

    /// A builder: a new pending request (the last one, still pending, was missing a setter).
    #[inline]
    pub(super) fn begin(&mut self, wr_id: u64, wr_flags: u32, segments: Segments) {
        let missing_setter = self.pending.is_some();
        self.pending = Some(Pending {
            wr_id,
            fm_ce_se: fm_ce_se(wr_flags),
            segments,
            address: None,
            data_held: false,
        });
        if missing_setter {
            self.fail(libc::EINVAL);
        }
    }

    /// The DC setter: the request is written when its data is in already.
    ///
    /// # Safety
    ///
    /// `ah` must be a live address handle (on a device, libmlx5's).
    #[inline]
    pub(super) unsafe fn set_address(&mut self, ah: *mut ibv_ah, dct_number: u32, dc_key: u64, stream_id: Option<u16>) {
        let vector = match NonNull::new(ah) {
            // SAFETY: the caller's promise.
            Some(ah) => unsafe { self.addresses.read(ah) },
            None => None,
        };
        let (Some(pending), Some(vector)) = (self.pending.as_mut(), vector) else {
            return self.fail(libc::EINVAL);
        };
        if pending.address.is_some() {
            return self.fail(libc::EINVAL);
        }
        pending.address = Some(Address {
            vector,
            dct_number,
            dc_key,
            stream_id,
        });
        if pending.data_held {
            let held = &self.held;
            let data = match held.kind {
                HeldKind::Sge { lkey, addr, length } => Data::Sge { lkey, addr, length },
                HeldKind::SgeList => Data::SgeList(&held.entries),
                HeldKind::Inline => Data::Inline(&held.bytes),
            };
            let Self {
                queue,
                batch,
                pending,
                error,
                ..
            } = self;
            write(queue, batch, pending, error, data);
        }
    }

    /// A data setter: the request is written when its address is in already, else the data is
    /// kept until it comes.
    #[inline]
    pub(super) fn set_data(&mut self, data: Data<'_>) {
        match &self.pending {
            Some(pending) if pending.address.is_some() && !pending.data_held => {
                write(&self.queue, &mut self.batch, &mut self.pending, &mut self.error, data)
            },
            Some(pending) if !pending.data_held => self.hold(data),
            _ => self.fail(libc::EINVAL),
        }
    }

    /// Keeps data given before the address (refused at once when over the queue's limits, as
    /// the writer would refuse it).
    #[cold]
    fn hold(&mut self, data: Data<'_>) {
        let held = &mut self.held;
        // SAFETY: no `&mut` to the queue is alive: this call writes nothing.
        let queue = unsafe { self.queue.get() };
        let (max_inline_data, max_send_sge) = (queue.max_inline_data as usize, queue.max_send_sge as usize);
        let fits = match data {
            Data::Sge { lkey, addr, length } => {
                held.kind = HeldKind::Sge { lkey, addr, length };
                true
            },
            Data::SgeList(list) => {
                held.kind = HeldKind::SgeList;
                held.entries.clear();
                held.entries.extend_from_slice(&list[..list.len().min(max_send_sge)]);
                list.len() <= max_send_sge
            },
            Data::Inline(bytes) => {
                held.kind = HeldKind::Inline;
                held.bytes.clear();
                held.bytes.extend_from_slice(&bytes[..bytes.len().min(max_inline_data)]);
                bytes.len() <= max_inline_data
            },
            Data::InlineList(slices) => {
                held.kind = HeldKind::Inline;
                held.bytes.clear();
                for slice in slices {
                    let room = max_inline_data - held.bytes.len();
                    held.bytes.extend_from_slice(&slice[..slice.len().min(room)]);
                }
                slices.iter().map(|slice| slice.len()).sum::<usize>() <= max_inline_data
            },
        };
        if !fits {
            self.pending = None;
            return self.fail(libc::ENOMEM);
        }
        if let Some(pending) = self.pending.as_mut() {
            pending.data_held = true;
        }
    }
}

/// Writes the pending request (its address in) with `data` into the batch, through the writer;
/// a refusal becomes the batch's error. Nothing is written after an error, or outside a batch.
#[inline(always)]
fn write(
    queue: &SharedSendQueue, batch: &mut Option<Batch>, pending: &mut Option<Pending>, error: &mut i32, data: Data<'_>,
) {
    let Some(Pending {
        wr_id,
        fm_ce_se,
        segments,
        address: Some(address),
        ..
    }) = pending.take()
    else {
        return;
    };
    let (Some(batch), 0) = (batch.as_mut(), *error) else {
        return;
    };
    let request = Request {
        wr_id,
        fm_ce_se,
        segments,
        address: &address.vector,
        dct_number: address.dct_number,
        dc_key: address.dc_key,
        stream_id: address.stream_id,
    };
    // SAFETY: the batch holds the queue's borrow, and this is the only reference to the queue
    // while the request is written.
    if let Err(refused) = unsafe { queue.borrowed_mut() }.write(batch, request, data) {
        *error = errno(refused);
    }
}
