//! Shared receive queue ping-pong: a port of rdma-core's `srq_pingpong` (installed as
//! `ibv_srq_pingpong` by ibverbs-utils) on sideway-ext's shared receive queue API, and
//! interoperable with it.
//!
//! `num_qp` RC queue pairs share one shared receive queue (SRQ) and one completion queue. The
//! client sends a message on every queue pair; each side answers every message it receives on a
//! queue pair with a message on that same queue pair, which it finds by the completion's queue
//! pair number. `-n` counts completions over all queue pairs.
//!
//! ```text
//! srq_pingpong [OPTIONS]              start a server and wait for a connection
//! srq_pingpong [OPTIONS] <server>     connect to the server at <server>
//!
//! cargo run --example srq_pingpong -- -d rxe0 -g 1 &
//! cargo run --example srq_pingpong -- -d rxe0 -g 1 127.0.0.1
//! ```
//!
//! The options are those of the C tool: `-p` TCP port (18515), `-d` device (first found), `-i`
//! device port (1), `-s` message size (4096), `-m` path MTU (1024), `-q` number of queue pairs
//! (16), `-r` receives posted at a time (500), `-n` iterations (1000), `-l` service level (0),
//! `-e` sleep on completion events instead of busy polling, `-g` local GID index (on RoCE: use a
//! RoCE v2 GID, e.g. 1 on SoftRoCE), `-o` on-demand paging, `-c` check the received buffer (the
//! server prints "invalid data in page N" on a mismatch, as the C tool does). One more, `-v`,
//! prints the queue-pair addresses, which the C tool always prints. Each queue pair is brought up
//! from the peer's record with `RcBringUp` of `examples/common/bring_up.rs`.
//!
//! The queue-pair addresses go over TCP exactly as the C tool sends them: 256 records of 52 bytes
//! each way, the text `lid:qpn:psn:gid` in hex, NUL-padded, then "done" from the client. Both
//! sides must use the same `-q`.
//!
//! Exit status: 0 on success, 1 on any failure (2 for invalid command-line options).
#[path = "common/bring_up.rs"]
#[allow(dead_code)] // each user takes what it needs
mod bring_up;

use std::error::Error;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use bring_up::{RcBringUp, RcEndpoint};
use clap::Parser;
use sideway::ibverbs::address::Gid;
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionChannel};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::queue_pair::{SendOperationFlags, SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::{
    CompletionChannelExt, CompletionQueueEventExt, CompletionQueueExt, ProtectionDomainExt,
};
use sideway_ext::ibverbs::post_send_guard::ReliableConnection;
use sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair;
use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;
use sideway_ext::ibverbs::work_completion::WorkCompletion;

/// `wr_id` of every receive; also its bit in a queue pair's pending mask.
const RECV_WRID: u64 = 1;
/// `wr_id` of every send; also its bit in a queue pair's pending mask.
const SEND_WRID: u64 = 2;
/// Records sent each way, whatever the number of queue pairs.
const MAX_QP: usize = 256;
/// One record: `sizeof "0000:000000:000000:00000000000000000000000000000000"` in C.
const RECORD_LEN: usize = 52;
/// What the client sends once it has the server's records: "done" and its NUL.
const DONE: &[u8; 5] = b"done\0";

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

#[derive(Debug, Parser)]
#[command(
    name = "srq_pingpong",
    about = "Ping-pong over RC queue pairs that share one receive queue (port of ibv_srq_pingpong)"
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
    /// Size of the message to exchange
    #[arg(short = 's', long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    size: u32,
    /// Path MTU (256, 512, 1024, 2048 or 4096)
    #[arg(short = 'm', long, default_value = "1024", value_parser = parse_mtu)]
    mtu: Mtu,
    /// Number of queue pairs to use (at most 255)
    #[arg(short = 'q', long, default_value_t = 16)]
    num_qp: u32,
    /// Number of receives to post at a time
    #[arg(short = 'r', long, default_value_t = 500)]
    rx_depth: u32,
    /// Number of exchanges (completions counted over all queue pairs)
    #[arg(short = 'n', long, default_value_t = 1000)]
    iters: u32,
    /// Service level value
    #[arg(short = 'l', long, default_value_t = 0)]
    sl: u8,
    /// Sleep on CQ events (default: busy poll)
    #[arg(short = 'e', long)]
    events: bool,
    /// Local port GID index (without it, the GID sent is zero: InfiniBand only)
    #[arg(short = 'g', long)]
    gid_idx: Option<u8>,
    /// Use on-demand paging
    #[arg(short = 'o', long)]
    odp: bool,
    /// Validate the received buffer
    #[arg(short = 'c', long)]
    chk: bool,
    /// Print every queue pair's local and remote address (the C tool always does)
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Connect to the server at <SERVER>; without it, act as the server
    server: Option<String>,
}

fn parse_mtu(value: &str) -> Result<Mtu, String> {
    match value.parse::<u32>() {
        Ok(256) => Ok(Mtu::Mtu256),
        Ok(512) => Ok(Mtu::Mtu512),
        Ok(1024) => Ok(Mtu::Mtu1024),
        Ok(2048) => Ok(Mtu::Mtu2048),
        Ok(4096) => Ok(Mtu::Mtu4096),
        _ => Err(format!("{value} is not a path MTU (256, 512, 1024, 2048 or 4096)")),
    }
}

/// The address of one queue pair, as exchanged over TCP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Destination {
    lid: u16,
    qpn: u32,
    psn: u32,
    gid: Gid,
}

impl Destination {
    /// The wire record: `"%04x:%06x:%06x:%s"` of lid, qpn, psn and the GID as 32 hex digits (four
    /// big-endian 32-bit words), NUL-padded to [`RECORD_LEN`] bytes.
    fn to_record(self) -> [u8; RECORD_LEN] {
        let gid: String = self
            .gid
            .raw
            .chunks_exact(4)
            .map(|word| format!("{:08x}", u32::from_be_bytes([word[0], word[1], word[2], word[3]])))
            .collect();
        let text = format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn, self.psn);
        let mut record = [0u8; RECORD_LEN];
        // The fields are at most 16, 24 and 24 bits wide: the text is 51 bytes, leaving the NUL.
        let len = text.len().min(RECORD_LEN - 1);
        record[..len].copy_from_slice(&text.as_bytes()[..len]);
        record
    }

    /// Parses a wire record (the text up to its first NUL).
    fn from_record(record: &[u8; RECORD_LEN]) -> Option<Self> {
        let end = record.iter().position(|&b| b == 0).unwrap_or(RECORD_LEN);
        let text = std::str::from_utf8(&record[..end]).ok()?;
        let mut fields = text.splitn(4, ':');
        let lid = u16::from_str_radix(fields.next()?, 16).ok()?;
        let qpn = u32::from_str_radix(fields.next()?, 16).ok()?;
        let psn = u32::from_str_radix(fields.next()?, 16).ok()?;
        let gid_hex = fields.next()?;
        if gid_hex.len() != 32 || !gid_hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut gid = Gid::default();
        for (i, word) in gid.raw.chunks_exact_mut(4).enumerate() {
            let value = u32::from_str_radix(&gid_hex[i * 8..i * 8 + 8], 16).ok()?;
            word.copy_from_slice(&value.to_be_bytes());
        }
        Some(Self { lid, qpn, psn, gid })
    }

    fn print(&self, what: &str) {
        println!(
            "  {what} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            self.lid,
            self.qpn,
            self.psn,
            Ipv6Addr::from(self.gid)
        );
    }
}

/// The 256 records of `dests` (zero destinations past its end), as one buffer.
fn records(dests: &[Destination]) -> Vec<u8> {
    (0..MAX_QP)
        .flat_map(|i| dests.get(i).copied().unwrap_or_default().to_record())
        .collect()
}

/// Reads the 256 records from the peer and parses the first `num_qp` of them.
fn read_records(stream: &mut TcpStream, num_qp: usize) -> Result<Vec<Destination>> {
    let mut dests = Vec::with_capacity(num_qp);
    let mut record = [0u8; RECORD_LEN];
    for i in 0..MAX_QP {
        stream
            .read_exact(&mut record)
            .map_err(|e| format!("Couldn't read remote address [{i}]: {e}"))?;
        if i < num_qp {
            let dest = Destination::from_record(&record).ok_or_else(|| {
                format!(
                    "Couldn't parse remote address [{i}]: {:?}",
                    String::from_utf8_lossy(&record)
                )
            })?;
            dests.push(dest);
        }
    }
    Ok(dests)
}

/// The client's side of the exchange: send our records, read the server's, say "done".
fn client_exchange(server: &str, port: u16, mine: &[Destination]) -> Result<Vec<Destination>> {
    let addrs = (server, port)
        .to_socket_addrs()
        .map_err(|e| format!("{e} for {server}:{port}"))?;
    let mut stream = addrs
        .into_iter()
        .find_map(|addr| TcpStream::connect(addr).ok())
        .ok_or_else(|| format!("Couldn't connect to {server}:{port}"))?;
    stream
        .write_all(&records(mine))
        .map_err(|e| format!("Couldn't send local address: {e}"))?;
    let remote = read_records(&mut stream, mine.len())?;
    stream.write_all(DONE).map_err(|e| format!("client write: {e}"))?;
    Ok(remote)
}

/// The server's side: read the client's records, connect our queue pairs to them, send ours,
/// wait for "done" (exactly its 5 bytes).
fn server_exchange(
    port: u16, mine: &[Destination], connect: impl FnOnce(&[Destination]) -> Result<()>,
) -> Result<Vec<Destination>> {
    // Dual-stack where IPv6 is available (std sets SO_REUSEADDR, as the C tool does).
    let listener = TcpListener::bind((Ipv6Addr::UNSPECIFIED, port))
        .or_else(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)))
        .map_err(|e| format!("Couldn't listen to port {port}: {e}"))?;
    let (mut stream, _) = listener.accept().map_err(|e| format!("accept() failed: {e}"))?;
    drop(listener);

    let remote = read_records(&mut stream, mine.len())?;
    connect(&remote).map_err(|e| format!("Couldn't connect to remote QP: {e}"))?;
    stream
        .write_all(&records(mine))
        .map_err(|e| format!("Couldn't send local address: {e}"))?;

    // The client writes "done\0" and closes: collect everything up to end of stream (at most a
    // record's worth) and insist on exactly those 5 bytes.
    let mut msg = [0u8; RECORD_LEN];
    let mut len = 0;
    while len < msg.len() {
        match stream.read(&mut msg[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("server read: {e}").into()),
        }
    }
    if &msg[..len] != DONE {
        return Err(format!(
            "expected \"done\" from the client, got {:?}",
            String::from_utf8_lossy(&msg[..len])
        )
        .into());
    }
    Ok(remote)
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

/// Brings every queue pair to RTS against its remote destination (RESET → INIT → RTR → RTS), with
/// the C tool's attributes: `RcBringUp`'s defaults, hop limit 1, and global routing only when the
/// remote GID's interface id (its low 64 bits) is set.
fn connect_qps(
    ctx: &DeviceContext, qps: &mut [SharedReceiveQueuePair<ReliableConnection>], args: &Args, mine: &[Destination],
    remote: &[Destination],
) -> Result<()> {
    for (i, qp) in qps.iter_mut().enumerate() {
        let dest = &remote[i];
        let peer = RcEndpoint::new(dest.lid, dest.gid, dest.qpn, dest.psn)
            .map_err(|e| format!("Bad remote address [{i}]: {}", report(&e)))?;
        let mut params = RcBringUp::new(args.ib_port);
        params.path_mtu = Some(args.mtu);
        params.service_level = args.sl;
        params.psn = mine[i].psn;
        params.hop_limit = 1;
        if dest.gid.raw[8..].iter().any(|&b| b != 0) {
            // The C tool passes its -g value, -1 when not given; no GID index is -1: use 0.
            params.src_gid_index = Some(args.gid_idx.unwrap_or(0));
        }
        params
            .bring_up(ctx, qp, &peer)
            .map_err(|e| format!("Failed to bring up QP[{i}]: {}", report(&e)))?;
    }
    Ok(())
}

/// The message buffer: `size` bytes, page-aligned, used for every send and receive (as in the C
/// tool, the data is never looked at except with `-c`).
struct Buffer {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl Buffer {
    fn new(len: usize, page_size: usize) -> Self {
        let storage = vec![0u8; len + page_size];
        let offset = storage.as_ptr().align_offset(page_size);
        Self { storage, offset, len }
    }

    fn addr(&self) -> u64 {
        self.storage[self.offset..].as_ptr() as u64
    }

    /// Reads a byte; the device may write the buffer behind Rust's back, hence the volatile read.
    fn read(&self, index: usize) -> u8 {
        assert!(index < self.len);
        // SAFETY: in bounds of the live storage.
        unsafe { std::ptr::read_volatile(self.storage.as_ptr().add(self.offset + index)) }
    }

    /// Writes a byte; only while no receive can land (before the first send is posted).
    fn write(&mut self, index: usize, value: u8) {
        assert!(index < self.len);
        // SAFETY: in bounds of the live storage.
        unsafe { std::ptr::write_volatile(self.storage.as_mut_ptr().add(self.offset + index), value) }
    }
}

/// The byte `-c` expects at the start of page `page`: the C tool's `page % sizeof(char)`, which
/// is always 0; kept so that the check means the same on both sides.
fn check_byte(page: usize) -> u8 {
    (page % std::mem::size_of::<u8>()) as u8
}

/// Posts `n` receives of the whole buffer on the SRQ in one call; returns how many were posted
/// (on a full queue, those before the refused one).
fn post_recv(srq: &SharedReceiveQueue, mr: &MemoryRegion, buf: &Buffer, n: u32) -> u32 {
    let mut guard = srq.start_post_recv();
    for _ in 0..n {
        // SAFETY: the buffer lies in the memory region and outlives the queue pairs and the SRQ
        // (it is declared before them in `run`, so dropped after them).
        unsafe {
            guard
                .construct_wr(RECV_WRID)
                .setup_sge(mr.lkey(), buf.addr(), buf.len as u32)
        };
    }
    match guard.post() {
        Ok(()) => n,
        Err(err) => err.index() as u32,
    }
}

/// Posts one signalled SEND of the whole buffer on `qp`, inline when it fits.
fn post_send(
    qp: &mut SharedReceiveQueuePair<ReliableConnection>, mr: &MemoryRegion, buf: &Buffer, inline: bool,
) -> Result<()> {
    let mut guard = qp.start_post_send();
    if inline {
        let handle = guard
            .construct_wr(SEND_WRID, WorkRequestFlags::Signaled | WorkRequestFlags::Inline)
            .setup_send();
        let data: Vec<u8> = (0..buf.len).map(|i| buf.read(i)).collect();
        handle.setup_inline_data(&data);
    } else {
        let handle = guard.construct_wr(SEND_WRID, WorkRequestFlags::Signaled).setup_send();
        // SAFETY: the buffer lies in the memory region and outlives the queue pairs.
        unsafe { handle.setup_sge(mr.lkey(), buf.addr(), buf.len as u32) };
    }
    guard
        .post()
        .map_err(|e| format!("Couldn't post send: {}", report(&e)))?;
    Ok(())
}

/// Waits for the next completion event on `channel`, checks that it is for `cq`, and re-arms the
/// CQ; the event is acknowledged when it goes out of scope.
fn wait_cq_event(channel: &CompletionChannel, cq: &Arc<BasicCompletionQueue>) -> Result<()> {
    let event = channel
        .get_cq_event()
        .map_err(|e| format!("Failed to get cq_event: {}", report(&e)))?;
    if !event.is_for(&**cq) {
        return Err("CQ event for unknown CQ".into());
    }
    request_notify(cq)
}

fn request_notify(cq: &Arc<BasicCompletionQueue>) -> Result<()> {
    cq.req_notify_cq(false)
        .map_err(|e| format!("Couldn't request CQ notification: {}", report(&e)).into())
}

/// Whether the device supports on-demand paging for RC sends and SRQ receives (`-o`).
fn odp_supported(ctx: &DeviceContext) -> Result<bool> {
    use rdma_mummy_sys::{ibv_device_attr_ex, ibv_odp_general_caps, ibv_odp_transport_cap_bits};
    let mut attr = std::mem::MaybeUninit::<ibv_device_attr_ex>::zeroed();
    // SAFETY: the context is alive; attr is a writable, zeroed ibv_device_attr_ex.
    let ret =
        unsafe { rdma_mummy_sys::ibv_query_device_ex(ctx.context().as_ptr(), std::ptr::null(), attr.as_mut_ptr()) };
    if ret != 0 {
        return Err("Couldn't query device for its features".into());
    }
    // SAFETY: filled by the call (and zeroed before).
    let attr = unsafe { attr.assume_init() };
    let rc_caps =
        ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_SEND.0 | ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_SRQ_RECV.0;
    Ok(
        attr.odp_caps.general_caps & ibv_odp_general_caps::IBV_ODP_SUPPORT.0 as u64 != 0
            && attr.odp_caps.per_transport_caps.rc_odp_caps & rc_caps == rc_caps,
    )
}

fn run(args: &Args) -> Result<()> {
    let num_qp = args.num_qp as usize;
    if args.num_qp > args.rx_depth {
        return Err(format!(
            "rx_depth {} is too small for {} QPs -- must have at least one receive per QP.",
            args.rx_depth, args.num_qp
        )
        .into());
    }
    if num_qp >= MAX_QP {
        return Err(format!("num_qp {} must be less than {}", args.num_qp, MAX_QP - 1).into());
    }
    if num_qp == 0 {
        return Err("num_qp must be at least 1".into());
    }
    let size = args.size as usize;
    let num_wc = (args.num_qp + args.rx_depth) as usize;
    // SAFETY: sysconf has no preconditions.
    let page_size = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096);

    let devices = DeviceList::new().map_err(|e| format!("Failed to get IB devices list: {}", report(&e)))?;
    let device = match &args.ib_dev {
        Some(name) => devices
            .iter()
            .find(|d| d.name() == *name)
            .ok_or_else(|| format!("IB device {name} not found"))?,
        None => devices.iter().next().ok_or("No IB devices found")?,
    };
    let ctx = device
        .open()
        .map_err(|e| format!("Couldn't get context for {}: {}", device.name(), report(&e)))?;

    // Declared before every verbs object that refers to it, so dropped after them.
    let mut buf = Buffer::new(size, page_size);

    let mut access = AccessFlags::LocalWrite;
    if args.odp {
        if !odp_supported(&ctx)? {
            return Err("The device isn't ODP capable or does not support RC send, receive and srq with ODP".into());
        }
        access |= AccessFlags::OnDemand;
    }
    let channel = if args.events {
        Some(
            ctx.create_comp_channel()
                .map_err(|e| format!("Couldn't create completion channel: {}", report(&e)))?,
        )
    } else {
        None
    };
    let pd = ctx
        .alloc_pd()
        .map_err(|e| format!("Couldn't allocate PD: {}", report(&e)))?;
    // SAFETY: the buffer outlives the memory region (declared before it).
    let mr = unsafe { pd.reg_mr(buf.addr() as usize, size, access) }
        .map_err(|e| format!("Couldn't register MR: {}", report(&e)))?;
    let mut cq_builder = ctx.create_cq_builder();
    cq_builder.setup_cqe(args.rx_depth + args.num_qp);
    if let Some(channel) = &channel {
        cq_builder.setup_comp_channel(channel, 0);
    }
    let cq: Arc<BasicCompletionQueue> = cq_builder
        .build()
        .map_err(|e| format!("Couldn't create CQ: {}", report(&e)))?;
    let srq = pd
        .create_srq_builder()
        .setup_max_wr(args.rx_depth)
        .setup_max_sge(1)
        .build()
        .map_err(|e| format!("Couldn't create SRQ: {}", report(&e)))?;

    let mut qps = Vec::with_capacity(num_qp);
    let mut inline = false;
    for i in 0..num_qp {
        let qp = srq
            .create_qp_builder()
            .setup_send_cq(Arc::clone(&cq))
            .setup_recv_cq(Arc::clone(&cq))
            .setup_max_send_wr(1)
            .setup_max_send_sge(1)
            .setup_send_ops_flags(SendOperationFlags::Send)
            .build_rc()
            .map_err(|e| format!("Couldn't create QP[{i}]: {}", report(&e)))?;
        // As in the C tool: send inline once any queue pair was granted room for the message.
        inline |= qp.max_inline_data() as usize >= size;
        qps.push(qp);
    }
    let mut routs = post_recv(&srq, &mr, &buf, args.rx_depth);
    if routs < args.rx_depth {
        return Err(format!("Couldn't post receive ({routs})").into());
    }
    if args.events {
        request_notify(&cq)?;
    }

    let port = ctx
        .query_port(args.ib_port)
        .map_err(|e| format!("Couldn't get port info: {}", report(&e)))?;
    let gid = match args.gid_idx {
        Some(index) => ctx
            .query_gid(args.ib_port, index.into())
            .map_err(|e| format!("Could not get local gid for gid index {index}: {}", report(&e)))?,
        None => Gid::default(),
    };
    if !matches!(port.link_layer(), LinkLayer::Ethernet) && port.lid() == 0 {
        return Err("Couldn't get local LID".into());
    }
    let mine: Vec<Destination> = qps
        .iter()
        .map(|qp| Destination {
            lid: port.lid(),
            qpn: qp.qp_number(),
            psn: rand::random::<u32>() & 0xff_ffff,
            gid,
        })
        .collect();
    if args.verbose {
        for dest in &mine {
            dest.print("local address: ");
        }
    }

    let remote = match &args.server {
        Some(server) => client_exchange(server, args.port, &mine)?,
        None => server_exchange(args.port, &mine, |remote| {
            connect_qps(&ctx, &mut qps, args, &mine, remote)
        })?,
    };
    if args.verbose {
        for dest in &remote {
            dest.print("remote address:");
        }
    }
    if args.server.is_some() {
        connect_qps(&ctx, &mut qps, args, &mine, &remote)?;
    }

    // Per queue pair, what it still waits for before its next send: its send's completion and a
    // receive on it.
    let mut pending = vec![0u64; num_qp];
    if args.server.is_some() {
        if args.chk {
            for i in (0..size).step_by(page_size) {
                buf.write(i, check_byte(i / page_size));
            }
        }
        for (i, qp) in qps.iter_mut().enumerate() {
            post_send(qp, &mr, &buf, inline)?;
            pending[i] = SEND_WRID | RECV_WRID;
        }
    } else {
        pending.fill(RECV_WRID);
    }

    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let mut events = 0u64;
    let mut wcs = vec![WorkCompletion::default(); num_wc];
    while rcnt < args.iters || scnt < args.iters {
        if let Some(channel) = &channel {
            wait_cq_event(channel, &cq)?;
            events += 1;
        }
        let completions = loop {
            let polled = cq
                .poll_work_completions(&mut wcs)
                .map_err(|e| format!("poll CQ failed: {}", report(&e)))?
                .len();
            if polled > 0 || channel.is_some() {
                break polled;
            }
        };
        for wc in &wcs[..completions] {
            if !wc.is_success() {
                return Err(format!(
                    "Failed status {:?} ({}) for wr_id {}",
                    wc.status(),
                    wc.status_raw(),
                    wc.wr_id()
                )
                .into());
            }
            let qp_ind = qps
                .iter()
                .position(|qp| qp.qp_number() == wc.qp_number())
                .ok_or_else(|| format!("Couldn't find QPN {:06x}", wc.qp_number()))?;
            match wc.wr_id() {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= args.num_qp {
                        routs += post_recv(&srq, &mr, &buf, args.rx_depth - routs);
                        if routs < args.rx_depth {
                            return Err(format!("Couldn't post receive ({routs})").into());
                        }
                    }
                    rcnt += 1;
                },
                other => return Err(format!("Completion for unknown wr_id {other}").into()),
            }
            pending[qp_ind] &= !wc.wr_id();
            if scnt < args.iters && pending[qp_ind] == 0 {
                post_send(&mut qps[qp_ind], &mr, &buf, inline)?;
                pending[qp_ind] = RECV_WRID | SEND_WRID;
            }
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = size as u64 * u64::from(args.iters) * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        args.iters,
        usec / 1e6,
        usec / f64::from(args.iters)
    );
    if args.events {
        // Not in the C tool's output: the tests read it to tell that events were waited for.
        println!("{events} completion events");
    }
    if args.server.is_none() && args.chk {
        for i in (0..size).step_by(page_size) {
            if buf.read(i) != check_byte(i / page_size) {
                println!("invalid data in page {}", i / page_size);
            }
        }
    }

    // Destroy in the C tool's order: queue pairs, SRQ, CQ, MR, PD, channel, context; the buffer
    // last.
    drop(qps);
    drop(srq);
    drop(cq);
    drop(mr);
    drop(pd);
    drop(channel);
    drop(ctx);
    drop(buf);
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{}", report(&*err));
            ExitCode::FAILURE
        },
    }
}
