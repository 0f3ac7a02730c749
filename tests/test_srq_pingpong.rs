//! Interoperability of `examples/srq_pingpong` with rdma-core's `ibv_srq_pingpong`: the Rust
//! client against the C server, the C client against the Rust server, and Rust against Rust, also
//! with `-e` (sleeping on completion events); each pair on the device named by
//! `SIDEWAY_EXT_TEST_DEVICE` over its RoCE v2 GID, with the TCP exchange on 127.0.0.1.
//!
//! The example binary is the one cargo builds next to the test binaries
//! (`target/debug/examples/srq_pingpong`); the C tool is Debian's `/usr/bin/ibv_srq_pingpong`.
mod common;

use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

use common::peer::{self, Finished};
use serial_test::serial;
use sideway::ibverbs::address::GidType;

/// rdma-core's tool, from Debian's ibverbs-utils.
const C_TOOL: &str = "/usr/bin/ibv_srq_pingpong";
const NUM_QP: usize = 16;
const ITERS: u64 = 2000;
const SIZE: u64 = 4096;

/// `target/<profile>/examples/srq_pingpong` (`cargo test` builds it with the tests).
fn example_binary() -> PathBuf {
    peer::example_binary("srq_pingpong", None)
}

fn c_tool_path() -> &'static Path {
    Path::new(C_TOOL)
}

fn c_tool() -> PathBuf {
    let path = PathBuf::from(C_TOOL);
    assert!(path.is_file(), "{C_TOOL} is missing: install ibverbs-utils");
    path
}

/// The test device's name (the variable is checked by `open_test_device`).
fn device_name() -> String {
    std::env::var(common::DEVICE_VARIABLE).unwrap_or_default()
}

/// The index of port 1's RoCE v2 GID that carries an IPv4 address (1 on SoftRoCE's rxe0), or 1
/// when the table has none.
fn roce_v2_ipv4_gid_index() -> u32 {
    let ctx = common::open_test_device();
    let table = ctx.query_gid_table().expect("query_gid_table");
    table
        .iter()
        .find(|entry| {
            entry.port_num() == 1
                && entry.gid_type() == GidType::RoceV2
                && Ipv6Addr::from(entry.gid()).to_ipv4_mapped().is_some()
        })
        .map_or(1, |entry| entry.gid_index())
}

/// Runs `server` then, once it listens, `client` against it on 127.0.0.1, both with `extra`
/// arguments besides the common ones; returns both outcomes (server first).
fn run_pair(server: &Path, client: &Path, port: u16, extra: &[&str]) -> (Finished, Finished) {
    let gid_index = roce_v2_ipv4_gid_index();
    let args: Vec<String> = [
        "-d",
        &device_name(),
        "-g",
        &gid_index.to_string(),
        "-p",
        &port.to_string(),
        "-q",
        &NUM_QP.to_string(),
        "-n",
        &ITERS.to_string(),
        "-s",
        &SIZE.to_string(),
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    // The example prints the queue-pair addresses that check_pair compares with -v (the C tool
    // always does, and has no -v).
    let for_program = |program: &Path, mut args: Vec<String>| {
        if program != c_tool_path() {
            args.push("-v".to_string());
        }
        args
    };
    let mut client_args = for_program(client, args.clone());
    client_args.push("127.0.0.1".to_string());
    peer::run_pair(server, &for_program(server, args), client, &client_args, port)
}

/// The numbers of the summary lines: `(bytes, Mbit/s)` from "<bytes> bytes in <secs> seconds =
/// <Mbit/s> Mbit/sec" and `(iters, usec/iter)` from "<iters> iters in <secs> seconds =
/// <usec/iter> usec/iter".
fn summary(peer: &Finished) -> ((u64, f64), (u64, f64)) {
    let parse = |unit: &str, what: &str| {
        let line = peer
            .stdout
            .lines()
            .find(|line| line.ends_with(unit) && line.contains(what))
            .unwrap_or_else(|| panic!("no \"… {what} … {unit}\" line\n{peer}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        // <count> <what> in <secs> seconds = <rate> <unit>
        assert_eq!(words.len(), 8, "unexpected summary line {line:?}\n{peer}");
        assert_eq!(
            (words[1], words[2], words[4], words[5]),
            (what, "in", "seconds", "="),
            "{line:?}"
        );
        let count: u64 = words[0].parse().unwrap_or_else(|_| panic!("bad count in {line:?}"));
        let _secs: f64 = words[3].parse().unwrap_or_else(|_| panic!("bad seconds in {line:?}"));
        let rate: f64 = words[6].parse().unwrap_or_else(|_| panic!("bad rate in {line:?}"));
        (count, rate)
    };
    (parse("Mbit/sec", "bytes"), parse("usec/iter", "iters"))
}

/// The QPNs of the "local address:" or "remote address:" lines, in order.
fn qpns(peer: &Finished, which: &str) -> Vec<u32> {
    peer.stdout
        .lines()
        .filter(|line| line.trim_start().starts_with(which))
        .map(|line| {
            let qpn = line
                .split("QPN 0x")
                .nth(1)
                .and_then(|rest| rest.split(',').next())
                .unwrap_or_else(|| panic!("no QPN in {line:?}"));
            u32::from_str_radix(qpn, 16).unwrap_or_else(|_| panic!("bad QPN in {line:?}"))
        })
        .collect()
}

/// Both peers succeeded, printed both summary lines for 2000 iterations of 4096 bytes, and each
/// connected its 16 queue pairs to the other's 16, in order.
fn check_pair(server: &Finished, client: &Finished) {
    for peer in [server, client] {
        assert!(peer.succeeded(), "the {} failed\n{server}\n{client}", peer.role);
        let ((bytes, mbit), (iters, usec)) = summary(peer);
        assert_eq!(bytes, SIZE * ITERS * 2, "{peer}");
        assert_eq!(iters, ITERS, "{peer}");
        assert!(mbit > 0.0 && usec > 0.0, "{peer}");
        assert_eq!(qpns(peer, "local address:").len(), NUM_QP, "{peer}");
    }
    assert_eq!(qpns(server, "local address:"), qpns(client, "remote address:"));
    assert_eq!(qpns(client, "local address:"), qpns(server, "remote address:"));
}

#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn rust_client_against_c_server() {
    let (server, client) = run_pair(&c_tool(), &example_binary(), 18611, &[]);
    check_pair(&server, &client);
    println!("{client}");
}

#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn c_client_against_rust_server() {
    let (server, client) = run_pair(&example_binary(), &c_tool(), 18612, &[]);
    check_pair(&server, &client);
    println!("{server}");
}

#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn rust_client_against_rust_server() {
    let (server, client) = run_pair(&example_binary(), &example_binary(), 18613, &[]);
    check_pair(&server, &client);
    // Busy polling: no events.
    assert_eq!(completion_events(&server), None, "{server}");
    assert_eq!(completion_events(&client), None, "{client}");
    println!("{server}\n{client}");
}

/// How many completion events the example (not the C tool) says it waited for, from its
/// "<n> completion events" line, printed with `-e` only.
fn completion_events(peer: &Finished) -> Option<u64> {
    let line = peer.stdout.lines().find(|line| line.ends_with(" completion events"))?;
    let count = line.split_whitespace().next().expect("a word");
    Some(
        count
            .parse()
            .unwrap_or_else(|_| panic!("bad count in {line:?}\n{peer}")),
    )
}

/// The example peer took the events path: it says it waited for completion events, at least one.
fn check_events(peer: &Finished) {
    let events = completion_events(peer).unwrap_or_else(|| panic!("no completion events line\n{peer}"));
    assert!(events >= 1, "{events} completion events\n{peer}");
}

/// `-e`: both peers sleep on completion events (the example through sideway-ext's completion
/// channel API) instead of busy polling.
#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn rust_client_against_rust_server_with_events() {
    let (server, client) = run_pair(&example_binary(), &example_binary(), 18614, &["-e"]);
    check_pair(&server, &client);
    check_events(&server);
    check_events(&client);
    println!("{server}\n{client}");
}

/// `-e` against the C tool, also in event mode.
#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn rust_client_against_c_server_with_events() {
    let (server, client) = run_pair(&c_tool(), &example_binary(), 18615, &["-e"]);
    check_pair(&server, &client);
    check_events(&client);
    println!("{client}");
}
