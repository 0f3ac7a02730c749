//! sideway 0.4.3's `ExtendedCompletionQueue` on rxe: where repeated polling goes wrong, and that
//! this crate's polling does not (UPSTREAM.md, "sideway bugs met on the way").
//!
//! sideway's `ExtendedPoller` calls `ibv_start_poll`, then `ibv_next_poll` until it returns
//! ENOENT, then `ibv_end_poll` when dropped: the sequence `ibv_create_cq_ex(3)` prescribes
//! ("If an error code is given, end_poll should still be called"). rxe's `cq_next_poll` in
//! rdma-core before 55 advanced its index before seeing the queue empty and stored it, and
//! `cq_end_poll` advanced it once more, so the consumer index overran the producer by one: the
//! next `ibv_start_poll` finds a "completion" that was never produced (rdma-core commit b78b414,
//! "rxe: fix completion queue consumer index overrun", in v55; Debian bookworm ships 44).
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{connect_rc, local_gid, open_test_device, wait_completions};
use sideway::ibverbs::completion::{ExtendedCompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::device::DeviceInfo;
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::{CompletionQueueExt, ProtectionDomainExt};
use sideway_ext::ibverbs::work_completion::WorkCompletion;

/// The first rdma-core release whose rxe does not overrun (commit b78b414).
const FIXED_IN: u32 = 55;

/// The rdma-core release of the libibverbs this process loaded, from its file name
/// (`libibverbs.so.1.14.44.0` is rdma-core 44.0).
fn rdma_core_release() -> u32 {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let path = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.contains("/libibverbs.so.1."))
        .expect("libibverbs is loaded");
    let version = path.rsplit("libibverbs.so.1.").next().expect("a versioned name");
    version
        .split('.')
        .nth(1)
        .and_then(|release| release.parse().ok())
        .unwrap_or_else(|| {
            panic!("{path}: no rdma-core release in the name");
        })
}

/// Sends one signaled message from a queue pair to itself, its send completion on `send_cq`;
/// returns once the message was received (the send's completion follows its acknowledgement).
fn one_send_completion(ctx: &Arc<DeviceContext>, send_cq: &Arc<ExtendedCompletionQueue>, wr_id: u64) -> Holder {
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let (gid_index, gid) = local_gid(ctx);
    let recv_cq = ctx.create_cq_builder().setup_cqe(16).build().expect("recv CQ");
    let srq = pd.create_srq_builder().setup_max_wr(4).build().expect("SRQ");
    let buffer = common::Buffer::new(&pd, 64);
    let mut guard = srq.start_post_recv();
    // SAFETY: `buffer` is returned in the Holder, alive as long as the queue pair.
    unsafe { guard.construct_wr(1).setup_sge(buffer.lkey(), buffer.addr(0), 64) };
    guard.post().expect("post receive");
    let mut qp = srq
        .create_qp_builder()
        .setup_send_cq(send_cq.clone())
        .setup_recv_cq(recv_cq.clone())
        .setup_max_inline_data(16)
        .build_rc()
        .expect("RC QP");
    let qpn = qp.qp_number();
    connect_rc(&mut qp, qpn, gid_index, gid, AccessFlags::LocalWrite);
    let mut guard = qp.start_post_send();
    guard
        .construct_wr(wr_id, WorkRequestFlags::Signaled)
        .setup_send()
        .setup_inline_data(b"one");
    guard.post().expect("post send");
    assert_eq!(wait_completions(&*recv_cq, 1, Duration::from_secs(60)).len(), 1);
    Holder(Box::new((qp, srq, buffer, recv_cq)))
}

/// Keeps the sender's objects alive while its CQ is polled.
struct Holder(#[allow(dead_code)] Box<dyn std::any::Any>);

/// The smallest repro: one completion, polled once through sideway's `ExtendedPoller` to its
/// end, then polled again. Correct: the queue is empty. On rxe before rdma-core 55: a completion
/// that was never produced. The bug is rxe's, not sideway's: the poller follows the man page.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn extended_poller_after_a_drained_batch_finds_nothing_unless_rxe_overruns() {
    let ctx = open_test_device();
    let cq = ctx.create_cq_builder().setup_cqe(16).build_ex().expect("extended CQ");
    let _sender = one_send_completion(&ctx, &cq, 7);

    let deadline = Instant::now() + Duration::from_secs(60);
    let poller = loop {
        // An empty CQ returns ENOENT from start_poll, which needs no end_poll: nothing moves.
        match cq.start_poll() {
            Ok(poller) => break poller,
            Err(PollCompletionQueueError::CompletionQueueEmpty) if Instant::now() < deadline => {
                std::thread::yield_now()
            },
            Err(err) => panic!("the send completion: {err}"),
        }
    };
    let first: Vec<u64> = poller.map(|wc| wc.wr_id()).collect();
    assert_eq!(first, [7], "start_poll, next_poll until ENOENT, end_poll");

    let rxe = ctx.name().starts_with("rxe");
    let release = rdma_core_release();
    let overruns = rxe && release < FIXED_IN;
    match cq.start_poll() {
        Err(PollCompletionQueueError::CompletionQueueEmpty) => {
            assert!(
                !overruns,
                "rxe of rdma-core {release} was expected to overrun, and did not"
            );
            println!(
                "{}, rdma-core {release}: empty after the drained batch, as it must be",
                ctx.name()
            );
        },
        Ok(mut phantom) => {
            let wc = phantom.next().expect("start_poll returned 0");
            let (wr_id, status) = (wc.wr_id(), wc.status());
            drop(phantom);
            assert!(
                overruns,
                "{} with rdma-core {release} handed back a completion never produced (wr_id {wr_id}, \
                 status {status}): not the rxe overrun fixed in rdma-core {FIXED_IN}",
                ctx.name()
            );
            println!(
                "{}, rdma-core {release}: the rxe overrun (a phantom completion, wr_id {wr_id}, status {status}); \
                 fixed in rdma-core {FIXED_IN}",
                ctx.name()
            );
        },
        Err(err) => panic!("start_poll: {err}"),
    };
}

/// This crate's polling (`poll_work_completions`, one `ibv_poll_cq`) on the same kind of extended
/// CQ hands each completion back once, however often it is polled, on every rdma-core.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn poll_work_completions_on_an_extended_cq_hands_each_completion_back_once() {
    let ctx = open_test_device();
    let cq = ctx.create_cq_builder().setup_cqe(16).build_ex().expect("extended CQ");
    let _sender = one_send_completion(&ctx, &cq, 7);

    let polled = wait_completions(&*cq, 1, Duration::from_secs(60));
    assert_eq!(polled.len(), 1);
    assert_eq!(polled[0].wr_id(), 7);
    assert!(polled[0].is_success(), "{:?}", polled[0]);
    let mut wcs = [WorkCompletion::default(); 4];
    for _ in 0..3 {
        assert!(
            cq.poll_work_completions(&mut wcs).expect("poll").is_empty(),
            "a completion came back"
        );
    }
}
