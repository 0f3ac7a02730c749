//! The transition tables of the DC queue pairs, as data for the queue-pair core of
//! [`ibverbs::queue_pair`](crate::ibverbs::queue_pair): what mlx5_ib accepts for a DC initiator
//! (its `modify_dci_qp_is_ok`) and a DC target (its `mlx5_ib_modify_dct`). Neither follows the
//! generic `qp_state_table`: each lists every transition it has.
//!
//! The unit tests hold both tables to the kernel's functions, transcribed on their own in
//! the crate sideway-ext-dc-rules (not derived from these tables).
//!
//! # Reference
//!
//! - rdma-core manpage: [`mlx5dv_create_qp`](https://man7.org/linux/man-pages/man3/mlx5dv_create_qp.3.html)
//! - Linux `drivers/infiniband/hw/mlx5/qp.c`: `modify_dci_qp_is_ok`, `mlx5_ib_modify_dct`,
//!   `is_valid_mask`

use rdma_mummy_sys::ibv_qp_attr_mask as m;
use sideway::ibverbs::queue_pair::QueuePairState::*;

use crate::ibverbs::queue_pair::transition::{mask, Transition, TransitionTable};
use crate::mlx5::dc::initiator::DcInitiator;

/// A move to RESET or ERR: the state alone, neither required nor optional attribute
/// (`modify_dci_qp_is_ok`: `is_valid_mask(attr_mask, IB_QP_STATE, 0)`).
const fn teardown(
    from: sideway::ibverbs::queue_pair::QueuePairState, to: sideway::ibverbs::queue_pair::QueuePairState,
) -> Transition {
    Transition {
        from,
        to,
        required: 0,
        optional: 0,
    }
}

/// A DC initiator (DCI), as current mlx5_ib's `modify_dci_qp_is_ok`: RESET → INIT with the P_Key
/// index and port, INIT → INIT with either, INIT → RTR with the path MTU (and optionally the
/// P_Key index and an address vector, for a service level or a LAG port; each request names its
/// destination, so none is needed, and kernels before Linux v5.0 refuse one with `EINVAL`, see
/// [`DcInitiatorBringUp::setup_rtr_address_vector`]), RTR → RTS with the RC
/// send-side attributes, RTS → RTS with the minimum RNR timer; any state → RESET (kernels since
/// the RESET branch was added; older ones refuse it, see [`DcInitiator::recover`]), and any
/// state but RESET → ERR.
///
/// [`DcInitiator::recover`]: super::initiator::DcInitiator::recover
/// [`DcInitiatorBringUp::setup_rtr_address_vector`]: super::initiator::DcInitiatorBringUp::setup_rtr_address_vector
pub(crate) static DC_INITIATOR: TransitionTable = TransitionTable {
    any_to_reset_or_error: false,
    state_always_required: true,
    transitions: &[
        Transition {
            from: Reset,
            to: Init,
            required: mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT]),
            optional: 0,
        },
        Transition {
            from: Init,
            to: Init,
            required: 0,
            optional: mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT]),
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
    ],
};

/// A DC target (DCT), as mlx5_ib's `mlx5_ib_modify_dct`: RESET → INIT with access flags, P_Key
/// index and port, INIT → RTR with the minimum RNR timer, the address vector and the path MTU,
/// and nothing else ("Modify DCT: Invalid transition", `EINVAL`): it never reaches RTS, and it is
/// torn down by `ibv_destroy_qp` (dropping it), never by a move to RESET or ERR.
pub(crate) static DC_TARGET: TransitionTable = TransitionTable {
    any_to_reset_or_error: false,
    state_always_required: true,
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

impl DcInitiator {
    /// The attributes (`ibv_qp_attr_mask` bits, `IBV_QP_STATE` aside) a DC initiator must be
    /// given to move from `from` to `to`, as its transition table holds mlx5_ib's
    /// `modify_dci_qp_is_ok`; `None` where no such move exists. For a program that brings DC
    /// initiators up by hand, or a simulated device held to the same rules.
    ///
    /// ```
    /// use sideway::ibverbs::queue_pair::QueuePairState::{Error, Init, ReadyToReceive, Reset};
    /// use sideway_ext::mlx5::dc::initiator::DcInitiator;
    ///
    /// // INIT → RTR needs the path MTU; RESET → RTR does not exist.
    /// assert_eq!(DcInitiator::required_attributes(Init, ReadyToReceive), Some(rdma_mummy_sys::ibv_qp_attr_mask::IBV_QP_PATH_MTU.0 as i32));
    /// assert_eq!(DcInitiator::required_attributes(Reset, ReadyToReceive), None);
    /// assert_eq!(DcInitiator::required_attributes(Init, Error), Some(0));
    /// ```
    pub fn required_attributes(
        from: sideway::ibverbs::queue_pair::QueuePairState, to: sideway::ibverbs::queue_pair::QueuePairState,
    ) -> Option<i32> {
        DC_INITIATOR
            .transitions
            .iter()
            .find(|t| t.from == from && t.to == to)
            .map(|t| t.required)
    }
}

#[cfg(test)]
mod tests {
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
        table_agrees_with(&DC_INITIATOR, |cur, new, mask| {
            kernel_rules::modify_dci_qp_is_ok(cur, new, mask, kernel_rules::DciKernel::CURRENT)
        });
    }

    #[test]
    fn the_dc_target_table_is_mlx5_ib_modify_dct() {
        table_agrees_with(&DC_TARGET, kernel_rules::modify_dct_is_ok);
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
                    DC_TARGET.check(from, attr),
                    Err(ModifyQueuePairErrorKind::InvalidTransition { .. })
                ));
            }
        }
        // A DCI: RESET -> ERR refused, any state -> RESET allowed, INIT -> INIT with PKEY|PORT.
        assert!(DC_INITIATOR.check(QueuePairState::Reset, &error).is_err());
        assert!(DC_INITIATOR.check(QueuePairState::ReadyToSend, &error).is_ok());
        for from in kernel_rules::STATES {
            assert!(DC_INITIATOR.check(from, &reset).is_ok(), "{from:?} -> RESET");
        }
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init).setup_port(2);
        assert!(DC_INITIATOR.check(QueuePairState::Init, &init).is_ok());
        // DCI INIT -> RTR needs no address vector (each request names its destination); the
        // current kernel takes one (a service level, a LAG port), older ones refuse it.
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(Mtu::Mtu1024);
        assert!(DC_INITIATOR.check(QueuePairState::Init, &rtr).is_ok());
        assert!(DC_TARGET.check(QueuePairState::Init, &rtr).is_err());
        let mut with_av = rtr.clone();
        let mut av = crate::ibverbs::address::AddressHandleAttribute::new();
        av.setup_port(1).setup_service_level(2);
        with_av.setup_address_vector(&av);
        assert!(DC_INITIATOR.check(QueuePairState::Init, &with_av).is_ok());
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
        assert!(DC_INITIATOR.check(QueuePairState::ReadyToReceive, &rts_attr()).is_ok());
        assert!(DC_TARGET.check(QueuePairState::ReadyToReceive, &rts_attr()).is_err());
        // DCI RESET -> INIT takes no access flags; a DCT needs them.
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(1)
            .setup_access_flags(AccessFlags::LocalWrite);
        assert!(DC_INITIATOR.check(QueuePairState::Reset, &init).is_err());
        assert!(DC_TARGET.check(QueuePairState::Reset, &init).is_ok());
    }
}
