//! The transition tables of the DC queue pairs: what mlx5_ib accepts for a DC initiator (its
//! `modify_dci_qp_is_ok`) and a DC target (its `mlx5_ib_modify_dct`), each transition with the
//! attributes it requires besides `IBV_QP_STATE`
//! and those it may take. From the lists, the tables a DC queue pair's `modify` checks a
//! transition and its attribute mask against.
use sideway::ibverbs::queue_pair::QueuePairAttributeMask as Mask;
use sideway::ibverbs::queue_pair::QueuePairState::{self, *};

use crate::ibverbs::queue_pair::transition::{Transition, TransitionTable};

/// A transition of a DC queue pair: from, to, the attributes it requires besides the state, and
/// those it may take.
pub(crate) type DcTransition = (QueuePairState, QueuePairState, Mask, Mask);

/// A move to RESET or ERR: the state alone, neither required nor optional attribute
/// (`modify_dci_qp_is_ok`: `is_valid_mask(attr_mask, IB_QP_STATE, 0)`).
const fn teardown(from: QueuePairState, to: QueuePairState) -> DcTransition {
    (from, to, Mask::none(), Mask::none())
}

/// A DC initiator (DCI), as current mlx5_ib's `modify_dci_qp_is_ok` (an address vector at
/// INIT → RTR from Linux v5.0 on; any state → RESET since the RESET branch was added).
pub(crate) const DC_INITIATOR_TRANSITIONS: [DcTransition; 18] = [
    (Reset, Init, Mask::PartitionKeyIndex.or(Mask::Port), Mask::none()),
    (Init, Init, Mask::none(), Mask::PartitionKeyIndex.or(Mask::Port)),
    (
        Init,
        ReadyToReceive,
        Mask::PathMtu,
        Mask::PartitionKeyIndex.or(Mask::AddressVector),
    ),
    (
        ReadyToReceive,
        ReadyToSend,
        Mask::Timeout
            .or(Mask::RetryCount)
            .or(Mask::ResponderNotReadyRetryCount)
            .or(Mask::MaxReadAtomic)
            .or(Mask::SendQueuePacketSequenceNumber),
        Mask::MinResponderNotReadyTimer,
    ),
    (ReadyToSend, ReadyToSend, Mask::none(), Mask::MinResponderNotReadyTimer),
    teardown(Reset, Reset),
    teardown(Init, Reset),
    teardown(ReadyToReceive, Reset),
    teardown(ReadyToSend, Reset),
    teardown(SendQueueDrain, Reset),
    teardown(SendQueueError, Reset),
    teardown(Error, Reset),
    // Not from RESET (`cur_state != IB_QPS_RESET && new_state == IB_QPS_ERR`).
    teardown(Init, Error),
    teardown(ReadyToReceive, Error),
    teardown(ReadyToSend, Error),
    teardown(SendQueueDrain, Error),
    teardown(SendQueueError, Error),
    teardown(Error, Error),
];

/// A DC target (DCT), as mlx5_ib's `mlx5_ib_modify_dct`: RESET → INIT → RTR and nothing else; it
/// is torn down by `ibv_destroy_qp` (dropping it), never by a move to RESET or ERR.
pub(crate) const DC_TARGET_TRANSITIONS: [DcTransition; 2] = [
    (
        Reset,
        Init,
        Mask::AccessFlags.or(Mask::PartitionKeyIndex).or(Mask::Port),
        Mask::none(),
    ),
    (
        Init,
        ReadyToReceive,
        Mask::MinResponderNotReadyTimer
            .or(Mask::AddressVector)
            .or(Mask::PathMtu),
        Mask::none(),
    ),
];

// The tables, as this crate's queue-pair core checks them before `ibv_modify_qp`.

/// The DC initiator's table, [`DC_INITIATOR_TRANSITIONS`].
pub(crate) static DC_INITIATOR_STATE_TABLE: TransitionTable = dc_table(&DC_INITIATOR_ROWS);
static DC_INITIATOR_ROWS: [Transition; 18] = rows(DC_INITIATOR_TRANSITIONS);

/// The DC target's table, [`DC_TARGET_TRANSITIONS`].
pub(crate) static DC_TARGET_STATE_TABLE: TransitionTable = dc_table(&DC_TARGET_ROWS);
static DC_TARGET_ROWS: [Transition; 2] = rows(DC_TARGET_TRANSITIONS);

/// A table of DC rules: only the listed transitions exist, and each needs `IBV_QP_STATE`.
const fn dc_table(transitions: &'static [Transition]) -> TransitionTable {
    TransitionTable {
        any_to_reset_or_error: false,
        state_always_required: true,
        transitions,
    }
}

/// The transitions of a list, their masks as `ibv_qp_attr_mask` bits.
const fn rows<const N: usize>(list: [DcTransition; N]) -> [Transition; N] {
    let mut rows = [Transition {
        from: Reset,
        to: Reset,
        required: 0,
        optional: 0,
    }; N];
    let mut i = 0;
    while i < N {
        let (from, to, required, optional) = list[i];
        rows[i] = Transition {
            from,
            to,
            required: required.bits(),
            optional: optional.bits(),
        };
        i += 1;
    }
    rows
}

#[cfg(test)]
mod tests;
