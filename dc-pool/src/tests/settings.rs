//! A pool made from initiators made elsewhere takes every setting the builder's pool takes: its
//! clock, its grant timeout, and its stall timeout, on by default.
use super::*;

/// One initiator's pool on `settings`, its clock the tests' ([`advance_clock`]).
fn pool_with(mut settings: DcPoolSettings) -> DcInitiatorPool<RecordingInitiator> {
    take_calls();
    settings.setup_clock(fake_now);
    let initiators = vec![RecordingInitiator::new(0x10, 16, 0)];
    DcInitiatorPool::from_initiators(initiators, None, &settings).expect("a pool")
}

/// A request stuck for 6.5 s (a target whose receive queue ran dry, retried for ever) is
/// reported `Stalled` once, by the default stall timeout of 5 s, as a builder-made pool reports
/// it.
#[test]
fn a_pool_made_from_initiators_reports_a_request_stuck_past_the_stall_timeout_once() {
    let mut settings = DcPoolSettings::default();
    settings.setup_policy(DcPoolPolicy::Static);
    let mut pool = pool_with(settings);
    let destination = Address::new(1).add_to(&mut pool);
    post_writes(&mut pool, destination, &[7]);
    pool.progress(|event| panic!("nothing is late yet: {event:?}"));
    advance_clock(Duration::from_millis(4900));
    pool.progress(|event| panic!("not stuck for 5 s yet: {event:?}"));
    advance_clock(Duration::from_millis(1600));
    let mut events = Vec::new();
    pool.progress(|event| events.push(event));
    assert_eq!(
        events,
        [DcPoolEvent::Stalled {
            destination,
            initiator: 0,
            stream: None
        }]
    );
    advance_clock(Duration::from_secs(60));
    assert_eq!(pool.poll(|event| panic!("reported twice: {event:?}")).expect("poll"), 0);
    take_calls();
}

/// Stalls off, and a grant from the line kept the grant timeout given, then handed on.
#[test]
fn a_pool_made_from_initiators_takes_its_grant_timeout_and_no_stall_timeout() {
    let mut settings = DcPoolSettings::default();
    settings
        .setup_grant_timeout(Duration::from_millis(50))
        .setup_stall_timeout(None);
    let mut pool = pool_with(settings);
    assert_eq!(pool.settings().grant_timeout(), Duration::from_millis(50));
    let ids: Vec<DestinationId> = (0..3).map(|n| Address::new(n).add_to(&mut pool)).collect();
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    post_writes(&mut pool, a, &[1]);
    assert!(pool.start_post_send(b).is_err_and(|e| e.is_would_block()));
    assert!(pool.start_post_send(c).is_err_and(|e| e.is_would_block()));
    // a's completion grants its initiator to b, which does not post.
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 0), 0),
        [completed(a, 1), DcPoolEvent::Ready { destination: b }]
    );
    advance_clock(Duration::from_millis(40));
    pool.progress(|event| panic!("within the grant timeout: {event:?}"));
    advance_clock(Duration::from_secs(3600));
    let mut events = Vec::new();
    pool.progress(|event| events.push(event));
    assert_eq!(events, [DcPoolEvent::Ready { destination: c }], "and no stall report");
    take_calls();
}
