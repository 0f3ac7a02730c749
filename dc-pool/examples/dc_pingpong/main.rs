//! DC ping-pong and bandwidth: a server with a DC target (DCT) and a client with a DC initiator
//! (DCI), over sideway-ext's DC API, on an NVIDIA/Mellanox ConnectX (mlx5) device.
//!
//! ```text
//! dc_pingpong [OPTIONS]              start a server and wait for a client
//! dc_pingpong [OPTIONS] <server>     connect to the server at <server> and run the test
//!
//! cargo run --release --features mlx5,serde --example dc_pingpong -- -d mlx5_0 -g 3 --bw
//! cargo run --release --features mlx5,serde --example dc_pingpong -- -d mlx5_0 -g 3 --bw <server>
//! ```
//!
//! The server builds a DC target on a shared receive queue (SRQ) and registers a buffer; the
//! client builds a DC initiator. Over TCP the client sends its test parameters, and the server
//! answers with its DC endpoint (`DcEndpoint`: LID, GID, DCT number, DC key), the buffer's rkey
//! and address, as JSON lines. The client turns the endpoint into one address handle and names
//! it, the DCT number and the DC key in every request (`setup_dc_addr`).
//!
//! `--mode` picks the operation: `write` (the client writes into the server's buffer), `send`
//! (the client's messages consume receives from the DCT's SRQ; the server keeps the SRQ from
//! running dry: it arms the SRQ limit, and on the limit event refills it and arms it again) or
//! `read` (the client reads the server's buffer).
//!
//! - Ping-pong (the default): one request at a time, each waited for; every message is checked
//!   (the server checks what was written and sent, the client what it read) and the latency of
//!   each request, from post to completion, is reported.
//! - `--bw`: up to `-t` requests outstanding, one in `-Q` signalled, as perftest's
//!   `ib_write_bw -c DC` does; the client reports message rate and bandwidth in perftest's layout
//!   (MiB/s, or Gb/s with `--report-gbits`) and sends its report to the server, which prints it
//!   too.
//!
//! # Against perftest
//!
//! To compare, perftest's DC tests with the same settings (`-x` is perftest's GID index; both sides
//! take `-c DC`):
//!
//! ```sh
//! ib_write_bw -c DC -d mlx5_0 -x 3 -s 65536 -n 5000 -t 128              # server
//! ib_write_bw -c DC -d mlx5_0 -x 3 -s 65536 -n 5000 -t 128 server-host  # client
//! ```
//!
//! `ib_send_bw -c DC …` and `ib_read_bw -c DC …` (same options; their default `-n` is 1000)
//! compare with `--mode send` and `--mode read`. The defaults follow perftest: 65536-byte messages
//! and 5000 iterations with `--bw`, TX depth 128, one request in 100 signalled (every one above
//! 8 KiB unless `-Q` is given), TCP port 18515; `--report-gbits` (or perftest's spelling
//! `--report_gbits`) reports Gb/s instead of MiB/s. Both measure from the first post to the last
//! completion; the peak is the best rate over spans between signalled completions. Both sides must
//! be given the same `--mode`, `-s`, `-n` and `--bw`. On a device that is not mlx5 (rxe) both sides
//! stop at once with "… not an mlx5 device …" and exit status 1.
//!
//! Many targets and a pool of initiators, DC's point:
//!
//! - `--targets M`: the server builds M DC targets on its one SRQ, each with its own DC key and
//!   (write and read) its own memory region, and sends all M endpoints; the client sends request
//!   `i` to target `i mod M` (round-robin). In send mode the server attributes each receive to
//!   its target by the DCT number of the receive completion.
//! - `--pool N`: the client posts through a `DcInitiatorPool` of N DC initiators on one send CQ
//!   instead of one DC initiator. The pool assigns initiators to targets by `--policy`:
//!   `dedicated` (a target holds an initiator while it has requests outstanding), `quota:Q` (the
//!   same, but at most Q requests per turn while other targets wait), `static` (each target
//!   bound to one shared initiator) or `streams` (each target bound to a DCI stream of an
//!   initiator, 2^`--streams` streams each; ConnectX-6 Dx or newer). With `--bw` the client posts
//!   each target's requests in batches of up to `-Q`, the last of each signalled (under the
//!   dedicated policies a target gives its initiator back only once a completion covers its last
//!   request), and `-t` is each initiator's send queue (the pool creates its send CQ, sized for
//!   the send queues its initiators were granted, at least N·`-t`). Requests the pool hands back
//!   for a retry (another target's error flushed them) are posted again, first.
//!
//! With more than one target or a pool, the report adds a line with the requests completed per
//! target and, with a pool, its Retry and Failed counts; the server checks them against the
//! round-robin split (and, in send mode, against what each of its targets received).
//!
//! Both sides must be given the same `--mode`, `-s`, `-n`, `--bw`, `--targets`, `--pool`,
//! `--policy`, `--streams` and `-m` (the server refuses a client that differs). `-g` (the local GID
//! index) is required on RoCE: use a RoCE v2 GID.
//!
//! Path MTU: each side brings its DC queue pairs up with `-m` (perftest's; no larger than its
//! port's active MTU), by default its port's active MTU, and the server's endpoints say their
//! targets' MTU. The client reads it and stops before any request when the two differ so that
//! the test cannot pass, naming the `-m` to give both sides: a target at a smaller MTU than the
//! client's drops its larger packets; one at a larger MTU answers a READ longer than the
//! client's MTU in packets the client's path drops (a DC target answers at its own MTU: kernel
//! `mlx5_ib_modify_dct` programs the DCT with it). Between a 1500-byte and a 9000-byte Ethernet
//! host, give both `-m 1024`.
//!
//! On a device that is not mlx5 (SoftRoCE's rxe, for one) both sides stop before any network
//! traffic with "<device>: not an mlx5 device …". Exit status: 0 on success, 1 on any failure
//! (2 for invalid command-line options).
//!
//! The program, by role: `args.rs` (the command line and the test's parameters),
//! `connection.rs` (the TCP messages, the buffer, the device and port), `server.rs`,
//! `client.rs` (with `requests.rs`, the posting on one DC initiator or a pool) and `report.rs`
//! (the banner, the results and the server's report).
use std::alloc::Layout;
use std::collections::{HashMap, VecDeque};
use std::error::Error;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, ValueEnum};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sideway::ibverbs::address::Gid;
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::queue_pair::{SendOperationFlags, SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::ibverbs::async_event::{AsyncEventElement, AsyncEventReader, AsyncEventType};
use sideway_ext::ibverbs::extension::{CompletionQueueExt, DeviceContextExt, ProtectionDomainExt};
use sideway_ext::ibverbs::shared_receive_queue::{SharedReceiveQueue, SharedReceiveQueueModification};
use sideway_ext::ibverbs::source_gid::SourceGid;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::{DcInitiator, DcInitiatorBringUp, DciStreams};
use sideway_ext::mlx5::dc::target::DcTarget;
use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
use sideway_ext::mlx5::device_context::Mlx5DeviceContext;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;
use sideway_ext_dc_pool::builder::DcPoolProtectionDomainExt;
use sideway_ext_dc_pool::path_mtus::PathMtus;
use sideway_ext_dc_pool::post_guard::DcPoolPostGuard;
use sideway_ext_dc_pool::types::{
    DcPoolEvent, DcPoolPolicy, DcPoolWouldBlock, DestinationId, PostToDestinationErrorKind,
};
use sideway_ext_dc_pool::DcInitiatorPool;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

mod args;
mod client;
mod connection;
mod report;
mod requests;
mod server;

use args::*;
use client::*;
use connection::*;
use report::*;
use requests::*;
use server::*;

fn main() -> ExitCode {
    let args = Args::parse();
    args.check();
    let parameters = TestParameters::from_args(&args);
    let result = match &args.server {
        Some(server) => run_client(&args, &parameters, server),
        None => run_server(&args, &parameters),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("dc_pingpong: {}", report(&*err));
            ExitCode::FAILURE
        },
    }
}
