//! A [`SharedReceiveQueue`] (SRQ) holds receive work requests that many queue pairs consume: each
//! incoming message on any of those queue pairs takes the next posted receive.
//!
//! # Reference
//!
//! - RDMAmojo: [`ibv_create_srq`](https://www.rdmamojo.com/2012/06/18/ibv_create_srq/),
//!   [`ibv_modify_srq`](https://www.rdmamojo.com/2012/06/25/ibv_modify_srq/),
//!   [`ibv_post_srq_recv`](https://www.rdmamojo.com/2013/02/08/ibv_post_srq_recv/)
//! - rdma-core manpages: [`ibv_create_srq`](https://man7.org/linux/man-pages/man3/ibv_create_srq.3.html),
//!   [`ibv_modify_srq`](https://man7.org/linux/man-pages/man3/ibv_modify_srq.3.html),
//!   [`ibv_query_srq`](https://man7.org/linux/man-pages/man3/ibv_query_srq.3.html),
//!   [`ibv_post_srq_recv`](https://man7.org/linux/man-pages/man3/ibv_post_srq_recv.3.html)
use std::cell::Cell;
use std::io;
use std::marker::PhantomData;
use std::ptr::{null_mut, NonNull};
use std::sync::{Arc, Mutex};

use rdma_mummy_sys::{
    ibv_create_srq, ibv_destroy_srq, ibv_device_cap_flags, ibv_modify_srq, ibv_post_srq_recv, ibv_query_srq,
    ibv_recv_wr, ibv_sge, ibv_srq, ibv_srq_attr, ibv_srq_attr_mask, ibv_srq_init_attr,
};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::SetScatterGatherEntry;

/// Error returned by [`SharedReceiveQueueBuilder::build`].
#[derive(Debug, thiserror::Error)]
#[error("failed to create shared receive queue")]
#[non_exhaustive]
pub struct CreateSharedReceiveQueueError(#[from] pub CreateSharedReceiveQueueErrorKind);

/// The enum type for [`CreateSharedReceiveQueueError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateSharedReceiveQueueErrorKind {
    /// `max_wr` was zero: a shared receive queue must hold at least one receive.
    #[error("max_wr must be at least 1")]
    ZeroMaxWorkRequests,
    /// `max_wr` is above the device's `max_srq_wr`.
    #[error("max_wr {requested} is above the device's max_srq_wr {max}")]
    TooManyWorkRequests {
        /// What was asked for.
        requested: u32,
        /// The device's limit.
        max: u32,
    },
    /// `max_sge` is above the device's `max_srq_sge`.
    #[error("max_sge {requested} is above the device's max_srq_sge {max}")]
    TooManyScatterGatherEntries {
        /// What was asked for.
        requested: u32,
        /// The device's limit.
        max: u32,
    },
    /// The limit was to be armed at or above the queue's capacity, where it would fire at once.
    #[error("srq_limit {requested} must be below the queue's max_wr {max_wr}")]
    LimitTooLarge {
        /// What was asked for.
        requested: u32,
        /// The capacity the device granted.
        max_wr: u32,
    },
    /// The device does not support shared receive queues (its `max_srq` is 0).
    #[error("the device does not support shared receive queues")]
    NotSupported,
    /// The library call failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// Error returned by [`SharedReceiveQueue::modify`].
#[derive(Debug, thiserror::Error)]
#[error("failed to modify shared receive queue")]
#[non_exhaustive]
pub struct ModifySharedReceiveQueueError(#[from] pub ModifySharedReceiveQueueErrorKind);

/// The enum type for [`ModifySharedReceiveQueueError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModifySharedReceiveQueueErrorKind {
    /// Resizing needs the device capability `IBV_DEVICE_SRQ_RESIZE`, which this device lacks.
    #[error("the device cannot resize shared receive queues (no IBV_DEVICE_SRQ_RESIZE)")]
    ResizeNotSupported,
    /// The new `max_wr` is above the device's `max_srq_wr`.
    #[error("max_wr {requested} is above the device's max_srq_wr {max}")]
    TooManyWorkRequests {
        /// What was asked for.
        requested: u32,
        /// The device's limit.
        max: u32,
    },
    /// The limit must be below the queue's capacity.
    #[error("srq_limit {requested} must be below the queue's max_wr {max_wr}")]
    LimitTooLarge {
        /// What was asked for.
        requested: u32,
        /// The queue's capacity.
        max_wr: u32,
    },
    /// The library call failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// Error returned by [`SharedReceiveQueue::query`].
#[derive(Debug, thiserror::Error)]
#[error("failed to query shared receive queue")]
#[non_exhaustive]
pub struct QuerySharedReceiveQueueError(#[from] pub QuerySharedReceiveQueueErrorKind);

/// The enum type for [`QuerySharedReceiveQueueError`].
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
#[non_exhaustive]
pub enum QuerySharedReceiveQueueErrorKind {
    /// The library call failed.
    Ibverbs(#[from] io::Error),
}

/// Error returned by [`PostReceiveGuard::post`]. Every request before
/// [`failed_index`](Self::failed_index) was posted; the failed one and those after it were not.
#[derive(Debug, thiserror::Error)]
#[error("failed to post receive request {} (wr_id {}); {} before it were posted", .0.failed_index(), .0.wr_id(), .0.failed_index())]
#[non_exhaustive]
pub struct PostReceiveError(#[from] pub PostReceiveErrorKind);

impl PostReceiveError {
    /// Index in the batch of the first request that was not posted.
    pub fn failed_index(&self) -> usize {
        self.0.failed_index()
    }

    /// How many requests of the batch were posted (all those before the failed one).
    pub fn posted(&self) -> usize {
        self.0.failed_index()
    }

    /// `wr_id` of the first request that was not posted.
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id()
    }
}

/// The enum type for [`PostReceiveError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostReceiveErrorKind {
    /// The request has more scatter/gather entries than the queue's `max_sge`; checked before the
    /// batch was handed to the library, so nothing of it from this request on was posted.
    #[error("request {index} (wr_id {wr_id}) has {requested} scatter/gather entries, the queue's max_sge is {max}")]
    TooManyScatterGatherEntries {
        /// Index of the request in the batch.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// Its number of entries.
        requested: usize,
        /// The queue's `max_sge`.
        max: u32,
    },
    /// The library rejected the request as invalid (EINVAL).
    #[error("request {index} (wr_id {wr_id}) is invalid")]
    InvalidWorkRequest {
        /// Index of the request in the batch.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// The library's error.
        source: io::Error,
    },
    /// The queue is full (ENOMEM).
    #[error("the queue is full at request {index} (wr_id {wr_id})")]
    QueueFull {
        /// Index of the request in the batch.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// The library's error.
        source: io::Error,
    },
    /// Any other error of the library.
    #[error("posting request {index} (wr_id {wr_id}) failed")]
    Ibverbs {
        /// Index of the request in the batch.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// The library's error.
        source: io::Error,
    },
}

impl PostReceiveErrorKind {
    fn failed_index(&self) -> usize {
        match self {
            Self::TooManyScatterGatherEntries { index, .. }
            | Self::InvalidWorkRequest { index, .. }
            | Self::QueueFull { index, .. }
            | Self::Ibverbs { index, .. } => *index,
        }
    }

    fn wr_id(&self) -> u64 {
        match self {
            Self::TooManyScatterGatherEntries { wr_id, .. }
            | Self::InvalidWorkRequest { wr_id, .. }
            | Self::QueueFull { wr_id, .. }
            | Self::Ibverbs { wr_id, .. } => *wr_id,
        }
    }
}

/// The attributes of a [`SharedReceiveQueue`], as read by [`SharedReceiveQueue::query`] or given to
/// [`SharedReceiveQueue::modify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedReceiveQueueAttribute {
    /// Capacity: the most receive requests the queue holds.
    pub max_wr: u32,
    /// The most scatter/gather entries one receive request may have.
    pub max_sge: u32,
    /// The armed limit, 0 when none is armed.
    pub srq_limit: u32,
}

/// What [`SharedReceiveQueue::modify`] changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedReceiveQueueModification {
    /// Arm the limit: once fewer than this many receives are posted, the device raises one
    /// [`SharedReceiveQueueLimitReached`](super::async_event::AsyncEventType::SharedReceiveQueueLimitReached)
    /// event and disarms the limit (it reads 0 until armed again).
    ArmLimit(u32),
    /// Resize the queue to hold `max_wr` receives (needs the device's SRQ-resize capability).
    Resize {
        /// The new capacity.
        max_wr: u32,
    },
}

/// An opaque identity of a [`SharedReceiveQueue`], to match asynchronous events with the queue
/// they concern (see [`AsyncEvent::element`](super::async_event::AsyncEvent::element)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SharedReceiveQueueId(pub(crate) usize);

/// Builds a [`SharedReceiveQueue`]; created by
/// [`ProtectionDomainExt::create_srq_builder`](super::extension::ProtectionDomainExt::create_srq_builder).
#[derive(Debug)]
pub struct SharedReceiveQueueBuilder {
    pd: Arc<ProtectionDomain>,
    max_wr: u32,
    max_sge: u32,
    srq_limit: u32,
}

impl SharedReceiveQueueBuilder {
    pub(crate) fn new(pd: &Arc<ProtectionDomain>) -> Self {
        Self {
            pd: Arc::clone(pd),
            max_wr: 16,
            max_sge: 1,
            srq_limit: 0,
        }
    }

    /// The most receive requests the queue must hold (default 16). The device may grant more:
    /// read [`SharedReceiveQueue::max_wr`] after building.
    pub fn setup_max_wr(&mut self, max_wr: u32) -> &mut Self {
        self.max_wr = max_wr;
        self
    }

    /// The most scatter/gather entries a receive request may have (default 1).
    pub fn setup_max_sge(&mut self, max_sge: u32) -> &mut Self {
        self.max_sge = max_sge;
        self
    }

    /// A limit to arm right after creation (default 0: none). The library ignores a limit given
    /// at creation, so [`build`](Self::build) arms it with `ibv_modify_srq`.
    pub fn setup_srq_limit(&mut self, srq_limit: u32) -> &mut Self {
        self.srq_limit = srq_limit;
        self
    }

    /// Creates the queue with `ibv_create_srq`, checking the capacities against the device's
    /// limits first, and arms the limit if one was set.
    pub fn build(&self) -> Result<Arc<SharedReceiveQueue>, CreateSharedReceiveQueueError> {
        if self.max_wr == 0 {
            return Err(CreateSharedReceiveQueueErrorKind::ZeroMaxWorkRequests.into());
        }
        let device = super::query_device_attr(&self.pd).map_err(CreateSharedReceiveQueueErrorKind::Ibverbs)?;
        if device.max_srq <= 0 {
            return Err(CreateSharedReceiveQueueErrorKind::NotSupported.into());
        }
        let (max_wr, max_sge) = (device.max_srq_wr as u32, device.max_srq_sge as u32);
        if self.max_wr > max_wr {
            return Err(CreateSharedReceiveQueueErrorKind::TooManyWorkRequests {
                requested: self.max_wr,
                max: max_wr,
            }
            .into());
        }
        if self.max_sge > max_sge {
            return Err(CreateSharedReceiveQueueErrorKind::TooManyScatterGatherEntries {
                requested: self.max_sge,
                max: max_sge,
            }
            .into());
        }

        let mut init_attr = ibv_srq_init_attr {
            srq_context: null_mut(),
            attr: ibv_srq_attr {
                max_wr: self.max_wr,
                max_sge: self.max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: the PD handle is alive while `self.pd` is; init_attr is a valid, writable struct.
        let srq = unsafe { ibv_create_srq(self.pd.pd().as_ptr(), &mut init_attr) };
        let srq =
            NonNull::new(srq).ok_or_else(|| CreateSharedReceiveQueueErrorKind::Ibverbs(io::Error::last_os_error()))?;
        // ibv_create_srq writes back what the device actually granted.
        let srq = Arc::new(SharedReceiveQueue {
            srq,
            max_wr: Mutex::new(init_attr.attr.max_wr),
            max_sge: init_attr.attr.max_sge,
            device_max_wr: max_wr,
            can_resize: device.device_cap_flags & ibv_device_cap_flags::IBV_DEVICE_SRQ_RESIZE.0
                == ibv_device_cap_flags::IBV_DEVICE_SRQ_RESIZE.0,
            pd: Arc::clone(&self.pd),
        });
        if self.srq_limit > 0 {
            let max_wr = srq.max_wr();
            if self.srq_limit >= max_wr {
                return Err(CreateSharedReceiveQueueErrorKind::LimitTooLarge {
                    requested: self.srq_limit,
                    max_wr,
                }
                .into());
            }
            let mut attr = ibv_srq_attr {
                max_wr: 0,
                max_sge: 0,
                srq_limit: self.srq_limit,
            };
            srq.modify_raw(&mut attr, ibv_srq_attr_mask::IBV_SRQ_LIMIT)
                .map_err(CreateSharedReceiveQueueErrorKind::Ibverbs)?;
        }
        Ok(srq)
    }
}

/// Storage for a batch of receive requests, reused batch after batch so that posting allocates
/// nothing once it has grown to the batch size. Each thread keeps its own (see
/// [`RECV_BUFFERS`]): threads posting to one queue share no lock and no storage.
#[derive(Default)]
struct RecvBuffers {
    wrs: Vec<ibv_recv_wr>,
    sges: Vec<ibv_sge>,
}

impl RecvBuffers {
    const fn new() -> Self {
        Self {
            wrs: Vec::new(),
            sges: Vec::new(),
        }
    }
}

impl std::fmt::Debug for RecvBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBuffers")
            .field("capacity", &self.wrs.capacity())
            .finish()
    }
}

thread_local! {
    /// This thread's batch storage, lent to one [`PostReceiveGuard`] at a time (a second guard
    /// alive on the same thread starts with storage of its own).
    static RECV_BUFFERS: Cell<RecvBuffers> = const { Cell::new(RecvBuffers::new()) };
}

/// A shared receive queue (SRQ): receive requests posted once, consumed by every queue pair
/// created on it (see [`create_qp_builder`](Self::create_qp_builder), in the
/// [`queue_pair`](super::queue_pair) module).
///
/// Queue pairs hold an `Arc` of their SRQ, so the SRQ is destroyed only after the last of them.
#[derive(Debug)]
pub struct SharedReceiveQueue {
    srq: NonNull<ibv_srq>,
    max_wr: Mutex<u32>,
    max_sge: u32,
    device_max_wr: u32,
    can_resize: bool,
    // Destroyed before the protection domain it was created on.
    pd: Arc<ProtectionDomain>,
}

// SAFETY: ibv_srq may be used from any thread; providers serialise posting on an SRQ themselves,
// and the library does not write the ibv_srq struct in query, modify or post.
unsafe impl Send for SharedReceiveQueue {}
// SAFETY: as above; the mutable Rust-side state (the capacity) is behind a mutex.
unsafe impl Sync for SharedReceiveQueue {}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        // SAFETY: the handle came from ibv_create_srq and every queue pair on it is gone (they
        // hold an Arc of this queue).
        let ret = unsafe { ibv_destroy_srq(self.srq.as_ptr()) };
        super::check_destroy("ibv_destroy_srq", ret);
    }
}

impl SharedReceiveQueue {
    /// # Safety
    ///
    /// Return the handle of the shared receive queue. We mark this method unsafe because the
    /// lifetime of `ibv_srq` is not associated with the return value.
    pub unsafe fn srq(&self) -> NonNull<ibv_srq> {
        self.srq
    }

    /// The protection domain the queue was created on.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// The capacity the device granted (at least what was asked for).
    pub fn max_wr(&self) -> u32 {
        *self.max_wr.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most scatter/gather entries per receive request the device granted.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// Whether the device can resize shared receive queues (`IBV_DEVICE_SRQ_RESIZE`).
    pub fn can_resize(&self) -> bool {
        self.can_resize
    }

    /// The identity asynchronous events name this queue by.
    pub fn id(&self) -> SharedReceiveQueueId {
        SharedReceiveQueueId(self.srq.as_ptr() as usize)
    }

    /// Reads the queue's attributes with `ibv_query_srq`; `srq_limit` is 0 when no limit is armed.
    pub fn query(&self) -> Result<SharedReceiveQueueAttribute, QuerySharedReceiveQueueError> {
        let mut attr = ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: 0,
        };
        // SAFETY: the handle is alive; attr is writable.
        let ret = unsafe { ibv_query_srq(self.srq.as_ptr(), &mut attr) };
        if ret != 0 {
            return Err(QuerySharedReceiveQueueErrorKind::Ibverbs(io::Error::from_raw_os_error(ret)).into());
        }
        Ok(SharedReceiveQueueAttribute {
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            srq_limit: attr.srq_limit,
        })
    }

    /// Arms the limit or resizes the queue with `ibv_modify_srq`. A resize on a device without
    /// the SRQ-resize capability is refused before the call.
    pub fn modify(&self, modification: SharedReceiveQueueModification) -> Result<(), ModifySharedReceiveQueueError> {
        let mut max_wr = self.max_wr.lock().unwrap_or_else(|e| e.into_inner());
        let (mut attr, mask) = match modification {
            SharedReceiveQueueModification::ArmLimit(limit) => {
                if limit >= *max_wr {
                    return Err(ModifySharedReceiveQueueErrorKind::LimitTooLarge {
                        requested: limit,
                        max_wr: *max_wr,
                    }
                    .into());
                }
                (
                    ibv_srq_attr {
                        max_wr: 0,
                        max_sge: 0,
                        srq_limit: limit,
                    },
                    ibv_srq_attr_mask::IBV_SRQ_LIMIT,
                )
            },
            SharedReceiveQueueModification::Resize { max_wr: new } => {
                if !self.can_resize {
                    return Err(ModifySharedReceiveQueueErrorKind::ResizeNotSupported.into());
                }
                if new > self.device_max_wr {
                    return Err(ModifySharedReceiveQueueErrorKind::TooManyWorkRequests {
                        requested: new,
                        max: self.device_max_wr,
                    }
                    .into());
                }
                (
                    ibv_srq_attr {
                        max_wr: new,
                        max_sge: 0,
                        srq_limit: 0,
                    },
                    ibv_srq_attr_mask::IBV_SRQ_MAX_WR,
                )
            },
        };
        self.modify_raw(&mut attr, mask)
            .map_err(ModifySharedReceiveQueueErrorKind::Ibverbs)?;
        if let SharedReceiveQueueModification::Resize { .. } = modification {
            *max_wr = self.query().map(|attr| attr.max_wr).unwrap_or(attr.max_wr);
        }
        Ok(())
    }

    /// `ibv_modify_srq`, unchecked.
    fn modify_raw(&self, attr: &mut ibv_srq_attr, mask: ibv_srq_attr_mask) -> io::Result<()> {
        // SAFETY: the handle is alive; attr is a valid ibv_srq_attr.
        let ret = unsafe { ibv_modify_srq(self.srq.as_ptr(), attr, mask.0 as _) };
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
        Ok(())
    }

    /// Starts a batch of receive requests; [`PostReceiveGuard::post`] hands the whole batch to
    /// `ibv_post_srq_recv` at once. Dropping the guard without posting discards the batch.
    ///
    /// The batch's storage belongs to the calling thread and is reused, so posting takes no lock
    /// and allocates nothing once it has grown to the batch size, also when several threads post
    /// to one queue.
    #[inline]
    pub fn start_post_recv(&self) -> PostReceiveGuard<'_> {
        // SAFETY: the queue is alive for the guard's lifetime and its max_sge is the granted one.
        unsafe { PostReceiveGuard::start(self.srq, self.max_sge) }
    }
}

/// A batch of receive requests for a [`SharedReceiveQueue`]; see
/// [`SharedReceiveQueue::start_post_recv`].
#[must_use = "the batch is posted only by post()"]
pub struct PostReceiveGuard<'srq> {
    srq: NonNull<ibv_srq>,
    max_sge: u32,
    buffers: RecvBuffers,
    _srq: PhantomData<&'srq SharedReceiveQueue>,
}

impl Drop for PostReceiveGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Give the storage back to this thread for the next batch (unless the thread is exiting).
        let buffers = std::mem::take(&mut self.buffers);
        let _ = RECV_BUFFERS.try_with(|slot| slot.set(buffers));
    }
}

impl PostReceiveGuard<'_> {
    /// Starts a batch on a raw shared receive queue. [`SharedReceiveQueue::start_post_recv`] calls
    /// it; it is public for benchmarks and tests that drive the guard over hand-made function
    /// tables.
    ///
    /// # Safety
    ///
    /// `srq` must be a live shared receive queue for the guard's lifetime, and `max_sge` at most
    /// the number of scatter/gather entries per request it was created with.
    #[doc(hidden)]
    #[inline]
    pub unsafe fn start(srq: NonNull<ibv_srq>, max_sge: u32) -> Self {
        let mut buffers = RECV_BUFFERS.try_with(Cell::take).unwrap_or_default();
        buffers.wrs.clear();
        buffers.sges.clear();
        Self {
            srq,
            max_sge,
            buffers,
            _srq: PhantomData,
        }
    }

    /// Adds a receive request with this `wr_id` to the batch; give it its buffers through the
    /// returned handle ([`SetScatterGatherEntry`]). A request with no entries receives
    /// zero-length messages only.
    #[inline]
    pub fn construct_wr(&mut self, wr_id: u64) -> RecvWorkRequestHandle<'_> {
        // The pointers are set by `post`, once the vectors no longer move.
        self.buffers.wrs.push(ibv_recv_wr {
            wr_id,
            next: null_mut(),
            sg_list: null_mut(),
            num_sge: 0,
        });
        RecvWorkRequestHandle {
            buffers: &mut self.buffers,
        }
    }

    /// How many requests the batch holds.
    #[inline]
    pub fn len(&self) -> usize {
        self.buffers.wrs.len()
    }

    /// Whether the batch is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buffers.wrs.is_empty()
    }

    /// Posts the batch with `ibv_post_srq_recv`. On error, every request before
    /// [`PostReceiveError::failed_index`] was posted and the rest were not.
    #[inline]
    pub fn post(mut self) -> Result<(), PostReceiveError> {
        let max_sge = self.max_sge;
        let RecvBuffers { wrs, sges } = &mut self.buffers;
        let len = wrs.len();
        // Every pointer comes from these two base pointers, taken after the last write through
        // the vectors; requests with more entries than the queue takes end the list before them.
        let wr_base = wrs.as_mut_ptr();
        let mut sge = sges.as_mut_ptr();
        let mut valid = len;
        for i in 0..len {
            // SAFETY: i < len; the entries of request i follow those of the requests before it.
            unsafe {
                let wr = wr_base.add(i);
                let num_sge = (*wr).num_sge as u32;
                if num_sge > max_sge {
                    valid = i;
                    break;
                }
                (*wr).sg_list = sge;
                sge = sge.add(num_sge as usize);
                (*wr).next = if i + 1 < len { wr_base.add(i + 1) } else { null_mut() };
            }
        }
        if valid < len {
            return Err(self.too_many_sges(valid));
        }
        if len == 0 {
            return Ok(());
        }
        let mut bad_wr: *mut ibv_recv_wr = null_mut();
        // SAFETY: the list and its entries live in `self.buffers` until the call returns; the
        // SRQ is alive for the guard's lifetime.
        let ret = unsafe { ibv_post_srq_recv(self.srq.as_ptr(), wr_base, &mut bad_wr) };
        if ret != 0 {
            return Err(post_error(ret, wr_base, bad_wr, len));
        }
        Ok(())
    }

    /// Request `valid` has too many entries: post those before it and report it.
    #[cold]
    #[inline(never)]
    fn too_many_sges(&mut self, valid: usize) -> PostReceiveError {
        let wrs = self.buffers.wrs.as_mut_ptr();
        // SAFETY: valid < len; the requests before it are linked (the last one's next is cut
        // here).
        let (wr_id, requested) = unsafe { ((*wrs.add(valid)).wr_id, (*wrs.add(valid)).num_sge as usize) };
        if valid > 0 {
            // SAFETY: as above.
            unsafe { (*wrs.add(valid - 1)).next = null_mut() };
            let mut bad_wr: *mut ibv_recv_wr = null_mut();
            // SAFETY: the valid prefix and its entries live in `self.buffers` until the call
            // returns; the SRQ is alive.
            let ret = unsafe { ibv_post_srq_recv(self.srq.as_ptr(), wrs, &mut bad_wr) };
            if ret != 0 {
                return post_error(ret, wrs, bad_wr, valid);
            }
        }
        PostReceiveErrorKind::TooManyScatterGatherEntries {
            index: valid,
            wr_id,
            requested,
            max: self.max_sge,
        }
        .into()
    }
}

/// The error of a failed `ibv_post_srq_recv` over the list at `wrs` of `len` requests.
#[cold]
#[inline(never)]
fn post_error(ret: i32, wrs: *mut ibv_recv_wr, bad_wr: *mut ibv_recv_wr, len: usize) -> PostReceiveError {
    // bad_wr names the first request that was not posted; a provider that left it unset posted
    // nothing.
    let index = if bad_wr.is_null() {
        0
    } else {
        // SAFETY: bad_wr points into the list, which is one allocation starting at wrs.
        (unsafe { bad_wr.offset_from(wrs) } as usize).min(len - 1)
    };
    // SAFETY: index < len.
    let wr_id = unsafe { (*wrs.add(index)).wr_id };
    let source = io::Error::from_raw_os_error(ret);
    match ret {
        libc::EINVAL => PostReceiveErrorKind::InvalidWorkRequest { index, wr_id, source },
        libc::ENOMEM => PostReceiveErrorKind::QueueFull { index, wr_id, source },
        _ => PostReceiveErrorKind::Ibverbs { index, wr_id, source },
    }
    .into()
}

/// The buffers of one receive request in a [`PostReceiveGuard`] batch.
#[must_use = "give the request its buffers with setup_sge or setup_sge_list"]
pub struct RecvWorkRequestHandle<'g> {
    buffers: &'g mut RecvBuffers,
}

impl SetScatterGatherEntry for RecvWorkRequestHandle<'_> {
    /// # Safety
    ///
    /// The buffer `addr..addr + length` must lie in a memory region registered with `lkey` and
    /// stay valid until the receive completes (or the queue is destroyed).
    #[inline]
    unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) {
        self.buffers.sges.push(ibv_sge { addr, length, lkey });
        if let Some(wr) = self.buffers.wrs.last_mut() {
            wr.num_sge += 1;
        }
    }

    /// # Safety
    ///
    /// Each entry's buffer must lie in the memory region registered with its `lkey` and stay
    /// valid until the receive completes (or the queue is destroyed).
    #[inline]
    unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) {
        self.buffers.sges.extend_from_slice(sg_list);
        if let Some(wr) = self.buffers.wrs.last_mut() {
            wr.num_sge = wr.num_sge.saturating_add(sg_list.len().min(i32::MAX as usize) as i32);
        }
    }
}
