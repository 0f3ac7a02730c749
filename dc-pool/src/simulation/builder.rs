//! Creates a [`DcInitiatorPool`] of simulated initiators on a simulated fabric, with the
//! settings and the checks of the hardware pool's builder.
use std::time::Instant;

use super::completion_queue::SimulatedCompletionQueue;
use super::fabric::Fabric;
use super::initiator::SimulatedInitiator;
use super::Shared;
use crate::builder::{check_shape, CreateDcInitiatorPoolError};
use crate::settings::DcPoolSettings;
use crate::types::DcPoolPolicy;
use crate::DcInitiatorPool;
use sideway_ext::mlx5::dc::initiator::DciStreams;

/// Builds a `DcInitiatorPool<SimulatedInitiator>`: as
/// [`DcInitiatorPoolBuilder`](crate::builder::DcInitiatorPoolBuilder) builds one
/// of ConnectX DCIs, with the initiator's settings given here (there is no device to query) and
/// the fabric's completion queue as its send CQ. From
/// [`SimulatedFabric::create_pool_builder`](super::SimulatedFabric::create_pool_builder).
#[derive(Debug, Clone)]
pub struct SimulatedPoolBuilder {
    fabric: Shared,
    count: usize,
    policy: DcPoolPolicy,
    max_send_wr: u32,
    max_inline_data: u32,
    streams: Option<DciStreams>,
    unreachable_after: u32,
    /// In ticks.
    grant_timeout: u64,
    /// In ticks.
    stall_timeout: Option<u64>,
}

impl SimulatedPoolBuilder {
    /// The defaults of the hardware pool's builder: 8 initiators, the dedicated policy,
    /// unreachable after 3 errors; a grant timeout of 64 ticks; stalls reported after 640 ticks
    /// (ten transport timeouts, as 5 s are for the hardware pool); each initiator with a send
    /// queue of 64 requests, 64 bytes of inline data, no streams.
    pub(crate) fn new(fabric: &Shared) -> Self {
        Self {
            fabric: Shared::clone(fabric),
            count: 8,
            policy: DcPoolPolicy::Dedicated,
            max_send_wr: 64,
            max_inline_data: 64,
            streams: None,
            unreachable_after: 3,
            grant_timeout: 64,
            stall_timeout: Some(640),
        }
    }

    /// How many DC initiators (default 8).
    pub fn setup_initiators(&mut self, count: usize) -> &mut Self {
        self.count = count;
        self
    }

    /// How initiators are assigned to destinations (default dedicated).
    pub fn setup_policy(&mut self, policy: DcPoolPolicy) -> &mut Self {
        self.policy = policy;
        self
    }

    /// Each initiator's send queue (`max_send_wr`, default 64; at least 1).
    pub fn setup_max_send_wr(&mut self, max_send_wr: u32) -> &mut Self {
        self.max_send_wr = max_send_wr.max(1);
        self
    }

    /// Each initiator's inline data (`max_inline_data`, default 64): more in one request makes
    /// its post fail, as libmlx5 does.
    pub fn setup_max_inline_data(&mut self, max_inline_data: u32) -> &mut Self {
        self.max_inline_data = max_inline_data;
        self
    }

    /// DCI streams on each initiator (required by, and only allowed with, the streams policy).
    pub fn setup_dci_streams(&mut self, streams: DciStreams) -> &mut Self {
        self.streams = Some(streams);
        self
    }

    /// After how many consecutive "no such target" errors a destination is reported unreachable
    /// (default 3).
    pub fn setup_unreachable_after(&mut self, errors: u32) -> &mut Self {
        self.unreachable_after = errors;
        self
    }

    /// How many ticks of the fabric's clock a destination granted an initiator from the line
    /// may leave it unused (default 64): the pool's grant timeout
    /// ([`setup_grant_timeout`](crate::builder::DcInitiatorPoolBuilder::setup_grant_timeout)),
    /// timed by the fabric, so that a run depends on its seed alone.
    pub fn setup_grant_timeout(&mut self, ticks: u64) -> &mut Self {
        self.grant_timeout = ticks;
        self
    }

    /// After how many ticks of the fabric's clock a request that is the oldest outstanding one
    /// of its initiator (stream) is reported
    /// [`Stalled`](crate::types::DcPoolEvent::Stalled) (default 640; `None`:
    /// never): the pool's stall timeout
    /// ([`setup_stall_timeout`](crate::builder::DcInitiatorPoolBuilder::setup_stall_timeout)),
    /// timed by the fabric. A target without receives stalls a SEND for ever (`rnr_retry` 7).
    pub fn setup_stall_timeout(&mut self, ticks: Option<u64>) -> &mut Self {
        self.stall_timeout = ticks;
        self
    }

    /// Creates the initiators on the fabric and the pool over them.
    ///
    /// # Errors
    ///
    /// As the hardware pool's builder: `InvalidInitiatorCount` (0, or more than a pool
    /// numbers), `StreamsMismatch` (streams without the streams policy, or that policy without
    /// them).
    pub fn build(&self) -> Result<DcInitiatorPool<SimulatedInitiator>, CreateDcInitiatorPoolError> {
        check_shape(self.count, self.policy, self.streams.is_some())?;
        let streams = self
            .streams
            .map(|streams| (streams.log_num_concurrent, streams.log_num_errored));
        let initiators = (0..self.count)
            .map(|_| SimulatedInitiator::new(&self.fabric, self.max_send_wr, self.max_inline_data, streams))
            .collect();
        let mut settings = DcPoolSettings::default();
        settings
            .setup_policy(self.policy)
            .setup_unreachable_after(self.unreachable_after)
            // The pool's time is the fabric's.
            .setup_clock(self.fabric.borrow().clock(Instant::now()))
            .setup_grant_timeout(Fabric::span(self.grant_timeout))
            .setup_stall_timeout(self.stall_timeout.map(Fabric::span));
        DcInitiatorPool::from_initiators(initiators, Some(SimulatedCompletionQueue::new(&self.fabric)), &settings)
    }
}
