//! The post guards allocate nothing and take no lock per batch, also with several threads posting
//! to one shared receive queue: counted with a global allocator, over hand-made provider tables
//! (no device needed).
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rdma_mummy_sys::{ibv_context, ibv_qp_ex, ibv_recv_wr, ibv_sge, ibv_srq};
use sideway::ibverbs::queue_pair::{SendOperationFlags, SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::ibverbs::post_send_guard::{PostSendGuard, ProviderEntries, ReliableConnection};
use sideway_ext::ibverbs::shared_receive_queue::PostReceiveGuard;

/// Counts this thread's allocations.
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a thread-local Cell without
// destructor, so counting allocates nothing.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

static POSTED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn post_srq_recv(_: *mut ibv_srq, mut wr: *mut ibv_recv_wr, _: *mut *mut ibv_recv_wr) -> i32 {
    while !wr.is_null() {
        assert_eq!((*wr).num_sge, 1);
        POSTED.fetch_add(1, Ordering::Relaxed);
        wr = (*wr).next;
    }
    0
}

struct FakeSrq {
    _context: Box<ibv_context>,
    srq: Box<ibv_srq>,
}

// SAFETY: the fake provider's only state is an atomic counter.
unsafe impl Send for FakeSrq {}
// SAFETY: as above.
unsafe impl Sync for FakeSrq {}

#[test]
fn receive_batches_allocate_nothing_on_several_threads() {
    // SAFETY: zeroes are valid for these plain C structs.
    let mut context: Box<ibv_context> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
    context.ops.post_srq_recv = Some(post_srq_recv);
    // SAFETY: as above.
    let mut srq: Box<ibv_srq> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
    srq.context = &mut *context;
    let fake = Arc::new(FakeSrq { _context: context, srq });
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let fake = Arc::clone(&fake);
            std::thread::spawn(move || {
                let srq = NonNull::new(&*fake.srq as *const ibv_srq as *mut ibv_srq).unwrap();
                let before = allocations();
                for batch in [1usize, 16, 256, 1000] {
                    for _ in 0..10 {
                        // SAFETY: the fake SRQ outlives the guard.
                        let mut guard = unsafe { PostReceiveGuard::start(srq, 1) };
                        for i in 0..batch {
                            // SAFETY: the fake provider only reads the entries.
                            unsafe { guard.construct_wr(i as u64).setup_sge(1, 0x1000, 64) };
                        }
                        guard.post().expect("fake post");
                    }
                }
                allocations() - before
            })
        })
        .collect();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), 0, "allocations while posting receives");
    }
    assert_eq!(POSTED.load(Ordering::Relaxed), 4 * 10 * (1 + 16 + 256 + 1000));
}

unsafe extern "C" fn noop(_: *mut ibv_qp_ex) {}
unsafe extern "C" fn complete(_: *mut ibv_qp_ex) -> i32 {
    0
}
unsafe extern "C" fn write(_: *mut ibv_qp_ex, _: u32, _: u64) {}
unsafe extern "C" fn sge(_: *mut ibv_qp_ex, _: u32, _: u64, _: u32) {}
unsafe extern "C" fn sge_list(_: *mut ibv_qp_ex, _: usize, _: *const ibv_sge) {}

#[test]
fn send_batches_allocate_nothing() {
    // SAFETY: zeroes are valid for ibv_qp_ex (plain data and optional function pointers).
    let mut qp: Box<ibv_qp_ex> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
    qp.wr_start = Some(noop);
    qp.wr_abort = Some(noop);
    qp.wr_complete = Some(complete);
    qp.wr_rdma_write = Some(write);
    qp.wr_set_sge = Some(sge);
    qp.wr_set_sge_list = Some(sge_list);
    let qp_ex = NonNull::from(&mut *qp);
    // SAFETY: qp_ex is a live table.
    let entries = unsafe { ProviderEntries::new(qp_ex, SendOperationFlags::Write) }.unwrap();
    let before = allocations();
    for batch in [1usize, 16, 256] {
        // SAFETY: the table outlives the guard; RC needs no context.
        let mut guard = unsafe { PostSendGuard::<ReliableConnection>::start(qp_ex, entries, ()) };
        for i in 0..batch {
            // SAFETY: the fake provider ignores the buffer.
            unsafe {
                guard
                    .construct_wr(i as u64, WorkRequestFlags::Signaled)
                    .setup_write(1, 0x1000)
                    .setup_sge(2, 0x2000, 64)
            };
        }
        guard.post().expect("fake post");
        // A batch with a refused request allocates nothing either.
        // SAFETY: as above.
        let mut guard = unsafe { PostSendGuard::<ReliableConnection>::start(qp_ex, entries, ()) };
        // SAFETY: as above (the request is refused: no SEND builder).
        unsafe {
            guard
                .construct_wr(1, WorkRequestFlags::Signaled)
                .setup_send()
                .setup_sge_list(&[])
        };
        assert!(guard.post().is_err());
    }
    assert_eq!(allocations() - before, 0, "allocations while posting sends");
}
