//! Posting allocates nothing per batch once warm, also with several threads posting to one SRQ:
//! the benchmarks' counting provider tables (benches/common/mod.rs), under a global allocator
//! that counts. Host-only (no device).
#[path = "../benches/common/mod.rs"]
mod workloads;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use workloads::{CountingSrq, RecvSrq, SendRcWrite, Workload, BATCHES};

/// Counts the allocations of every thread.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Other tests of this binary run concurrently and allocate: the tests take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn allocations_while(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    f();
    ALLOCATIONS.load(Ordering::SeqCst) - before
}

fn no_allocation_once_warm<W: Workload>() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for batch in BATCHES {
        // setup posts a batch each way: the guard's storage has grown.
        let mut state = W::setup(batch);
        let before = W::posted(&state);
        let n = allocations_while(|| {
            W::guard(&mut state, 64 * batch);
            W::raw(&mut state, 64 * batch);
        });
        assert_eq!(n, 0, "{} batch {batch}: {n} allocations in 128 batches", W::NAME);
        assert_eq!(W::posted(&state) - before, 128 * batch as u64);
    }
}

#[test]
fn sends_allocate_nothing_per_batch() {
    no_allocation_once_warm::<SendRcWrite>();
}

#[test]
fn receives_allocate_nothing_per_batch() {
    no_allocation_once_warm::<RecvSrq>();
}

#[test]
fn threads_posting_to_one_srq_allocate_nothing_per_batch() {
    const THREADS: usize = 4;
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for batch in BATCHES {
        let srq = CountingSrq::new();
        // ready: every thread is warm; go: they post; done: they have posted.
        let barrier = || Arc::new(Barrier::new(THREADS + 1));
        let (ready, go, done) = (barrier(), barrier(), barrier());
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (srq, ready, go, done) = (srq.clone(), ready.clone(), go.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut state = RecvSrq::setup_on(srq, batch);
                    ready.wait();
                    go.wait();
                    RecvSrq::guard(&mut state, 256 * batch);
                    done.wait();
                })
            })
            .collect();
        ready.wait();
        let n = allocations_while(|| {
            go.wait();
            done.wait();
        });
        for thread in threads {
            thread.join().expect("posting thread");
        }
        assert_eq!(n, 0, "batch {batch}: {n} allocations while {THREADS} threads posted 256 batches each");
        // Each thread's setup posted a batch each way.
        assert_eq!(srq.requests(), (THREADS * (256 + 2) * batch) as u64);
    }
}
