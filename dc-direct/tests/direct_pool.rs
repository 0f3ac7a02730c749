//! A DC initiator pool (sideway-ext-dc-pool, feature `pool`) of direct initiators on a
//! ConnectX (or the software one, as CI runs them), in loopback on port 1: DC targets with
//! registered regions, a pool of direct DC initiators on a [`DirectCompletionQueue`], given the
//! protection domain it creates its destinations' address handles on. Every request is reported
//! once with its destination and its bytes land, under random batches that fill the send queues
//! and get their room back; after a remote access error the pool fails the request, fails the
//! destination's requests flushed behind it, hands the others' back for a retry, recovers the
//! direct initiator and writes again from index 0; a completion of a queue pair that is no
//! initiator of the pool fails the poll, after the completions before it.
//!
//! `mlx5_hw_` tests: see `common`.
#![cfg(feature = "pool")]
mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rdma_mummy_sys::ibv_wc_status;
use serial_test::serial;
use sideway::ibverbs::completion::{BasicCompletionQueue, GenericCompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{QueuePairState, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::ProtectionDomainExt;
use sideway_ext::mlx5::dc::endpoint::DcServiceClass;
use sideway_ext::mlx5::dc::initiator::{DcInitiatorBringUp, DciStreams};
use sideway_ext::mlx5::dc::target::DcTarget;
use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;
use sideway_ext_dc_direct::completion_queue::{
    PollDirectCompletionQueueError as DirectPollError, PollDirectCompletionQueueErrorKind,
};
use sideway_ext_dc_direct::{DirectCompletionQueue, DirectDcInitiator};
use sideway_ext_dc_pool::settings::DcPoolSettings;
use sideway_ext_dc_pool::types::{
    DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId, PostToDestinationErrorKind,
};
use sideway_ext_dc_pool::DcInitiatorPool;

use common::{open, pattern, Buffer, PORT};

const TARGETS: usize = 4;
const INITIATORS: usize = 2;
const LEN: usize = 4096;
/// Each target's region is written in this many requests.
const WRITES: usize = 8;
const KEY: u64 = 0xd1_2ec7;
const TIMEOUT: Duration = Duration::from_secs(10);

/// DC targets with their regions, a local buffer holding what each is written, and the pool.
struct Bed {
    /// Dropped first: its initiators and address handles.
    pool: DcInitiatorPool<DirectDcInitiator>,
    destinations: Vec<DestinationId>,
    targets: Vec<(DcTarget, Buffer)>,
    local: Buffer,
    pd: Arc<ProtectionDomain>,
    send_cq: GenericCompletionQueue,
    _recv_cq: GenericCompletionQueue,
}

impl Bed {
    /// Four targets, two direct initiators of 32 requests each, the static policy.
    fn new() -> Self {
        Self::with(TARGETS, INITIATORS, 32)
    }

    /// `targets` targets, `initiators` direct initiators of `max_send_wr` requests each, the
    /// static policy.
    fn with(targets: usize, initiators: usize, max_send_wr: u32) -> Self {
        Self::with_policy(targets, initiators, max_send_wr, DcPoolPolicy::Static)
    }

    /// As [`with`](Self::with), under `policy` (DCI streams for the streams policy).
    fn with_policy(targets: usize, initiators: usize, max_send_wr: u32, policy: DcPoolPolicy) -> Self {
        let ctx = open();
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let cq = |cqe| -> GenericCompletionQueue {
            let cq: Arc<BasicCompletionQueue> = ctx.create_cq_builder().setup_cqe(cqe).build().expect("CQ");
            cq.into()
        };
        let (send_cq, recv_cq) = (cq(256), cq(16));
        // SAFETY: nothing polls `send_cq` but the direct CQ (through the pool); only the direct
        // initiators complete into it.
        let direct_cq = unsafe { DirectCompletionQueue::new(send_cq.clone()) }.expect("a direct CQ");
        let srq = pd.create_srq_builder().setup_max_wr(16).build().expect("SRQ");
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
        let targets: Vec<(DcTarget, Buffer)> = (0..targets as u64)
            .map(|t| {
                let mut dct = pd
                    .create_dct_builder()
                    .setup_recv_cq(recv_cq.clone())
                    .setup_srq(&srq)
                    .setup_dc_key(KEY + t)
                    .setup_access_flags(access)
                    .build()
                    .expect("a DC target");
                dct.bring_up(&DcTargetBringUp::new(PORT)).expect("DC target to RTR");
                (dct, Buffer::new(&pd, LEN, access))
            })
            .collect();
        let bring_up = DcInitiatorBringUp::new(PORT);
        let initiators = (0..initiators)
            .map(|_| {
                let mut builder = pd.create_dci_builder();
                if policy == DcPoolPolicy::Streams {
                    builder.setup_dci_streams(DciStreams {
                        log_num_concurrent: 2,
                        log_num_errored: 1,
                    });
                }
                builder.setup_send_cq(send_cq.clone()).setup_max_send_wr(max_send_wr);
                // Each on a thread domain of its own: the safe constructor takes its register.
                let mut dci = DirectDcInitiator::new(builder.build_on_thread_domain().expect("a DCI"), &direct_cq)
                    .expect("direct");
                dci.bring_up(&bring_up).expect("to RTS");
                dci
            })
            .collect();
        let mut settings = DcPoolSettings::default();
        settings
            .setup_policy(policy)
            .setup_protection_domain(&pd, PORT, DcServiceClass::new());
        let mut pool = DcInitiatorPool::from_initiators(initiators, Some(direct_cq), &settings).expect("a pool");
        let destinations = targets
            .iter()
            .map(|(dct, _)| pool.add_destination(dct.endpoint().expect("its endpoint")))
            .collect();
        let local = Buffer::new(&pd, TARGETS.max(targets.len()) * LEN, AccessFlags::LocalWrite);
        Self {
            pool,
            destinations,
            targets,
            local,
            pd,
            send_cq,
            _recv_cq: recv_cq,
        }
    }

    /// A batch of `count` RDMA WRITEs of `chunk` bytes to `target`'s region (`rkey_mask` XOR-ed
    /// into its key), numbered from `wr_id`, on the destination's stream under the streams
    /// policy; their `wr_id`s, or the would-block the pool refused with.
    fn post(
        &mut self, target: usize, count: usize, chunk: usize, rkey_mask: u32, wr_id: &mut u64,
    ) -> Result<Vec<u64>, DcPoolWouldBlock> {
        let destination = self.destinations[target];
        let started = match self.pool.policy() {
            DcPoolPolicy::Streams => self.pool.start_post_send_on_stream(destination),
            _ => self.pool.start_post_send(destination),
        };
        let mut guard = match started {
            Ok(guard) => guard,
            Err(error) => match error.0 {
                PostToDestinationErrorKind::WouldBlock(would_block) => return Err(would_block),
                _ => panic!("{error:?}"),
            },
        };
        let region = &self.targets[target].1;
        let mut posted = Vec::new();
        for k in 0..count.min(guard.room()) {
            *wr_id += 1;
            let offset = (k * chunk % LEN) as u64;
            let request = guard
                .construct_wr(*wr_id, WorkRequestFlags::none())
                .expect("within the room")
                .setup_write(region.mr.rkey() ^ rkey_mask, region.addr() + offset);
            // SAFETY: the local buffer lies in its region and outlives the requests (each is
            // reported before the bed is dropped).
            unsafe { request.setup_sge(self.local.mr.lkey(), self.local.addr() + offset, chunk as u32) }
                .expect("within the writer's limits");
            posted.push(*wr_id);
        }
        guard.post().expect("posted");
        Ok(posted)
    }

    /// Polls until `until` holds of the events so far (`Ready` left out), or the timeout.
    fn poll_until(&mut self, until: impl Fn(&[DcPoolEvent]) -> bool) -> Vec<DcPoolEvent> {
        let deadline = Instant::now() + TIMEOUT;
        let mut events = Vec::new();
        while !until(&events) {
            self.pool
                .poll(|event| {
                    if !matches!(event, DcPoolEvent::Ready { .. }) {
                        events.push(event)
                    }
                })
                .expect("poll the direct CQ");
            assert!(Instant::now() < deadline, "{events:?}: not done within {TIMEOUT:?}");
        }
        events
    }

    /// Writes `seed`'s pattern into every target's region, `WRITES` requests each, in batches
    /// of up to 3, and checks that each request is reported completed once and the bytes landed.
    fn write_all(&mut self, seed: u8) {
        for t in 0..TARGETS {
            self.local.data[t * LEN..(t + 1) * LEN].copy_from_slice(&pattern(LEN, seed.wrapping_add(t as u8)));
        }
        let chunk = LEN / WRITES;
        let mut expected = HashMap::new();
        let mut next: Vec<usize> = vec![0; TARGETS];
        let deadline = Instant::now() + TIMEOUT;
        while next.iter().any(|&n| n < WRITES) || !expected.is_empty() {
            for (t, next) in next.iter_mut().enumerate() {
                if *next == WRITES {
                    continue;
                }
                let destination = self.destinations[t];
                let Ok(mut guard) = self.pool.start_post_send(destination) else {
                    continue;
                };
                let region = &self.targets[t].1;
                while *next < WRITES && guard.batch_len() < 3.min(guard.room()) {
                    let (k, wr_id) = (*next, (t * WRITES + *next) as u64);
                    let offset = (t * LEN + k * chunk) as u64;
                    let request = guard
                        .construct_wr(wr_id, WorkRequestFlags::none())
                        .expect("within the room")
                        .setup_write(region.mr.rkey(), region.addr() + (k * chunk) as u64);
                    // SAFETY: the local buffer lies in its region and outlives the requests
                    // (every one is reported before this returns).
                    unsafe { request.setup_sge(self.local.mr.lkey(), self.local.addr() + offset, chunk as u32) }
                        .expect("within the writer's limits");
                    expected.insert(wr_id, destination);
                    *next += 1;
                }
                guard.post().expect("posted");
            }
            self.pool
                .poll(|event| match event {
                    DcPoolEvent::Completed { destination, wr_id } => {
                        assert_eq!(expected.remove(&wr_id), Some(destination), "wr_id {wr_id}")
                    },
                    DcPoolEvent::Ready { .. } => {},
                    other => panic!("{other:?}"),
                })
                .expect("poll the direct CQ");
            assert!(
                Instant::now() < deadline,
                "{} requests not reported within {TIMEOUT:?}",
                expected.len()
            );
        }
        for (t, (_, region)) in self.targets.iter().enumerate() {
            assert_eq!(region.read(LEN), pattern(LEN, seed.wrapping_add(t as u8)), "target {t}");
        }
    }
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_a_pool_of_direct_initiators_writes_every_target_and_reports_each_request_once() {
    let mut bed = Bed::new();
    for round in 0..3 {
        bed.write_all(0x10 * round);
    }
    for initiator in 0..INITIATORS {
        assert_eq!(bed.pool.initiator(initiator).expect("an initiator").outstanding(), 0);
    }
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_random_batches_fill_the_queues_and_every_request_is_reported_once_with_its_room_back() {
    for policy in [
        DcPoolPolicy::Static,
        DcPoolPolicy::Dedicated,
        DcPoolPolicy::DedicatedWithQuota { quota: 5 },
        DcPoolPolicy::Streams,
    ] {
        random_batches(policy);
    }
}

/// Random batches to 5 targets on 2 initiators of 16 requests under `policy`, polled now and
/// then: each request reported once with its destination, the room back, refusals met.
fn random_batches(policy: DcPoolPolicy) {
    let (targets, max_send_wr) = (5, 16);
    let mut bed = Bed::with_policy(targets, INITIATORS, max_send_wr, policy);
    let mut rng = SmallRng::seed_from_u64(0xd1_2ec7);
    let mut expected = HashMap::new();
    let (mut wr_id, mut posted, mut refused) = (0, 0, 0);
    let settle = |event: DcPoolEvent, expected: &mut HashMap<u64, DestinationId>| match event {
        DcPoolEvent::Completed { destination, wr_id } => {
            assert_eq!(expected.remove(&wr_id), Some(destination), "{policy:?}: wr_id {wr_id}")
        },
        other => panic!("{policy:?}: {other:?}"),
    };
    for _ in 0..1000 {
        let target = rng.random_range(0..targets);
        let count = rng.random_range(1..=16);
        match bed.post(target, count, 64, 0, &mut wr_id) {
            Ok(wr_ids) => {
                posted += wr_ids.len();
                expected.extend(wr_ids.into_iter().map(|wr_id| (wr_id, bed.destinations[target])));
            },
            Err(_) => {
                // Full, or no initiator or quota now: wait for a completion or an initiator
                // handed on (`Ready`), whatever the device's speed.
                refused += 1;
                let deadline = Instant::now() + TIMEOUT;
                let mut progress = expected.is_empty();
                while !progress {
                    let mut events = Vec::new();
                    bed.pool.poll(|event| events.push(event)).expect("poll the direct CQ");
                    for event in events {
                        progress = true;
                        if !matches!(event, DcPoolEvent::Ready { .. }) {
                            settle(event, &mut expected);
                        }
                    }
                    assert!(Instant::now() < deadline, "{policy:?}: no progress within {TIMEOUT:?}");
                }
            },
        }
        if rng.random_bool(0.5) {
            let mut events = Vec::new();
            bed.pool
                .poll(|event| {
                    if !matches!(event, DcPoolEvent::Ready { .. }) {
                        events.push(event)
                    }
                })
                .expect("poll the direct CQ");
            for event in events {
                settle(event, &mut expected);
            }
        }
    }
    let left = expected.len();
    for event in bed.poll_until(|events| events.len() == left) {
        settle(event, &mut expected);
    }
    assert!(
        expected.is_empty(),
        "{policy:?}: {} requests never reported",
        expected.len()
    );
    for &destination in &bed.destinations {
        assert_eq!(bed.pool.outstanding(destination), 0, "{policy:?}");
    }
    for initiator in 0..INITIATORS {
        let initiator = bed.pool.initiator(initiator).expect("an initiator");
        assert_eq!(initiator.outstanding(), 0, "{policy:?}: the send queue's room is back");
    }
    assert_eq!(bed.pool.footprint().batch_records, 0, "{policy:?}");
    // Far more than both queues hold, and refusals met: room came back, from the completions.
    assert!(
        posted > 10 * INITIATORS * max_send_wr as usize && refused > 0,
        "{policy:?}: {posted} posted, {refused} refused"
    );
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_an_error_fails_its_request_flushes_the_rest_and_the_pool_recovers_the_direct_initiator() {
    // One initiator: both destinations' batches on it.
    let mut bed = Bed::with(2, 1, 32);
    let (faulty, other) = (bed.destinations[0], bed.destinations[1]);
    let mut wr_id = 0;
    // A wrong rkey: a remote access error, and the device flushes every request behind it.
    let failing = bed.post(0, 3, 64, 0x100, &mut wr_id).expect("room");
    let flushed = bed.post(1, 2, 64, 0, &mut wr_id).expect("room");
    let events = bed.poll_until(|events| events.len() == 5);
    let DcPoolEvent::Failed { vendor_err, .. } = events[0] else {
        panic!("{events:?}");
    };
    let failed = |wr_id, status, vendor_err| DcPoolEvent::Failed {
        destination: faulty,
        wr_id,
        status,
        vendor_err,
    };
    let flush = ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
    assert_eq!(
        events,
        [
            failed(failing[0], ibv_wc_status::IBV_WC_REM_ACCESS_ERR, vendor_err),
            failed(failing[1], flush, 0),
            failed(failing[2], flush, 0),
            DcPoolEvent::Retry {
                destination: other,
                wr_id: flushed[0]
            },
            DcPoolEvent::Retry {
                destination: other,
                wr_id: flushed[1]
            },
        ]
    );
    // Recovered when its last request was reported: RESET, the send queue at 0, RTS again.
    let initiator = bed.pool.initiator(0).expect("an initiator");
    assert_eq!(initiator.outstanding(), 0);
    assert_eq!(initiator.dc_initiator().state(), QueuePairState::ReadyToSend);
    let again = bed.post(1, 2, 64, 0, &mut wr_id).expect("room");
    let events = bed.poll_until(|events| events.len() == 2);
    let completed: Vec<_> = again
        .iter()
        .map(|&wr_id| DcPoolEvent::Completed {
            destination: other,
            wr_id,
        })
        .collect();
    assert_eq!(events, completed);
    assert_eq!((bed.pool.outstanding(faulty), bed.pool.outstanding(other)), (0, 0));
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_a_completion_of_a_queue_pair_that_is_no_initiator_of_the_pool_fails_the_poll_after_the_others() {
    let mut bed = Bed::with(1, 1, 32);
    // A DC initiator posting through libmlx5, completing into the pool's CQ.
    let mut builder = bed.pd.create_dci_builder();
    builder.setup_send_cq(bed.send_cq.clone()).setup_max_send_wr(4);
    let mut stray = builder.build().expect("a DCI");
    stray.bring_up(&DcInitiatorBringUp::new(PORT)).expect("to RTS");
    let endpoint = bed.targets[0].0.endpoint().expect("its endpoint");
    let gid_index = stray.source_gid().map_or(0, |gid| gid.index());
    let ah = endpoint.create_ah(&bed.pd, PORT, gid_index).expect("an address handle");
    let (rkey, remote) = (bed.targets[0].1.mr.rkey(), bed.targets[0].1.addr());
    let (lkey, local) = (bed.local.mr.lkey(), bed.local.addr());
    // The pool's request, the stray's, the pool's: each completed before the next is posted.
    let settle = || std::thread::sleep(Duration::from_millis(200));
    let mut wr_id = 0;
    let first = bed.post(0, 1, 64, 0, &mut wr_id).expect("room");
    settle();
    stray
        .post_send_one(7, WorkRequestFlags::Signaled, |wr| {
            // SAFETY: both buffers outlive the completion (the bed holds them).
            unsafe {
                wr.setup_write(rkey, remote + 64)
                    .setup_dc_addr(&ah, endpoint.dct_number(), endpoint.dc_key())
                    .setup_sge(lkey, local, 64)
            }
        })
        .expect("posted");
    settle();
    let second = bed.post(0, 1, 64, 0, &mut wr_id).expect("room");
    settle();
    let mut events = Vec::new();
    let polled = bed
        .pool
        .poll(|event| events.push(event))
        .expect("the completion before it");
    assert_eq!(polled, 1);
    let error = bed
        .pool
        .poll(|event| events.push(event))
        .expect_err("the stray completion");
    let PollCompletionQueueError::Ibverbs(io) = &error else {
        panic!("{error:?}");
    };
    let refused = io.get_ref().and_then(|inner| inner.downcast_ref::<DirectPollError>());
    assert_eq!(
        refused.map(|refused| &refused.0),
        Some(&PollDirectCompletionQueueErrorKind::UnknownQueuePair {
            qp_number: stray.qp_number()
        }),
        "{error:?}"
    );
    // The stray CQE was consumed; the next one is read.
    assert_eq!(bed.pool.poll(|event| events.push(event)).expect("the one after"), 1);
    let destination = bed.destinations[0];
    assert_eq!(
        events,
        [
            DcPoolEvent::Completed {
                destination,
                wr_id: first[0]
            },
            DcPoolEvent::Completed {
                destination,
                wr_id: second[0]
            },
        ]
    );
}
