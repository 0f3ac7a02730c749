//! The DCI pool driven on the simulated DC fabric ([`crate::simulation`], the crate's
//! one model of a ConnectX): a `DcInitiatorPool<SimulatedInitiator>` posting through its guard
//! and polling its CQ, with seeded latencies and failures, no device. The fabric's rules (each
//! stream executes in order, flushes behind an error, the asynchronous move to ERR after too
//! many stream errors, stream resets refused before the flush, RESET cleaning the CQ) are the
//! references', documented and sourced in that module; here they meet the pool:
//! - each destination's latency is drawn (most 1–4 ticks, one in 50 slow, 20–40); a DCI serves
//!   one target at a time, so a slow destination delays everything behind it on its initiator
//!   (or stream);
//! - a dead destination answers nothing: each request to it fails after a long timeout, mostly
//!   with "transport retry counter exceeded", sometimes with "remote invalid request", and
//!   sometimes with a remote access error, which the pool does not count as "no such target":
//!   unreachable is not true by construction; live destinations' requests fail now and then (the
//!   fabric's seeded failures: remote access errors, one in four a transient "retry exceeded").
//!
//! The fabric records how each request ended (executed, errored, flushed; the request's number
//! travels as its inline data), and the checks compare every report with it: every request is
//! reported exactly once; `Completed` only for a request that executed, `Failed` with its status
//! for the one that errored, `Retry` (or `Failed` with a flush status) only for one the fabric
//! flushed; a destination's completions come in posting order; nobody is in line while an
//! initiator is free; the dead destination is reported unreachable and the others finish.
use std::collections::VecDeque;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdma_mummy_sys::ibv_wc_status;
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};

use self::remote::Remote;
use super::completions::is_no_such_target;
use super::destination::Address;
use super::destinations::{PoolCore, Refusal};
use super::post_guard::{DcPoolPostGuard, PoolAddressing};
use super::requests::{encode, WrIds};
use super::types::{DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId, PostToDestinationErrorKind};
use super::DcInitiatorPool;
use crate::simulation::{SimulatedFabric, SimulatedInitiator};
use crate::test_support::{advance_clock, fake_now};
use sideway_ext::mlx5::dc::initiator::{DcAddress, DcStreamAddress, DciStreams};

const SUCCESS: u32 = ibv_wc_status::IBV_WC_SUCCESS;
const FLUSH: u32 = ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
const RETRY_EXC: u32 = ibv_wc_status::IBV_WC_RETRY_EXC_ERR;
const REM_ACCESS: u32 = ibv_wc_status::IBV_WC_REM_ACCESS_ERR;
const REM_INV_REQ: u32 = ibv_wc_status::IBV_WC_REM_INV_REQ_ERR;

/// What the fabric did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Truth {
    NotYet,
    Executed,
    Errored(u32),
    Flushed,
}

/// Reads how requests ended from the fabric's record.
fn learn(fabric: &SimulatedFabric, truth: &mut [Truth]) {
    for (request, status) in fabric.take_journal() {
        truth[request as usize] = match status {
            SUCCESS => Truth::Executed,
            FLUSH => Truth::Flushed,
            error => Truth::Errored(error),
        };
    }
}

/// Posts `requests` (their numbers) to `destination` as one batch, as far as the batch's room
/// goes: RDMA WRITEs of each number, inline, to the destination's target. With no request, the
/// batch is started and dropped unposted. Returns how many went in.
fn post(
    pool: &mut DcInitiatorPool<SimulatedInitiator>, destination: DestinationId, target: &Remote, requests: &[u64],
) -> Result<usize, PostToDestinationErrorKind> {
    let target = (target.region.rkey(), target.region.address());
    if pool.policy() == DcPoolPolicy::Streams {
        let guard = pool.start_post_send_on_stream(destination).map_err(|e| e.0)?;
        Ok(fill::<DcStreamAddress>(guard, target, requests))
    } else {
        let guard = pool.start_post_send(destination).map_err(|e| e.0)?;
        Ok(fill::<DcAddress>(guard, target, requests))
    }
}

fn fill<A: PoolAddressing>(
    mut guard: DcPoolPostGuard<'_, SimulatedInitiator, A>, (rkey, address): (u32, u64), requests: &[u64],
) -> usize {
    let count = guard.room().min(requests.len());
    if count == 0 {
        return 0;
    }
    for &request in &requests[..count] {
        guard
            .construct_wr(request, WorkRequestFlags::none())
            .expect("within the room")
            .setup_write(rkey, address)
            .setup_inline_data(&request.to_le_bytes());
    }
    guard.post().expect("the fabric takes a batch within the room");
    count
}

/// A target per destination, with the latency `latency` gives it.
fn targets(fabric: &SimulatedFabric, count: u32, mut latency: impl FnMut() -> u64) -> Vec<Remote> {
    (0..count)
        .map(|_| {
            fabric
                .create_target_builder()
                .setup_memory(8)
                .setup_latency(latency())
                .build()
                .expect("a target")
        })
        .map(Remote::new)
        .collect()
}

/// A pool on `fabric` of `initiators` with send queues of `capacity`, with DCI streams (2^`log`
/// per initiator; 2^`errored` of them in error move it to ERR) for the streams policy; the pool's clock
/// is the tests' (`advance_clock`).
fn pool(
    fabric: &SimulatedFabric, policy: DcPoolPolicy, initiators: usize, capacity: u32, log_streams: (u8, u8),
    unreachable_after: u32, grant_timeout: Duration,
) -> DcInitiatorPool<SimulatedInitiator> {
    let mut builder = fabric.create_pool_builder();
    builder
        .setup_initiators(initiators)
        .setup_policy(policy)
        .setup_max_send_wr(capacity)
        .setup_unreachable_after(unreachable_after);
    if policy == DcPoolPolicy::Streams {
        builder.setup_dci_streams(DciStreams {
            log_num_concurrent: log_streams.0,
            log_num_errored: log_streams.1,
        });
    }
    let mut pool = builder.build().expect("a simulated pool");
    pool.core.set_clock(fake_now);
    pool.set_timeouts(grant_timeout, None);
    pool
}

/// Adds a destination with an address to a bare bookkeeping core.
fn add(pool: &mut PoolCore<SimulatedInitiator>) -> DestinationId {
    let destination = pool.add_destination(None);
    assert!(pool.set_address(destination, Address::borrowed(std::ptr::NonNull::dangling(), 0, 0)));
    destination
}

/// What a request is for the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Pending,
    Completed,
    Failed,
}

/// Checks one report against what the fabric did; returns the request and its fate (`None` for
/// a retry, which the caller posts again).
fn check_report(event: &DcPoolEvent, truth: &[Truth], destination_of: &[u32]) -> Option<(u32, u32, Option<Fate>)> {
    let (destination, wr_id, fate) = match *event {
        DcPoolEvent::Completed { destination, wr_id } => {
            assert_eq!(
                truth[wr_id as usize],
                Truth::Executed,
                "request {wr_id} reported completed"
            );
            (destination, wr_id, Some(Fate::Completed))
        },
        DcPoolEvent::Failed {
            destination,
            wr_id,
            status,
            ..
        } => {
            let truth = truth[wr_id as usize];
            if status == FLUSH {
                assert_eq!(truth, Truth::Flushed, "request {wr_id} reported flushed");
            } else {
                assert_eq!(truth, Truth::Errored(status), "request {wr_id} reported failed");
            }
            (destination, wr_id, Some(Fate::Failed))
        },
        DcPoolEvent::Retry { destination, wr_id } => {
            assert_eq!(
                truth[wr_id as usize],
                Truth::Flushed,
                "request {wr_id} handed back for a retry: it was not flushed"
            );
            (destination, wr_id, None)
        },
        _ => return None,
    };
    assert_eq!(
        destination_of[wr_id as usize], destination.index,
        "request {wr_id} reported with the wrong destination"
    );
    Some((destination.index, wr_id as u32, fate))
}

#[derive(Debug, Clone, Copy)]
struct Scenario {
    policy: DcPoolPolicy,
    seed: u64,
    destinations: u32,
    initiators: u32,
    /// log2 of the DCI streams per initiator (streams policy).
    log_streams: u8,
    capacity: u32,
    requests: u32,
    /// Requests arriving per tick.
    arrivals_per_tick: u32,
    /// One request in this many fails (0: none).
    fail_one_in: u32,
    dead_destination: Option<u32>,
    /// The largest batch the driver posts to one destination.
    max_batch: usize,
    /// Share of requests (in percent) that go to the first `hot` destinations.
    hot: u32,
    hot_percent: u32,
    /// log2 of the streams an initiator allows in error before it goes to ERR as a whole.
    log_errored: u8,
    check_every_step: bool,
}

#[derive(Debug, Default)]
struct Report {
    ticks: u64,
    completed: u64,
    failed: u64,
    retried: u64,
    /// Requests reported a second time (must be 0).
    twice: u64,
    injected_failures: u64,
    recoveries: u64,
    stream_resets: u64,
    premature_resets: u64,
    /// The longest a request took from arrival to its report.
    max_latency: u64,
    /// The longest a destination with requests to post went without posting any (starvation).
    max_wait: u64,
    dead_requests: u64,
    unreachable: Vec<u32>,
}

const DEAD_TIMEOUT: u64 = 60;

fn run(s: Scenario) -> Report {
    let mut rng = StdRng::seed_from_u64(s.seed);
    let fabric = SimulatedFabric::new(s.seed);
    // The program keeps the time: one tick per round, as many polls as it takes.
    fabric.set_poll_ticks(false);
    fabric.set_transport_timeout(DEAD_TIMEOUT);
    // What a ConnectX may return for a DC target that is not there (mostly retry exceeded).
    fabric.set_dead_target_statuses(&[RETRY_EXC, RETRY_EXC, RETRY_EXC, REM_INV_REQ, REM_ACCESS]);
    fabric.set_random_failures(s.fail_one_in);
    // Seeded latencies: most destinations 1–4 ticks, one in 50 slow (20–40).
    let targets = targets(&fabric, s.destinations, || {
        if rng.random_ratio(1, 50) {
            rng.random_range(20..=40)
        } else {
            rng.random_range(1..=4)
        }
    });
    if let Some(dead) = s.dead_destination {
        targets[dead as usize].kill();
    }
    // One millisecond of the pool's clock per round: the grant timeout is 64 rounds.
    let log_streams = (s.log_streams, s.log_errored);
    let mut pool = pool(
        &fabric,
        s.policy,
        s.initiators as usize,
        s.capacity,
        log_streams,
        3,
        Duration::from_millis(64),
    );
    let destinations: Vec<DestinationId> = targets.iter().map(|t| pool.add_destination(t.endpoint())).collect();

    let total = s.requests as usize;
    let mut destination_of = Vec::with_capacity(total);
    let mut arrival = Vec::with_capacity(total);
    let mut truth = vec![Truth::NotYet; total];
    let mut fate = vec![Fate::Pending; total];
    let mut queue: Vec<VecDeque<u64>> = vec![VecDeque::new(); s.destinations as usize];
    // Per destination: the last request that completed (order check).
    let mut last_completed: Vec<Option<u32>> = vec![None; s.destinations as usize];
    // Destinations to try, in the order they got work (each once), and those reported ready.
    let mut pending: VecDeque<u32> = VecDeque::new();
    let mut in_pending = vec![false; s.destinations as usize];
    let mut ready: Vec<u32> = Vec::new();
    // Destinations refused for want of an initiator: in line until their Ready.
    let mut lined = vec![false; s.destinations as usize];
    let mut report = Report::default();
    let mut unreachable = vec![false; s.destinations as usize];
    // Per destination: since when it has had requests and posted none.
    let mut waiting_since: Vec<Option<u64>> = vec![None; s.destinations as usize];
    let mut arrived = 0usize;
    let mut settled = 0usize;
    let mut now = 0u64;

    let finish = |request: u32, outcome: Fate, fate: &mut Vec<Fate>, report: &mut Report, now: u64, arrival: &[u64]| {
        if fate[request as usize] != Fate::Pending {
            report.twice += 1;
            return false;
        }
        fate[request as usize] = outcome;
        report.max_latency = report.max_latency.max(now - arrival[request as usize]);
        match outcome {
            Fate::Completed => report.completed += 1,
            Fate::Failed => report.failed += 1,
            Fate::Pending => unreachable!(),
        }
        true
    };

    while settled < total {
        now += 1;
        assert!(
            now < 5_000_000,
            "the simulation does not finish: {settled} of {total} settled"
        );
        // 0. The fabric runs a tick: requests due end, pending moves to ERR happen.
        fabric.advance(1);
        // 1. Arrivals.
        for _ in 0..s.arrivals_per_tick {
            if arrived == total {
                break;
            }
            let d = if s.hot > 0 && rng.random_range(0..100) < s.hot_percent {
                rng.random_range(0..s.hot)
            } else if let Some(dead) = s.dead_destination.filter(|_| rng.random_ratio(1, 2000)) {
                dead
            } else {
                rng.random_range(0..s.destinations)
            };
            let request = arrived as u32;
            if Some(d) == s.dead_destination {
                report.dead_requests += 1;
            }
            destination_of.push(d);
            arrival.push(now);
            arrived += 1;
            if unreachable[d as usize] {
                finish(request, Fate::Failed, &mut fate, &mut report, now, &arrival);
                settled += 1;
                continue;
            }
            queue[d as usize].push_back(u64::from(request));
            waiting_since[d as usize].get_or_insert(now);
            if !in_pending[d as usize] {
                in_pending[d as usize] = true;
                pending.push_back(d);
            }
        }

        // 2. Posting: first the destinations the pool reported ready, then the others in the
        // order they got work. A destination refused for want of an initiator is in line and
        // waits for its Ready; no caller discipline beyond that.
        let mut tries: Vec<u32> = std::mem::take(&mut ready);
        let budget = pending.len().min(256);
        for _ in 0..budget {
            let Some(d) = pending.pop_front() else { break };
            in_pending[d as usize] = false;
            tries.push(d);
        }
        for d in tries {
            let id = destinations[d as usize];
            if queue[d as usize].is_empty() {
                pool.cancel_wait(id);
                continue;
            }
            let mut in_line = false;
            loop {
                if queue[d as usize].is_empty() {
                    break;
                }
                let batch: Vec<u64> = queue[d as usize].iter().take(s.max_batch).copied().collect();
                match post(&mut pool, id, &targets[d as usize], &batch) {
                    Ok(count) => {
                        queue[d as usize].drain(..count);
                        if let Some(since) = waiting_since[d as usize].take() {
                            report.max_wait = report.max_wait.max(now - since);
                        }
                        if !queue[d as usize].is_empty() {
                            waiting_since[d as usize] = Some(now);
                        }
                        if s.check_every_step {
                            pool.core.check_no_destination_stranded();
                        }
                    },
                    Err(PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)) => {
                        in_line = true;
                        lined[d as usize] = true;
                        break;
                    },
                    Err(PostToDestinationErrorKind::WouldBlock(
                        DcPoolWouldBlock::QueueFull
                        | DcPoolWouldBlock::QuotaExhausted
                        | DcPoolWouldBlock::Recovering { .. },
                    )) => break,
                    Err(PostToDestinationErrorKind::Unreachable) => {
                        unreachable[d as usize] = true;
                        while let Some(request) = queue[d as usize].pop_front() {
                            finish(request as u32, Fate::Failed, &mut fate, &mut report, now, &arrival);
                            settled += 1;
                        }
                        break;
                    },
                    Err(other) => panic!("unexpected refusal {other:?}"),
                }
            }
            if !queue[d as usize].is_empty() && !in_line && !in_pending[d as usize] {
                in_pending[d as usize] = true;
                pending.push_back(d);
            }
        }

        // 3. The pool polls the CQ until it is empty (and its clock moves on).
        let mut events = Vec::new();
        advance_clock(Duration::from_millis(1));
        while pool.poll(|e| events.push(e)).expect("poll") == 32 {}
        if s.check_every_step {
            pool.core.check_no_destination_stranded();
        }
        learn(&fabric, &mut truth);
        let mut retries: Vec<(u32, u32)> = Vec::new();
        for event in events {
            match event {
                // This driver retries the other would-blocks in the order destinations got work
                // (their Ready is not needed to finish: it keeps the schedule the figures were
                // measured with); a destination in line waits for its Ready.
                DcPoolEvent::Ready { destination } => {
                    if std::mem::take(&mut lined[destination.index()]) {
                        ready.push(destination.index);
                    }
                },
                DcPoolEvent::Unreachable { destination } => report.unreachable.push(destination.index),
                DcPoolEvent::InitiatorLost { initiator, error } => panic!("initiator {initiator} lost: {error}"),
                event => {
                    let checked = check_report(&event, &truth, &destination_of);
                    let Some((d, request, outcome)) = checked else {
                        panic!("unexpected {event:?}")
                    };
                    match outcome {
                        Some(Fate::Completed) => {
                            let previous = last_completed[d as usize];
                            assert!(
                                previous.is_none_or(|p| p < request),
                                "{:?}: destination {d} completed request {request} after {previous:?}",
                                s.policy,
                            );
                            last_completed[d as usize] = Some(request);
                            if finish(request, Fate::Completed, &mut fate, &mut report, now, &arrival) {
                                settled += 1;
                            }
                        },
                        Some(outcome) => {
                            if finish(request, outcome, &mut fate, &mut report, now, &arrival) {
                                settled += 1;
                            }
                        },
                        None => {
                            assert_eq!(
                                fate[request as usize],
                                Fate::Pending,
                                "request {request} retried after its end"
                            );
                            report.retried += 1;
                            truth[request as usize] = Truth::NotYet;
                            retries.push((d, request));
                        },
                    }
                },
            }
        }
        // Retries go back before the destination's newer requests, in their order (also before
        // requests retried in an earlier round that are newer).
        for (d, request) in retries {
            let queue = &mut queue[d as usize];
            queue.insert(queue.partition_point(|&r| r < u64::from(request)), u64::from(request));
            waiting_since[d as usize].get_or_insert(now);
            if !in_pending[d as usize] {
                in_pending[d as usize] = true;
                pending.push_back(d);
            }
        }
    }
    pool.core.check_no_destination_stranded();
    report.ticks = now;
    let counters = fabric.counters();
    report.recoveries = counters.recoveries;
    report.stream_resets = counters.stream_resets;
    report.premature_resets = counters.premature_stream_resets;
    // The fabric's failures at live destinations: the injected ones.
    report.injected_failures = counters.failed - dead_failures(&truth, &destination_of, s.dead_destination);
    assert!(fate.iter().all(|f| *f != Fate::Pending));
    report
}

/// Requests to the dead destination whose last end was an error of their own (not a flush).
fn dead_failures(truth: &[Truth], destination_of: &[u32], dead: Option<u32>) -> u64 {
    truth
        .iter()
        .zip(destination_of)
        .filter(|(truth, d)| Some(**d) == dead && matches!(truth, Truth::Errored(_)))
        .count() as u64
}

fn scale(policy: DcPoolPolicy, log_streams: u8) -> Scenario {
    Scenario {
        policy,
        seed: 0x5eed,
        destinations: 10_000,
        initiators: 16,
        log_streams,
        capacity: 64,
        requests: 1_000_000,
        arrivals_per_tick: 50,
        fail_one_in: 1000,
        dead_destination: Some(4242),
        max_batch: 32,
        hot: 0,
        hot_percent: 0,
        log_errored: 1,
        check_every_step: false,
    }
}

fn check_scale(report: &Report, s: &Scenario) {
    println!(
        "{:?}: {} requests to {} destinations on {} initiators{}: {} ticks, {} completed, {} failed ({} injected), {} retried, {} reported twice, {} recoveries, {} stream resets ({} premature), longest wait of a destination to post {} ticks, longest request latency {} ticks",
        s.policy,
        s.requests,
        s.destinations,
        s.initiators,
        if s.policy == DcPoolPolicy::Streams { format!(" × {} streams", 1u32 << s.log_streams) } else { String::new() },
        report.ticks,
        report.completed,
        report.failed,
        report.injected_failures,
        report.retried,
        report.twice,
        report.recoveries,
        report.stream_resets,
        report.premature_resets,
        report.max_wait,
        report.max_latency
    );
    assert_eq!(report.twice, 0, "requests reported twice");
    assert_eq!(report.premature_resets, 0, "streams reset before their flush");
    assert_eq!(report.completed + report.failed, u64::from(s.requests));
    assert_eq!(
        report.unreachable,
        vec![s.dead_destination.unwrap()],
        "the dead destination, and only it"
    );
    assert!(report.injected_failures > 0 && report.recoveries + report.stream_resets > 0);
    // Failures: the injected ones, the requests of the same destination flushed behind each (at
    // most a send queue), and the dead destination's.
    let bound = report.injected_failures * u64::from(s.capacity) + report.dead_requests;
    assert!(report.failed <= bound, "{} failures, more than {bound}", report.failed);
}

#[test]
fn ten_thousand_destinations_dedicated() {
    let s = scale(DcPoolPolicy::Dedicated, 0);
    let report = run(s);
    check_scale(&report, &s);
}

#[test]
fn ten_thousand_destinations_dedicated_with_quota() {
    let s = scale(DcPoolPolicy::DedicatedWithQuota { quota: 32 }, 0);
    let report = run(s);
    check_scale(&report, &s);
}

#[test]
fn ten_thousand_destinations_static() {
    let s = scale(DcPoolPolicy::Static, 0);
    let report = run(s);
    check_scale(&report, &s);
}

#[test]
fn ten_thousand_destinations_streams() {
    let s = scale(DcPoolPolicy::Streams, 3);
    let report = run(s);
    check_scale(&report, &s);
    assert!(
        report.stream_resets > 0,
        "streams were reset, not only whole initiators"
    );
}

/// Streams under many errors: one request in 40 fails, and an initiator goes to ERR as a whole
/// (some ticks later) once a second stream errs while one is: the whole-initiator path, with the
/// other streams' completions still coming after the errors, and no destination stranded at
/// every step.
#[test]
fn streams_whose_initiators_go_to_err_after_too_many_stream_errors() {
    let s = Scenario {
        requests: 30_000,
        destinations: 1000,
        fail_one_in: 40,
        dead_destination: None,
        log_errored: 0,
        check_every_step: true,
        ..scale(DcPoolPolicy::Streams, 3)
    };
    let report = run(s);
    println!(
        "Streams, many errors: {} completed, {} failed, {} retried, {} reported twice, {} recoveries, {} stream resets ({} premature)",
        report.completed, report.failed, report.retried, report.twice, report.recoveries, report.stream_resets, report.premature_resets
    );
    assert_eq!(report.twice, 0);
    assert_eq!(report.premature_resets, 0);
    assert_eq!(report.completed + report.failed, u64::from(s.requests));
    assert!(
        report.recoveries > 0,
        "initiators went to ERR as a whole and were recovered"
    );
    assert!(report.stream_resets > 0);
}

/// The longest wait under a quota with hot destinations: a bound the quota meets and
/// `Dedicated` does not (so that the test fails if the quota stops working).
const HOT_WAIT_BOUND: u64 = 400;

/// Sixteen hot destinations take most of the traffic. Without a quota they keep the sixteen
/// initiators busy as long as requests keep coming, and the other destinations wait for all of
/// it; with a quota they give way, and the longest wait shrinks to a fraction.
#[test]
fn a_quota_bounds_the_wait_hot_destinations_impose_on_the_others() {
    let hot = |policy| Scenario {
        policy,
        seed: 0x407,
        destinations: 1000,
        initiators: 16,
        log_streams: 0,
        capacity: 64,
        requests: 200_000,
        arrivals_per_tick: 60,
        fail_one_in: 0,
        dead_destination: None,
        max_batch: 32,
        hot: 16,
        hot_percent: 90,
        log_errored: 1,
        check_every_step: false,
    };
    let dedicated = run(hot(DcPoolPolicy::Dedicated));
    let quota = run(hot(DcPoolPolicy::DedicatedWithQuota { quota: 16 }));
    println!(
        "16 hot destinations of 1000: longest wait of a destination to post {} ticks dedicated, {} ticks with a quota of 16 ({} and {} ticks in all)",
        dedicated.max_wait, quota.max_wait, dedicated.ticks, quota.ticks
    );
    assert_eq!(dedicated.completed, 200_000);
    assert_eq!(quota.completed, 200_000);
    assert!(
        quota.max_wait <= HOT_WAIT_BOUND,
        "with a quota, a destination waited {} ticks to post",
        quota.max_wait
    );
    assert!(
        dedicated.max_wait > HOT_WAIT_BOUND,
        "the bound must be one Dedicated misses, else it proves nothing: {}",
        dedicated.max_wait
    );
}

/// The dead destination's statuses: those a ConnectX may return for a DC target that is not
/// there. The pool counts the first two towards "unreachable", not the third (a remote access
/// error is also a wrong key), so the simulation's dead destination is not unreachable by
/// construction: it is after 3 counted errors in a row.
#[test]
fn the_dead_destinations_statuses_are_counted_as_the_pool_counts_them() {
    assert!(is_no_such_target(RETRY_EXC));
    assert!(is_no_such_target(REM_INV_REQ));
    assert!(!is_no_such_target(REM_ACCESS));
    assert!(!is_no_such_target(FLUSH));
}

/// A pool built by hand without initiators (the builder refuses 0) binds nothing and refuses
/// posts, under every policy, rather than dividing by zero.
#[test]
fn a_pool_without_initiators_refuses_posts() {
    for policy in [DcPoolPolicy::Dedicated, DcPoolPolicy::Static, DcPoolPolicy::Streams] {
        let mut pool = PoolCore::<SimulatedInitiator>::new(Vec::new(), policy, 3);
        let destination = add(&mut pool);
        assert_eq!(pool.assignment(destination), None);
        assert!(matches!(pool.begin(destination), Err(Refusal::NoInitiatorInService)));
        pool.check_no_destination_stranded();
    }
}

/// 65 536 initiators (the most a pool numbers) are all granted: none is left out of the free
/// list by a 16-bit range that wraps to empty.
#[test]
fn sixty_five_thousand_five_hundred_thirty_six_initiators_are_all_granted() {
    let count = super::requests::MAX_INITIATORS;
    let fabric = SimulatedFabric::new(0);
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(count)
        .setup_max_send_wr(1)
        .build()
        .expect("a simulated pool")
        .core;
    let mut held = std::collections::HashSet::new();
    for _ in 0..count {
        let destination = add(&mut pool);
        let grant = pool.begin(destination).expect("an initiator is free");
        pool.commit(grant.initiator, grant.destination, grant.stream, 1);
        assert!(held.insert(grant.initiator));
    }
    assert_eq!(held.len(), count);
    let one_more = add(&mut pool);
    assert_eq!(
        pool.begin(one_more).unwrap_err(),
        Refusal::WouldBlock(DcPoolWouldBlock::NoInitiator)
    );
    // The last one numbers its requests as initiator 65 535.
    assert!(held.contains(&(count - 1)));
}

/// A million destinations come and go, 10 000 live at a time, each posting and completing once:
/// what the pool holds stays what 10 000 live destinations need.
#[test]
fn a_million_destinations_come_and_go_in_bounded_memory() {
    for policy in [DcPoolPolicy::Dedicated, DcPoolPolicy::Static] {
        let fabric = SimulatedFabric::new(0);
        let mut pool = fabric
            .create_pool_builder()
            .setup_initiators(16)
            .setup_max_send_wr(64)
            .setup_policy(policy)
            .build()
            .expect("a simulated pool")
            .core;
        let mut wr_ids = WrIds::new(&pool.requests);
        let mut live: VecDeque<DestinationId> = VecDeque::new();
        let mut peak = super::types::DcPoolFootprint::default();
        for n in 0..1_000_000u64 {
            let destination = add(&mut pool);
            live.push_back(destination);
            // Post one request; refused ones (in line) are cancelled before removal.
            if let Ok(grant) = pool.begin(destination) {
                wr_ids.set(grant.slot, n);
                pool.commit(grant.initiator, grant.destination, grant.stream, 1);
                assert!(pool.complete(&wr_ids, encode(grant.initiator, grant.first), SUCCESS, 0, &mut |_| {}));
            }
            if live.len() > 10_000 {
                let old = live.pop_front().unwrap();
                pool.cancel_wait(old);
                pool.remove_destination(old).expect("nothing outstanding");
                // Stale: refused, never another destination.
                assert_eq!(pool.begin(old).unwrap_err(), Refusal::UnknownDestination);
                assert!(pool.remove_destination(old).is_err());
            }
            // Counted when asked (a walk of the places): every 97th step, the leak of a record
            // grows over many.
            if n % 97 != 0 {
                continue;
            }
            let footprint = pool.footprint();
            peak.destination_places = peak.destination_places.max(footprint.destination_places);
            peak.waiting = peak.waiting.max(footprint.waiting);
            peak.batch_records = peak.batch_records.max(footprint.batch_records);
            peak.grant_timers = peak.grant_timers.max(footprint.grant_timers);
        }
        pool.check_no_destination_stranded();
        let footprint = pool.footprint();
        assert_eq!(footprint.live_destinations, 10_000, "{policy:?}");
        assert!(peak.destination_places <= 10_001, "{policy:?}: {peak:?}");
        assert!(
            peak.waiting <= 10_001 && peak.batch_records <= 16,
            "{policy:?}: {peak:?}"
        );
        assert_eq!(peak.grant_timers, 0, "{policy:?}: no grant from the line was needed");
    }
}

mod properties {
    //! Any interleaving of posts, dropped batches, executions, error completions, asynchronous
    //! moves to ERR, flushes, polls (through `poll`, and a completion at a time through
    //! `complete`), cancellations and removals strands no destination, and reports
    //! every request exactly once, as the fabric saw it. The test drives the fabric's execution
    //! by hand.
    use proptest::prelude::*;

    use super::*;
    use sideway_ext::ibverbs::work_completion::{poll as poll_cq, WorkCompletion};

    #[derive(Debug, Clone)]
    enum Op {
        /// Post `count` requests to a destination.
        Post {
            destination: u32,
            count: usize,
        },
        /// Begin a batch and drop it unposted.
        Drop {
            destination: u32,
        },
        /// Execute up to `count` requests at the head of an initiator's lane (flush them when it
        /// is in error).
        Execute {
            initiator: usize,
            lane: usize,
            count: usize,
        },
        /// The head request of a lane fails with an error completion.
        Fail {
            initiator: usize,
            lane: usize,
            status: u32,
        },
        /// The whole initiator goes to ERR by itself (no error completion first).
        Error {
            initiator: usize,
        },
        /// Time passes: asynchronous moves to ERR happen.
        Advance,
        /// The caller polls up to `count` completions and hands each to `complete`, or (from 8
        /// on) the pool polls (`poll`).
        Poll {
            count: usize,
        },
        /// The pool's clock moves on (grant timeouts).
        Tick,
        Revive {
            destination: u32,
        },
        CancelWait {
            destination: u32,
        },
        /// Removes a destination (refused while it has requests outstanding) and adds another.
        Replace {
            destination: u32,
        },
    }

    fn status() -> impl Strategy<Value = u32> {
        prop_oneof![Just(RETRY_EXC), Just(REM_ACCESS), Just(REM_INV_REQ)]
    }

    fn op(destinations: u32, initiators: usize, lanes: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..destinations, 1..6usize).prop_map(|(destination, count)| Op::Post { destination, count }),
            1 => (0..destinations).prop_map(|destination| Op::Drop { destination }),
            4 => (0..initiators, 0..lanes, 1..4usize).prop_map(|(initiator, lane, count)| Op::Execute { initiator, lane, count }),
            1 => (0..initiators, 0..lanes, status()).prop_map(|(initiator, lane, status)| Op::Fail { initiator, lane, status }),
            1 => (0..initiators).prop_map(|initiator| Op::Error { initiator }),
            1 => Just(Op::Advance),
            3 => (1..10usize).prop_map(|count| Op::Poll { count }),
            1 => Just(Op::Tick),
            1 => (0..destinations).prop_map(|destination| Op::Revive { destination }),
            1 => (0..destinations).prop_map(|destination| Op::CancelWait { destination }),
            1 => (0..destinations).prop_map(|destination| Op::Replace { destination }),
        ]
    }

    fn policy() -> impl Strategy<Value = DcPoolPolicy> {
        prop_oneof![
            Just(DcPoolPolicy::Dedicated),
            (1..4u32).prop_map(|quota| DcPoolPolicy::DedicatedWithQuota { quota }),
            Just(DcPoolPolicy::Static),
            Just(DcPoolPolicy::Streams),
        ]
    }

    const DESTINATIONS: u32 = 5;
    const INITIATORS: usize = 3;
    /// Streams per initiator (2^2); 2^0 of them in error (the first) move it to ERR.
    const LANES: usize = 4;

    /// The state of a run.
    struct Run {
        fabric: SimulatedFabric,
        pool: DcInitiatorPool<SimulatedInitiator>,
        /// The target of each of the `DESTINATIONS` slots of the ops.
        targets: Vec<Remote>,
        /// The live destination in each slot.
        ids: Vec<DestinationId>,
        /// Per request: its destination's place, what the fabric did, and its fate.
        destination_of: Vec<u32>,
        truth: Vec<Truth>,
        fates: Vec<Fate>,
        /// Per destination place: the last request completed (order).
        last_completed: Vec<Option<u32>>,
        /// Per destination place: refused for want of an initiator and not served since.
        in_line: Vec<bool>,
    }

    impl Run {
        fn post(&mut self, slot: u32, count: usize) {
            let id = self.ids[slot as usize];
            let first = self.fates.len() as u64;
            let requests: Vec<u64> = (first..first + count as u64).collect();
            match post(&mut self.pool, id, &self.targets[slot as usize], &requests) {
                Ok(posted) => {
                    self.in_line[id.index()] = false;
                    for _ in 0..posted {
                        self.fates.push(Fate::Pending);
                        self.destination_of.push(id.index);
                        self.truth.push(Truth::NotYet);
                    }
                },
                Err(PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)) => {
                    self.in_line[id.index()] = true
                },
                Err(_) => {},
            }
        }

        fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
            match *op {
                Op::Post { destination, count } => self.post(destination, count),
                Op::Drop { destination } => self.post(destination, 0),
                Op::Execute { initiator, lane, count } => {
                    self.fabric
                        .execute(initiator, lane % self.fabric.lanes(initiator), count)
                },
                Op::Fail {
                    initiator,
                    lane,
                    status,
                } => self
                    .fabric
                    .fail_head(initiator, lane % self.fabric.lanes(initiator), status),
                Op::Error { initiator } => self.pool.initiator(initiator).expect("an initiator").move_to_error(),
                Op::Advance => self.fabric.advance(1),
                Op::Poll { count } if count >= 8 => {
                    let mut events = Vec::new();
                    self.pool.poll(|e| events.push(e)).expect("poll");
                    self.settle(events)?;
                },
                Op::Poll { count } => {
                    let mut events = Vec::new();
                    let cq = self.pool.send_cq().expect("the simulated CQ").raw();
                    let mut wcs = vec![WorkCompletion::default(); count];
                    // SAFETY: the pool's CQ, alive while the pool is.
                    let polled = unsafe { poll_cq(cq, &mut wcs) }.expect("poll");
                    for wc in polled {
                        prop_assert!(self.pool.complete(wc, |e| events.push(e)), "not the pool's: {:?}", wc);
                    }
                    self.settle(events)?;
                },
                Op::Tick => {
                    let mut events = Vec::new();
                    advance_clock(Duration::from_millis(1));
                    self.pool.progress(|e| events.push(e));
                    self.settle(events)?;
                },
                Op::Revive { destination } => self.pool.revive(self.ids[destination as usize]),
                Op::CancelWait { destination } => {
                    let id = self.ids[destination as usize];
                    self.pool.cancel_wait(id);
                    self.in_line[id.index()] = false;
                },
                Op::Replace { destination } => {
                    let id = self.ids[destination as usize];
                    let outstanding = self.pool.outstanding(id);
                    match self.pool.remove_destination(id) {
                        Ok(()) => {
                            prop_assert_eq!(outstanding, 0);
                            self.in_line[id.index()] = false;
                            let target = &self.targets[destination as usize];
                            prop_assert!(matches!(
                                post(&mut self.pool, id, target, &[]),
                                Err(PostToDestinationErrorKind::UnknownDestination)
                            ));
                            let new = self.pool.add_destination(target.endpoint());
                            prop_assert!(new != id);
                            if new.index() >= self.in_line.len() {
                                self.in_line.resize(new.index() + 1, false);
                            }
                            self.ids[destination as usize] = new;
                        },
                        Err(_) => prop_assert!(outstanding > 0),
                    }
                },
            }
            Ok(())
        }

        fn settle(&mut self, events: Vec<DcPoolEvent>) -> Result<(), TestCaseError> {
            learn(&self.fabric, &mut self.truth);
            for event in events {
                match event {
                    DcPoolEvent::Ready { destination } => {
                        prop_assert!(self.pool.core.contains(destination));
                        self.in_line[destination.index()] = false;
                        continue;
                    },
                    DcPoolEvent::Unreachable { .. } => continue,
                    DcPoolEvent::InitiatorLost { .. } => return Err(TestCaseError::fail("initiator lost")),
                    _ => {},
                }
                let Some((d, request, fate)) = check_report(&event, &self.truth, &self.destination_of) else {
                    return Err(TestCaseError::fail(format!("unexpected {event:?}")));
                };
                prop_assert_eq!(
                    self.fates[request as usize],
                    Fate::Pending,
                    "request {} reported twice",
                    request
                );
                // A retry is not an end, but this driver does not post it again.
                let fate = fate.unwrap_or(Fate::Failed);
                if fate == Fate::Completed {
                    let previous = self.last_completed[d as usize];
                    prop_assert!(
                        previous.is_none_or(|p| p < request),
                        "destination {} completed {} after {:?}",
                        d,
                        request,
                        previous
                    );
                    self.last_completed[d as usize] = Some(request);
                }
                self.fates[request as usize] = fate;
            }
            Ok(())
        }
    }

    /// Runs `ops`, then drains everything (executes, polls and ticks until nothing is left).
    fn check(policy: DcPoolPolicy, capacity: u32, ops: Vec<Op>) -> Result<(), TestCaseError> {
        let fabric = SimulatedFabric::new(0);
        fabric.set_manual(true);
        fabric.set_poll_ticks(false);
        let targets = targets(&fabric, DESTINATIONS, || 1);
        let mut pool = pool(
            &fabric,
            policy,
            INITIATORS,
            capacity,
            (2, 0),
            2,
            Duration::from_millis(4),
        );
        let ids: Vec<_> = targets.iter().map(|t| pool.add_destination(t.endpoint())).collect();
        let mut run = Run {
            fabric,
            pool,
            targets,
            ids,
            destination_of: Vec::new(),
            truth: Vec::new(),
            fates: Vec::new(),
            last_completed: vec![None; 64],
            in_line: vec![false; DESTINATIONS as usize],
        };

        for op in &ops {
            run.apply(op)?;
            run.pool.core.check_no_destination_stranded();
        }
        // Drain: time passes, everything executes (or flushes), the pool polls and ticks, until
        // nothing is left anywhere; destinations posting nothing let their grants expire.
        for _ in 0..1000 {
            run.apply(&Op::Advance)?;
            for initiator in 0..INITIATORS {
                for lane in 0..LANES {
                    run.apply(&Op::Execute {
                        initiator,
                        lane,
                        count: usize::MAX,
                    })?;
                }
            }
            run.apply(&Op::Poll { count: 64 })?;
            run.apply(&Op::Tick)?;
            run.pool.core.check_no_destination_stranded();
            let idle = run.fabric.is_idle()
                && run.fates.iter().all(|f| *f != Fate::Pending)
                && run.pool.waiting().next().is_none()
                && run.pool.footprint().grant_timers == 0;
            if idle {
                break;
            }
        }
        for (request, fate) in run.fates.iter().enumerate() {
            prop_assert_ne!(*fate, Fate::Pending, "request {} never reported", request);
        }
        for id in &run.ids {
            prop_assert_eq!(run.pool.outstanding(*id), 0);
        }
        // Nobody waits forever: every destination refused for want of an initiator was served
        // (Ready) or left the line.
        prop_assert!(run.pool.waiting().next().is_none(), "destinations still in line");
        for id in &run.ids {
            prop_assert!(!run.in_line[id.index()], "destination {:?} never got its Ready", id);
        }
        let counters = run.fabric.counters();
        prop_assert_eq!(counters.premature_stream_resets, 0, "a stream reset before its flush");
        prop_assert_eq!(
            counters.cleaned_completions,
            0,
            "a recovery before every completion was seen"
        );
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

        #[test]
        fn any_interleaving_reports_every_request_exactly_once_as_the_fabric_saw_it(
            policy in policy(),
            capacity in 1..6u32,
            ops in proptest::collection::vec(op(DESTINATIONS, INITIATORS, LANES), 0..100),
        ) {
            check(policy, capacity, ops)?;
        }
    }
}

mod faults;
mod remote;
mod wrong_key;
