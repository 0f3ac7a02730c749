//! RC and UD queue pairs that receive through a [`SharedReceiveQueue`], on the queue-pair core
//! that the DC queue pairs of the `mlx5` feature share.
//!
//! sideway's `QueuePairBuilder` cannot attach a shared receive queue, and its `QueuePairAttribute`
//! hides its raw struct, so this module has its own, shaped like sideway's. The repository's
//! `examples/common/bring_up.rs` brings one to RTS with `ibv_rc_pingpong`'s attributes.
//!
//! [`SharedReceiveQueue`]: super::shared_receive_queue::SharedReceiveQueue
pub(crate) mod attribute;
mod builder;
pub(crate) mod core;
pub(crate) mod transition;

use std::marker::PhantomData;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_qp, ibv_qp_ex};
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, QueryQueuePairError, QueuePairAttributeMask, QueuePairState};

pub use self::attribute::QueuePairAttribute;
pub use self::builder::{CreateQueuePairError, CreateQueuePairErrorKind, SharedReceiveQueuePairBuilder};
pub(crate) use self::core::QueuePairCore;
use super::post_send_guard::{ProviderEntries, Transport, TypedPostSendGuard};

/// An RC or UD queue pair that receives through a [`SharedReceiveQueue`] (which it keeps alive).
///
/// [`SharedReceiveQueue`]: super::shared_receive_queue::SharedReceiveQueue
#[derive(Debug)]
pub struct SharedReceiveQueuePair<T: Transport> {
    core: QueuePairCore,
    // The core's extended view and entries, which every SharedReceiveQueuePair has.
    send_view: (NonNull<ibv_qp_ex>, ProviderEntries),
    max_send_wr: u32,
    max_inline_data: u32,
    _transport: PhantomData<T>,
}

// SAFETY: the handle may be used from any thread; every call that lets the library write the
// queue pair (modify, query, posting) takes `&mut self`.
unsafe impl<T: Transport> Send for SharedReceiveQueuePair<T> {}
// SAFETY: `&self` methods read only Rust-side copies (number, state, capacities), never the C
// struct.
unsafe impl<T: Transport> Sync for SharedReceiveQueuePair<T> {}

impl<T: Transport> SharedReceiveQueuePair<T> {
    /// # Safety
    ///
    /// Return the handle of the queue pair. We mark this method unsafe because the lifetime of
    /// `ibv_qp` is not associated with the return value.
    pub unsafe fn qp(&self) -> NonNull<ibv_qp> {
        self.core.qp()
    }

    /// The queue pair number.
    pub fn qp_number(&self) -> u32 {
        self.core.qp_number()
    }

    /// The state as of the last [`modify`](Self::modify) or [`query`](Self::query) through this
    /// value (query to see a move the device made on its own).
    pub fn state(&self) -> QueuePairState {
        self.core.state()
    }

    /// The send queue capacity the device granted.
    pub fn max_send_wr(&self) -> u32 {
        self.max_send_wr
    }

    /// The inline data size the device granted.
    pub fn max_inline_data(&self) -> u32 {
        self.max_inline_data
    }

    /// `ibv_modify_qp`, after checking the transition and the mask against this type's table
    /// (`InvalidTransition`, `InvalidAttributeMask`).
    pub fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairError> {
        self.core.modify(attr)
    }

    /// Reads the attributes named by `mask` with `ibv_query_qp` (which writes the queue pair).
    pub fn query(&mut self, mask: QueuePairAttributeMask) -> Result<QueuePairAttribute, QueryQueuePairError> {
        self.core.query(mask)
    }

    /// Starts a batch of send requests (`ibv_wr_start`).
    #[inline]
    pub fn start_post_send(&mut self) -> TypedPostSendGuard<'_, T>
    where
        T: Transport,
    {
        let (qp_ex, entries) = self.send_view;
        // SAFETY: the queue pair is alive and exclusively borrowed for the guard's lifetime; its
        // provider filled the entries read at creation; RC and UD need no context.
        unsafe { TypedPostSendGuard::start(qp_ex, entries) }
    }

    /// Posts one send request, at the cost of the raw calls, with a batch's guarantees (see the
    /// [guide](super#one-request-at-a-time)). `request` describes it from its operation on; one
    /// that stops before its data step posts nothing and returns `Ok`.
    #[inline]
    // Paths spelled out, so that this data-path method leaves the control plane's imports alone.
    pub fn post_send_one(
        &mut self, wr_id: u64, wr_flags: sideway::ibverbs::queue_pair::WorkRequestFlags,
        request: impl FnOnce(super::post_send_guard::TypedWorkRequestHandle<'_, T>),
    ) -> Result<(), super::post_send_guard::TypedPostSendError>
    where
        T: Transport,
    {
        let (qp_ex, entries) = self.send_view;
        // SAFETY: as in start_post_send, for the call.
        unsafe { TypedPostSendGuard::post_one(qp_ex, entries, wr_id, wr_flags, request) }
    }
}
