//! Stall reports on the simulated fabric, timed by its ticks: a SEND to a target without
//! receives is retried for ever (`rnr_retry` 7); its destination is reported once, no earlier
//! than the stall timeout after the post, while another destination keeps completing; once
//! receives come it completes, and a later stall is reported again.
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};

use crate::simulation::{SimulatedFabric, SimulatedInitiator, SimulatedMemoryRegion, SimulatedTarget};
use crate::types::{DcPoolEvent, DcPoolPolicy, DestinationId};
use crate::DcInitiatorPool;
use sideway_ext::mlx5::dc::initiator::DciStreams;

const TIMEOUT: u64 = 100;

/// A target and, for WRITEs, the region of its memory they go to.
struct Target {
    target: SimulatedTarget,
    region: Option<SimulatedMemoryRegion>,
}

impl Target {
    fn rkey(&self) -> u32 {
        self.region.as_ref().expect("a registered region").rkey()
    }

    fn region_address(&self) -> u64 {
        self.region.as_ref().expect("a registered region").address()
    }
}

impl std::ops::Deref for Target {
    type Target = SimulatedTarget;

    fn deref(&self) -> &SimulatedTarget {
        &self.target
    }
}

/// A dry target (no receives: a SEND to it waits for ever), a busy one (memory for WRITEs), and
/// a pool of two initiators reporting stalls after `TIMEOUT` ticks (`None`: never).
fn setup(
    policy: DcPoolPolicy, stall_timeout: Option<u64>,
) -> (
    SimulatedFabric,
    DcInitiatorPool<SimulatedInitiator>,
    [Target; 2],
    [DestinationId; 2],
) {
    let fabric = SimulatedFabric::new(11);
    let dry = fabric.create_target_builder().build().expect("a target");
    let busy = fabric
        .create_target_builder()
        .setup_memory(8)
        .build()
        .expect("a target");
    let mut builder = fabric.create_pool_builder();
    builder
        .setup_initiators(2)
        .setup_policy(policy)
        .setup_stall_timeout(stall_timeout);
    if policy == DcPoolPolicy::Streams {
        builder.setup_dci_streams(DciStreams {
            log_num_concurrent: 2,
            log_num_errored: 1,
        });
    }
    let mut pool = builder.build().expect("a pool");
    let ids = [
        pool.add_destination(dry.endpoint()),
        pool.add_destination(busy.endpoint()),
    ];
    let access = sideway::ibverbs::AccessFlags::LocalWrite | sideway::ibverbs::AccessFlags::RemoteWrite;
    let region = busy.register_memory(0..8, access).expect("a region");
    let targets = [
        Target {
            target: dry,
            region: None,
        },
        Target {
            target: busy,
            region: Some(region),
        },
    ];
    (fabric, pool, targets, ids)
}

/// Posts a SEND (`send`) or a WRITE of `wr_id` to `destination`; whether it was posted.
fn post(
    pool: &mut DcInitiatorPool<SimulatedInitiator>, destination: DestinationId, target: &Target, wr_id: u64, send: bool,
) -> bool {
    let bytes = wr_id.to_le_bytes();
    if pool.policy() == DcPoolPolicy::Streams {
        let Ok(mut guard) = pool.start_post_send_on_stream(destination) else {
            return false;
        };
        let request = guard.construct_wr(wr_id, WorkRequestFlags::none()).expect("room");
        if send {
            request.setup_send().setup_inline_data(&bytes);
        } else {
            request
                .setup_write(target.rkey(), target.region_address())
                .setup_inline_data(&bytes);
        }
        guard.post().expect("posted");
    } else {
        let Ok(mut guard) = pool.start_post_send(destination) else {
            return false;
        };
        let request = guard.construct_wr(wr_id, WorkRequestFlags::none()).expect("room");
        if send {
            request.setup_send().setup_inline_data(&bytes);
        } else {
            request
                .setup_write(target.rkey(), target.region_address())
                .setup_inline_data(&bytes);
        }
        guard.post().expect("posted");
    }
    true
}

/// What `polls` polls reported: the stall events with their ticks, and the `wr_id`s completed
/// with theirs. The busy destination posts a WRITE whenever it has none outstanding.
struct Seen {
    stalls: Vec<(u64, DcPoolEvent)>,
    completed: Vec<(u64, u64)>,
}

fn run(
    fabric: &SimulatedFabric, pool: &mut DcInitiatorPool<SimulatedInitiator>, targets: &[Target; 2],
    ids: [DestinationId; 2], polls: u64, next_write: &mut u64,
) -> Seen {
    let mut seen = Seen {
        stalls: Vec::new(),
        completed: Vec::new(),
    };
    for _ in 0..polls {
        if pool.outstanding(ids[1]) == 0 && post(pool, ids[1], &targets[1], *next_write, false) {
            *next_write += 1;
        }
        let mut events = Vec::new();
        pool.poll(|event| events.push(event)).expect("poll");
        let now = fabric.now();
        for event in events {
            match event {
                DcPoolEvent::Stalled { .. } => seen.stalls.push((now, event)),
                DcPoolEvent::Completed { wr_id, .. } => seen.completed.push((now, wr_id)),
                DcPoolEvent::Ready { .. } => {},
                other => panic!("{other:?}"),
            }
        }
    }
    seen
}

#[test]
fn a_stalled_destination_is_reported_once_after_the_timeout_and_again_for_a_later_stall() {
    for policy in [DcPoolPolicy::Dedicated, DcPoolPolicy::Static, DcPoolPolicy::Streams] {
        let (fabric, mut pool, targets, ids) = setup(policy, Some(TIMEOUT));
        let mut next_write = 1000;
        assert!(post(&mut pool, ids[0], &targets[0], 1, true));
        let posted = fabric.now();
        let (initiator, stream) = pool.assignment(ids[0]).expect("assigned");
        let stalled = DcPoolEvent::Stalled {
            destination: ids[0],
            initiator,
            stream,
        };
        let seen = run(&fabric, &mut pool, &targets, ids, 5 * TIMEOUT, &mut next_write);
        // Exactly once, no earlier than the timeout after the post, at most an eighth (and a
        // poll) later.
        assert_eq!(seen.stalls.len(), 1, "{policy:?}: {:?}", seen.stalls);
        let (at, ref event) = seen.stalls[0];
        assert_eq!(*event, stalled, "{policy:?}");
        assert!(
            at >= posted + TIMEOUT,
            "{policy:?}: reported at {at}, posted at {posted}"
        );
        assert!(
            at <= posted + TIMEOUT + TIMEOUT / 8 + 2,
            "{policy:?}: reported at {at}, posted at {posted}"
        );
        // The other destination kept completing, before and after the report, unless it shares
        // the stalled initiator (static policy: it waits behind the SEND).
        let after = seen.completed.iter().filter(|&&(tick, _)| tick > at).count();
        if pool.assignment(ids[1]) == Some((initiator, stream)) {
            assert_eq!(after, 0, "{policy:?}: behind the stalled request");
        } else {
            assert!(after > 100, "{policy:?}: {after} completions after the stall");
        }
        assert!(
            seen.completed.iter().all(|&(_, wr_id)| wr_id != 1),
            "{policy:?}: the SEND waits"
        );

        // A receive comes: the SEND completes; nothing more is reported for it.
        targets[0].post_receives(1);
        let seen = run(&fabric, &mut pool, &targets, ids, 2 * TIMEOUT, &mut next_write);
        assert!(seen.completed.iter().any(|&(_, wr_id)| wr_id == 1), "{policy:?}");
        assert!(seen.stalls.is_empty(), "{policy:?}: {:?}", seen.stalls);

        // A later SEND stalls again (the receive was used): reported again, once.
        assert!(post(&mut pool, ids[0], &targets[0], 2, true));
        let posted = fabric.now();
        let seen = run(&fabric, &mut pool, &targets, ids, 5 * TIMEOUT, &mut next_write);
        assert_eq!(seen.stalls.len(), 1, "{policy:?}: {:?}", seen.stalls);
        assert!(seen.stalls[0].0 >= posted + TIMEOUT, "{policy:?}");
        assert_eq!(pool.outstanding(ids[0]), 1, "{policy:?}: still outstanding, not failed");
    }
}

#[test]
fn no_stall_is_reported_when_reports_are_off_or_requests_keep_completing() {
    let (fabric, mut pool, targets, ids) = setup(DcPoolPolicy::Dedicated, None);
    let mut next_write = 1000;
    assert!(post(&mut pool, ids[0], &targets[0], 1, true));
    let seen = run(&fabric, &mut pool, &targets, ids, 5 * TIMEOUT, &mut next_write);
    assert!(seen.stalls.is_empty(), "{:?}", seen.stalls);
    assert!(seen.completed.len() > 400);

    // On, with a destination that keeps completing: nothing is reported.
    let (fabric, mut pool, targets, ids) = setup(DcPoolPolicy::Dedicated, Some(TIMEOUT));
    let seen = run(&fabric, &mut pool, &targets, ids, 10 * TIMEOUT, &mut next_write);
    assert!(seen.stalls.is_empty(), "{:?}", seen.stalls);
    assert!(seen.completed.len() > 900);
}
