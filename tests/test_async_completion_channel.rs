//! Completion events awaited from tokio (feature `tokio`) on a real device (SoftRoCE in the VM):
//! a task sleeps on the channel, a peer sends, the task wakes within a bound, drains and
//! re-arms; a wait that is cancelled consumes no event, and everything tears down without a hang
//! or a leaked descriptor.
#![cfg(feature = "tokio")]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{connect_rc, local_gid, open_test_device, wait_completions};
use rdma_mummy_sys::ibv_sge;
use serial_test::serial;
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::async_completion_channel::{AsyncCompletionChannel, CreateAsyncCompletionChannelErrorKind};
use sideway_ext::ibverbs::extension::{CompletionQueueEventExt, CompletionQueueExt, ProtectionDomainExt};
use sideway_ext::ibverbs::post_send_guard::ReliableConnection;
use sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair;
use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;
use sideway_ext::ibverbs::work_completion::WorkCompletion;

/// How soon after the send the sleeping task must be awake, before [`wake_bound`] stretches it.
const WAKE_BOUND: Duration = Duration::from_secs(2);
/// How long a task is left waiting to show that it sleeps.
const QUIET: Duration = Duration::from_millis(300);
const TIMEOUT: Duration = Duration::from_secs(30);

/// [`WAKE_BOUND`] stretched for slow runs: under valgrind memcheck (`scripts/memcheck`) a woken
/// task waits its turn among the process's threads, seconds at times.
fn wake_bound() -> Duration {
    common::slowed(WAKE_BOUND)
}

/// The receiving side, shared with the waiting task: its receives (through `srq`) complete on
/// `cq`, an event CQ of `channel`.
struct Receiver {
    // The queue pair first: destroyed before the CQ and the SRQ it holds.
    _qp: SharedReceiveQueuePair<ReliableConnection>,
    srq: Arc<SharedReceiveQueue>,
    cq: Arc<BasicCompletionQueue>,
    channel: AsyncCompletionChannel,
    buffer: common::Buffer,
}

/// The sending side, as a remote host would be: its own queue pair and plain CQ.
struct Peer {
    qp: SharedReceiveQueuePair<ReliableConnection>,
    cq: Arc<BasicCompletionQueue>,
}

/// A connected pair on the test device. Must run inside a tokio runtime (the channel registers
/// with its reactor).
fn pair(ctx: &Arc<DeviceContext>) -> (Receiver, Peer) {
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let (gid_index, gid) = local_gid(ctx);
    let channel = AsyncCompletionChannel::new(ctx.create_comp_channel().expect("channel")).expect("async channel");
    let cq = ctx
        .create_cq_builder()
        .setup_cqe(64)
        .setup_comp_channel(channel.channel(), 0)
        .build()
        .expect("event CQ");
    let peer_cq = ctx.create_cq_builder().setup_cqe(64).build().expect("peer CQ");
    let srq = pd.create_srq_builder().setup_max_wr(16).build().expect("SRQ");
    let peer_srq = pd.create_srq_builder().setup_max_wr(4).build().expect("peer SRQ");
    let mut qp = srq
        .create_qp_builder()
        .setup_send_cq(cq.clone())
        .setup_recv_cq(cq.clone())
        .build_rc()
        .expect("receiver");
    let mut peer = peer_srq
        .create_qp_builder()
        .setup_send_cq(peer_cq.clone())
        .setup_recv_cq(peer_cq.clone())
        .setup_max_inline_data(64)
        .build_rc()
        .expect("peer");
    let (rq, pq) = (qp.qp_number(), peer.qp_number());
    connect_rc(&mut qp, pq, gid_index, gid, AccessFlags::LocalWrite);
    connect_rc(&mut peer, rq, gid_index, gid, AccessFlags::LocalWrite);
    let buffer = common::Buffer::new(&pd, 8 * 64);
    let receiver = Receiver {
        _qp: qp,
        srq,
        cq,
        channel,
        buffer,
    };
    for slot in 0..8 {
        receiver.post_receive(slot);
    }
    (receiver, Peer { qp: peer, cq: peer_cq })
}

impl Receiver {
    fn post_receive(&self, slot: u64) {
        let sge = ibv_sge {
            addr: self.buffer.addr(slot as usize * 64),
            length: 64,
            lkey: self.buffer.lkey(),
        };
        // SAFETY: the slot lies in the buffer, which outlives the SRQ's use of it.
        unsafe { self.srq.post_recv_one(slot, &[sge]) }.expect("post_recv_one");
    }

    /// Drains the event CQ: the receive completions' payloads, each receive reposted.
    fn drain(&self) -> Vec<Vec<u8>> {
        let mut wcs = [WorkCompletion::default(); 16];
        let mut got = Vec::new();
        loop {
            let polled = self.cq.poll_work_completions(&mut wcs).expect("poll");
            if polled.is_empty() {
                return got;
            }
            for wc in polled {
                assert!(wc.is_success(), "{wc:?}");
                let slot = wc.wr_id();
                got.push(self.buffer.read(slot as usize * 64, wc.byte_len() as usize));
                self.post_receive(slot);
            }
        }
    }
}

impl Peer {
    /// Sends `payload` inline; its own completion is awaited on its plain CQ.
    fn send(&mut self, wr_id: u64, payload: &[u8]) {
        self.qp
            .post_send_one(wr_id, WorkRequestFlags::Signaled, |wr| {
                wr.setup_send().setup_inline_data(payload)
            })
            .expect("post_send_one");
        assert!(wait_completions(&*self.cq, 1, TIMEOUT)[0].is_success());
    }
}

/// Open descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|dir| dir.count()).unwrap_or(0)
}

/// A task sleeps on the channel; the peer sends; the task wakes within the bound, its event
/// names the CQ, it re-arms and drains exactly the message; the next send wakes it again (the
/// re-arm took).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
async fn a_sleeping_task_wakes_when_the_peer_sends_then_drains_and_rearms() {
    let ctx = open_test_device();
    let (receiver, mut peer) = pair(&ctx);
    let receiver = Arc::new(receiver);
    receiver.cq.req_notify_cq(false).expect("arm");
    assert!(receiver.drain().is_empty(), "nothing sent yet");
    for round in 0..3u64 {
        let waiter = {
            let receiver = receiver.clone();
            tokio::spawn(async move {
                let event = receiver.channel.wait().await.expect("wait");
                let woke = Instant::now();
                assert!(event.is_for(&*receiver.cq), "the event names the CQ");
                // Re-arm, then drain: a completion after the drain raises the next event.
                event.cq().req_notify_cq(false).expect("re-arm");
                drop(event);
                (woke, receiver.drain())
            })
        };
        tokio::time::sleep(QUIET).await;
        assert!(!waiter.is_finished(), "round {round}: the task woke with nothing sent");
        let payload = format!("round {round}");
        let sent_at = Instant::now();
        peer.send(round, payload.as_bytes());
        let (woke, drained) = tokio::time::timeout(TIMEOUT, waiter)
            .await
            .expect("the task woke")
            .expect("the task did not panic");
        let latency = woke.saturating_duration_since(sent_at);
        assert!(latency < wake_bound(), "round {round}: woke {latency:?} after the send");
        assert_eq!(drained, [payload.into_bytes()], "round {round}: exactly the message");
    }
}

/// A wait dropped before its event (by a timeout, by losing a `select!`) consumes nothing: the
/// event of a later send goes to the next wait, and one that arrived while nobody waited is read
/// at once. Then everything is dropped: no hang (a CQ with an unacknowledged event would block
/// its destroy) and no descriptor left open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
async fn a_cancelled_wait_loses_no_event_and_leaks_nothing() {
    let ctx = open_test_device();
    // Warm: the first context use may open descriptors that stay (e.g. the device's files).
    drop(pair(&ctx));
    let fds_before = open_fds();
    let (receiver, mut peer) = pair(&ctx);
    receiver.cq.req_notify_cq(false).expect("arm");

    // Cancelled by a timeout, and by losing a select!.
    assert!(tokio::time::timeout(QUIET, receiver.channel.wait()).await.is_err());
    tokio::select! {
        _ = receiver.channel.wait() => panic!("no event was due"),
        _ = tokio::time::sleep(QUIET) => {},
    }
    // A send after the cancelled waits wakes the next one.
    peer.send(1, b"after a cancel");
    let event = tokio::time::timeout(wake_bound(), receiver.channel.wait())
        .await
        .expect("woken within the bound")
        .expect("event");
    event.cq().req_notify_cq(false).expect("re-arm");
    drop(event);
    assert_eq!(receiver.drain(), [b"after a cancel".to_vec()]);

    // An event raised while a wait is started and dropped unpolled, then read by the next one.
    peer.send(2, b"nobody waiting");
    drop(receiver.channel.wait());
    let event = tokio::time::timeout(wake_bound(), receiver.channel.wait())
        .await
        .expect("the pending event is read at once")
        .expect("event");
    event.cq().req_notify_cq(false).expect("re-arm");
    assert_eq!(receiver.drain(), [b"nobody waiting".to_vec()]);
    // The event is still held: the CQ is alive until it is acknowledged.
    drop(receiver);
    drop(peer);
    // Teardown (acknowledging the event, destroying the CQ, deregistering and closing the
    // channel) must finish.
    tokio::time::timeout(TIMEOUT, tokio::task::spawn_blocking(move || drop(event)))
        .await
        .expect("teardown did not hang")
        .expect("teardown did not panic");
    assert_eq!(open_fds(), fds_before, "every descriptor of the pair was closed");
}

/// Outside a tokio runtime, or in one without its I/O driver, creating the async channel is the
/// typed NoReactor, not a panic.
#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn without_a_reactor_the_async_channel_is_a_typed_error() {
    let ctx = open_test_device();
    let err = AsyncCompletionChannel::new(ctx.create_comp_channel().expect("channel")).unwrap_err();
    assert!(
        matches!(err.0, CreateAsyncCompletionChannelErrorKind::NoReactor),
        "{err:?}"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime without I/O");
    let err = runtime
        .block_on(async { AsyncCompletionChannel::new(ctx.create_comp_channel().expect("channel")) })
        .unwrap_err();
    assert!(
        matches!(err.0, CreateAsyncCompletionChannelErrorKind::NoReactor),
        "{err:?}"
    );
}
