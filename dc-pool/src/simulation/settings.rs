//! The simulated fabric's settings (its timings, faults and limits, set through
//! `SimulatedFabric`) and its seeded generator.
use super::request::{RETRY_EXC, RNR_RETRY_INFINITE};
use sideway::ibverbs::queue_pair::QueuePairState;
use sideway_ext::mlx5::dc::initiator::DcInitiator;
use sideway_ext_dc_rules::{self as rules, DciKernel};

/// A ConnectX port's `max_msg_sz`, 1 GiB: kernel mlx5 reports `1 << log_max_msg`, 30 on
/// ConnectX-4 and later (`ibv_devinfo -v`: `max_msg_sz: 0x40000000`).
const MAX_MESSAGE_SIZE: u64 = 1 << 30;
/// The fabric's settings, in ticks (one tick per `ibv_poll_cq`).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// How long a request to a target that does not answer takes to fail (the transport
    /// timeout times the retry count).
    pub(crate) transport_timeout: u64,
    /// How long a receiver-not-ready NAK holds a request before it is tried again.
    pub(crate) rnr_timer: u64,
    /// The initiators' `rnr_retry` (7: for ever).
    pub(crate) rnr_retry: u8,
    /// Ticks between a request's end and its completion in the CQ.
    pub(crate) completion_delay: u64,
    /// Up to this many more ticks, drawn per completion: completions of different streams (and
    /// initiators) are reordered; those of one stream never are.
    pub(crate) completion_jitter: u64,
    /// Ticks between a DCI's 2^`log_num_errored`-th errored stream and its move to ERR.
    pub(crate) error_delay: u64,
    /// The statuses a request to a dead target ends with, one drawn per request.
    pub(crate) dead_statuses: Vec<u32>,
    /// One request to a live target in this many fails (0: none), drawn per request.
    pub(crate) random_failures: u32,
    /// The kernel's `modify_dci_qp_is_ok`.
    pub(crate) kernel: DciKernel,
    /// The port's `max_msg_sz`: a longer request fails with a local length error.
    pub(crate) max_message_size: u64,
    /// What a live target does with a request naming another DC key.
    pub(crate) wrong_key: super::WrongDcKey,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            transport_timeout: 64,
            rnr_timer: 2,
            rnr_retry: RNR_RETRY_INFINITE,
            completion_delay: 0,
            completion_jitter: 0,
            error_delay: 3,
            dead_statuses: vec![RETRY_EXC],
            random_failures: 0,
            kernel: DciKernel::CURRENT,
            max_message_size: MAX_MESSAGE_SIZE,
            wrong_key: super::WrongDcKey::Dropped,
        }
    }
}

/// SplitMix64: a small seeded generator, so that a run depends on its seed alone.
#[derive(Debug, Clone)]
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..=max`.
    pub(crate) fn up_to(&mut self, max: u64) -> u64 {
        if max == 0 {
            0
        } else {
            let draw = self.next();
            max.checked_add(1).map_or(draw, |range| draw % range)
        }
    }

    /// One of `choices`.
    pub(crate) fn pick(&mut self, choices: &[u32]) -> Option<u32> {
        let last = choices.len().checked_sub(1)?;
        choices.get(self.up_to(last as u64) as usize).copied()
    }
}

/// Whether the kernel takes a DCI from `from` to `to` with the attributes the DC initiator's
/// transition table requires for it ([`DcInitiator::required_attributes`]) and `IBV_QP_STATE`,
/// by the reference rules' `modify_dci_qp_is_ok`: the fabric's recovery.
pub(crate) fn dci_step_is_ok(from: QueuePairState, to: QueuePairState, kernel: DciKernel) -> bool {
    let state = rdma_mummy_sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32;
    DcInitiator::required_attributes(from, to)
        .is_some_and(|required| rules::modify_dci_qp_is_ok(from, to, required | state, kernel))
}
