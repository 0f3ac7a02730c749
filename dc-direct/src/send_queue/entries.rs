//! [`SendQueueEntries`]: the C front end of the writer, its state between calls and the
//! errors it reports (the entries themselves are in `calls.rs`, the address vectors' places in
//! `address_cache.rs`).
use std::mem::{offset_of, MaybeUninit};
use std::ptr::{addr_of_mut, NonNull};

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, mlx5dv_qp_ex};
use sideway::ibverbs::queue_pair::SendOperationFlags;
use sideway_ext::ibverbs::post_send_guard::ProviderEntries;
#[cfg(doc)]
use sideway_ext::mlx5::dc::initiator::BatchAddressed;
use sideway_ext::mlx5::dc::initiator::DcContext;

use super::address_cache::{AddressCache, AddressLookup};
use super::batch::Batch;
use super::operation::Segments;
use super::wqe::{Data, Request};
use super::{AddressVector, SendQueue, WorkRequestError, WorkRequestErrorKind};

mod calls;

/// A [`SendQueue`] behind the C entries libibverbs and libmlx5 post
/// through (`struct ibv_qp_ex`'s `wr_*` and `struct mlx5dv_qp_ex`'s DC setters), so that code
/// written over those tables — sideway-ext's DC guard, a pool's [`BatchAddressed`] guards —
/// posts on the direct writer unchanged. One writer, two front ends: each request is written by
/// the same code as the native API's ([`SendQueue::start_post_send`]).
///
/// ```no_run
/// use sideway::ibverbs::queue_pair::{SendOperationFlags, SetInlineData, WorkRequestFlags};
/// use sideway_ext::ibverbs::address_handle::AddressHandle;
/// use sideway_ext::ibverbs::post_send_guard::PostSendGuard;
/// use sideway_ext::mlx5::dc::initiator::{BatchAddressed, DcAddress};
/// use sideway_ext_dc_direct::send_queue::{SendQueue, SendQueueEntries};
///
/// # fn post(queue: SendQueue, ah: &AddressHandle) -> Result<(), Box<dyn std::error::Error>> {
/// // `queue`: from `SendQueue::from_parts`, of a DCI created with SEND and RDMA WRITE.
/// let mut entries = SendQueueEntries::new(queue, SendOperationFlags::Send | SendOperationFlags::Write);
/// let max_inline_data = entries.queue_mut().max_inline_data();
/// let (qp_ex, provider_entries, mlx5_qp_ex) = entries.send_views();
/// // SAFETY: the views are the entries' own; `ah` is a live address handle of the DCI's device.
/// let address = unsafe { DcAddress::new(mlx5_qp_ex, ah.ah(), 0x00ab_cdef, 0xdc) };
/// // SAFETY: `entries` is borrowed for as long as the guard lives, its provider entries its own.
/// let mut guard = unsafe { PostSendGuard::<BatchAddressed<DcAddress>>::start(qp_ex, provider_entries, address) };
/// guard.set_max_inline_data(max_inline_data);
/// guard.construct_wr(1, WorkRequestFlags::Signaled).setup_send().setup_inline_data(b"hello");
/// guard.post()?;
/// # Ok(()) }
/// ```
///
/// # The state between calls, as libmlx5's builders keep it
///
/// | entry | libmlx5 (`providers/mlx5/qp.c`) | here |
/// |---|---|---|
/// | `wr_start` | `mlx5_send_wr_start`: `err`, `nreq` cleared, `cur_post` kept for a rollback | a batch starts at the queue's posting index |
/// | `wr_send`, …, `wr_atomic_fetch_add` | `_common_wqe_init_op` (reads `wr_id`, `wr_flags`) and the operation's segments | the pending request: `wr_id`, flags, operation |
/// | `wr_set_dc_addr(_stream)` | `mlx5_send_wr_set_dc_addr(_stream)`: copies `to_mah(ah)->av` | the address vector copied (see [Address handles](#address-handles)) |
/// | `wr_set_sge(_list)`, `wr_set_inline_data(_list)` | the `_ud_xrc_dc` setters | the data |
/// | the second of the two setters | `_common_wqe_finalize` | the WQE is written ([`SendQueue`]'s writer) |
/// | `wr_complete` | `mlx5_send_wr_complete`: the first error (`mqp->err`) returned and the batch rolled back, else `post_send_db` | the same |
/// | `wr_abort` | `mlx5_send_wr_abort` | the batch is dropped |
///
/// The two setters come in either order, as in libmlx5: data given before the address is kept
/// (copied: the caller may reuse its buffers at once) until the address comes.
///
/// The errors are libmlx5's: `ENOMEM` for a full queue (`mlx5_wq_overflow`), too many
/// scatter/gather entries (one on a queue granted none too, which libmlx5 writes) or too much
/// inline data. Where libmlx5 writes whatever the calls leave, these entries refuse with
/// `EINVAL` at `wr_complete`: a request missing its address or its data (libmlx5 overwrites it
/// or posts it half-built), a setter without a request or given twice, an address handle without
/// an address vector, a stream id on a DCI without streams. A request after an error is not
/// written (the batch is rolled back anyway), and a refused request writes nothing into the
/// queue (libmlx5's request past a full queue writes over the last WQE it wrote, which may be
/// one posted and not yet read).
///
/// # Address handles
///
/// The address vector of the `ibv_ah` a DC setter names is where `mlx5dv_init_obj`
/// (`MLX5DV_OBJ_AH`) says: `&to_mah(ah)->av`, the 48 bytes libmlx5's own setter copies. That
/// place is asked once per handle pointer and kept (the last one used first: a pool's batch
/// goes to one destination; then a table of up to 4096 handles, started afresh when full); the
/// bytes are read through it at every setter call, as libmlx5 reads them. So a handle destroyed
/// and another created at the same address (malloc reuses it), a `struct mlx5_ah` again, is read
/// at the same place and gives the new handle's route; the hazard left is libmlx5's own: a
/// handle must be alive during the setter's call.
///
/// Every builder and both DC setters are filled, as libmlx5 fills them for a DCI
/// (`mlx5_qp_fill_wr_pfns`); [`send_views`](SendQueueEntries::send_views) names only the
/// operations the DCI was created with, which is what the guard lets through.
///
/// An `extern "C"` entry that panicked would abort the process (Rust does not unwind out of
/// one); the writer they call has no panic path.
pub struct SendQueueEntries {
    tables: NonNull<Tables>,
    provider_entries: ProviderEntries,
}

/// The tables handed out, and the state their entries share. `qp_ex` first: the `*mut
/// ibv_qp_ex` handed out is a `*mut Tables`.
#[repr(C)]
struct Tables {
    qp_ex: ibv_qp_ex,
    mlx5: mlx5dv_qp_ex,
    state: State,
}

/// What the entries keep between calls.
struct State {
    queue: SendQueue,
    /// The batch between `wr_start` and `wr_complete` or `wr_abort`.
    batch: Option<Batch>,
    /// The request whose builder was called and whose setters are not all in yet.
    pending: Option<Pending>,
    /// The batch's first error (libmlx5's `mqp->err`), 0 for none.
    error: i32,
    addresses: AddressCache,
    /// Data given before the address, kept until it comes (room for the queue's limits, made
    /// once).
    held: Held,
}

/// A request between its builder and its last setter.
struct Pending {
    wr_id: u64,
    fm_ce_se: u8,
    segments: Segments,
    address: Option<Address>,
    /// Whether its data came first and waits in [`State::held`].
    data_held: bool,
}

/// A request's DC address, as its setter gave it.
struct Address {
    vector: AddressVector,
    dct_number: u32,
    dc_key: u64,
    stream_id: Option<u16>,
}

/// Data given before the address: one entry, or the entries or inline bytes in the buffers.
struct Held {
    kind: HeldKind,
    entries: Vec<rdma_mummy_sys::ibv_sge>,
    bytes: Vec<u8>,
}

#[derive(Clone, Copy)]
enum HeldKind {
    Sge { lkey: u32, addr: u64, length: u32 },
    SgeList,
    Inline,
}

// SAFETY: the tables and the queue's memory are the entries' own (`SendQueue`'s contract); the
// address vectors' places are the address handles' (libmlx5's memory, read only); moving the
// entries to another thread moves all access with them.
unsafe impl Send for SendQueueEntries {}

impl std::fmt::Debug for SendQueueEntries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendQueueEntries")
            .field("provider_entries", &self.provider_entries)
            .finish_non_exhaustive()
    }
}

impl SendQueueEntries {
    /// The entries of `queue`, a DCI's send queue created with the send operations `operations`
    /// (its `send_ops_flags`), on a device: where each address handle's vector is, is asked
    /// once through `mlx5dv_init_obj` (see [`SendQueueEntries`]).
    pub fn new(queue: SendQueue, operations: SendOperationFlags) -> Self {
        Self::with_address_lookup(queue, operations, AddressCache::device())
    }

    /// As [`new`](Self::new), finding address vectors with `lookup`.
    pub(crate) fn with_address_lookup(queue: SendQueue, operations: SendOperationFlags, lookup: AddressLookup) -> Self {
        let streams = queue.streams;
        let held = Held {
            kind: HeldKind::SgeList,
            entries: Vec::with_capacity(queue.max_send_sge as usize),
            bytes: Vec::with_capacity(queue.max_inline_data as usize),
        };
        // SAFETY: ibv_qp_ex and mlx5dv_qp_ex are plain C data (integers, raw pointers, optional
        // functions): all zeroes is a valid value, every entry NULL until filled.
        let (mut qp_ex, mut mlx5): (ibv_qp_ex, mlx5dv_qp_ex) =
            unsafe { (MaybeUninit::zeroed().assume_init(), MaybeUninit::zeroed().assume_init()) };
        qp_ex.qp_base.qp_num = queue.qp_number;
        calls::fill(&mut qp_ex, &mut mlx5);
        let state = State {
            queue,
            batch: None,
            pending: None,
            error: 0,
            addresses: AddressCache::new(lookup),
            held,
        };
        let tables = NonNull::from(Box::leak(Box::new(Tables { qp_ex, mlx5, state })));
        let mut entries = Self {
            tables,
            provider_entries: ProviderEntries::NONE,
        };
        let (qp_ex, _, mlx5) = entries.send_views();
        // SAFETY: the views of the live tables just made. Every builder, both data setters and
        // both DC setters are filled: neither reading fails (were it to, NONE refuses all).
        entries.provider_entries = unsafe {
            ProviderEntries::new(qp_ex, operations)
                .ok()
                .and_then(|ibv| DcContext::from_raw(mlx5).entries(ibv, streams).ok())
                .unwrap_or(ProviderEntries::NONE)
        };
        entries
    }

    /// The views to post through, as a DC initiator's `send_views`: the extended queue pair,
    /// the entries a guard may use (the operations the DCI was created with, the data setters,
    /// `wr_set_dc_addr`, and `wr_set_dc_addr_stream` on a DCI with streams), the mlx5 view.
    /// Valid while `self` is; a guard started on them must hold `self` borrowed mutably.
    pub fn send_views(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        // SAFETY: a field of the live tables, derived from their whole allocation.
        let mlx5 = unsafe { NonNull::new_unchecked(addr_of_mut!((*self.tables.as_ptr()).mlx5)) };
        (self.tables.cast(), self.provider_entries, mlx5)
    }

    /// The send queue, to read its limits.
    pub fn queue(&self) -> &SendQueue {
        // SAFETY: the live tables; the entries' calls, which change the queue, are made by
        // holders of `&mut self` (a guard on the views borrows it), and never from another
        // thread (`SendQueueEntries` is not `Sync`).
        unsafe { &(*self.tables.as_ptr()).state.queue }
    }

    /// The send queue, to post on natively or to complete requests on. A batch started through
    /// the entries and not completed is aborted (its `wr_complete` then returns `EINVAL`).
    pub fn queue_mut(&mut self) -> &mut SendQueue {
        // SAFETY: the live tables; `&mut self` excludes every other use of them (a guard on the
        // views borrows `self`).
        let state = unsafe { &mut (*self.tables.as_ptr()).state };
        state.batch = None;
        state.pending = None;
        &mut state.queue
    }
}

impl Drop for SendQueueEntries {
    fn drop(&mut self) {
        // SAFETY: leaked from a Box in `with_address_lookup`, freed once here; no guard is alive
        // (one borrows self).
        drop(unsafe { Box::from_raw(self.tables.as_ptr()) });
    }
}

/// The errno libmlx5 returns for what the writer refused.
fn errno(error: WorkRequestError) -> i32 {
    match error.0 {
        WorkRequestErrorKind::QueueFull { .. }
        | WorkRequestErrorKind::InlineDataTooLong { .. }
        | WorkRequestErrorKind::TooManyScatterGatherEntries { .. } => libc::ENOMEM,
        WorkRequestErrorKind::StreamsNotEnabled { .. } => libc::EINVAL,
    }
}

impl State {
    /// Keeps the batch's first error.
    #[inline]
    fn fail(&mut self, errno: i32) {
        if self.error == 0 {
            self.error = errno;
        }
    }

    fn start(&mut self) {
        self.batch = Some(Batch::start(&self.queue));
        self.pending = None;
        self.error = 0;
    }

    /// Ends the batch: posted, or rolled back with its first error.
    fn complete(&mut self) -> i32 {
        let Some(batch) = self.batch.take() else {
            return libc::EINVAL;
        };
        if self.pending.take().is_some() {
            self.fail(libc::EINVAL);
        }
        let error = std::mem::take(&mut self.error);
        if error == 0 {
            self.queue.post_batch(&batch);
        }
        error
    }

    fn abort(&mut self) {
        self.batch = None;
        self.pending = None;
        self.error = 0;
    }

    /// A builder: a new pending request (the last one, still pending, was missing a setter).
    #[inline]
    fn begin(&mut self, wr_id: u64, wr_flags: u32, segments: Segments) {
        let missing_setter = self.pending.is_some();
        self.pending = Some(Pending {
            wr_id,
            fm_ce_se: super::batch::fm_ce_se(wr_flags),
            segments,
            address: None,
            data_held: false,
        });
        if missing_setter {
            self.fail(libc::EINVAL);
        }
    }

    /// The DC setter: the request is written when its data is in already.
    ///
    /// # Safety
    ///
    /// `ah` must be a live address handle (on a device, libmlx5's).
    #[inline]
    unsafe fn set_address(&mut self, ah: *mut ibv_ah, dct_number: u32, dc_key: u64, stream_id: Option<u16>) {
        let vector = match NonNull::new(ah) {
            // SAFETY: the caller's promise.
            Some(ah) => unsafe { self.addresses.read(ah) },
            None => None,
        };
        let (Some(pending), Some(vector)) = (self.pending.as_mut(), vector) else {
            return self.fail(libc::EINVAL);
        };
        if pending.address.is_some() {
            return self.fail(libc::EINVAL);
        }
        pending.address = Some(Address {
            vector,
            dct_number,
            dc_key,
            stream_id,
        });
        if pending.data_held {
            let held = &self.held;
            let data = match held.kind {
                HeldKind::Sge { lkey, addr, length } => Data::Sge { lkey, addr, length },
                HeldKind::SgeList => Data::SgeList(&held.entries),
                HeldKind::Inline => Data::Inline(&held.bytes),
            };
            let Self {
                queue,
                batch,
                pending,
                error,
                ..
            } = self;
            write(queue, batch, pending, error, data);
        }
    }

    /// A data setter: the request is written when its address is in already, else the data is
    /// kept until it comes.
    #[inline]
    fn set_data(&mut self, data: Data<'_>) {
        match &self.pending {
            Some(pending) if pending.address.is_some() && !pending.data_held => write(
                &mut self.queue,
                &mut self.batch,
                &mut self.pending,
                &mut self.error,
                data,
            ),
            Some(pending) if !pending.data_held => self.hold(data),
            _ => self.fail(libc::EINVAL),
        }
    }

    /// Keeps data given before the address (refused at once when over the queue's limits, as
    /// the writer would refuse it).
    #[cold]
    fn hold(&mut self, data: Data<'_>) {
        let held = &mut self.held;
        let (max_inline_data, max_send_sge) = (self.queue.max_inline_data as usize, self.queue.max_send_sge as usize);
        let fits = match data {
            Data::Sge { lkey, addr, length } => {
                held.kind = HeldKind::Sge { lkey, addr, length };
                true
            },
            Data::SgeList(list) => {
                held.kind = HeldKind::SgeList;
                held.entries.clear();
                held.entries.extend_from_slice(&list[..list.len().min(max_send_sge)]);
                list.len() <= max_send_sge
            },
            Data::Inline(bytes) => {
                held.kind = HeldKind::Inline;
                held.bytes.clear();
                held.bytes.extend_from_slice(&bytes[..bytes.len().min(max_inline_data)]);
                bytes.len() <= max_inline_data
            },
            Data::InlineList(slices) => {
                held.kind = HeldKind::Inline;
                held.bytes.clear();
                for slice in slices {
                    let room = max_inline_data - held.bytes.len();
                    held.bytes.extend_from_slice(&slice[..slice.len().min(room)]);
                }
                slices.iter().map(|slice| slice.len()).sum::<usize>() <= max_inline_data
            },
        };
        if !fits {
            self.pending = None;
            return self.fail(libc::ENOMEM);
        }
        if let Some(pending) = self.pending.as_mut() {
            pending.data_held = true;
        }
    }
}

/// Writes the pending request (its address in) with `data` into the batch, through the writer;
/// a refusal becomes the batch's error. Nothing is written after an error, or outside a batch.
#[inline(always)]
fn write(
    queue: &mut SendQueue, batch: &mut Option<Batch>, pending: &mut Option<Pending>, error: &mut i32, data: Data<'_>,
) {
    let Some(Pending {
        wr_id,
        fm_ce_se,
        segments,
        address: Some(address),
        ..
    }) = pending.take()
    else {
        return;
    };
    let (Some(batch), 0) = (batch.as_mut(), *error) else {
        return;
    };
    let request = Request {
        wr_id,
        fm_ce_se,
        segments,
        address: &address.vector,
        dct_number: address.dct_number,
        dc_key: address.dc_key,
        stream_id: address.stream_id,
    };
    if let Err(refused) = queue.write(batch, request, data) {
        *error = errno(refused);
    }
}

/// The state of the tables `qp` belongs to.
///
/// # Safety
///
/// `qp` must be the `qp_ex` of live [`Tables`] (a pointer [`SendQueueEntries::send_views`]
/// handed out), and no other reference to their state alive.
#[inline]
unsafe fn state<'a>(qp: *mut ibv_qp_ex) -> &'a mut State {
    // SAFETY: the caller's promise.
    unsafe { &mut *addr_of_mut!((*qp.cast::<Tables>()).state) }
}

/// The state of the tables `mqp` belongs to.
///
/// # Safety
///
/// As [`state`], for their `mlx5` view (derived from their whole allocation).
#[inline]
unsafe fn state_of_mlx5<'a>(mqp: *mut mlx5dv_qp_ex) -> &'a mut State {
    // SAFETY: the caller's promise: the view is a field of the tables, at its offset.
    unsafe { state(mqp.byte_sub(offset_of!(Tables, mlx5)).cast()) }
}
