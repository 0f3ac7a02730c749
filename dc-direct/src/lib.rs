//! mlx5 DC initiators that write their own work queue entries (WQEs) into the send queue
//! libmlx5 created, ring the doorbell as libmlx5 does, and poll their own completions, built on
//! sideway-ext's public API.
//!
//! Nothing of this has run on a ConnectX yet.

mod barrier;
pub mod completion_queue;
mod initiator;
pub mod send_queue;

pub use completion_queue::DirectCompletionQueue;
pub use initiator::{
    CreateDirectDcInitiatorError, CreateDirectDcInitiatorErrorKind, DirectDcInitiator, DirectPostSendGuard,
    RecoverDirectDcInitiatorError, RecoverDirectDcInitiatorErrorKind,
};
