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
use std::cell::{Cell, UnsafeCell};
use std::io;
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr::{addr_of_mut, null_mut, NonNull};
use std::sync::{Arc, Mutex};

use super::zeroed::Zeroed;
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

        // Zeroed: libibverbs copies the whole struct and reads its tail padding as `comp_mask`.
        let mut init_attr = Zeroed::<ibv_srq_init_attr>::new();
        init_attr.attr.max_wr = self.max_wr;
        init_attr.attr.max_sge = self.max_sge;
        // SAFETY: the PD handle is alive while `self.pd` is; init_attr is a valid, writable struct.
        let srq = unsafe { ibv_create_srq(self.pd.pd().as_ptr(), init_attr.as_mut_ptr()) };
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

/// Requests a [`PostReceiveGuard`] holds before it hands them to the provider.
const CHUNK_REQUESTS: usize = 64;
/// Scatter/gather entries a [`PostReceiveGuard`] holds before it hands its requests over.
const CHUNK_ENTRIES: usize = 128;

/// The storage of a receive batch: requests and their entries, in order from the first slot, each
/// request linked to the slot after it as it is added, the last one's link set to NULL when the
/// chunk is handed over (its address does not change while a guard uses it, so every pointer is
/// final when written).
struct RecvChunk {
    wrs: [MaybeUninit<ibv_recv_wr>; CHUNK_REQUESTS],
    sges: [MaybeUninit<ibv_sge>; CHUNK_ENTRIES],
}

impl RecvChunk {
    const fn new() -> Self {
        Self {
            // Zeroed, padding included: requests are written field by field (see `push`).
            wrs: [MaybeUninit::zeroed(); CHUNK_REQUESTS],
            sges: [MaybeUninit::zeroed(); CHUNK_ENTRIES],
        }
    }
}

// Every request keeps an entry slot: a full chunk of single-entry requests always fits.
const _: () = assert!(CHUNK_ENTRIES >= CHUNK_REQUESTS);

/// Each thread's receive chunk: plain data with a constant initialiser and no destructor, so
/// reaching it is a thread-pointer-relative address; `in_use` lends it to one guard at a time.
struct ThreadChunk {
    in_use: Cell<bool>,
    chunk: UnsafeCell<RecvChunk>,
}

thread_local! {
    static THREAD_CHUNK: ThreadChunk = const {
        ThreadChunk {
            in_use: Cell::new(false),
            chunk: UnsafeCell::new(RecvChunk::new()),
        }
    };
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
    #[inline(always)]
    pub fn start_post_recv(&self) -> PostReceiveGuard<'_> {
        // SAFETY: the queue is alive for the guard's lifetime and its max_sge is the granted one.
        unsafe { PostReceiveGuard::start(self.srq, self.max_sge) }
    }

    /// Posts one receive request with `ibv_post_srq_recv`, at the cost of the raw call: for the
    /// everyday "repost the receive that just completed". Its entries are read from `sg_list`
    /// during the call (nothing is copied first); an empty list receives zero-length messages
    /// only.
    ///
    /// The same guarantees as a batch: a list longer than the queue's
    /// [`max_sge`](Self::max_sge) is refused before the library
    /// ([`TooManyScatterGatherEntries`](PostReceiveErrorKind::TooManyScatterGatherEntries)), and
    /// an error names the request (`failed_index` 0, its `wr_id`); on error nothing was posted.
    ///
    /// See [`ibv_post_srq_recv`](https://man7.org/linux/man-pages/man3/ibv_post_srq_recv.3.html)
    /// ([RDMAmojo](https://www.rdmamojo.com/2013/02/08/ibv_post_srq_recv/)).
    ///
    /// # Safety
    ///
    /// Each entry's buffer must lie in the memory region registered with its `lkey` and stay
    /// valid until the receive completes (or the queue is destroyed).
    #[inline(always)]
    pub unsafe fn post_recv_one(&self, wr_id: u64, sg_list: &[ibv_sge]) -> Result<(), PostReceiveError> {
        // SAFETY: the queue is alive during the call and its max_sge is the granted one; the
        // caller keeps the buffers valid.
        unsafe { Self::post_recv_one_raw(self.srq, self.max_sge, wr_id, sg_list) }
    }

    bench_visible! {
        /// [`post_recv_one`](Self::post_recv_one) on a raw shared receive queue, for benchmarks and
        /// tests that drive it over hand-made function tables.
        ///
        /// # Safety
        ///
        /// `srq` must be a live shared receive queue and `max_sge` at most the number of entries per
        /// request it was created with; the buffers as for [`post_recv_one`](Self::post_recv_one).
        #[inline(always)]
        pub unsafe fn post_recv_one_raw(
            srq: NonNull<ibv_srq>, max_sge: u32, wr_id: u64, sg_list: &[ibv_sge],
        ) -> Result<(), PostReceiveError> {
            let mut wr = Zeroed::<ibv_recv_wr>::new();
            wr.wr_id = wr_id;
            wr.sg_list = sg_list.as_ptr().cast_mut();
            wr.num_sge = sg_list.len() as i32;
            // Checked once the request is written, as raw code writes it first.
            if sg_list.len() > max_sge as usize {
                return Err(one_failed(0, wr.wr_id, sg_list.len(), max_sge));
            }
            let mut bad_wr: *mut ibv_recv_wr = null_mut();
            // SAFETY: a one-request list whose entries (read, never written, by the provider) live
            // until the call returns; the SRQ is alive (the caller's promise).
            let ret = unsafe { ibv_post_srq_recv(srq.as_ptr(), wr.as_mut_ptr(), &mut bad_wr) };
            if ret != 0 {
                // Read back from the request, so that nothing needs to stay live across the call
                // (`max` only matters for too many entries).
                return Err(one_failed(ret, wr.wr_id, 0, 0));
            }
            Ok(())
        }
    }
}

/// The error of a one-request post (`ret` as in [`Failure`]).
#[cold]
#[inline(never)]
fn one_failed(ret: i32, wr_id: u64, requested: usize, max: u32) -> PostReceiveError {
    Failure {
        ret,
        index: 0,
        wr_id,
        requested,
        max,
    }
    .into_error()
}

/// A batch of receive requests for a [`SharedReceiveQueue`]; see
/// [`SharedReceiveQueue::start_post_recv`].
///
/// The guard fills a chunk of 64 requests (and 128 scatter/gather entries)
/// that belongs to the calling thread, linking each request into the list as it is added: no
/// lock, no allocation, no pass over the list before the call. When the chunk is full, the
/// requests in it are handed to `ibv_post_srq_recv` and the chunk starts over, so a batch of any
/// size costs one library call per 64 requests. [`post`](Self::post) hands over the rest.
/// Dropping the guard discards the requests not handed over yet;
/// [`posted`](Self::posted) tells how many were.
///
/// Once a request fails (queue full, too many entries), nothing from it on is posted and
/// [`post`](Self::post) reports it.
#[must_use = "the batch is posted only by post()"]
pub struct PostReceiveGuard<'srq> {
    batch: RecvBatch,
    _srq: PhantomData<&'srq SharedReceiveQueue>,
}

/// The state of a receive batch, which its request handles update. Cursors are pointers into
/// the chunk (never into the guard, which may move).
struct RecvBatch {
    srq: NonNull<ibv_srq>,
    max_sge: u32,
    /// The chunk: the thread's, or (when the thread's is lent to another guard) this guard's own.
    chunk: NonNull<RecvChunk>,
    owned: Option<Box<RecvChunk>>,
    /// Where the next request and entry go.
    next_wr: *mut ibv_recv_wr,
    next_sge: *mut ibv_sge,
    /// Requests handed to the provider.
    posted: usize,
    failed: Option<Failure>,
}

impl Drop for PostReceiveGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        release(self.batch.owned.take());
    }
}

/// Gives the thread's chunk back (unless the thread is exiting), or frees the guard's own.
#[inline(always)]
fn release(owned: Option<Box<RecvChunk>>) {
    match owned {
        None => {
            let _ = THREAD_CHUNK.try_with(|thread| thread.in_use.set(false));
        },
        Some(owned) => drop(owned),
    }
}

impl PostReceiveGuard<'_> {
    bench_visible! {
        /// Starts a batch on a raw shared receive queue. [`SharedReceiveQueue::start_post_recv`] calls
        /// it; it is public for benchmarks and tests that drive the guard over hand-made function
        /// tables.
        ///
        /// # Safety
        ///
        /// `srq` must be a live shared receive queue for the guard's lifetime, and `max_sge` at most
        /// the number of scatter/gather entries per request it was created with.
        #[inline(always)]
        pub unsafe fn start(srq: NonNull<ibv_srq>, max_sge: u32) -> Self {
            let thread = THREAD_CHUNK.try_with(|thread| {
                if thread.in_use.replace(true) {
                    None
                } else {
                    NonNull::new(thread.chunk.get())
                }
            });
            let (chunk, owned) = match thread {
                Ok(Some(chunk)) => (chunk, None),
                // Another guard of this thread holds the thread's chunk (or the thread is exiting).
                _ => own_chunk(),
            };
            let mut batch = RecvBatch {
                srq,
                max_sge,
                chunk,
                owned,
                next_wr: null_mut(),
                next_sge: null_mut(),
                posted: 0,
                failed: None,
            };
            batch.restart();
            Self {
                batch,
                _srq: PhantomData,
            }
        }
    }

    /// Starts a receive request with this `wr_id`; it joins the batch when the returned handle
    /// is given its buffers ([`SetScatterGatherEntry`]), and a handle dropped before that adds
    /// nothing. A request given an empty list (`setup_sge_list(&[])`) receives zero-length
    /// messages only.
    #[inline(always)]
    pub fn construct_wr(&mut self, wr_id: u64) -> RecvWorkRequestHandle<'_> {
        let batch = &mut self.batch;
        if batch.is_full() {
            batch.hand_over();
        }
        RecvWorkRequestHandle { batch, wr_id }
    }

    /// How many requests the batch holds (handed over or not).
    #[inline]
    pub fn len(&self) -> usize {
        self.batch.posted + self.batch.len()
    }

    /// Whether the batch is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many requests were handed to the provider so far (every full chunk).
    #[inline]
    pub fn posted(&self) -> usize {
        self.batch.posted
    }

    /// Posts the batch with `ibv_post_srq_recv` (what is not handed over yet). On error, every
    /// request before [`PostReceiveError::failed_index`] was posted and the rest were not.
    #[inline(always)]
    pub fn post(self) -> Result<(), PostReceiveError> {
        // Not dropped: its parts are released here, so that the batch never has to be in memory.
        let mut this = ManuallyDrop::new(self);
        let batch = &mut this.batch;
        let result = match batch.failed {
            // The batch's last chunk, handed over with nothing kept for after it: no failure
            // record stays live across the provider call.
            None => batch.hand_over_last(),
            Some(failure) => Err(failure.into_error()),
        };
        release(batch.owned.take());
        result
    }
}

#[cold]
#[inline(never)]
fn own_chunk() -> (NonNull<RecvChunk>, Option<Box<RecvChunk>>) {
    let mut owned = Box::new(RecvChunk::new());
    (NonNull::from(&mut *owned), Some(owned))
}

/// The first request of a batch that failed: `ret` is the library's errno, or 0 for too many
/// entries (checked before the call). Small and `Copy`, so that the batch stays in registers.
#[derive(Debug, Clone, Copy)]
struct Failure {
    ret: i32,
    index: usize,
    wr_id: u64,
    requested: usize,
    max: u32,
}

impl Failure {
    #[cold]
    #[inline(never)]
    fn into_error(self) -> PostReceiveError {
        let Self {
            ret,
            index,
            wr_id,
            requested,
            max,
        } = self;
        let source = || io::Error::from_raw_os_error(ret);
        match ret {
            0 => PostReceiveErrorKind::TooManyScatterGatherEntries {
                index,
                wr_id,
                requested,
                max,
            },
            libc::EINVAL => PostReceiveErrorKind::InvalidWorkRequest {
                index,
                wr_id,
                source: source(),
            },
            libc::ENOMEM => PostReceiveErrorKind::QueueFull {
                index,
                wr_id,
                source: source(),
            },
            _ => PostReceiveErrorKind::Ibverbs {
                index,
                wr_id,
                source: source(),
            },
        }
        .into()
    }
}

/// How many of the chunk's `len` requests from `head` went in before the one at `bad_wr`
/// failed, and that one's `wr_id`.
#[cold]
#[inline(never)]
fn failed_in_chunk(head: *mut ibv_recv_wr, bad_wr: *mut ibv_recv_wr, len: usize) -> (usize, u64) {
    // bad_wr names the first request that was not posted; a provider that left it unset posted
    // nothing.
    let in_chunk = if bad_wr.is_null() {
        0
    } else {
        // SAFETY: bad_wr points into the chunk's request array, which starts at head.
        (unsafe { bad_wr.offset_from(head) }.max(0) as usize).min(len - 1)
    };
    // SAFETY: in_chunk < len requests written in the chunk.
    (in_chunk, unsafe { (*head.add(in_chunk)).wr_id })
}

/// The error of the batch's last chunk, whose provider call returned `ret` (`posted` requests
/// were handed over before the chunk).
#[cold]
#[inline(never)]
fn last_failed(
    ret: i32, head: *mut ibv_recv_wr, bad_wr: *mut ibv_recv_wr, len: usize, posted: usize, max: u32,
) -> PostReceiveError {
    let (in_chunk, wr_id) = failed_in_chunk(head, bad_wr, len);
    Failure {
        ret,
        index: posted + in_chunk,
        wr_id,
        requested: 0,
        max,
    }
    .into_error()
}

/// A hint for the branch that calls it.
#[cold]
#[inline(always)]
fn cold() {}

impl RecvBatch {
    /// The chunk's first request slot.
    #[inline(always)]
    fn first_wr(&self) -> *mut ibv_recv_wr {
        // SAFETY: the chunk is this guard's; only an address is computed.
        unsafe { std::ptr::addr_of_mut!((*self.chunk.as_ptr()).wrs).cast() }
    }

    /// Requests in the chunk.
    #[inline(always)]
    fn len(&self) -> usize {
        // SAFETY: next_wr lies in the chunk's request array, at or after its start.
        unsafe { self.next_wr.offset_from(self.first_wr()) as usize }
    }

    /// Empties the chunk.
    #[inline(always)]
    fn restart(&mut self) {
        let chunk = self.chunk.as_ptr();
        self.next_wr = self.first_wr();
        // SAFETY: the chunk is this guard's; only addresses are computed.
        self.next_sge = unsafe { std::ptr::addr_of_mut!((*chunk).sges).cast() };
    }

    /// Ends the chunk's list at its last request (the chunk must hold one).
    #[inline(always)]
    fn terminate(&mut self) {
        // SAFETY: the chunk holds at least one request, written by push; the slot before
        // next_wr is the last.
        unsafe { (*self.next_wr.sub(1)).next = null_mut() };
    }

    /// Whether the chunk has no free request slot.
    #[inline(always)]
    fn is_full(&self) -> bool {
        // SAFETY: one past the chunk's request array; only an address is computed.
        self.next_wr == unsafe { self.first_wr().add(CHUNK_REQUESTS) }
    }

    /// Adds a request to the chunk, linked to the slot after it, its `num_sge` entries to be written at
    /// `next_sge`. The chunk must have a free slot (`construct_wr` hands a full chunk over), and
    /// at least `num_sge` entry slots beyond one for each other free request slot.
    #[inline(always)]
    fn push(&mut self, wr_id: u64, num_sge: usize) {
        let wr = self.next_wr;
        // SAFETY: wr is a free slot of the chunk (the caller's promise), which is this guard's
        // until it is dropped and does not move.
        unsafe {
            // The next slot, or one past the array for the last one: either is replaced by NULL
            // (terminate) before the list is handed over, if no request follows.
            let next = wr.add(1);
            // Field by field: the slot's padding keeps the zeroes the chunk was made with.
            addr_of_mut!((*wr).wr_id).write(wr_id);
            addr_of_mut!((*wr).next).write(next);
            addr_of_mut!((*wr).sg_list).write(self.next_sge);
            addr_of_mut!((*wr).num_sge).write(num_sge as i32);
            self.next_wr = next;
        }
    }

    /// Whether a request of `count` entries fits in the chunk, leaving an entry slot for each
    /// request slot still free after it.
    #[inline(always)]
    fn fits(&self, count: usize) -> bool {
        // SAFETY: the cursors lie in their arrays; only addresses are compared.
        unsafe {
            let free_requests = self.first_wr().add(CHUNK_REQUESTS).offset_from(self.next_wr) as usize;
            let sges_end = std::ptr::addr_of_mut!((*self.chunk.as_ptr()).sges)
                .cast::<ibv_sge>()
                .add(CHUNK_ENTRIES);
            count + free_requests <= sges_end.offset_from(self.next_sge) as usize + 1
        }
    }

    /// Hands the chunk's requests to the provider and starts the chunk over; after a failure,
    /// drops them.
    #[inline(always)]
    fn hand_over(&mut self) {
        let len = self.len();
        if len == 0 {
            return;
        }
        self.terminate();
        let head = self.first_wr();
        self.restart();
        if self.failed.is_some() {
            return;
        }
        let mut bad_wr: *mut ibv_recv_wr = null_mut();
        // SAFETY: the list from the chunk's first slot is its `len` requests, linked in place,
        // the last `next` NULL; their entries are in the chunk; the SRQ is alive for the guard's
        // lifetime.
        let ret = unsafe { ibv_post_srq_recv(self.srq.as_ptr(), head, &mut bad_wr) };
        if ret != 0 {
            let (in_chunk, wr_id) = failed_in_chunk(head, bad_wr, len);
            self.posted += in_chunk;
            return self.fail(ret, wr_id, 0);
        }
        self.posted += len;
    }

    /// Hands the chunk's requests to the provider, the batch's last (no failure before them);
    /// the chunk is not started over.
    #[inline(always)]
    fn hand_over_last(&mut self) -> Result<(), PostReceiveError> {
        let len = self.len();
        if len == 0 {
            return Ok(());
        }
        self.terminate();
        let head = self.first_wr();
        let mut bad_wr: *mut ibv_recv_wr = null_mut();
        // SAFETY: as in hand_over.
        let ret = unsafe { ibv_post_srq_recv(self.srq.as_ptr(), head, &mut bad_wr) };
        if ret != 0 {
            return Err(last_failed(ret, head, bad_wr, len, self.posted, self.max_sge));
        }
        Ok(())
    }

    /// Request `wr_id` has `requested` entries, more than the queue takes: hand over the
    /// requests before it, and refuse it and everything after it.
    #[inline(always)]
    fn refuse(&mut self, wr_id: u64, requested: usize) {
        cold();
        if self.len() > 0 {
            self.hand_over();
        }
        self.fail(0, wr_id, requested);
    }

    /// Records the batch's first failure: request `wr_id`, the next one not posted, failed with
    /// `ret` (0: it has `requested` entries, more than the queue takes).
    #[inline(always)]
    fn fail(&mut self, ret: i32, wr_id: u64, requested: usize) {
        if self.failed.is_none() {
            self.failed = Some(Failure {
                ret,
                index: self.posted,
                wr_id,
                requested,
                max: self.max_sge,
            });
        }
    }

    /// Adds request `wr_id` with the entries of `sg_list` (at most `max_sge`), copied into the
    /// chunk; a list too long for a chunk is handed over alone, straight from the caller's list
    /// (alive during this call).
    #[inline(always)]
    fn add_list(&mut self, wr_id: u64, sg_list: &[ibv_sge]) {
        let count = sg_list.len();
        if !self.fits(count) {
            cold();
            self.hand_over();
            if !self.fits(count) {
                return self.post_alone(wr_id, sg_list);
            }
        }
        self.push(wr_id, count);
        // SAFETY: the entries fit at next_sge, where the request's sg_list points (checked
        // above), leaving an entry slot for each request slot still free.
        unsafe {
            std::ptr::copy_nonoverlapping(sg_list.as_ptr(), self.next_sge, count);
            self.next_sge = self.next_sge.add(count);
        }
    }

    /// Posts one request by itself, its entries read from the caller's list.
    #[cold]
    #[inline(never)]
    fn post_alone(&mut self, wr_id: u64, sg_list: &[ibv_sge]) {
        if self.failed.is_some() {
            return;
        }
        let mut wr = Zeroed::<ibv_recv_wr>::new();
        wr.wr_id = wr_id;
        wr.sg_list = sg_list.as_ptr().cast_mut();
        wr.num_sge = sg_list.len() as i32;
        let mut bad_wr: *mut ibv_recv_wr = null_mut();
        // SAFETY: a one-request list whose entries live until the call returns; the SRQ is alive.
        let ret = unsafe { ibv_post_srq_recv(self.srq.as_ptr(), wr.as_mut_ptr(), &mut bad_wr) };
        if ret != 0 {
            return self.fail(ret, wr_id, 0);
        }
        self.posted += 1;
    }
}

/// One receive request of a [`PostReceiveGuard`] batch: give it its buffers.
#[must_use = "a request joins the batch only when given its buffers (setup_sge or setup_sge_list)"]
pub struct RecvWorkRequestHandle<'g> {
    batch: &'g mut RecvBatch,
    wr_id: u64,
}

impl SetScatterGatherEntry for RecvWorkRequestHandle<'_> {
    /// # Safety
    ///
    /// The buffer `addr..addr + length` must lie in a memory region registered with `lkey` and
    /// stay valid until the receive completes (or the queue is destroyed).
    #[inline(always)]
    unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) {
        let batch = self.batch;
        if batch.max_sge == 0 {
            return batch.refuse(self.wr_id, 1);
        }
        // construct_wr left a free request slot, which always has an entry slot of its own.
        batch.push(self.wr_id, 1);
        batch.next_sge.write(ibv_sge { addr, length, lkey });
        batch.next_sge = batch.next_sge.add(1);
    }

    /// # Safety
    ///
    /// Each entry's buffer must lie in the memory region registered with its `lkey` and stay
    /// valid until the receive completes (or the queue is destroyed).
    #[inline(always)]
    unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) {
        let batch = self.batch;
        if sg_list.len() > batch.max_sge as usize {
            return batch.refuse(self.wr_id, sg_list.len());
        }
        batch.add_list(self.wr_id, sg_list);
    }
}

#[cfg(test)]
mod tests {
    //! The receive guard over a recording `post_srq_recv`: the lists it hands over, chunk by
    //! chunk, and what its errors say went in.
    use std::cell::RefCell;

    use rdma_mummy_sys::ibv_context;

    use super::*;

    /// One request as the provider saw it: wr_id and its entries as (addr, length, lkey).
    type Request = (u64, Vec<(u64, u32, u32)>);

    thread_local! {
        /// Each call's requests.
        static CALLS: RefCell<Vec<Vec<Request>>> = const { RefCell::new(Vec::new()) };
        /// Fail with ENOMEM at this request (counted over all calls).
        static FAIL_AT: Cell<Option<usize>> = const { Cell::new(None) };
    }

    unsafe extern "C" fn recording_post(
        _: *mut ibv_srq, mut wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr,
    ) -> i32 {
        let seen: usize = CALLS.with(|calls| calls.borrow().iter().map(Vec::len).sum());
        let mut list = Vec::new();
        while !wr.is_null() {
            if FAIL_AT.get() == Some(seen + list.len()) {
                CALLS.with(|calls| calls.borrow_mut().push(list));
                *bad_wr = wr;
                return libc::ENOMEM;
            }
            let sges = std::slice::from_raw_parts((*wr).sg_list, (*wr).num_sge as usize);
            list.push(((*wr).wr_id, sges.iter().map(|s| (s.addr, s.length, s.lkey)).collect()));
            wr = (*wr).next;
        }
        CALLS.with(|calls| calls.borrow_mut().push(list));
        0
    }

    struct FakeSrq {
        _context: Box<ibv_context>,
        srq: Box<ibv_srq>,
    }

    fn fake_srq() -> FakeSrq {
        // SAFETY: zeroes are valid for these plain C structs.
        let mut context: Box<ibv_context> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
        context.ops.post_srq_recv = Some(recording_post);
        // SAFETY: as above.
        let mut srq: Box<ibv_srq> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
        srq.context = &mut *context;
        CALLS.with(|calls| calls.borrow_mut().clear());
        FAIL_AT.set(None);
        FakeSrq { _context: context, srq }
    }

    fn calls() -> Vec<Vec<Request>> {
        CALLS.with(|calls| std::mem::take(&mut *calls.borrow_mut()))
    }

    #[test]
    fn a_large_batch_goes_over_in_chunks_with_every_request_intact() {
        let mut fake = fake_srq();
        // SAFETY: the fake SRQ outlives the guard.
        let mut guard = unsafe { PostReceiveGuard::start(NonNull::from(&mut *fake.srq), 4) };
        for i in 0..200u64 {
            let handle = guard.construct_wr(i);
            // SAFETY: the recorder only reads the entries.
            unsafe {
                match i % 3 {
                    0 => handle.setup_sge(7, 0x1000 * i, 64),
                    1 => handle.setup_sge_list(&[
                        ibv_sge {
                            addr: i,
                            length: 1,
                            lkey: 1,
                        },
                        ibv_sge {
                            addr: i,
                            length: 2,
                            lkey: 2,
                        },
                    ]),
                    _ => handle.setup_sge_list(&[]),
                }
            }
            // A request dropped before its data step adds nothing.
            let _ = guard.construct_wr(9999);
        }
        assert_eq!((guard.len(), guard.posted()), (200, 192));
        guard.post().expect("recorded post succeeds");
        let calls = calls();
        assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), [64, 64, 64, 8]);
        for (i, (wr_id, sges)) in calls.into_iter().flatten().enumerate() {
            let i = i as u64;
            assert_eq!(wr_id, i);
            let expected = match i % 3 {
                0 => vec![(0x1000 * i, 64, 7)],
                1 => vec![(i, 1, 1), (i, 2, 2)],
                _ => vec![],
            };
            assert_eq!(sges, expected, "request {i}");
        }
    }

    #[test]
    fn a_list_longer_than_a_chunk_goes_over_alone_in_order() {
        let mut fake = fake_srq();
        // SAFETY: as above.
        let mut guard = unsafe { PostReceiveGuard::start(NonNull::from(&mut *fake.srq), 200) };
        let long: Vec<ibv_sge> = (0..100)
            .map(|k| ibv_sge {
                addr: k,
                length: 1,
                lkey: 9,
            })
            .collect();
        // SAFETY: the recorder only reads the entries.
        unsafe {
            guard.construct_wr(1).setup_sge(1, 1, 1);
            guard.construct_wr(2).setup_sge_list(&long);
            guard.construct_wr(3).setup_sge(3, 3, 3);
        }
        assert_eq!((guard.len(), guard.posted()), (3, 2));
        guard.post().unwrap();
        let calls = calls();
        let ids: Vec<Vec<u64>> = calls.iter().map(|c| c.iter().map(|r| r.0).collect()).collect();
        assert_eq!(ids, [vec![1], vec![2], vec![3]]);
        assert_eq!(calls[1][0].1.len(), 100);
        assert_eq!(calls[1][0].1[99], (99, 1, 9));
    }

    #[test]
    fn too_many_entries_posts_those_before_and_nothing_after() {
        let mut fake = fake_srq();
        // SAFETY: as above.
        let mut guard = unsafe { PostReceiveGuard::start(NonNull::from(&mut *fake.srq), 1) };
        let sge = ibv_sge {
            addr: 1,
            length: 1,
            lkey: 1,
        };
        for i in 0..70u64 {
            // SAFETY: the recorder only reads the entries.
            unsafe {
                if i == 66 {
                    guard.construct_wr(i).setup_sge_list(&[sge, sge]);
                } else {
                    guard.construct_wr(i).setup_sge(1, 1, 1);
                }
            }
        }
        let err = guard.post().unwrap_err();
        assert_eq!((err.failed_index(), err.posted(), err.wr_id()), (66, 66, 66));
        assert!(matches!(
            err.0,
            PostReceiveErrorKind::TooManyScatterGatherEntries {
                requested: 2,
                max: 1,
                ..
            }
        ));
        let posted: Vec<u64> = calls().into_iter().flatten().map(|(wr_id, _)| wr_id).collect();
        assert_eq!(posted, (0..66).collect::<Vec<_>>());
    }

    #[test]
    fn a_full_queue_in_a_later_chunk_says_which_requests_went_in() {
        let mut fake = fake_srq();
        FAIL_AT.set(Some(100));
        // SAFETY: as above.
        let mut guard = unsafe { PostReceiveGuard::start(NonNull::from(&mut *fake.srq), 1) };
        for i in 0..150u64 {
            // SAFETY: the recorder only reads the entries.
            unsafe { guard.construct_wr(1000 + i).setup_sge(1, i, 1) };
        }
        let err = guard.post().unwrap_err();
        assert_eq!((err.failed_index(), err.posted(), err.wr_id()), (100, 100, 1100));
        assert!(matches!(err.0, PostReceiveErrorKind::QueueFull { .. }));
        // What the error says went in is what the provider took: the first 100, in order (the
        // recorder keeps the requests of the failing call before the one it refuses); those
        // after the failure were never handed over.
        let went_in: Vec<u64> = calls().into_iter().flatten().map(|(wr_id, _)| wr_id).collect();
        assert_eq!(went_in, (1000..1000 + err.posted() as u64).collect::<Vec<_>>());
    }

    #[test]
    fn nested_guards_on_one_thread_use_separate_chunks_and_dropping_discards() {
        let mut fake = fake_srq();
        // SAFETY: as above.
        let mut outer = unsafe { PostReceiveGuard::start(NonNull::from(&mut *fake.srq), 1) };
        // SAFETY: as above.
        let mut inner = unsafe { PostReceiveGuard::start(NonNull::from(&mut *fake.srq), 1) };
        assert!(outer.batch.owned.is_none() && inner.batch.owned.is_some());
        // SAFETY: the recorder only reads the entries.
        unsafe {
            outer.construct_wr(1).setup_sge(1, 1, 1);
            inner.construct_wr(2).setup_sge(2, 2, 2);
            outer.construct_wr(3).setup_sge(3, 3, 3);
        }
        drop(inner);
        outer.post().unwrap();
        assert_eq!(
            calls(),
            [vec![(1, vec![(1, 1, 1)]), (3, vec![(3, 3, 3)])]],
            "the dropped guard's request was discarded"
        );
        // The thread's chunk is free again.
        // SAFETY: as above.
        let guard = unsafe { PostReceiveGuard::start(NonNull::from(&mut *fake.srq), 1) };
        assert!(guard.batch.owned.is_none());
    }

    #[test]
    fn a_moved_guard_keeps_its_list_intact() {
        let mut fake = fake_srq();
        // SAFETY: as above.
        let mut guard = unsafe { PostReceiveGuard::start(NonNull::from(&mut *fake.srq), 1) };
        // SAFETY: the recorder only reads the entries.
        unsafe { guard.construct_wr(1).setup_sge(1, 1, 1) };
        let mut moved = vec![guard];
        // SAFETY: as above.
        unsafe { moved[0].construct_wr(2).setup_sge(2, 2, 2) };
        moved.pop().unwrap().post().unwrap();
        assert_eq!(calls(), [vec![(1, vec![(1, 1, 1)]), (2, vec![(2, 2, 2)])]]);
    }
}
