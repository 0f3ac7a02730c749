//! The transition tables of the DC queue pairs: what mlx5_ib accepts for a DC initiator (its
//! `modify_dci_qp_is_ok`) and a DC target (its `mlx5_ib_modify_dct`), each transition with the
//! attributes it requires besides `IBV_QP_STATE`
//! and those it may take; and the check a DC queue pair's `modify` explains the library's
//! `EINVAL` with.
use std::io;

use sideway::ibverbs::queue_pair::ModifyQueuePairErrorKind;
use sideway::ibverbs::queue_pair::QueuePairAttributeMask as Mask;
use sideway::ibverbs::queue_pair::QueuePairState::{self, *};

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

/// Explains a refusal of `from` → `to` with `mask` by `list`: `InvalidTransition` where it lists
/// no such transition, `InvalidAttributeMask` where the mask lacks a required attribute (the
/// state included) or has one neither required nor optional.
pub(crate) fn check(
    list: &[DcTransition], from: QueuePairState, to: QueuePairState, mask: Mask,
) -> Result<(), ModifyQueuePairErrorKind> {
    let source = io::Error::from_raw_os_error(libc::EINVAL);
    let Some(&(_, _, required, optional)) = list.iter().find(|listed| (listed.0, listed.1) == (from, to)) else {
        return Err(ModifyQueuePairErrorKind::InvalidTransition {
            cur_state: from,
            next_state: to,
            source,
        });
    };
    let required = required | Mask::State;
    let (invalid, needed) = (mask & !(required | optional), required & !mask);
    if invalid.is_none() && needed.is_none() {
        return Ok(());
    }
    Err(ModifyQueuePairErrorKind::InvalidAttributeMask {
        cur_state: from,
        next_state: to,
        invalid,
        needed,
        source,
    })
}

#[cfg(test)]
mod tests;
