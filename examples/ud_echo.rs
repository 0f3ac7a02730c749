//! A UD echo: four UD queue pairs receive through one shared receive queue, which the server
//! refills only when the device raises its limit event, from a tokio task that sleeps on a
//! completion channel.
//!
//! The server posts `-r` receives on the shared receive queue and arms its limit at a quarter
//! of that. It never reposts a receive as it completes: after every drain of the completion
//! queue it looks for the limit event ([`AsyncEventWaiter::try_read`]), and on it posts the
//! queue full again and re-arms the limit. It answers each datagram from the queue pair it came
//! in on, through an address handle made from the datagram's completion and GRH
//! (`create_ah_from_wc`), kept per sender. The client sends `-n` numbered datagrams on each of
//! its `-q` queue pairs to the server's queue pair of the same index, one in flight per queue
//! pair, and checks every echo; UD has no retransmission, so a datagram the server had no
//! receive for never comes back, and the client fails after a few seconds without an echo.
//!
//! ```text
//! cargo run --features tokio --example ud_echo -- -d rxe0 -g 1 &             # server
//! cargo run --features tokio --example ud_echo -- -d rxe0 -g 1 127.0.0.1     # client
//! ```
//!
//! The server's queue pairs go over TCP as one text line each, `lid qpn gid`. Both sides use the
//! same `-q` and `-n`. The server prints `server: N datagrams echoed on Q queue pairs through one
//! SRQ, L limit events, P receives posted, E completion events`, the client `client: N datagrams
//! echoed on Q queue pairs in S seconds`; exit status 0 on success, 1 on failure.
use std::collections::HashMap;
#[path = "common/bring_up.rs"]
#[allow(dead_code)] // each user takes what it needs
mod bring_up;

use std::error::Error;
use std::net::Ipv6Addr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bring_up::UdBringUp;
use clap::Parser;
use rdma_mummy_sys::ibv_sge;
use sideway::ibverbs::address::Gid;
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::address::AddressHandleAttribute;
use sideway_ext::ibverbs::address_from_work_completion::GRH_LEN;
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::ibverbs::async_completion_channel::AsyncCompletionChannel;
use sideway_ext::ibverbs::async_event::{AsyncEvent, AsyncEventElement, AsyncEventType};
use sideway_ext::ibverbs::async_event_waiter::AsyncEventWaiter;
use sideway_ext::ibverbs::extension::{
    CompletionQueueEventExt, CompletionQueueExt, DeviceContextExt, ProtectionDomainExt,
};
use sideway_ext::ibverbs::post_send_guard::UnreliableDatagram;
use sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair;
use sideway_ext::ibverbs::shared_receive_queue::{SharedReceiveQueue, SharedReceiveQueueModification};
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

type Result<T, E = Box<dyn Error + Send + Sync>> = std::result::Result<T, E>;
type Qp = SharedReceiveQueuePair<UnreliableDatagram>;

/// The Q_Key both sides' queue pairs use.
const QKEY: u32 = 0x11_1111;
/// Bytes per datagram: a queue-pair index and a sequence number, sent inline.
const MESSAGE: usize = 16;
/// A receive slot: the GRH, then the datagram.
const SLOT: usize = GRH_LEN + MESSAGE;
/// Sends a queue pair may have outstanding (one datagram in flight per client queue pair: at most
/// two echoes wait for their completion on a server queue pair).
const SEND_DEPTH: u32 = 4;
/// `wr_id`s of sends are tagged with this bit; receives are numbered by their buffer slot.
const SEND: u64 = 1 << 63;
/// The longest the client waits for an echo: past it the datagram (or its echo) was lost.
const ECHO_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Parser)]
#[command(about = "UD echo: queue pairs on one SRQ refilled on its limit event, from a tokio task")]
struct Args {
    /// TCP port
    #[arg(short = 'p', long, default_value_t = 18530)]
    port: u16,
    /// RDMA device (default: the first one)
    #[arg(short = 'd', long)]
    ib_dev: Option<String>,
    /// GID index of port 1 (a RoCE v2 one on RoCE, e.g. 1 on SoftRoCE)
    #[arg(short = 'g', long, default_value_t = 0)]
    gid_idx: u8,
    /// Queue pairs
    #[arg(short = 'q', long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    num_qp: u32,
    /// Datagrams per queue pair
    #[arg(short = 'n', long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// Receives on the shared receive queue (the limit is armed at a quarter of them)
    #[arg(short = 'r', long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(16..=4096))]
    rx_depth: u32,
    /// Connect to the server at <SERVER>; without it, act as the server
    server: Option<String>,
}

/// What a client needs to reach one of the server's queue pairs.
#[derive(Debug, Clone, Copy)]
struct Address {
    lid: u16,
    qpn: u32,
    gid: Gid,
}

impl Address {
    fn to_line(self) -> String {
        format!("{} {} {}\n", self.lid, self.qpn, Ipv6Addr::from(self.gid))
    }

    fn parse(line: &str) -> Result<Self> {
        let mut words = line.split_whitespace();
        let mut next = || words.next().ok_or_else(|| format!("short address line {line:?}"));
        let (lid, qpn, gid) = (next()?.parse()?, next()?.parse()?, next()?.parse::<Ipv6Addr>()?);
        Ok(Self {
            lid,
            qpn,
            gid: Gid::from(gid),
        })
    }
}

/// The SRQ limit: a quarter of its receives.
fn limit(rx_depth: usize) -> u32 {
    (rx_depth / 4) as u32
}

/// A datagram: the queue pair's index and the sequence number, little-endian.
fn message(qp: usize, seq: u64) -> [u8; MESSAGE] {
    let mut bytes = [0; MESSAGE];
    bytes[..8].copy_from_slice(&(qp as u64).to_le_bytes());
    bytes[8..].copy_from_slice(&seq.to_le_bytes());
    bytes
}

/// The receive slots of a shared receive queue, in one registered buffer.
struct Slots {
    // Deregistered before the memory is freed (field order).
    mr: Arc<MemoryRegion>,
    buffer: Vec<u8>,
}

impl Slots {
    fn new(pd: &Arc<ProtectionDomain>, count: usize) -> Result<Self> {
        let buffer = vec![0u8; count * SLOT];
        // SAFETY: the buffer is never reallocated and outlives the region (field order); the
        // queues that write into it are dropped before the Slots (declared after them).
        let mr = unsafe { pd.reg_mr(buffer.as_ptr() as usize, buffer.len(), AccessFlags::LocalWrite)? };
        Ok(Self { mr, buffer })
    }

    fn sge(&self, slot: usize) -> ibv_sge {
        ibv_sge {
            addr: self.buffer.as_ptr() as u64 + (slot * SLOT) as u64,
            length: SLOT as u32,
            lkey: self.mr.lkey(),
        }
    }

    /// Posts a receive for each of `slots` on `srq` in one call.
    fn post(&self, srq: &SharedReceiveQueue, slots: impl IntoIterator<Item = usize>) -> Result<()> {
        let mut guard = srq.start_post_recv();
        for slot in slots {
            let sge = self.sge(slot);
            // SAFETY: the slot lies in the registered buffer, which outlives the SRQ.
            unsafe {
                guard
                    .construct_wr(slot as u64)
                    .setup_sge(sge.lkey, sge.addr, sge.length)
            };
        }
        guard.post()?;
        Ok(())
    }

    /// The GRH and the datagram of a completed receive.
    fn read(&self, slot: usize) -> ([u8; GRH_LEN], [u8; MESSAGE]) {
        let at = slot * SLOT;
        // SAFETY: the receive completed: the device has finished writing the slot.
        unsafe {
            (
                std::ptr::read_volatile(self.buffer[at..].as_ptr().cast()),
                std::ptr::read_volatile(self.buffer[at + GRH_LEN..].as_ptr().cast()),
            )
        }
    }
}

/// What the server counted.
#[derive(Debug, Default)]
struct ServerCounts {
    echoed: u64,
    limit_events: u64,
    posted: u64,
    completion_events: u64,
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
    let rx_depth = args.rx_depth as usize;

    // One completion channel, awaited from this task; one CQ for every send and receive.
    let channel = AsyncCompletionChannel::new(ctx.create_comp_channel()?)?;
    let cq = ctx
        .create_cq_builder()
        .setup_cqe(rx_depth as u32 + SEND_DEPTH * num_qp as u32)
        .setup_comp_channel(channel.channel(), 0)
        .build()?;
    // One shared receive queue for every queue pair, full.
    let slots = Slots::new(&pd, rx_depth)?;
    let srq = pd.create_srq_builder().setup_max_wr(rx_depth as u32).build()?;
    slots.post(&srq, 0..rx_depth)?;
    let mut qps = (0..num_qp)
        .map(|_| {
            let mut qp = srq
                .create_qp_builder()
                .setup_send_cq(cq.clone())
                .setup_recv_cq(cq.clone())
                .setup_max_send_wr(SEND_DEPTH)
                .setup_max_inline_data(MESSAGE as u32)
                .build_ud()?;
            UdBringUp::new(1, QKEY).bring_up(&ctx, &mut qp)?;
            Ok(qp)
        })
        .collect::<Result<Vec<Qp>>>()?;
    let total = num_qp as u64 * args.iters;

    match &args.server {
        None => {
            let events = AsyncEventWaiter::new(ctx.async_event_reader())?;
            // Armed before any client can send.
            srq.modify(SharedReceiveQueueModification::ArmLimit(limit(rx_depth)))?;
            let gid = ctx.query_gid(1, args.gid_idx.into())?;
            let lid = ctx.query_port(1)?.lid();
            let (stream, _) = TcpListener::bind(("0.0.0.0", args.port)).await?.accept().await?;
            let (_read, mut write) = stream.into_split();
            let text: String = qps
                .iter()
                .map(|qp| {
                    Address {
                        lid,
                        qpn: qp.qp_number(),
                        gid,
                    }
                    .to_line()
                })
                .collect();
            write.write_all(text.as_bytes()).await?;
            let counts = serve(&pd, &channel, &cq, &srq, &slots, &events, &mut qps, rx_depth, total).await?;
            println!(
                "server: {} datagrams echoed on {num_qp} queue pairs through one SRQ, {} limit events, {} receives \
                 posted, {} completion events",
                counts.echoed, counts.limit_events, counts.posted, counts.completion_events
            );
        },
        Some(server) => {
            let stream = TcpStream::connect((server.as_str(), args.port)).await?;
            let mut lines = BufReader::new(stream).lines();
            let mut theirs = Vec::with_capacity(num_qp);
            while theirs.len() < num_qp {
                let line = lines.next_line().await?.ok_or("the server closed the connection")?;
                theirs.push(Address::parse(&line)?);
            }
            let start = Instant::now();
            let echoed = client(
                &pd,
                &channel,
                &cq,
                &srq,
                &slots,
                &mut qps,
                &theirs,
                args.gid_idx,
                args.iters,
            )
            .await?;
            println!(
                "client: {echoed} datagrams echoed on {num_qp} queue pairs in {:.3} seconds",
                start.elapsed().as_secs_f64()
            );
        },
    }
    Ok(())
}

/// The server's loop: drain, refill on the limit event (checked after every drain), sleep on
/// whichever comes first, a completion or an asynchronous event.
#[allow(clippy::too_many_arguments)]
async fn serve(
    pd: &Arc<ProtectionDomain>, channel: &AsyncCompletionChannel, cq: &Arc<BasicCompletionQueue>,
    srq: &Arc<SharedReceiveQueue>, slots: &Slots, events: &AsyncEventWaiter, qps: &mut [Qp], rx_depth: usize,
    total: u64,
) -> Result<ServerCounts> {
    let limit = limit(rx_depth);
    let mut counts = ServerCounts {
        posted: rx_depth as u64,
        ..ServerCounts::default()
    };
    // The slots whose receives completed, to post again on the limit event.
    let mut free: Vec<usize> = Vec::with_capacity(rx_depth);
    // One address handle per sender, by its queue pair number: one client host here. A server of
    // many hosts keys by the sender's GID too, which from_work_completion reads.
    let mut senders: HashMap<u32, Arc<AddressHandle>> = HashMap::new();
    let (mut sent, mut send_completions) = (0u64, 0u64);
    let refill = |event: AsyncEvent, free: &mut Vec<usize>, counts: &mut ServerCounts| -> Result<()> {
        if event.event_type() == AsyncEventType::SharedReceiveQueueLimitReached
            && event.element() == AsyncEventElement::SharedReceiveQueue(srq.id())
        {
            counts.limit_events += 1;
            counts.posted += free.len() as u64;
            slots.post(srq, free.drain(..))?;
            srq.modify(SharedReceiveQueueModification::ArmLimit(limit))?;
        }
        Ok(())
    };
    let mut wcs = [WorkCompletion::default(); 32];
    cq.req_notify_cq(false)?;
    loop {
        for wc in cq.poll_work_completions(&mut wcs)? {
            if !wc.is_success() {
                return Err(format!("completion {wc:?} failed").into());
            }
            if wc.wr_id() & SEND != 0 {
                send_completions += 1;
                continue;
            }
            let slot = wc.wr_id() as usize;
            let (grh, bytes) = slots.read(slot);
            free.push(slot);
            let index = qps
                .iter()
                .position(|qp| qp.qp_number() == wc.qp_number())
                .ok_or("a datagram on an unknown queue pair")?;
            let ah = match senders.get(&wc.src_qp()) {
                Some(ah) => Arc::clone(ah),
                None => {
                    let ah = pd.create_ah_from_wc(1, wc, &grh)?;
                    senders.insert(wc.src_qp(), Arc::clone(&ah));
                    ah
                },
            };
            qps[index].post_send_one(SEND | index as u64, WorkRequestFlags::Signaled, |wr| {
                wr.setup_send()
                    .setup_ud_addr(&ah, wc.src_qp(), QKEY)
                    .setup_inline_data(&bytes)
            })?;
            sent += 1;
            counts.echoed += 1;
        }
        // Every drain: under steady traffic the limit event may have fired while the completion
        // queue kept this loop busy; waiting for select! to pick it could run the SRQ empty.
        while let Some(event) = events.try_read()? {
            refill(event, &mut free, &mut counts)?;
        }
        if counts.echoed == total && send_completions == sent {
            return Ok(counts);
        }
        tokio::select! {
            event = channel.wait() => {
                counts.completion_events += 1;
                // Re-arm before draining: a completion after the drain raises the next event.
                event?.cq().req_notify_cq(false)?;
            },
            event = events.wait() => refill(event?, &mut free, &mut counts)?,
        }
    }
}

/// The client's loop: one datagram in flight per queue pair, each echo checked; its receives are
/// reposted as they complete.
#[allow(clippy::too_many_arguments)]
async fn client(
    pd: &Arc<ProtectionDomain>, channel: &AsyncCompletionChannel, cq: &Arc<BasicCompletionQueue>,
    srq: &Arc<SharedReceiveQueue>, slots: &Slots, qps: &mut [Qp], theirs: &[Address], gid_idx: u8, iters: u64,
) -> Result<u64> {
    let mut handles = Vec::with_capacity(theirs.len());
    for peer in theirs {
        let mut attr = AddressHandleAttribute::new();
        attr.setup_port(1).setup_dest_lid(peer.lid);
        if peer.gid.raw != [0; 16] {
            attr.setup_grh_dest_gid(&peer.gid)
                .setup_grh_src_gid_index(gid_idx)
                .setup_grh_hop_limit(64);
        }
        handles.push(pd.create_ah(&attr)?);
    }
    let send = |qp: &mut Qp, index: usize, seq: u64| {
        let bytes = message(index, seq);
        qp.post_send_one(SEND | index as u64, WorkRequestFlags::Signaled, |wr| {
            wr.setup_send()
                .setup_ud_addr(&handles[index], theirs[index].qpn, QKEY)
                .setup_inline_data(&bytes)
        })
    };
    for (index, qp) in qps.iter_mut().enumerate() {
        send(qp, index, 0)?;
    }
    let total = qps.len() as u64 * iters;
    let (mut echoed, mut sent, mut send_completions) = (0u64, qps.len() as u64, 0u64);
    let mut wcs = [WorkCompletion::default(); 32];
    cq.req_notify_cq(false)?;
    loop {
        for wc in cq.poll_work_completions(&mut wcs)? {
            if !wc.is_success() {
                return Err(format!("completion {wc:?} failed").into());
            }
            if wc.wr_id() & SEND != 0 {
                send_completions += 1;
                continue;
            }
            let slot = wc.wr_id() as usize;
            let (_, bytes) = slots.read(slot);
            slots.post(srq, [slot])?;
            let index = qps
                .iter()
                .position(|qp| qp.qp_number() == wc.qp_number())
                .ok_or("an echo on an unknown queue pair")?;
            let seq = u64::from_le_bytes(bytes[8..].try_into()?);
            if bytes != message(index, seq) || wc.src_qp() != theirs[index].qpn {
                return Err(format!("queue pair {index}: bad echo {bytes:?} from {:#x}", wc.src_qp()).into());
            }
            echoed += 1;
            if seq + 1 < iters {
                send(&mut qps[index], index, seq + 1)?;
                sent += 1;
            }
        }
        if echoed == total && send_completions == sent {
            return Ok(echoed);
        }
        let event = tokio::time::timeout(ECHO_TIMEOUT, channel.wait())
            .await
            .map_err(|_| format!("no echo for {ECHO_TIMEOUT:?} after {echoed} of {total}: a datagram was lost"))??;
        event.cq().req_notify_cq(false)?;
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let role = if args.server.is_some() { "client" } else { "server" };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("ud_echo {role}: {err}");
            return ExitCode::FAILURE;
        },
    };
    // The whole echo runs in one spawned task; the thread is free while it waits.
    match runtime.block_on(async { tokio::spawn(run(args)).await }) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(err)) => {
            eprintln!("ud_echo {role}: {err}");
            ExitCode::FAILURE
        },
        Err(err) => {
            eprintln!("ud_echo {role}: the task failed: {err}");
            ExitCode::FAILURE
        },
    }
}
