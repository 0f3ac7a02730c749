//! The fabric's own rules, on its engine directly (requests built by hand, no pool): order per
//! stream and reordering across streams, flushes behind an error and on an initiator in ERR,
//! the send queue's room, RESET cleaning the CQ, stream resets refused before the flush and in
//! ERR, the move to ERR after exactly 2^`log_num_errored` stream errors, a dead target's timeout.
use super::fabric::{Fabric, StreamResetRefused};
use super::request::{Operation, Payload, Request, FLUSH, REM_ACCESS, RETRY_EXC, SUCCESS};
use super::{SimulatedFabric, SimulatedMemoryRegion, SimulatedTarget};
use sideway::ibverbs::AccessFlags;

/// Where requests go: a target's rkey, memory and DCT number (read before the fabric is
/// borrowed by hand).
#[derive(Clone, Copy)]
struct Aim {
    rkey: u32,
    address: u64,
    dct_number: u32,
}

/// A fabric with one target (latency 1), its memory registered for remote writes and reads.
fn fabric(seed: u64) -> (SimulatedFabric, (SimulatedTarget, SimulatedMemoryRegion), Aim) {
    let fabric = SimulatedFabric::new(seed);
    let target = fabric
        .create_target_builder()
        .setup_memory(64)
        .build()
        .expect("a target");
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead;
    let region = target.register_memory(0..64, access).expect("a region");
    let aim = Aim {
        rkey: region.rkey(),
        address: region.address(),
        dct_number: target.dct_number(),
    };
    (fabric, (target, region), aim)
}

/// An RDMA WRITE of `wr_id` (inline) to the target, on `stream`.
fn write(target: &Aim, wr_id: u64, stream: Option<u16>) -> Request {
    Request {
        signaled: true,
        wr_id,
        operation: Operation::Write {
            rkey: target.rkey,
            remote_addr: target.address,
            imm: None,
        },
        dct_number: target.dct_number,
        dc_key: 0,
        stream,
        payload: Payload::Inline(wr_id.to_le_bytes().to_vec()),
        posted_at: 0,
    }
}

/// Polls (a tick each) until `ticks` ticks passed: every completion, as (`wr_id`, status).
fn poll_for(fabric: &mut Fabric, ticks: u64) -> Vec<(u64, u32)> {
    let mut completions = Vec::new();
    for _ in 0..ticks {
        fabric.poll(64, |_, wc| completions.push((wc.wr_id, wc.status)));
    }
    completions
}

#[test]
fn one_stream_completes_in_order_while_jitter_reorders_the_streams() {
    let run = |jitter: u64| {
        let (handle, _target, target) = fabric(7);
        let mut fabric = handle.fabric.borrow_mut();
        fabric.settings.completion_jitter = jitter;
        let initiator = fabric.add_initiator(1000, Some((2, 2)));
        for stream in 0..4u16 {
            let requests = (0..50)
                .map(|k| write(&target, u64::from(stream) * 100 + k, Some(stream)))
                .collect();
            fabric.post(initiator, requests).expect("room");
        }
        poll_for(&mut fabric, 400)
    };
    let (calm, jittery) = (run(0), run(10));
    for completions in [&calm, &jittery] {
        assert_eq!(completions.len(), 200);
        assert!(completions.iter().all(|&(_, status)| status == SUCCESS));
        for stream in 0..4 {
            let of_stream: Vec<u64> = completions
                .iter()
                .map(|&(id, _)| id)
                .filter(|id| id / 100 == stream)
                .collect();
            assert!(
                of_stream.windows(2).all(|w| w[0] < w[1]),
                "stream {stream} in order: {of_stream:?}"
            );
        }
    }
    assert_ne!(calm, jittery, "jitter reorders completions across streams");
}

#[test]
fn an_error_flushes_the_rest_and_an_initiator_in_err_flushes_what_it_is_given() {
    let (handle, _target, target) = fabric(1);
    let mut fabric = handle.fabric.borrow_mut();
    let initiator = fabric.add_initiator(16, None);
    fabric.fail_next(initiator, 0, REM_ACCESS);
    fabric
        .post(initiator, (0..3).map(|k| write(&target, k, None)).collect())
        .expect("room");
    assert_eq!(poll_for(&mut fabric, 10), [(0, REM_ACCESS), (1, FLUSH), (2, FLUSH)]);
    assert!(fabric.in_error(initiator));
    fabric
        .post(initiator, vec![write(&target, 3, None)])
        .expect("an initiator in ERR takes requests");
    assert_eq!(poll_for(&mut fabric, 10), [(3, FLUSH)]);
    assert_eq!((fabric.counters.failed, fabric.counters.flushed), (1, 3));
}

#[test]
fn the_send_queue_refuses_a_batch_beyond_its_room_until_completions_are_polled() {
    let (handle, _target, target) = fabric(2);
    let mut fabric = handle.fabric.borrow_mut();
    let initiator = fabric.add_initiator(2, None);
    fabric
        .post(initiator, (0..2).map(|k| write(&target, k, None)).collect())
        .expect("room for 2");
    assert_eq!(fabric.post(initiator, vec![write(&target, 2, None)]), Err(libc::ENOMEM));
    // Executed, but not polled: the entries are still taken.
    for _ in 0..10 {
        fabric.step();
    }
    assert_eq!(fabric.post(initiator, vec![write(&target, 2, None)]), Err(libc::ENOMEM));
    assert_eq!(poll_for(&mut fabric, 1).len(), 2);
    fabric
        .post(initiator, vec![write(&target, 2, None)])
        .expect("room again");
    assert_eq!(fabric.counters.posted, 3, "a refused batch is not posted");
}

#[test]
fn a_reset_cleans_the_cq_of_the_initiators_completions() {
    let (handle, _target, target) = fabric(3);
    let mut fabric = handle.fabric.borrow_mut();
    let initiator = fabric.add_initiator(16, None);
    let other = fabric.add_initiator(16, None);
    fabric
        .post(initiator, (0..2).map(|k| write(&target, k, None)).collect())
        .expect("room");
    fabric.post(other, vec![write(&target, 9, None)]).expect("room");
    for _ in 0..10 {
        fabric.step();
    }
    assert_eq!(fabric.recover(initiator), Ok(None));
    assert_eq!(fabric.counters.cleaned_completions, 2);
    assert_eq!(
        poll_for(&mut fabric, 1),
        [(9, SUCCESS)],
        "the other initiator's completion stays"
    );
}

#[test]
fn stream_resets_wait_for_the_flush_and_too_many_errors_move_the_initiator_to_err() {
    let (handle, _target, target) = fabric(4);
    let mut fabric = handle.fabric.borrow_mut();
    fabric.settings.error_delay = 5;
    // 2 streams; 2^1 = 2 in error move the initiator to ERR.
    let initiator = fabric.add_initiator(16, Some((1, 1)));
    fabric.fail_next(initiator, 0, REM_ACCESS);
    fabric
        .post(initiator, (0..3).map(|k| write(&target, k, Some(0))).collect())
        .expect("room");
    fabric.post(initiator, vec![write(&target, 10, Some(1))]).expect("room");
    // The error ends the tick's run of stream 0: its two others are not flushed yet.
    fabric.step();
    fabric.step();
    assert_eq!(fabric.reset_stream(initiator, 0), Err(StreamResetRefused::NotFlushed));
    assert_eq!(fabric.counters.premature_stream_resets, 1);
    let completions = poll_for(&mut fabric, 3);
    assert!(
        completions.contains(&(10, SUCCESS)),
        "the other stream goes on: {completions:?}"
    );
    assert_eq!(fabric.reset_stream(initiator, 0), Ok(()));
    assert!(
        !fabric.in_error(initiator),
        "one errored stream of two leaves it in RTS"
    );

    // Two streams in error: ERR, some ticks later, and then no stream reset.
    fabric.fail_next(initiator, 0, REM_ACCESS);
    fabric.fail_next(initiator, 1, REM_ACCESS);
    fabric
        .post(
            initiator,
            vec![write(&target, 20, Some(0)), write(&target, 21, Some(1))],
        )
        .expect("room");
    poll_for(&mut fabric, 3);
    assert!(!fabric.in_error(initiator), "the move to ERR is asynchronous");
    poll_for(&mut fabric, 5);
    assert!(fabric.in_error(initiator));
    assert_eq!(
        fabric.reset_stream(initiator, 0),
        Err(StreamResetRefused::NotReadyToSend)
    );
}

#[test]
fn exactly_two_to_the_log_num_errored_errored_streams_move_the_initiator_to_err() {
    // pyverbs `test_dc_stream_qp_recovery`: 1 << log_num_errored errors, then ERR.
    for log_num_errored in 0..=2u8 {
        let (handle, _target, target) = fabric(11);
        let mut fabric = handle.fabric.borrow_mut();
        fabric.settings.error_delay = 2;
        let initiator = fabric.add_initiator(16, Some((3, log_num_errored)));
        let errors = 1u16 << log_num_errored;
        for stream in 0..errors {
            fabric.fail_next(initiator, stream, REM_ACCESS);
            let wr_id = u64::from(stream);
            fabric
                .post(initiator, vec![write(&target, wr_id, Some(stream))])
                .expect("room");
            let completions = poll_for(&mut fabric, 10);
            assert_eq!(completions, [(wr_id, REM_ACCESS)]);
            let expected = stream + 1 == errors;
            assert_eq!(
                fabric.in_error(initiator),
                expected,
                "{} errored streams, log_num_errored {log_num_errored}",
                stream + 1
            );
        }
    }
}

#[test]
fn a_dead_target_fails_after_the_transport_timeout_with_retry_exceeded() {
    let (handle, (dead, _region), target) = fabric(5);
    dead.kill();
    let mut fabric = handle.fabric.borrow_mut();
    fabric.settings.transport_timeout = 10;
    let initiator = fabric.add_initiator(16, None);
    fabric.post(initiator, vec![write(&target, 0, None)]).expect("room");
    assert!(
        poll_for(&mut fabric, 10).is_empty(),
        "nothing answers before the timeout"
    );
    assert_eq!(poll_for(&mut fabric, 2), [(0, RETRY_EXC)]);
}

#[test]
fn a_rebuilt_initiator_s_polled_completions_free_its_send_queue() {
    let (handle, _target, target) = fabric(6);
    handle.set_kernel_without_dci_reset(true);
    let mut fabric = handle.fabric.borrow_mut();
    let initiator = fabric.add_initiator(4, None);
    let before = fabric.initiators[initiator].qp_number;
    fabric.move_to_error(initiator);
    let rebuilt = fabric.recover(initiator).expect("a rebuild");
    assert!(
        rebuilt.is_some_and(|number| number != before),
        "created again with a new number: {rebuilt:?}"
    );
    // Three queues' worth, each posted once the one before was polled.
    for round in 0..3u64 {
        let requests = (0..4).map(|k| write(&target, round * 4 + k, None)).collect();
        assert_eq!(fabric.post(initiator, requests), Ok(()), "round {round}");
        assert_eq!(poll_for(&mut fabric, 10).len(), 4, "round {round}");
    }
}

#[test]
fn the_endpoint_carries_the_key_the_target_has_now() {
    let fabric = SimulatedFabric::new(1);
    let target = fabric
        .create_target_builder()
        .setup_dc_key(0xd0c)
        .build()
        .expect("a target");
    let before = target.endpoint();
    assert_eq!(before.dc_key(), 0xd0c);
    target.set_dc_key(0xbad);
    let after = target.endpoint();
    assert_eq!(after.dc_key(), 0xbad, "{after:?}");
    assert_eq!(after.dct_number(), before.dct_number());
    assert_eq!(target.clone().endpoint(), after);
}
