//! Step mode and a seed: the same test gives the same trace. The scenario runs twice, each time
//! in a process of its own on a fabric of its own, with seeded drops on the way to the target;
//! the two traces, QP numbers renamed in order of appearance, are equal, and the drops happened.
mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::Bed;

/// Where the scenario writes its trace (set for the runs on the device).
const OUT: &str = "SOFTMLX5_TEST_TRACE_OUT";

#[test]
fn the_same_seed_gives_the_same_trace() {
    if softmlx5::Control::loaded().is_some() {
        return scenario();
    }
    let dir = std::env::temp_dir().join(format!("softmlx5-determinism-{}", std::process::id()));
    let traces: Vec<String> = (0..2)
        .map(|run| {
            let fabric = dir.join(format!("fabric-{run}"));
            std::fs::create_dir_all(&fabric).unwrap();
            let out = dir.join(format!("trace-{run}"));
            let status = softmlx5::rerun_on_device(&[
                ("SOFTMLX5_STEP", "1"),
                ("SOFTMLX5_SEED", "42"),
                ("SOFTMLX5_FABRIC", fabric.to_str().unwrap()),
                (OUT, out.to_str().unwrap()),
            ])
            .expect("not on the device");
            assert!(status.success(), "run {run}: {status}");
            std::fs::read_to_string(&out).unwrap()
        })
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    assert!(traces[0].contains("kind 3 "), "seeded drops happened:\n{}", traces[0]);
    assert_eq!(traces[0], traces[1]);
}

/// 32 writes through a route that drops 30 % of the requests, stepped and timed by the test.
fn scenario() {
    let device = common::device();
    let mut bed = Bed::with(
        common::all(),
        |_| {},
        |params| {
            params.setup_timeout(10);
        },
    );
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    device
        .route_fault(
            bed.dct_number(),
            &softmlx5::RouteFault {
                drop_per_million: 300_000,
                ..Default::default()
            },
        )
        .unwrap();
    device.clear_trace();
    for wr_id in 0..32 {
        bed.write(
            wr_id,
            local.mr.lkey(),
            local.addr(0),
            remote.mr.rkey(),
            remote.addr(0),
            64,
        );
    }
    let mut done = 0;
    for _ in 0..1000 {
        device.step();
        device.advance(Duration::from_micros(500));
        done += bed.sends(32, Duration::ZERO).len();
        if done == 32 {
            break;
        }
    }
    assert_eq!(done, 32);
    let mut names = HashMap::new();
    let mut rename = |qpn: u32| {
        let next = names.len();
        *names.entry(qpn).or_insert(next)
    };
    let lines: Vec<String> = device
        .trace()
        .iter()
        .map(|e| {
            format!(
                "t {} kind {} qp {} peer {} seq {} wqe {} op {} status {}",
                e.time_ns,
                e.kind,
                rename(e.qp_number),
                if e.peer == 0 { usize::MAX } else { rename(e.peer) },
                e.seq,
                e.wqe_index,
                e.opcode,
                e.status
            )
        })
        .collect();
    std::fs::write(std::env::var(OUT).unwrap(), lines.join("\n")).unwrap();
}
