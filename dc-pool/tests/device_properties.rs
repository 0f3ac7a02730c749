//! Random schedules on the software ConnectX, under every policy: posts, batches dropped
//! unposted, polls (through `poll`, and a completion at a time through `complete`), faults
//! (targets killed and revived, DC keys changed, requests refused, initiators stalled or failed),
//! cancellations and replacements. Each case is a run on the device; after it, with the faults
//! over and everything drained, every request was reported exactly once and as the device
//! ended it (a completed request's bytes are at its target, a refused one's are not), nobody
//! is in line, and every destination refused with a would-block got its `Ready`.
mod device;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use device::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::queue_pair::WorkRequestFlags;
use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy, DestinationId, PostToDestinationErrorKind};
use sideway_ext_dc_pool::DcInitiatorPool;

const DESTINATIONS: usize = 5;
const INITIATORS: usize = 3;

#[derive(Debug, Clone)]
enum Step {
    /// Post `count` requests to a destination (`bad`: the first refused by its target).
    Post {
        destination: usize,
        count: usize,
        bad: bool,
    },
    /// Begin a batch and drop it unposted.
    Drop {
        destination: usize,
    },
    /// The pool polls.
    Poll,
    /// The caller polls one completion and hands it to `complete`, then `progress`.
    CompleteOne,
    /// Real time passes (the device works, transport timeouts run).
    Sleep {
        micros: u64,
    },
    Kill {
        destination: usize,
    },
    ChangeKey {
        destination: usize,
    },
    /// The target answers again with its key, and the pool lets the destination post again.
    Revive {
        destination: usize,
    },
    Stall {
        initiator: usize,
    },
    Serve {
        initiator: usize,
    },
    /// A fatal error of an initiator (ERR, flushed).
    Error {
        initiator: usize,
    },
    CancelWait {
        destination: usize,
    },
    /// The destination is retired; another takes its place.
    Replace {
        destination: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let d = 0..DESTINATIONS;
    let i = 0..INITIATORS;
    prop_oneof![
        8 => (d.clone(), 1..4usize, proptest::bool::weighted(0.1))
            .prop_map(|(destination, count, bad)| Step::Post { destination, count, bad }),
        1 => d.clone().prop_map(|destination| Step::Drop { destination }),
        4 => Just(Step::Poll),
        3 => Just(Step::CompleteOne),
        2 => (0..3000u64).prop_map(|micros| Step::Sleep { micros }),
        1 => d.clone().prop_map(|destination| Step::Kill { destination }),
        1 => d.clone().prop_map(|destination| Step::ChangeKey { destination }),
        1 => d.clone().prop_map(|destination| Step::Revive { destination }),
        1 => i.clone().prop_map(|initiator| Step::Stall { initiator }),
        1 => i.clone().prop_map(|initiator| Step::Serve { initiator }),
        1 => i.prop_map(|initiator| Step::Error { initiator }),
        1 => d.clone().prop_map(|destination| Step::CancelWait { destination }),
        1 => d.prop_map(|destination| Step::Replace { destination }),
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

/// How a request was reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Pending,
    Completed,
    Failed(u32),
    Retry,
}

/// One case: the fabric, the pool on a CQ the case polls itself too, and what was posted.
struct Case {
    fabric: Fabric,
    pool: DcInitiatorPool,
    cq: Arc<BasicCompletionQueue>,
    /// Each slot's destination and target (a replaced slot gets a new target).
    ids: Vec<DestinationId>,
    target_of: Vec<usize>,
    /// Request number → (target, its cell there, fate, refused by its target).
    requests: Vec<(usize, usize, Fate, bool)>,
    /// Destinations refused with a would-block, until their Ready.
    in_line: HashMap<DestinationId, String>,
    killed: Vec<bool>,
    stalled: Vec<bool>,
    /// Whether an initiator was failed as a whole (a request it flushed may have executed).
    fatal: bool,
}

impl Case {
    fn new(policy: DcPoolPolicy, capacity: u32) -> Self {
        let mut fabric = Fabric::new(0);
        // Targets for the replacements too; 32 requests a target at most (8 bytes each).
        fabric.remote = Buffer::new(&fabric.pd, DESTINATIONS * 3 * SLOT, all());
        for _ in 0..DESTINATIONS * 3 {
            fabric.add_target();
        }
        // A grant left unused goes to the next in line after 5 ms (the drain posts nothing).
        let mut builder = fabric.streams_pool_builder(policy, INITIATORS, capacity, 2, 1);
        builder.setup_grant_timeout(Duration::from_millis(5));
        let cq = fabric.ctx.create_cq_builder().setup_cqe(4096).build().expect("send CQ");
        let pool = builder.setup_send_cq(cq.clone()).build().expect("pool");
        let mut case = Self {
            fabric,
            pool,
            cq,
            ids: Vec::new(),
            target_of: Vec::new(),
            requests: Vec::new(),
            in_line: HashMap::new(),
            killed: vec![false; DESTINATIONS * 3],
            stalled: vec![false; INITIATORS],
            fatal: false,
        };
        for t in 0..DESTINATIONS {
            let id = case.pool.add_destination(case.fabric.endpoint(t));
            case.ids.push(id);
            case.target_of.push(t);
        }
        case
    }

    fn settle(&mut self, events: Vec<DcPoolEvent>) -> Result<(), TestCaseError> {
        for event in events {
            let (wr_id, fate) = match event {
                DcPoolEvent::Completed { wr_id, .. } => (wr_id, Fate::Completed),
                DcPoolEvent::Failed { wr_id, status, .. } => (wr_id, Fate::Failed(status)),
                DcPoolEvent::Retry { wr_id, .. } => (wr_id, Fate::Retry),
                DcPoolEvent::Ready { destination } => {
                    self.in_line.remove(&destination);
                    continue;
                },
                DcPoolEvent::Removed { destination } => {
                    self.in_line.remove(&destination);
                    continue;
                },
                DcPoolEvent::InitiatorLost { .. } => return Err(TestCaseError::fail("an initiator was lost")),
                _ => continue,
            };
            let request = &mut self.requests[wr_id as usize - 1];
            prop_assert_eq!(request.2, Fate::Pending, "request {} reported twice", wr_id);
            request.2 = fate;
        }
        Ok(())
    }

    fn apply(&mut self, step: &Step) -> Result<(), TestCaseError> {
        let device = device();
        match *step {
            Step::Post {
                destination,
                count,
                bad,
            } => {
                let (id, t) = (self.ids[destination], self.target_of[destination]);
                // Request wr_id n is entry n - 1 (from 1: its pattern byte is never 0).
                let first = self.requests.len() as u64 + 1;
                let sent_to_target = self.requests.iter().filter(|r| r.0 == t).count();
                if sent_to_target + count > 32 {
                    return Ok(());
                }
                let wr_ids: Vec<u64> = (first..first + count as u64).collect();
                let refused: Vec<u64> = if bad { vec![first] } else { Vec::new() };
                // A target's requests are at most 32, each writing its own cell of the slot.
                let cell = |wr_id: u64| (sent_to_target as u64 + wr_id - first) as usize * 8;
                let result = {
                    let guard_room = if self.pool.policy() == DcPoolPolicy::Streams {
                        self.pool.start_post_send_on_stream(id).map(|g| g.room())
                    } else {
                        self.pool.start_post_send(id).map(|g| g.room())
                    };
                    match guard_room {
                        Ok(room) if room >= count => {
                            post_requests(&mut self.pool, &self.fabric, id, t, &wr_ids, 8, cell, &refused)
                        },
                        Ok(_) => {
                            self.in_line.remove(&id);
                            return Ok(());
                        },
                        Err(e) => Err(e),
                    }
                };
                match result {
                    Ok(_) => {
                        // It posted: it no longer waits (a destination is granted a free
                        // initiator without a Ready).
                        self.in_line.remove(&id);
                        for (k, &wr_id) in wr_ids.iter().enumerate() {
                            self.requests.push((t, cell(wr_id), Fate::Pending, bad && k == 0));
                        }
                    },
                    Err(e) if e.is_would_block() => {
                        self.in_line
                            .insert(id, format!("{:?} at post {}", e.0, self.requests.len()));
                    },
                    Err(e) => {
                        prop_assert!(matches!(e.0, PostToDestinationErrorKind::Unreachable), "{}: {:?}", e, e);
                        // Refused until revived: it waits for nothing.
                        self.in_line.remove(&id);
                    },
                }
            },
            Step::Drop { destination } => {
                let id = self.ids[destination];
                let t = self.target_of[destination];
                let rkey = self.fabric.remote.mr.rkey();
                let to = self.fabric.slot(t, 0);
                let guard = if self.pool.policy() == DcPoolPolicy::Streams {
                    self.pool.start_post_send_on_stream(id).map(drop)
                } else {
                    self.pool.start_post_send(id).map(|mut guard| {
                        let _ = guard
                            .construct_wr(u64::MAX, WorkRequestFlags::Signaled)
                            .map(|wr| wr.setup_write(rkey, to));
                    })
                };
                match guard {
                    Ok(()) => {
                        self.in_line.remove(&id);
                    },
                    Err(e) if e.is_would_block() => {
                        self.in_line
                            .insert(id, format!("{:?} at drop {}", e.0, self.requests.len()));
                    },
                    Err(_) => {},
                }
            },
            Step::Poll => {
                let mut events = Vec::new();
                self.pool.poll(|e| events.push(e)).expect("poll");
                self.settle(events)?;
            },
            Step::CompleteOne => {
                let mut wcs = [sideway_ext::ibverbs::work_completion::WorkCompletion::default(); 1];
                use sideway_ext::ibverbs::extension::CompletionQueueExt;
                let polled = self.cq.poll_work_completions(&mut wcs).expect("poll").to_vec();
                let mut events = Vec::new();
                for wc in &polled {
                    prop_assert!(self.pool.complete(wc, |e| events.push(e)), "the pool's completion");
                }
                self.pool.progress(|e| events.push(e));
                self.settle(events)?;
            },
            Step::Sleep { micros } => std::thread::sleep(Duration::from_micros(micros)),
            Step::Kill { destination } => {
                let t = self.target_of[destination];
                device.kill_target(self.fabric.dct_number(t), true).expect("kill");
                self.killed[t] = true;
            },
            Step::ChangeKey { destination } => {
                let t = self.target_of[destination];
                device.set_dc_key(self.fabric.dct_number(t), 0xbad).expect("set_dc_key");
                self.killed[t] = true;
            },
            Step::Revive { destination } => {
                let t = self.target_of[destination];
                device.kill_target(self.fabric.dct_number(t), false).expect("revive");
                device.set_dc_key(self.fabric.dct_number(t), KEY).expect("set_dc_key");
                self.killed[t] = false;
                self.pool.revive(self.ids[destination]);
            },
            Step::Stall { initiator } => {
                device.stall_initiator(qpn(&self.pool, initiator), true).expect("stall");
                self.stalled[initiator] = true;
            },
            Step::Serve { initiator } => {
                device
                    .stall_initiator(qpn(&self.pool, initiator), false)
                    .expect("serve");
                self.stalled[initiator] = false;
            },
            Step::Error { initiator } => {
                device
                    .error_initiator(qpn(&self.pool, initiator))
                    .expect("error_initiator");
                self.fatal = true;
            },
            Step::CancelWait { destination } => {
                let id = self.ids[destination];
                self.pool.cancel_wait(id);
                self.in_line.remove(&id);
            },
            Step::Replace { destination } => {
                let id = self.ids[destination];
                let next = self.target_of.iter().max().copied().unwrap_or(0) + 1;
                if next >= self.fabric.targets.len() {
                    return Ok(());
                }
                self.pool.retire_destination(id).expect("a live destination");
                self.in_line.remove(&id);
                self.ids[destination] = self.pool.add_destination(self.fabric.endpoint(next));
                self.target_of[destination] = next;
            },
        }
        Ok(())
    }

    /// Faults over: every target answers, every initiator is served; polls until every request
    /// is reported and everyone in line was told.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        let device = device();
        for (t, killed) in self.killed.iter_mut().enumerate() {
            if *killed {
                device.kill_target(self.fabric.dct_number(t), false).expect("revive");
                device.set_dc_key(self.fabric.dct_number(t), KEY).expect("set_dc_key");
                *killed = false;
            }
        }
        for (i, stalled) in self.stalled.iter_mut().enumerate() {
            if *stalled {
                device.stall_initiator(qpn(&self.pool, i), false).expect("serve");
                *stalled = false;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut events = Vec::new();
            self.pool.poll(|e| events.push(e)).expect("poll");
            self.settle(events)?;
            let pending = self.requests.iter().filter(|r| r.2 == Fate::Pending).count();
            // Also the destinations the pool put in line itself (a quota used while others
            // wait): each gets its Ready too.
            if pending == 0 && self.in_line.is_empty() && self.pool.waiting().next().is_none() {
                return Ok(());
            }
            prop_assert!(
                Instant::now() < deadline,
                "{} requests never reported; never told Ready: {:?}; in line: {:?}",
                pending,
                self.in_line
                    .iter()
                    .map(|(&id, why)| (
                        id,
                        why.clone(),
                        self.pool.destination_state(id),
                        self.pool.assignment(id)
                    ))
                    .collect::<Vec<_>>(),
                self.pool.waiting().collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn check(&self) -> Result<(), TestCaseError> {
        for (index, &(t, cell, fate, refused)) in self.requests.iter().enumerate() {
            let n = index + 1;
            let cell = self.fabric.read_slot(t, cell, 8);
            let written = cell == vec![pattern(n as u64); 8];
            match fate {
                Fate::Pending => prop_assert!(false, "request {} never reported", n),
                Fate::Completed => {
                    prop_assert!(!refused, "request {} refused by its target, yet completed", n);
                    prop_assert!(written, "request {} completed, its bytes not at its target", n);
                },
                // An error, a flush, or handed back: it did not execute (unless a fatal error of
                // its initiator flushed it after it executed).
                Fate::Failed(_) | Fate::Retry => {
                    prop_assert!(self.fatal || !written, "request {} {:?}, yet executed", n, fate);
                },
            }
        }
        for &id in &self.ids {
            prop_assert_eq!(self.pool.outstanding(id), 0);
        }
        let waiting: Vec<_> = self
            .pool
            .waiting()
            .map(|id| (id, self.pool.destination_state(id), self.ids.contains(&id)))
            .collect();
        prop_assert!(waiting.is_empty(), "destinations still in line: {:?}", waiting);
        Ok(())
    }
}

/// How many cases (`PROPTEST_CASES`, default 64): each is a run on the device.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(64)
}

#[test]
fn any_schedule_of_posts_polls_and_faults_reports_every_request_once_and_nobody_waits_for_ever() {
    let asked = std::env::var("PROPTEST_CASES").unwrap_or_default();
    on_device!(("PROPTEST_CASES", asked.as_str()));
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (policy(), 1..6u32, proptest::collection::vec(step(), 0..60));
    runner
        .run(&strategy, |(policy, capacity, steps)| {
            let mut case = Case::new(policy, capacity);
            for step in &steps {
                case.apply(step)?;
            }
            case.drain()?;
            case.check()
        })
        .unwrap();
}
