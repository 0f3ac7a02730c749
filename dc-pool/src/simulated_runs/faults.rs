//! Any schedule of the fabric's faults (a target killed and revived, its DC key changed, a
//! request failing, an initiator stalled or moved to ERR, recoveries refused so that initiators
//! are lost) among posts, polls and retirements, under every policy: a destination refused with
//! a would-block it can wait out gets its `Ready`. After every step it is in line, holds an
//! initiator (dedicated policies), or waits out the would-block on an initiator; once the faults
//! are over and everything drained, every one got its `Ready`.
use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Step {
    /// Post `count` requests to a destination.
    Post { destination: usize, count: usize },
    /// The fabric runs `ticks` ticks.
    Advance { ticks: u64 },
    /// The pool polls its completions.
    Poll,
    /// The pool's clock moves on (grant timeouts) and it makes progress.
    Tick,
    /// A destination's target dies.
    Kill { destination: usize },
    /// A destination's target changes its DC key.
    ChangeKey { destination: usize },
    /// A destination's target answers again, with its key, and the pool lets it post again.
    Revive { destination: usize },
    /// An initiator executes nothing for `ticks` ticks.
    Stall { initiator: usize, ticks: u64 },
    /// The next request on a stream of an initiator (its only one without streams) fails.
    FailNext { initiator: usize, stream: u16, status: u32 },
    /// An initiator goes to ERR by itself.
    MoveToError { initiator: usize },
    /// An initiator's recoveries are refused (it is lost at the next), or allowed again. The
    /// first initiator always recovers: the line is served to the end.
    RefuseRecovery { initiator: usize, refuse: bool },
    /// A destination is retired and another takes its place.
    Replace { destination: usize },
}

const DESTINATIONS: usize = 5;
const INITIATORS: usize = 3;
const KEY: u64 = 0x5eed;

fn step() -> impl Strategy<Value = Step> {
    let destination = 0..DESTINATIONS;
    prop_oneof![
        5 => (destination.clone(), 1..6usize).prop_map(|(destination, count)| Step::Post { destination, count }),
        3 => (1..6u64).prop_map(|ticks| Step::Advance { ticks }),
        3 => Just(Step::Poll),
        1 => Just(Step::Tick),
        1 => destination.clone().prop_map(|destination| Step::Kill { destination }),
        1 => destination.clone().prop_map(|destination| Step::ChangeKey { destination }),
        1 => destination.clone().prop_map(|destination| Step::Revive { destination }),
        1 => (0..INITIATORS, 1..20u64).prop_map(|(initiator, ticks)| Step::Stall { initiator, ticks }),
        1 => (0..INITIATORS, 0..4u16, prop_oneof![Just(RETRY_EXC), Just(REM_ACCESS), Just(REM_INV_REQ)])
            .prop_map(|(initiator, stream, status)| Step::FailNext { initiator, stream, status }),
        1 => (0..INITIATORS).prop_map(|initiator| Step::MoveToError { initiator }),
        1 => (1..INITIATORS, any::<bool>()).prop_map(|(initiator, refuse)| Step::RefuseRecovery { initiator, refuse }),
        1 => destination.prop_map(|destination| Step::Replace { destination }),
    ]
}

fn policy() -> impl Strategy<Value = DcPoolPolicy> {
    prop_oneof![
        Just(DcPoolPolicy::Dedicated),
        (1..4u32).prop_map(|quota| DcPoolPolicy::DedicatedWithQuota { quota }),
        Just(DcPoolPolicy::Static),
        Just(DcPoolPolicy::Streams),
    ]
}

/// The state of a run.
struct Run {
    fabric: SimulatedFabric,
    pool: DcInitiatorPool<SimulatedInitiator>,
    /// The target of each destination slot of the steps, and the live destination in it.
    targets: Vec<Remote>,
    ids: Vec<DestinationId>,
    /// Per slot: refused with a would-block and not reported `Ready` since.
    refused: Vec<bool>,
    /// The number of the next request.
    next_request: u64,
    /// Destinations reported removed.
    removed: Vec<DestinationId>,
}

impl Run {
    fn apply(&mut self, step: &Step) -> Result<(), TestCaseError> {
        match *step {
            Step::Post { destination, count } => {
                let requests: Vec<u64> = (self.next_request..self.next_request + count as u64).collect();
                self.next_request += count as u64;
                let id = self.ids[destination];
                if let Err(PostToDestinationErrorKind::WouldBlock(_)) =
                    post(&mut self.pool, id, &self.targets[destination], &requests)
                {
                    self.refused[destination] = true;
                }
            },
            Step::Advance { ticks } => self.fabric.advance(ticks),
            Step::Poll => {
                let mut events = Vec::new();
                self.pool.poll(|e| events.push(e)).expect("poll");
                self.settle(events)?;
            },
            Step::Tick => {
                let mut events = Vec::new();
                advance_clock(Duration::from_millis(1));
                self.pool.progress(|e| events.push(e));
                self.settle(events)?;
            },
            Step::Kill { destination } => self.targets[destination].kill(),
            Step::ChangeKey { destination } => self.targets[destination].set_dc_key(KEY + 1),
            Step::Revive { destination } => {
                self.targets[destination].revive();
                self.targets[destination].set_dc_key(KEY);
                self.pool.revive(self.ids[destination]);
            },
            Step::Stall { initiator, ticks } => self.initiator(initiator).stall(ticks),
            Step::FailNext {
                initiator,
                stream,
                status,
            } => self.initiator(initiator).fail_next(stream, status),
            Step::MoveToError { initiator } => self.initiator(initiator).move_to_error(),
            Step::RefuseRecovery { initiator, refuse } => self.initiator(initiator).refuse_recovery(refuse),
            Step::Replace { destination } => {
                let id = self.ids[destination];
                prop_assert!(self.pool.retire_destination(id).is_ok());
                self.refused[destination] = false;
                self.ids[destination] = self.pool.add_destination(self.targets[destination].endpoint());
            },
        }
        Ok(())
    }

    fn initiator(&self, initiator: usize) -> &SimulatedInitiator {
        self.pool.initiator(initiator).expect("an initiator")
    }

    fn settle(&mut self, events: Vec<DcPoolEvent>) -> Result<(), TestCaseError> {
        for event in events {
            match event {
                DcPoolEvent::Ready { destination } => {
                    prop_assert!(!self.removed.contains(&destination), "ready once removed");
                    if let Some(slot) = self.ids.iter().position(|&id| id == destination) {
                        self.refused[slot] = false;
                    }
                },
                DcPoolEvent::Removed { destination } => self.removed.push(destination),
                _ => {},
            }
        }
        Ok(())
    }

    /// Every destination refused with a would-block and not ready since is in line, holds an
    /// initiator, or waits out the would-block on one.
    fn check_refused_can_get_ready(&self) -> Result<(), TestCaseError> {
        let waiting: Vec<DestinationId> = self.pool.waiting().collect();
        let dedicated = self.pool.policy().is_dedicated();
        for (slot, &id) in self.ids.iter().enumerate() {
            if !self.refused[slot] {
                continue;
            }
            let in_line = waiting.contains(&id);
            let holds = dedicated && self.pool.assignment(id).is_some();
            prop_assert!(
                in_line || holds || self.pool.core.awaits_ready(id),
                "destination {:?}, refused with a would-block, will never get ready",
                id
            );
        }
        Ok(())
    }
}

fn check(policy: DcPoolPolicy, capacity: u32, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let fabric = SimulatedFabric::new(0);
    fabric.set_poll_ticks(false);
    fabric.set_transport_timeout(4);
    let targets: Vec<Remote> = (0..DESTINATIONS)
        .map(|_| {
            fabric
                .create_target_builder()
                .setup_dc_key(KEY)
                .setup_memory(8)
                .setup_latency(1)
                .build()
                .expect("a target")
        })
        .map(Remote::new)
        .collect();
    let mut pool = pool(
        &fabric,
        policy,
        INITIATORS,
        capacity,
        (2, 0),
        2,
        Duration::from_millis(4),
    );
    let ids: Vec<_> = targets.iter().map(|t| pool.add_destination(t.endpoint())).collect();
    let mut run = Run {
        fabric,
        pool,
        targets,
        ids,
        refused: vec![false; DESTINATIONS],
        next_request: 0,
        removed: Vec::new(),
    };
    for step in &steps {
        run.apply(step)?;
        run.pool.core.check_no_destination_stranded();
        run.check_refused_can_get_ready()?;
    }
    // The faults end: everything answers and recovers; the fabric runs, the pool polls and
    // ticks (grants nobody uses expire) until every refused destination got its Ready.
    for destination in 0..DESTINATIONS {
        run.apply(&Step::Revive { destination })?;
    }
    for initiator in 1..INITIATORS {
        run.apply(&Step::RefuseRecovery {
            initiator,
            refuse: false,
        })?;
    }
    for _ in 0..1000 {
        if !run.refused.contains(&true) {
            break;
        }
        for step in [Step::Advance { ticks: 8 }, Step::Poll, Step::Tick] {
            run.apply(&step)?;
            run.pool.core.check_no_destination_stranded();
            run.check_refused_can_get_ready()?;
        }
    }
    prop_assert!(!run.refused.contains(&true), "never ready: {:?}", run.refused);
    Ok(())
}

/// 256 cases, or `PROPTEST_CASES`.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_destination_refused_with_a_would_block_gets_ready_whatever_the_faults(
        policy in policy(),
        capacity in 1..6u32,
        steps in proptest::collection::vec(step(), 0..80),
    ) {
        check(policy, capacity, steps)?;
    }
}
