//! Extension traits that stand in for inherent methods on sideway's types (upstream, each would
//! be an inherent method of the type it extends).
use std::sync::Arc;

use sideway::ibverbs::completion::{CompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain;

use super::address::AddressHandleAttribute;
use super::address_from_work_completion::{CreateAddressHandleFromWorkCompletionError, GRH_LEN};
use super::address_handle::{AddressHandle, CreateAddressHandleError};
use super::async_event::AsyncEventReader;
use super::shared_receive_queue::SharedReceiveQueueBuilder;
use super::source_gid::{SourceGid, SourceGidEntry, SourceGidError};
use super::work_completion::WorkCompletion;

/// Factories on a protection domain.
pub trait ProtectionDomainExt {
    /// A builder for a [`SharedReceiveQueue`](super::shared_receive_queue::SharedReceiveQueue) on
    /// this protection domain.
    fn create_srq_builder(&self) -> SharedReceiveQueueBuilder;

    /// Creates an address handle with `ibv_create_ah`; see [`address_handle`](super::address_handle).
    fn create_ah(&self, attr: &AddressHandleAttribute) -> Result<Arc<AddressHandle>, CreateAddressHandleError>;

    /// Creates the address handle that answers the sender of a received datagram, as
    /// `ibv_create_ah_from_wc` does: [`AddressHandleAttribute::from_work_completion`] of `wc` and
    /// `grh` (the first [`GRH_LEN`] bytes of its receive buffer), then [`create_ah`](Self::create_ah).
    fn create_ah_from_wc(
        &self, port: u8, wc: &WorkCompletion, grh: &[u8; GRH_LEN],
    ) -> Result<Arc<AddressHandle>, CreateAddressHandleFromWorkCompletionError>;
}

impl ProtectionDomainExt for Arc<ProtectionDomain> {
    fn create_srq_builder(&self) -> SharedReceiveQueueBuilder {
        SharedReceiveQueueBuilder::new(self)
    }

    fn create_ah(&self, attr: &AddressHandleAttribute) -> Result<Arc<AddressHandle>, CreateAddressHandleError> {
        AddressHandle::new(self, attr).map(Arc::new)
    }

    fn create_ah_from_wc(
        &self, port: u8, wc: &WorkCompletion, grh: &[u8; GRH_LEN],
    ) -> Result<Arc<AddressHandle>, CreateAddressHandleFromWorkCompletionError> {
        use super::address_from_work_completion::CreateAddressHandleFromWorkCompletionErrorKind as Kind;
        // SAFETY: the PD, and so its context, is alive while self is.
        let attr = unsafe {
            let context = std::ptr::NonNull::new_unchecked(self.pd().as_ref().context);
            AddressHandleAttribute::from_work_completion_on(context, port, wc, grh)
        }
        .map_err(Kind::from)?;
        Ok(self.create_ah(&attr).map_err(Kind::from)?)
    }
}

/// Asynchronous events and GID lookup of a device context.
pub trait DeviceContextExt {
    /// A reader of this context's asynchronous events.
    fn async_event_reader(&self) -> AsyncEventReader;

    /// The GID of local `port` that `source_gid` names ([`SourceGid`]); [`None`] on InfiniBand.
    ///
    /// # Errors
    ///
    /// [`SourceGidError`]: no such port, a GID that cannot be read, or none that fits.
    fn source_gid(&self, port: u8, source_gid: &SourceGid) -> Result<Option<SourceGidEntry>, SourceGidError>;
}

impl DeviceContextExt for Arc<DeviceContext> {
    fn async_event_reader(&self) -> AsyncEventReader {
        AsyncEventReader::new(self)
    }

    fn source_gid(&self, port: u8, source_gid: &SourceGid) -> Result<Option<SourceGidEntry>, SourceGidError> {
        source_gid.find(self, port)
    }
}

/// Polling a completion queue into a caller-owned buffer, with every field of the completions.
pub trait CompletionQueueExt {
    /// Polls up to `wcs.len()` completions with `ibv_poll_cq` and returns those that were ready.
    /// A provider's negative return is an [`Ibverbs`](PollCompletionQueueError::Ibverbs) error.
    ///
    /// It polls an `ExtendedCompletionQueue` too: the way to poll one more than once on SoftRoCE
    /// before rdma-core 55, whose `cq_next_poll` and `cq_end_poll` both advance the consumer
    /// index (fixed by rdma-core b78b414).
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

// Completion events: imported beside their only users, so that this block stays apart.
use std::time::Duration;

use sideway::ibverbs::completion::{
    BasicCompletionQueue, CompletionChannel, ExtendedCompletionQueue, GenericCompletionQueue,
};

use super::completion_channel::{
    self, ArmedCompletionQueue, CompletionEvent, GetCompletionEventError, RequestNotifyCompletionQueueError,
};

/// Completion event notification on a completion queue; see [`completion_channel`].
pub trait CompletionQueueEventExt {
    /// Arms the CQ (`ibv_req_notify_cq`): the next completion (with `solicited_only`, the next
    /// solicited receive or error) puts one [`CompletionEvent`] on its channel.
    ///
    /// # Errors
    ///
    /// [`NoCompletionChannel`](super::completion_channel::RequestNotifyCompletionQueueErrorKind::NoCompletionChannel)
    /// for a CQ built without a channel, else the provider's error.
    fn req_notify_cq(&self, solicited_only: bool) -> Result<(), RequestNotifyCompletionQueueError>;
}

impl CompletionQueueEventExt for Arc<BasicCompletionQueue> {
    fn req_notify_cq(&self, solicited_only: bool) -> Result<(), RequestNotifyCompletionQueueError> {
        let armed = ArmedCompletionQueue::Basic(Arc::downgrade(self));
        completion_channel::req_notify_cq(&**self, armed, solicited_only)
    }
}

impl CompletionQueueEventExt for Arc<ExtendedCompletionQueue> {
    fn req_notify_cq(&self, solicited_only: bool) -> Result<(), RequestNotifyCompletionQueueError> {
        let armed = ArmedCompletionQueue::Extended(Arc::downgrade(self));
        completion_channel::req_notify_cq(&**self, armed, solicited_only)
    }
}

impl CompletionQueueEventExt for GenericCompletionQueue {
    fn req_notify_cq(&self, solicited_only: bool) -> Result<(), RequestNotifyCompletionQueueError> {
        match self {
            GenericCompletionQueue::Basic(cq) => cq.req_notify_cq(solicited_only),
            GenericCompletionQueue::Extended(cq) => cq.req_notify_cq(solicited_only),
        }
    }
}

/// Reading completion events from a completion channel; see [`completion_channel`].
pub trait CompletionChannelExt {
    /// Reads the next event with `ibv_get_cq_event`, waiting for one unless the channel is
    /// non-blocking.
    ///
    /// # Errors
    ///
    /// See [`GetCompletionEventErrorKind`](super::completion_channel::GetCompletionEventErrorKind).
    fn get_cq_event(&self) -> Result<CompletionEvent, GetCompletionEventError>;

    /// Reads the next event if one is pending, without waiting (also on a blocking channel).
    fn try_get_cq_event(&self) -> Result<Option<CompletionEvent>, GetCompletionEventError>;

    /// Waits up to `timeout` for an event (`ppoll`; for good with [`Duration::MAX`]).
    fn get_cq_event_timeout(&self, timeout: Duration) -> Result<Option<CompletionEvent>, GetCompletionEventError>;
}

impl CompletionChannelExt for CompletionChannel {
    fn get_cq_event(&self) -> Result<CompletionEvent, GetCompletionEventError> {
        completion_channel::get_cq_event(self)
    }

    fn try_get_cq_event(&self) -> Result<Option<CompletionEvent>, GetCompletionEventError> {
        completion_channel::get_cq_event_timeout(self, Duration::ZERO)
    }

    fn get_cq_event_timeout(&self, timeout: Duration) -> Result<Option<CompletionEvent>, GetCompletionEventError> {
        completion_channel::get_cq_event_timeout(self, timeout)
    }
}
