//! Extensions to sideway's [`ibverbs`](sideway::ibverbs) module: the parts of libibverbs that
//! sideway 0.4.3 does not wrap yet. This page is the guide to what they share;
//! `tests/test_shared_receive_queue.rs` has running versions of each step.
//!
//! # One request at a time
//!
//! Reposting the receive that just completed and sending the next message have one-request
//! calls that make the same verbs calls as direct C code, with a batch's guarantees:
//! [`SharedReceiveQueue::post_recv_one`](shared_receive_queue::SharedReceiveQueue::post_recv_one)
//! and `post_send_one` on every queue pair.
//!
//! ```no_run
//! # use rdma_mummy_sys::ibv_sge;
//! # use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
//! # use sideway_ext::ibverbs::post_send_guard::ReliableConnection;
//! # use sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair;
//! # use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;
//! # use sideway_ext::ibverbs::work_completion::WorkCompletion;
//! # fn repost(srq: &SharedReceiveQueue, qp: &mut SharedReceiveQueuePair<ReliableConnection>, wc: &WorkCompletion, lkey: u32, addr: u64)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! // SAFETY: the slot lies in the region of `lkey` and stays valid until its receive completes.
//! unsafe { srq.post_recv_one(wc.wr_id(), &[ibv_sge { addr, length: 4096, lkey }])? };
//! qp.post_send_one(7, WorkRequestFlags::Signaled, |wr| wr.setup_send().setup_inline_data(b"next"))?;
//! # Ok(()) }
//! ```
//!
//! # What posting guarantees
//!
//! - **Cost**: a send request is its `ibv_wr_*` calls; a receive batch is built in two vectors
//!   and handed over in one call, as sideway's `PostRecvGuard` does; `post_recv_one` allocates
//!   nothing.
//! - **No call through a NULL provider entry** ([`post_send_guard`]).
//! - **What went in**: a failed send batch posted nothing, a failed receive batch exactly the
//!   requests before `err.index()`.
//! - **Shared access**: queue pairs are `Sync`; every call that lets libibverbs write one takes
//!   `&mut self`.
//! - **No panic on what a device or a newer library reports** (unknown statuses, opcodes and
//!   event types are kept raw), and none from a destroy that fails while the thread unwinds.
//! - **Every C struct handed to a library is initialised, padding included**; CI runs every test
//!   binary under valgrind memcheck.
//!
//! # Completion events
//!
//! Instead of busy polling, sleep until a completion queue gets a completion: the
//! [`completion_channel`] module, with the `tokio` feature `async_completion_channel`.
pub mod address;
pub mod address_from_work_completion;
pub mod address_handle;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod async_completion_channel;
pub mod async_event;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod async_event_waiter;
pub mod completion_channel;
pub mod extension;
// Used by the endpoints peers exchange: DC's (mlx5) for now.
#[cfg(feature = "mlx5")]
pub(crate) mod gid_as_ipv6;
mod post_recv_one;
pub mod post_send_guard;
mod post_send_one;
pub mod queue_pair;
pub mod shared_receive_queue;
pub mod source_gid;
#[cfg(feature = "mlx5")]
#[cfg_attr(docsrs, doc(cfg(feature = "mlx5")))]
pub mod thread_domain;
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

/// `ibv_query_port` on a raw context, port 0 refused with EINVAL (the library's answer varies).
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

/// Waits up to `timeout` for `fd` to become readable (`ppoll`): whether it did. To the
/// nanosecond (`poll`'s milliseconds would turn a wait under one into none), for good with
/// `Duration::MAX`, and across signals (`EINTR` is no error of the caller's).
pub(crate) fn wait_readable(fd: std::os::fd::RawFd, timeout: std::time::Duration) -> std::io::Result<bool> {
    let deadline = std::time::Instant::now().checked_add(timeout);
    let mut left = timeout;
    loop {
        let mut pollfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // A wait longer than `time_t` seconds (292 billion years) is a wait for good.
        let timespec = libc::time_t::try_from(left.as_secs())
            .ok()
            .map(|seconds| libc::timespec {
                tv_sec: seconds,
                tv_nsec: left.subsec_nanos().into(),
            });
        let timespec_pointer = timespec.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
        // SAFETY: pollfd is a valid array of one entry; the timespec is null or alive for the
        // call; a null signal mask keeps the thread's.
        match unsafe { libc::ppoll(&mut pollfd, 1, timespec_pointer, std::ptr::null()) } {
            0 => return Ok(false),
            n if n > 0 => return Ok(true),
            _ => {
                let err = std::io::Error::last_os_error();
                if err.kind() != std::io::ErrorKind::Interrupted {
                    return Err(err);
                }
                if let Some(deadline) = deadline {
                    left = deadline.saturating_duration_since(std::time::Instant::now());
                }
            },
        }
    }
}

/// Checks the errno a destroy call made in `Drop` returned: a failure (a leaked handle or a
/// teardown-order bug) panics, as in sideway, or is printed to stderr while the thread is
/// already unwinding, where a second panic would abort the process.
pub(crate) fn check_destroy(call: &str, ret: i32) {
    if ret == 0 {
        return;
    }
    let err = std::io::Error::from_raw_os_error(ret);
    if std::thread::panicking() {
        let name = env!("CARGO_PKG_NAME");
        eprintln!("{name}: {call} failed while unwinding (resource leaked): {err}");
    } else {
        panic!("{call} failed: {err}");
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::thread::JoinHandleExt;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::time::{Duration, Instant};

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

    /// A pipe: its read end is what waits, a byte written to the other makes it readable.
    fn pipe() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: fds is an array of two descriptors for pipe2 to fill.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0, "pipe2");
        // SAFETY: pipe2 opened both; each is owned once.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    fn write_byte(fd: &OwnedFd) {
        // SAFETY: one byte from a live buffer to an open descriptor.
        assert_eq!(
            unsafe { libc::write(fd.as_raw_fd(), [1u8].as_ptr().cast(), 1) },
            1,
            "write"
        );
    }

    #[test]
    fn a_wait_under_a_millisecond_waits_its_time() {
        // In poll's milliseconds, 500 µs would be no wait at all.
        let (read, _write) = pipe();
        let started = Instant::now();
        assert!(!super::wait_readable(read.as_raw_fd(), Duration::from_micros(500)).expect("wait"));
        assert!(
            started.elapsed() >= Duration::from_micros(500),
            "waited {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_wait_for_good_ends_when_the_descriptor_is_readable() {
        let (read, write) = pipe();
        let waiter = std::thread::spawn(move || super::wait_readable(read.as_raw_fd(), Duration::MAX));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "Duration::MAX waits");
        write_byte(&write);
        assert!(waiter.join().expect("waiter").expect("wait"), "readable");
    }

    extern "C" fn ignore_signal(_: libc::c_int) {}

    #[test]
    fn a_wait_goes_on_across_signals() {
        // A signal's EINTR is no error of the caller's: the wait goes on for the time left.
        // SAFETY: a handler that does nothing, installed without SA_RESTART so that a blocked
        // ppoll returns EINTR; no other test uses SIGUSR1.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            assert_eq!(libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()), 0);
        }
        let (read, write) = pipe();
        let waiter = std::thread::spawn(move || super::wait_readable(read.as_raw_fd(), Duration::from_secs(60)));
        // Several signals, so that some land while the waiter is inside ppoll.
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(20));
            // SAFETY: the waiter has not been joined, so its thread is alive.
            assert_eq!(unsafe { libc::pthread_kill(waiter.as_pthread_t(), libc::SIGUSR1) }, 0);
        }
        assert!(!waiter.is_finished(), "still waiting after the signals");
        write_byte(&write);
        assert!(waiter.join().expect("waiter").expect("wait, not an error"), "readable");
    }
}
