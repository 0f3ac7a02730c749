//! The attributes of a [`SharedReceiveQueue`]: reading them ([`query`](SharedReceiveQueue::query)),
//! arming its limit and resizing it ([`modify`](SharedReceiveQueue::modify)).
use std::io;

use rdma_mummy_sys::{ibv_modify_srq, ibv_query_srq, ibv_srq_attr, ibv_srq_attr_mask};

use super::SharedReceiveQueue;

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
    /// `SharedReceiveQueueLimitReached` asynchronous event and disarms the limit (it reads 0 until armed again).
    ArmLimit(u32),
    /// Resize the queue to hold `max_wr` receives (needs the device's SRQ-resize capability).
    Resize {
        /// The new capacity.
        max_wr: u32,
    },
}

impl SharedReceiveQueue {
    /// Reads the queue's attributes with `ibv_query_srq`; `srq_limit` is 0 when no limit is armed.
    /// On mlx5 the `max_wr` read back is the kernel's, which counts the provider's wait queue
    /// (`mlx5_create_srq` creates the queue with it): it can be about twice what may be posted,
    /// which [`max_wr`](SharedReceiveQueue::max_wr) keeps from creation.
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
    pub(super) fn modify_raw(&self, attr: &mut ibv_srq_attr, mask: ibv_srq_attr_mask) -> io::Result<()> {
        // SAFETY: the handle is alive; attr is a valid ibv_srq_attr.
        let ret = unsafe { ibv_modify_srq(self.srq.as_ptr(), attr, mask.0 as _) };
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
        Ok(())
    }
}
