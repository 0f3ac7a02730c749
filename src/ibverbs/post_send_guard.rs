//! Posting send work requests with the `ibv_wr_*` API, for every queue-pair type of this crate.
//!
//! A [`PostSendGuard`] batches requests between `ibv_wr_start` and `ibv_wr_complete`. Each request
//! is described in the order the C API demands, enforced by types: [`construct_wr`](PostSendGuard::construct_wr)
//! (`wr_id` and flags) → an operation (`setup_send`, `setup_write`, …) → for datagram transports,
//! the destination (`setup_ud_addr`, or DC's address step in the `mlx5` module) → the data
//! ([`SetScatterGatherEntry`] or [`SetInlineData`]). A request that skipped a step cannot be
//! expressed. The guard aborts the batch (`ibv_wr_abort`) when dropped without
//! [`post`](PostSendGuard::post).
//!
//! The C calls of a request are made together at its data step, in that order: `wr_id` and
//! `wr_flags`, the operation's builder (`ibv_wr_send`, …), the destination setter, the data setter.
//! So the [`Inline`](WorkRequestFlags::Inline) flag always matches the data step (set for inline
//! data, cleared for scatter/gather entries), as providers that read it at the builder call (rxe)
//! need, and a request that never reached its data step leaves nothing half-built in the queue.
//!
//! # Provider entries
//!
//! libibverbs dispatches every `ibv_wr_*` call through a function pointer of `struct ibv_qp_ex`,
//! and a provider fills only the builders of the operations the queue pair was created with
//! (rxe leaves the others NULL). The guard knows which entries are there
//! ([`ProviderEntries`], read once when the queue pair is created): a request whose operation or
//! data setter is missing is never handed to the provider; [`post`](PostSendGuard::post) then
//! aborts the whole batch and reports it as
//! [`OperationNotEnabled`](PostSendErrorKind::OperationNotEnabled). The check is one branch per
//! request, on a mask known at compile time.
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
use sideway::ibverbs::queue_pair::{SendOperationFlags, SetInlineData, SetScatterGatherEntry, WorkRequestFlags};

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
    /// A request used an operation or data setter the queue pair was not created with (see
    /// [`setup_send_ops_flags`](super::queue_pair::SharedReceiveQueuePairBuilder::setup_send_ops_flags)),
    /// or that its provider does not implement. It never reached the provider; the batch was
    /// aborted, so none of its requests was posted.
    #[error("request {index} (wr_id {wr_id}) needs `{entry}`, which this queue pair was not created with")]
    OperationNotEnabled {
        /// Index in the batch of the first such request.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// The `ibv_qp_ex` entry it needed (`wr_rdma_write`, `wr_set_inline_data_list`, …).
        entry: &'static str,
        /// Requests in the batch.
        batch_len: usize,
    },
    /// A request was invalid (EINVAL): too many scatter/gather entries, inline data over the
    /// queue pair's limit, a missing destination.
    #[error("a request in the batch of {batch_len} is invalid")]
    InvalidWorkRequest {
        /// Requests in the batch.
        batch_len: usize,
        /// The library's error.
        source: io::Error,
    },
    /// A request's inline data is longer than the queue pair's granted `max_inline_data`
    /// (libmlx5 would fail the batch with `ENOMEM`, as if the queue were full). It never reached
    /// the provider; the batch was aborted, so none of its requests was posted.
    #[error("request {index} (wr_id {wr_id}) has {length} bytes of inline data; the queue pair takes at most {max_inline_data}")]
    InlineDataTooLong {
        /// Index in the batch of the first such request.
        index: usize,
        /// Its `wr_id`.
        wr_id: u64,
        /// Its inline data's length (all slices together).
        length: usize,
        /// The queue pair's granted `max_inline_data`.
        max_inline_data: u32,
        /// Requests in the batch.
        batch_len: usize,
    },
    /// The send queue is full (ENOMEM); on a queue pair whose granted inline size this crate
    /// does not know, also inline data over it.
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
            Self::OperationNotEnabled { batch_len, .. }
            | Self::InlineDataTooLong { batch_len, .. }
            | Self::InvalidWorkRequest { batch_len, .. }
            | Self::QueueFull { batch_len, .. }
            | Self::Ibverbs { batch_len, .. } => *batch_len,
        }
    }
}

pub(crate) mod sealed {
    // Transports and operations are this crate's: each one's guarantees (which builders, which
    // destination step) depend on how its queue pairs were created, and the guard's checks of
    // provider entries rely on them. (Destinations are open, an unsafe trait: a destination only
    // sets an address through entries the guard checks.) Visible crate-wide so that the mlx5
    // module's DC transport can implement them.
    pub trait Sealed {}
}

/// The `ibv_qp_ex` entries a queue pair's provider filled, as a bit mask (one bit per builder and
/// setter the guards call). Read once when a queue pair is created; each request checks its own
/// bits against it before reaching the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderEntries(u32);

/// One bit per `ibv_qp_ex` entry the guards call.
pub(crate) mod entry {
    /// `wr_send`.
    pub const SEND: u32 = 1 << 0;
    /// `wr_send_imm`.
    pub const SEND_IMM: u32 = 1 << 1;
    /// `wr_rdma_write`.
    pub const RDMA_WRITE: u32 = 1 << 2;
    /// `wr_rdma_write_imm`.
    pub const RDMA_WRITE_IMM: u32 = 1 << 3;
    /// `wr_rdma_read`.
    pub const RDMA_READ: u32 = 1 << 4;
    /// `wr_atomic_cmp_swp`.
    pub const ATOMIC_CMP_SWP: u32 = 1 << 5;
    /// `wr_atomic_fetch_add`.
    pub const ATOMIC_FETCH_ADD: u32 = 1 << 6;
    /// `wr_set_sge`.
    pub const SET_SGE: u32 = 1 << 7;
    /// `wr_set_sge_list`.
    pub const SET_SGE_LIST: u32 = 1 << 8;
    /// `wr_set_inline_data`.
    pub const SET_INLINE_DATA: u32 = 1 << 9;
    /// `wr_set_inline_data_list`.
    pub const SET_INLINE_DATA_LIST: u32 = 1 << 10;
    /// `wr_set_ud_addr`.
    pub const SET_UD_ADDR: u32 = 1 << 11;
    /// The first bit free for entries outside `ibv_qp_ex` (the mlx5 module's).
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub const FIRST_EXTERNAL: u32 = 1 << 16;

    pub(crate) const NAMES: [&str; 12] = [
        "wr_send",
        "wr_send_imm",
        "wr_rdma_write",
        "wr_rdma_write_imm",
        "wr_rdma_read",
        "wr_atomic_cmp_swp",
        "wr_atomic_fetch_add",
        "wr_set_sge",
        "wr_set_sge_list",
        "wr_set_inline_data",
        "wr_set_inline_data_list",
        "wr_set_ud_addr",
    ];
}

/// The send operations a guard can post, with their `ibv_qp_ex` entry bit.
const OPERATIONS: [(SendOperationFlags, u32); 7] = [
    (SendOperationFlags::Send, entry::SEND),
    (SendOperationFlags::SendWithImmediate, entry::SEND_IMM),
    (SendOperationFlags::Write, entry::RDMA_WRITE),
    (SendOperationFlags::WriteWithImmediate, entry::RDMA_WRITE_IMM),
    (SendOperationFlags::Read, entry::RDMA_READ),
    (SendOperationFlags::AtomicCompareAndSwap, entry::ATOMIC_CMP_SWP),
    (SendOperationFlags::AtomicFetchAndAdd, entry::ATOMIC_FETCH_ADD),
];

/// Error returned by [`ProviderEntries::new`]: an entry the queue pair needs is NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the provider did not fill `{0}` of struct ibv_qp_ex")]
pub struct MissingProviderEntry(pub &'static str);

impl ProviderEntries {
    /// No entry at all.
    pub const NONE: Self = Self(0);

    /// Reads which entries of `qp_ex` are filled. The batch entries (`wr_start`, `wr_complete`,
    /// `wr_abort`), the builder of every operation in `granted`, `wr_set_sge` and
    /// `wr_set_sge_list` must be: a NULL one is [`MissingProviderEntry`]. Operations outside
    /// `granted` are left out (their requests are refused), as are inline-data setters the
    /// provider lacks.
    ///
    /// # Safety
    ///
    /// `qp_ex` must point to a live `struct ibv_qp_ex`.
    pub unsafe fn new(qp_ex: NonNull<ibv_qp_ex>, granted: SendOperationFlags) -> Result<Self, MissingProviderEntry> {
        let qp = qp_ex.as_ref();
        for (filled, name) in [
            (qp.wr_start.is_some(), "wr_start"),
            (qp.wr_complete.is_some(), "wr_complete"),
            (qp.wr_abort.is_some(), "wr_abort"),
        ] {
            if !filled {
                return Err(MissingProviderEntry(name));
            }
        }
        let filled = [
            qp.wr_send.is_some(),
            qp.wr_send_imm.is_some(),
            qp.wr_rdma_write.is_some(),
            qp.wr_rdma_write_imm.is_some(),
            qp.wr_rdma_read.is_some(),
            qp.wr_atomic_cmp_swp.is_some(),
            qp.wr_atomic_fetch_add.is_some(),
            qp.wr_set_sge.is_some(),
            qp.wr_set_sge_list.is_some(),
            qp.wr_set_inline_data.is_some(),
            qp.wr_set_inline_data_list.is_some(),
            qp.wr_set_ud_addr.is_some(),
        ];
        let mut bits = 0;
        for (flag, bit) in OPERATIONS {
            if granted.contains(flag) {
                if !filled[bit.trailing_zeros() as usize] {
                    return Err(MissingProviderEntry(entry::NAMES[bit.trailing_zeros() as usize]));
                }
                bits |= bit;
            }
        }
        for bit in [entry::SET_SGE, entry::SET_SGE_LIST] {
            if !filled[bit.trailing_zeros() as usize] {
                return Err(MissingProviderEntry(entry::NAMES[bit.trailing_zeros() as usize]));
            }
            bits |= bit;
        }
        for bit in [entry::SET_INLINE_DATA, entry::SET_INLINE_DATA_LIST, entry::SET_UD_ADDR] {
            if filled[bit.trailing_zeros() as usize] {
                bits |= bit;
            }
        }
        Ok(Self(bits))
    }

    /// The entries as a bit mask (see the hidden `entry` module).
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every entry of `bits` is there.
    pub fn contains(self, bits: u32) -> bool {
        self.0 & bits == bits
    }

    /// The first bit free for the entries of a [`Destination`] of another crate: below it,
    /// `ibv_qp_ex`'s entries and this crate's own outside it (mlx5's DC setters).
    pub const FIRST_EXTERNAL_FREE: u32 = entry::FIRST_EXTERNAL << 2;

    /// Adds entries that lie outside `ibv_qp_ex`: the DC setters that
    /// [`DcContext::entries`](crate::mlx5::dc::initiator::DcContext::entries) reads, or a
    /// [`Destination`] of another crate's, from [`FIRST_EXTERNAL_FREE`](Self::FIRST_EXTERNAL_FREE) up.
    pub const fn with(self, bits: u32) -> Self {
        Self(self.0 | bits)
    }

    /// The name of the first entry of `needed` that is missing: an `ibv_qp_ex` entry, or else
    /// `external` (the destination's own entry).
    fn name_of_first_missing(self, needed: u32, external: &'static str) -> &'static str {
        let missing = needed & !self.0;
        entry::NAMES
            .get(missing.trailing_zeros() as usize)
            .copied()
            .unwrap_or(external)
    }
}

/// How the requests of a queue-pair type are addressed: nothing for RC (the connection is the
/// address), an address handle and remote QPN/Q_Key for UD, an address handle, DCT number and
/// DC key for DC. Sealed.
pub trait Transport: sealed::Sealed + Sized {
    /// Per-queue-pair data the destination step needs (for DC, the mlx5 view of the queue pair).
    type Context: Copy;
    /// What an operation leads to: the data step, or first the destination step.
    type AfterOperation<'g, O: Operation>;
    /// The step after the operation of `request`, on a queue pair with `context`.
    fn after_operation<O: Operation>(
        request: PendingRequest<'_, O>, context: Self::Context,
    ) -> Self::AfterOperation<'_, O>;
}

/// Transports on which RDMA reads, writes and atomics can be posted.
pub trait RemoteMemoryAccess: Transport {}

/// The reliable-connection transport (RC).
#[derive(Debug)]
pub enum ReliableConnection {}

impl sealed::Sealed for ReliableConnection {}

impl Transport for ReliableConnection {
    type Context = ();
    type AfterOperation<'g, O: Operation> = LocalBufferHandle<'g, O, Connected>;

    #[inline]
    fn after_operation<O: Operation>(
        request: PendingRequest<'_, O>, _context: (),
    ) -> LocalBufferHandle<'_, O, Connected> {
        LocalBufferHandle::new(request, Connected)
    }
}

impl RemoteMemoryAccess for ReliableConnection {}

/// The unreliable-datagram transport (UD): every request names its destination.
#[derive(Debug)]
pub enum UnreliableDatagram {}

impl sealed::Sealed for UnreliableDatagram {}

impl Transport for UnreliableDatagram {
    type Context = ();
    type AfterOperation<'g, O: Operation> = UnreliableDatagramDestination<'g, O>;

    #[inline]
    fn after_operation<O: Operation>(
        request: PendingRequest<'_, O>, _context: (),
    ) -> UnreliableDatagramDestination<'_, O> {
        UnreliableDatagramDestination { request }
    }
}

/// The operation of a request (one type per `ibv_wr_*` builder), issued at its data step. Sealed.
pub trait Operation: sealed::Sealed + Copy {
    /// The [`ProviderEntries`] bit of its builder.
    const ENTRY: u32;
    /// Calls the builder.
    ///
    /// # Safety
    ///
    /// `qp` must be a live queue pair inside a batch, with the builder's entry filled.
    unsafe fn build(self, qp: *mut ibv_qp_ex);
}

pub mod operation;

/// Where a request goes, set at its data step right after the operation's builder.
///
/// Open, and `unsafe` to implement: a destination of one's own (e.g. for a provider table of
/// one's own, as a simulated device has) names in `ENTRY` the entries its `set` calls, each
/// [`ProviderEntries::FIRST_EXTERNAL_FREE`] or above when it lies outside `ibv_qp_ex` and is not
/// one of this crate's; the guard refuses the request before the provider when the queue pair's
/// entries lack one.
///
/// # Safety
///
/// `set` calls nothing but the entries `ENTRY` names (which the guard checked the queue pair
/// has), with handles alive as long as the destination is used.
pub unsafe trait Destination: Copy {
    /// The [`ProviderEntries`] bits of its setter.
    const ENTRY: u32;
    /// The setter's name, for errors.
    const ENTRY_NAME: &'static str;
    /// Calls the setter.
    ///
    /// # Safety
    ///
    /// `qp` must be a live queue pair inside a batch, right after a builder, with the setter's
    /// entry filled; the handles the destination names must be alive.
    unsafe fn set(self, qp: *mut ibv_qp_ex);
}

/// The destination of a connected queue pair's requests: the connection itself.
#[derive(Debug, Clone, Copy)]
pub struct Connected;

impl sealed::Sealed for Connected {}

// SAFETY: it calls nothing.
unsafe impl Destination for Connected {
    const ENTRY: u32 = 0;
    const ENTRY_NAME: &'static str = "";

    #[inline(always)]
    unsafe fn set(self, _qp: *mut ibv_qp_ex) {}
}

/// A UD destination: `ibv_wr_set_ud_addr(ah, remote_qpn, remote_qkey)`.
#[derive(Debug, Clone, Copy)]
pub struct DatagramAddress {
    ah: NonNull<ibv_ah>,
    remote_qpn: u32,
    remote_qkey: u32,
}

impl sealed::Sealed for DatagramAddress {}

// SAFETY: it calls `wr_set_ud_addr`, its entry, with the address handle the guard's borrow keeps.
unsafe impl Destination for DatagramAddress {
    const ENTRY: u32 = entry::SET_UD_ADDR;
    const ENTRY_NAME: &'static str = "wr_set_ud_addr";

    #[inline(always)]
    unsafe fn set(self, qp: *mut ibv_qp_ex) {
        ibv_wr_set_ud_addr(qp, self.ah.as_ptr(), self.remote_qpn, self.remote_qkey)
    }
}

/// The state of a batch that its requests update: the queue pair, its entries, the count
/// (opaque: reached only through a [`PostSendGuard`]).
#[derive(Debug)]
pub struct Batch {
    qp_ex: NonNull<ibv_qp_ex>,
    /// The entries the provider lacks: a request checks its bits with one test.
    missing: u32,
    len: usize,
    refused: Option<Refused>,
    /// The queue pair's granted inline size (`u32::MAX` where it is not known here).
    max_inline_data: u32,
}

/// The first request of a batch that was refused before reaching the provider.
#[derive(Debug, Clone, Copy)]
struct Refused {
    index: usize,
    wr_id: u64,
    reason: Refusal,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// It needed this entry, which the queue pair lacks.
    Entry(&'static str),
    /// Its inline data has this length, over the granted size.
    InlineDataTooLong(usize),
}

impl Batch {
    /// Records a refused request. The batch is passed by value parts, not by address, so that the
    /// hot path can keep the batch in registers.
    #[inline(always)]
    fn refuse(&mut self, wr_id: u64, needed: u32, external: &'static str) {
        if self.refused.is_none() {
            self.refused = Some(refusal(self.missing, self.len, wr_id, needed, external));
        }
        self.len += 1;
    }

    /// Records a request whose inline data of `length` bytes is over the granted size.
    #[cold]
    #[inline(never)]
    fn refuse_inline(&mut self, wr_id: u64, length: usize) {
        if self.refused.is_none() {
            self.refused = Some(Refused {
                index: self.len,
                wr_id,
                reason: Refusal::InlineDataTooLong(length),
            });
        }
        self.len += 1;
    }
}

#[cold]
#[inline(never)]
fn refusal(missing: u32, index: usize, wr_id: u64, needed: u32, external: &'static str) -> Refused {
    Refused {
        index,
        wr_id,
        reason: Refusal::Entry(ProviderEntries(!missing).name_of_first_missing(needed, external)),
    }
}

/// A request described up to its operation; its C calls wait for the data step (opaque: what a
/// [`Transport`]'s destination step carries on).
pub struct PendingRequest<'g, O: Operation> {
    batch: &'g mut Batch,
    wr_id: u64,
    wr_flags: u32,
    operation: O,
}

/// A batch of send requests on one queue pair; see the [module](self) documentation.
#[must_use = "the batch is posted only by post(); dropping the guard aborts it"]
pub struct PostSendGuard<'qp, T: Transport> {
    batch: Batch,
    context: T::Context,
    _qp: PhantomData<&'qp mut ()>,
}

impl<T: Transport> PostSendGuard<'_, T> {
    /// Starts a batch with `ibv_wr_start` on a queue pair this crate did not create: one created
    /// through libibverbs directly, or a provider table of one's own (a simulated device, a
    /// counting table). The queue pairs of this crate call it from their `start_post_send`.
    ///
    /// ```no_run
    /// # use std::ptr::NonNull;
    /// # use sideway::ibverbs::queue_pair::{SendOperationFlags, WorkRequestFlags, SetScatterGatherEntry};
    /// use sideway_ext::ibverbs::post_send_guard::{PostSendGuard, ProviderEntries, ReliableConnection};
    /// # fn adopt(qp_ex: NonNull<rdma_mummy_sys::ibv_qp_ex>) -> Result<(), Box<dyn std::error::Error>> {
    /// // `qp_ex`: the extended view of an RC queue pair created elsewhere and in RTS.
    /// // SAFETY: the queue pair is alive and used by no one else while the guard lives.
    /// let entries = unsafe { ProviderEntries::new(qp_ex, SendOperationFlags::Send) }?;
    /// // SAFETY: as above; its provider filled `entries`.
    /// let mut guard = unsafe { PostSendGuard::<ReliableConnection>::start(qp_ex, entries, ()) };
    /// // SAFETY: the buffer at 0x1000 is registered under lkey 7 and outlives the request.
    /// unsafe { guard.construct_wr(1, WorkRequestFlags::Signaled).setup_send().setup_sge(7, 0x1000, 64) };
    /// guard.post()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    ///
    /// - `qp_ex` must be the extended view of a live queue pair, exclusively borrowed for the
    ///   guard's lifetime, whose provider filled at least the entries named by `entries`
    ///   (read them with [`ProviderEntries::new`]);
    /// - `context` must be what `T` needs for this queue pair.
    #[inline]
    pub unsafe fn start(qp_ex: NonNull<ibv_qp_ex>, entries: ProviderEntries, context: T::Context) -> Self {
        ibv_wr_start(qp_ex.as_ptr());
        Self {
            batch: Batch {
                qp_ex,
                missing: !entries.bits(),
                len: 0,
                refused: None,
                max_inline_data: u32::MAX,
            },
            context,
            _qp: PhantomData,
        }
    }

    /// Posts one request on a raw queue pair: `ibv_wr_start`, the request described by `request`
    /// from its operation step on (as with [`construct_wr`](Self::construct_wr)), then
    /// `ibv_wr_complete`, on a queue pair this crate did not create (see [`start`](Self::start)).
    /// The queue pairs of this crate call it from their `post_send_one`.
    ///
    /// # Safety
    ///
    /// As [`start`](Self::start).
    #[inline(always)]
    pub unsafe fn post_one(
        qp_ex: NonNull<ibv_qp_ex>, entries: ProviderEntries, context: T::Context, wr_id: u64,
        wr_flags: WorkRequestFlags, request: impl FnOnce(WorkRequestHandle<'_, T>),
    ) -> Result<(), PostSendError> {
        let mut guard = Self::start(qp_ex, entries, context);
        request(guard.construct_wr(wr_id, wr_flags));
        guard.post()
    }

    /// Starts a new request with this `wr_id` and flags (e.g. [`WorkRequestFlags::Signaled`] for
    /// a completion; the [`Inline`](WorkRequestFlags::Inline) bit is managed by the data step);
    /// continue with an operation on the returned handle.
    #[inline]
    pub fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> WorkRequestHandle<'_, T> {
        WorkRequestHandle {
            batch: &mut self.batch,
            wr_id,
            wr_flags: wr_flags.bits(),
            context: self.context,
        }
    }

    /// Refuses inline data longer than `max_inline_data` bytes, the queue pair's granted size,
    /// before the provider ([`InlineDataTooLong`](PostSendErrorKind::InlineDataTooLong)); by
    /// default the guard does not know it and the provider decides. For a guard
    /// [`start`](Self::start)ed on a queue pair whose granted size its creator knows.
    #[inline]
    pub fn set_max_inline_data(&mut self, max_inline_data: u32) {
        self.batch.max_inline_data = max_inline_data;
    }

    /// How many requests the batch holds (those that reached their data step).
    #[inline]
    pub fn batch_len(&self) -> usize {
        self.batch.len
    }

    /// Posts the batch with `ibv_wr_complete`: all of it, or on error none of it. A batch holding
    /// a request the queue pair was not created for is aborted instead
    /// ([`OperationNotEnabled`](PostSendErrorKind::OperationNotEnabled)).
    #[inline]
    pub fn post(self) -> Result<(), PostSendError> {
        let batch_len = self.batch.len;
        let qp = self.batch.qp_ex.as_ptr();
        if let Some(refused) = self.batch.refused {
            let max_inline_data = self.batch.max_inline_data;
            // Dropping the guard aborts the batch.
            drop(self);
            let Refused { index, wr_id, reason } = refused;
            return Err(match reason {
                Refusal::Entry(entry) => PostSendErrorKind::OperationNotEnabled {
                    index,
                    wr_id,
                    entry,
                    batch_len,
                },
                Refusal::InlineDataTooLong(length) => PostSendErrorKind::InlineDataTooLong {
                    index,
                    wr_id,
                    length,
                    max_inline_data,
                    batch_len,
                },
            }
            .into());
        }
        // The batch is finished either way: it must not be aborted too.
        std::mem::forget(self);
        // SAFETY: the batch was started on this live queue pair by `start`.
        let ret = unsafe { ibv_wr_complete(qp) };
        if ret == 0 {
            return Ok(());
        }
        Err(complete_error(ret, batch_len))
    }
}

#[cold]
#[inline(never)]
fn complete_error(ret: i32, batch_len: usize) -> PostSendError {
    let source = io::Error::from_raw_os_error(ret);
    match ret {
        libc::EINVAL => PostSendErrorKind::InvalidWorkRequest { batch_len, source },
        libc::ENOMEM => PostSendErrorKind::QueueFull { batch_len, source },
        _ => PostSendErrorKind::Ibverbs { batch_len, source },
    }
    .into()
}

impl<T: Transport> Drop for PostSendGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the batch was started by `start` and not completed.
        unsafe { ibv_wr_abort(self.batch.qp_ex.as_ptr()) };
    }
}

/// One request being described: pick its operation.
#[must_use = "a request is added to the batch only at its data step"]
pub struct WorkRequestHandle<'g, T: Transport> {
    batch: &'g mut Batch,
    wr_id: u64,
    wr_flags: u32,
    context: T::Context,
}

impl<'g, T: Transport> WorkRequestHandle<'g, T> {
    #[inline(always)]
    fn with<O: Operation>(self, operation: O) -> T::AfterOperation<'g, O> {
        T::after_operation(
            PendingRequest {
                batch: self.batch,
                wr_id: self.wr_id,
                wr_flags: self.wr_flags,
                operation,
            },
            self.context,
        )
    }

    /// A SEND (`ibv_wr_send`).
    #[inline]
    pub fn setup_send(self) -> T::AfterOperation<'g, operation::Send> {
        self.with(operation::Send {})
    }

    /// A SEND with immediate data (`ibv_wr_send_imm`). As in sideway, `imm_data` goes to the C
    /// call unchanged, and the receiver's
    /// [`WorkCompletion::imm_data`](super::work_completion::WorkCompletion::imm_data) (or
    /// sideway's) gives back the same value. The C API's `imm_data` is big-endian (`__be32`): to
    /// match a C peer that sends `htonl(x)` and reads `ntohl(wc.imm_data)`, pass `x.to_be()` and
    /// read `u32::from_be(imm_data)`.
    #[inline]
    pub fn setup_send_imm(self, imm_data: u32) -> T::AfterOperation<'g, operation::SendWithImmediate> {
        self.with(operation::SendWithImmediate { imm_data })
    }
}

impl<'g, T: RemoteMemoryAccess> WorkRequestHandle<'g, T> {
    /// An RDMA WRITE to `remote_addr` in the remote region of `rkey` (`ibv_wr_rdma_write`).
    #[inline]
    pub fn setup_write(self, rkey: u32, remote_addr: u64) -> T::AfterOperation<'g, operation::Write> {
        self.with(operation::Write { rkey, remote_addr })
    }

    /// An RDMA WRITE with immediate data (`ibv_wr_rdma_write_imm`); `imm_data` as for
    /// [`setup_send_imm`](Self::setup_send_imm). It consumes a receive at the remote end.
    #[inline]
    pub fn setup_write_imm(
        self, rkey: u32, remote_addr: u64, imm_data: u32,
    ) -> T::AfterOperation<'g, operation::WriteWithImmediate> {
        self.with(operation::WriteWithImmediate {
            rkey,
            remote_addr,
            imm_data,
        })
    }

    /// An RDMA READ from `remote_addr` in the remote region of `rkey` (`ibv_wr_rdma_read`).
    #[inline]
    pub fn setup_read(self, rkey: u32, remote_addr: u64) -> T::AfterOperation<'g, operation::Read> {
        self.with(operation::Read { rkey, remote_addr })
    }

    /// An atomic compare-and-swap on the 8 bytes at `remote_addr`; the old value lands in the
    /// local buffer (`ibv_wr_atomic_cmp_swp`).
    ///
    /// `compare` and `swap` are numbers; in which byte order the device reads and writes the
    /// remote 8 bytes, and writes the old value into the local buffer, is the device's: a
    /// ConnectX uses host order only where mlx5_core set its `atomic_req_8B_endianness_mode`
    /// so, big-endian (InfiniBand's wire order) otherwise, as rxe and other providers may too.
    /// Keep atomic variables in the order the device uses (UCX reads the mode, `ib_mlx5dv_md.c`;
    /// `mlx5_devinfo --dc-selftest` reports it).
    #[inline]
    pub fn setup_atomic_compare_swap(
        self, rkey: u32, remote_addr: u64, compare: u64, swap: u64,
    ) -> T::AfterOperation<'g, operation::AtomicCompareAndSwap> {
        self.with(operation::AtomicCompareAndSwap {
            rkey,
            remote_addr,
            compare,
            swap,
        })
    }

    /// An atomic fetch-and-add on the 8 bytes at `remote_addr`; the old value lands in the local
    /// buffer (`ibv_wr_atomic_fetch_add`). The byte order of the remote value and of the reply is
    /// the device's, as for [`setup_atomic_compare_swap`](Self::setup_atomic_compare_swap).
    #[inline]
    pub fn setup_atomic_fetch_add(
        self, rkey: u32, remote_addr: u64, add: u64,
    ) -> T::AfterOperation<'g, operation::AtomicFetchAndAdd> {
        self.with(operation::AtomicFetchAndAdd { rkey, remote_addr, add })
    }
}

/// The destination step of a UD request.
#[must_use = "a request is added to the batch only at its data step"]
pub struct UnreliableDatagramDestination<'g, O: Operation> {
    request: PendingRequest<'g, O>,
}

impl<'g, O: Operation> UnreliableDatagramDestination<'g, O> {
    /// Sends to queue pair `remote_qpn` with Q_Key `remote_qkey`, over the route of `ah`
    /// (`ibv_wr_set_ud_addr`).
    ///
    /// The provider may resolve the address handle after the post (rxe reads it when it builds
    /// the packet): keep `ah` alive until the request's completion has been polled, not only until
    /// [`post`](PostSendGuard::post). Holding the `Arc<AddressHandle>` in a per-destination cache
    /// does that.
    #[inline]
    pub fn setup_ud_addr(
        self, ah: &'g AddressHandle, remote_qpn: u32, remote_qkey: u32,
    ) -> LocalBufferHandle<'g, O, DatagramAddress> {
        // SAFETY: only the pointer is taken; the caller keeps the handle alive (see above).
        let ah = unsafe { ah.ah() };
        LocalBufferHandle::new(
            self.request,
            DatagramAddress {
                ah,
                remote_qpn,
                remote_qkey,
            },
        )
    }
}

/// The data step of a request: scatter/gather entries or inline data. Giving the data issues the
/// request's C calls.
#[must_use = "a request is added to the batch only at its data step"]
pub struct LocalBufferHandle<'g, O: Operation, D: Destination> {
    request: PendingRequest<'g, O>,
    destination: D,
}

impl<'g, O: Operation, D: Destination> LocalBufferHandle<'g, O, D> {
    /// The data step of `request`, sent to `destination`; for the destination steps of other
    /// modules' transports.
    #[inline(always)]
    pub(crate) fn new(request: PendingRequest<'g, O>, destination: D) -> Self {
        Self { request, destination }
    }

    /// Makes the request's C calls in order: `wr_id` and `wr_flags` (with the inline bit set
    /// exactly when the data is inline), the builder, the destination setter, then `data` — or,
    /// when one of their entries is missing, none of them.
    #[inline(always)]
    fn issue<const SETTER: u32, const INLINE: bool>(self, data: impl FnOnce(*mut ibv_qp_ex)) {
        let Self { request, destination } = self;
        let batch = request.batch;
        let needed = O::ENTRY | D::ENTRY | SETTER;
        if batch.missing & needed != 0 {
            batch.refuse(request.wr_id, needed, D::ENTRY_NAME);
            return;
        }
        let qp = batch.qp_ex.as_ptr();
        let inline_bit = ibv_send_flags::IBV_SEND_INLINE.0;
        let flags = if INLINE {
            request.wr_flags | inline_bit
        } else {
            request.wr_flags & !inline_bit
        };
        // SAFETY: the guard that made this request holds the live queue pair exclusively, inside
        // a batch started with ibv_wr_start; every entry called was checked above.
        unsafe {
            (*qp).wr_id = request.wr_id;
            (*qp).wr_flags = flags;
            request.operation.build(qp);
            destination.set(qp);
        }
        data(qp);
        batch.len += 1;
    }
}

// IoSlice is ABI-compatible with iovec, which has the layout of ibv_data_buf (pointer, length).
const _: () = assert!(std::mem::size_of::<IoSlice<'_>>() == std::mem::size_of::<ibv_data_buf>());

impl<O: Operation, D: Destination> SetInlineData for LocalBufferHandle<'_, O, D> {
    /// Copies `buf` into the request (`ibv_wr_set_inline_data`); at most the queue pair's
    /// granted `max_inline_data` bytes, else the post fails with
    /// [`InlineDataTooLong`](PostSendErrorKind::InlineDataTooLong) where the queue pair knows
    /// its granted size (a DC initiator), with the provider's error otherwise.
    #[inline]
    fn setup_inline_data(self, buf: &[u8]) {
        if buf.len() > self.request.batch.max_inline_data as usize {
            return self.request.batch.refuse_inline(self.request.wr_id, buf.len());
        }
        // SAFETY: the data is copied during the call; the entry was checked by issue.
        self.issue::<{ entry::SET_INLINE_DATA }, true>(|qp| unsafe {
            ibv_wr_set_inline_data(qp, buf.as_ptr() as *mut _, buf.len())
        });
    }

    /// Copies the slices, one after the other, into the request (`ibv_wr_set_inline_data_list`).
    #[inline]
    fn setup_inline_data_list(self, bufs: &[IoSlice<'_>]) {
        let max = self.request.batch.max_inline_data as usize;
        if max != u32::MAX as usize {
            let length = bufs.iter().map(|buf| buf.len()).sum();
            if length > max {
                return self.request.batch.refuse_inline(self.request.wr_id, length);
            }
        }
        // SAFETY: IoSlice has ibv_data_buf's layout (checked above); the data is copied during
        // the call; the entry was checked by issue.
        self.issue::<{ entry::SET_INLINE_DATA_LIST }, true>(|qp| unsafe {
            ibv_wr_set_inline_data_list(qp, bufs.len(), bufs.as_ptr() as *const ibv_data_buf)
        });
    }
}

impl<O: Operation, D: Destination> SetScatterGatherEntry for LocalBufferHandle<'_, O, D> {
    /// # Safety
    ///
    /// The buffer must lie in the memory region of `lkey` and stay valid until the request
    /// completes.
    #[inline]
    unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) {
        self.issue::<{ entry::SET_SGE }, false>(|qp| ibv_wr_set_sge(qp, lkey, addr, length));
    }

    /// # Safety
    ///
    /// Each buffer must lie in the memory region of its `lkey` and stay valid until the request
    /// completes; more entries than the queue pair's `max_send_sge` fail the post with
    /// [`InvalidWorkRequest`](PostSendErrorKind::InvalidWorkRequest).
    #[inline]
    unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) {
        self.issue::<{ entry::SET_SGE_LIST }, false>(|qp| ibv_wr_set_sge_list(qp, sg_list.len(), sg_list.as_ptr()));
    }
}

#[cfg(test)]
mod tests {
    //! The guard driven through a recording function table: no device, the exact sequence of
    //! provider calls.
    use rdma_mummy_sys::ibv_ah;

    use super::*;
    use crate::test_support::{all_entries, recording_qp, take_calls};

    #[test]
    fn rc_requests_issue_flags_opcode_then_data() {
        let mut qp = recording_qp();
        take_calls();
        // SAFETY: the recording queue pair outlives the guard; RC needs no context.
        let mut guard =
            unsafe { PostSendGuard::<ReliableConnection>::start(NonNull::from(&mut *qp), all_entries(&mut qp), ()) };
        let _ = guard
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
                // Immediate data goes to the provider unchanged, as sideway passes it.
                "send_imm wr_id=9 imm=0x1020304".to_string(),
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
        let mut guard =
            unsafe { PostSendGuard::<UnreliableDatagram>::start(NonNull::from(&mut *qp), all_entries(&mut qp), ()) };
        let request = guard.construct_wr(3, WorkRequestFlags::none()).setup_send();
        // The address handle is only passed through; a dangling but non-null pointer is never used
        // by the recorder.
        let data = LocalBufferHandle::new(
            request.request,
            DatagramAddress {
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

#[cfg(test)]
mod provider_entry_tests {
    //! Operations and setters a queue pair was not created with never reach the provider.
    use super::*;
    use crate::test_support::{recording_qp, send_only_recording_qp, take_calls};

    #[test]
    fn a_missing_builder_of_a_granted_operation_is_refused_at_creation() {
        let mut qp = recording_qp();
        qp.wr_rdma_write = None;
        // SAFETY: qp is a live ibv_qp_ex.
        let err = unsafe { ProviderEntries::new(NonNull::from(&mut *qp), SendOperationFlags::Write) }.unwrap_err();
        assert_eq!(err, MissingProviderEntry("wr_rdma_write"));
        qp.wr_complete = None;
        // SAFETY: as above.
        let err = unsafe { ProviderEntries::new(NonNull::from(&mut *qp), SendOperationFlags::Send) }.unwrap_err();
        assert_eq!(err, MissingProviderEntry("wr_complete"));
    }

    #[test]
    fn an_operation_the_queue_pair_was_not_created_with_is_refused_and_the_batch_aborted() {
        // As rxe does for a queue pair created with SEND only: every other builder is NULL.
        let mut qp = send_only_recording_qp();
        // SAFETY: qp is a live ibv_qp_ex.
        let entries = unsafe { ProviderEntries::new(NonNull::from(&mut *qp), SendOperationFlags::Send) }.unwrap();
        assert!(!entries.contains(entry::RDMA_WRITE));
        take_calls();
        // SAFETY: the table outlives the guard; RC needs no context.
        let mut guard = unsafe { PostSendGuard::<ReliableConnection>::start(NonNull::from(&mut *qp), entries, ()) };
        guard
            .construct_wr(1, WorkRequestFlags::Signaled)
            .setup_send()
            .setup_inline_data(b"ok");
        // The write's builder is NULL: calling it would be undefined behaviour.
        // SAFETY: the recorder does not touch the buffer.
        unsafe {
            guard
                .construct_wr(2, WorkRequestFlags::Signaled)
                .setup_write(1, 2)
                .setup_sge(3, 4, 5)
        };
        // A setter the provider lacks is refused too.
        guard
            .construct_wr(3, WorkRequestFlags::Signaled)
            .setup_send()
            .setup_inline_data_list(&[IoSlice::new(b"x")]);
        assert_eq!(guard.batch_len(), 3);
        let err = guard.post().unwrap_err();
        match err.0 {
            PostSendErrorKind::OperationNotEnabled {
                index,
                wr_id,
                entry,
                batch_len,
            } => assert_eq!((index, wr_id, entry, batch_len), (1, 2, "wr_rdma_write", 3)),
            other => panic!("unexpected {other:?}"),
        }
        let calls = take_calls();
        assert_eq!(calls.first().map(String::as_str), Some("start"));
        assert_eq!(calls.last().map(String::as_str), Some("abort"), "{calls:?}");
        assert!(
            !calls.iter().any(|c| c.starts_with("write") || c == "complete"),
            "{calls:?}"
        );
    }
}

#[cfg(test)]
mod post_one_tests {
    //! One-request posts: the same calls as a batch of one.
    use super::*;
    use crate::test_support::{all_entries, recording_qp, send_only_recording_qp, take_calls};

    #[test]
    fn one_request_makes_the_batch_calls_in_order() {
        let mut qp = recording_qp();
        let entries = all_entries(&mut qp);
        take_calls();
        // SAFETY: the recording table outlives the call; RC needs no context; the recorder does
        // not touch the buffer.
        unsafe {
            PostSendGuard::<ReliableConnection>::post_one(
                NonNull::from(&mut *qp),
                entries,
                (),
                5,
                WorkRequestFlags::Signaled,
                |wr| wr.setup_write(0x77, 0x3000).setup_sge(0x9, 0x4000, 16),
            )
        }
        .expect("recorded complete returns 0");
        let signaled = ibv_send_flags::IBV_SEND_SIGNALED.0;
        assert_eq!(
            take_calls(),
            [
                "start".to_string(),
                format!("write wr_id=5 flags={signaled:#x} rkey=0x77 addr=0x3000"),
                "sge lkey=0x9 addr=0x4000 len=16".to_string(),
                "complete".to_string(),
            ]
        );
    }

    #[test]
    fn a_refused_request_reaches_no_null_entry_and_names_its_wr_id() {
        let mut qp = send_only_recording_qp();
        qp.wr_set_inline_data = None;
        // SAFETY: qp is a live ibv_qp_ex.
        let entries = unsafe { ProviderEntries::new(NonNull::from(&mut *qp), SendOperationFlags::Send) }.unwrap();
        take_calls();
        // SAFETY: as above.
        let err = unsafe {
            PostSendGuard::<ReliableConnection>::post_one(
                NonNull::from(&mut *qp),
                entries,
                (),
                9,
                WorkRequestFlags::Signaled,
                |wr| wr.setup_write(1, 2).setup_sge(3, 4, 5),
            )
        }
        .unwrap_err();
        assert!(
            matches!(
                err.0,
                PostSendErrorKind::OperationNotEnabled {
                    index: 0,
                    wr_id: 9,
                    entry: "wr_rdma_write",
                    batch_len: 1
                }
            ),
            "{err:?}"
        );
        // The NULL builder was never called; the batch was aborted.
        assert_eq!(take_calls(), ["start", "abort"]);
        // A request that never reaches its data step posts nothing (an empty batch).
        // SAFETY: as above.
        unsafe {
            PostSendGuard::<ReliableConnection>::post_one(
                NonNull::from(&mut *qp),
                entries,
                (),
                10,
                WorkRequestFlags::Signaled,
                |wr| drop(wr.setup_send()),
            )
        }
        .expect("nothing to post");
        assert_eq!(take_calls(), ["start", "complete"]);
    }
}

#[cfg(test)]
mod external_transport_tests {
    //! A transport defined outside this module, as the mlx5 module's DC initiator will be: its
    //! own per-queue-pair context (not `Default`), its own destination step and setter, and a
    //! provider entry outside `ibv_qp_ex`.
    use std::ptr::NonNull;

    use super::*;
    use crate::test_support::{all_entries, record, recording_qp, take_calls};

    /// The per-queue-pair context: a pointer, as DC's mlx5 view of the queue pair will be.
    #[derive(Clone, Copy)]
    struct ExtendedView(NonNull<u32>);

    enum External {}

    impl sealed::Sealed for External {}

    impl Transport for External {
        type Context = ExtendedView;
        type AfterOperation<'g, O: Operation> = ExternalDestination<'g, O>;

        fn after_operation<O: Operation>(
            request: PendingRequest<'_, O>, context: ExtendedView,
        ) -> ExternalDestination<'_, O> {
            ExternalDestination { request, context }
        }
    }

    impl RemoteMemoryAccess for External {}

    struct ExternalDestination<'g, O: Operation> {
        request: PendingRequest<'g, O>,
        context: ExtendedView,
    }

    impl<'g, O: Operation> ExternalDestination<'g, O> {
        fn setup_address(self, key: u64) -> LocalBufferHandle<'g, O, ExternalAddress> {
            LocalBufferHandle::new(
                self.request,
                ExternalAddress {
                    view: self.context,
                    key,
                },
            )
        }
    }

    #[derive(Clone, Copy)]
    struct ExternalAddress {
        view: ExtendedView,
        key: u64,
    }

    impl sealed::Sealed for ExternalAddress {}

    // SAFETY: it calls the recording table's external entry only.
    unsafe impl Destination for ExternalAddress {
        const ENTRY: u32 = entry::FIRST_EXTERNAL;
        const ENTRY_NAME: &'static str = "wr_set_external_addr";

        unsafe fn set(self, _qp: *mut ibv_qp_ex) {
            record(format!(
                "external_addr view={} key={:#x}",
                *self.view.0.as_ptr(),
                self.key
            ));
        }
    }

    #[test]
    fn a_transport_of_another_module_plugs_in_with_its_own_step_and_entry() {
        let mut qp = recording_qp();
        let mut view = 42u32;
        let context = ExtendedView(NonNull::from(&mut view));
        let entries = all_entries(&mut qp);
        take_calls();
        // Without the external entry, the request is refused before the provider.
        // SAFETY: the recording table outlives the guard; the context points at `view`.
        let mut guard = unsafe { PostSendGuard::<External>::start(NonNull::from(&mut *qp), entries, context) };
        guard
            .construct_wr(1, WorkRequestFlags::Signaled)
            .setup_send()
            .setup_address(0xdc)
            .setup_inline_data(b"x");
        assert!(matches!(
            guard.post().unwrap_err().0,
            PostSendErrorKind::OperationNotEnabled {
                index: 0,
                entry: "wr_set_external_addr",
                ..
            }
        ));
        assert_eq!(take_calls(), ["start", "abort"]);
        // With it, the calls come in the contract's order.
        let entries = entries.with(entry::FIRST_EXTERNAL);
        // SAFETY: as above.
        let mut guard = unsafe { PostSendGuard::<External>::start(NonNull::from(&mut *qp), entries, context) };
        // SAFETY: the recorder does not touch the buffer.
        unsafe {
            guard
                .construct_wr(2, WorkRequestFlags::Signaled)
                .setup_write(5, 0x100)
                .setup_address(0xdc)
                .setup_sge(1, 0x200, 8)
        };
        guard.post().unwrap();
        let signaled = ibv_send_flags::IBV_SEND_SIGNALED.0;
        assert_eq!(
            take_calls(),
            [
                "start".to_string(),
                format!("write wr_id=2 flags={signaled:#x} rkey=0x5 addr=0x100"),
                "external_addr view=42 key=0xdc".to_string(),
                "sge lkey=0x1 addr=0x200 len=8".to_string(),
                "complete".to_string(),
            ]
        );
    }
}
