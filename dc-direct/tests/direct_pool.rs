//! A DC initiator pool (sideway-ext-dc-pool, feature `pool`) of direct initiators on a
//! ConnectX, in loopback on port 1: DC targets with registered regions, a pool of two direct DC
//! initiators on a [`DirectCompletionQueue`], given the protection domain it creates its
//! destinations' address handles on. Every request is reported once and its bytes land; after a
//! remote access error the pool recovers the direct initiator and writes again.
//!
//! `mlx5_hw_` tests: see `common`.
#![cfg(feature = "pool")]
mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_mummy_sys::ibv_wc_status;
use serial_test::serial;
use sideway::ibverbs::completion::{BasicCompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::ProtectionDomainExt;
use sideway_ext::mlx5::dc::endpoint::DcServiceClass;
use sideway_ext::mlx5::dc::initiator::DcInitiatorBringUp;
use sideway_ext::mlx5::dc::target::{DcTarget, DcTargetBringUp};
use sideway_ext::mlx5::extension::DcProtectionDomainExt;
use sideway_ext_dc_direct::{DirectCompletionQueue, DirectDcInitiator};
use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy, DestinationId};
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
    _recv_cq: GenericCompletionQueue,
}

impl Bed {
    fn new() -> Self {
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
        let targets: Vec<(DcTarget, Buffer)> = (0..TARGETS as u64)
            .map(|t| {
                let mut dct = pd
                    .create_dct_builder()
                    .setup_recv_cq(recv_cq.clone())
                    .setup_srq(Arc::clone(&srq))
                    .setup_dc_key(KEY + t)
                    .setup_access_flags(access)
                    .build()
                    .expect("a DC target");
                dct.bring_up(&DcTargetBringUp::new(PORT)).expect("DC target to RTR");
                (dct, Buffer::new(&pd, LEN, access))
            })
            .collect();
        let bring_up = DcInitiatorBringUp::new(PORT);
        let initiators = (0..INITIATORS)
            .map(|_| {
                let mut builder = pd.create_dci_builder();
                builder
                    .setup_send_cq(send_cq.clone())
                    .setup_max_send_wr(32)
                    .setup_thread_domain(true);
                // Each on a thread domain of its own: the safe constructor takes its register.
                let mut dci = DirectDcInitiator::new(builder.build().expect("a DCI"), &direct_cq).expect("direct");
                dci.bring_up(&bring_up).expect("to RTS");
                dci
            })
            .collect();
        let mut pool = DcInitiatorPool::from_initiators(initiators, DcPoolPolicy::Static, 3);
        pool.set_send_cq(direct_cq);
        pool.set_protection_domain(&pd, PORT, DcServiceClass::new());
        let destinations = targets
            .iter()
            .map(|(dct, _)| pool.add_destination(dct.endpoint().expect("its endpoint")))
            .collect();
        let local = Buffer::new(&pd, TARGETS * LEN, AccessFlags::LocalWrite);
        Self {
            pool,
            destinations,
            targets,
            local,
            _recv_cq: recv_cq,
        }
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
                    unsafe { request.setup_sge(self.local.mr.lkey(), self.local.addr() + offset, chunk as u32) };
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
fn mlx5_hw_a_pool_recovers_a_direct_initiator_after_a_remote_access_error() {
    let mut bed = Bed::new();
    bed.write_all(1);
    let destination = bed.destinations[0];
    let region = &bed.targets[0].1;
    let mut guard = bed.pool.start_post_send(destination).expect("an initiator");
    let request = guard
        .construct_wr(99, WorkRequestFlags::none())
        .expect("room")
        .setup_write(region.mr.rkey() ^ 0x100, region.addr());
    // SAFETY: as in write_all; the request fails before reading it.
    unsafe { request.setup_sge(bed.local.mr.lkey(), bed.local.addr(), 64) };
    guard.post().expect("posted");
    let deadline = Instant::now() + TIMEOUT;
    let mut failed = None;
    while failed.is_none() {
        bed.pool
            .poll(|event| match event {
                DcPoolEvent::Failed {
                    destination: d,
                    wr_id: 99,
                    status,
                    ..
                } if d == destination => failed = Some(status),
                DcPoolEvent::Ready { .. } => {},
                other => panic!("{other:?}"),
            })
            .expect("poll the direct CQ");
        assert!(Instant::now() < deadline, "no error completion within {TIMEOUT:?}");
    }
    assert_eq!(failed, Some(ibv_wc_status::IBV_WC_REM_ACCESS_ERR));
    // Recovered when its last request was reported: RESET, the send queue at 0, RTS again.
    bed.write_all(2);
}
