//! Completion events on a real device (SoftRoCE in the VM): an armed CQ raises exactly one event
//! for a completion, and the channel's file descriptor turns readable; an armed CQ with no
//! completion, and an unarmed CQ with one, raise none; events keep their CQ alive, are held
//! together, and read without blocking.
mod common;

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use common::loopback::{loopback, Kind, Loopback, EVENT_TIMEOUT};
use common::{open_test_device, wait_completions, Buffer};
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::ibverbs::completion_channel::{GetCompletionEventErrorKind, RequestNotifyCompletionQueueErrorKind};
use sideway_ext::ibverbs::extension::{CompletionChannelExt, CompletionQueueEventExt};

/// How long to wait to conclude that no event comes.
const QUIET: Duration = Duration::from_millis(200);

/// Whether `fd` turns readable within `timeout`.
fn readable(fd: i32, timeout: Duration) -> bool {
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ret = unsafe { libc::poll(&mut pollfd, 1, timeout.as_millis() as i32) };
    assert!(ret >= 0, "poll: {}", io::Error::last_os_error());
    ret == 1 && pollfd.revents & libc::POLLIN != 0
}

fn one_event_per_armed_completion(kind: Kind) {
    let mut lb = loopback(kind);
    lb.cq.req_notify_cq(false).expect("req_notify_cq");
    assert!(
        !readable(lb.channel.as_raw_fd(), Duration::ZERO),
        "no event before the completion"
    );

    lb.write(7, 0x5a);
    assert!(
        readable(lb.channel.as_raw_fd(), EVENT_TIMEOUT),
        "the channel's fd turns readable after the completion"
    );
    let event = lb
        .channel
        .get_cq_event_timeout(EVENT_TIMEOUT)
        .expect("get_cq_event")
        .expect("an event for the completion");
    assert!(event.is_for(&lb.cq), "the event names the armed CQ");
    assert!(event.cq_context().is_null());
    drop(event);
    lb.expect_completion(7, 0x5a);

    // Exactly one: the arm is spent, so neither that completion nor a next one raises another.
    assert!(lb.channel.get_cq_event_timeout(QUIET).expect("read").is_none());
    lb.write(8, 0x6b);
    lb.expect_completion(8, 0x6b);
    assert!(lb.channel.try_get_cq_event().expect("read").is_none());

    // Re-armed, the next completion raises the next event, read blocking this time.
    lb.cq.req_notify_cq(false).expect("re-arm");
    lb.write(9, 0x7c);
    let event = lb.channel.get_cq_event().expect("blocking get_cq_event");
    assert!(event.is_for(&lb.cq));
    lb.expect_completion(9, 0x7c);
}

/// (a) An armed basic CQ raises exactly one event for a completion, the completion is then
/// polled, and the channel's file descriptor is readable meanwhile.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn armed_basic_cq_raises_one_event_for_a_completion() {
    one_event_per_armed_completion(Kind::Basic);
}

/// (a) The same for an extended CQ (`ibv_create_cq_ex`).
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn armed_extended_cq_raises_one_event_for_a_completion() {
    one_event_per_armed_completion(Kind::Extended);
}

/// (b) An armed CQ with no completion raises no event.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn armed_cq_without_completion_raises_no_event() {
    let lb = loopback(Kind::Basic);
    lb.cq.req_notify_cq(false).expect("req_notify_cq");
    assert!(lb.channel.get_cq_event_timeout(QUIET).expect("read").is_none());
    assert!(lb.channel.try_get_cq_event().expect("read").is_none());
    assert!(!readable(lb.channel.as_raw_fd(), Duration::ZERO));
}

/// (c) A completion on a CQ that was not armed raises no event.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn unarmed_cq_raises_no_event_for_a_completion() {
    let mut lb = loopback(Kind::Basic);
    lb.write(1, 0x11);
    lb.expect_completion(1, 0x11);
    assert!(lb.channel.get_cq_event_timeout(QUIET).expect("read").is_none());
    assert!(!readable(lb.channel.as_raw_fd(), Duration::ZERO));
}

/// An event holds its CQ: dropping every other handle of the CQ (queue pair included) leaves it
/// alive and pollable, and it is destroyed, without deadlock, when the event is acknowledged.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn event_keeps_its_cq_alive_until_acknowledged() {
    let mut lb = loopback(Kind::Basic);
    lb.cq.req_notify_cq(false).expect("req_notify_cq");
    lb.write(3, 0x33);
    let event = lb
        .channel
        .get_cq_event_timeout(EVENT_TIMEOUT)
        .expect("read")
        .expect("an event");
    let Loopback {
        sender,
        receiver,
        cq,
        channel,
        ..
    } = lb;
    drop((sender, receiver, cq));
    // The CQ is still there, with its completion.
    let wcs = wait_completions(event.cq(), 1, EVENT_TIMEOUT);
    assert_eq!(wcs[0].wr_id(), 3);
    drop(event);
    drop(channel);
}

/// Events of one CQ held together, told apart from another CQ's, all acknowledged on drop.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn events_held_together_are_each_acknowledged() {
    let mut lb = loopback(Kind::Basic);
    let mut held = Vec::new();
    for i in 0..3u8 {
        lb.cq.req_notify_cq(false).expect("req_notify_cq");
        lb.write(u64::from(i), i);
        let event = lb
            .channel
            .get_cq_event_timeout(EVENT_TIMEOUT)
            .expect("read")
            .expect("an event");
        lb.expect_completion(u64::from(i), i);
        assert!(event.is_for(&lb.cq), "same CQ");
        held.push(event);
    }
    assert_eq!(held.len(), 3);

    // A second loopback on the same device: its event names its own CQ, not this one.
    let mut other = loopback(Kind::Basic);
    other.cq.req_notify_cq(false).expect("req_notify_cq");
    other.write(9, 9);
    let foreign = other
        .channel
        .get_cq_event_timeout(EVENT_TIMEOUT)
        .expect("read")
        .expect("an event");
    assert!(foreign.is_for(&other.cq));
    assert!(!foreign.is_for(&lb.cq), "another CQ's event");
    drop(foreign);

    drop(held);
    drop(lb); // destroys the CQ: every event was acknowledged, or this would hang
}

/// A non-blocking channel reports "would block" when no event is pending.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn nonblocking_channel_would_block_without_event() {
    let mut lb = loopback(Kind::Basic);
    lb.channel.set_nonblocking(true).expect("set_nonblocking");
    lb.cq.req_notify_cq(false).expect("req_notify_cq");
    let err = lb.channel.get_cq_event().expect_err("no event pending");
    match &err.0 {
        GetCompletionEventErrorKind::Ibverbs(io) => assert_eq!(io.kind(), io::ErrorKind::WouldBlock, "{err:?}"),
        other => panic!("unexpected {other:?}"),
    }
    lb.write(4, 0x44);
    assert!(readable(lb.channel.as_raw_fd(), EVENT_TIMEOUT));
    let event = lb.channel.get_cq_event().expect("the event is pending");
    assert!(event.is_for(&lb.cq));
    lb.expect_completion(4, 0x44);
}

/// A CQ built without a completion channel cannot be armed.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn cq_without_channel_cannot_be_armed() {
    let ctx = open_test_device();
    let cq = ctx.create_cq_builder().setup_cqe(4).build().expect("CQ");
    let err = cq.req_notify_cq(false).expect_err("no channel");
    assert!(
        matches!(err.0, RequestNotifyCompletionQueueErrorKind::NoCompletionChannel),
        "{err:?}"
    );
}

/// Solicited-only arming: a successful send completion and the receive of a message without the
/// solicited bit raise no event; the receive of a solicited message, on the same arm, raises one.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn solicited_only_raises_an_event_for_a_solicited_receive_only() {
    let mut lb = loopback(Kind::Basic);
    lb.cq.req_notify_cq(true).expect("req_notify_cq(solicited_only)");
    lb.write(5, 0x55);
    lb.expect_completion(5, 0x55);
    assert!(
        lb.channel.get_cq_event_timeout(QUIET).expect("read").is_none(),
        "a send completion is not solicited"
    );

    // Messages from the receiver to the sender, whose receives complete on the armed CQ.
    let inbox = Buffer::new(&lb.pd, 2 * 64);
    let mut receives = lb.srq.start_post_recv();
    for slot in 0..2u64 {
        // SAFETY: `inbox` outlives both receives, awaited below.
        unsafe {
            receives
                .construct_wr(100 + slot)
                .setup_sge(inbox.lkey(), inbox.addr(slot as usize * 64), 64)
        };
    }
    receives.post().expect("post receives");
    let send = |lb: &mut Loopback, flags: WorkRequestFlags, byte: u8| {
        let mut guard = lb.receiver.start_post_send();
        guard.construct_wr(0, flags).setup_send().setup_inline_data(&[byte; 8]);
        guard.post().expect("post send");
    };

    send(&mut lb, WorkRequestFlags::Signaled, 0x11);
    let wcs = wait_completions(&lb.cq, 1, EVENT_TIMEOUT);
    assert!(wcs[0].is_success() && wcs[0].wr_id() == 100, "{:?}", wcs[0]);
    assert!(
        lb.channel.get_cq_event_timeout(QUIET).expect("read").is_none(),
        "a message without the solicited bit raises no event"
    );

    send(&mut lb, WorkRequestFlags::Solicited, 0x22);
    let event = lb
        .channel
        .get_cq_event_timeout(EVENT_TIMEOUT)
        .expect("get_cq_event")
        .expect("an event for the solicited message");
    assert!(event.is_for(&lb.cq), "the event names the armed CQ");
    drop(event);
    let wcs = wait_completions(&lb.cq, 1, EVENT_TIMEOUT);
    assert!(wcs[0].is_success() && wcs[0].wr_id() == 101, "{:?}", wcs[0]);
    assert_eq!(inbox.read(64, 8), [0x22; 8]);
}

/// An event for a CQ armed around this crate (a raw `ibv_req_notify_cq`) cannot name its CQ: it
/// is acknowledged at once and reported, and the CQ is then destroyed without waiting.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn event_of_a_cq_armed_raw_is_acknowledged_and_reported() {
    use sideway::ibverbs::completion::CompletionQueue;

    let mut lb = loopback(Kind::Basic);
    // SAFETY: the CQ is alive and has a completion channel.
    let ret = unsafe { rdma_mummy_sys::ibv_req_notify_cq(lb.cq.cq().as_ptr(), 0) };
    assert_eq!(ret, 0, "raw ibv_req_notify_cq");
    lb.write(6, 0x66);
    let err = lb
        .channel
        .get_cq_event()
        .expect_err("the CQ was not armed through req_notify_cq");
    match err.0 {
        GetCompletionEventErrorKind::UnknownCompletionQueue { cq } => {
            // SAFETY: only the handle's address is compared.
            let ours = unsafe { lb.cq.cq() }.as_ptr() as usize;
            assert_eq!(cq, ours);
        },
        other => panic!("unexpected {other:?}"),
    }
    lb.expect_completion(6, 0x66);
    drop(lb); // destroys the CQ: the event was acknowledged, or this would hang
}
