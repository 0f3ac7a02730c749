//! A [`SharedReceiveQueue`] (SRQ) holds receive work requests that many queue pairs consume: each
//! incoming message on any of those queue pairs takes the next posted receive.
//! See [`ibv_create_srq(3)`](https://man7.org/linux/man-pages/man3/ibv_create_srq.3.html) and
//! [`ibv_post_srq_recv(3)`](https://man7.org/linux/man-pages/man3/ibv_post_srq_recv.3.html).

// The queue and its builder (queue), its attributes, limit and resizing (attributes), posting
// receives (guard).
mod attributes;
mod guard;
mod queue;

pub use attributes::{
    ModifySharedReceiveQueueError, ModifySharedReceiveQueueErrorKind, QuerySharedReceiveQueueError,
    QuerySharedReceiveQueueErrorKind, SharedReceiveQueueAttribute, SharedReceiveQueueModification,
};
pub use guard::{PostSrqRecvError, PostSrqRecvGuard, SrqRecvWorkRequestHandle};
pub use queue::{
    CreateSharedReceiveQueueError, CreateSharedReceiveQueueErrorKind, SharedReceiveQueue, SharedReceiveQueueBuilder,
    SharedReceiveQueueId,
};
