//! [`SendQueueEntries`]: the C front end of the writer, the tables it hands out; the entries
//! themselves are in `calls.rs`, the state they keep between calls and the errors they report in
//! `state.rs`, the address vectors' places in the send queue's `address_cache.rs`.
use std::mem::{offset_of, MaybeUninit};
use std::ptr::{addr_of_mut, NonNull};

use std::rc::Rc;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, mlx5dv_qp_ex};
use sideway::ibverbs::queue_pair::SendOperationFlags;
use sideway_ext::ibverbs::post_send_guard::ProviderEntries;
#[cfg(doc)]
use sideway_ext::mlx5::dc::initiator::BatchAddressed;
use sideway_ext::mlx5::dc::initiator::DcContext;

use super::address_cache::{AddressCache, AddressLookup};
use super::shared::SharedSendQueue;
use super::SendQueue;
use state::State;

mod calls;
mod state;

/// A [`SendQueue`] behind the C entries libibverbs and libmlx5 post
/// through (`struct ibv_qp_ex`'s `wr_*` and `struct mlx5dv_qp_ex`'s DC setters), so that code
/// written over those tables — sideway-ext's DC guard, a pool's [`BatchAddressed`] guards —
/// posts on the direct writer unchanged. One writer, two front ends: each request is written
/// with the native API's code ([`SendQueue::start_post_send`]), call by call as libmlx5's
/// builders write it (the writer's steps, `steps.rs`).
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
/// | `wr_send`, …, `wr_atomic_fetch_add` | `_common_wqe_init_op` (`mlx5_wq_overflow`; reads `wr_id`, `wr_flags`) and the operation's segments | the room checked, the control segment and the remote segments written |
/// | `wr_set_dc_addr(_stream)` | `mlx5_send_wr_set_dc_addr(_stream)`: copies `to_mah(ah)->av` | the datagram segment written (see [Address handles](#address-handles)) |
/// | `wr_set_sge(_list)`, `wr_set_inline_data(_list)` | the `_ud_xrc_dc` setters | the data checked and written |
/// | the second of the two setters | `_common_wqe_finalize` | the size, the QP number, the slot's `wr_id` |
/// | `wr_complete` | `mlx5_send_wr_complete`: the first error (`mqp->err`) returned and the batch rolled back, else `post_send_db` | the same |
/// | `wr_abort` | `mlx5_send_wr_abort` | the batch is dropped |
///
/// The two setters come in either order, as in libmlx5: each writes its segments at once (the
/// data's place follows from the operation), so the caller may reuse its buffers as soon as a
/// call returns.
///
/// The errors are libmlx5's: `ENOMEM` for a full queue (`mlx5_wq_overflow`), too many
/// scatter/gather entries (one on a queue granted none too, which libmlx5 writes) or too much
/// inline data. Where libmlx5 writes whatever the calls leave, these entries refuse with
/// `EINVAL` at `wr_complete`: a request missing its address or its data (libmlx5 overwrites it
/// or posts it half-built), a setter without a request or given twice, an address handle without
/// an address vector, a stream id on a DCI without streams. A request after an error is not
/// written (the batch is rolled back anyway). A request past a full queue writes nothing
/// (libmlx5's writes over the last WQE it wrote, which may be one posted and not yet read); one
/// refused at a later call leaves what the calls before it wrote in the free room past the
/// batch, as libmlx5's does, and is not posted.
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

// SAFETY: the tables and the queue's memory are the entries' own (`SendQueue`'s contract; the
// public constructors' queue is held by the entries alone, and entries sharing theirs with a
// completion queue, `over_shared`, live only inside a direct initiator, which is not `Send`);
// the address vectors' places are the address handles' (libmlx5's memory, read only); moving
// the entries to another thread moves all access with them.
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
        Self::over_shared(Rc::new(SharedSendQueue::new(queue)), operations, AddressCache::device())
    }

    /// As [`new`](Self::new), for address handles libmlx5 did not make (a provider of one's
    /// own, a queue over plain memory as [`SendQueue::from_parts`] takes one): `lookup` answers
    /// where the 48-byte address vector of a handle the DC setters are given is (what
    /// `mlx5dv_init_obj` answers for libmlx5's, `&to_mah(ah)->av`), or `None` for a handle it
    /// does not know (refused with `EINVAL` at `wr_complete`). It is asked once per handle
    /// pointer, as [`new`](Self::new)'s; the vector is read through its answer at every setter
    /// call.
    ///
    /// # Safety
    ///
    /// Each place `lookup` answers for a handle must be readable for 48 bytes whenever a DC
    /// setter is called with that handle.
    pub unsafe fn with_address_lookup(
        queue: SendQueue, operations: SendOperationFlags,
        lookup: impl Fn(NonNull<ibv_ah>) -> Option<NonNull<[u8; 48]>> + Send + 'static,
    ) -> Self {
        Self::over_shared(Rc::new(SharedSendQueue::new(queue)), operations, Box::new(lookup))
    }

    /// The entries of a send queue shared with a completion queue's table (a direct
    /// initiator's), finding address vectors with `lookup`. Its [`queue`](Self::queue) and
    /// [`queue_mut`](Self::queue_mut) are not offered: a poll of the completion queue may
    /// borrow the queue whenever no batch holds it.
    pub(crate) fn over_shared(
        queue: Rc<SharedSendQueue>, operations: SendOperationFlags, lookup: AddressLookup,
    ) -> Self {
        // SAFETY: nothing borrows the queue mutably while the entries are made.
        let (qp_number, streams) = unsafe { (queue.get().qp_number, queue.get().streams) };
        // SAFETY: ibv_qp_ex and mlx5dv_qp_ex are plain C data (integers, raw pointers, optional
        // functions): all zeroes is a valid value, every entry NULL until filled.
        let (mut qp_ex, mut mlx5): (ibv_qp_ex, mlx5dv_qp_ex) =
            unsafe { (MaybeUninit::zeroed().assume_init(), MaybeUninit::zeroed().assume_init()) };
        qp_ex.qp_base.qp_num = qp_number;
        calls::fill(&mut qp_ex, &mut mlx5);
        let state = State::new(queue, AddressCache::new(lookup));
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
        let state = unsafe { &(*self.tables.as_ptr()).state };
        state.queue().expect(OWN_QUEUE)
    }

    /// The send queue, to post on natively or to complete requests on. A batch started through
    /// the entries and not completed is aborted (its `wr_complete` then returns `EINVAL`).
    pub fn queue_mut(&mut self) -> &mut SendQueue {
        self.state_mut().take_over().expect(OWN_QUEUE)
    }

    /// Aborts a batch started through the entries and not completed, giving the shared queue's
    /// borrow back (its `wr_complete` then returns `EINVAL`).
    pub(crate) fn abort(&mut self) {
        self.state_mut().abort();
    }

    /// The send queue, as shared.
    pub(crate) fn shared(&self) -> &Rc<SharedSendQueue> {
        // SAFETY: the live tables; `shared` is never changed after creation.
        unsafe { (*self.tables.as_ptr()).state.shared() }
    }

    fn state_mut(&mut self) -> &mut State {
        // SAFETY: the live tables; `&mut self` excludes every other use of them (a guard on the
        // views borrows `self`).
        unsafe { &mut (*self.tables.as_ptr()).state }
    }
}

/// Why [`SendQueueEntries::queue`] and [`queue_mut`](SendQueueEntries::queue_mut) always find
/// their queue: the public constructors make entries that hold it alone; those sharing it with
/// a completion queue (`over_shared`) live inside a direct initiator, which never asks.
const OWN_QUEUE: &str = "the entries of `new` and `with_address_lookup` hold their queue alone";

impl Drop for SendQueueEntries {
    fn drop(&mut self) {
        // SAFETY: leaked from a Box in `with_address_lookup`, freed once here; no guard is alive
        // (one borrows self).
        drop(unsafe { Box::from_raw(self.tables.as_ptr()) });
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
