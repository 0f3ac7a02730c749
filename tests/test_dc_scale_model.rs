//! `examples/dc_scale_model`: the numbers it prints, checked against values
//! worked out here by hand from rdma-core's mlx5 sizes; the crossover points, checked against the
//! rows on either side of them; the refusals of bad options; and, on the device named by
//! `SIDEWAY_EXT_TEST_DEVICE`, that the device's limits are the ones used.
//!
//! Every test's name starts with `scale_model_`, so `scripts/device-suite scale_model` runs just
//! these in the SoftRoCE VM.
//!
//! The example binary is the one next to the test binaries (`target/<profile>/examples/`). Under
//! cargo (`CARGO` set, as `cargo test --test test_dc_scale_model` does) it is built first, with
//! this test's features, so it is never stale; elsewhere (the SoftRoCE VM, where
//! `scripts/device-suite` built it) it must exist and be newer than its source.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};

const EXAMPLE: &str = "dc_scale_model";
/// The example's source, to tell a stale binary.
const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/dc_scale_model.rs");

/// `target/<profile>/examples/dc_scale_model`, built first when cargo runs this test.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    let path = profile_dir.join("examples").join(EXAMPLE);
    if let Some(cargo) = std::env::var_os("CARGO") {
        let mut build = Command::new(cargo);
        build
            .args(["build", "--quiet", "--example", EXAMPLE, "--manifest-path"])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
        if profile_dir.file_name().is_some_and(|name| name == "release") {
            build.arg("--release");
        }
        let mut features = Vec::new();
        if cfg!(feature = "mlx5") {
            features.push("mlx5");
        }
        if cfg!(feature = "serde") {
            features.push("serde");
        }
        if !features.is_empty() {
            build.args(["--features", &features.join(",")]);
        }
        if let Some(target_dir) = profile_dir.parent() {
            build.arg("--target-dir").arg(target_dir);
        }
        let out = build.output().expect("run cargo build --example");
        assert!(
            out.status.success(),
            "cargo build --example {EXAMPLE} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        path.is_file(),
        "{} is missing: build the examples (cargo test builds them with the tests)",
        path.display()
    );
    if let (Ok(source), Ok(binary)) = (std::fs::metadata(SOURCE), std::fs::metadata(&path)) {
        if let (Ok(source), Ok(binary)) = (source.modified(), binary.modified()) {
            assert!(
                binary >= source,
                "{} is older than {SOURCE}: rebuild it (cargo build --example {EXAMPLE})",
                path.display()
            );
        }
    }
    path
}

fn run(args: &[&str]) -> Output {
    Command::new(example_binary())
        .args(args)
        .output()
        .expect("run the example")
}

/// Runs the example with `--json` and the arguments; it must succeed and print JSON.
fn run_json(args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = run(&all);
    assert!(
        out.status.success(),
        "{EXAMPLE} {all:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{EXAMPLE} --json printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A number at `pointer` in `value`.
fn number(value: &Value, pointer: &str) -> u64 {
    value
        .pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{pointer} is not a number in {value:#}"))
}

/// The row for `nodes`.
fn row(report: &Value, nodes: u64) -> &Value {
    report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|row| row["nodes"] == nodes)
        .unwrap_or_else(|| panic!("no row for N = {nodes}"))
}

// The default model, worked out from rdma-core's providers/mlx5 (send depth 128, receive depth
// 128, one entry, 16 DCIs, 4096 B pages):
// - RC send slot: atomic overhead 16 + 16 + 16 = 48, + one 16 B entry = 64 → 64 B; send queue
//   128 × 64 = 8192; own receive queue 128 × 16 = 2048; queue pair 8192 + 2048 = 10240 → 3 pages.
const RC_QP: u64 = 12_288;
/// RC on the SRQ: the send queue only, 8192 = 2 pages.
const RC_SRQ_QP: u64 = 8_192;
// - DCI slot: 48 + the 48 B datagram segment + 16 = 112 → 128 B; send queue 128 × 128 = 16384.
const DCI: u64 = 16_384;
// - SRQ: slots 16 + 16 = 32 B, 2 × 128 + 1 = 257 → 512 of them: 16384.
const SRQ: u64 = 16_384;
const DCIS: u64 = 16;
/// 16 × 16384 + 16384, whatever N.
const DC_MEMORY: u64 = 278_528;

#[test]
fn scale_model_defaults_table_has_the_hand_computed_numbers() {
    let report = run_json(&[]);
    assert_eq!(report["limits"]["source"], "defaults");
    assert_eq!(report["limits"]["max_qp"], Value::Null);
    assert_eq!(report["largest_rc_full_mesh"], Value::Null);
    assert_eq!(number(&report, "/parameters/dcis"), DCIS);
    assert_eq!(number(&report, "/parameters/send_depth"), 128);
    assert_eq!(number(&report, "/parameters/recv_depth"), 128);
    assert_eq!(number(&report, "/layout/rc_send_wqe_stride"), 64);
    assert_eq!(number(&report, "/layout/dci_send_wqe_stride"), 128);
    assert_eq!(number(&report, "/layout/rc_queue_pair_bytes"), RC_QP);
    assert_eq!(number(&report, "/layout/rc_srq_queue_pair_bytes"), RC_SRQ_QP);
    assert_eq!(number(&report, "/layout/dci_bytes"), DCI);
    assert_eq!(number(&report, "/layout/srq_slots"), 512);
    assert_eq!(number(&report, "/layout/srq_bytes"), SRQ);
    // Posted requests with one entry: control 16 + data 16 (+ remote address 16 for a write), and
    // the 48 B datagram segment on DC: one 64 B basic block for RC, two for DC.
    assert_eq!(number(&report, "/layout/posted_rc_send"), 32);
    assert_eq!(number(&report, "/layout/posted_rc_write"), 48);
    assert_eq!(number(&report, "/layout/posted_dc_send"), 80);
    assert_eq!(number(&report, "/layout/posted_dc_write"), 96);

    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "the default N are 16, 256 and 10 000");
    // (N, RC memory, RC with an SRQ memory), each written out.
    let expected = [
        (16, 184_320, 139_264),
        (256, 3_133_440, 2_105_344),
        (10_000, 122_867_712, 81_928_192),
    ];
    for (row, (n, rc_memory, rc_srq_memory)) in rows.iter().zip(expected) {
        assert_eq!(row["nodes"], n);
        assert_eq!(rc_memory, (n - 1) * RC_QP);
        assert_eq!(rc_srq_memory, (n - 1) * RC_SRQ_QP + SRQ);
        for (design, memory) in [("rc", rc_memory), ("rc_srq", rc_srq_memory)] {
            let needs = &row[design];
            assert_eq!(needs["queue_pairs"], n - 1, "{design} at N = {n}");
            assert_eq!(needs["queue_memory_bytes"], memory, "{design} at N = {n}");
            assert_eq!(needs["setup_exchanges_per_node"], n - 1, "{design} at N = {n}");
            assert_eq!(needs["setup_exchanges_total"], n * (n - 1) / 2, "{design} at N = {n}");
            assert_eq!(needs["state_transitions_per_node"], 3 * (n - 1), "{design} at N = {n}");
            assert_eq!(needs["address_handles_per_node"], 0, "{design} at N = {n}");
        }
        let dc = &row["dc"];
        assert_eq!(dc["queue_pairs"], DCIS + 1, "DC at N = {n}");
        assert_eq!(dc["queue_memory_bytes"], DC_MEMORY, "DC at N = {n}");
        assert_eq!(DC_MEMORY, DCIS * DCI + SRQ);
        assert_eq!(dc["setup_exchanges_per_node"], 1, "DC at N = {n}");
        assert_eq!(dc["setup_exchanges_total"], n, "DC at N = {n}");
        assert_eq!(dc["state_transitions_per_node"], 3 * DCIS + 2, "DC at N = {n}");
        assert_eq!(dc["address_handles_per_node"], n - 1, "DC at N = {n}");
        assert_eq!(row["fits"], Value::Null, "no device, no fit");
    }
}

#[test]
fn scale_model_defaults_table_is_printed_as_markdown() {
    let out = run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for line in [
        "limits: documented defaults (no device given)",
        "| 16 | 15 | 17 | 180 KiB | 136 KiB | 272 KiB | 15 | 1 | 120 | 16 |",
        "| 256 | 255 | 17 | 2.99 MiB | 2.01 MiB | 272 KiB | 255 | 1 | 32 640 | 256 |",
        "| 10 000 | 9 999 | 17 | 117.18 MiB | 78.13 MiB | 272 KiB | 9 999 | 1 | 49 995 000 | 10 000 |",
        "  queue pairs per node:           N = 19",
        "  queue memory per node:          N = 24 against RC, N = 34 against RC with an SRQ",
        "  setup exchanges per node:       N = 3",
        "  setup exchanges in all:         N = 4",
        "  state transitions per node:     N = 18",
    ] {
        assert!(text.lines().any(|l| l == line), "missing line {line:?} in:\n{text}");
    }
}

/// The crossover points are where DC needs less for the first time: not one node before.
#[test]
fn scale_model_crossover_is_where_dc_starts_to_win() {
    let report = run_json(&[]);
    let crossover = &report["crossover"];
    // By hand: QPs N - 1 > 17 from N = 19; memory (N - 1) × 12288 > 278528 from N = 24, and
    // (N - 1) × 8192 + 16384 > 278528 from N = 34 (equal at 33); exchanges N - 1 > 1 from N = 3,
    // N(N - 1)/2 > N from N = 4; transitions 3(N - 1) > 50 from N = 18.
    let expected = [
        ("queue_pairs", 19, "rc", "queue_pairs"),
        ("queue_memory_vs_rc", 24, "rc", "queue_memory_bytes"),
        ("queue_memory_vs_rc_srq", 34, "rc_srq", "queue_memory_bytes"),
        ("setup_exchanges_per_node", 3, "rc", "setup_exchanges_per_node"),
        ("setup_exchanges_total", 4, "rc", "setup_exchanges_total"),
        ("state_transitions_per_node", 18, "rc", "state_transitions_per_node"),
    ];
    let mut nodes = Vec::new();
    for (name, n, _, _) in expected {
        assert_eq!(crossover[name], n, "crossover {name}");
        nodes.extend([n - 1, n]);
    }
    nodes.retain(|&n| n >= 2);
    let list = nodes.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let rows = run_json(&["--nodes", &list]);
    for (name, n, design, measure) in expected {
        let rc_at = |n: u64| number(row(&rows, n), &format!("/{design}/{measure}"));
        let dc_at = |n: u64| number(row(&rows, n), &format!("/dc/{measure}"));
        assert!(dc_at(n) < rc_at(n), "{name}: DC must need less at N = {n}");
        if n > 2 {
            assert!(
                dc_at(n - 1) >= rc_at(n - 1),
                "{name}: DC already needs less at N = {}",
                n - 1
            );
        }
    }
}

#[test]
fn scale_model_options_change_the_model() {
    // Repeated and comma-separated --nodes, in the order given.
    let report = run_json(&[
        "--nodes",
        "100",
        "--nodes",
        "1000,9",
        "--dcis",
        "4",
        "--send-depth",
        "256",
        "--recv-depth",
        "512",
        "--sge",
        "4",
    ]);
    let nodes: Vec<u64> = report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| row["nodes"].as_u64().expect("nodes"))
        .collect();
    assert_eq!(nodes, [100, 1000, 9]);
    // By hand, 4 entries: RC slot 48 + 64 = 112 → 128, send queue 256 × 128 = 32768; receive
    // slot 4 × 16 = 64, queue 512 × 64 = 32768; RC QP 65536, on the SRQ 32768. DCI slot
    // 48 + 48 + 64 = 160 → 192, 256 × 192 = 49152 → 65536. SRQ slot 16 + 64 = 80 → 128,
    // 2 × 512 + 1 = 1025 → 2048 slots: 262144. DC: 4 × 65536 + 262144 = 524288.
    assert_eq!(number(&report, "/layout/rc_send_wqe_stride"), 128);
    assert_eq!(number(&report, "/layout/dci_send_wqe_stride"), 192);
    assert_eq!(number(&report, "/layout/rc_queue_pair_bytes"), 65_536);
    assert_eq!(number(&report, "/layout/rc_srq_queue_pair_bytes"), 32_768);
    assert_eq!(number(&report, "/layout/dci_bytes"), 65_536);
    assert_eq!(number(&report, "/layout/srq_slots"), 2_048);
    assert_eq!(number(&report, "/layout/srq_bytes"), 262_144);
    let at_100 = row(&report, 100);
    assert_eq!(at_100["rc"]["queue_memory_bytes"], 99 * 65_536);
    assert_eq!(at_100["rc_srq"]["queue_memory_bytes"], 99 * 32_768 + 262_144);
    assert_eq!(at_100["dc"]["queue_memory_bytes"], 524_288);
    assert_eq!(at_100["dc"]["queue_pairs"], 5);
    assert_eq!(at_100["dc"]["state_transitions_per_node"], 3 * 4 + 2);
    // DC needs less: QPs from N = 4 + 3; memory from 524288 / 65536 + 2 = 10 (equal at 9), and
    // (524288 - 262144) / 32768 + 2 = 10; transitions 3(N - 1) > 14 from N = 6.
    assert_eq!(report["crossover"]["queue_pairs"], 7);
    assert_eq!(report["crossover"]["queue_memory_vs_rc"], 10);
    assert_eq!(report["crossover"]["queue_memory_vs_rc_srq"], 10);
    assert_eq!(report["crossover"]["state_transitions_per_node"], 6);
    let at_9 = row(&report, 9);
    assert_eq!(at_9["rc"]["queue_memory_bytes"], at_9["dc"]["queue_memory_bytes"]);
}

#[test]
fn scale_model_bad_options_are_refused_with_status_2() {
    for (args, option) in [
        (&["--nodes", "1"][..], "--nodes"),
        (&["--nodes", "16,x"][..], "--nodes"),
        (&["--nodes", "16777217"][..], "--nodes"),
        (&["--dcis", "0"][..], "--dcis"),
        (&["--send-depth", "0"][..], "--send-depth"),
        (&["--recv-depth=-1"][..], "--recv-depth"),
        (&["--sge", "33"][..], "--sge"),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?} printed:\n{}", stdout(&out));
        assert!(stderr(&out).contains(option), "{args:?}: {}", stderr(&out));
    }
}

/// `-d` naming a device that is not there: the documented defaults, with the reason, on a host
/// without RDMA devices; an error (status 1) naming the devices there are on a host with some.
#[test]
fn scale_model_missing_device_gives_defaults_only_without_rdma_devices() {
    const NAME: &str = "no_such_device_0";
    let devices = DeviceList::new()
        .map(|list| list.iter().map(|d| d.name()).collect::<Vec<_>>())
        .unwrap_or_default();
    if devices.is_empty() {
        let report = run_json(&["-d", NAME]);
        assert_eq!(report["limits"]["source"], "defaults");
        assert_eq!(report["limits"]["device"], Value::Null);
        let note = report["limits"]["note"].as_str().expect("a note says why");
        assert!(note.starts_with(NAME), "{note}");
        assert_eq!(report["rows"].as_array().map(Vec::len), Some(3));
    } else {
        let out = run(&["-d", NAME]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(out.stdout.is_empty(), "{}", stdout(&out));
        let message = stderr(&out);
        assert!(message.contains(&format!("no RDMA device named {NAME}")), "{message}");
        assert!(devices.iter().all(|d| message.contains(d.as_str())), "{message}");
    }
}

#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn scale_model_device_limits_are_used() {
    let ctx = common::open_test_device();
    let name = std::env::var(common::DEVICE_VARIABLE).expect("checked by open_test_device");
    let attr = ctx.query_device().expect("query_device");
    let max_qp = attr.max_qp() as u64;
    let max_srq_wr = attr.max_srq_wr() as u64;
    assert!(max_qp > 0, "{name} reports max_qp {max_qp}");
    // One N whose full mesh does not fit: N - 1 = max_qp + 1.
    let too_many = max_qp + 2;
    let list = format!("16,256,10000,{too_many}");
    let report = run_json(&["-d", &name, "--nodes", &list]);
    let limits = &report["limits"];
    assert_eq!(limits["source"], "device");
    assert_eq!(limits["device"], name.as_str());
    assert_eq!(limits["max_qp"], max_qp);
    assert_eq!(limits["max_qp_wr"], attr.max_qp_wr() as u64);
    assert_eq!(limits["max_sge"], attr.max_sge() as u64);
    assert_eq!(limits["max_srq"], attr.max_srq() as u64);
    assert_eq!(limits["max_srq_wr"], max_srq_wr);
    assert_eq!(limits["max_srq_sge"], attr.max_srq_sge() as u64);
    assert_eq!(report["largest_rc_full_mesh"], max_qp + 1);
    // The SRQ keeps its wait queue (2 × 128 + 1 slots → 512) only when max_srq_wr + 1 holds it.
    let expected_slots: u64 = if 257 <= max_srq_wr + 1 { 512 } else { 256 };
    assert_eq!(report["layout"]["srq_slots"], expected_slots);
    for n in [16, 256, 10_000, too_many] {
        let fits = &row(&report, n)["fits"];
        assert_eq!(fits["rc"], n - 1 <= max_qp, "RC at N = {n} with max_qp {max_qp}");
        assert_eq!(fits["dc"], 17 <= max_qp, "DC at N = {n} with max_qp {max_qp}");
    }
    assert_eq!(row(&report, too_many)["fits"]["rc"], false);

    #[cfg(feature = "mlx5")]
    {
        let is_mlx5 = sideway_ext::mlx5::device_context::Mlx5DeviceContext::new(ctx.clone()).is_mlx5();
        assert_eq!(limits["dc"]["is_mlx5"], is_mlx5, "{limits:#}");
        assert_eq!(limits["dc"]["supported"], is_mlx5, "{limits:#}");
    }
    #[cfg(not(feature = "mlx5"))]
    {
        assert_eq!(limits["dc"], Value::Null);
        assert!(limits["dc_note"]
            .as_str()
            .is_some_and(|note| note.contains("mlx5 feature")));
    }

    // The table says the same.
    let out = run(&["-d", &name, "--nodes", &list]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let header = format!("limits: {name}: max_qp {max_qp}, ");
    assert!(
        text.lines().any(|l| l.starts_with(&header)),
        "no {header:?} in:\n{text}"
    );
    assert!(
        text.contains(&format!("(max_qp {max_qp}): an RC full mesh fits up to N = ")),
        "{text}"
    );
    assert!(text.contains("; DC 17 queue pairs fit: yes"), "{text}");
}

#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn scale_model_depths_above_the_device_limits_are_refused() {
    let ctx = common::open_test_device();
    let name = std::env::var(common::DEVICE_VARIABLE).expect("checked by open_test_device");
    let attr = ctx.query_device().expect("query_device");
    let max_qp_wr = attr.max_qp_wr() as u64;
    assert!(
        max_qp_wr < 1 << 24,
        "this test asks for max_qp_wr + 1, which must be below the example's own bound 2^24 ({name}: {max_qp_wr})"
    );
    let above = (max_qp_wr + 1).to_string();
    let out = run(&["-d", &name, "--send-depth", &above]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!("--send-depth {above} is above {name}'s max_qp_wr {max_qp_wr}")),
        "{}",
        stderr(&out)
    );
    // Entries: the smaller of max_sge (sends) and max_srq_sge (the SRQ), when below the
    // example's own bound of 32 (rxe: max_srq_sge 27).
    let (limit, max) = [
        ("max_sge", attr.max_sge() as u64),
        ("max_srq_sge", attr.max_srq_sge() as u64),
    ]
    .into_iter()
    .min_by_key(|&(_, max)| max)
    .expect("two limits");
    if max < 32 {
        let above = (max + 1).to_string();
        let out = run(&["-d", &name, "--sge", &above]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("--sge {above} is above {name}'s {limit} {max}")),
            "{}",
            stderr(&out)
        );
    }
}
