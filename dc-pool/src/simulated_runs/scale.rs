//! Ten thousand destinations on the simulated fabric under every policy, streams under many
//! errors, hot destinations under a quota, and the dead destination's statuses.
use super::*;

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
