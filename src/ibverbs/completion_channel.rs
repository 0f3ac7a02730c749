//! Completion events: sleep until a completion queue gets a completion instead of busy polling.
//!
//! The loop, for a CQ created with
//! [`setup_comp_channel`](sideway::ibverbs::completion::CompletionQueueBuilder::setup_comp_channel):
//! arm the CQ ([`req_notify_cq`](super::extension::CompletionQueueEventExt::req_notify_cq)), wait
//! for a [`CompletionEvent`], re-arm, then drain the CQ (a completion between the last poll and
//! the re-arm would otherwise raise no event). An async runtime waits for the non-blocking
//! channel's file descriptor, then calls
//! [`try_get_cq_event`](super::extension::CompletionChannelExt::try_get_cq_event).
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use sideway::ibverbs::device::{DeviceInfo, DeviceList};
//! use sideway_ext::ibverbs::extension::{CompletionChannelExt, CompletionQueueEventExt, CompletionQueueExt};
//! use sideway_ext::ibverbs::work_completion::WorkCompletion;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let devices = DeviceList::new()?;
//!     let ctx = devices.iter().next().ok_or("no RDMA device")?.open()?;
//!     let channel = ctx.create_comp_channel()?;
//!     let cq = ctx.create_cq_builder().setup_cqe(256).setup_comp_channel(&channel, 0).build()?;
//!     cq.req_notify_cq(false)?; // the next completion raises one event
//!     // ... post work ...
//!     if let Some(event) = channel.get_cq_event_timeout(Duration::from_secs(1))? {
//!         assert!(event.is_for(&*cq));
//!         cq.req_notify_cq(false)?; // re-arm before draining: no completion slips between the two
//!         let mut wcs = [WorkCompletion::default(); 32];
//!         while !cq.poll_work_completions(&mut wcs)?.is_empty() { /* handle them */ }
//!     } // the event is acknowledged here
//!     Ok(())
//! }
//! ```
//!
//! Each event holds its CQ until it is acknowledged (on drop), as `ibv_destroy_cq` waits for
//! every event it delivered to be acknowledged. An event can only name a CQ armed through this
//! crate's `req_notify_cq`, which records the CQ weakly; one for a CQ armed another way is
//! acknowledged at once and reported as [`GetCompletionEventErrorKind::UnknownCompletionQueue`].
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::{self, NonNull};
use std::sync::{Mutex, PoisonError, Weak};
use std::time::Duration;

use rdma_mummy_sys::{ibv_ack_cq_events, ibv_cq, ibv_get_cq_event, ibv_req_notify_cq};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, CompletionChannel, CompletionQueue, ExtendedCompletionQueue, GenericCompletionQueue,
};

/// Error returned by
/// [`CompletionQueueEventExt::req_notify_cq`](super::extension::CompletionQueueEventExt::req_notify_cq).
#[derive(Debug, thiserror::Error)]
#[error("failed to request completion notification")]
#[non_exhaustive]
pub struct RequestNotifyCompletionQueueError(#[from] pub RequestNotifyCompletionQueueErrorKind);

/// The enum type for [`RequestNotifyCompletionQueueError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestNotifyCompletionQueueErrorKind {
    /// The CQ was created without a completion channel, so it has nowhere to send events.
    #[error("the completion queue has no completion channel")]
    NoCompletionChannel,
    /// `ibv_req_notify_cq` failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// Error returned by [`CompletionChannelExt::get_cq_event`](super::extension::CompletionChannelExt::get_cq_event).
#[derive(Debug, thiserror::Error)]
#[error("failed to get a completion event")]
#[non_exhaustive]
pub struct GetCompletionEventError(#[from] pub GetCompletionEventErrorKind);

/// The enum type for [`GetCompletionEventError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GetCompletionEventErrorKind {
    /// The event was for a CQ not armed through this crate (or being destroyed); acknowledged.
    #[error("completion event for a completion queue not armed through req_notify_cq (ibv_cq at {cq:#x})")]
    UnknownCompletionQueue {
        /// The address of the CQ's `ibv_cq`.
        cq: usize,
    },
    /// `ibv_get_cq_event` or `ppoll` failed (`WouldBlock`: a non-blocking channel has no event).
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// A completion event for the CQ it names and holds, acknowledged (`ibv_ack_cq_events`) on drop.
#[derive(Debug)]
pub struct CompletionEvent {
    cq: GenericCompletionQueue,
}

impl CompletionEvent {
    /// The completion queue that got the completion.
    pub fn cq(&self) -> &GenericCompletionQueue {
        &self.cq
    }

    /// Whether the event is for `cq`.
    pub fn is_for(&self, cq: &(impl CompletionQueue + ?Sized)) -> bool {
        // SAFETY: both CQs are alive; the handles are only compared.
        unsafe { self.cq.cq() == cq.cq() }
    }

    /// The context pointer the CQ was created with (`setup_cq_context`), null when none was set.
    pub fn cq_context(&self) -> *mut c_void {
        // SAFETY: the CQ is alive while the event holds it; cq_context is set at creation.
        unsafe { self.cq.cq().as_ref().cq_context }
    }
}

impl Drop for CompletionEvent {
    fn drop(&mut self) {
        // SAFETY: the event came from ibv_get_cq_event for this live CQ and is acknowledged once.
        unsafe { ibv_ack_cq_events(self.cq.cq().as_ptr(), 1) };
    }
}

/// A CQ recorded when it was armed, without keeping it alive.
pub(crate) enum ArmedCompletionQueue {
    Basic(Weak<BasicCompletionQueue>),
    Extended(Weak<ExtendedCompletionQueue>),
}

impl ArmedCompletionQueue {
    fn upgrade(&self) -> Option<GenericCompletionQueue> {
        match self {
            Self::Basic(cq) => cq.upgrade().map(GenericCompletionQueue::Basic),
            Self::Extended(cq) => cq.upgrade().map(GenericCompletionQueue::Extended),
        }
    }

    fn is(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Basic(a), Self::Basic(b)) => a.ptr_eq(b),
            (Self::Extended(a), Self::Extended(b)) => a.ptr_eq(b),
            _ => false,
        }
    }
}

/// The CQs armed through this crate, by the address of their `ibv_cq` (a live CQ's memory is
/// not reused); dead entries are replaced when another CQ at the address is armed, and pruned
/// as the map grows.
struct ArmedQueues {
    by_address: BTreeMap<usize, ArmedCompletionQueue>,
    prune_at: usize,
}

const FIRST_PRUNE: usize = 64;

static ARMED_QUEUES: Mutex<ArmedQueues> = Mutex::new(ArmedQueues {
    by_address: BTreeMap::new(),
    prune_at: FIRST_PRUNE,
});

fn armed_queues() -> std::sync::MutexGuard<'static, ArmedQueues> {
    // The map is consistent after every operation on it, so a panic elsewhere cannot poison it.
    ARMED_QUEUES.lock().unwrap_or_else(PoisonError::into_inner)
}

fn record_armed(address: usize, cq: ArmedCompletionQueue) {
    let mut armed = armed_queues();
    if armed.by_address.get(&address).is_some_and(|known| known.is(&cq)) {
        return;
    }
    armed.by_address.insert(address, cq);
    if armed.by_address.len() >= armed.prune_at {
        armed.by_address.retain(|_, cq| cq.upgrade().is_some());
        armed.prune_at = (armed.by_address.len() * 2).max(FIRST_PRUNE);
    }
}

fn find_armed(address: usize) -> Option<GenericCompletionQueue> {
    armed_queues()
        .by_address
        .get(&address)
        .and_then(ArmedCompletionQueue::upgrade)
}

/// Arms `cq` (`ibv_req_notify_cq`) after recording its weak handle `armed` for [`get_cq_event`].
pub(crate) fn req_notify_cq(
    cq: &impl CompletionQueue, armed: ArmedCompletionQueue, solicited_only: bool,
) -> Result<(), RequestNotifyCompletionQueueError> {
    // SAFETY: the CQ is alive while `cq` is.
    let raw = unsafe { cq.cq() };
    // SAFETY: as above; an extended CQ starts with the fields of an ibv_cq, channel included.
    if unsafe { raw.as_ref().channel.is_null() } {
        return Err(RequestNotifyCompletionQueueErrorKind::NoCompletionChannel.into());
    }
    // Recorded before arming, so that an event raised right after arming finds the CQ.
    record_armed(raw.as_ptr() as usize, armed);
    // SAFETY: the CQ is alive and has a completion channel.
    let ret = unsafe { ibv_req_notify_cq(raw.as_ptr(), i32::from(solicited_only)) };
    if ret != 0 {
        return Err(RequestNotifyCompletionQueueErrorKind::Ibverbs(io::Error::from_raw_os_error(ret)).into());
    }
    Ok(())
}

/// Reads the next event of `channel` with `ibv_get_cq_event` (blocking unless non-blocking).
pub(crate) fn get_cq_event(channel: &CompletionChannel) -> Result<CompletionEvent, GetCompletionEventError> {
    let mut cq: *mut ibv_cq = ptr::null_mut();
    let mut cq_context: *mut c_void = ptr::null_mut();
    // SAFETY: the channel is alive while `channel` is; the out-pointers are writable.
    let ret = unsafe { ibv_get_cq_event(channel.comp_channel().as_ptr(), &mut cq, &mut cq_context) };
    if ret != 0 {
        return Err(GetCompletionEventErrorKind::Ibverbs(io::Error::last_os_error()).into());
    }
    let Some(cq) = NonNull::new(cq) else {
        return Err(GetCompletionEventErrorKind::Ibverbs(io::Error::new(
            io::ErrorKind::InvalidData,
            "ibv_get_cq_event returned no completion queue",
        ))
        .into());
    };
    match find_armed(cq.as_ptr() as usize) {
        Some(armed) => Ok(CompletionEvent { cq: armed }),
        None => {
            // SAFETY: the event was just received for this CQ; its memory stays valid until the
            // event is acknowledged, since destroying it waits for that.
            unsafe { ibv_ack_cq_events(cq.as_ptr(), 1) };
            Err(GetCompletionEventErrorKind::UnknownCompletionQueue {
                cq: cq.as_ptr() as usize,
            }
            .into())
        },
    }
}

/// Waits up to `timeout` for an event (`ppoll` on the channel's file descriptor). No event
/// within the time, or none left to read on a non-blocking channel, is `Ok(None)`.
pub(crate) fn get_cq_event_timeout(
    channel: &CompletionChannel, timeout: Duration,
) -> Result<Option<CompletionEvent>, GetCompletionEventError> {
    match super::wait_readable(channel.as_raw_fd(), timeout) {
        Ok(false) => Ok(None),
        Ok(true) => match get_cq_event(channel) {
            Ok(event) => Ok(Some(event)),
            Err(GetCompletionEventError(GetCompletionEventErrorKind::Ibverbs(err)))
                if err.kind() == io::ErrorKind::WouldBlock =>
            {
                Ok(None)
            },
            Err(err) => Err(err),
        },
        Err(err) => Err(GetCompletionEventErrorKind::Ibverbs(err).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests that record entries in the process-wide map, one at a time: pruning removes
    /// every dead entry, another test's too.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[test]
    fn a_recorded_entry_whose_queue_is_gone_finds_no_queue() {
        let _serial = serial();
        // A recorded entry is found by its address, and a dropped CQ (a weak handle that never
        // had a value) is not handed out: an event for it is acknowledged and reported unknown.
        // (A live CQ, found, needs a device: tests/test_completion_channel.rs.)
        let address = 0x2000_0000_usize;
        record_armed(address, ArmedCompletionQueue::Extended(Weak::new()));
        assert!(
            matches!(
                armed_queues().by_address.get(&address),
                Some(ArmedCompletionQueue::Extended(_))
            ),
            "the entry is recorded at its address"
        );
        assert!(find_armed(address).is_none());
    }

    #[test]
    fn dead_entries_are_replaced_and_pruned() {
        let _serial = serial();
        // Weak handles that never had a value stand in for CQs that were dropped.
        let base = 0x1000_0000_usize;
        for i in 0..(FIRST_PRUNE * 3) {
            record_armed(base + i * 64, ArmedCompletionQueue::Basic(Weak::new()));
        }
        let armed = armed_queues();
        let ours = armed.by_address.range(base..base + FIRST_PRUNE * 3 * 64).count();
        assert!(ours < FIRST_PRUNE, "dead entries were pruned, {ours} left");
        assert!(armed.prune_at >= FIRST_PRUNE);
    }

    #[test]
    fn an_entry_of_the_other_kind_replaces_the_recorded_one() {
        let _serial = serial();
        // A basic and an extended CQ at one address are different CQs (the second was created
        // after the first was destroyed): recording one replaces the other, whichever came first.
        // (Two live CQs of one kind, compared by allocation, need a device.)
        let address = 0x3000_0000_usize;
        let kind = || match armed_queues().by_address.get(&address) {
            Some(ArmedCompletionQueue::Basic(_)) => "basic",
            Some(ArmedCompletionQueue::Extended(_)) => "extended",
            None => "none",
        };
        record_armed(address, ArmedCompletionQueue::Basic(Weak::new()));
        assert_eq!(kind(), "basic");
        record_armed(address, ArmedCompletionQueue::Extended(Weak::new()));
        assert_eq!(kind(), "extended");
        record_armed(address, ArmedCompletionQueue::Basic(Weak::new()));
        assert_eq!(kind(), "basic");
    }
}
