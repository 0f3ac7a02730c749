//! The DC tables against the kernel's rules, through the check sideway's `modify` makes.
use super::*;
use crate::ibverbs::queue_pair::{attr_mask_check, ModifyQueuePairError, ModifyQueuePairErrorKind};

const STATES: [QueuePairState; 8] = [
    Reset,
    Init,
    ReadyToReceive,
    ReadyToSend,
    SendQueueDrain,
    SendQueueError,
    Error,
    Unknown,
];

fn check(table: &QueuePairStateTable, from: QueuePairState, to: QueuePairState, mask: Mask) -> bool {
    attr_mask_check(mask, from, to, table).is_ok()
}

#[test]
fn test_dc_target_moves_only_reset_init_rtr() {
    let table = &*DC_TARGET_STATE_TABLE;
    let init = Mask::State | Mask::AccessFlags | Mask::PartitionKeyIndex | Mask::Port;
    let rtr = Mask::State | Mask::MinResponderNotReadyTimer | Mask::AddressVector | Mask::PathMtu;
    assert!(check(table, Reset, Init, init));
    assert!(check(table, Init, ReadyToReceive, rtr));
    // A missing attribute is named, and nothing else is taken.
    match attr_mask_check(init.and(Mask::AccessFlags.not()), Reset, Init, table) {
        Err(ModifyQueuePairError(ModifyQueuePairErrorKind::InvalidAttributeMask { needed, invalid, .. })) => {
            assert_eq!((needed, invalid), (Mask::AccessFlags, Mask::none()));
        },
        other => panic!("expected InvalidAttributeMask, got {other:?}"),
    }
    assert!(!check(table, Init, ReadyToReceive, rtr | Mask::MaxDestinationReadAtomic));
    // No other transition: not to RTS, RESET or ERR, not from or to Unknown.
    for from in STATES {
        for to in STATES {
            if [(Reset, Init), (Init, ReadyToReceive)].contains(&(from, to)) {
                continue;
            }
            assert!(
                matches!(
                    attr_mask_check(Mask::State, from, to, table),
                    Err(ModifyQueuePairError(ModifyQueuePairErrorKind::InvalidTransition { .. }))
                ),
                "{from:?} -> {to:?}"
            );
        }
    }
}

#[test]
fn test_dc_initiator_transitions_are_modify_dci_qp_is_ok() {
    let table = &*DC_INITIATOR_STATE_TABLE;
    // RESET -> ERR refused; any state -> RESET with the state alone; any other -> ERR.
    assert!(!check(table, Reset, Error, Mask::State));
    for from in &STATES[..7] {
        assert!(check(table, *from, Reset, Mask::State), "{from:?} -> RESET");
        assert!(!check(table, *from, Reset, Mask::State | Mask::Port), "{from:?} -> RESET");
    }
    for from in &STATES[1..7] {
        assert!(check(table, *from, Error, Mask::State), "{from:?} -> ERR");
    }
    // RESET -> INIT takes no access flags (a DC target needs them); INIT -> INIT a port.
    let init = Mask::State | Mask::PartitionKeyIndex | Mask::Port;
    assert!(check(table, Reset, Init, init));
    assert!(!check(table, Reset, Init, init | Mask::AccessFlags));
    assert!(check(table, Init, Init, Mask::State | Mask::Port));
    // INIT -> RTR needs the path MTU only; an address vector may come with it.
    assert!(check(table, Init, ReadyToReceive, Mask::State | Mask::PathMtu));
    assert!(check(
        table,
        Init,
        ReadyToReceive,
        Mask::State | Mask::PathMtu | Mask::AddressVector
    ));
    assert!(!check(
        table,
        Init,
        ReadyToReceive,
        Mask::State | Mask::PathMtu | Mask::DestinationQueuePairNumber
    ));
    // RTR -> RTS: the RC send-side set; RTS -> RTS: the minimum RNR timer.
    let rts = Mask::State
        | Mask::Timeout
        | Mask::RetryCount
        | Mask::ResponderNotReadyRetryCount
        | Mask::MaxReadAtomic
        | Mask::SendQueuePacketSequenceNumber;
    assert!(check(table, ReadyToReceive, ReadyToSend, rts));
    assert!(!check(table, ReadyToReceive, ReadyToSend, rts.and(Mask::MaxReadAtomic.not())));
    assert!(check(table, ReadyToSend, ReadyToSend, Mask::State | Mask::MinResponderNotReadyTimer));
    // Every modification names the state, even one that stays in its state.
    assert!(!check(table, ReadyToSend, ReadyToSend, Mask::MinResponderNotReadyTimer));
    assert!(!check(table, Unknown, Reset, Mask::State));
}
