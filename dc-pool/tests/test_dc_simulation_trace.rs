//! What the simulated DC fabric did, and faults at a tick (`--features mlx5,simulation`): its
//! trace of events (posted, executed, failed, flushed, recovered, faults made), off by default
//! and bounded when on; faults scheduled for a tick, made when the fabric reaches it.
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext_dc_pool::simulation::{
    ScheduleFaultErrorKind, SimulatedEvent, SimulatedFabric, SimulatedFault, SimulatedInitiator, SimulatedMemoryRegion,
    SimulatedTarget,
};
use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy, DestinationId};
use sideway_ext_dc_pool::DcInitiatorPool;

const REM_ACCESS: u32 = 10;
const RETRY_EXC: u32 = 12;

/// Two targets (latency 1) with their memory registered, and a pool of one initiator that both
/// destinations share.
struct Setup {
    fabric: SimulatedFabric,
    targets: Vec<SimulatedTarget>,
    regions: Vec<SimulatedMemoryRegion>,
    pool: DcInitiatorPool<SimulatedInitiator>,
    destinations: Vec<DestinationId>,
}

fn setup(seed: u64) -> Setup {
    let fabric = SimulatedFabric::new(seed);
    fabric.set_transport_timeout(8);
    let targets: Vec<SimulatedTarget> = (0..2)
        .map(|_| {
            fabric
                .create_target_builder()
                .setup_memory(64)
                .build()
                .expect("a target")
        })
        .collect();
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    let regions = targets
        .iter()
        .map(|target| target.register_memory(0..64, access).expect("a region"))
        .collect();
    let mut pool = fabric
        .create_pool_builder()
        .setup_initiators(1)
        .setup_policy(DcPoolPolicy::Static)
        .build()
        .expect("a pool");
    let destinations = targets.iter().map(|t| pool.add_destination(t.endpoint())).collect();
    Setup {
        fabric,
        targets,
        regions,
        pool,
        destinations,
    }
}

/// Posts an 8-byte inline WRITE of `wr_id` to target `to`, naming `rkey`.
fn write(setup: &mut Setup, to: usize, wr_id: u64, rkey: u32) {
    let address = setup.regions[to].address();
    let mut guard = setup
        .pool
        .start_post_send(setup.destinations[to])
        .expect("an initiator");
    guard
        .construct_wr(wr_id, WorkRequestFlags::none())
        .expect("room")
        .setup_write(rkey, address)
        .setup_inline_data(&wr_id.to_le_bytes());
    guard.post().expect("posted");
}

/// Polls until `count` requests were reported (completed, failed, or handed back for a retry):
/// the pool's events.
fn poll_until(setup: &mut Setup, count: usize) -> Vec<DcPoolEvent> {
    let mut events = Vec::new();
    let reported = |events: &[DcPoolEvent]| {
        events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    DcPoolEvent::Completed { .. } | DcPoolEvent::Failed { .. } | DcPoolEvent::Retry { .. }
                )
            })
            .count()
    };
    while reported(&events) < count {
        assert!(setup.fabric.now() < 1000, "never reported: {events:?}");
        setup.pool.poll(|event| events.push(event)).expect("poll");
    }
    events
}

/// A small run: a WRITE, a WRITE with a wrong rkey behind it, and a WRITE behind that. The
/// trace is exactly what happened, tick by tick: posted, executed, failed, flushed, recovered.
#[test]
fn the_trace_of_a_small_run_is_exactly_what_happened() {
    let mut setup = setup(1);
    setup.fabric.set_trace_capacity(64);
    let (good, other) = (setup.regions[0].rkey(), setup.regions[1].rkey());
    write(&mut setup, 0, 10, good);
    write(&mut setup, 1, 11, good); // target 0's key at target 1
    write(&mut setup, 0, 12, good);
    poll_until(&mut setup, 3);
    // Once recovered, the initiator runs again.
    write(&mut setup, 1, 13, other);
    poll_until(&mut setup, 1);
    let qp_number = setup.pool.initiator(0).expect("initiator 0").qp_number();
    let [a, b] = [0, 1].map(|t| setup.targets[t].dct_number());
    // The `wr_id`s are those the initiator was given: the pool's numbers of its requests (from
    // 0 on initiator 0), not the program's.
    let request = |tick, dct_number, wr_id| (tick, dct_number, wr_id);
    let posted = |(tick, dct_number, wr_id)| SimulatedEvent::Posted {
        tick,
        qp_number,
        dct_number,
        wr_id,
    };
    let executed = |(tick, dct_number, wr_id)| SimulatedEvent::Executed {
        tick,
        qp_number,
        dct_number,
        wr_id,
    };
    let expected = vec![
        posted(request(0, a, 0)),
        posted(request(0, b, 1)),
        posted(request(0, a, 2)),
        // Connecting to the target takes a tick, the request its latency (1).
        executed(request(2, a, 0)),
        // Another target: the one ahead ends, then it connects.
        SimulatedEvent::Failed {
            tick: 4,
            qp_number,
            dct_number: b,
            wr_id: 1,
            status: REM_ACCESS,
        },
        // The initiator in ERR flushes the rest at its next tick.
        SimulatedEvent::Flushed {
            tick: 5,
            qp_number,
            dct_number: a,
            wr_id: 2,
        },
        SimulatedEvent::Recovered {
            tick: 5,
            qp_number,
            rebuilt_as: None,
        },
        posted(request(5, b, 3)),
        executed(request(7, b, 3)),
    ];
    assert_eq!(setup.fabric.take_trace(), expected);
    assert!(setup.fabric.take_trace().is_empty(), "taken");
    assert_eq!(setup.fabric.dropped_events(), 0);
    assert_eq!(setup.targets[1].read(0..8), Some(13u64.to_le_bytes().to_vec()));
}

/// Off by default; on, it keeps the last events within its capacity and counts the others.
#[test]
fn the_trace_is_off_by_default_and_bounded_when_on() {
    let mut setup = setup(2);
    let rkey = setup.regions[0].rkey();
    write(&mut setup, 0, 1, rkey);
    poll_until(&mut setup, 1);
    assert!(setup.fabric.take_trace().is_empty(), "off: nothing recorded");
    setup.fabric.set_trace_capacity(3);
    for wr_id in 2..6 {
        write(&mut setup, 0, wr_id, rkey);
        poll_until(&mut setup, 1);
    }
    // 8 events (4 posted, 4 executed): the last 3 kept, 5 dropped.
    let trace = setup.fabric.take_trace();
    assert_eq!(trace.len(), 3, "{trace:?}");
    assert!(
        // The pool's number of the fifth request: 4.
        matches!(trace[2], SimulatedEvent::Executed { wr_id: 4, .. }),
        "the newest last: {trace:?}"
    );
    assert_eq!(setup.fabric.dropped_events(), 5);
}

/// A fault scheduled for a tick is made when the fabric reaches it, not before: the initiator
/// moves to ERR at tick 5, in the trace at that tick.
#[test]
fn a_scheduled_move_to_error_takes_effect_at_its_tick_and_not_before() {
    let setup = setup(3);
    setup.fabric.set_trace_capacity(64);
    let initiator = setup.pool.initiator(0).expect("initiator 0");
    let to_error = SimulatedFault::move_to_error(initiator);
    setup
        .fabric
        .schedule(5, to_error.clone())
        .expect("a fault of its fabric");
    setup.fabric.advance(4);
    assert!(!initiator.is_in_error(), "tick 4: not yet");
    setup.fabric.advance(1);
    assert!(initiator.is_in_error(), "tick 5: in ERR");
    let made = SimulatedEvent::Fault {
        tick: 5,
        fault: to_error,
    };
    assert_eq!(setup.fabric.take_trace(), [made]);
}

/// A target killed at tick 10: a WRITE that executed at tick 9 succeeded, one due after it
/// fails after the transport timeout.
#[test]
fn a_scheduled_kill_takes_effect_at_its_tick_and_not_before() {
    let mut setup = setup(4);
    setup.fabric.set_poll_ticks(false);
    setup.fabric.set_trace_capacity(64);
    let kill = SimulatedFault::kill(&setup.targets[0]);
    setup.fabric.schedule(10, kill.clone()).expect("a fault of its fabric");
    // Posted at tick 7: connects at 8, executes at 9.
    setup.fabric.advance(7);
    let rkey = setup.regions[0].rkey();
    write(&mut setup, 0, 1, rkey);
    setup.fabric.advance(2);
    assert!(setup.targets[0].is_alive(), "tick 9: alive");
    setup.fabric.advance(1);
    assert!(!setup.targets[0].is_alive(), "tick 10: dead");
    write(&mut setup, 0, 2, rkey);
    setup.fabric.set_poll_ticks(true);
    let events = poll_until(&mut setup, 2);
    let destination = setup.destinations[0];
    assert!(
        events.contains(&DcPoolEvent::Completed { destination, wr_id: 1 }),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(
            e,
            DcPoolEvent::Failed {
                wr_id: 2,
                status: RETRY_EXC,
                ..
            }
        )),
        "{events:?}"
    );
    let trace = setup.fabric.take_trace();
    let qp_number = setup.pool.initiator(0).expect("initiator 0").qp_number();
    let dct_number = setup.targets[0].dct_number();
    let [executed, made] = [
        SimulatedEvent::Executed {
            tick: 9,
            qp_number,
            dct_number,
            wr_id: 0,
        },
        SimulatedEvent::Fault { tick: 10, fault: kill },
    ]
    .map(|event| trace.iter().position(|e| *e == event));
    assert!(executed.is_some() && executed < made, "{trace:?}");
    assert_eq!(
        trace
            .iter()
            .filter(|e| matches!(e, SimulatedEvent::Fault { .. }))
            .count(),
        1
    );
    assert!(
        trace.iter().any(|e| matches!(
            e,
            SimulatedEvent::Failed {
                tick: 18..,
                wr_id: 1,
                status: RETRY_EXC,
                ..
            }
        )),
        "{trace:?}"
    );
}

/// A fault scheduled for a tick already reached is made at the next one.
#[test]
fn a_fault_scheduled_for_a_past_tick_is_made_at_the_next() {
    let setup = setup(4);
    setup.fabric.advance(3);
    setup
        .fabric
        .schedule(1, SimulatedFault::set_dc_key(&setup.targets[1], 0xbad))
        .expect("a fault of its fabric");
    assert_eq!(setup.targets[1].endpoint().dc_key(), 0, "not yet");
    setup.fabric.advance(1);
    assert_eq!(setup.targets[1].endpoint().dc_key(), 0xbad);
}

/// A fault belongs to the fabric of the handle it was made from: another fabric refuses it.
#[test]
fn a_fault_of_another_fabric_is_refused() {
    let setup = setup(5);
    let other = SimulatedFabric::new(5);
    let refused = other
        .schedule(1, SimulatedFault::kill(&setup.targets[0]))
        .expect_err("another fabric's target");
    assert_eq!(refused.0, ScheduleFaultErrorKind::OtherFabric);
    other.advance(2);
    assert!(setup.targets[0].is_alive());
}
