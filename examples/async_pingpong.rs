//! An echo over many RC queue pairs that share one receive queue, driven from a tokio task that
//! sleeps on the completion channel (no busy polling).
//!
//! The client sends `-n` numbered messages on each of `-q` queue pairs, one in flight per queue
//! pair; the server echoes every message back on the queue pair it came in on (found by the
//! completion's queue pair number) and reposts the receive it used; the client checks each echo.
//! Both sides post with the one-request calls (`qp.post_send_one`, `srq.post_recv_one`) and wait
//! with `channel.wait().await` (feature `tokio`).
//!
//! ```text
//! cargo run --features tokio --example async_pingpong -- -d rxe0 -g 1 &             # server
//! cargo run --features tokio --example async_pingpong -- -d rxe0 -g 1 127.0.0.1     # client
//! ```
//!
//! Each queue pair is brought up from the peer's endpoint (`RcBringUp`, `RcEndpoint` of `examples/common/bring_up.rs`), which goes
//! over TCP as one text line per queue pair, `lid qpn psn gid`. Each side prints its role and
//! `N messages on Q queue pairs in S seconds, E completion events` (`server: …`, `client: …`);
//! exit status 0 on success, 1 on failure.
#[path = "common/bring_up.rs"]
#[allow(dead_code)] // each user takes what it needs
mod bring_up;

use std::error::Error;
use std::net::Ipv6Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bring_up::{RcBringUp, RcEndpoint};
use clap::Parser;
use rdma_mummy_sys::ibv_sge;
use sideway::ibverbs::address::Gid;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::async_completion_channel::AsyncCompletionChannel;
use sideway_ext::ibverbs::extension::{CompletionQueueEventExt, CompletionQueueExt, ProtectionDomainExt};
use sideway_ext::ibverbs::post_send_guard::ReliableConnection;
use sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

type Result<T, E = Box<dyn Error + Send + Sync>> = std::result::Result<T, E>;
type Qp = SharedReceiveQueuePair<ReliableConnection>;

/// Bytes per message: a queue-pair index and a sequence number, sent inline.
const MESSAGE: usize = 16;
/// Receives kept posted per queue pair.
const RECEIVES_PER_QP: usize = 2;
/// `wr_id`s of sends are tagged with this bit; receives are numbered by their buffer slot.
const SEND: u64 = 1 << 63;
/// The longest a side waits for one completion event.
const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Parser)]
#[command(about = "Echo over RC queue pairs on one SRQ, from a tokio task sleeping on completion events")]
struct Args {
    /// TCP port
    #[arg(short = 'p', long, default_value_t = 18520)]
    port: u16,
    /// RDMA device (default: the first one)
    #[arg(short = 'd', long)]
    ib_dev: Option<String>,
    /// GID index of port 1 (a RoCE v2 one on RoCE, e.g. 1 on SoftRoCE)
    #[arg(short = 'g', long, default_value_t = 0)]
    gid_idx: u8,
    /// Queue pairs
    #[arg(short = 'q', long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    num_qp: u32,
    /// Messages per queue pair
    #[arg(short = 'n', long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// Connect to the server at <SERVER>; without it, act as the server
    server: Option<String>,
}

/// A queue pair's endpoint as one text line, `lid qpn psn gid`.
fn to_line(endpoint: &RcEndpoint) -> String {
    format!(
        "{} {} {} {}\n",
        endpoint.lid(),
        endpoint.qp_number(),
        endpoint.psn(),
        Ipv6Addr::from(endpoint.gid())
    )
}

fn parse(line: &str) -> Result<RcEndpoint> {
    let mut words = line.split_whitespace();
    let mut next = || words.next().ok_or_else(|| format!("short endpoint line {line:?}"));
    let (lid, qpn, psn, gid) = (
        next()?.parse()?,
        next()?.parse()?,
        next()?.parse()?,
        next()?.parse::<Ipv6Addr>()?,
    );
    Ok(RcEndpoint::new(lid, Gid::from(gid), qpn, psn)?)
}

/// Sends our endpoints and reads the peer's, one line each.
async fn exchange(stream: TcpStream, mine: &[RcEndpoint]) -> Result<Vec<RcEndpoint>> {
    let (read, mut write) = stream.into_split();
    let text: String = mine.iter().map(to_line).collect();
    write.write_all(text.as_bytes()).await?;
    let mut lines = BufReader::new(read).lines();
    let mut theirs = Vec::with_capacity(mine.len());
    while theirs.len() < mine.len() {
        let line = lines.next_line().await?.ok_or("the peer closed the connection")?;
        theirs.push(parse(&line)?);
    }
    Ok(theirs)
}

/// A message: the queue pair's index and the sequence number, little-endian.
fn message(qp: usize, seq: u64) -> [u8; MESSAGE] {
    let mut bytes = [0; MESSAGE];
    bytes[..8].copy_from_slice(&(qp as u64).to_le_bytes());
    bytes[8..].copy_from_slice(&seq.to_le_bytes());
    bytes
}

async fn run(args: Args) -> Result<()> {
    let ctx = {
        let devices = DeviceList::new()?;
        let device = match &args.ib_dev {
            Some(name) => devices
                .iter()
                .find(|d| d.name() == *name)
                .ok_or(format!("no device {name}"))?,
            None => devices.iter().next().ok_or("no RDMA device")?,
        };
        device.open()?
    };
    let pd = ctx.alloc_pd()?;
    let num_qp = args.num_qp as usize;
    // Port 1, sending from the GID at -g (a global address: RoCE needs one).
    let mut params = RcBringUp::new(1);
    params.src_gid_index = Some(args.gid_idx);

    // One completion channel, awaited from this task; one CQ for every send and receive.
    let channel = AsyncCompletionChannel::new(ctx.create_comp_channel()?)?;
    let depth = (num_qp * (RECEIVES_PER_QP + 1)) as u32;
    let cq = ctx
        .create_cq_builder()
        .setup_cqe(depth)
        .setup_comp_channel(channel.channel(), 0)
        .build()?;

    // One SRQ for every queue pair, its receives in one registered buffer, a slot each.
    let slots = num_qp * RECEIVES_PER_QP;
    let srq = pd.create_srq_builder().setup_max_wr(slots as u32).build()?;
    let buffer = vec![0u8; slots * MESSAGE];
    // SAFETY: the buffer is not moved and outlives the region, the SRQ and the queue pairs
    // (declared before them, so dropped after them).
    let mr = unsafe { pd.reg_mr(buffer.as_ptr() as usize, buffer.len(), AccessFlags::LocalWrite)? };
    let slot_sge = |slot: usize| ibv_sge {
        addr: buffer.as_ptr() as u64 + (slot * MESSAGE) as u64,
        length: MESSAGE as u32,
        lkey: mr.lkey(),
    };
    for slot in 0..slots {
        // SAFETY: the slot lies in the registered buffer, which outlives the SRQ.
        unsafe { srq.post_recv_one(slot as u64, &[slot_sge(slot)])? };
    }
    let mut qps = (0..num_qp)
        .map(|_| {
            srq.create_qp_builder()
                .setup_send_cq(cq.clone())
                .setup_recv_cq(cq.clone())
                .setup_max_send_wr(4)
                .setup_max_inline_data(MESSAGE as u32)
                .build_rc()
        })
        .collect::<Result<Vec<Qp>, _>>()?;
    let mine = qps
        .iter()
        .map(|qp| params.endpoint(&ctx, qp))
        .collect::<Result<Vec<RcEndpoint>, _>>()?;

    let stream = match &args.server {
        Some(server) => TcpStream::connect((server.as_str(), args.port)).await?,
        None => TcpListener::bind(("0.0.0.0", args.port)).await?.accept().await?.0,
    };
    let theirs = exchange(stream, &mine).await?;
    for (qp, peer) in qps.iter_mut().zip(&theirs) {
        params.bring_up(&ctx, qp, peer)?;
    }
    let client = args.server.is_some();
    let total = num_qp as u64 * args.iters;
    let start = Instant::now();

    // The client starts one message on every queue pair.
    let mut sent = 0u64;
    if client {
        for (i, qp) in qps.iter_mut().enumerate() {
            let bytes = message(i, 0);
            qp.post_send_one(SEND | i as u64, WorkRequestFlags::Signaled, |wr| {
                wr.setup_send().setup_inline_data(&bytes)
            })?;
            sent += 1;
        }
    }

    // The completion loop: arm, drain, sleep until the next event, re-arm, drain again.
    let (mut received, mut send_completions, mut events) = (0u64, 0u64, 0u64);
    let mut wcs = [WorkCompletion::default(); 32];
    cq.req_notify_cq(false)?;
    while received < total || send_completions < sent {
        for wc in cq.poll_work_completions(&mut wcs)? {
            if !wc.is_success() {
                return Err(format!("completion {wc:?} failed").into());
            }
            if wc.wr_id() & SEND != 0 {
                send_completions += 1;
                continue;
            }
            let slot = wc.wr_id() as usize;
            let index = qps
                .iter()
                .position(|qp| qp.qp_number() == wc.qp_number())
                .ok_or("a message on an unknown queue pair")?;
            let offset = slot * MESSAGE;
            // SAFETY: the receive completed: the device has finished writing the slot.
            let bytes: [u8; MESSAGE] = unsafe { std::ptr::read_volatile(buffer[offset..].as_ptr().cast()) };
            received += 1;
            // Repost the receive that just completed.
            // SAFETY: as above.
            unsafe { srq.post_recv_one(slot as u64, &[slot_sge(slot)])? };
            let seq = u64::from_le_bytes(bytes[8..].try_into()?);
            let reply = if client {
                if bytes != message(index, seq) || wc.byte_len() as usize != MESSAGE {
                    return Err(format!("queue pair {index}: bad echo {bytes:?}").into());
                }
                (seq + 1 < args.iters).then(|| message(index, seq + 1))
            } else {
                Some(bytes)
            };
            if let Some(reply) = reply {
                qps[index].post_send_one(SEND | index as u64, WorkRequestFlags::Signaled, |wr| {
                    wr.setup_send().setup_inline_data(&reply)
                })?;
                sent += 1;
            }
        }
        if received == total && send_completions == sent {
            break;
        }
        let event = tokio::time::timeout(EVENT_TIMEOUT, channel.wait()).await??;
        events += 1;
        // Re-arm before draining: a completion that comes after the drain raises the next event.
        event.cq().req_notify_cq(false)?;
    }
    println!(
        "{}: {received} messages on {num_qp} queue pairs in {:.3} seconds, {events} completion events",
        if client { "client" } else { "server" },
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// An error with its causes (`source()`), as one line.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(source) = cause {
        text = format!("{text}: {source}");
        cause = source.source();
    }
    text
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("async_pingpong: {}", chain(&err));
            return ExitCode::FAILURE;
        },
    };
    // The whole echo runs in one spawned task; the thread is free while it waits.
    match runtime.block_on(async { tokio::spawn(run(args)).await }) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(err)) => {
            eprintln!("async_pingpong: {}", chain(&*err));
            ExitCode::FAILURE
        },
        Err(err) => {
            eprintln!("async_pingpong: the task failed: {}", chain(&err));
            ExitCode::FAILURE
        },
    }
}
