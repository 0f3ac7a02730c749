//! Extension traits that stand in for inherent methods on sideway's types. Upstream in sideway,
//! each would be an inherent method of the type it extends; this is the only code of the crate
//! that could not go upstream as it is.
use std::sync::Arc;

use sideway::ibverbs::completion::{CompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain;

use super::address_handle::{AddressHandle, AddressHandleAttribute, CreateAddressHandleError};
use super::async_event::AsyncEventReader;
use super::shared_receive_queue::SharedReceiveQueueBuilder;
use super::work_completion::WorkCompletion;

/// Factories on a protection domain.
pub trait ProtectionDomainExt {
    /// A builder for a [`SharedReceiveQueue`](super::shared_receive_queue::SharedReceiveQueue) on
    /// this protection domain.
    fn create_srq_builder(&self) -> SharedReceiveQueueBuilder;

    /// Creates an address handle with `ibv_create_ah`. A non-global attribute on a RoCE port is
    /// refused before the call with
    /// [`GlobalRoutingRequired`](super::address_handle::CreateAddressHandleErrorKind::GlobalRoutingRequired).
    fn create_ah(&self, attr: &AddressHandleAttribute) -> Result<Arc<AddressHandle>, CreateAddressHandleError>;
}

impl ProtectionDomainExt for Arc<ProtectionDomain> {
    fn create_srq_builder(&self) -> SharedReceiveQueueBuilder {
        SharedReceiveQueueBuilder::new(self)
    }

    fn create_ah(&self, attr: &AddressHandleAttribute) -> Result<Arc<AddressHandle>, CreateAddressHandleError> {
        AddressHandle::new(self, attr).map(Arc::new)
    }
}

/// Asynchronous events of a device context.
pub trait DeviceContextExt {
    /// A reader of this context's asynchronous events.
    fn async_event_reader(&self) -> AsyncEventReader;
}

impl DeviceContextExt for Arc<DeviceContext> {
    fn async_event_reader(&self) -> AsyncEventReader {
        AsyncEventReader::new(self)
    }
}

/// Polling a completion queue into a caller-owned buffer, with every field of the completions.
pub trait CompletionQueueExt {
    /// Polls up to `wcs.len()` completions with `ibv_poll_cq` and returns those that were ready
    /// (an empty slice when none was). Allocates nothing. A provider's failure (a negative return:
    /// -1 or a negative errno) is an [`Ibverbs`](PollCompletionQueueError::Ibverbs) error.
    fn poll_work_completions<'a>(
        &self, wcs: &'a mut [WorkCompletion],
    ) -> Result<&'a [WorkCompletion], PollCompletionQueueError>;
}

impl<T: CompletionQueue + ?Sized> CompletionQueueExt for T {
    fn poll_work_completions<'a>(
        &self, wcs: &'a mut [WorkCompletion],
    ) -> Result<&'a [WorkCompletion], PollCompletionQueueError> {
        // SAFETY: the CQ is alive while self is.
        unsafe { super::work_completion::poll(self.cq(), wcs) }
    }
}
