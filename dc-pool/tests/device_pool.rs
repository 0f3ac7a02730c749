//! The pool's posting path and its bookkeeping, on the software ConnectX: what left each
//! initiator (the device's trace of each request), completions mapped back to the callers'
//! `wr_id`s and destinations, and the pool's answers when it cannot post. Requests are held on
//! the device by stalling their initiator (`Control::stall_initiator`), so that a test decides
//! when they execute.
mod device;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sideway::ibverbs::device_context::Mtu;

use device::*;
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::ibverbs::post_send_guard::TypedPostSendErrorKind;
use sideway_ext_dc_pool::types::{
    DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId, DestinationState, PostBatchError, PostBatchErrorKind,
    PostToDestinationErrorKind, RemoveDestinationErrorKind,
};
use sideway_ext_dc_pool::DcInitiatorPool;

const SHORT: Duration = Duration::from_secs(5);

#[test]
fn posting() {
    on_device!();
    checks!(
        write_inline_and_read_go_out_signalled_to_the_destinations_address_with_their_data,
        requests_are_signalled_whatever_the_flags_so_a_dedicated_destination_gives_its_initiator_back,
        a_guard_dropped_unposted_sends_nothing_and_leaves_nothing_outstanding,
        a_failed_post_counts_nothing_and_releases_the_initiator,
        construct_wr_beyond_the_room_is_batch_full_and_the_batch_so_far_posts,
        a_batch_ends_where_the_ring_wraps_and_the_next_one_starts_at_its_beginning,
        a_pool_without_streams_refuses_to_post_on_a_stream,
    );
}

fn write_inline_and_read_go_out_signalled_to_the_destinations_address_with_their_data() {
    let fabric = Fabric::new(2);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Dedicated, 2, 16);
    let (da, db) = (ids[0], ids[1]);
    device().clear_trace();
    let (lkey, rkey) = (fabric.local.mr.lkey(), fabric.remote.mr.rkey());
    let mut guard = pool.start_post_send(da).expect("an initiator is free");
    assert_eq!(guard.initiator(), (0, None));
    // SAFETY: both regions outlive the completions polled below.
    unsafe {
        guard
            .construct_wr(100, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_write(rkey, fabric.slot(0, 0))
            .setup_sge(lkey, fabric.local.addr(7 * SLOT), 64);
        // Unsignalled, inline: the pool signals it, the bytes travel in the WQE.
        guard
            .construct_wr(101, WorkRequestFlags::none())
            .expect("room")
            .setup_write(rkey, fabric.slot(0, 64))
            .setup_inline_data(b"hi");
        // A READ of the target's first 32 bytes (the write's) into local slot 255.
        guard
            .construct_wr(102, WorkRequestFlags::Signaled | WorkRequestFlags::Inline)
            .expect("room")
            .setup_read(rkey, fabric.slot(0, 0))
            .setup_sge(lkey, fabric.local.addr(255 * SLOT), 32);
    }
    assert_eq!(guard.batch_len(), 3);
    guard.post().expect("post");
    assert_eq!(pool.outstanding(da), 3);
    assert_eq!(pool.assignment(da), Some((0, None)));
    // The second destination gets the other initiator.
    assert_eq!(write(&mut pool, &fabric, db, 1, &[200]).expect("post"), (1, None));
    let events = poll_reports(&mut pool, 4);
    let of = |d: DestinationId| -> Vec<&DcPoolEvent> {
        events
            .iter()
            .filter(|e| matches!(e, DcPoolEvent::Completed { destination, .. } if *destination == d))
            .collect()
    };
    assert_eq!(of(da), [&completed(da, 100), &completed(da, 101), &completed(da, 102)]);
    assert_eq!(of(db), [&completed(db, 200)]);
    assert_eq!(events.len(), 4, "{events:?}");
    // What left the initiators: the address of each destination, every request signalled.
    let (qa, qb) = (qpn(&pool, 0), qpn(&pool, 1));
    let sent: Vec<_> = requests_of(qa)
        .iter()
        .map(|e| (e.opcode, e.remote_addr, e.rkey, e.length, e.peer, e.dc_key, e.signaled))
        .collect();
    let dct = fabric.dct_number(0);
    assert_eq!(
        sent,
        [
            (OPCODE_RDMA_WRITE, fabric.slot(0, 0), rkey, 64, dct, KEY, 1),
            (OPCODE_RDMA_WRITE, fabric.slot(0, 64), rkey, 2, dct, KEY, 1),
            (OPCODE_RDMA_READ, fabric.slot(0, 0), rkey, 32, dct, KEY, 1),
        ]
    );
    let sent_b: Vec<_> = requests_of(qb).iter().map(|e| (e.peer, e.remote_addr)).collect();
    assert_eq!(sent_b, [(fabric.dct_number(1), fabric.slot(1, 0))]);
    // The data: the write's bytes, the inline bytes, the read's copy, the other destination's.
    assert_eq!(fabric.read_slot(0, 0, 64), vec![7; 64]);
    assert_eq!(fabric.read_slot(0, 64, 3), b"hi\0");
    assert_eq!(fabric.local.read(255 * SLOT, 32), vec![7; 32]);
    assert_eq!(fabric.read_slot(1, 0, 64), vec![pattern(200); 64]);
    // Idle dedicated destinations gave their initiators back.
    assert_eq!((pool.outstanding(da), pool.assignment(da)), (0, None));
    assert_eq!((pool.outstanding(db), pool.assignment(db)), (0, None));
}

fn requests_are_signalled_whatever_the_flags_so_a_dedicated_destination_gives_its_initiator_back() {
    for policy in [
        DcPoolPolicy::Dedicated,
        DcPoolPolicy::DedicatedWithQuota { quota: 2 },
        DcPoolPolicy::Static,
    ] {
        let fabric = Fabric::new(3);
        let (mut pool, ids) = fabric.pool(policy, 2, 16);
        let (da, db, dc) = (ids[0], ids[1], ids[2]);
        stall(&pool, 0, true);
        stall(&pool, 1, true);
        device().clear_trace();
        for (d, t, wr_id) in [(da, 0, 10), (db, 1, 20)] {
            let mut guard = pool.start_post_send(d).expect("an initiator");
            for k in 0..2u64 {
                // SAFETY: both regions outlive the completions polled below.
                unsafe {
                    guard
                        .construct_wr(wr_id + k, WorkRequestFlags::none())
                        .expect("room")
                        .setup_write(fabric.remote.mr.rkey(), fabric.slot(t, 64 * k as usize))
                        .setup_sge(
                            fabric.local.mr.lkey(),
                            fabric.local.addr(usize::from(pattern(wr_id + k)) * SLOT),
                            64,
                        )
                };
            }
            guard.post().expect("post");
        }
        let dedicated = policy != DcPoolPolicy::Static;
        if dedicated {
            assert_eq!(would_block(&mut pool, dc), DcPoolWouldBlock::NoInitiator, "{policy:?}");
        }
        let (ia, _) = pool.assignment(da).expect("held");
        let (ib, _) = pool.assignment(db).expect("held");
        stall(&pool, 0, false);
        stall(&pool, 1, false);
        let events = poll_until(&mut pool, SHORT, |events| {
            reports(events) == 4 && (!dedicated || events.contains(&DcPoolEvent::Ready { destination: dc }))
        });
        let sent = requests();
        assert_eq!(sent.len(), 4, "{policy:?}: {sent:?}");
        assert!(sent.iter().all(|e| e.signaled == 1), "{policy:?}: {sent:?}");
        let order = |d: DestinationId| -> Vec<u64> {
            events
                .iter()
                .filter_map(|e| match e {
                    DcPoolEvent::Completed { destination, wr_id } if *destination == d => Some(*wr_id),
                    _ => None,
                })
                .collect()
        };
        assert_eq!((order(da), order(db)), (vec![10, 11], vec![20, 21]), "{policy:?}");
        assert_eq!(fabric.read_slot(0, 64, 64), vec![pattern(11); 64]);
        assert_eq!(fabric.read_slot(1, 0, 64), vec![pattern(20); 64]);
        assert_eq!(pool.outstanding(da) + pool.outstanding(db), 0);
        if dedicated {
            assert_eq!(pool.assignment(da), None, "{policy:?}: da gave its initiator back");
            assert_eq!(pool.assignment(db), None, "{policy:?}: db gave its initiator back");
            let (held, _) = pool.assignment(dc).expect("dc holds a freed initiator");
            assert!(held == ia || held == ib);
        }
    }
}

fn a_guard_dropped_unposted_sends_nothing_and_leaves_nothing_outstanding() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Dedicated, 2, 16);
    let da = ids[0];
    device().clear_trace();
    let mut guard = pool.start_post_send(da).expect("an initiator is free");
    // A request dropped before its data step adds nothing.
    let _ = guard
        .construct_wr(1, WorkRequestFlags::Signaled)
        .expect("room")
        .setup_write(fabric.remote.mr.rkey(), fabric.slot(0, 0));
    assert_eq!(guard.batch_len(), 0);
    // SAFETY: both regions outlive the device's use (the request is never posted).
    unsafe {
        guard
            .construct_wr(2, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_write(fabric.remote.mr.rkey(), fabric.slot(0, 0))
            .setup_sge(fabric.local.mr.lkey(), fabric.local.addr(2 * SLOT), 64)
    };
    assert_eq!(guard.batch_len(), 1);
    drop(guard);
    let events = poll_for(&mut pool, Duration::from_millis(20));
    assert!(events.is_empty(), "aborted requests reported: {events:?}");
    assert!(requests().is_empty(), "nothing left the initiator");
    assert_eq!(fabric.read_slot(0, 0, 64), vec![0; 64]);
    assert_eq!((pool.outstanding(da), pool.assignment(da)), (0, None));
    // The next batch goes out and is reported alone.
    write(&mut pool, &fabric, da, 0, &[3]).expect("post");
    assert_eq!(poll_reports(&mut pool, 1), [completed(da, 3)]);
    assert_eq!(requests().len(), 1);
    assert_eq!(fabric.read_slot(0, 0, 64), vec![3; 64]);
}

fn a_failed_post_counts_nothing_and_releases_the_initiator() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Dedicated, 2, 16);
    let da = ids[0];
    device().clear_trace();
    let mut guard = pool.start_post_send(da).expect("an initiator is free");
    // Inline data beyond the initiators' max_inline_data (64): the post fails as a whole.
    guard
        .construct_wr(1, WorkRequestFlags::Signaled)
        .expect("room")
        .setup_write(fabric.remote.mr.rkey(), fabric.slot(0, 0))
        .setup_inline_data(&[0xee; 200]);
    let err = guard.post().unwrap_err();
    assert!(
        matches!(&err.0, PostBatchErrorKind::Post(post)
            if matches!(post.0, TypedPostSendErrorKind::InlineDataTooLong { .. })),
        "{err:?}"
    );
    assert_eq!((pool.outstanding(da), pool.assignment(da)), (0, None));
    assert!(poll_for(&mut pool, Duration::from_millis(20)).is_empty());
    assert!(requests().is_empty(), "nothing left the initiator");
    assert_eq!(fabric.read_slot(0, 0, 4), vec![0; 4]);
    // The destination posts again, on a free initiator.
    write(&mut pool, &fabric, da, 0, &[2]).expect("post");
    assert_eq!(poll_reports(&mut pool, 1), [completed(da, 2)]);
}

fn construct_wr_beyond_the_room_is_batch_full_and_the_batch_so_far_posts() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Dedicated, 2, 4);
    let da = ids[0];
    let max_send_wr = pool.initiator(0).expect("initiator").max_send_wr() as usize;
    stall(&pool, 0, true);
    device().clear_trace();
    let mut guard = pool.start_post_send(da).expect("an initiator is free");
    let room = guard.room();
    assert_eq!(room, max_send_wr, "a batch's room is the send queue libmlx5 granted");
    let (lkey, rkey) = (fabric.local.mr.lkey(), fabric.remote.mr.rkey());
    for wr_id in 0..room as u64 {
        // SAFETY: both regions outlive the completions polled below.
        unsafe {
            guard
                .construct_wr(wr_id, WorkRequestFlags::Signaled)
                .expect("room")
                .setup_write(rkey, fabric.slot(0, 0))
                .setup_sge(lkey, fabric.local.addr(usize::from(pattern(wr_id)) * SLOT), 8)
        };
    }
    assert!(matches!(
        guard.construct_wr(99, WorkRequestFlags::Signaled),
        Err(DcPoolWouldBlock::BatchFull)
    ));
    assert_eq!(guard.batch_len(), room);
    guard.post().expect("the requests before the refusal post");
    assert_eq!(pool.outstanding(da), room as u64);
    // A full send queue refuses the next batch before starting it.
    assert_eq!(would_block(&mut pool, da), DcPoolWouldBlock::QueueFull);
    stall(&pool, 0, false);
    let events = poll_until(&mut pool, SHORT, |events| reports(events) == room);
    let mut expected: Vec<_> = (0..room as u64).map(|wr_id| completed(da, wr_id)).collect();
    expected.push(DcPoolEvent::Ready { destination: da });
    let mut sorted = events.clone();
    sorted.retain(|e| matches!(e, DcPoolEvent::Completed { .. }));
    sorted.push(DcPoolEvent::Ready { destination: da });
    assert_eq!(sorted, expected);
    assert!(events.contains(&DcPoolEvent::Ready { destination: da }), "{events:?}");
    assert_eq!(requests().len(), room);
    assert_eq!(
        fabric.read_slot(0, 0, 8),
        vec![pattern(room as u64 - 1); 8],
        "the last write landed last"
    );
}

fn a_batch_ends_where_the_ring_wraps_and_the_next_one_starts_at_its_beginning() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Static, 2, 4);
    let da = ids[0];
    let ring = pool.initiator(0).expect("initiator").max_send_wr() as u64;
    // Batches of ring - 1 go round the ring several times: each is reported once, in order.
    let mut next = 0u64;
    for _ in 0..4 {
        let batch: Vec<u64> = (next..next + ring - 1).collect();
        let guard_room = {
            let guard = pool.start_post_send(da).expect("a batch");
            guard.room() as u64
        };
        assert!(guard_room >= ring - 1, "room {guard_room} for a batch of {}", ring - 1);
        write(&mut pool, &fabric, da, 0, &batch).expect("post");
        let events = poll_reports(&mut pool, batch.len());
        assert_eq!(
            events,
            batch.iter().map(|&wr_id| completed(da, wr_id)).collect::<Vec<_>>()
        );
        next += ring - 1;
    }
    // Where the ring wraps, a batch's room ends there: two batches of two fill it.
    stall(&pool, 0, true);
    let first = next;
    let (a, b) = ([first, first + 1], [first + 2, first + 3]);
    write(&mut pool, &fabric, da, 0, &a).expect("post");
    write(&mut pool, &fabric, da, 0, &b).expect("post");
    stall(&pool, 0, false);
    let events = poll_reports(&mut pool, 4);
    assert_eq!(
        events,
        [a, b]
            .concat()
            .iter()
            .map(|&wr_id| completed(da, wr_id))
            .collect::<Vec<_>>()
    );
    assert_eq!(pool.outstanding(da), 0);
}

fn a_pool_without_streams_refuses_to_post_on_a_stream() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Dedicated, 2, 16);
    device().clear_trace();
    assert!(matches!(
        pool.start_post_send_on_stream(ids[0]).map(|_| ()).unwrap_err().0,
        PostToDestinationErrorKind::StreamsMismatch { streams_pool: false }
    ));
    assert_eq!(pool.assignment(ids[0]), None);
    assert!(requests().is_empty());
}

#[test]
fn waiting() {
    on_device!();
    checks!(
        freed_initiators_go_to_the_destinations_in_line_first_first_with_a_ready_event,
        a_grant_timeout_of_duration_max_never_expires,
        a_grant_never_used_goes_back_after_the_timeout_and_cancel_wait_leaves_nothing,
        a_grant_made_between_polls_is_announced_however_late_the_next_poll_comes,
        a_busy_polling_waiter_keeps_its_grant_until_the_timeout_has_elapsed,
        a_quota_caps_a_batch_while_others_wait,
        a_destination_that_used_its_quota_gets_ready_when_its_turn_comes_again,
        a_destination_refused_for_a_full_queue_gets_ready_when_room_frees_up,
    );
}

fn freed_initiators_go_to_the_destinations_in_line_first_first_with_a_ready_event() {
    let fabric = Fabric::new(4);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Dedicated, 2, 16);
    let (a, b, c, d) = (ids[0], ids[1], ids[2], ids[3]);
    stall(&pool, 0, true);
    stall(&pool, 1, true);
    assert_eq!(write(&mut pool, &fabric, a, 0, &[1]).expect("post"), (0, None));
    assert_eq!(write(&mut pool, &fabric, b, 1, &[2]).expect("post"), (1, None));
    device().clear_trace();
    assert_eq!(would_block(&mut pool, c), DcPoolWouldBlock::NoInitiator);
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [c]);
    assert_eq!(would_block(&mut pool, d), DcPoolWouldBlock::NoInitiator);
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [c, d]);
    // b's completion frees initiator 1: it goes to c, first in line, at once.
    stall(&pool, 1, false);
    let events = poll_until(&mut pool, SHORT, |events| events.len() == 2);
    assert_eq!(events, [completed(b, 2), DcPoolEvent::Ready { destination: c }]);
    assert_eq!(pool.assignment(c), Some((1, None)));
    assert_eq!(would_block(&mut pool, d), DcPoolWouldBlock::NoInitiator);
    stall(&pool, 1, true);
    assert_eq!(write(&mut pool, &fabric, c, 2, &[3]).expect("post"), (1, None));
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [d]);
    // a's completion frees initiator 0 for d; c's then gives initiator 1 back to the free ones.
    stall(&pool, 0, false);
    let events = poll_until(&mut pool, SHORT, |events| events.len() == 2);
    assert_eq!(events, [completed(a, 1), DcPoolEvent::Ready { destination: d }]);
    stall(&pool, 1, false);
    assert_eq!(poll_reports(&mut pool, 1), [completed(c, 3)]);
    // c's request left initiator 1 for c's target.
    let sent: Vec<_> = requests()
        .iter()
        .filter(|e| e.peer == fabric.dct_number(2))
        .map(|e| (e.qp_number, e.remote_addr))
        .collect();
    assert_eq!(sent, [(qpn(&pool, 1), fabric.slot(2, 0))]);
    assert_eq!(fabric.read_slot(2, 0, 64), vec![3; 64]);
    assert_eq!(write(&mut pool, &fabric, d, 3, &[4]).expect("post"), (0, None));
    assert_eq!(pool.waiting().count(), 0);
    // A destination not first in line is not refused while an initiator is free.
    assert_eq!(write(&mut pool, &fabric, b, 1, &[5]).expect("post"), (1, None));
    let events = poll_reports(&mut pool, 2);
    assert_eq!(reports(&events), 2);
}

/// Two destinations hold both initiators (stalled), the third waits; initiator 0 is set free:
/// its completion grants it to the third. The pool, the ids.
fn a_grant(
    fabric: &Fabric, policy: DcPoolPolicy, grant: Duration,
) -> (DcInitiatorPool, DestinationId, DestinationId, DestinationId) {
    let mut pool = fabric
        .pool_builder(policy, 2, 16)
        // Set over a short one: what is set last holds.
        .setup_grant_timeout(Duration::from_millis(1))
        .setup_grant_timeout(grant)
        .setup_stall_timeout(None)
        .build()
        .expect("pool");
    let ids: Vec<_> = (0..3).map(|t| pool.add_destination(fabric.endpoint(t))).collect();
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    stall(&pool, 0, true);
    stall(&pool, 1, true);
    write(&mut pool, fabric, a, 0, &[1]).expect("post");
    write(&mut pool, fabric, b, 1, &[2]).expect("post");
    assert_eq!(would_block(&mut pool, c), DcPoolWouldBlock::NoInitiator);
    stall(&pool, 0, false);
    let events = poll_until(&mut pool, SHORT, |events| events.len() == 2);
    assert_eq!(events, [completed(a, 1), DcPoolEvent::Ready { destination: c }]);
    (pool, a, b, c)
}

fn a_grant_timeout_of_duration_max_never_expires() {
    let fabric = Fabric::new(3);
    let (mut pool, _, b, c) = a_grant(&fabric, DcPoolPolicy::Dedicated, Duration::MAX);
    // Far past the default grant timeout (10 ms), the grant stays.
    let events = poll_for(&mut pool, Duration::from_millis(100));
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(pool.assignment(c), Some((0, None)));
    assert_eq!(write(&mut pool, &fabric, c, 2, &[3]).expect("post"), (0, None));
    stall(&pool, 1, false);
    let events = poll_reports(&mut pool, 2);
    assert!(
        events.contains(&completed(c, 3)) && events.contains(&completed(b, 2)),
        "{events:?}"
    );
}

fn a_grant_never_used_goes_back_after_the_timeout_and_cancel_wait_leaves_nothing() {
    let fabric = Fabric::new(5);
    let mut pool = fabric
        .pool_builder(DcPoolPolicy::Dedicated, 2, 16)
        .setup_grant_timeout(Duration::from_millis(30))
        .build()
        .expect("pool");
    let ids: Vec<_> = (0..5).map(|t| pool.add_destination(fabric.endpoint(t))).collect();
    let (a, b, c, d, e) = (ids[0], ids[1], ids[2], ids[3], ids[4]);
    stall(&pool, 0, true);
    stall(&pool, 1, true);
    write(&mut pool, &fabric, a, 0, &[1]).expect("post");
    write(&mut pool, &fabric, b, 1, &[2]).expect("post");
    for x in [c, d, e] {
        assert_eq!(would_block(&mut pool, x), DcPoolWouldBlock::NoInitiator);
    }
    pool.cancel_wait(d);
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [c, e]);
    assert_eq!(pool.footprint().waiting, 2);
    stall(&pool, 0, false);
    let events = poll_until(&mut pool, SHORT, |events| events.len() == 2);
    assert_eq!(events, [completed(a, 1), DcPoolEvent::Ready { destination: c }]);
    let granted = std::time::Instant::now();
    // c posts nothing: after the timeout the grant goes to e.
    let events = poll_until(&mut pool, SHORT, |events| !events.is_empty());
    assert!(
        granted.elapsed() >= Duration::from_millis(30),
        "{:?}",
        granted.elapsed()
    );
    assert_eq!(events, [DcPoolEvent::Ready { destination: e }]);
    assert_eq!(pool.assignment(c), None);
    assert_eq!(pool.assignment(e), Some((0, None)));
    pool.cancel_wait(e);
    assert_eq!(pool.assignment(e), None);
    // d, no longer in line, posts on the free initiator.
    assert_eq!(write(&mut pool, &fabric, d, 3, &[3]).expect("post"), (0, None));
    for _ in 0..1000 {
        assert_eq!(would_block(&mut pool, c), DcPoolWouldBlock::NoInitiator);
        pool.cancel_wait(c);
    }
    assert_eq!(pool.footprint().waiting, 0);
    stall(&pool, 1, false);
    let events = poll_reports(&mut pool, 2);
    assert!(events.contains(&completed(d, 3)), "{events:?}");
    assert_eq!(fabric.read_slot(3, 0, 64), vec![3; 64]);
}

/// A grant made outside a completion (here by a removal) is announced by the next poll however
/// late it comes: its timeout runs from its `Ready`, so it is never given on unannounced.
fn a_grant_made_between_polls_is_announced_however_late_the_next_poll_comes() {
    let fabric = Fabric::new(3);
    let now = Arc::new(Mutex::new(Instant::now()));
    let clock = Arc::clone(&now);
    let mut pool = fabric
        .pool_builder(DcPoolPolicy::Dedicated, 1, 16)
        .setup_grant_timeout(Duration::from_millis(5))
        .setup_clock(move || *clock.lock().expect("clock"))
        .build()
        .expect("pool");
    let ids: Vec<_> = (0..3).map(|t| pool.add_destination(fabric.endpoint(t))).collect();
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    write(&mut pool, &fabric, a, 0, &[1]).expect("post");
    for x in [b, c] {
        assert_eq!(would_block(&mut pool, x), DcPoolWouldBlock::NoInitiator);
    }
    let events = poll_until(&mut pool, SHORT, |events| events.len() == 2);
    assert_eq!(events, [completed(a, 1), DcPoolEvent::Ready { destination: b }]);
    // b leaves before it posts: its initiator goes to c, whose next poll comes late.
    pool.remove_destination(b).expect("nothing outstanding");
    *now.lock().expect("clock") += Duration::from_millis(50);
    let mut events = Vec::new();
    pool.poll(|event| events.push(event)).expect("poll");
    assert_eq!(events, [DcPoolEvent::Ready { destination: c }]);
    assert_eq!(pool.assignment(c), Some((0, None)));
}

fn a_busy_polling_waiter_keeps_its_grant_until_the_timeout_has_elapsed() {
    let fabric = Fabric::new(3);
    let (mut pool, _, _, c) = a_grant(&fabric, DcPoolPolicy::Dedicated, Duration::from_millis(50));
    let granted = std::time::Instant::now();
    let mut events = Vec::new();
    for _ in 0..10_000 {
        pool.progress(|event| events.push(event));
    }
    if granted.elapsed() < Duration::from_millis(40) {
        assert_eq!(
            pool.assignment(c),
            Some((0, None)),
            "the grant was revoked by a count of calls"
        );
    }
    while granted.elapsed() < Duration::from_millis(60) {
        pool.progress(|event| events.push(event));
    }
    pool.progress(|event| events.push(event));
    assert_eq!(pool.assignment(c), None, "expired");
    assert!(events.is_empty(), "nobody else waits: {events:?}");
    stall(&pool, 1, false);
    assert_eq!(reports(&poll_reports(&mut pool, 1)), 1);
}

fn a_quota_caps_a_batch_while_others_wait() {
    let fabric = Fabric::new(3);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::DedicatedWithQuota { quota: 3 }, 2, 16);
    let (da, db, dc) = (ids[0], ids[1], ids[2]);
    stall(&pool, 0, true);
    stall(&pool, 1, true);
    // Nobody in line: a batch's room is the send queue.
    let room = |pool: &mut DcInitiatorPool, d| pool.start_post_send(d).expect("a batch").room();
    let full = pool.initiator(0).expect("initiator").max_send_wr() as usize;
    assert_eq!(room(&mut pool, da), full);
    write(&mut pool, &fabric, da, 0, &[0, 1]).expect("post");
    write(&mut pool, &fabric, db, 1, &[100]).expect("post");
    assert_eq!(would_block(&mut pool, dc), DcPoolWouldBlock::NoInitiator);
    // Someone in line: what is left of the quota.
    assert_eq!(room(&mut pool, da), 1);
    write(&mut pool, &fabric, da, 0, &[2]).expect("post");
    assert_eq!(would_block(&mut pool, da), DcPoolWouldBlock::QuotaExhausted);
    stall(&pool, 0, false);
    stall(&pool, 1, false);
    let events = poll_until(&mut pool, SHORT, |events| {
        reports(events) == 4 && events.contains(&DcPoolEvent::Ready { destination: dc })
    });
    assert_eq!(reports(&events), 4, "{events:?}");
}

fn a_destination_that_used_its_quota_gets_ready_when_its_turn_comes_again() {
    let fabric = Fabric::new(3);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::DedicatedWithQuota { quota: 1 }, 2, 16);
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    stall(&pool, 0, true);
    stall(&pool, 1, true);
    write(&mut pool, &fabric, a, 0, &[1]).expect("post");
    write(&mut pool, &fabric, b, 1, &[2]).expect("post");
    assert_eq!(would_block(&mut pool, c), DcPoolWouldBlock::NoInitiator);
    assert_eq!(would_block(&mut pool, a), DcPoolWouldBlock::QuotaExhausted);
    stall(&pool, 0, false);
    let events = poll_until(&mut pool, SHORT, |events| events.len() == 2);
    assert_eq!(events, [completed(a, 1), DcPoolEvent::Ready { destination: c }]);
    stall(&pool, 1, false);
    let events = poll_until(&mut pool, SHORT, |events| events.len() == 2);
    assert_eq!(events, [completed(b, 2), DcPoolEvent::Ready { destination: a }]);
}

fn a_destination_refused_for_a_full_queue_gets_ready_when_room_frees_up() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Static, 2, 2);
    let a = ids[0];
    let (initiator, _) = pool.assignment(a).expect("bound");
    let full = pool.initiator(initiator).expect("initiator").max_send_wr() as u64;
    stall(&pool, initiator, true);
    let wr_ids: Vec<u64> = (1..=full).collect();
    write(&mut pool, &fabric, a, 0, &wr_ids).expect("post");
    assert_eq!(would_block(&mut pool, a), DcPoolWouldBlock::QueueFull);
    stall(&pool, initiator, false);
    let events = poll_until(&mut pool, SHORT, |events| {
        reports(events) == full as usize && events.contains(&DcPoolEvent::Ready { destination: a })
    });
    let done: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, DcPoolEvent::Completed { .. }))
        .cloned()
        .collect();
    assert_eq!(done, wr_ids.iter().map(|&w| completed(a, w)).collect::<Vec<_>>());
    assert_eq!(
        events.iter().filter(|e| matches!(e, DcPoolEvent::Ready { .. })).count(),
        1,
        "one Ready: {events:?}"
    );
}

#[test]
fn errors() {
    on_device!();
    checks!(
        an_error_completion_fails_the_destination_hands_back_the_flushed_others_and_recovers,
        a_destination_refused_while_its_initiator_recovers_gets_ready_once_recovered,
        a_failed_request_carries_its_completions_vendor_syndrome,
        complete_takes_the_pools_completions_from_a_shared_cq_and_leaves_the_others,
        retry_exceeded_errors_make_a_destination_unreachable_until_revived,
    );
}

fn an_error_completion_fails_the_destination_hands_back_the_flushed_others_and_recovers() {
    let fabric = Fabric::new(8);
    let (mut pool, cq, ids) = fabric.fed_pool(DcPoolPolicy::Static, 2, 16);
    // Two destinations on one initiator.
    let shared: Vec<usize> = (0..ids.len())
        .filter(|&t| pool.assignment(ids[t]) == pool.assignment(ids[0]))
        .collect();
    let (ta, tb) = (shared[0], shared[1]);
    let (a, b) = (ids[ta], ids[tb]);
    let (initiator, _) = pool.assignment(a).expect("bound");
    let qp_before = qpn(&pool, initiator);
    stall(&pool, initiator, true);
    write_some_bad(&mut pool, &fabric, a, ta, &[10, 11, 12], &[11]);
    write_some_bad(&mut pool, &fabric, b, tb, &[20], &[]);
    write_some_bad(&mut pool, &fabric, a, ta, &[13], &[]);
    stall(&pool, initiator, false);
    assert_eq!(next(&mut pool, &cq), [completed(a, 10)]);
    assert_eq!(
        without_syndromes(&next(&mut pool, &cq)),
        [failed(a, 11, REM_ACCESS_ERR)]
    );
    // No recovery before the flush: the others on the initiator wait.
    assert!(matches!(
        would_block(&mut pool, b),
        DcPoolWouldBlock::Recovering { stream: None, .. }
    ));
    let mut events = Vec::new();
    for _ in 0..3 {
        events.extend(next(&mut pool, &cq));
    }
    // The flush fails a's others, hands b's back to retry; b may post once recovered.
    assert_eq!(
        without_syndromes(&events),
        [
            failed(a, 12, WR_FLUSH_ERR),
            DcPoolEvent::Retry {
                destination: b,
                wr_id: 20
            },
            failed(a, 13, WR_FLUSH_ERR),
            DcPoolEvent::Ready { destination: b },
        ]
    );
    assert_eq!(
        fabric.read_slot(tb, 0, 64),
        vec![0; 64],
        "the retried request did not execute"
    );
    assert_eq!(
        fabric.read_slot(ta, 0, 64),
        vec![10; 64],
        "only a's first request executed"
    );
    assert_eq!((pool.outstanding(a), pool.outstanding(b)), (0, 0));
    // Recovered: b's retry goes out on the same initiator and lands.
    assert_eq!(write(&mut pool, &fabric, b, tb, &[20]).expect("post").0, initiator);
    assert_eq!(next(&mut pool, &cq), [completed(b, 20)]);
    assert_eq!(fabric.read_slot(tb, 0, 64), vec![20; 64]);
    assert_eq!(qpn(&pool, initiator), qp_before, "reset in place");
}

fn a_destination_refused_while_its_initiator_recovers_gets_ready_once_recovered() {
    let fabric = Fabric::new(1);
    let (mut pool, cq, ids) = fabric.fed_pool(DcPoolPolicy::Dedicated, 2, 16);
    let a = ids[0];
    stall(&pool, 0, true);
    write_some_bad(&mut pool, &fabric, a, 0, &[1, 2], &[1]);
    stall(&pool, 0, false);
    // The error completion alone: the initiator is in ERR, its flush not taken yet.
    assert_eq!(without_syndromes(&next(&mut pool, &cq)), [failed(a, 1, REM_ACCESS_ERR)]);
    assert_eq!(
        would_block(&mut pool, a),
        DcPoolWouldBlock::Recovering {
            initiator: 0,
            stream: None
        }
    );
    // The flush: recovered, and the destination is told.
    assert_eq!(
        without_syndromes(&next(&mut pool, &cq)),
        [failed(a, 2, WR_FLUSH_ERR), DcPoolEvent::Ready { destination: a }]
    );
    write(&mut pool, &fabric, a, 0, &[4]).expect("post after recovery");
    assert_eq!(next(&mut pool, &cq), [completed(a, 4)]);
    assert_eq!(fabric.read_slot(0, 0, 64), vec![4; 64]);
}

fn a_failed_request_carries_its_completions_vendor_syndrome() {
    let fabric = Fabric::new(1);
    let (mut pool, cq, ids) = fabric.fed_pool(DcPoolPolicy::Static, 2, 16);
    let da = ids[0];
    write_some_bad(&mut pool, &fabric, da, 0, &[0, 1], &[0]);
    // The error's status and vendor syndrome are the CQE's (softmlx5 writes syndrome 0: see
    // completion.c); a flush's are reported as none.
    let wc = next_completion(&cq);
    let mut events = Vec::new();
    assert!(pool.complete(&wc, |e| events.push(e)));
    assert_eq!(
        events,
        [DcPoolEvent::Failed {
            destination: da,
            wr_id: 0,
            status: REM_ACCESS_ERR,
            vendor_err: wc.vendor_err(),
        }]
    );
    assert_eq!(without_syndromes(&next(&mut pool, &cq)), [failed(da, 1, WR_FLUSH_ERR)]);
}

fn complete_takes_the_pools_completions_from_a_shared_cq_and_leaves_the_others() {
    use sideway_ext::mlx5::dc::initiator::DcInitiatorBringUp;
    let fabric = Fabric::new(1);
    let (mut pool, cq, ids) = fabric.fed_pool(DcPoolPolicy::Static, 2, 16);
    let da = ids[0];
    // Another DC initiator on the same CQ, not the pool's.
    let mut other = fabric
        .initiator_builder(16)
        .setup_send_cq(cq.clone())
        .build()
        .expect("another initiator");
    other.bring_up(&DcInitiatorBringUp::new(PORT)).expect("bring up");
    let endpoint = fabric.endpoint(0);
    let gid_index = other.source_gid().map_or(0, |entry| entry.index());
    let ah = endpoint.create_ah(&fabric.pd, PORT, gid_index).expect("address handle");
    let (rkey, lkey) = (fabric.remote.mr.rkey(), fabric.local.mr.lkey());
    let (to, from) = (fabric.slot(0, 128), fabric.local.addr(9 * SLOT));
    other
        .post_send_one(0x0123, WorkRequestFlags::Signaled, |wr| {
            // SAFETY: both regions outlive the completion polled below.
            unsafe {
                wr.setup_write(rkey, to)
                    .setup_dc_addr(&ah, endpoint.dct_number(), endpoint.dc_key())
                    .setup_sge(lkey, from, 64)
            }
        })
        .expect("post on the other initiator");
    let theirs = next_completion(&cq);
    assert_eq!((theirs.wr_id(), theirs.qp_number()), (0x0123, other.qp_number()));
    assert!(!pool.complete(&theirs, |e| panic!("another queue pair's completion reported: {e:?}")));
    write_some_bad(&mut pool, &fabric, da, 0, &[7, 8], &[8]);
    let mut events = Vec::new();
    for _ in 0..2 {
        let wc = next_completion(&cq);
        assert!(pool.complete(&wc, |e| events.push(e)));
    }
    assert_eq!(
        without_syndromes(&events),
        [completed(da, 7), failed(da, 8, REM_ACCESS_ERR)]
    );
    // poll on a shared CQ hands the others' completions over whole.
    other
        .post_send_one(0x0456, WorkRequestFlags::Signaled, |wr| {
            // SAFETY: as above.
            unsafe {
                wr.setup_write(rkey, to)
                    .setup_dc_addr(&ah, endpoint.dct_number(), endpoint.dc_key())
                    .setup_sge(lkey, from, 64)
            }
        })
        .expect("post on the other initiator");
    let events = poll_until(&mut pool, SHORT, |events| !events.is_empty());
    assert!(
        matches!(&events[..], [DcPoolEvent::OtherCompletion(wc)] if wc.wr_id() == 0x0456),
        "{events:?}"
    );
    assert_eq!(fabric.read_slot(0, 128, 64), vec![9; 64]);
}

fn retry_exceeded_errors_make_a_destination_unreachable_until_revived() {
    let fabric = Fabric::new(1);
    let mut pool = fabric
        .pool_builder(DcPoolPolicy::Dedicated, 2, 16)
        .setup_unreachable_after(2)
        .build()
        .expect("pool");
    let a = pool.add_destination(fabric.endpoint(0));
    device().kill_target(fabric.dct_number(0), true).expect("kill");
    write(&mut pool, &fabric, a, 0, &[1]).expect("post");
    let first = poll_reports(&mut pool, 1);
    assert_eq!(without_syndromes(&first), [failed(a, 1, RETRY_EXC_ERR)]);
    assert!(!pool.is_unreachable(a));
    // Each retry-exceeded error recovers its initiator; the second one in a row says it.
    write(&mut pool, &fabric, a, 0, &[2]).expect("post after recovery");
    let second = poll_reports(&mut pool, 1);
    assert_eq!(
        without_syndromes(&second),
        [DcPoolEvent::Unreachable { destination: a }, failed(a, 2, RETRY_EXC_ERR)]
    );
    device().clear_trace();
    assert!(matches!(
        pool.start_post_send(a).map(|_| ()).unwrap_err().0,
        PostToDestinationErrorKind::Unreachable
    ));
    assert!(requests().is_empty());
    device().kill_target(fabric.dct_number(0), false).expect("revive");
    pool.revive(a);
    write(&mut pool, &fabric, a, 0, &[3]).expect("post after revive");
    assert_eq!(poll_reports(&mut pool, 1), [completed(a, 3)]);
    assert_eq!(fabric.read_slot(0, 0, 64), vec![3; 64]);
}

#[test]
fn destinations() {
    on_device!();
    checks!(
        a_removed_destination_is_stale_and_its_place_serves_another,
        a_retired_destination_is_removed_once_its_requests_are_reported,
        a_million_destinations_through_the_pool_leave_its_footprint_at_the_live_ones,
    );
}

fn a_removed_destination_is_stale_and_its_place_serves_another() {
    let fabric = Fabric::new(2);
    let mut pool = fabric
        .pool_builder(DcPoolPolicy::Dedicated, 2, 16)
        .build()
        .expect("pool");
    let da = pool.add_destination(fabric.endpoint(0));
    stall(&pool, 0, true);
    write(&mut pool, &fabric, da, 0, &[1]).expect("post");
    assert!(matches!(
        pool.remove_destination(da).unwrap_err().0,
        RemoveDestinationErrorKind::Outstanding { requests: 1 }
    ));
    stall(&pool, 0, false);
    assert_eq!(poll_reports(&mut pool, 1), [completed(da, 1)]);
    pool.remove_destination(da).expect("nothing outstanding");
    assert!(matches!(
        pool.remove_destination(da).unwrap_err().0,
        RemoveDestinationErrorKind::UnknownDestination
    ));
    let db = pool.add_destination(fabric.endpoint(1));
    assert_eq!((db.index(), db.generation()), (da.index(), da.generation() + 1));
    device().clear_trace();
    for result in [pool.start_post_send(da).map(|_| ()), pool.prepare(da)] {
        assert!(matches!(
            result.unwrap_err().0,
            PostToDestinationErrorKind::UnknownDestination
        ));
    }
    assert_eq!((pool.outstanding(da), pool.assignment(da)), (0, None));
    assert!(requests().is_empty(), "nothing was posted for the stale id");
    write(&mut pool, &fabric, db, 1, &[2]).expect("post");
    assert_eq!(poll_reports(&mut pool, 1), [completed(db, 2)]);
    let sent: Vec<_> = requests().iter().map(|e| e.peer).collect();
    assert_eq!(
        sent,
        [fabric.dct_number(1)],
        "the place serves the new destination's target"
    );
    assert_eq!(pool.footprint().live_destinations, 1);
}

fn a_retired_destination_is_removed_once_its_requests_are_reported() {
    let fabric = Fabric::new(2);
    let mut pool = fabric
        .pool_builder(DcPoolPolicy::Dedicated, 2, 16)
        .build()
        .expect("pool");
    let (a, b) = (
        pool.add_destination(fabric.endpoint(0)),
        pool.add_destination(fabric.endpoint(1)),
    );
    stall(&pool, 0, true);
    write(&mut pool, &fabric, a, 0, &[1, 2]).expect("post");
    pool.retire_destination(a).expect("a live destination");
    assert!(matches!(
        pool.start_post_send(a).map(|g| g.room()).map_err(|e| e.0),
        Err(PostToDestinationErrorKind::Retiring)
    ));
    assert_eq!(pool.destination_count(), 2);
    stall(&pool, 0, false);
    let events = poll_until(&mut pool, SHORT, |events| events.len() == 3);
    assert_eq!(
        events,
        [
            completed(a, 1),
            completed(a, 2),
            DcPoolEvent::Removed { destination: a }
        ]
    );
    assert_eq!(pool.destination_count(), 1);
    assert!(pool
        .start_post_send(a)
        .is_err_and(|e| matches!(e.0, PostToDestinationErrorKind::UnknownDestination)));
    // Nothing outstanding: removed at once, reported by the next progress.
    pool.retire_destination(b).expect("a live destination");
    assert_eq!(pool.destination_count(), 0);
    let mut events = Vec::new();
    pool.progress(|event| events.push(event));
    assert_eq!(events, [DcPoolEvent::Removed { destination: b }]);
    assert!(pool.retire_destination(b).is_err(), "stale");
    assert_eq!(pool.footprint().ready_events, 0);
}

fn a_million_destinations_through_the_pool_leave_its_footprint_at_the_live_ones() {
    let fabric = Fabric::new(4);
    let mut pool = fabric.pool_builder(DcPoolPolicy::Static, 2, 16).build().expect("pool");
    let endpoints: Vec<_> = (0..4).map(|t| fabric.endpoint(t)).collect();
    let mut live = std::collections::VecDeque::new();
    for n in 0..1_000_000usize {
        let id = pool.add_destination(endpoints[n % 4]);
        // Every 100 000th destination posts, through its own address handle.
        if n % 100_000 == 0 {
            write(&mut pool, &fabric, id, n % 4, &[n as u64]).expect("post");
            assert_eq!(poll_reports(&mut pool, 1), [completed(id, n as u64)]);
        }
        live.push_back(id);
        if live.len() > 10_000 {
            let old = live.pop_front().expect("live");
            pool.remove_destination(old).expect("nothing outstanding");
        }
    }
    let footprint = pool.footprint();
    assert_eq!(footprint.live_destinations, 10_000);
    assert_eq!(pool.destination_count(), 10_000);
    assert!(footprint.destination_places <= 10_001, "{footprint:?}");
    assert!(footprint.address_handles <= 1, "{footprint:?}");
    assert_eq!(
        (footprint.waiting, footprint.grant_timers, footprint.batch_records),
        (0, 0, 0)
    );
}

#[test]
fn states() {
    on_device!();
    checks!(
        a_destination_holds_its_initiator_then_is_idle_once_its_requests_completed,
        destinations_in_line_say_their_place_and_leave_it_when_cancelled,
        a_destination_over_its_quota_says_so_while_others_wait,
        a_full_send_queue_names_the_initiator,
        a_destination_whose_initiator_is_in_error_is_recovering_until_it_is_flushed,
        an_unreachable_destination_says_so_until_revived,
        a_retiring_destination_counts_its_requests_and_a_removed_one_is_unknown,
    );
}

fn a_destination_holds_its_initiator_then_is_idle_once_its_requests_completed() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Dedicated, 2, 16);
    let a = ids[0];
    assert_eq!(pool.destination_state(a), DestinationState::Idle);
    stall(&pool, 0, true);
    write(&mut pool, &fabric, a, 0, &[1]).expect("post");
    assert_eq!(
        pool.destination_state(a),
        DestinationState::Holds {
            initiator: 0,
            stream: None
        }
    );
    stall(&pool, 0, false);
    assert_eq!(poll_reports(&mut pool, 1), [completed(a, 1)]);
    assert_eq!(pool.destination_state(a), DestinationState::Idle);
}

fn destinations_in_line_say_their_place_and_leave_it_when_cancelled() {
    let fabric = Fabric::new(4);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Dedicated, 2, 16);
    let (a, b, c, d) = (ids[0], ids[1], ids[2], ids[3]);
    stall(&pool, 0, true);
    stall(&pool, 1, true);
    write(&mut pool, &fabric, a, 0, &[1]).expect("post");
    write(&mut pool, &fabric, b, 1, &[2]).expect("post");
    assert_eq!(would_block(&mut pool, c), DcPoolWouldBlock::NoInitiator);
    assert_eq!(would_block(&mut pool, d), DcPoolWouldBlock::NoInitiator);
    assert_eq!(pool.destination_state(c), DestinationState::InLine { place: 0 });
    assert_eq!(pool.destination_state(d), DestinationState::InLine { place: 1 });
    pool.cancel_wait(c);
    assert_eq!(pool.destination_state(c), DestinationState::Idle);
    assert_eq!(pool.destination_state(d), DestinationState::InLine { place: 0 });
    stall(&pool, 0, false);
    let events = poll_until(&mut pool, SHORT, |events| events.len() == 2);
    assert_eq!(events, [completed(a, 1), DcPoolEvent::Ready { destination: d }]);
    assert_eq!(
        pool.destination_state(d),
        DestinationState::Holds {
            initiator: 0,
            stream: None
        }
    );
    stall(&pool, 1, false);
    assert_eq!(poll_reports(&mut pool, 1), [completed(b, 2)]);
}

fn a_destination_over_its_quota_says_so_while_others_wait() {
    let fabric = Fabric::new(3);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::DedicatedWithQuota { quota: 1 }, 2, 16);
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    stall(&pool, 0, true);
    stall(&pool, 1, true);
    write(&mut pool, &fabric, a, 0, &[1]).expect("post");
    write(&mut pool, &fabric, b, 1, &[2]).expect("post");
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
    stall(&pool, 0, false);
    let events = poll_until(&mut pool, SHORT, |events| events.len() == 2);
    assert_eq!(events, [completed(a, 1), DcPoolEvent::Ready { destination: c }]);
    assert_eq!(pool.destination_state(a), DestinationState::InLine { place: 0 });
    stall(&pool, 1, false);
    poll_reports(&mut pool, 1);
}

fn a_full_send_queue_names_the_initiator() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Static, 2, 2);
    let a = ids[0];
    let (initiator, _) = pool.assignment(a).expect("bound");
    let full = pool.initiator(initiator).expect("initiator").max_send_wr() as u64;
    stall(&pool, initiator, true);
    write(&mut pool, &fabric, a, 0, &(0..full).collect::<Vec<_>>()).expect("post");
    assert_eq!(
        pool.destination_state(a),
        DestinationState::QueueFull {
            initiator,
            stream: None
        }
    );
    assert_eq!(would_block(&mut pool, a), DcPoolWouldBlock::QueueFull);
    stall(&pool, initiator, false);
    poll_reports(&mut pool, full as usize);
}

fn a_destination_whose_initiator_is_in_error_is_recovering_until_it_is_flushed() {
    let fabric = Fabric::new(1);
    let (mut pool, cq, ids) = fabric.fed_pool(DcPoolPolicy::Dedicated, 2, 16);
    let a = ids[0];
    stall(&pool, 0, true);
    write_some_bad(&mut pool, &fabric, a, 0, &[1, 2], &[1]);
    stall(&pool, 0, false);
    next(&mut pool, &cq);
    assert_eq!(
        pool.destination_state(a),
        DestinationState::Recovering {
            initiator: 0,
            stream: None
        }
    );
    next(&mut pool, &cq);
    assert_eq!(pool.destination_state(a), DestinationState::Idle);
}

fn an_unreachable_destination_says_so_until_revived() {
    let fabric = Fabric::new(1);
    let mut pool = fabric
        .pool_builder(DcPoolPolicy::Dedicated, 2, 16)
        .setup_unreachable_after(2)
        .build()
        .expect("pool");
    let a = pool.add_destination(fabric.endpoint(0));
    device().kill_target(fabric.dct_number(0), true).expect("kill");
    for wr_id in [1, 2] {
        write(&mut pool, &fabric, a, 0, &[wr_id]).expect("post");
        poll_reports(&mut pool, 1);
    }
    assert!(pool.is_unreachable(a));
    assert_eq!(pool.destination_state(a), DestinationState::Unreachable);
    pool.revive(a);
    assert_eq!(pool.destination_state(a), DestinationState::Idle);
}

fn a_retiring_destination_counts_its_requests_and_a_removed_one_is_unknown() {
    let fabric = Fabric::new(3);
    let (mut pool, cq, ids) = fabric.fed_pool(DcPoolPolicy::Dedicated, 2, 16);
    let (a, b) = (ids[0], ids[1]);
    stall(&pool, 0, true);
    write(&mut pool, &fabric, a, 0, &[1, 2]).expect("post");
    pool.retire_destination(a).expect("a live destination");
    assert_eq!(pool.destination_state(a), DestinationState::Retiring { outstanding: 2 });
    stall(&pool, 0, false);
    assert_eq!(next(&mut pool, &cq), [completed(a, 1)]);
    assert_eq!(pool.destination_state(a), DestinationState::Retiring { outstanding: 1 });
    assert_eq!(
        next(&mut pool, &cq),
        [completed(a, 2), DcPoolEvent::Removed { destination: a }]
    );
    assert_eq!(pool.destination_state(a), DestinationState::Unknown);
    pool.remove_destination(b).expect("nothing outstanding");
    let c = pool.add_destination(fabric.endpoint(2));
    assert_eq!(c.index(), b.index());
    assert_eq!(pool.destination_state(b), DestinationState::Unknown);
    assert_eq!(pool.destination_state(c), DestinationState::Idle);
}

#[test]
fn path_mtu() {
    on_device!();
    checks!(
        a_destination_with_a_smaller_path_mtu_than_the_initiators_is_refused_before_the_wire,
        a_read_whose_responses_would_not_reach_the_initiators_is_refused_before_the_wire,
        the_read_rule_is_the_devices_for_every_pair_of_path_mtus,
    );
}

/// A pool of 2 initiators (static) whose packets are `mtu`; the fabric's targets as destinations
/// whose endpoints say `destination_mtu`.
fn pool_at_mtu(fabric: &Fabric, mtu: Mtu, destination_mtu: &[Option<Mtu>]) -> (DcInitiatorPool, Vec<DestinationId>) {
    let mut bring_up = fast_bring_up();
    bring_up.setup_path_mtu(mtu);
    let mut pool = fabric
        .pool_builder(DcPoolPolicy::Static, 2, 16)
        .setup_bring_up(bring_up)
        .build()
        .expect("pool");
    let ids = destination_mtu
        .iter()
        .enumerate()
        .map(|(t, mtu)| {
            // The target's endpoint, its path MTU as given (`None`: a peer that sent none).
            let sent = fabric.endpoint(t);
            let mut endpoint = sideway_ext::mlx5::dc::endpoint::DcEndpoint::new(
                sent.lid(),
                sent.gid(),
                sent.dct_number(),
                sent.dc_key(),
                sent.is_roce(),
            )
            .expect("an endpoint");
            if let Some(mtu) = mtu {
                endpoint.setup_path_mtu(*mtu);
            }
            pool.add_destination(endpoint)
        })
        .collect();
    (pool, ids)
}

fn a_destination_with_a_smaller_path_mtu_than_the_initiators_is_refused_before_the_wire() {
    let fabric = Fabric::new(3);
    let (mut pool, ids) = pool_at_mtu(&fabric, Mtu::Mtu4096, &[Some(Mtu::Mtu1024), Some(Mtu::Mtu4096), None]);
    device().clear_trace();
    let err = pool.prepare(ids[0]).unwrap_err();
    assert!(
        matches!(
            err.0,
            PostToDestinationErrorKind::PathMtuTooSmall {
                destination: Mtu::Mtu1024,
                initiators: Mtu::Mtu4096
            }
        ),
        "{err:?}"
    );
    assert!(
        pool.start_post_send(ids[0]).is_err(),
        "nor does a post reach the initiator"
    );
    assert_eq!(pool.outstanding(ids[0]), 0);
    assert!(requests().is_empty());
    for (t, &id) in ids.iter().enumerate().skip(1) {
        pool.prepare(id).expect("an MTU at least the initiators'");
        write(&mut pool, &fabric, id, t, &[t as u64]).expect("post");
        assert_eq!(poll_reports(&mut pool, 1), [completed(id, t as u64)]);
    }
}

/// One signalled READ of `length` bytes of `target`'s slot into the local buffer.
fn post_read(
    pool: &mut DcInitiatorPool, fabric: &Fabric, destination: DestinationId, target: usize, wr_id: u64, length: u32,
) -> Result<(), PostBatchError> {
    let mut guard = pool.start_post_send(destination).expect("the pool grants a batch");
    // SAFETY: both regions outlive the completions polled by the caller.
    unsafe {
        guard
            .construct_wr(wr_id, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_read(fabric.remote.mr.rkey(), fabric.slot(target, 0))
            .setup_sge(fabric.local.mr.lkey(), fabric.local.addr(0), length);
    }
    guard.post()
}

fn a_read_whose_responses_would_not_reach_the_initiators_is_refused_before_the_wire() {
    // Targets with room for READs of several packets.
    let mut fabric = Fabric::new(0);
    fabric.remote = Buffer::new(&fabric.pd, 3 * 8192, all());
    for _ in 0..3 {
        fabric.add_target();
    }
    let (mut pool, ids) = pool_at_mtu(&fabric, Mtu::Mtu1024, &[Some(Mtu::Mtu4096), Some(Mtu::Mtu1024), None]);
    let far = ids[0];
    pool.prepare(far)
        .expect("a larger MTU takes every request the initiators send");
    device().clear_trace();
    let err = post_read(&mut pool, &fabric, far, 0, 1, 4096).unwrap_err();
    assert!(
        matches!(
            err.0,
            PostBatchErrorKind::ReadResponsesTooLarge {
                index: 0,
                wr_id: 1,
                length: 4096,
                path_mtu: Mtu::Mtu1024,
                responder_path_mtu: Mtu::Mtu4096,
                batch_len: 1,
            }
        ),
        "{err:?}"
    );
    assert!(requests().is_empty(), "nothing reached the device");
    assert_eq!(pool.outstanding(far), 0, "the refused batch holds nothing");
    post_read(&mut pool, &fabric, far, 0, 2, 1024).expect("one response packet of 1024 bytes");
    write(&mut pool, &fabric, far, 0, &[3]).expect("post");
    assert_eq!(pool.outstanding(far), 2);
    assert_eq!(poll_reports(&mut pool, 2), [completed(far, 2), completed(far, 3)]);
    // No larger MTU known: the READ goes out (the targets answer at the port's MTU).
    for &destination in &ids[1..] {
        post_read(&mut pool, &fabric, destination, 1, 4, 4096).expect("no larger MTU known");
        assert_eq!(pool.outstanding(destination), 1);
        assert_eq!(reports(&poll_reports(&mut pool, 1)), 1);
    }
    let sent: Vec<_> = requests().iter().map(|e| (e.opcode, e.length)).collect();
    assert_eq!(
        sent,
        [
            (OPCODE_RDMA_READ, 1024),
            (OPCODE_RDMA_WRITE, 64),
            (OPCODE_RDMA_READ, 4096),
            (OPCODE_RDMA_READ, 4096)
        ]
    );
}

/// The bytes of a packet at `mtu`.
fn mtu_bytes(mtu: Mtu) -> u64 {
    256 << (mtu as u32 - 1)
}

/// The READ rule the pool holds its READs to (`PathMtus::read_fits`) is the device's: for every
/// pair of path MTUs, a READ posted through sideway-ext's DC post guard (which holds no READ to
/// it) completes where the rule lets it through, and where it refuses it the responses, at the
/// target's MTU, never reach the DC initiator (dropped, the READ ends in RETRY_EXC).
fn the_read_rule_is_the_devices_for_every_pair_of_path_mtus() {
    use sideway::ibverbs::completion::WorkCompletionStatus;
    use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
    use sideway_ext_dc_pool::path_mtus::PathMtus;
    const ALL: [Mtu; 5] = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096];
    let fabric = Fabric::new(0);
    let cq = fabric.ctx.create_cq_builder().setup_cqe(64).build().expect("send CQ");
    let (local, remote) = (
        Buffer::new(&fabric.pd, 1 << 16, all()),
        Buffer::new(&fabric.pd, 1 << 16, all()),
    );
    let (lkey, rkey) = (local.mr.lkey(), remote.mr.rkey());
    let (mut checked, mut refused) = (0, 0);
    for requester in ALL {
        let mut dci = fabric
            .initiator_builder(16)
            .setup_send_cq(cq.clone())
            .build()
            .expect("created");
        let mut bring_up = fast_bring_up();
        bring_up.setup_path_mtu(requester);
        dci.bring_up(&bring_up).expect("brought up");
        assert_eq!(dci.path_mtu(), Some(requester));
        for responder in ALL {
            let mut target_bring_up = DcTargetBringUp::new(PORT);
            target_bring_up.setup_path_mtu(responder);
            let dct = fabric.target(&target_bring_up);
            let endpoint = dct.endpoint().expect("endpoint");
            let gid_index = dci.source_gid().map_or(0, |entry| entry.index());
            let ah = endpoint.create_ah(&fabric.pd, PORT, gid_index).expect("address handle");
            let small = mtu_bytes(requester).min(mtu_bytes(responder));
            for length in [1, small - 1, small, small + 1, 4096, 4097, 1 << 16] {
                let fits = PathMtus::new(requester, responder).read_fits(length);
                let mut guard = dci.start_post_send();
                // SAFETY: the handle and the buffers outlive the completion.
                unsafe {
                    guard
                        .construct_wr(length, WorkRequestFlags::Signaled)
                        .setup_read(rkey, remote.addr(0))
                        .setup_dc_addr(&ah, endpoint.dct_number(), endpoint.dc_key())
                        .setup_sge(lkey, local.addr(0), length as u32);
                }
                guard.post().expect("posted");
                let status = next_completion(&cq).status();
                let reached = status == Some(WorkCompletionStatus::Success);
                assert_eq!(
                    fits, reached,
                    "{requester:?} reading {length} bytes from {responder:?}: {status:?}"
                );
                checked += 1;
                if !reached {
                    assert_eq!(status, Some(WorkCompletionStatus::RetryCounterExceededError));
                    refused += 1;
                    dci.recover().expect("recovered");
                }
            }
        }
    }
    eprintln!("{checked} READs checked, {refused} refused by the rule and the device");
    assert!(refused > 0, "no READ was refused: the comparison proves nothing");
}

#[test]
fn assembly() {
    on_device!();
    checks!(
        the_send_cq_and_the_in_flight_cap_follow_the_granted_send_queue,
        a_pools_inline_data_beyond_the_granted_size_is_its_own_error_not_a_full_queue,
        a_pool_made_from_initiators_creates_address_handles_on_the_protection_domain_given,
    );
}

fn the_send_cq_and_the_in_flight_cap_follow_the_granted_send_queue() {
    use sideway_ext_dc_pool::builder::CreateDcInitiatorPoolErrorKind;
    let fabric = Fabric::new(1);
    // A CQ below what was asked (2 × 20) is refused before anything is created.
    let small = fabric.ctx.create_cq_builder().setup_cqe(16).build().expect("CQ");
    let refused = fabric
        .pool_builder(DcPoolPolicy::Static, 2, 20)
        .setup_send_cq(small)
        .build()
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(
            refused.0,
            CreateDcInitiatorPoolErrorKind::SendCompletionQueueTooSmall { needed: 40, .. }
        ),
        "{refused:?}"
    );
    // The pool's own CQ holds what was granted: libmlx5 rounds 20 up (a power of two of bytes).
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Static, 2, 20);
    let granted = pool.initiator(0).expect("initiator").max_send_wr();
    assert!(granted >= 20, "{granted}");
    assert!(
        pool.send_cq().is_some(),
        "the pool created its send CQ for 2 × {granted}"
    );
    let room = pool.start_post_send(ids[0]).expect("an initiator").room();
    assert_eq!(room, granted as usize, "the pool keeps that much in flight on each");
    // All of it goes out and completes.
    let (initiator, _) = pool.assignment(ids[0]).expect("bound");
    stall(&pool, initiator, true);
    let wr_ids: Vec<u64> = (1..=granted as u64).collect();
    post_writes(&mut pool, &fabric, ids[0], 0, &wr_ids, 8, |_| 0).expect("post");
    stall(&pool, initiator, false);
    assert_eq!(reports(&poll_reports(&mut pool, wr_ids.len())), wr_ids.len());
}

fn a_pools_inline_data_beyond_the_granted_size_is_its_own_error_not_a_full_queue() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Static, 1, 8);
    let granted = pool.initiator(0).expect("initiator").max_inline_data() as usize;
    assert!(granted >= 64, "{granted}");
    let (rkey, to) = (fabric.remote.mr.rkey(), fabric.slot(0, 0));
    let data = vec![0x5a; granted + 1];
    let mut post = |len: usize| {
        let mut guard = pool.start_post_send(ids[0]).expect("an initiator");
        guard
            .construct_wr(9, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_write(rkey, to)
            .setup_inline_data(&data[..len]);
        guard.post()
    };
    post(granted).expect("the granted size fits");
    let err = post(granted + 1).unwrap_err();
    assert!(
        matches!(&err.0, PostBatchErrorKind::Post(post) if matches!(
            post.0,
            TypedPostSendErrorKind::InlineDataTooLong { wr_id: 9, length, max_inline_data, .. }
                if length == granted + 1 && max_inline_data as usize == granted
        )),
        "{err:?}"
    );
    assert_eq!(poll_reports(&mut pool, 1), [completed(ids[0], 9)]);
    assert_eq!(fabric.read_slot(0, 0, granted), vec![0x5a; granted]);
}

fn a_pool_made_from_initiators_creates_address_handles_on_the_protection_domain_given() {
    use sideway_ext::mlx5::dc::endpoint::DcServiceClass;
    use sideway_ext_dc_pool::settings::DcPoolSettings;
    let fabric = Fabric::new(1);
    let cq = fabric.ctx.create_cq_builder().setup_cqe(64).build().expect("CQ");
    let mut initiator = fabric
        .initiator_builder(16)
        .setup_send_cq(cq.clone())
        .build()
        .expect("initiator");
    initiator.bring_up(&fast_bring_up()).expect("bring up");
    let mut settings = DcPoolSettings::default();
    settings
        .setup_policy(DcPoolPolicy::Static)
        .setup_unreachable_after(3)
        .setup_protection_domain(&fabric.pd, PORT, DcServiceClass::new());
    let mut pool = DcInitiatorPool::from_initiators(vec![initiator], Some(cq.into()), &settings).expect("a pool");
    let destination = pool.add_destination(fabric.endpoint(0));
    assert_eq!(
        pool.footprint().address_handles,
        0,
        "none before the first post or prepare"
    );
    pool.prepare(destination).expect("an address handle on the device");
    assert_eq!(pool.footprint().address_handles, 1);
    let mut guard = pool.start_post_send(destination).expect("an initiator");
    guard
        .construct_wr(7, WorkRequestFlags::none())
        .expect("room")
        .setup_write(fabric.remote.mr.rkey(), fabric.slot(0, 8))
        .setup_inline_data(b"pd-given");
    guard.post().expect("posted");
    assert_eq!(poll_reports(&mut pool, 1), [completed(destination, 7)]);
    assert_eq!(fabric.read_slot(0, 8, 8), b"pd-given");
    pool.remove_destination(destination).expect("nothing outstanding");
    assert_eq!(pool.footprint().address_handles, 0, "freed with the destination");
}
