//! The integration tests' shared helpers: sideway-ext's own (tests/common at the root, one
//! place for both crates), and the DC test bed on a ConnectX.
#![allow(dead_code, unused_imports)]

#[path = "../../../tests/common/mod.rs"]
mod shared;

pub mod dc_bed;

pub use shared::*;

use std::sync::Arc;

use sideway::ibverbs::device_context::DeviceContext;

/// The DCI streams of the ConnectX under test (`max_log_num_concurent`, `max_log_num_errored`),
/// for a test that needs at least `needed` of them; `None` on a device without them, or with
/// fewer: the test is reported skipped, with why ([`skip::report_skip`]), and must return. (The
/// shared helpers have it only with sideway-ext's `mlx5` feature, always on here.)
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
