//! Shared helpers for the integration tests.
//!
//! Device tests are `#[ignore]`d by default, so a plain `cargo test` reports them as ignored
//! (and counts them). They run with `--include-ignored` and `SIDEWAY_EXT_TEST_DEVICE` naming an
//! RDMA device: `scripts/test` does that inside the SoftRoCE VM, with `rxe0`.
#![allow(dead_code)]

pub mod loopback;
pub mod peer;
pub mod skip;

use std::sync::Arc;

use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;

/// The variable that names the device the device tests run on.
pub const DEVICE_VARIABLE: &str = "SIDEWAY_EXT_TEST_DEVICE";

/// How many times slower than usual the tests run: `scripts/memcheck` sets it for runs under
/// valgrind, where a device test's traffic takes tens of times longer (a whole number; 1 unset).
pub const SLOWDOWN_VARIABLE: &str = "SIDEWAY_EXT_TEST_SLOWDOWN";

/// `limit` stretched by [`SLOWDOWN_VARIABLE`]: for deadlines of tests that move much traffic, and
/// for bounds on how soon a woken thread runs.
#[allow(dead_code)] // not every test binary has such a deadline
pub fn slowed(limit: std::time::Duration) -> std::time::Duration {
    let factor = std::env::var(SLOWDOWN_VARIABLE)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1);
    limit * factor.max(1)
}

/// Opens the device named by `SIDEWAY_EXT_TEST_DEVICE`; panics with a clear message when the
/// variable is unset or the device is missing, since only device tests call it.
pub fn open_test_device() -> Arc<DeviceContext> {
    let name = std::env::var(DEVICE_VARIABLE)
        .unwrap_or_else(|_| panic!("device tests need {DEVICE_VARIABLE} to name an RDMA device (e.g. rxe0)"));
    let list = DeviceList::new().unwrap_or_else(|e| panic!("cannot list RDMA devices: {e}"));
    let device = list
        .iter()
        .find(|d| d.name() == name)
        .unwrap_or_else(|| panic!("{DEVICE_VARIABLE}={name}: no such RDMA device"));
    device.open().unwrap_or_else(|e| panic!("cannot open {name}: {e}"))
}

use sideway::ibverbs::address::{Gid, GidType};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::QueuePairState;
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::address::AddressHandleAttribute;
use sideway_ext::ibverbs::extension::CompletionQueueExt;
use sideway_ext::ibverbs::post_send_guard::Transport;
use sideway_ext::ibverbs::queue_pair::{QueuePairAttribute, SharedReceiveQueuePair};
use sideway_ext::ibverbs::work_completion::WorkCompletion;

/// Port 1's GID to address this device by: a RoCE v2 GID with an IPv4-mapped address when there
/// is one (rxe0's index 1), else index 0.
pub fn local_gid(ctx: &DeviceContext) -> (u8, Gid) {
    let table = ctx.query_gid_table().expect("query_gid_table");
    let entry = table
        .iter()
        .find(|e| {
            e.port_num() == 1
                && matches!(e.gid_type(), GidType::RoceV2)
                && std::net::Ipv6Addr::from(e.gid()).to_ipv4_mapped().is_some()
        })
        .or_else(|| table.iter().find(|e| e.port_num() == 1 && e.gid_index() == 0))
        .expect("port 1 has a GID");
    (entry.gid_index() as u8, entry.gid())
}

/// The global address of port 1 of this device, sent from `gid_index`.
pub fn address_of(gid_index: u8, gid: Gid) -> AddressHandleAttribute {
    let mut ah = AddressHandleAttribute::new();
    ah.setup_port(1)
        .setup_grh_dest_gid(&gid)
        .setup_grh_src_gid_index(gid_index)
        .setup_grh_hop_limit(1);
    ah
}

/// Moves an RC queue pair through INIT, RTR and RTS towards `remote_qpn` on the same device.
pub fn connect_rc<T: Transport>(
    qp: &mut SharedReceiveQueuePair<T>, remote_qpn: u32, gid_index: u8, gid: Gid, access: AccessFlags,
) {
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(1)
        .setup_access_flags(access);
    qp.modify(&attr).expect("RC RESET -> INIT");
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(Mtu::Mtu1024)
        .setup_dest_qp_num(remote_qpn)
        .setup_rq_psn(0)
        .setup_max_dest_read_atomic(4)
        .setup_min_rnr_timer(1)
        .setup_address_vector(&address_of(gid_index, gid));
    qp.modify(&attr).expect("RC INIT -> RTR");
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToSend)
        .setup_sq_psn(0)
        .setup_timeout(14)
        .setup_retry_cnt(7)
        .setup_rnr_retry(7)
        .setup_max_read_atomic(4);
    qp.modify(&attr).expect("RC RTR -> RTS");
    assert_eq!(qp.state(), QueuePairState::ReadyToSend);
}

/// Moves a UD queue pair to RTS with this Q_Key.
pub fn activate_ud<T: Transport>(qp: &mut SharedReceiveQueuePair<T>, qkey: u32) {
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(1)
        .setup_qkey(qkey);
    qp.modify(&attr).expect("UD RESET -> INIT");
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToReceive);
    qp.modify(&attr).expect("UD INIT -> RTR");
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToSend).setup_sq_psn(0);
    qp.modify(&attr).expect("UD RTR -> RTS");
}

/// A registered buffer that lives as long as its memory region.
pub struct Buffer {
    // Deregistered (dropped) before the memory is freed.
    pub mr: Arc<MemoryRegion>,
    pub data: Vec<u8>,
}

impl Buffer {
    pub fn new(pd: &Arc<ProtectionDomain>, len: usize) -> Self {
        let access =
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead | AccessFlags::RemoteAtomic;
        Self::with_access(pd, len, access)
    }

    /// A buffer registered with only `access` (e.g. without remote write, to provoke a remote
    /// access error).
    pub fn with_access(pd: &Arc<ProtectionDomain>, len: usize, access: AccessFlags) -> Self {
        let data = vec![0u8; len];
        // SAFETY: `data` is never reallocated and is dropped after `mr` (field order).
        let mr = unsafe { pd.reg_mr(data.as_ptr() as usize, data.len(), access) }.expect("reg_mr");
        Self { mr, data }
    }

    pub fn addr(&self, offset: usize) -> u64 {
        self.data.as_ptr() as u64 + offset as u64
    }

    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// Reads the buffer as the device wrote it (the device writes behind Rust's back).
    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        // SAFETY: in bounds of `data`; volatile so the compiler does not assume the content.
        (offset..offset + len)
            .map(|i| unsafe { std::ptr::read_volatile(self.data.as_ptr().add(i)) })
            .collect()
    }

    pub fn write(&mut self, offset: usize, bytes: &[u8]) {
        self.data[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
}

/// Polls `cq` until `count` completions arrived or `timeout` passed; panics on timeout.
pub fn wait_completions(
    cq: &impl sideway::ibverbs::completion::CompletionQueue, count: usize, timeout: std::time::Duration,
) -> Vec<WorkCompletion> {
    let deadline = std::time::Instant::now() + timeout;
    let mut out = Vec::with_capacity(count);
    let mut buf = [WorkCompletion::default(); 16];
    while out.len() < count {
        let polled = cq.poll_work_completions(&mut buf).expect("poll");
        out.extend_from_slice(polled);
        if polled.is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "only {} of {count} completions arrived",
                out.len()
            );
            std::thread::yield_now();
        }
    }
    out
}

/// The variable that names the ConnectX device the mlx5 hardware tests (`mlx5_hw_…`) run on.
pub const MLX5_DEVICE_VARIABLE: &str = "SIDEWAY_EXT_TEST_MLX5_DEVICE";

/// Opens the ConnectX named by `SIDEWAY_EXT_TEST_MLX5_DEVICE`; panics with a clear message when
/// the variable is unset or the device is missing, since only mlx5 hardware tests call it.
pub fn open_mlx5_test_device() -> Arc<DeviceContext> {
    open_mlx5_test_device_named().0
}

/// As [`open_mlx5_test_device`], with the device's name.
pub fn open_mlx5_test_device_named() -> (Arc<DeviceContext>, String) {
    let name = std::env::var(MLX5_DEVICE_VARIABLE).unwrap_or_else(|_| {
        panic!(
            "mlx5 hardware tests need {MLX5_DEVICE_VARIABLE} to name a ConnectX-4 or newer; without one, `--skip mlx5_hw_`"
        )
    });
    let list = DeviceList::new().unwrap_or_else(|e| panic!("cannot list RDMA devices: {e}"));
    let device = list
        .iter()
        .find(|d| d.name() == name)
        .unwrap_or_else(|| panic!("{MLX5_DEVICE_VARIABLE}={name}: no such RDMA device"));
    let ctx = device.open().unwrap_or_else(|e| panic!("cannot open {name}: {e}"));
    (ctx, name)
}

/// The DCI streams of the ConnectX under test (`max_log_num_concurent`, `max_log_num_errored`),
/// for a test that needs at least `needed` of them; `None` on a device without them, or with
/// fewer: the test is reported skipped, with why ([`skip::report_skip`]), and must return.
#[cfg(feature = "mlx5")]
pub fn require_dci_streams(ctx: &Arc<DeviceContext>, needed: (u8, u8)) -> Option<(u8, u8)> {
    let attributes = sideway_ext::mlx5::device_context::Mlx5DeviceContext::new(Arc::clone(ctx))
        .query_device()
        .expect("mlx5dv_query_device");
    let caps = attributes
        .dci_streams_caps()
        .map(|caps| (caps.max_log_num_concurrent, caps.max_log_num_errored));
    skip::dci_streams_decision(caps, needed)
        .map_err(|reason| skip::report_skip(&reason))
        .ok()
}

/// The IEEE OUI that Mellanox/NVIDIA devices report as `vendor_id`.
pub const MELLANOX_VENDOR_ID: u32 = 0x02c9;

/// Panics with `message` when the device reports the Mellanox/NVIDIA vendor id: a test of a
/// device that is not mlx5 would have nothing to check there, and must not pass without checking.
pub fn require_not_mellanox_with(ctx: &DeviceContext, message: &str) {
    let vendor_id = ctx.query_device().expect("query_device").vendor_id();
    assert_ne!(vendor_id, MELLANOX_VENDOR_ID, "{message}");
}

/// [`require_not_mellanox_with`] the usual message.
pub fn require_not_mellanox(ctx: &DeviceContext) {
    require_not_mellanox_with(
        ctx,
        "this test checks a device that is not mlx5; on a ConnectX run the mlx5_hw_ tests instead",
    );
}

/// `len` bytes that differ with `seed` and do not repeat every 256 bytes, so that a shifted or
/// misplaced chunk shows.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8) ^ ((i >> 8) as u8).wrapping_mul(37) ^ seed)
        .collect()
}

/// Compares byte by byte; on a difference, says how many bytes differ and where the first is.
pub fn assert_bytes(actual: &[u8], expected: &[u8], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let wrong = actual.iter().zip(expected).filter(|(a, e)| a != e).count();
    if let Some(first) = (0..actual.len()).find(|&i| actual[i] != expected[i]) {
        panic!(
            "{what}: {wrong} of {} bytes differ, the first at {first}: {:#04x} instead of {:#04x}",
            actual.len(),
            actual[first],
            expected[first]
        );
    }
}
