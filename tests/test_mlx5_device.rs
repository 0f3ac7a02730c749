//! mlx5 direct-verbs device tests: `Mlx5DeviceContext` and `examples/mlx5_devinfo.rs` on a real
//! device.
//!
//! - On the device named by `SIDEWAY_EXT_TEST_DEVICE` (`#[ignore]`d device tests; `rxe0` in the
//!   SoftRoCE VM): a device that is not mlx5 must report "not supported", as a typed error and
//!   in the example's output, with libmlx5 installed and with it hidden.
//!   These need a device that is not mlx5 (their names contain `device_that_is_not_mlx5`, to
//!   `--skip` them on a ConnectX host) and fail, saying so, on an mlx5 device.
//! - On the ConnectX device named by `SIDEWAY_EXT_TEST_MLX5_DEVICE` (hardware tests, named
//!   `mlx5_hw_…`, `#[ignore]`d and run one at a time): the query succeeds and reports what every
//!   ConnectX has. Run without the variable they fail; `scripts/device-suite` skips them (and
//!   counts them as skipped) when it is unset.
#![cfg(feature = "mlx5")]
mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

use serial_test::serial;
use sideway::ibverbs::device_context::DeviceContext;
use sideway_ext::mlx5::device_attributes::{Mlx5ContextFlags, Mlx5ContextMask};
use sideway_ext::mlx5::device_context::{Mlx5DeviceContext, QueryMlx5DeviceErrorKind};

/// What the "not mlx5" tests say when the test device is an mlx5 device.
const TEST_DEVICE_IS_MLX5: &str = "the test device is an mlx5 device: this test needs one that is not \
    (run it on SoftRoCE, or `--skip device_that_is_not_mlx5`; the mlx5_hw_ tests cover ConnectX)";

/// `vendor_part_id`s of ConnectX-5 and newer physical functions (ConnectX-5, -5 Ex, -6, -6 Dx,
/// -7, -8) and BlueField DPUs (1, 2, 3): devices with DC read/atomic support.
const CONNECTX5_OR_NEWER: &[u32] = &[4119, 4121, 4123, 4125, 4129, 4131, 41682, 41686, 41692];

const NOT_MLX5_LINE: &str = "not an mlx5 device (mlx5dv_query_device: not supported)";

/// `target/<profile>/examples/mlx5_devinfo`, next to this test binary's `deps` directory.
fn example_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = profile_dir.join("examples").join("mlx5_devinfo");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo test --features mlx5` (or `cargo build --features mlx5 --examples`)",
        path.display()
    );
    path
}

fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn test_device_name() -> String {
    std::env::var(common::DEVICE_VARIABLE).expect("device tests need SIDEWAY_EXT_TEST_DEVICE")
}

/// Checks the example's JSON for `name`: it parses, and the device is reported as not mlx5.
fn assert_json_reports_not_mlx5(stdout: &[u8], name: &str) {
    let json: serde_json::Value = serde_json::from_slice(stdout).expect("the example prints valid JSON");
    let devices = json["devices"].as_array().expect("a devices array");
    assert_eq!(devices.len(), 1, "-d selects one device: {json}");
    let device = &devices[0];
    assert_eq!(device["name"], name);
    assert_eq!(device["is_mlx5"], false);
    assert!(device["mlx5"].is_null() && device["dc"].is_null(), "{device}");
    assert_eq!(device["mlx5_status"], NOT_MLX5_LINE);
    assert!(!device["ports"].as_array().expect("ports").is_empty(), "{device}");
}

#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn query_device_on_a_device_that_is_not_mlx5_is_not_supported() {
    let ctx = common::open_test_device();
    common::require_not_mellanox_with(&ctx, TEST_DEVICE_IS_MLX5);
    let mlx5 = Mlx5DeviceContext::new(ctx.clone());
    assert!(Arc::ptr_eq(mlx5.device_context(), &ctx));

    let err = mlx5
        .query_device()
        .expect_err("a device that is not mlx5 has no mlx5 attributes");
    assert!(matches!(err.0, QueryMlx5DeviceErrorKind::NotSupported), "{err:?}");
    assert!(err.is_not_supported());
    assert_eq!(
        err.0.to_string(),
        "device is not an mlx5 device or libmlx5 is not available"
    );
    assert!(!mlx5.is_mlx5());

    let dc = mlx5
        .query_dc_capabilities()
        .expect("the DC summary works on every device");
    assert!(!dc.is_mlx5() && !dc.is_supported());
    assert_eq!((dc.max_dc_rd_atom(), dc.max_dc_init_rd_atom()), (None, None));
    assert_eq!((dc.dci_streams(), dc.dc_odp()), (None, None));
    let sizes = mlx5.query_send_wqe_sizes();
    assert!(
        sizes.as_ref().is_err_and(|err| err.is_not_supported()),
        "no QUERY_HCA_CAP on a device that is not mlx5: {sizes:?}"
    );
    let attr = ctx.query_device().expect("query_device");
    assert_eq!(dc.rc_max_qp_rd_atom(), attr.max_qp_rd_atom() as u32);
    assert_eq!(dc.rc_max_qp_init_rd_atom(), attr.max_qp_init_rd_atom() as u32);
}

#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn example_reports_a_device_that_is_not_mlx5() {
    let ctx = common::open_test_device();
    common::require_not_mellanox_with(&ctx, TEST_DEVICE_IS_MLX5);
    let name = test_device_name();
    let example = example_path();

    let table = run(Command::new(&example).arg("-d").arg(&name));
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains(&format!("hca_id: {name}")), "{table}");
    assert!(table.contains("link_layer:") && table.contains("GID["), "{table}");
    assert!(table.contains(&format!("{name}: {NOT_MLX5_LINE}")), "{table}");
    assert!(!table.contains("    mlx5:"), "{table}");

    let json = run(Command::new(&example).arg("--json").arg("-d").arg(&name));
    assert_json_reports_not_mlx5(&json.stdout, &name);

    // Every device listed, with the one under test among them.
    let all = run(Command::new(&example).arg("--json"));
    let json: serde_json::Value = serde_json::from_slice(&all.stdout).expect("valid JSON");
    assert!(json["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .any(|d| d["name"] == name.as_str()));
}

/// `mlx5_devinfo --dc-selftest` on a device that is not mlx5: one plain line and status 1, before
/// any DC object is made (no check line).
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn dc_selftest_on_a_device_that_is_not_mlx5_says_so_and_exits_1() {
    let ctx = common::open_test_device();
    common::require_not_mellanox_with(&ctx, TEST_DEVICE_IS_MLX5);
    let name = test_device_name();
    // With a GID index, and without one (the self-test would pick one, after the mlx5 check).
    for gid in [&["-g", "1"][..], &[]] {
        let output = Command::new(example_path())
            .arg("--dc-selftest")
            .args(gid)
            .arg("-d")
            .arg(&name)
            .output()
            .expect("run mlx5_devinfo --dc-selftest");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(1), "{gid:?}: {stdout}");
        assert_eq!(
            stdout.trim(),
            format!("{name}: not an mlx5 device (or libmlx5 is missing): DC needs a ConnectX-4 or newer"),
            "{gid:?}: exactly the one line"
        );
    }
    // -g belongs to the self-test.
    let refused = Command::new(example_path()).args(["-g", "1"]).output().expect("run");
    assert_eq!(refused.status.code(), Some(2), "clap refuses -g without --dc-selftest");
}

/// `mlx5_devinfo --dc-selftest --report` on the ConnectX: every check `ok` or `skipped` with its
/// reason, status 0, and each check named; the report is printed (`--nocapture` shows it).
#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial_test::serial]
fn mlx5_hw_dc_selftest_passes() {
    let (ctx, name) = common::open_mlx5_test_device_named();
    // No -g: the self-test picks the port's RoCE v2 GID (index 0 on InfiniBand) and prints it.
    let (gid_index, _) = common::local_gid(&ctx);
    let report = std::env::temp_dir().join(format!("sideway-ext-dc-report-{}.json", std::process::id()));
    let output = Command::new(example_path())
        .args(["--dc-selftest", "-d", &name, "--report"])
        .arg(&report)
        .output()
        .expect("run mlx5_devinfo --dc-selftest");
    let stdout = String::from_utf8_lossy(&output.stdout);
    // What to attach to an issue: the report, with each fault's status, syndrome and time.
    let json = std::fs::read_to_string(&report).unwrap_or_else(|e| format!("no report: {e}"));
    let _ = std::fs::remove_file(&report);
    println!("{stdout}\n{json}");
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains(&format!("GID index {gid_index} (")), "{stdout}");
    // It names the device it ran on and that device's firmware.
    let report: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let firmware = ctx.query_device().expect("query_device").firmware_version();
    assert_eq!(report["device"]["name"], name.as_str(), "{json}");
    assert_eq!(report["device"]["firmware"], firmware.as_str(), "{json}");
    for check in [
        "DC target at RTR",
        "DC initiator at RTS",
        "RDMA WRITE",
        "RDMA READ",
        "SEND into the shared receive queue",
        "wrong DC key: error, recover, write again",
        "destroyed DC target: error, recover, write again",
        "DCI streams",
    ] {
        assert!(
            stdout
                .lines()
                .any(|line| line.contains(check) && (line.starts_with("ok ") || line.starts_with("skipped "))),
            "{check}: {stdout}"
        );
    }
    assert!(!stdout.contains("FAILED"), "{stdout}");
    // The atomics say which byte order the device used (host, or big-endian).
    for line in stdout
        .lines()
        .filter(|line| line.starts_with("ok ") && line.contains("atomic"))
    {
        assert!(line.contains("byte order"), "{line}");
    }
}

/// Where the dynamic loader finds `libmlx5.so.1`, resolved to the real file.
fn libmlx5_path() -> Option<PathBuf> {
    let output = Command::new("ldconfig").arg("-p").output().ok()?;
    let listing = String::from_utf8_lossy(&output.stdout);
    let line = listing.lines().find(|l| l.trim_start().starts_with("libmlx5.so.1 "))?;
    let path = line.rsplit("=> ").next()?.trim();
    std::fs::canonicalize(path).ok()
}

#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn example_without_libmlx5_reports_a_device_that_is_not_mlx5() {
    let ctx = common::open_test_device();
    // An mlx5 device needs libmlx5 to be opened at all.
    common::require_not_mellanox_with(&ctx, TEST_DEVICE_IS_MLX5);
    let name = test_device_name();
    let Some(libmlx5) = libmlx5_path() else {
        // Nothing to hide: the example already runs without libmlx5.
        let output = run(Command::new(example_path()).args(["--json", "-d", &name]));
        assert_json_reports_not_mlx5(&output.stdout, &name);
        return;
    };
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "hiding libmlx5 needs root (a private mount namespace): run the device tests as root \
         (scripts/device-suite does), or `--skip example_without_libmlx5`"
    );
    // In a private mount namespace (only this child sees it), /dev/null is bound over libmlx5,
    // so rdma-mummy-sys' dlopen("libmlx5.so.1") fails; the script checks the file reads empty.
    let script = r#"lib=$1; shift; mount --bind /dev/null "$lib" && test ! -s "$lib" || exit 97; exec "$@""#;
    let output = run(Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(&libmlx5)
        .arg(example_path())
        .args(["--json", "-d", &name]));
    assert_json_reports_not_mlx5(&output.stdout, &name);
}

/// The ConnectX of `SIDEWAY_EXT_TEST_MLX5_DEVICE` and its name (see
/// `common::open_mlx5_test_device`).
fn open_mlx5_test_device() -> (String, Arc<DeviceContext>) {
    let (ctx, name) = common::open_mlx5_test_device_named();
    (name, ctx)
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_query_device_on_connectx() {
    let (name, ctx) = open_mlx5_test_device();
    let mlx5 = Mlx5DeviceContext::new(ctx.clone());
    let attr = mlx5
        .query_device()
        .unwrap_or_else(|e| panic!("mlx5dv_query_device on {name}: {e:?}"));
    println!("{name}: {attr:#?}");
    assert!(mlx5.is_mlx5());
    assert!(
        attr.flags().contains(Mlx5ContextFlags::CqeV1),
        "every ConnectX uses CQE v1: {:?}",
        attr.flags()
    );
    assert!(
        Mlx5ContextMask::all_flags().contains(attr.comp_mask()),
        "the provider returned a bit that was not requested: {:?}",
        attr.comp_mask()
    );

    let part = ctx.query_device().expect("query_device").vendor_part_id();
    let dc = mlx5.query_dc_capabilities().expect("DC capabilities");
    assert!(dc.is_mlx5() && dc.is_supported());
    let sizes = mlx5
        .query_send_wqe_sizes()
        .expect("an mlx5 device has send request sizes");
    let max_sge = ctx.query_device().expect("query_device").max_sge().max(0) as u32;
    println!(
        "{name}: max_wqe_sz_sq {}, max_wqe_sz_sq_dc {} (reported: {}), max_sge {max_sge}",
        sizes.max_wqe_sz_sq(),
        sizes.max_wqe_sz_sq_dc(),
        sizes.is_reported()
    );
    assert!(
        sizes.max_wqe_sz_sq() >= 16 * max_sge + 32,
        "mlx5_ib_query_device derives max_sge from max_wqe_sz_sq: {sizes:?}, max_sge {max_sge}"
    );
    if !attr.comp_mask().contains(Mlx5ContextMask::MaxDcReadAtomic) {
        println!("note: libmlx5 does not report DC read/atomic depths (rdma-core before 47)");
    } else if CONNECTX5_OR_NEWER.contains(&part) {
        let (responder, initiator) = (attr.max_dc_rd_atom(), attr.max_dc_init_rd_atom());
        assert!(
            responder.is_some_and(|d| d > 0) && initiator.is_some_and(|d| d > 0),
            "ConnectX-5 or newer (part {part}) has DC reads/atomics: {responder:?}/{initiator:?}"
        );
        assert_eq!((dc.max_dc_rd_atom(), dc.max_dc_init_rd_atom()), (responder, initiator));
    }
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_example_prints_the_mlx5_section() {
    let (name, _ctx) = open_mlx5_test_device();
    let example = example_path();
    let table = run(Command::new(&example).arg("-d").arg(&name));
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("    mlx5:") && table.contains("    DC:"), "{table}");
    assert!(table.contains("CqeV1"), "{table}");
    assert!(!table.contains(NOT_MLX5_LINE), "{table}");

    let json = run(Command::new(&example).arg("--json").arg("-d").arg(&name));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("valid JSON");
    let device = &json["devices"][0];
    assert_eq!(device["is_mlx5"], true);
    assert!(device["mlx5"].is_object() && device["dc"].is_object(), "{device}");
    assert_eq!(device["dc"]["supported"], true);
}
