//! What posting receives to an SRQ allocates, on libmlx5's own `mlx5_post_srq_recv`: nothing for
//! a one-request post; for a batch, the guard's two lists (as sideway's `PostRecvGuard`), never
//! one allocation per request.
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rdma_mummy_sys::ibv_sge;
use sideway::ibverbs::device::DeviceList;
use sideway::ibverbs::queue_pair::{PostRecvError, SetScatterGatherEntry};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::ProtectionDomainExt;

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

/// The allocations this thread makes in `f`, and what `f` returned.
fn allocations_while<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = ALLOCATIONS.with(Cell::get);
    let value = f();
    (ALLOCATIONS.with(Cell::get) - before, value)
}

const CAPACITY: u32 = 256;

#[test]
fn a_one_request_post_allocates_nothing_and_a_batch_only_its_two_lists() {
    on_device!();
    let list = DeviceList::new().unwrap();
    let ctx = list.iter().next().expect("softmlx5_0").open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let srq = pd.create_srq_builder().setup_max_wr(CAPACITY).build().unwrap();
    let mut memory = vec![0u8; 64];
    // SAFETY: `memory` outlives the region (dropped after it) and is not moved.
    let mr = unsafe { pd.reg_mr(memory.as_mut_ptr() as usize, memory.len(), AccessFlags::LocalWrite) }.unwrap();
    let sge = [ibv_sge {
        addr: memory.as_ptr() as u64,
        length: 64,
        lkey: mr.lkey(),
    }];
    // The queue may hold more than it was asked for: fill it up, counting. (What `query` reads
    // back counts libmlx5's wait queue too: twice as much.)
    let granted = srq.max_wr() as u64;
    assert!(granted >= CAPACITY as u64);
    assert!(srq.query().unwrap().max_wr as u64 > granted);

    // Half of it one request at a time: no allocation at all.
    let half = granted / 2;
    let (allocations, posted) = allocations_while(|| {
        (0..half)
            // SAFETY: the entry names `memory`, registered as `mr`; both outlive the queue.
            .map(|wr_id| unsafe { srq.post_recv_one(wr_id, &sge) })
            .filter(Result::is_ok)
            .count() as u64
    });
    assert_eq!((posted, allocations), (half, 0));

    // The rest in one batch: the guard's two lists, however many requests.
    let (allocations, result) = allocations_while(|| {
        let mut guard = srq.start_post_recv();
        for wr_id in half..granted {
            // SAFETY: as above.
            unsafe { guard.construct_wr(wr_id).setup_sge_list(&sge) };
        }
        guard.post()
    });
    result.unwrap();
    // Each list doubles as it grows: at most a few allocations per doubling of the batch.
    let doublings = u64::BITS - (granted - half).leading_zeros();
    assert!(
        (1..=2 * doublings as u64 + 2).contains(&allocations),
        "{allocations} allocations for {} requests",
        granted - half
    );

    // Every request went in: the queue is full, the next one is refused.
    // SAFETY: as above.
    let err = unsafe { srq.post_recv_one(granted, &sge) }.unwrap_err();
    assert!(matches!(err.kind(), PostRecvError::NotEnoughResources(_)), "{err:?}");
    drop(srq);
    drop(mr);
}
