//! Why a destination can or cannot post: `destination_state` in each situation that blocks it,
//! checked against what its post then meets.
use super::*;
use crate::types::DestinationState;

#[test]
fn a_destination_holds_its_initiator_then_is_idle_once_its_requests_completed() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let a = Address::new(0).add_to(&mut pool);
    assert_eq!(pool.destination_state(a), DestinationState::Idle);
    post_writes(&mut pool, a, &[1]);
    assert_eq!(
        pool.destination_state(a),
        DestinationState::Holds {
            initiator: 0,
            stream: None
        }
    );
    assert_eq!(complete(&mut pool, provider_wr_id(0, 0), 0), [completed(a, 1)]);
    assert_eq!(pool.destination_state(a), DestinationState::Idle);
    take_calls();
}

#[test]
fn destinations_in_line_say_their_place_and_leave_it_when_cancelled() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let ids: Vec<DestinationId> = (0..4).map(|n| Address::new(n).add_to(&mut pool)).collect();
    let (a, b, c, d) = (ids[0], ids[1], ids[2], ids[3]);
    post_writes(&mut pool, a, &[1]);
    post_writes(&mut pool, b, &[2]);
    assert_eq!(would_block(&mut pool, c), DcPoolWouldBlock::NoInitiator);
    assert_eq!(would_block(&mut pool, d), DcPoolWouldBlock::NoInitiator);
    assert_eq!(pool.destination_state(c), DestinationState::InLine { place: 0 });
    assert_eq!(pool.destination_state(d), DestinationState::InLine { place: 1 });
    pool.cancel_wait(c);
    assert_eq!(pool.destination_state(c), DestinationState::Idle);
    assert_eq!(pool.destination_state(d), DestinationState::InLine { place: 0 });
    // a's initiator goes to d, first in line: it holds it before posting.
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 0), 0),
        [completed(a, 1), DcPoolEvent::Ready { destination: d }]
    );
    assert_eq!(
        pool.destination_state(d),
        DestinationState::Holds {
            initiator: 0,
            stream: None
        }
    );
    pool.core.check_no_destination_stranded();
    take_calls();
}

#[test]
fn a_destination_over_its_quota_says_so_while_others_wait() {
    let mut pool = pool(DcPoolPolicy::DedicatedWithQuota { quota: 1 }, 16, 0);
    let ids: Vec<DestinationId> = (0..3).map(|n| Address::new(n).add_to(&mut pool)).collect();
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    post_writes(&mut pool, a, &[1]);
    post_writes(&mut pool, b, &[2]);
    // Nobody waits: its quota does not hold it back yet.
    assert_eq!(
        pool.destination_state(a),
        DestinationState::Holds {
            initiator: 0,
            stream: None
        }
    );
    assert_eq!(would_block(&mut pool, c), DcPoolWouldBlock::NoInitiator);
    assert_eq!(pool.destination_state(a), DestinationState::OverQuota { initiator: 0 });
    assert_eq!(would_block(&mut pool, a), DcPoolWouldBlock::QuotaExhausted);
    assert_eq!(pool.destination_state(a), DestinationState::OverQuota { initiator: 0 });
    // Its initiator goes to c; a is in line behind it.
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 0), 0),
        [completed(a, 1), DcPoolEvent::Ready { destination: c }]
    );
    assert_eq!(pool.destination_state(a), DestinationState::InLine { place: 0 });
    take_calls();
}

#[test]
fn a_full_send_queue_and_a_stream_in_error_name_the_initiator_and_stream() {
    let mut pool = pool(DcPoolPolicy::Static, 2, 0);
    let a = Address::new(1).add_to(&mut pool);
    let (initiator, _) = pool.assignment(a).expect("bound");
    post_writes(&mut pool, a, &[1, 2]);
    assert_eq!(
        pool.destination_state(a),
        DestinationState::QueueFull {
            initiator,
            stream: None
        }
    );
    assert_eq!(would_block(&mut pool, a), DcPoolWouldBlock::QueueFull);
    take_calls();

    let mut pool = pool_with_streams();
    let x = Address::new(0).add_to(&mut pool);
    let (initiator, stream) = pool.assignment(x).expect("bound");
    let stream = stream.expect("streams");
    post_writes(&mut pool, x, &[1, 2]);
    assert_eq!(
        complete(&mut pool, provider_wr_id(initiator, 0), REM_ACCESS_ERR),
        [DcPoolEvent::Failed {
            destination: x,
            wr_id: 1,
            status: REM_ACCESS_ERR,
            vendor_err: 0
        }]
    );
    assert_eq!(
        pool.destination_state(x),
        DestinationState::Recovering {
            initiator,
            stream: Some(stream)
        }
    );
    // Once flushed, the stream is reset.
    complete(&mut pool, provider_wr_id(initiator, 1), FLUSH_ERR);
    assert_eq!(
        pool.destination_state(x),
        DestinationState::Holds {
            initiator,
            stream: Some(stream)
        }
    );
    take_calls();
}

/// A pool of the streams policy, 4 streams per initiator.
fn pool_with_streams() -> DcInitiatorPool<RecordingInitiator> {
    pool(DcPoolPolicy::Streams, 16, 4)
}

#[test]
fn a_destination_whose_initiator_is_in_error_is_recovering_until_it_is_flushed() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let a = Address::new(1).add_to(&mut pool);
    post_writes(&mut pool, a, &[1, 2]);
    complete(&mut pool, provider_wr_id(0, 0), REM_ACCESS_ERR);
    assert_eq!(
        pool.destination_state(a),
        DestinationState::Recovering {
            initiator: 0,
            stream: None
        }
    );
    assert_eq!(
        would_block(&mut pool, a),
        DcPoolWouldBlock::Recovering {
            initiator: 0,
            stream: None
        }
    );
    complete(&mut pool, provider_wr_id(0, 1), FLUSH_ERR);
    // Recovered, with nothing outstanding: it gave its initiator back.
    assert_eq!(pool.destination_state(a), DestinationState::Idle);
    take_calls();
}

#[test]
fn an_unreachable_destination_says_so_until_revived() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let a = Address::new(0).add_to(&mut pool);
    for (number, wr_id) in [(0, 1), (1, 2)] {
        post_writes(&mut pool, a, &[wr_id]);
        complete(&mut pool, provider_wr_id(0, number), RETRY_EXC_ERR);
    }
    assert!(pool.is_unreachable(a));
    assert_eq!(pool.destination_state(a), DestinationState::Unreachable);
    pool.revive(a);
    assert_eq!(pool.destination_state(a), DestinationState::Idle);
    take_calls();
}

#[test]
fn a_retiring_destination_counts_its_requests_and_a_removed_one_is_unknown() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let (a, b) = (Address::new(1).add_to(&mut pool), Address::new(2).add_to(&mut pool));
    post_writes(&mut pool, a, &[1, 2]);
    pool.retire_destination(a).expect("a live destination");
    assert_eq!(pool.destination_state(a), DestinationState::Retiring { outstanding: 2 });
    assert_eq!(complete(&mut pool, provider_wr_id(0, 0), 0), [completed(a, 1)]);
    assert_eq!(pool.destination_state(a), DestinationState::Retiring { outstanding: 1 });
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 1), 0),
        [completed(a, 2), DcPoolEvent::Removed { destination: a }]
    );
    assert_eq!(pool.destination_state(a), DestinationState::Unknown);
    // Removed at once, and its place serving another destination: the old id stays unknown.
    pool.remove_destination(b).expect("nothing outstanding");
    let c = Address::new(3).add_to(&mut pool);
    assert_eq!(c.index(), b.index());
    assert_eq!(pool.destination_state(b), DestinationState::Unknown);
    assert_eq!(pool.destination_state(c), DestinationState::Idle);
    take_calls();
}

#[test]
fn no_initiator_in_service_once_every_initiator_is_lost() {
    let mut pool = pool(DcPoolPolicy::Static, 16, 0);
    let a = Address::new(0).add_to(&mut pool);
    for lost in 0..2 {
        let (initiator, _) = pool.assignment(a).expect("bound");
        post_writes(&mut pool, a, &[lost]);
        pool.initiator(initiator).expect("initiator").recovery_fails.set(true);
        let events = complete(&mut pool, provider_wr_id(initiator, 0), REM_ACCESS_ERR);
        assert!(
            matches!(events.last(), Some(DcPoolEvent::InitiatorLost { initiator: i, .. }) if *i == initiator),
            "{events:?}"
        );
    }
    assert_eq!(pool.destination_state(a), DestinationState::NoInitiatorInService);
    assert!(pool
        .start_post_send(a)
        .is_err_and(|e| matches!(e.0, PostToDestinationErrorKind::NoInitiatorInService)));
    take_calls();
}
