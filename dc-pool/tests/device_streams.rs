//! The streams policy on the software ConnectX (profile cx6dx, the default, has DCI streams):
//! each request addressed on its destination's stream (the device's trace), a stream in error
//! reset only once flushed while the other streams go on, and an initiator in ERR (too many
//! streams in error) recovered once everything it held was reported.
mod device;

use device::*;
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext_dc_pool::types::{
    DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId, DestinationState, PostToDestinationErrorKind,
};
use sideway_ext_dc_pool::DcInitiatorPool;

/// Two destinations (their target indices) on one initiator and different streams: (x, its
/// stream), (y, its stream), the initiator.
fn two_streams_of_one_initiator(pool: &DcInitiatorPool, ids: &[DestinationId]) -> ((usize, u16), (usize, u16), usize) {
    let mut seen: Vec<(usize, usize, u16)> = Vec::new();
    for (t, &id) in ids.iter().enumerate() {
        let (initiator, stream) = pool.assignment(id).expect("streams bind at once");
        let stream = stream.expect("an initiator with streams gives a stream");
        if let Some(&(other, _, other_stream)) = seen.iter().find(|(_, i, s)| *i == initiator && *s != stream) {
            return ((other, other_stream), (t, stream), initiator);
        }
        seen.push((t, initiator, stream));
    }
    panic!("the hash spreads destinations over streams: {seen:?}");
}

/// On a ConnectX-6 Dx (the device's default profile, named here): DCI streams.
#[test]
fn streams() {
    on_device!(("SOFTMLX5_PROFILE", "cx6dx"));
    checks!(
        the_streams_policy_addresses_each_request_on_the_destinations_stream,
        a_stream_in_error_is_reset_only_once_flushed_and_other_streams_completions_count,
        a_stream_reset_refused_in_err_recovers_the_initiator_once_everything_completed,
        a_stream_error_leaves_the_other_streams_running_and_is_reset_after_its_flush,
        too_many_stream_errors_move_the_initiator_to_err_and_it_is_recovered,
    );
}

fn the_streams_policy_addresses_each_request_on_the_destinations_stream() {
    let fabric = Fabric::new(16);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Streams, 2, 16);
    let t = (0..ids.len())
        .find(|&t| pool.assignment(ids[t]).expect("bound").1 != Some(0))
        .expect("a destination off stream 0");
    let zero = (0..ids.len())
        .find(|&t| pool.assignment(ids[t]).expect("bound").1 == Some(0))
        .expect("a destination on stream 0");
    let id = ids[t];
    let (initiator, stream) = pool.assignment(id).expect("bound");
    let stream = stream.expect("a stream");
    assert!(stream < 4 && initiator < 2);
    assert!(matches!(
        pool.start_post_send(id).map(|_| ()).unwrap_err().0,
        PostToDestinationErrorKind::StreamsMismatch { streams_pool: true }
    ));
    device().clear_trace();
    let mut guard = pool.start_post_send_on_stream(id).expect("bound");
    assert_eq!(guard.initiator(), (initiator, Some(stream)));
    // SAFETY: both regions outlive the completions polled below.
    unsafe {
        guard
            .construct_wr(7, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_write(fabric.remote.mr.rkey(), fabric.slot(t, 0))
            .setup_sge(fabric.local.mr.lkey(), fabric.local.addr(7 * SLOT), 64)
    };
    guard
        .construct_wr(8, WorkRequestFlags::none())
        .expect("room")
        .setup_write(fabric.remote.mr.rkey(), fabric.slot(t, 64))
        .setup_inline_data(b"s");
    guard.post().expect("post");
    assert_eq!(poll_reports(&mut pool, 2), [completed(id, 7), completed(id, 8)]);
    write(&mut pool, &fabric, ids[zero], zero, &[9]).expect("post");
    assert_eq!(poll_reports(&mut pool, 1), [completed(ids[zero], 9)]);
    let sent: Vec<_> = requests()
        .iter()
        .map(|e| (e.qp_number, e.peer, e.dc_key, e.stream, e.remote_addr, e.signaled))
        .collect();
    let (zero_initiator, _) = pool.assignment(ids[zero]).expect("bound");
    assert_eq!(
        sent,
        [
            (
                qpn(&pool, initiator),
                fabric.dct_number(t),
                KEY,
                stream,
                fabric.slot(t, 0),
                1
            ),
            (
                qpn(&pool, initiator),
                fabric.dct_number(t),
                KEY,
                stream,
                fabric.slot(t, 64),
                1
            ),
            (
                qpn(&pool, zero_initiator),
                fabric.dct_number(zero),
                KEY,
                0,
                fabric.slot(zero, 0),
                1
            ),
        ]
    );
    assert_eq!(fabric.read_slot(t, 0, 64), vec![7; 64]);
    assert_eq!(fabric.read_slot(t, 64, 1), b"s");
}

fn a_stream_in_error_is_reset_only_once_flushed_and_other_streams_completions_count() {
    let fabric = Fabric::new(16);
    let (mut pool, cq, ids) = fabric.fed_pool(DcPoolPolicy::Streams, 2, 16);
    let ((tx, xs), (ty, ys), initiator) = two_streams_of_one_initiator(&pool, &ids);
    let (x, y) = (ids[tx], ids[ty]);
    stall(&pool, initiator, true);
    // x's second request behind y's (another target: it waits for the window to drain), so
    // that it leaves after x's error is known. softmlx5 executes a stream's requests already
    // in flight behind an error (a ConnectX flushes them): see the report of this move.
    write_some_bad(&mut pool, &fabric, x, tx, &[1], &[1]);
    write_some_bad(&mut pool, &fabric, y, ty, &[3], &[]);
    write_some_bad(&mut pool, &fabric, x, tx, &[2], &[]);
    stall(&pool, initiator, false);
    // Completions one at a time: until x's flush is taken, x's stream is not reset.
    let mut events = Vec::new();
    let mut refused_while_flushing = false;
    while reports(&events) < 3 {
        events.extend(next(&mut pool, &cq));
        let x_failed = without_syndromes(&events).contains(&failed(x, 1, REM_ACCESS_ERR));
        if x_failed && pool.outstanding(x) > 0 {
            let recovering = DcPoolWouldBlock::Recovering {
                initiator,
                stream: Some(xs),
            };
            assert_eq!(would_block(&mut pool, x), recovering);
            assert_eq!(
                pool.destination_state(x),
                DestinationState::Recovering {
                    initiator,
                    stream: Some(xs)
                }
            );
            refused_while_flushing = true;
        }
    }
    assert!(refused_while_flushing, "the error came before its flush: {events:?}");
    let events = without_syndromes(&events);
    let ready = events.iter().position(|e| *e == DcPoolEvent::Ready { destination: x });
    let flushed = events.iter().position(|e| *e == failed(x, 2, WR_FLUSH_ERR));
    assert!(ready.is_some() && flushed < ready, "Ready after the flush: {events:?}");
    assert!(
        events.contains(&completed(y, 3)),
        "the other stream's completion counts: {events:?}"
    );
    assert_eq!(reports(&events), 3, "{events:?}");
    assert_eq!(
        fabric.read_slot(tx, 0, 64),
        vec![0; 64],
        "neither of x's requests executed"
    );
    assert_eq!(
        pool.destination_state(x),
        DestinationState::Holds {
            initiator,
            stream: Some(xs)
        }
    );
    assert_ne!(xs, ys);
    // The stream was reset: x's next request executes.
    write(&mut pool, &fabric, x, tx, &[5]).expect("post after the reset");
    write(&mut pool, &fabric, y, ty, &[4]).expect("post");
    let mut events = next(&mut pool, &cq);
    events.extend(next(&mut pool, &cq));
    events.sort_by_key(|e| format!("{e:?}"));
    let mut expected = vec![completed(x, 5), completed(y, 4)];
    expected.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(events, expected);
    assert_eq!(fabric.read_slot(tx, 0, 64), vec![5; 64]);
    assert_eq!(fabric.read_slot(ty, 0, 64), vec![4; 64]);
}

fn a_stream_reset_refused_in_err_recovers_the_initiator_once_everything_completed() {
    let fabric = Fabric::new(16);
    // One stream in error moves an initiator to ERR (2^0).
    let (mut pool, cq, ids) = fabric.fed(&mut fabric.streams_pool_builder(DcPoolPolicy::Streams, 2, 16, 2, 0));
    let ((tx, _), (ty, _), initiator) = two_streams_of_one_initiator(&pool, &ids);
    let (x, y) = (ids[tx], ids[ty]);
    stall(&pool, initiator, true);
    write_some_bad(&mut pool, &fabric, x, tx, &[1], &[1]);
    write_some_bad(&mut pool, &fabric, y, ty, &[2, 3], &[]);
    stall(&pool, initiator, false);
    let mut events = Vec::new();
    let mut refused = false;
    while reports(&events) < 3 {
        events.extend(next(&mut pool, &cq));
        let x_failed = without_syndromes(&events).contains(&failed(x, 1, REM_ACCESS_ERR));
        if x_failed && reports(&events) < 3 {
            // The stream reset is refused (ERR): the whole initiator waits for its flush.
            assert!(matches!(
                would_block(&mut pool, y),
                DcPoolWouldBlock::Recovering { stream: None, .. }
            ));
            refused = true;
        }
    }
    let events = without_syndromes(&events);
    assert!(events.contains(&failed(x, 1, REM_ACCESS_ERR)), "{events:?}");
    // y's requests: each executed (Completed) or flushed by the ERR (Retry), once.
    for wr_id in [2, 3] {
        let done = events.contains(&completed(y, wr_id));
        let retry = events.contains(&DcPoolEvent::Retry { destination: y, wr_id });
        assert!(done ^ retry, "{wr_id}: {events:?}");
    }
    if refused {
        assert_eq!(
            events.last(),
            Some(&DcPoolEvent::Ready { destination: y }),
            "{events:?}"
        );
    }
    // Recovered as a whole: both streams post again.
    write(&mut pool, &fabric, y, ty, &[6]).expect("post after recovery");
    write(&mut pool, &fabric, x, tx, &[7]).expect("post after recovery");
    let mut events = next(&mut pool, &cq);
    events.extend(next(&mut pool, &cq));
    assert!(
        events.contains(&completed(y, 6)) && events.contains(&completed(x, 7)),
        "{events:?}"
    );
    assert_eq!(fabric.read_slot(tx, 0, 64), vec![7; 64]);
}

fn a_stream_error_leaves_the_other_streams_running_and_is_reset_after_its_flush() {
    let fabric = Fabric::new(40);
    let mut pool = fabric
        .streams_pool_builder(DcPoolPolicy::Streams, 2, 32, 3, 1)
        .build()
        .expect("pool");
    let ids: Vec<_> = (0..40).map(|t| pool.add_destination(fabric.endpoint(t))).collect();
    let qp0 = qpn(&pool, 0);
    // Request 2 of one destination of initiator 0 is refused by its target.
    let t = on_different_streams(&pool, &ids, 0, 1)[0];
    let outcome = run(&mut pool, &fabric, &ids, 10, &[(t, 2)], |_, _| {});
    assert_eq!(outcome.reported.len(), 400);
    let failed: Vec<_> = outcome
        .reported
        .iter()
        .filter(|(_, e)| matches!(e, DcPoolEvent::Failed { .. }))
        .collect();
    // The refused request fails; the destination's requests flushed behind it fail with it.
    let refused: Vec<_> = failed
        .iter()
        .filter(|(_, e)| {
            matches!(
                e,
                DcPoolEvent::Failed {
                    status: REM_ACCESS_ERR,
                    ..
                }
            )
        })
        .map(|(k, _)| **k)
        .collect();
    assert_eq!(refused, [(t, 2)], "{failed:?}");
    assert!(
        failed.iter().all(|(k, e)| k.0 == t
            && (k.1 == 2
                || matches!(
                    e,
                    DcPoolEvent::Failed {
                        status: WR_FLUSH_ERR,
                        ..
                    }
                ))),
        "{failed:?}"
    );
    assert_eq!(qpn(&pool, 0), qp0);
    for u in (0..40).filter(|&u| u != t) {
        assert_eq!(outcome.reported[&(u, 9)], completed(ids[u], u as u64 * 10 + 9));
    }
    outcome.assert_written(&fabric, 10);
}

fn too_many_stream_errors_move_the_initiator_to_err_and_it_is_recovered() {
    let fabric = Fabric::new(40);
    let mut pool = fabric
        .streams_pool_builder(DcPoolPolicy::Streams, 1, 32, 2, 1)
        .build()
        .expect("pool");
    let ids: Vec<_> = (0..40).map(|t| pool.add_destination(fabric.endpoint(t))).collect();
    // Two streams refuse a request each: with log_num_errored 1, the initiator goes to ERR.
    let bad: Vec<(usize, u64)> = on_different_streams(&pool, &ids, 0, 2)
        .into_iter()
        .map(|t| (t, 1))
        .collect();
    let outcome = run(&mut pool, &fabric, &ids, 5, &bad, |_, _| {});
    assert_eq!(outcome.reported.len(), 200);
    let failed: Vec<_> = outcome
        .reported
        .iter()
        .filter(|(_, e)| {
            matches!(
                e,
                DcPoolEvent::Failed {
                    status: REM_ACCESS_ERR,
                    ..
                }
            )
        })
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert!(
        outcome.retried > 0,
        "the ERR flushed the other streams' requests: handed back"
    );
    // Recovered as a whole: a request of every stream executes.
    for (t, &id) in ids.iter().enumerate() {
        write(&mut pool, &fabric, id, t, &[500 + t as u64]).expect("post after recovery");
    }
    let events = poll_reports(&mut pool, 40);
    assert!(
        events.iter().all(|e| matches!(e, DcPoolEvent::Completed { .. })),
        "{events:?}"
    );
    assert_eq!(fabric.read_slot(39, 0, 64), vec![pattern(539); 64]);
}
