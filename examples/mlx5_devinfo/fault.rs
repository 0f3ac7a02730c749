//! What one fault's error completion says, for a user's issue report: the completion status (by
//! name and number), the vendor syndrome (`vendor_err`, the device's own reason) and the time from
//! post to completion (a retry-exceeded error takes the initiator's whole retry budget, a remote
//! error one round trip).
//!
//! `mlx5_devinfo --dc-selftest --report` writes it in its JSON report, and the DC hardware tests
//! (`tests/test_dc.rs`, `dc-pool/tests/test_dc_pool.rs`) print it with the same line, through `#[path]`:
//! one formatter for both.
use std::fmt;
use std::time::Duration;

use serde::Serialize;
use sideway_ext::ibverbs::work_completion::{decode_status, WorkCompletion};

/// The facts of one error completion.
#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    /// The status's name (`ibv_wc_status`), or `unknown` for a number this crate does not know.
    status: String,
    /// The status as the library gave it.
    status_raw: u32,
    /// The vendor syndrome (`ibv_wc.vendor_err`).
    vendor_err: u32,
    /// The vendor syndrome in hexadecimal, as mlx5 documents and prints syndromes.
    vendor_err_hex: String,
    /// From post to completion, in microseconds.
    elapsed_us: u128,
}

impl Fault {
    /// The facts of `wc`, which completed `elapsed` after its request was posted.
    pub fn new(wc: &WorkCompletion, elapsed: Duration) -> Self {
        Self::from_parts(wc.status_raw(), wc.vendor_err(), elapsed)
    }

    /// The facts of an error completion given by its parts (as a DC pool's failed request gives
    /// them): the status as the library gave it, the vendor syndrome, and the time it took.
    pub fn from_parts(status_raw: u32, vendor_err: u32, elapsed: Duration) -> Self {
        Self {
            status: decode_status(status_raw).map_or_else(|| "unknown".to_string(), |status| format!("{status:?}")),
            status_raw,
            vendor_err,
            vendor_err_hex: format!("{vendor_err:#x}"),
            elapsed_us: elapsed.as_micros(),
        }
    }
}

impl fmt::Display for Fault {
    /// `status RemoteAccessError (10), vendor syndrome 0x88, after 1.234 ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "status {} ({}), vendor syndrome {}, after {:.3} ms",
            self.status,
            self.status_raw,
            self.vendor_err_hex,
            self.elapsed_us as f64 / 1000.0
        )
    }
}
