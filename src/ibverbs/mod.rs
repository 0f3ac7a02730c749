//! Extensions to sideway's [`ibverbs`](sideway::ibverbs) module: the parts of libibverbs that
//! sideway 0.4.3 does not wrap yet.
//!
//! - [`shared_receive_queue`]: shared receive queues (SRQ), their limit, and posting receives;
//! - [`queue_pair`]: RC and UD queue pairs that receive through an SRQ, on a queue-pair core
//!   with a transition table per type, and [`post_send_guard`], the `ibv_wr_*` posting API;
//! - [`bring_up`]: RC and UD queue pairs brought to RTS in one call (RC from the peer's
//!   [`RcEndpoint`](bring_up::RcEndpoint));
//! - [`address_handle`]: address handles for datagram transports, also from a received
//!   datagram's work completion;
//! - [`async_event`]: the device context's asynchronous events (SRQ limit, QP last WQE, …);
//! - [`work_completion`]: completions with every field, including the queue pair number;
//! - [`completion_channel`]: completion events, to sleep (or wait on a file descriptor) until a
//!   completion queue gets a completion instead of busy polling it;
//! - [`async_completion_channel`] (feature `tokio`): the same events awaited from a tokio task
//!   (`channel.wait().await`);
//! - [`async_event_waiter`] (feature `tokio`): asynchronous events awaited from a tokio task
//!   (`events.wait().await`), and the shared receive queue's limit-event refill loop;
//! - [`extension`]: the factories on sideway's types (`pd.create_srq_builder()`, `pd.create_ah()`,
//!   `ctx.async_event_reader()`, `cq.poll_work_completions()`) and the completion-event methods
//!   (`cq.req_notify_cq()`, `channel.get_cq_event()`).
//!
//! # Example
//!
//! ```no_run
//! use sideway::ibverbs::device::DeviceList;
//! use sideway_ext::ibverbs::extension::ProtectionDomainExt;
//! use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueueModification;
//!
//! let devices = DeviceList::new().unwrap();
//! let ctx = devices.get(0).unwrap().open().unwrap();
//! let pd = ctx.alloc_pd().unwrap();
//! let cq = ctx.create_cq_builder().setup_cqe(256).build().unwrap();
//!
//! let srq = pd.create_srq_builder().setup_max_wr(128).setup_max_sge(1).build().unwrap();
//! srq.modify(SharedReceiveQueueModification::ArmLimit(16)).unwrap();
//! let qp = srq.create_qp_builder().setup_send_cq(cq.clone()).setup_recv_cq(cq).build_rc().unwrap();
//! assert_eq!(srq.query().unwrap().srq_limit, 16);
//! # drop(qp);
//! ```
pub mod address_handle;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod async_completion_channel;
pub mod async_event;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod async_event_waiter;
pub mod bring_up;
pub mod completion_channel;
pub mod extension;
pub mod post_send_guard;
pub mod queue_pair;
pub mod shared_receive_queue;
pub mod work_completion;
pub(crate) mod zeroed;

/// Reads the device attributes through a protection domain's context (`ibv_query_device`).
pub(crate) fn query_device_attr(
    pd: &sideway::ibverbs::protection_domain::ProtectionDomain,
) -> std::io::Result<rdma_mummy_sys::ibv_device_attr> {
    let mut attr = std::mem::MaybeUninit::<rdma_mummy_sys::ibv_device_attr>::zeroed();
    // SAFETY: the PD (and so its context) is alive; attr is a writable ibv_device_attr.
    let ret = unsafe { rdma_mummy_sys::ibv_query_device(pd.pd().as_ref().context, attr.as_mut_ptr()) };
    if ret != 0 {
        return Err(std::io::Error::from_raw_os_error(ret));
    }
    // SAFETY: ibv_query_device filled it (and it was zeroed before).
    Ok(unsafe { attr.assume_init() })
}

/// `ibv_query_port` on a raw context, port 0 refused with EINVAL before the call (the library's
/// answer for it varies). The one port query of the crate.
///
/// # Safety
///
/// `context` must be an open device context.
pub(crate) unsafe fn query_port(
    context: std::ptr::NonNull<rdma_mummy_sys::ibv_context>, port: u8,
) -> std::io::Result<rdma_mummy_sys::ibv_port_attr> {
    if port == 0 {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut attr = std::mem::MaybeUninit::<rdma_mummy_sys::ibv_port_attr>::zeroed();
    // SAFETY: the context is open (the caller's promise); attr is writable.
    let ret = unsafe { rdma_mummy_sys::ibv_query_port(context.as_ptr(), port, attr.as_mut_ptr()) };
    if ret != 0 {
        return Err(std::io::Error::from_raw_os_error(ret));
    }
    // SAFETY: ibv_query_port filled it (and it was zeroed before).
    Ok(unsafe { attr.assume_init() })
}

/// Waits at most `timeout` for `fd` to become readable (`poll`): whether it did.
pub(crate) fn wait_readable(fd: std::os::fd::RawFd, timeout: std::time::Duration) -> std::io::Result<bool> {
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: pollfd is a valid array of one entry.
    match unsafe { libc::poll(&mut pollfd, 1, millis) } {
        0 => Ok(false),
        n if n > 0 => Ok(true),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Checks the return value of a destroy call made in `Drop` (libibverbs returns an errno value).
///
/// As sideway does, a failure panics: it means a handle leaked or a teardown-order bug (e.g. a
/// shared receive queue that still has queue pairs). While the thread is already unwinding, a
/// second panic would abort the process, so the failure is printed to stderr instead.
pub(crate) fn check_destroy(call: &str, ret: i32) {
    if ret == 0 {
        return;
    }
    let err = std::io::Error::from_raw_os_error(ret);
    if std::thread::panicking() {
        eprintln!("sideway-ext: {call} failed while unwinding (resource leaked): {err}");
    } else {
        panic!("{call} failed: {err}");
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};

    /// A value whose teardown fails, as a destroy returning EBUSY does.
    struct FailingDestroy;

    impl Drop for FailingDestroy {
        fn drop(&mut self) {
            super::check_destroy("ibv_destroy_test", libc::EBUSY);
        }
    }

    #[test]
    fn a_failed_destroy_while_unwinding_does_not_abort() {
        // Before the fix, the second panic (an assert in Drop) aborted the whole test process.
        let result = catch_unwind(AssertUnwindSafe(|| {
            let _value = FailingDestroy;
            panic!("first failure");
        }));
        let payload = result.unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"first failure"));
    }

    #[test]
    fn a_failed_destroy_otherwise_panics_with_the_call_and_errno() {
        let payload = catch_unwind(|| drop(FailingDestroy)).unwrap_err();
        let message = payload.downcast_ref::<String>().expect("a formatted message");
        assert!(message.starts_with("ibv_destroy_test failed"), "{message}");
    }
}
