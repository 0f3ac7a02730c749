//! Destinations that wait for a `Ready` while the initiator they hold is lost.
use super::*;

#[test]
fn an_over_quota_destination_whose_initiator_is_lost_gets_ready_when_its_turn_comes() {
    let mut pool = pool(DcPoolPolicy::DedicatedWithQuota { quota: 1 }, 16, 0);
    let ids: Vec<DestinationId> = (0..3).map(|n| Address::new(n).add_to(&mut pool)).collect();
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    assert_eq!(post_writes(&mut pool, a, &[1]), 0);
    assert_eq!(post_writes(&mut pool, b, &[2]), 1);
    assert_eq!(would_block(&mut pool, c), DcPoolWouldBlock::NoInitiator);
    assert_eq!(would_block(&mut pool, a), DcPoolWouldBlock::QuotaExhausted);
    // a's request fails and its initiator cannot be recovered: a loses what it held.
    pool.initiator(0).expect("initiator").recovery_fails.set(true);
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 0), REM_ACCESS_ERR),
        [
            DcPoolEvent::Failed {
                destination: a,
                wr_id: 1,
                status: REM_ACCESS_ERR,
                vendor_err: 0
            },
            DcPoolEvent::InitiatorLost {
                initiator: 0,
                error: "recovery refused by the test".into()
            },
        ]
    );
    pool.core.check_no_destination_stranded();
    // Refused for its quota, a waits for a Ready: it is in line behind c.
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [c, a]);
    assert_eq!(
        complete(&mut pool, provider_wr_id(1, 0), 0),
        [completed(b, 2), DcPoolEvent::Ready { destination: c }]
    );
    assert_eq!(post_writes(&mut pool, c, &[3]), 1);
    assert_eq!(
        complete(&mut pool, provider_wr_id(1, 1), 0),
        [completed(c, 3), DcPoolEvent::Ready { destination: a }]
    );
    assert_eq!(post_writes(&mut pool, a, &[4]), 1);
    pool.core.check_no_destination_stranded();
    take_calls();
}
