//! mlx5 DC initiators that write their own work queue entries (WQEs) into the send queue
//! libmlx5 created, ring the doorbell as libmlx5 does, and poll their own completions, built on
//! sideway-ext's public API.
//!
//! Nothing of this has run on a ConnectX yet.

mod barrier;
// TODO(lead): the poller itself is crate-private, unused until the initiator polls through it.
#[cfg_attr(not(test), allow(dead_code))]
pub mod completion_queue;
pub mod send_queue;
