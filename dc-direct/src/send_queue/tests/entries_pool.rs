//! sideway-ext-dc-pool's pool on the writer: a `DcInitiatorPool` whose initiators post through
//! [`SendQueueEntries`] and the same pool over libmlx5's DCIs, given the same destinations,
//! batches and completions, grant the same initiators, leave the same send queues, doorbells,
//! BlueFlame writes and barriers, and report the same events, under each policy.
use std::cell::RefCell;
use std::ptr::NonNull;

use rand::Rng;
use rdma_mummy_sys::{ibv_cq, ibv_qp_ex, mlx5dv_qp_ex};
use sideway::ibverbs::completion::{CompletionQueue as _, GenericCompletionQueue};
use sideway_ext::ibverbs::post_send_guard::{PostSendError, ProviderEntries};
use sideway_ext_dc_pool::initiator::{PooledInitiator, PostingInitiator, StreamResetRefusal};
use sideway_ext_dc_pool::post_guard::{DcPoolPostGuard, PoolAddressing};
use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy, DestinationId};
use sideway_ext_dc_pool::{DcInitiatorPool, PoolInitiator};
use sideway_ext_wqe_oracle::{OracleAh, OracleDci};

use super::entries_pair::{data, with_operation};
use super::entries_pair::{rng, EntriesPair, Shape, ALL_OPERATIONS};
use super::requests::{flags_of, Draw, Operations, Request};
use crate::send_queue::SendQueueEntries;

/// A pool's initiator posting through the C entries (the memory they write kept alive with
/// them; in cells, so that the test reads and takes their events through the pool's `&`).
struct DirectInitiator {
    /// Dropped first: its queue points into `memory`.
    entries: RefCell<SendQueueEntries>,
    memory: OracleDci,
    streams: u32,
}

/// The same initiator posting through libmlx5.
struct Libmlx5Initiator {
    dci: RefCell<OracleDci>,
    entries: ProviderEntries,
    streams: u32,
}

macro_rules! pooled {
    ($initiator:ty, $max_send_wr:expr) => {
        impl PooledInitiator for $initiator {
            fn max_send_wr(&self) -> u32 {
                let max_send_wr: fn(&Self) -> u32 = $max_send_wr;
                max_send_wr(self)
            }

            fn stream_count(&self) -> u32 {
                self.streams
            }

            fn recover(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
                unreachable!("no error completions here")
            }

            fn reset_stream(&mut self, _: u16) -> Result<(), StreamResetRefusal> {
                unreachable!("no error completions here")
            }
        }

        impl PoolInitiator for $initiator {
            type CompletionQueue = GenericCompletionQueue;

            fn raw_cq(cq: &GenericCompletionQueue) -> NonNull<ibv_cq> {
                // SAFETY: only the pointer is read (never: no CQ is given; completions are
                // settled by hand).
                unsafe { cq.cq() }
            }
        }
    };
}

pooled!(DirectInitiator, |direct| direct.entries.borrow().queue().max_post());
pooled!(Libmlx5Initiator, |libmlx5| libmlx5.dci.borrow().max_post());

// SAFETY: the views are the entries' own, alive while the initiator is and used through its
// `&mut`; the entries name the stream setter when the queue has streams.
unsafe impl PostingInitiator for DirectInitiator {
    fn qp_number(&self) -> u32 {
        self.entries.borrow().queue().qp_number()
    }

    fn send_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        self.entries.get_mut().send_views()
    }

    fn max_inline_data(&self) -> u32 {
        self.entries.borrow().queue().max_inline_data()
    }
}

// SAFETY: the oracle DCI's own views, with the entries read from them.
unsafe impl PostingInitiator for Libmlx5Initiator {
    fn qp_number(&self) -> u32 {
        self.dci.borrow().shape().qp_number
    }

    fn send_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        let dci = self.dci.get_mut();
        (dci.qp_ex(), self.entries, dci.mlx5_qp_ex())
    }

    fn max_inline_data(&self) -> u32 {
        self.dci.borrow().max_inline_data()
    }
}

/// Builds and posts `batch` on a pool's guard, with its own `wr_id`s.
fn post<I: PoolInitiator, A: PoolAddressing>(
    mut guard: DcPoolPostGuard<'_, I, A>, batch: &[Request],
) -> Result<(), PostSendError> {
    for request in batch {
        let wr = guard
            .construct_wr(request.wr_id, flags_of(request.flags))
            .expect("within the batch's room");
        with_operation!(wr, request.op, after => data(after, &request.payload));
    }
    guard.post()
}

/// Two pools of `count` initiators of `shape`: on the entries, and on libmlx5.
fn pools(
    shape: Shape, count: usize, policy: DcPoolPolicy, routes: &[OracleAh], rng: &mut rand::rngs::SmallRng,
) -> (
    DcInitiatorPool<DirectInitiator>,
    DcInitiatorPool<Libmlx5Initiator>,
    Draw,
) {
    let streams = if shape.4 { 4 } else { 0 };
    let mut direct = Vec::new();
    let mut libmlx5 = Vec::new();
    let mut draw = None;
    for _ in 0..count {
        let (entries, dci, memory, parts_draw) =
            EntriesPair::parts(shape, Operations::All, ALL_OPERATIONS, routes, rng);
        let (qp_ex, mlx5) = (dci.qp_ex(), dci.mlx5_qp_ex());
        // SAFETY: the oracle's tables are alive.
        let provider_entries = unsafe {
            let ibv = ProviderEntries::new(qp_ex, ALL_OPERATIONS).expect("libmlx5's entries");
            sideway_ext::mlx5::dc::initiator::DcContext::from_raw(mlx5)
                .entries(ibv, shape.4)
                .expect("libmlx5's DC setters")
        };
        direct.push(DirectInitiator {
            entries: RefCell::new(entries),
            memory,
            streams,
        });
        libmlx5.push(Libmlx5Initiator {
            dci: RefCell::new(dci),
            entries: provider_entries,
            streams,
        });
        draw = Some(parts_draw);
    }
    (
        DcInitiatorPool::from_initiators(direct, policy, 2),
        DcInitiatorPool::from_initiators(libmlx5, policy, 2),
        draw.expect("at least one initiator"),
    )
}

/// Initiator `index` of both pools leaves the same queue, doorbell, register and events.
fn compare(
    direct: &DcInitiatorPool<DirectInitiator>, libmlx5: &DcInitiatorPool<Libmlx5Initiator>, index: usize,
    context: &dyn Fn() -> String,
) {
    let (ours, theirs) = (&direct.initiator(index).unwrap(), &libmlx5.initiator(index).unwrap());
    let mut dci = theirs.dci.borrow_mut();
    let mut entries = ours.entries.borrow_mut();
    assert!(
        ours.memory.send_queue() == dci.send_queue(),
        "{}: send queue",
        context()
    );
    let queue = entries.queue_mut();
    assert_eq!(
        queue.posting_index(),
        dci.posting_index(),
        "{}: posting index",
        context()
    );
    assert_eq!(
        ours.memory.doorbell_record(),
        dci.doorbell_record(),
        "{}: doorbell",
        context()
    );
    assert!(ours.memory.blueflame() == dci.blueflame(), "{}: BlueFlame", context());
    assert_eq!(
        queue.take_events(),
        dci.take_events(),
        "{}: barriers and stores",
        context()
    );
    for slot in 0..dci.layout().wqe_count {
        assert_eq!(queue.wr_id(slot), dci.wr_id(slot), "{}: wr_id at {slot}", context());
    }
}

#[test]
fn a_pool_on_the_entries_does_what_it_does_on_libmlx5() {
    let mut rng = rng(0x5eed_e006);
    let (mut settled, mut completed) = (0, 0);
    for (policy, shape) in [
        (DcPoolPolicy::Static, (64, 220, 4, false, false, 256)),
        (DcPoolPolicy::Dedicated, (32, 60, 2, true, false, 256)),
        (
            DcPoolPolicy::DedicatedWithQuota { quota: 5 },
            (16, 0, 1, false, false, 0),
        ),
        (DcPoolPolicy::Streams, (64, 100, 3, false, true, 256)),
    ] {
        let routes: Vec<OracleAh> = (0..3)
            .map(|_| OracleAh::new(std::array::from_fn(|_| rng.random())))
            .collect();
        let (mut direct, mut libmlx5, draw) = pools(shape, 2, policy, &routes, &mut rng);
        let destinations: Vec<(DestinationId, DestinationId)> = (0..5)
            .map(|n| {
                let (ah, dct_number, dc_key) = (routes[n % 3].ibv_ah(), rng.random_range(0..1 << 24), rng.random());
                // SAFETY: the handles outlive the pools (declared before them).
                unsafe {
                    (
                        direct.add_destination_raw(ah, dct_number, dc_key),
                        libmlx5.add_destination_raw(ah, dct_number, dc_key),
                    )
                }
            })
            .collect();
        // Each initiator's provider-visible wr_ids posted and not yet settled.
        let mut outstanding: Vec<Vec<u64>> = vec![Vec::new(); 2];
        // Each initiator's posting index after its last batch.
        let mut ending = [0u32; 2];
        let (mut wr_id, mut posted) = (0, 0);
        for round in 0..4_000 {
            let context = || format!("{policy:?}, round {round}");
            let (ours, theirs) = destinations[rng.random_range(0..destinations.len())];
            let mut batch: Vec<Request> = (0..rng.random_range(1..=16))
                .map(|_| {
                    wr_id += 1;
                    draw.request(&mut rng, wr_id)
                })
                .collect();
            let granted = if policy == DcPoolPolicy::Streams {
                let direct = direct.start_post_send_on_stream(ours);
                let libmlx5 = libmlx5.start_post_send_on_stream(theirs);
                match (direct, libmlx5) {
                    (Ok(direct), Ok(libmlx5)) => {
                        assert_eq!(direct.initiator(), libmlx5.initiator(), "{}", context());
                        batch.truncate(direct.room().min(libmlx5.room()));
                        let initiator = direct.initiator().0;
                        assert!(
                            post(direct, &batch).is_ok() && post(libmlx5, &batch).is_ok(),
                            "{}",
                            context()
                        );
                        Some(initiator)
                    },
                    (direct, libmlx5) => {
                        assert_eq!(
                            format!("{:?}", direct.err()),
                            format!("{:?}", libmlx5.err()),
                            "{}",
                            context()
                        );
                        None
                    },
                }
            } else {
                match (direct.start_post_send(ours), libmlx5.start_post_send(theirs)) {
                    (Ok(direct), Ok(libmlx5)) => {
                        assert_eq!(direct.initiator(), libmlx5.initiator(), "{}", context());
                        batch.truncate(direct.room().min(libmlx5.room()));
                        let initiator = direct.initiator().0;
                        assert!(
                            post(direct, &batch).is_ok() && post(libmlx5, &batch).is_ok(),
                            "{}",
                            context()
                        );
                        Some(initiator)
                    },
                    (direct, libmlx5) => {
                        assert_eq!(
                            format!("{:?}", direct.err()),
                            format!("{:?}", libmlx5.err()),
                            "{}",
                            context()
                        );
                        None
                    },
                }
            };
            if let Some(initiator) = granted {
                compare(&direct, &libmlx5, initiator, &context);
                // The provider-visible wr_ids of the batch: those of the slots its WQEs start
                // at, walked from where the initiator's last batch ended.
                let dci = libmlx5.initiator(initiator).unwrap().dci.borrow();
                let (ring, mask) = (dci.send_queue(), dci.layout().wqe_count - 1);
                for _ in 0..batch.len() {
                    let slot = ending[initiator] & mask;
                    outstanding[initiator].push(dci.wr_id(slot));
                    let size = u32::from(ring[(slot * 64 + 7) as usize] & 0x3f);
                    ending[initiator] = ending[initiator].wrapping_add(size.div_ceil(4));
                }
                assert_eq!(ending[initiator], dci.posting_index(), "{}: sizes", context());
                posted += batch.len();
            }
            // Now and then an initiator's requests all complete, in order, in both pools.
            if rng.random_ratio(1, 4) {
                let initiator = rng.random_range(0..2);
                let mut ours_events = Vec::new();
                let mut theirs_events = Vec::new();
                for wr_id in outstanding[initiator].drain(..) {
                    assert!(
                        direct.complete_raw(wr_id, 0, |event| ours_events.push(event)),
                        "{}",
                        context()
                    );
                    assert!(
                        libmlx5.complete_raw(wr_id, 0, |event| theirs_events.push(event)),
                        "{}",
                        context()
                    );
                    settled += 1;
                }
                assert_eq!(ours_events, theirs_events, "{}: events", context());
                completed += ours_events
                    .iter()
                    .filter(|event| matches!(event, DcPoolEvent::Completed { .. }))
                    .count();
                libmlx5.initiator(initiator).unwrap().dci.borrow_mut().retire_all();
                let mut entries = direct.initiator(initiator).unwrap().entries.borrow_mut();
                let queue = entries.queue_mut();
                queue.tail = queue.head;
            }
        }
        assert!(posted > 2_500, "{policy:?}: {posted} posted");
    }
    assert!(
        settled > 15_000 && completed == settled,
        "{settled} settled, {completed} completed"
    );
}
