//! The kernel's named DC transitions in the tables. Every state pair and attribute mask is held
//! to the device's verdict (softmlx5, which keeps mlx5_ib's rules) in tests/test_dc_device.rs;
//! softmlx5/tests/c/dc_rules.c holds softmlx5 to mlx5_ib's two functions.
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{ModifyQueuePairErrorKind, QueuePairState};
use sideway::ibverbs::AccessFlags;

use super::*;
use crate::ibverbs::queue_pair::QueuePairAttribute;
use crate::test_support::rts_attr;

/// Every state a DC queue pair is asked to move from.
const STATES: [QueuePairState; 5] = [
    QueuePairState::Reset,
    QueuePairState::Init,
    QueuePairState::ReadyToReceive,
    QueuePairState::ReadyToSend,
    QueuePairState::Error,
];

/// What `list` says of `attr` (which names its state) from `from`.
fn verdict(
    list: &[DcTransition], from: QueuePairState, attr: &QueuePairAttribute,
) -> Result<(), ModifyQueuePairErrorKind> {
    check(list, from, attr.state(), attr.attr_mask)
}

#[test]
fn the_kernels_named_dc_transitions_hold() {
    let (initiator, target) = (&DC_INITIATOR_TRANSITIONS[..], &DC_TARGET_TRANSITIONS[..]);
    // A DCT goes RESET -> INIT -> RTR and nowhere else: not to RESET, not to ERR.
    let mut reset = QueuePairAttribute::new();
    reset.setup_state(QueuePairState::Reset);
    let mut error = QueuePairAttribute::new();
    error.setup_state(QueuePairState::Error);
    for from in STATES {
        for attr in [&reset, &error] {
            assert!(matches!(
                verdict(target, from, attr),
                Err(ModifyQueuePairErrorKind::InvalidTransition { .. })
            ));
        }
    }
    // A DCI: RESET -> ERR refused, any state -> RESET allowed, INIT -> INIT with PKEY|PORT.
    assert!(verdict(initiator, QueuePairState::Reset, &error).is_err());
    assert!(verdict(initiator, QueuePairState::ReadyToSend, &error).is_ok());
    for from in STATES {
        assert!(verdict(initiator, from, &reset).is_ok(), "{from:?} -> RESET");
    }
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init).setup_port(2);
    assert!(verdict(initiator, QueuePairState::Init, &init).is_ok());
    // DCI INIT -> RTR needs no address vector (each request names its destination); the
    // current kernel takes one (a service level, a LAG port), older ones refuse it.
    let mut rtr = QueuePairAttribute::new();
    rtr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(Mtu::Mtu1024);
    assert!(verdict(initiator, QueuePairState::Init, &rtr).is_ok());
    assert!(verdict(target, QueuePairState::Init, &rtr).is_err());
    let mut with_av = rtr.clone();
    let mut av = crate::ibverbs::address::AddressHandleAttribute::new();
    av.setup_port(1).setup_service_level(2);
    with_av.setup_address_vector(&av);
    assert!(verdict(initiator, QueuePairState::Init, &with_av).is_ok());
    // DCI RTR -> RTS: the RC send-side set; a DCT never reaches RTS.
    assert!(verdict(initiator, QueuePairState::ReadyToReceive, &rts_attr()).is_ok());
    assert!(verdict(target, QueuePairState::ReadyToReceive, &rts_attr()).is_err());
    // DCI RESET -> INIT takes no access flags; a DCT needs them.
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(1)
        .setup_access_flags(AccessFlags::LocalWrite);
    assert!(verdict(initiator, QueuePairState::Reset, &init).is_err());
    assert!(verdict(target, QueuePairState::Reset, &init).is_ok());
}

/// Every modification names the state, even one that stays in its state (mlx5_ib requires
/// `IB_QP_STATE`): a mask without it needs it; an attribute neither required nor optional is
/// named as invalid.
#[test]
fn a_refused_mask_names_what_it_lacks_and_what_it_has_too_many() {
    let rnr = Mask::MinResponderNotReadyTimer;
    let err = check(&DC_INITIATOR_TRANSITIONS, ReadyToSend, ReadyToSend, rnr).unwrap_err();
    assert!(
        matches!(err, ModifyQueuePairErrorKind::InvalidAttributeMask { invalid, needed, .. } if invalid == Mask::none() && needed == Mask::State),
        "{err:?}"
    );
    assert!(check(&DC_INITIATOR_TRANSITIONS, ReadyToSend, ReadyToSend, rnr | Mask::State).is_ok());
    let err = check(
        &DC_INITIATOR_TRANSITIONS,
        ReadyToSend,
        ReadyToSend,
        Mask::State | Mask::Timeout,
    )
    .unwrap_err();
    assert!(
        matches!(err, ModifyQueuePairErrorKind::InvalidAttributeMask { invalid, needed, .. } if invalid == Mask::Timeout && needed == Mask::none()),
        "{err:?}"
    );
    // No transition from a state the kernel does not name.
    assert!(matches!(
        check(&DC_INITIATOR_TRANSITIONS, Unknown, Reset, Mask::State),
        Err(ModifyQueuePairErrorKind::InvalidTransition { .. })
    ));
}
