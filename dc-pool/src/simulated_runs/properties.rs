//! Any interleaving of posts, dropped batches, executions, error completions, asynchronous
//! moves to ERR, flushes, polls (through `poll`, and a completion at a time through
//! `complete`), cancellations and removals strands no destination, and reports
//! every request exactly once, as the fabric saw it. The test drives the fabric's execution
//! by hand.
use proptest::prelude::*;

use super::*;
use sideway_ext::ibverbs::work_completion::{poll as poll_cq, WorkCompletion};

#[derive(Debug, Clone)]
enum Op {
    /// Post `count` requests to a destination.
    Post {
        destination: u32,
        count: usize,
    },
    /// Begin a batch and drop it unposted.
    Drop {
        destination: u32,
    },
    /// Execute up to `count` requests at the head of an initiator's lane (flush them when it
    /// is in error).
    Execute {
        initiator: usize,
        lane: usize,
        count: usize,
    },
    /// The head request of a lane fails with an error completion.
    Fail {
        initiator: usize,
        lane: usize,
        status: u32,
    },
    /// The whole initiator goes to ERR by itself (no error completion first).
    Error {
        initiator: usize,
    },
    /// Time passes: asynchronous moves to ERR happen.
    Advance,
    /// The caller polls up to `count` completions and hands each to `complete`, or (from 8
    /// on) the pool polls (`poll`).
    Poll {
        count: usize,
    },
    /// The pool's clock moves on (grant timeouts).
    Tick,
    Revive {
        destination: u32,
    },
    CancelWait {
        destination: u32,
    },
    /// Removes a destination (refused while it has requests outstanding) and adds another.
    Replace {
        destination: u32,
    },
}

fn status() -> impl Strategy<Value = u32> {
    prop_oneof![Just(RETRY_EXC), Just(REM_ACCESS), Just(REM_INV_REQ)]
}

fn op(destinations: u32, initiators: usize, lanes: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..destinations, 1..6usize).prop_map(|(destination, count)| Op::Post { destination, count }),
        1 => (0..destinations).prop_map(|destination| Op::Drop { destination }),
        4 => (0..initiators, 0..lanes, 1..4usize).prop_map(|(initiator, lane, count)| Op::Execute { initiator, lane, count }),
        1 => (0..initiators, 0..lanes, status()).prop_map(|(initiator, lane, status)| Op::Fail { initiator, lane, status }),
        1 => (0..initiators).prop_map(|initiator| Op::Error { initiator }),
        1 => Just(Op::Advance),
        3 => (1..10usize).prop_map(|count| Op::Poll { count }),
        1 => Just(Op::Tick),
        1 => (0..destinations).prop_map(|destination| Op::Revive { destination }),
        1 => (0..destinations).prop_map(|destination| Op::CancelWait { destination }),
        1 => (0..destinations).prop_map(|destination| Op::Replace { destination }),
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

const DESTINATIONS: u32 = 5;
const INITIATORS: usize = 3;
/// Streams per initiator (2^2); 2^0 of them in error (the first) move it to ERR.
const LANES: usize = 4;

/// The state of a run.
struct Run {
    fabric: SimulatedFabric,
    pool: DcInitiatorPool<SimulatedInitiator>,
    /// The target of each of the `DESTINATIONS` slots of the ops.
    targets: Vec<Remote>,
    /// The live destination in each slot.
    ids: Vec<DestinationId>,
    /// Per request: its destination's place, what the fabric did, and its fate.
    destination_of: Vec<u32>,
    truth: Vec<Truth>,
    fates: Vec<Fate>,
    /// Per destination place: the last request completed (order).
    last_completed: Vec<Option<u32>>,
    /// Per destination place: refused for want of an initiator and not served since.
    in_line: Vec<bool>,
}

impl Run {
    fn post(&mut self, slot: u32, count: usize) {
        let id = self.ids[slot as usize];
        let first = self.fates.len() as u64;
        let requests: Vec<u64> = (first..first + count as u64).collect();
        match post(&mut self.pool, id, &self.targets[slot as usize], &requests) {
            Ok(posted) => {
                self.in_line[id.index()] = false;
                for _ in 0..posted {
                    self.fates.push(Fate::Pending);
                    self.destination_of.push(id.index);
                    self.truth.push(Truth::NotYet);
                }
            },
            Err(PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)) => {
                self.in_line[id.index()] = true
            },
            Err(_) => {},
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Post { destination, count } => self.post(destination, count),
            Op::Drop { destination } => self.post(destination, 0),
            Op::Execute { initiator, lane, count } => {
                self.fabric
                    .execute(initiator, lane % self.fabric.lanes(initiator), count)
            },
            Op::Fail {
                initiator,
                lane,
                status,
            } => self
                .fabric
                .fail_head(initiator, lane % self.fabric.lanes(initiator), status),
            Op::Error { initiator } => self.pool.initiator(initiator).expect("an initiator").move_to_error(),
            Op::Advance => self.fabric.advance(1),
            Op::Poll { count } if count >= 8 => {
                let mut events = Vec::new();
                self.pool.poll(|e| events.push(e)).expect("poll");
                self.settle(events)?;
            },
            Op::Poll { count } => {
                let mut events = Vec::new();
                let cq = self.pool.send_cq().expect("the simulated CQ").raw();
                let mut wcs = vec![WorkCompletion::default(); count];
                // SAFETY: the pool's CQ, alive while the pool is.
                let polled = unsafe { poll_cq(cq, &mut wcs) }.expect("poll");
                for wc in polled {
                    prop_assert!(self.pool.complete(wc, |e| events.push(e)), "not the pool's: {:?}", wc);
                }
                self.settle(events)?;
            },
            Op::Tick => {
                let mut events = Vec::new();
                advance_clock(Duration::from_millis(1));
                self.pool.progress(|e| events.push(e));
                self.settle(events)?;
            },
            Op::Revive { destination } => self.pool.revive(self.ids[destination as usize]),
            Op::CancelWait { destination } => {
                let id = self.ids[destination as usize];
                self.pool.cancel_wait(id);
                self.in_line[id.index()] = false;
            },
            Op::Replace { destination } => {
                let id = self.ids[destination as usize];
                let outstanding = self.pool.outstanding(id);
                match self.pool.remove_destination(id) {
                    Ok(()) => {
                        prop_assert_eq!(outstanding, 0);
                        self.in_line[id.index()] = false;
                        let target = &self.targets[destination as usize];
                        prop_assert!(matches!(
                            post(&mut self.pool, id, target, &[]),
                            Err(PostToDestinationErrorKind::UnknownDestination)
                        ));
                        let new = self.pool.add_destination(target.endpoint());
                        prop_assert!(new != id);
                        if new.index() >= self.in_line.len() {
                            self.in_line.resize(new.index() + 1, false);
                        }
                        self.ids[destination as usize] = new;
                    },
                    Err(_) => prop_assert!(outstanding > 0),
                }
            },
        }
        Ok(())
    }

    fn settle(&mut self, events: Vec<DcPoolEvent>) -> Result<(), TestCaseError> {
        learn(&self.fabric, &mut self.truth);
        for event in events {
            match event {
                DcPoolEvent::Ready { destination } => {
                    prop_assert!(self.pool.core.contains(destination));
                    self.in_line[destination.index()] = false;
                    continue;
                },
                DcPoolEvent::Unreachable { .. } => continue,
                DcPoolEvent::InitiatorLost { .. } => return Err(TestCaseError::fail("initiator lost")),
                _ => {},
            }
            let Some((d, request, fate)) = check_report(&event, &self.truth, &self.destination_of) else {
                return Err(TestCaseError::fail(format!("unexpected {event:?}")));
            };
            prop_assert_eq!(
                self.fates[request as usize],
                Fate::Pending,
                "request {} reported twice",
                request
            );
            // A retry is not an end, but this driver does not post it again.
            let fate = fate.unwrap_or(Fate::Failed);
            if fate == Fate::Completed {
                let previous = self.last_completed[d as usize];
                prop_assert!(
                    previous.is_none_or(|p| p < request),
                    "destination {} completed {} after {:?}",
                    d,
                    request,
                    previous
                );
                self.last_completed[d as usize] = Some(request);
            }
            self.fates[request as usize] = fate;
        }
        Ok(())
    }
}

/// Runs `ops`, then drains everything (executes, polls and ticks until nothing is left).
fn check(policy: DcPoolPolicy, capacity: u32, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let fabric = SimulatedFabric::new(0);
    fabric.set_manual(true);
    fabric.set_poll_ticks(false);
    let targets = targets(&fabric, DESTINATIONS, || 1);
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
        destination_of: Vec::new(),
        truth: Vec::new(),
        fates: Vec::new(),
        last_completed: vec![None; 64],
        in_line: vec![false; DESTINATIONS as usize],
    };

    for op in &ops {
        run.apply(op)?;
        run.pool.core.check_no_destination_stranded();
    }
    // Drain: time passes, everything executes (or flushes), the pool polls and ticks, until
    // nothing is left anywhere; destinations posting nothing let their grants expire.
    for _ in 0..1000 {
        run.apply(&Op::Advance)?;
        for initiator in 0..INITIATORS {
            for lane in 0..LANES {
                run.apply(&Op::Execute {
                    initiator,
                    lane,
                    count: usize::MAX,
                })?;
            }
        }
        run.apply(&Op::Poll { count: 64 })?;
        run.apply(&Op::Tick)?;
        run.pool.core.check_no_destination_stranded();
        let idle = run.fabric.is_idle()
            && run.fates.iter().all(|f| *f != Fate::Pending)
            && run.pool.waiting().next().is_none()
            && run.pool.footprint().grant_timers == 0;
        if idle {
            break;
        }
    }
    for (request, fate) in run.fates.iter().enumerate() {
        prop_assert_ne!(*fate, Fate::Pending, "request {} never reported", request);
    }
    for id in &run.ids {
        prop_assert_eq!(run.pool.outstanding(*id), 0);
    }
    // Nobody waits forever: every destination refused for want of an initiator was served
    // (Ready) or left the line.
    prop_assert!(run.pool.waiting().next().is_none(), "destinations still in line");
    for id in &run.ids {
        prop_assert!(!run.in_line[id.index()], "destination {:?} never got its Ready", id);
    }
    let counters = run.fabric.counters();
    prop_assert_eq!(counters.premature_stream_resets, 0, "a stream reset before its flush");
    prop_assert_eq!(
        counters.cleaned_completions,
        0,
        "a recovery before every completion was seen"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_reports_every_request_exactly_once_as_the_fabric_saw_it(
        policy in policy(),
        capacity in 1..6u32,
        ops in proptest::collection::vec(op(DESTINATIONS, INITIATORS, LANES), 0..100),
    ) {
        check(policy, capacity, ops)?;
    }
}
