//! The simulated fabric's engine: the DC targets, the send queues of the initiators (their
//! streams, errors and recovery), the clock and the completion queue, tick by tick; what a
//! request does at its target is in `request`. Each rule names the reference it follows; the
//! public handles (`SimulatedFabric`, `SimulatedTarget`, `SimulatedInitiator`) reach in here.
use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::queue_pair::QueuePairState::{self, Error, Init, ReadyToReceive, ReadyToSend, Reset};
use sideway_ext_dc_rules as rules;

use super::faults::Schedule;
use super::memory::Memory;
#[cfg(test)]
use super::request;
use super::request::{cost, execute, Outcome, Request, FLUSH, SUCCESS};
use super::settings::dci_step_is_ok;
use super::settings::{Rng, Settings};
use super::target::Target;
use super::trace::{SimulatedCounters, SimulatedEvent, Trace};
use super::zeroed::Zeroed;

/// The first queue pair number the fabric gives an initiator; the next ones follow by one.
const FIRST_QP_NUMBER: u32 = 0x100;

/// One DCI stream's queue (the whole send queue of a DCI without streams).
#[derive(Debug, Default)]
struct Lane {
    queue: VecDeque<Request>,
    /// When the request before the head ended.
    last_finish: u64,
    /// The DC target the lane is connected to (its last request's).
    connected: Option<u32>,
    /// When the head, NAKed by a receiver not ready, is tried again.
    retry_at: Option<u64>,
    /// Receiver-not-ready NAKs the head met so far.
    rnr_attempts: u32,
    errored: bool,
    /// When the lane's last completion reaches the CQ: the next one comes no earlier.
    last_arrival: u64,
    /// A scripted failure: the next request to execute here ends with this status.
    fail_next: Option<u32>,
    /// Unsignaled requests that succeeded since the lane's last completion was made.
    silent: u32,
}

/// A DC initiator.
#[derive(Debug)]
pub(crate) struct Initiator {
    pub(crate) qp_number: u32,
    pub(crate) max_send_wr: u32,
    /// Send-queue entries taken: posted, and not yet polled.
    in_flight: u32,
    lanes: Vec<Lane>,
    streams: bool,
    /// log2 of the streams in error that move it to ERR.
    log_num_errored: u8,
    in_error: bool,
    error_at: Option<u64>,
    stalled_until: u64,
    pub(crate) refuse_recovery: bool,
    destroyed: bool,
    /// Set by its handle when it was dropped while the fabric was borrowed: destroyed at the
    /// next tick.
    pub(crate) dropped: Rc<Cell<bool>>,
}

/// Why a stream reset was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StreamResetRefused {
    /// The DCI is not in RTS.
    NotReadyToSend,
    /// The stream still holds requests not flushed.
    NotFlushed,
}

/// The whole fabric.
pub(crate) struct Fabric {
    /// The tick it is at, shared with its pools' grant timeouts ([`Fabric::clock`]).
    now: Arc<AtomicU64>,
    rng: Rng,
    pub(crate) targets: Vec<Target>,
    pub(crate) initiators: Vec<Initiator>,
    /// The initiator of each queue pair number.
    numbers: BTreeMap<u32, usize>,
    next_qp_number: u32,
    /// Completions by (arrival tick, order of making), with the send-queue entries polling each
    /// frees.
    cq: BTreeMap<(u64, u64), (Zeroed, u32)>,
    made: u64,
    pub(crate) settings: Settings,
    pub(crate) memory: Memory,
    pub(crate) counters: SimulatedCounters,
    pub(crate) trace: Trace,
    /// Faults waiting for their tick.
    pub(crate) schedule: Schedule,
    /// Whether each poll is a tick.
    pub(crate) poll_ticks: bool,
    /// The unit tests drive execution themselves (`execute`, `fail_head`): a tick only moves the
    /// clock and makes pending moves to ERR.
    #[cfg(test)]
    pub(crate) manual: bool,
    /// The unit tests' record of how each request ended: its inline data's first 8 bytes (the
    /// test's request number) and its status.
    #[cfg(test)]
    pub(crate) journal: Vec<(u64, u32)>,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("now", &self.now())
            .field("targets", &self.targets.len())
            .field("initiators", &self.initiators.len())
            .field("completions", &self.cq.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Fabric {
    /// The tick it is at.
    pub(crate) fn now(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }

    /// Its clock, for a pool's grant timeout: the tick it is at, as time from `start`.
    pub(crate) fn clock(&self, start: Instant) -> impl Fn() -> Instant + Send + Sync + 'static {
        let now = Arc::clone(&self.now);
        move || start + Self::span(now.load(Ordering::Relaxed))
    }

    /// `ticks` as the pool's clock counts time: a tick is a nanosecond.
    pub(crate) fn span(ticks: u64) -> Duration {
        Duration::from_nanos(ticks)
    }

    pub(crate) fn new(seed: u64) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(0)),
            rng: Rng(seed),
            targets: Vec::new(),
            initiators: Vec::new(),
            numbers: BTreeMap::new(),
            next_qp_number: FIRST_QP_NUMBER,
            cq: BTreeMap::new(),
            made: 0,
            settings: Settings::default(),
            memory: Memory::default(),
            counters: SimulatedCounters::default(),
            trace: Trace::default(),
            schedule: Schedule::default(),
            poll_ticks: true,
            #[cfg(test)]
            manual: false,
            #[cfg(test)]
            journal: Vec::new(),
        }
    }

    /// A new initiator: its index. `streams`: (`log_num_concurrent`, `log_num_errored`).
    pub(crate) fn add_initiator(&mut self, max_send_wr: u32, streams: Option<(u8, u8)>) -> usize {
        let index = self.initiators.len();
        let (lanes, log_num_errored) = streams.map_or((1, 0), |(log, errored)| (1usize << log.min(16), errored));
        let qp_number = self.new_qp_number(index);
        self.initiators.push(Initiator {
            qp_number,
            max_send_wr,
            in_flight: 0,
            lanes: (0..lanes.max(1)).map(|_| Lane::default()).collect(),
            streams: streams.is_some(),
            log_num_errored,
            in_error: false,
            error_at: None,
            stalled_until: 0,
            refuse_recovery: false,
            destroyed: false,
            dropped: Rc::default(),
        });
        index
    }

    /// The next queue pair number (24 bits, wrapping), for initiator `index`.
    fn new_qp_number(&mut self, index: usize) -> u32 {
        let number = self.next_qp_number;
        self.next_qp_number = (number + 1) & 0xff_ffff;
        self.numbers.insert(number, index);
        number
    }

    /// The lane a request of `stream` runs on: stream ids beyond the concurrency share lanes
    /// (mlx5dv_wr_set_dc_addr_stream(3): the stream id only orders; the device runs as many
    /// streams at once as the DCI was created with).
    fn lane_of(initiator: &Initiator, stream: Option<u16>) -> usize {
        stream.map_or(0, |stream| usize::from(stream) % initiator.lanes.len())
    }

    /// `ibv_wr_complete`: the batch joins the send queue, whole, or not at all with an errno.
    /// A full send queue is `ENOMEM` (libmlx5 `mlx5_wq_overflow`, which the `ibv_wr_*` builders
    /// check, and `mlx5_send_wr_complete` returns). An initiator in ERR takes requests and
    /// flushes them (ibv_post_send(3), ibv_modify_qp(3): the Error state flushes).
    pub(crate) fn post(&mut self, initiator: usize, requests: Vec<Request>) -> Result<(), i32> {
        let now = self.now();
        let Some(qp) = self.initiators.get_mut(initiator).filter(|qp| !qp.destroyed) else {
            return Err(libc::EINVAL);
        };
        let len = u32::try_from(requests.len()).map_err(|_| libc::ENOMEM)?;
        if qp.in_flight.saturating_add(len) > qp.max_send_wr {
            return Err(libc::ENOMEM);
        }
        qp.in_flight += len;
        self.counters.posted += u64::from(len);
        for mut request in requests {
            request.posted_at = now;
            let (qp_number, dct_number, wr_id) = (qp.qp_number, request.dct_number, request.wr_id);
            self.trace.record(|| SimulatedEvent::Posted {
                tick: now,
                qp_number,
                dct_number,
                wr_id,
            });
            let lane = Self::lane_of(qp, request.stream);
            qp.lanes[lane].queue.push_back(request);
        }
        Ok(())
    }

    /// One tick: every initiator's streams run their heads that are due, and an initiator whose
    /// move to ERR was pending makes it.
    pub(crate) fn step(&mut self) {
        self.now.fetch_add(1, Ordering::Relaxed);
        self.apply_due_faults();
        for initiator in 0..self.initiators.len() {
            let now = self.now();
            let qp = &mut self.initiators[initiator];
            if qp.destroyed {
                continue;
            }
            if qp.error_at.is_some_and(|at| at <= now) {
                qp.error_at = None;
                qp.in_error = true;
            }
            #[cfg(test)]
            if self.manual {
                continue;
            }
            for lane in 0..qp.lanes.len() {
                self.run_lane(initiator, lane, Drive::Due);
            }
        }
    }

    /// Runs lane `lane` of `initiator` as `drive` says: in posting order (the send queue of a
    /// DCI, or one DCI stream, executes in order; mlx5dv_create_qp(3), DCI streams), every
    /// request behind an error flushed.
    ///
    /// Timing: a DCI is connected to one DC target at a time; requests to the target it is
    /// connected to are pipelined (each ends its target's latency after it was posted, never
    /// before the one ahead), and a request to another target first waits for the one ahead to
    /// end, then connects (a tick). A DCI serves one DCT at a time (the DC transport's half
    /// handshake; UCX's `dc_mlx5` policies exist because of it).
    fn run_lane(&mut self, initiator: usize, lane: usize, drive: Drive) {
        if self.initiators[initiator].dropped.take() {
            self.destroy(initiator);
        }
        if self.initiators[initiator].destroyed {
            return;
        }
        let now = self.now();
        let (mut budget, mut forced, on_time) = match drive {
            Drive::Due => (usize::MAX, None, true),
            #[cfg(test)]
            Drive::Execute(count) => (count, None, false),
            #[cfg(test)]
            Drive::Fail(status) => (1, Some(status), false),
        };
        let mut ended: Vec<(Request, u32, u32)> = Vec::new();
        {
            let Self {
                initiators,
                targets,
                settings,
                counters,
                rng,
                memory,
                ..
            } = self;
            let qp = &mut initiators[initiator];
            while budget > 0 {
                let flushing = qp.in_error || qp.lanes[lane].errored;
                let stalled = qp.stalled_until > now;
                let l = &mut qp.lanes[lane];
                let Some(head) = l.queue.front() else { break };
                if flushing {
                    // ibv_poll_cq(3), IBV_WC_WR_FLUSH_ERR: "a Work Request was in process or
                    // outstanding when the QP transitioned into the Error State".
                    let request = l.queue.pop_front().expect("the head");
                    l.retry_at = None;
                    l.rnr_attempts = 0;
                    counters.flushed += 1;
                    ended.push((request, FLUSH, 0));
                    budget -= 1;
                    continue;
                }
                if stalled && on_time {
                    break;
                }
                let took = cost(targets, settings, head);
                let done_at = if l.connected == Some(head.dct_number) {
                    l.last_finish.max(head.posted_at.saturating_add(took))
                } else {
                    l.last_finish.max(head.posted_at).saturating_add(1).saturating_add(took)
                }
                .max(l.retry_at.unwrap_or(0));
                if on_time && done_at > now {
                    break;
                }
                let outcome = match forced.take().or_else(|| l.fail_next.take()) {
                    Some(status) => Outcome::Ended(status, 0),
                    None => execute(targets, memory, settings, rng, head, l.rnr_attempts),
                };
                let (status, byte_len) = match outcome {
                    Outcome::ReceiverNotReady => {
                        counters.rnr_retries += 1;
                        l.rnr_attempts = l.rnr_attempts.saturating_add(1);
                        l.retry_at = Some(now.saturating_add(settings.rnr_timer.max(1)));
                        break;
                    },
                    Outcome::Ended(status, byte_len) => (status, byte_len),
                };
                l.last_finish = if on_time { done_at } else { now };
                l.connected = Some(head.dct_number);
                let request = l.queue.pop_front().expect("the head");
                l.retry_at = None;
                l.rnr_attempts = 0;
                ended.push((request, status, byte_len));
                budget -= 1;
                if status == SUCCESS {
                    counters.executed += 1;
                    continue;
                }
                counters.failed += 1;
                if qp.streams {
                    // 2^log_num_errored streams in error move the DCI to ERR, some ticks later.
                    qp.lanes[lane].errored = true;
                    let errored = qp.lanes.iter().filter(|l| l.errored).count();
                    let to_error = rules::dci_errored_streams_move_it_to_error(errored, qp.log_num_errored);
                    if to_error && qp.error_at.is_none() && !qp.in_error {
                        qp.error_at = Some(now.saturating_add(settings.error_delay));
                    }
                } else {
                    // An error completion moves the queue pair to ERR (ibv_poll_cq(3),
                    // IBV_WC_WR_FLUSH_ERR; the DC transport: one DCI for every target).
                    qp.in_error = true;
                }
                break;
            }
        }
        let qp_number = self.initiators[initiator].qp_number;
        for (request, status, byte_len) in ended {
            #[cfg(test)]
            self.journal.push((request::number(&request.payload), status));
            let (dct_number, wr_id) = (request.dct_number, request.wr_id);
            self.trace
                .record(|| SimulatedEvent::ended(now, qp_number, dct_number, wr_id, status));
            // ibv_post_send(3), IBV_SEND_SIGNALED: with sq_sig_all 0, a success completes only
            // when signaled; an error always does. Its entry frees with the next completion.
            if status == SUCCESS && !request.signaled {
                self.initiators[initiator].lanes[lane].silent += 1;
                continue;
            }
            let opcode = request.operation.opcode();
            self.add_completion(initiator, lane, request.wr_id, status, opcode, byte_len);
        }
    }

    /// Executes (or flushes, in error) up to `count` requests at the head of `lane` now.
    #[cfg(test)]
    pub(crate) fn execute(&mut self, initiator: usize, lane: usize, count: usize) {
        self.run_lane(initiator, lane, Drive::Execute(count));
    }

    /// The head request of `lane` ends with error `status` now (nothing if the lane flushes).
    #[cfg(test)]
    pub(crate) fn fail_head(&mut self, initiator: usize, lane: usize, status: u32) {
        let qp = &self.initiators[initiator];
        if !qp.in_error && !qp.lanes[lane].errored {
            self.run_lane(initiator, lane, Drive::Fail(status));
        }
    }

    /// How many streams the initiator runs at once (1 without streams).
    #[cfg(test)]
    pub(crate) fn lanes(&self, initiator: usize) -> usize {
        self.initiators[initiator].lanes.len()
    }

    /// Whether nothing is queued or in the CQ.
    #[cfg(test)]
    pub(crate) fn is_idle(&self) -> bool {
        self.cq.is_empty()
            && self
                .initiators
                .iter()
                .all(|qp| qp.lanes.iter().all(|l| l.queue.is_empty()))
    }

    /// Puts a completion in the CQ: after the completion delay and a drawn jitter, never before
    /// the lane's previous one (one stream completes in order; streams and initiators do not
    /// order between them). Polled, it frees its entry and those of the lane's unsignaled
    /// requests before it (libmlx5 `mlx5_parse_cqe` moves the tail past every entry up to it).
    fn add_completion(&mut self, initiator: usize, lane: usize, wr_id: u64, status: u32, opcode: u32, byte_len: u32) {
        let jitter = self.rng.up_to(self.settings.completion_jitter);
        let now = self.now();
        let qp = &mut self.initiators[initiator];
        let l = &mut qp.lanes[lane];
        // Saturating: the delays are the caller's, any u64.
        let arrival = (now
            .saturating_add(self.settings.completion_delay)
            .saturating_add(jitter))
        .max(l.last_arrival);
        l.last_arrival = arrival;
        let mut wc = Zeroed::new();
        wc.wr_id = wr_id;
        wc.status = status;
        wc.opcode = opcode;
        wc.byte_len = byte_len;
        wc.qp_num = qp.qp_number;
        let frees = 1 + std::mem::take(&mut l.silent);
        self.made += 1;
        self.cq.insert((arrival, self.made), (wc, frees));
    }

    /// `ibv_poll_cq`: one tick of the fabric (unless ticks are the program's), then up to `room` completions that reached the CQ,
    /// each handed to `out`; a polled completion frees its send-queue entry (libmlx5's
    /// `mlx5_parse_cqe` moves the send queue's tail).
    pub(crate) fn poll(&mut self, room: usize, mut out: impl FnMut(usize, &Zeroed)) -> usize {
        if self.poll_ticks {
            self.step();
        }
        let now = self.now();
        let mut polled = 0;
        while polled < room {
            let Some(entry) = self.cq.first_entry() else { break };
            if entry.key().0 > now {
                break;
            }
            let (wc, frees) = entry.remove();
            if let Some(&initiator) = self.numbers.get(&wc.qp_num) {
                let qp = &mut self.initiators[initiator];
                qp.in_flight = qp.in_flight.saturating_sub(frees);
            }
            out(polled, &wc);
            polled += 1;
        }
        self.counters.polled += polled as u64;
        polled
    }

    /// Removes `initiator`'s completions from the CQ and empties its send queue: what a move to
    /// RESET does (libmlx5 `mlx5_modify_qp`: `mlx5_cq_clean` on its CQs and
    /// `mlx5_init_qp_indices`), and a destruction (`mlx5_destroy_qp` cleans the CQs too).
    fn clean(&mut self, initiator: usize) {
        let qp_number = self.initiators[initiator].qp_number;
        let before = self.cq.len();
        self.cq.retain(|_, (wc, _)| wc.qp_num != qp_number);
        self.counters.cleaned_completions += (before - self.cq.len()) as u64;
        let qp = &mut self.initiators[initiator];
        for lane in &mut qp.lanes {
            *lane = Lane::default();
        }
        qp.in_flight = 0;
        qp.in_error = false;
        qp.error_at = None;
    }

    /// Brings `initiator` back to RTS as `DcInitiator::recover` does: RESET → INIT → RTR → RTS
    /// (UCX's `uct_dc_mlx5_iface_reset_dci` and pyverbs' recovery), each step with the masks of
    /// the DC initiator's transition table and held to the kernel's `modify_dci_qp_is_ok`; where
    /// the kernel refuses the move to RESET (no RESET branch, Linux 4.15), the DCI is destroyed
    /// and created again, with a new queue pair number (returned).
    pub(crate) fn recover(&mut self, initiator: usize) -> Result<Option<u32>, &'static str> {
        if self.initiators[initiator].refuse_recovery {
            return Err("the simulated fabric refused the recovery (refuse_recovery)");
        }
        let kernel = self.settings.kernel;
        let state = if self.initiators[initiator].in_error {
            Error
        } else {
            ReadyToSend
        };
        if !dci_step_is_ok(state, Reset, kernel) {
            self.clean(initiator);
            let number = self.new_qp_number(initiator);
            let old = std::mem::replace(&mut self.initiators[initiator].qp_number, number);
            self.numbers.remove(&old);
            self.counters.rebuilds += 1;
            let (tick, rebuilt_as) = (self.now(), Some(number));
            self.trace.record(|| SimulatedEvent::Recovered {
                tick,
                qp_number: old,
                rebuilt_as,
            });
            return Ok(Some(number));
        }
        self.clean(initiator);
        let path = [(Reset, Init), (Init, ReadyToReceive), (ReadyToReceive, ReadyToSend)];
        if !path.iter().all(|&(from, to)| dci_step_is_ok(from, to, kernel)) {
            return Err("the kernel refused the DCI's bring-up");
        }
        self.counters.recoveries += 1;
        let (tick, qp_number) = (self.now(), self.initiators[initiator].qp_number);
        self.trace.record(|| SimulatedEvent::Recovered {
            tick,
            qp_number,
            rebuilt_as: None,
        });
        Ok(None)
    }

    /// `mlx5dv_dci_stream_id_reset`: refused when the DCI is not in RTS (libmlx5 mlx5.c returns
    /// EOPNOTSUPP), and, counted, while the stream still holds requests not flushed
    /// (mlx5dv_dci_stream_id_reset(3): "once all stream_id WR's are flushed").
    pub(crate) fn reset_stream(&mut self, initiator: usize, stream: u16) -> Result<(), StreamResetRefused> {
        let qp = &mut self.initiators[initiator];
        let state = if qp.in_error {
            QueuePairState::Error
        } else {
            QueuePairState::ReadyToSend
        };
        if !rules::dci_stream_reset_is_ok(state) {
            return Err(StreamResetRefused::NotReadyToSend);
        }
        let lane = Self::lane_of(qp, Some(stream));
        if !qp.lanes[lane].queue.is_empty() {
            self.counters.premature_stream_resets += 1;
            return Err(StreamResetRefused::NotFlushed);
        }
        qp.lanes[lane].errored = false;
        self.counters.stream_resets += 1;
        let (qp_number, tick) = (qp.qp_number, self.now());
        self.trace.record(|| SimulatedEvent::StreamReset {
            tick,
            qp_number,
            stream,
        });
        Ok(())
    }

    /// The initiator is destroyed: its requests go, and its completions leave the CQ.
    pub(crate) fn destroy(&mut self, initiator: usize) {
        self.clean(initiator);
        self.initiators[initiator].destroyed = true;
    }

    /// The initiator goes to ERR by itself (a fault: an asynchronous error).
    pub(crate) fn move_to_error(&mut self, initiator: usize) {
        self.initiators[initiator].in_error = true;
    }

    /// The initiator executes nothing for `ticks` (its requests wait; flushes still happen).
    pub(crate) fn stall(&mut self, initiator: usize, ticks: u64) {
        self.initiators[initiator].stalled_until = self.now().saturating_add(ticks);
    }

    /// The next request to execute on `stream` of `initiator` ends with `status`.
    pub(crate) fn fail_next(&mut self, initiator: usize, stream: u16, status: u32) {
        let qp = &mut self.initiators[initiator];
        let lane = Self::lane_of(qp, qp.streams.then_some(stream));
        qp.lanes[lane].fail_next = Some(status);
    }

    /// Whether the initiator is in ERR.
    pub(crate) fn in_error(&self, initiator: usize) -> bool {
        self.initiators[initiator].in_error
    }
}

/// What a lane runs.
#[derive(Debug, Clone, Copy)]
enum Drive {
    /// The requests due by now.
    Due,
    /// Up to this many requests, now (unit tests).
    #[cfg(test)]
    Execute(usize),
    /// The head, with this error status, now (unit tests).
    #[cfg(test)]
    Fail(u32),
}
