//! `examples/dc_pingpong`: its command line (on the host), its refusal of a device that is not
//! mlx5 as server and as client, with one DC initiator and with a pool (on
//! `SIDEWAY_EXT_TEST_DEVICE`, rxe0 in the SoftRoCE VM), and, on the ConnectX of
//! `SIDEWAY_EXT_TEST_MLX5_DEVICE` (`mlx5_hw_` tests), a server and a client on the same port in
//! every mode, ping-pong (data checked) and bandwidth (rates reported), with one DC target and
//! one DC initiator, and with 16 targets and a pool of 4 initiators under every pool policy
//! (requests counted per target by both sides).
//!
//! The example binary is the one cargo builds next to the test binaries
//! (`target/<profile>/examples/dc_pingpong`). Run under cargo (`CARGO` is set), the tests first
//! build it, since `cargo test --test test_dc_pingpong` alone does not; in the VM they use the
//! one `scripts/device-suite` built.
#![cfg(feature = "serde")]
mod common;

use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::peer::{self, strings, Finished, Peer};
use serial_test::serial;

const MODES: [&str; 3] = ["write", "send", "read"];
/// The pool options the device-refusal tests add: none, a pool (dedicated policy), a pool under
/// the streams policy (the device check still comes first).
const POOL_VARIANTS: [&[&str]; 3] = [
    &[],
    &["--pool", "4", "--targets", "8"],
    &["--pool", "4", "--targets", "8", "--policy", "streams"],
];
/// `target/<profile>/examples/dc_pingpong`, built first when cargo runs the test.
fn example_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| peer::example_binary("dc_pingpong", Some("serde")))
}

/// Runs the example with `args` to its end (at most [`peer::TIMEOUT`]).
fn run(role: &'static str, args: &[String]) -> Finished {
    Peer::run(role, example_binary(), args)
}

// ---------------------------------------------------------------------------------------------
// Host: the command line.

#[test]
fn help_lists_every_option() {
    let output = Command::new(example_binary())
        .arg("--help")
        .output()
        .expect("run dc_pingpong --help");
    assert!(output.status.success(), "{output:?}");
    let help = String::from_utf8_lossy(&output.stdout);
    for option in [
        "-d, --ib-dev <IB_DEV>",
        "-i, --ib-port <IB_PORT>",
        "-g, --gid-idx <GID_IDX>",
        "-m, --mtu <MTU>",
        "-s, --size <SIZE>",
        "-n, --iters <ITERS>",
        "--mode <MODE>",
        "write:",
        "send:",
        "read:",
        "-p, --port <PORT>",
        "--bw",
        "-t, --tx-depth <TX_DEPTH>",
        "-Q, --cq-mod <CQ_MOD>",
        "-r, --rx-depth <RX_DEPTH>",
        "-I, --inline-size <INLINE_SIZE>",
        "--report-gbits",
        "--targets <M>",
        "--pool <N>",
        "--policy <POLICY>",
        "dedicated",
        "quota:<Q>",
        "static",
        "streams",
        "--streams <LOG>",
        "[SERVER]",
    ] {
        assert!(help.contains(option), "--help does not list {option:?}:\n{help}");
    }
    // perftest's defaults, so that the two compare.
    assert!(help.contains("[default: 18515]"), "{help}");
    assert!(help.contains("[default: 128]"), "{help}");
    assert!(help.contains("[default: dedicated]"), "{help}");
}

/// Bad values stop at the command line (clap's status 2, naming the option), before any device
/// is opened.
#[test]
fn bad_option_values_are_refused_by_name() {
    for (args, named) in [
        (&["--mode", "atomic"][..], "--mode"),
        (&["-s", "0"][..], "--size"),
        (&["-n", "0"][..], "--iters"),
        (&["-i", "0"][..], "--ib-port"),
        (&["-t", "0"][..], "--tx-depth"),
        (&["-Q", "0"][..], "--cq-mod"),
        (&["-Q", "2000"][..], "--cq-mod"),
        (&["-r", "1"][..], "--rx-depth"),
        (&["-p", "70000"][..], "--port"),
        (&["--pool", "0"][..], "--pool"),
        (&["--pool", "100000"][..], "--pool"),
        (&["--policy", "nope"][..], "--policy"),
        (&["--pool", "4", "--policy", "nope"][..], "--policy"),
        (&["--pool", "4", "--policy", "quota:0"][..], "--policy"),
        (&["--pool", "4", "--policy", "quota:many"][..], "--policy"),
        (&["-m", "1500"][..], "--mtu"),
        (&["-m", "9000"][..], "--mtu"),
        (&["--targets", "0"][..], "--targets"),
        (&["--targets", "100000"][..], "--targets"),
        // A policy without a pool, streams without the streams policy.
        (&["--policy", "static"][..], "--pool"),
        (&["--pool", "4", "--streams", "2"][..], "--streams"),
        (
            &["--pool", "4", "--policy", "streams", "--streams", "99"][..],
            "--streams",
        ),
    ] {
        let output = Command::new(example_binary())
            .args(args)
            .output()
            .expect("run dc_pingpong");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(named),
            "{args:?}: the error does not name {named}: {stderr}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// SoftRoCE (a device that is not mlx5).

/// The test device's name and GID index, checked not to be mlx5.
fn non_mlx5_device() -> (String, u8) {
    let ctx = common::open_test_device();
    common::require_not_mellanox(&ctx);
    let (gid_index, _) = common::local_gid(&ctx);
    (std::env::var(common::DEVICE_VARIABLE).expect("checked"), gid_index)
}

fn check_not_mlx5(peer: &Finished, device: &str) {
    assert!(peer.failed_cleanly(), "expected exit status 1\n{peer}");
    let message = format!("{device}: not an mlx5 device");
    assert!(peer.stderr.contains(&message), "stderr lacks {message:?}\n{peer}");
    // Stopped before any test output (the banner comes once the DC queue pair exists).
    assert!(!peer.stdout.contains("address"), "{peer}");
}

/// As server, in every mode and also with --bw, with one target and with `--pool 4 --targets 8`:
/// status 1 and the plain message, before it listens. The test holds the port meanwhile: a server
/// that bound it before checking the device would fail with another message.
#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn server_on_a_device_that_is_not_mlx5_says_so() {
    let (device, gid_index) = non_mlx5_device();
    let occupied = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("bind a port to hold");
    let port = occupied.local_addr().expect("local_addr").port();
    for mode in MODES {
        for bw in [false, true] {
            for pool in POOL_VARIANTS {
                let mut args = strings(&["-d", &device, "-g", &gid_index.to_string(), "-p", &port.to_string()]);
                args.extend(strings(&["--mode", mode]));
                if bw {
                    args.push("--bw".into());
                }
                args.extend(strings(pool));
                let server = run("server", &args);
                check_not_mlx5(&server, &device);
            }
        }
    }
}

/// As client, in every mode and also with --bw, with one DC initiator and with
/// `--pool 4 --targets 8` (also under the streams policy): status 1 and the plain message, and
/// no connection to the server: it checks the device first.
#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn client_on_a_device_that_is_not_mlx5_says_so_before_connecting() {
    let (device, gid_index) = non_mlx5_device();
    // A server stand-in that only records connections.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    let port = listener.local_addr().expect("local_addr").port();
    for mode in MODES {
        for bw in [false, true] {
            for pool in POOL_VARIANTS {
                let mut args = strings(&["-d", &device, "-g", &gid_index.to_string(), "-p", &port.to_string()]);
                args.extend(strings(&["--mode", mode]));
                if bw {
                    args.push("--bw".into());
                }
                args.extend(strings(pool));
                args.push("127.0.0.1".into());
                let client = run("client", &args);
                check_not_mlx5(&client, &device);
                match listener.accept() {
                    Err(err) if err.kind() == ErrorKind::WouldBlock => {},
                    Ok((_, from)) => {
                        panic!("{mode} {pool:?}: the client connected from {from} before checking the device\n{client}")
                    },
                    Err(err) => panic!("accept: {err}"),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ConnectX hardware: server and client on the same port.

/// Runs a server, then once it listens a client on 127.0.0.1, both with the common options and
/// `extra`, plus `client_extra` for the client alone; returns both outcomes (server first).
fn run_pair(port: u16, extra: &[&str], client_extra: &[&str]) -> (Finished, Finished) {
    let (ctx, device) = common::open_mlx5_test_device_named();
    let (gid_index, _) = common::local_gid(&ctx);
    drop(ctx);
    let mut args = strings(&["-d", &device, "-g", &gid_index.to_string(), "-p", &port.to_string()]);
    args.extend(strings(extra));
    let mut client_args = args.clone();
    client_args.extend(strings(client_extra));
    client_args.push("127.0.0.1".into());
    peer::run_pair(example_binary(), &args, example_binary(), &client_args, port)
}

/// The numbers of the line under the result header that starts with `header`.
fn result_row(peer: &Finished, header: &str) -> Vec<f64> {
    let mut lines = peer.stdout.lines();
    lines
        .find(|line| line.starts_with(header))
        .unwrap_or_else(|| panic!("no {header:?} header\n{peer}"));
    let row = lines
        .next()
        .unwrap_or_else(|| panic!("nothing under {header:?}\n{peer}"));
    row.split_whitespace()
        .map(|word| {
            word.parse()
                .unwrap_or_else(|_| panic!("bad number {word:?} in {row:?}\n{peer}"))
        })
        .collect()
}

/// `(bytes, iterations, peak MiB/s, average MiB/s, Mpps)` of a bandwidth report.
fn bandwidth_row(peer: &Finished) -> [f64; 5] {
    let row = result_row(
        peer,
        " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]",
    );
    row.try_into()
        .unwrap_or_else(|row| panic!("expected 5 numbers, got {row:?}\n{peer}"))
}

fn check_bandwidth(server: &Finished, client: &Finished, size: u32, iters: u32) {
    for peer in [server, client] {
        assert!(peer.succeeded(), "the {} failed\n{server}\n{client}", peer.role);
        let [bytes, iterations, peak, average, mpps] = bandwidth_row(peer);
        assert_eq!((bytes, iterations), (f64::from(size), f64::from(iters)), "{peer}");
        assert!(peak > 0.0 && average > 0.0 && mpps > 0.0, "{peer}");
        assert!(peak >= average * 0.99, "peak below the average\n{peer}");
        // The two rates describe the same run: MiB/s = Mpps · 10^6 · bytes / 2^20.
        let from_rate = mpps * 1e6 * bytes / f64::from(1u32 << 20);
        assert!(
            (from_rate - average).abs() <= average * 0.01 + 0.01,
            "{from_rate} MiB/s from the message rate, {average} reported\n{peer}"
        );
    }
    // The server prints the client's report, as perftest's server does.
    assert_eq!(bandwidth_row(server), bandwidth_row(client));
    assert!(server.stdout.contains(" server check: ok: "), "{server}");
    assert!(client.stdout.contains(" server check: ok: "), "{client}");
}

/// Both succeeded and printed the client's latency row, `(bytes, iterations, min, max, typical,
/// average, stdev, 99%, 99.9%)`, for `iters` requests of `size` bytes; both checks passed.
fn check_latency(server: &Finished, client: &Finished, size: u32, iters: u32) {
    for peer in [server, client] {
        assert!(peer.succeeded(), "the {} failed\n{server}\n{client}", peer.role);
        let row = result_row(peer, " #bytes #iterations    t_min[usec]");
        assert_eq!(row.len(), 9, "{peer}");
        assert_eq!((row[0], row[1]), (f64::from(size), f64::from(iters)), "{peer}");
        let (min, max, typical, average) = (row[2], row[3], row[4], row[5]);
        assert!(
            min > 0.0 && min <= typical && typical <= max && min <= average && average <= max,
            "{peer}"
        );
    }
    let header = " #bytes #iterations    t_min[usec]";
    assert_eq!(result_row(server, header), result_row(client, header));
    assert!(client.stdout.contains(" client check: ok: "), "{client}");
    assert!(server.stdout.contains(" server check: ok: "), "{server}");
}

/// The send-mode server's account: received and checked every message and refilled its SRQ on
/// the limit event (at least once, since more messages came than it holds); with
/// `every_refill_on_an_event`, it never had to refill without one (ping-pong: one message at a
/// time leaves the event all the time it needs; at full rate the safety net may step in).
fn check_send_server(server: &Finished, iters: u32, every_refill_on_an_event: bool) {
    let line = server
        .stdout
        .lines()
        .find(|line| line.starts_with(" server check: ok: "))
        .unwrap_or_else(|| panic!("no server check\n{server}"));
    assert!(line.contains(&format!(": {iters} messages received")), "{line}");
    let count = |what: &str| -> u64 {
        line.split(what)
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {what:?} in {line:?}"))
    };
    assert!(count("SRQ limit events ") >= 1, "{line}");
    assert!(count("receives reposted ") >= 1, "{line}");
    if every_refill_on_an_event {
        assert_eq!(count("refills without an event "), 0, "{line}");
    }
}

const PINGPONG_SIZE: u32 = 4096;
/// More than the SRQ's 512 receives, so that send mode must refill it.
const PINGPONG_ITERS: u32 = 2000;
const BW_SIZE: u32 = 65536;
const BW_ITERS: u32 = 5000;
const BW_SMALL_SIZE: u32 = 64;
const BW_SMALL_ITERS: u32 = 100_000;

fn pingpong(mode: &str, port: u16) {
    let (size, iters) = (PINGPONG_SIZE.to_string(), PINGPONG_ITERS.to_string());
    let (server, client) = run_pair(port, &["--mode", mode, "-s", &size, "-n", &iters], &[]);
    check_latency(&server, &client, PINGPONG_SIZE, PINGPONG_ITERS);
    if mode == "send" {
        assert!(server.stdout.contains("received and checked, in order"), "{server}");
        check_send_server(&server, PINGPONG_ITERS, true);
    }
    if mode == "write" {
        assert!(server.stdout.contains("slots hold the data"), "{server}");
    }
    if mode == "read" {
        assert!(client.stdout.contains("each read checked"), "{client}");
    }
    println!("{server}\n{client}");
}

fn bandwidth(mode: &str, port: u16, size: u32, iters: u32) {
    let (size_arg, iters_arg) = (size.to_string(), iters.to_string());
    let (server, client) = run_pair(
        port,
        &["--mode", mode, "--bw", "-s", &size_arg, "-n", &iters_arg],
        &["-t", "128"],
    );
    check_bandwidth(&server, &client, size, iters);
    if mode == "send" {
        check_send_server(&server, iters, false);
    }
    println!("{server}\n{client}");
}

#[test]
#[serial]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
fn mlx5_hw_dc_pingpong_write() {
    pingpong("write", 18721);
}

#[test]
#[serial]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
fn mlx5_hw_dc_pingpong_send() {
    pingpong("send", 18722);
}

#[test]
#[serial]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
fn mlx5_hw_dc_pingpong_read() {
    pingpong("read", 18723);
}

#[test]
#[serial]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
fn mlx5_hw_dc_bandwidth_write() {
    bandwidth("write", 18724, BW_SIZE, BW_ITERS);
    bandwidth("write", 18725, BW_SMALL_SIZE, BW_SMALL_ITERS);
}

#[test]
#[serial]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
fn mlx5_hw_dc_bandwidth_send() {
    bandwidth("send", 18726, BW_SIZE, BW_ITERS);
    bandwidth("send", 18727, BW_SMALL_SIZE, BW_SMALL_ITERS);
}

#[test]
#[serial]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
fn mlx5_hw_dc_bandwidth_read() {
    bandwidth("read", 18728, BW_SIZE, BW_ITERS);
    bandwidth("read", 18729, BW_SMALL_SIZE, BW_SMALL_ITERS);
}

/// A client whose parameters differ (its message size; its pool's policy) is refused by name,
/// and both sides fail.
#[test]
#[serial]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
fn mlx5_hw_dc_pingpong_refuses_a_client_with_other_parameters() {
    for (port, common, client_only) in [
        (18730, &["--mode", "write", "-n", "100"][..], &["-s", "128"][..]),
        (
            18731,
            &["--mode", "write", "-n", "100", "--pool", "4", "--targets", "16"][..],
            &["--policy", "static"][..],
        ),
    ] {
        let (server, client) = run_pair(port, common, client_only);
        assert!(server.failed_cleanly() && client.failed_cleanly(), "{server}\n{client}");
        assert!(server.stderr.contains("differ from the server's"), "{server}");
        assert!(client.stderr.contains("the server refused"), "{client}");
    }
}

// ---------------------------------------------------------------------------------------------
// ConnectX hardware: 16 DC targets, a pool of 4 DC initiators, every policy.

const POOL_INITIATORS: &str = "4";
const POOL_TARGETS: u32 = 16;
const POOL_BW_SIZE: u32 = 4096;
const POOL_BW_ITERS: u32 = 20_000;

/// How many of `iters` requests, sent round-robin over `targets`, go to each.
fn round_robin(iters: u32, targets: u32) -> Vec<u64> {
    (0..targets)
        .map(|target| u64::from(iters / targets + u32::from(target < iters % targets)))
        .collect()
}

/// The numbers in `text`, separated by spaces.
fn numbers(text: &str, peer: &Finished) -> Vec<u64> {
    text.split_whitespace()
        .map(|word| {
            word.parse()
                .unwrap_or_else(|_| panic!("bad number {word:?} in {text:?}\n{peer}"))
        })
        .collect()
}

/// The number after `what` in `text`.
fn number_after(text: &str, what: &str, peer: &Finished) -> u64 {
    text.split(what)
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {what:?} in {text:?}\n{peer}"))
}

/// Both peers print the client's per-destination line: each target completed its round-robin
/// share, and the pool handed nothing back and failed nothing.
fn check_destinations(server: &Finished, client: &Finished, iters: u32) {
    let expected = round_robin(iters, POOL_TARGETS);
    for peer in [server, client] {
        let line = peer
            .stdout
            .lines()
            .find_map(|line| line.strip_prefix(" completed per destination:"))
            .unwrap_or_else(|| panic!("no per-destination line\n{peer}"));
        let (counts, pool) = line
            .split_once(';')
            .unwrap_or_else(|| panic!("no pool counts in {line:?}\n{peer}"));
        assert_eq!(numbers(counts, peer), expected, "{peer}");
        assert_eq!(number_after(pool, "Retry ", peer), 0, "{peer}");
        assert_eq!(number_after(pool, "Failed ", peer), 0, "{peer}");
    }
}

/// The send-mode server's own count of what each DC target received (by DCT number): the
/// round-robin share.
fn check_received_per_target(server: &Finished, iters: u32) {
    let line = server
        .stdout
        .lines()
        .find(|line| line.starts_with(" server check: ok: "))
        .unwrap_or_else(|| panic!("no server check\n{server}"));
    let (_, counts) = line
        .split_once("per DC target (by DCT number): ")
        .unwrap_or_else(|| panic!("no per-target receive counts in {line:?}\n{server}"));
    assert_eq!(numbers(counts, server), round_robin(iters, POOL_TARGETS), "{server}");
}

/// Ping-pong in every mode and bandwidth in write and send mode through a pool of 4 DC
/// initiators under `policy`, over 16 DC targets, on ports from `first_port`.
fn pool_suite(policy: &str, first_port: u16) {
    let targets = POOL_TARGETS.to_string();
    let pool = ["--pool", POOL_INITIATORS, "--targets", &targets, "--policy", policy];
    let mut port = first_port;
    for mode in MODES {
        let (size, iters) = (PINGPONG_SIZE.to_string(), PINGPONG_ITERS.to_string());
        let mut args = vec!["--mode", mode, "-s", &size, "-n", &iters];
        args.extend(pool);
        let (server, client) = run_pair(port, &args, &[]);
        port += 1;
        check_latency(&server, &client, PINGPONG_SIZE, PINGPONG_ITERS);
        check_destinations(&server, &client, PINGPONG_ITERS);
        match mode {
            "send" => {
                assert!(server.stdout.contains("received and checked, in order"), "{server}");
                check_send_server(&server, PINGPONG_ITERS, true);
                check_received_per_target(&server, PINGPONG_ITERS);
            },
            "write" => assert!(
                server.stdout.contains("slots hold the data") && server.stdout.contains("(16 DC targets)"),
                "{server}"
            ),
            _ => assert!(client.stdout.contains("each read checked"), "{client}"),
        }
        println!("{server}\n{client}");
    }
    for mode in ["write", "send"] {
        let (size, iters) = (POOL_BW_SIZE.to_string(), POOL_BW_ITERS.to_string());
        let mut args = vec!["--mode", mode, "--bw", "-s", &size, "-n", &iters];
        args.extend(pool);
        let (server, client) = run_pair(port, &args, &["-t", "128"]);
        port += 1;
        check_bandwidth(&server, &client, POOL_BW_SIZE, POOL_BW_ITERS);
        check_destinations(&server, &client, POOL_BW_ITERS);
        if mode == "send" {
            check_send_server(&server, POOL_BW_ITERS, false);
            check_received_per_target(&server, POOL_BW_ITERS);
        }
        println!("{server}\n{client}");
    }
}

#[test]
#[serial]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
fn mlx5_hw_dc_pool_dedicated() {
    pool_suite("dedicated", 18740);
}

#[test]
#[serial]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
fn mlx5_hw_dc_pool_quota() {
    pool_suite("quota:8", 18750);
}

#[test]
#[serial]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
fn mlx5_hw_dc_pool_static() {
    pool_suite("static", 18760);
}

/// Needs a ConnectX with DCI streams (ConnectX-6 Dx or newer): on one without, it is skipped at
/// once, with the reason (`common::skip`).
#[test]
#[serial]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX with DCI streams"]
fn mlx5_hw_dci_pool_streams_pingpong() {
    let (ctx, _) = common::open_mlx5_test_device_named();
    if common::require_dci_streams(&ctx, (1, 0)).is_none() {
        return;
    }
    pool_suite("streams", 18770);
}
