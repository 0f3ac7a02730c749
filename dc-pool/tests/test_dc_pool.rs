//! The DC initiator pool (`DcInitiatorPool`) on devices.
//!
//! - On the device of `SIDEWAY_EXT_TEST_DEVICE` (rxe0 in the SoftRoCE VM, not mlx5): building a
//!   pool is the typed "not supported" of its first initiator, and bad input is refused before
//!   any library call.
//! - On the ConnectX-4 or newer of `SIDEWAY_EXT_TEST_MLX5_DEVICE` (`mlx5_hw_` tests, one at a
//!   time, RoCE or InfiniBand port 1): a pool of 4 DC initiators serves 64 DC targets on the same
//!   port (loopback). The targets share one SRQ and one receive CQ; each has its own DC key and
//!   its own registered 4 KiB region. Every region gets a pattern of its own in 5 RDMA WRITEs
//!   (4 from registered memory, the last inline), posted in batches of at most 2 of which only
//!   the last is signalled; a post refused as would-block is tried again after polling, and a
//!   request handed back for a retry is posted again. Then every region is checked byte by byte,
//!   and every request must have been reported completed exactly once, with its destination.
//!   - under the dedicated, dedicated-with-quota (4) and static policies;
//!   - with one DC target destroyed mid-run (under each of the three): its destination is
//!     reported unreachable and its requests failed, the other 63 complete;
//!   - under the streams policy (ConnectX-6 Dx or newer; fails, saying so, on a device without
//!     DCI streams).
//!
//!   They have not run on hardware yet.
mod common;
/// The fault's facts as `mlx5_devinfo --dc-selftest --report` gives them (one formatter).
#[allow(dead_code)]
#[path = "../../examples/mlx5_devinfo/fault.rs"]
mod fault;

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_mummy_sys::ibv_wc_status;
use serial_test::serial;
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{QueuePairState, SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::ProtectionDomainExt;
use sideway_ext::ibverbs::work_completion::decode_status;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::{
    CreateDcInitiatorErrorKind, DcInitiatorBringUp, DciStreams, PlanDcInitiatorErrorKind,
};
use sideway_ext::mlx5::dc::target::DcTarget;
use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;
use sideway_ext_dc_pool::builder::CreateDcInitiatorPoolErrorKind;
use sideway_ext_dc_pool::builder::DcPoolProtectionDomainExt;
use sideway_ext_dc_pool::post_guard::DcPoolPostGuard;
use sideway_ext_dc_pool::types::{
    DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId, PostToDestinationErrorKind,
};
use sideway_ext_dc_pool::DcInitiatorPool;

/// DCI streams small enough for any device that has them.
const SOME_STREAMS: DciStreams = DciStreams {
    log_num_concurrent: 1,
    log_num_errored: 1,
};

/// On a device that is not mlx5, a pool whose input is valid fails at its initiators' plan,
/// before any is created, with the typed "not supported", under every policy (streams included: the device is not mlx5
/// before it lacks streams).
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn dci_pool_on_a_device_that_is_not_mlx5_is_not_supported() {
    let ctx = common::open_test_device();
    common::require_not_mellanox(&ctx);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq_builder().setup_cqe(64).build().expect("CQ");
    for (policy, streams) in [
        (DcPoolPolicy::Dedicated, None),
        (DcPoolPolicy::DedicatedWithQuota { quota: 4 }, None),
        (DcPoolPolicy::Static, None),
        (DcPoolPolicy::Streams, Some(SOME_STREAMS)),
    ] {
        let mut builder = pd.create_dci_pool_builder();
        builder
            .setup_send_cq(cq.clone())
            .setup_initiators(4)
            .setup_policy(policy)
            .setup_bring_up(DcInitiatorBringUp::new(1));
        if let Some(streams) = streams {
            builder.setup_initiator(pd.create_dci_builder().setup_dci_streams(streams));
        }
        let err = builder.build().unwrap_err();
        assert!(err.is_not_supported(), "{policy:?}: {err:?}");
        // The same with a CQ the pool creates itself: sizing it for the initiators' send queues
        // asks the device first, which is not mlx5.
        let mut own = pd.create_dci_pool_builder();
        own.setup_own_send_cq(&ctx, None)
            .setup_initiators(4)
            .setup_policy(policy)
            .setup_bring_up(DcInitiatorBringUp::new(1));
        if let Some(streams) = streams {
            own.setup_initiator(pd.create_dci_builder().setup_dci_streams(streams));
        }
        let own_err = own.build().unwrap_err();
        assert!(own_err.is_not_supported(), "{policy:?}, own CQ: {own_err:?}");
        match &err.0 {
            CreateDcInitiatorPoolErrorKind::Plan { source } => assert!(
                matches!(
                    source.0,
                    PlanDcInitiatorErrorKind::Create(CreateDcInitiatorErrorKind::NotSupported)
                ),
                "{policy:?}: the initiators are not supported: {err:?}"
            ),
            _ => panic!("{policy:?}: the initiators' plan must fail: {err:?}"),
        }
    }
}

/// Bad input is refused before any library call, on any device: on rxe a library call would
/// be "not supported", so each typed error shows its check came first.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn bad_dci_pool_input_is_refused_before_the_library() {
    let ctx = common::open_test_device();
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq_builder().setup_cqe(64).build().expect("CQ");
    // A builder that is valid in everything but what each case changes.
    let valid = || {
        let mut builder = pd.create_dci_pool_builder();
        builder
            .setup_send_cq(cq.clone())
            .setup_initiators(4)
            .setup_policy(DcPoolPolicy::Dedicated)
            .setup_bring_up(DcInitiatorBringUp::new(1));
        builder
    };

    for count in [0, 65_537] {
        let err = valid().setup_initiators(count).build().unwrap_err();
        assert!(
            matches!(
                err.0,
                CreateDcInitiatorPoolErrorKind::InvalidInitiatorCount { requested, max: 65_536 } if requested == count
            ),
            "{count} initiators: {err:?}"
        );
        assert!(!err.is_not_supported(), "{err:?}");
    }

    let err = valid().setup_policy(DcPoolPolicy::Streams).build().unwrap_err();
    assert!(
        matches!(
            err.0,
            CreateDcInitiatorPoolErrorKind::StreamsMismatch {
                policy: DcPoolPolicy::Streams,
                ..
            }
        ),
        "the streams policy without setup_dci_streams: {err:?}"
    );

    for policy in [
        DcPoolPolicy::Dedicated,
        DcPoolPolicy::DedicatedWithQuota { quota: 4 },
        DcPoolPolicy::Static,
    ] {
        let err = valid()
            .setup_policy(policy)
            .setup_initiator(pd.create_dci_builder().setup_dci_streams(SOME_STREAMS))
            .build()
            .unwrap_err();
        assert!(
            matches!(err.0, CreateDcInitiatorPoolErrorKind::StreamsMismatch { policy: p, .. } if p == policy),
            "{policy:?} with DCI streams: {err:?}"
        );
    }

    let mut builder = pd.create_dci_pool_builder();
    builder.setup_send_cq(cq.clone()).setup_initiators(4);
    let err = builder.build().unwrap_err();
    assert!(
        matches!(err.0, CreateDcInitiatorPoolErrorKind::MissingBringUp),
        "without setup_bring_up: {err:?}"
    );

    // A missing send CQ is the pool's own error, before the library.
    let mut builder = pd.create_dci_pool_builder();
    builder.setup_bring_up(DcInitiatorBringUp::new(1));
    let err = builder.build().unwrap_err();
    assert!(
        matches!(err.0, CreateDcInitiatorPoolErrorKind::MissingSendCompletionQueue),
        "without setup_send_cq: {err:?}"
    );
    assert!(!err.is_not_supported(), "{err:?}");

    // A CQ that cannot hold every request in flight (8 initiators × 16 > 64), before the library.
    let err = valid().setup_initiators(8).build().unwrap_err();
    assert!(
        matches!(
            err.0,
            CreateDcInitiatorPoolErrorKind::SendCompletionQueueTooSmall { needed: 128, cqe } if cqe < 128
        ),
        "a CQ too small: {err:?}"
    );

    // 65 536 initiators (the most a pool numbers) with a CQ of their own: more entries than a
    // device's max_cqe, refused at build rather than a pool that grants nothing.
    let mut builder = pd.create_dci_pool_builder();
    builder
        .setup_own_send_cq(&ctx, None)
        .setup_initiators(65_536)
        .setup_initiator(pd.create_dci_builder().setup_max_send_wr(1 << 15))
        .setup_bring_up(DcInitiatorBringUp::new(1));
    let err = builder.build().unwrap_err();
    assert!(
        matches!(err.0, CreateDcInitiatorPoolErrorKind::SendCompletionQueue { cqe, .. } if cqe == 1 << 31),
        "65 536 × 32 768 completions: {err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// ConnectX hardware: a pool of DC initiators and many DC targets on port 1 of the same device.

/// The port every queue pair and address handle is on.
const PORT: u8 = 1;
/// DC initiators in the pool, and DC targets it serves.
const INITIATORS: usize = 4;
const DESTINATIONS: usize = 64;
/// Each target's region.
const REGION: usize = 4096;
/// The requests that fill a region: (offset, length, inline). 4 from registered memory, the
/// last 64 bytes inline.
const PIECES: [(usize, usize, bool); 5] = [
    (0, 1024, false),
    (1024, 1024, false),
    (2048, 1024, false),
    (3072, 960, false),
    (4032, 64, true),
];
const _: () = assert!(PIECES[4].0 + PIECES[4].1 == REGION);
/// Inline data per request.
const MAX_INLINE: u32 = 64;
/// Requests per batch at most: a destination posts in several batches, so that the quota (4)
/// binds before its 5 requests are posted.
const MAX_BATCH: usize = 2;
/// Each initiator's send queue.
const MAX_SEND_WR: u32 = 16;
/// The DC key of target `d` is KEY_BASE + d.
const KEY_BASE: u64 = 0x00dc_0000_0000;
/// The `wr_id` of piece `p` of destination `d` is WR_ID_BASE + d · PIECES.len() + p: nothing
/// like the pool's own numbering, so that a `wr_id` reported is the caller's.
const WR_ID_BASE: u64 = 0x5eed_0000_0000;
/// How long a run of the 64 regions may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a run with a destroyed target may take: its requests fail only after their retries.
const FAILING_RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// A destination is reported unreachable after this many "retry exceeded" errors.
const UNREACHABLE_AFTER: u32 = 2;

/// The device, a protection domain, the send CQ of the pool's initiators, the 64 DC targets at
/// RTR on one SRQ and one receive CQ (which they hold), their endpoints, their regions, and the
/// local buffer the patterns are written from.
struct PoolFixture {
    ctx: Arc<DeviceContext>,
    pd: Arc<ProtectionDomain>,
    send_cq: Arc<BasicCompletionQueue>,
    gid_index: u8,
    /// `None` once destroyed.
    targets: Vec<Option<DcTarget>>,
    endpoints: Vec<DcEndpoint>,
    /// What each region must hold in the end.
    expected: Vec<Vec<u8>>,
    local: common::Buffer,
    remotes: Vec<common::Buffer>,
}

impl PoolFixture {
    /// The fixture; `salt` (0 to 3) makes the patterns of different tests differ.
    fn new(salt: u8) -> Self {
        let ctx = common::open_mlx5_test_device();
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let send_cq = ctx.create_cq_builder().setup_cqe(1024).build().expect("send CQ");
        let recv_cq = ctx.create_cq_builder().setup_cqe(64).build().expect("receive CQ");
        let srq = pd.create_srq_builder().setup_max_wr(16).build().expect("SRQ");
        let (gid_index, _) = common::local_gid(&ctx);
        // By default a DC target answers from the port's RoCE v2 GID on RoCE.
        let bring_up = DcTargetBringUp::new(PORT);
        let mut targets = Vec::with_capacity(DESTINATIONS);
        let mut endpoints = Vec::with_capacity(DESTINATIONS);
        for d in 0..DESTINATIONS {
            let mut dct = pd
                .create_dct_builder()
                .setup_recv_cq(recv_cq.clone())
                .setup_srq(&srq)
                .setup_dc_key(KEY_BASE + d as u64)
                .setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite)
                .build()
                .unwrap_or_else(|err| panic!("create DC target {d}: {err:?}"));
            dct.bring_up(&bring_up)
                .unwrap_or_else(|err| panic!("DC target {d} to RTR: {err:?}"));
            let endpoint = dct.endpoint().expect("the DC target's endpoint");
            assert_eq!(endpoint.dc_key(), KEY_BASE + d as u64);
            endpoints.push(endpoint);
            targets.push(Some(dct));
        }
        let numbers: BTreeSet<u32> = endpoints.iter().map(DcEndpoint::dct_number).collect();
        assert_eq!(numbers.len(), DESTINATIONS, "64 DC targets, 64 DCT numbers");
        let expected: Vec<Vec<u8>> = (0..DESTINATIONS)
            .map(|d| common::pattern(REGION, (d as u8) << 2 | (salt & 3)))
            .collect();
        let mut local = common::Buffer::new(&pd, DESTINATIONS * REGION);
        for (d, data) in expected.iter().enumerate() {
            local.write(d * REGION, data);
        }
        let remotes = (0..DESTINATIONS).map(|_| common::Buffer::new(&pd, REGION)).collect();
        Self {
            ctx,
            pd,
            send_cq,
            gid_index,
            targets,
            endpoints,
            expected,
            local,
            remotes,
        }
    }

    /// A pool of 4 initiators on the send CQ under `policy` (with `streams`, for the streams
    /// policy), brought up with `bring_up`, with the 64 targets as destinations in order.
    fn pool(
        &self, policy: DcPoolPolicy, streams: Option<DciStreams>, bring_up: DcInitiatorBringUp,
    ) -> (DcInitiatorPool, Vec<DestinationId>) {
        let mut initiator = self.pd.create_dci_builder();
        initiator
            .setup_max_send_wr(MAX_SEND_WR)
            .setup_max_inline_data(MAX_INLINE);
        if let Some(streams) = streams {
            initiator.setup_dci_streams(streams);
        }
        let mut builder = self.pd.create_dci_pool_builder();
        builder
            .setup_send_cq(self.send_cq.clone())
            .setup_initiators(INITIATORS)
            .setup_policy(policy)
            .setup_initiator(&initiator)
            .setup_bring_up(bring_up)
            .setup_unreachable_after(UNREACHABLE_AFTER);
        let mut pool = builder.build().unwrap_or_else(|err| {
            panic!(
                "create the pool ({policy:?}): {err:?}{}",
                if err.is_not_supported() && streams.is_some() {
                    " (this test needs a device with DCI streams, ConnectX-6 Dx or newer)"
                } else {
                    ""
                }
            )
        });
        assert_eq!((pool.policy(), pool.initiator_count()), (policy, INITIATORS));
        for i in 0..INITIATORS {
            let dci = pool.initiator(i).expect("an initiator of the pool");
            assert_eq!(dci.state(), QueuePairState::ReadyToSend, "initiator {i}");
            assert_eq!(dci.streams(), streams, "initiator {i}");
            // On RoCE the default source GID is the port's RoCE v2 GID, as common::local_gid's.
            let on_roce = self.endpoints[0].is_roce();
            let index = dci.source_gid().map(|entry| entry.index());
            assert_eq!(index, on_roce.then_some(self.gid_index), "initiator {i}");
        }
        let ids: Vec<DestinationId> = self.endpoints.iter().map(|e| pool.add_destination(*e)).collect();
        for (d, id) in ids.iter().enumerate() {
            assert_eq!(id.index(), d, "destinations are numbered in the order they were added");
            assert_eq!(pool.endpoint(*id), Some(&self.endpoints[d]));
        }
        assert_eq!(pool.destination_count(), DESTINATIONS);
        (pool, ids)
    }

    /// Checks every region: the pieces in `written` hold their pattern, the others are still 0.
    fn assert_region(&self, d: usize, written: Range<usize>, what: &str) {
        let actual = self.remotes[d].read(0, REGION);
        for (p, &(offset, len, _)) in PIECES.iter().enumerate() {
            let expected = if written.contains(&p) {
                self.expected[d][offset..offset + len].to_vec()
            } else {
                vec![0; len]
            };
            common::assert_bytes(
                &actual[offset..offset + len],
                &expected,
                &format!(
                    "{what}: region of DC target {d}, piece {p} (bytes {offset}..{})",
                    offset + len
                ),
            );
        }
    }
}

fn wr_id(d: usize, p: usize) -> u64 {
    WR_ID_BASE + (d * PIECES.len() + p) as u64
}

/// The destination and piece of a `wr_id` the pool reported; panics on one never posted.
fn request_of(wr_id: u64) -> (usize, usize) {
    let index = wr_id
        .checked_sub(WR_ID_BASE)
        .map(|i| i as usize)
        .filter(|&i| i < DESTINATIONS * PIECES.len())
        .unwrap_or_else(|| panic!("the pool reported wr_id {wr_id:#x}, which was never posted"));
    (index / PIECES.len(), index % PIECES.len())
}

/// What a run saw, per request (indexed by destination · PIECES.len() + piece) and in total.
#[derive(Debug, Default)]
struct Tally {
    completed: Vec<u32>,
    failed: Vec<u32>,
    in_flight: Vec<bool>,
    /// The statuses of the failures that were not flushes (the victim's error completions).
    error_statuses: Vec<u32>,
    retries: usize,
    unreachable: Vec<DestinationId>,
    /// Posts to the victim refused as unreachable.
    refused_unreachable: usize,
    no_initiator: usize,
    quota_exhausted: usize,
    queue_full: usize,
    /// Posts refused while the destination's initiator (or stream) was being recovered.
    recovering: usize,
    /// Destinations reported ready (an initiator granted from the line).
    ready: usize,
    batches: usize,
    /// When the victim was destroyed: its error completions say how long after.
    destroyed_at: Option<Instant>,
}

impl Tally {
    fn new() -> Self {
        let n = DESTINATIONS * PIECES.len();
        Self {
            completed: vec![0; n],
            failed: vec![0; n],
            in_flight: vec![false; n],
            ..Self::default()
        }
    }

    fn summary(&self) -> String {
        format!(
            "{} completed, {} failed, {} in flight, {} retries, unreachable {:?}, {} batches, would-block: \
             {} no initiator, {} quota, {} queue full, {} recovering; {} ready; error statuses {:?}",
            self.completed.iter().sum::<u32>(),
            self.failed.iter().sum::<u32>(),
            self.in_flight.iter().filter(|&&f| f).count(),
            self.retries,
            self.unreachable,
            self.batches,
            self.no_initiator,
            self.quota_exhausted,
            self.queue_full,
            self.recovering,
            self.ready,
            self.error_statuses.iter().map(|&s| status_name(s)).collect::<Vec<_>>(),
        )
    }
}

fn status_name(status: u32) -> String {
    match decode_status(status) {
        Some(known) => format!("{known:?} ({status})"),
        None => format!("status {status}"),
    }
}

/// Fills a granted batch for destination `d` with its pending pieces (as many as the batch's room
/// and `MAX_BATCH` allow; the last signalled), posts it, and returns where it went and which
/// pieces it carried.
fn post_batch(
    mut guard: DcPoolPostGuard<'_, sideway_ext::mlx5::dc::initiator::DcInitiator>, f: &PoolFixture, d: usize,
    pending: &BTreeSet<usize>,
) -> (usize, Option<u16>, Vec<usize>) {
    let (initiator, stream) = guard.initiator();
    let batch: Vec<usize> = pending.iter().copied().take(MAX_BATCH.min(guard.room())).collect();
    assert!(!batch.is_empty(), "a granted batch has room");
    for (k, &p) in batch.iter().enumerate() {
        let flags = if k + 1 == batch.len() {
            WorkRequestFlags::Signaled
        } else {
            WorkRequestFlags::none()
        };
        let (offset, len, inline) = PIECES[p];
        let write = guard
            .construct_wr(wr_id(d, p), flags)
            .expect("a request within the batch's room")
            .setup_write(f.remotes[d].rkey(), f.remotes[d].addr(offset));
        if inline {
            write.setup_inline_data(&f.expected[d][offset..offset + len]);
        } else {
            // SAFETY: the piece lies in the local buffer's memory region; the run waits for every
            // request's report before it returns (and on a failure, the pool is dropped before
            // the fixture's buffers).
            unsafe { write.setup_sge(f.local.lkey(), f.local.addr(d * REGION + offset), len as u32) };
        }
    }
    assert_eq!(guard.batch_len(), batch.len());
    guard
        .post()
        .unwrap_or_else(|err| panic!("post a batch to destination {d}: {err:?}"));
    (initiator, stream, batch)
}

/// Posts `pieces` of every destination through the pool until each was reported completed (or,
/// for `victim`, until the pool refuses it as unreachable), within `timeout`.
///
/// Destinations in line for an initiator are served first, then the others in order; a
/// destination posts batch after batch (at most [`MAX_BATCH`] requests, only the last signalled)
/// until the pool says would-block, and is tried again after a poll. A request handed back for a
/// retry is posted again before the destination's newer ones; the victim's failed requests are
/// posted again too (an application that keeps trying), until the pool refuses it.
fn run(
    f: &PoolFixture, pool: &mut DcInitiatorPool, ids: &[DestinationId], pieces: Range<usize>, victim: Option<usize>,
    tally: &mut Tally, timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    let mut pending: Vec<BTreeSet<usize>> = (0..DESTINATIONS).map(|_| pieces.clone().collect()).collect();
    let mut events = Vec::new();
    let streams_policy = pool.policy() == DcPoolPolicy::Streams;
    loop {
        let mut order: Vec<usize> = pool.waiting().map(DestinationId::index).collect();
        let mut listed = [false; DESTINATIONS];
        order.iter().for_each(|&d| listed[d] = true);
        order.extend((0..DESTINATIONS).filter(|&d| !listed[d]));
        for d in order {
            let mut refused_unreachable = false;
            while !pending[d].is_empty() {
                // The streams policy's pool posts with start_post_send_on_stream.
                let started = if streams_policy {
                    pool.start_post_send_on_stream(ids[d])
                        .map(|guard| post_batch(guard, f, d, &pending[d]))
                } else {
                    pool.start_post_send(ids[d])
                        .map(|guard| post_batch(guard, f, d, &pending[d]))
                };
                let (initiator, stream, batch) = match started {
                    Ok(posted) => posted,
                    Err(err) => {
                        match err.0 {
                            PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator) => {
                                tally.no_initiator += 1
                            },
                            PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::QuotaExhausted) => {
                                tally.quota_exhausted += 1
                            },
                            PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::QueueFull) => {
                                tally.queue_full += 1
                            },
                            PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::Recovering { .. }) => {
                                tally.recovering += 1
                            },
                            PostToDestinationErrorKind::Unreachable if Some(d) == victim => {
                                tally.refused_unreachable += 1;
                                pending[d].clear();
                                refused_unreachable = true;
                            },
                            _ => panic!("post to destination {d}: {err:?} ({})", tally.summary()),
                        }
                        break;
                    },
                };
                assert!(initiator < INITIATORS, "initiator {initiator} of {INITIATORS}");
                assert_eq!(
                    stream.is_some(),
                    streams_policy,
                    "a batch names a DCI stream exactly under the streams policy"
                );
                tally.batches += 1;
                assert_eq!(
                    pool.assignment(ids[d]),
                    Some((initiator, stream)),
                    "destination {d} posts where its last batch went"
                );
                for p in batch {
                    pending[d].remove(&p);
                    let index = d * PIECES.len() + p;
                    assert!(!tally.in_flight[index], "request {d}/{p} posted twice");
                    tally.in_flight[index] = true;
                }
            }
            if refused_unreachable {
                // It will post no more: out of line, if it was in it.
                pool.cancel_wait(ids[d]);
            }
        }

        let polled = pool.poll(|event| events.push(event)).expect("poll the pool's send CQ");
        for event in events.drain(..) {
            settle(event, ids, victim, &mut pending, tally);
        }
        if pending.iter().all(BTreeSet::is_empty) && !tally.in_flight.contains(&true) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the run did not end within {timeout:?}: {}; outstanding per destination {:?}",
            tally.summary(),
            ids.iter().map(|&id| pool.outstanding(id)).collect::<Vec<_>>()
        );
        if polled == 0 {
            std::thread::yield_now();
        }
    }
}

/// Accounts one event of the pool.
fn settle(
    event: DcPoolEvent, ids: &[DestinationId], victim: Option<usize>, pending: &mut [BTreeSet<usize>],
    tally: &mut Tally,
) {
    let mut take = |destination: DestinationId, wr_id: u64, what: &str| {
        let (d, p) = request_of(wr_id);
        assert_eq!(
            destination, ids[d],
            "{what} of wr_id {wr_id:#x} names destination {destination:?}, but it was posted to {:?}",
            ids[d]
        );
        let index = d * PIECES.len() + p;
        assert!(
            tally.in_flight[index],
            "{what} of wr_id {wr_id:#x}, which is not in flight: reported twice"
        );
        tally.in_flight[index] = false;
        (d, p, index)
    };
    match event {
        DcPoolEvent::Completed { destination, wr_id } => {
            let (d, _, index) = take(destination, wr_id, "completion");
            assert_ne!(
                Some(d),
                victim,
                "a request to the destroyed DC target completed (wr_id {wr_id:#x})"
            );
            tally.completed[index] += 1;
        },
        DcPoolEvent::Failed {
            destination,
            wr_id,
            status,
            vendor_err,
        } => {
            let (d, p, index) = take(destination, wr_id, "failure");
            assert_eq!(
                Some(d),
                victim,
                "a request to a live DC target failed: wr_id {wr_id:#x}, {}",
                status_name(status)
            );
            tally.failed[index] += 1;
            if status != ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                let elapsed = tally.destroyed_at.map_or(Duration::ZERO, |at| at.elapsed());
                eprintln!(
                    "destination {d}: wr_id {wr_id:#x} failed: {} (since the DC target was destroyed)",
                    fault::Fault::from_parts(status, vendor_err, elapsed)
                );
                tally.error_statuses.push(status);
            }
            assert!(
                !tally.unreachable.is_empty() || tally.error_statuses.len() <= UNREACHABLE_AFTER as usize,
                "{} error completions of the destroyed DC target, and it was not reported unreachable \
                 (the pool counts transport/RNR retry exceeded and remote invalid request): {}",
                tally.error_statuses.len(),
                tally.summary()
            );
            // Keep trying, as an application would, until the pool refuses the destination.
            pending[d].insert(p);
        },
        DcPoolEvent::Retry { destination, wr_id } => {
            let (d, p, _) = take(destination, wr_id, "retry");
            tally.retries += 1;
            pending[d].insert(p);
        },
        DcPoolEvent::Unreachable { destination } => {
            assert_eq!(
                Some(destination.index()),
                victim,
                "{destination:?} reported unreachable"
            );
            assert!(tally.unreachable.is_empty(), "reported unreachable twice");
            tally.unreachable.push(destination);
        },
        DcPoolEvent::InitiatorLost { initiator, error } => {
            panic!(
                "initiator {initiator} of the pool was lost: {error} ({})",
                tally.summary()
            )
        },
        DcPoolEvent::Ready { destination } => {
            assert!(destination.index() < DESTINATIONS);
            tally.ready += 1;
        },
        other => panic!("an event this test does not know: {other:?}"),
    }
}

/// Checks that every request of `pieces` of the destinations other than `victim` was reported
/// completed exactly once, that nothing is in flight, and that no destination holds an
/// initiator, waits, or has requests outstanding.
fn assert_all_completed(
    pool: &DcInitiatorPool, ids: &[DestinationId], pieces: Range<usize>, victim: Option<usize>, tally: &Tally,
) {
    for d in (0..DESTINATIONS).filter(|&d| Some(d) != victim) {
        for p in pieces.clone() {
            assert_eq!(
                (
                    tally.completed[d * PIECES.len() + p],
                    tally.failed[d * PIECES.len() + p]
                ),
                (1, 0),
                "wr_id {:#x} (destination {d}, piece {p}) must be reported completed exactly once: {}",
                wr_id(d, p),
                tally.summary()
            );
        }
    }
    assert!(!tally.in_flight.contains(&true), "{}", tally.summary());
    for (d, &id) in ids.iter().enumerate() {
        assert_eq!(pool.outstanding(id), 0, "destination {d} has nothing outstanding");
        match pool.policy() {
            DcPoolPolicy::Dedicated | DcPoolPolicy::DedicatedWithQuota { .. } => assert_eq!(
                pool.assignment(id),
                None,
                "destination {d} gave its initiator back when its last request completed"
            ),
            policy => {
                let (initiator, stream) = pool
                    .assignment(id)
                    .unwrap_or_else(|| panic!("{policy:?}: destination {d} is bound to an initiator"));
                assert!(initiator < INITIATORS);
                assert_eq!(stream.is_some(), policy == DcPoolPolicy::Streams, "destination {d}");
            },
        }
    }
    assert_eq!(pool.waiting().count(), 0, "nobody waits for an initiator");
}

/// Writes all 64 regions through a pool under `policy` and checks them.
fn write_all_regions(f: &PoolFixture, policy: DcPoolPolicy, streams: Option<DciStreams>) {
    let (mut pool, ids) = f.pool(policy, streams, DcInitiatorBringUp::new(PORT));
    let mut tally = Tally::new();
    run(f, &mut pool, &ids, 0..PIECES.len(), None, &mut tally, RUN_TIMEOUT);
    println!("{policy:?}: {}", tally.summary());
    for d in 0..DESTINATIONS {
        f.assert_region(d, 0..PIECES.len(), &format!("{policy:?}"));
    }
    assert_all_completed(&pool, &ids, 0..PIECES.len(), None, &tally);
    assert_eq!(
        (tally.retries, tally.error_statuses.len()),
        (0, 0),
        "{policy:?}: no errors, so no retries: {}",
        tally.summary()
    );
    match policy {
        // 64 destinations on 4 initiators: most had to wait for one.
        DcPoolPolicy::Dedicated => assert!(tally.no_initiator > 0, "{}", tally.summary()),
        // ... and once a destination posted 4 while others waited, it was stopped.
        DcPoolPolicy::DedicatedWithQuota { .. } => assert!(
            tally.no_initiator > 0 && tally.quota_exhausted > 0,
            "{}",
            tally.summary()
        ),
        // An initiator bound to more requests than its send queue holds fills it in the first
        // round, which posts everything it can before it polls.
        DcPoolPolicy::Static => {
            let mut load = [0; INITIATORS];
            for &id in ids.iter() {
                load[pool.assignment(id).expect("bound").0] += PIECES.len();
            }
            let overloaded =
                (0..INITIATORS).any(|i| load[i] > pool.initiator(i).expect("initiator").max_send_wr() as usize);
            println!("static: requests per initiator {load:?}");
            if overloaded {
                assert!(tally.queue_full > 0, "{}", tally.summary());
            }
        },
        _ => {},
    }
    for i in 0..INITIATORS {
        assert_eq!(
            pool.initiator(i).expect("initiator").state(),
            QueuePairState::ReadyToSend,
            "initiator {i}"
        );
    }
}

/// Dedicated: a destination holds an initiator while it has requests outstanding.
#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_dci_pool_dedicated_writes_64_dc_targets() {
    write_all_regions(&PoolFixture::new(0), DcPoolPolicy::Dedicated, None);
}

/// Dedicated with a quota of 4: a destination that posted 4 while others wait posts no more
/// until its turn comes again.
#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_dci_pool_dedicated_with_quota_writes_64_dc_targets() {
    write_all_regions(
        &PoolFixture::new(1),
        DcPoolPolicy::DedicatedWithQuota { quota: 4 },
        None,
    );
}

/// Static: 16 destinations share each initiator.
#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_dci_pool_static_writes_64_dc_targets() {
    write_all_regions(&PoolFixture::new(2), DcPoolPolicy::Static, None);
}

/// Streams: each destination on one stream of one initiator. Needs a ConnectX with DCI streams
/// (ConnectX-6 Dx or newer): on one without, it is skipped at once, with the reason
/// (`common::skip`).
#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX with DCI streams"]
#[serial]
fn mlx5_hw_dci_pool_streams_write_64_dc_targets() {
    let f = PoolFixture::new(3);
    let Some((max_concurrent, max_errored)) = common::require_dci_streams(&f.ctx, (1, 0)) else {
        return;
    };
    let streams = DciStreams {
        log_num_concurrent: max_concurrent.min(2),
        log_num_errored: max_errored.min(1),
    };
    write_all_regions(&f, DcPoolPolicy::Streams, Some(streams));
}

/// One DC target destroyed mid-run, under `policy`: the first piece reaches all 64 regions; then
/// target VICTIM is destroyed and the other 4 pieces are posted to all 64. The victim's
/// requests fail ("retry exceeded"), it is reported unreachable after 2 such errors and refused
/// from then on; the other 63 complete (under the static policy, the requests sharing the
/// victim's initiator are handed back for a retry and posted again).
fn destroyed_target(policy: DcPoolPolicy, salt: u8) {
    const VICTIM: usize = 37;
    let mut f = PoolFixture::new(salt);
    // Short retries, so the victim's requests fail fast: 4.096 µs · 2^12 ≈ 17 ms, 3 retries.
    let mut bring_up = DcInitiatorBringUp::new(PORT);
    bring_up.setup_timeout(12).setup_retry_cnt(3);
    let (mut pool, ids) = f.pool(policy, None, bring_up);
    let mut tally = Tally::new();
    run(&f, &mut pool, &ids, 0..1, None, &mut tally, RUN_TIMEOUT);
    assert_all_completed(&pool, &ids, 0..1, None, &tally);

    drop(f.targets[VICTIM].take());
    tally.destroyed_at = Some(Instant::now());
    run(
        &f,
        &mut pool,
        &ids,
        1..PIECES.len(),
        Some(VICTIM),
        &mut tally,
        FAILING_RUN_TIMEOUT,
    );
    println!("{policy:?}, DC target {VICTIM} destroyed: {}", tally.summary());

    let victim = ids[VICTIM];
    assert_eq!(
        tally.unreachable,
        [victim],
        "the destroyed DC target's destination is reported unreachable, once: {}",
        tally.summary()
    );
    assert!(pool.is_unreachable(victim));
    assert!(
        tally.refused_unreachable > 0,
        "posts to it were refused: {}",
        tally.summary()
    );
    match pool.start_post_send(victim) {
        Err(err) => assert!(
            matches!(err.0, PostToDestinationErrorKind::Unreachable),
            "a post to the unreachable destination: {err:?}"
        ),
        Ok(_) => panic!("a post to the unreachable destination was accepted"),
    }
    assert_eq!(
        tally.error_statuses,
        vec![ibv_wc_status::IBV_WC_RETRY_EXC_ERR; UNREACHABLE_AFTER as usize],
        "the destroyed DC target: one \"retry exceeded\" error completion per attempt until it is \
         unreachable: {}",
        tally.summary()
    );
    for p in 1..PIECES.len() {
        let index = VICTIM * PIECES.len() + p;
        assert_eq!(
            tally.completed[index], 0,
            "piece {p} of the destroyed DC target completed"
        );
        assert!(
            tally.failed[index] >= 1,
            "piece {p} of the destroyed DC target was reported failed: {}",
            tally.summary()
        );
    }
    assert_all_completed(&pool, &ids, 0..PIECES.len(), Some(VICTIM), &tally);
    for d in 0..DESTINATIONS {
        if d == VICTIM {
            // The first piece arrived before the target was destroyed; nothing after.
            f.assert_region(d, 0..1, &format!("{policy:?}, destroyed target"));
        } else {
            f.assert_region(d, 0..PIECES.len(), &format!("{policy:?}, a live target"));
        }
    }
    for i in 0..INITIATORS {
        assert_eq!(
            pool.initiator(i).expect("initiator").state(),
            QueuePairState::ReadyToSend,
            "initiator {i} was recovered"
        );
    }
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_dci_pool_dedicated_reports_a_destroyed_dc_target_unreachable() {
    destroyed_target(DcPoolPolicy::Dedicated, 0);
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_dci_pool_dedicated_with_quota_reports_a_destroyed_dc_target_unreachable() {
    destroyed_target(DcPoolPolicy::DedicatedWithQuota { quota: 4 }, 1);
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_dci_pool_static_reports_a_destroyed_dc_target_unreachable() {
    destroyed_target(DcPoolPolicy::Static, 2);
}
