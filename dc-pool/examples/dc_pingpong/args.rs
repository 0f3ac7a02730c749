//! The command line: options, the test's parameters both sides must agree on, and the
//! values derived from them.
use super::*;

/// perftest's defaults, so that the two compare with the same options.
pub(crate) const DEFAULT_BW_SIZE: u32 = 65536;

pub(crate) const DEFAULT_BW_ITERS: u32 = 5000;

pub(crate) const DEFAULT_CQ_MOD: u32 = 100;

/// Above this message size perftest signals every request unless `-Q` is given.
pub(crate) const CQ_MOD_SIZE_LIMIT: u32 = 8192;

/// Ping-pong defaults.
pub(crate) const DEFAULT_PINGPONG_SIZE: u32 = 64;

pub(crate) const DEFAULT_PINGPONG_ITERS: u32 = 1000;

/// The largest message: DC messages are at most 2 GiB; 1 GiB keeps buffers reasonable.
pub(crate) const MAX_SIZE: u32 = 1 << 30;

/// The largest registered memory either side allocates (the server's regions together).
pub(crate) const MAX_BUFFER: u64 = 16 << 30;

/// Server buffer slots per target in ping-pong write and read: the `j`-th request to a target
/// uses its slot `j % slots`.
pub(crate) const PINGPONG_SLOTS: u32 = 16;

/// The most DC targets (`--targets`) and pool initiators (`--pool`) this example creates.
pub(crate) const MAX_TARGETS: u32 = 1024;

pub(crate) const MAX_POOL: u32 = 1024;

/// The largest `--streams` (log2 of the DCI streams per initiator) accepted on the command line;
/// the device's own limit is checked when the pool is built.
pub(crate) const MAX_STREAMS_LOG: u8 = 15;

/// DCI streams per initiator without `--streams` (2^2 = 4), or the device's maximum if lower.
pub(crate) const DEFAULT_STREAMS_LOG: u8 = 2;

/// No completion for this long: the peer is gone, or the DC path does not work.
pub(crate) const STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest JSON line accepted from the peer.
pub(crate) const MAX_MESSAGE: u64 = 1 << 20;

/// Peak bandwidth is computed over every pair of signalled windows up to this many windows
/// (perftest stops computing it past 20000 iterations too); past it the peak reads 0.
pub(crate) const MAX_PEAK_WINDOWS: usize = 20_000;

/// Completions polled at a time.
pub(crate) const POLL_BATCH: usize = 32;

/// Addresses listed on one line (QP numbers) or in the banner (targets) before "…".
pub(crate) const LISTED: usize = 8;

pub(crate) const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// How the report's per-destination line starts.
pub(crate) const DESTINATION_LINE: &str = " completed per destination:";

/// What the client does to the server's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// RDMA WRITE into the server's buffer
    Write,
    /// SEND, consuming receives from the server's SRQ
    Send,
    /// RDMA READ from the server's buffer
    Read,
}

impl Mode {
    /// perftest's name of the verb.
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Mode::Write => "RDMA_Write",
            Mode::Send => "Send",
            Mode::Read => "RDMA_Read",
        }
    }

    /// The one operation the DC initiators are created with.
    pub(crate) fn send_ops(self) -> SendOperationFlags {
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
pub(crate) enum PoolPolicy {
    Dedicated,
    Quota(u32),
    Static,
    Streams,
}

impl PoolPolicy {
    pub(crate) fn to_pool(self) -> DcPoolPolicy {
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
pub(crate) fn parse_policy(text: &str) -> Result<PoolPolicy, String> {
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

/// `-m`: 256, 512, 1024, 2048 or 4096 (the InfiniBand path MTUs, as perftest's `-m` takes them).
pub(crate) fn parse_mtu(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(bytes @ (256 | 512 | 1024 | 2048 | 4096)) => Ok(bytes),
        _ => Err(format!(
            "expected 256, 512, 1024, 2048 or 4096 (a path MTU, not the Ethernet one), not {text:?}"
        )),
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "dc_pingpong",
    about = "Ping-pong and bandwidth over DC (Dynamically Connected transport) on an mlx5 device: \
             a server with DC targets, a client with a DC initiator or a pool of them"
)]
pub(crate) struct Args {
    /// Listen on / connect to TCP port <PORT>
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub(crate) port: u16,
    /// Use IB device <IB_DEV> (default: the first device found)
    #[arg(short = 'd', long)]
    pub(crate) ib_dev: Option<String>,
    /// Use port <IB_PORT> of the IB device
    #[arg(short = 'i', long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..))]
    pub(crate) ib_port: u8,
    /// Local port GID index (required on RoCE: a RoCE v2 GID)
    #[arg(short = 'g', long)]
    pub(crate) gid_idx: Option<u8>,
    /// Path MTU in bytes, 256 to 4096, of the server's DC targets and the client's DC initiators
    /// (default: the port's active MTU; never above it). Give both sides the smaller of their
    /// ports' where they differ, as perftest does: a DC target answers READs at its own MTU
    #[arg(short = 'm', long, value_parser = parse_mtu)]
    pub(crate) mtu: Option<u32>,
    /// Size of a message in bytes (default: 65536 with --bw, 64 otherwise)
    #[arg(short = 's', long, value_parser = clap::value_parser!(u32).range(1..=MAX_SIZE as i64))]
    pub(crate) size: Option<u32>,
    /// Number of requests (default: 5000 with --bw, 1000 otherwise)
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) iters: Option<u32>,
    /// The operation: write into, send to, or read from the server
    #[arg(long, value_enum, default_value_t = Mode::Write)]
    pub(crate) mode: Mode,
    /// Measure bandwidth and message rate (perftest style) instead of ping-pong latency
    #[arg(long)]
    pub(crate) bw: bool,
    /// With --bw: requests outstanding at a time (the send queue of the DC initiator; with --pool,
    /// of each initiator, and N times it in all)
    #[arg(short = 't', long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub(crate) tx_depth: u32,
    /// With --bw: signal one request in <CQ_MOD> (default 100, 1 above 8192-byte messages; at
    /// most --tx-depth); with --pool, each target's requests go in batches of up to <CQ_MOD>,
    /// the last of each signalled
    #[arg(short = 'Q', long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) cq_mod: Option<u32>,
    /// Server, send mode: receives posted on the SRQ (refilled on its limit event, armed at half)
    #[arg(short = 'r', long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(2..=65536))]
    pub(crate) rx_depth: u32,
    /// Largest message sent inline (write and send; 0: never inline)
    #[arg(short = 'I', long, default_value_t = 150, value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub(crate) inline_size: u32,
    /// Report bandwidth in Gb/s (10^9 bits) instead of MiB/s
    #[arg(long, alias = "report_gbits")]
    pub(crate) report_gbits: bool,
    /// The server's DC targets, on one SRQ, each with its own DC key and memory region; the
    /// client sends request i to target i mod M (give both sides the same)
    #[arg(long, value_name = "M", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_TARGETS as i64))]
    pub(crate) targets: u32,
    /// Post through a pool of <N> DC initiators (DcInitiatorPool) instead of one DC initiator
    /// (give both sides the same)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=MAX_POOL as i64))]
    pub(crate) pool: Option<u32>,
    /// With --pool: how initiators are assigned to targets: dedicated (one per target while it
    /// has requests outstanding), quota:<Q> (dedicated, at most Q requests per turn while other
    /// targets wait), static (each target bound to one shared initiator) or streams (each target
    /// bound to a DCI stream; ConnectX-6 Dx or newer)
    #[arg(long, value_name = "POLICY", default_value = "dedicated", value_parser = parse_policy, requires = "pool")]
    pub(crate) policy: PoolPolicy,
    /// With --policy streams: 2^<LOG> DCI streams per initiator (default 2, or the device's
    /// maximum if lower)
    #[arg(long, value_name = "LOG", value_parser = clap::value_parser!(u8).range(0..=MAX_STREAMS_LOG as i64))]
    pub(crate) streams: Option<u8>,
    /// Connect to the server at <SERVER>; without it, act as the server
    pub(crate) server: Option<String>,
}

impl Args {
    /// What clap cannot check alone; exits with clap's status 2, naming the option.
    pub(crate) fn check(&self) {
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
pub(crate) struct PoolParameters {
    pub(crate) initiators: u32,
    pub(crate) policy: PoolPolicy,
    /// `--streams` as given (the default depends on the device).
    pub(crate) streams: Option<u8>,
}

/// The parameters both sides must agree on; the client sends its own, the server compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TestParameters {
    pub(crate) mode: Mode,
    pub(crate) size: u32,
    pub(crate) iters: u32,
    pub(crate) bw: bool,
    pub(crate) targets: u32,
    pub(crate) pool: Option<PoolParameters>,
    /// `-m` as given, in bytes (the default depends on each side's port).
    pub(crate) mtu: Option<u32>,
}

impl TestParameters {
    pub(crate) fn from_args(args: &Args) -> Self {
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
            mtu: args.mtu,
        }
    }

    /// Buffer slots of `size` bytes per server region: the SRQ's receives in send mode (one
    /// region for every target), one slot in bandwidth mode (written or read over and over, as
    /// perftest does), else up to [`PINGPONG_SLOTS`] per target.
    pub(crate) fn server_slots(&self, rx_depth: u32) -> u32 {
        match (self.mode, self.bw) {
            (Mode::Send, _) => rx_depth,
            (_, true) => 1,
            (_, false) => self.iters.div_ceil(self.targets.max(1)).min(PINGPONG_SLOTS),
        }
    }

    /// Whether the report has a per-destination line.
    pub(crate) fn counts_destinations(&self) -> bool {
        self.targets > 1 || self.pool.is_some()
    }
}

/// How many of `iters` requests, sent round-robin, go to target `target` of `targets`.
pub(crate) fn round_robin_share(iters: u64, targets: u64, target: u64) -> u64 {
    iters / targets + u64::from(target < iters % targets)
}

/// The pattern number of slot `slot` of target `target`'s region in read mode (the server fills
/// it, the client checks what it read).
pub(crate) fn read_pattern(target: usize, slot: u64, slots: u32) -> u64 {
    target as u64 * u64::from(slots) + slot
}
