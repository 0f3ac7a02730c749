//! The transition tables of the DC queue pairs, as data for the queue-pair core of
//! [`ibverbs::queue_pair`](crate::ibverbs::queue_pair): what mlx5_ib accepts for a DC initiator
//! (its `modify_dci_qp_is_ok`) and a DC target (which never goes past RTR).
//!
//! # Reference
//!
//! - rdma-core manpage: [`mlx5dv_create_qp`](https://man7.org/linux/man-pages/man3/mlx5dv_create_qp.3.html)
// The DC queue pairs of the next part of the data plane use these tables; until then only the
// tests do.
#![cfg_attr(not(test), allow(dead_code))]

use rdma_mummy_sys::ibv_qp_attr_mask as m;
use sideway::ibverbs::queue_pair::QueuePairState::*;

use crate::ibverbs::queue_pair::{mask, Transition, TransitionTable};

/// A DC initiator (DCI): RESET → INIT without access flags, INIT → RTR with only the path MTU
/// required (no destination: each request names it), RTR → RTS with the RC send-side attributes.
pub(crate) static DC_INITIATOR: TransitionTable = TransitionTable {
    transitions: &[
        Transition {
            from: Reset,
            to: Init,
            required: mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT]),
            optional: 0,
        },
        Transition {
            from: Init,
            to: ReadyToReceive,
            required: mask(&[m::IBV_QP_PATH_MTU]),
            optional: mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_AV]),
        },
        Transition {
            from: ReadyToReceive,
            to: ReadyToSend,
            required: mask(&[
                m::IBV_QP_TIMEOUT,
                m::IBV_QP_RETRY_CNT,
                m::IBV_QP_RNR_RETRY,
                m::IBV_QP_MAX_QP_RD_ATOMIC,
                m::IBV_QP_SQ_PSN,
            ]),
            optional: mask(&[m::IBV_QP_MIN_RNR_TIMER]),
        },
        Transition {
            from: ReadyToSend,
            to: ReadyToSend,
            required: 0,
            optional: mask(&[m::IBV_QP_MIN_RNR_TIMER]),
        },
    ],
};

/// A DC target (DCT): RESET → INIT with access flags, INIT → RTR with the minimum RNR timer, the
/// address vector and the path MTU; it never reaches RTS.
pub(crate) static DC_TARGET: TransitionTable = TransitionTable {
    transitions: &[
        Transition {
            from: Reset,
            to: Init,
            required: mask(&[m::IBV_QP_ACCESS_FLAGS, m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT]),
            optional: 0,
        },
        Transition {
            from: Init,
            to: ReadyToReceive,
            required: mask(&[m::IBV_QP_MIN_RNR_TIMER, m::IBV_QP_AV, m::IBV_QP_PATH_MTU]),
            optional: 0,
        },
    ],
};

#[cfg(test)]
mod tests {
    use sideway::ibverbs::device_context::Mtu;
    use sideway::ibverbs::queue_pair::{ModifyQueuePairErrorKind, QueuePairAttributeMask as M, QueuePairState};
    use sideway::ibverbs::AccessFlags;

    use super::*;
    use crate::ibverbs::queue_pair::tests::rts_attr;
    use crate::ibverbs::queue_pair::QueuePairAttribute;

    #[test]
    fn dc_tables_follow_mlx5_ib() {
        // DCI RESET->INIT takes no access flags.
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(Init).setup_pkey_index(0).setup_port(1);
        assert!(DC_INITIATOR.check(Reset, &attr).is_ok());
        attr.setup_access_flags(AccessFlags::LocalWrite);
        assert!(matches!(
            DC_INITIATOR.check(Reset, &attr),
            Err(ModifyQueuePairErrorKind::InvalidAttributeMask { invalid, .. }) if invalid == M::AccessFlags
        ));
        // ... but a DCT needs them.
        assert!(DC_TARGET.check(Reset, &attr).is_ok());
        // DCI INIT->RTR needs only the path MTU.
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(ReadyToReceive).setup_path_mtu(Mtu::Mtu1024);
        assert!(DC_INITIATOR.check(Init, &rtr).is_ok());
        // A DCT needs min_rnr_timer and the address vector too.
        assert!(matches!(
            DC_TARGET.check(Init, &rtr),
            Err(ModifyQueuePairErrorKind::InvalidAttributeMask { needed, .. })
                if needed == M::MinResponderNotReadyTimer | M::AddressVector
        ));
        // DCI RTR->RTS: the RC send-side set, without the destination.
        assert!(DC_INITIATOR.check(ReadyToReceive, &rts_attr()).is_ok());
        // A DCT never reaches RTS.
        assert!(matches!(
            DC_TARGET.check(ReadyToReceive, &rts_attr()),
            Err(ModifyQueuePairErrorKind::InvalidTransition { .. })
        ));
        // Both can be torn down from any state.
        let mut reset = QueuePairAttribute::new();
        reset.setup_state(QueuePairState::Reset);
        assert!(DC_TARGET.check(ReadyToReceive, &reset).is_ok());
        assert!(DC_INITIATOR.check(ReadyToSend, &reset).is_ok());
    }
}
