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
//!   request), and `-t` is each initiator's send queue (at most N·`-t` requests are in flight in
//!   all, what the one send CQ holds). Requests the pool hands back for a retry (another
//!   target's error flushed them) are posted again, first.
//!
//! With more than one target or a pool, the report adds a line with the requests completed per
//! target and, with a pool, its Retry and Failed counts; the server checks them against the
//! round-robin split (and, in send mode, against what each of its targets received).
//!
//! Both sides must be given the same `--mode`, `-s`, `-n`, `--bw`, `--targets`, `--pool`,
//! `--policy` and `--streams` (the server refuses a client that differs). `-g` (the local GID
//! index) is required on RoCE: use a RoCE v2 GID.
//!
//! On a device that is not mlx5 (SoftRoCE's rxe, for one) both sides stop before any network
//! traffic with "<device>: not an mlx5 device …". Exit status: 0 on success, 1 on any failure
//! (2 for invalid command-line options).
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
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc_endpoint::DcEndpoint;
use sideway_ext::mlx5::dc_initiator::{DcInitiator, DcInitiatorBringUp, DciStreams};
use sideway_ext::mlx5::dc_initiator_pool::{
    DcInitiatorPool, DcPoolEvent, DcPoolPolicy, DcPoolPostGuard, DcPoolWouldBlock, DestinationId, PoolAddressing,
    PostToDestinationErrorKind,
};
use sideway_ext::mlx5::dc_target::{DcTarget, DcTargetBringUp};
use sideway_ext::mlx5::device_context::Mlx5DeviceContext;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

/// perftest's defaults, so that the two compare with the same options.
const DEFAULT_BW_SIZE: u32 = 65536;
const DEFAULT_BW_ITERS: u32 = 5000;
const DEFAULT_CQ_MOD: u32 = 100;
/// Above this message size perftest signals every request unless `-Q` is given.
const CQ_MOD_SIZE_LIMIT: u32 = 8192;
/// Ping-pong defaults.
const DEFAULT_PINGPONG_SIZE: u32 = 64;
const DEFAULT_PINGPONG_ITERS: u32 = 1000;
/// The largest message: DC messages are at most 2 GiB; 1 GiB keeps buffers reasonable.
const MAX_SIZE: u32 = 1 << 30;
/// The largest registered memory either side allocates (the server's regions together).
const MAX_BUFFER: u64 = 16 << 30;
/// Server buffer slots per target in ping-pong write and read: the `j`-th request to a target
/// uses its slot `j % slots`.
const PINGPONG_SLOTS: u32 = 16;
/// The most DC targets (`--targets`) and pool initiators (`--pool`) this example creates.
const MAX_TARGETS: u32 = 1024;
const MAX_POOL: u32 = 1024;
/// The largest `--streams` (log2 of the DCI streams per initiator) accepted on the command line;
/// the device's own limit is checked when the pool is built.
const MAX_STREAMS_LOG: u8 = 15;
/// DCI streams per initiator without `--streams` (2^2 = 4), or the device's maximum if lower.
const DEFAULT_STREAMS_LOG: u8 = 2;
/// No completion for this long: the peer is gone, or the DC path does not work.
const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest JSON line accepted from the peer.
const MAX_MESSAGE: u64 = 1 << 20;
/// Peak bandwidth is computed over every pair of signalled windows up to this many windows
/// (perftest stops computing it past 20000 iterations too); past it the peak reads 0.
const MAX_PEAK_WINDOWS: usize = 20_000;
/// Completions polled at a time.
const POLL_BATCH: usize = 32;
/// Addresses listed on one line (QP numbers) or in the banner (targets) before "…".
const LISTED: usize = 8;
const RESULT_LINE: &str = "---------------------------------------------------------------------------------------";
/// How the report's per-destination line starts.
const DESTINATION_LINE: &str = " completed per destination:";

/// What the client does to the server's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    /// RDMA WRITE into the server's buffer
    Write,
    /// SEND, consuming receives from the server's SRQ
    Send,
    /// RDMA READ from the server's buffer
    Read,
}

impl Mode {
    /// perftest's name of the verb.
    fn verb(self) -> &'static str {
        match self {
            Mode::Write => "RDMA_Write",
            Mode::Send => "Send",
            Mode::Read => "RDMA_Read",
        }
    }

    /// The one operation the DC initiators are created with.
    fn send_ops(self) -> SendOperationFlags {
        match self {
            Mode::Write => SendOperationFlags::Write,
            Mode::Send => SendOperationFlags::Send,
            Mode::Read => SendOperationFlags::Read,
        }
    }
}

/// How the client's pool assigns its DC initiators to the DC targets (`--policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum PoolPolicy {
    Dedicated,
    Quota(u32),
    Static,
    Streams,
}

impl PoolPolicy {
    fn to_pool(self) -> DcPoolPolicy {
        match self {
            PoolPolicy::Dedicated => DcPoolPolicy::Dedicated,
            PoolPolicy::Quota(quota) => DcPoolPolicy::DedicatedWithQuota { quota },
            PoolPolicy::Static => DcPoolPolicy::Static,
            PoolPolicy::Streams => DcPoolPolicy::Streams,
        }
    }
}

impl fmt::Display for PoolPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolPolicy::Dedicated => f.write_str("dedicated"),
            PoolPolicy::Quota(quota) => write!(f, "quota:{quota}"),
            PoolPolicy::Static => f.write_str("static"),
            PoolPolicy::Streams => f.write_str("streams"),
        }
    }
}

/// `--policy`: `dedicated`, `quota:<Q>` (Q ≥ 1), `static` or `streams`.
fn parse_policy(text: &str) -> Result<PoolPolicy, String> {
    match text {
        "dedicated" => Ok(PoolPolicy::Dedicated),
        "static" => Ok(PoolPolicy::Static),
        "streams" => Ok(PoolPolicy::Streams),
        _ => match text.strip_prefix("quota:") {
            Some(quota) => match quota.parse::<u32>() {
                Ok(quota) if quota >= 1 => Ok(PoolPolicy::Quota(quota)),
                _ => Err(format!(
                    "the Q of quota:<Q> is a number of requests, at least 1, not {quota:?}"
                )),
            },
            None => Err("expected dedicated, quota:<Q>, static or streams".to_string()),
        },
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "dc_pingpong",
    about = "Ping-pong and bandwidth over DC (Dynamically Connected transport) on an mlx5 device: \
             a server with DC targets, a client with a DC initiator or a pool of them"
)]
struct Args {
    /// Listen on / connect to TCP port <PORT>
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Use IB device <IB_DEV> (default: the first device found)
    #[arg(short = 'd', long)]
    ib_dev: Option<String>,
    /// Use port <IB_PORT> of the IB device
    #[arg(short = 'i', long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..))]
    ib_port: u8,
    /// Local port GID index (required on RoCE: a RoCE v2 GID)
    #[arg(short = 'g', long)]
    gid_idx: Option<u8>,
    /// Size of a message in bytes (default: 65536 with --bw, 64 otherwise)
    #[arg(short = 's', long, value_parser = clap::value_parser!(u32).range(1..=MAX_SIZE as i64))]
    size: Option<u32>,
    /// Number of requests (default: 5000 with --bw, 1000 otherwise)
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u32).range(1..))]
    iters: Option<u32>,
    /// The operation: write into, send to, or read from the server
    #[arg(long, value_enum, default_value_t = Mode::Write)]
    mode: Mode,
    /// Measure bandwidth and message rate (perftest style) instead of ping-pong latency
    #[arg(long)]
    bw: bool,
    /// With --bw: requests outstanding at a time (the send queue of the DC initiator; with --pool,
    /// of each initiator, and N times it in all)
    #[arg(short = 't', long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=8192))]
    tx_depth: u32,
    /// With --bw: signal one request in <CQ_MOD> (default 100, 1 above 8192-byte messages; at
    /// most --tx-depth); with --pool, each target's requests go in batches of up to <CQ_MOD>,
    /// the last of each signalled
    #[arg(short = 'Q', long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    cq_mod: Option<u32>,
    /// Server, send mode: receives posted on the SRQ (refilled on its limit event, armed at half)
    #[arg(short = 'r', long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(2..=65536))]
    rx_depth: u32,
    /// Largest message sent inline (write and send; 0: never inline)
    #[arg(short = 'I', long, default_value_t = 150, value_parser = clap::value_parser!(u32).range(0..=1024))]
    inline_size: u32,
    /// Report bandwidth in Gb/s (10^9 bits) instead of MiB/s
    #[arg(long, alias = "report_gbits")]
    report_gbits: bool,
    /// The server's DC targets, on one SRQ, each with its own DC key and memory region; the
    /// client sends request i to target i mod M (give both sides the same)
    #[arg(long, value_name = "M", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_TARGETS as i64))]
    targets: u32,
    /// Post through a pool of <N> DC initiators (DcInitiatorPool) instead of one DC initiator
    /// (give both sides the same)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=MAX_POOL as i64))]
    pool: Option<u32>,
    /// With --pool: how initiators are assigned to targets: dedicated (one per target while it
    /// has requests outstanding), quota:<Q> (dedicated, at most Q requests per turn while other
    /// targets wait), static (each target bound to one shared initiator) or streams (each target
    /// bound to a DCI stream; ConnectX-6 Dx or newer)
    #[arg(long, value_name = "POLICY", default_value = "dedicated", value_parser = parse_policy, requires = "pool")]
    policy: PoolPolicy,
    /// With --policy streams: 2^<LOG> DCI streams per initiator (default 2, or the device's
    /// maximum if lower)
    #[arg(long, value_name = "LOG", value_parser = clap::value_parser!(u8).range(0..=MAX_STREAMS_LOG as i64))]
    streams: Option<u8>,
    /// Connect to the server at <SERVER>; without it, act as the server
    server: Option<String>,
}

impl Args {
    /// What clap cannot check alone; exits with clap's status 2, naming the option.
    fn check(&self) {
        if self.streams.is_some() && self.policy != PoolPolicy::Streams {
            Args::command()
                .error(
                    ErrorKind::ArgumentConflict,
                    format!(
                        "--streams <LOG> is for --policy streams only (the policy is {})",
                        self.policy
                    ),
                )
                .exit();
        }
    }
}

/// The client's pool, when it uses one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct PoolParameters {
    initiators: u32,
    policy: PoolPolicy,
    /// `--streams` as given (the default depends on the device).
    streams: Option<u8>,
}

/// The parameters both sides must agree on; the client sends its own, the server compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct TestParameters {
    mode: Mode,
    size: u32,
    iters: u32,
    bw: bool,
    targets: u32,
    pool: Option<PoolParameters>,
}

impl TestParameters {
    fn from_args(args: &Args) -> Self {
        let size = args.size.unwrap_or(if args.bw {
            DEFAULT_BW_SIZE
        } else {
            DEFAULT_PINGPONG_SIZE
        });
        let iters = args.iters.unwrap_or(if args.bw {
            DEFAULT_BW_ITERS
        } else {
            DEFAULT_PINGPONG_ITERS
        });
        Self {
            mode: args.mode,
            size,
            iters,
            bw: args.bw,
            targets: args.targets,
            pool: args.pool.map(|initiators| PoolParameters {
                initiators,
                policy: args.policy,
                streams: args.streams,
            }),
        }
    }

    /// Buffer slots of `size` bytes per server region: the SRQ's receives in send mode (one
    /// region for every target), one slot in bandwidth mode (written or read over and over, as
    /// perftest does), else up to [`PINGPONG_SLOTS`] per target.
    fn server_slots(&self, rx_depth: u32) -> u32 {
        match (self.mode, self.bw) {
            (Mode::Send, _) => rx_depth,
            (_, true) => 1,
            (_, false) => self.iters.div_ceil(self.targets.max(1)).min(PINGPONG_SLOTS),
        }
    }

    /// Whether the report has a per-destination line.
    fn counts_destinations(&self) -> bool {
        self.targets > 1 || self.pool.is_some()
    }
}

/// How many of `iters` requests, sent round-robin, go to target `target` of `targets`.
fn round_robin_share(iters: u64, targets: u64, target: u64) -> u64 {
    iters / targets + u64::from(target < iters % targets)
}

/// The pattern number of slot `slot` of target `target`'s region in read mode (the server fills
/// it, the client checks what it read).
fn read_pattern(target: usize, slot: u64, slots: u32) -> u64 {
    target as u64 * u64::from(slots) + slot
}

/// The client's first message.
#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    parameters: TestParameters,
    /// The client's DC initiators (one, or the pool's) and port, for the "remote address" line.
    qp_numbers: Vec<u32>,
    lid: u16,
    gid: Ipv6Addr,
}

/// One of the server's DC targets, as the client addresses it: its endpoint, and the region of
/// `len` bytes at `addr` its requests write and read.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TargetAddress {
    endpoint: DcEndpoint,
    rkey: u32,
    addr: u64,
    len: u64,
}

/// What the server tells the client.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ServerMessage {
    /// The server's DC targets and their regions, each of `slots` slots of `size` bytes.
    Ready {
        targets: Vec<TargetAddress>,
        slots: u32,
        /// The seed of the data patterns (what the client writes and sends, what it reads).
        seed: u64,
    },
    /// The client's parameters differ from the server's.
    Refused { reason: String },
    /// The server's check of what arrived, after the client's report.
    Verdict { ok: bool, detail: String },
}

/// The client's report once its requests completed.
#[derive(Debug, Serialize, Deserialize)]
struct Done {
    report: Report,
    /// With more than one target or a pool.
    destinations: Option<DestinationCounts>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Report {
    Latency(LatencyReport),
    Bandwidth(BandwidthReport),
}

/// Latency of each request from its post to its completion, in microseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct LatencyReport {
    bytes: u32,
    iterations: u32,
    min: f64,
    max: f64,
    typical: f64,
    average: f64,
    stdev: f64,
    p99: f64,
    p999: f64,
}

/// Bandwidth over the run: from the first post to the last completion; the peak over the best
/// span of signalled windows (none past [`MAX_PEAK_WINDOWS`]).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct BandwidthReport {
    bytes: u32,
    iterations: u32,
    peak_bytes_per_second: Option<f64>,
    average_bytes_per_second: f64,
    messages_per_second: f64,
}

/// Requests completed per destination (target), and with a pool what it handed back.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct DestinationCounts {
    completed: Vec<u64>,
    pool: Option<PoolCounts>,
}

/// The pool's events other than completions.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct PoolCounts {
    /// Requests handed back for a retry (and posted again).
    retried: u64,
    /// Requests that failed.
    failed: u64,
    /// Targets reported ready (an initiator granted from the pool's line).
    ready: u64,
}

impl DestinationCounts {
    /// The report's line without its leading space, for messages.
    fn summary(&self) -> String {
        self.to_string().trim_start().to_string()
    }
}

impl fmt::Display for DestinationCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(DESTINATION_LINE)?;
        for count in &self.completed {
            write!(f, " {count}")?;
        }
        if let Some(pool) = self.pool {
            write!(
                f,
                "; pool: Retry {}, Failed {}, Ready {}",
                pool.retried, pool.failed, pool.ready
            )?;
        }
        Ok(())
    }
}

/// Formats an error with its chain of sources.
fn report(err: &dyn Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(err) = source {
        text.push_str(": ");
        text.push_str(&err.to_string());
        source = err.source();
    }
    text
}

/// One JSON value per line, each way.
struct Channel {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Channel {
    fn new(stream: TcpStream) -> Result<Self> {
        let writer = stream.try_clone().map_err(|e| format!("TCP: {e}"))?;
        Ok(Self {
            reader: BufReader::new(stream),
            writer,
        })
    }

    fn send(&mut self, message: &impl Serialize) -> Result<()> {
        let mut line = serde_json::to_vec(message)?;
        line.push(b'\n');
        self.writer
            .write_all(&line)
            .map_err(|e| format!("TCP: cannot send to the peer: {e}"))?;
        Ok(())
    }

    fn receive<T: DeserializeOwned>(&mut self, what: &str) -> Result<T> {
        let mut line = String::new();
        let read = (&mut self.reader)
            .take(MAX_MESSAGE)
            .read_line(&mut line)
            .map_err(|e| format!("TCP: cannot read {what} from the peer: {e}"))?;
        if read == 0 {
            return Err(format!("the peer closed the connection before sending {what}").into());
        }
        if !line.ends_with('\n') {
            return Err(format!("{what} from the peer is cut short or longer than {MAX_MESSAGE} bytes").into());
        }
        serde_json::from_str(&line)
            .map_err(|e| format!("invalid {what} from the peer: {e}: {:?}", line.trim_end()).into())
    }

    /// Without waiting: whether the peer closed the connection (pending data is left unread).
    fn peer_closed(&mut self) -> bool {
        if !self.reader.buffer().is_empty() {
            return false;
        }
        let stream = self.reader.get_ref();
        if stream.set_nonblocking(true).is_err() {
            return false;
        }
        let mut byte = [0u8; 1];
        let closed = matches!(stream.peek(&mut byte), Ok(0));
        let _ = stream.set_nonblocking(false);
        closed
    }
}

/// A page-aligned, zeroed allocation that the device reads and writes. Its bytes are only ever
/// reached through its raw pointer, never through a Rust reference, since the device may write
/// them at any time.
struct Buffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Buffer {
    fn new(len: u64) -> Result<Self> {
        if len == 0 || len > MAX_BUFFER {
            return Err(format!("a buffer of {len} bytes is not possible (at most {MAX_BUFFER})").into());
        }
        // SAFETY: sysconf has no preconditions.
        let page_size = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096);
        let layout = Layout::from_size_align(len as usize, page_size)?;
        // SAFETY: the layout's size is not zero.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
            .ok_or_else(|| format!("cannot allocate a buffer of {len} bytes"))?;
        Ok(Self { ptr, layout })
    }

    fn len(&self) -> usize {
        self.layout.size()
    }

    fn addr(&self, offset: usize) -> u64 {
        assert!(offset <= self.len());
        self.ptr.as_ptr() as u64 + offset as u64
    }

    /// Copies `out.len()` bytes from `offset` out of the buffer.
    fn read(&self, offset: usize, out: &mut [u8]) {
        assert!(offset.checked_add(out.len()).is_some_and(|end| end <= self.len()));
        // SAFETY: in bounds (checked); `out` is a separate Rust allocation.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
    }

    /// Copies `data` into the buffer at `offset`; only while no request uses those bytes.
    fn write(&mut self, offset: usize, data: &[u8]) {
        assert!(offset.checked_add(data.len()).is_some_and(|end| end <= self.len()));
        // SAFETY: in bounds (checked); `data` is a separate Rust allocation.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len()) };
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the memory region registered on it was
        // dropped before (it is declared after the buffer wherever both live).
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// The data of message `iteration` under `seed`: splitmix64 of the pair, 8 bytes at a time. The
/// client fills what it writes and sends with it and the server checks it; the server fills its
/// read slots with it (slot number as the iteration) and the client checks what it read.
fn fill_pattern(seed: u64, iteration: u64, out: &mut [u8]) {
    let base = seed ^ iteration.wrapping_mul(0xd1b5_4a32_d192_ed03);
    for (index, chunk) in out.chunks_mut(8).enumerate() {
        let mut z = base.wrapping_add((index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
    }
}

/// The first byte of `data` that differs from the pattern, as (offset, found, expected).
fn pattern_mismatch(seed: u64, iteration: u64, data: &[u8], scratch: &mut Vec<u8>) -> Option<(usize, u8, u8)> {
    scratch.resize(data.len(), 0);
    fill_pattern(seed, iteration, scratch);
    data.iter()
        .zip(scratch.iter())
        .position(|(found, expected)| found != expected)
        .map(|offset| (offset, data[offset], scratch[offset]))
}

/// The local port as this test uses it.
struct Port {
    number: u8,
    lid: u16,
    roce: bool,
    mtu: Mtu,
    /// The GID index given with -g (0 on InfiniBand without it).
    gid_index: u8,
    gid: Gid,
}

fn mtu_bytes(mtu: Mtu) -> u32 {
    match mtu {
        Mtu::Mtu256 => 256,
        Mtu::Mtu512 => 512,
        Mtu::Mtu1024 => 1024,
        Mtu::Mtu2048 => 2048,
        Mtu::Mtu4096 => 4096,
    }
}

/// Opens the device of `-d` (or the first one) and checks that it is an mlx5 device before
/// anything else: DC exists only there.
fn open_mlx5_device(args: &Args) -> Result<(Arc<DeviceContext>, String)> {
    let devices = DeviceList::new().map_err(|e| format!("Failed to get IB devices list: {}", report(&e)))?;
    let device = match &args.ib_dev {
        Some(name) => devices
            .iter()
            .find(|d| d.name() == *name)
            .ok_or_else(|| format!("IB device {name} not found"))?,
        None => devices.iter().next().ok_or("No IB devices found")?,
    };
    let name = device.name();
    let ctx = device
        .open()
        .map_err(|e| format!("Couldn't get context for {name}: {}", report(&e)))?;
    match Mlx5DeviceContext::new(Arc::clone(&ctx)).query_device() {
        Ok(_) => Ok((ctx, name)),
        Err(err) if err.is_not_supported() => Err(not_mlx5(&name).into()),
        Err(err) => Err(format!("{name}: mlx5dv_query_device failed: {}", report(&err)).into()),
    }
}

/// The message for a device that is not mlx5 (or a host without libmlx5).
fn not_mlx5(name: &str) -> String {
    format!(
        "{name}: not an mlx5 device (or libmlx5 is missing): DC needs an NVIDIA/Mellanox ConnectX-4 or newer \
         with rdma-core's libmlx5"
    )
}

fn query_local_port(ctx: &DeviceContext, name: &str, args: &Args) -> Result<Port> {
    let number = args.ib_port;
    let attr = ctx
        .query_port(number)
        .map_err(|e| format!("{name}: couldn't get port {number} info: {}", report(&e)))?;
    let roce = matches!(attr.link_layer(), LinkLayer::Ethernet);
    let gid_index = match (args.gid_idx, roce) {
        (Some(index), _) => index,
        (None, false) => 0,
        (None, true) => {
            return Err(format!(
                "{name} port {number} is RoCE: give -g/--gid-idx, the index of a RoCE v2 GID (mlx5_devinfo lists them)"
            )
            .into())
        },
    };
    let gid = ctx.query_gid(number, gid_index.into()).map_err(|e| {
        format!(
            "{name}: could not get local gid for gid index {gid_index}: {}",
            report(&e)
        )
    })?;
    if !roce && attr.lid() == 0 {
        return Err(format!("{name} port {number}: no LID (is the port up and the subnet manager running?)").into());
    }
    Ok(Port {
        number,
        lid: attr.lid(),
        roce,
        mtu: attr.active_mtu(),
        gid_index,
        gid,
    })
}

/// The client's settings, for its banner.
struct ClientSettings {
    tx_depth: u32,
    cq_mod: u32,
    inline: u32,
    /// log2 of the DCI streams per initiator (streams policy).
    streams_log: Option<u8>,
}

/// perftest's test banner and settings, for one side.
fn print_banner(parameters: &TestParameters, device: &str, port: &Port, client: Option<&ClientSettings>) {
    println!("{RESULT_LINE}");
    let test = if parameters.bw { "BW" } else { "Ping-pong Latency" };
    println!("                    DC {} {test} Test", parameters.mode.verb());
    println!(" Device          : {device:<16}Transport type : IB");
    println!(" Connection type : DC              Using SRQ      : ON");
    if parameters.targets > 1 {
        println!(" DC targets      : {} (on one SRQ)", parameters.targets);
    }
    if let Some(pool) = parameters.pool {
        println!(" DC initiators   : {} (pool, policy {})", pool.initiators, pool.policy);
    }
    if let Some(settings) = client {
        if let Some(log) = settings.streams_log {
            println!(" DCI streams     : {} per initiator", 1u32 << log);
        }
        if parameters.bw {
            let per_initiator = if parameters.pool.is_some() {
                " per DC initiator"
            } else {
                ""
            };
            println!(" TX depth        : {}{per_initiator}", settings.tx_depth);
            println!(" CQ Moderation   : {}", settings.cq_mod);
        }
        if parameters.mode != Mode::Read {
            println!(" Max inline data : {}[B]", settings.inline);
        }
    }
    println!(" Mtu             : {}[B]", mtu_bytes(port.mtu));
    println!(" Link type       : {}", if port.roce { "Ethernet" } else { "IB" });
    println!(" GID index       : {}", port.gid_index);
    println!(" Message size    : {}[B]", parameters.size);
    println!(" Iterations      : {}", parameters.iters);
    println!(" Data ex. method : TCP (JSON)");
    println!("{RESULT_LINE}");
}

/// QP numbers as one line's text: "QPN 0x…" for one, else the first few and how many.
fn qp_numbers_text(numbers: &[u32]) -> String {
    match numbers {
        [one] => format!("QPN {one:#08x}"),
        _ => {
            let listed: Vec<String> = numbers.iter().take(LISTED).map(|n| format!("{n:#08x}")).collect();
            let more = if numbers.len() > LISTED { ", …" } else { "" };
            format!("QPNs {}{more} ({} DC initiators)", listed.join(", "), numbers.len())
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Server.

/// The send-mode receive side: the SRQ's slots, which are posted, and the limit refills.
struct Receiver<'a> {
    srq: &'a SharedReceiveQueue,
    lkey: u32,
    buffer: &'a Buffer,
    size: u32,
    /// How many slots the buffer has (the SRQ's receives).
    slots: u32,
    limit: u32,
    /// Slots whose receive completed and was checked: free to post again.
    free: Vec<u32>,
    /// Receives posted and not yet seen completing.
    outstanding: u32,
    limit_events: u64,
    reposted: u64,
    /// Refills made because the SRQ had no receive left and no limit event had come.
    refills_without_event: u64,
}

impl Receiver<'_> {
    /// Posts every free slot's receive.
    fn refill(&mut self) -> Result<()> {
        if self.free.is_empty() {
            return Ok(());
        }
        let mut guard = self.srq.start_post_recv();
        for &slot in &self.free {
            let offset = slot as usize * self.size as usize;
            // SAFETY: the slot lies in the buffer the memory region of `lkey` covers; the buffer
            // outlives the SRQ (declared before it), and the slot is not read again before its
            // receive completes.
            unsafe {
                guard
                    .construct_wr(u64::from(slot))
                    .setup_sge(self.lkey, self.buffer.addr(offset), self.size)
            };
        }
        let count = self.free.len();
        match guard.post() {
            Ok(()) => {
                self.outstanding += count as u32;
                self.reposted += count as u64;
                self.free.clear();
                Ok(())
            },
            Err(err) => Err(format!("Couldn't post receives: {}", report(&err)).into()),
        }
    }

    /// Arms the SRQ limit: the device raises one event once fewer than `limit` receives remain.
    fn arm(&self) -> Result<()> {
        self.srq
            .modify(SharedReceiveQueueModification::ArmLimit(self.limit))
            .map_err(|e| format!("Couldn't arm the SRQ limit: {}", report(&e)).into())
    }
}

/// What the server saw of the client's sends.
struct SendOutcome {
    received: u64,
    /// Messages received per target (by the DCT number of the receive completion).
    per_target: Vec<u64>,
    /// The first problem found, if any.
    failure: Option<String>,
}

/// Receives `iters` messages from the SRQ, checking each (ping-pong: its data, in order, and its
/// target; bandwidth: its length), counts them per target, and refills the SRQ on its limit
/// event.
#[allow(clippy::too_many_arguments)]
fn receive_messages(
    cq: &BasicCompletionQueue, events: &AsyncEventReader, receiver: &mut Receiver<'_>, parameters: &TestParameters,
    seed: u64, dct_numbers: &[u32], channel: &mut Channel,
) -> Result<SendOutcome> {
    let iters = u64::from(parameters.iters);
    let targets = dct_numbers.len();
    // With one target every receive is its; with more, the receive completion's QP number is the
    // DCT number of the target that received the message.
    let target_of: HashMap<u32, usize> = dct_numbers.iter().enumerate().map(|(t, &n)| (n, t)).collect();
    let mut outcome = SendOutcome {
        received: 0,
        per_target: vec![0; targets],
        failure: None,
    };
    let mut wcs = [WorkCompletion::default(); POLL_BATCH];
    let mut message = vec![0u8; parameters.size as usize];
    let mut scratch = Vec::new();
    let mut last_progress = Instant::now();
    let mut idle_polls = 0u32;
    let mut polls = 0u32;
    let srq_id = receiver.srq.id();
    while outcome.received < iters {
        polls = polls.wrapping_add(1);
        let polled = cq
            .poll_work_completions(&mut wcs)
            .map_err(|e| format!("poll CQ failed: {}", report(&e)))?;
        for wc in polled {
            receiver.outstanding = receiver.outstanding.saturating_sub(1);
            let slot = u32::try_from(wc.wr_id()).ok().filter(|&s| s < receiver.slots);
            let Some(slot) = slot else {
                return Err(format!("receive completion with unknown wr_id {}", wc.wr_id()).into());
            };
            receiver.free.push(slot);
            let index = outcome.received;
            outcome.received += 1;
            if outcome.failure.is_some() {
                continue;
            }
            if !wc.is_success() {
                outcome.failure = Some(format!(
                    "receive {index} failed: status {:?} ({}), vendor error {:#x}",
                    wc.status(),
                    wc.status_raw(),
                    wc.vendor_err()
                ));
                continue;
            }
            let target = if targets == 1 {
                Some(0)
            } else {
                target_of.get(&wc.qp_number()).copied()
            };
            let Some(target) = target else {
                outcome.failure = Some(format!(
                    "receive {index} on QP number {:#x}, which is none of the DC targets' DCT numbers",
                    wc.qp_number()
                ));
                continue;
            };
            outcome.per_target[target] += 1;
            if wc.byte_len() != parameters.size {
                outcome.failure = Some(format!(
                    "receive {index}: {} bytes, expected {}",
                    wc.byte_len(),
                    parameters.size
                ));
            } else if !parameters.bw {
                // One message at a time: message `index` is request `index`, sent to target
                // `index mod M`.
                let expected = (index % targets as u64) as usize;
                receiver
                    .buffer
                    .read(slot as usize * parameters.size as usize, &mut message);
                if target != expected {
                    outcome.failure = Some(format!(
                        "message {index} arrived at DC target {target}, expected DC target {expected}"
                    ));
                } else if let Some((offset, found, expected)) = pattern_mismatch(seed, index, &message, &mut scratch) {
                    outcome.failure = Some(format!(
                        "message {index} (slot {slot}): byte {offset} is {found:#04x}, expected {expected:#04x}"
                    ));
                }
            }
        }
        if !polled.is_empty() {
            last_progress = Instant::now();
        }
        // The SRQ limit event: drain what already completed (its slots become free), refill
        // every free slot, arm the limit again. Looked for whenever the CQ is drained, and every
        // few polls under a stream of completions that never drains it.
        if polled.len() < POLL_BATCH || polls % 8 == 0 {
            while let Some(event) = events
                .try_read()
                .map_err(|e| format!("reading async events failed: {}", report(&e)))?
            {
                match (event.event_type(), event.element()) {
                    (AsyncEventType::SharedReceiveQueueLimitReached, AsyncEventElement::SharedReceiveQueue(id))
                        if id == srq_id =>
                    {
                        receiver.limit_events += 1;
                        receiver.refill()?;
                        receiver.arm()?;
                    },
                    (event_type, element) => eprintln!("async event {event_type:?} on {element:?}"),
                }
            }
        }
        // A safety net only: had the limit event not come, the SRQ would run dry and the client
        // would retry on RNR forever. Counted, so that a run shows whether the event did it.
        if receiver.outstanding == 0 && !receiver.free.is_empty() {
            receiver.refills_without_event += 1;
            receiver.refill()?;
            receiver.arm()?;
        }
        if polled.is_empty() {
            idle_polls += 1;
            if idle_polls % 4096 == 0 {
                if last_progress.elapsed() > STALL_TIMEOUT {
                    return Err(
                        format!("no message for {STALL_TIMEOUT:?} after {} of {iters}", outcome.received).into(),
                    );
                }
                if channel.peer_closed() {
                    return Err(format!(
                        "the client closed the connection after {} of {iters} messages",
                        outcome.received
                    )
                    .into());
                }
            }
        }
    }
    Ok(outcome)
}

/// Checks that `counts` (per target) is the round-robin split of the requests; `what` says whose
/// counts they are.
fn check_round_robin(counts: &[u64], parameters: &TestParameters, what: &str) -> Result<(), String> {
    let targets = u64::from(parameters.targets);
    if counts.len() as u64 != targets {
        return Err(format!("{what}: {} targets, expected {targets}", counts.len()));
    }
    for (target, &count) in counts.iter().enumerate() {
        let expected = round_robin_share(u64::from(parameters.iters), targets, target as u64);
        if count != expected {
            return Err(format!(
                "{what}: {count} at DC target {target}, expected {expected} (round-robin)"
            ));
        }
    }
    Ok(())
}

fn counts_text(counts: &[u64]) -> String {
    counts.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
}

/// A buffer and the memory region registered on it; the region is deregistered (dropped) first.
struct Region {
    mr: Arc<MemoryRegion>,
    buffer: Buffer,
}

/// Checks the write slots: slot `s` of target `t` holds the pattern of the last request that
/// wrote it (the `j`-th request to target `t` is request `t + j·M` and writes its slot `j mod
/// slots`).
fn check_written(regions: &[Region], parameters: &TestParameters, slots: u32, seed: u64) -> Result<String, String> {
    let size = parameters.size as usize;
    let iters = u64::from(parameters.iters);
    let targets = regions.len() as u64;
    let slots = u64::from(slots);
    let mut data = vec![0u8; size];
    let mut scratch = Vec::new();
    let mut checked = 0u64;
    for (target, region) in regions.iter().enumerate() {
        let requests = round_robin_share(iters, targets, target as u64);
        for slot in 0..slots.min(requests) {
            let last = target as u64 + (slot + (requests - 1 - slot) / slots * slots) * targets;
            region.buffer.read(slot as usize * size, &mut data);
            if let Some((offset, found, expected)) = pattern_mismatch(seed, last, &data, &mut scratch) {
                return Err(format!(
                    "DC target {target}, slot {slot} (last written by request {last}): byte {offset} is {found:#04x}, \
                     expected {expected:#04x}"
                ));
            }
            checked += 1;
        }
    }
    let of_targets = if targets > 1 {
        format!(" ({targets} DC targets)")
    } else {
        String::new()
    };
    Ok(format!(
        "{checked} slots hold the data of the last iteration that wrote each{of_targets}"
    ))
}

/// "the DC target" for one, "DC target <t>" among several.
fn target_name(target: usize, targets: u32) -> String {
    if targets == 1 {
        "the DC target".to_string()
    } else {
        format!("DC target {target}")
    }
}

fn run_server(args: &Args, parameters: &TestParameters) -> Result<()> {
    let (ctx, name) = open_mlx5_device(args)?;
    let port = query_local_port(&ctx, &name, args)?;
    let size = parameters.size;
    let targets = parameters.targets;
    let slots = parameters.server_slots(args.rx_depth);
    let len = u64::from(slots) * u64::from(size);
    // Send: one region for the SRQ's receives, whichever target they come through; write and
    // read: one region per target.
    let region_count = if parameters.mode == Mode::Send { 1 } else { targets };
    if len
        .checked_mul(u64::from(region_count))
        .is_none_or(|total| total > MAX_BUFFER)
    {
        return Err(format!(
            "{region_count} regions of {slots} slots of {size} bytes are more than {MAX_BUFFER} bytes: lower -s, -r or \
             --targets"
        )
        .into());
    }
    let seed = rand::random::<u64>();

    let pd = ctx
        .alloc_pd()
        .map_err(|e| format!("Couldn't allocate PD: {}", report(&e)))?;
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead;
    // Declared before every verbs object that reaches the buffers (the SRQ, the DC targets), so
    // dropped after them.
    let mut regions = Vec::with_capacity(region_count as usize);
    for region in 0..region_count as usize {
        let mut buffer = Buffer::new(len)?;
        if parameters.mode == Mode::Read {
            let mut data = vec![0u8; size as usize];
            for slot in 0..u64::from(slots) {
                fill_pattern(seed, read_pattern(region, slot, slots), &mut data);
                buffer.write(slot as usize * size as usize, &data);
            }
        }
        // SAFETY: the buffer outlives the memory region (a Region drops its region first) and
        // never moves.
        let mr = unsafe { pd.reg_mr(buffer.addr(0) as usize, buffer.len(), access) }
            .map_err(|e| format!("Couldn't register MR: {}", report(&e)))?;
        regions.push(Region { mr, buffer });
    }
    let cq = ctx
        .create_cq_builder()
        .setup_cqe(args.rx_depth + 1)
        .build()
        .map_err(|e| format!("Couldn't create CQ: {}", report(&e)))?;
    let srq = pd
        .create_srq_builder()
        .setup_max_wr(args.rx_depth)
        .setup_max_sge(1)
        .build()
        .map_err(|e| format!("Couldn't create SRQ: {}", report(&e)))?;
    let mut bring_up = DcTargetBringUp::new(port.number);
    if port.roce || args.gid_idx.is_some() {
        bring_up.setup_src_gid_index(port.gid_index);
    }
    // Every target on the one SRQ and CQ, each with its own DC key.
    let mut dcts: Vec<DcTarget> = Vec::with_capacity(targets as usize);
    let mut endpoints = Vec::with_capacity(targets as usize);
    for target in 0..targets as usize {
        let mut dct = pd
            .create_dct_builder()
            .setup_recv_cq(cq.clone())
            .setup_srq(Arc::clone(&srq))
            .setup_dc_key(rand::random::<u64>())
            .setup_access_flags(access)
            .build()
            .map_err(|e| {
                if e.is_not_supported() {
                    not_mlx5(&name)
                } else {
                    format!("Couldn't create {}: {}", target_name(target, targets), report(&e))
                }
            })?;
        dct.bring_up(&bring_up)
            .map_err(|e| format!("Couldn't bring {} to RTR: {}", target_name(target, targets), report(&e)))?;
        let endpoint = dct
            .endpoint(port.number, port.gid)
            .map_err(|e| format!("Couldn't describe {}: {}", target_name(target, targets), report(&e)))?;
        endpoints.push(endpoint);
        dcts.push(dct);
    }
    let dct_numbers: Vec<u32> = endpoints.iter().map(DcEndpoint::dct_number).collect();
    let addresses: Vec<TargetAddress> = endpoints
        .iter()
        .enumerate()
        .map(|(target, endpoint)| {
            let region = &regions[if parameters.mode == Mode::Send { 0 } else { target }];
            TargetAddress {
                endpoint: *endpoint,
                rkey: region.mr.rkey(),
                addr: region.buffer.addr(0),
                len,
            }
        })
        .collect();

    // Send mode: every slot's receive posted, the limit armed at half, before the client comes.
    let events = ctx.async_event_reader();
    events.set_nonblocking(true).map_err(|e| format!("async events: {e}"))?;
    let mut receiver = Receiver {
        srq: &srq,
        lkey: regions[0].mr.lkey(),
        buffer: &regions[0].buffer,
        size,
        slots,
        limit: (args.rx_depth / 2).max(1),
        free: Vec::with_capacity(slots as usize),
        outstanding: 0,
        limit_events: 0,
        reposted: 0,
        refills_without_event: 0,
    };
    if parameters.mode == Mode::Send {
        receiver.free.extend((0..slots).rev());
        receiver.refill()?;
        receiver.reposted = 0;
        receiver.arm()?;
    }

    print_banner(parameters, &name, &port, None);
    for address in addresses.iter().take(LISTED) {
        let endpoint = &address.endpoint;
        println!(
            " local address:  LID {:#06x} DCTN {:#08x} DC key {:#018x} RKey {:#010x} VAddr {:#018x} GID {}",
            endpoint.lid(),
            endpoint.dct_number(),
            endpoint.dc_key(),
            address.rkey,
            address.addr,
            Ipv6Addr::from(endpoint.gid())
        );
    }
    if addresses.len() > LISTED {
        println!(" local address:  … and {} more DC targets", addresses.len() - LISTED);
    }

    // Dual-stack where IPv6 is available.
    let listener = TcpListener::bind((Ipv6Addr::UNSPECIFIED, args.port))
        .or_else(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, args.port)))
        .map_err(|e| format!("Couldn't listen to port {}: {e}", args.port))?;
    let (stream, _) = listener.accept().map_err(|e| format!("accept() failed: {e}"))?;
    drop(listener);
    let mut channel = Channel::new(stream)?;
    let hello: Hello = channel.receive("the client's parameters")?;
    if hello.parameters != *parameters {
        let reason = format!(
            "the client's parameters {:?} differ from the server's {:?}: give both the same --mode, -s, -n, --bw, \
             --targets, --pool, --policy and --streams",
            hello.parameters, parameters
        );
        let _ = channel.send(&ServerMessage::Refused { reason: reason.clone() });
        return Err(reason.into());
    }
    println!(
        " remote address: LID {:#06x} {} GID {}",
        hello.lid,
        qp_numbers_text(&hello.qp_numbers),
        hello.gid
    );
    println!("{RESULT_LINE}");
    channel.send(&ServerMessage::Ready {
        targets: addresses,
        slots,
        seed,
    })?;

    // Write and read leave no trace on the target's side: the client's report says when it is
    // done. Sends complete receives here.
    let outcome = match parameters.mode {
        Mode::Send => Some(receive_messages(
            &cq,
            &events,
            &mut receiver,
            parameters,
            seed,
            &dct_numbers,
            &mut channel,
        )?),
        Mode::Write | Mode::Read => None,
    };
    let done: Done = channel.receive("the client's report")?;
    print_report(&done.report, done.destinations.as_ref(), args.report_gbits);

    let verdict = match (&outcome, parameters.mode, parameters.bw) {
        (Some(outcome), _, _) => match &outcome.failure {
            Some(failure) => Err(failure.clone()),
            None => check_round_robin(&outcome.per_target, parameters, "messages received").map(|()| {
                let per_target = if targets > 1 {
                    format!("; per DC target (by DCT number): {}", counts_text(&outcome.per_target))
                } else {
                    String::new()
                };
                format!(
                    "{} messages received{}; SRQ limit events {}, receives reposted {}, refills without an event \
                     {}{per_target}",
                    outcome.received,
                    if parameters.bw {
                        " (lengths checked)"
                    } else {
                        " and checked, in order"
                    },
                    receiver.limit_events,
                    receiver.reposted,
                    receiver.refills_without_event
                )
            }),
        },
        (None, Mode::Write, false) => check_written(&regions, parameters, slots, seed),
        (None, Mode::Write, true) => Ok("written (bandwidth mode: data not checked)".to_string()),
        (None, _, _) => Ok("read by the client (it checks the data)".to_string()),
    };
    // The client's own account, when it gives one, must be the round-robin split too.
    let verdict = verdict.and_then(|detail| match (&done.destinations, parameters.counts_destinations()) {
        (Some(counts), true) => {
            check_round_robin(&counts.completed, parameters, "the client's completed requests")?;
            match counts.pool {
                Some(pool) if pool.failed > 0 => {
                    Err(format!("the client's pool reports {} failed requests", pool.failed))
                },
                _ => Ok(detail),
            }
        },
        (None, true) => Err("the client's report lacks its per-destination counts".to_string()),
        (_, false) => Ok(detail),
    });
    let (ok, detail) = match verdict {
        Ok(detail) => (true, detail),
        Err(detail) => (false, detail),
    };
    println!(" server check: {}: {detail}", if ok { "ok" } else { "FAILED" });
    channel.send(&ServerMessage::Verdict {
        ok,
        detail: detail.clone(),
    })?;
    if !ok {
        return Err(format!("server check failed: {detail}").into());
    }
    drop(receiver);
    // Destroy in order: DC targets, SRQ, CQ, memory regions and their buffers, PD, then the
    // context.
    drop(dcts);
    drop(srq);
    drop(cq);
    drop(regions);
    drop(pd);
    drop(ctx);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Client.

/// The server's targets, as the client addresses them.
struct Remote {
    targets: Vec<TargetAddress>,
    slots: u32,
    seed: u64,
}

impl Remote {
    /// Request `iteration`'s target (round-robin) and the slot of that target's region it uses
    /// (the `j`-th request to a target uses slot `j mod slots`).
    fn place(&self, iteration: u64) -> (usize, u64) {
        let targets = self.targets.len() as u64;
        (
            (iteration % targets) as usize,
            (iteration / targets) % u64::from(self.slots),
        )
    }
}

/// The local side of one request: inline bytes or the registered buffer.
enum LocalData<'a> {
    Inline(&'a [u8]),
    Registered { lkey: u32, addr: u64, len: u32 },
}

fn set_data<H: SetInlineData + SetScatterGatherEntry>(handle: H, data: &LocalData<'_>) {
    match *data {
        LocalData::Inline(bytes) => handle.setup_inline_data(bytes),
        // SAFETY: the caller's buffer lies in its memory region and outlives the request (the
        // client's buffer is declared before the DC initiators and every request is completed,
        // or its initiator destroyed, before it is dropped).
        LocalData::Registered { lkey, addr, len } => unsafe { handle.setup_sge(lkey, addr, len) },
    }
}

/// Posts one request of `mode` to `remote_addr` on `target`, through the one DC initiator.
#[allow(clippy::too_many_arguments)]
#[inline]
fn post_request(
    dci: &mut DcInitiator, ah: &AddressHandle, target: &TargetAddress, mode: Mode, remote_addr: u64, wr_id: u64,
    flags: WorkRequestFlags, data: &LocalData<'_>,
) -> Result<()> {
    let (dct_number, dc_key) = (target.endpoint.dct_number(), target.endpoint.dc_key());
    let mut guard = dci.start_post_send();
    let request = guard.construct_wr(wr_id, flags);
    match mode {
        Mode::Write => set_data(
            request
                .setup_write(target.rkey, remote_addr)
                .setup_dc_addr(ah, dct_number, dc_key),
            data,
        ),
        Mode::Send => set_data(request.setup_send().setup_dc_addr(ah, dct_number, dc_key), data),
        Mode::Read => set_data(
            request
                .setup_read(target.rkey, remote_addr)
                .setup_dc_addr(ah, dct_number, dc_key),
            data,
        ),
    }
    guard
        .post()
        .map_err(|e| format!("Couldn't post request {wr_id}: {}", report(&e)).into())
}

/// Adds one request of `mode` to `remote_addr` on `target` to a pool batch (the pool sets the DC
/// address of the batch's target).
#[allow(clippy::too_many_arguments)]
#[inline]
fn add_pool_request<A: PoolAddressing>(
    guard: &mut DcPoolPostGuard<'_, DcInitiator, A>, target: &TargetAddress, mode: Mode, remote_addr: u64, wr_id: u64,
    flags: WorkRequestFlags, data: &LocalData<'_>,
) -> Result<()> {
    let request = guard
        .construct_wr(wr_id, flags)
        .map_err(|e| format!("Couldn't add request {wr_id} to the batch: {e}"))?;
    match mode {
        Mode::Write => set_data(request.setup_write(target.rkey, remote_addr), data),
        Mode::Send => set_data(request.setup_send(), data),
        Mode::Read => set_data(request.setup_read(target.rkey, remote_addr), data),
    }
    Ok(())
}

fn check_completion(wc: &WorkCompletion) -> Result<()> {
    if wc.is_success() {
        return Ok(());
    }
    Err(format!(
        "request {} failed: status {:?} ({}), vendor error {:#x}",
        wc.wr_id(),
        wc.status(),
        wc.status_raw(),
        wc.vendor_err()
    )
    .into())
}

/// The name of the `ibv_wc_status` values a DC request most often fails with.
fn status_text(status: u32) -> String {
    let name = match status {
        4 => " (local protection error)",
        5 => " (flushed)",
        9 => " (remote invalid request)",
        10 => " (remote access error: a wrong DC key or rkey?)",
        12 => " (transport retry counter exceeded: the target does not answer)",
        13 => " (RNR retry counter exceeded: no receive posted)",
        _ => "",
    };
    format!("ibv_wc_status {status}{name}")
}

/// How the client's requests reach the targets, as the ping-pong uses it: one DC initiator, or
/// a pool of them.
trait RoundTrip {
    /// Posts request `wr_id` (signalled) of `mode` to `remote_addr` on `target` and waits until
    /// it completed.
    fn round_trip(&mut self, wr_id: u64, target: usize, remote_addr: u64, data: &LocalData<'_>) -> Result<()>;

    /// What completed where so far.
    fn counts(&self) -> DestinationCounts;
}

/// One DC initiator, one address handle per target.
struct SingleInitiator<'a> {
    dci: &'a mut DcInitiator,
    cq: &'a BasicCompletionQueue,
    ahs: &'a [Arc<AddressHandle>],
    remote: &'a Remote,
    mode: Mode,
    completed: Vec<u64>,
}

impl RoundTrip for SingleInitiator<'_> {
    fn round_trip(&mut self, wr_id: u64, target: usize, remote_addr: u64, data: &LocalData<'_>) -> Result<()> {
        let start = Instant::now();
        post_request(
            self.dci,
            &self.ahs[target],
            &self.remote.targets[target],
            self.mode,
            remote_addr,
            wr_id,
            WorkRequestFlags::Signaled,
            data,
        )?;
        let mut wcs = [WorkCompletion::default(); 4];
        let mut idle_polls = 0u32;
        let wc = loop {
            let polled = self
                .cq
                .poll_work_completions(&mut wcs)
                .map_err(|e| format!("poll CQ failed: {}", report(&e)))?;
            if let Some(wc) = polled.first() {
                break *wc;
            }
            idle_polls = idle_polls.wrapping_add(1);
            if idle_polls % 4096 == 0 && start.elapsed() > STALL_TIMEOUT {
                return Err(format!("request {wr_id} did not complete within {STALL_TIMEOUT:?}").into());
            }
        };
        check_completion(&wc)?;
        if wc.wr_id() != wr_id {
            return Err(format!("completion for request {}, expected {wr_id}", wc.wr_id()).into());
        }
        self.completed[target] += 1;
        Ok(())
    }

    fn counts(&self) -> DestinationCounts {
        DestinationCounts {
            completed: self.completed.clone(),
            pool: None,
        }
    }
}

/// A pool of DC initiators, one destination per target.
struct PoolInitiators<'a> {
    pool: &'a mut DcInitiatorPool,
    destinations: Vec<DestinationId>,
    remote: &'a Remote,
    mode: Mode,
    completed: Vec<u64>,
    counts: PoolCounts,
    /// Per target: requests handed back for a retry, to post again before newer ones.
    retries: Vec<VecDeque<u64>>,
    /// Per target: refused for want of an initiator, and not reported ready since: the pool
    /// grants it one as one frees up (`DcPoolEvent::Ready`); no post is tried meanwhile.
    in_line: Vec<bool>,
    events: Vec<DcPoolEvent>,
}

impl<'a> PoolInitiators<'a> {
    fn new(pool: &'a mut DcInitiatorPool, remote: &'a Remote, mode: Mode) -> Self {
        let destinations: Vec<DestinationId> = remote
            .targets
            .iter()
            .map(|target| pool.add_destination(target.endpoint))
            .collect();
        let targets = destinations.len();
        Self {
            pool,
            destinations,
            remote,
            mode,
            completed: vec![0; targets],
            counts: PoolCounts::default(),
            retries: vec![VecDeque::new(); targets],
            in_line: vec![false; targets],
            events: Vec::with_capacity(POLL_BATCH),
        }
    }

    /// Polls the pool once and accounts for what it reports: completions (given to
    /// `completed` as (target, wr_id)), requests handed back for a retry (queued per target),
    /// and failures (an error that stops the run). Returns how many completions were polled.
    fn poll(&mut self, mut completed: impl FnMut(usize, u64)) -> Result<usize> {
        self.events.clear();
        let events = &mut self.events;
        let polled = self
            .pool
            .poll(|event| events.push(event))
            .map_err(|e| format!("poll CQ failed: {}", report(&e)))?;
        for event in self.events.drain(..) {
            match event {
                DcPoolEvent::Completed { destination, wr_id } => {
                    self.completed[destination.index()] += 1;
                    completed(destination.index(), wr_id);
                },
                DcPoolEvent::Retry { destination, wr_id } => {
                    self.counts.retried += 1;
                    self.retries[destination.index()].push_back(wr_id);
                },
                DcPoolEvent::Failed {
                    destination,
                    wr_id,
                    status,
                    vendor_err,
                } => {
                    self.counts.failed += 1;
                    return Err(format!(
                        "request {wr_id} to DC target {} failed: {} (vendor_err {vendor_err:#x}); so far {}",
                        destination.index(),
                        status_text(status),
                        DestinationCounts {
                            completed: self.completed.clone(),
                            pool: Some(self.counts),
                        }
                        .summary()
                    )
                    .into());
                },
                // A target refused for want of an initiator holds one now: post to it again.
                DcPoolEvent::Ready { destination } => {
                    self.counts.ready += 1;
                    self.in_line[destination.index()] = false;
                },
                DcPoolEvent::Unreachable { destination } => {
                    return Err(format!("the pool reports DC target {} unreachable", destination.index()).into())
                },
                DcPoolEvent::InitiatorLost { initiator, error } => {
                    return Err(
                        format!("the pool lost DC initiator {initiator}: it could not be recovered: {error}").into(),
                    )
                },
                other => return Err(format!("unexpected pool event {other:?}").into()),
            }
        }
        Ok(polled)
    }
}

impl RoundTrip for PoolInitiators<'_> {
    fn round_trip(&mut self, wr_id: u64, target: usize, remote_addr: u64, data: &LocalData<'_>) -> Result<()> {
        let start = Instant::now();
        let mut to_post = true;
        let mut done = false;
        let mut idle_polls = 0u32;
        loop {
            // A target in line waits for its Ready event rather than trying again.
            if to_post && !self.in_line[target] {
                // One signalled request; a pool with DCI streams posts with
                // start_post_send_on_stream.
                macro_rules! post_one {
                    ($guard:expr) => {{
                        let mut guard = $guard;
                        add_pool_request(
                            &mut guard,
                            &self.remote.targets[target],
                            self.mode,
                            remote_addr,
                            wr_id,
                            WorkRequestFlags::Signaled,
                            data,
                        )?;
                        guard
                            .post()
                            .map_err(|e| format!("Couldn't post request {wr_id}: {}", report(&e)))?;
                    }};
                }
                let destination = self.destinations[target];
                let started = if self.pool.policy() == DcPoolPolicy::Streams {
                    self.pool
                        .start_post_send_on_stream(destination)
                        .map(|guard| -> Result<()> {
                            post_one!(guard);
                            Ok(())
                        })
                } else {
                    self.pool.start_post_send(destination).map(|guard| -> Result<()> {
                        post_one!(guard);
                        Ok(())
                    })
                };
                match started {
                    Ok(posted) => {
                        posted?;
                        to_post = false;
                    },
                    // In line for an initiator: the pool reports when it holds one.
                    Err(e)
                        if matches!(
                            e.0,
                            PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)
                        ) =>
                    {
                        self.in_line[target] = true
                    },
                    // Nothing was posted (send queue full, quota, recovery): poll, and try again.
                    Err(e) if e.is_would_block() => {},
                    Err(e) => {
                        return Err(
                            format!("Couldn't post request {wr_id} to DC target {target}: {}", report(&e)).into(),
                        )
                    },
                }
            }
            let mut other = None;
            let polled = self.poll(|_, completed| {
                if completed == wr_id {
                    done = true;
                } else {
                    other = Some(completed);
                }
            })?;
            if let Some(other) = other {
                return Err(format!("completion for request {other}, expected {wr_id}").into());
            }
            if done {
                return Ok(());
            }
            // Handed back (another target's error flushed it): post it again.
            if let Some(retry) = self.retries[target].pop_front() {
                if retry != wr_id {
                    return Err(format!("the pool handed back request {retry}, expected {wr_id}").into());
                }
                to_post = true;
            }
            if polled == 0 {
                idle_polls = idle_polls.wrapping_add(1);
                if idle_polls % 4096 == 0 && start.elapsed() > STALL_TIMEOUT {
                    return Err(format!("request {wr_id} did not complete within {STALL_TIMEOUT:?}").into());
                }
            }
        }
    }

    fn counts(&self) -> DestinationCounts {
        DestinationCounts {
            completed: self.completed.clone(),
            pool: Some(self.counts),
        }
    }
}

/// Latency: one request at a time, each checked; request `i` goes to target `i mod M`.
fn run_latency(
    initiators: &mut dyn RoundTrip, remote: &Remote, buffer: &mut Buffer, lkey: u32, parameters: &TestParameters,
    inline: bool,
) -> Result<LatencyReport> {
    let size = parameters.size as usize;
    let mut message = vec![0u8; size];
    let zeroes = vec![0u8; size];
    let mut scratch = Vec::new();
    let mut samples = Vec::with_capacity(parameters.iters as usize);
    for iteration in 0..u64::from(parameters.iters) {
        let (target, slot) = remote.place(iteration);
        let remote_addr = remote.targets[target].addr + slot * size as u64;
        match parameters.mode {
            Mode::Write | Mode::Send => {
                fill_pattern(remote.seed, iteration, &mut message);
                if !inline {
                    buffer.write(0, &message);
                }
            },
            // Cleared, so that a read that brought nothing cannot pass the check.
            Mode::Read => buffer.write(0, &zeroes),
        }
        let data = if inline {
            LocalData::Inline(&message)
        } else {
            LocalData::Registered {
                lkey,
                addr: buffer.addr(0),
                len: parameters.size,
            }
        };
        let start = Instant::now();
        initiators.round_trip(iteration, target, remote_addr, &data)?;
        let elapsed = start.elapsed();
        if parameters.mode == Mode::Read {
            buffer.read(0, &mut message);
            let pattern = read_pattern(target, slot, remote.slots);
            if let Some((offset, found, expected)) = pattern_mismatch(remote.seed, pattern, &message, &mut scratch) {
                return Err(format!(
                    "read {iteration} (DC target {target}, slot {slot}): byte {offset} is {found:#04x}, expected \
                     {expected:#04x}"
                )
                .into());
            }
        }
        samples.push(elapsed.as_secs_f64() * 1e6);
    }
    println!(
        " client check: ok: {} {} requests completed{}",
        parameters.iters,
        parameters.mode.verb(),
        if parameters.mode == Mode::Read {
            ", each read checked"
        } else {
            " (the server checks the data)"
        }
    );
    Ok(latency_report(parameters, &mut samples))
}

fn latency_report(parameters: &TestParameters, samples: &mut [f64]) -> LatencyReport {
    samples.sort_by(f64::total_cmp);
    let count = samples.len().max(1) as f64;
    let average = samples.iter().sum::<f64>() / count;
    let variance = samples.iter().map(|s| (s - average).powi(2)).sum::<f64>() / count;
    let percentile = |p: f64| {
        let index = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len().max(1)) - 1;
        samples.get(index).copied().unwrap_or(0.0)
    };
    LatencyReport {
        bytes: parameters.size,
        iterations: parameters.iters,
        min: samples.first().copied().unwrap_or(0.0),
        max: samples.last().copied().unwrap_or(0.0),
        typical: percentile(0.5),
        average,
        stdev: variance.sqrt(),
        p99: percentile(0.99),
        p999: percentile(0.999),
    }
}

/// The bandwidth figures from the windows of `cq_mod` requests: `posted_at[w]` is when the
/// first request of window `w` was posted, `completed_at[w]` when `min((w + 1)·cq_mod, iters)`
/// requests had completed. The peak is the best rate over the spans from a window's first post
/// to a later window's completion; the average runs from the first post to the last completion.
fn bandwidth_report(
    parameters: &TestParameters, cq_mod: u64, posted_at: &[Instant], completed_at: &[Instant],
) -> BandwidthReport {
    let iters = u64::from(parameters.iters);
    let elapsed = completed_at
        .last()
        .zip(posted_at.first())
        .map(|(end, start)| end.duration_since(*start).as_secs_f64())
        .unwrap_or_default()
        .max(f64::MIN_POSITIVE);
    let bytes = parameters.size as f64;
    let peak = (posted_at.len() <= MAX_PEAK_WINDOWS).then(|| {
        let mut best = 0.0f64;
        for (first, start) in posted_at.iter().enumerate() {
            for (last, end) in completed_at.iter().enumerate().skip(first) {
                let messages = (((last as u64 + 1) * cq_mod).min(iters) - first as u64 * cq_mod) as f64;
                let seconds = end.duration_since(*start).as_secs_f64();
                if seconds > 0.0 {
                    best = best.max(messages * bytes / seconds);
                }
            }
        }
        best
    });
    BandwidthReport {
        bytes: parameters.size,
        iterations: parameters.iters,
        peak_bytes_per_second: peak,
        average_bytes_per_second: iters as f64 * bytes / elapsed,
        messages_per_second: iters as f64 / elapsed,
    }
}

/// Bandwidth through one DC initiator: up to `tx_depth` requests outstanding, one in `cq_mod`
/// signalled, request `i` to target `i mod M`. Timestamps are taken at the first post of each
/// window of `cq_mod` requests and at its signalled completion.
#[allow(clippy::too_many_arguments)]
fn run_bandwidth(
    single: &mut SingleInitiator<'_>, buffer: &Buffer, lkey: u32, parameters: &TestParameters, inline: bool,
    tx_depth: u32, cq_mod: u32,
) -> Result<BandwidthReport> {
    let remote = single.remote;
    let targets = remote.targets.len() as u64;
    let iters = u64::from(parameters.iters);
    let cq_mod = u64::from(cq_mod);
    let tx_depth = u64::from(tx_depth);
    let windows = iters.div_ceil(cq_mod) as usize;
    let mut posted_at = Vec::with_capacity(windows);
    let mut completed_at = Vec::with_capacity(windows);
    let mut message = vec![0u8; parameters.size as usize];
    if inline {
        fill_pattern(remote.seed, 0, &mut message);
    }
    let data = if inline {
        LocalData::Inline(&message)
    } else {
        LocalData::Registered {
            lkey,
            addr: buffer.addr(0),
            len: parameters.size,
        }
    };
    let mut wcs = [WorkCompletion::default(); POLL_BATCH];
    let (mut posted, mut completed) = (0u64, 0u64);
    let mut last_progress = Instant::now();
    let mut idle_polls = 0u32;
    while completed < iters {
        while posted < iters && posted - completed < tx_depth {
            if posted % cq_mod == 0 {
                posted_at.push(Instant::now());
            }
            let signaled = (posted + 1) % cq_mod == 0 || posted + 1 == iters;
            let flags = if signaled {
                WorkRequestFlags::Signaled
            } else {
                WorkRequestFlags::none()
            };
            let target = (posted % targets) as usize;
            let address = &remote.targets[target];
            post_request(
                single.dci,
                &single.ahs[target],
                address,
                parameters.mode,
                address.addr,
                posted,
                flags,
                &data,
            )?;
            posted += 1;
        }
        let polled = single
            .cq
            .poll_work_completions(&mut wcs)
            .map_err(|e| format!("poll CQ failed: {}", report(&e)))?;
        if polled.is_empty() {
            idle_polls += 1;
            if idle_polls % 4096 == 0 && last_progress.elapsed() > STALL_TIMEOUT {
                return Err(format!("no completion for {STALL_TIMEOUT:?} after {completed} of {iters}").into());
            }
            continue;
        }
        let now = Instant::now();
        last_progress = now;
        for wc in polled {
            check_completion(wc)?;
            let index = wc.wr_id();
            let expected = ((completed / cq_mod + 1) * cq_mod).min(iters) - 1;
            if index != expected {
                return Err(format!("completion for request {index}, expected {expected}").into());
            }
            // One initiator completes in order: the signalled request covers those before it.
            for request in completed..=index {
                single.completed[(request % targets) as usize] += 1;
            }
            completed = index + 1;
            completed_at.push(now);
        }
    }
    Ok(bandwidth_report(parameters, cq_mod, &posted_at, &completed_at))
}

/// Bandwidth through the pool: each target's requests (request `i` is target `i mod M`'s) go in
/// batches of up to `cq_mod`, the last of each signalled, as far as the policy grants the target
/// an initiator and its send queue has room; requests handed back for a retry are posted again
/// first. At most `in_flight_limit` requests are outstanding in all (the CQ holds that many
/// completions). Windows of `cq_mod` requests count posts and completions over all targets.
#[allow(clippy::too_many_arguments)]
fn run_pool_bandwidth(
    pool: &mut PoolInitiators<'_>, buffer: &Buffer, lkey: u32, parameters: &TestParameters, inline: bool, cq_mod: u32,
    in_flight_limit: u64,
) -> Result<BandwidthReport> {
    let remote = pool.remote;
    let mode = parameters.mode;
    let targets = remote.targets.len() as u64;
    let iters = u64::from(parameters.iters);
    let cq_mod = u64::from(cq_mod);
    let windows = iters.div_ceil(cq_mod) as usize;
    let mut posted_at = Vec::with_capacity(windows);
    let mut completed_at = Vec::with_capacity(windows);
    let mut message = vec![0u8; parameters.size as usize];
    if inline {
        fill_pattern(remote.seed, 0, &mut message);
    }
    let data = if inline {
        LocalData::Inline(&message)
    } else {
        LocalData::Registered {
            lkey,
            addr: buffer.addr(0),
            len: parameters.size,
        }
    };
    // Per target: its next request never posted.
    let mut next: Vec<u64> = (0..targets).collect();
    // `posted` counts new requests (the windows), `sent` every post, retries too.
    let (mut posted, mut sent, mut completed) = (0u64, 0u64, 0u64);
    let mut first = 0usize;
    let mut last_progress = Instant::now();
    let mut idle_polls = 0u32;
    while completed < iters {
        // One turn over the targets, from a different one each time.
        for turn in 0..targets as usize {
            // Requests neither completed nor handed back are in flight.
            let in_flight = sent - completed - pool.counts.retried;
            if in_flight >= in_flight_limit {
                break;
            }
            let target = (first + turn) % targets as usize;
            let fresh = if next[target] < iters {
                (iters - 1 - next[target]) / targets + 1
            } else {
                0
            };
            let pending = pool.retries[target].len() as u64 + fresh;
            // A target in line for an initiator waits for its Ready event.
            if pending == 0 || pool.in_line[target] {
                continue;
            }
            // A batch for the target; a pool with DCI streams posts with
            // start_post_send_on_stream.
            macro_rules! fill_and_post {
                ($guard:expr) => {{
                    let mut guard = $guard;
                    let batch = pending
                        .min(cq_mod)
                        .min(guard.room() as u64)
                        .min(in_flight_limit - in_flight);
                    let address = &remote.targets[target];
                    for index in 0..batch {
                        let wr_id = match pool.retries[target].pop_front() {
                            Some(wr_id) => wr_id,
                            None => {
                                let wr_id = next[target];
                                next[target] += targets;
                                if posted % cq_mod == 0 {
                                    posted_at.push(Instant::now());
                                }
                                posted += 1;
                                wr_id
                            },
                        };
                        let flags = if index + 1 == batch {
                            WorkRequestFlags::Signaled
                        } else {
                            WorkRequestFlags::none()
                        };
                        add_pool_request(&mut guard, address, mode, address.addr, wr_id, flags, &data)?;
                    }
                    sent += batch;
                    guard
                        .post()
                        .map_err(|e| format!("Couldn't post a batch to DC target {target}: {}", report(&e)))?;
                }};
            }
            let destination = pool.destinations[target];
            let started = if pool.pool.policy() == DcPoolPolicy::Streams {
                match pool.pool.start_post_send_on_stream(destination) {
                    Ok(guard) => {
                        fill_and_post!(guard);
                        Ok(())
                    },
                    Err(e) => Err(e),
                }
            } else {
                match pool.pool.start_post_send(destination) {
                    Ok(guard) => {
                        fill_and_post!(guard);
                        Ok(())
                    },
                    Err(e) => Err(e),
                }
            };
            match started {
                Ok(()) => {},
                // In line: the pool grants it an initiator as one frees up, and says so.
                Err(e)
                    if matches!(
                        e.0,
                        PostToDestinationErrorKind::WouldBlock(DcPoolWouldBlock::NoInitiator)
                    ) =>
                {
                    pool.in_line[target] = true
                },
                // Its quota used, its send queue full, or its initiator recovering: later.
                Err(e) if e.is_would_block() => continue,
                Err(e) => return Err(format!("Couldn't post to DC target {target}: {}", report(&e)).into()),
            }
        }
        first = (first + 1) % targets as usize;
        let before = completed;
        let polled = pool.poll(|_, _| completed += 1)?;
        let now = Instant::now();
        for count in before + 1..=completed {
            if count % cq_mod == 0 || count == iters {
                completed_at.push(now);
            }
        }
        if polled == 0 {
            idle_polls = idle_polls.wrapping_add(1);
            if idle_polls % 4096 == 0 && last_progress.elapsed() > STALL_TIMEOUT {
                return Err(format!(
                    "no completion for {STALL_TIMEOUT:?} after {completed} of {iters}; {}",
                    pool.counts().summary()
                )
                .into());
            }
        } else {
            last_progress = now;
        }
    }
    Ok(bandwidth_report(parameters, cq_mod, &posted_at, &completed_at))
}

fn print_report(report: &Report, destinations: Option<&DestinationCounts>, gbits: bool) {
    match report {
        Report::Bandwidth(bw) => {
            // MiB = 2^20 bytes; Gb = 10^9 bits (perftest's --report_gbits).
            let (unit, scale) = if gbits {
                ("Gb/sec", 8.0 / 1e9)
            } else {
                ("MiB/sec", 1.0 / f64::from(1u32 << 20))
            };
            println!(" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]");
            println!(
                " {:<10} {:<14} {:<19.2} {:<21.2} {:.6}",
                bw.bytes,
                bw.iterations,
                bw.peak_bytes_per_second.unwrap_or(0.0) * scale,
                bw.average_bytes_per_second * scale,
                bw.messages_per_second / 1e6
            );
        },
        Report::Latency(lat) => {
            println!(
                " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   \
                 99% percentile[usec]   99.9% percentile[usec]"
            );
            println!(
                " {:<6} {:<11}    {:<11.2}    {:<11.2}  {:<15.2}    {:<11.2}    {:<13.2}   {:<20.2}   {:.2}",
                lat.bytes, lat.iterations, lat.min, lat.max, lat.typical, lat.average, lat.stdev, lat.p99, lat.p999
            );
            println!(" (each request from its post to its completion)");
        },
    }
    if let Some(destinations) = destinations {
        println!("{destinations}");
    }
    println!("{RESULT_LINE}");
}

fn connect(server: &str, port: u16) -> Result<TcpStream> {
    let addrs = (server, port)
        .to_socket_addrs()
        .map_err(|e| format!("{e} for {server}:{port}"))?;
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr) {
            Ok(stream) => return Ok(stream),
            Err(err) => last = Some(err),
        }
    }
    Err(match last {
        Some(err) => format!("Couldn't connect to {server}:{port}: {err}"),
        None => format!("Couldn't connect to {server}:{port}: no address"),
    }
    .into())
}

/// The DCI streams of the streams policy: `--streams`, or the default capped at the device's
/// maximum; a plain message on a device without DCI streams.
fn dci_streams(ctx: &Arc<DeviceContext>, name: &str, log: Option<u8>) -> Result<DciStreams> {
    let capabilities = Mlx5DeviceContext::new(Arc::clone(ctx))
        .query_dc_capabilities()
        .map_err(|e| format!("{name}: mlx5dv_query_device failed: {}", report(&e)))?;
    let Some(caps) = capabilities.dci_streams() else {
        return Err(no_dci_streams(name).into());
    };
    let log_num_concurrent = match log {
        Some(log) if log > caps.max_log_num_concurrent => {
            return Err(format!(
                "{name}: --streams {log} asks for 2^{log} DCI streams per initiator; the device has at most 2^{}",
                caps.max_log_num_concurrent
            )
            .into())
        },
        Some(log) => log,
        None => DEFAULT_STREAMS_LOG.min(caps.max_log_num_concurrent),
    };
    Ok(DciStreams {
        log_num_concurrent,
        log_num_errored: log_num_concurrent.min(caps.max_log_num_errored),
    })
}

/// The message for `--policy streams` on a device without DCI streams.
fn no_dci_streams(name: &str) -> String {
    format!(
        "{name}: the device has no DCI streams (ConnectX-6 Dx or newer has them): --policy streams cannot run here; \
         use dedicated, quota:<Q> or static"
    )
}

/// The client's DC initiators: one, or a pool.
// One value, made once and kept on the stack for the run: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Initiators {
    Single(DcInitiator),
    Pool(DcInitiatorPool),
}

fn run_client(args: &Args, parameters: &TestParameters, server: &str) -> Result<()> {
    // The device first: on one that is not mlx5, nothing goes over the network.
    let (ctx, name) = open_mlx5_device(args)?;
    let port = query_local_port(&ctx, &name, args)?;
    let tx_depth = if parameters.bw { args.tx_depth } else { 1 };
    // perftest: every request signalled above 8 KiB unless -Q says otherwise; never more than
    // the send queue holds.
    let cq_mod = args
        .cq_mod
        .unwrap_or(if parameters.size > CQ_MOD_SIZE_LIMIT {
            1
        } else {
            DEFAULT_CQ_MOD
        })
        .min(tx_depth);
    let inline_size = if parameters.mode == Mode::Read {
        0
    } else {
        args.inline_size
    };
    let streams = match parameters.pool {
        Some(pool) if pool.policy == PoolPolicy::Streams => Some(dci_streams(&ctx, &name, pool.streams)?),
        _ => None,
    };
    // Every request of every initiator may complete on the one CQ: with a pool, the client keeps
    // at most -t requests per initiator in flight in all (an initiator's send queue may hold
    // more than asked for).
    let initiator_count = parameters.pool.map_or(1, |pool| pool.initiators);
    let cqe = u64::from(initiator_count) * u64::from(tx_depth) + 1;
    if parameters.pool.is_some() {
        let max_cqe = ctx
            .query_device()
            .map_err(|e| format!("{name}: ibv_query_device failed: {}", report(&e)))?
            .max_cqe();
        if cqe > u64::try_from(max_cqe).unwrap_or(0) {
            return Err(format!(
                "--pool {initiator_count} with -t {tx_depth} needs a CQ of {cqe} entries; {name} allows {max_cqe}: \
                 lower --pool or -t"
            )
            .into());
        }
    }

    // Declared before every verbs object that refers to it, so dropped after them.
    let mut buffer = Buffer::new(u64::from(parameters.size))?;
    let pd = ctx
        .alloc_pd()
        .map_err(|e| format!("Couldn't allocate PD: {}", report(&e)))?;
    // SAFETY: the buffer outlives the memory region (declared before it) and never moves.
    let mr = unsafe { pd.reg_mr(buffer.addr(0) as usize, buffer.len(), AccessFlags::LocalWrite) }
        .map_err(|e| format!("Couldn't register MR: {}", report(&e)))?;
    let cq = ctx
        .create_cq_builder()
        .setup_cqe(cqe as u32)
        .build()
        .map_err(|e| format!("Couldn't create CQ: {}", report(&e)))?;
    let mut initiators = match parameters.pool {
        None => {
            let mut dci = pd
                .create_dci_builder()
                .setup_send_cq(cq.clone())
                .setup_max_send_wr(tx_depth)
                .setup_max_inline_data(inline_size)
                .setup_send_ops_flags(parameters.mode.send_ops())
                .build()
                .map_err(|e| {
                    if e.is_not_supported() {
                        not_mlx5(&name)
                    } else {
                        format!("Couldn't create the DC initiator: {}", report(&e))
                    }
                })?;
            dci.bring_up(&DcInitiatorBringUp::new(port.number))
                .map_err(|e| format!("Couldn't bring the DC initiator to RTS: {}", report(&e)))?;
            Initiators::Single(dci)
        },
        Some(pool) => {
            let mut builder = pd.create_dci_pool_builder();
            builder
                .setup_send_cq(cq.clone())
                .setup_initiators(pool.initiators as usize)
                .setup_policy(pool.policy.to_pool())
                .setup_max_send_wr(tx_depth)
                .setup_max_inline_data(inline_size)
                .setup_send_ops_flags(parameters.mode.send_ops())
                .setup_bring_up(DcInitiatorBringUp::new(port.number))
                .setup_src_gid_index(port.gid_index);
            if let Some(streams) = streams {
                builder.setup_dci_streams(streams);
            }
            let pool = builder.build().map_err(|e| {
                if e.is_not_supported() && streams.is_some() {
                    no_dci_streams(&name)
                } else if e.is_not_supported() {
                    not_mlx5(&name)
                } else {
                    format!(
                        "Couldn't create the pool of {} DC initiators: {}",
                        pool.initiators,
                        report(&e)
                    )
                }
            })?;
            Initiators::Pool(pool)
        },
    };
    let (qp_numbers, max_inline): (Vec<u32>, u32) = match &initiators {
        Initiators::Single(dci) => (vec![dci.qp_number()], dci.max_inline_data()),
        Initiators::Pool(pool) => {
            let members: Vec<&DcInitiator> = (0..pool.initiator_count()).filter_map(|i| pool.initiator(i)).collect();
            (
                members.iter().map(|dci| dci.qp_number()).collect(),
                members.iter().map(|dci| dci.max_inline_data()).min().unwrap_or(0),
            )
        },
    };
    let inline = parameters.mode != Mode::Read && parameters.size <= max_inline.min(inline_size);

    let mut channel = Channel::new(connect(server, args.port)?)?;
    channel.send(&Hello {
        parameters: *parameters,
        qp_numbers: qp_numbers.clone(),
        lid: port.lid,
        gid: Ipv6Addr::from(port.gid),
    })?;
    let remote = match channel.receive("the server's DC endpoints")? {
        ServerMessage::Ready { targets, slots, seed } => {
            if targets.len() != parameters.targets as usize {
                return Err(format!(
                    "the server sent {} DC targets, expected {}",
                    targets.len(),
                    parameters.targets
                )
                .into());
            }
            let needed = u64::from(slots) * u64::from(parameters.size);
            for (index, target) in targets.iter().enumerate() {
                let (addr, len) = (target.addr, target.len);
                if slots == 0 || len < needed || addr.checked_add(len).is_none() {
                    return Err(format!(
                        "DC target {index}'s region ({len} bytes at {addr:#x}, {slots} slots) does not hold {slots} \
                         messages of {} bytes",
                        parameters.size
                    )
                    .into());
                }
            }
            Remote { targets, slots, seed }
        },
        ServerMessage::Refused { reason } => return Err(format!("the server refused: {reason}").into()),
        ServerMessage::Verdict { .. } => return Err("the server sent a verdict before the test".into()),
    };

    print_banner(
        parameters,
        &name,
        &port,
        Some(&ClientSettings {
            tx_depth,
            cq_mod,
            inline: if inline { inline_size } else { 0 },
            streams_log: streams.map(|s| s.log_num_concurrent),
        }),
    );
    println!(
        " local address:  LID {:#06x} {} GID {}",
        port.lid,
        qp_numbers_text(&qp_numbers),
        Ipv6Addr::from(port.gid)
    );
    for target in remote.targets.iter().take(LISTED) {
        let endpoint = &target.endpoint;
        println!(
            " remote address: LID {:#06x} DCTN {:#08x} DC key {:#018x} RKey {:#010x} VAddr {:#018x} GID {}",
            endpoint.lid(),
            endpoint.dct_number(),
            endpoint.dc_key(),
            target.rkey,
            target.addr,
            Ipv6Addr::from(endpoint.gid())
        );
    }
    if remote.targets.len() > LISTED {
        println!(
            " remote address: … and {} more DC targets",
            remote.targets.len() - LISTED
        );
    }
    println!("{RESULT_LINE}");

    // One address handle per target, kept until every request completed (the pool keeps its
    // own, created on each target's first post).
    let mut ahs = Vec::new();
    let (report, destinations) = match &mut initiators {
        Initiators::Single(dci) => {
            for (index, target) in remote.targets.iter().enumerate() {
                ahs.push(
                    target
                        .endpoint
                        .create_ah(&pd, port.number, port.gid_index)
                        .map_err(|e| {
                            format!(
                                "Couldn't create the address handle of {}: {}",
                                target_name(index, parameters.targets),
                                report(&e)
                            )
                        })?,
                );
            }
            let mut single = SingleInitiator {
                dci,
                cq: &cq,
                ahs: &ahs,
                remote: &remote,
                mode: parameters.mode,
                completed: vec![0; remote.targets.len()],
            };
            let report = if parameters.bw {
                Report::Bandwidth(run_bandwidth(
                    &mut single,
                    &buffer,
                    mr.lkey(),
                    parameters,
                    inline,
                    tx_depth,
                    cq_mod,
                )?)
            } else {
                Report::Latency(run_latency(
                    &mut single,
                    &remote,
                    &mut buffer,
                    mr.lkey(),
                    parameters,
                    inline,
                )?)
            };
            (report, single.counts())
        },
        Initiators::Pool(pool) => {
            let mut pooled = PoolInitiators::new(pool, &remote, parameters.mode);
            let report = if parameters.bw {
                Report::Bandwidth(run_pool_bandwidth(
                    &mut pooled,
                    &buffer,
                    mr.lkey(),
                    parameters,
                    inline,
                    cq_mod,
                    cqe - 1,
                )?)
            } else {
                Report::Latency(run_latency(
                    &mut pooled,
                    &remote,
                    &mut buffer,
                    mr.lkey(),
                    parameters,
                    inline,
                )?)
            };
            (report, pooled.counts())
        },
    };
    let destinations = parameters.counts_destinations().then_some(destinations);
    print_report(&report, destinations.as_ref(), args.report_gbits);
    channel.send(&Done { report, destinations })?;
    match channel.receive("the server's verdict")? {
        ServerMessage::Verdict { ok: true, detail } => println!(" server check: ok: {detail}"),
        ServerMessage::Verdict { ok: false, detail } => {
            return Err(format!("the server's check failed: {detail}").into())
        },
        other => return Err(format!("expected the server's verdict, got {other:?}").into()),
    }
    // Destroy in order: address handles, DC initiators (the pool's address handles with it),
    // CQ, memory region, PD; the buffer, then the context.
    drop(ahs);
    drop(initiators);
    drop(cq);
    drop(mr);
    drop(pd);
    drop(buffer);
    drop(ctx);
    Ok(())
}

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
            eprintln!("dc_pingpong: {err}");
            ExitCode::FAILURE
        },
    }
}
