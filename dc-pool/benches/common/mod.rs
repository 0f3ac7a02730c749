//! The posting workloads the benchmarks compare, each written twice: with this crate's guard and
//! as the same requests in direct rdma-mummy-sys calls ("raw"), both over a hand-made provider
//! table that only counts what it is handed (no device).
//!
//! One [`Workload`] is one row of BENCHMARKS.md's table. To add a row: implement [`Workload`]
//! for a new type here, then add one line to the `rows!` lists of `benches/post_instructions.rs`
//! and one to `benches/post_time.rs`, and the row's name to the rows `scripts/bench-results`
//! holds to a limit.
#![allow(dead_code)]

use std::hint::black_box;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use rdma_mummy_sys::{
    ibv_data_buf, ibv_qp_ex, ibv_send_flags, ibv_sge, ibv_wr_complete, ibv_wr_rdma_write, ibv_wr_set_sge, ibv_wr_start,
};
use sideway::ibverbs::queue_pair::{SendOperationFlags, SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::ibverbs::post_send_guard::{
    ProviderEntries, ReliableConnection, TypedPostSendGuard, TypedWorkRequestHandle,
};

/// The batch sizes of every table.
pub const BATCHES: [usize; 3] = [1, 16, 256];

/// Requests posted by one measured run of the instruction benchmark, at every batch size
/// (4096 batches of 1, 256 of 16, 16 of 256); instructions per request = total ÷ this.
pub const REQUESTS: usize = 4096;

/// Bytes between consecutive requests' buffers.
const STRIDE: u64 = 64;

/// A posting workload, written with the guard and raw.
pub trait Workload {
    /// The row's name in the tables (and the prefix of the benchmark names).
    const NAME: &'static str;
    /// The provider table and the per-batch storage of the raw version; built outside the
    /// measurement.
    type State: Send;
    /// Builds the state for batches of `batch` requests and posts one batch each way, so that
    /// the measured runs start warm (the guard's per-thread storage grown, as in a program that
    /// has posted before).
    fn setup(batch: usize) -> Self::State;
    /// Posts `requests` requests in batches with the guard.
    fn guard(state: &mut Self::State, requests: usize);
    /// Posts the same requests with direct rdma-mummy-sys calls.
    fn raw(state: &mut Self::State, requests: usize);
    /// How many requests the provider was handed so far.
    fn posted(state: &Self::State) -> u64;
}

/// A post that failed: never happens with the counting providers.
#[cold]
#[inline(never)]
fn failed(what: &str) -> ! {
    panic!("{what} failed on a counting provider")
}

// ---------------------------------------------------------------------------------------------
// Sends: an `ibv_qp_ex` whose entries count.

/// A queue pair whose `ibv_qp_ex` entries only count their calls (the field after the C struct).
#[repr(C)]
pub struct CountingQp {
    qp: ibv_qp_ex,
    starts: u64,
    completes: u64,
    aborts: u64,
    requests: u64,
    sges: u64,
    inlines: u64,
}

/// The counting queue pair whose first field is `qp`.
///
/// # Safety
///
/// `qp` must be the `qp` field of a `CountingQp` (which is `repr(C)`, with it first).
unsafe fn counting(qp: *mut ibv_qp_ex) -> *mut CountingQp {
    qp.cast()
}
// Each entry counts in a field of its own, so that no two are folded into one function (the
// profiles then name the entry that was called).
unsafe extern "C" fn count_start(qp: *mut ibv_qp_ex) {
    (*counting(qp)).starts += 1;
}
unsafe extern "C" fn count_complete(qp: *mut ibv_qp_ex) -> i32 {
    (*counting(qp)).completes += 1;
    0
}
unsafe extern "C" fn count_abort(qp: *mut ibv_qp_ex) {
    (*counting(qp)).aborts += 1;
}
unsafe extern "C" fn count_rdma_write(qp: *mut ibv_qp_ex, _rkey: u32, _addr: u64) {
    (*counting(qp)).requests += 1;
}
unsafe extern "C" fn count_set_sge(qp: *mut ibv_qp_ex, _lkey: u32, _addr: u64, _len: u32) {
    (*counting(qp)).sges += 1;
}
unsafe extern "C" fn count_set_sge_list(qp: *mut ibv_qp_ex, n: usize, _list: *const ibv_sge) {
    (*counting(qp)).sges += n as u64;
}
unsafe extern "C" fn count_set_inline_data(qp: *mut ibv_qp_ex, _addr: *mut std::ffi::c_void, _len: usize) {
    (*counting(qp)).inlines += 1;
}
unsafe extern "C" fn count_set_inline_data_list(qp: *mut ibv_qp_ex, n: usize, _list: *const ibv_data_buf) {
    (*counting(qp)).inlines += n as u64;
}

impl CountingQp {
    /// A zeroed `ibv_qp_ex` with counting batch entries, RDMA write and the four data setters.
    pub fn new() -> Box<Self> {
        // SAFETY: ibv_qp_ex is plain data and optional function pointers, for which zeroes are
        // valid; so are the counters.
        let mut qp: Box<Self> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
        qp.qp.wr_start = Some(count_start);
        qp.qp.wr_complete = Some(count_complete);
        qp.qp.wr_abort = Some(count_abort);
        qp.qp.wr_rdma_write = Some(count_rdma_write);
        qp.qp.wr_set_sge = Some(count_set_sge);
        qp.qp.wr_set_sge_list = Some(count_set_sge_list);
        qp.qp.wr_set_inline_data = Some(count_set_inline_data);
        qp.qp.wr_set_inline_data_list = Some(count_set_inline_data_list);
        qp
    }

    pub fn as_ptr(&mut self) -> NonNull<ibv_qp_ex> {
        NonNull::from(&mut self.qp)
    }

    /// RDMA writes handed to the provider.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Batches started, completed and aborted.
    pub fn batches(&self) -> (u64, u64, u64) {
        (self.starts, self.completes, self.aborts)
    }
}

/// The buffers a workload's requests point at (never touched: the providers only count).
#[derive(Clone, Copy)]
pub struct Buffers {
    pub lkey: u32,
    pub local: u64,
    pub rkey: u32,
    pub remote: u64,
}

impl Buffers {
    pub fn opaque() -> Self {
        // Opaque to the optimiser, like keys and addresses a program gets from the device.
        black_box(Self {
            lkey: 0x1234,
            local: 0x10_0000,
            rkey: 0x5678,
            remote: 0x20_0000,
        })
    }
}

/// RC RDMA writes of one scatter/gather entry, signalled: `wr_id`, flags, `ibv_wr_rdma_write`,
/// `ibv_wr_set_sge` per request, between `ibv_wr_start` and `ibv_wr_complete`.
pub enum SendRcWrite {}

pub struct SendState {
    pub qp: Box<CountingQp>,
    /// Read once, as a queue pair does when it is created.
    pub entries: ProviderEntries,
    pub batch: usize,
    pub buffers: Buffers,
}

// SAFETY: the counting queue pair is plain data, used by one thread at a time.
unsafe impl Send for SendState {}

impl Workload for SendRcWrite {
    const NAME: &'static str = "send_rc_write";
    type State = SendState;

    fn setup(batch: usize) -> SendState {
        let mut qp = CountingQp::new();
        // SAFETY: the counting queue pair is live and fills the batch entries, the write and the
        // SGE setters.
        let entries = unsafe { ProviderEntries::new(qp.as_ptr(), SendOperationFlags::Write) }
            .expect("the counting table fills the entries a write needs");
        let mut state = SendState {
            qp,
            entries,
            batch: black_box(batch),
            buffers: Buffers::opaque(),
        };
        Self::guard(&mut state, batch);
        Self::raw(&mut state, batch);
        state
    }

    #[inline(never)]
    fn guard(state: &mut SendState, requests: usize) {
        let SendState {
            qp,
            entries,
            batch,
            buffers,
            ..
        } = state;
        let (qp, entries, batch, b) = (qp.as_ptr(), *entries, *batch, *buffers);
        let mut next = 0;
        while next < requests {
            // SAFETY: the counting queue pair is live and not used elsewhere during the batch;
            // its entries were read by ProviderEntries::new.
            let mut guard = unsafe { TypedPostSendGuard::<ReliableConnection>::start(qp, entries) };
            for n in next as u64..(next + batch) as u64 {
                // SAFETY: the counting provider never touches the buffers.
                unsafe {
                    guard
                        .construct_wr(n, WorkRequestFlags::Signaled)
                        .setup_write(b.rkey, b.remote + n * STRIDE)
                        .setup_sge(b.lkey, b.local + n * STRIDE, STRIDE as u32)
                };
            }
            if guard.post().is_err() {
                failed("TypedPostSendGuard::post");
            }
            next += batch;
        }
    }

    #[inline(never)]
    fn raw(state: &mut SendState, requests: usize) {
        let (qp, batch, b) = (state.qp.as_ptr().as_ptr(), state.batch, state.buffers);
        let mut next = 0;
        while next < requests {
            // SAFETY: the counting queue pair is live and fills every entry called here.
            unsafe {
                ibv_wr_start(qp);
                for n in next as u64..(next + batch) as u64 {
                    (*qp).wr_id = n;
                    (*qp).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
                    ibv_wr_rdma_write(qp, b.rkey, b.remote + n * STRIDE);
                    ibv_wr_set_sge(qp, b.lkey, b.local + n * STRIDE, STRIDE as u32);
                }
                if ibv_wr_complete(qp) != 0 {
                    failed("ibv_wr_complete");
                }
            }
            next += batch;
        }
    }

    fn posted(state: &SendState) -> u64 {
        state.qp.requests()
    }
}

/// The same RC RDMA writes posted one request at a time: the guard side with
/// `post_send_one(wr_id, Signaled, |wr| wr.setup_write(rkey, addr).setup_sge(lkey, addr, 64))`
/// (through `TypedPostSendGuard::post_one`, which the queue pairs' `post_send_one` calls), the raw side
/// with `ibv_wr_start`, `wr_id`, `wr_flags`, `ibv_wr_rdma_write`, `ibv_wr_set_sge`,
/// `ibv_wr_complete` per request. Its batch is always 1.
pub enum SendRcWriteOne {}

impl Workload for SendRcWriteOne {
    const NAME: &'static str = "send_rc_write_one";
    type State = SendState;

    fn setup(batch: usize) -> SendState {
        let mut state = SendRcWrite::setup(batch);
        Self::guard(&mut state, 1);
        Self::raw(&mut state, 1);
        state
    }

    #[inline(never)]
    fn guard(state: &mut SendState, requests: usize) {
        let (qp, entries, b) = (state.qp.as_ptr(), state.entries, state.buffers);
        for n in 0..requests as u64 {
            let request = |wr: TypedWorkRequestHandle<'_, ReliableConnection>| {
                // SAFETY: the counting provider never touches the buffers.
                unsafe {
                    wr.setup_write(b.rkey, b.remote + n * STRIDE)
                        .setup_sge(b.lkey, b.local + n * STRIDE, STRIDE as u32)
                }
            };
            // SAFETY: the counting queue pair is live and not used elsewhere during the call; its
            // entries were read by ProviderEntries::new.
            let posted = unsafe {
                TypedPostSendGuard::<ReliableConnection>::post_one(qp, entries, n, WorkRequestFlags::Signaled, request)
            };
            if posted.is_err() {
                failed("TypedPostSendGuard::post_one");
            }
        }
    }

    #[inline(never)]
    fn raw(state: &mut SendState, requests: usize) {
        let (qp, b) = (state.qp.as_ptr().as_ptr(), state.buffers);
        for n in 0..requests as u64 {
            // SAFETY: the counting queue pair is live and fills every entry called here.
            unsafe {
                ibv_wr_start(qp);
                (*qp).wr_id = n;
                (*qp).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
                ibv_wr_rdma_write(qp, b.rkey, b.remote + n * STRIDE);
                ibv_wr_set_sge(qp, b.lkey, b.local + n * STRIDE, STRIDE as u32);
                if ibv_wr_complete(qp) != 0 {
                    failed("ibv_wr_complete");
                }
            }
        }
    }

    fn posted(state: &SendState) -> u64 {
        state.qp.requests()
    }
}

// ---------------------------------------------------------------------------------------------
// DC sends: the same counting `ibv_qp_ex`, and an `mlx5dv_qp_ex` whose `wr_set_dc_addr` counts.
#[allow(unused_imports)] // the allocation test shares this module and posts no DC request
pub use dc::{SendDcPoolDedicatedSettled, SendDcPoolWrite, SendDcPoolWriteSettled, SendDcWrite, SendDcWriteOne};

/// The floor for the DC pool's limits: the least bookkeeping a pool does (see its module).
mod dc_floor;
#[allow(unused_imports)] // the allocation test shares this module and posts no DC request
pub use dc_floor::{SendDcFloorDedicatedSettled, SendDcFloorWrite, SendDcFloorWriteSettled};
mod dc {
    use std::hint::black_box;
    use std::mem::MaybeUninit;
    use std::ptr::NonNull;

    use rdma_mummy_sys::{
        ibv_ah, ibv_send_flags, ibv_wr_complete, ibv_wr_rdma_write, ibv_wr_set_sge, ibv_wr_start, mlx5dv_qp_ex,
        mlx5dv_wr_set_dc_addr,
    };
    use sideway::ibverbs::completion::GenericCompletionQueue;
    use sideway::ibverbs::queue_pair::{SendOperationFlags, SetScatterGatherEntry, WorkRequestFlags};
    use sideway_ext::ibverbs::address_handle::AddressHandle;
    use sideway_ext::mlx5::dc::adopted::AdoptedDcSendViews;
    use sideway_ext::mlx5::dc::initiator::{DcPostSendGuard, DcWorkRequestHandle};
    use sideway_ext_dc_pool::dc_batch::DcBatch;
    use sideway_ext_dc_pool::initiator::{PoolCompletion, StreamResetRefusal};
    use sideway_ext_dc_pool::post_guard::DcPoolPostGuard;
    use sideway_ext_dc_pool::settings::DcPoolSettings;
    use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy, DestinationId};
    use sideway_ext_dc_pool::{DcInitiatorPool, PoolInitiator};

    use super::{failed, Buffers, CountingQp, Workload, STRIDE};

    /// An `mlx5dv_qp_ex` whose `wr_set_dc_addr` counts (the field after the C struct).
    #[repr(C)]
    pub struct CountingDc {
        view: mlx5dv_qp_ex,
        addresses: u64,
    }

    unsafe extern "C" fn count_set_dc_addr(view: *mut mlx5dv_qp_ex, _ah: *mut ibv_ah, _dctn: u32, _key: u64) {
        (*view.cast::<CountingDc>()).addresses += 1;
    }

    impl CountingDc {
        pub(super) fn new() -> Box<Self> {
            // SAFETY: zeroes are valid for mlx5dv_qp_ex (an integer and optional functions).
            let mut view: Box<CountingDc> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
            view.view.wr_set_dc_addr = Some(count_set_dc_addr);
            view
        }

        /// The views of the counting `ibv_qp_ex` (RDMA write) and this `mlx5dv_qp_ex`, checked
        /// once, as a DC initiator's are at creation.
        pub(super) fn views(&mut self, qp: &mut CountingQp) -> AdoptedDcSendViews {
            // SAFETY: both tables are live as long as the state that holds them.
            unsafe { AdoptedDcSendViews::new(qp.as_ptr(), NonNull::from(&mut self.view), SendOperationFlags::Write) }
                .expect("the counting tables fill the entries a DC write needs")
        }
    }

    impl CountingDc {
        /// The view the counting setter is reached through.
        pub(super) fn view_ptr(&mut self) -> NonNull<mlx5dv_qp_ex> {
            NonNull::from(&mut self.view)
        }

        /// DC addresses set so far.
        pub(super) fn addresses(&self) -> u64 {
            self.addresses
        }
    }

    impl DcState {
        /// The destination's address (address handle, DCT number, DC key) the direct side
        /// posts to.
        pub(super) fn address(&self) -> (NonNull<ibv_ah>, u32, u64) {
            (self.ah, self.dct_number, self.dc_key)
        }
    }

    /// DC RDMA writes of one scatter/gather entry, signalled: `wr_id`, flags,
    /// `ibv_wr_rdma_write`, `mlx5dv_wr_set_dc_addr`, `ibv_wr_set_sge` per request.
    pub enum SendDcWrite {}

    pub struct DcState {
        qp: Box<CountingQp>,
        view: Box<CountingDc>,
        views: AdoptedDcSendViews,
        batch: usize,
        buffers: Buffers,
        ah: NonNull<ibv_ah>,
        dct_number: u32,
        dc_key: u64,
    }

    // SAFETY: the counting tables are plain data, used by one thread at a time.
    unsafe impl Send for DcState {}

    impl Workload for SendDcWrite {
        const NAME: &'static str = "send_dc_write";
        type State = DcState;

        fn setup(batch: usize) -> DcState {
            let mut qp = CountingQp::new();
            let mut view = CountingDc::new();
            let views = view.views(&mut qp);
            let mut state = DcState {
                qp,
                view,
                views,
                batch: black_box(batch),
                buffers: Buffers::opaque(),
                // Never dereferenced: the counting setter only counts.
                ah: black_box(NonNull::dangling()),
                dct_number: black_box(0x00ab_cdef),
                dc_key: black_box(0xdc),
            };
            Self::guard(&mut state, batch);
            Self::raw(&mut state, batch);
            state
        }

        #[inline(never)]
        fn guard(state: &mut DcState, requests: usize) {
            let (views, batch, b) = (state.views, state.batch, state.buffers);
            let (ah, dct_number, dc_key) = (state.ah, state.dct_number, state.dc_key);
            let mut next = 0;
            while next < requests {
                // SAFETY: the counting tables are live and not used elsewhere during the batch;
                // their entries were checked once at setup.
                let mut guard = unsafe { DcPostSendGuard::start_adopted(views) };
                for n in next as u64..(next + batch) as u64 {
                    // SAFETY: the counting provider never touches the buffers or the handle.
                    unsafe {
                        guard
                            .construct_wr(n, WorkRequestFlags::Signaled)
                            .setup_write(b.rkey, b.remote + n * STRIDE)
                            .setup_dc_addr_adopted(ah, dct_number, dc_key, None)
                            .setup_sge(b.lkey, b.local + n * STRIDE, STRIDE as u32)
                    };
                }
                if guard.post().is_err() {
                    failed("DcPostSendGuard::post");
                }
                next += batch;
            }
        }

        #[inline(never)]
        fn raw(state: &mut DcState, requests: usize) {
            let (qp, batch, b) = (state.qp.as_ptr().as_ptr(), state.batch, state.buffers);
            let view = &mut state.view.view as *mut mlx5dv_qp_ex;
            let (ah, dct_number, dc_key) = (state.ah.as_ptr(), state.dct_number, state.dc_key);
            let mut next = 0;
            while next < requests {
                // SAFETY: the counting tables are live and fill every entry called here.
                unsafe {
                    ibv_wr_start(qp);
                    for n in next as u64..(next + batch) as u64 {
                        (*qp).wr_id = n;
                        (*qp).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
                        ibv_wr_rdma_write(qp, b.rkey, b.remote + n * STRIDE);
                        mlx5dv_wr_set_dc_addr(view, ah, dct_number, dc_key);
                        ibv_wr_set_sge(qp, b.lkey, b.local + n * STRIDE, STRIDE as u32);
                    }
                    if ibv_wr_complete(qp) != 0 {
                        failed("ibv_wr_complete");
                    }
                }
                next += batch;
            }
        }

        fn posted(state: &DcState) -> u64 {
            assert_eq!(state.view.addresses, state.qp.requests(), "one DC address per request");
            state.qp.requests()
        }
    }

    /// The same DC RDMA writes posted one request at a time: a batch of one on the DC guard (as
    /// `DcInitiator::post_send_one` posts it) against `ibv_wr_start`, the request's calls with
    /// `mlx5dv_wr_set_dc_addr`, `ibv_wr_complete` per request.
    pub enum SendDcWriteOne {}

    impl Workload for SendDcWriteOne {
        const NAME: &'static str = "send_dc_write_one";
        type State = DcState;

        fn setup(batch: usize) -> DcState {
            let mut state = SendDcWrite::setup(batch);
            Self::guard(&mut state, 1);
            Self::raw(&mut state, 1);
            state
        }

        #[inline(never)]
        fn guard(state: &mut DcState, requests: usize) {
            let (views, b) = (state.views, state.buffers);
            let (ah, dct_number, dc_key) = (state.ah, state.dct_number, state.dc_key);
            for n in 0..requests as u64 {
                let request = |wr: DcWorkRequestHandle<'_>| {
                    // SAFETY: the counting provider never touches the buffers or the handle.
                    unsafe {
                        wr.setup_write(b.rkey, b.remote + n * STRIDE)
                            .setup_dc_addr_adopted(ah, dct_number, dc_key, None)
                            .setup_sge(b.lkey, b.local + n * STRIDE, STRIDE as u32)
                    }
                };
                // SAFETY: the counting tables are live and not used elsewhere during the call;
                // their entries were checked once at setup.
                let mut guard = unsafe { DcPostSendGuard::start_adopted(views) };
                request(guard.construct_wr(n, WorkRequestFlags::Signaled));
                if guard.post().is_err() {
                    failed("DcPostSendGuard::post");
                }
            }
        }

        #[inline(never)]
        fn raw(state: &mut DcState, requests: usize) {
            let (qp, b) = (state.qp.as_ptr().as_ptr(), state.buffers);
            let view = &mut state.view.view as *mut mlx5dv_qp_ex;
            let (ah, dct_number, dc_key) = (state.ah.as_ptr(), state.dct_number, state.dc_key);
            for n in 0..requests as u64 {
                // SAFETY: the counting tables are live and fill every entry called here.
                unsafe {
                    ibv_wr_start(qp);
                    (*qp).wr_id = n;
                    (*qp).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
                    ibv_wr_rdma_write(qp, b.rkey, b.remote + n * STRIDE);
                    mlx5dv_wr_set_dc_addr(view, ah, dct_number, dc_key);
                    ibv_wr_set_sge(qp, b.lkey, b.local + n * STRIDE, STRIDE as u32);
                    if ibv_wr_complete(qp) != 0 {
                        failed("ibv_wr_complete");
                    }
                }
            }
        }

        fn posted(state: &DcState) -> u64 {
            SendDcWrite::posted(state)
        }
    }

    /// A DC initiator for a pool over the counting tables: a send queue large enough that the
    /// benchmark never fills it, no streams, never in error.
    pub struct CountingInitiator {
        qp: Box<CountingQp>,
        view: Box<CountingDc>,
        views: AdoptedDcSendViews,
    }

    /// Its send queue: every request of a measured run and of the warm-up fits, so that the
    /// posting-only row never settles anything.
    const POOL_SEND_QUEUE: u32 = 8192;

    /// Its batches are the pool's DC batches on sideway-ext's DC guard started on the counting
    /// tables ([`DcBatch::adopted`]), as a DC initiator's are on its own guard.
    impl PoolInitiator for CountingInitiator {
        /// The address handle the counting setter is handed (never dereferenced).
        type Address = NonNull<ibv_ah>;
        type Batch<'a> = DcBatch<'a>;
        type CompletionQueue = GenericCompletionQueue;

        fn qp_number(&self) -> u32 {
            1
        }

        fn max_send_wr(&self) -> u32 {
            POOL_SEND_QUEUE
        }

        fn stream_count(&self) -> u32 {
            0
        }

        fn recover(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            Ok(())
        }

        fn reset_stream(&mut self, _stream: u16) -> Result<(), StreamResetRefusal> {
            Ok(())
        }

        fn address(
            &self, _ah: std::sync::Arc<AddressHandle>, _path_mtu: Option<sideway::ibverbs::device_context::Mtu>,
        ) -> Result<NonNull<ibv_ah>, Box<dyn std::error::Error + Send + Sync>> {
            Err("the counting initiators have no device".into())
        }

        #[inline]
        fn start_batch<'a>(
            &'a mut self, address: &'a NonNull<ibv_ah>, dct_number: u32, dc_key: u64, stream: Option<u16>,
        ) -> Self::Batch<'a> {
            // SAFETY: the boxes it owns, borrowed for the guard's lifetime, their entries checked
            // at its creation.
            let guard = unsafe { DcPostSendGuard::start_adopted(self.views) };
            // SAFETY: the counting setter never dereferences the handle; no streams (the pool
            // asks for none of an initiator without). As a DC initiator's batch: both ends' path
            // MTUs (not known here), its granted inline size (the counting tables take any).
            unsafe { DcBatch::adopted(guard, *address, dct_number, dc_key, stream, None, u32::MAX) }
        }
    }

    /// The same DC RDMA writes as [`SendDcWrite`], posted through a `DcInitiatorPool` of one
    /// counting initiator and one destination (static policy: the destination is bound to the
    /// initiator once, nothing is released between batches): per batch
    /// `pool.start_post_send(destination)`, per request
    /// `construct_wr(wr_id, Signaled)?.setup_write(rkey, addr).setup_sge(lkey, addr, 64)` (the
    /// pool sets the DC address), `post()`. The send queue holds every request of a run, so
    /// nothing is settled: this row is the post path alone.
    ///
    /// Its "raw" side is not direct verbs calls but the direct DC initiator's guard, exactly
    /// [`SendDcWrite`]'s guard side (the same function): the row's ratio is "posting through
    /// the pool ÷ posting on one DC initiator". Its limit is set against the floor's row.
    pub type SendDcPoolWrite = SendDcPool<false>;

    /// As [`SendDcPoolWrite`], and after each batch one `pool.complete` of the previous batch's
    /// last request (all signalled: it settles that whole batch, reporting each request to a
    /// sink that drops it), in the measured function: the pool's post and poll paths together,
    /// against the direct guard's post path (which has no bookkeeping to settle). One batch
    /// stays in flight, as in a sender that keeps its pipe full: less the posting row, it shows
    /// what settling costs.
    pub type SendDcPoolWriteSettled = SendDcPool<true>;

    /// DC writes through a pool; with `SETTLE`, each batch settles the one before it.
    pub enum SendDcPool<const SETTLE: bool> {}

    /// The `Static` rows' state, over the pool or its floor (`P`).
    pub struct StaticRows<P: PoolRow> {
        pub(super) pool: P,
        destination: P::Destination,
        /// Requests posted through the pool so far: the number of the next one.
        numbered: u64,
        /// The provider `wr_id` of the last request of the batch in flight.
        in_flight: Option<u64>,
        /// The direct side: [`SendDcWrite`]'s state.
        pub(super) direct: DcState,
        batch: usize,
        buffers: Buffers,
    }

    // SAFETY: the counting tables are plain data, used by one thread at a time; the address
    // handle is never dereferenced.
    unsafe impl<P: PoolRow> Send for StaticRows<P> {}

    impl<P: PoolRow> StaticRows<P> {
        /// The state of batches of `batch` to `destination` of `pool`, warmed by the row's
        /// measured function `guard` (so that [`run`](Self::run) is inlined there alone): with
        /// `SETTLE`, two batches posted (the second settles the first: the steady state, one
        /// batch in flight), else one.
        pub(super) fn new<const SETTLE: bool>(
            pool: P, destination: P::Destination, direct: DcState, batch: usize, guard: fn(&mut Self, usize),
        ) -> Self {
            let mut state = Self {
                pool,
                destination,
                numbered: 0,
                in_flight: None,
                direct,
                batch: black_box(batch),
                buffers: Buffers::opaque(),
            };
            guard(&mut state, if SETTLE { 2 * batch } else { batch });
            state
        }

        /// Posts `requests` to the destination in batches; with `SETTLE`, after each batch
        /// settles the one before it (the initiator is 0).
        // inline(always): into its measured_* function, as the rows it is compared with; with
        // #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
        #[inline(always)]
        pub(super) fn run<const SETTLE: bool>(&mut self, requests: usize) {
            let Self {
                pool,
                destination,
                numbered,
                in_flight,
                batch,
                buffers,
                ..
            } = self;
            let (destination, batch, b) = (*destination, *batch, *buffers);
            let mut next = 0;
            while next < requests {
                pool.post_batch(destination, next as u64, batch, b);
                if SETTLE {
                    *numbered += batch as u64;
                    // The provider sees `initiator << 48 | number`; the initiator is 0.
                    let last = *numbered - 1;
                    if let Some(previous) = in_flight.replace(last) {
                        if !pool.settle(previous, |_| {}) {
                            failed("settling the batch in flight");
                        }
                    }
                }
                next += batch;
            }
        }

        /// Requests the provider was handed on both sides.
        pub(super) fn posted(&self) -> u64 {
            self.pool.posted_requests() + SendDcWrite::posted(&self.direct)
        }
    }

    impl<const SETTLE: bool> Workload for SendDcPool<SETTLE> {
        const NAME: &'static str = if SETTLE {
            "send_dc_pool_write_settled"
        } else {
            "send_dc_pool_write"
        };
        type State = StaticRows<DcInitiatorPool<CountingInitiator>>;

        fn setup(batch: usize) -> Self::State {
            let mut qp = CountingQp::new();
            let mut view = CountingDc::new();
            let views = view.views(&mut qp);
            let initiator = CountingInitiator { qp, view, views };
            let mut settings = DcPoolSettings::default();
            settings.setup_policy(DcPoolPolicy::Static);
            let Ok(mut pool) = DcInitiatorPool::from_initiators(vec![initiator], None, &settings) else {
                failed("DcInitiatorPool::from_initiators")
            };
            // The direct side warms itself (one batch each of its ways).
            let direct = SendDcWrite::setup(batch);
            let destination = pool.add_destination_with_address(direct.ah, direct.dct_number, direct.dc_key);
            StaticRows::new::<SETTLE>(pool, destination, direct, batch, Self::guard)
        }

        #[inline(never)]
        fn guard(state: &mut Self::State, requests: usize) {
            state.run::<SETTLE>(requests);
        }

        #[inline(never)]
        fn raw(state: &mut Self::State, requests: usize) {
            SendDcWrite::guard(&mut state.direct, requests);
        }

        fn posted(state: &Self::State) -> u64 {
            state.posted()
        }
    }

    /// What the pool rows' harness drives: the pool, or the floor under it
    /// (`benches/common/dc_floor.rs`), so that both are measured in the same loops.
    pub trait PoolRow {
        type Destination: Copy;
        /// Posts one batch of `batch` DC writes to `destination`, the callers' `wr_id`s (and
        /// the buffers' places) from `first`.
        fn post_batch(&mut self, destination: Self::Destination, first: u64, batch: usize, b: Buffers);
        /// As [`post_batch`](Self::post_batch), and says which initiator the batch went to.
        fn post_batch_on(&mut self, destination: Self::Destination, first: u64, batch: usize, b: Buffers) -> usize;
        /// What settling reports per request.
        type Event;
        /// Settles the successful completion of provider `wr_id`, reporting to `sink`; whether it
        /// named a request in flight. (Each loop passes a sink of its own, as when each called
        /// the pool itself: one caller per instance, which the compiler inlines.)
        fn settle(&mut self, wr_id: u64, sink: impl FnMut(Self::Event)) -> bool;
        /// Requests handed to its initiators' providers so far (checking one DC address each).
        fn posted_requests(&self) -> u64;
    }

    impl PoolRow for DcInitiatorPool<CountingInitiator> {
        type Destination = DestinationId;

        // inline(always): into its measured_* function, as the rows it is compared with; with
        // #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
        #[inline(always)]
        fn post_batch(&mut self, destination: DestinationId, first: u64, batch: usize, b: Buffers) {
            let Ok(mut guard) = self.start_post_send(destination) else {
                failed("DcInitiatorPool::start_post_send")
            };
            write_requests(&mut guard, first, batch, b);
            if guard.post().is_err() {
                failed("DcPoolPostGuard::post");
            }
        }

        // inline(always): into its measured_* function, as the rows it is compared with; with
        // #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
        #[inline(always)]
        fn post_batch_on(&mut self, destination: DestinationId, first: u64, batch: usize, b: Buffers) -> usize {
            let Ok(mut guard) = self.start_post_send(destination) else {
                failed("DcInitiatorPool::start_post_send (dedicated)")
            };
            let (initiator, _) = guard.initiator();
            write_requests(&mut guard, first, batch, b);
            if guard.post().is_err() {
                failed("DcPoolPostGuard::post");
            }
            initiator
        }

        type Event = DcPoolEvent;

        // inline(always): into its measured_* function, as the rows it is compared with; with
        // #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
        #[inline(always)]
        fn settle(&mut self, wr_id: u64, sink: impl FnMut(DcPoolEvent)) -> bool {
            // Every counting initiator is queue pair 1.
            self.complete(PoolCompletion::new(1, wr_id, 0, 0), sink)
        }

        fn posted_requests(&self) -> u64 {
            (0..self.initiator_count())
                .map(|i| {
                    let initiator = self.initiator(i).expect("an initiator of the pool");
                    assert_eq!(
                        initiator.view.addresses,
                        initiator.qp.requests(),
                        "one DC address per request"
                    );
                    initiator.qp.requests()
                })
                .sum()
        }
    }

    /// A pool batch's requests (callers' `wr_id`s and places from `first`).
    // inline(always): into its measured_* function, as the rows it is compared with; with
    // #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
    #[inline(always)]
    fn write_requests(guard: &mut DcPoolPostGuard<'_, CountingInitiator>, first: u64, batch: usize, b: Buffers) {
        for n in first..first + batch as u64 {
            let Ok(request) = guard.construct_wr(n, WorkRequestFlags::Signaled) else {
                failed("DcPoolPostGuard::construct_wr")
            };
            // SAFETY: the counting provider never touches the buffers.
            unsafe {
                request.setup_write(b.rkey, b.remote + n * STRIDE).setup_sge(
                    b.lkey,
                    b.local + n * STRIDE,
                    STRIDE as u32,
                )
            };
        }
    }

    /// Initiators of the dedicated row's pool, and requests in flight per initiator at most.
    pub(super) const DEDICATED_INITIATORS: usize = 16;
    /// Destinations of the dedicated row, posted to round robin.
    pub(super) const DEDICATED_DESTINATIONS: usize = 1024;

    /// The same DC writes through a `DcInitiatorPool` of the dedicated policy: 16 counting
    /// initiators, 1 024 destinations posted to round robin, one batch each in turn. A
    /// destination holds no initiator when its turn comes (its last batch settled long ago):
    /// each batch is granted a free initiator, and after it the oldest of the 16 batches in
    /// flight is settled (`complete` of its last request, which reports the batch and gives
    /// its initiator back). The common case of a pool serving many peers, where no destination
    /// keeps an initiator from one batch to the next: the post path with a grant and a release
    /// every batch, and settling. Its "raw" side is the direct DC initiator's guard.
    ///
    /// The batches in flight (the last provider `wr_id` of each, which a CQ would return) are the
    /// benchmark's stand-in for the CQ, not pool work: a fixed array of 16 used as a ring, not a
    /// `VecDeque`, whose push and pop cost about 25 instructions per batch more, which the row
    /// would have counted as the pool's.
    pub enum SendDcPoolDedicatedSettled {}

    /// The `Dedicated` rows' state, over the pool or its floor (`P`).
    pub struct DedicatedRows<P: PoolRow> {
        pub(super) pool: P,
        destinations: Vec<P::Destination>,
        /// The next destination's turn.
        turn: usize,
        /// Requests numbered per initiator so far.
        numbered: [u64; DEDICATED_INITIATORS],
        /// Provider `wr_id`s of the last request of each batch in flight (the CQ's stand-in): a
        /// ring, batch `t`'s at `t % 16`; batch `t - 15`'s, the oldest, is settled after batch
        /// `t` is posted, so that 15 stay in flight between batches.
        in_flight: [u64; DEDICATED_INITIATORS],
        /// Batches posted so far.
        batches: u64,
        pub(super) direct: DcState,
        batch: usize,
        buffers: Buffers,
    }

    // SAFETY: as StaticRows'.
    unsafe impl<P: PoolRow> Send for DedicatedRows<P> {}

    impl<P: PoolRow> DedicatedRows<P> {
        /// The state of batches of `batch` to `destinations` of `pool` round robin, warmed by the
        /// row's measured function `guard` (as [`StaticRows::new`]): every destination posted
        /// once, 16 batches in flight.
        pub(super) fn new(
            pool: P, destinations: Vec<P::Destination>, direct: DcState, batch: usize, guard: fn(&mut Self, usize),
        ) -> Self {
            let mut state = Self {
                pool,
                destinations,
                turn: 0,
                numbered: [0; DEDICATED_INITIATORS],
                in_flight: [0; DEDICATED_INITIATORS],
                batches: 0,
                direct,
                batch: black_box(batch),
                buffers: Buffers::opaque(),
            };
            guard(&mut state, DEDICATED_DESTINATIONS * batch);
            state
        }

        /// Posts `requests` to the destinations round robin, one batch each; after each batch
        /// the oldest of the batches in flight is settled once 16 are.
        // inline(always): into its measured_* function, as the rows it is compared with; with
        // #[inline], `scripts/bench --check` moves the floor, pool and rxe rows it sits in.
        #[inline(always)]
        pub(super) fn run(&mut self, requests: usize) {
            let (batch, b) = (self.batch, self.buffers);
            let mut next = 0;
            while next < requests {
                let destination = self.destinations[self.turn];
                self.turn = (self.turn + 1) % DEDICATED_DESTINATIONS;
                let initiator = self.pool.post_batch_on(destination, next as u64, batch, b);
                self.numbered[initiator] += batch as u64;
                // The provider sees `initiator << 48 | number`.
                let t = self.batches;
                self.in_flight[t as usize % DEDICATED_INITIATORS] =
                    ((initiator as u64) << 48) | (self.numbered[initiator] - 1);
                self.batches = t + 1;
                if t + 1 >= DEDICATED_INITIATORS as u64 {
                    // Batch `t - 15`'s, the oldest in flight.
                    let oldest = self.in_flight[(t + 1) as usize % DEDICATED_INITIATORS];
                    if !self.pool.settle(oldest, |_| {}) {
                        failed("settling the oldest batch in flight (dedicated)");
                    }
                }
                next += batch;
            }
        }

        /// Requests the provider was handed on both sides.
        pub(super) fn posted(&self) -> u64 {
            self.pool.posted_requests() + SendDcWrite::posted(&self.direct)
        }
    }

    impl Workload for SendDcPoolDedicatedSettled {
        const NAME: &'static str = "send_dc_pool_dedicated_write_settled";
        type State = DedicatedRows<DcInitiatorPool<CountingInitiator>>;

        fn setup(batch: usize) -> Self::State {
            let initiators = (0..DEDICATED_INITIATORS)
                .map(|_| {
                    let mut qp = CountingQp::new();
                    let mut view = CountingDc::new();
                    let views = view.views(&mut qp);
                    CountingInitiator { qp, view, views }
                })
                .collect();
            let Ok(mut pool) = DcInitiatorPool::from_initiators(initiators, None, &DcPoolSettings::default()) else {
                failed("DcInitiatorPool::from_initiators (dedicated)")
            };
            let direct = SendDcWrite::setup(batch);
            let destinations = (0..DEDICATED_DESTINATIONS)
                .map(|_| pool.add_destination_with_address(direct.ah, direct.dct_number, direct.dc_key))
                .collect();
            DedicatedRows::new(pool, destinations, direct, batch, Self::guard)
        }

        #[inline(never)]
        fn guard(state: &mut Self::State, requests: usize) {
            state.run(requests);
        }

        #[inline(never)]
        fn raw(state: &mut Self::State, requests: usize) {
            SendDcWrite::guard(&mut state.direct, requests);
        }

        fn posted(state: &Self::State) -> u64 {
            state.posted()
        }
    }
}
