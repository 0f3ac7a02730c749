//! A destination whose endpoint names a DC key its live target no longer has (the peer changed
//! it: `set_dc_key`), under both answers the fabric models for it: dropped (retry exceeded after
//! the transport timeout, the default) and a remote access error. The destination ends as the
//! pool's documentation says, every request is reported once as the fabric ended it, the
//! initiator is recovered after each error and serves the other destination, and a destination
//! added with the target's current endpoint reaches it.
use std::collections::BTreeMap;

use super::*;
use crate::simulation::WrongDcKey;
use crate::types::DestinationState;

const TRANSPORT_TIMEOUT: u64 = 16;

/// A stale destination and a good one on one initiator (static policy), the fabric answering a
/// wrong key with `answer`.
struct Run {
    fabric: SimulatedFabric,
    pool: DcInitiatorPool<SimulatedInitiator>,
    targets: [Remote; 2],
    ids: [DestinationId; 2],
    next: u64,
    /// Request number → how the pool reported it (`Retry`s are posted again, not kept).
    reported: BTreeMap<u64, DcPoolEvent>,
    /// Request number → the tick it was posted at.
    posted_at: BTreeMap<u64, u64>,
    /// Request number → its slot, for re-posting a retry.
    slot_of: BTreeMap<u64, usize>,
    unreachable: Vec<(DestinationId, u64)>,
    truth: Vec<(u64, u32)>,
}

const STALE: usize = 0;
const GOOD: usize = 1;

impl Run {
    fn new(answer: WrongDcKey) -> Self {
        let fabric = SimulatedFabric::new(5);
        fabric.set_transport_timeout(TRANSPORT_TIMEOUT);
        fabric.set_wrong_dc_key(answer);
        let target = |key| {
            fabric
                .create_target_builder()
                .setup_dc_key(key)
                .setup_memory(8)
                .build()
                .expect("a target")
        };
        let targets = [Remote::new(target(0xd0c)), Remote::new(target(0))];
        let mut pool = pool(&fabric, DcPoolPolicy::Static, 1, 8, (0, 0), 3, Duration::from_millis(4));
        let ids = [
            pool.add_destination(targets[STALE].endpoint()),
            pool.add_destination(targets[GOOD].endpoint()),
        ];
        // The peer changes its key: the pool's endpoint is stale.
        targets[STALE].set_dc_key(0xbad);
        Self {
            fabric,
            pool,
            targets,
            ids,
            next: 0,
            reported: BTreeMap::new(),
            posted_at: BTreeMap::new(),
            slot_of: BTreeMap::new(),
            unreachable: Vec::new(),
            truth: Vec::new(),
        }
    }

    /// Posts request `number` to slot `slot`, polling while it is refused with a would-block;
    /// the refusal that is not one.
    fn post_one(&mut self, slot: usize, number: u64) -> Result<(), PostToDestinationErrorKind> {
        loop {
            match post(&mut self.pool, self.ids[slot], &self.targets[slot], &[number]) {
                Ok(1) => {
                    self.posted_at.insert(number, self.fabric.now());
                    self.slot_of.insert(number, slot);
                    return Ok(());
                },
                Ok(_) | Err(PostToDestinationErrorKind::WouldBlock(_)) => self.poll(),
                Err(refusal) => return Err(refusal),
            }
        }
    }

    /// Posts `count` new requests to `slot`; the numbers posted.
    fn post(&mut self, slot: usize, count: u64) -> Result<Vec<u64>, PostToDestinationErrorKind> {
        let numbers: Vec<u64> = (self.next..self.next + count).collect();
        self.next += count;
        for &number in &numbers {
            self.post_one(slot, number)?;
        }
        Ok(numbers)
    }

    fn poll(&mut self) {
        let mut events = Vec::new();
        self.pool.poll(|event| events.push(event)).expect("poll");
        self.truth.extend(self.fabric.take_journal());
        for event in events {
            match event {
                DcPoolEvent::Completed { wr_id, .. } | DcPoolEvent::Failed { wr_id, .. } => {
                    assert!(
                        self.reported.insert(wr_id, event.clone()).is_none(),
                        "request {wr_id} reported twice: {event:?}"
                    );
                },
                DcPoolEvent::Retry { wr_id, .. } => {
                    let slot = self.slot_of[&wr_id];
                    self.post_one(slot, wr_id).expect("a retry is posted again");
                },
                DcPoolEvent::Unreachable { destination } => self.unreachable.push((destination, self.fabric.now())),
                _ => {},
            }
        }
    }

    /// Polls until every request posted was reported.
    fn drain(&mut self) {
        for _ in 0..10_000 {
            if self.posted_at.keys().all(|number| self.reported.contains_key(number)) {
                return;
            }
            self.poll();
        }
        panic!("not every request was reported: {:?}", self.reported);
    }

    /// How the fabric ended `number`, last (a retried request was flushed before it executed).
    fn ended(&self, number: u64) -> Option<u32> {
        self.truth
            .iter()
            .rev()
            .find(|(n, _)| *n == number)
            .map(|&(_, status)| status)
    }

    /// Checks every report against the fabric's record: `Completed` for what executed, `Failed`
    /// with the status it ended with.
    fn check_reports(&self) {
        for (&number, event) in &self.reported {
            match *event {
                DcPoolEvent::Completed { destination, .. } => {
                    assert_eq!(self.ended(number), Some(SUCCESS), "{number} completed");
                    assert_eq!(destination, self.ids[self.slot_of[&number]]);
                },
                DcPoolEvent::Failed { status, .. } => assert_eq!(self.ended(number), Some(status), "{number} failed"),
                _ => unreachable!(),
            }
        }
    }

    /// The statuses the stale destination's `numbers` were reported with.
    fn statuses(&self, numbers: &[u64]) -> Vec<Option<u32>> {
        numbers
            .iter()
            .map(|number| match self.reported.get(number) {
                Some(DcPoolEvent::Failed { status, .. }) => Some(*status),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn a_dropped_wrong_key_fails_after_the_transport_timeout_and_makes_the_destination_unreachable() {
    let mut run = Run::new(WrongDcKey::Dropped);
    for round in 0..3 {
        let stale = run.post(STALE, 2).expect("not unreachable yet");
        let good = run.post(GOOD, 2).expect("a good destination");
        run.drain();
        // The first fails as a target that does not answer, after the transport timeout; the
        // one behind it is flushed, failed for its destination.
        assert_eq!(run.statuses(&stale), [Some(RETRY_EXC), Some(FLUSH)], "round {round}");
        assert!(
            run.truth.iter().any(|&(n, s)| n == stale[0] && s == RETRY_EXC),
            "round {round}"
        );
        // The initiator was recovered and served the good destination.
        for number in good {
            assert!(
                matches!(run.reported[&number], DcPoolEvent::Completed { .. }),
                "round {round}"
            );
        }
    }
    // After `unreachable_after` (3) such errors: unreachable, once, and refused at post.
    assert_eq!(run.unreachable.len(), 1, "{:?}", run.unreachable);
    assert_eq!(run.unreachable[0].0, run.ids[STALE]);
    assert!(run.pool.is_unreachable(run.ids[STALE]));
    assert_eq!(
        run.pool.destination_state(run.ids[STALE]),
        DestinationState::Unreachable
    );
    assert!(matches!(
        run.post(STALE, 1),
        Err(PostToDestinationErrorKind::Unreachable)
    ));
    run.next -= 1;
    // No failure came before the transport timeout had passed since its post.
    let first_failure = run.truth.iter().find(|&&(_, s)| s == RETRY_EXC).expect("a failure").0;
    assert!(run.unreachable[0].1 >= run.posted_at[&first_failure] + TRANSPORT_TIMEOUT);
    assert!(run.fabric.counters().recoveries >= 3);
    // The program refreshes the endpoint: the destination, removed, added again with the
    // target's current key, reaches it.
    run.pool
        .remove_destination(run.ids[STALE])
        .expect("nothing outstanding");
    run.ids[STALE] = run.pool.add_destination(run.targets[STALE].endpoint());
    let fresh = run.post(STALE, 2).expect("a fresh destination");
    run.drain();
    for number in fresh {
        assert!(matches!(run.reported[&number], DcPoolEvent::Completed { .. }));
    }
    run.check_reports();
    assert_eq!(run.reported.len() as u64, run.next, "every request reported once");
}

#[test]
fn a_wrong_key_answered_with_a_remote_access_error_fails_each_request_and_is_never_unreachable() {
    let mut run = Run::new(WrongDcKey::RemoteAccessError);
    for round in 0..4 {
        let posted = run.fabric.now();
        let stale = run.post(STALE, 2).expect("never unreachable");
        let good = run.post(GOOD, 2).expect("a good destination");
        run.drain();
        assert_eq!(run.statuses(&stale), [Some(REM_ACCESS), Some(FLUSH)], "round {round}");
        // A NAK, not a timeout: well before the transport timeout.
        assert!(run.fabric.now() < posted + TRANSPORT_TIMEOUT, "round {round}");
        for number in good {
            assert!(
                matches!(run.reported[&number], DcPoolEvent::Completed { .. }),
                "round {round}"
            );
        }
    }
    assert!(
        run.unreachable.is_empty(),
        "a remote access error is not a missing target"
    );
    assert!(!run.pool.is_unreachable(run.ids[STALE]));
    assert_ne!(
        run.pool.destination_state(run.ids[STALE]),
        DestinationState::Unreachable
    );
    assert!(run.fabric.counters().recoveries >= 4);
    run.check_reports();
    assert_eq!(run.reported.len() as u64, run.next, "every request reported once");
}
