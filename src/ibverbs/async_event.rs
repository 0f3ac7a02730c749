//! Asynchronous events of a device context: a shared receive queue reaching its limit, a queue
//! pair's last WQE or fatal error, a port going up or down, the device failing.
//!
//! Each [`AsyncEvent`] is acknowledged (`ibv_ack_async_event`) when it is dropped
//! ([`ibv_get_async_event(3)`](https://man7.org/linux/man-pages/man3/ibv_get_async_event.3.html)).
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use rdma_mummy_sys::{
    ibv_ack_async_event, ibv_async_event, ibv_async_event_element_t, ibv_event_type, ibv_get_async_event,
};
use sideway::ibverbs::device_context::DeviceContext;

use super::shared_receive_queue::SharedReceiveQueueId;

/// Error returned by [`AsyncEventReader::read`].
#[derive(Debug, thiserror::Error)]
#[error("failed to read an asynchronous event")]
#[non_exhaustive]
pub struct ReadAsyncEventError(#[from] pub ReadAsyncEventErrorKind);

/// The enum type for [`ReadAsyncEventError`].
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
#[non_exhaustive]
pub enum ReadAsyncEventErrorKind {
    /// The library call, `ppoll` or `fcntl` failed.
    Ibverbs(#[from] io::Error),
}

/// The type of an [`AsyncEvent`] (`enum ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEventType {
    /// `IBV_EVENT_CQ_ERR`: a completion queue overran.
    CompletionQueueError,
    /// `IBV_EVENT_QP_FATAL`: a queue pair hit an error it cannot report in a completion.
    QueuePairFatal,
    /// `IBV_EVENT_QP_REQ_ERR`: invalid request local work queue error.
    QueuePairRequestError,
    /// `IBV_EVENT_QP_ACCESS_ERR`: local access violation error.
    QueuePairAccessError,
    /// `IBV_EVENT_COMM_EST`: communication established on a queue pair in RTR.
    CommunicationEstablished,
    /// `IBV_EVENT_SQ_DRAINED`: the send queue of a queue pair in SQD drained.
    SendQueueDrained,
    /// `IBV_EVENT_PATH_MIG`: path migration succeeded.
    PathMigrated,
    /// `IBV_EVENT_PATH_MIG_ERR`: path migration failed.
    PathMigrationError,
    /// `IBV_EVENT_DEVICE_FATAL`: the device failed; every resource of the context is unusable.
    DeviceFatal,
    /// `IBV_EVENT_PORT_ACTIVE`: a port became active.
    PortActive,
    /// `IBV_EVENT_PORT_ERR`: a port stopped being active.
    PortError,
    /// `IBV_EVENT_LID_CHANGE`: a port's LID changed.
    LidChange,
    /// `IBV_EVENT_PKEY_CHANGE`: a port's P_Key table changed.
    PartitionKeyChange,
    /// `IBV_EVENT_SM_CHANGE`: the subnet manager of a port changed.
    SubnetManagerChange,
    /// `IBV_EVENT_SRQ_ERR`: a shared receive queue hit an error; its queue pairs go to error.
    SharedReceiveQueueError,
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: fewer receives than the armed limit are posted on a shared
    /// receive queue; the limit is now disarmed.
    SharedReceiveQueueLimitReached,
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a queue pair on a shared receive queue, in error, will
    /// consume no more receives from it.
    QueuePairLastWorkQueueEntryReached,
    /// `IBV_EVENT_CLIENT_REREGISTER`: the subnet manager asks for re-registration.
    ClientReregister,
    /// `IBV_EVENT_GID_CHANGE`: a port's GID table changed.
    GidChange,
    /// `IBV_EVENT_WQ_FATAL`: a work queue hit a fatal error.
    WorkQueueFatal,
    /// `IBV_EVENT_DEVICE_SPEED_CHANGE`: a port's speed changed.
    DeviceSpeedChange,
    /// A value this crate does not know.
    Unknown(u32),
}

/// Each `enum ibv_event_type` value with its [`AsyncEventType`].
const EVENT_TYPES: [(ibv_event_type, AsyncEventType); 21] = {
    use ibv_event_type::*;
    use AsyncEventType::*;
    [
        (IBV_EVENT_CQ_ERR, CompletionQueueError),
        (IBV_EVENT_QP_FATAL, QueuePairFatal),
        (IBV_EVENT_QP_REQ_ERR, QueuePairRequestError),
        (IBV_EVENT_QP_ACCESS_ERR, QueuePairAccessError),
        (IBV_EVENT_COMM_EST, CommunicationEstablished),
        (IBV_EVENT_SQ_DRAINED, SendQueueDrained),
        (IBV_EVENT_PATH_MIG, PathMigrated),
        (IBV_EVENT_PATH_MIG_ERR, PathMigrationError),
        (IBV_EVENT_DEVICE_FATAL, DeviceFatal),
        (IBV_EVENT_PORT_ACTIVE, PortActive),
        (IBV_EVENT_PORT_ERR, PortError),
        (IBV_EVENT_LID_CHANGE, LidChange),
        (IBV_EVENT_PKEY_CHANGE, PartitionKeyChange),
        (IBV_EVENT_SM_CHANGE, SubnetManagerChange),
        (IBV_EVENT_SRQ_ERR, SharedReceiveQueueError),
        (IBV_EVENT_SRQ_LIMIT_REACHED, SharedReceiveQueueLimitReached),
        (IBV_EVENT_QP_LAST_WQE_REACHED, QueuePairLastWorkQueueEntryReached),
        (IBV_EVENT_CLIENT_REREGISTER, ClientReregister),
        (IBV_EVENT_GID_CHANGE, GidChange),
        (IBV_EVENT_WQ_FATAL, WorkQueueFatal),
        (IBV_EVENT_DEVICE_SPEED_CHANGE, DeviceSpeedChange),
    ]
};

impl From<u32> for AsyncEventType {
    fn from(value: u32) -> Self {
        EVENT_TYPES
            .iter()
            .find(|&&(raw, _)| raw as u32 == value)
            .map_or(AsyncEventType::Unknown(value), |&(_, event_type)| event_type)
    }
}

/// The object an [`AsyncEvent`] concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEventElement {
    /// A queue pair, by its number (its `qp_number()`).
    QueuePair {
        /// The queue pair's number.
        qp_number: u32,
    },
    /// A shared receive queue, by its [`id`](super::shared_receive_queue::SharedReceiveQueue::id).
    SharedReceiveQueue(SharedReceiveQueueId),
    /// A completion queue, by the address of its `ibv_cq`.
    CompletionQueue(usize),
    /// A work queue, by the address of its `ibv_wq`.
    WorkQueue(usize),
    /// A port, by number.
    Port(u8),
    /// The device as a whole.
    Device,
}

/// Decodes an event the library filled, reading `event_type` as the integer C stores (a value
/// newer than the binding's Rust enum would be undefined behaviour).
///
/// # Safety
///
/// `raw` must have been filled by `ibv_get_async_event` (or, in tests, hold an integer type and
/// the element member that type names).
unsafe fn decode(raw: &MaybeUninit<ibv_async_event>) -> (AsyncEventType, AsyncEventElement) {
    let event = raw.as_ptr();
    let type_value = std::ptr::addr_of!((*event).event_type).cast::<u32>().read();
    let event_type = AsyncEventType::from(type_value);
    (event_type, event_type.element(&*std::ptr::addr_of!((*event).element)))
}

impl AsyncEventType {
    /// # Safety
    ///
    /// `element` must hold the member this event type names.
    unsafe fn element(self, element: &ibv_async_event_element_t) -> AsyncEventElement {
        use AsyncEventType::*;
        // SAFETY (all union reads below): the event type says which member the library set.
        unsafe {
            match self {
                CompletionQueueError => AsyncEventElement::CompletionQueue(element.cq as usize),
                QueuePairFatal
                | QueuePairRequestError
                | QueuePairAccessError
                | CommunicationEstablished
                | SendQueueDrained
                | PathMigrated
                | PathMigrationError
                | QueuePairLastWorkQueueEntryReached => AsyncEventElement::QueuePair {
                    qp_number: (*element.qp).qp_num,
                },
                SharedReceiveQueueError | SharedReceiveQueueLimitReached => {
                    AsyncEventElement::SharedReceiveQueue(SharedReceiveQueueId(element.srq as usize))
                },
                WorkQueueFatal => AsyncEventElement::WorkQueue(element.wq as usize),
                PortActive | PortError | LidChange | PartitionKeyChange | SubnetManagerChange | ClientReregister
                | GidChange | DeviceSpeedChange => AsyncEventElement::Port(element.port_num as u8),
                DeviceFatal | Unknown(_) => AsyncEventElement::Device,
            }
        }
    }
}

/// One asynchronous event, acknowledged with `ibv_ack_async_event` when dropped. Drop it before
/// the last handle of the object it concerns: that object's destroy waits for the acknowledgement.
pub struct AsyncEvent {
    // Kept as C wrote it (never as the binding's typed struct) and handed back to be acknowledged.
    raw: MaybeUninit<ibv_async_event>,
    event_type: AsyncEventType,
    element: AsyncEventElement,
    // Acknowledged before the context is released.
    _dev_ctx: Arc<DeviceContext>,
}

// SAFETY: the event is plain data plus a pointer the library lets any thread acknowledge.
unsafe impl Send for AsyncEvent {}

impl Drop for AsyncEvent {
    fn drop(&mut self) {
        // SAFETY: the event came from ibv_get_async_event and is acknowledged exactly once.
        unsafe { ibv_ack_async_event(self.raw.as_mut_ptr()) };
    }
}

impl std::fmt::Debug for AsyncEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncEvent")
            .field("event_type", &self.event_type)
            .field("element", &self.element)
            .finish()
    }
}

impl AsyncEvent {
    /// The event's type.
    pub fn event_type(&self) -> AsyncEventType {
        self.event_type
    }

    /// The object the event concerns.
    pub fn element(&self) -> AsyncEventElement {
        self.element
    }
}

/// Reads the asynchronous events of one device context; created by `ctx.async_event_reader()`.
///
/// One reader per context: readers of one context share its event file descriptor, so its
/// events and its blocking mode, and the one that loses a race for an event blocks in
/// [`read_timeout`](Self::read_timeout) unless the context is non-blocking.
#[derive(Debug)]
pub struct AsyncEventReader {
    dev_ctx: Arc<DeviceContext>,
}

impl AsyncEventReader {
    pub(crate) fn new(dev_ctx: &Arc<DeviceContext>) -> Self {
        Self {
            dev_ctx: Arc::clone(dev_ctx),
        }
    }

    /// Reads the next event with `ibv_get_async_event`, waiting for one unless the reader is
    /// non-blocking ([`io::ErrorKind::WouldBlock`]).
    pub fn read(&self) -> Result<AsyncEvent, ReadAsyncEventError> {
        let mut raw = MaybeUninit::<ibv_async_event>::zeroed();
        // SAFETY: the context is alive while self.dev_ctx is; raw is writable.
        let ret = unsafe { ibv_get_async_event(self.dev_ctx.context().as_ptr(), raw.as_mut_ptr()) };
        if ret != 0 {
            return Err(ReadAsyncEventErrorKind::Ibverbs(io::Error::last_os_error()).into());
        }
        // SAFETY: ibv_get_async_event filled the event.
        let (event_type, element) = unsafe { decode(&raw) };
        Ok(AsyncEvent {
            raw,
            event_type,
            element,
            _dev_ctx: Arc::clone(&self.dev_ctx),
        })
    }

    /// Reads the next event if one is pending, without waiting.
    pub fn try_read(&self) -> Result<Option<AsyncEvent>, ReadAsyncEventError> {
        self.read_timeout(Duration::ZERO)
    }

    /// Waits up to `timeout` for an event (`ppoll`; for good with [`Duration::MAX`]).
    pub fn read_timeout(&self, timeout: Duration) -> Result<Option<AsyncEvent>, ReadAsyncEventError> {
        match super::wait_readable(self.as_raw_fd(), timeout) {
            Ok(false) => Ok(None),
            Ok(true) => self.read().map(Some),
            Err(err) => Err(ReadAsyncEventErrorKind::Ibverbs(err).into()),
        }
    }

    /// Makes [`read`](Self::read) return at once when no event is pending (or wait again).
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        let fd = self.as_raw_fd();
        // SAFETY: fcntl on a file descriptor the context owns, with valid commands.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 {
                return Err(io::Error::last_os_error());
            }
            let flags = if nonblocking {
                flags | libc::O_NONBLOCK
            } else {
                flags & !libc::O_NONBLOCK
            };
            if libc::fcntl(fd, libc::F_SETFL, flags) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

impl AsRawFd for AsyncEventReader {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: the context is alive while self.dev_ctx is; async_fd is set at open.
        unsafe { self.dev_ctx.context().as_ref().async_fd }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event as C stores it: the element, then the type as a 32-bit integer.
    fn raw_event(type_value: u32, port: i32) -> MaybeUninit<ibv_async_event> {
        let mut raw = MaybeUninit::<ibv_async_event>::zeroed();
        let event = raw.as_mut_ptr();
        // SAFETY: writes of the C representation into a zeroed, writable struct.
        unsafe {
            std::ptr::addr_of_mut!((*event).event_type)
                .cast::<u32>()
                .write(type_value);
            std::ptr::addr_of_mut!((*event).element).cast::<i32>().write(port);
        }
        raw
    }

    #[test]
    fn an_event_type_newer_than_the_binding_decodes_from_the_integer() {
        // Values past IBV_EVENT_DEVICE_SPEED_CHANGE (20) have no variant in the binding's enum;
        // the reader must never hold them as that enum.
        for value in [21, 22, 1000, u32::MAX] {
            // SAFETY: the event holds an integer type and a port number.
            let (event_type, element) = unsafe { decode(&raw_event(value, 0)) };
            assert_eq!(event_type, AsyncEventType::Unknown(value));
            assert_eq!(element, AsyncEventElement::Device);
        }
        // SAFETY: as above; PORT_ACTIVE names the port member.
        let (event_type, element) = unsafe { decode(&raw_event(9, 2)) };
        assert_eq!(
            (event_type, element),
            (AsyncEventType::PortActive, AsyncEventElement::Port(2))
        );
    }

    #[test]
    fn event_types_decode_from_their_values() {
        assert_eq!(AsyncEventType::from(15), AsyncEventType::SharedReceiveQueueLimitReached);
        assert_eq!(AsyncEventType::from(14), AsyncEventType::SharedReceiveQueueError);
        assert_eq!(
            AsyncEventType::from(16),
            AsyncEventType::QueuePairLastWorkQueueEntryReached
        );
        assert_eq!(AsyncEventType::from(1), AsyncEventType::QueuePairFatal);
        assert_eq!(AsyncEventType::from(9), AsyncEventType::PortActive);
        assert_eq!(AsyncEventType::from(10), AsyncEventType::PortError);
        assert_eq!(AsyncEventType::from(8), AsyncEventType::DeviceFatal);
        assert_eq!(AsyncEventType::from(99), AsyncEventType::Unknown(99));
        // The numbering is libibverbs': check it against the binding.
        use rdma_mummy_sys::ibv_event_type as t;
        for (raw, ours) in [
            (
                t::IBV_EVENT_SRQ_LIMIT_REACHED as u32,
                AsyncEventType::SharedReceiveQueueLimitReached,
            ),
            (t::IBV_EVENT_SRQ_ERR as u32, AsyncEventType::SharedReceiveQueueError),
            (
                t::IBV_EVENT_QP_LAST_WQE_REACHED as u32,
                AsyncEventType::QueuePairLastWorkQueueEntryReached,
            ),
            (
                t::IBV_EVENT_DEVICE_SPEED_CHANGE as u32,
                AsyncEventType::DeviceSpeedChange,
            ),
            (t::IBV_EVENT_CQ_ERR as u32, AsyncEventType::CompletionQueueError),
        ] {
            assert_eq!(AsyncEventType::from(raw), ours);
        }
    }
}
