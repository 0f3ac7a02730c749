//! The newcomer's examples: `examples/async_pingpong` and `examples/ud_echo` (feature `tokio`)
//! run as a server and a client against each other on `SIDEWAY_EXT_TEST_DEVICE` (rxe0 in the
//! SoftRoCE VM), and `examples/dc_hello` (feature `mlx5`), which stops on a device that
//! is not mlx5; `mlx5_devinfo --dc-selftest --report` on whatever this machine has.
//!
//! The example binaries are the ones cargo builds next to the test binaries; run under cargo,
//! the tests build them first.
mod common;

#[cfg(feature = "tokio")]
mod async_pingpong {
    use std::path::PathBuf;

    use serial_test::serial;

    use super::common::{self, peer};

    fn example_binary() -> PathBuf {
        peer::example_binary("async_pingpong", Some("tokio"))
    }

    /// `<role>: N messages on Q queue pairs in S seconds, E completion events`, labelled with the
    /// peer's role: (N, Q, E).
    fn summary(peer: &peer::Finished) -> (u64, u64, u64) {
        let label = format!("{}: ", peer.role);
        let line = peer
            .stdout
            .lines()
            .find_map(|line| line.strip_prefix(&label).filter(|rest| rest.contains("messages on")))
            .unwrap_or_else(|| panic!("no summary line labelled {label:?}\n{peer}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        let number = |i: usize| -> u64 { words[i].parse().unwrap_or_else(|_| panic!("bad summary {line:?}")) };
        (number(0), number(3), number(9))
    }

    /// 16 queue pairs × 200 messages, echoed and checked by the client; both sides finish, each
    /// woke on completion events (at least one, and fewer than its completions: it slept, it did
    /// not poll a CQ per completion).
    #[test]
    #[serial]
    #[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
    fn async_pingpong_server_and_client_echo_over_16_queue_pairs() {
        let ctx = common::open_test_device();
        let (gid_index, _) = common::local_gid(&ctx);
        drop(ctx);
        let device = std::env::var(common::DEVICE_VARIABLE).expect("checked");
        let port = 18731;
        let args = peer::strings(&[
            "-d",
            &device,
            "-g",
            &gid_index.to_string(),
            "-p",
            &port.to_string(),
            "-q",
            "16",
            "-n",
            "200",
        ]);
        let mut client_args = args.clone();
        client_args.push("127.0.0.1".into());
        let binary = example_binary();
        let (server, client) = peer::run_pair(&binary, &args, &binary, &client_args, port);
        for peer in [&server, &client] {
            assert!(peer.succeeded(), "the {} failed\n{server}\n{client}", peer.role);
            let (messages, qps, events) = summary(peer);
            assert_eq!((messages, qps), (16 * 200, 16), "{peer}");
            // Each message brings a receive and a send completion.
            assert!(events >= 1 && events <= 2 * messages, "{events} events\n{peer}");
        }
        println!("{server}\n{client}");
    }
}

#[cfg(feature = "tokio")]
mod ud_echo {
    use serial_test::serial;

    use super::common::{self, peer};

    /// The numbers of the line labelled `<role>: ` that contains `what`, in order.
    fn numbers(peer: &peer::Finished, what: &str) -> Vec<u64> {
        let label = format!("{}: ", peer.role);
        let line = peer
            .stdout
            .lines()
            .find_map(|line| line.strip_prefix(&label).filter(|rest| rest.contains(what)))
            .unwrap_or_else(|| panic!("no line labelled {label:?} with {what:?}\n{peer}"));
        line.split(|c: char| !c.is_ascii_digit() && c != '.')
            .filter(|word| !word.is_empty() && !word.contains('.'))
            .map(|word| {
                word.parse()
                    .unwrap_or_else(|_| panic!("bad number {word:?} in {line:?}"))
            })
            .collect()
    }

    /// 4 UD queue pairs × 200 datagrams through one SRQ of 64 receives that the server refills
    /// only on its limit event (armed at 16): every datagram is echoed and checked by the client
    /// (a lost one fails it), both count 800; the server saw the limit event and refilled on it
    /// often enough to have posted a receive for each datagram (64 at the start, at most 64 per
    /// refill: at least (800 - 64) / 64 refills), and no more than it consumed.
    #[test]
    #[serial]
    #[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
    fn ud_echo_refills_its_srq_on_the_limit_event_and_echoes_every_datagram() {
        const QPS: u64 = 4;
        const ITERS: u64 = 200;
        const RX_DEPTH: u64 = 64;
        let ctx = common::open_test_device();
        let (gid_index, _) = common::local_gid(&ctx);
        drop(ctx);
        let device = std::env::var(common::DEVICE_VARIABLE).expect("checked");
        let port = 18733;
        let args = peer::strings(&[
            "-d",
            &device,
            "-g",
            &gid_index.to_string(),
            "-p",
            &port.to_string(),
            "-q",
            &QPS.to_string(),
            "-n",
            &ITERS.to_string(),
            "-r",
            &RX_DEPTH.to_string(),
        ]);
        let mut client_args = args.clone();
        client_args.push("127.0.0.1".into());
        let binary = peer::example_binary("ud_echo", Some("tokio"));
        let (server, client) = peer::run_pair(&binary, &args, &binary, &client_args, port);
        for peer in [&server, &client] {
            assert!(peer.succeeded(), "the {} failed\n{server}\n{client}", peer.role);
        }
        let total = QPS * ITERS;
        // client: N datagrams echoed on Q queue pairs in S seconds
        let counts = numbers(&client, "datagrams echoed");
        assert_eq!(counts[..2], [total, QPS], "{client}");
        // server: N datagrams echoed on Q queue pairs through one SRQ, L limit events, P receives
        // posted, E completion events
        let counts = numbers(&server, "limit events");
        let [echoed, qps, limit_events, posted, events] = counts[..] else {
            panic!("unexpected server line\n{server}")
        };
        assert_eq!((echoed, qps), (total, QPS), "{server}");
        assert!(
            limit_events >= (total - RX_DEPTH) / RX_DEPTH,
            "{limit_events} limit events\n{server}"
        );
        assert!(
            posted >= total && posted <= total + RX_DEPTH,
            "{posted} receives posted for {total} datagrams\n{server}"
        );
        assert!(events >= 1, "{server}");
        println!("{server}\n{client}");
    }
}

#[cfg(feature = "mlx5")]
mod dc_hello {
    use serial_test::serial;

    use super::common::{self, peer};

    /// On rxe: exit status 1 and "rxe0: not an mlx5 device", nothing else done.
    #[test]
    #[serial]
    #[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
    fn dc_hello_on_a_device_that_is_not_mlx5_says_so() {
        let ctx = common::open_test_device();
        common::require_not_mellanox(&ctx);
        let (gid_index, _) = common::local_gid(&ctx);
        let device = std::env::var(common::DEVICE_VARIABLE).expect("checked");
        let binary = peer::example_binary("dc_hello", Some("mlx5"));
        // With a GID index, and without one (dc_hello would pick one, after the mlx5 check).
        let gid_index = gid_index.to_string();
        for args in [&[device.as_str(), gid_index.as_str()][..], &[device.as_str()]] {
            let finished = peer::Peer::run("dc_hello", &binary, &peer::strings(args));
            assert!(finished.failed_cleanly(), "expected exit status 1\n{finished}");
            let message = format!("{device}: not an mlx5 device");
            assert!(
                finished.stderr.contains(&message),
                "stderr lacks {message:?}\n{finished}"
            );
            assert!(finished.stdout.is_empty(), "{finished}");
        }
    }

    /// On a ConnectX: the write and the send are checked by the program itself.
    #[test]
    #[serial]
    #[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE (a ConnectX-4 or newer)"]
    fn mlx5_hw_dc_hello_writes_and_sends() {
        let (ctx, device) = common::open_mlx5_test_device_named();
        // No GID index: dc_hello picks the port's first RoCE v2 GID (none on InfiniBand, where the
        // LID is the address) and prints it.
        let roce_v2 = ctx
            .query_gid_table()
            .expect("query_gid_table")
            .into_iter()
            .find(|entry| entry.port_num() == 1 && entry.gid_type() == sideway::ibverbs::address::GidType::RoceV2);
        let gid_index = roce_v2.map_or("none".to_string(), |entry| entry.gid_index().to_string());
        drop(ctx);
        let binary = peer::example_binary("dc_hello", Some("mlx5"));
        let finished = peer::Peer::run("dc_hello", &binary, &peer::strings(&[&device]));
        assert!(finished.succeeded(), "{finished}");
        assert!(
            finished.stdout.contains(&format!("GID index {gid_index},")),
            "{finished}"
        );
        assert!(finished.stdout.contains("DC write and send checked"), "{finished}");
    }
}

#[cfg(feature = "mlx5")]
mod mlx5_devinfo_report {
    use std::path::Path;

    use serde_json::Value;
    use sideway::ibverbs::device::{DeviceInfo, DeviceList};
    use sideway_ext::mlx5::device_context::Mlx5DeviceContext;

    use super::common::{peer, skip};

    /// The self-test's steps, by name, in order (the lines `mlx5_hw_dc_selftest_passes` reads).
    const STEPS: [&str; 11] = [
        "DC target at RTR",
        "DC initiator at RTS",
        "RDMA WRITE",
        "RDMA READ",
        "atomic fetch-and-add",
        "atomic compare-and-swap",
        "SEND into the shared receive queue",
        "wrong DC key: error, recover, write again",
        "destroyed DC target: error, recover, write again",
        "DCI streams",
        "direct path: WRITE and inline SEND through sideway-ext-dc-direct",
    ];

    /// The steps whose report carries an error completion when they ran.
    const FAULT_STEPS: [&str; 3] = [STEPS[7], STEPS[8], STEPS[9]];

    /// What this machine has, read by the test itself: no device (the list fails or is empty),
    /// or the first device's name, `ibv_query_device` facts and whether it is mlx5.
    struct Here {
        first: Option<(String, String, u32, u32, bool)>,
    }

    impl Here {
        fn read() -> Self {
            let Ok(list) = DeviceList::new() else {
                return Self { first: None };
            };
            let first = list.iter().next().map(|device| {
                let ctx = device.open().expect("open the first device");
                let attr = ctx.query_device().expect("query_device");
                let is_mlx5 = Mlx5DeviceContext::new(ctx.clone())
                    .query_dc_capabilities()
                    .expect("the DC summary works on every device")
                    .is_mlx5();
                (
                    device.name(),
                    attr.firmware_version(),
                    attr.vendor_id(),
                    attr.vendor_part_id(),
                    is_mlx5,
                )
            });
            Self { first }
        }
    }

    /// A library's entry: its file, if named, is that library with the version it reports, and
    /// the rdma-core release is the version's last two numbers (or `unknown`).
    fn check_library(library: &Value, prefix: &str) {
        let version = library["version"].as_str().expect("a version");
        let release = library["rdma_core"].as_str().expect("an rdma-core release");
        if let Some(file) = library["file"].as_str() {
            assert!(Path::new(file).is_file(), "{library}");
            assert_eq!(
                file.rsplit('/').next(),
                Some(format!("{prefix}{version}").as_str()),
                "{library}"
            );
            let numbers: Vec<&str> = version.split('.').collect();
            match numbers[..] {
                [_, _, major, minor] => assert_eq!(release, format!("{major}.{minor}"), "{library}"),
                _ => assert_eq!(release, "unknown", "{library}"),
            }
        } else {
            assert_eq!((version, release), ("unknown", "unknown"), "{library}");
        }
    }

    /// The rdma-core release is libibverbs' (`55` of `1.14.55.0`), and a libibverbs of release 32
    /// or newer exports `_ibv_query_gid_ex`.
    fn check_rdma_core(versions: &Value) {
        let version = versions["libibverbs"]["version"].as_str().expect("a version");
        let numbers: Vec<&str> = version.split('.').collect();
        let release = match numbers[..] {
            [_, _, major, _] => major.parse::<u64>().ok(),
            _ => None,
        };
        assert_eq!(versions["rdma_core"].as_u64(), release, "{versions}");
        let exported = &versions["libibverbs_exports"]["_ibv_query_gid_ex"];
        match release {
            Some(release) if versions["libibverbs"]["file"].is_string() => {
                assert_eq!(exported.as_bool(), Some(release >= 32), "{versions}")
            },
            _ => assert!(exported.is_boolean() || exported.is_null(), "{versions}"),
        }
    }

    /// Now, UTC, to the second, as `date -u` prints it in RFC 3339.
    fn utc_now() -> String {
        let output = std::process::Command::new("date")
            .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .expect("run date");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// Where libibverbs finds no `class/infiniband_verbs` under sysfs, as on a host without RDMA
    /// (CI's), it answers the device list with "Function not implemented"; both the listing and
    /// the self-test say what that means: no RDMA device, or with devices in
    /// `class/infiniband`, the `ib_uverbs` module not loaded. The sysfs is one the test makes
    /// (`SYSFS_PATH`, which libibverbs reads instead of `/sys`), so that this runs on any host.
    /// The self-test's report records the run: the command line, the `MLX5_*` variables, the
    /// checkout's commit and the time.
    #[test]
    fn mlx5_devinfo_says_what_function_not_implemented_means() {
        // libibverbs lists the kernel's RDMA devices over netlink whatever SYSFS_PATH says: only
        // a host without them (the one `cargo test` runs on) answers ENOSYS.
        if std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut devices| devices.next().is_some()) {
            skip::report_skip("this host has RDMA devices, which libibverbs lists whatever SYSFS_PATH says");
            return;
        }
        let binary = peer::example_binary("mlx5_devinfo", Some("mlx5"));
        let sysfs = std::env::temp_dir().join(format!("sideway-ext-sysfs-{}", std::process::id()));
        let report_path = sysfs.join("dc-report.json");
        std::fs::create_dir_all(&sysfs).expect("make the sysfs root");
        let run = |args: &[&str]| {
            let output = std::process::Command::new(&binary)
                .args(args)
                .env("SYSFS_PATH", &sysfs)
                .env("MLX5_SHUT_UP_BF", "1")
                .output()
                .expect("run mlx5_devinfo");
            assert_eq!(output.status.code(), Some(1), "{output:?}");
            String::from_utf8_lossy(&output.stderr).into_owned()
        };
        let enosys = "Function not implemented (os error 38). ";

        let listing = run(&[]);
        let none = "This host has no RDMA device: libibverbs answers ENOSYS when /sys/class/infiniband_verbs \
                    (the ib_uverbs module) is missing";
        assert!(listing.contains(&format!("{enosys}{none}")), "{listing}");

        let report_arg = report_path.to_str().expect("a UTF-8 path");
        let before = utc_now();
        let selftest = run(&["--dc-selftest", "--report", report_arg]);
        let after = utc_now();
        assert!(selftest.contains(&format!("{enosys}{none}")), "{selftest}");
        let text = std::fs::read_to_string(&report_path).expect("the report");
        let report: Value = serde_json::from_str(&text).expect("JSON");
        assert!(
            report["stopped"].as_str().is_some_and(|why| why.contains(none)),
            "{report}"
        );
        assert_eq!(report["outcome"], "not run");
        assert_eq!(
            report["run"]["command_line"],
            serde_json::json!([
                binary.to_str().expect("a UTF-8 path"),
                "--dc-selftest",
                "--report",
                report_arg
            ])
        );
        assert_eq!(report["environment"]["MLX5_SHUT_UP_BF"], "1", "{report}");
        let head = std::process::Command::new("git")
            .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
            .output()
            .ok()
            .filter(|output| output.status.success())
            .map_or_else(
                || "unknown".to_string(),
                |output| String::from_utf8_lossy(&output.stdout).trim().to_string(),
            );
        assert_eq!(report["run"]["checkout"]["commit"], head.as_str(), "{report}");
        let time = report["run"]["time"].as_str().expect("a time");
        assert!(
            before.as_str() <= time && time <= after.as_str(),
            "{before} ≤ {time} ≤ {after}"
        );
        let not_tried = report["not_tried"].as_array().expect("not_tried");
        for topic in ["routing", "ARP", "switch MTU", "PFC", "a remote MTU"] {
            assert!(
                not_tried
                    .iter()
                    .any(|item| item.as_str().is_some_and(|item| item.starts_with(topic))),
                "{topic}: {report}"
            );
        }

        // A device the kernel has, without ib_uverbs.
        std::fs::create_dir_all(sysfs.join("class/infiniband/mlx5_0")).expect("make a device");
        let listing = run(&[]);
        let _ = std::fs::remove_dir_all(&sysfs);
        let unloaded = "The ib_uverbs module is not loaded: the kernel has RDMA devices (mlx5_0)";
        assert!(listing.contains(&format!("{enosys}{unloaded}")), "{listing}");
    }

    /// `mlx5_devinfo --dc-selftest --report FILE` on whatever is here (the first device, none on
    /// a host without RDMA): the file is JSON with the versions (this kernel, sideway-ext's, the
    /// libraries as mapped), every step once, and the device's facts as the test reads them.
    /// Without an mlx5 device no step is `ok`: each is skipped with why. On a ConnectX the
    /// outcome matches the exit status, the DC initiator's grant is there, and a fault step that
    /// ran carries its error completion.
    #[test]
    fn mlx5_devinfo_writes_a_dc_selftest_report_that_runs_no_mlx5_step_without_mlx5() {
        let here = Here::read();
        let path = std::env::temp_dir().join(format!("sideway-ext-dc-report-{}.json", std::process::id()));
        let binary = peer::example_binary("mlx5_devinfo", Some("mlx5"));
        let args = peer::strings(&["--dc-selftest", "--report", path.to_str().expect("a UTF-8 path")]);
        let finished = peer::Peer::run("mlx5_devinfo", &binary, &args);
        let text = std::fs::read_to_string(&path);
        let _ = std::fs::remove_file(&path);
        let text = text.unwrap_or_else(|e| panic!("no report at {}: {e}\n{finished}", path.display()));
        let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON: {e}\n{text}"));
        assert!(finished.stderr.contains("report written to"), "{finished}");

        assert_eq!(report["program"], "mlx5_devinfo --dc-selftest");
        assert_eq!(report["sideway_ext"], env!("CARGO_PKG_VERSION"));
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("the kernel release");
        assert_eq!(report["versions"]["kernel"], kernel.trim());
        check_library(&report["versions"]["libibverbs"], "libibverbs.so.");
        check_library(&report["versions"]["libmlx5"], "libmlx5.so.");
        check_rdma_core(&report["versions"]);

        let steps = report["steps"].as_array().expect("steps");
        let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().expect("a name")).collect();
        assert_eq!(names.len(), STEPS.len(), "{names:?}");
        for name in STEPS {
            assert_eq!(
                names.iter().filter(|n| **n == name).count(),
                1,
                "{name} once: {names:?}"
            );
        }
        for step in steps {
            assert!(
                ["ok", "failed", "skipped"].contains(&step["result"].as_str().expect("a result")),
                "{step}"
            );
            assert!(!step["detail"].as_str().expect("a detail").is_empty(), "{step}");
        }
        let code = finished.status.and_then(|status| status.code());
        let every_step_skipped = || {
            for step in steps {
                assert_eq!(step["result"], "skipped", "no mlx5 device, nothing run: {step}");
                assert!(step["fault"].is_null(), "{step}");
            }
            assert!(report["granted"].as_array().expect("granted").is_empty(), "{report}");
            assert!(report["stopped"].is_string(), "{report}");
        };
        match &here.first {
            None => {
                assert_eq!(code, Some(1), "{finished}");
                assert!(report["device"].is_null(), "{report}");
                assert_eq!(report["outcome"], "not run");
                every_step_skipped();
            },
            Some((name, firmware, vendor_id, part_id, is_mlx5)) => {
                let device = &report["device"];
                assert_eq!(device["name"], name.as_str(), "{device}");
                assert_eq!(device["firmware"], firmware.as_str(), "{device}");
                assert_eq!(device["vendor_id"], format!("{vendor_id:#06x}"), "{device}");
                assert_eq!(device["vendor_part_id"], *part_id, "{device}");
                assert_eq!(report["capabilities"]["is_mlx5"], *is_mlx5, "{report}");
                if !is_mlx5 {
                    assert_eq!(code, Some(1), "{finished}");
                    assert_eq!(report["outcome"], "not mlx5");
                    every_step_skipped();
                } else {
                    let outcome = match code {
                        Some(0) => "passed",
                        Some(2) => "failed",
                        _ => panic!("exit status {code:?} on an mlx5 device\n{finished}"),
                    };
                    assert_eq!(report["outcome"], outcome, "{report}");
                    assert!(device["gid"].is_string() && device["gid_index"].is_u64(), "{device}");
                    // The port (1 by default), and the source GID each side was brought up with:
                    // on RoCE the port's RoCE v2 GID the self-test picked, on InfiniBand none.
                    let port = &device["port"];
                    assert_eq!(port["number"], 1, "{device}");
                    assert!(
                        port["state"].is_string()
                            && port["active_mtu"].is_string()
                            && port["grh_required"].is_boolean(),
                        "{device}"
                    );
                    let roce = port["link_layer"] == "Ethernet";
                    let ran = |name: &str| steps.iter().any(|s| s["name"] == name && s["result"] == "ok");
                    for (side, step) in [("target_gid", STEPS[0]), ("initiator_gid", STEPS[1])] {
                        let gid = &device[side];
                        if !ran(step) {
                            continue;
                        }
                        if roce {
                            assert_eq!(gid["index"], device["gid_index"], "{side}: {device}");
                            assert_eq!(gid["type"], "RoCE v2", "{side}: {device}");
                            assert!(
                                gid["netdev"].is_string() && gid["netdev_mtu"].is_u64(),
                                "{side}: {device}"
                            );
                        } else {
                            assert!(gid.is_null(), "{side}: {device}");
                        }
                    }
                    assert!(
                        finished
                            .stdout
                            .contains("not tried: this is a loopback on one port and one GID"),
                        "{finished}"
                    );
                    let granted = &report["granted"][0];
                    assert_eq!(granted["step"], "DC initiator at RTS", "{report}");
                    assert!(granted["max_send_wr"].as_u64().is_some_and(|wr| wr >= 16), "{granted}");
                    for step in steps
                        .iter()
                        .filter(|s| FAULT_STEPS.contains(&s["name"].as_str().unwrap_or("")))
                    {
                        if step["result"] == "ok" {
                            let fault = &step["fault"];
                            assert!(fault["status"].is_string() && fault["status"] != "Success", "{step}");
                            assert!(fault["vendor_err"].is_u64() && fault["elapsed_us"].is_u64(), "{step}");
                        }
                    }
                }
            },
        }
        println!("{text}");
    }
}

/// Every program prints an error with its causes (`source()`), not only its top line: where the
/// device list cannot be read (a host without RDMA, as CI's), the library's cause ("Function not
/// implemented") is in each program's message.
#[test]
fn programs_print_the_whole_error_chain() {
    let err = match sideway::ibverbs::device::DeviceList::new() {
        Ok(_) => {
            println!("skipped: RDMA devices can be listed here, so no program fails on the list");
            return;
        },
        Err(err) => err,
    };
    let cause = std::error::Error::source(&err)
        .expect("sideway's list error has a cause")
        .to_string();
    let programs: [(&str, Option<&str>, &[&str]); 6] = [
        ("list_devices", None, &[]),
        ("srq_pingpong", None, &[]),
        ("async_pingpong", Some("tokio"), &[]),
        ("dc_hello", Some("mlx5"), &[]),
        ("mlx5_devinfo", Some("mlx5"), &["--dc-selftest"]),
        ("dc_pingpong", Some("mlx5,serde"), &[]),
    ];
    for (name, features, args) in programs {
        let output = std::process::Command::new(common::peer::example_binary(name, features))
            .args(args)
            .output()
            .expect("run the example");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{name} succeeded without devices");
        assert!(
            stderr.contains(&format!("{err}: {cause}")),
            "{name} printed {stderr:?}, without the cause {cause:?}"
        );
    }
}
