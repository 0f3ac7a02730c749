//! A [`SharedReceiveQueue`] (SRQ) holds receive work requests that many queue pairs consume: each
//! incoming message on any of those queue pairs takes the next posted receive.
//! See [`ibv_create_srq(3)`](https://man7.org/linux/man-pages/man3/ibv_create_srq.3.html) and
//! [`ibv_post_srq_recv(3)`](https://man7.org/linux/man-pages/man3/ibv_post_srq_recv.3.html).

// The queue and its builder (queue), its attributes, limit and resizing (attributes), batches of
// receives (guard) staged in a storage (storage), one receive at the cost of the raw call
// (post_one), what a post says went in (post_error).
mod attributes;
mod guard;
mod post_error;
mod post_one;
mod queue;
mod storage;

pub use attributes::{
    ModifySharedReceiveQueueError, ModifySharedReceiveQueueErrorKind, QuerySharedReceiveQueueError,
    QuerySharedReceiveQueueErrorKind, SharedReceiveQueueAttribute, SharedReceiveQueueModification,
};
pub use guard::{SharedReceiveQueuePostGuard, SharedReceiveQueueRequestHandle};
pub use post_error::{PostReceiveError, PostReceiveErrorKind};
pub use queue::{
    CreateSharedReceiveQueueError, CreateSharedReceiveQueueErrorKind, SharedReceiveQueue, SharedReceiveQueueBuilder,
    SharedReceiveQueueId,
};
pub use storage::PostReceiveStorage;
