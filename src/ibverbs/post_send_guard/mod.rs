//! Posting send work requests with the `ibv_wr_*` API, for RC and UD queue pairs (a DC
//! initiator has a guard of its own).
//!
//! A [`TypedPostSendGuard`] batches requests between `ibv_wr_start` and `ibv_wr_complete`, and
//! aborts them (`ibv_wr_abort`) when dropped without [`post`](TypedPostSendGuard::post). Each
//! request is described in the order the C API demands, enforced by types:
//! [`construct_wr`](TypedPostSendGuard::construct_wr) → an operation (`setup_send`, …) → for
//! datagram transports, the destination (`setup_ud_addr`) → the data ([`SetScatterGatherEntry`]
//! or [`SetInlineData`]). Its C calls are made together at the data step, so the [`Inline`] flag
//! always matches the data (rxe reads it at the builder call) and a request that never reached
//! its data step leaves nothing half-built.
//!
//! A provider fills only the `ibv_qp_ex` builders of the operations a queue pair was created
//! with (rxe leaves the others NULL): a request whose entry is missing ([`ProviderEntries`]) is
//! never handed to it, and [`post`](TypedPostSendGuard::post) aborts the batch with
//! [`OperationNotEnabled`](TypedPostSendErrorKind::OperationNotEnabled).
//!
//! Known provider bugs, not worked around here: rxe before rdma-core 58 sums the *first* entry's
//! length once per entry in `ibv_wr_set_sge_list`, and sends nothing for
//! `ibv_wr_set_inline_data_list`
//! ([`ibv_wr_post(3)`](https://man7.org/linux/man-pages/man3/ibv_wr_post.3.html)).
//!
//! [`SetScatterGatherEntry`]: sideway::ibverbs::queue_pair::SetScatterGatherEntry
//! [`SetInlineData`]: sideway::ibverbs::queue_pair::SetInlineData
//! [`Inline`]: sideway::ibverbs::queue_pair::WorkRequestFlags::Inline

// The guard and the state of its batch (guard), each request's operation step (request), the
// transports (transport: the trait, RC; unreliable_datagram: UD and its destination step), the
// data step that makes a request's C calls (data), the provider entries the guard checks
// (provider_entries), the errors (error), the operation types (operation).
mod data;
mod error;
mod guard;
pub mod operation;
mod provider_entries;
mod request;
mod transport;
mod unreliable_datagram;

pub use data::TypedLocalBufferHandle;
pub use error::{TypedPostSendError, TypedPostSendErrorKind};
pub use guard::{Batch, TypedPostSendGuard};
pub(crate) use provider_entries::entry;
pub use provider_entries::{MissingProviderEntry, ProviderEntries};
pub use request::{PendingRequest, TypedWorkRequestHandle};
pub use transport::{Connected, Destination, ReliableConnection, RemoteMemoryAccess, Transport};
pub use unreliable_datagram::{DatagramAddress, UnreliableDatagram, UnreliableDatagramDestination};

mod sealed {
    // Transports, operations and destinations are sealed: each one's guarantees (which
    // builders, which destination step) depend on how its queue pairs were created, and the
    // guard's checks of provider entries rely on them.
    pub trait Sealed {}
}

use rdma_mummy_sys::ibv_qp_ex;

/// The operation of a request (one type per `ibv_wr_*` builder), issued at its data step. Sealed.
pub trait Operation: sealed::Sealed + Copy {
    /// The [`ProviderEntries`] bit of its builder.
    const ENTRY: u32;
    /// Calls the builder.
    ///
    /// # Safety
    ///
    /// `qp` must be a live queue pair inside a batch, with the builder's entry filled.
    unsafe fn build(self, qp: *mut ibv_qp_ex);
}
