//! Posting send work requests with the `ibv_wr_*` API, for every queue-pair type of this crate.
//!
//! A [`PostSendGuard`] batches requests between `ibv_wr_start` and `ibv_wr_complete`. Each request
//! is built in the order the C API demands, enforced by types: [`construct_wr`](PostSendGuard::construct_wr)
//! (sets `wr_id` and flags) → an opcode (`setup_send`, `setup_write`, …) → for datagram transports,
//! the destination (`setup_ud_addr`, or `setup_dc_addr` with the `mlx5` feature) → the data
//! ([`SetScatterGatherEntry`] or [`SetInlineData`]). A request that skipped a step cannot be
//! expressed. The guard aborts the batch (`ibv_wr_abort`) when dropped without
//! [`post`](PostSendGuard::post).
//!
//! # Reference
//!
//! - rdma-core manpage: [`ibv_wr_post`](https://man7.org/linux/man-pages/man3/ibv_wr_post.3.html)
use std::io::{self, IoSlice};
use std::marker::PhantomData;
use std::ptr::NonNull;

use rdma_mummy_sys::{
    ibv_data_buf, ibv_qp_ex, ibv_sge, ibv_wr_abort, ibv_wr_atomic_cmp_swp, ibv_wr_atomic_fetch_add, ibv_wr_complete,
    ibv_wr_rdma_read, ibv_wr_rdma_write, ibv_wr_rdma_write_imm, ibv_wr_send, ibv_wr_send_imm, ibv_wr_set_inline_data,
    ibv_wr_set_inline_data_list, ibv_wr_set_sge, ibv_wr_set_sge_list, ibv_wr_set_ud_addr, ibv_wr_start,
};
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};

use super::address_handle::AddressHandle;

/// Error returned by [`PostSendGuard::post`]. `ibv_wr_complete` posts a batch whole or not at
/// all: on error none of its [`batch_len`](Self::batch_len) requests was posted.
#[derive(Debug, thiserror::Error)]
#[error("failed to post a batch of {} send requests; none was posted", .0.batch_len())]
#[non_exhaustive]
pub struct PostSendError(#[from] pub PostSendErrorKind);

impl PostSendError {
    /// How many requests the failed batch held (none of them was posted).
    pub fn batch_len(&self) -> usize {
        self.0.batch_len()
    }
}

/// The enum type for [`PostSendError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostSendErrorKind {
    /// A request was invalid (EINVAL): an unsupported opcode, too many scatter/gather entries,
    /// inline data over the queue pair's limit, a missing destination.
    #[error("a request in the batch of {batch_len} is invalid")]
    InvalidWorkRequest {
        /// Requests in the batch.
        batch_len: usize,
        /// The library's error.
        source: io::Error,
    },
    /// The send queue is full (ENOMEM).
    #[error("the send queue has no room for the batch of {batch_len}")]
    QueueFull {
        /// Requests in the batch.
        batch_len: usize,
        /// The library's error.
        source: io::Error,
    },
    /// Any other error of the library.
    #[error("posting the batch of {batch_len} failed")]
    Ibverbs {
        /// Requests in the batch.
        batch_len: usize,
        /// The library's error.
        source: io::Error,
    },
}

impl PostSendErrorKind {
    fn batch_len(&self) -> usize {
        match self {
            Self::InvalidWorkRequest { batch_len, .. }
            | Self::QueueFull { batch_len, .. }
            | Self::Ibverbs { batch_len, .. } => *batch_len,
        }
    }
}

mod sealed {
    // Transports are this crate's: each one's guarantees (which opcodes, which destination
    // setter) depend on how its queue pairs were created.
    pub trait Sealed {}
}

/// How the requests of a queue-pair type are addressed: nothing for RC (the connection is the
/// address), an address handle and remote QPN/Q_Key for UD, an address handle, DCT number and
/// DC key for DC. Sealed.
pub trait Transport: sealed::Sealed + Sized {
    /// Per-queue-pair data the destination setter needs (the mlx5 view of a DC initiator).
    #[doc(hidden)]
    type Context: Copy + Default;
    /// What an opcode leads to: the data step, or first the destination step.
    type AfterOpcode<'g>;
    #[doc(hidden)]
    fn after_opcode<'g>(qp_ex: NonNull<ibv_qp_ex>, context: Self::Context) -> Self::AfterOpcode<'g>;
}

/// Transports on which RDMA reads, writes and atomics can be posted.
pub trait RemoteMemoryAccess: Transport {}

/// The reliable-connection transport (RC).
#[derive(Debug)]
pub enum ReliableConnection {}

impl sealed::Sealed for ReliableConnection {}

impl Transport for ReliableConnection {
    type Context = ();
    type AfterOpcode<'g> = LocalBufferHandle<'g>;

    fn after_opcode<'g>(qp_ex: NonNull<ibv_qp_ex>, _context: ()) -> LocalBufferHandle<'g> {
        LocalBufferHandle::new(qp_ex)
    }
}

impl RemoteMemoryAccess for ReliableConnection {}

/// The unreliable-datagram transport (UD): every request names its destination.
#[derive(Debug)]
pub enum UnreliableDatagram {}

impl sealed::Sealed for UnreliableDatagram {}

impl Transport for UnreliableDatagram {
    type Context = ();
    type AfterOpcode<'g> = UnreliableDatagramDestination<'g>;

    fn after_opcode<'g>(qp_ex: NonNull<ibv_qp_ex>, _context: ()) -> UnreliableDatagramDestination<'g> {
        UnreliableDatagramDestination {
            qp_ex,
            _guard: PhantomData,
        }
    }
}

/// A batch of send requests on one queue pair; see the [module](self) documentation.
#[must_use = "the batch is posted only by post(); dropping the guard aborts it"]
pub struct PostSendGuard<'qp, T: Transport> {
    qp_ex: NonNull<ibv_qp_ex>,
    context: T::Context,
    batch_len: usize,
    _qp: PhantomData<&'qp mut ()>,
}

impl<T: Transport> PostSendGuard<'_, T> {
    /// Starts a batch with `ibv_wr_start`.
    ///
    /// # Safety
    ///
    /// `qp_ex` must be the extended view of a live queue pair created with the send operations
    /// that will be posted, exclusively borrowed for the guard's lifetime, and `context` what
    /// `T` needs for it.
    pub(crate) unsafe fn start(qp_ex: NonNull<ibv_qp_ex>, context: T::Context) -> Self {
        ibv_wr_start(qp_ex.as_ptr());
        Self {
            qp_ex,
            context,
            batch_len: 0,
            _qp: PhantomData,
        }
    }

    /// Starts a new request with this `wr_id` and flags (e.g. [`WorkRequestFlags::Signaled`] for
    /// a completion); continue with an opcode on the returned handle.
    pub fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> WorkRequestHandle<'_, T> {
        // SAFETY: the queue pair is alive and exclusively borrowed by the guard.
        unsafe {
            let qp_ex = self.qp_ex.as_ptr();
            (*qp_ex).wr_id = wr_id;
            (*qp_ex).wr_flags = wr_flags.bits();
        }
        self.batch_len += 1;
        WorkRequestHandle {
            qp_ex: self.qp_ex,
            context: self.context,
            _guard: PhantomData,
        }
    }

    /// How many requests the batch holds.
    pub fn batch_len(&self) -> usize {
        self.batch_len
    }

    /// Posts the batch with `ibv_wr_complete`: all of it, or on error none of it.
    pub fn post(self) -> Result<(), PostSendError> {
        let batch_len = self.batch_len;
        // SAFETY: the batch was started on this live queue pair by `start`.
        let ret = unsafe { ibv_wr_complete(self.qp_ex.as_ptr()) };
        // The batch is finished either way: it must not be aborted too.
        std::mem::forget(self);
        if ret == 0 {
            return Ok(());
        }
        let source = io::Error::from_raw_os_error(ret);
        Err(match ret {
            libc::EINVAL => PostSendErrorKind::InvalidWorkRequest { batch_len, source },
            libc::ENOMEM => PostSendErrorKind::QueueFull { batch_len, source },
            _ => PostSendErrorKind::Ibverbs { batch_len, source },
        }
        .into())
    }
}

impl<T: Transport> Drop for PostSendGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the batch was started by `start` and not completed.
        unsafe { ibv_wr_abort(self.qp_ex.as_ptr()) };
    }
}

/// One request being built: pick its opcode.
pub struct WorkRequestHandle<'g, T: Transport> {
    qp_ex: NonNull<ibv_qp_ex>,
    context: T::Context,
    _guard: PhantomData<&'g mut ()>,
}

impl<'g, T: Transport> WorkRequestHandle<'g, T> {
    fn next(self) -> T::AfterOpcode<'g> {
        T::after_opcode(self.qp_ex, self.context)
    }

    /// A SEND (`ibv_wr_send`).
    pub fn setup_send(self) -> T::AfterOpcode<'g> {
        // SAFETY: the guard holds the live queue pair inside a started batch.
        unsafe { ibv_wr_send(self.qp_ex.as_ptr()) };
        self.next()
    }

    /// A SEND with immediate data (`ibv_wr_send_imm`); `imm_data` is sent as given (the C API
    /// takes it in network byte order: use `u32::to_be` to match a C peer).
    pub fn setup_send_imm(self, imm_data: u32) -> T::AfterOpcode<'g> {
        // SAFETY: as in setup_send.
        unsafe { ibv_wr_send_imm(self.qp_ex.as_ptr(), imm_data) };
        self.next()
    }
}

impl<'g, T: RemoteMemoryAccess> WorkRequestHandle<'g, T> {
    /// An RDMA WRITE to `remote_addr` in the remote region of `rkey` (`ibv_wr_rdma_write`).
    pub fn setup_write(self, rkey: u32, remote_addr: u64) -> T::AfterOpcode<'g> {
        // SAFETY: as in setup_send.
        unsafe { ibv_wr_rdma_write(self.qp_ex.as_ptr(), rkey, remote_addr) };
        self.next()
    }

    /// An RDMA WRITE with immediate data (`ibv_wr_rdma_write_imm`).
    pub fn setup_write_imm(self, rkey: u32, remote_addr: u64, imm_data: u32) -> T::AfterOpcode<'g> {
        // SAFETY: as in setup_send.
        unsafe { ibv_wr_rdma_write_imm(self.qp_ex.as_ptr(), rkey, remote_addr, imm_data) };
        self.next()
    }

    /// An RDMA READ from `remote_addr` in the remote region of `rkey` (`ibv_wr_rdma_read`).
    pub fn setup_read(self, rkey: u32, remote_addr: u64) -> T::AfterOpcode<'g> {
        // SAFETY: as in setup_send.
        unsafe { ibv_wr_rdma_read(self.qp_ex.as_ptr(), rkey, remote_addr) };
        self.next()
    }

    /// An atomic compare-and-swap on the 8 bytes at `remote_addr`; the old value lands in the
    /// local buffer (`ibv_wr_atomic_cmp_swp`).
    pub fn setup_atomic_compare_swap(self, rkey: u32, remote_addr: u64, compare: u64, swap: u64) -> T::AfterOpcode<'g> {
        // SAFETY: as in setup_send.
        unsafe { ibv_wr_atomic_cmp_swp(self.qp_ex.as_ptr(), rkey, remote_addr, compare, swap) };
        self.next()
    }

    /// An atomic fetch-and-add on the 8 bytes at `remote_addr`; the old value lands in the local
    /// buffer (`ibv_wr_atomic_fetch_add`).
    pub fn setup_atomic_fetch_add(self, rkey: u32, remote_addr: u64, add: u64) -> T::AfterOpcode<'g> {
        // SAFETY: as in setup_send.
        unsafe { ibv_wr_atomic_fetch_add(self.qp_ex.as_ptr(), rkey, remote_addr, add) };
        self.next()
    }
}

/// The destination step of a UD request.
pub struct UnreliableDatagramDestination<'g> {
    qp_ex: NonNull<ibv_qp_ex>,
    _guard: PhantomData<&'g mut ()>,
}

impl<'g> UnreliableDatagramDestination<'g> {
    /// Sends to queue pair `remote_qpn` with Q_Key `remote_qkey`, over the route of `ah`
    /// (`ibv_wr_set_ud_addr`).
    pub fn setup_ud_addr(self, ah: &AddressHandle, remote_qpn: u32, remote_qkey: u32) -> LocalBufferHandle<'g> {
        // SAFETY: the queue pair is inside a started batch; the provider copies the address
        // from the live handle during the call.
        unsafe { ibv_wr_set_ud_addr(self.qp_ex.as_ptr(), ah.ah().as_ptr(), remote_qpn, remote_qkey) };
        LocalBufferHandle::new(self.qp_ex)
    }
}

/// The data step of a request: scatter/gather entries or inline data.
pub struct LocalBufferHandle<'g> {
    qp_ex: NonNull<ibv_qp_ex>,
    _guard: PhantomData<&'g mut ()>,
}

impl LocalBufferHandle<'_> {
    pub(crate) fn new(qp_ex: NonNull<ibv_qp_ex>) -> Self {
        Self {
            qp_ex,
            _guard: PhantomData,
        }
    }
}

// IoSlice is ABI-compatible with iovec, which has the layout of ibv_data_buf (pointer, length).
const _: () = assert!(std::mem::size_of::<IoSlice<'_>>() == std::mem::size_of::<ibv_data_buf>());

impl SetInlineData for LocalBufferHandle<'_> {
    /// Copies `buf` into the request (`ibv_wr_set_inline_data`); at most the queue pair's
    /// `max_inline_data` bytes, else the post fails with
    /// [`InvalidWorkRequest`](PostSendErrorKind::InvalidWorkRequest).
    fn setup_inline_data(self, buf: &[u8]) {
        // SAFETY: the data is copied during the call.
        unsafe { ibv_wr_set_inline_data(self.qp_ex.as_ptr(), buf.as_ptr() as *mut _, buf.len()) };
    }

    /// Copies the slices, one after the other, into the request (`ibv_wr_set_inline_data_list`).
    fn setup_inline_data_list(self, bufs: &[IoSlice<'_>]) {
        // SAFETY: IoSlice has ibv_data_buf's layout (checked above); the data is copied during
        // the call.
        unsafe { ibv_wr_set_inline_data_list(self.qp_ex.as_ptr(), bufs.len(), bufs.as_ptr() as *const ibv_data_buf) };
    }
}

impl SetScatterGatherEntry for LocalBufferHandle<'_> {
    /// # Safety
    ///
    /// The buffer must lie in the memory region of `lkey` and stay valid until the request
    /// completes.
    unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) {
        ibv_wr_set_sge(self.qp_ex.as_ptr(), lkey, addr, length);
    }

    /// # Safety
    ///
    /// Each buffer must lie in the memory region of its `lkey` and stay valid until the request
    /// completes; more entries than the queue pair's `max_send_sge` fail the post with
    /// [`InvalidWorkRequest`](PostSendErrorKind::InvalidWorkRequest).
    unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) {
        ibv_wr_set_sge_list(self.qp_ex.as_ptr(), sg_list.len(), sg_list.as_ptr());
    }
}
