//! A simulated DC fabric: seeded and deterministic, with DC targets and
//! DC initiators that behave as the references say a ConnectX does, on which the real
//! [`DcInitiatorPool`](crate::DcInitiatorPool) runs with the API a program writes against
//! hardware: test a DC program's pool loop on any machine, in CI, with no device.
//!
//! The pool is the same: a `DcInitiatorPool<SimulatedInitiator>` posts through the guard that
//! calls the `ibv_wr_*` and `mlx5dv_wr_set_dc_addr` entries of the initiator's queue pair, and
//! polls with `ibv_poll_cq`, as on a ConnectX; here the entries are the fabric's. Code written
//! for `DcInitiatorPool<I>` with any `I:` [`PoolInitiator`](crate::PoolInitiator) runs on
//! both.
//!
//! ```
//! use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
//! use sideway::ibverbs::AccessFlags;
//! use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy};
//! use sideway_ext_dc_pool::simulation::SimulatedFabric;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let fabric = SimulatedFabric::new(7); // the seed: same seed, same run
//! let targets = (0..4)
//!     .map(|_| fabric.create_target_builder().setup_dc_key(0xd0c).build())
//!     .collect::<Result<Vec<_>, _>>()?;
//! // Each target registers the memory the WRITEs reach, as its program does (`ibv_reg_mr`).
//! let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
//! let regions = targets
//!     .iter()
//!     .map(|t| t.register_memory(0..64, access))
//!     .collect::<Result<Vec<_>, _>>()?;
//! let mut pool = fabric
//!     .create_pool_builder()
//!     .setup_initiators(2)
//!     .setup_policy(DcPoolPolicy::Static)
//!     .build()?;
//! // From here on, the code is what it is on a ConnectX.
//! let destinations: Vec<_> = targets.iter().map(|t| pool.add_destination(t.endpoint())).collect();
//! for (wr_id, (&destination, region)) in destinations.iter().zip(&regions).enumerate() {
//!     let mut guard = pool.start_post_send(destination)?;
//!     guard
//!         .construct_wr(wr_id as u64, WorkRequestFlags::none())?
//!         .setup_write(region.rkey(), region.address())
//!         .setup_inline_data(b"DC hello");
//!     guard.post()?;
//! }
//! let mut completed = 0;
//! while completed < targets.len() {
//!     pool.poll(|event| match event {
//!         DcPoolEvent::Completed { .. } => completed += 1,
//!         other => panic!("{other:?}"),
//!     })?;
//! }
//! // The bytes arrived.
//! for target in &targets {
//!     assert_eq!(target.read(0..8).as_deref(), Some(&b"DC hello"[..]));
//! }
//! assert_eq!(fabric.counters().executed, 4);
//! # Ok(())
//! # }
//! ```
//!
//! # One initiator, without a pool
//!
//! A program that posts on one [`DcInitiator`](sideway_ext::mlx5::dc::initiator::DcInitiator) runs here too:
//! [`SimulatedFabric::create_dci_builder`] makes a [`SimulatedInitiator`] (in RTS) that posts
//! through the same guard, with `setup_dc_addr` taking the address handle
//! [`SimulatedFabric::create_ah`] makes from the target's endpoint (where a device's program
//! calls [`DcEndpoint::create_ah`](sideway_ext::mlx5::dc::endpoint::DcEndpoint::create_ah)); its completions are
//! polled as [`WorkCompletion`](sideway_ext::ibverbs::work_completion::WorkCompletion)s from
//! [`SimulatedFabric::create_cq`]. Code generic over [`DcSend`](sideway_ext::mlx5::dc::initiator::DcSend) posts on
//! both. After an error it comes back as a `DcInitiator` does:
//! [`recover`](SimulatedInitiator::recover), or with streams
//! [`reset_stream`](SimulatedInitiator::reset_stream); it needs no bring-up.
//!
//! ```
//! use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
//! use sideway::ibverbs::AccessFlags;
//! use sideway_ext::ibverbs::extension::CompletionQueueExt;
//! use sideway_ext::ibverbs::work_completion::WorkCompletion;
//! use sideway_ext_dc_pool::simulation::SimulatedFabric;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let fabric = SimulatedFabric::new(7);
//! let target = fabric.create_target_builder().setup_dc_key(0xd0c).setup_receives(1, 64).build()?;
//! let region = target.register_memory(0..64, AccessFlags::LocalWrite | AccessFlags::RemoteWrite)?;
//! let cq = fabric.create_cq();
//! let mut dci = fabric.create_dci_builder().setup_max_send_wr(16).build()?;
//! // The endpoint is what a peer sends; a device's program makes the handle with
//! // `endpoint.create_ah(&pd, port, gid_index)`.
//! let endpoint = target.endpoint();
//! let ah = fabric.create_ah(&endpoint);
//! let (dct_number, dc_key) = (endpoint.dct_number(), endpoint.dc_key());
//! let mut guard = dci.start_post_send();
//! guard
//!     .construct_wr(1, WorkRequestFlags::Signaled)
//!     .setup_write(region.rkey(), region.address())
//!     .setup_dc_addr(&ah, dct_number, dc_key)
//!     .setup_inline_data(b"DC hello");
//! guard
//!     .construct_wr(2, WorkRequestFlags::Signaled)
//!     .setup_send()
//!     .setup_dc_addr(&ah, dct_number, dc_key)
//!     .setup_inline_data(b"ping");
//! guard.post()?;
//! let mut wcs = [WorkCompletion::default(); 4];
//! let mut done = Vec::new();
//! while done.len() < 2 {
//!     done.extend_from_slice(cq.poll_work_completions(&mut wcs)?); // one tick a poll
//! }
//! assert!(done.iter().all(|wc| wc.is_success() && wc.qp_number() == dci.qp_number()));
//! assert_eq!(target.read(0..8).as_deref(), Some(&b"DC hello"[..]));
//! assert_eq!(target.take_received()[0].data, b"ping");
//! # Ok(())
//! # }
//! ```
//!
//! # The fabric
//!
//! [`SimulatedFabric::new`] takes a seed; every draw (completion jitter) comes from it, so a
//! run is the same each time. Time is in ticks: every `ibv_poll_cq` (every
//! [`poll`](crate::DcInitiatorPool::poll)) is one tick, in which each initiator's streams
//! run the requests that are due; [`SimulatedFabric::advance`] runs ticks without polling.
//! A pool's grant and stall timeouts are counted in ticks too
//! ([`SimulatedPoolBuilder::setup_grant_timeout`], [`SimulatedPoolBuilder::setup_stall_timeout`]).
//! Targets ([`SimulatedFabric::create_target_builder`]) have a DCT number, a DC key, memory
//! that RDMA WRITEs and READs reach where it is registered ([`SimulatedTarget::register_memory`]),
//! and a shared receive queue of receive slots that SENDs fill; a pool ([`SimulatedFabric::create_pool_builder`]) takes their
//! [endpoints](SimulatedTarget::endpoint) as destinations. The bytes move: a WRITE's land in
//! the target's memory ([`SimulatedTarget::read`]), a SEND's in a receive
//! ([`SimulatedTarget::take_received`]), a READ's in the local buffer. Data given by
//! scatter/gather entries is read (or written) at the address the entry names when the request
//! executes, as the device's DMA does: the `unsafe` promise of `setup_sge` (a valid buffer
//! until the request completes) is what makes that sound, here as on hardware. As on hardware,
//! the entry must lie in a region of the program's memory registered on the fabric
//! ([`SimulatedFabric::register_memory`]), named by the region's lkey: a program that forgets to
//! register fails here as on a ConnectX.
//!
//! # What it does, and from where
//!
//! | behaviour | source |
//! |---|---|
//! | each DCI (without streams) or DCI stream executes its requests in posting order; streams of one DCI run concurrently | mlx5dv_create_qp(3) and mlx5dv_wr_set_dc_addr_stream(3) (DCI streams) |
//! | a DCI (or stream) serves one DC target at a time: requests to it are pipelined, a request to another target waits for the one ahead, then connects | the DC transport's half handshake (dc-transport notes); why UCX's `dc_mlx5` has DCI policies |
//! | a full send queue refuses the batch with `ENOMEM`, nothing posted; an entry frees when its completion is polled, an unsignaled request's when the next completion of its stream (or initiator) is | libmlx5 `mlx5_wq_overflow` (`ibv_wr_*` builders), `mlx5_send_wr_complete`; `mlx5_parse_cqe` (the tail moves past every entry up to the one completed) |
//! | initiators are created with `sq_sig_all` 0: a request completes on success only when posted `IBV_SEND_SIGNALED`; an error (a flush included) completes always | ibv_create_qp(3) (`sq_sig_all`), ibv_post_send(3) (`IBV_SEND_SIGNALED`); IB spec, selective signaling (a request completed in error always generates a completion; Dotan Barak, rdmamojo "Working with Unsignaled completions") |
//! | inline data longer than the initiator's `max_inline_data` fails the post with `ENOMEM` | libmlx5 `_mlx5_send_wr_set_inline_data` |
//! | a dead target (killed, or an unknown DCT number): `IBV_WC_RETRY_EXC_ERR` after the transport timeout (other statuses on request: [`SimulatedFabric::set_dead_target_statuses`]) | ibv_poll_cq(3) ("the remote side didn't send any Ack or Nack"); ConnectX on a destroyed DCT, openucx/ucx#3679 |
//! | a wrong DC key at a live target: the packet dropped, `IBV_WC_RETRY_EXC_ERR` after the transport timeout (or, with [`SimulatedFabric::set_wrong_dc_key`], `IBV_WC_REM_ACCESS_ERR` after the target's latency); unconfirmed on hardware, so both are modelled | kernel mlx5 `MLX5_EVENT_TYPE_DCT_KEY_VIOLATION` (0x1d, an event at the target, the DCT context's `dc_access_key_violation_count`), no NAK to the initiator (dc-hardware-rules, third review); ibv_poll_cq(3), remote access error |
//! | a WRITE/READ whose rkey is no region of the target's (never registered, deregistered, another node's), outside the region, or without its remote write/read access: `IBV_WC_REM_ACCESS_ERR` at the initiator | IB spec requester "remote access" error ("a protection error occurred on a remote data buffer to be read by an RDMA Read, written by an RDMA Write"); rdma-core `tests/test_mr.py` (`test_mr_rereg_access_bad_flow`: MR without remote write; `test_mw_type2_invalidate_dealloc`: a key gone) |
//! | a scatter/gather entry whose lkey is no region of the program's, or that leaves its region, or a READ's into a region without local write: `IBV_WC_LOC_PROT_ERR` (inline data is not checked; zero-length entries are skipped) | IB spec requester "local protection" error ("the data segment does not reference a memory region that is valid for the requested operation"); libmlx5 `mlx5_handle_error_cqe` (syndrome `LOCAL_PROT_ERR`); rdma-core `tests/test_mlx5_dma_memcpy.py` (insufficient local access: `IBV_WC_LOC_PROT_ERR`); ibv_post_send(3) (`IBV_SEND_INLINE`: "The L_Key will not be checked"); libmlx5 `_mlx5_send_wr_set_sge` and `set_sge_list` (no data segment for a zero length) |
//! | a message longer than the port's `max_msg_sz` (2^30, [`SimulatedFabric::set_max_message_size`]): `IBV_WC_LOC_LEN_ERR` | libmlx5 `mlx5_handle_error_cqe` (syndrome `LOCAL_LENGTH_ERR`); kernel mlx5 `max_msg_sz = 1 << log_max_msg`; IB spec, messages up to `max_msg_sz` |
//! | a registration with remote write or atomic access but no local write is refused; a region's lkey and rkey are one key | ibv_reg_mr(3) ("then IBV_ACCESS_LOCAL_WRITE must be set too"); mlx5 memory keys (an `ibv_mr`'s lkey and rkey are its mkey) |
//! | a SEND longer than a receive: `IBV_WC_REM_INV_REQ_ERR` | ibv_poll_cq(3), remote invalid request |
//! | no receive posted: receiver-not-ready NAKs, retried after the RNR timer; `IBV_WC_RNR_RETRY_EXC_ERR` after `rnr_retry` of them (7: never) | ibv_poll_cq(3); ibv_modify_qp(3) (`rnr_retry`) |
//! | an error completion puts a DCI without streams in ERR; everything behind it, and anything posted to it in ERR, completes with `IBV_WC_WR_FLUSH_ERR` | ibv_poll_cq(3), ibv_modify_qp(3) (Error state) |
//! | with streams, an error errs its stream only (the others go on; their completions come after the error's); once 2^`log_num_errored` streams are in error (the first error if it is 0) the DCI moves to ERR, some ticks later | mlx5dv_create_qp(3) (`log_num_errored`); mlx5dv_dci_stream_id_reset(3) (ERR once the streams in error reach it); rdma-core `tests/test_mlx5_dc.py`, `test_dc_stream_qp_recovery` (`1 << log_num_errored` errors, then ERR; the move is asynchronous); the rule shared with sideway-ext's unit tests' model ([`sideway_ext_dc_rules`]) |
//! | a stream reset is refused while the DCI is not in RTS, and (counted) while the stream holds requests not flushed | libmlx5 `mlx5dv_dci_stream_id_reset` (mlx5.c, `EOPNOTSUPP`; [`sideway_ext_dc_rules`], shared with the model); mlx5dv_dci_stream_id_reset(3) ("once all stream_id WR's are flushed") |
//! | recovery through RESET → INIT → RTR → RTS, each step held to the kernel's rule (the transcription of [`sideway_ext_dc_rules`], shared with sideway-ext's unit tests' model of mlx5_ib): the DCI's completions not yet polled leave the CQ and its send queue empties; on a kernel without the RESET branch, the DCI is created again with a new number | kernel `modify_dci_qp_is_ok`; libmlx5 `mlx5_modify_qp` (`mlx5_cq_clean`, `mlx5_init_qp_indices`); UCX `uct_dc_mlx5_iface_reset_dci` |
//! | a destroyed initiator's completions leave the CQ | libmlx5 `mlx5_destroy_qp` (`__mlx5_cq_clean`) |
//! | the stream setter exists only on initiators with streams | libmlx5 `mlx5_qp_fill_wr_pfns` (dc-hardware-rules) |
//! | an initiator without a pool: created in RTS, held to the DC initiator builder's rules on a device with a `max_qp_wr` of 2^15 and no atomics: `max_send_wr` 0 or over 2^15 refused, more than the send queue's basic blocks hold refused, the queue granted as libmlx5 rounds it (the requests' bytes up to a power of two); it completes into the fabric's one CQ | mlx5dv_create_qp(3); libmlx5 `mlx5_calc_send_wqe`, `mlx5_calc_sq_size` (the crate's transcription, `plan_dci`, shared with `DcInitiatorBuilder`); kernel mlx5 `mlx5_ib_query_device` (`max_qp_wr = 1 << log_max_qp_sz`) |
//! | a request routed by a simulated address handle on a device's DC initiator is refused before the provider; a simulated initiator takes a device's handle too (it routes by DCT number, as the target is named by its DCT number and key) | libmlx5 `mlx5_send_wr_set_dc_addr` (copies the handle's address vector, which only a device's handle has; the crate's guard refuses the request first, `OperationNotEnabled`) |
//!
//! The rules are the references', not the pool's: the pool is what they test. Vendor syndromes
//! (`vendor_err`) are the firmware's and documented nowhere: the fabric reports 0.
//!
//! # Faults and counters
//!
//! A test scripts faults while the pool runs: [`SimulatedTarget::kill`] (and `revive`),
//! [`SimulatedTarget::set_dc_key`] (see [`WrongDcKey`]), [`SimulatedInitiator::stall`], [`SimulatedInitiator::fail_next`]
//! (fail a stream, or an initiator without streams, with a status),
//! [`SimulatedInitiator::move_to_error`], [`SimulatedInitiator::refuse_recovery`],
//! [`SimulatedFabric::set_completion_delay`] and [`SimulatedFabric::set_completion_jitter`]
//! (delay completions; reorder them across streams and initiators, never within one),
//! [`SimulatedFabric::set_random_failures`] (seeded transient failures). It asserts
//! on [`SimulatedFabric::counters`]: requests posted, executed, failed, flushed, completions
//! polled, receiver-not-ready retries, recoveries, stream resets (and premature ones), and
//! completions a reset cleaned from the CQ.
//!
//! The same faults can wait for a tick: [`SimulatedFabric::schedule`] takes a
//! [`SimulatedFault`] (`kill`, `revive`, `set_dc_key`, `stall`, `move_to_error`, `fail_next`,
//! `refuse_recovery`) and makes it when the fabric reaches the tick, before any request runs in
//! it. What the fabric did, in order, is in its trace ([`SimulatedFabric::set_trace_capacity`],
//! [`SimulatedFabric::take_trace`]): each request posted, executed, failed (with its status)
//! or flushed, each recovery and stream reset, each scheduled fault made, with its tick, its
//! initiator's queue pair number, its DCT number and `wr_id` (the one the initiator was given:
//! through a pool, the pool's number of the request). The trace is off by default and, when
//! on, keeps the last events up to its capacity (the older ones are dropped and counted): a long
//! run does not grow it without bound.
//!
//! # Limits
//!
//! One thread: the fabric and its pools are neither `Send` nor `Sync` (a deterministic run has
//! one order of events). Atomics are not simulated (the guard refuses them: the simulated
//! initiators are created without them). Address handles carry no route: the fabric routes by
//! DCT number ([`SimulatedFabric::create_ah`] makes them for any endpoint). Registrations have no protection domains (one for the program's initiators,
//! one per target), and a target's receives are slots, not registered buffers. Every initiator
//! of a fabric completes into its one CQ. Initiators have no bring-up (they are created
//! in RTS) and no `ibv_query_qp` ([`SimulatedInitiator::is_in_error`] reads the state).
use std::cell::RefCell;
use std::rc::Rc;

use sideway::ibverbs::AccessFlags;
use sideway_ext_dc_rules::DciKernel;

use self::fabric::Fabric;
use self::faults::Schedule;
use self::memory::Node;

mod builder;
mod completion_queue;
mod dci;
mod fabric;
mod faults;
mod initiator;
mod memory;
mod request;
mod route;
mod settings;
mod target;
#[cfg(test)]
mod tests;
mod trace;
mod zeroed;

pub use self::builder::SimulatedPoolBuilder;
pub use self::completion_queue::SimulatedCompletionQueue;
pub use self::dci::{
    RecoverSimulatedInitiatorError, RecoverSimulatedInitiatorErrorKind, ResetSimulatedStreamError,
    ResetSimulatedStreamErrorKind, SimulatedAddressHandle, SimulatedDciBuilder,
};
pub use self::faults::{ScheduleFaultError, ScheduleFaultErrorKind, SimulatedFault};
pub use self::initiator::SimulatedInitiator;
pub use self::memory::{RegisterMemoryError, RegisterMemoryErrorKind, SimulatedMemoryRegion};
pub use self::route::{SimulatedDcAddress, SimulatedDcStreamAddress};
pub use self::target::{SimulatedMessage, SimulatedTarget, SimulatedTargetBuilder};
pub use self::trace::{SimulatedCounters, SimulatedEvent};

/// The fabric as its handles share it.
pub(crate) type Shared = Rc<RefCell<Fabric>>;

/// A simulated DC fabric; see the [module](self) documentation. A handle: clones are the same
/// fabric.
#[derive(Debug, Clone)]
pub struct SimulatedFabric {
    fabric: Shared,
}

impl SimulatedFabric {
    /// An empty fabric whose draws all come from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            fabric: Rc::new(RefCell::new(Fabric::new(seed))),
        }
    }

    /// Creates a DC target on it.
    pub fn create_target_builder(&self) -> SimulatedTargetBuilder {
        SimulatedTargetBuilder::new(&self.fabric)
    }

    /// Registers `[address, +length)` of the program's own memory with `access`, as `ibv_reg_mr`
    /// does for the initiators' protection domain: the scatter/gather entries of its requests
    /// (`setup_sge`) name the region's [`lkey`](SimulatedMemoryRegion::lkey) and must lie inside
    /// it (a READ's also needs local write access), or the request ends with a local protection
    /// error. Registering reads nothing: the bytes are read (written) when a request executes,
    /// under `setup_sge`'s promise. Dropping the region deregisters it.
    ///
    /// # Errors
    ///
    /// Remote write or atomic access without local write (ibv_reg_mr(3)), a range that wraps
    /// around, or no key left: [`RegisterMemoryError`].
    pub fn register_memory(
        &self, address: u64, length: usize, access: AccessFlags,
    ) -> Result<SimulatedMemoryRegion, RegisterMemoryError> {
        SimulatedMemoryRegion::register(&self.fabric, Node::Local, address, length, access)
    }

    /// Creates a pool of simulated DC initiators on it.
    pub fn create_pool_builder(&self) -> SimulatedPoolBuilder {
        SimulatedPoolBuilder::new(&self.fabric)
    }

    /// The tick it is at (one per `ibv_poll_cq` and per tick [`advance`](Self::advance)d).
    pub fn now(&self) -> u64 {
        self.fabric.borrow().now()
    }

    /// Whether each `ibv_poll_cq` is a tick (default `true`); with `false` the clock moves only
    /// by [`advance`](Self::advance), for a program that keeps its own time (many polls a tick).
    pub fn set_poll_ticks(&self, poll_ticks: bool) {
        self.fabric.borrow_mut().poll_ticks = poll_ticks;
    }

    /// Runs `ticks` ticks without polling: requests execute, their completions wait in the CQ.
    pub fn advance(&self, ticks: u64) {
        let mut fabric = self.fabric.borrow_mut();
        for _ in 0..ticks {
            fabric.step();
        }
    }

    /// What it did so far.
    pub fn counters(&self) -> SimulatedCounters {
        self.fabric.borrow().counters
    }

    /// Turns its trace on: it records what it does ([`SimulatedEvent`]s: requests posted,
    /// executed, failed, flushed; recoveries, stream resets, scheduled faults), keeping the last
    /// `events` not yet [taken](Self::take_trace) and dropping older ones (counted by
    /// [`dropped_events`](Self::dropped_events)), so a long run stays within that memory. 0 (the
    /// default) turns it off.
    pub fn set_trace_capacity(&self, events: usize) {
        self.fabric.borrow_mut().trace.set_capacity(events);
    }

    /// The events recorded since the last call, in the order they happened.
    pub fn take_trace(&self) -> Vec<SimulatedEvent> {
        self.fabric.borrow_mut().trace.take()
    }

    /// How many events the trace dropped to stay within its capacity.
    pub fn dropped_events(&self) -> u64 {
        self.fabric.borrow().trace.dropped()
    }

    /// Schedules `fault` for tick `tick`: it is made when the fabric reaches that tick, before
    /// any request runs in it (faults of one tick in the order they were scheduled); a tick
    /// already reached means the next one. Made, it is in the trace.
    ///
    /// # Errors
    ///
    /// The fault was made from a handle of another fabric: [`ScheduleFaultError`].
    pub fn schedule(&self, tick: u64, fault: SimulatedFault) -> Result<(), ScheduleFaultError> {
        Schedule::add(&self.fabric, tick, fault)
    }

    /// How many ticks a request to a target that does not answer takes to fail (default 64; at
    /// least 1).
    pub fn set_transport_timeout(&self, ticks: u64) {
        self.fabric.borrow_mut().settings.transport_timeout = ticks.max(1);
    }

    /// The initiators' receiver-not-ready handling: the RNR timer in ticks (default 2) and
    /// `rnr_retry` (default 7: retry for ever).
    pub fn set_rnr_retry(&self, timer_ticks: u64, rnr_retry: u8) {
        let mut fabric = self.fabric.borrow_mut();
        fabric.settings.rnr_timer = timer_ticks.max(1);
        fabric.settings.rnr_retry = rnr_retry;
    }

    /// A fault: every completion reaches the CQ `ticks` ticks after its request ended (default
    /// 0).
    pub fn set_completion_delay(&self, ticks: u64) {
        self.fabric.borrow_mut().settings.completion_delay = ticks;
    }

    /// A fault: each completion reaches the CQ up to `ticks` more ticks late, drawn from the
    /// seed: completions of different streams and initiators are reordered, those of one stream
    /// never (default 0).
    pub fn set_completion_jitter(&self, ticks: u64) {
        self.fabric.borrow_mut().settings.completion_jitter = ticks;
    }

    /// How many ticks after its 2^`log_num_errored`-th errored stream a DCI moves to ERR
    /// (default 3).
    pub fn set_error_delay(&self, ticks: u64) {
        self.fabric.borrow_mut().settings.error_delay = ticks;
    }

    /// The statuses a request to a dead target ends with, one drawn per request (default
    /// `IBV_WC_RETRY_EXC_ERR` alone; an empty list keeps it). No reference promises one status:
    /// make the fabric more hostile with others (e.g. `IBV_WC_REM_INV_REQ_ERR`, or a remote
    /// access error that a pool cannot tell from a wrong key).
    pub fn set_dead_target_statuses(&self, statuses: &[u32]) {
        self.fabric.borrow_mut().settings.dead_statuses = statuses.to_vec();
    }

    /// What a live target answers a request that names a DC key other than its own (default
    /// [`WrongDcKey::Dropped`]).
    pub fn set_wrong_dc_key(&self, answer: WrongDcKey) {
        self.fabric.borrow_mut().settings.wrong_key = answer;
    }

    /// The kernel has no RESET branch in `modify_dci_qp_is_ok` (Linux 4.15, the first with DC):
    /// a DCI's move to RESET is refused, and recovering one creates it again, with a new queue
    /// pair number (default `false`: a current kernel).
    pub fn set_kernel_without_dci_reset(&self, old_kernel: bool) {
        self.fabric.borrow_mut().settings.kernel = if old_kernel { DciKernel::OLD } else { DciKernel::CURRENT };
    }

    /// The port's `max_msg_sz` in bytes (default 2^30, a ConnectX's): a longer request ends with
    /// a local length error.
    pub fn set_max_message_size(&self, bytes: u64) {
        self.fabric.borrow_mut().settings.max_message_size = bytes;
    }

    /// A fault: one request in `one_in` to a live target fails (drawn from the seed), with a
    /// remote access error, or one time in four a transport retry exceeded, with what follows
    /// (the initiator or stream in error, the rest flushed); 0 (the default): none.
    pub fn set_random_failures(&self, one_in: u32) {
        self.fabric.borrow_mut().settings.random_failures = one_in;
    }
}

/// What a live DC target does with a request that names a DC key other than its own
/// ([`SimulatedFabric::set_wrong_dc_key`]). mlx5 raises `MLX5_EVENT_TYPE_DCT_KEY_VIOLATION` at
/// the target and counts it in the DCT context; whether the initiator then sees a NAK or
/// nothing is not confirmed on hardware: both are modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WrongDcKey {
    /// The packet is dropped: the initiator's transport retries run out, and the request ends
    /// with `IBV_WC_RETRY_EXC_ERR` after the transport timeout, as for a target that is not
    /// there (what the references make most likely; the default).
    #[default]
    Dropped,
    /// The target NAKs it: `IBV_WC_REM_ACCESS_ERR` after the target's latency.
    RemoteAccessError,
}

/// What the pool's unit tests drive directly (crate-private): execution by hand, and the
/// record of how each request ended.
#[cfg(test)]
impl SimulatedFabric {
    /// Ticks only move the clock; [`execute`](Self::execute) and [`fail_head`](Self::fail_head)
    /// run the requests.
    pub(crate) fn set_manual(&self, manual: bool) {
        self.fabric.borrow_mut().manual = manual;
    }

    /// Executes (or flushes) up to `count` requests at the head of `lane` of `initiator` now.
    pub(crate) fn execute(&self, initiator: usize, lane: usize, count: usize) {
        self.fabric.borrow_mut().execute(initiator, lane, count);
    }

    /// The head request of `lane` fails with `status` now (nothing if the lane flushes).
    pub(crate) fn fail_head(&self, initiator: usize, lane: usize, status: u32) {
        self.fabric.borrow_mut().fail_head(initiator, lane, status);
    }

    /// How many streams `initiator` runs (1 without streams).
    pub(crate) fn lanes(&self, initiator: usize) -> usize {
        self.fabric.borrow().lanes(initiator)
    }

    /// Whether no request is queued and the CQ is empty.
    pub(crate) fn is_idle(&self) -> bool {
        self.fabric.borrow().is_idle()
    }

    /// How requests ended since the last call: (the number in their inline data, status).
    pub(crate) fn take_journal(&self) -> Vec<(u64, u32)> {
        std::mem::take(&mut self.fabric.borrow_mut().journal)
    }
}
