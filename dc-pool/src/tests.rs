//! The pool over hand-made DC initiators whose `ibv_qp_ex` and `mlx5dv_qp_ex` tables record
//! every provider call (no device): the exact calls of each request, the completions mapped
//! back to the callers' `wr_id`s, and the pool's answers when it cannot post.
use std::cell::Cell;
use std::mem::MaybeUninit;

use rdma_mummy_sys::{ibv_send_flags, ibv_wc_status};
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry};

use std::ptr::NonNull;
use std::time::Duration;

use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, mlx5dv_qp_ex};
use sideway::ibverbs::completion::GenericCompletionQueue;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{SendOperationFlags, WorkRequestFlags};

use super::initiator::{PoolCompletion, StreamResetRefusal};
use super::post_guard::DcPoolPostGuard;
use super::requests::initiator_of;
use super::settings::DcPoolSettings;
use super::types::{
    DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId, PostToDestinationError, PostToDestinationErrorKind,
    RemoveDestinationErrorKind,
};
use super::{DcInitiatorPool, PoolInitiator};
use crate::test_support::{advance_clock, fake_now, record, recording_qp, take_calls};
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::ibverbs::post_send_guard::{PathMtus, PostSendErrorKind, PostSendGuard, ProviderEntries};
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::{BatchAddressed, DcAddress, DcBatchAddress, DcContext};

thread_local! {
    /// What the recorded `wr_complete` returns (0, or an errno).
    static COMPLETE_RETURNS: Cell<i32> = const { Cell::new(0) };
}

const SIGNALED: u32 = ibv_send_flags::IBV_SEND_SIGNALED.0;
const INLINE: u32 = ibv_send_flags::IBV_SEND_INLINE.0;
const REM_ACCESS_ERR: u32 = ibv_wc_status::IBV_WC_REM_ACCESS_ERR;
const FLUSH_ERR: u32 = ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
const RETRY_EXC_ERR: u32 = ibv_wc_status::IBV_WC_RETRY_EXC_ERR;

/// The `wr_id` the provider should see: request `number` of initiator `initiator`, written
/// out here rather than taken from the pool's own encoder.
fn provider_wr_id(initiator: usize, number: u64) -> u64 {
    ((initiator as u64) << 48) | number
}

// Each recorder names its queue pair by number, so that a test sees which initiator a call
// went to.
/// The number of the recording queue pair `qp`.
///
/// # Safety
///
/// `qp` must point to a live `ibv_qp_ex` (one of the recording initiators').
unsafe fn qpn(qp: *mut ibv_qp_ex) -> u32 {
    (*qp).qp_base.qp_num
}
unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    record(format!("qp{} start", qpn(qp)));
}
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> i32 {
    record(format!("qp{} complete", qpn(qp)));
    COMPLETE_RETURNS.with(Cell::get)
}
unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    record(format!("qp{} abort", qpn(qp)));
}
unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    record(format!(
        "qp{} send wr_id={:#x} flags={:#x}",
        qpn(qp),
        (*qp).wr_id,
        (*qp).wr_flags
    ));
}
unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    record(format!(
        "qp{} write wr_id={:#x} flags={:#x} rkey={rkey:#x} addr={addr:#x}",
        qpn(qp),
        (*qp).wr_id,
        (*qp).wr_flags
    ));
}
unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    record(format!(
        "qp{} read wr_id={:#x} flags={:#x} rkey={rkey:#x} addr={addr:#x}",
        qpn(qp),
        (*qp).wr_id,
        (*qp).wr_flags
    ));
}
unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    record(format!("qp{} sge lkey={lkey:#x} addr={addr:#x} len={length}", qpn(qp)));
}
unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut std::ffi::c_void, length: usize) {
    let data = std::slice::from_raw_parts(addr as *const u8, length);
    record(format!("qp{} inline {:?}", qpn(qp), String::from_utf8_lossy(data)));
}

/// An `mlx5dv_qp_ex` followed by the number of its queue pair (for the recorders).
#[repr(C)]
struct RecordingView {
    view: mlx5dv_qp_ex,
    qp_number: u32,
}

/// The queue pair number kept after the recording view.
///
/// # Safety
///
/// `view` must point to the `view` field of a live `RecordingView`.
unsafe fn view_qpn(view: *mut mlx5dv_qp_ex) -> u32 {
    (*view.cast::<RecordingView>()).qp_number
}
unsafe extern "C" fn wr_set_dc_addr(view: *mut mlx5dv_qp_ex, ah: *mut ibv_ah, dctn: u32, key: u64) {
    record(format!(
        "qp{} dc_addr ah={:#x} dctn={dctn:#x} key={key:#x}",
        view_qpn(view),
        ah as usize
    ));
}
unsafe extern "C" fn wr_set_dc_addr_stream(view: *mut mlx5dv_qp_ex, ah: *mut ibv_ah, dctn: u32, key: u64, stream: u16) {
    record(format!(
        "qp{} dc_addr_stream ah={:#x} dctn={dctn:#x} key={key:#x} stream={stream}",
        view_qpn(view),
        ah as usize
    ));
}

/// A hand-made DC initiator: recording tables, and a recovery that is recorded (and fails
/// when told to).
struct RecordingInitiator {
    qp: Box<ibv_qp_ex>,
    view: Box<RecordingView>,
    entries: ProviderEntries,
    max_send_wr: u32,
    streams: u32,
    /// Whether it is in ERR as a whole (a stream reset is refused).
    in_error: Cell<bool>,
    /// Whether `recover` and `reset_stream` fail.
    recovery_fails: Cell<bool>,
    /// The path MTU it was brought up with, if known.
    path_mtu: Option<sideway::ibverbs::device_context::Mtu>,
}

impl RecordingInitiator {
    /// Queue pair number `qp_number`, a send queue of `max_send_wr`, `streams` DCI streams (0:
    /// none); writes, sends and reads.
    fn new(qp_number: u32, max_send_wr: u32, streams: u32) -> Self {
        let mut qp = recording_qp();
        qp.qp_base.qp_num = qp_number;
        qp.wr_start = Some(wr_start);
        qp.wr_complete = Some(wr_complete);
        qp.wr_abort = Some(wr_abort);
        qp.wr_send = Some(wr_send);
        qp.wr_rdma_write = Some(wr_rdma_write);
        qp.wr_rdma_read = Some(wr_rdma_read);
        qp.wr_set_sge = Some(wr_set_sge);
        qp.wr_set_inline_data = Some(wr_set_inline_data);
        // SAFETY: zeroes are valid for mlx5dv_qp_ex (an integer and optional functions).
        let mut view: Box<RecordingView> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
        view.qp_number = qp_number;
        view.view.wr_set_dc_addr = Some(wr_set_dc_addr);
        if streams > 0 {
            view.view.wr_set_dc_addr_stream = Some(wr_set_dc_addr_stream);
        }
        let granted = SendOperationFlags::Write | SendOperationFlags::Send | SendOperationFlags::Read;
        // SAFETY: both tables are live boxes.
        let entries = unsafe {
            let ibv = ProviderEntries::new(NonNull::from(&mut *qp), granted).expect("recording entries");
            DcContext::from_raw(NonNull::from(&mut view.view))
                .entries(ibv, streams > 0)
                .expect("recording mlx5 entries")
        };
        Self {
            qp,
            view,
            entries,
            max_send_wr,
            streams,
            in_error: Cell::new(false),
            recovery_fails: Cell::new(false),
            path_mtu: None,
        }
    }
}

#[derive(Debug)]
struct RecoveryFailed;

impl std::fmt::Display for RecoveryFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("recovery refused by the test")
    }
}

impl std::error::Error for RecoveryFailed {}

/// Its batches are sideway-ext's guards started on its recording tables.
impl PoolInitiator for RecordingInitiator {
    /// The fake address handle its records print, and the target's path MTU when known.
    type Address = (NonNull<ibv_ah>, Option<Mtu>);
    type Batch<'a> = PostSendGuard<'a, BatchAddressed<DcBatchAddress>>;
    type CompletionQueue = GenericCompletionQueue;

    fn qp_number(&self) -> u32 {
        self.qp.qp_base.qp_num
    }

    fn max_send_wr(&self) -> u32 {
        self.max_send_wr
    }

    fn stream_count(&self) -> u32 {
        self.streams
    }

    fn path_mtu(&self) -> Option<Mtu> {
        self.path_mtu
    }

    fn recover(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        record(format!("qp{} recover", self.qp.qp_base.qp_num));
        if self.recovery_fails.get() {
            return Err(Box::new(RecoveryFailed));
        }
        Ok(())
    }

    fn reset_stream(&mut self, stream: u16) -> Result<(), StreamResetRefusal> {
        record(format!("qp{} reset_stream {stream}", self.qp.qp_base.qp_num));
        if self.in_error.get() {
            return Err(StreamResetRefusal::NotReadyToSend);
        }
        if self.recovery_fails.get() {
            return Err(StreamResetRefusal::Failed(Box::new(RecoveryFailed)));
        }
        Ok(())
    }

    fn address(
        &self, _ah: std::sync::Arc<AddressHandle>,
    ) -> Result<Self::Address, Box<dyn std::error::Error + Send + Sync>> {
        Err("the recording initiators have no device".into())
    }

    fn address_without_protection_domain(&self, endpoint: &DcEndpoint) -> Option<Self::Address> {
        // The recorders only print the handle's address: a destination added by its endpoint
        // is named by this one.
        Some((
            NonNull::new(std::ptr::without_provenance_mut(0xe000))?,
            endpoint.path_mtu(),
        ))
    }

    fn start_batch<'a>(
        &'a mut self, address: &'a Self::Address, dct_number: u32, dc_key: u64, stream: Option<u16>,
    ) -> Self::Batch<'a> {
        let (qp_ex, mlx5) = (NonNull::from(&mut *self.qp), NonNull::from(&mut self.view.view));
        // SAFETY: the recorders never dereference the handle; the view is this initiator's box.
        let dc_address = unsafe { DcAddress::new(mlx5, address.0, dct_number, dc_key) };
        // SAFETY: the boxes this initiator owns, borrowed for the guard's lifetime, with the
        // entries read from them (the stream setter when it has streams).
        let mut guard = unsafe { PostSendGuard::start(qp_ex, self.entries, DcBatchAddress::new(dc_address, stream)) };
        guard.set_path_mtus(PathMtus::known(self.path_mtu, address.1));
        guard
    }
}

/// Settles the provider `wr_id` with `status` as a completion of the initiator it names.
fn complete_raw(
    pool: &mut DcInitiatorPool<RecordingInitiator>, wr_id: u64, status: u32, sink: impl FnMut(DcPoolEvent),
) -> bool {
    let qp_number = pool.initiator(initiator_of(wr_id)).map_or(0, PoolInitiator::qp_number);
    pool.complete(PoolCompletion::new(qp_number, wr_id, status, 0), sink)
}

/// The pool's initiators are queue pairs 0x10 and 0x11 (`qp16`, `qp17` in the records).
fn pool(policy: DcPoolPolicy, max_send_wr: u32, streams: u32) -> DcInitiatorPool<RecordingInitiator> {
    COMPLETE_RETURNS.with(|r| r.set(0));
    take_calls();
    let initiators = vec![
        RecordingInitiator::new(0x10, max_send_wr, streams),
        RecordingInitiator::new(0x11, max_send_wr, streams),
    ];
    let mut settings = DcPoolSettings::default();
    settings.setup_policy(policy).setup_unreachable_after(2);
    DcInitiatorPool::from_initiators(initiators, None, &settings).expect("a pool")
}

/// As [`pool`], its clock the tests' ([`advance_clock`]), grants kept `grant_timeout`, stalls
/// not reported.
fn pool_on_the_tests_clock(
    policy: DcPoolPolicy, max_send_wr: u32, grant_timeout: Duration,
) -> DcInitiatorPool<RecordingInitiator> {
    let DcInitiatorPool { initiators, .. } = pool(policy, max_send_wr, 0);
    let mut settings = DcPoolSettings::default();
    settings
        .setup_policy(policy)
        .setup_unreachable_after(2)
        .setup_clock(fake_now)
        .setup_grant_timeout(grant_timeout)
        .setup_stall_timeout(None);
    DcInitiatorPool::from_initiators(initiators, None, &settings).expect("a pool")
}

/// A destination's address: a fake address handle (only its value is recorded), a DCT
/// number and a DC key, all derived from `n`.
struct Address {
    ah: NonNull<ibv_ah>,
    dct_number: u32,
    dc_key: u64,
}

impl Address {
    fn new(n: usize) -> Self {
        Self {
            ah: NonNull::new(std::ptr::without_provenance_mut(0xa000 + 0x100 * n)).expect("not null"),
            dct_number: 0x00d0_0000 + n as u32,
            dc_key: 0xdc00 + n as u64,
        }
    }

    fn add_to(&self, pool: &mut DcInitiatorPool<RecordingInitiator>) -> DestinationId {
        pool.add_destination_with_address((self.ah, None), self.dct_number, self.dc_key)
    }

    /// The recorded `wr_set_dc_addr` call on queue pair `qp`.
    fn call(&self, qp: u32) -> String {
        format!(
            "qp{qp} dc_addr ah={:#x} dctn={:#x} key={:#x}",
            self.ah.as_ptr() as usize,
            self.dct_number,
            self.dc_key
        )
    }

    /// The recorded `wr_set_dc_addr_stream` call on queue pair `qp`.
    fn stream_call(&self, qp: u32, stream: u16) -> String {
        format!(
            "qp{qp} dc_addr_stream ah={:#x} dctn={:#x} key={:#x} stream={stream}",
            self.ah.as_ptr() as usize,
            self.dct_number,
            self.dc_key
        )
    }
}

/// Posts one signalled RDMA write of 64 bytes per caller `wr_id` to `destination`, in one
/// batch; returns the initiator it went to.
fn post_writes(pool: &mut DcInitiatorPool<RecordingInitiator>, destination: DestinationId, wr_ids: &[u64]) -> usize {
    if pool.policy() == DcPoolPolicy::Streams {
        let guard = pool
            .start_post_send_on_stream(destination)
            .expect("the pool grants a batch");
        write_and_post(guard, wr_ids)
    } else {
        let guard = pool.start_post_send(destination).expect("the pool grants a batch");
        write_and_post(guard, wr_ids)
    }
}

/// Adds one signalled RDMA write of 64 bytes per caller `wr_id` to `guard`, posts it, and
/// returns the initiator it went to.
fn write_and_post(mut guard: DcPoolPostGuard<'_, RecordingInitiator>, wr_ids: &[u64]) -> usize {
    for &wr_id in wr_ids {
        // SAFETY: the recorders never touch the buffers.
        unsafe {
            guard
                .construct_wr(wr_id, WorkRequestFlags::Signaled)
                .expect("room in the send queue")
                .setup_write(0x77, 0x9000 + wr_id)
                .setup_sge(0x5, 0x1000 + wr_id, 64)
        };
    }
    let (initiator, _) = guard.initiator();
    guard.post().expect("the recorded post succeeds");
    initiator
}

/// Settles the provider `wr_id` with `status`, returns the events.
fn complete(pool: &mut DcInitiatorPool<RecordingInitiator>, wr_id: u64, status: u32) -> Vec<DcPoolEvent> {
    let mut events = Vec::new();
    assert!(
        complete_raw(pool, wr_id, status, |event| events.push(event)),
        "{wr_id:#x} names a live request"
    );
    pool.core.check_no_destination_stranded();
    events
}

fn completed(destination: DestinationId, wr_id: u64) -> DcPoolEvent {
    DcPoolEvent::Completed { destination, wr_id }
}

#[test]
fn write_send_and_read_go_out_with_the_encoded_wr_id_the_address_then_the_data() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let (a, b) = (Address::new(1), Address::new(2));
    let (da, db) = (a.add_to(&mut pool), b.add_to(&mut pool));

    let mut guard = pool.start_post_send(da).expect("an initiator is free");
    assert_eq!(guard.initiator(), (0, None));
    // SAFETY: the recorders never touch the buffers.
    unsafe {
        guard
            .construct_wr(100, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_write(0x77, 0x9000)
            .setup_sge(0x5, 0x1000, 64);
        // Inline data: the pool keeps the guard's inline bit handling.
        guard
            .construct_wr(101, WorkRequestFlags::none())
            .expect("room")
            .setup_send()
            .setup_inline_data(b"hi");
        guard
            .construct_wr(102, WorkRequestFlags::Signaled | WorkRequestFlags::Inline)
            .expect("room")
            .setup_read(0x78, 0xa000)
            .setup_sge(0x6, 0x2000, 32);
    }
    assert_eq!(guard.batch_len(), 3);
    guard.post().expect("recorded post");
    let ah = a.call(16);
    assert_eq!(
        take_calls(),
        [
            "qp16 start".to_string(),
            format!("qp16 write wr_id=0x0 flags={SIGNALED:#x} rkey=0x77 addr=0x9000"),
            ah.clone(),
            "qp16 sge lkey=0x5 addr=0x1000 len=64".to_string(),
            // Signalled although the flags did not ask: the pool signals every request.
            format!(
                "qp16 send wr_id={:#x} flags={:#x}",
                provider_wr_id(0, 1),
                SIGNALED | INLINE
            ),
            ah.clone(),
            "qp16 inline \"hi\"".to_string(),
            // Scatter/gather data: the inline bit asked for is cleared.
            format!(
                "qp16 read wr_id={:#x} flags={SIGNALED:#x} rkey=0x78 addr=0xa000",
                provider_wr_id(0, 2)
            ),
            ah.clone(),
            "qp16 sge lkey=0x6 addr=0x2000 len=32".to_string(),
            "qp16 complete".to_string(),
        ]
    );
    assert_eq!(pool.outstanding(da), 3);
    assert_eq!(pool.assignment(da), Some((0, None)));

    // The second destination gets the other initiator; its numbers start at 0 there.
    assert_eq!(post_writes(&mut pool, db, &[200]), 1);
    assert_eq!(
        take_calls(),
        [
            "qp17 start".to_string(),
            format!(
                "qp17 write wr_id={:#x} flags={SIGNALED:#x} rkey=0x77 addr=0x90c8",
                provider_wr_id(1, 0)
            ),
            b.call(17),
            "qp17 sge lkey=0x5 addr=0x10c8 len=64".to_string(),
            "qp17 complete".to_string(),
        ]
    );
    // The first one keeps its initiator while it has requests outstanding; numbering goes on.
    assert_eq!(post_writes(&mut pool, da, &[103]), 0);
    let calls = take_calls();
    assert_eq!(
        calls[1],
        format!(
            "qp16 write wr_id={:#x} flags={SIGNALED:#x} rkey=0x77 addr=0x9067",
            provider_wr_id(0, 3)
        )
    );
    assert_eq!(calls[2], ah);

    // Completions come back by provider wr_id and are reported with the callers' wr_ids.
    assert_eq!(complete(&mut pool, provider_wr_id(1, 0), 0), [completed(db, 200)]);
    assert_eq!(pool.outstanding(db), 0);
    assert_eq!(
        pool.assignment(db),
        None,
        "an idle dedicated destination gives its initiator back"
    );
    // A completion also reports the requests of its initiator (stream) before it.
    assert_eq!(complete(&mut pool, provider_wr_id(0, 0), 0), [completed(da, 100)]);
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 2), 0),
        [completed(da, 101), completed(da, 102)]
    );
    assert_eq!(complete(&mut pool, provider_wr_id(0, 3), 0), [completed(da, 103)]);
    assert_eq!((pool.outstanding(da), pool.assignment(da)), (0, None));
    // A completion of a request already reported names nothing.
    assert!(!complete_raw(&mut pool, provider_wr_id(0, 3), 0, |e| panic!(
        "reported {e:?} twice"
    )));
    assert!(!complete_raw(&mut pool, provider_wr_id(5, 0), 0, |e| panic!(
        "no initiator 5: {e:?}"
    )));
    assert!(take_calls().is_empty(), "completions make no provider call");
}

#[test]
fn requests_are_signalled_whatever_the_flags_so_a_dedicated_destination_gives_its_initiator_back() {
    for policy in [
        DcPoolPolicy::Dedicated,
        DcPoolPolicy::DedicatedWithQuota { quota: 2 },
        DcPoolPolicy::Static,
    ] {
        let mut pool = pool(policy, 16, 0);
        let (da, db, dc) = (
            Address::new(1).add_to(&mut pool),
            Address::new(2).add_to(&mut pool),
            Address::new(3).add_to(&mut pool),
        );
        // Only unsignalled requests, from every destination (the third waits in line under the
        // dedicated policies).
        for (d, wr_id) in [(da, 10), (db, 20)] {
            let mut guard = pool.start_post_send(d).expect("an initiator");
            for k in 0..2 {
                // SAFETY: the recorders never touch the buffers.
                unsafe {
                    guard
                        .construct_wr(wr_id + k, WorkRequestFlags::none())
                        .expect("room")
                        .setup_write(1, 2)
                        .setup_sge(3, 4, 5)
                };
            }
            guard.post().expect("recorded post");
        }
        let calls = take_calls();
        let writes: Vec<&String> = calls.iter().filter(|c| c.contains(" write ")).collect();
        assert_eq!(writes.len(), 4);
        assert!(
            writes.iter().all(|w| w.contains(&format!("flags={SIGNALED:#x} "))),
            "{policy:?}: {writes:?}"
        );
        let dedicated = policy != DcPoolPolicy::Static;
        if dedicated {
            assert!(pool.start_post_send(dc).is_err_and(|e| e.is_would_block()));
        }
        let (ia, _) = pool.assignment(da).expect("held");
        let (ib, _) = pool.assignment(db).expect("held");
        // Each request completes; the last one gives the initiator back (to the one in line).
        let mut events = complete(&mut pool, provider_wr_id(ia, 0), 0);
        if ia == ib {
            events.extend(complete(&mut pool, provider_wr_id(ia, 1), 0));
            events.extend(complete(&mut pool, provider_wr_id(ib, 2), 0));
            events.extend(complete(&mut pool, provider_wr_id(ib, 3), 0));
        } else {
            events.extend(complete(&mut pool, provider_wr_id(ia, 1), 0));
            events.extend(complete(&mut pool, provider_wr_id(ib, 0), 0));
            events.extend(complete(&mut pool, provider_wr_id(ib, 1), 0));
        }
        let mut expected = vec![completed(da, 10), completed(da, 11)];
        if dedicated {
            expected.push(DcPoolEvent::Ready { destination: dc });
        }
        expected.extend([completed(db, 20), completed(db, 21)]);
        assert_eq!(events, expected, "{policy:?}");
        assert_eq!(pool.outstanding(da) + pool.outstanding(db), 0);
        if dedicated {
            assert_eq!(pool.assignment(da), None, "{policy:?}: da gave its initiator back");
            assert_eq!(pool.assignment(db), None, "{policy:?}: db gave its initiator back");
            assert_eq!(pool.assignment(dc), Some((ia, None)), "{policy:?}: dc holds da's");
        }
    }
}

#[test]
fn a_guard_dropped_unposted_aborts_and_leaves_nothing_outstanding() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let a = Address::new(1);
    let da = a.add_to(&mut pool);
    let mut guard = pool.start_post_send(da).expect("an initiator is free");
    // A request dropped before its data step adds nothing.
    let _ = guard
        .construct_wr(1, WorkRequestFlags::Signaled)
        .expect("room")
        .setup_write(1, 2);
    assert_eq!(guard.batch_len(), 0);
    // SAFETY: the recorders never touch the buffers.
    unsafe {
        guard
            .construct_wr(2, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_write(1, 2)
            .setup_sge(3, 4, 5)
    };
    assert_eq!(guard.batch_len(), 1);
    drop(guard);
    let calls = take_calls();
    assert_eq!(calls.first().map(String::as_str), Some("qp16 start"));
    assert_eq!(calls.last().map(String::as_str), Some("qp16 abort"));
    assert!(!calls.iter().any(|c| c.ends_with("complete")), "{calls:?}");
    assert_eq!(pool.outstanding(da), 0);
    assert_eq!(pool.assignment(da), None, "the initiator went back");
    assert!(!complete_raw(&mut pool, provider_wr_id(0, 0), 0, |e| panic!(
        "aborted request reported: {e:?}"
    )));

    // The next batch starts at number 0 again: nothing was counted.
    post_writes(&mut pool, da, &[3]);
    assert!(take_calls()[1].contains(&format!("wr_id={:#x} ", provider_wr_id(0, 0))));
    assert_eq!(complete(&mut pool, provider_wr_id(0, 0), 0), [completed(da, 3)]);
}

#[test]
fn a_failed_post_counts_nothing_and_releases_the_initiator() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let da = Address::new(1).add_to(&mut pool);
    COMPLETE_RETURNS.with(|r| r.set(libc::ENOMEM));
    let mut guard = pool.start_post_send(da).expect("an initiator is free");
    // SAFETY: the recorders never touch the buffers.
    unsafe {
        guard
            .construct_wr(1, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_write(1, 2)
            .setup_sge(3, 4, 5)
    };
    let err = guard.post().unwrap_err();
    assert!(
        matches!(err.0, PostSendErrorKind::QueueFull { batch_len: 1, .. }),
        "{err:?}"
    );
    COMPLETE_RETURNS.with(|r| r.set(0));
    assert_eq!((pool.outstanding(da), pool.assignment(da)), (0, None));
    assert!(!complete_raw(&mut pool, provider_wr_id(0, 0), 0, |e| panic!(
        "unposted request reported: {e:?}"
    )));
    pool.core.check_no_destination_stranded();
}

#[test]
fn construct_wr_beyond_the_room_is_batch_full_and_the_batch_so_far_posts() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 4, 0);
    let da = Address::new(1).add_to(&mut pool);
    let mut guard = pool.start_post_send(da).expect("an initiator is free");
    assert_eq!(guard.room(), 4);
    for wr_id in 0..4 {
        // SAFETY: the recorders never touch the buffers.
        unsafe {
            guard
                .construct_wr(wr_id, WorkRequestFlags::Signaled)
                .expect("room")
                .setup_write(1, 2)
                .setup_sge(3, 4, 5)
        };
    }
    assert!(matches!(
        guard.construct_wr(4, WorkRequestFlags::Signaled),
        Err(DcPoolWouldBlock::BatchFull)
    ));
    assert_eq!(guard.batch_len(), 4);
    guard.post().expect("the requests before the refusal post");
    let calls = take_calls();
    let writes: Vec<&String> = calls.iter().filter(|c| c.contains(" write ")).collect();
    assert_eq!(writes.len(), 4, "{calls:?}");
    for (n, write) in writes.iter().enumerate() {
        assert!(
            write.contains(&format!("wr_id={:#x} ", provider_wr_id(0, n as u64))),
            "{write}"
        );
    }
    assert_eq!(calls.last().map(String::as_str), Some("qp16 complete"));
    assert_eq!(pool.outstanding(da), 4);

    // A full send queue refuses the next batch before starting it.
    match pool.start_post_send(da) {
        Err(PostToDestinationError(PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::QueueFull))) => {},
        Err(other) => panic!("unexpected {other:?}"),
        Ok(_) => panic!("a full initiator granted a batch"),
    }
    assert!(take_calls().is_empty(), "nothing was started");

    // One completion makes room for one: the destination refused is ready.
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 0), 0),
        [completed(da, 0), DcPoolEvent::Ready { destination: da }]
    );
    let mut guard = pool.start_post_send(da).expect("room for one");
    assert_eq!(guard.room(), 1);
    // SAFETY: the recorders never touch the buffers.
    unsafe {
        guard
            .construct_wr(4, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_write(1, 2)
            .setup_sge(3, 4, 5)
    };
    assert!(matches!(
        guard.construct_wr(5, WorkRequestFlags::Signaled),
        Err(DcPoolWouldBlock::BatchFull)
    ));
    guard.post().expect("recorded post");
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 4), 0),
        [1, 2, 3, 4].map(|wr_id| completed(da, wr_id))
    );
}

#[test]
fn freed_initiators_go_to_the_destinations_in_line_first_first_with_a_ready_event() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let addresses: Vec<Address> = (0..4).map(Address::new).collect();
    let ids: Vec<DestinationId> = addresses.iter().map(|a| a.add_to(&mut pool)).collect();
    let (a, b, c, d) = (ids[0], ids[1], ids[2], ids[3]);
    assert_eq!(post_writes(&mut pool, a, &[1]), 0);
    assert_eq!(post_writes(&mut pool, b, &[2]), 1);
    take_calls();

    match pool.start_post_send(c) {
        Err(e) => {
            assert!(e.is_would_block());
            assert!(matches!(
                e.0,
                PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)
            ));
        },
        Ok(_) => panic!("both initiators are held"),
    }
    assert!(take_calls().is_empty(), "nothing was started for it");
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [c]);
    assert!(pool.start_post_send(d).is_err_and(|e| e.is_would_block()));
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [c, d]);

    // b's completion frees initiator 1: it goes to c, first in line, at once.
    assert_eq!(
        complete(&mut pool, provider_wr_id(1, 0), 0),
        [completed(b, 2), DcPoolEvent::Ready { destination: c }]
    );
    assert_eq!(pool.assignment(c), Some((1, None)));
    assert!(matches!(
        pool.start_post_send(d).map(|_| ()).unwrap_err().0,
        PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)
    ));
    assert_eq!(post_writes(&mut pool, c, &[3]), 1);
    let calls = take_calls();
    assert_eq!(calls[0], "qp17 start");
    assert_eq!(calls[2], addresses[2].call(17));
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [d]);
    // The numbering of initiator 1 went on from b's request.
    assert!(
        calls[1].contains(&format!("wr_id={:#x} ", provider_wr_id(1, 1))),
        "{calls:?}"
    );
    // a's completion frees initiator 0 for d; c's then goes back to the free ones.
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 0), 0),
        [completed(a, 1), DcPoolEvent::Ready { destination: d }]
    );
    assert_eq!(complete(&mut pool, provider_wr_id(1, 1), 0), [completed(c, 3)]);
    assert_eq!(post_writes(&mut pool, d, &[4]), 0);
    assert_eq!(pool.waiting().count(), 0);
    // A destination not first in line is not refused while an initiator is free.
    assert_eq!(post_writes(&mut pool, b, &[5]), 1);
}

#[test]
fn a_grant_timeout_of_duration_max_never_expires() {
    let mut pool = pool_on_the_tests_clock(DcPoolPolicy::Dedicated, 16, Duration::MAX);
    let ids: Vec<DestinationId> = (0..3).map(|n| Address::new(n).add_to(&mut pool)).collect();
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    post_writes(&mut pool, a, &[1]);
    post_writes(&mut pool, b, &[2]);
    assert!(pool.start_post_send(c).is_err_and(|e| e.is_would_block()));
    // a's completion grants its initiator to c (the timer's end is past the clock's).
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 0), 0),
        [completed(a, 1), DcPoolEvent::Ready { destination: c }]
    );
    advance_clock(Duration::from_secs(365 * 24 * 3600));
    pool.progress(|event| panic!("{event:?}"));
    assert_eq!(pool.assignment(c), Some((0, None)));
    // It posts on the initiator it was granted.
    assert_eq!(post_writes(&mut pool, c, &[3]), 0);
    pool.core.check_no_destination_stranded();
    take_calls();
}

#[test]
fn a_grant_never_used_goes_back_after_the_timeout_and_cancel_wait_leaves_nothing() {
    let mut pool = pool_on_the_tests_clock(DcPoolPolicy::Dedicated, 16, Duration::from_millis(3));
    let ids: Vec<DestinationId> = (0..5).map(|n| Address::new(n).add_to(&mut pool)).collect();
    let (a, b, c, d, e) = (ids[0], ids[1], ids[2], ids[3], ids[4]);
    post_writes(&mut pool, a, &[1]);
    post_writes(&mut pool, b, &[2]);
    for x in [c, d, e] {
        assert!(pool.start_post_send(x).is_err_and(|e| e.is_would_block()));
    }
    take_calls();
    // d leaves the line: nothing of it is left there.
    pool.cancel_wait(d);
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [c, e]);
    assert_eq!(pool.footprint().waiting, 2);
    // a's initiator goes to c, which never posts (a forgotten waiter).
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 0), 0),
        [completed(a, 1), DcPoolEvent::Ready { destination: c }]
    );
    let mut events = Vec::new();
    for _ in 0..2 {
        advance_clock(Duration::from_millis(1));
        pool.progress(|event| events.push(event));
    }
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(pool.assignment(c), Some((0, None)));
    // The third millisecond after the grant: it goes back, to e.
    advance_clock(Duration::from_millis(1));
    pool.progress(|event| events.push(event));
    assert_eq!(events, [DcPoolEvent::Ready { destination: e }]);
    assert_eq!(pool.assignment(c), None);
    assert_eq!(pool.assignment(e), Some((0, None)));
    // A grant cancelled goes back at once.
    pool.cancel_wait(e);
    assert_eq!(pool.assignment(e), None);
    assert_eq!(post_writes(&mut pool, d, &[3]), 0);
    pool.core.check_no_destination_stranded();
    // Churn: waiting and cancelling many times keeps the line at its waiters.
    for _ in 0..1000 {
        assert!(pool.start_post_send(c).is_err_and(|e| e.is_would_block()));
        pool.cancel_wait(c);
    }
    assert_eq!(pool.footprint().waiting, 0);
    take_calls();
}

#[test]
fn the_streams_policy_addresses_each_request_on_the_destinations_stream() {
    let mut pool = pool(DcPoolPolicy::Streams, 16, 4);
    // Destinations until one lands on a stream other than 0 (the hash is deterministic).
    let mut addresses = Vec::new();
    let (address, id, initiator, stream) = loop {
        let address = Address::new(addresses.len());
        let id = address.add_to(&mut pool);
        let (initiator, stream) = pool.assignment(id).expect("streams bind at once");
        let stream = stream.expect("an initiator with streams gives a stream");
        assert!(stream < 4 && initiator < 2);
        if stream != 0 {
            break (address, id, initiator, stream);
        }
        addresses.push(address);
    };
    let qp = 16 + initiator as u32;
    // A pool without streams posts with start_post_send; this one is refused there.
    assert!(matches!(
        pool.start_post_send(id).map(|_| ()).unwrap_err().0,
        PostToDestinationErrorKind::StreamsMismatch { streams_pool: true }
    ));
    let mut guard = pool.start_post_send_on_stream(id).expect("bound");
    assert_eq!(guard.initiator(), (initiator, Some(stream)));
    // SAFETY: the recorders never touch the buffers.
    unsafe {
        guard
            .construct_wr(7, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_write(0x77, 0x9000)
            .setup_sge(0x5, 0x1000, 64)
    };
    guard
        .construct_wr(8, WorkRequestFlags::Signaled)
        .expect("room")
        .setup_send()
        .setup_inline_data(b"s");
    guard.post().expect("recorded post");
    assert_eq!(
        take_calls(),
        [
            format!("qp{qp} start"),
            format!(
                "qp{qp} write wr_id={:#x} flags={SIGNALED:#x} rkey=0x77 addr=0x9000",
                provider_wr_id(initiator, 0)
            ),
            address.stream_call(qp, stream),
            format!("qp{qp} sge lkey=0x5 addr=0x1000 len=64"),
            format!(
                "qp{qp} send wr_id={:#x} flags={:#x}",
                provider_wr_id(initiator, 1),
                SIGNALED | INLINE
            ),
            address.stream_call(qp, stream),
            format!("qp{qp} inline \"s\""),
            format!("qp{qp} complete"),
        ]
    );
    // A destination on stream 0 also goes through the stream setter.
    let first = addresses.first().expect("destination 0 is on stream 0");
    let first_id = DestinationId {
        index: 0,
        generation: 0,
    };
    let (first_initiator, first_stream) = pool.assignment(first_id).expect("bound");
    assert_eq!(first_stream, Some(0));
    post_writes(&mut pool, first_id, &[9]);
    let calls = take_calls();
    assert_eq!(calls[2], first.stream_call(16 + first_initiator as u32, 0));
    assert_eq!(
        complete(&mut pool, provider_wr_id(initiator, 1), 0),
        [completed(id, 7), completed(id, 8)]
    );
}

#[test]
fn a_stream_in_error_is_reset_only_once_flushed_and_other_streams_completions_count() {
    let mut pool = pool(DcPoolPolicy::Streams, 16, 4);
    // Two destinations on one initiator, on different streams.
    let mut seen: Vec<(DestinationId, usize, u16)> = Vec::new();
    let ((x, xs), (y, ys), initiator) = loop {
        let id = Address::new(seen.len()).add_to(&mut pool);
        let (initiator, stream) = pool.assignment(id).expect("bound");
        let stream = stream.expect("streams");
        if let Some(&(other, _, other_stream)) = seen.iter().find(|(_, i, s)| *i == initiator && *s != stream) {
            break ((other, other_stream), (id, stream), initiator);
        }
        seen.push((id, initiator, stream));
        assert!(seen.len() < 64, "the hash spreads destinations over streams");
    };
    post_writes(&mut pool, x, &[1, 2]);
    post_writes(&mut pool, y, &[3]);
    take_calls();
    // x's first request fails: reported at once; its second is not flushed yet, so the
    // stream is not reset, and x is refused naming the recovery.
    assert_eq!(
        complete(&mut pool, provider_wr_id(initiator, 0), REM_ACCESS_ERR),
        [DcPoolEvent::Failed {
            destination: x,
            wr_id: 1,
            status: REM_ACCESS_ERR,
            vendor_err: 0
        }]
    );
    assert!(take_calls().is_empty(), "no reset before the flush");
    assert!(matches!(
        pool.start_post_send_on_stream(x).map(|_| ()).unwrap_err().0,
        PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::Recovering { initiator: i, stream: Some(s) })
            if i == initiator && s == xs
    ));
    // The other stream's request executed: its completion after the error counts.
    assert_eq!(complete(&mut pool, provider_wr_id(initiator, 2), 0), [completed(y, 3)]);
    // y's stream posts on meanwhile.
    post_writes(&mut pool, y, &[4]);
    take_calls();
    // The flush of x's second request: failed (x is at fault), then the stream is reset.
    assert_eq!(
        complete(&mut pool, provider_wr_id(initiator, 1), FLUSH_ERR),
        [
            DcPoolEvent::Failed {
                destination: x,
                wr_id: 2,
                status: FLUSH_ERR,
                vendor_err: 0
            },
            // x was refused while its stream recovered.
            DcPoolEvent::Ready { destination: x }
        ]
    );
    assert_eq!(take_calls(), [format!("qp{} reset_stream {xs}", 16 + initiator)]);
    assert_eq!(pool.outstanding(y), 1);
    assert_eq!(complete(&mut pool, provider_wr_id(initiator, 3), 0), [completed(y, 4)]);
    assert_ne!(xs, ys);
    post_writes(&mut pool, x, &[5]);
    take_calls();
}

#[test]
fn a_stream_reset_refused_in_err_recovers_the_initiator_once_everything_completed() {
    let mut pool = pool(DcPoolPolicy::Streams, 16, 4);
    let mut seen: Vec<(DestinationId, usize, u16)> = Vec::new();
    let (x, y, initiator) = loop {
        let id = Address::new(seen.len()).add_to(&mut pool);
        let (initiator, stream) = pool.assignment(id).expect("bound");
        let stream = stream.expect("streams");
        if let Some(&(other, _, _)) = seen.iter().find(|(_, i, s)| *i == initiator && *s != stream) {
            break (other, id, initiator);
        }
        seen.push((id, initiator, stream));
    };
    let qp = 16 + initiator;
    post_writes(&mut pool, x, &[1]);
    post_writes(&mut pool, y, &[2, 3]);
    take_calls();
    // The initiator went to ERR after the error (2^`log_num_errored` streams errored): the reset is
    // refused, and the pool waits for the other stream's requests.
    pool.initiator(initiator).expect("initiator").in_error.set(true);
    assert_eq!(
        complete(&mut pool, provider_wr_id(initiator, 0), REM_ACCESS_ERR),
        [DcPoolEvent::Failed {
            destination: x,
            wr_id: 1,
            status: REM_ACCESS_ERR,
            vendor_err: 0
        }]
    );
    assert_eq!(
        take_calls(),
        [format!(
            "qp{qp} reset_stream {}",
            pool.assignment(x).unwrap().1.unwrap()
        )]
    );
    assert!(matches!(
        pool.start_post_send_on_stream(y).map(|_| ()).unwrap_err().0,
        PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::Recovering { stream: None, .. })
    ));
    // y's first executed before the move to ERR, its second was flushed: completed, retry.
    assert_eq!(complete(&mut pool, provider_wr_id(initiator, 1), 0), [completed(y, 2)]);
    assert!(take_calls().is_empty(), "no recovery while a request is in flight");
    assert_eq!(
        complete(&mut pool, provider_wr_id(initiator, 2), FLUSH_ERR),
        [
            DcPoolEvent::Retry {
                destination: y,
                wr_id: 3
            },
            // y was refused while its initiator recovered.
            DcPoolEvent::Ready { destination: y }
        ]
    );
    assert_eq!(take_calls(), [format!("qp{qp} recover")]);
    pool.initiator(initiator).expect("initiator").in_error.set(false);
    post_writes(&mut pool, y, &[3]);
    take_calls();
}

#[test]
fn an_error_completion_fails_the_destination_hands_back_the_flushed_others_and_recovers() {
    let mut pool = pool(DcPoolPolicy::Static, 16, 0);
    // Two destinations bound to one initiator (and one elsewhere).
    let ids: Vec<DestinationId> = (0..3).map(|n| Address::new(n).add_to(&mut pool)).collect();
    let shared: Vec<DestinationId> = ids
        .iter()
        .copied()
        .filter(|&d| pool.assignment(d) == pool.assignment(ids[0]))
        .collect();
    let (a, b) = (shared[0], shared[1]);
    let (initiator, _) = pool.assignment(a).expect("bound");
    let qp = 16 + initiator;

    post_writes(&mut pool, a, &[10, 11, 12]);
    post_writes(&mut pool, b, &[20]);
    post_writes(&mut pool, a, &[13]);
    take_calls();
    assert_eq!(complete(&mut pool, provider_wr_id(initiator, 0), 0), [completed(a, 10)]);
    // Request 1 (a's 11) fails: reported with its status; the initiator is in ERR, and
    // nothing else is reported before the device flushes it.
    assert_eq!(
        complete(&mut pool, provider_wr_id(initiator, 1), REM_ACCESS_ERR),
        [DcPoolEvent::Failed {
            destination: a,
            wr_id: 11,
            status: REM_ACCESS_ERR,
            vendor_err: 0
        }]
    );
    assert!(take_calls().is_empty(), "no recovery before the flush");
    assert!(matches!(
        pool.start_post_send(b).map(|_| ()).unwrap_err().0,
        PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::Recovering { stream: None, .. })
    ));
    // The flushes: a's fail, b's is handed back; the last one recovers the initiator.
    let mut events = Vec::new();
    for n in 2..5 {
        events.extend(complete(&mut pool, provider_wr_id(initiator, n), FLUSH_ERR));
    }
    assert_eq!(
        events,
        [
            DcPoolEvent::Failed {
                destination: a,
                wr_id: 12,
                status: FLUSH_ERR,
                vendor_err: 0
            },
            DcPoolEvent::Retry {
                destination: b,
                wr_id: 20
            },
            DcPoolEvent::Failed {
                destination: a,
                wr_id: 13,
                status: FLUSH_ERR,
                vendor_err: 0
            },
            // b was refused while the initiator recovered.
            DcPoolEvent::Ready { destination: b },
        ]
    );
    assert_eq!(take_calls(), [format!("qp{qp} recover")]);
    assert_eq!((pool.outstanding(a), pool.outstanding(b)), (0, 0));
    // The recovered initiator posts on, numbering on.
    post_writes(&mut pool, b, &[20]);
    assert!(take_calls()[1].contains(&format!("wr_id={:#x} ", provider_wr_id(initiator, 5))));
    assert_eq!(complete(&mut pool, provider_wr_id(initiator, 5), 0), [completed(b, 20)]);
}

#[test]
fn an_initiator_that_cannot_be_recovered_is_lost_and_its_destinations_move_to_the_others() {
    for policy in [DcPoolPolicy::Static, DcPoolPolicy::Streams] {
        let streams = if policy == DcPoolPolicy::Streams { 4 } else { 0 };
        let mut pool = pool(policy, 16, streams);
        let a = Address::new(0).add_to(&mut pool);
        let (initiator, _) = pool.assignment(a).expect("bound");
        post_writes(&mut pool, a, &[1, 2]);
        let recorder = pool.initiator(initiator).expect("initiator");
        recorder.recovery_fails.set(true);
        // With streams the stream reset is refused as in ERR: the initiator is recovered.
        recorder.in_error.set(streams > 0);
        let mut events = complete(&mut pool, provider_wr_id(initiator, 0), REM_ACCESS_ERR);
        events.extend(complete(&mut pool, provider_wr_id(initiator, 1), FLUSH_ERR));
        assert_eq!(
            events,
            [
                DcPoolEvent::Failed {
                    destination: a,
                    wr_id: 1,
                    status: REM_ACCESS_ERR,
                    vendor_err: 0
                },
                DcPoolEvent::Failed {
                    destination: a,
                    wr_id: 2,
                    status: FLUSH_ERR,
                    vendor_err: 0
                },
                DcPoolEvent::InitiatorLost {
                    initiator,
                    error: "recovery refused by the test".into()
                },
            ],
            "{policy:?}"
        );
        take_calls();
        // Rehashed onto the other initiator: it posts there.
        let (moved, _) = pool.assignment(a).expect("bound to another");
        assert_ne!(moved, initiator);
        assert_eq!(post_writes(&mut pool, a, &[3]), moved);
        take_calls();
    }
}

#[test]
fn retry_exceeded_errors_make_a_destination_unreachable_until_revived() {
    // The pool of these tests reports after 2 consecutive errors.
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let a = Address::new(0).add_to(&mut pool);
    post_writes(&mut pool, a, &[1]);
    let first = complete(&mut pool, provider_wr_id(0, 0), RETRY_EXC_ERR);
    assert_eq!(
        first,
        [DcPoolEvent::Failed {
            destination: a,
            wr_id: 1,
            status: RETRY_EXC_ERR,
            vendor_err: 0
        }]
    );
    assert!(!pool.is_unreachable(a));
    post_writes(&mut pool, a, &[2]);
    let second = complete(&mut pool, provider_wr_id(0, 1), RETRY_EXC_ERR);
    assert_eq!(
        second,
        [
            DcPoolEvent::Unreachable { destination: a },
            DcPoolEvent::Failed {
                destination: a,
                wr_id: 2,
                status: RETRY_EXC_ERR,
                vendor_err: 0
            },
        ]
    );
    take_calls();
    assert!(matches!(
        pool.start_post_send(a).map(|_| ()).unwrap_err().0,
        PostToDestinationErrorKind::Unreachable
    ));
    assert!(take_calls().is_empty());
    pool.revive(a);
    post_writes(&mut pool, a, &[3]);
    assert_eq!(complete(&mut pool, provider_wr_id(0, 2), 0), [completed(a, 3)]);
}

/// Posts `count` signalled writes in one batch to `destination`; returns the batch's room.
fn post_counted_writes(
    pool: &mut DcInitiatorPool<RecordingInitiator>, destination: DestinationId, first_wr_id: u64, count: u64,
) -> usize {
    let mut guard = pool.start_post_send(destination).expect("a batch");
    let room = guard.room();
    for wr_id in first_wr_id..first_wr_id + count {
        // SAFETY: the recorders never touch the buffers.
        unsafe {
            guard
                .construct_wr(wr_id, WorkRequestFlags::Signaled)
                .expect("room")
                .setup_write(1, 2)
                .setup_sge(3, 4, 5)
        };
    }
    guard.post().expect("recorded post");
    room
}

#[test]
fn a_batch_ends_where_the_ring_wraps_and_the_next_one_starts_at_its_beginning() {
    // A send queue of 4: a ring of 8 places.
    let mut pool = pool(DcPoolPolicy::Static, 4, 0);
    let da = Address::new(1).add_to(&mut pool);
    let (initiator, _) = pool.assignment(da).expect("bound");
    assert_eq!(post_counted_writes(&mut pool, da, 0, 3), 4);
    let settled = complete(&mut pool, provider_wr_id(initiator, 2), 0);
    assert_eq!(settled, [0, 1, 2].map(|wr_id| completed(da, wr_id)));
    assert_eq!(post_counted_writes(&mut pool, da, 3, 3), 4);
    let settled = complete(&mut pool, provider_wr_id(initiator, 5), 0);
    assert_eq!(settled, [3, 4, 5].map(|wr_id| completed(da, wr_id)));
    // Requests 6 and 7 fill the ring to its end: the send queue is empty, the batch has 2.
    assert_eq!(post_counted_writes(&mut pool, da, 6, 2), 2);
    // The next batch starts at the ring's beginning, with the send queue's 2 free places.
    assert_eq!(post_counted_writes(&mut pool, da, 8, 2), 2);
    take_calls();
    let settled = complete(&mut pool, provider_wr_id(initiator, 9), 0);
    assert_eq!(settled, [6, 7, 8, 9].map(|wr_id| completed(da, wr_id)));
    assert_eq!(pool.outstanding(da), 0);
}

#[test]
fn a_quota_caps_a_batch_while_others_wait() {
    let mut pool = pool(DcPoolPolicy::DedicatedWithQuota { quota: 3 }, 16, 0);
    let (da, db, dc) = (
        Address::new(1).add_to(&mut pool),
        Address::new(2).add_to(&mut pool),
        Address::new(3).add_to(&mut pool),
    );
    // Nobody waits: the whole send queue.
    assert_eq!(post_counted_writes(&mut pool, da, 0, 2), 16);
    assert_eq!(post_counted_writes(&mut pool, db, 100, 1), 16);
    // Both initiators are held: the third destination is in line.
    match pool.start_post_send(dc) {
        Err(PostToDestinationError(PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator))) => {},
        other => panic!("unexpected {:?}", other.map(|g| g.room())),
    }
    // Now the first destination has 1 request left of its quota, however large the batch.
    assert_eq!(post_counted_writes(&mut pool, da, 2, 1), 1);
    match pool.start_post_send(da) {
        Err(PostToDestinationError(PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::QuotaExhausted))) => {},
        other => panic!("unexpected {:?}", other.map(|g| g.room())),
    }
    take_calls();
}

#[test]
fn a_failed_request_carries_its_completions_vendor_syndrome() {
    let mut pool = pool(DcPoolPolicy::Static, 16, 0);
    let da = Address::new(1).add_to(&mut pool);
    let (initiator, _) = pool.assignment(da).expect("bound");
    post_counted_writes(&mut pool, da, 0, 2);
    take_calls();
    let mut events = Vec::new();
    assert!(pool.core.complete(
        &mut pool.initiators,
        &pool.wr_ids,
        provider_wr_id(initiator, 0),
        REM_ACCESS_ERR,
        0x15,
        &mut |e| events.push(e)
    ));
    assert_eq!(
        events,
        [DcPoolEvent::Failed {
            destination: da,
            wr_id: 0,
            status: REM_ACCESS_ERR,
            vendor_err: 0x15
        },]
    );
    // The request flushed behind it fails with the flush's status and no syndrome.
    assert!(pool.core.complete(
        &mut pool.initiators,
        &pool.wr_ids,
        provider_wr_id(initiator, 1),
        FLUSH_ERR,
        0x99,
        &mut |e| { events.push(e) }
    ));
    assert_eq!(
        events[1],
        DcPoolEvent::Failed {
            destination: da,
            wr_id: 1,
            status: FLUSH_ERR,
            vendor_err: 0
        }
    );
    pool.core.check_no_destination_stranded();
}

/// A work completion as a CQ shared with other queue pairs returns it.
fn work_completion(qp_number: u32, wr_id: u64, status: u32, vendor_err: u32) -> WorkCompletion {
    // SAFETY: zeroes are valid for ibv_wc (plain data).
    let mut wc: rdma_mummy_sys::ibv_wc = unsafe { MaybeUninit::zeroed().assume_init() };
    wc.qp_num = qp_number;
    wc.wr_id = wr_id;
    wc.status = status;
    wc.vendor_err = vendor_err;
    WorkCompletion::from(wc)
}

#[test]
fn complete_takes_the_pools_completions_from_a_shared_cq_and_leaves_the_others() {
    let mut pool = pool(DcPoolPolicy::Static, 16, 0);
    let da = Address::new(1).add_to(&mut pool);
    let (initiator, _) = pool.assignment(da).expect("bound");
    post_writes(&mut pool, da, &[7, 8]);
    take_calls();
    let qp = 16 + initiator as u32;
    let mut events = Vec::new();
    // Another queue pair's completion, with a wr_id that looks like the pool's: not the pool's.
    assert!(
        !pool.complete(&work_completion(0x99, provider_wr_id(initiator, 0), 0, 0), |e| events
            .push(e))
    );
    assert!(events.is_empty());
    // The pool's, with status and vendor syndrome.
    assert!(
        pool.complete(&work_completion(qp, provider_wr_id(initiator, 0), 0, 0), |e| events
            .push(e))
    );
    assert!(pool.complete(
        &work_completion(qp, provider_wr_id(initiator, 1), REM_ACCESS_ERR, 0x22),
        |e| events.push(e)
    ));
    assert_eq!(
        events,
        [
            completed(da, 7),
            DcPoolEvent::Failed {
                destination: da,
                wr_id: 8,
                status: REM_ACCESS_ERR,
                vendor_err: 0x22
            }
        ]
    );
    // Reported already: no longer the pool's.
    assert!(
        !pool.complete(&work_completion(qp, provider_wr_id(initiator, 1), 0, 0), |e| panic!(
            "{e:?}"
        ))
    );
    take_calls();
}

#[test]
fn a_removed_destination_is_stale_and_its_place_serves_another() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let da = Address::new(1).add_to(&mut pool);
    post_writes(&mut pool, da, &[1]);
    take_calls();
    assert!(matches!(
        pool.remove_destination(da).unwrap_err().0,
        RemoveDestinationErrorKind::Outstanding { requests: 1 }
    ));
    assert_eq!(complete(&mut pool, provider_wr_id(0, 0), 0), [completed(da, 1)]);
    pool.remove_destination(da).expect("nothing outstanding");
    assert!(matches!(
        pool.remove_destination(da).unwrap_err().0,
        RemoveDestinationErrorKind::UnknownDestination
    ));
    let db = Address::new(2).add_to(&mut pool);
    assert_eq!((db.index(), db.generation()), (da.index(), da.generation() + 1));
    for result in [pool.start_post_send(da).map(|_| ()), pool.prepare(da)] {
        assert!(matches!(
            result.unwrap_err().0,
            PostToDestinationErrorKind::UnknownDestination
        ));
    }
    assert_eq!((pool.outstanding(da), pool.assignment(da)), (0, None));
    assert!(take_calls().is_empty(), "nothing was posted for the stale id");
    // The new destination posts to its own address.
    post_writes(&mut pool, db, &[2]);
    assert_eq!(take_calls()[2], Address::new(2).call(16));
    assert_eq!(pool.footprint().live_destinations, 1);
}

#[test]
fn a_million_destinations_through_the_pool_leave_its_footprint_at_the_live_ones() {
    let mut pool = pool(DcPoolPolicy::Static, 16, 0);
    let mut live = std::collections::VecDeque::new();
    for n in 0..1_000_000usize {
        live.push_back(Address::new(n % 4096).add_to(&mut pool));
        if live.len() > 10_000 {
            let old = live.pop_front().expect("live");
            pool.remove_destination(old).expect("nothing outstanding");
        }
    }
    let footprint = pool.footprint();
    assert_eq!(footprint.live_destinations, 10_000);
    assert_eq!(pool.destination_count(), 10_000);
    assert!(footprint.destination_places <= 10_001, "{footprint:?}");
    assert_eq!(
        (footprint.waiting, footprint.grant_timers, footprint.batch_records),
        (0, 0, 0)
    );
    pool.core.check_no_destination_stranded();
}

#[test]
fn a_pool_without_streams_refuses_to_post_on_a_stream() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let da = Address::new(1).add_to(&mut pool);
    assert!(matches!(
        pool.start_post_send_on_stream(da).map(|_| ()).unwrap_err().0,
        PostToDestinationErrorKind::StreamsMismatch { streams_pool: false }
    ));
    // Refused before anything: no initiator held, nothing started.
    assert_eq!(pool.assignment(da), None);
    assert!(take_calls().is_empty());
}

/// The would-block reason of a refused batch.
fn would_block(pool: &mut DcInitiatorPool<RecordingInitiator>, destination: DestinationId) -> DcPoolWouldBlock {
    match pool.start_post_send(destination) {
        Err(PostToDestinationError(PostToDestinationErrorKind::WouldBlock(reason))) => reason,
        other => panic!("not a would-block: {:?}", other.map(|g| g.room())),
    }
}

#[test]
fn a_busy_polling_waiter_keeps_its_grant_until_the_timeout_has_elapsed() {
    let mut pool = pool_on_the_tests_clock(DcPoolPolicy::Dedicated, 16, Duration::from_millis(10));
    let ids: Vec<DestinationId> = (0..3).map(|n| Address::new(n).add_to(&mut pool)).collect();
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    post_writes(&mut pool, a, &[1]);
    post_writes(&mut pool, b, &[2]);
    assert_eq!(would_block(&mut pool, c), DcPoolWouldBlock::NoInitiator);
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 0), 0),
        [completed(a, 1), DcPoolEvent::Ready { destination: c }]
    );
    // A caller that busy-polls calls progress thousands of times within the timeout: c, slow
    // rather than gone, keeps what it was granted.
    let mut events = Vec::new();
    for _ in 0..10_000 {
        pool.progress(|event| events.push(event));
    }
    assert_eq!(
        pool.assignment(c),
        Some((0, None)),
        "the grant was revoked by a count of calls"
    );
    advance_clock(Duration::from_millis(9));
    pool.progress(|event| events.push(event));
    assert_eq!(pool.assignment(c), Some((0, None)));
    // Once the timeout has elapsed, one call gives it back (to the free initiators).
    advance_clock(Duration::from_millis(1));
    pool.progress(|event| events.push(event));
    assert_eq!(pool.assignment(c), None, "expired");
    assert!(events.is_empty(), "{events:?}");
    pool.core.check_no_destination_stranded();
    take_calls();
}

#[test]
fn a_destination_refused_for_a_full_queue_gets_ready_when_room_frees_up() {
    let mut pool = pool(DcPoolPolicy::Static, 2, 0);
    let a = Address::new(1).add_to(&mut pool);
    let (initiator, _) = pool.assignment(a).expect("bound");
    post_writes(&mut pool, a, &[1, 2]);
    assert_eq!(would_block(&mut pool, a), DcPoolWouldBlock::QueueFull);
    assert_eq!(
        complete(&mut pool, provider_wr_id(initiator, 0), 0),
        [completed(a, 1), DcPoolEvent::Ready { destination: a }]
    );
    // Once: a Ready per refusal, not per completion.
    assert_eq!(complete(&mut pool, provider_wr_id(initiator, 1), 0), [completed(a, 2)]);
    take_calls();
}

#[test]
fn a_destination_refused_while_its_initiator_recovers_gets_ready_once_recovered() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let a = Address::new(1).add_to(&mut pool);
    post_writes(&mut pool, a, &[1, 2]);
    let events = complete(&mut pool, provider_wr_id(0, 0), REM_ACCESS_ERR);
    assert!(
        matches!(events[..], [DcPoolEvent::Failed { wr_id: 1, .. }]),
        "{events:?}"
    );
    assert_eq!(
        would_block(&mut pool, a),
        DcPoolWouldBlock::Recovering {
            initiator: 0,
            stream: None
        }
    );
    // The flush of its last request lets the initiator recover: a may post again.
    let events = complete(&mut pool, provider_wr_id(0, 1), FLUSH_ERR);
    assert!(
        matches!(events[..], [DcPoolEvent::Failed { wr_id: 2, .. }, DcPoolEvent::Ready { destination }] if destination == a),
        "{events:?}"
    );
    take_calls();
}

#[test]
fn a_destination_that_used_its_quota_gets_ready_when_its_turn_comes_again() {
    let mut pool = pool(DcPoolPolicy::DedicatedWithQuota { quota: 1 }, 16, 0);
    let ids: Vec<DestinationId> = (0..3).map(|n| Address::new(n).add_to(&mut pool)).collect();
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    post_writes(&mut pool, a, &[1]);
    post_writes(&mut pool, b, &[2]);
    assert_eq!(would_block(&mut pool, c), DcPoolWouldBlock::NoInitiator);
    assert_eq!(would_block(&mut pool, a), DcPoolWouldBlock::QuotaExhausted);
    // a's initiator goes to c, first in line; a is in line behind it.
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 0), 0),
        [completed(a, 1), DcPoolEvent::Ready { destination: c }]
    );
    assert_eq!(
        complete(&mut pool, provider_wr_id(1, 0), 0),
        [completed(b, 2), DcPoolEvent::Ready { destination: a }]
    );
    take_calls();
}

#[test]
fn a_retired_destination_is_removed_once_its_requests_are_reported() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    let (a, b) = (Address::new(1).add_to(&mut pool), Address::new(2).add_to(&mut pool));
    post_writes(&mut pool, a, &[1, 2]);
    pool.retire_destination(a).expect("a live destination");
    // It posts no more, and is there until its requests are reported.
    assert!(matches!(
        pool.start_post_send(a).map(|g| g.room()),
        Err(PostToDestinationError(PostToDestinationErrorKind::Retiring))
    ));
    assert_eq!(complete(&mut pool, provider_wr_id(0, 0), 0), [completed(a, 1)]);
    assert_eq!(pool.destination_count(), 2);
    assert_eq!(
        complete(&mut pool, provider_wr_id(0, 1), 0),
        [completed(a, 2), DcPoolEvent::Removed { destination: a }]
    );
    assert_eq!(pool.destination_count(), 1);
    assert!(pool
        .start_post_send(a)
        .is_err_and(|e| matches!(e.0, PostToDestinationErrorKind::UnknownDestination)));
    // With nothing outstanding: removed at once, reported by the next progress.
    pool.retire_destination(b).expect("a live destination");
    assert_eq!(pool.destination_count(), 0);
    let mut events = Vec::new();
    pool.progress(|event| events.push(event));
    assert_eq!(events, [DcPoolEvent::Removed { destination: b }]);
    assert!(pool.retire_destination(b).is_err(), "stale");
    assert_eq!(pool.footprint().ready_events, 0);
    pool.core.check_no_destination_stranded();
    take_calls();
}

#[test]
fn a_refused_post_says_why_once() {
    use sideway_ext::ibverbs::address_handle::{CreateAddressHandleError, CreateAddressHandleErrorKind};
    use sideway_ext::mlx5::dc::endpoint::{CreateDcAddressHandleError, CreateDcAddressHandleErrorKind};
    use std::error::Error as _;

    let link_layer = CreateDcAddressHandleErrorKind::LinkLayerMismatch {
        port: 1,
        local_is_roce: true,
        remote_is_roce: false,
    };
    let kinds = [
        (
            PostToDestinationErrorKind::from(DcPoolWouldBlock::NoInitiator),
            "no DC initiator is free",
        ),
        (DcPoolWouldBlock::QuotaExhausted.into(), "used its quota"),
        (DcPoolWouldBlock::QueueFull.into(), "send queue is full"),
        (DcPoolWouldBlock::BatchFull.into(), "the batch is full"),
        (
            DcPoolWouldBlock::Recovering {
                initiator: 3,
                stream: Some(1),
            }
            .into(),
            "DC initiator 3 (stream Some(1)) is being recovered",
        ),
        (PostToDestinationErrorKind::Unreachable, "reported unreachable"),
        (PostToDestinationErrorKind::NoInitiatorInService, "out of service"),
        (PostToDestinationErrorKind::UnknownDestination, "no such destination"),
        (PostToDestinationErrorKind::Retiring, "retired"),
        (
            PostToDestinationErrorKind::StreamsMismatch { streams_pool: true },
            "posts with start_post_send_on_stream",
        ),
        (
            PostToDestinationErrorKind::StreamsMismatch { streams_pool: false },
            "posts with start_post_send",
        ),
        (CreateDcAddressHandleError::from(link_layer).into(), "address handle"),
    ];
    // What a report that prints the chain of sources shows.
    let chain = |error: &PostToDestinationError| {
        let mut chain = vec![error.to_string()];
        let mut source = error.source();
        while let Some(cause) = source {
            chain.push(cause.to_string());
            source = cause.source();
        }
        chain
    };
    for (kind, reason) in kinds {
        let error = PostToDestinationError::from(kind);
        let text = error.to_string();
        assert!(text.contains(reason), "{text:?} does not say {reason:?}");
        // The reason once.
        let chain = chain(&error);
        assert_eq!(
            chain.iter().filter(|message| message.contains(reason)).count(),
            1,
            "{chain:?}"
        );
    }
    // A peer whose MAC address the kernel could not resolve: an address handle error, whose
    // chain says why once, then the library's errno.
    let unresolved = CreateAddressHandleErrorKind::PeerMacUnresolved {
        port: 1,
        source: std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
    };
    let error = PostToDestinationError::from(PostToDestinationErrorKind::from(CreateDcAddressHandleError::from(
        CreateDcAddressHandleErrorKind::from(CreateAddressHandleError::from(unresolved)),
    )));
    let chain = chain(&error);
    assert!(chain[0].contains("address handle"), "{chain:?}");
    assert_eq!(
        chain
            .iter()
            .filter(|message| message.contains("peer's MAC address"))
            .count(),
        1,
        "{chain:?}"
    );
    let errno = std::io::Error::from_raw_os_error(libc::ETIMEDOUT).to_string();
    assert_eq!(chain.last(), Some(&errno), "{chain:?}");
}

mod destination_state;
mod lost_initiators;
mod path_mtu;
mod settings;
