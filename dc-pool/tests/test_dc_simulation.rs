//! A DCI pool on the simulated DC fabric (`--features mlx5,simulation`), written as a crate
//! outside this one writes it: the public API only, no device. One pool loop, generic over the
//! pool's initiator (`I: PoolInitiator`, so it is the loop a program runs on a ConnectX), drives
//! every scenario:
//! - RDMA WRITEs to many destinations under each policy: every request reported exactly once,
//!   completed, and its bytes in its target's memory;
//! - a target killed mid-run: its destination reported unreachable, its requests failed (with a
//!   "no such target" status, or flushed), every other request completed, none twice; it is
//!   reported no later than the failure that made it so;
//! - a target whose DC key changed, answering with a remote access error: the initiator recovered;
//! - SENDs: the bytes in the target's receives; no receive posted: receiver-not-ready retries
//!   until receives are posted;
//! - DCI streams: one stream's error leaves the others executing, the stream is reset after its
//!   flush (never before); 2^`log_num_errored` stream errors move the initiator to ERR;
//! - a stalled initiator, delayed and reordered completions, an initiator whose recovery fails,
//!   a kernel that refuses a DCI's move to RESET (the initiator created again, its send queue
//!   still freed by its completions);
//! - a grant from the line left unused goes on after the grant timeout, in the fabric's ticks;
//! - the same seed, the same run.
use std::collections::{BTreeMap, VecDeque};

use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::mlx5::dc::initiator::DciStreams;
use sideway_ext_dc_pool::post_guard::DcPoolPostGuard;
use sideway_ext_dc_pool::simulation::{
    SimulatedFabric, SimulatedInitiator, SimulatedMemoryRegion, SimulatedTarget, WrongDcKey,
};
use sideway_ext_dc_pool::types::{
    DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId, PostToDestinationErrorKind,
};
use sideway_ext_dc_pool::DcInitiatorPool;

const RETRY_EXC: u32 = 12;
const REM_ACCESS: u32 = 10;
const REM_INV_REQ: u32 = 9;
const RNR_RETRY_EXC: u32 = 13;
const FLUSH: u32 = 5;

/// What a request does: an RDMA WRITE of its 8-byte `wr_id` at slot `wr_id` of its target's
/// memory (inline), or a SEND of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Write,
    Send,
}

/// How each request ended, as the pool reported it.
#[derive(Debug, Default)]
struct Outcome {
    completed: BTreeMap<u64, DestinationId>,
    /// `wr_id` → status.
    failed: BTreeMap<u64, u32>,
    retried: u64,
    unreachable: Vec<DestinationId>,
    lost: Vec<usize>,
    polls: u64,
    /// What the pool reported, in its order (`Ready` left out).
    events: Vec<DcPoolEvent>,
}

/// A target and its memory, registered for RDMA WRITEs (as its program registers it).
struct Peer {
    target: SimulatedTarget,
    region: SimulatedMemoryRegion,
}

impl std::ops::Deref for Peer {
    type Target = SimulatedTarget;

    fn deref(&self) -> &SimulatedTarget {
        &self.target
    }
}

/// One destination's work: its target, and its requests not yet posted, in order.
struct Work<'t> {
    destination: DestinationId,
    target: &'t Peer,
    queue: VecDeque<u64>,
    /// Refused with a would-block it waits out: post again at its `Ready`.
    waiting: bool,
}

/// Builds one request on a batch.
fn add(guard: &mut DcPoolPostGuard<'_, SimulatedInitiator>, kind: Kind, target: &Peer, wr_id: u64) {
    let request = guard
        .construct_wr(wr_id, WorkRequestFlags::none())
        .expect("room in the batch");
    let bytes = wr_id.to_le_bytes();
    match kind {
        Kind::Write => request
            .setup_write(target.region.rkey(), target.region.address() + (wr_id % 512) * 8)
            .setup_inline_data(&bytes),
        Kind::Send => request.setup_send().setup_inline_data(&bytes),
    }
}

/// Posts a batch of `work`'s requests on `guard`; returns how many went in.
fn post_batch(mut guard: DcPoolPostGuard<'_, SimulatedInitiator>, kind: Kind, work: &mut Work<'_>) -> usize {
    let count = guard.room().min(work.queue.len()).min(8);
    for &wr_id in work.queue.iter().take(count) {
        add(&mut guard, kind, work.target, wr_id);
    }
    guard.post().expect("the batch is posted");
    work.queue.drain(..count);
    count
}

/// The pool loop of a program, for any initiator: posts every destination's requests (in
/// batches, as room allows), re-posts retries first, waits out would-blocks until `Ready`, and
/// polls until every request was reported; `between` runs before each poll (faults).
fn run(
    pool: &mut DcInitiatorPool<SimulatedInitiator>, targets: &[Peer], per_target: u64, kind: Kind,
    mut between: impl FnMut(&mut DcInitiatorPool<SimulatedInitiator>, u64),
) -> Outcome {
    let streams = pool.policy() == DcPoolPolicy::Streams;
    let mut work: Vec<Work<'_>> = targets
        .iter()
        .enumerate()
        .map(|(t, target)| Work {
            destination: pool.add_destination(target.endpoint()),
            target,
            queue: (0..per_target).map(|k| t as u64 * per_target + k).collect(),
            waiting: false,
        })
        .collect();
    let index_of = |d: DestinationId| d.index();
    let total = targets.len() as u64 * per_target;
    let mut outcome = Outcome::default();
    while (outcome.completed.len() + outcome.failed.len()) as u64 != total {
        for w in work.iter_mut().filter(|w| !w.waiting) {
            while !w.queue.is_empty() {
                let started = if streams {
                    pool.start_post_send_on_stream(w.destination)
                        .map(|g| post_batch(g, kind, w))
                } else {
                    pool.start_post_send(w.destination).map(|g| post_batch(g, kind, w))
                };
                match started {
                    Ok(_) => {},
                    Err(e) if e.is_would_block() => {
                        w.waiting = true;
                        break;
                    },
                    Err(e) if matches!(e.0, PostToDestinationErrorKind::Unreachable) => {
                        for wr_id in w.queue.drain(..) {
                            assert!(outcome.failed.insert(wr_id, FLUSH).is_none());
                        }
                    },
                    Err(e) => panic!("post: {e:?}"),
                }
            }
        }
        between(pool, outcome.polls);
        outcome.polls += 1;
        assert!(outcome.polls < 1_000_000, "the run does not end: {outcome:?}");
        let mut retries = Vec::new();
        pool.poll(|event| {
            if !matches!(event, DcPoolEvent::Ready { .. }) {
                outcome.events.push(event.clone());
            }
            match event {
                DcPoolEvent::Completed { destination, wr_id } => {
                    assert!(outcome.completed.insert(wr_id, destination).is_none(), "{wr_id} twice");
                    assert!(!outcome.failed.contains_key(&wr_id), "{wr_id} failed and completed");
                },
                DcPoolEvent::Failed { wr_id, status, .. } => {
                    assert!(outcome.failed.insert(wr_id, status).is_none(), "{wr_id} twice");
                    assert!(!outcome.completed.contains_key(&wr_id), "{wr_id} completed and failed");
                },
                DcPoolEvent::Retry { destination, wr_id } => retries.push((destination, wr_id)),
                DcPoolEvent::Ready { destination } => work[index_of(destination)].waiting = false,
                DcPoolEvent::Unreachable { destination } => outcome.unreachable.push(destination),
                DcPoolEvent::InitiatorLost { initiator, .. } => outcome.lost.push(initiator),
                other => panic!("unexpected {other:?}"),
            }
        })
        .expect("poll");
        // Retries go back before the destination's newer requests, in their order.
        for (destination, wr_id) in retries.into_iter().rev() {
            assert!(!outcome.completed.contains_key(&wr_id) && !outcome.failed.contains_key(&wr_id));
            outcome.retried += 1;
            work[index_of(destination)].queue.push_front(wr_id);
        }
    }
    outcome
}

fn targets(fabric: &SimulatedFabric, count: usize, receives: u64) -> Vec<Peer> {
    (0..count)
        .map(|t| {
            let target = fabric
                .create_target_builder()
                .setup_dc_key(0xdc00 + t as u64)
                .setup_latency(1 + t as u64 % 3)
                .setup_receives(receives, 64)
                .build()
                .expect("a target");
            let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
            let region = target.register_memory(0..4096, access).expect("a region");
            Peer { target, region }
        })
        .collect()
}

/// Every request written landed at its place in its target's memory.
fn assert_written(targets: &[Peer], per_target: u64, outcome: &Outcome) {
    for (&wr_id, destination) in &outcome.completed {
        let target = &targets[destination.index()];
        let offset = (wr_id % 512) as usize * 8;
        assert_eq!(
            target.read(offset..offset + 8),
            Some(wr_id.to_le_bytes().to_vec()),
            "request {wr_id} of target {}",
            wr_id / per_target
        );
    }
}

#[test]
fn writes_to_two_hundred_destinations_complete_once_with_their_bytes_under_every_policy() {
    for policy in [
        DcPoolPolicy::Dedicated,
        DcPoolPolicy::DedicatedWithQuota { quota: 4 },
        DcPoolPolicy::Static,
        DcPoolPolicy::Streams,
    ] {
        let fabric = SimulatedFabric::new(1);
        let targets = targets(&fabric, 200, 0);
        let mut builder = fabric.create_pool_builder();
        builder.setup_initiators(8).setup_policy(policy).setup_max_send_wr(16);
        if policy == DcPoolPolicy::Streams {
            builder.setup_dci_streams(DciStreams {
                log_num_concurrent: 2,
                log_num_errored: 0,
            });
        }
        let mut pool = builder.build().expect("a simulated pool");
        let outcome = run(&mut pool, &targets, 10, Kind::Write, |_, _| {});
        assert_eq!(outcome.completed.len(), 2000, "{policy:?}");
        assert!(
            outcome.failed.is_empty() && outcome.retried == 0,
            "{policy:?}: {outcome:?}"
        );
        assert_written(&targets, 10, &outcome);
        let counters = fabric.counters();
        assert_eq!(
            (counters.posted, counters.executed, counters.polled),
            (2000, 2000, 2000)
        );
        assert_eq!(counters.flushed + counters.failed, 0);
        for destination in outcome.completed.values() {
            assert_eq!(pool.outstanding(*destination), 0);
        }
    }
}

#[test]
fn a_target_killed_mid_run_is_reported_unreachable_and_the_others_finish() {
    for policy in [DcPoolPolicy::Dedicated, DcPoolPolicy::Static] {
        let fabric = SimulatedFabric::new(2);
        fabric.set_transport_timeout(20);
        let targets = targets(&fabric, 50, 0);
        let mut pool = fabric
            .create_pool_builder()
            .setup_initiators(4)
            .setup_policy(policy)
            .setup_max_send_wr(8)
            .build()
            .expect("a simulated pool");
        let victim = targets[7].clone();
        let outcome = run(&mut pool, &targets, 20, Kind::Write, |_, polls| {
            if polls == 5 {
                victim.kill();
            }
        });
        let destination = |wr_id: u64| wr_id / 20;
        assert_eq!(outcome.unreachable.len(), 1, "{policy:?}: {outcome:?}");
        assert_eq!(outcome.unreachable[0].index(), 7);
        for (&wr_id, &status) in &outcome.failed {
            assert_eq!(
                destination(wr_id),
                7,
                "{policy:?}: only the dead target's requests fail"
            );
            assert!(
                matches!(status, RETRY_EXC | FLUSH),
                "{policy:?}: {wr_id} failed with {status}"
            );
        }
        assert!(outcome.failed.values().any(|&status| status == RETRY_EXC));
        for t in (0..50).filter(|&t| t != 7) {
            assert!((t * 20..t * 20 + 20).all(|wr_id| outcome.completed.contains_key(&wr_id)));
        }
        assert_written(&targets, 20, &outcome);
        let counters = fabric.counters();
        assert!(counters.failed > 0 && counters.recoveries > 0, "{counters:?}");
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
#[test]
fn a_destination_is_reported_unreachable_no_later_than_the_failure_that_made_it_so() {
    for policy in [
        DcPoolPolicy::Dedicated,
        DcPoolPolicy::DedicatedWithQuota { quota: 2 },
        DcPoolPolicy::Static,
        DcPoolPolicy::Streams,
    ] {
        for unreachable_after in [1, 2, 3] {
            let fabric = SimulatedFabric::new(5);
            fabric.set_transport_timeout(20);
            let targets = targets(&fabric, 12, 0);
            let mut builder = fabric.create_pool_builder();
            builder
                .setup_initiators(3)
                .setup_policy(policy)
                .setup_max_send_wr(8)
                .setup_unreachable_after(unreachable_after);
            if policy == DcPoolPolicy::Streams {
                builder.setup_dci_streams(DciStreams {
                    log_num_concurrent: 2,
                    log_num_errored: 0,
                });
            }
            let mut pool = builder.build().expect("a simulated pool");
            let victims = [targets[2].clone(), targets[9].clone()];
            let outcome = run(&mut pool, &targets, 48, Kind::Write, |_, polls| {
                if polls == 1 {
                    victims.iter().for_each(SimulatedTarget::kill);
                }
            });
            assert_eq!(outcome.unreachable.len(), 2, "{policy:?}, after {unreachable_after}");
            // Consecutive "no such target" errors per destination, as the pool counts them.
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
                    } if status != FLUSH => {
                        let count = errors.entry(destination).or_default();
                        if matches!(status, RETRY_EXC | RNR_RETRY_EXC | REM_INV_REQ) {
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

#[test]
fn a_changed_dc_key_answered_with_a_remote_access_error_fails_and_the_initiator_recovers() {
    let fabric = SimulatedFabric::new(3);
    fabric.set_wrong_dc_key(WrongDcKey::RemoteAccessError); // the NAK (the default drops it)
    let targets = targets(&fabric, 4, 0);
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(2)
        .build()
        .expect("a pool");
    let outcome = run(&mut pool, &targets, 5, Kind::Write, |_, _| targets[1].set_dc_key(0xbad));
    assert_eq!(outcome.failed.get(&5), Some(&REM_ACCESS), "{outcome:?}");
    assert!((6..10).all(|wr_id| matches!(outcome.failed.get(&wr_id), Some(&REM_ACCESS | &FLUSH))));
    assert_eq!(outcome.completed.len(), 15);
    assert!(outcome.unreachable.is_empty(), "a wrong key is not a missing target");
    assert!(fabric.counters().recoveries >= 1);
    assert!(!pool.initiator(0).expect("initiator 0").is_in_error());
}

#[test]
fn sends_fill_receives_and_wait_for_them_when_there_are_none() {
    let fabric = SimulatedFabric::new(4);
    let targets = targets(&fabric, 3, 0);
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(3)
        .build()
        .expect("a pool");
    let outcome = run(&mut pool, &targets, 4, Kind::Send, |_, polls| {
        if polls == 10 {
            for target in &targets {
                target.post_receives(4);
            }
        }
    });
    assert_eq!(outcome.completed.len(), 12, "{outcome:?}");
    assert!(fabric.counters().rnr_retries > 0, "the SENDs met no receive first");
    for (t, target) in targets.iter().enumerate() {
        let received: Vec<u64> = target
            .take_received()
            .iter()
            .map(|message| u64::from_le_bytes(message.data[..].try_into().expect("8 bytes")))
            .collect();
        let expected: Vec<u64> = (0..4).map(|k| t as u64 * 4 + k).collect();
        assert_eq!(received, expected, "target {t}: in posting order");
        assert_eq!(target.free_receives(), 0);
    }
}

#[test]
fn receiver_not_ready_retries_run_out_and_a_long_send_is_a_remote_invalid_request() {
    let fabric = SimulatedFabric::new(5);
    fabric.set_rnr_retry(1, 3);
    let targets = targets(&fabric, 1, 0);
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(1)
        .build()
        .expect("a pool");
    let outcome = run(&mut pool, &targets, 2, Kind::Send, |_, _| {});
    assert_eq!(outcome.failed.get(&0), Some(&RNR_RETRY_EXC), "{outcome:?}");
    assert_eq!(fabric.counters().rnr_retries, 3);

    // Inline data beyond the initiator's 64 bytes: the post fails, nothing went in (libmlx5).
    targets[0].post_receives(1);
    let destination = pool.add_destination(targets[0].endpoint());
    let mut guard = pool.start_post_send(destination).expect("an initiator");
    guard
        .construct_wr(6, WorkRequestFlags::none())
        .expect("room")
        .setup_send()
        .setup_inline_data(&[0u8; 65]);
    assert!(guard.post().is_err(), "65 bytes inline on a 64-byte initiator");
    pool.poll(|event| panic!("nothing was posted: {event:?}"))
        .expect("poll");

    // A SEND longer than the receive (64 bytes) on an initiator that takes it inline.
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(1)
        .setup_max_inline_data(256)
        .build()
        .expect("a pool");
    let destination = pool.add_destination(targets[0].endpoint());
    let mut guard = pool.start_post_send(destination).expect("an initiator");
    guard
        .construct_wr(7, WorkRequestFlags::none())
        .expect("room")
        .setup_send()
        .setup_inline_data(&[0u8; 65]);
    guard.post().expect("posted");
    let mut events = Vec::new();
    while events.is_empty() {
        pool.poll(|event| events.push(event)).expect("poll");
    }
    assert!(
        matches!(
            events[0],
            DcPoolEvent::Failed {
                wr_id: 7,
                status: REM_INV_REQ,
                ..
            }
        ),
        "{events:?}"
    );
}

#[test]
fn a_stream_error_leaves_the_other_streams_running_and_is_reset_after_its_flush() {
    let fabric = SimulatedFabric::new(6);
    let targets = targets(&fabric, 40, 0);
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(2)
        .setup_policy(DcPoolPolicy::Streams)
        .setup_dci_streams(DciStreams {
            log_num_concurrent: 3,
            log_num_errored: 1,
        })
        .setup_max_send_wr(32)
        .build()
        .expect("a pool");
    let outcome = run(&mut pool, &targets, 10, Kind::Write, |pool, polls| {
        if polls == 3 {
            pool.initiator(0).expect("initiator 0").fail_next(2, REM_ACCESS);
        }
    });
    let counters = fabric.counters();
    assert_eq!(counters.failed, 1, "{counters:?}");
    assert!(counters.stream_resets >= 1, "{counters:?}");
    assert_eq!(counters.premature_stream_resets, 0, "reset only once flushed");
    assert_eq!(counters.recoveries, 0, "one errored stream, two would be ERR: no ERR");
    assert_eq!(outcome.failed.values().filter(|&&s| s == REM_ACCESS).count(), 1);
    assert_eq!(outcome.completed.len() + outcome.failed.len(), 400);
    assert_written(&targets, 10, &outcome);
}

#[test]
fn too_many_stream_errors_move_the_initiator_to_err_and_it_is_recovered() {
    let fabric = SimulatedFabric::new(7);
    let targets = targets(&fabric, 40, 0);
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(1)
        .setup_policy(DcPoolPolicy::Streams)
        .setup_dci_streams(DciStreams {
            log_num_concurrent: 2,
            log_num_errored: 0,
        })
        .setup_max_send_wr(32)
        .build()
        .expect("a pool");
    // Completions come late: the first stream's flush is not seen (nor the stream reset) before
    // the second errs.
    fabric.set_completion_delay(10);
    let outcome = run(&mut pool, &targets, 5, Kind::Write, |pool, polls| {
        if polls == 2 {
            let initiator = pool.initiator(0).expect("initiator 0");
            initiator.fail_next(0, REM_ACCESS);
            initiator.fail_next(1, REM_ACCESS);
        }
    });
    let counters = fabric.counters();
    assert_eq!(counters.failed, 2, "{counters:?}");
    assert!(
        counters.recoveries >= 1,
        "errored streams with log_num_errored 0: ERR, then RESET: {counters:?}"
    );
    assert_eq!(counters.premature_stream_resets, 0);
    assert_eq!(outcome.completed.len() + outcome.failed.len(), 200);
}

#[test]
fn stalls_delays_and_reordered_completions_keep_every_report_exactly_once() {
    let fabric = SimulatedFabric::new(8);
    fabric.set_completion_delay(2);
    fabric.set_completion_jitter(5);
    let targets = targets(&fabric, 64, 0);
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(4)
        .setup_policy(DcPoolPolicy::Streams)
        .setup_dci_streams(DciStreams {
            log_num_concurrent: 2,
            log_num_errored: 1,
        })
        .build()
        .expect("a pool");
    let outcome = run(&mut pool, &targets, 8, Kind::Write, |pool, polls| {
        if polls == 4 {
            pool.initiator(1).expect("initiator 1").stall(30);
        }
    });
    assert_eq!(outcome.completed.len(), 512, "{outcome:?}");
    assert_written(&targets, 8, &outcome);
}

#[test]
fn an_initiator_whose_recovery_fails_is_lost_and_the_others_take_its_destinations() {
    let fabric = SimulatedFabric::new(9);
    let targets = targets(&fabric, 16, 0);
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(2)
        .setup_policy(DcPoolPolicy::Static)
        .build()
        .expect("a pool");
    pool.initiator(0).expect("initiator 0").refuse_recovery(true);
    let outcome = run(&mut pool, &targets, 4, Kind::Write, |pool, polls| {
        if polls == 1 {
            pool.initiator(0).expect("initiator 0").move_to_error();
        }
    });
    assert_eq!(outcome.lost, vec![0], "{outcome:?}");
    assert_eq!(
        outcome.completed.len(),
        64,
        "flushed requests were retried on initiator 1"
    );
    assert!(outcome.retried > 0);
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let once = || {
        let fabric = SimulatedFabric::new(42);
        fabric.set_completion_jitter(7);
        let targets = targets(&fabric, 30, 0);
        let mut pool = fabric
            .create_pool_builder()
            .setup_initiators(3)
            .setup_policy(DcPoolPolicy::Streams)
            .setup_dci_streams(DciStreams {
                log_num_concurrent: 2,
                log_num_errored: 0,
            })
            .build()
            .expect("a pool");
        let outcome = run(&mut pool, &targets, 6, Kind::Write, |pool, polls| {
            if polls == 3 {
                pool.initiator(2).expect("initiator 2").fail_next(1, RETRY_EXC);
            }
        });
        (
            fabric.counters(),
            fabric.now(),
            outcome.polls,
            outcome.failed,
            outcome.retried,
        )
    };
    assert_eq!(once(), once());
}

/// Data given by scatter/gather entries is read when the request executes.
#[test]
fn a_write_from_a_scatter_gather_entry_moves_the_buffer_s_bytes() {
    let fabric = SimulatedFabric::new(10);
    let target = fabric
        .create_target_builder()
        .setup_memory(64)
        .build()
        .expect("a target");
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(1)
        .build()
        .expect("a pool");
    let destination = pool.add_destination(target.endpoint());
    let remote = target
        .register_memory(0..64, AccessFlags::LocalWrite | AccessFlags::RemoteWrite)
        .expect("the target's region");
    let buffer = *b"sixteen bytes!!!";
    let local = fabric
        .register_memory(buffer.as_ptr() as u64, buffer.len(), AccessFlags::LocalWrite)
        .expect("the buffer's region");
    let mut guard = pool.start_post_send(destination).expect("an initiator");
    // SAFETY: the buffer outlives the request (it is polled below, before the buffer goes).
    unsafe {
        guard
            .construct_wr(1, WorkRequestFlags::none())
            .expect("room")
            .setup_write(remote.rkey(), remote.address() + 16)
            .setup_sge(local.lkey(), buffer.as_ptr() as u64, 16)
    };
    guard.post().expect("posted");
    let mut completed = false;
    while !completed {
        pool.poll(|event| completed = matches!(event, DcPoolEvent::Completed { wr_id: 1, .. }))
            .expect("poll");
    }
    assert_eq!(target.read(16..32).as_deref(), Some(&buffer[..]));
    assert_eq!(target.read(0..16), Some(vec![0; 16]));
}

/// On a kernel whose `modify_dci_qp_is_ok` refuses a DCI's move to RESET, the initiator is
/// created again: a new queue pair number, and the pool keeps reporting its completions.
#[test]
fn on_a_kernel_without_the_dci_reset_a_recovered_initiator_comes_back_with_a_new_number() {
    let fabric = SimulatedFabric::new(11);
    fabric.set_kernel_without_dci_reset(true);
    let targets = targets(&fabric, 4, 0);
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(1)
        .build()
        .expect("a pool");
    let before = pool.initiator(0).expect("initiator 0").qp_number();
    // Once its destination was added with the old key (the endpoint follows the new one).
    let outcome = run(&mut pool, &targets, 5, Kind::Write, |_, _| targets[1].set_dc_key(0xbad));
    assert_eq!(outcome.completed.len(), 15, "{outcome:?}");
    assert_eq!(outcome.failed.len(), 5);
    let counters = fabric.counters();
    assert!(counters.rebuilds >= 1 && counters.recoveries == 0, "{counters:?}");
    assert_ne!(pool.initiator(0).expect("initiator 0").qp_number(), before);
}

/// After that rebuild, the initiator's completions still free its send queue: more requests
/// than it holds go through, and none is refused as a full queue the pool's room has room for.
#[test]
fn on_a_kernel_without_the_dci_reset_a_rebuilt_initiator_takes_more_than_its_send_queue() {
    let fabric = SimulatedFabric::new(12);
    fabric.set_kernel_without_dci_reset(true);
    let targets = targets(&fabric, 1, 0);
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(1)
        .setup_max_send_wr(4)
        .build()
        .expect("a pool");
    let outcome = run(&mut pool, &targets, 12, Kind::Write, |pool, polls| {
        if polls == 0 {
            pool.initiator(0).expect("initiator 0").move_to_error();
        }
    });
    assert_eq!(outcome.completed.len(), 12, "{outcome:?}");
    assert_eq!(fabric.counters().rebuilds, 1);
    assert_written(&targets, 12, &outcome);
}

/// The pool's grant timeout counts the fabric's ticks, not the machine's time: a destination
/// granted an initiator from the line and leaving it unused keeps it for exactly that many
/// ticks, however many polls (or how much real time) they take, then the next in line gets it.
#[test]
fn a_grant_left_unused_goes_to_the_next_in_line_after_its_timeout_in_ticks() {
    let fabric = SimulatedFabric::new(12);
    fabric.set_poll_ticks(false);
    let targets = targets(&fabric, 3, 0);
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(1)
        .setup_policy(DcPoolPolicy::Dedicated)
        .setup_grant_timeout(10)
        .build()
        .expect("a pool");
    let [first, second, third] = [0, 1, 2].map(|t| pool.add_destination(targets[t].endpoint()));
    // The first holds the only initiator with a request in flight; the others wait in line.
    let mut guard = pool.start_post_send(first).expect("the free initiator");
    add(&mut guard, Kind::Write, &targets[0], 1);
    guard.post().expect("posted");
    for waiting in [second, third] {
        let refused = pool
            .start_post_send(waiting)
            .map(drop)
            .expect_err("no initiator is free");
        assert!(
            matches!(
                refused.0,
                PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)
            ),
            "{refused:?}"
        );
    }
    // Its completion gives the initiator to the second, which is told so.
    let mut ready = Vec::new();
    while !ready.contains(&second) {
        assert!(fabric.now() < 100, "the first request never completed");
        fabric.advance(1);
        pool.poll(|event| {
            if let DcPoolEvent::Ready { destination } = event {
                ready.push(destination);
            }
        })
        .expect("a poll");
    }
    let granted = fabric.now();
    assert_eq!(pool.assignment(second), Some((0, None)));
    // The second posts nothing. Polls without ticks, and ticks up to the timeout, leave the
    // grant where it is.
    for _ in 0..1000 {
        pool.poll(|event| panic!("{event:?} before the timeout"))
            .expect("a poll");
    }
    fabric.advance(9);
    pool.poll(|event| panic!("{event:?} before the timeout"))
        .expect("a poll");
    assert_eq!(pool.assignment(second), Some((0, None)), "held for 9 ticks");
    // At the tenth tick it goes to the third.
    fabric.advance(1);
    assert_eq!(fabric.now(), granted + 10);
    let mut events = Vec::new();
    pool.poll(|event| events.push(event)).expect("a poll");
    assert!(
        matches!(events[..], [DcPoolEvent::Ready { destination }] if destination == third),
        "{events:?}"
    );
    assert_eq!(pool.assignment(second), None);
    assert_eq!(pool.assignment(third), Some((0, None)));
}
