//! Stalls on the software ConnectX: a SEND to a target whose receive queue is empty is retried
//! for ever (receiver not ready, `rnr_retry` 7) with no completion; the pool reports it
//! `Stalled` once, after its stall timeout, while another destination keeps writing.
mod device;

use std::time::{Duration, Instant};

use device::*;
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
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
