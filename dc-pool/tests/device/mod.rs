//! The pool on the software ConnectX (softmlx5): DC targets on one SRQ, each its own DCT number,
//! written into one registered region (a slot per target), and pools of sideway-ext's unchanged
//! `DcInitiator`s built by the pool's own builder. Faults go through `softmlx5::Control`; what
//! left an initiator is read from its trace.
//!
//! Each `#[test]` runs in a process of its own on the device (`on_device!`), and runs a group of
//! checks there one after the other (`checks!`), each with its own objects: a process per group
//! keeps the set fast.
#![allow(dead_code)] // each test binary uses part of it

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::{CompletionQueueExt, ProtectionDomainExt};
use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::{DcInitiatorBringUp, DcInitiatorBuilder};
use sideway_ext::mlx5::dc::target::DcTarget;
use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;
use sideway_ext_dc_pool::builder::{DcInitiatorPoolBuilder, DcPoolProtectionDomainExt};
use sideway_ext_dc_pool::types::{
    DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId, PostToDestinationError, PostToDestinationErrorKind,
};
use sideway_ext_dc_pool::DcInitiatorPool;

pub use softmlx5::{event_kind, Event};

pub const PORT: u8 = 1;
/// The DC key of every target.
pub const KEY: u64 = 0x0d0c_0001;
/// The bytes of a target's slot of the shared region.
pub const SLOT: usize = 256;
/// `IBV_WC_*` statuses the checks name.
pub const REM_ACCESS_ERR: u32 = 10;
pub const REM_OP_ERR: u32 = 11;
pub const RETRY_EXC_ERR: u32 = 12;
pub const RNR_RETRY_EXC_ERR: u32 = 13;
pub const REM_INV_REQ_ERR: u32 = 9;
pub const LOC_PROT_ERR: u32 = 4;
pub const WR_FLUSH_ERR: u32 = 5;
/// `MLX5_OPCODE_*` of the trace's REQUEST events.
pub const OPCODE_RDMA_WRITE: u8 = 0x08;
pub const OPCODE_SEND: u8 = 0x0a;
pub const OPCODE_RDMA_READ: u8 = 0x10;

/// Runs the calling test on the software device; returns from the caller when this process is
/// not on it (the rerun's outcome is asserted).
#[macro_export]
macro_rules! on_device {
    ($($env:expr),*) => {
        if let Some(status) = softmlx5::rerun_on_device(&[$($env),*]) {
            assert!(status.success(), "the test on the software device: {status}");
            return;
        }
    };
}

/// Runs each check of a group in turn, named on stderr (a failure names its check).
#[macro_export]
macro_rules! checks {
    ($($check:ident),* $(,)?) => {
        $(
            eprintln!("check {}", stringify!($check));
            $check();
        )*
    };
}

pub fn device() -> &'static softmlx5::Control {
    softmlx5::Control::loaded().expect("the test runs on the software device")
}

/// Every access flag a DC test needs.
pub fn all() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead | AccessFlags::RemoteAtomic
}

/// Registered memory, zeroed.
pub struct Buffer {
    pub mr: Arc<MemoryRegion>,
    data: Vec<u8>,
}

impl Buffer {
    pub fn new(pd: &Arc<ProtectionDomain>, len: usize, access: AccessFlags) -> Self {
        let data = vec![0u8; len];
        // SAFETY: `data` is never reallocated and is dropped after `mr` (field order).
        let mr = unsafe { pd.reg_mr(data.as_ptr() as usize, data.len(), access) }.expect("reg_mr");
        Self { mr, data }
    }

    pub fn addr(&self, offset: usize) -> u64 {
        self.data.as_ptr() as u64 + offset as u64
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// The bytes at `offset`, read as the device wrote them.
    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        // SAFETY: in bounds; volatile, since the device wrote behind Rust's back.
        (offset..offset + len)
            .map(|i| unsafe { self.data.as_ptr().add(i).read_volatile() })
            .collect()
    }

    /// Fills `len` bytes at `offset` with `byte`.
    pub fn fill(&mut self, offset: usize, len: usize, byte: u8) {
        assert!(offset + len <= self.data.len());
        // SAFETY: in bounds; the device does not touch these bytes while the test fills them.
        unsafe { std::ptr::write_bytes(self.data.as_mut_ptr().add(offset), byte, len) }
    }
}

/// The far side: DC targets on one SRQ and receive CQ, and one region a slot per target.
pub struct Fabric {
    pub ctx: Arc<DeviceContext>,
    pub pd: Arc<ProtectionDomain>,
    pub recv_cq: Arc<BasicCompletionQueue>,
    pub srq: Arc<SharedReceiveQueue>,
    pub targets: Vec<DcTarget>,
    /// The targets' memory: target `t` is written at `t * SLOT`.
    pub remote: Buffer,
    /// The initiators' source data: slot `n` holds byte `n` ([`pattern`]).
    pub local: Buffer,
    /// The receives posted on the SRQ, [`RECEIVE`] bytes each.
    pub receives: Buffer,
    posted: usize,
}

/// The bytes of a receive on the SRQ; how many the fabric holds.
pub const RECEIVE: usize = 256;
pub const RECEIVES: usize = 64;

pub fn open() -> Arc<DeviceContext> {
    let devices = DeviceList::new().expect("device list");
    let device = devices.iter().find(|d| d.name() == "softmlx5_0").expect("softmlx5_0");
    device.open().expect("open softmlx5_0")
}

impl Fabric {
    /// `targets` DC targets (key [`KEY`], every access) and their region.
    pub fn new(targets: usize) -> Self {
        let ctx = open();
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let recv_cq = ctx.create_cq_builder().setup_cqe(4096).build().expect("receive CQ");
        let srq = pd.create_srq_builder().setup_max_wr(1024).build().expect("SRQ");
        let remote = Buffer::new(&pd, (targets.max(1)) * SLOT, all());
        let mut local = Buffer::new(&pd, 64 * 1024, all());
        for n in 0..256 {
            local.fill(n * SLOT, SLOT, n as u8);
        }
        let pd_clone = Arc::clone(&pd);
        let mut fabric = Self {
            ctx,
            pd,
            recv_cq,
            srq,
            targets: Vec::new(),
            remote,
            local,
            receives: Buffer::new(&pd_clone, RECEIVES * RECEIVE, all()),
            posted: 0,
        };
        for _ in 0..targets {
            fabric.add_target();
        }
        fabric
    }

    /// One more target, in RTR; its index.
    pub fn add_target(&mut self) -> usize {
        let dct = self.target(&DcTargetBringUp::new(PORT));
        self.targets.push(dct);
        self.targets.len() - 1
    }

    /// A DC target (key [`KEY`], every access) on the fabric's SRQ, brought up with `bring_up`;
    /// not one of the fabric's targets.
    pub fn target(&self, bring_up: &DcTargetBringUp) -> DcTarget {
        let mut dct = self
            .pd
            .create_dct_builder()
            .setup_recv_cq(self.recv_cq.clone())
            .setup_srq(&self.srq)
            .setup_dc_key(KEY)
            .setup_access_flags(all())
            .build()
            .expect("DC target");
        dct.bring_up(bring_up).expect("DC target to RTR");
        dct
    }

    /// Posts `count` receives of [`RECEIVE`] bytes on the SRQ.
    pub fn post_receives(&mut self, count: usize) {
        for _ in 0..count {
            let slot = self.posted;
            assert!(slot < RECEIVES, "the fabric holds {RECEIVES} receives");
            let mut guard = self.srq.start_post_recv();
            // SAFETY: the slot lies in the receives' region, which outlives the SRQ's use of it.
            unsafe {
                guard.construct_wr(slot as u64).setup_sge(
                    self.receives.mr.lkey(),
                    self.receives.addr(slot * RECEIVE),
                    RECEIVE as u32,
                )
            };
            guard.post().expect("post a receive on the SRQ");
            self.posted += 1;
        }
    }

    pub fn endpoint(&self, target: usize) -> DcEndpoint {
        self.targets[target].endpoint().expect("endpoint")
    }

    pub fn dct_number(&self, target: usize) -> u32 {
        self.endpoint(target).dct_number()
    }

    /// The address in the region of byte `offset` of `target`'s slot.
    pub fn slot(&self, target: usize, offset: usize) -> u64 {
        self.remote.addr(target * SLOT + offset)
    }

    /// `len` bytes of `target`'s slot from `offset`.
    pub fn read_slot(&self, target: usize, offset: usize, len: usize) -> Vec<u8> {
        self.remote.read(target * SLOT + offset, len)
    }

    /// A builder for a pool of `initiators` on a CQ of its own, with `policy`, each initiator's
    /// send queue `max_send_wr`, and a short transport timeout (timeout 8: about 1 ms a try,
    /// `retry_cnt` 2), so that a dead target is told in milliseconds.
    /// Grants never time out. Under the streams policy, 4 streams a DC initiator, ERR after 2 in
    /// error
    /// ([`streams_pool_builder`](Self::streams_pool_builder) for others).
    pub fn pool_builder(&self, policy: DcPoolPolicy, initiators: usize, max_send_wr: u32) -> DcInitiatorPoolBuilder {
        self.streams_pool_builder(policy, initiators, max_send_wr, 2, 1)
    }

    /// [`pool_builder`](Self::pool_builder) with 2^`log_num_concurrent` streams a DC initiator
    /// under the streams policy, ERR after 2^`log_num_errored` in error.
    pub fn streams_pool_builder(
        &self, policy: DcPoolPolicy, initiators: usize, max_send_wr: u32, log_num_concurrent: u8, log_num_errored: u8,
    ) -> DcInitiatorPoolBuilder {
        let mut initiator = self.pd.create_dci_builder();
        initiator.setup_max_send_wr(max_send_wr).setup_max_inline_data(64);
        if policy == DcPoolPolicy::Streams {
            initiator.setup_dci_streams(sideway_ext::mlx5::dc::initiator::DciStreams {
                log_num_concurrent,
                log_num_errored,
            });
        }
        let mut builder = self.pd.create_dci_pool_builder();
        builder
            .setup_own_send_cq(&self.ctx, None)
            .setup_initiators(initiators)
            .setup_policy(policy)
            .setup_initiator(&initiator)
            .setup_bring_up(fast_bring_up())
            // A grant is kept until used (the checks that time it out set their own): a loaded
            // machine does not take a grant from a check that waits for the device.
            .setup_grant_timeout(Duration::MAX);
        builder
    }

    /// [`pool_builder`](Self::pool_builder), built, with a destination per target.
    pub fn pool(
        &self, policy: DcPoolPolicy, initiators: usize, max_send_wr: u32,
    ) -> (DcInitiatorPool, Vec<DestinationId>) {
        let mut pool = self
            .pool_builder(policy, initiators, max_send_wr)
            .build()
            .expect("pool");
        let ids = (0..self.targets.len())
            .map(|t| pool.add_destination(self.endpoint(t)))
            .collect();
        (pool, ids)
    }

    /// [`pool_builder`](Self::pool_builder) on a send CQ the caller polls (a CQE at a time
    /// handed to the pool with `complete`, see [`next`]), built, with a destination per target.
    pub fn fed_pool(
        &self, policy: DcPoolPolicy, initiators: usize, max_send_wr: u32,
    ) -> (DcInitiatorPool, Arc<BasicCompletionQueue>, Vec<DestinationId>) {
        self.fed(&mut self.pool_builder(policy, initiators, max_send_wr))
    }

    /// `builder`'s pool on a send CQ the caller polls, with a destination per target.
    pub fn fed(
        &self, builder: &mut DcInitiatorPoolBuilder,
    ) -> (DcInitiatorPool, Arc<BasicCompletionQueue>, Vec<DestinationId>) {
        let cq = self.ctx.create_cq_builder().setup_cqe(4096).build().expect("send CQ");
        let mut pool = builder.setup_send_cq(cq.clone()).build().expect("pool");
        let ids = (0..self.targets.len())
            .map(|t| pool.add_destination(self.endpoint(t)))
            .collect();
        (pool, cq, ids)
    }

    /// A DC initiator builder as [`pool_builder`](Self::pool_builder) sets the pool's up.
    pub fn initiator_builder(&self, max_send_wr: u32) -> DcInitiatorBuilder {
        let mut initiator = self.pd.create_dci_builder();
        initiator.setup_max_send_wr(max_send_wr).setup_max_inline_data(64);
        initiator
    }
}

/// Timeout 8 (4.096 µs · 2^8, about 1 ms a try), `retry_cnt` 2, `rnr_retry` 7 (the default).
pub fn fast_bring_up() -> DcInitiatorBringUp {
    let mut bring_up = DcInitiatorBringUp::new(PORT);
    bring_up.setup_timeout(8).setup_retry_cnt(2);
    bring_up
}

/// The byte a request `wr_id` writes: its pattern in the local buffer.
pub fn pattern(wr_id: u64) -> u8 {
    (wr_id % 256) as u8
}

/// Starts a batch to `destination` (on its stream under the streams policy) and adds one RDMA
/// WRITE of `len` bytes per `wr_id`, each from the local buffer's slot of its pattern, to
/// `target`'s slot at `offset(wr_id)`; posts it. The initiator (and stream) it went to, or the
/// refusal.
pub fn post_writes(
    pool: &mut DcInitiatorPool, fabric: &Fabric, destination: DestinationId, target: usize, wr_ids: &[u64], len: u32,
    offset: impl Fn(u64) -> usize,
) -> Result<(usize, Option<u16>), PostToDestinationError> {
    post_requests(pool, fabric, destination, target, wr_ids, len, offset, &[])
}

/// [`post_writes`], the requests of `bad` with an rkey the target refuses (a remote access
/// error).
#[allow(clippy::too_many_arguments)]
pub fn post_requests(
    pool: &mut DcInitiatorPool, fabric: &Fabric, destination: DestinationId, target: usize, wr_ids: &[u64], len: u32,
    offset: impl Fn(u64) -> usize, bad: &[u64],
) -> Result<(usize, Option<u16>), PostToDestinationError> {
    let lkey = fabric.local.mr.lkey();
    let rkey_of = |wr_id: u64| fabric.remote.mr.rkey() ^ if bad.contains(&wr_id) { 0x00ff_0000 } else { 0 };
    macro_rules! fill {
        ($guard:expr) => {{
            let mut guard = $guard;
            for &wr_id in wr_ids {
                let from = fabric.local.addr(usize::from(pattern(wr_id)) * SLOT);
                let to = fabric.slot(target, offset(wr_id));
                // SAFETY: both regions live as long as the fabric, past every completion.
                unsafe {
                    guard
                        .construct_wr(wr_id, WorkRequestFlags::Signaled)
                        .expect("room for the batch")
                        .setup_write(rkey_of(wr_id), to)
                        .setup_sge(lkey, from, len)
                };
            }
            let at = guard.initiator();
            guard.post().expect("post");
            Ok(at)
        }};
    }
    if pool.policy() == DcPoolPolicy::Streams {
        fill!(pool.start_post_send_on_stream(destination)?)
    } else {
        fill!(pool.start_post_send(destination)?)
    }
}

/// One 64-byte WRITE per `wr_id` to the start of `target`'s slot.
pub fn write(
    pool: &mut DcInitiatorPool, fabric: &Fabric, destination: DestinationId, target: usize, wr_ids: &[u64],
) -> Result<(usize, Option<u16>), PostToDestinationError> {
    post_writes(pool, fabric, destination, target, wr_ids, 64, |_| 0)
}

/// The next completion of `cq` (waiting up to 5 s), handed to the pool; the events it gave.
pub fn next(pool: &mut DcInitiatorPool, cq: &BasicCompletionQueue) -> Vec<DcPoolEvent> {
    let wc = next_completion(cq);
    let mut events = Vec::new();
    assert!(
        pool.complete(&wc, |event| events.push(event)),
        "the pool's completion: {wc:?}"
    );
    events
}

/// The next completion of `cq`, waiting up to 5 s.
pub fn next_completion(cq: &BasicCompletionQueue) -> WorkCompletion {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut wcs = [WorkCompletion::default(); 1];
    loop {
        if let [wc] = cq.poll_work_completions(&mut wcs).expect("poll") {
            return *wc;
        }
        assert!(Instant::now() < deadline, "no completion");
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Nothing on `cq` for `duration`.
pub fn assert_no_completion(cq: &BasicCompletionQueue, duration: Duration) {
    std::thread::sleep(duration);
    let mut wcs = [WorkCompletion::default(); 1];
    let polled = cq.poll_work_completions(&mut wcs).expect("poll");
    assert!(polled.is_empty(), "an unexpected completion: {polled:?}");
}

/// Polls until `done(events so far)` or `timeout`; the events.
pub fn poll_until(
    pool: &mut DcInitiatorPool, timeout: Duration, mut done: impl FnMut(&[DcPoolEvent]) -> bool,
) -> Vec<DcPoolEvent> {
    let deadline = Instant::now() + timeout;
    let mut events = Vec::new();
    loop {
        pool.poll(|event| events.push(event)).expect("poll");
        if done(&events) {
            return events;
        }
        assert!(Instant::now() < deadline, "timed out; events so far: {events:?}");
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Polls until `count` requests are reported (Completed, Failed or Retry); all events.
pub fn poll_reports(pool: &mut DcInitiatorPool, count: usize) -> Vec<DcPoolEvent> {
    poll_until(pool, Duration::from_secs(10), |events| reports(events) >= count)
}

/// Polls for `duration`; the events.
pub fn poll_for(pool: &mut DcInitiatorPool, duration: Duration) -> Vec<DcPoolEvent> {
    let deadline = Instant::now() + duration;
    let mut events = Vec::new();
    while Instant::now() < deadline {
        pool.poll(|event| events.push(event)).expect("poll");
        std::thread::sleep(Duration::from_micros(200));
    }
    events
}

/// How many requests the events report.
pub fn reports(events: &[DcPoolEvent]) -> usize {
    events
        .iter()
        .filter(|e| {
            matches!(
                e,
                DcPoolEvent::Completed { .. } | DcPoolEvent::Failed { .. } | DcPoolEvent::Retry { .. }
            )
        })
        .count()
}

pub fn completed(destination: DestinationId, wr_id: u64) -> DcPoolEvent {
    DcPoolEvent::Completed { destination, wr_id }
}

/// The queue pair number of the pool's initiator `index`.
pub fn qpn(pool: &DcInitiatorPool, index: usize) -> u32 {
    pool.initiator(index).expect("an initiator").qp_number()
}

/// The REQUEST events of the trace (what left the initiators), oldest first.
pub fn requests() -> Vec<Event> {
    device()
        .trace()
        .into_iter()
        .filter(|e| e.kind == event_kind::REQUEST)
        .collect()
}

/// Waits (real time) until `condition`, up to `timeout`.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    condition()
}

/// The would-block `destination` gets, or a panic.
pub fn would_block(pool: &mut DcInitiatorPool, destination: DestinationId) -> DcPoolWouldBlock {
    let result = if pool.policy() == DcPoolPolicy::Streams {
        pool.start_post_send_on_stream(destination).map(|g| g.room())
    } else {
        pool.start_post_send(destination).map(|g| g.room())
    };
    match result.map_err(|e| e.0) {
        Err(PostToDestinationErrorKind::WouldBlock(reason)) => reason,
        other => panic!("not a would-block: {other:?}"),
    }
}

pub fn stall(pool: &DcInitiatorPool, initiator: usize, stalled: bool) {
    device()
        .stall_initiator(qpn(pool, initiator), stalled)
        .expect("stall_initiator");
}

/// The REQUEST events of initiator `qp` since the trace was cleared.
pub fn requests_of(qp: u32) -> Vec<Event> {
    requests().into_iter().filter(|e| e.qp_number == qp).collect()
}

/// One WRITE per `wr_id` to target `t`, the ones in `bad` with an rkey the target refuses.
pub fn write_some_bad(
    pool: &mut DcInitiatorPool, fabric: &Fabric, d: DestinationId, t: usize, wr_ids: &[u64], bad: &[u64],
) {
    post_requests(pool, fabric, d, t, wr_ids, 64, |_| 0, bad).expect("post");
}

pub fn failed(destination: DestinationId, wr_id: u64, status: u32) -> DcPoolEvent {
    DcPoolEvent::Failed {
        destination,
        wr_id,
        status,
        vendor_err: 0,
    }
}

/// The events with every vendor syndrome set to 0 (the device's syndromes are checked apart).
pub fn without_syndromes(events: &[DcPoolEvent]) -> Vec<DcPoolEvent> {
    events
        .iter()
        .map(|e| match e {
            DcPoolEvent::Failed {
                destination,
                wr_id,
                status,
                ..
            } => failed(*destination, *wr_id, *status),
            other => other.clone(),
        })
        .collect()
}

/// What a run reports: each request's report by (target, number), how many requests were
/// handed back to retry, the initiators lost, the destinations reported unreachable, every event
/// in order, and the requests never posted (their destination was unreachable).
pub struct Outcome {
    pub reported: HashMap<(usize, u64), DcPoolEvent>,
    pub retried: usize,
    pub lost: Vec<usize>,
    pub unreachable: Vec<DestinationId>,
    pub events: Vec<DcPoolEvent>,
    pub refused: Vec<(usize, u64)>,
}

impl Outcome {
    /// The requests reported `Completed`.
    pub fn completed(&self) -> usize {
        self.reported
            .values()
            .filter(|e| matches!(e, DcPoolEvent::Completed { .. }))
            .count()
    }

    /// The failed requests, with their status.
    pub fn failed(&self) -> Vec<((usize, u64), u32)> {
        let mut failed: Vec<_> = self
            .reported
            .iter()
            .filter_map(|(&k, e)| match e {
                DcPoolEvent::Failed { status, .. } => Some((k, *status)),
                _ => None,
            })
            .collect();
        failed.sort();
        failed
    }

    /// Every completed WRITE's bytes are in its target's slot (request `n` at `n * 8`).
    pub fn assert_written(&self, fabric: &Fabric, per_target: u64) {
        for (&(t, n), event) in &self.reported {
            if matches!(event, DcPoolEvent::Completed { .. }) {
                let encoded = t as u64 * per_target + n;
                assert_eq!(
                    fabric.read_slot(t, write_offset(n), 8),
                    vec![pattern(encoded); 8],
                    "target {t}, request {n}"
                );
            }
        }
    }
}

/// Where request `n` of a run writes in its target's slot.
pub fn write_offset(n: u64) -> usize {
    (n % 32) as usize * 8
}

/// Writes `per_target` requests to every destination (request `n` of target `t` is `wr_id`
/// `t * per_target + n`, 8 bytes at [`write_offset`]), a request a batch, polling; those of
/// `bad` with an rkey the target refuses; `fault(pool, posted)` runs after each round. A
/// destination refused with a would-block posts again only once the pool reports it `Ready`,
/// as the pool's documentation says to: one that is never told waits for ever, and the run
/// fails at its deadline (nobody waits for ever while an initiator is free). Every request is
/// reported exactly once (a retried one is posted again), unless its destination is
/// unreachable before it is posted.
pub fn run(
    pool: &mut DcInitiatorPool, fabric: &Fabric, ids: &[DestinationId], per_target: u64, bad: &[(usize, u64)],
    mut fault: impl FnMut(&mut DcInitiatorPool, u64),
) -> Outcome {
    let mut total = ids.len() as u64 * per_target;
    let mut next_wr: Vec<u64> = vec![0; ids.len()];
    let mut retry: Vec<Vec<u64>> = vec![Vec::new(); ids.len()];
    let mut outcome = Outcome {
        reported: HashMap::new(),
        retried: 0,
        lost: Vec::new(),
        unreachable: Vec::new(),
        events: Vec::new(),
        refused: Vec::new(),
    };
    let target_of: HashMap<DestinationId, usize> = ids.iter().enumerate().map(|(t, &id)| (id, t)).collect();
    // The destinations to try, and whether each is in that line or waits for its Ready.
    let mut to_try: std::collections::VecDeque<usize> = (0..ids.len()).collect();
    let mut queued = vec![true; ids.len()];
    let mut blocked = vec![false; ids.len()];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (mut posted, mut done) = (0u64, 0u64);
    while done < total {
        assert!(
            std::time::Instant::now() < deadline,
            "{done} of {total} reported; waiting for a Ready: {:?}",
            (0..ids.len()).filter(|&t| blocked[t]).collect::<Vec<_>>()
        );
        for _ in 0..to_try.len() {
            let t = to_try.pop_front().expect("a destination to try");
            queued[t] = false;
            let n = match retry[t].first() {
                Some(&n) => n,
                None if next_wr[t] < per_target => next_wr[t],
                None => continue,
            };
            let encoded = t as u64 * per_target + n;
            let refused: &[u64] = if bad.contains(&(t, n)) { &[encoded] } else { &[] };
            match post_requests(pool, fabric, ids[t], t, &[encoded], 8, |_| write_offset(n), refused) {
                Ok(_) => {
                    posted += 1;
                    if retry[t].first() == Some(&n) {
                        retry[t].remove(0);
                    } else {
                        next_wr[t] += 1;
                    }
                    to_try.push_back(t);
                    queued[t] = true;
                },
                Err(e) if e.is_would_block() => blocked[t] = true,
                Err(e) if matches!(e.0, PostToDestinationErrorKind::Unreachable) => {
                    // Its requests not yet posted are never reported.
                    let never: Vec<u64> = retry[t].drain(..).chain(next_wr[t]..per_target).collect();
                    next_wr[t] = per_target;
                    total -= never.len() as u64;
                    outcome.refused.extend(never.into_iter().map(|n| (t, n)));
                },
                Err(e) => panic!("{e}"),
            }
        }
        let mut events = Vec::new();
        pool.poll(|e| events.push(e)).expect("poll");
        for event in events {
            outcome.events.push(event.clone());
            let (destination, wr_id) = match &event {
                DcPoolEvent::Completed { destination, wr_id } | DcPoolEvent::Failed { destination, wr_id, .. } => {
                    (*destination, *wr_id)
                },
                DcPoolEvent::Retry { destination, wr_id } => {
                    let t = target_of[destination];
                    retry[t].push(wr_id - t as u64 * per_target);
                    outcome.retried += 1;
                    if !queued[t] && !blocked[t] {
                        to_try.push_back(t);
                        queued[t] = true;
                    }
                    continue;
                },
                DcPoolEvent::Ready { destination } => {
                    let t = target_of[destination];
                    blocked[t] = false;
                    if !queued[t] {
                        to_try.push_back(t);
                        queued[t] = true;
                    }
                    continue;
                },
                DcPoolEvent::InitiatorLost { initiator, .. } => {
                    outcome.lost.push(*initiator);
                    continue;
                },
                DcPoolEvent::Unreachable { destination } => {
                    outcome.unreachable.push(*destination);
                    continue;
                },
                _ => continue,
            };
            let t = target_of[&destination];
            let key = (t, wr_id - t as u64 * per_target);
            assert!(
                outcome.reported.insert(key, event.clone()).is_none(),
                "{key:?} reported twice"
            );
            done += 1;
        }
        fault(pool, posted);
    }
    outcome
}

/// The targets of initiator `initiator`'s destinations on `count` different streams.
pub fn on_different_streams(
    pool: &DcInitiatorPool, ids: &[DestinationId], initiator: usize, count: usize,
) -> Vec<usize> {
    let mut streams = Vec::new();
    let mut targets = Vec::new();
    for (t, &id) in ids.iter().enumerate() {
        if let Some((i, Some(s))) = pool.assignment(id) {
            if i == initiator && !streams.contains(&s) {
                streams.push(s);
                targets.push(t);
            }
        }
    }
    assert!(
        targets.len() >= count,
        "{count} streams of initiator {initiator}: {targets:?}"
    );
    targets.truncate(count);
    targets
}
