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
use super::destination::Target;
use super::destinations::{PoolCore, Refusal};
use super::post_guard::DcPoolPostGuard;
use super::requests::{encode, WrIds};
use super::settings::DcPoolSettings;
use super::types::{DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId, PostToDestinationErrorKind};
use super::DcInitiatorPool;
use crate::simulation::{SimulatedFabric, SimulatedInitiator};
use crate::test_support::{advance_clock, fake_now};
use sideway_ext::mlx5::dc::initiator::DciStreams;

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
        Ok(fill(guard, target, requests))
    } else {
        let guard = pool.start_post_send(destination).map_err(|e| e.0)?;
        Ok(fill(guard, target, requests))
    }
}

fn fill(mut guard: DcPoolPostGuard<'_, SimulatedInitiator>, (rkey, address): (u32, u64), requests: &[u64]) -> usize {
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
    let DcInitiatorPool {
        initiators, send_cq, ..
    } = builder.build().expect("a simulated pool");
    let mut settings = DcPoolSettings::default();
    settings
        .setup_policy(policy)
        .setup_unreachable_after(unreachable_after)
        .setup_clock(fake_now)
        .setup_grant_timeout(grant_timeout)
        .setup_stall_timeout(None);
    DcInitiatorPool::from_initiators(initiators, send_cq, &settings).expect("a simulated pool")
}

/// Adds a destination with an address to a bare bookkeeping core.
fn add(pool: &mut PoolCore) -> DestinationId {
    pool.add_destination(Target::Addressed {
        dct_number: 0,
        dc_key: 0,
    })
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

mod bounds;
mod faults;
mod properties;
mod remote;
mod scale;
mod wrong_key;
