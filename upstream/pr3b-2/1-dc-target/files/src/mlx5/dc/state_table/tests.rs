//! The DC tables against the kernel's rules, through the check a DC queue pair's `modify` makes.
use super::*;

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

fn takes(list: &[DcTransition], from: QueuePairState, to: QueuePairState, mask: Mask) -> bool {
    check(list, from, to, mask).is_ok()
}

#[test]
fn test_dc_target_moves_only_reset_init_rtr() {
    let table = &DC_TARGET_TRANSITIONS[..];
    let init = Mask::State | Mask::AccessFlags | Mask::PartitionKeyIndex | Mask::Port;
    let rtr = Mask::State | Mask::MinResponderNotReadyTimer | Mask::AddressVector | Mask::PathMtu;
    assert!(takes(table, Reset, Init, init));
    assert!(takes(table, Init, ReadyToReceive, rtr));
    // A missing attribute is named, and nothing else is taken.
    match check(table, Reset, Init, init.and(Mask::AccessFlags.not())) {
        Err(ModifyQueuePairErrorKind::InvalidAttributeMask { needed, invalid, .. }) => {
            assert_eq!((needed, invalid), (Mask::AccessFlags, Mask::none()));
        },
        other => panic!("expected InvalidAttributeMask, got {other:?}"),
    }
    assert!(!takes(table, Init, ReadyToReceive, rtr | Mask::MaxDestinationReadAtomic));
    // No other transition: not to RTS, RESET or ERR, not from or to Unknown.
    for from in STATES {
        for to in STATES {
            if [(Reset, Init), (Init, ReadyToReceive)].contains(&(from, to)) {
                continue;
            }
            assert!(
                matches!(
                    check(table, from, to, Mask::State),
                    Err(ModifyQueuePairErrorKind::InvalidTransition { .. })
                ),
                "{from:?} -> {to:?}"
            );
        }
    }
}

#[test]
fn test_dc_initiator_transitions_are_modify_dci_qp_is_ok() {
    let table = &DC_INITIATOR_TRANSITIONS[..];
    // RESET -> ERR refused; any state -> RESET with the state alone; any other -> ERR.
    assert!(!takes(table, Reset, Error, Mask::State));
    for from in &STATES[..7] {
        assert!(takes(table, *from, Reset, Mask::State), "{from:?} -> RESET");
        assert!(!takes(table, *from, Reset, Mask::State | Mask::Port), "{from:?} -> RESET");
    }
    for from in &STATES[1..7] {
        assert!(takes(table, *from, Error, Mask::State), "{from:?} -> ERR");
    }
    // RESET -> INIT takes no access flags (a DC target needs them); INIT -> INIT a port.
    let init = Mask::State | Mask::PartitionKeyIndex | Mask::Port;
    assert!(takes(table, Reset, Init, init));
    assert!(!takes(table, Reset, Init, init | Mask::AccessFlags));
    assert!(takes(table, Init, Init, Mask::State | Mask::Port));
    // INIT -> RTR needs the path MTU only; an address vector may come with it.
    assert!(takes(table, Init, ReadyToReceive, Mask::State | Mask::PathMtu));
    assert!(takes(
        table,
        Init,
        ReadyToReceive,
        Mask::State | Mask::PathMtu | Mask::AddressVector
    ));
    assert!(!takes(
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
    assert!(takes(table, ReadyToReceive, ReadyToSend, rts));
    assert!(!takes(table, ReadyToReceive, ReadyToSend, rts.and(Mask::MaxReadAtomic.not())));
    assert!(takes(table, ReadyToSend, ReadyToSend, Mask::State | Mask::MinResponderNotReadyTimer));
    // Every modification names the state, even one that stays in its state.
    assert!(!takes(table, ReadyToSend, ReadyToSend, Mask::MinResponderNotReadyTimer));
    assert!(!takes(table, Unknown, Reset, Mask::State));
}
