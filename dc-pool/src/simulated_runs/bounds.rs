//! The bookkeeping at its bounds: no initiator, the most initiators a pool numbers, and a
//! million destinations coming and going.
use super::*;

/// A pool built by hand without initiators (the builder refuses 0) binds nothing and refuses
/// posts, under every policy, rather than dividing by zero.
#[test]
fn a_pool_without_initiators_refuses_posts() {
    for policy in [DcPoolPolicy::Dedicated, DcPoolPolicy::Static, DcPoolPolicy::Streams] {
        let mut settings = crate::settings::DcPoolSettings::default();
        settings.setup_policy(policy);
        let mut pool = PoolCore::new::<SimulatedInitiator>(&[], &settings);
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
    let count = crate::requests::MAX_INITIATORS;
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
        let mut peak = crate::types::DcPoolFootprint::default();
        for n in 0..1_000_000u64 {
            let destination = add(&mut pool);
            live.push_back(destination);
            // Post one request; refused ones (in line) are cancelled before removal.
            if let Ok(grant) = pool.begin(destination) {
                wr_ids.set(grant.slot, n);
                pool.commit(grant.initiator, grant.destination, grant.stream, 1);
                let initiators: &mut [SimulatedInitiator] = &mut [];
                assert!(pool.complete(
                    initiators,
                    &wr_ids,
                    encode(grant.initiator, grant.first),
                    SUCCESS,
                    0,
                    &mut |_| {}
                ));
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
