//! Time per request of posting with the guards and with direct rdma-mummy-sys calls over counting
//! provider tables (no device), at batch sizes 1, 16 and 256. Per row and batch size, guard and
//! raw runs of `REQUESTS` requests alternate, `ROUNDS` of each, on one warm state; the median run
//! of each side is printed as `time <row> batch=<BATCH> guard=<ns> raw=<ns>`, in ns per request,
//! for scripts/bench-results. See BENCHMARKS.md.
//!
//! ```text
//! post_time run      # scripts/bench runs it; without `run` it measures nothing
//! ```
mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{SendRcWrite, Workload, BATCHES};

/// Requests per timed run (whole batches at every batch size).
const REQUESTS: usize = 1 << 16;
/// Timed runs per side.
const ROUNDS: usize = 51;

/// Times `run(guard)` for guard and raw alternately and prints the median of each side.
fn alternate(name: &str, batch: usize, mut run: impl FnMut(bool) -> Duration) {
    let (mut guard, mut raw) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    for _ in 0..ROUNDS {
        guard.push(run(true));
        raw.push(run(false));
    }
    let median = |mut times: Vec<Duration>| {
        times.sort();
        times[ROUNDS / 2].as_secs_f64() * 1e9 / REQUESTS as f64
    };
    let (guard, raw) = (median(guard), median(raw));
    println!("time {name} batch={batch} guard={guard:.2} raw={raw:.2}");
}

fn workload<W: Workload>() {
    for batch in BATCHES {
        let mut state = W::setup(batch);
        alternate(W::NAME, batch, |guard| {
            let start = Instant::now();
            if guard {
                W::guard(&mut state, black_box(REQUESTS));
            } else {
                W::raw(&mut state, black_box(REQUESTS));
            }
            start.elapsed()
        });
    }
}

fn main() {
    // `cargo bench` without `run` (e.g. `cargo bench --all-targets`): nothing to measure.
    if !std::env::args().any(|a| a == "run") {
        eprintln!("post_time: usage: post_time run (scripts/bench runs it)");
        return;
    }
    // A row per workload (see benches/common/mod.rs).
    workload::<SendRcWrite>();
    workload::<common::SendDcWrite>();
    // Their "raw" is the direct DC initiator's guard. Only the settled pool rows: the posting-only
    // row never settles, so its send queue would fill.
    workload::<common::SendDcPoolWriteSettled>();
    workload::<common::SendDcPoolDedicatedSettled>();
}
