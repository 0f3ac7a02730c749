//! What the simulated fabric did: its counters, and its trace of events (off by default,
//! bounded when on) for a test that checks what happened, in order.
use std::collections::VecDeque;

use super::faults::SimulatedFault;
use super::request::{FLUSH, SUCCESS};

/// What the simulated fabric did, for a test to assert on; from
/// [`SimulatedFabric::counters`](super::SimulatedFabric::counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SimulatedCounters {
    /// Requests the initiators took (`ibv_wr_complete` returned 0).
    pub posted: u64,
    /// Requests that executed at their target (a success completion).
    pub executed: u64,
    /// Requests that ended with an error completion other than a flush.
    pub failed: u64,
    /// Requests flushed (`IBV_WC_WR_FLUSH_ERR`): behind an error, or on an initiator in ERR.
    pub flushed: u64,
    /// Completions handed to the program by `ibv_poll_cq` (what the pool reports from).
    pub polled: u64,
    /// Receiver-not-ready retries: a SEND (or WRITE with immediate) found no receive posted at
    /// its target and was tried again after the RNR timer.
    pub rnr_retries: u64,
    /// Initiators brought back through RESET.
    pub recoveries: u64,
    /// Initiators recovered by being created again, with a new queue pair number (a kernel that
    /// refuses a DCI's move to RESET).
    pub rebuilds: u64,
    /// DCI streams reset.
    pub stream_resets: u64,
    /// Stream resets refused because the stream still held requests not flushed (the man page:
    /// reset once they are); a pool that does this has a bug.
    pub premature_stream_resets: u64,
    /// Completions a move to RESET (or a destruction) removed from the CQ before they were
    /// polled (libmlx5's `mlx5_cq_clean`): requests a program never hears of.
    pub cleaned_completions: u64,
}

/// One thing the fabric did, at a tick; from
/// [`SimulatedFabric::take_trace`](super::SimulatedFabric::take_trace). Initiators are named by
/// their queue pair number (what their completions carry), targets by DCT number.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimulatedEvent {
    /// A request joined an initiator's send queue (`ibv_wr_complete` returned 0).
    Posted {
        /// The tick.
        tick: u64,
        /// The initiator's queue pair number.
        qp_number: u32,
        /// The DCT number the request is addressed to.
        dct_number: u32,
        /// The request's `wr_id`.
        wr_id: u64,
    },
    /// A request executed at its target: its completion is a success.
    Executed {
        /// The tick.
        tick: u64,
        /// The initiator's queue pair number.
        qp_number: u32,
        /// The DCT number the request is addressed to.
        dct_number: u32,
        /// The request's `wr_id`.
        wr_id: u64,
    },
    /// A request ended with an error completion other than a flush.
    Failed {
        /// The tick.
        tick: u64,
        /// The initiator's queue pair number.
        qp_number: u32,
        /// The DCT number the request is addressed to.
        dct_number: u32,
        /// The request's `wr_id`.
        wr_id: u64,
        /// Its completion's status (an `ibv_wc_status`).
        status: u32,
    },
    /// A request was flushed (`IBV_WC_WR_FLUSH_ERR`): behind an error, or on an initiator in
    /// ERR.
    Flushed {
        /// The tick.
        tick: u64,
        /// The initiator's queue pair number.
        qp_number: u32,
        /// The DCT number the request is addressed to.
        dct_number: u32,
        /// The request's `wr_id`.
        wr_id: u64,
    },
    /// An initiator was brought back to RTS.
    Recovered {
        /// The tick.
        tick: u64,
        /// Its queue pair number before.
        qp_number: u32,
        /// Its new number, when it was created again (a kernel without the DCI's RESET).
        rebuilt_as: Option<u32>,
    },
    /// A DCI stream was reset.
    StreamReset {
        /// The tick.
        tick: u64,
        /// The initiator's queue pair number.
        qp_number: u32,
        /// The stream.
        stream: u16,
    },
    /// A [scheduled](super::SimulatedFabric::schedule) fault took effect.
    Fault {
        /// The tick.
        tick: u64,
        /// The fault.
        fault: SimulatedFault,
    },
}

impl SimulatedEvent {
    /// How a request ended, by its completion's status.
    pub(crate) fn ended(tick: u64, qp_number: u32, dct_number: u32, wr_id: u64, status: u32) -> Self {
        match status {
            SUCCESS => Self::Executed {
                tick,
                qp_number,
                dct_number,
                wr_id,
            },
            FLUSH => Self::Flushed {
                tick,
                qp_number,
                dct_number,
                wr_id,
            },
            status => Self::Failed {
                tick,
                qp_number,
                dct_number,
                wr_id,
                status,
            },
        }
    }
}

/// The trace: the last `capacity` events not yet taken (none while `capacity` is 0, the
/// default), and how many older ones were dropped to stay within it.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    events: VecDeque<SimulatedEvent>,
    capacity: usize,
    dropped: u64,
}

impl Trace {
    /// Records the event `make` makes, if the trace is on.
    pub(crate) fn record(&mut self, make: impl FnOnce() -> SimulatedEvent) {
        if self.capacity == 0 {
            return;
        }
        if self.events.len() >= self.capacity {
            self.events.pop_front();
            self.dropped += 1;
        }
        self.events.push_back(make());
    }

    /// Keeps at most `capacity` events (0: none, the trace off), the oldest dropped first.
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        while self.events.len() > capacity {
            self.events.pop_front();
            self.dropped += 1;
        }
    }

    /// The events recorded since the last call, oldest first.
    pub(crate) fn take(&mut self) -> Vec<SimulatedEvent> {
        self.events.drain(..).collect()
    }

    /// How many events were dropped to keep within the capacity.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }
}
