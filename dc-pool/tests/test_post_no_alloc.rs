//! Posting sends allocates nothing per batch once warm, also through a DC initiator pool (with
//! `--features mlx5`):
//! the benchmarks' counting provider tables (benches/common/mod.rs), under a global allocator
//! that counts. Host-only (no device).
#[path = "../benches/common/mod.rs"]
mod workloads;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use workloads::{SendRcWrite, Workload, BATCHES};

/// Counts each thread's allocations (the test harness's threads allocate meanwhile).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: forwards to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The allocations this thread makes in `f`.
fn allocations_while(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

fn no_allocation_once_warm<W: Workload>() {
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

/// DC sends, directly on a DC initiator and through a DC initiator pool (posting, and settling
/// each batch's requests with a completion, the same post path as the posting-only row, whose
/// send queue would fill in 128 batches; and the dedicated policy's 1 024 destinations round
/// robin, each batch granted an initiator and giving it back).
#[test]
fn dc_sends_allocate_nothing_per_batch_also_through_a_pool() {
    no_allocation_once_warm::<workloads::SendDcWrite>();
    no_allocation_once_warm::<workloads::SendDcPoolWriteSettled>();
    no_allocation_once_warm::<workloads::SendDcPoolDedicatedSettled>();
}
