//! Asynchronous events awaited from tokio (feature `tokio`) on a real device (SoftRoCE in the
//! VM): a task sleeps on the context's events, a shared receive queue drops below its armed
//! limit, the task wakes within a bound with that queue's limit event; a wait that is cancelled
//! consumes no event; outside a runtime the waiter is refused with a typed error; and what the
//! refill rule guards against: a datagram that finds the shared receive queue empty is lost, with
//! the limit event pending all along.
#![cfg(feature = "tokio")]
#[path = "../examples/common/bring_up.rs"]
#[allow(dead_code)] // this file brings up UD only
mod bring_up;
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bring_up::UdBringUp;
use common::{address_of, connect_rc, local_gid, open_test_device, wait_completions, Buffer};
use rdma_mummy_sys::ibv_sge;
use serial_test::serial;
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::async_event::{AsyncEventElement, AsyncEventType};
use sideway_ext::ibverbs::async_event_waiter::{AsyncEventWaiter, CreateAsyncEventWaiterErrorKind};
use sideway_ext::ibverbs::extension::{CompletionQueueExt, DeviceContextExt, ProtectionDomainExt};
use sideway_ext::ibverbs::post_send_guard::ReliableConnection;
use sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair;
use sideway_ext::ibverbs::shared_receive_queue::{SharedReceiveQueue, SharedReceiveQueueModification};
use sideway_ext::ibverbs::work_completion::WorkCompletion;

/// How soon after the send the sleeping task must be awake, before [`wake_bound`] stretches it.
const WAKE_BOUND: Duration = Duration::from_secs(5);
/// How long a task is left waiting to show that it sleeps.
const QUIET: Duration = Duration::from_millis(300);
const TIMEOUT: Duration = Duration::from_secs(30);

/// [`WAKE_BOUND`] stretched for slow runs: under valgrind memcheck (`scripts/memcheck`) a woken
/// task waits its turn among the process's threads, seconds at times.
fn wake_bound() -> Duration {
    common::slowed(WAKE_BOUND)
}

/// A shared receive queue with 10 receives posted and its limit armed at 7, a queue pair on it,
/// and a connected sender.
struct Limited {
    sender: SharedReceiveQueuePair<ReliableConnection>,
    _receiver: SharedReceiveQueuePair<ReliableConnection>,
    send_cq: Arc<BasicCompletionQueue>,
    recv_cq: Arc<BasicCompletionQueue>,
    srq: Arc<SharedReceiveQueue>,
    _buffer: Buffer,
}

fn limited(ctx: &Arc<DeviceContext>) -> Limited {
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let (gid_index, gid) = local_gid(ctx);
    let send_cq = ctx.create_cq_builder().setup_cqe(64).build().expect("send CQ");
    let recv_cq = ctx.create_cq_builder().setup_cqe(64).build().expect("receive CQ");
    let srq = pd.create_srq_builder().setup_max_wr(32).build().expect("SRQ");
    let sender_srq = pd.create_srq_builder().setup_max_wr(4).build().expect("sender SRQ");
    let buffer = Buffer::new(&pd, 10 * 64);
    for slot in 0..10u64 {
        let sge = ibv_sge {
            addr: buffer.addr(slot as usize * 64),
            length: 64,
            lkey: buffer.lkey(),
        };
        // SAFETY: the slot lies in the buffer, which outlives the SRQ's use of it (field order).
        unsafe { srq.post_recv_one(slot, &[sge]) }.expect("post_recv_one");
    }
    srq.modify(SharedReceiveQueueModification::ArmLimit(7)).expect("arm");
    let mut receiver = srq
        .create_qp_builder()
        .setup_send_cq(send_cq.clone())
        .setup_recv_cq(recv_cq.clone())
        .build_rc()
        .expect("receiver");
    let mut sender = sender_srq
        .create_qp_builder()
        .setup_send_cq(send_cq.clone())
        .setup_recv_cq(send_cq.clone())
        .setup_max_inline_data(64)
        .build_rc()
        .expect("sender");
    let (rq, sq) = (receiver.qp_number(), sender.qp_number());
    connect_rc(&mut receiver, sq, gid_index, gid, AccessFlags::LocalWrite);
    connect_rc(&mut sender, rq, gid_index, gid, AccessFlags::LocalWrite);
    Limited {
        sender,
        _receiver: receiver,
        send_cq,
        recv_cq,
        srq,
        _buffer: buffer,
    }
}

impl Limited {
    /// Sends `count` messages, each waited for on both sides: `count` receives consumed.
    fn consume(&mut self, count: usize) {
        for i in 0..count {
            self.sender
                .post_send_one(i as u64, WorkRequestFlags::Signaled, |wr| {
                    wr.setup_send().setup_inline_data(b"limit")
                })
                .expect("post send");
            assert!(wait_completions(&*self.send_cq, 1, TIMEOUT)[0].is_success());
            assert!(wait_completions(&*self.recv_cq, 1, TIMEOUT)[0].is_success());
        }
    }
}

/// The task sleeps on the waiter (still pending after a quiet spell), 4 receives are consumed
/// (10 posted, armed at 7), and it wakes within the bound with the SRQ's limit event; exactly one
/// event, and the limit reads 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
async fn a_task_sleeping_on_async_events_wakes_on_the_srq_limit() {
    let ctx = open_test_device();
    let mut setup = limited(&ctx);
    let waiter = Arc::new(AsyncEventWaiter::new(ctx.async_event_reader()).expect("waiter"));
    let task = tokio::spawn({
        let waiter = Arc::clone(&waiter);
        async move {
            let event = waiter.wait().await.expect("wait");
            (event.event_type(), event.element(), Instant::now())
        }
    });
    tokio::time::sleep(QUIET).await;
    assert!(!task.is_finished(), "the task woke with nothing to read");

    let sent = Instant::now();
    tokio::task::block_in_place(|| setup.consume(4));
    let (event_type, element, woke) = tokio::time::timeout(wake_bound(), task)
        .await
        .expect("the task woke within the bound")
        .expect("the task");
    assert_eq!(event_type, AsyncEventType::SharedReceiveQueueLimitReached);
    assert_eq!(element, AsyncEventElement::SharedReceiveQueue(setup.srq.id()));
    assert!(woke >= sent);
    assert_eq!(setup.srq.query().expect("query").srq_limit, 0, "disarmed by the event");
    assert!(waiter.try_read().expect("try_read").is_none(), "exactly one event");
}

/// A wait dropped by a timeout consumes no event: the event raised later is there for
/// `try_read`, and for a `wait` after a re-arm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
async fn a_cancelled_wait_consumes_no_event() {
    let ctx = open_test_device();
    let mut setup = limited(&ctx);
    let waiter = AsyncEventWaiter::new(ctx.async_event_reader()).expect("waiter");
    assert!(
        tokio::time::timeout(QUIET, waiter.wait()).await.is_err(),
        "nothing to read yet"
    );
    tokio::task::block_in_place(|| setup.consume(4));
    let deadline = Instant::now() + wake_bound();
    let event = loop {
        if let Some(event) = waiter.try_read().expect("try_read") {
            break event;
        }
        assert!(Instant::now() < deadline, "no limit event after the cancelled wait");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(event.event_type(), AsyncEventType::SharedReceiveQueueLimitReached);
    drop(event);

    // 6 still posted: armed at 5, two more consumed (4 is below 5), a second event through wait().
    setup
        .srq
        .modify(SharedReceiveQueueModification::ArmLimit(5))
        .expect("re-arm");
    tokio::task::block_in_place(|| setup.consume(2));
    let event = tokio::time::timeout(wake_bound(), waiter.wait())
        .await
        .expect("woke")
        .expect("wait");
    assert_eq!(event.event_type(), AsyncEventType::SharedReceiveQueueLimitReached);
    assert_eq!(event.element(), AsyncEventElement::SharedReceiveQueue(setup.srq.id()));
}

/// Outside a tokio runtime the waiter is refused as NoReactor (not a panic).
#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn a_waiter_outside_a_runtime_is_no_reactor() {
    let ctx = open_test_device();
    let err = AsyncEventWaiter::new(ctx.async_event_reader()).unwrap_err();
    assert!(matches!(err.0, CreateAsyncEventWaiterErrorKind::NoReactor), "{err:?}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime without I/O");
    let err = runtime.block_on(async { AsyncEventWaiter::new(ctx.async_event_reader()).unwrap_err() });
    assert!(matches!(err.0, CreateAsyncEventWaiterErrorKind::NoReactor), "{err:?}");
}

/// Why the limit event must be looked at on every drain: 4 receives posted, the limit armed at 2,
/// 5 datagrams sent, each send completing successfully. The first 3 arrive, the limit event is
/// pending from the third on, the 4th takes the last receive and the 5th finds the queue empty:
/// it is dropped without a completion or an error anywhere (UD has no retransmission), while a
/// server that had read the pending event after its drain would have refilled in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
async fn a_datagram_that_finds_the_srq_empty_is_lost_with_the_limit_event_pending() {
    const QKEY: u32 = 0x600d;
    let ctx = open_test_device();
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let (gid_index, gid) = local_gid(&ctx);
    let waiter = AsyncEventWaiter::new(ctx.async_event_reader()).expect("waiter");
    let cq = ctx.create_cq_builder().setup_cqe(64).build().expect("CQ");
    let srq = pd.create_srq_builder().setup_max_wr(16).build().expect("SRQ");
    let sender_srq = pd.create_srq_builder().setup_max_wr(4).build().expect("sender SRQ");
    let buffer = Buffer::new(&pd, 4 * 128);
    for slot in 0..4u64 {
        let sge = ibv_sge {
            addr: buffer.addr(slot as usize * 128),
            length: 128,
            lkey: buffer.lkey(),
        };
        // SAFETY: the slot lies in the buffer, which outlives the SRQ's use of it.
        unsafe { srq.post_recv_one(slot, &[sge]) }.expect("post_recv_one");
    }
    srq.modify(SharedReceiveQueueModification::ArmLimit(2)).expect("arm");
    let build = |srq: &Arc<SharedReceiveQueue>| {
        let mut qp = srq
            .create_qp_builder()
            .setup_send_cq(cq.clone())
            .setup_recv_cq(cq.clone())
            .setup_max_inline_data(64)
            .build_ud()
            .expect("UD");
        UdBringUp::new(1, QKEY).bring_up(&ctx, &mut qp).expect("bring up");
        qp
    };
    let (receiver, mut sender) = (build(&srq), build(&sender_srq));
    let ah = pd.create_ah(&address_of(gid_index, gid)).expect("AH");
    let mut received = 0;
    for i in 0..5u64 {
        sender
            .post_send_one(i, WorkRequestFlags::Signaled, |wr| {
                wr.setup_send()
                    .setup_ud_addr(&ah, receiver.qp_number(), QKEY)
                    .setup_inline_data(b"datagram")
            })
            .expect("post send");
        // The send completes (successfully) whether or not the datagram finds a receive.
        let deadline = Instant::now() + TIMEOUT;
        let mut sent = false;
        while !sent {
            let mut wcs = [WorkCompletion::default(); 4];
            for wc in cq.poll_work_completions(&mut wcs).expect("poll") {
                assert!(wc.is_success(), "{wc:?}");
                if wc.qp_number() == sender.qp_number() {
                    sent = true;
                } else {
                    received += 1;
                }
            }
            assert!(Instant::now() < deadline, "send {i} did not complete");
        }
        if i == 2 {
            // 3 consumed, 1 left, below the limit of 2: the event is there to be read.
            let deadline = Instant::now() + wake_bound();
            while received < 3 {
                let mut wcs = [WorkCompletion::default(); 4];
                received += cq.poll_work_completions(&mut wcs).expect("poll").len();
                assert!(Instant::now() < deadline, "datagram {received} did not arrive");
            }
            let event = tokio::time::timeout(wake_bound(), waiter.wait())
                .await
                .expect("the limit event")
                .expect("wait");
            assert_eq!(event.event_type(), AsyncEventType::SharedReceiveQueueLimitReached);
        }
    }
    // Whatever was still on its way: the 4th datagram arrives, the 5th never does.
    tokio::time::sleep(QUIET).await;
    let mut wcs = [WorkCompletion::default(); 8];
    received += cq.poll_work_completions(&mut wcs).expect("poll").len();
    assert_eq!(received, 4, "4 receives posted, 5 datagrams sent: exactly one lost");
    assert_eq!(srq.query().expect("query").srq_limit, 0, "the limit fired");
}
