//! The pool at scale on the software ConnectX, each destination a DC target of its own: 1 000
//! destinations under every policy with injected failures and a target killed mid-run, 10 000
//! destinations with a dead one, and hot destinations under a quota.
//!
//! Creating a DC target on the software device takes the longest part of these runs, and with
//! 10 000 targets in a process each pass of the device walks all their queue pairs: the
//! 10 000-destination run writes under the dedicated policy by default, every policy with
//! `SIDEWAY_EXT_TEST_SCALE=all`.
mod device;

use std::time::{Duration, Instant};

use device::*;
use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy, DestinationId};
use sideway_ext_dc_pool::DcInitiatorPool;

const POLICIES: [DcPoolPolicy; 4] = [
    DcPoolPolicy::Dedicated,
    DcPoolPolicy::DedicatedWithQuota { quota: 32 },
    DcPoolPolicy::Static,
    DcPoolPolicy::Streams,
];

/// A fabric of `targets` targets, a slot each, in a fabric directory of this process alone.
fn fabric_of(targets: usize) -> Fabric {
    let mut fabric = Fabric::new(0);
    fabric.remote = Buffer::new(&fabric.pd, targets * SLOT, all());
    for _ in 0..targets {
        fabric.add_target();
    }
    fabric
}

/// A pool of 16 initiators with a send queue of 64 (8 streams each under the streams policy,
/// ERR after 2 in error), a destination per target.
fn pool_of(fabric: &Fabric, policy: DcPoolPolicy, unreachable_after: u32) -> (DcInitiatorPool, Vec<DestinationId>) {
    let mut pool = fabric
        .streams_pool_builder(policy, 16, 64, 3, 1)
        .setup_unreachable_after(unreachable_after)
        .build()
        .expect("pool");
    let ids = (0..fabric.targets.len())
        .map(|t| pool.add_destination(fabric.endpoint(t)))
        .collect();
    (pool, ids)
}

/// What every scale run holds: each request reported once (`run` asserts it), the dead
/// destination and only it unreachable, failures only the injected ones, the requests of their
/// destination flushed behind them (at most a send queue each) and the dead one's, every
/// completed request's bytes at its target.
fn check_scale(
    fabric: &Fabric, outcome: &Outcome, ids: &[DestinationId], per_target: u64, bad: &[(usize, u64)], dead: usize,
    policy: DcPoolPolicy,
) {
    let total = ids.len() as u64 * per_target;
    assert_eq!(
        outcome.reported.len() as u64 + outcome.refused.len() as u64,
        total,
        "{policy:?}"
    );
    assert_eq!(
        outcome.unreachable,
        [ids[dead]],
        "{policy:?}: the dead destination, and only it"
    );
    let failed = outcome.failed();
    let dead_failures = failed.iter().filter(|((t, _), _)| *t == dead).count() as u64;
    assert!(dead_failures > 0, "{policy:?}");
    let injected = bad.len() as u64;
    let others = failed.len() as u64 - dead_failures;
    assert!(
        others <= injected * 64,
        "{policy:?}: {others} failures, more than {injected} × 64"
    );
    for &(t, n) in bad {
        assert!(
            matches!(
                outcome.reported.get(&(t, n)),
                Some(DcPoolEvent::Failed {
                    status: REM_ACCESS_ERR,
                    ..
                })
            ),
            "{policy:?}: injected failure {t}/{n}: {:?}",
            outcome.reported.get(&(t, n))
        );
    }
    for ((t, _), status) in &failed {
        if *t != dead {
            assert!(
                matches!(*status, REM_ACCESS_ERR | WR_FLUSH_ERR),
                "{policy:?}: {t} failed with {status}"
            );
            assert!(
                bad.iter().any(|(b, _)| b == t),
                "{policy:?}: {t} failed without an injected failure"
            );
        }
    }
    outcome.assert_written(fabric, per_target);
}

#[test]
fn a_thousand_destinations() {
    let dir = std::env::temp_dir().join(format!("softmlx5-thousand-{}", std::process::id()));
    on_device!(("SOFTMLX5_FABRIC", dir.to_str().expect("a UTF-8 path")));
    // One set of targets for both checks (creating them is most of the time).
    let fabric = fabric_of(1000);
    eprintln!("check a_thousand_destinations_under_every_policy_with_failures_and_a_target_killed_mid_run");
    a_thousand_destinations_under_every_policy_with_failures_and_a_target_killed_mid_run(&fabric);
    eprintln!("check a_quota_bounds_the_wait_hot_destinations_impose_on_the_others");
    a_quota_bounds_the_wait_hot_destinations_impose_on_the_others(&fabric);
}

fn a_thousand_destinations_under_every_policy_with_failures_and_a_target_killed_mid_run(fabric: &Fabric) {
    let dead = 424;
    // One request in 1 000 refused by its target.
    let bad: Vec<(usize, u64)> = (0..10).map(|k| (k * 97 + 3, (k % 10) as u64)).collect();
    for policy in POLICIES {
        let started = Instant::now();
        device().kill_target(fabric.dct_number(dead), false).expect("revive");
        // Unreachable at its first "no such target" error: the requests it posted behind that
        // one are flushed with it, and do not count.
        let (mut pool, ids) = pool_of(fabric, policy, 1);
        let mut killed = false;
        // Killed after the first round: a request of each destination posted.
        let outcome = run(&mut pool, fabric, &ids, 10, &bad, |_, _| {
            if !killed {
                device().kill_target(fabric.dct_number(dead), true).expect("kill");
                killed = true;
            }
        });
        eprintln!(
            "{policy:?}: 10 000 requests to 1 000 destinations in {:?}: {} completed, {} failed, {} retried",
            started.elapsed(),
            outcome.completed(),
            outcome.failed().len(),
            outcome.retried
        );
        check_scale(fabric, &outcome, &ids, 10, &bad, dead, policy);
    }
    device().kill_target(fabric.dct_number(dead), false).expect("revive");
}

/// Sixteen hot destinations post 80 requests each as fast as they can; the 984 others one
/// each, one arriving every second request posted. Without a quota the hot ones keep the sixteen
/// initiators while they have requests, and the others wait for all of it; with a quota they
/// give way when others are in line: the longest wait of a destination to post, counted in
/// requests the pool posted meanwhile, shrinks to a fraction.
fn a_quota_bounds_the_wait_hot_destinations_impose_on_the_others(fabric: &Fabric) {
    let longest_wait = |policy| {
        let (mut pool, ids) = pool_of(fabric, policy, 3);
        let mut left: Vec<u64> = (0..1000).map(|t| if t < 16 { 80 } else { 1 }).collect();
        let arrives = |t: usize| if t < 16 { 0 } else { 2 * (t as u64 - 16) };
        let mut refused_at: Vec<Option<u64>> = vec![None; 1000];
        let (mut posts, mut longest, mut reported) = (0u64, 0u64, 0u64);
        let total: u64 = left.iter().sum();
        let deadline = Instant::now() + Duration::from_secs(20);
        while reported < total {
            assert!(Instant::now() < deadline, "{policy:?}: {reported} of {total}");
            for t in 0..1000 {
                if left[t] == 0 || arrives(t) > posts {
                    continue;
                }
                match write(&mut pool, fabric, ids[t], t, &[left[t]]) {
                    Ok(_) => {
                        left[t] -= 1;
                        if let Some(at) = refused_at[t].take() {
                            longest = longest.max(posts - at);
                        }
                        posts += 1;
                    },
                    Err(e) if e.is_would_block() => {
                        refused_at[t].get_or_insert(posts);
                    },
                    Err(e) => panic!("{e}"),
                }
            }
            pool.poll(|event| {
                if matches!(event, DcPoolEvent::Completed { .. }) {
                    reported += 1;
                }
            })
            .expect("poll");
        }
        longest
    };
    let dedicated = longest_wait(DcPoolPolicy::Dedicated);
    let quota = longest_wait(DcPoolPolicy::DedicatedWithQuota { quota: 4 });
    eprintln!("longest wait to post: {dedicated} requests dedicated, {quota} with a quota of 4");
    assert!(
        quota * 2 < dedicated,
        "a quota bounds the wait: {quota} requests with it, {dedicated} without"
    );
}

#[test]
fn ten_thousand_destinations() {
    let dir = std::env::temp_dir().join(format!("softmlx5-ten-thousand-{}", std::process::id()));
    let scale = std::env::var("SIDEWAY_EXT_TEST_SCALE").unwrap_or_default();
    on_device!(
        ("SOFTMLX5_FABRIC", dir.to_str().expect("a UTF-8 path")),
        ("SIDEWAY_EXT_TEST_SCALE", scale.as_str())
    );
    checks!(ten_thousand_destinations_with_a_dead_one);
}

/// The policies the 10 000-destination run writes under: the dedicated one;
/// `SIDEWAY_EXT_TEST_SCALE=all` adds the quota, static and streams policies, which serialise a
/// DC initiator's many destinations (one DC target at a time) while each pass of the software
/// device walks its 10 000 queue pairs. The 1 000-destination run covers every policy in every
/// run.
fn ten_thousand_policies() -> Vec<DcPoolPolicy> {
    match std::env::var("SIDEWAY_EXT_TEST_SCALE").as_deref() {
        Ok("all") => POLICIES.to_vec(),
        _ => vec![DcPoolPolicy::Dedicated],
    }
}

fn ten_thousand_destinations_with_a_dead_one() {
    let started = Instant::now();
    let fabric = fabric_of(10_000);
    eprintln!("10 000 DC targets in {:?}", started.elapsed());
    let dead = 4242;
    device().kill_target(fabric.dct_number(dead), true).expect("kill");
    let bad = [(17, 0), (9001, 0)];
    for policy in ten_thousand_policies() {
        let started = Instant::now();
        // One request a destination: the dead one is unreachable after its one failure.
        let (mut pool, ids) = pool_of(&fabric, policy, 1);
        let outcome = run(&mut pool, &fabric, &ids, 1, &bad, |_, _| {});
        eprintln!(
            "{policy:?}: 10 000 destinations written in {:?}: {} completed, {} failed, {} retried",
            started.elapsed(),
            outcome.completed(),
            outcome.failed().len(),
            outcome.retried
        );
        check_scale(&fabric, &outcome, &ids, 1, &bad, dead, policy);
        let footprint = pool.footprint();
        assert_eq!(footprint.live_destinations, 10_000);
        assert_eq!((footprint.waiting, footprint.batch_records), (0, 0), "{footprint:?}");
    }
}
