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
use std::io;
use std::marker::PhantomData;
use std::ptr::{null_mut, NonNull};
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

/// Error returned by [`PostReceiveGuard::post`] and [`SharedReceiveQueue::post_recv_one`]: which
/// request failed, and how many of the batch were [`posted`](Self::posted). A request refused
/// before the library (too many entries) means none was; when the library refuses a request, those
/// before it were posted (`ibv_post_srq_recv` stops at `bad_wr`), the failed one and those after it
/// were not.
#[derive(Debug, thiserror::Error)]
#[error("failed to post receive request {} (wr_id {}); {} of the batch were posted", .0.failed_index(), .0.wr_id(), .0.posted())]
#[non_exhaustive]
pub struct PostReceiveError(#[from] pub PostReceiveErrorKind);

impl PostReceiveError {
    /// Index in the batch of the first request that was not posted.
    pub fn failed_index(&self) -> usize {
        self.0.failed_index()
    }

    /// How many requests of the batch were posted: none when the request was refused before the
    /// library ([`TooManyScatterGatherEntries`](PostReceiveErrorKind::TooManyScatterGatherEntries)),
    /// else all those before the failed one.
    pub fn posted(&self) -> usize {
        self.0.posted()
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
    /// batch was handed to the library, so none of the batch was posted.
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

    fn posted(&self) -> usize {
        match self {
            Self::TooManyScatterGatherEntries { .. } => 0,
            Self::InvalidWorkRequest { index, .. } | Self::QueueFull { index, .. } | Self::Ibverbs { index, .. } => {
                *index
            },
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

    /// Starts a batch of receive requests, staged in `storage`: nothing reaches the library
    /// before [`PostReceiveGuard::post`], which hands the whole batch to `ibv_post_srq_recv` in
    /// one call. Dropping the guard without posting posts nothing.
    ///
    /// The storage is the caller's and is reused batch after batch, so posting takes no lock and
    /// allocates nothing once it has grown to the batch size; several threads posting to one
    /// queue each use their own.
    #[inline]
    pub fn start_post_recv<'a>(&'a self, storage: &'a mut PostReceiveStorage) -> PostReceiveGuard<'a> {
        // SAFETY: the queue is alive for the guard's lifetime and its max_sge is the granted one.
        unsafe { PostReceiveGuard::start(self.srq, self.max_sge, storage) }
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

    /// [`post_recv_one`](Self::post_recv_one) on a shared receive queue this crate did not
    /// create (by C code, another binding, or a provider's own tables): the same checks and
    /// errors, on the raw `ibv_srq`.
    ///
    /// # Safety
    ///
    /// - `srq` must be a live shared receive queue for the duration of the call;
    /// - `max_sge` must be at most the scatter/gather entries per request it was created with
    ///   (the check against it is the only one before the library);
    /// - the buffers as for [`post_recv_one`](Self::post_recv_one).
    ///
    /// # Example
    ///
    /// ```no_run
    /// use std::ptr::NonNull;
    ///
    /// use rdma_mummy_sys::{ibv_sge, ibv_srq};
    /// use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;
    ///
    /// /// `srq` comes from C code that created it with `max_sge` 1 and keeps it alive.
    /// fn refill(srq: NonNull<ibv_srq>, lkey: u32, addr: u64) -> Result<(), Box<dyn std::error::Error>> {
    ///     let sge = ibv_sge { addr, length: 64, lkey };
    ///     // SAFETY: the SRQ is live and takes one entry a request; the buffer is registered
    ///     // under `lkey` and outlives the receive.
    ///     unsafe { SharedReceiveQueue::post_recv_one_raw(srq, 1, 7, &[sge]) }?;
    ///     Ok(())
    /// }
    /// ```
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

/// Storage for the requests of [`PostReceiveGuard`] batches, reused from batch to batch: each
/// batch is staged here, and nothing reaches the library before [`PostReceiveGuard::post`].
///
/// It grows to the largest batch it has held and keeps that size, so that posting allocates
/// nothing once it has grown, or from the start with [`with_capacity`](Self::with_capacity). Each
/// poster keeps its own, as it keeps its buffers: batches on one queue, from one thread or several,
/// each stage in their own storage, and a storage serves one batch at a time (the guard borrows
/// it mutably).
#[derive(Default)]
pub struct PostReceiveStorage {
    /// A slot per request, zeroed (padding included) as the storage grows.
    slots: Vec<RecvSlot>,
    /// The entries of requests with other than one entry, each list after the one before.
    lists: Vec<ibv_sge>,
}

/// A request and, when it has exactly one, its entry (most receives have one): one bounds check
/// and one address per request.
#[derive(Clone)]
#[repr(C)]
struct RecvSlot {
    /// First: a slot's address is its request's.
    wr: Zeroed<ibv_recv_wr>,
    sge: ibv_sge,
}

// SAFETY: the only pointers it holds are links a batch left between its own requests and
// entries, in its vectors' heap buffers (which move with it); nothing reads them outside a batch,
// which rewrites every link it hands over, and a batch borrows the storage mutably.
unsafe impl Send for PostReceiveStorage {}
// SAFETY: a shared reference reads nothing but the capacities.
unsafe impl Sync for PostReceiveStorage {}

impl std::fmt::Debug for PostReceiveStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostReceiveStorage")
            .field("capacity", &self.capacity())
            .field("list_entry_capacity", &self.list_entry_capacity())
            .finish()
    }
}

impl PostReceiveStorage {
    /// Empty storage: it grows with the first batches.
    pub fn new() -> Self {
        Self::default()
    }

    /// Storage for batches of up to `requests` requests, whose requests with more than one
    /// scatter/gather entry have up to `list_entries` entries in all, which then allocate
    /// nothing. (A request with one entry keeps it beside the request.)
    pub fn with_capacity(requests: usize, list_entries: usize) -> Self {
        let mut storage = Self::new();
        storage.slots.resize(requests, EMPTY_SLOT);
        storage.lists.resize(list_entries, EMPTY_SGE);
        storage
    }

    /// How many requests a batch may hold before the storage grows.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// How many scatter/gather entries, in all, the requests of a batch with more than one entry
    /// may have before the storage grows.
    pub fn list_entry_capacity(&self) -> usize {
        self.lists.len()
    }
}

/// A zeroed scatter/gather entry, to grow the storage with.
const EMPTY_SGE: ibv_sge = ibv_sge {
    addr: 0,
    length: 0,
    lkey: 0,
};

/// A zeroed slot, to grow the storage with (its request's padding included: `Zeroed` copies
/// every byte).
const EMPTY_SLOT: RecvSlot = RecvSlot {
    wr: Zeroed::new(),
    sge: EMPTY_SGE,
};

/// A request of the batch with more entries than the queue takes (refused before the library).
#[derive(Debug, Clone, Copy)]
struct Refusal {
    index: usize,
    wr_id: u64,
    requested: usize,
}

/// The cursors of the batch being staged, kept in the guard (which the compiler keeps in
/// registers), apart from the storage they index.
struct RecvBatch {
    /// The batch's requests are the storage's first `requests` slots, each linked to the slot
    /// after it (the last one's link set to NULL by `post`) and to its entries: its slot's own
    /// for one entry, else the next ones in the storage's lists, which the batch has used up to
    /// `list_entries`.
    requests: usize,
    list_entries: usize,
    /// The queue's `max_sge`.
    max_sge: u32,
    /// The batch's first request with more entries than the queue takes.
    refused: Option<Refusal>,
}

impl RecvBatch {
    /// Adds request `wr_id` with one entry, `sge`, to the batch in `storage`, linked in place.
    #[inline]
    fn push_one(&mut self, storage: &mut PostReceiveStorage, wr_id: u64, sge: ibv_sge) {
        let index = self.requests;
        // An address only: the library reads it during `post`.
        let next = storage.slots.as_mut_ptr().wrapping_add(index + 1).cast::<ibv_recv_wr>();
        match storage.slots.get_mut(index) {
            Some(slot) => {
                slot.sge = sge;
                let entry = &mut slot.sge as *mut ibv_sge;
                link(&mut slot.wr, wr_id, next, entry, 1);
            },
            None => storage.push_grown(index, self.list_entries, wr_id, &[sge]),
        }
        self.requests = index + 1;
    }

    /// Adds request `wr_id` to the batch in `storage`, with a copy of `sg_list` (at most
    /// `max_sge` entries), linked in place.
    #[inline]
    fn push_list(&mut self, storage: &mut PostReceiveStorage, wr_id: u64, sg_list: &[ibv_sge]) {
        if let [sge] = sg_list {
            return self.push_one(storage, wr_id, *sge);
        }
        let (index, first) = (self.requests, self.list_entries);
        let end = first + sg_list.len();
        let next = storage.slots.as_mut_ptr().wrapping_add(index + 1).cast::<ibv_recv_wr>();
        let entries = storage.lists.as_mut_ptr().wrapping_add(first);
        match (storage.slots.get_mut(index), storage.lists.get_mut(first..end)) {
            (Some(slot), Some(list)) => {
                list.copy_from_slice(sg_list);
                link(&mut slot.wr, wr_id, next, entries, sg_list.len());
            },
            _ => storage.push_grown(index, first, wr_id, sg_list),
        }
        self.requests = index + 1;
        self.list_entries = end;
    }

    /// Request `wr_id` has `requested` entries, more than the queue takes: the batch will post
    /// nothing. Only the first is kept; it is not added, so its index is the count before it.
    #[inline]
    fn refuse(&mut self, wr_id: u64, requested: usize) {
        if self.refused.is_none() {
            self.refused = Some(Refusal {
                index: self.requests,
                wr_id,
                requested,
            });
        }
    }
}

/// Writes request `wr_id` in its slot `wr`, linked to the slot `next` and to its `count` entries
/// at `entries`. Field by field: the slot's padding keeps its zeroes.
#[inline]
fn link(wr: &mut Zeroed<ibv_recv_wr>, wr_id: u64, next: *mut ibv_recv_wr, entries: *mut ibv_sge, count: usize) {
    wr.wr_id = wr_id;
    wr.next = next;
    wr.sg_list = entries;
    wr.num_sge = count as i32;
}

impl PostReceiveStorage {
    /// Adds request `wr_id` to a batch of `index` requests that used `first` list entries, with a
    /// copy of `sg_list`, growing first (the batch's requests linked again).
    #[cold]
    #[inline(never)]
    fn push_grown(&mut self, index: usize, first: usize, wr_id: u64, sg_list: &[ibv_sge]) {
        let count = sg_list.len();
        let end = if count == 1 { first } else { first + count };
        self.grow(index, index + 1, end);
        let next = self.slots.as_mut_ptr().wrapping_add(index + 1).cast::<ibv_recv_wr>();
        let entries = self.lists.as_mut_ptr().wrapping_add(first);
        let slot = &mut self.slots[index];
        let entries = match sg_list {
            [sge] => {
                slot.sge = *sge;
                &mut slot.sge as *mut ibv_sge
            },
            _ => {
                self.lists[first..end].copy_from_slice(sg_list);
                entries
            },
        };
        link(&mut self.slots[index].wr, wr_id, next, entries, count);
    }

    /// Grows to hold `requests` requests and `list_entries` list entries (at least doubling), and
    /// links the batch's first `linked` requests again at their new addresses.
    fn grow(&mut self, linked: usize, requests: usize, list_entries: usize) {
        if requests > self.slots.len() {
            let len = requests.max(2 * self.slots.len()).max(16);
            self.slots.resize(len, EMPTY_SLOT);
        }
        if list_entries > self.lists.len() {
            let len = list_entries.max(2 * self.lists.len()).max(16);
            self.lists.resize(len, EMPTY_SGE);
        }
        let (slot_base, list_base) = (self.slots.as_mut_ptr(), self.lists.as_mut_ptr());
        let mut first = 0;
        for (index, slot) in self.slots[..linked].iter_mut().enumerate() {
            slot.wr.next = slot_base.wrapping_add(index + 1).cast();
            slot.wr.sg_list = match slot.wr.num_sge {
                1 => &mut slot.sge,
                count => {
                    let entries = list_base.wrapping_add(first);
                    first += count as usize;
                    entries
                },
            };
        }
    }
}

/// A batch of receive requests for a [`SharedReceiveQueue`]; see
/// [`SharedReceiveQueue::start_post_recv`].
///
/// The guard stages each request in its [`PostReceiveStorage`], linked into the list as it is
/// added: no lock, no allocation once the storage has grown, no pass over the list before the
/// call. Nothing reaches the library before [`post`](Self::post), which hands the whole batch to
/// `ibv_post_srq_recv` in one call; dropping the guard posts nothing.
///
/// A request with more scatter/gather entries than the queue's `max_sge` is refused before the
/// library: [`post`](Self::post) then posts nothing and reports it. The library itself may refuse
/// a request (the queue is full): the requests before it are posted, and the error says which
/// one failed and how many went in.
#[must_use = "the batch is posted only by post(); dropping the guard posts nothing"]
pub struct PostReceiveGuard<'srq> {
    srq: NonNull<ibv_srq>,
    storage: &'srq mut PostReceiveStorage,
    batch: RecvBatch,
    _srq: PhantomData<&'srq SharedReceiveQueue>,
}

impl<'srq> PostReceiveGuard<'srq> {
    /// Starts a batch on a shared receive queue this crate did not create (by C code, another
    /// binding, or a provider's own tables), staged in `storage`:
    /// [`SharedReceiveQueue::start_post_recv`] on the raw `ibv_srq`, with the same checks and
    /// errors.
    ///
    /// # Safety
    ///
    /// - `srq` must be a live shared receive queue for the guard's lifetime;
    /// - `max_sge` must be at most the scatter/gather entries per request it was created with
    ///   (the check against it is the only one before the library).
    ///
    /// # Example
    ///
    /// ```no_run
    /// use std::ptr::NonNull;
    ///
    /// use rdma_mummy_sys::ibv_srq;
    /// use sideway::ibverbs::queue_pair::SetScatterGatherEntry;
    /// use sideway_ext::ibverbs::shared_receive_queue::{PostReceiveGuard, PostReceiveStorage};
    ///
    /// /// `srq` comes from C code that created it with `max_sge` 1 and keeps it alive.
    /// fn refill(srq: NonNull<ibv_srq>, lkey: u32, addr: u64) -> Result<(), Box<dyn std::error::Error>> {
    ///     let mut storage = PostReceiveStorage::new();
    ///     // SAFETY: the SRQ is live while the guard is, and takes one entry a request.
    ///     let mut guard = unsafe { PostReceiveGuard::start(srq, 1, &mut storage) };
    ///     for slot in 0..4 {
    ///         // SAFETY: each buffer is registered under `lkey` and outlives its receive.
    ///         unsafe { guard.construct_wr(slot).setup_sge(lkey, addr + slot * 64, 64) };
    ///     }
    ///     guard.post()?;
    ///     Ok(())
    /// }
    /// ```
    #[inline]
    pub unsafe fn start(srq: NonNull<ibv_srq>, max_sge: u32, storage: &'srq mut PostReceiveStorage) -> Self {
        Self {
            srq,
            storage,
            batch: RecvBatch {
                requests: 0,
                list_entries: 0,
                max_sge,
                refused: None,
            },
            _srq: PhantomData,
        }
    }

    /// Starts a receive request with this `wr_id`; it joins the batch when the returned handle
    /// is given its buffers ([`SetScatterGatherEntry`]), and a handle dropped before that adds
    /// nothing. A request given an empty list (`setup_sge_list(&[])`) receives zero-length
    /// messages only.
    #[inline]
    pub fn construct_wr(&mut self, wr_id: u64) -> RecvWorkRequestHandle<'_> {
        RecvWorkRequestHandle {
            storage: self.storage,
            batch: &mut self.batch,
            wr_id,
        }
    }

    /// How many requests the batch holds (a refused one is not held).
    #[inline]
    pub fn len(&self) -> usize {
        self.batch.requests
    }

    /// Whether the batch is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Posts the whole batch with one `ibv_post_srq_recv`. If a request was refused before the
    /// library (too many entries), nothing is posted. If the library refuses a request, those
    /// before it are posted and the rest are not: the error's
    /// [`failed_index`](PostReceiveError::failed_index) and [`posted`](PostReceiveError::posted)
    /// say which.
    #[inline]
    pub fn post(self) -> Result<(), PostReceiveError> {
        let (batch, storage) = (self.batch, self.storage);
        if let Some(refusal) = batch.refused {
            return Err(refused(refusal, batch.max_sge));
        }
        let slots = &mut storage.slots[..batch.requests];
        let Some(last) = slots.last_mut() else {
            return Ok(());
        };
        last.wr.next = null_mut();
        let head = slots.as_mut_ptr().cast::<ibv_recv_wr>();
        let mut bad_wr: *mut ibv_recv_wr = null_mut();
        // SAFETY: the list from head (the first slot's request) is the batch's requests, linked
        // in place in the storage's slots (at their current addresses: `grow` links them again),
        // the last `next` NULL; each names its entries in its slot or the storage's lists; the
        // storage is borrowed, so nothing of it changes during the call; the SRQ is alive for the
        // guard's lifetime (`start`'s promise).
        let ret = unsafe { ibv_post_srq_recv(self.srq.as_ptr(), head, &mut bad_wr) };
        if ret != 0 {
            return Err(failed(slots, ret, bad_wr, batch.max_sge));
        }
        Ok(())
    }
}

/// The error of a batch with a refused request: nothing was posted.
#[cold]
#[inline(never)]
fn refused(refusal: Refusal, max: u32) -> PostReceiveError {
    PostReceiveErrorKind::TooManyScatterGatherEntries {
        index: refusal.index,
        wr_id: refusal.wr_id,
        requested: refusal.requested,
        max,
    }
    .into()
}

/// The error of the batch in `slots` whose library call returned `ret` and named `bad_wr`, the
/// first request not posted (those before it were).
#[cold]
#[inline(never)]
fn failed(slots: &[RecvSlot], ret: i32, bad_wr: *mut ibv_recv_wr, max: u32) -> PostReceiveError {
    // A provider that left bad_wr unset, or named no request of the batch, is taken to have
    // posted nothing.
    let index = slots
        .iter()
        .position(|slot| std::ptr::eq(&*slot.wr, bad_wr))
        .unwrap_or(0);
    Failure {
        ret,
        index,
        wr_id: slots[index].wr.wr_id,
        requested: 0,
        max,
    }
    .into_error()
}

/// The first request of a batch that failed: `ret` is the library's errno, or 0 for too many
/// entries (checked before the call).
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

/// One receive request of a [`PostReceiveGuard`] batch: give it its buffers.
#[must_use = "a request joins the batch only when given its buffers (setup_sge or setup_sge_list)"]
pub struct RecvWorkRequestHandle<'g> {
    storage: &'g mut PostReceiveStorage,
    batch: &'g mut RecvBatch,
    wr_id: u64,
}

impl SetScatterGatherEntry for RecvWorkRequestHandle<'_> {
    /// # Safety
    ///
    /// The buffer `addr..addr + length` must lie in a memory region registered with `lkey` and
    /// stay valid until the receive completes (or the queue is destroyed).
    #[inline]
    unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) {
        if self.batch.max_sge == 0 {
            return self.batch.refuse(self.wr_id, 1);
        }
        self.batch
            .push_one(self.storage, self.wr_id, ibv_sge { addr, length, lkey });
    }

    /// # Safety
    ///
    /// Each entry's buffer must lie in the memory region registered with its `lkey` and stay
    /// valid until the receive completes (or the queue is destroyed).
    #[inline]
    unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) {
        if sg_list.len() > self.batch.max_sge as usize {
            return self.batch.refuse(self.wr_id, sg_list.len());
        }
        self.batch.push_list(self.storage, self.wr_id, sg_list);
    }
}

#[cfg(test)]
mod tests {
    //! The receive guard over a recording `post_srq_recv`: the lists it hands over, call by call,
    //! and what its errors say went in.
    use std::cell::{Cell, RefCell};

    use rdma_mummy_sys::{ibv_context, ibv_srq};

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
        let mut context: Box<ibv_context> = Box::new(unsafe { std::mem::MaybeUninit::zeroed().assume_init() });
        context.ops.post_srq_recv = Some(recording_post);
        // SAFETY: as above.
        let mut srq: Box<ibv_srq> = Box::new(unsafe { std::mem::MaybeUninit::zeroed().assume_init() });
        srq.context = &mut *context;
        CALLS.with(|calls| calls.borrow_mut().clear());
        FAIL_AT.set(None);
        FakeSrq { _context: context, srq }
    }

    impl FakeSrq {
        fn start<'a>(&'a mut self, max_sge: u32, storage: &'a mut PostReceiveStorage) -> PostReceiveGuard<'a> {
            // SAFETY: the fake SRQ outlives the guard, which borrows it.
            unsafe { PostReceiveGuard::start(NonNull::from(&mut *self.srq), max_sge, storage) }
        }
    }

    fn calls() -> Vec<Vec<Request>> {
        CALLS.with(|calls| std::mem::take(&mut *calls.borrow_mut()))
    }

    fn sge(addr: u64, length: u32, lkey: u32) -> ibv_sge {
        ibv_sge { addr, length, lkey }
    }

    /// Adds `count` one-entry requests with wr_ids from `first`.
    fn add(guard: &mut PostReceiveGuard<'_>, first: u64, count: u64) {
        for wr_id in first..first + count {
            // SAFETY: the recorder only reads the entries.
            unsafe { guard.construct_wr(wr_id).setup_sge(1, wr_id, 1) };
        }
    }

    #[test]
    fn a_large_batch_goes_over_in_one_call_on_post_with_every_request_intact() {
        let mut fake = fake_srq();
        let mut storage = PostReceiveStorage::new();
        let mut guard = fake.start(4, &mut storage);
        for i in 0..200u64 {
            let handle = guard.construct_wr(i);
            // SAFETY: the recorder only reads the entries.
            unsafe {
                match i % 3 {
                    0 => handle.setup_sge(7, 0x1000 * i, 64),
                    1 => handle.setup_sge_list(&[sge(i, 1, 1), sge(i, 2, 2)]),
                    _ => handle.setup_sge_list(&[]),
                }
            }
            // A request dropped before its data step adds nothing.
            let _ = guard.construct_wr(9999);
        }
        assert_eq!(guard.len(), 200);
        assert!(
            calls().is_empty(),
            "nothing reaches the library before post(), past 64 requests too"
        );
        guard.post().expect("recorded post succeeds");
        let calls = calls();
        assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), [200]);
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
    fn a_dropped_guard_posts_nothing_and_its_storage_serves_the_next_batch() {
        let mut fake = fake_srq();
        let mut storage = PostReceiveStorage::new();
        let mut guard = fake.start(1, &mut storage);
        add(&mut guard, 0, 300);
        drop(guard);
        assert!(calls().is_empty(), "a dropped guard posts nothing");
        let capacity = storage.capacity();
        assert!(capacity >= 300);
        // A smaller batch in the same storage: only its own requests go over.
        let mut guard = fake.start(1, &mut storage);
        add(&mut guard, 1000, 3);
        guard.post().unwrap();
        let calls = calls();
        assert_eq!(
            calls,
            [vec![
                (1000, vec![(1000, 1, 1)]),
                (1001, vec![(1001, 1, 1)]),
                (1002, vec![(1002, 1, 1)])
            ]]
        );
        assert_eq!(storage.capacity(), capacity, "the storage is reused, not grown");
    }

    #[test]
    fn a_list_longer_than_the_storage_stays_in_the_batch_in_order() {
        let mut fake = fake_srq();
        let mut storage = PostReceiveStorage::with_capacity(2, 2);
        let long: Vec<ibv_sge> = (0..100).map(|k| sge(k, 1, 9)).collect();
        let mut guard = fake.start(200, &mut storage);
        // SAFETY: the recorder only reads the entries.
        unsafe {
            guard.construct_wr(1).setup_sge(1, 1, 1);
            guard.construct_wr(2).setup_sge_list(&long);
            guard.construct_wr(3).setup_sge(3, 3, 3);
        }
        guard.post().unwrap();
        let calls = calls();
        let ids: Vec<Vec<u64>> = calls.iter().map(|c| c.iter().map(|r| r.0).collect()).collect();
        assert_eq!(ids, [vec![1, 2, 3]]);
        assert_eq!(calls[0][0].1, [(1, 1, 1)]);
        assert_eq!(calls[0][1].1.len(), 100);
        assert_eq!(calls[0][1].1[99], (99, 1, 9));
        assert_eq!(calls[0][2].1, [(3, 3, 3)]);
    }

    #[test]
    fn too_many_entries_posts_nothing_of_the_batch() {
        let mut fake = fake_srq();
        let mut storage = PostReceiveStorage::new();
        let mut guard = fake.start(1, &mut storage);
        add(&mut guard, 0, 66);
        // SAFETY: the recorder only reads the entries.
        unsafe { guard.construct_wr(66).setup_sge_list(&[sge(1, 1, 1), sge(1, 1, 1)]) };
        add(&mut guard, 67, 3);
        let err = guard.post().unwrap_err();
        assert_eq!((err.failed_index(), err.posted(), err.wr_id()), (66, 0, 66));
        assert!(matches!(
            err.0,
            PostReceiveErrorKind::TooManyScatterGatherEntries {
                requested: 2,
                max: 1,
                ..
            }
        ));
        assert!(calls().is_empty(), "a refused request posts nothing of its batch");
    }

    #[test]
    fn a_full_queue_says_which_request_failed_and_how_many_went_in() {
        let mut fake = fake_srq();
        FAIL_AT.set(Some(100));
        let mut storage = PostReceiveStorage::new();
        let mut guard = fake.start(1, &mut storage);
        add(&mut guard, 1000, 150);
        let err = guard.post().unwrap_err();
        assert_eq!((err.failed_index(), err.posted(), err.wr_id()), (100, 100, 1100));
        assert!(matches!(err.0, PostReceiveErrorKind::QueueFull { .. }));
        // What the error says went in is what the provider took, in one call: the first 100, in
        // order (the recorder keeps the requests before the one it refuses).
        let calls = calls();
        assert_eq!(calls.len(), 1);
        let went_in: Vec<u64> = calls.into_iter().flatten().map(|(wr_id, _)| wr_id).collect();
        assert_eq!(went_in, (1000..1000 + err.posted() as u64).collect::<Vec<_>>());
    }

    #[test]
    fn nested_guards_on_one_queue_keep_their_batches_apart() {
        let fake = fake_srq();
        let srq = NonNull::from(&*fake.srq);
        let (mut outer_storage, mut inner_storage) = (PostReceiveStorage::new(), PostReceiveStorage::new());
        // SAFETY: the fake SRQ outlives both guards.
        let mut outer = unsafe { PostReceiveGuard::start(srq, 1, &mut outer_storage) };
        // SAFETY: as above.
        let mut inner = unsafe { PostReceiveGuard::start(srq, 1, &mut inner_storage) };
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
    }

    #[test]
    fn a_moved_guard_and_a_moved_storage_keep_the_list_intact() {
        let mut fake = fake_srq();
        let mut storage = Box::new(PostReceiveStorage::new());
        let mut guard = fake.start(1, &mut storage);
        add(&mut guard, 1, 1);
        let mut moved = vec![guard];
        add(&mut moved[0], 2, 1);
        moved.pop().unwrap().post().unwrap();
        assert_eq!(calls(), [vec![(1, vec![(1, 1, 1)]), (2, vec![(2, 1, 1)])]]);
        // The storage itself moves between batches (its requests live on the heap).
        let mut storage = *storage;
        let mut guard = fake.start(1, &mut storage);
        add(&mut guard, 3, 2);
        guard.post().unwrap();
        assert_eq!(calls(), [vec![(3, vec![(3, 1, 1)]), (4, vec![(4, 1, 1)])]]);
    }
}
