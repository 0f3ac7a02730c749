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

#[test]
fn the_kernels_named_dc_transitions_hold() {
    // A DCT goes RESET -> INIT -> RTR and nowhere else: not to RESET, not to ERR.
    let mut reset = QueuePairAttribute::new();
    reset.setup_state(QueuePairState::Reset);
    let mut error = QueuePairAttribute::new();
    error.setup_state(QueuePairState::Error);
    for from in STATES {
        for attr in [&reset, &error] {
            assert!(matches!(
                DC_TARGET_STATE_TABLE.check(from, attr),
                Err(ModifyQueuePairErrorKind::InvalidTransition { .. })
            ));
        }
    }
    // A DCI: RESET -> ERR refused, any state -> RESET allowed, INIT -> INIT with PKEY|PORT.
    assert!(DC_INITIATOR_STATE_TABLE.check(QueuePairState::Reset, &error).is_err());
    assert!(DC_INITIATOR_STATE_TABLE
        .check(QueuePairState::ReadyToSend, &error)
        .is_ok());
    for from in STATES {
        assert!(
            DC_INITIATOR_STATE_TABLE.check(from, &reset).is_ok(),
            "{from:?} -> RESET"
        );
    }
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init).setup_port(2);
    assert!(DC_INITIATOR_STATE_TABLE.check(QueuePairState::Init, &init).is_ok());
    // DCI INIT -> RTR needs no address vector (each request names its destination); the
    // current kernel takes one (a service level, a LAG port), older ones refuse it.
    let mut rtr = QueuePairAttribute::new();
    rtr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(Mtu::Mtu1024);
    assert!(DC_INITIATOR_STATE_TABLE.check(QueuePairState::Init, &rtr).is_ok());
    assert!(DC_TARGET_STATE_TABLE.check(QueuePairState::Init, &rtr).is_err());
    let mut with_av = rtr.clone();
    let mut av = crate::ibverbs::address::AddressHandleAttribute::new();
    av.setup_port(1).setup_service_level(2);
    with_av.setup_address_vector(&av);
    assert!(DC_INITIATOR_STATE_TABLE.check(QueuePairState::Init, &with_av).is_ok());
    // DCI RTR -> RTS: the RC send-side set; a DCT never reaches RTS.
    assert!(DC_INITIATOR_STATE_TABLE
        .check(QueuePairState::ReadyToReceive, &rts_attr())
        .is_ok());
    assert!(DC_TARGET_STATE_TABLE
        .check(QueuePairState::ReadyToReceive, &rts_attr())
        .is_err());
    // DCI RESET -> INIT takes no access flags; a DCT needs them.
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(1)
        .setup_access_flags(AccessFlags::LocalWrite);
    assert!(DC_INITIATOR_STATE_TABLE.check(QueuePairState::Reset, &init).is_err());
    assert!(DC_TARGET_STATE_TABLE.check(QueuePairState::Reset, &init).is_ok());
}
