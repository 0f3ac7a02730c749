//! Skips decided at run time, from what the device under test has. libtest has no such skip (a
//! test that returns is reported `ok`), so a test that cannot run here returns at once after
//! writing one line to the process's standard error, past libtest's capture:
//!
//! ```text
//! SKIPPED <test name>: <reason>
//! ```
//!
//! `scripts/device-suite` counts each test named on such a line as skipped, not passed, with its
//! reason; run by hand, read those lines next to libtest's `ok`.

use std::io::Write;

/// What starts a run-time skip's line (`SKIPPED <test name>: <reason>`); scripts/device-suite-tally
/// matches it.
pub const SKIP_MARKER: &str = "SKIPPED";

/// Reports that the running test skips its work, and why: one line on the process's standard
/// error, named after libtest's thread (the test's name). The caller returns right after.
pub fn report_skip(reason: &str) {
    let current = std::thread::current();
    let name = current.name().unwrap_or("unnamed-test");
    // The line starts a line of its own: libtest may have written `test <name> ... ` before it.
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "\n{SKIP_MARKER} {name}: {reason}");
    let _ = stderr.flush();
}

/// Whether a test that needs DCI streams runs on a device: `caps` as libmlx5 reports
/// `dci_streams_caps` (`max_log_num_concurent`, `max_log_num_errored`), `None` when it does not
/// report them; `needed` the least of each the test needs. `Ok` with the capabilities to run,
/// `Err` with the reason to skip. libmlx5 reports zeros on a device without streams (a
/// ConnectX-6 that is not a Dx): a concurrency of 0 is no streams, as in pyverbs
/// (`Mlx5DcStreamsRes.generate_dci_attr` raises `SkipTest`).
pub fn dci_streams_decision(caps: Option<(u8, u8)>, needed: (u8, u8)) -> Result<(u8, u8), String> {
    let Some((concurrent, errored)) = caps else {
        return Err(
            "the device reports no DCI streams capabilities (libmlx5 before rdma-core v37, \
                    or not mlx5)"
                .into(),
        );
    };
    if concurrent == 0 {
        return Err(
            "the device has no DCI streams (dci_streams_caps.max_log_num_concurent is 0; \
                    ConnectX-6 Dx or newer has them)"
                .into(),
        );
    }
    let (needed_concurrent, needed_errored) = needed;
    if concurrent < needed_concurrent || errored < needed_errored {
        return Err(format!(
            "the test needs log_num_concurent {needed_concurrent} and log_num_errored {needed_errored}; \
             the device allows {concurrent} and {errored}"
        ));
    }
    Ok((concurrent, errored))
}

/// Whether the device named `name`, whose firmware version reads `firmware`, is the software
/// ConnectX (`softmlx5/`): its devices are named `softmlx5_N` and its firmware says
/// `softmlx5`.
pub fn is_software_connectx(name: &str, firmware: &str) -> bool {
    name.starts_with("softmlx5_") || firmware.contains("softmlx5")
}

/// Whether a test of what only a ConnectX has (`needs`: a timing promise, PCIe, a BlueFlame
/// register the device reads) runs on a device: `Ok` on hardware, `Err` with the reason to skip
/// on the software ConnectX.
pub fn hardware_decision(name: &str, firmware: &str, needs: &str) -> Result<(), String> {
    if is_software_connectx(name, firmware) {
        return Err(format!(
            "{name} ({firmware}) is the software ConnectX; the test needs {needs}"
        ));
    }
    Ok(())
}
