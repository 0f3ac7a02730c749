//! Stalls on the software ConnectX: a SEND to a target whose receive queue is empty is retried
//! for ever (receiver not ready, `rnr_retry` 7) with no completion; the pool reports it
//! `Stalled` once, after its stall timeout, while another destination keeps writing. A pool made
//! from initiators made elsewhere takes every setting a builder's pool takes: its clock, its
//! grant timeout, and its stall timeout, on by default.
mod device;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use device::*;
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::mlx5::dc::endpoint::DcServiceClass;
use sideway_ext_dc_pool::settings::DcPoolSettings;
use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy, DestinationId};
use sideway_ext_dc_pool::DcInitiatorPool;

/// The pool's stall timeout.
const TIMEOUT: Duration = Duration::from_millis(100);

fn setup(policy: DcPoolPolicy, stall: Option<Duration>) -> (Fabric, DcInitiatorPool, Vec<DestinationId>) {
    let fabric = Fabric::new(2);
    let mut pool = fabric
        .pool_builder(policy, 2, 64)
        .setup_stall_timeout(stall)
        .build()
        .expect("pool");
    let ids = (0..2).map(|t| pool.add_destination(fabric.endpoint(t))).collect();
    (fabric, pool, ids)
}

/// One SEND of 64 bytes (local slot 5) to `destination`.
fn send(pool: &mut DcInitiatorPool, fabric: &Fabric, destination: DestinationId, wr_id: u64) {
    let (lkey, from) = (fabric.local.mr.lkey(), fabric.local.addr(5 * SLOT));
    macro_rules! fill {
        ($guard:expr) => {{
            let mut guard = $guard.expect("a batch");
            // SAFETY: the local region outlives the completion.
            unsafe {
                guard
                    .construct_wr(wr_id, WorkRequestFlags::Signaled)
                    .expect("room")
                    .setup_send()
                    .setup_sge(lkey, from, 64)
            };
            guard.post().expect("post");
        }};
    }
    if pool.policy() == DcPoolPolicy::Streams {
        fill!(pool.start_post_send_on_stream(destination))
    } else {
        fill!(pool.start_post_send(destination))
    }
}

/// What a run saw: the stalls (when, the event) and the completions (when, wr_id).
#[derive(Default)]
struct Seen {
    stalls: Vec<(Instant, DcPoolEvent)>,
    completed: Vec<(Instant, u64)>,
}

/// For `duration`, keeps a WRITE in flight to target 1 (`ids[1]`) and polls.
fn run(pool: &mut DcInitiatorPool, fabric: &Fabric, ids: &[DestinationId], duration: Duration, next: &mut u64) -> Seen {
    let mut seen = Seen::default();
    let end = Instant::now() + duration;
    while Instant::now() < end {
        if pool.outstanding(ids[1]) == 0 && write(pool, fabric, ids[1], 1, &[*next]).is_ok() {
            *next += 1;
        }
        let now = Instant::now();
        pool.poll(|event| match event {
            DcPoolEvent::Stalled { .. } => seen.stalls.push((now, event)),
            DcPoolEvent::Completed { wr_id, .. } => seen.completed.push((now, wr_id)),
            other => panic!("{other:?}"),
        })
        .expect("poll");
        std::thread::sleep(Duration::from_micros(100));
    }
    seen
}

#[test]
fn stalls() {
    on_device!();
    checks!(
        a_stalled_destination_is_reported_once_after_the_timeout_and_again_for_a_later_stall,
        no_stall_is_reported_when_reports_are_off_or_requests_keep_completing,
        a_pool_made_from_initiators_reports_a_request_stuck_past_the_stall_timeout_once,
        a_pool_made_from_initiators_takes_its_grant_timeout_and_no_stall_timeout,
    );
}

fn a_stalled_destination_is_reported_once_after_the_timeout_and_again_for_a_later_stall() {
    for policy in [DcPoolPolicy::Dedicated, DcPoolPolicy::Static, DcPoolPolicy::Streams] {
        let (mut fabric, mut pool, ids) = setup(policy, Some(TIMEOUT));
        let mut next = 1000;
        send(&mut pool, &fabric, ids[0], 1);
        let posted = Instant::now();
        let (initiator, stream) = pool.assignment(ids[0]).expect("assigned");
        let stalled = DcPoolEvent::Stalled {
            destination: ids[0],
            initiator,
            stream,
        };
        let mut seen = run(&mut pool, &fabric, &ids, 2 * TIMEOUT + TIMEOUT / 2, &mut next);
        // Exactly once, no earlier than the timeout after the post, about an eighth later at
        // most (with room for a loaded machine). (The writing destination's requests are
        // reported too, should the machine stop this process for longer than the timeout.)
        seen.stalls
            .retain(|(_, e)| matches!(e, DcPoolEvent::Stalled { destination, .. } if *destination == ids[0]));
        assert_eq!(seen.stalls.len(), 1, "{policy:?}: {:?}", seen.stalls);
        let (at, ref event) = seen.stalls[0];
        assert_eq!(*event, stalled, "{policy:?}");
        let after = at - posted;
        assert!(after >= TIMEOUT, "{policy:?}: reported {after:?} after the post");
        assert!(
            after <= TIMEOUT + TIMEOUT / 8 + TIMEOUT,
            "{policy:?}: reported {after:?} after the post"
        );
        // The other destination kept completing after the report, unless it shares the stalled
        // initiator (and stream): it waits behind the SEND.
        let later = seen.completed.iter().filter(|&&(t, _)| t > at).count();
        if pool.assignment(ids[1]) == Some((initiator, stream)) {
            assert_eq!(later, 0, "{policy:?}: behind the stalled request");
        } else {
            assert!(later > 10, "{policy:?}: {later} completions after the stall");
        }
        assert!(
            seen.completed.iter().all(|&(_, wr_id)| wr_id != 1),
            "{policy:?}: the SEND waits"
        );
        assert!(
            device()
                .trace()
                .iter()
                .any(|e| e.kind == event_kind::RETRANSMIT && e.status == 2),
            "{policy:?}: retried for the receiver not ready"
        );

        // A receive comes: the SEND completes; nothing more is reported for it.
        fabric.post_receives(1);
        let mut seen = run(&mut pool, &fabric, &ids, TIMEOUT, &mut next);
        assert!(seen.completed.iter().any(|&(_, wr_id)| wr_id == 1), "{policy:?}");
        seen.stalls
            .retain(|(_, e)| matches!(e, DcPoolEvent::Stalled { destination, .. } if *destination == ids[0]));
        assert!(seen.stalls.is_empty(), "{policy:?}: {:?}", seen.stalls);
        assert_eq!(fabric.receives.read(0, 64), vec![5; 64], "{policy:?}: the SEND's bytes");

        // A later SEND stalls again (the receive was used): reported again, once.
        send(&mut pool, &fabric, ids[0], 2);
        let posted = Instant::now();
        let mut seen = run(&mut pool, &fabric, &ids, 2 * TIMEOUT + TIMEOUT / 2, &mut next);
        seen.stalls
            .retain(|(_, e)| matches!(e, DcPoolEvent::Stalled { destination, .. } if *destination == ids[0]));
        assert_eq!(seen.stalls.len(), 1, "{policy:?}: {:?}", seen.stalls);
        assert!(seen.stalls[0].0 - posted >= TIMEOUT, "{policy:?}");
        assert_eq!(pool.outstanding(ids[0]), 1, "{policy:?}: still outstanding, not failed");
    }
}

fn no_stall_is_reported_when_reports_are_off_or_requests_keep_completing() {
    let (fabric, mut pool, ids) = setup(DcPoolPolicy::Dedicated, None);
    let mut next = 1000;
    send(&mut pool, &fabric, ids[0], 1);
    let seen = run(&mut pool, &fabric, &ids, 3 * TIMEOUT, &mut next);
    assert!(seen.stalls.is_empty(), "{:?}", seen.stalls);
    assert!(seen.completed.len() > 20, "{}", seen.completed.len());
    assert_eq!(pool.outstanding(ids[0]), 1, "the SEND still waits");

    // On, with a destination that keeps completing: nothing is reported.
    let (fabric, mut pool, ids) = setup(DcPoolPolicy::Dedicated, Some(TIMEOUT));
    let seen = run(&mut pool, &fabric, &ids, 3 * TIMEOUT, &mut next);
    assert!(seen.stalls.is_empty(), "{:?}", seen.stalls);
    assert!(seen.completed.len() > 20, "{}", seen.completed.len());
}

/// How far the tests' clock ([`test_now`]) was moved on.
static MOVED: AtomicU64 = AtomicU64::new(0);

/// The tests' clock: still, but for [`advance_clock`].
fn test_now() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now) + Duration::from_nanos(MOVED.load(Ordering::Relaxed))
}

fn advance_clock(by: Duration) {
    MOVED.fetch_add(by.as_nanos() as u64, Ordering::Relaxed);
}

/// A pool made with `from_initiators` from one initiator brought up by hand, on `settings` with
/// the protection domain and the tests' clock, a destination per target.
fn pool_from_initiators(fabric: &Fabric, mut settings: DcPoolSettings) -> (DcInitiatorPool, Vec<DestinationId>) {
    let cq = fabric.ctx.create_cq_builder().setup_cqe(64).build().expect("CQ");
    let mut initiator = fabric
        .initiator_builder(16)
        .setup_send_cq(cq.clone())
        .build()
        .expect("initiator");
    initiator.bring_up(&fast_bring_up()).expect("bring up");
    settings
        .setup_protection_domain(&fabric.pd, PORT, DcServiceClass::new())
        .setup_clock(test_now);
    let mut pool = DcInitiatorPool::from_initiators(vec![initiator], Some(cq.into()), &settings).expect("a pool");
    let ids = (0..fabric.targets.len())
        .map(|t| pool.add_destination(fabric.endpoint(t)))
        .collect();
    (pool, ids)
}

/// A request stuck for 6.5 s (a SEND to a target whose receive queue is empty, retried for
/// ever) is reported `Stalled` once, by the default stall timeout of 5 s, as a builder-made pool
/// reports it.
fn a_pool_made_from_initiators_reports_a_request_stuck_past_the_stall_timeout_once() {
    let fabric = Fabric::new(1);
    let mut settings = DcPoolSettings::default();
    settings.setup_policy(DcPoolPolicy::Static);
    let (mut pool, ids) = pool_from_initiators(&fabric, settings);
    send(&mut pool, &fabric, ids[0], 7);
    pool.progress(|event| panic!("nothing is late yet: {event:?}"));
    advance_clock(Duration::from_millis(4900));
    pool.progress(|event| panic!("not stuck for 5 s yet: {event:?}"));
    advance_clock(Duration::from_millis(1600));
    let mut events = Vec::new();
    pool.progress(|event| events.push(event));
    assert_eq!(
        events,
        [DcPoolEvent::Stalled {
            destination: ids[0],
            initiator: 0,
            stream: None
        }]
    );
    advance_clock(Duration::from_secs(60));
    assert_eq!(poll_for(&mut pool, Duration::from_millis(50)), [], "reported twice");
    assert_eq!(pool.outstanding(ids[0]), 1, "still outstanding");
}

/// Stalls off, and a grant from the line kept the grant timeout given, then handed on.
fn a_pool_made_from_initiators_takes_its_grant_timeout_and_no_stall_timeout() {
    let fabric = Fabric::new(3);
    let mut settings = DcPoolSettings::default();
    settings
        .setup_policy(DcPoolPolicy::Dedicated)
        .setup_grant_timeout(Duration::from_millis(50))
        .setup_stall_timeout(None);
    let (mut pool, ids) = pool_from_initiators(&fabric, settings);
    assert_eq!(pool.settings().grant_timeout(), Duration::from_millis(50));
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    write(&mut pool, &fabric, a, 0, &[1]).expect("a posts");
    assert!(pool.start_post_send(b).is_err_and(|e| e.is_would_block()));
    assert!(pool.start_post_send(c).is_err_and(|e| e.is_would_block()));
    // a's completion grants its initiator to b, which does not post.
    assert_eq!(
        poll_reports(&mut pool, 1),
        [completed(a, 1), DcPoolEvent::Ready { destination: b }]
    );
    advance_clock(Duration::from_millis(40));
    pool.progress(|event| panic!("within the grant timeout: {event:?}"));
    advance_clock(Duration::from_secs(3600));
    let mut events = Vec::new();
    pool.progress(|event| events.push(event));
    assert_eq!(events, [DcPoolEvent::Ready { destination: c }], "and no stall report");
}
