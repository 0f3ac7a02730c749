//! [`DirectDcInitiator`] as an initiator of sideway-ext-dc-pool's [`DcInitiatorPool`] (feature
//! `pool`): the pool posts through the direct initiator's C entries
//! ([`send_views`](DirectDcInitiator::send_views)), and polls its [`DirectCompletionQueue`]
//! through `ibv_poll_cq` on a `struct ibv_cq` of the direct poller's own, whose `poll_cq` fills
//! each `struct ibv_wc` as libmlx5's `mlx5_poll_cq` does for a send completion (`verbs.rs` of the
//! completion queue module). The crate documentation's "A pool of direct initiators" has the
//! steps.
//!
//! What the pool asks of an initiator, and what a direct one answers:
//!
//! | the pool | the direct initiator |
//! |---|---|
//! | `max_send_wr`, `max_inline_data`, `qp_number`, `stream_count`, `path_mtu`, `source_gid_index` | its DC initiator's, as for a [`DcInitiator`] in a pool |
//! | `send_view` | [`send_views`](DirectDcInitiator::send_views): the writer behind libibverbs' and libmlx5's entries |
//! | `raw_cq` | the direct poller's `struct ibv_cq`: `poll_cq` at most 32 completions a call; `req_notify_cq` `EOPNOTSUPP` |
//! | `recover`, once every request it held was reported | [`recover`](DirectDcInitiator::recover): each report came from a completion the direct poller retired first, so none is outstanding |
//! | `reset_stream` | [`reset_stream`](DirectDcInitiator::reset_stream); `NotReadyToSend` when it went to ERR as a whole |
//!
//! A CQE the direct poller refuses fails the pool's [`poll`](DcInitiatorPool::poll) with an
//! errno (see [`PollCompletionQueueErrorKind`](crate::completion_queue::PollCompletionQueueErrorKind)):
//! `ENOENT` a QP that is no direct initiator of the CQ (a pool of direct initiators does not share
//! its CQ with other queue pairs: their completions cannot be read without their `wr_id`s),
//! `EPROTO` a CQE that is not a send completion, `EOPNOTSUPP` a compressed one, `EIO` a slot no
//! outstanding request starts at; `EBUSY` leaves the CQE for the next poll.
//!
//! [`DcInitiatorPool`]: sideway_ext_dc_pool::DcInitiatorPool
//! [`DcInitiatorPool::poll`]: sideway_ext_dc_pool::DcInitiatorPool::poll
//! [`DcInitiator`]: sideway_ext::mlx5::dc::initiator::DcInitiator
use std::error::Error;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_cq, ibv_qp_ex, mlx5dv_qp_ex};
use sideway::ibverbs::device_context::Mtu;
use sideway_ext::ibverbs::post_send_guard::ProviderEntries;
use sideway_ext::mlx5::dc::initiator::{DcInitiator, ResetDciStreamErrorKind};
use sideway_ext_dc_pool::initiator::{PooledInitiator, PostingInitiator, StreamResetRefusal};
use sideway_ext_dc_pool::PoolInitiator;

use crate::completion_queue::DirectCompletionQueue;
use crate::DirectDcInitiator;

#[cfg(test)]
mod tests;

impl PooledInitiator for DirectDcInitiator {
    fn max_send_wr(&self) -> u32 {
        <DcInitiator as PooledInitiator>::max_send_wr(self.dc_initiator())
    }

    fn stream_count(&self) -> u32 {
        <DcInitiator as PooledInitiator>::stream_count(self.dc_initiator())
    }

    fn recover(&mut self) -> Result<(), Box<dyn Error + Send + Sync>> {
        DirectDcInitiator::recover(self).map_err(Into::into)
    }

    fn reset_stream(&mut self, stream: u16) -> Result<(), StreamResetRefusal> {
        DirectDcInitiator::reset_stream(self, stream).map_err(|error| match error.0 {
            ResetDciStreamErrorKind::NotReadyToSend { .. } => StreamResetRefusal::NotReadyToSend,
            _ => StreamResetRefusal::Failed(error.into()),
        })
    }
}

// SAFETY: the views are the direct initiator's own C entries, alive while it is and used through
// its `&mut`; they name every operation its DC initiator was created with, `wr_set_dc_addr`, and
// `wr_set_dc_addr_stream` when it has streams. `raw_cq` gives the direct completion queue's own
// `struct ibv_cq`, alive while it is, its context's `poll_cq` filled. Its DC setters take
// libmlx5's address handles, which the pool creates (no `address_handle_without_pd`).
unsafe impl PostingInitiator for DirectDcInitiator {
    fn qp_number(&self) -> u32 {
        self.dc_initiator().qp_number()
    }

    #[inline]
    fn send_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        self.send_views()
    }

    fn max_inline_data(&self) -> u32 {
        self.dc_initiator().max_inline_data()
    }
}

impl PoolInitiator for DirectDcInitiator {
    type CompletionQueue = DirectCompletionQueue;

    #[inline]
    fn raw_cq(cq: &DirectCompletionQueue) -> NonNull<ibv_cq> {
        cq.verbs().raw()
    }

    fn path_mtu(&self) -> Option<Mtu> {
        <DcInitiator as PoolInitiator>::path_mtu(self.dc_initiator())
    }

    fn source_gid_index(&self) -> u8 {
        <DcInitiator as PoolInitiator>::source_gid_index(self.dc_initiator())
    }
}
