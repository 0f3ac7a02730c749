//! The simulated DC initiator: a queue pair whose `struct ibv_qp_ex` and `struct mlx5dv_qp_ex`
//! entries are this module's `extern "C"` functions, which build each request as libmlx5's
//! `mlx5_send_wr_*` builders do and hand the batch to the fabric at `ibv_wr_complete`. The pool
//! posts on it through the very guard it posts on a ConnectX DCI with.
use std::cell::Cell;
use std::mem::{offset_of, MaybeUninit};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{addr_of_mut, NonNull};
use std::rc::Rc;

use rdma_mummy_sys::{ibv_ah, ibv_data_buf, ibv_qp_ex, ibv_send_flags, ibv_sge, mlx5dv_qp_ex};
use sideway::ibverbs::queue_pair::SendOperationFlags;

use super::completion_queue::SimulatedCompletionQueue;
use super::fabric::StreamResetRefused;
use super::request::{Operation, Payload, Request, Sge, FLUSH, SUCCESS};
use super::Shared;
use crate::initiator::StreamResetRefusal;
use crate::PoolInitiator;
use sideway_ext::ibverbs::post_send_guard::{PostSendGuard, ProviderEntries};
use sideway_ext::mlx5::dc::initiator::{BatchAddressed, DcAddress, DcBatchAddress, DcContext};

use super::route::SIMULATED_ROUTE;

/// The operations a simulated initiator builds: SEND and RDMA WRITE (with immediate or not), RDMA
/// READ. Atomics are not simulated: the guard refuses them before the provider
/// ([`OperationNotEnabled`](sideway_ext::ibverbs::post_send_guard::PostSendErrorKind::OperationNotEnabled)).
const OPERATIONS: SendOperationFlags = SendOperationFlags::Send
    .or(SendOperationFlags::SendWithImmediate)
    .or(SendOperationFlags::Write)
    .or(SendOperationFlags::WriteWithImmediate)
    .or(SendOperationFlags::Read);

/// A DC initiator of a [`SimulatedFabric`](super::SimulatedFabric), what a
/// `DcInitiatorPool<SimulatedInitiator>` is made of
/// ([`SimulatedPoolBuilder`](super::SimulatedPoolBuilder) creates them), or one a program posts
/// on without a pool ([`SimulatedFabric::create_dci_builder`](super::SimulatedFabric::create_dci_builder),
/// `start_post_send` as on a [`DcInitiator`](sideway_ext::mlx5::dc::initiator::DcInitiator)). Read it with
/// [`pool.initiator(index)`](crate::DcInitiatorPool::initiator), and script its
/// faults through it: [`stall`](Self::stall), [`fail_next`](Self::fail_next),
/// [`move_to_error`](Self::move_to_error), [`refuse_recovery`](Self::refuse_recovery).
pub struct SimulatedInitiator {
    tables: NonNull<Tables>,
    entries: ProviderEntries,
    fabric: Shared,
    index: usize,
    qp_number: u32,
    max_send_wr: u32,
    streams: u32,
    /// Set when it was dropped while the fabric was borrowed.
    dropped: Rc<Cell<bool>>,
}

/// The tables the guard calls through, and the batch being built. `qp_ex` comes first: a
/// `*mut ibv_qp_ex` handed out is a `*mut Tables`.
#[repr(C)]
struct Tables {
    qp_ex: ibv_qp_ex,
    mlx5: mlx5dv_qp_ex,
    batch: Batch,
    fabric: Shared,
    index: usize,
    max_inline_data: u32,
}

/// The requests between `ibv_wr_start` and `ibv_wr_complete`, and the first error a builder met
/// (libmlx5 keeps it in `mqp->err` and `ibv_wr_complete` returns it).
#[derive(Default)]
struct Batch {
    requests: Vec<Building>,
    error: i32,
}

/// A request as its builders made it so far.
struct Building {
    wr_id: u64,
    signaled: bool,
    operation: Operation,
    address: Option<(u32, u64, Option<u16>)>,
    payload: Option<Payload>,
}

impl std::fmt::Debug for SimulatedInitiator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedInitiator")
            .field("qp_number", &self.qp_number())
            .field("max_send_wr", &self.max_send_wr)
            .field("streams", &self.streams)
            .finish_non_exhaustive()
    }
}

impl SimulatedInitiator {
    /// A new initiator on `fabric`: `streams` as (`log_num_concurrent`, `log_num_errored`).
    pub(crate) fn new(fabric: &Shared, max_send_wr: u32, max_inline_data: u32, streams: Option<(u8, u8)>) -> Self {
        let (index, qp_number, dropped) = {
            let mut state = fabric.borrow_mut();
            let index = state.add_initiator(max_send_wr, streams);
            let qp = &state.initiators[index];
            (index, qp.qp_number, Rc::clone(&qp.dropped))
        };
        // SAFETY: ibv_qp_ex and mlx5dv_qp_ex are plain C data (integers, raw pointers, optional
        // functions): all zeroes is a valid value, every entry NULL until set below.
        let (mut qp_ex, mut mlx5): (ibv_qp_ex, mlx5dv_qp_ex) =
            unsafe { (MaybeUninit::zeroed().assume_init(), MaybeUninit::zeroed().assume_init()) };
        qp_ex.qp_base.qp_num = qp_number;
        qp_ex.wr_start = Some(wr_start);
        qp_ex.wr_complete = Some(wr_complete);
        qp_ex.wr_abort = Some(wr_abort);
        qp_ex.wr_send = Some(wr_send);
        qp_ex.wr_send_imm = Some(wr_send_imm);
        qp_ex.wr_rdma_write = Some(wr_rdma_write);
        qp_ex.wr_rdma_write_imm = Some(wr_rdma_write_imm);
        qp_ex.wr_rdma_read = Some(wr_rdma_read);
        qp_ex.wr_set_sge = Some(wr_set_sge);
        qp_ex.wr_set_sge_list = Some(wr_set_sge_list);
        qp_ex.wr_set_inline_data = Some(wr_set_inline_data);
        qp_ex.wr_set_inline_data_list = Some(wr_set_inline_data_list);
        mlx5.wr_set_dc_addr = Some(wr_set_dc_addr);
        // libmlx5 fills the stream setter on DCIs created with streams only.
        if streams.is_some() {
            mlx5.wr_set_dc_addr_stream = Some(wr_set_dc_addr_stream);
        }
        let tables = Box::new(Tables {
            qp_ex,
            mlx5,
            batch: Batch::default(),
            fabric: Shared::clone(fabric),
            index,
            max_inline_data,
        });
        let tables = NonNull::from(Box::leak(tables));
        // SAFETY: both views point into the live tables just made, every entry the reading
        // checks filled.
        let entries = unsafe {
            let qp_ex = tables.cast::<ibv_qp_ex>();
            let mlx5 = NonNull::new_unchecked(addr_of_mut!((*tables.as_ptr()).mlx5));
            let ibv = ProviderEntries::new(qp_ex, OPERATIONS).expect("every entry of the operations is filled");
            let dc = DcContext::from_raw(mlx5)
                .entries(ibv, streams.is_some())
                .expect("the DC address setters are filled");
            dc.with(SIMULATED_ROUTE)
        };
        Self {
            tables,
            entries,
            fabric: Shared::clone(fabric),
            index,
            qp_number,
            max_send_wr,
            dropped,
            streams: streams.map_or(0, |(log, _)| 1u32 << log.min(16)),
        }
    }

    /// Its fabric, and its index among the fabric's initiators.
    pub(crate) fn place(&self) -> (&Shared, usize) {
        (&self.fabric, self.index)
    }

    /// Its queue pair number, which its completions carry.
    pub fn qp_number(&self) -> u32 {
        self.qp_number
    }

    /// Whether it is in ERR now (after an error completion without streams, 2^`log_num_errored`
    /// errored streams, or [`move_to_error`](Self::move_to_error)), until the pool recovers it.
    pub fn is_in_error(&self) -> bool {
        self.fabric.borrow().in_error(self.index)
    }

    /// A fault: it executes nothing for `ticks` ticks (a slow or stalled DCI); its requests wait
    /// in order, the other initiators go on.
    pub fn stall(&self, ticks: u64) {
        self.fabric.borrow_mut().stall(self.index, ticks);
    }

    /// A fault: the next request to execute on `stream` (any number without streams) ends with
    /// the error completion `status` (an `ibv_wc_status`, e.g. `IBV_WC_REM_ACCESS_ERR` = 10),
    /// with what follows from it (the stream or the initiator in error, the rest flushed).
    /// Success (0) or a flush (5) is no fault: ignored.
    pub fn fail_next(&self, stream: u16, status: u32) {
        if status != SUCCESS && status != FLUSH {
            self.fabric.borrow_mut().fail_next(self.index, stream, status);
        }
    }

    /// A fault: it goes to ERR by itself (as after a device error), flushing what it holds.
    pub fn move_to_error(&self) {
        self.fabric.borrow_mut().move_to_error(self.index);
    }

    /// A fault: its recoveries fail while `refuse` holds (the pool reports it
    /// [lost](crate::types::DcPoolEvent::InitiatorLost)).
    pub fn refuse_recovery(&self, refuse: bool) {
        self.fabric.borrow_mut().initiators[self.index].refuse_recovery = refuse;
    }
}

impl Drop for SimulatedInitiator {
    fn drop(&mut self) {
        // As `ibv_destroy_qp`: its requests go (none of them reads a buffer afterwards), and its
        // completions leave the CQ. The fabric is borrowed only inside this module's calls, none
        // of which drops an initiator, so the borrow succeeds; should it not, the fabric
        // destroys it at its next tick, before it executes anything.
        match self.fabric.try_borrow_mut() {
            Ok(mut fabric) => fabric.destroy(self.index),
            Err(_) => self.dropped.set(true),
        }
        // SAFETY: the tables were leaked from a Box in `new` and are freed once, here; the guard
        // that used them borrowed self, so none is alive.
        drop(unsafe { Box::from_raw(self.tables.as_ptr()) });
    }
}

/// An error a simulated initiator's recovery or stream reset returns.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct SimulatedRefusal(&'static str);

impl SimulatedInitiator {
    pub(super) fn recover_in_fabric(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let rebuilt = self.fabric.borrow_mut().recover(self.index).map_err(SimulatedRefusal)?;
        if let Some(qp_number) = rebuilt {
            self.qp_number = qp_number;
            // SAFETY: a plain field of the live tables; no guard is open (recovery takes
            // `&mut self`).
            unsafe { (*self.tables.as_ptr()).qp_ex.qp_base.qp_num = qp_number };
        }
        Ok(())
    }

    pub(super) fn reset_stream_in_fabric(&mut self, stream: u16) -> Result<(), StreamResetRefusal> {
        match self.fabric.borrow_mut().reset_stream(self.index, stream) {
            Ok(()) => Ok(()),
            Err(StreamResetRefused::NotReadyToSend) => Err(StreamResetRefusal::NotReadyToSend),
            Err(StreamResetRefused::NotFlushed) => Err(StreamResetRefusal::Failed(Box::new(SimulatedRefusal(
                "the stream still holds requests not flushed",
            )))),
        }
    }

    /// Its views and entries, for a guard started by hand.
    pub(crate) fn send_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        // SAFETY: a field of the live tables.
        let mlx5 = unsafe { NonNull::new_unchecked(addr_of_mut!((*self.tables.as_ptr()).mlx5)) };
        (self.tables.cast(), self.entries, mlx5)
    }

    pub(super) fn granted_inline_data(&self) -> u32 {
        // SAFETY: a field of the live tables, read while no guard posts (`&self`).
        unsafe { (*self.tables.as_ptr()).max_inline_data }
    }
}

/// The fabric routes by DCT number: a destination's address is nothing.
impl PoolInitiator for SimulatedInitiator {
    type Address = ();
    type Batch<'a> = PostSendGuard<'a, BatchAddressed<DcBatchAddress>>;
    type CompletionQueue = SimulatedCompletionQueue;

    fn qp_number(&self) -> u32 {
        SimulatedInitiator::qp_number(self)
    }

    fn max_send_wr(&self) -> u32 {
        self.max_send_wr
    }

    fn stream_count(&self) -> u32 {
        self.streams
    }

    fn recover(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.recover_in_fabric()
    }

    fn reset_stream(&mut self, stream: u16) -> Result<(), StreamResetRefusal> {
        self.reset_stream_in_fabric(stream)
    }

    fn address(
        &self, _ah: std::sync::Arc<sideway_ext::ibverbs::address_handle::AddressHandle>,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(())
    }

    fn address_without_protection_domain(&self, _endpoint: &sideway_ext::mlx5::dc::endpoint::DcEndpoint) -> Option<()> {
        Some(())
    }

    fn start_batch<'a>(
        &'a mut self, _address: &'a (), dct_number: u32, dc_key: u64, stream: Option<u16>,
    ) -> Self::Batch<'a> {
        let max_inline_data = self.granted_inline_data();
        let (qp_ex, entries, mlx5) = self.send_view();
        // SAFETY: the view is this initiator's own; its `wr_set_dc_addr` entries never read the
        // address handle (the fabric routes by DCT number).
        let address = unsafe { DcAddress::new(mlx5, NonNull::dangling(), dct_number, dc_key) };
        // SAFETY: the tables are this initiator's own, alive and exclusively borrowed for the
        // guard's lifetime, with the entries read from them (the stream setter when it has
        // streams).
        let mut guard = unsafe { PostSendGuard::start(qp_ex, entries, DcBatchAddress::new(address, stream)) };
        guard.set_max_inline_data(max_inline_data);
        guard
    }
}

/// Runs `f`, and returns `fallback` if it panicked: nothing unwinds out of an `extern "C"`
/// entry.
fn no_unwind<R>(fallback: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// What an entry reaches of the tables `qp` belongs to: the batch, and the initiator's place.
struct View<'a> {
    batch: &'a mut Batch,
    fabric: &'a Shared,
    index: usize,
    max_inline_data: u32,
}

/// The tables `qp` belongs to.
///
/// # Safety
///
/// `qp` must be the `qp_ex` of live [`Tables`] (a pointer a simulated initiator handed out), and
/// no other reference to their batch may be alive.
unsafe fn tables<'a>(qp: *mut ibv_qp_ex) -> View<'a> {
    let tables = qp.cast::<Tables>();
    View {
        batch: &mut *addr_of_mut!((*tables).batch),
        fabric: &*std::ptr::addr_of!((*tables).fabric),
        index: (*tables).index,
        max_inline_data: (*tables).max_inline_data,
    }
}

/// The `qp_ex` of the tables `mqp` belongs to.
///
/// # Safety
///
/// `mqp` must be the `mlx5` view of live [`Tables`], derived from their whole allocation.
unsafe fn qp_of(mqp: *mut mlx5dv_qp_ex) -> *mut ibv_qp_ex {
    mqp.byte_sub(offset_of!(Tables, mlx5)).cast()
}

/// Starts a request as libmlx5's builders do (`_common_wqe_init`): the `wr_id` the caller set
/// in `qp_ex`.
///
/// # Safety
///
/// As [`tables`].
unsafe fn start_request(qp: *mut ibv_qp_ex, operation: Operation) {
    let (wr_id, flags) = ((*qp).wr_id, (*qp).wr_flags);
    tables(qp).batch.requests.push(Building {
        wr_id,
        signaled: flags & ibv_send_flags::IBV_SEND_SIGNALED.0 != 0,
        operation,
        address: None,
        payload: None,
    });
}

/// Sets the current request's data.
///
/// # Safety
///
/// As [`tables`].
unsafe fn set_payload(qp: *mut ibv_qp_ex, payload: Payload) {
    let View {
        batch, max_inline_data, ..
    } = tables(qp);
    if let Payload::Inline(bytes) = &payload {
        // libmlx5 `_mlx5_send_wr_set_inline_data`: more than the granted inline size is ENOMEM.
        if bytes.len() > max_inline_data as usize && batch.error == 0 {
            batch.error = libc::ENOMEM;
        }
    }
    match batch.requests.last_mut() {
        Some(request) => request.payload = Some(payload),
        None => batch.error = libc::EINVAL,
    }
}

/// Sets the current request's DC address.
///
/// # Safety
///
/// As [`qp_of`], and no other reference to the batch alive.
unsafe fn set_address(mqp: *mut mlx5dv_qp_ex, dct_number: u32, dc_key: u64, stream: Option<u16>) {
    let batch = tables(qp_of(mqp)).batch;
    match batch.requests.last_mut() {
        Some(request) => request.address = Some((dct_number, dc_key, stream)),
        None => batch.error = libc::EINVAL,
    }
}

// The entries. Each is called by the guard with the pointers a simulated initiator handed out,
// on a batch its `&mut` borrow keeps exclusive (the SAFETY of each call to `tables`).

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    no_unwind((), || {
        // SAFETY: see "The entries".
        *unsafe { tables(qp) }.batch = Batch::default();
    })
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    no_unwind((), || {
        // SAFETY: see "The entries".
        *unsafe { tables(qp) }.batch = Batch::default();
    })
}

/// `ibv_wr_complete`: the batch goes to the fabric whole, or not at all with the first
/// builder's error (libmlx5 `mlx5_send_wr_complete` returns `mqp->err`), `EINVAL` for a request
/// without its address or data, or the fabric's `ENOMEM` for a full send queue.
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> i32 {
    no_unwind(libc::EIO, || {
        // SAFETY: see "The entries".
        let View {
            batch, fabric, index, ..
        } = unsafe { tables(qp) };
        let Batch { requests, error } = std::mem::take(batch);
        if error != 0 {
            return error;
        }
        let mut built = Vec::with_capacity(requests.len());
        for request in requests {
            let (Some((dct_number, dc_key, stream)), Some(payload)) = (request.address, request.payload) else {
                return libc::EINVAL;
            };
            built.push(Request {
                wr_id: request.wr_id,
                operation: request.operation,
                dct_number,
                dc_key,
                stream,
                payload,
                posted_at: 0,
                signaled: request.signaled,
            });
        }
        let Ok(mut fabric) = fabric.try_borrow_mut() else {
            return libc::EBUSY;
        };
        match fabric.post(index, built) {
            Ok(()) => 0,
            Err(errno) => errno,
        }
    })
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    // SAFETY: see "The entries".
    no_unwind((), || unsafe { start_request(qp, Operation::Send { imm: None }) })
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm_data: u32) {
    // SAFETY: see "The entries".
    no_unwind((), || unsafe {
        start_request(qp, Operation::Send { imm: Some(imm_data) })
    })
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    let operation = Operation::Write {
        rkey,
        remote_addr,
        imm: None,
    };
    // SAFETY: see "The entries".
    no_unwind((), || unsafe { start_request(qp, operation) })
}

unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm_data: u32) {
    let operation = Operation::Write {
        rkey,
        remote_addr,
        imm: Some(imm_data),
    };
    // SAFETY: see "The entries".
    no_unwind((), || unsafe { start_request(qp, operation) })
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: see "The entries".
    no_unwind((), || unsafe {
        start_request(qp, Operation::Read { rkey, remote_addr })
    })
}

/// The SGE is kept; its lkey and bounds are checked, and the bytes read, when the request
/// executes, as the device's DMA reads them.
unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = Sge {
        address: addr,
        length,
        lkey,
    };
    // SAFETY: see "The entries".
    no_unwind((), || unsafe { set_payload(qp, Payload::Gather(vec![sge])) })
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    no_unwind((), || {
        let list = if num_sge == 0 || sg_list.is_null() {
            &[][..]
        } else {
            // SAFETY: ibv_wr_set_sge_list(3): the list is valid for the call.
            unsafe { std::slice::from_raw_parts(sg_list, num_sge) }
        };
        let gather = list
            .iter()
            .map(|sge| Sge {
                address: sge.addr,
                length: sge.length,
                lkey: sge.lkey,
            })
            .collect();
        // SAFETY: see "The entries".
        unsafe { set_payload(qp, Payload::Gather(gather)) }
    })
}

/// Inline data is copied at the call (libmlx5 copies it into the WQE).
unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut std::ffi::c_void, length: usize) {
    no_unwind((), || {
        let bytes = if length == 0 || addr.is_null() {
            Vec::new()
        } else {
            // SAFETY: ibv_wr_set_inline_data(3): the buffer is valid for the call.
            unsafe { std::slice::from_raw_parts(addr as *const u8, length) }.to_vec()
        };
        // SAFETY: see "The entries".
        unsafe { set_payload(qp, Payload::Inline(bytes)) }
    })
}

unsafe extern "C" fn wr_set_inline_data_list(qp: *mut ibv_qp_ex, num_buf: usize, buf_list: *const ibv_data_buf) {
    no_unwind((), || {
        let list = if num_buf == 0 || buf_list.is_null() {
            &[][..]
        } else {
            // SAFETY: ibv_wr_set_inline_data_list(3): the list and its buffers are valid for the
            // call.
            unsafe { std::slice::from_raw_parts(buf_list, num_buf) }
        };
        let mut bytes = Vec::new();
        for buf in list {
            if buf.length != 0 && !buf.addr.is_null() {
                // SAFETY: as above.
                bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(buf.addr as *const u8, buf.length) });
            }
        }
        // SAFETY: see "The entries".
        unsafe { set_payload(qp, Payload::Inline(bytes)) }
    })
}

unsafe extern "C" fn wr_set_dc_addr(mqp: *mut mlx5dv_qp_ex, _ah: *mut ibv_ah, dct_number: u32, dc_key: u64) {
    // SAFETY: see "The entries".
    no_unwind((), || unsafe { set_address(mqp, dct_number, dc_key, None) })
}

unsafe extern "C" fn wr_set_dc_addr_stream(
    mqp: *mut mlx5dv_qp_ex, _ah: *mut ibv_ah, dct_number: u32, dc_key: u64, stream_id: u16,
) {
    // SAFETY: see "The entries".
    no_unwind((), || unsafe { set_address(mqp, dct_number, dc_key, Some(stream_id)) })
}
