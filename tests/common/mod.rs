//! Shared helpers for the integration tests.
//!
//! Device tests are `#[ignore]`d by default, so a plain `cargo test` reports them as ignored
//! (and counts them). They run with `--include-ignored` and `SIDEWAY_EXT_TEST_DEVICE` naming an
//! RDMA device: `scripts/test` does that inside the SoftRoCE VM, with `rxe0`.
#![allow(dead_code)]

use std::sync::Arc;

use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;

/// The variable that names the device the device tests run on.
pub const DEVICE_VARIABLE: &str = "SIDEWAY_EXT_TEST_DEVICE";

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
