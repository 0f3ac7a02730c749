//! [`PostSrqRecvGuard`]: receive requests for a [`SharedReceiveQueue`], handed to
//! `ibv_post_srq_recv` in one call, in the shape of sideway's [`PostRecvGuard`].
//!
//! [`PostRecvGuard`]: sideway::ibverbs::queue_pair::PostRecvGuard
use std::io;
use std::marker::PhantomData;
use std::ptr::{null_mut, NonNull};

use rdma_mummy_sys::{ibv_post_srq_recv, ibv_recv_wr, ibv_sge, ibv_srq};
use sideway::ibverbs::queue_pair::{PostRecvError, SetScatterGatherEntry};

use super::SharedReceiveQueue;
use crate::ibverbs::zeroed::Zeroed;

impl SharedReceiveQueue {
    /// Starts a list of receive requests, posted together by [`PostSrqRecvGuard::post`].
    /// `&self`: posting on a shared receive queue is thread-safe.
    pub fn start_post_recv(&self) -> PostSrqRecvGuard<'_> {
        PostSrqRecvGuard {
            srq: self.srq,
            wrs: Vec::new(),
            sges: Vec::new(),
            _srq: PhantomData,
        }
    }
}

/// Receive requests for a [`SharedReceiveQueue`], as sideway's `PostRecvGuard` is for a queue
/// pair: nothing reaches the library before [`post`](Self::post); dropping the guard posts
/// nothing.
#[must_use = "the requests are posted only by post(); dropping the guard posts nothing"]
pub struct PostSrqRecvGuard<'srq> {
    srq: NonNull<ibv_srq>,
    wrs: Vec<Zeroed<ibv_recv_wr>>,
    sges: Vec<ibv_sge>,
    _srq: PhantomData<&'srq SharedReceiveQueue>,
}

impl<'srq> PostSrqRecvGuard<'srq> {
    /// Starts a receive request with this `wr_id`; it joins the list when the returned handle is
    /// given its buffers ([`SetScatterGatherEntry`]; an empty list receives zero-length messages).
    pub fn construct_wr<'g>(&'g mut self, wr_id: u64) -> SrqRecvWorkRequestHandle<'g, 'srq> {
        SrqRecvWorkRequestHandle { guard: self, wr_id }
    }

    /// Links the requests and posts them with one `ibv_post_srq_recv` (none: no call). The
    /// provider refuses a request with more entries than the queue's `max_sge` with `EINVAL`
    /// (`rxe_post_one_recv`, `mlx5_post_srq_recv`).
    pub fn post(mut self) -> Result<(), PostSrqRecvError> {
        if self.wrs.is_empty() {
            return Ok(());
        }
        let (count, mut sges) = (self.wrs.len(), self.sges.as_mut_ptr());
        let head = self.wrs.as_mut_ptr().cast::<ibv_recv_wr>();
        // SAFETY: `Zeroed` is transparent: `head` is an array of `count` requests, each linked to
        // the next (the last to none) and to its entries, at most those it pushed, in order: the
        // sum stays within `sges`.
        unsafe {
            for index in 0..count {
                let wr = head.add(index);
                (*wr).sg_list = sges;
                sges = sges.add((*wr).num_sge as usize);
                (*wr).next = wr.add(1);
            }
            (*head.add(count - 1)).next = null_mut();
        }
        let mut bad_wr = null_mut();
        // SAFETY: the list is the guard's requests, linked to their entries in `sges` above (the
        // vectors do not change until the call returns); the queue outlives the guard.
        let ret = unsafe { ibv_post_srq_recv(self.srq.as_ptr(), head, &mut bad_wr) };
        if ret == 0 {
            return Ok(());
        }
        // A provider that names no request of the list is taken to have posted none.
        let index = self.wrs.iter().position(|wr| std::ptr::eq(&**wr, bad_wr)).unwrap_or(0);
        Err(PostSrqRecvError::new(index, self.wrs[index].wr_id, ret))
    }
}

/// A receive request of a [`PostSrqRecvGuard`]: give it its buffers.
#[must_use = "a request joins the list only when given its buffers (setup_sge or setup_sge_list)"]
pub struct SrqRecvWorkRequestHandle<'g, 'srq> {
    guard: &'g mut PostSrqRecvGuard<'srq>,
    wr_id: u64,
}

impl SrqRecvWorkRequestHandle<'_, '_> {
    fn push(self, sg_list: &[ibv_sge]) {
        let mut wr = Zeroed::<ibv_recv_wr>::new();
        wr.wr_id = self.wr_id;
        // Past i32::MAX entries, the provider refuses the request (and reads none of them).
        wr.num_sge = sg_list.len().min(i32::MAX as usize) as i32;
        self.guard.wrs.push(wr);
        self.guard.sges.extend_from_slice(sg_list);
    }
}

impl SetScatterGatherEntry for SrqRecvWorkRequestHandle<'_, '_> {
    /// # Safety
    ///
    /// The buffer must lie in the memory region registered with `lkey` and stay valid until the
    /// receive completes (or the queue is destroyed).
    unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) {
        self.push(&[ibv_sge { addr, length, lkey }]);
    }

    /// # Safety
    ///
    /// As for [`setup_sge`](Self::setup_sge), for each entry.
    unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) {
        self.push(sg_list);
    }
}

/// Error returned by [`PostSrqRecvGuard::post`]: the requests before [`index`](Self::index)
/// were posted (`ibv_post_srq_recv` stops at `bad_wr`), the others not.
#[derive(Debug, thiserror::Error)]
#[error("failed to post receive request {index} (wr_id {wr_id}); those before it were posted")]
pub struct PostSrqRecvError {
    index: usize,
    wr_id: u64,
    #[source]
    kind: PostRecvError,
}

impl PostSrqRecvError {
    /// The error of request `index` (`wr_id`), from the library's errno, mapped as sideway maps
    /// `ibv_post_recv`'s.
    #[cold]
    pub(crate) fn new(index: usize, wr_id: u64, ret: i32) -> Self {
        let err = io::Error::from_raw_os_error(ret);
        let kind = match ret {
            libc::EINVAL => PostRecvError::InvalidWorkRequest(err),
            libc::ENOMEM => PostRecvError::NotEnoughResources(err),
            libc::EFAULT => PostRecvError::InvalidQueuePair(err),
            _ => PostRecvError::Ibverbs(err),
        };
        Self { index, wr_id, kind }
    }

    /// Index of the first request not posted.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Its `wr_id`.
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// Why, as sideway's `ibv_post_recv` errors say it.
    pub fn kind(&self) -> &PostRecvError {
        &self.kind
    }
}
