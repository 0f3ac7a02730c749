//! A sender to 1 000 DC peers through a `DcInitiatorPool`, run on the simulated DC fabric: no
//! device, on any machine. One peer's DC target dies mid-run; the program posts every request
//! (RDMA WRITEs of 8 bytes, in batches), re-posts what the pool hands back for a retry, waits for
//! `Ready` where it was refused, and checks at the end that every request was reported exactly
//! once, that the dead peer was reported unreachable, and that every completed request's bytes
//! are in its peer's memory. Exit status 1 if not.
//!
//! ```sh
//! cargo run --example dc_pool_simulated
//! cargo run --example dc_pool_simulated -- --destinations 5000 --policy streams --seed 7
//! ```
//!
//! Apart from where the pool and its targets come from (`SimulatedFabric`), `send_all` is the
//! code a program runs on a ConnectX: it takes any `DcInitiatorPool<I>`.
use std::collections::VecDeque;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::mlx5::dc::initiator::DciStreams;
use sideway_ext_dc_pool::post_guard::DcPoolPostGuard;
use sideway_ext_dc_pool::simulation::{SimulatedFabric, SimulatedInitiator, SimulatedMemoryRegion, SimulatedTarget};
use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy, DestinationId, PostToDestinationErrorKind};
use sideway_ext_dc_pool::DcInitiatorPool;

#[derive(Debug, Parser)]
#[command(about = "A DCI pool sending to many DC peers on the simulated DC fabric")]
struct Args {
    /// Peers (DC targets), one destination each.
    #[arg(short = 'n', long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(2..=100_000))]
    destinations: u64,
    /// Requests to each peer.
    #[arg(short = 'r', long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=512))]
    requests: u64,
    /// DC initiators in the pool.
    #[arg(short = 'i', long, default_value_t = 16)]
    initiators: usize,
    /// How the pool assigns initiators.
    #[arg(short = 'p', long, value_enum, default_value_t = Policy::Quota)]
    policy: Policy,
    /// The fabric's seed: the same seed, the same run.
    #[arg(short = 's', long, default_value_t = 1)]
    seed: u64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Policy {
    Dedicated,
    Quota,
    Static,
    Streams,
}

/// What happened to the requests, as the pool reported them.
#[derive(Debug, Default)]
struct Tally {
    /// Per request (`wr_id`): how many times it was reported completed or failed.
    reports: Vec<u8>,
    /// Per request: whether it was reported completed.
    succeeded: Vec<bool>,
    completed: u64,
    failed: u64,
    retried: u64,
    unreachable: Vec<DestinationId>,
    polls: u64,
}

/// One peer's requests not posted yet, and whether it waits for its `Ready`.
struct Peer {
    destination: DestinationId,
    rkey: u32,
    address: u64,
    queue: VecDeque<u64>,
    waiting: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let fabric = SimulatedFabric::new(args.seed);
    // A dead peer's requests fail after the transport timeout (here 200 ticks).
    fabric.set_transport_timeout(200);
    let targets: Vec<SimulatedTarget> = (0..args.destinations)
        .map(|t| {
            fabric
                .create_target_builder()
                .setup_dc_key(0xdc00_0000 + t)
                .setup_latency(1 + t % 4)
                .build()
        })
        .collect::<Result<_, _>>()
        .expect("DCT numbers for every peer");
    // Each peer registers the memory the requests write to, as its program does with
    // `ibv_reg_mr`: an RDMA WRITE reaches a peer only through the rkey of such a region.
    let regions: Vec<SimulatedMemoryRegion> = targets
        .iter()
        .map(|target| target.register_memory(0..4096, AccessFlags::LocalWrite | AccessFlags::RemoteWrite))
        .collect::<Result<_, _>>()
        .expect("every peer's memory registered");
    let mut builder = fabric.create_pool_builder();
    // Nothing but the dead peer fails here: one "no such target" error is enough to give up on
    // a peer (the default, 3 in a row, suits a fabric with transient errors).
    builder
        .setup_initiators(args.initiators)
        .setup_max_send_wr(64)
        .setup_unreachable_after(1);
    builder.setup_policy(match args.policy {
        Policy::Dedicated => DcPoolPolicy::Dedicated,
        Policy::Quota => DcPoolPolicy::DedicatedWithQuota { quota: 16 },
        Policy::Static => DcPoolPolicy::Static,
        Policy::Streams => DcPoolPolicy::Streams,
    });
    if let Policy::Streams = args.policy {
        builder.setup_dci_streams(DciStreams {
            log_num_concurrent: 3,
            log_num_errored: 1,
        });
    }
    let mut pool = match builder.build() {
        Ok(pool) => pool,
        Err(err) => {
            eprintln!("dc_pool_simulated: {err}: {}", err.0);
            return ExitCode::FAILURE;
        },
    };

    // The peer in the middle dies mid-run: once its first request arrived.
    let victim = targets[targets.len() / 2].clone();
    let tally = send_all(&mut pool, &targets, &regions, args.requests, || {
        if victim.is_alive() && victim.read(0..8) != Some(vec![0; 8]) {
            println!("tick {}: the peer of DCT {:#x} dies", fabric.now(), victim.dct_number());
            victim.kill();
        }
    });

    let counters = fabric.counters();
    println!(
        "{} requests to {} peers on {} initiators ({:?}): {} completed, {} failed, {} retried, in {} polls ({} ticks)",
        tally.reports.len(),
        args.destinations,
        args.initiators,
        args.policy,
        tally.completed,
        tally.failed,
        tally.retried,
        tally.polls,
        fabric.now()
    );
    println!("fabric: {counters:?}");
    let dead = targets.len() / 2;
    let peer_of = |wr_id: usize| wr_id / args.requests as usize;
    let mut ok = true;
    let mut check = |holds: bool, what: &str| {
        println!("{} {what}", if holds { "ok:  " } else { "FAIL:" });
        ok &= holds;
    };
    check(
        tally.reports.iter().all(|&n| n == 1),
        "every request reported exactly once",
    );
    check(
        tally.unreachable.iter().map(|d| d.index()).eq([dead]),
        "the dead peer, and only it, reported unreachable",
    );
    check(
        (0..tally.reports.len()).all(|wr_id| tally.succeeded[wr_id] || peer_of(wr_id) == dead),
        "every request to a live peer completed",
    );
    check(
        (0..tally.reports.len())
            .filter(|&wr_id| tally.succeeded[wr_id])
            .all(|wr_id| {
                let slot = (wr_id % args.requests as usize) * 8;
                targets[peer_of(wr_id)].read(slot..slot + 8) == Some((wr_id as u64).to_le_bytes().to_vec())
            }),
        "every completed request's bytes arrived",
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The pool loop, as on a ConnectX: every peer's requests posted in batches, retries first, a
/// refused peer waiting for its `Ready`, polls until each request was reported; `each_poll` runs
/// before every poll.
fn send_all(
    pool: &mut DcInitiatorPool<SimulatedInitiator>, targets: &[SimulatedTarget], regions: &[SimulatedMemoryRegion],
    requests: u64, mut each_poll: impl FnMut(),
) -> Tally {
    let mut peers: Vec<Peer> = targets
        .iter()
        .zip(regions)
        .enumerate()
        .map(|(t, (target, region))| Peer {
            destination: pool.add_destination(target.endpoint()),
            rkey: region.rkey(),
            address: region.address(),
            queue: (0..requests).map(|k| t as u64 * requests + k).collect(),
            waiting: false,
        })
        .collect();
    let total = targets.len() * requests as usize;
    let mut tally = Tally {
        reports: vec![0; total],
        succeeded: vec![false; total],
        ..Tally::default()
    };
    let streams = pool.policy() == DcPoolPolicy::Streams;
    let mut reported = 0;
    while reported < total {
        for peer in peers.iter_mut().filter(|peer| !peer.waiting && !peer.queue.is_empty()) {
            let posted = if streams {
                pool.start_post_send_on_stream(peer.destination)
                    .map(|g| fill(g, peer, requests))
            } else {
                pool.start_post_send(peer.destination).map(|g| fill(g, peer, requests))
            };
            match posted.map_err(|err| err.0) {
                Ok(()) => {},
                Err(PostToDestinationErrorKind::WouldBlock(_)) => peer.waiting = true,
                // Reported unreachable: what it still has to send fails here.
                Err(PostToDestinationErrorKind::Unreachable) => {
                    for wr_id in peer.queue.drain(..) {
                        tally.reports[wr_id as usize] += 1;
                        tally.failed += 1;
                        reported += 1;
                    }
                },
                Err(err) => panic!("post to {:?}: {err}", peer.destination),
            }
        }
        each_poll();
        tally.polls += 1;
        let mut retries = Vec::new();
        pool.poll(|event| match event {
            DcPoolEvent::Completed { wr_id, .. } => {
                tally.reports[wr_id as usize] += 1;
                tally.succeeded[wr_id as usize] = true;
                tally.completed += 1;
                reported += 1;
            },
            DcPoolEvent::Failed { wr_id, .. } => {
                tally.reports[wr_id as usize] += 1;
                tally.failed += 1;
                reported += 1;
            },
            DcPoolEvent::Retry { destination, wr_id } => retries.push((destination, wr_id)),
            DcPoolEvent::Ready { destination } => peers[destination.index()].waiting = false,
            DcPoolEvent::Unreachable { destination } => tally.unreachable.push(destination),
            other => panic!("unexpected {other:?}"),
        })
        .expect("poll");
        // A retry goes before the peer's newer requests.
        for (destination, wr_id) in retries.into_iter().rev() {
            tally.retried += 1;
            peers[destination.index()].queue.push_front(wr_id);
        }
    }
    tally
}

/// Fills a batch to `peer` with its next requests (as many as the batch has room for, up to 16):
/// an RDMA WRITE of the request's `wr_id` to its slot in the peer's memory.
fn fill(mut guard: DcPoolPostGuard<'_, SimulatedInitiator>, peer: &mut Peer, requests: u64) {
    let count = guard.room().min(peer.queue.len()).min(16);
    for &wr_id in peer.queue.iter().take(count) {
        let slot = (wr_id % requests) * 8;
        guard
            .construct_wr(wr_id, WorkRequestFlags::none())
            .expect("within the batch's room")
            .setup_write(peer.rkey, peer.address + slot)
            .setup_inline_data(&wr_id.to_le_bytes());
    }
    guard.post().expect("the batch is posted");
    peer.queue.drain(..count);
}
