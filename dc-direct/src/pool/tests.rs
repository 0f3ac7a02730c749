//! sideway-ext-dc-pool's pool on initiators made of a direct initiator's pieces, over plain
//! memory (`double.rs`): requests posted through the pool, executed by a device that writes a
//! CQE for each into the memory the direct poller reads through its `struct ibv_cq`; the pool's
//! `poll` reports each request once, with its destination, status and vendor syndrome, gives the
//! room back, and recovers an initiator after an error.
mod double;

use std::collections::HashMap;
use std::rc::Rc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rdma_mummy_sys::ibv_wc_status;
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext_dc_pool::types::{
    DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId, PostToDestinationErrorKind,
};
use sideway_ext_dc_pool::DcInitiatorPool;
use sideway_ext_wqe_oracle::OracleAh;

use self::double::{Device, OracleInitiator};

type Pool = DcInitiatorPool<OracleInitiator>;

/// A pool of `count` initiators under `policy` on the device's CQ, with `destinations`
/// destinations over two routes, and the routes (to outlive the pool).
fn pool(
    count: u32, policy: DcPoolPolicy, destinations: u32, rng: &mut SmallRng,
) -> (Device, Vec<OracleAh>, Pool, Vec<DestinationId>) {
    let routes: Vec<OracleAh> = (0..2)
        .map(|_| OracleAh::new(std::array::from_fn(|_| rng.random())))
        .collect();
    let (mut device, cq) = Device::new(256);
    let table = Rc::clone(cq.polling().table());
    let initiators: Vec<OracleInitiator> = (0..count)
        .map(|n| {
            device.add(0x100 + n);
            OracleInitiator::new(0x100 + n, &routes, &table)
        })
        .collect();
    let mut pool = DcInitiatorPool::from_initiators(initiators, policy, 3);
    pool.set_send_cq(cq);
    let destinations = (0..destinations)
        .map(|n| {
            // SAFETY: the routes outlive the pool (the test keeps them).
            unsafe { pool.add_destination_raw(routes[n as usize % 2].ibv_ah(), 0x40 + n, 0xdc00 + u64::from(n)) }
        })
        .collect();
    (device, routes, pool, destinations)
}

/// Posts a batch of up to `count` requests (RDMA WRITEs of one entry and 16-byte inline SENDs,
/// unsignaled: the pool signals them) to `destination`, numbered from `*wr_id`; returns the
/// initiator and the `wr_id`s posted, or `None` when the pool refuses with a full queue.
fn post(
    pool: &mut Pool, device: &mut Device, destination: DestinationId, count: usize, wr_id: &mut u64, rng: &mut SmallRng,
) -> Option<(usize, Vec<u64>)> {
    let mut guard = match pool.start_post_send(destination) {
        Ok(guard) => guard,
        Err(error)
            if matches!(
                error.0,
                PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::QueueFull)
            ) =>
        {
            return None
        },
        Err(error) => panic!("{error:?}"),
    };
    let initiator = guard.initiator().0;
    let mut posted = Vec::new();
    for _ in 0..count.min(guard.room()) {
        *wr_id += 1;
        let request = guard
            .construct_wr(*wr_id, WorkRequestFlags::none())
            .expect("within the batch's room");
        if rng.random_bool(0.5) {
            // SAFETY: the device is the test: nothing reads the buffer.
            unsafe { request.setup_write(0x55, 0x1000).setup_sge(3, 0x2000, 64) };
        } else {
            request.setup_send().setup_inline_data(&[9; 16]);
        }
        posted.push(*wr_id);
    }
    guard.post().expect("the queue had room");
    device.read(initiator, pool.initiator(initiator).unwrap().memory());
    Some((initiator, posted))
}

/// Polls until nothing is left, collecting the events but `Ready`.
fn drain(pool: &mut Pool) -> Vec<DcPoolEvent> {
    let mut events = Vec::new();
    while pool
        .poll(|event| {
            if !matches!(event, DcPoolEvent::Ready { .. }) {
                events.push(event)
            }
        })
        .expect("the pool's CQEs")
        > 0
    {}
    events
}

/// Settles `events` against the requests expected, each once with its destination.
fn settle(events: Vec<DcPoolEvent>, expected: &mut HashMap<u64, DestinationId>) -> usize {
    let count = events.len();
    for event in events {
        let DcPoolEvent::Completed { destination, wr_id } = event else {
            panic!("{event:?}");
        };
        assert_eq!(expected.remove(&wr_id), Some(destination), "wr_id {wr_id}");
    }
    count
}

#[test]
fn a_pool_of_direct_initiators_reports_every_request_once_and_gets_its_room_back() {
    let mut rng = SmallRng::seed_from_u64(0xd1_2ec7);
    let (mut device, _routes, mut pool, destinations) = pool(2, DcPoolPolicy::Static, 5, &mut rng);
    let max_post = pool.initiator(0).unwrap().memory().max_post() as usize;
    let mut expected = HashMap::new();
    let (mut wr_id, mut posted, mut full, mut reported) = (0, 0, 0, 0);
    for _ in 0..3000 {
        let destination = destinations[rng.random_range(0..destinations.len())];
        let count = rng.random_range(1..=16);
        match post(&mut pool, &mut device, destination, count, &mut wr_id, &mut rng) {
            Some((_, wr_ids)) => {
                posted += wr_ids.len();
                expected.extend(wr_ids.into_iter().map(|wr_id| (wr_id, destination)));
            },
            None => full += 1,
        }
        for initiator in 0..2 {
            device.execute(initiator, rng.random_range(0..=10));
        }
        if rng.random_bool(0.5) {
            reported += settle(drain(&mut pool), &mut expected);
        }
    }
    for initiator in 0..2 {
        device.execute(initiator, usize::MAX);
    }
    reported += settle(drain(&mut pool), &mut expected);
    assert!(expected.is_empty(), "{} requests never reported", expected.len());
    assert_eq!(reported, posted);
    for destination in destinations {
        assert_eq!(pool.outstanding(destination), 0);
    }
    for initiator in 0..2 {
        assert_eq!(
            pool.initiator(initiator).unwrap().outstanding(),
            0,
            "the send queue's room is back"
        );
    }
    assert_eq!(pool.footprint().batch_records, 0);
    // Far more than both queues hold, and full queues met: room came back, from the completions.
    assert!(
        posted > 40 * max_post && full > 100,
        "{posted} posted, {full} refused full"
    );
}

#[test]
fn an_error_fails_its_request_flushes_the_rest_and_the_pool_recovers_the_direct_initiator() {
    let mut rng = SmallRng::seed_from_u64(7);
    let (mut device, _routes, mut pool, destinations) = pool(1, DcPoolPolicy::Static, 2, &mut rng);
    let (faulty, other) = (destinations[0], destinations[1]);
    let mut wr_id = 0;
    let (_, failing) = post(&mut pool, &mut device, faulty, 3, &mut wr_id, &mut rng).unwrap();
    let (_, flushed) = post(&mut pool, &mut device, other, 2, &mut wr_id, &mut rng).unwrap();
    // A remote access error (syndrome 0x13) with vendor syndrome 0x88, the rest flushed.
    device.fail(0, 0x13, 0x88);
    let events = drain(&mut pool);
    let flush = ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
    let failed = |wr_id, status, vendor_err| DcPoolEvent::Failed {
        destination: faulty,
        wr_id,
        status,
        vendor_err,
    };
    assert_eq!(
        events,
        [
            failed(failing[0], ibv_wc_status::IBV_WC_REM_ACCESS_ERR, 0x88),
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
    let initiator = pool.initiator(0).unwrap();
    assert_eq!(
        (initiator.recoveries, initiator.outstanding()),
        (1, 0),
        "recovered once, when all were reported"
    );
    // The send queue starts over at index 0, where the device looks after the reset.
    let (_, again) = post(&mut pool, &mut device, other, 2, &mut wr_id, &mut rng).unwrap();
    assert_eq!(device.pending(0), 2, "two WQEs read from index 0");
    device.execute(0, 2);
    let mut expected = again.iter().map(|&wr_id| (wr_id, other)).collect();
    assert_eq!(settle(drain(&mut pool), &mut expected), 2);
    assert_eq!(pool.outstanding(other), 0);
}

#[test]
fn a_cqe_of_a_queue_pair_that_is_no_initiator_of_the_pool_fails_the_poll_after_the_others() {
    let mut rng = SmallRng::seed_from_u64(11);
    let (mut device, _routes, mut pool, destinations) = pool(1, DcPoolPolicy::Static, 1, &mut rng);
    let mut wr_id = 0;
    let (_, posted) = post(&mut pool, &mut device, destinations[0], 2, &mut wr_id, &mut rng).unwrap();
    device.execute(0, 1);
    device.stray(0x0ab_cdef);
    device.execute(0, 1);
    let mut events = Vec::new();
    assert_eq!(
        pool.poll(|event| events.push(event)).expect("the completion before it"),
        1
    );
    let error = pool.poll(|event| events.push(event)).unwrap_err();
    assert!(
        matches!(&error, sideway::ibverbs::completion::PollCompletionQueueError::Ibverbs(io) if io.raw_os_error() == Some(libc::ENOENT)),
        "{error:?}"
    );
    // The stray CQE was consumed; the next one is read.
    assert_eq!(pool.poll(|event| events.push(event)).expect("the one after"), 1);
    let mut expected = posted.iter().map(|&wr_id| (wr_id, destinations[0])).collect();
    assert_eq!(settle(events, &mut expected), 2);
}
