//! Time per request of posting with the guards and with direct rdma-mummy-sys calls, measured by
//! criterion over counting provider tables (no device): one batch per iteration, at batch sizes
//! 1, 16 and 256 (criterion's throughput is in requests). `recv_srq_threads` posts from several
//! threads to one SRQ at once. See BENCHMARKS.md.
mod common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{CountingSrq, RecvSrq, SendRcWrite, Workload, BATCHES};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// Threads posting to one SRQ in `recv_srq_threads`.
const THREADS: usize = 2;

fn workload<W: Workload>(c: &mut Criterion) {
    let mut group = c.benchmark_group(W::NAME);
    for batch in BATCHES {
        group.throughput(Throughput::Elements(batch as u64));
        let mut state = W::setup(batch);
        group.bench_function(BenchmarkId::new("guard", batch), |b| {
            b.iter(|| W::guard(&mut state, batch))
        });
        group.bench_function(BenchmarkId::new("raw", batch), |b| b.iter(|| W::raw(&mut state, batch)));
    }
    group.finish();
}

/// `THREADS` threads each post `iters` batches to one shared SRQ, started together; the time is
/// the slowest thread's.
fn threads_posting(iters: u64, batch: usize, guard: bool) -> Duration {
    let srq = CountingSrq::new();
    let start = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (srq, start) = (srq.clone(), start.clone());
            std::thread::spawn(move || {
                // Warm: the guard's per-thread storage grown, as on a thread that posted before.
                let mut state = RecvSrq::setup_on(srq, batch);
                let requests = iters as usize * batch;
                start.wait();
                let t = Instant::now();
                if guard {
                    RecvSrq::guard(&mut state, requests);
                } else {
                    RecvSrq::raw(&mut state, requests);
                }
                t.elapsed()
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("posting thread"))
        .max()
        .unwrap_or_default()
}

fn recv_srq_threads(c: &mut Criterion) {
    let mut group = c.benchmark_group(format!("{}_threads", RecvSrq::NAME));
    for batch in BATCHES {
        // Requests posted per iteration by each thread.
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_function(BenchmarkId::new("guard", batch), |b| {
            b.iter_custom(|iters| threads_posting(iters, batch, true))
        });
        group.bench_function(BenchmarkId::new("raw", batch), |b| {
            b.iter_custom(|iters| threads_posting(iters, batch, false))
        });
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    // A row per workload (see benches/common/mod.rs).
    workload::<SendRcWrite>(c);
    workload::<RecvSrq>(c);
    #[cfg(feature = "mlx5")]
    workload::<common::SendDcWrite>(c);
    // Its "raw" is the direct DC initiator's guard. Only the settled pool row: criterion repeats
    // a run until its time is known, and the posting-only row never settles, so its send queue
    // would fill.
    #[cfg(feature = "mlx5")]
    workload::<common::SendDcPoolWriteSettled>(c);
    #[cfg(feature = "mlx5")]
    workload::<common::SendDcPoolDedicatedSettled>(c);
    recv_srq_threads(c);
}

criterion_group!(post_time, benches);
criterion_main!(post_time);
