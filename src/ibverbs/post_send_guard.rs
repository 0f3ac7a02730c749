//! Posting send work requests with the `ibv_wr_*` API, for every queue-pair type of this crate.
//!
//! A [`PostSendGuard`] batches requests between `ibv_wr_start` and `ibv_wr_complete`. Each request
//! is described in the order the C API demands, enforced by types: [`construct_wr`](PostSendGuard::construct_wr)
//! (`wr_id` and flags) → an opcode (`setup_send`, `setup_write`, …) → for datagram transports, the
//! destination (`setup_ud_addr`, or `setup_dc_addr` with the `mlx5` feature) → the data
//! ([`SetScatterGatherEntry`] or [`SetInlineData`]). A request that skipped a step cannot be
//! expressed. The guard aborts the batch (`ibv_wr_abort`) when dropped without
//! [`post`](PostSendGuard::post).
//!
//! The C calls of a request are made together at its data step, in that order: `wr_id` and
//! `wr_flags`, the opcode builder (`ibv_wr_send`, …), the destination setter, the data setter. So
//! the [`Inline`](WorkRequestFlags::Inline) flag always matches the data step (set for inline data,
//! cleared for scatter/gather entries), as providers that read it at the opcode call (rxe) need,
//! and a request that never reached its data step leaves nothing half-built in the queue.
//!
//! Known provider bugs, not worked around here: rxe in rdma-core before the fix of PR #1744
//! (Debian 12 ships 44) sums the *first* entry's length once per entry in
//! `ibv_wr_set_sge_list` (lists of unequal lengths fail with a local error), and sends nothing
//! for `ibv_wr_set_inline_data_list` (it never adds up the lengths).
//!
//! # Reference
//!
//! - rdma-core manpage: [`ibv_wr_post`](https://man7.org/linux/man-pages/man3/ibv_wr_post.3.html)
use std::io::{self, IoSlice};
use std::marker::PhantomData;
use std::ptr::NonNull;

use rdma_mummy_sys::{
    ibv_ah, ibv_data_buf, ibv_qp_ex, ibv_send_flags, ibv_sge, ibv_wr_abort, ibv_wr_atomic_cmp_swp,
    ibv_wr_atomic_fetch_add, ibv_wr_complete, ibv_wr_rdma_read, ibv_wr_rdma_write, ibv_wr_rdma_write_imm, ibv_wr_send,
    ibv_wr_send_imm, ibv_wr_set_inline_data, ibv_wr_set_inline_data_list, ibv_wr_set_sge, ibv_wr_set_sge_list,
    ibv_wr_set_ud_addr, ibv_wr_start,
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
    fn after_opcode(request: PendingRequest<'_>, context: Self::Context) -> Self::AfterOpcode<'_>;
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

    fn after_opcode(request: PendingRequest<'_>, _context: ()) -> LocalBufferHandle<'_> {
        LocalBufferHandle::new(request, Destination::Connected)
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

    fn after_opcode(request: PendingRequest<'_>, _context: ()) -> UnreliableDatagramDestination<'_> {
        UnreliableDatagramDestination { request }
    }
}

/// The operation of a request, issued at its data step.
#[derive(Debug, Clone, Copy)]
enum Opcode {
    Send,
    SendWithImmediate(u32),
    Write {
        rkey: u32,
        remote_addr: u64,
    },
    WriteWithImmediate {
        rkey: u32,
        remote_addr: u64,
        imm_data: u32,
    },
    Read {
        rkey: u32,
        remote_addr: u64,
    },
    AtomicCompareSwap {
        rkey: u32,
        remote_addr: u64,
        compare: u64,
        swap: u64,
    },
    AtomicFetchAdd {
        rkey: u32,
        remote_addr: u64,
        add: u64,
    },
}

/// Where a request goes, set at its data step right after the opcode.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Destination {
    /// A connected queue pair: no per-request address.
    Connected,
    /// `ibv_wr_set_ud_addr(ah, remote_qpn, remote_qkey)`.
    Datagram {
        ah: NonNull<ibv_ah>,
        remote_qpn: u32,
        remote_qkey: u32,
    },
}

/// A request described up to its opcode; its C calls wait for the data step.
#[doc(hidden)]
pub struct PendingRequest<'g> {
    qp_ex: NonNull<ibv_qp_ex>,
    wr_id: u64,
    wr_flags: WorkRequestFlags,
    opcode: Opcode,
    batch_len: &'g mut usize,
}

impl PendingRequest<'_> {
    /// Makes the request's C calls in order: `wr_id` and `wr_flags` (with the inline bit set
    /// exactly when the data is inline), the opcode builder, the destination setter, then `data`.
    fn issue(self, destination: Destination, inline: bool, data: impl FnOnce(*mut ibv_qp_ex)) {
        let qp = self.qp_ex.as_ptr();
        let inline_bit = ibv_send_flags::IBV_SEND_INLINE.0;
        let flags = self.wr_flags.bits() & !inline_bit | if inline { inline_bit } else { 0 };
        // SAFETY: the guard that made this request holds the live queue pair exclusively, inside a
        // batch started with ibv_wr_start; the destination's handles are borrowed for 'g.
        unsafe {
            (*qp).wr_id = self.wr_id;
            (*qp).wr_flags = flags;
            match self.opcode {
                Opcode::Send => ibv_wr_send(qp),
                Opcode::SendWithImmediate(imm_data) => ibv_wr_send_imm(qp, imm_data.to_be()),
                Opcode::Write { rkey, remote_addr } => ibv_wr_rdma_write(qp, rkey, remote_addr),
                Opcode::WriteWithImmediate {
                    rkey,
                    remote_addr,
                    imm_data,
                } => ibv_wr_rdma_write_imm(qp, rkey, remote_addr, imm_data.to_be()),
                Opcode::Read { rkey, remote_addr } => ibv_wr_rdma_read(qp, rkey, remote_addr),
                Opcode::AtomicCompareSwap {
                    rkey,
                    remote_addr,
                    compare,
                    swap,
                } => ibv_wr_atomic_cmp_swp(qp, rkey, remote_addr, compare, swap),
                Opcode::AtomicFetchAdd { rkey, remote_addr, add } => {
                    ibv_wr_atomic_fetch_add(qp, rkey, remote_addr, add)
                },
            }
            match destination {
                Destination::Connected => {},
                Destination::Datagram {
                    ah,
                    remote_qpn,
                    remote_qkey,
                } => ibv_wr_set_ud_addr(qp, ah.as_ptr(), remote_qpn, remote_qkey),
            }
        }
        data(qp);
        *self.batch_len += 1;
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
    /// a completion; the [`Inline`](WorkRequestFlags::Inline) bit is managed by the data step);
    /// continue with an opcode on the returned handle.
    pub fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> WorkRequestHandle<'_, T> {
        WorkRequestHandle {
            request: PendingRequest {
                qp_ex: self.qp_ex,
                wr_id,
                wr_flags,
                opcode: Opcode::Send,
                batch_len: &mut self.batch_len,
            },
            context: self.context,
        }
    }

    /// How many requests the batch holds (those that reached their data step).
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

/// One request being described: pick its opcode.
pub struct WorkRequestHandle<'g, T: Transport> {
    request: PendingRequest<'g>,
    context: T::Context,
}

impl<'g, T: Transport> WorkRequestHandle<'g, T> {
    fn with(mut self, opcode: Opcode) -> T::AfterOpcode<'g> {
        self.request.opcode = opcode;
        T::after_opcode(self.request, self.context)
    }

    /// A SEND (`ibv_wr_send`).
    pub fn setup_send(self) -> T::AfterOpcode<'g> {
        self.with(Opcode::Send)
    }

    /// A SEND with immediate data (`ibv_wr_send_imm`). `imm_data` is in host byte order; it goes
    /// on the wire in network byte order, as a C peer's `htonl(imm_data)` does, and
    /// [`WorkCompletion::imm_data`](super::work_completion::WorkCompletion::imm_data) gives it back
    /// in host byte order.
    pub fn setup_send_imm(self, imm_data: u32) -> T::AfterOpcode<'g> {
        self.with(Opcode::SendWithImmediate(imm_data))
    }
}

impl<'g, T: RemoteMemoryAccess> WorkRequestHandle<'g, T> {
    /// An RDMA WRITE to `remote_addr` in the remote region of `rkey` (`ibv_wr_rdma_write`).
    pub fn setup_write(self, rkey: u32, remote_addr: u64) -> T::AfterOpcode<'g> {
        self.with(Opcode::Write { rkey, remote_addr })
    }

    /// An RDMA WRITE with immediate data (`ibv_wr_rdma_write_imm`); `imm_data` in host byte order,
    /// as for [`setup_send_imm`](Self::setup_send_imm). It consumes a receive at the remote end.
    pub fn setup_write_imm(self, rkey: u32, remote_addr: u64, imm_data: u32) -> T::AfterOpcode<'g> {
        self.with(Opcode::WriteWithImmediate {
            rkey,
            remote_addr,
            imm_data,
        })
    }

    /// An RDMA READ from `remote_addr` in the remote region of `rkey` (`ibv_wr_rdma_read`).
    pub fn setup_read(self, rkey: u32, remote_addr: u64) -> T::AfterOpcode<'g> {
        self.with(Opcode::Read { rkey, remote_addr })
    }

    /// An atomic compare-and-swap on the 8 bytes at `remote_addr`; the old value lands in the
    /// local buffer (`ibv_wr_atomic_cmp_swp`).
    pub fn setup_atomic_compare_swap(self, rkey: u32, remote_addr: u64, compare: u64, swap: u64) -> T::AfterOpcode<'g> {
        self.with(Opcode::AtomicCompareSwap {
            rkey,
            remote_addr,
            compare,
            swap,
        })
    }

    /// An atomic fetch-and-add on the 8 bytes at `remote_addr`; the old value lands in the local
    /// buffer (`ibv_wr_atomic_fetch_add`).
    pub fn setup_atomic_fetch_add(self, rkey: u32, remote_addr: u64, add: u64) -> T::AfterOpcode<'g> {
        self.with(Opcode::AtomicFetchAdd { rkey, remote_addr, add })
    }
}

/// The destination step of a UD request.
pub struct UnreliableDatagramDestination<'g> {
    request: PendingRequest<'g>,
}

impl<'g> UnreliableDatagramDestination<'g> {
    /// Sends to queue pair `remote_qpn` with Q_Key `remote_qkey`, over the route of `ah`
    /// (`ibv_wr_set_ud_addr`).
    pub fn setup_ud_addr(self, ah: &'g AddressHandle, remote_qpn: u32, remote_qkey: u32) -> LocalBufferHandle<'g> {
        // SAFETY: the handle is borrowed for 'g, past the data step that uses it.
        let ah = unsafe { ah.ah() };
        LocalBufferHandle::new(
            self.request,
            Destination::Datagram {
                ah,
                remote_qpn,
                remote_qkey,
            },
        )
    }
}

/// The data step of a request: scatter/gather entries or inline data. Giving the data issues the
/// request's C calls.
pub struct LocalBufferHandle<'g> {
    request: PendingRequest<'g>,
    destination: Destination,
}

impl<'g> LocalBufferHandle<'g> {
    pub(crate) fn new(request: PendingRequest<'g>, destination: Destination) -> Self {
        Self { request, destination }
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
        self.request.issue(self.destination, true, |qp| unsafe {
            ibv_wr_set_inline_data(qp, buf.as_ptr() as *mut _, buf.len())
        });
    }

    /// Copies the slices, one after the other, into the request (`ibv_wr_set_inline_data_list`).
    fn setup_inline_data_list(self, bufs: &[IoSlice<'_>]) {
        // SAFETY: IoSlice has ibv_data_buf's layout (checked above); the data is copied during
        // the call.
        self.request.issue(self.destination, true, |qp| unsafe {
            ibv_wr_set_inline_data_list(qp, bufs.len(), bufs.as_ptr() as *const ibv_data_buf)
        });
    }
}

impl SetScatterGatherEntry for LocalBufferHandle<'_> {
    /// # Safety
    ///
    /// The buffer must lie in the memory region of `lkey` and stay valid until the request
    /// completes.
    unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) {
        self.request
            .issue(self.destination, false, |qp| ibv_wr_set_sge(qp, lkey, addr, length));
    }

    /// # Safety
    ///
    /// Each buffer must lie in the memory region of its `lkey` and stay valid until the request
    /// completes; more entries than the queue pair's `max_send_sge` fail the post with
    /// [`InvalidWorkRequest`](PostSendErrorKind::InvalidWorkRequest).
    unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) {
        self.request.issue(self.destination, false, |qp| {
            ibv_wr_set_sge_list(qp, sg_list.len(), sg_list.as_ptr())
        });
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! The guard driven through a recording function table: no device, the exact sequence of
    //! provider calls.
    use std::cell::RefCell;
    use std::mem::MaybeUninit;

    use rdma_mummy_sys::ibv_ah;

    use super::*;

    thread_local! {
        pub(crate) static CALLS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    pub(crate) fn record(call: String) {
        CALLS.with(|calls| calls.borrow_mut().push(call));
    }

    pub(crate) fn take_calls() -> Vec<String> {
        CALLS.with(|calls| std::mem::take(&mut *calls.borrow_mut()))
    }

    unsafe extern "C" fn wr_start(_: *mut ibv_qp_ex) {
        record("start".into());
    }
    unsafe extern "C" fn wr_complete(_: *mut ibv_qp_ex) -> i32 {
        record("complete".into());
        0
    }
    unsafe extern "C" fn wr_abort(_: *mut ibv_qp_ex) {
        record("abort".into());
    }
    unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
        record(format!("send wr_id={} flags={:#x}", (*qp).wr_id, (*qp).wr_flags));
    }
    unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
        record(format!("send_imm wr_id={} imm={imm:#x}", (*qp).wr_id));
    }
    unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
        record(format!(
            "write wr_id={} flags={:#x} rkey={rkey:#x} addr={addr:#x}",
            (*qp).wr_id,
            (*qp).wr_flags
        ));
    }
    unsafe extern "C" fn wr_set_ud_addr(_: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
        record(format!("ud_addr ah={:#x} qpn={qpn} qkey={qkey:#x}", ah as usize));
    }
    unsafe extern "C" fn wr_set_sge(_: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
        record(format!("sge lkey={lkey:#x} addr={addr:#x} len={length}"));
    }
    unsafe extern "C" fn wr_set_inline_data(_: *mut ibv_qp_ex, addr: *mut std::ffi::c_void, length: usize) {
        let data = std::slice::from_raw_parts(addr as *const u8, length);
        record(format!("inline {:?}", String::from_utf8_lossy(data)));
    }

    /// A queue pair whose provider calls are recorded.
    pub(crate) fn recording_qp() -> Box<ibv_qp_ex> {
        // SAFETY: ibv_qp_ex is plain data (and optional function pointers) for which zeroes are valid.
        let mut qp: Box<ibv_qp_ex> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
        qp.wr_start = Some(wr_start);
        qp.wr_complete = Some(wr_complete);
        qp.wr_abort = Some(wr_abort);
        qp.wr_send = Some(wr_send);
        qp.wr_send_imm = Some(wr_send_imm);
        qp.wr_rdma_write = Some(wr_rdma_write);
        qp.wr_set_ud_addr = Some(wr_set_ud_addr);
        qp.wr_set_sge = Some(wr_set_sge);
        qp.wr_set_inline_data = Some(wr_set_inline_data);
        qp
    }

    #[test]
    fn rc_requests_issue_flags_opcode_then_data() {
        let mut qp = recording_qp();
        take_calls();
        // SAFETY: the recording queue pair outlives the guard; RC needs no context.
        let mut guard = unsafe { PostSendGuard::<ReliableConnection>::start(NonNull::from(&mut *qp), ()) };
        guard
            .construct_wr(7, WorkRequestFlags::Signaled | WorkRequestFlags::Inline)
            .setup_write(0x55, 0x1000);
        // A request dropped before its data step issues nothing and is not counted.
        assert_eq!(guard.batch_len(), 0);
        // SAFETY: the recorder does not touch the buffer.
        unsafe {
            guard
                .construct_wr(8, WorkRequestFlags::Signaled | WorkRequestFlags::Inline)
                .setup_write(0x55, 0x1000)
                .setup_sge(0x9, 0x2000, 64)
        };
        guard
            .construct_wr(9, WorkRequestFlags::Signaled)
            .setup_send_imm(0x0102_0304)
            .setup_inline_data(b"hi");
        assert_eq!(guard.batch_len(), 2);
        guard.post().expect("recorded complete returns 0");
        let signaled = ibv_send_flags::IBV_SEND_SIGNALED.0;
        assert_eq!(
            take_calls(),
            [
                "start".to_string(),
                // Scatter/gather data: the inline bit is cleared even though it was asked for.
                format!("write wr_id=8 flags={signaled:#x} rkey=0x55 addr=0x1000"),
                "sge lkey=0x9 addr=0x2000 len=64".to_string(),
                // Immediate data goes in network byte order.
                format!("send_imm wr_id=9 imm={:#x}", 0x0102_0304u32.to_be()),
                "inline \"hi\"".to_string(),
                "complete".to_string(),
            ]
        );
    }

    #[test]
    fn ud_requests_set_the_address_between_opcode_and_data_and_drop_aborts() {
        let mut qp = recording_qp();
        take_calls();
        // SAFETY: as above.
        let mut guard = unsafe { PostSendGuard::<UnreliableDatagram>::start(NonNull::from(&mut *qp), ()) };
        let request = guard.construct_wr(3, WorkRequestFlags::none()).setup_send();
        // The address handle is only passed through; a dangling but non-null pointer is never used
        // by the recorder.
        let data = LocalBufferHandle::new(
            request.request,
            Destination::Datagram {
                ah: NonNull::dangling(),
                remote_qpn: 77,
                remote_qkey: 0x1111,
            },
        );
        data.setup_inline_data(b"datagram");
        drop(guard);
        let inline = ibv_send_flags::IBV_SEND_INLINE.0;
        assert_eq!(
            take_calls(),
            [
                "start".to_string(),
                format!("send wr_id=3 flags={inline:#x}"),
                format!(
                    "ud_addr ah={:#x} qpn=77 qkey=0x1111",
                    NonNull::<ibv_ah>::dangling().as_ptr() as usize
                ),
                "inline \"datagram\"".to_string(),
                "abort".to_string(),
            ]
        );
    }
}
