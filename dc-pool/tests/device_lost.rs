//! Initiators that cannot be recovered, on the software ConnectX. A DC initiator brought up by
//! hand (its own `modify` calls, as a program that does not use `bring_up` does) has no bring-up
//! to recover with: `DcInitiator::recover` refuses it (`NotBroughtUp`), so a pool assembled
//! with `from_initiators` from one takes it out of service when an error puts it in ERR. And a
//! kernel without the DC initiator's move to RESET (`SOFTMLX5_STACK=no-dci-reset`), where
//! sideway-ext recovers an initiator by creating it again, with a new number.
mod device;

use std::sync::Arc;

use device::*;
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::QueuePairState;
use sideway_ext::ibverbs::queue_pair::QueuePairAttribute;
use sideway_ext::mlx5::dc::endpoint::DcServiceClass;
use sideway_ext::mlx5::dc::initiator::{DcInitiator, DciStreams};
use sideway_ext_dc_pool::settings::DcPoolSettings;
use sideway_ext_dc_pool::types::{
    DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId, DestinationState, PostToDestinationErrorKind,
};
use sideway_ext_dc_pool::DcInitiatorPool;

/// A pool from `from_initiators`: initiator `i` brought up by hand (not recoverable) where
/// `by_hand[i]`, by `bring_up` otherwise; with 4 streams an initiator, ERR after one in error,
/// under the streams policy. Its send CQ, the destinations (one per target).
fn assembled(
    fabric: &Fabric, policy: DcPoolPolicy, by_hand: &[bool],
) -> (DcInitiatorPool, Arc<BasicCompletionQueue>, Vec<DestinationId>) {
    let cq = fabric.ctx.create_cq_builder().setup_cqe(4096).build().expect("send CQ");
    let initiators: Vec<DcInitiator> = by_hand
        .iter()
        .map(|&hand| {
            let mut builder = fabric.initiator_builder(16);
            builder.setup_send_cq(cq.clone());
            if policy == DcPoolPolicy::Streams {
                builder.setup_dci_streams(DciStreams {
                    log_num_concurrent: 2,
                    log_num_errored: 0,
                });
            }
            let mut dci = builder.build().expect("DC initiator");
            if hand {
                let mut init = QueuePairAttribute::new();
                init.setup_state(QueuePairState::Init)
                    .setup_pkey_index(0)
                    .setup_port(PORT);
                let mut rtr = QueuePairAttribute::new();
                rtr.setup_state(QueuePairState::ReadyToReceive)
                    .setup_path_mtu(Mtu::Mtu1024);
                let mut rts = QueuePairAttribute::new();
                rts.setup_state(QueuePairState::ReadyToSend)
                    .setup_timeout(8)
                    .setup_retry_cnt(2)
                    .setup_rnr_retry(7)
                    .setup_max_read_atomic(1)
                    .setup_sq_psn(0);
                for attr in [&init, &rtr, &rts] {
                    dci.modify(attr).expect("by hand to RTS");
                }
            } else {
                dci.bring_up(&fast_bring_up()).expect("bring up");
            }
            dci
        })
        .collect();
    let mut pool = DcInitiatorPool::from_initiators(initiators, Some(cq.clone().into()), &settings(fabric, policy))
        .expect("a pool");
    let ids = (0..fabric.targets.len())
        .map(|t| pool.add_destination(fabric.endpoint(t)))
        .collect();
    (pool, cq, ids)
}

/// A pool's settings: `policy`, unreachable after 3, address handles on the fabric's PD.
fn settings(fabric: &Fabric, policy: DcPoolPolicy) -> DcPoolSettings {
    let mut settings = DcPoolSettings::default();
    settings
        .setup_policy(policy)
        .setup_unreachable_after(3)
        .setup_protection_domain(&fabric.pd, PORT, DcServiceClass::new());
    settings
}

fn is_lost(event: &DcPoolEvent, initiator: usize) -> bool {
    matches!(event, DcPoolEvent::InitiatorLost { initiator: i, .. } if *i == initiator)
}

/// On InfiniBand: the pool's address handles are sent from its first initiator's source GID,
/// which a DC initiator brought up by hand does not know (on RoCE the pool would send from GID 0,
/// link-local, which cannot reach the targets' routed GIDs).
#[test]
fn lost() {
    on_device!(("SOFTMLX5_LINK", "ib"));
    checks!(
        an_initiator_that_cannot_be_recovered_is_lost_and_its_destinations_move_to_the_others,
        an_over_quota_destination_whose_initiator_is_lost_gets_ready_when_its_turn_comes,
        no_initiator_in_service_once_every_initiator_is_lost,
        an_initiator_whose_recovery_fails_is_lost_and_the_others_take_its_destinations,
        a_pool_without_initiators_refuses_posts,
    );
}

#[test]
fn rebuilt() {
    on_device!(("SOFTMLX5_STACK", "no-dci-reset"));
    checks!(
        on_a_kernel_without_the_dci_reset_a_recovered_initiator_comes_back_with_a_new_number,
        on_a_kernel_without_the_dci_reset_a_rebuilt_initiator_takes_more_than_its_send_queue,
    );
}

fn an_initiator_that_cannot_be_recovered_is_lost_and_its_destinations_move_to_the_others() {
    for policy in [DcPoolPolicy::Static, DcPoolPolicy::Streams] {
        let fabric = Fabric::new(1);
        // With streams, one stream in error moves the initiator to ERR (2^0).
        let (pool, cq, ids) = assembled(&fabric, policy, &[true, true]);
        let a = ids[0];
        let (initiator, _) = pool.assignment(a).expect("bound");
        // Only the one a is on cannot be recovered.
        let mut by_hand = [false, false];
        by_hand[initiator] = true;
        drop(pool);
        let (mut pool, cq, ids) = {
            drop(cq);
            assembled(&fabric, policy, &by_hand)
        };
        let a = ids[0];
        assert_eq!(pool.assignment(a).map(|(i, _)| i), Some(initiator));
        stall(&pool, initiator, true);
        write_some_bad(&mut pool, &fabric, a, 0, &[1, 2], &[1]);
        stall(&pool, initiator, false);
        let mut events = next(&mut pool, &cq);
        events.extend(next(&mut pool, &cq));
        let events = without_syndromes(&events);
        assert_eq!(
            events[..2],
            [failed(a, 1, REM_ACCESS_ERR), failed(a, 2, WR_FLUSH_ERR)],
            "{policy:?}"
        );
        assert!(
            events.len() == 3 && is_lost(&events[2], initiator),
            "{policy:?}: {events:?}"
        );
        let (moved, _) = pool.assignment(a).expect("bound to another");
        assert_ne!(moved, initiator);
        assert_eq!(write(&mut pool, &fabric, a, 0, &[3]).expect("post").0, moved);
        assert_eq!(next(&mut pool, &cq), [completed(a, 3)]);
        assert_eq!(fabric.read_slot(0, 0, 64), vec![3; 64]);
    }
}

fn an_over_quota_destination_whose_initiator_is_lost_gets_ready_when_its_turn_comes() {
    let fabric = Fabric::new(3);
    let (mut pool, cq, ids) = assembled(&fabric, DcPoolPolicy::DedicatedWithQuota { quota: 1 }, &[true, false]);
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    stall(&pool, 0, true);
    stall(&pool, 1, true);
    write_some_bad(&mut pool, &fabric, a, 0, &[1], &[1]);
    write(&mut pool, &fabric, b, 1, &[2]).expect("post");
    assert_eq!(would_block(&mut pool, c), DcPoolWouldBlock::NoInitiator);
    assert_eq!(would_block(&mut pool, a), DcPoolWouldBlock::QuotaExhausted);
    stall(&pool, 0, false);
    let events = without_syndromes(&next(&mut pool, &cq));
    assert_eq!(events[0], failed(a, 1, REM_ACCESS_ERR));
    assert!(events.len() == 2 && is_lost(&events[1], 0), "{events:?}");
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [c, a]);
    stall(&pool, 1, false);
    assert_eq!(
        next(&mut pool, &cq),
        [completed(b, 2), DcPoolEvent::Ready { destination: c }]
    );
    assert_eq!(write(&mut pool, &fabric, c, 2, &[3]).expect("post").0, 1);
    assert_eq!(
        next(&mut pool, &cq),
        [completed(c, 3), DcPoolEvent::Ready { destination: a }]
    );
    assert_eq!(write(&mut pool, &fabric, a, 0, &[4]).expect("post").0, 1);
    assert_eq!(next(&mut pool, &cq), [completed(a, 4)]);
}

fn no_initiator_in_service_once_every_initiator_is_lost() {
    let fabric = Fabric::new(1);
    let (mut pool, cq, ids) = assembled(&fabric, DcPoolPolicy::Static, &[true, true]);
    let a = ids[0];
    for lost in 0..2 {
        let (initiator, _) = pool.assignment(a).expect("bound");
        write_some_bad(&mut pool, &fabric, a, 0, &[lost], &[lost]);
        let events = next(&mut pool, &cq);
        assert!(events.last().is_some_and(|e| is_lost(e, initiator)), "{events:?}");
    }
    assert_eq!(pool.destination_state(a), DestinationState::NoInitiatorInService);
    assert!(pool
        .start_post_send(a)
        .is_err_and(|e| matches!(e.0, PostToDestinationErrorKind::NoInitiatorInService)));
}

fn an_initiator_whose_recovery_fails_is_lost_and_the_others_take_its_destinations() {
    let fabric = Fabric::new(16);
    let (mut pool, cq, ids) = assembled(&fabric, DcPoolPolicy::Static, &[true, false]);
    let qp0 = qpn(&pool, 0);
    // Initiator 0's first requests wait on the device; then it fails with them in flight.
    stall(&pool, 0, true);
    let mut faulted = false;
    let outcome = run(&mut pool, &fabric, &ids, 4, &[], |pool, _| {
        if !faulted {
            device().error_initiator(qp0).expect("error_initiator");
            stall(pool, 0, false);
            faulted = true;
        }
    });
    drop(cq);
    assert_eq!(outcome.reported.len(), 64);
    assert!(
        outcome
            .reported
            .values()
            .all(|e| matches!(e, DcPoolEvent::Completed { .. })),
        "flushed requests were retried on initiator 1"
    );
    assert!(outcome.retried > 0);
    assert!(outcome.lost == [0], "{:?}", outcome.lost);
    outcome.assert_written(&fabric, 4);
}

fn on_a_kernel_without_the_dci_reset_a_recovered_initiator_comes_back_with_a_new_number() {
    let fabric = Fabric::new(4);
    let mut pool = fabric
        .pool_builder(DcPoolPolicy::Dedicated, 1, 16)
        .setup_unreachable_after(100)
        .build()
        .expect("pool");
    // Added with the old key; the target's key changes: its requests are dropped.
    let ids: Vec<_> = (0..4).map(|t| pool.add_destination(fabric.endpoint(t))).collect();
    device().set_dc_key(fabric.dct_number(1), 0xbad).expect("set_dc_key");
    let before = qpn(&pool, 0);
    let outcome = run(&mut pool, &fabric, &ids, 5, &[], |_, _| {});
    let failed: Vec<_> = outcome
        .reported
        .iter()
        .filter(|(_, e)| matches!(e, DcPoolEvent::Failed { .. }))
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(failed.len(), 5, "{failed:?}");
    assert!(failed.iter().all(|&(t, _)| t == 1), "{failed:?}");
    assert_eq!(outcome.reported.len() - failed.len(), 15);
    assert_ne!(qpn(&pool, 0), before, "rebuilt, with a new number");
}

fn on_a_kernel_without_the_dci_reset_a_rebuilt_initiator_takes_more_than_its_send_queue() {
    let fabric = Fabric::new(1);
    let (mut pool, ids) = fabric.pool(DcPoolPolicy::Static, 1, 4);
    let qp = qpn(&pool, 0);
    device().error_initiator(qp).expect("error_initiator");
    let outcome = run(&mut pool, &fabric, &ids, 12, &[], |_, _| {});
    assert_eq!(outcome.reported.len(), 12);
    assert!(outcome
        .reported
        .values()
        .all(|e| matches!(e, DcPoolEvent::Completed { .. })));
    assert_ne!(qpn(&pool, 0), qp, "rebuilt");
    outcome.assert_written(&fabric, 12);
}

/// A pool assembled from no initiators binds nothing and refuses posts, under every policy.
fn a_pool_without_initiators_refuses_posts() {
    let fabric = Fabric::new(1);
    for policy in [DcPoolPolicy::Dedicated, DcPoolPolicy::Static, DcPoolPolicy::Streams] {
        let mut pool: DcInitiatorPool =
            DcInitiatorPool::from_initiators(Vec::new(), None, &settings(&fabric, policy)).expect("a pool");
        let d = pool.add_destination(fabric.endpoint(0));
        assert_eq!(pool.assignment(d), None);
        assert_eq!(pool.destination_state(d), DestinationState::NoInitiatorInService);
        let refused = if policy == DcPoolPolicy::Streams {
            pool.start_post_send_on_stream(d).map(drop)
        } else {
            pool.start_post_send(d).map(drop)
        };
        let refused = refused.map_err(|e| e.0);
        assert!(
            matches!(refused, Err(PostToDestinationErrorKind::NoInitiatorInService)),
            "{policy:?}: {refused:?}"
        );
    }
}
