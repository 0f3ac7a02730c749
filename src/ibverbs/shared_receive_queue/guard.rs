//! [`SharedReceiveQueuePostGuard`]: a batch of receive requests, staged in a [`PostReceiveStorage`] and
//! handed to `ibv_post_srq_recv` in one call.
use std::marker::PhantomData;
use std::ptr::{null_mut, NonNull};

use rdma_mummy_sys::{ibv_post_srq_recv, ibv_recv_wr, ibv_sge, ibv_srq};
use sideway::ibverbs::queue_pair::SetScatterGatherEntry;

use super::post_error::Failure;
use super::storage::{RecvBatch, RecvSlot, Refusal};
use super::{PostReceiveError, PostReceiveErrorKind, PostReceiveStorage, SharedReceiveQueue};

impl SharedReceiveQueue {
    /// Starts a batch of receive requests, staged in the caller's `storage`.
    #[inline]
    pub fn start_post_recv<'a>(&'a self, storage: &'a mut PostReceiveStorage) -> SharedReceiveQueuePostGuard<'a> {
        // SAFETY: the queue is alive for the guard's lifetime and its max_sge is the granted one.
        unsafe { SharedReceiveQueuePostGuard::start(self.srq, self.max_sge, storage) }
    }
}

/// A batch of receive requests for a [`SharedReceiveQueue`], linked in place in its
/// [`PostReceiveStorage`] as they are added. Nothing reaches the library before
/// [`post`](Self::post), which hands the whole batch to `ibv_post_srq_recv` in one call;
/// dropping the guard posts nothing.
#[must_use = "the batch is posted only by post(); dropping the guard posts nothing"]
pub struct SharedReceiveQueuePostGuard<'srq> {
    srq: NonNull<ibv_srq>,
    storage: &'srq mut PostReceiveStorage,
    batch: RecvBatch,
    _srq: PhantomData<&'srq SharedReceiveQueue>,
}

impl<'srq> SharedReceiveQueuePostGuard<'srq> {
    /// [`SharedReceiveQueue::start_post_recv`] on a raw `ibv_srq` this crate did not create.
    ///
    /// # Safety
    ///
    /// - `srq` must be a live shared receive queue for the guard's lifetime;
    /// - `max_sge` must be at most the scatter/gather entries per request it was created with.
    #[inline]
    pub unsafe fn start(srq: NonNull<ibv_srq>, max_sge: u32, storage: &'srq mut PostReceiveStorage) -> Self {
        Self {
            srq,
            storage,
            batch: RecvBatch {
                requests: 0,
                list_entries: 0,
                max_sge,
                refused: None,
            },
            _srq: PhantomData,
        }
    }

    /// Starts a receive request with this `wr_id`; it joins the batch when the returned handle
    /// is given its buffers ([`SetScatterGatherEntry`]; an empty list receives zero-length
    /// messages only).
    #[inline]
    pub fn construct_wr(&mut self, wr_id: u64) -> SharedReceiveQueueRequestHandle<'_> {
        SharedReceiveQueueRequestHandle {
            storage: self.storage,
            batch: &mut self.batch,
            wr_id,
        }
    }

    /// How many requests the batch holds (a refused one is not held).
    #[inline]
    pub fn len(&self) -> usize {
        self.batch.requests
    }

    /// Whether the batch is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Posts the whole batch with one `ibv_post_srq_recv`; on error, [`PostReceiveError`] says
    /// which requests went in.
    #[inline]
    pub fn post(self) -> Result<(), PostReceiveError> {
        let (batch, storage) = (self.batch, self.storage);
        if let Some(refusal) = batch.refused {
            return Err(refused(refusal, batch.max_sge));
        }
        let slots = &mut storage.slots[..batch.requests];
        let Some(last) = slots.last_mut() else {
            return Ok(());
        };
        last.wr.next = null_mut();
        let head = slots.as_mut_ptr().cast::<ibv_recv_wr>();
        let mut bad_wr: *mut ibv_recv_wr = null_mut();
        // SAFETY: the list from head (the first slot's request) is the batch's requests, linked
        // in place in the storage's slots (at their current addresses: `grow` links them again),
        // the last `next` NULL; each names its entries in its slot or the storage's lists; the
        // storage is borrowed, so nothing of it changes during the call; the SRQ is alive for the
        // guard's lifetime (`start`'s promise).
        let ret = unsafe { ibv_post_srq_recv(self.srq.as_ptr(), head, &mut bad_wr) };
        if ret != 0 {
            return Err(failed(slots, ret, bad_wr, batch.max_sge));
        }
        Ok(())
    }
}

/// The error of a batch with a refused request: nothing was posted.
#[cold]
#[inline(never)]
fn refused(refusal: Refusal, max: u32) -> PostReceiveError {
    PostReceiveErrorKind::TooManyScatterGatherEntries {
        index: refusal.index,
        wr_id: refusal.wr_id,
        requested: refusal.requested,
        max,
    }
    .into()
}

/// The error of the batch in `slots` whose library call returned `ret` and named `bad_wr`.
#[cold]
#[inline(never)]
fn failed(slots: &[RecvSlot], ret: i32, bad_wr: *mut ibv_recv_wr, max: u32) -> PostReceiveError {
    // A provider that left bad_wr unset, or named no request of the batch, is taken to have
    // posted nothing.
    let index = slots
        .iter()
        .position(|slot| std::ptr::eq(&*slot.wr, bad_wr))
        .unwrap_or(0);
    Failure {
        ret,
        index,
        wr_id: slots[index].wr.wr_id,
        requested: 0,
        max,
    }
    .into_error()
}

/// One receive request of a [`SharedReceiveQueuePostGuard`] batch: give it its buffers.
#[must_use = "a request joins the batch only when given its buffers (setup_sge or setup_sge_list)"]
pub struct SharedReceiveQueueRequestHandle<'g> {
    storage: &'g mut PostReceiveStorage,
    batch: &'g mut RecvBatch,
    wr_id: u64,
}

impl SetScatterGatherEntry for SharedReceiveQueueRequestHandle<'_> {
    /// # Safety
    ///
    /// The buffer `addr..addr + length` must lie in a memory region registered with `lkey` and
    /// stay valid until the receive completes (or the queue is destroyed).
    #[inline]
    unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) {
        if self.batch.max_sge == 0 {
            return self.batch.refuse(self.wr_id, 1);
        }
        self.batch
            .push_one(self.storage, self.wr_id, ibv_sge { addr, length, lkey });
    }

    /// # Safety
    ///
    /// Each entry's buffer must lie in the memory region registered with its `lkey` and stay
    /// valid until the receive completes (or the queue is destroyed).
    #[inline]
    unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) {
        if sg_list.len() > self.batch.max_sge as usize {
            return self.batch.refuse(self.wr_id, sg_list.len());
        }
        self.batch.push_list(self.storage, self.wr_id, sg_list);
    }
}

#[cfg(test)]
mod tests {
    //! The receive guard over a recording `post_srq_recv`: the lists it hands over, call by call,
    //! and what its errors say went in.
    use std::cell::{Cell, RefCell};

    use rdma_mummy_sys::{ibv_context, ibv_srq};

    use super::*;

    /// One request as the provider saw it: wr_id and its entries as (addr, length, lkey).
    type Request = (u64, Vec<(u64, u32, u32)>);

    thread_local! {
        /// Each call's requests.
        static CALLS: RefCell<Vec<Vec<Request>>> = const { RefCell::new(Vec::new()) };
        /// Fail with ENOMEM at this request (counted over all calls).
        static FAIL_AT: Cell<Option<usize>> = const { Cell::new(None) };
    }

    unsafe extern "C" fn recording_post(
        _: *mut ibv_srq, mut wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr,
    ) -> i32 {
        let seen: usize = CALLS.with(|calls| calls.borrow().iter().map(Vec::len).sum());
        let mut list = Vec::new();
        while !wr.is_null() {
            if FAIL_AT.get() == Some(seen + list.len()) {
                CALLS.with(|calls| calls.borrow_mut().push(list));
                *bad_wr = wr;
                return libc::ENOMEM;
            }
            let sges = std::slice::from_raw_parts((*wr).sg_list, (*wr).num_sge as usize);
            list.push(((*wr).wr_id, sges.iter().map(|s| (s.addr, s.length, s.lkey)).collect()));
            wr = (*wr).next;
        }
        CALLS.with(|calls| calls.borrow_mut().push(list));
        0
    }

    struct FakeSrq {
        _context: Box<ibv_context>,
        srq: Box<ibv_srq>,
    }

    fn fake_srq() -> FakeSrq {
        // SAFETY: zeroes are valid for these plain C structs.
        let mut context: Box<ibv_context> = Box::new(unsafe { std::mem::MaybeUninit::zeroed().assume_init() });
        context.ops.post_srq_recv = Some(recording_post);
        // SAFETY: as above.
        let mut srq: Box<ibv_srq> = Box::new(unsafe { std::mem::MaybeUninit::zeroed().assume_init() });
        srq.context = &mut *context;
        CALLS.with(|calls| calls.borrow_mut().clear());
        FAIL_AT.set(None);
        FakeSrq { _context: context, srq }
    }

    impl FakeSrq {
        fn start<'a>(
            &'a mut self, max_sge: u32, storage: &'a mut PostReceiveStorage,
        ) -> SharedReceiveQueuePostGuard<'a> {
            // SAFETY: the fake SRQ outlives the guard, which borrows it.
            unsafe { SharedReceiveQueuePostGuard::start(NonNull::from(&mut *self.srq), max_sge, storage) }
        }
    }

    fn calls() -> Vec<Vec<Request>> {
        CALLS.with(|calls| std::mem::take(&mut *calls.borrow_mut()))
    }

    fn sge(addr: u64, length: u32, lkey: u32) -> ibv_sge {
        ibv_sge { addr, length, lkey }
    }

    /// Adds `count` one-entry requests with wr_ids from `first`.
    fn add(guard: &mut SharedReceiveQueuePostGuard<'_>, first: u64, count: u64) {
        for wr_id in first..first + count {
            // SAFETY: the recorder only reads the entries.
            unsafe { guard.construct_wr(wr_id).setup_sge(1, wr_id, 1) };
        }
    }

    #[test]
    fn a_large_batch_goes_over_in_one_call_on_post_with_every_request_intact() {
        let mut fake = fake_srq();
        let mut storage = PostReceiveStorage::new();
        let mut guard = fake.start(4, &mut storage);
        for i in 0..200u64 {
            let handle = guard.construct_wr(i);
            // SAFETY: the recorder only reads the entries.
            unsafe {
                match i % 3 {
                    0 => handle.setup_sge(7, 0x1000 * i, 64),
                    1 => handle.setup_sge_list(&[sge(i, 1, 1), sge(i, 2, 2)]),
                    _ => handle.setup_sge_list(&[]),
                }
            }
            // A request dropped before its data step adds nothing.
            let _ = guard.construct_wr(9999);
        }
        assert_eq!(guard.len(), 200);
        assert!(
            calls().is_empty(),
            "nothing reaches the library before post(), past 64 requests too"
        );
        guard.post().expect("recorded post succeeds");
        let calls = calls();
        assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), [200]);
        for (i, (wr_id, sges)) in calls.into_iter().flatten().enumerate() {
            let i = i as u64;
            assert_eq!(wr_id, i);
            let expected = match i % 3 {
                0 => vec![(0x1000 * i, 64, 7)],
                1 => vec![(i, 1, 1), (i, 2, 2)],
                _ => vec![],
            };
            assert_eq!(sges, expected, "request {i}");
        }
    }

    #[test]
    fn a_dropped_guard_posts_nothing_and_its_storage_serves_the_next_batch() {
        let mut fake = fake_srq();
        let mut storage = PostReceiveStorage::new();
        let mut guard = fake.start(1, &mut storage);
        add(&mut guard, 0, 300);
        drop(guard);
        assert!(calls().is_empty(), "a dropped guard posts nothing");
        let capacity = storage.capacity();
        assert!(capacity >= 300);
        // A smaller batch in the same storage: only its own requests go over.
        let mut guard = fake.start(1, &mut storage);
        add(&mut guard, 1000, 3);
        guard.post().unwrap();
        let calls = calls();
        assert_eq!(
            calls,
            [vec![
                (1000, vec![(1000, 1, 1)]),
                (1001, vec![(1001, 1, 1)]),
                (1002, vec![(1002, 1, 1)])
            ]]
        );
        assert_eq!(storage.capacity(), capacity, "the storage is reused, not grown");
    }

    #[test]
    fn a_list_longer_than_the_storage_stays_in_the_batch_in_order() {
        let mut fake = fake_srq();
        let mut storage = PostReceiveStorage::with_capacity(2, 2);
        let long: Vec<ibv_sge> = (0..100).map(|k| sge(k, 1, 9)).collect();
        let mut guard = fake.start(200, &mut storage);
        // SAFETY: the recorder only reads the entries.
        unsafe {
            guard.construct_wr(1).setup_sge(1, 1, 1);
            guard.construct_wr(2).setup_sge_list(&long);
            guard.construct_wr(3).setup_sge(3, 3, 3);
        }
        guard.post().unwrap();
        let calls = calls();
        let ids: Vec<Vec<u64>> = calls.iter().map(|c| c.iter().map(|r| r.0).collect()).collect();
        assert_eq!(ids, [vec![1, 2, 3]]);
        assert_eq!(calls[0][0].1, [(1, 1, 1)]);
        assert_eq!(calls[0][1].1.len(), 100);
        assert_eq!(calls[0][1].1[99], (99, 1, 9));
        assert_eq!(calls[0][2].1, [(3, 3, 3)]);
    }

    #[test]
    fn too_many_entries_posts_nothing_of_the_batch() {
        let mut fake = fake_srq();
        let mut storage = PostReceiveStorage::new();
        let mut guard = fake.start(1, &mut storage);
        add(&mut guard, 0, 66);
        // SAFETY: the recorder only reads the entries.
        unsafe { guard.construct_wr(66).setup_sge_list(&[sge(1, 1, 1), sge(1, 1, 1)]) };
        add(&mut guard, 67, 3);
        let err = guard.post().unwrap_err();
        assert_eq!((err.failed_index(), err.posted(), err.wr_id()), (66, 0, 66));
        assert!(matches!(
            err.0,
            PostReceiveErrorKind::TooManyScatterGatherEntries {
                requested: 2,
                max: 1,
                ..
            }
        ));
        assert!(calls().is_empty(), "a refused request posts nothing of its batch");
    }

    #[test]
    fn a_full_queue_says_which_request_failed_and_how_many_went_in() {
        let mut fake = fake_srq();
        FAIL_AT.set(Some(100));
        let mut storage = PostReceiveStorage::new();
        let mut guard = fake.start(1, &mut storage);
        add(&mut guard, 1000, 150);
        let err = guard.post().unwrap_err();
        assert_eq!((err.failed_index(), err.posted(), err.wr_id()), (100, 100, 1100));
        assert!(matches!(err.0, PostReceiveErrorKind::QueueFull { .. }));
        // What the error says went in is what the provider took, in one call: the first 100, in
        // order (the recorder keeps the requests before the one it refuses).
        let calls = calls();
        assert_eq!(calls.len(), 1);
        let went_in: Vec<u64> = calls.into_iter().flatten().map(|(wr_id, _)| wr_id).collect();
        assert_eq!(went_in, (1000..1000 + err.posted() as u64).collect::<Vec<_>>());
    }

    #[test]
    fn nested_guards_on_one_queue_keep_their_batches_apart() {
        let fake = fake_srq();
        let srq = NonNull::from(&*fake.srq);
        let (mut outer_storage, mut inner_storage) = (PostReceiveStorage::new(), PostReceiveStorage::new());
        // SAFETY: the fake SRQ outlives both guards.
        let mut outer = unsafe { SharedReceiveQueuePostGuard::start(srq, 1, &mut outer_storage) };
        // SAFETY: as above.
        let mut inner = unsafe { SharedReceiveQueuePostGuard::start(srq, 1, &mut inner_storage) };
        // SAFETY: the recorder only reads the entries.
        unsafe {
            outer.construct_wr(1).setup_sge(1, 1, 1);
            inner.construct_wr(2).setup_sge(2, 2, 2);
            outer.construct_wr(3).setup_sge(3, 3, 3);
        }
        drop(inner);
        outer.post().unwrap();
        assert_eq!(
            calls(),
            [vec![(1, vec![(1, 1, 1)]), (3, vec![(3, 3, 3)])]],
            "the dropped guard's request was discarded"
        );
    }

    #[test]
    fn a_moved_guard_and_a_moved_storage_keep_the_list_intact() {
        let mut fake = fake_srq();
        let mut storage = Box::new(PostReceiveStorage::new());
        let mut guard = fake.start(1, &mut storage);
        add(&mut guard, 1, 1);
        let mut moved = vec![guard];
        add(&mut moved[0], 2, 1);
        moved.pop().unwrap().post().unwrap();
        assert_eq!(calls(), [vec![(1, vec![(1, 1, 1)]), (2, vec![(2, 1, 1)])]]);
        // The storage itself moves between batches (its requests live on the heap).
        let mut storage = *storage;
        let mut guard = fake.start(1, &mut storage);
        add(&mut guard, 3, 2);
        guard.post().unwrap();
        assert_eq!(calls(), [vec![(3, vec![(3, 1, 1)]), (4, vec![(4, 1, 1)])]]);
    }
}
