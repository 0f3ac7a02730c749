//! The [`SharedReceiveQueue`]: its [builder](SharedReceiveQueueBuilder), its handle, its
//! capacities and its teardown.
use std::io;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use rdma_mummy_sys::{
    ibv_create_srq, ibv_destroy_srq, ibv_device_cap_flags, ibv_srq, ibv_srq_attr, ibv_srq_attr_mask, ibv_srq_init_attr,
};
use sideway::ibverbs::protection_domain::ProtectionDomain;

use crate::ibverbs::zeroed::Zeroed;

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

/// An opaque identity of a [`SharedReceiveQueue`], to match asynchronous events with the queue
/// they concern (an asynchronous event's element).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SharedReceiveQueueId(pub(crate) usize);

/// Builds a [`SharedReceiveQueue`]; created by `pd.create_srq_builder()`.
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
        let device = crate::ibverbs::query_device_attr(&self.pd).map_err(CreateSharedReceiveQueueErrorKind::Ibverbs)?;
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
/// created on it.
///
/// Queue pairs hold an `Arc` of their SRQ, so the SRQ is destroyed only after the last of them.
#[derive(Debug)]
pub struct SharedReceiveQueue {
    pub(super) srq: NonNull<ibv_srq>,
    pub(super) max_wr: Mutex<u32>,
    pub(super) max_sge: u32,
    pub(super) device_max_wr: u32,
    pub(super) can_resize: bool,
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
        crate::ibverbs::check_destroy("ibv_destroy_srq", ret);
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
}
