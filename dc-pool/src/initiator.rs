//! What the pool needs of a DC initiator: its send queue and streams, its recovery, and (to post)
//! its queue pair's views. [`DcInitiator`] provides it, and so does the simulated fabric's
//! initiator; the unit tests' recording initiators and the benchmarks'
//! counting ones stand in for it.
use std::error::Error;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, mlx5dv_qp_ex};

use sideway_ext::ibverbs::post_send_guard::ProviderEntries;
use sideway_ext::mlx5::dc::initiator::DcInitiator;

/// Why [`PooledInitiator::reset_stream`] refused.
#[derive(Debug)]
pub enum StreamResetRefusal {
    /// The initiator is not in RTS: it went to ERR as a whole; recover it.
    NotReadyToSend,
    /// Anything else.
    Failed(Box<dyn Error + Send + Sync>),
}

/// "A DCI", as the pool's bookkeeping needs it: the DC initiator, or a simulated one.
pub trait PooledInitiator {
    /// How many requests its send queue holds.
    fn max_send_wr(&self) -> u32;
    /// How many DCI streams it has (0 without).
    fn stream_count(&self) -> u32;
    /// Brings it back from ERR to RTS (every request it held was reported).
    fn recover(&mut self) -> Result<(), Box<dyn Error + Send + Sync>>;
    /// Resets one errored stream (every request of it was reported).
    fn reset_stream(&mut self, stream: u16) -> Result<(), StreamResetRefusal>;
}

/// A DC initiator the pool can post on: [`DcInitiator`], or a hand-made one (unit tests,
/// benchmarks).
///
/// # Safety
///
/// `send_view` must return the live extended and mlx5 views of a queue pair owned by the
/// implementor, exclusively usable while the implementor is mutably borrowed, with at least the
/// entries named (including `wr_set_dc_addr`, and `wr_set_dc_addr_stream` when `stream_count` is
/// not 0); an implementor of [`PoolInitiator`](super::PoolInitiator) must return from its
/// `raw_cq` a live completion queue (its context's `poll_cq` entry filled) for as long as the
/// value it was given lives; `address_handle_without_pd` must return what its own
/// `wr_set_dc_addr` entries accept.
pub unsafe trait PostingInitiator: PooledInitiator {
    /// The queue pair number its completions carry.
    fn qp_number(&self) -> u32;
    /// The views and entries posting uses.
    fn send_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>);
    /// The inline data its requests take, as granted: longer is refused before the provider.
    fn max_inline_data(&self) -> u32;
    /// The address handle a pool without a protection domain names its destinations by (the
    /// simulated fabric's, which routes by DCT number); `None`: the pool creates one per
    /// destination with `ibv_create_ah`.
    fn address_handle_without_pd() -> Option<NonNull<ibv_ah>> {
        None
    }
}

impl PooledInitiator for DcInitiator {
    fn max_send_wr(&self) -> u32 {
        DcInitiator::max_send_wr(self)
    }

    fn stream_count(&self) -> u32 {
        self.streams().map_or(0, |s| 1u32 << s.log_num_concurrent.min(16))
    }

    fn recover(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        // Reset or rebuilt: either way the pool reads the (maybe new) number from the initiator.
        DcInitiator::recover(self).map(drop).map_err(Into::into)
    }

    fn reset_stream(&mut self, stream: u16) -> Result<(), StreamResetRefusal> {
        use sideway_ext::mlx5::dc::initiator::ResetDciStreamErrorKind as Kind;
        DcInitiator::reset_stream(self, stream).map_err(|e| match e.0 {
            Kind::NotReadyToSend { .. } => StreamResetRefusal::NotReadyToSend,
            _ => StreamResetRefusal::Failed(e.into()),
        })
    }
}

// SAFETY: the views are the DC initiator's own, read at creation with their entries.
unsafe impl PostingInitiator for DcInitiator {
    fn qp_number(&self) -> u32 {
        DcInitiator::qp_number(self)
    }

    fn send_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        self.send_views()
    }

    fn max_inline_data(&self) -> u32 {
        DcInitiator::max_inline_data(self)
    }
}
