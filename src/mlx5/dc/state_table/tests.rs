//! The DC tables held to the kernel's functions, transcribed on their own in the crate
//! sideway-ext-dc-rules (not derived from these tables): every state pair and attribute mask.
use rdma_mummy_sys::ibv_qp_attr_mask as m;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{ModifyQueuePairErrorKind, QueuePairAttributeMask, QueuePairState};
use sideway::ibverbs::AccessFlags;
use sideway_ext_dc_rules as kernel_rules;

use super::*;
use crate::ibverbs::queue_pair::QueuePairAttribute;
use crate::test_support::rts_attr;

/// The attribute bits the kernel's DC rules name, plus `IBV_QP_CUR_STATE` and
/// `IBV_QP_DEST_QPN`, which they never allow: every subset of them is tried.
const BITS: [m; 14] = [
    m::IBV_QP_STATE,
    m::IBV_QP_CUR_STATE,
    m::IBV_QP_ACCESS_FLAGS,
    m::IBV_QP_PKEY_INDEX,
    m::IBV_QP_PORT,
    m::IBV_QP_AV,
    m::IBV_QP_PATH_MTU,
    m::IBV_QP_TIMEOUT,
    m::IBV_QP_RETRY_CNT,
    m::IBV_QP_RNR_RETRY,
    m::IBV_QP_MIN_RNR_TIMER,
    m::IBV_QP_SQ_PSN,
    m::IBV_QP_MAX_QP_RD_ATOMIC,
    m::IBV_QP_DEST_QPN,
];

fn attribute(mask: i32, state: QueuePairState) -> QueuePairAttribute {
    let mut attr = QueuePairAttribute::new();
    attr.mask = QueuePairAttributeMask::from(mask);
    attr.attr.qp_state = state as u32;
    attr
}

/// Every (current state, new state, mask of [`BITS`]) is accepted by `table` exactly when the
/// kernel's rule accepts it.
fn table_agrees_with(table: &TransitionTable, rule: fn(QueuePairState, QueuePairState, i32) -> bool) {
    let mut accepted = 0;
    for cur in kernel_rules::STATES {
        for given in kernel_rules::STATES {
            for subset in 0u32..1 << BITS.len() {
                let mask = BITS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| subset & (1 << i) != 0)
                    .fold(0, |mask, (_, bit)| mask | bit.0 as i32);
                let new = kernel_rules::new_state(cur, mask, given);
                let kernel = rule(cur, new, mask);
                let ours = table.check(cur, &attribute(mask, given)).is_ok();
                assert_eq!(ours, kernel, "{cur:?} -> {new:?} with mask {mask:#x}");
                accepted += usize::from(kernel);
            }
        }
    }
    assert!(accepted > 0, "the rule accepted nothing: the comparison proves nothing");
}

#[test]
fn the_dc_initiator_table_is_modify_dci_qp_is_ok() {
    table_agrees_with(&DC_INITIATOR_STATE_TABLE, |cur, new, mask| {
        kernel_rules::modify_dci_qp_is_ok(cur, new, mask, kernel_rules::DciKernel::CURRENT)
    });
}

#[test]
fn the_dc_target_table_is_mlx5_ib_modify_dct() {
    table_agrees_with(&DC_TARGET_STATE_TABLE, kernel_rules::modify_dct_is_ok);
}

#[test]
fn the_kernels_named_dc_transitions_hold() {
    // A DCT goes RESET -> INIT -> RTR and nowhere else: not to RESET, not to ERR.
    let mut reset = QueuePairAttribute::new();
    reset.setup_state(QueuePairState::Reset);
    let mut error = QueuePairAttribute::new();
    error.setup_state(QueuePairState::Error);
    for from in kernel_rules::STATES {
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
    for from in kernel_rules::STATES {
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
    let mask = with_av.mask().bits();
    assert!(kernel_rules::modify_dci_qp_is_ok(
        QueuePairState::Init,
        QueuePairState::ReadyToReceive,
        mask,
        kernel_rules::DciKernel::CURRENT
    ));
    assert!(!kernel_rules::modify_dci_qp_is_ok(
        QueuePairState::Init,
        QueuePairState::ReadyToReceive,
        mask,
        kernel_rules::DciKernel::OLD
    ));
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
