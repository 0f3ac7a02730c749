//! What the device tests share: the ConnectX under test, registered buffers, byte patterns.
//!
//! `mlx5_hw_` tests need a ConnectX-4 or newer named by `SIDEWAY_EXT_TEST_MLX5_DEVICE` and run
//! one at a time (`--include-ignored`); without one they are reported ignored, as the root
//! package's `mlx5_hw_` tests are.
#![allow(dead_code)]

#[path = "../../../tests/common/skip.rs"]
pub mod skip;

use std::sync::Arc;

use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::DeviceContextExt;
use sideway_ext::ibverbs::source_gid::SourceGid;

pub const DEVICE_VARIABLE: &str = "SIDEWAY_EXT_TEST_MLX5_DEVICE";
pub const PORT: u8 = 1;

/// A registered buffer; deregistered before it is freed (field order).
pub struct Buffer {
    pub mr: Arc<MemoryRegion>,
    pub data: Vec<u8>,
}

impl Buffer {
    pub fn new(pd: &Arc<ProtectionDomain>, len: usize, access: AccessFlags) -> Self {
        let data = vec![0u8; len];
        // SAFETY: `data` is never reallocated and outlives `mr` (field order).
        let mr = unsafe { pd.reg_mr(data.as_ptr() as usize, data.len(), access) }.expect("reg_mr");
        Self { mr, data }
    }

    pub fn addr(&self) -> u64 {
        self.data.as_ptr() as u64
    }

    /// What the device wrote, read volatile.
    pub fn read(&self, len: usize) -> Vec<u8> {
        // SAFETY: in bounds of `data`.
        (0..len)
            .map(|i| unsafe { self.data.as_ptr().add(i).read_volatile() })
            .collect()
    }
}

/// The ConnectX of `SIDEWAY_EXT_TEST_MLX5_DEVICE`, opened.
pub fn open() -> Arc<DeviceContext> {
    let name = std::env::var(DEVICE_VARIABLE)
        .unwrap_or_else(|_| panic!("mlx5 hardware tests need {DEVICE_VARIABLE} to name a ConnectX-4 or newer"));
    let list = DeviceList::new().expect("list RDMA devices");
    let device = list
        .iter()
        .find(|device| device.name() == name)
        .unwrap_or_else(|| panic!("{DEVICE_VARIABLE}={name}: no such device"));
    device.open().expect("open the device")
}

/// Whether a test of what only a ConnectX has (`needs`) runs on the device under test: on the
/// software ConnectX it is reported skipped, with why ([`skip::report_skip`]), and must return.
pub fn require_hardware(ctx: &DeviceContext, needs: &str) -> bool {
    let name = std::env::var(DEVICE_VARIABLE).unwrap_or_default();
    let firmware = ctx.query_device().expect("query_device").firmware_version();
    skip::hardware_decision(&name, &firmware, needs)
        .map_err(|reason| skip::report_skip(&reason))
        .is_ok()
}

/// The index of the GID port 1 sends from: its RoCE v2 GID on RoCE, 0 on InfiniBand.
pub fn gid_index(ctx: &Arc<DeviceContext>) -> u8 {
    match ctx.query_port(PORT).expect("query port").link_layer() == LinkLayer::Ethernet {
        true => ctx
            .source_gid(PORT, &SourceGid::Automatic)
            .expect("a RoCE v2 GID")
            .expect("a RoCE v2 GID")
            .index(),
        false => 0,
    }
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}
