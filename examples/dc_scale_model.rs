//! DC at scale: for N nodes that all talk to all, the queue pairs, queue memory and
//! connection-setup exchanges each node needs with RC (a full mesh: one RC queue pair per peer,
//! receiving on its own receive queue or through one shared receive queue) and with DC (a pool of
//! D DC initiators, one DC target and the target's shared receive queue), and the smallest N
//! from which DC needs less on each measure.
//!
//! ```sh
//! cargo run --example dc_scale_model                              # N = 16, 256, 10 000, 16 DCIs
//! cargo run --example dc_scale_model -- --nodes 64 --nodes 512 --dcis 8 --send-depth 256
//! cargo run --example dc_scale_model -- -d mlx5_0 --json          # the device's limits, as JSON
//! cargo run --features mlx5 --example dc_scale_model -- -d mlx5_0 # also its DC capabilities
//! ```
//!
//! # The model
//!
//! Queue memory is what rdma-core's mlx5 provider (`providers/mlx5`, rdma-core 24 and later; mlx5
//! is the only provider with DC) allocates for the work queues of the queue pairs this crate
//! creates: send operations listed at creation (send, write, read and atomics, with and without
//! immediate, as `SharedReceiveQueuePairBuilder::build_rc` and the DC initiator builder do), no
//! inline data, `--sge` gather/scatter entries per request.
//!
//! - A send WQE slot (`mlx5_calc_send_wqe` in `verbs.c`) holds the operation overhead (the
//!   largest of the listed operations: control 16 B + remote address 16 B + atomic 16 B = 48 B,
//!   `_sq_overhead`), the transport overhead (RC: none; DCI: the 48 B datagram segment,
//!   `struct mlx5_wqe_datagram_seg` = `struct mlx5_wqe_av` in `mlx5dv.h`, which carries the DC
//!   key, the DCT number and the destination's address) and 16 B per gather entry
//!   (`struct mlx5_wqe_data_seg`), rounded up to the 64 B basic block (`MLX5_SEND_WQE_BB`): with
//!   one entry, RC 64 B and DCI 128 B.
//! - A send queue is depth × slot rounded up to a power of two (`mlx5_calc_sq_size`).
//! - A receive queue is depth rounded up to a power of two × (16 B per scatter entry, rounded up
//!   to a power of two), at least 64 B (`mlx5_calc_rq_size`, `mlx5_calc_rcv_wqe`).
//! - A shared receive queue (`mlx5_alloc_srq_buf` in `srq.c`) has slots of 16 B (next segment) +
//!   16 B per entry, at least 32 B, rounded up to a power of two, and 2 × depth + 1 of them
//!   rounded up to a power of two (the extra half is its wait queue; only depth + 1 when the
//!   device's `max_srq_wr` + 1 cannot hold them).
//! - Each queue pair's buffer (send and receive queue together) and each SRQ buffer is rounded up
//!   to the 4096 B page (`mlx5_alloc_qp_buf` in `verbs.c`, `mlx5_alloc_buf` in `buf.c`).
//! - A DC target has no work queue of its own (its receives come from the SRQ; `create_dct` in
//!   `verbs.c` allocates no buffer).
//!
//! Not counted: completion queues (one can serve every queue pair in both designs), doorbell
//! records, and the device's own per-queue-pair context memory, which grows like the queue-pair
//! column. DC also keeps one address handle per destination it has talked to (N - 1 at most,
//! each holding a 48 B address vector that is copied into every DC work request); RC keeps the
//! address in the queue pair.
//!
//! Setup exchanges are the peer-specific address exchanges before data can flow: RC needs one
//! per peer (a queue-pair number belongs to one connection, so both sides create a queue pair
//! for the other before they can answer: N - 1 per node, N(N - 1)/2 in all), DC one publication
//! per node of its only endpoint (LID/GID, DCT number, DC key: `DcEndpoint`), which every peer
//! reads without a reply (N in all). State transitions are the `modify_qp` calls: 3 per RC queue
//! pair and per DCI (INIT, RTR, RTS), 2 for the DCT (INIT, RTR).
//!
//! # Why UCX puts the crossover much higher
//!
//! The crossovers this program prints for resources and setup exchanges are an order of
//! magnitude below UCX's switch from RC to DC. UCX's pull request
//! [openucx/ucx#10415](https://github.com/openucx/ucx/pull/10415) moved its switch from RC to DC
//! from about 60 to about 180–190 endpoints, and that is a performance estimate, the expected
//! latency per message: RC's grows with every queue pair (more queue-pair contexts for the adapter
//! to cache; the estimate adds 0.32 ns per queue pair, 1 ns before the change), DC's carries an
//! added connection handshake. Memory and setup do not enter it, and they are what this table
//! counts: DC's do not grow with N, so DC wins them within a few tens of nodes. What the table does
//! not show is what DC pays per request and on the wire:
//!
//! - the address in every request: a DC work request carries the 48 B datagram segment, so a small
//!   send is 80 B (two 64 B basic blocks) against 32 B (one) on RC: twice the bytes per BlueFlame
//!   write and per WQE fetch, and the address copied in by the CPU for every request;
//! - the connection on the wire: a DCI that changes target first connects to the new DCT (a half
//!   handshake; a full handshake adds a round trip, about 2.7 µs by that pull request's author),
//!   so traffic spread over many targets keeps paying it;
//! - DCI contention: D DCIs serve N − 1 peers and a DCI is connected to one target at a time
//!   (without DCI streams): mixing targets on one DCI reconnects it at every change, so pools keep a
//!   DCI per busy target and requests to other targets wait for one to drain; the pool's policy
//!   decides who starves (ucx #3164, #8919);
//! - reconnection: one error puts a DCI in the error state for every target it serves; it is
//!   drained and reset (RESET → INIT → RTR → RTS) before reuse.
//!
//! RC pays per peer, once: memory, queue pairs, handshakes. It then runs at full message rate until
//! its queue-pair contexts outgrow the adapter's cache. So below the memory crossover this
//! program prints RC needs less memory and is faster; from there up to UCX's switch, DC saves
//! memory and setup while RC can still deliver the higher message rate; beyond it, DC wins on
//! both counts.
//!
//! # Limits
//!
//! Without `-d`, or when the host has no RDMA device, the limits are the model's documented
//! defaults: send and receive depth 128, one entry per request, 16 DCIs, and no device limit
//! (whether N fits is not known). With `-d DEVICE` the device's limits from `ibv_query_device`
//! (sideway's `DeviceContext::query_device`: `max_qp`, `max_qp_wr`, `max_sge`, `max_srq`,
//! `max_srq_wr`, `max_srq_sge`) check the depths and entries, decide the SRQ's wait queue, and
//! say for each N whether the N - 1 RC queue pairs and the D + 1 DC queue pairs fit in
//! `max_qp`; built with `--features mlx5`, also whether the device can do DC at all
//! (`Mlx5DeviceContext::query_dc_capabilities`) and its DCI streams, which let one DCI serve
//! several destinations at once.
//!
//! Exit status: 0; 1 when the host has RDMA devices but not the named one, or it cannot be opened
//! or queried; 2 for invalid options, including depths or entries above the device's limits.
use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Parser;
use serde::Serialize;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceAttr;

/// Segment and buffer sizes of rdma-core's mlx5 provider (`providers/mlx5/mlx5dv.h`, `verbs.c`,
/// `srq.c`, `buf.c`).
mod mlx5_layout {
    /// `struct mlx5_wqe_ctrl_seg`: starts every send WQE.
    pub const CONTROL_SEGMENT: u64 = 16;
    /// `struct mlx5_wqe_raddr_seg`: remote address and key of writes, reads and atomics.
    pub const REMOTE_ADDRESS_SEGMENT: u64 = 16;
    /// `struct mlx5_wqe_atomic_seg`: the operands of an atomic.
    pub const ATOMIC_SEGMENT: u64 = 16;
    /// `struct mlx5_wqe_datagram_seg` (one `struct mlx5_wqe_av`): DC key, DCT number and the
    /// destination's address; in every DC (and UD) send WQE, right after the control segment.
    pub const DATAGRAM_SEGMENT: u64 = 48;
    /// `struct mlx5_wqe_data_seg`: one gather or scatter entry.
    pub const DATA_SEGMENT: u64 = 16;
    /// `struct mlx5_wqe_srq_next_seg`: links the slots of a shared receive queue.
    pub const SRQ_NEXT_SEGMENT: u64 = 16;
    /// The smallest SRQ slot (`mlx5_alloc_srq_buf`).
    pub const MIN_SRQ_WQE: u64 = 32;
    /// `MLX5_SEND_WQE_BB`: the send queue's basic block; send WQE slots are multiples of it, and
    /// a receive queue is at least one.
    pub const SEND_BASIC_BLOCK: u64 = 64;
    /// The page every queue buffer is rounded up to (x86-64, the common ARM64 configurations).
    pub const PAGE_SIZE: u64 = 4096;
}
use mlx5_layout::*;

/// Largest `--nodes`: a node's queue-pair numbers have 24 bits, so no node holds more queue
/// pairs than this (and byte counts stay exact in 64 bits).
const MAX_NODES: u64 = 1 << 24;
/// Largest `--dcis`.
const MAX_DCIS: u64 = 1 << 24;
/// Largest `--send-depth` / `--recv-depth` (`max_wr` is 32-bit in verbs; this bound keeps every
/// byte count exact in 64 bits).
const MAX_DEPTH: u64 = 1 << 24;
/// Largest `--sge` (devices report 30 to 32).
const MAX_SGE: u64 = 32;

/// Queue pairs, queue memory and setup exchanges per node for an RC full mesh and for DC.
#[derive(Parser)]
#[command(about)]
struct Args {
    /// Number of nodes to model (repeatable, or a comma-separated list).
    #[arg(long = "nodes", value_name = "N", value_delimiter = ',', num_args = 1..,
          default_values_t = [16u64, 256, 10_000], value_parser = clap::value_parser!(u64).range(2..=MAX_NODES))]
    nodes: Vec<u64>,
    /// DC initiators per node (the DCI pool).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=MAX_DCIS))]
    dcis: u64,
    /// Send queue depth of every RC queue pair and DCI (`max_send_wr`).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=MAX_DEPTH))]
    send_depth: u64,
    /// Receive depth: of each RC queue pair's own receive queue, and of the shared receive queue.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=MAX_DEPTH))]
    recv_depth: u64,
    /// Gather/scatter entries per send and per receive request.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=MAX_SGE))]
    sge: u64,
    /// Take the limits from this RDMA device (default: the documented defaults).
    #[arg(short = 'd', long = "ib-dev")]
    device: Option<String>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// What can go wrong, besides clap's refusals of the options themselves.
#[derive(Debug, thiserror::Error)]
enum ScaleModelError {
    /// `-d` names a device the host does not have (the host has others).
    #[error("no RDMA device named {name} (this host has: {available})")]
    NoSuchDevice { name: String, available: String },
    /// The device is there but cannot be opened.
    #[error("cannot open {name}")]
    OpenDevice {
        name: String,
        #[source]
        source: sideway::ibverbs::device::OpenDeviceError,
    },
    /// `ibv_query_device` failed.
    #[error("cannot query {name}")]
    QueryDevice {
        name: String,
        #[source]
        source: sideway::ibverbs::device_context::QueryDeviceError,
    },
    /// An option asks for more than the device can create.
    #[error("{option} {requested} is above {device}'s {limit} {max}")]
    AboveDeviceLimit {
        option: &'static str,
        requested: u64,
        device: String,
        limit: &'static str,
        max: u64,
    },
}

impl ScaleModelError {
    /// 2 for options the device cannot honour (bad input), 1 for a device that failed.
    fn exit_code(&self) -> u8 {
        match self {
            ScaleModelError::AboveDeviceLimit { .. } => 2,
            _ => 1,
        }
    }
}

/// The model's parameters.
#[derive(Debug, Clone, Copy, Serialize)]
struct Parameters {
    dcis: u64,
    send_depth: u64,
    recv_depth: u64,
    sge: u64,
    page_size: u64,
}

/// Where the limits come from, and what they are.
#[derive(Debug, Serialize)]
struct Limits {
    /// "defaults" or "device".
    source: &'static str,
    /// The device whose limits these are.
    device: Option<String>,
    /// Why the defaults were used although `-d` was given.
    note: Option<String>,
    max_qp: Option<u64>,
    max_qp_wr: Option<u64>,
    max_sge: Option<u64>,
    max_srq: Option<u64>,
    max_srq_wr: Option<u64>,
    max_srq_sge: Option<u64>,
    /// The device's DC capabilities (`--features mlx5` and a device only).
    dc: Option<DcLimits>,
    /// Why there is no DC section.
    dc_note: Option<String>,
}

/// What `Mlx5DeviceContext::query_dc_capabilities` says.
#[derive(Debug, Serialize)]
struct DcLimits {
    is_mlx5: bool,
    supported: bool,
    max_dc_rd_atom: Option<u64>,
    max_dc_init_rd_atom: Option<u64>,
    dci_streams_max_log_num_concurrent: Option<u8>,
    dci_streams_max_log_num_errored: Option<u8>,
}

impl Limits {
    fn defaults(note: Option<String>) -> Self {
        Limits {
            source: "defaults",
            device: None,
            note,
            max_qp: None,
            max_qp_wr: None,
            max_sge: None,
            max_srq: None,
            max_srq_wr: None,
            max_srq_sge: None,
            dc: None,
            dc_note: Some("no device: the DC columns model an mlx5 device".into()),
        }
    }

    fn from_device(name: &str, attr: &DeviceAttr) -> Self {
        // A negative limit from a provider means nothing usable: 0.
        let limit = |value: i32| Some(value.max(0) as u64);
        Limits {
            source: "device",
            device: Some(name.to_string()),
            note: None,
            max_qp: limit(attr.max_qp()),
            max_qp_wr: limit(attr.max_qp_wr()),
            max_sge: limit(attr.max_sge()),
            max_srq: limit(attr.max_srq()),
            max_srq_wr: limit(attr.max_srq_wr()),
            max_srq_sge: limit(attr.max_srq_sge()),
            dc: None,
            dc_note: None,
        }
    }
}

/// The per-queue sizes, in bytes, that every row is built from.
#[derive(Debug, Clone, Copy, Serialize)]
struct Layout {
    /// Bytes of one RC send WQE slot.
    rc_send_wqe_stride: u64,
    /// Bytes of one DCI send WQE slot.
    dci_send_wqe_stride: u64,
    rc_send_queue_bytes: u64,
    rc_receive_queue_bytes: u64,
    dci_send_queue_bytes: u64,
    srq_wqe_stride: u64,
    srq_slots: u64,
    srq_queue_bytes: u64,
    /// Page-rounded buffer of one RC queue pair with its own receive queue.
    rc_queue_pair_bytes: u64,
    /// Page-rounded buffer of one RC queue pair that receives through the SRQ.
    rc_srq_queue_pair_bytes: u64,
    /// Page-rounded buffer of one DCI.
    dci_bytes: u64,
    /// Page-rounded buffer of the SRQ.
    srq_bytes: u64,
    /// Bytes a posted request with one entry fills: RC send, RC write, DC send, DC write.
    posted_rc_send: u64,
    posted_rc_write: u64,
    posted_dc_send: u64,
    posted_dc_write: u64,
}

/// One design's needs per node at one N.
#[derive(Debug, Clone, Copy, Serialize)]
struct Needs {
    queue_pairs: u64,
    queue_memory_bytes: u64,
    setup_exchanges_per_node: u64,
    setup_exchanges_total: u64,
    state_transitions_per_node: u64,
    address_handles_per_node: u64,
}

/// Whether the queue pairs fit in the device's `max_qp`.
#[derive(Debug, Clone, Copy, Serialize)]
struct Fits {
    rc: bool,
    dc: bool,
}

/// One N.
#[derive(Debug, Serialize)]
struct Row {
    nodes: u64,
    rc: Needs,
    rc_srq: Needs,
    dc: Needs,
    /// `null` without a device.
    fits: Option<Fits>,
}

/// The smallest N from which DC needs strictly less, per measure.
#[derive(Debug, Serialize)]
struct Crossover {
    queue_pairs: u64,
    queue_memory_vs_rc: u64,
    queue_memory_vs_rc_srq: u64,
    setup_exchanges_per_node: u64,
    setup_exchanges_total: u64,
    state_transitions_per_node: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    parameters: Parameters,
    limits: Limits,
    layout: Layout,
    rows: Vec<Row>,
    crossover: Crossover,
    /// The largest full mesh the device's `max_qp` holds (`max_qp` + 1 nodes); `null` without
    /// a device.
    largest_rc_full_mesh: Option<u64>,
}

/// `value` rounded up to a multiple of `to`.
fn align_up(value: u64, to: u64) -> u64 {
    value.div_ceil(to) * to
}

/// The transports whose send queues the model sizes.
#[derive(Debug, Clone, Copy)]
enum Sender {
    ReliableConnection,
    DcInitiator,
}

/// Bytes of one send WQE slot with `sge` gather entries and no inline data.
fn send_wqe_stride(sender: Sender, sge: u64) -> u64 {
    // The largest listed operation: an atomic (control + remote address + atomic operands).
    let operation = (CONTROL_SEGMENT + REMOTE_ADDRESS_SEGMENT + ATOMIC_SEGMENT)
        .max(CONTROL_SEGMENT + REMOTE_ADDRESS_SEGMENT)
        .max(CONTROL_SEGMENT);
    let transport = match sender {
        Sender::ReliableConnection => 0,
        Sender::DcInitiator => DATAGRAM_SEGMENT,
    };
    align_up(operation + transport + sge * DATA_SEGMENT, SEND_BASIC_BLOCK)
}

/// Bytes of a send queue of `depth` slots of `stride` bytes.
fn send_queue_bytes(depth: u64, stride: u64) -> u64 {
    (depth * stride).next_power_of_two()
}

/// Bytes of a queue pair's own receive queue.
fn receive_queue_bytes(depth: u64, sge: u64) -> u64 {
    let stride = (sge * DATA_SEGMENT).next_power_of_two();
    (depth.next_power_of_two() * stride).max(SEND_BASIC_BLOCK)
}

/// Bytes of one SRQ slot.
fn srq_wqe_stride(sge: u64) -> u64 {
    (SRQ_NEXT_SEGMENT + sge * DATA_SEGMENT)
        .max(MIN_SRQ_WQE)
        .next_power_of_two()
}

/// Slots of an SRQ of `depth`: with the wait queue when the device holds it (always, without a
/// device).
fn srq_slots(depth: u64, max_srq_wr: Option<u64>) -> u64 {
    let with_wait_queue = 2 * depth + 1;
    let fits = max_srq_wr.is_none_or(|max| with_wait_queue <= max + 1);
    if fits {
        with_wait_queue.next_power_of_two()
    } else {
        (depth + 1).next_power_of_two()
    }
}

/// Rounded up to the page.
fn page_align(bytes: u64) -> u64 {
    align_up(bytes, PAGE_SIZE)
}

fn layout(parameters: &Parameters, limits: &Limits) -> Layout {
    let sge = parameters.sge;
    let rc_send_wqe_stride = send_wqe_stride(Sender::ReliableConnection, sge);
    let dci_send_wqe_stride = send_wqe_stride(Sender::DcInitiator, sge);
    let rc_send_queue_bytes = send_queue_bytes(parameters.send_depth, rc_send_wqe_stride);
    let rc_receive_queue_bytes = receive_queue_bytes(parameters.recv_depth, sge);
    let dci_send_queue_bytes = send_queue_bytes(parameters.send_depth, dci_send_wqe_stride);
    let srq_wqe_stride = srq_wqe_stride(sge);
    let srq_slots = srq_slots(parameters.recv_depth, limits.max_srq_wr);
    let srq_queue_bytes = srq_slots * srq_wqe_stride;
    // One entry, as posted (the slot may be larger): control, [datagram], [remote address], data.
    let posted = |transport: u64, remote: u64| align_up(CONTROL_SEGMENT + transport + remote + DATA_SEGMENT, 16);
    Layout {
        rc_send_wqe_stride,
        dci_send_wqe_stride,
        rc_send_queue_bytes,
        rc_receive_queue_bytes,
        dci_send_queue_bytes,
        srq_wqe_stride,
        srq_slots,
        srq_queue_bytes,
        rc_queue_pair_bytes: page_align(rc_send_queue_bytes + rc_receive_queue_bytes),
        rc_srq_queue_pair_bytes: page_align(rc_send_queue_bytes),
        dci_bytes: page_align(dci_send_queue_bytes),
        srq_bytes: page_align(srq_queue_bytes),
        posted_rc_send: posted(0, 0),
        posted_rc_write: posted(0, REMOTE_ADDRESS_SEGMENT),
        posted_dc_send: posted(DATAGRAM_SEGMENT, 0),
        posted_dc_write: posted(DATAGRAM_SEGMENT, REMOTE_ADDRESS_SEGMENT),
    }
}

/// Modify calls that bring one RC queue pair or one DCI to RTS.
const TRANSITIONS_TO_RTS: u64 = 3;
/// Modify calls that bring the DCT to RTR (it never goes further).
const TRANSITIONS_TO_RTR: u64 = 2;

/// An RC full mesh of `nodes`, with a receive queue per queue pair or one SRQ.
fn rc_needs(nodes: u64, layout: &Layout, shared_receive_queue: bool) -> Needs {
    let peers = nodes - 1;
    let queue_memory_bytes = if shared_receive_queue {
        peers * layout.rc_srq_queue_pair_bytes + layout.srq_bytes
    } else {
        peers * layout.rc_queue_pair_bytes
    };
    Needs {
        queue_pairs: peers,
        queue_memory_bytes,
        setup_exchanges_per_node: peers,
        setup_exchanges_total: nodes * peers / 2,
        state_transitions_per_node: TRANSITIONS_TO_RTS * peers,
        address_handles_per_node: 0,
    }
}

/// DC on `nodes`: the DCI pool, the DCT and its SRQ.
fn dc_needs(nodes: u64, dcis: u64, layout: &Layout) -> Needs {
    Needs {
        queue_pairs: dcis + 1,
        queue_memory_bytes: dcis * layout.dci_bytes + layout.srq_bytes,
        setup_exchanges_per_node: 1,
        setup_exchanges_total: nodes,
        state_transitions_per_node: TRANSITIONS_TO_RTS * dcis + TRANSITIONS_TO_RTR,
        address_handles_per_node: nodes - 1,
    }
}

/// The smallest N ≥ 2 with `(N - 1) × per_peer + rc_fixed > dc`: where a cost that grows by
/// `per_peer` with every peer passes DC's fixed cost.
fn crossover_linear(per_peer: u64, rc_fixed: u64, dc: u64) -> u64 {
    // (N - 1) × per_peer > dc - rc_fixed; per_peer is never 0 here.
    let peers = match dc.checked_sub(rc_fixed) {
        Some(gap) => gap / per_peer + 1,
        None => 1,
    };
    peers + 1
}

fn crossover(parameters: &Parameters, layout: &Layout) -> Crossover {
    let dc = dc_needs(2, parameters.dcis, layout);
    // Total exchanges: N(N - 1)/2 for RC against N for DC, i.e. N - 1 > 2.
    let setup_exchanges_total = (2..)
        .find(|&nodes: &u64| nodes * (nodes - 1) / 2 > nodes)
        .unwrap_or(u64::MAX);
    Crossover {
        queue_pairs: crossover_linear(1, 0, dc.queue_pairs),
        queue_memory_vs_rc: crossover_linear(layout.rc_queue_pair_bytes, 0, dc.queue_memory_bytes),
        queue_memory_vs_rc_srq: crossover_linear(
            layout.rc_srq_queue_pair_bytes,
            layout.srq_bytes,
            dc.queue_memory_bytes,
        ),
        setup_exchanges_per_node: crossover_linear(1, 0, dc.setup_exchanges_per_node),
        setup_exchanges_total,
        state_transitions_per_node: crossover_linear(TRANSITIONS_TO_RTS, 0, dc.state_transitions_per_node),
    }
}

fn model(parameters: Parameters, nodes: &[u64], limits: Limits) -> Report {
    let layout = layout(&parameters, &limits);
    let rows = nodes
        .iter()
        .map(|&n| {
            let rc = rc_needs(n, &layout, false);
            let dc = dc_needs(n, parameters.dcis, &layout);
            Row {
                nodes: n,
                rc,
                rc_srq: rc_needs(n, &layout, true),
                dc,
                fits: limits.max_qp.map(|max| Fits {
                    rc: rc.queue_pairs <= max,
                    dc: dc.queue_pairs <= max,
                }),
            }
        })
        .collect();
    Report {
        crossover: crossover(&parameters, &layout),
        largest_rc_full_mesh: limits.max_qp.map(|max| max + 1),
        parameters,
        limits,
        layout,
        rows,
    }
}

/// The limits: the device's when `-d` names one this host has, the defaults without `-d` or
/// when the host has no RDMA device.
fn limits(device: Option<&str>) -> Result<Limits, ScaleModelError> {
    let Some(name) = device else {
        return Ok(Limits::defaults(None));
    };
    let list = match DeviceList::new() {
        Ok(list) if !list.is_empty() => list,
        Ok(_) => return Ok(Limits::defaults(Some(format!("{name}: no RDMA device on this host")))),
        Err(err) => {
            return Ok(Limits::defaults(Some(format!(
                "{name}: no RDMA devices ({})",
                chain(&err)
            ))))
        },
    };
    let Some(found) = list.iter().find(|d| d.name() == name) else {
        let available = list.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ");
        return Err(ScaleModelError::NoSuchDevice {
            name: name.to_string(),
            available,
        });
    };
    let context = found.open().map_err(|source| ScaleModelError::OpenDevice {
        name: name.to_string(),
        source,
    })?;
    let attr = context.query_device().map_err(|source| ScaleModelError::QueryDevice {
        name: name.to_string(),
        source,
    })?;
    let mut limits = Limits::from_device(name, &attr);
    #[cfg(feature = "mlx5")]
    {
        use sideway_ext::mlx5::device_context::Mlx5DeviceContext;
        match Mlx5DeviceContext::new(context).query_dc_capabilities() {
            Ok(caps) => {
                if !caps.is_supported() {
                    limits.dc_note = Some(format!(
                        "{name} has no DC (not mlx5, or no libmlx5): the DC columns model an mlx5 device"
                    ));
                }
                let streams = caps.dci_streams();
                limits.dc = Some(DcLimits {
                    is_mlx5: caps.is_mlx5(),
                    supported: caps.is_supported(),
                    max_dc_rd_atom: caps.max_dc_rd_atom(),
                    max_dc_init_rd_atom: caps.max_dc_init_rd_atom(),
                    dci_streams_max_log_num_concurrent: streams.map(|s| s.max_log_num_concurrent),
                    dci_streams_max_log_num_errored: streams.map(|s| s.max_log_num_errored),
                });
            },
            Err(err) => limits.dc_note = Some(format!("DC capabilities of {name}: {}", chain(&err))),
        }
    }
    #[cfg(not(feature = "mlx5"))]
    {
        limits.dc_note = Some("built without the mlx5 feature: DC capabilities not queried".into());
    }
    Ok(limits)
}

/// Refuses depths and entries the device cannot create.
fn check_against_device(parameters: &Parameters, limits: &Limits) -> Result<(), ScaleModelError> {
    let Some(device) = &limits.device else {
        return Ok(());
    };
    let checks = [
        ("--send-depth", parameters.send_depth, "max_qp_wr", limits.max_qp_wr),
        ("--recv-depth", parameters.recv_depth, "max_qp_wr", limits.max_qp_wr),
        ("--recv-depth", parameters.recv_depth, "max_srq_wr", limits.max_srq_wr),
        ("--sge", parameters.sge, "max_sge", limits.max_sge),
        ("--sge", parameters.sge, "max_srq_sge", limits.max_srq_sge),
    ];
    for (option, requested, limit, max) in checks {
        if let Some(max) = max.filter(|&max| requested > max) {
            return Err(ScaleModelError::AboveDeviceLimit {
                option,
                requested,
                device: device.clone(),
                limit,
                max,
            });
        }
    }
    Ok(())
}

/// An error with its sources.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

/// 1 234 567 → "1 234 567" (thin grouping that reads the same in every locale).
fn grouped(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// Bytes in binary units: "272 KiB", "2.99 MiB".
fn bytes(value: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if value < KIB {
        format!("{value} B")
    } else if value < MIB {
        if value % KIB == 0 {
            format!("{} KiB", value / KIB)
        } else {
            format!("{:.1} KiB", value as f64 / KIB as f64)
        }
    } else if value < GIB {
        format!("{:.2} MiB", value as f64 / MIB as f64)
    } else {
        format!("{:.2} GiB", value as f64 / GIB as f64)
    }
}

fn yes_no(value: bool) -> &'static str {
    if value {
        "yes"
    } else {
        "no"
    }
}

fn print_table(report: &Report) {
    let p = &report.parameters;
    let l = &report.layout;
    let limits = &report.limits;
    match (&limits.device, &limits.note) {
        (Some(device), _) => println!(
            "limits: {device}: max_qp {}, max_qp_wr {}, max_sge {}, max_srq {}, max_srq_wr {}, max_srq_sge {}",
            shown(limits.max_qp),
            shown(limits.max_qp_wr),
            shown(limits.max_sge),
            shown(limits.max_srq),
            shown(limits.max_srq_wr),
            shown(limits.max_srq_sge)
        ),
        (None, Some(note)) => println!("limits: documented defaults ({note})"),
        (None, None) => println!("limits: documented defaults (no device given)"),
    }
    match (&limits.dc, &limits.dc_note) {
        (Some(dc), _) if dc.supported => println!(
            "DC: supported (mlx5); DCI streams: {}",
            match dc.dci_streams_max_log_num_concurrent {
                Some(log) => format!("up to {} concurrent per DCI", 1u64 << log.min(63)),
                None => "not reported".into(),
            }
        ),
        (_, Some(note)) => println!("DC: {note}"),
        _ => {},
    }
    println!(
        "model: {} DCIs, send depth {}, receive depth {}, {} SGE, mlx5 layout (rdma-core providers/mlx5), {} B pages",
        p.dcis, p.send_depth, p.recv_depth, p.sge, p.page_size
    );
    println!(
        "per queue: RC send WQE {} B, DCI send WQE {} B; RC QP {} ({} SQ + {} RQ), RC QP on the SRQ {}, DCI {}, SRQ {} ({} x {} B)",
        l.rc_send_wqe_stride,
        l.dci_send_wqe_stride,
        bytes(l.rc_queue_pair_bytes),
        bytes(l.rc_send_queue_bytes),
        bytes(l.rc_receive_queue_bytes),
        bytes(l.rc_srq_queue_pair_bytes),
        bytes(l.dci_bytes),
        bytes(l.srq_bytes),
        l.srq_slots,
        l.srq_wqe_stride
    );
    println!(
        "posted, one entry: RC send {} B, RC write {} B, DC send {} B, DC write {} B",
        l.posted_rc_send, l.posted_rc_write, l.posted_dc_send, l.posted_dc_write
    );
    println!();
    println!(
        "| N | QPs per node, RC | QPs per node, DC | queue memory per node, RC | RC with an SRQ | DC | setup exchanges per node, RC | DC | setup exchanges in all, RC | DC |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &report.rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            grouped(row.nodes),
            grouped(row.rc.queue_pairs),
            grouped(row.dc.queue_pairs),
            bytes(row.rc.queue_memory_bytes),
            bytes(row.rc_srq.queue_memory_bytes),
            bytes(row.dc.queue_memory_bytes),
            grouped(row.rc.setup_exchanges_per_node),
            grouped(row.dc.setup_exchanges_per_node),
            grouped(row.rc.setup_exchanges_total),
            grouped(row.dc.setup_exchanges_total),
        );
    }
    println!();
    let c = &report.crossover;
    println!("crossover (the smallest N from which DC needs less):");
    println!("  queue pairs per node:           N = {}", c.queue_pairs);
    println!(
        "  queue memory per node:          N = {} against RC, N = {} against RC with an SRQ",
        c.queue_memory_vs_rc, c.queue_memory_vs_rc_srq
    );
    println!("  setup exchanges per node:       N = {}", c.setup_exchanges_per_node);
    println!("  setup exchanges in all:         N = {}", c.setup_exchanges_total);
    println!("  state transitions per node:     N = {}", c.state_transitions_per_node);
    if let (Some(device), Some(max_qp), Some(largest)) = (&limits.device, limits.max_qp, report.largest_rc_full_mesh) {
        println!();
        println!(
            "on {device} (max_qp {max_qp}): an RC full mesh fits up to N = {}",
            grouped(largest)
        );
        for row in &report.rows {
            if let Some(fits) = row.fits {
                println!(
                    "  N = {}: RC {} queue pairs fit: {}; DC {} queue pairs fit: {}",
                    grouped(row.nodes),
                    grouped(row.rc.queue_pairs),
                    yes_no(fits.rc),
                    grouped(row.dc.queue_pairs),
                    yes_no(fits.dc)
                );
            }
        }
    }
}

/// A limit for the table: the number, or "not reported".
fn shown(value: Option<u64>) -> String {
    value.map_or_else(|| "not reported".into(), |v| v.to_string())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let parameters = Parameters {
        dcis: args.dcis,
        send_depth: args.send_depth,
        recv_depth: args.recv_depth,
        sge: args.sge,
        page_size: PAGE_SIZE,
    };
    let limits = match limits(args.device.as_deref()) {
        Ok(limits) => limits,
        Err(err) => {
            eprintln!("dc_scale_model: {}", chain(&err));
            return ExitCode::from(err.exit_code());
        },
    };
    if let Some(note) = &limits.note {
        eprintln!("dc_scale_model: {note}; using the documented defaults");
    }
    if let Err(err) = check_against_device(&parameters, &limits) {
        eprintln!("dc_scale_model: {}", chain(&err));
        return ExitCode::from(err.exit_code());
    }
    let report = model(parameters, &args.nodes, limits);
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(err) => {
                eprintln!("dc_scale_model: cannot print JSON: {}", chain(&err));
                return ExitCode::FAILURE;
            },
        }
    } else {
        print_table(&report);
    }
    ExitCode::SUCCESS
}
