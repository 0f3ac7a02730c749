//! Runs of the pool over many destinations on the software ConnectX, with faults from
//! `softmlx5::Control`: every policy writes every destination's bytes, a killed target or a
//! changed DC key ends as the pool's documentation says, SENDs wait for receives, and every
//! request is reported exactly once whatever the device did.
mod device;

use std::collections::BTreeMap;
use std::time::Duration;

use device::*;
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::ibverbs::extension::CompletionQueueExt;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext_dc_pool::types::{
    DcPoolEvent, DcPoolPolicy, DestinationId, DestinationState, PostToDestinationErrorKind,
};
use sideway_ext_dc_pool::DcInitiatorPool;

const POLICIES: [DcPoolPolicy; 4] = [
    DcPoolPolicy::Dedicated,
    DcPoolPolicy::DedicatedWithQuota { quota: 4 },
    DcPoolPolicy::Static,
    DcPoolPolicy::Streams,
];

fn pool_of(
    fabric: &Fabric, policy: DcPoolPolicy, initiators: usize, max_send_wr: u32, unreachable_after: u32,
) -> (DcInitiatorPool, Vec<DestinationId>) {
    let mut pool = fabric
        .streams_pool_builder(policy, initiators, max_send_wr, 2, 0)
        .setup_unreachable_after(unreachable_after)
        .build()
        .expect("pool");
    let ids = (0..fabric.targets.len())
        .map(|t| pool.add_destination(fabric.endpoint(t)))
        .collect();
    (pool, ids)
}

#[test]
fn runs() {
    on_device!();
    checks!(
        writes_to_two_hundred_destinations_complete_once_with_their_bytes_under_every_policy,
        a_target_killed_mid_run_is_reported_unreachable_and_the_others_finish,
        a_destination_is_reported_unreachable_no_later_than_the_failure_that_made_it_so,
        delays_reordering_and_stalls_keep_every_report_exactly_once,
        the_same_seed_gives_the_same_run,
    );
}

/// In step mode, with a seeded share of drops on a third of the targets: twice the same
/// outcome (which requests failed, how many were handed back).
fn the_same_seed_gives_the_same_run() {
    let once = || {
        let fabric = Fabric::new(30);
        step_mode();
        device().seed(42);
        for t in (0..30).step_by(3) {
            let fault = softmlx5::RouteFault {
                drop_per_million: 300_000,
                ..Default::default()
            };
            device().route_fault(fabric.dct_number(t), &fault).expect("route_fault");
        }
        let (mut pool, ids) = pool_of(&fabric, DcPoolPolicy::Streams, 3, 16, 100);
        let outcome = run(&mut pool, &fabric, &ids, 6, &[], |_, _| {
            // A try's transport timeout (timeout 8) each round, and the device's work.
            device().advance(Duration::from_nanos(4096 << 8));
            while device().step() > 0 {}
        });
        device().set_step_mode(false);
        let drops = device()
            .trace()
            .iter()
            .filter(|e| e.kind == event_kind::DROPPED && e.status == softmlx5::drop::FAULT)
            .count();
        (outcome.failed(), outcome.retried, outcome.completed(), drops > 0)
    };
    let first = once();
    assert!(first.3, "the seeded share dropped requests");
    assert_eq!(first, once());
}

fn writes_to_two_hundred_destinations_complete_once_with_their_bytes_under_every_policy() {
    let fabric = Fabric::new(200);
    for policy in POLICIES {
        device().clear_trace();
        let before = device().counters();
        let (mut pool, ids) = pool_of(&fabric, policy, 8, 16, 3);
        let outcome = run(&mut pool, &fabric, &ids, 10, &[], |_, _| {});
        assert_eq!(outcome.completed(), 2000, "{policy:?}");
        assert!(outcome.failed().is_empty() && outcome.retried == 0, "{policy:?}");
        outcome.assert_written(&fabric, 10);
        let after = device().counters();
        assert_eq!(
            after.requests_sent - before.requests_sent,
            2000,
            "{policy:?}: each left once"
        );
        assert_eq!(after.retransmits_timeout, before.retransmits_timeout, "{policy:?}");
        for &id in &ids {
            assert_eq!(pool.outstanding(id), 0);
        }
    }
}

fn a_target_killed_mid_run_is_reported_unreachable_and_the_others_finish() {
    for policy in [DcPoolPolicy::Dedicated, DcPoolPolicy::Static] {
        let fabric = Fabric::new(50);
        // Unreachable after 2 "no such target" errors: each error flushes the requests posted
        // behind it during the transport's retries, which do not count.
        let (mut pool, ids) = pool_of(&fabric, policy, 4, 8, 2);
        let victim = fabric.dct_number(7);
        let timeouts_before = device().counters().retransmits_timeout;
        let mut killed = false;
        // Killed after the first round (a request each posted): its 29 others meet a dead
        // target, a send queue (8) at most behind each error.
        let outcome = run(&mut pool, &fabric, &ids, 30, &[], |_, _| {
            if !killed {
                device().kill_target(victim, true).expect("kill");
                killed = true;
            }
        });
        assert_eq!(outcome.unreachable, [ids[7]], "{policy:?}: {:?}", outcome.failed());
        let failed = outcome.failed();
        assert!(!failed.is_empty());
        for &((t, n), status) in &failed {
            assert_eq!(t, 7, "{policy:?}: only the dead target's requests fail");
            assert!(
                matches!(status, RETRY_EXC_ERR | WR_FLUSH_ERR),
                "{policy:?}: {n} failed with {status}"
            );
        }
        assert!(failed.iter().any(|&(_, s)| s == RETRY_EXC_ERR));
        for t in (0..50).filter(|&t| t != 7) {
            assert!((0..30).all(|n| matches!(outcome.reported.get(&(t, n)), Some(DcPoolEvent::Completed { .. }))));
        }
        outcome.assert_written(&fabric, 30);
        assert!(
            device().counters().retransmits_timeout > timeouts_before,
            "the dead target answered nothing: the transport retried"
        );
        device().kill_target(victim, false).expect("revive");
        if policy == DcPoolPolicy::Static {
            assert!(
                outcome.retried > 0,
                "other destinations on the dead one's initiator retried"
            );
        }
    }
}

/// A program that reads the events in order learns that a destination is unreachable no later
/// than it reads the failure that made it so: the last of the consecutive "no such target"
/// errors that the pool counts.
fn a_destination_is_reported_unreachable_no_later_than_the_failure_that_made_it_so() {
    let fabric = Fabric::new(12);
    for policy in POLICIES {
        for unreachable_after in [1, 2, 3] {
            for t in [2, 9] {
                device().kill_target(fabric.dct_number(t), false).expect("revive");
            }
            let (mut pool, ids) = pool_of(&fabric, policy, 3, 8, unreachable_after);
            let mut killed = false;
            let outcome = run(&mut pool, &fabric, &ids, 48, &[], |_, _| {
                if !killed {
                    for t in [2, 9] {
                        device().kill_target(fabric.dct_number(t), true).expect("kill");
                    }
                    killed = true;
                }
            });
            let mut unreachable = outcome.unreachable.clone();
            unreachable.sort();
            assert_eq!(unreachable, [ids[2], ids[9]], "{policy:?}, after {unreachable_after}");
            let mut errors = BTreeMap::<DestinationId, u32>::new();
            let mut reported = Vec::new();
            for event in &outcome.events {
                match *event {
                    DcPoolEvent::Unreachable { destination } => reported.push(destination),
                    DcPoolEvent::Completed { destination, .. } => {
                        errors.remove(&destination);
                    },
                    DcPoolEvent::Failed {
                        destination, status, ..
                    } if status != WR_FLUSH_ERR => {
                        let count = errors.entry(destination).or_default();
                        if matches!(status, RETRY_EXC_ERR | RNR_RETRY_EXC_ERR | REM_INV_REQ_ERR) {
                            *count += 1;
                        } else {
                            *count = 0;
                        }
                        if *count >= unreachable_after {
                            assert!(
                                reported.contains(&destination),
                                "{policy:?}, after {unreachable_after}: {event:?} before its Unreachable"
                            );
                        }
                    },
                    _ => {},
                }
            }
        }
    }
}

fn delays_reordering_and_stalls_keep_every_report_exactly_once() {
    let fabric = Fabric::new(64);
    device().seed(8);
    for t in 0..64 {
        let fault = softmlx5::RouteFault {
            delay: Duration::from_micros(50 * (t as u64 % 5)),
            reorder: t % 3 == 0,
            ..Default::default()
        };
        device().route_fault(fabric.dct_number(t), &fault).expect("route_fault");
    }
    let (mut pool, ids) = pool_of(&fabric, DcPoolPolicy::Streams, 4, 16, 3);
    let qp1 = qpn(&pool, 1);
    let mut stalled = 0;
    let outcome = run(&mut pool, &fabric, &ids, 8, &[], |_, posted| {
        if posted >= 64 && stalled == 0 {
            device().stall_initiator(qp1, true).expect("stall");
            stalled = posted;
        } else if stalled > 0 && posted >= stalled + 64 {
            device().stall_initiator(qp1, false).expect("serve again");
        }
    });
    device().stall_initiator(qp1, false).expect("serve again");
    assert_eq!(outcome.completed(), 512);
    outcome.assert_written(&fabric, 8);
    for t in 0..64 {
        device()
            .route_fault(fabric.dct_number(t), &Default::default())
            .expect("clear");
    }
}

#[test]
fn keys_and_receives() {
    on_device!();
    checks!(
        a_dropped_wrong_key_fails_after_the_transport_timeout_and_makes_the_destination_unreachable,
        remote_access_errors_fail_each_request_and_never_make_a_destination_unreachable,
        sends_fill_receives_and_wait_for_them_when_there_are_none,
        receiver_not_ready_retries_run_out_and_a_long_send_is_a_remote_invalid_request,
        a_write_from_a_scatter_gather_entry_moves_the_buffer_s_bytes,
    );
}

const STALE: usize = 0;
const GOOD: usize = 1;

/// A destination whose target's key changed after it was added, and a good one, on one
/// initiator (static): both post 2 requests a round; the reports of each round.
fn wrong_key_round(
    fabric: &Fabric, pool: &mut DcInitiatorPool, ids: &[DestinationId], round: u64, bad: &[u64],
) -> Vec<DcPoolEvent> {
    let (stale, good) = ([round * 10, round * 10 + 1], [round * 10 + 2, round * 10 + 3]);
    post_requests(pool, fabric, ids[STALE], STALE, &stale, 64, |_| 0, bad).expect("not unreachable yet");
    post_requests(pool, fabric, ids[GOOD], GOOD, &good, 64, |_| 0, &[]).expect("a good destination");
    without_syndromes(&poll_until(pool, Duration::from_secs(5), |events| reports(events) == 4))
}

fn a_dropped_wrong_key_fails_after_the_transport_timeout_and_makes_the_destination_unreachable() {
    let fabric = Fabric::new(2);
    let mut pool = fabric
        .pool_builder(DcPoolPolicy::Static, 1, 8)
        .setup_unreachable_after(3)
        .build()
        .expect("pool");
    let ids: Vec<_> = (0..2).map(|t| pool.add_destination(fabric.endpoint(t))).collect();
    // The peer changes its key: the pool's endpoint is stale.
    device()
        .set_dc_key(fabric.dct_number(STALE), 0xbad)
        .expect("set_dc_key");
    let qp = qpn(&pool, 0);
    for round in 0..3u64 {
        device().clear_trace();
        let events = wrong_key_round(&fabric, &mut pool, &ids, round, &[]);
        let (stale, good) = (ids[STALE], ids[GOOD]);
        // The first fails as a target that does not answer, the one behind it is flushed,
        // failed for its destination; the initiator was recovered and served the good one.
        let mut of_stale: Vec<_> = events
            .iter()
            .filter(|e| matches!(e, DcPoolEvent::Failed { destination, .. } if *destination == stale))
            .cloned()
            .collect();
        of_stale.sort_by_key(|e| format!("{e:?}"));
        assert_eq!(
            of_stale,
            [
                failed(stale, round * 10, RETRY_EXC_ERR),
                failed(stale, round * 10 + 1, WR_FLUSH_ERR)
            ],
            "round {round}: {events:?}"
        );
        let retried_good: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                DcPoolEvent::Retry { destination, wr_id } if *destination == good => Some(*wr_id),
                _ => None,
            })
            .collect();
        for wr_id in retried_good {
            post_requests(&mut pool, &fabric, good, GOOD, &[wr_id], 64, |_| 0, &[]).expect("retry");
            assert_eq!(poll_reports(&mut pool, 1), [completed(good, wr_id)]);
        }
        let trace = device().trace();
        assert!(
            trace
                .iter()
                .any(|e| e.kind == event_kind::DROPPED && e.status == softmlx5::drop::DC_KEY),
            "round {round}: dropped for its key"
        );
        // No failure before the transport's retries ran out: retry_cnt (2) retransmissions
        // for the timeout first, each a timeout (4.096 µs · 2^8) after the one before.
        let failed_at = trace
            .iter()
            .position(|e| e.kind == event_kind::CQE && e.qp_number == qp && e.status != 0)
            .expect("the error's CQE");
        let retries: Vec<u64> = trace[..failed_at]
            .iter()
            .filter(|e| e.kind == event_kind::RETRANSMIT && e.qp_number == qp && e.status == 1)
            .map(|e| e.time_ns)
            .collect();
        assert!(retries.len() >= 2, "round {round}: {retries:?}");
        assert!(trace[failed_at].time_ns - retries[0] >= 4096 << 8, "round {round}");
    }
    assert!(pool.is_unreachable(ids[STALE]));
    assert_eq!(pool.destination_state(ids[STALE]), DestinationState::Unreachable);
    assert!(matches!(
        post_writes(&mut pool, &fabric, ids[STALE], STALE, &[99], 64, |_| 0)
            .map(drop)
            .unwrap_err()
            .0,
        PostToDestinationErrorKind::Unreachable
    ));
    // The program refreshes the endpoint: removed, added again with the target's current key.
    pool.remove_destination(ids[STALE]).expect("nothing outstanding");
    let mut endpoint = fabric.endpoint(STALE);
    endpoint = sideway_ext::mlx5::dc::endpoint::DcEndpoint::new(
        endpoint.lid(),
        endpoint.gid(),
        endpoint.dct_number(),
        0xbad,
        endpoint.is_roce(),
    )
    .expect("the peer's current endpoint");
    let fresh = pool.add_destination(endpoint);
    write(&mut pool, &fabric, fresh, STALE, &[100, 101]).expect("a fresh destination");
    assert_eq!(
        poll_reports(&mut pool, 2),
        [completed(fresh, 100), completed(fresh, 101)]
    );
    assert_eq!(fabric.read_slot(STALE, 0, 64), vec![pattern(101); 64]);
}

fn remote_access_errors_fail_each_request_and_never_make_a_destination_unreachable() {
    let fabric = Fabric::new(2);
    let mut pool = fabric
        .pool_builder(DcPoolPolicy::Static, 1, 8)
        .setup_unreachable_after(3)
        .build()
        .expect("pool");
    let ids: Vec<_> = (0..2).map(|t| pool.add_destination(fabric.endpoint(t))).collect();
    let (stale, good) = (ids[STALE], ids[GOOD]);
    for round in 0..4u64 {
        // A NAK, not a timeout: the first of the stale destination's requests is refused.
        let events = wrong_key_round(&fabric, &mut pool, &ids, round, &[round * 10]);
        assert!(
            events.contains(&failed(stale, round * 10, REM_ACCESS_ERR)),
            "{events:?}"
        );
        assert!(
            events.contains(&failed(stale, round * 10 + 1, WR_FLUSH_ERR)),
            "{events:?}"
        );
        for e in &events {
            if let DcPoolEvent::Retry { destination, wr_id } = e {
                assert_eq!(*destination, good);
                write(&mut pool, &fabric, good, GOOD, &[*wr_id]).expect("retry");
                assert_eq!(poll_reports(&mut pool, 1), [completed(good, *wr_id)]);
            }
        }
        assert!(!events.iter().any(|e| matches!(e, DcPoolEvent::Unreachable { .. })));
    }
    assert!(!pool.is_unreachable(stale));
    assert_ne!(pool.destination_state(stale), DestinationState::Unreachable);
}

/// The receive completions of the fabric's SRQ, up to `count`, waiting up to 5 s.
fn receives(fabric: &Fabric, count: usize) -> Vec<WorkCompletion> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut all = Vec::new();
    let mut wcs = [WorkCompletion::default(); 16];
    while all.len() < count && std::time::Instant::now() < deadline {
        all.extend_from_slice(fabric.recv_cq.poll_work_completions(&mut wcs).expect("poll"));
    }
    all
}

/// One SEND of `len` bytes from local slot `pattern(wr_id)` (or `inline`) to `destination`.
fn send(
    pool: &mut DcInitiatorPool, fabric: &Fabric, destination: DestinationId, wr_id: u64, len: u32,
    inline: Option<&[u8]>,
) -> Result<(), sideway_ext_dc_pool::types::PostBatchError> {
    let mut guard = pool.start_post_send(destination).expect("a batch");
    let request = guard
        .construct_wr(wr_id, WorkRequestFlags::Signaled)
        .expect("room")
        .setup_send();
    match inline {
        Some(bytes) => request.setup_inline_data(bytes),
        // SAFETY: the local region outlives the completion.
        None => unsafe {
            request.setup_sge(
                fabric.local.mr.lkey(),
                fabric.local.addr(usize::from(pattern(wr_id)) * SLOT),
                len,
            )
        },
    }
    guard.post()
}

fn sends_fill_receives_and_wait_for_them_when_there_are_none() {
    let mut fabric = Fabric::new(3);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Dedicated, 3, 16);
    let before = device().counters();
    for (t, &id) in ids.iter().enumerate() {
        for k in 0..4 {
            send(&mut pool, &fabric, id, t as u64 * 4 + k, 8, None).expect("post");
        }
    }
    // No receive yet: receiver not ready, retried.
    assert!(wait_until(Duration::from_secs(2), || device()
        .counters()
        .retransmits_rnr
        > before.retransmits_rnr));
    assert!(
        poll_for(&mut pool, Duration::from_millis(5)).is_empty(),
        "nothing completes without receives"
    );
    fabric.post_receives(12);
    let events = poll_reports(&mut pool, 12);
    assert!(
        events.iter().all(|e| matches!(e, DcPoolEvent::Completed { .. })),
        "{events:?}"
    );
    // Each target received its SENDs in posting order.
    let received = receives(&fabric, 12);
    assert_eq!(received.len(), 12);
    for (t, _) in ids.iter().enumerate() {
        let dct = fabric.dct_number(t);
        let bytes: Vec<u8> = received
            .iter()
            .filter(|wc| wc.qp_number() == dct)
            .map(|wc| fabric.receives.read(wc.wr_id() as usize * RECEIVE, 1)[0])
            .collect();
        let expected: Vec<u8> = (0..4).map(|k| pattern(t as u64 * 4 + k)).collect();
        assert_eq!(bytes, expected, "target {t}: in posting order");
    }
}

fn receiver_not_ready_retries_run_out_and_a_long_send_is_a_remote_invalid_request() {
    let mut fabric = Fabric::new(1);
    let mut bring_up = fast_bring_up();
    bring_up.setup_rnr_retry(3);
    let mut pool = fabric
        .pool_builder(DcPoolPolicy::Dedicated, 1, 16)
        .setup_bring_up(bring_up)
        .build()
        .expect("pool");
    let id = pool.add_destination(fabric.endpoint(0));
    let before = device().counters();
    send(&mut pool, &fabric, id, 0, 8, None).expect("post");
    send(&mut pool, &fabric, id, 1, 8, None).expect("post");
    let events = without_syndromes(&poll_reports(&mut pool, 2));
    assert_eq!(
        events[..2],
        [failed(id, 0, RNR_RETRY_EXC_ERR), failed(id, 1, WR_FLUSH_ERR)],
        "{events:?}"
    );
    assert_eq!(device().counters().retransmits_rnr - before.retransmits_rnr, 3);
    // Inline data beyond the initiator's 64 bytes: the post fails, nothing went in.
    fabric.post_receives(1);
    let beyond = vec![0u8; pool.initiator(0).expect("initiator").max_inline_data() as usize + 1];
    assert!(
        send(&mut pool, &fabric, id, 6, 0, Some(&beyond)).is_err(),
        "inline data beyond the initiator's"
    );
    assert!(
        poll_for(&mut pool, Duration::from_millis(5)).is_empty(),
        "nothing was posted"
    );
    // A SEND longer than the receive (RECEIVE bytes).
    send(&mut pool, &fabric, id, 7, RECEIVE as u32 + 1, None).expect("post");
    let events = without_syndromes(&poll_reports(&mut pool, 1));
    assert_eq!(events[..1], [failed(id, 7, REM_INV_REQ_ERR)], "{events:?}");
}

fn a_write_from_a_scatter_gather_entry_moves_the_buffer_s_bytes() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Static, 1, 16);
    post_writes(&mut pool, &fabric, ids[0], 0, &[0x5a], 200, |_| 8).expect("post");
    assert_eq!(poll_reports(&mut pool, 1), [completed(ids[0], 0x5a)]);
    assert_eq!(fabric.read_slot(0, 0, 8), vec![0; 8], "nothing before");
    assert_eq!(fabric.read_slot(0, 8, 200), vec![0x5a; 200], "the buffer's bytes");
    assert_eq!(fabric.read_slot(0, 208, 8), vec![0; 8], "nothing after");
}

#[test]
fn memory() {
    on_device!();
    checks!(
        a_buffer_not_registered_or_left_by_its_entry_is_a_local_protection_error,
        a_read_into_a_region_without_local_write_is_a_local_protection_error,
        a_write_or_read_outside_a_target_s_regions_or_access_is_a_remote_access_error,
        registrations_are_refused_as_ibv_reg_mr_refuses_them,
    );
}

/// One request through the pool (a WRITE, or a READ into local memory) of `length` bytes between
/// `local` (`lkey`) and `remote` (`rkey`); its status, once the pool reported it.
fn status_of(
    pool: &mut DcInitiatorPool, destination: DestinationId, read: bool, (lkey, local): (u32, u64),
    (rkey, remote): (u32, u64), length: u32,
) -> u32 {
    let mut guard = pool.start_post_send(destination).expect("a batch");
    let request = guard.construct_wr(1, WorkRequestFlags::Signaled).expect("room");
    // SAFETY: every address named lies in memory the check keeps alive until the report.
    unsafe {
        if read {
            request.setup_read(rkey, remote).setup_sge(lkey, local, length);
        } else {
            request.setup_write(rkey, remote).setup_sge(lkey, local, length);
        }
    }
    guard.post().expect("post");
    match &poll_reports(pool, 1)[..] {
        [DcPoolEvent::Completed { .. }] => 0,
        [DcPoolEvent::Failed { status, .. }] => *status,
        other => panic!("{other:?}"),
    }
}

fn a_buffer_not_registered_or_left_by_its_entry_is_a_local_protection_error() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Static, 1, 16);
    let d = ids[0];
    let mut local = Buffer::new(&fabric.pd, 32, all());
    local.fill(0, 32, 0x5a);
    let (lkey, address) = (local.mr.lkey(), local.addr(0));
    let remote = (fabric.remote.mr.rkey(), fabric.slot(0, 0));
    // Not registered at all: no region has key 0.
    assert_eq!(status_of(&mut pool, d, false, (0, address), remote, 64), LOC_PROT_ERR);
    // 64 bytes from a region of 32; starting before it.
    assert_eq!(
        status_of(&mut pool, d, false, (lkey, address), remote, 64),
        LOC_PROT_ERR
    );
    assert_eq!(
        status_of(&mut pool, d, false, (lkey, address - 1), remote, 8),
        LOC_PROT_ERR
    );
    assert_eq!(fabric.read_slot(0, 0, 8), vec![0; 8], "nothing was written");
    // Each error put the initiator in ERR, and the pool brought it back: this one goes through.
    assert_eq!(status_of(&mut pool, d, false, (lkey, address), remote, 32), 0);
    assert_eq!(fabric.read_slot(0, 0, 32), vec![0x5a; 32]);
    // Deregistered: its key names nothing again.
    drop(local);
    let spare = Buffer::new(&fabric.pd, 64, all());
    assert_eq!(
        status_of(&mut pool, d, false, (lkey, spare.addr(0)), remote, 32),
        LOC_PROT_ERR
    );
    // A zero-length entry: its key is never looked at.
    assert_eq!(status_of(&mut pool, d, false, (0, spare.addr(0)), remote, 0), 0);
}

fn a_read_into_a_region_without_local_write_is_a_local_protection_error() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Static, 1, 16);
    let remote = (fabric.remote.mr.rkey(), fabric.slot(0, 0));
    let read_only = Buffer::new(&fabric.pd, 64, sideway::ibverbs::AccessFlags::none());
    let writable = Buffer::new(&fabric.pd, 64, all());
    let status = status_of(
        &mut pool,
        ids[0],
        true,
        (read_only.mr.lkey(), read_only.addr(0)),
        remote,
        16,
    );
    assert_eq!(status, LOC_PROT_ERR);
    let status = status_of(
        &mut pool,
        ids[0],
        true,
        (writable.mr.lkey(), writable.addr(0)),
        remote,
        16,
    );
    assert_eq!(status, 0);
}

fn a_write_or_read_outside_a_target_s_regions_or_access_is_a_remote_access_error() {
    use sideway::ibverbs::AccessFlags;
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Static, 1, 16);
    let d = ids[0];
    let mut source = Buffer::new(&fabric.pd, 64, all());
    source.fill(0, 64, 9);
    let local = (source.mr.lkey(), source.addr(0));
    let sink = Buffer::new(&fabric.pd, 64, all());
    let into = (sink.mr.lkey(), sink.addr(0));
    let region = Buffer::new(&fabric.pd, 16, AccessFlags::LocalWrite | AccessFlags::RemoteWrite);
    let read_only = Buffer::new(&fabric.pd, 16, AccessFlags::RemoteRead);
    let (rkey, address) = (region.mr.rkey(), region.addr(0));
    let cases = [
        (
            "an rkey no region has",
            false,
            (rkey ^ 0x00ff_0000, address),
            8,
            REM_ACCESS_ERR,
        ),
        ("past the region's end", false, (rkey, address + 8), 16, REM_ACCESS_ERR),
        ("before its start", false, (rkey, address - 8), 8, REM_ACCESS_ERR),
        ("a READ without remote read", true, (rkey, address), 8, REM_ACCESS_ERR),
        (
            "a WRITE without remote write",
            false,
            (read_only.mr.rkey(), read_only.addr(0)),
            8,
            REM_ACCESS_ERR,
        ),
        ("inside, with its access", false, (rkey, address + 8), 8, 0),
    ];
    for (what, read, remote, length, status) in cases {
        let from = if read { into } else { local };
        assert_eq!(status_of(&mut pool, d, read, from, remote, length), status, "{what}");
    }
    assert_eq!(region.read(0, 16), [vec![0; 8], vec![9; 8]].concat());
    // Deregistered, the region is gone for remote requests too.
    drop(region);
    assert_eq!(
        status_of(&mut pool, d, false, local, (rkey, address), 8),
        REM_ACCESS_ERR
    );
}

fn registrations_are_refused_as_ibv_reg_mr_refuses_them() {
    use sideway::ibverbs::AccessFlags;
    let fabric = Fabric::new(0);
    let data = [0u8; 64];
    for access in [AccessFlags::RemoteWrite, AccessFlags::RemoteAtomic] {
        // SAFETY: the memory outlives the (refused) registration.
        let refused = unsafe { fabric.pd.reg_mr(data.as_ptr() as usize, data.len(), access) };
        assert!(refused.is_err(), "{access:?} without local write");
    }
    let first = Buffer::new(&fabric.pd, 8, all());
    let second = Buffer::new(&fabric.pd, 8, all());
    assert_ne!(first.mr.rkey(), second.mr.rkey(), "every region has its key");
}

#[test]
fn trace() {
    on_device!();
    checks!(
        the_trace_of_a_small_run_is_exactly_what_happened,
        a_kill_between_steps_takes_effect_from_the_next_step_and_not_before,
    );
}

/// Two targets on one initiator (static): a WRITE to the first, a refused WRITE to the second
/// and one behind it. The device's trace of it, request by request.
fn the_trace_of_a_small_run_is_exactly_what_happened() {
    let fabric = Fabric::new(2);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Static, 1, 16);
    let qp = qpn(&pool, 0);
    let (d0, d1) = (fabric.dct_number(0), fabric.dct_number(1));
    stall(&pool, 0, true);
    device().clear_trace();
    write(&mut pool, &fabric, ids[0], 0, &[11]).expect("post");
    post_requests(
        &mut pool,
        &fabric,
        ids[1],
        1,
        &[12, 13],
        8,
        |n| (n as usize - 12) * 8,
        &[12],
    )
    .expect("post");
    stall(&pool, 0, false);
    let events = without_syndromes(&poll_reports(&mut pool, 3));
    assert_eq!(
        events[..3],
        [
            completed(ids[0], 11),
            failed(ids[1], 12, REM_ACCESS_ERR),
            failed(ids[1], 13, WR_FLUSH_ERR)
        ]
    );
    let trace: Vec<(u32, u32, u32, u8, u8)> = device()
        .trace()
        .iter()
        .filter(|e| e.kind != event_kind::RETRANSMIT)
        .map(|e| (e.kind, e.qp_number, e.peer, e.opcode, e.status))
        .collect();
    let (request, executed, answered, cqe) = (
        event_kind::REQUEST,
        event_kind::EXECUTED,
        event_kind::ANSWERED,
        event_kind::CQE,
    );
    let ack = softmlx5::answer::ACK;
    let nak = softmlx5::answer::NAK_REMOTE_ACCESS;
    let (dct0, dct1) = (
        fabric.targets[0].dct_number().expect("dct"),
        fabric.targets[1].dct_number().expect("dct"),
    );
    assert_eq!((dct0, dct1), (d0, d1));
    // The first WRITE: out, executed at its target, answered, completed. The second: out
    // after the first was answered (one target at a time), refused, its error CQE; the third
    // never leaves: flushed (CQE syndrome 0x05).
    let expected: Vec<(u32, u32, u32, u8, u8)> = vec![
        (request, qp, d0, OPCODE_RDMA_WRITE, 0),
        (executed, d0, qp, OPCODE_RDMA_WRITE, ack),
        (answered, qp, 0, OPCODE_RDMA_WRITE, ack),
        (cqe, qp, 0, 0x00, 0),
        (request, qp, d1, OPCODE_RDMA_WRITE, 0),
        (executed, d1, qp, OPCODE_RDMA_WRITE, nak),
        (answered, qp, 0, OPCODE_RDMA_WRITE, nak),
        (cqe, qp, 0, 0x0d, 0x13),
        (cqe, qp, 0, 0x0d, 0x05),
    ];
    let simplified: Vec<_> = trace
        .iter()
        .map(|&(kind, q, peer, opcode, status)| match kind {
            // The answer's and the CQE's peer field is not theirs to fill.
            k if k == answered || k == cqe => (kind, q, 0, opcode, status),
            _ => (kind, q, peer, opcode, status),
        })
        .collect();
    assert_eq!(simplified, expected, "{trace:?}");
    assert_eq!(fabric.read_slot(0, 0, 64), vec![11; 64]);
    assert_eq!(
        fabric.read_slot(1, 0, 16),
        vec![0; 16],
        "neither request to the second executed"
    );
}

/// Step mode on, once the device thread's pass under way (if any) is over: it checks the mode
/// between passes, and an idle one polls each millisecond.
fn step_mode() {
    device().set_step_mode(true);
    std::thread::sleep(Duration::from_millis(5));
}

/// In step mode the device does nothing between steps: a target killed after the step that
/// executed a WRITE leaves it done; the next WRITE, stepped after the kill, fails once the
/// transport's retries (moved on by the virtual clock) run out.
fn a_kill_between_steps_takes_effect_from_the_next_step_and_not_before() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Dedicated, 1, 16);
    let device = device();
    step_mode();
    write(&mut pool, &fabric, ids[0], 0, &[1]).expect("post");
    assert!(
        poll_for(&mut pool, Duration::from_millis(5)).is_empty(),
        "nothing before a step"
    );
    while device.step() > 0 {}
    assert_eq!(poll_reports(&mut pool, 1), [completed(ids[0], 1)]);
    device.kill_target(fabric.dct_number(0), true).expect("kill");
    write(&mut pool, &fabric, ids[0], 0, &[2]).expect("post");
    while device.step() > 0 {}
    assert!(
        poll_for(&mut pool, Duration::from_millis(5)).is_empty(),
        "the clock did not move"
    );
    // timeout 8, retry_cnt 2: three tries of 4.096 µs · 2^8.
    for _ in 0..3 {
        device.advance(Duration::from_nanos(4096 << 8));
        while device.step() > 0 {}
    }
    let events = without_syndromes(&poll_reports(&mut pool, 1));
    device.set_step_mode(false);
    assert_eq!(events, [failed(ids[0], 2, RETRY_EXC_ERR)]);
    assert_eq!(
        fabric.read_slot(0, 0, 64),
        vec![1; 64],
        "the first executed, the second not"
    );
    device.kill_target(fabric.dct_number(0), false).expect("revive");
}
