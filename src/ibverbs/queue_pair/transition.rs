//! The queue-pair state machine as data: a [`TransitionTable`] per queue-pair type (RC and UD),
//! against which the queue-pair core checks every modification before `ibv_modify_qp`.
use std::io;

use rdma_mummy_sys::ibv_qp_attr_mask;
use sideway::ibverbs::queue_pair::{ModifyQueuePairErrorKind, QueuePairAttributeMask, QueuePairState};

use super::QueuePairAttribute;

/// One legal transition of a queue-pair type, with its attribute masks (`IBV_QP_STATE` is implied
/// in `required` when the state changes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Transition {
    from: QueuePairState,
    to: QueuePairState,
    required: i32,
    optional: i32,
}

/// The transitions a queue-pair type allows besides any state's move to RESET or ERR with the
/// state alone (the kernel's `qp_state_table`).
#[derive(Debug)]
pub(crate) struct TransitionTable {
    transitions: &'static [Transition],
}

/// The bits of `bits` as an `ibv_modify_qp` attribute mask.
pub(crate) const fn mask(bits: &[ibv_qp_attr_mask]) -> i32 {
    let mut value = 0;
    let mut i = 0;
    while i < bits.len() {
        value |= bits[i].0;
        i += 1;
    }
    value as i32
}

const fn transition(from: QueuePairState, to: QueuePairState, required: i32, optional: i32) -> Transition {
    Transition {
        from,
        to,
        required,
        optional,
    }
}

mod tables {
    use rdma_mummy_sys::ibv_qp_attr_mask as m;
    use sideway::ibverbs::queue_pair::QueuePairState::*;

    use super::{mask, transition, TransitionTable};

    // The RC send-side attributes that RTS->RTS and SQD->RTS may change.
    const RC_RTS_OPTIONAL: i32 = mask(&[
        m::IBV_QP_CUR_STATE,
        m::IBV_QP_ACCESS_FLAGS,
        m::IBV_QP_MIN_RNR_TIMER,
        m::IBV_QP_ALT_PATH,
        m::IBV_QP_PATH_MIG_STATE,
    ]);
    const UD_RTS_OPTIONAL: i32 = mask(&[m::IBV_QP_CUR_STATE, m::IBV_QP_QKEY]);
    const RC_INIT: i32 = mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT, m::IBV_QP_ACCESS_FLAGS]);
    const UD_INIT: i32 = mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT, m::IBV_QP_QKEY]);
    const UD_KEYS: i32 = mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_QKEY]);

    /// RC, as the kernel's `qp_state_table` (drivers/infiniband/core/verbs.c).
    pub(crate) static RELIABLE_CONNECTION: TransitionTable = TransitionTable {
        transitions: &[
            transition(Reset, Init, RC_INIT, 0),
            transition(Init, Init, 0, RC_INIT),
            transition(
                Init,
                ReadyToReceive,
                mask(&[
                    m::IBV_QP_AV,
                    m::IBV_QP_PATH_MTU,
                    m::IBV_QP_DEST_QPN,
                    m::IBV_QP_RQ_PSN,
                    m::IBV_QP_MAX_DEST_RD_ATOMIC,
                    m::IBV_QP_MIN_RNR_TIMER,
                ]),
                mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_ACCESS_FLAGS, m::IBV_QP_ALT_PATH]),
            ),
            transition(
                ReadyToReceive,
                ReadyToSend,
                mask(&[
                    m::IBV_QP_SQ_PSN,
                    m::IBV_QP_TIMEOUT,
                    m::IBV_QP_RETRY_CNT,
                    m::IBV_QP_RNR_RETRY,
                    m::IBV_QP_MAX_QP_RD_ATOMIC,
                ]),
                RC_RTS_OPTIONAL,
            ),
            transition(ReadyToSend, ReadyToSend, 0, RC_RTS_OPTIONAL),
            transition(ReadyToSend, SendQueueDrain, 0, mask(&[m::IBV_QP_EN_SQD_ASYNC_NOTIFY])),
            transition(SendQueueDrain, ReadyToSend, 0, RC_RTS_OPTIONAL),
            transition(
                SendQueueDrain,
                SendQueueDrain,
                0,
                mask(&[
                    m::IBV_QP_PORT,
                    m::IBV_QP_AV,
                    m::IBV_QP_TIMEOUT,
                    m::IBV_QP_RETRY_CNT,
                    m::IBV_QP_RNR_RETRY,
                    m::IBV_QP_MAX_QP_RD_ATOMIC,
                    m::IBV_QP_MAX_DEST_RD_ATOMIC,
                    m::IBV_QP_ALT_PATH,
                    m::IBV_QP_ACCESS_FLAGS,
                    m::IBV_QP_PKEY_INDEX,
                    m::IBV_QP_MIN_RNR_TIMER,
                    m::IBV_QP_PATH_MIG_STATE,
                ]),
            ),
            // The kernel's table lets SQE go back to RTS for every type (only UD and UC can
            // enter SQE); RC has no optional attribute there.
            transition(SendQueueError, ReadyToSend, 0, mask(&[m::IBV_QP_CUR_STATE])),
        ],
    };

    /// UD, as the kernel's `qp_state_table`.
    pub(crate) static UNRELIABLE_DATAGRAM: TransitionTable = TransitionTable {
        transitions: &[
            transition(Reset, Init, UD_INIT, 0),
            transition(Init, Init, 0, UD_INIT),
            transition(Init, ReadyToReceive, 0, UD_KEYS),
            transition(ReadyToReceive, ReadyToSend, mask(&[m::IBV_QP_SQ_PSN]), UD_RTS_OPTIONAL),
            transition(ReadyToSend, ReadyToSend, 0, UD_RTS_OPTIONAL),
            transition(ReadyToSend, SendQueueDrain, 0, mask(&[m::IBV_QP_EN_SQD_ASYNC_NOTIFY])),
            transition(SendQueueDrain, ReadyToSend, 0, UD_RTS_OPTIONAL),
            transition(SendQueueDrain, SendQueueDrain, 0, UD_KEYS),
            transition(SendQueueError, ReadyToSend, 0, UD_RTS_OPTIONAL),
        ],
    };
}

pub(crate) use tables::{RELIABLE_CONNECTION, UNRELIABLE_DATAGRAM};

impl TransitionTable {
    /// `(required, optional)` attribute masks of `from -> to` (`IBV_QP_STATE` left to the caller),
    /// or `None` when the type does not allow it.
    pub(crate) fn transition(&self, from: QueuePairState, to: QueuePairState) -> Option<(i32, i32)> {
        // Any state may go to RESET or ERR (kernel `qp_state_table`).
        if matches!(to, QueuePairState::Reset | QueuePairState::Error) && from != QueuePairState::Unknown {
            return Some((0, 0));
        }
        let listed = self.transitions.iter().find(|t| t.from == from && t.to == to);
        listed.map(|t| (t.required, t.optional))
    }

    /// Checks a modification against the table: the transition must exist, every required bit
    /// must be set and no bit may be outside required and optional.
    pub(crate) fn check(
        &self, from: QueuePairState, attr: &QueuePairAttribute,
    ) -> Result<(), ModifyQueuePairErrorKind> {
        let given = attr.attr_mask.bits();
        let to = if attr.attr_mask.contains(QueuePairAttributeMask::State) {
            attr.state()
        } else {
            from
        };
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        let state_bit = mask(&[ibv_qp_attr_mask::IBV_QP_STATE]);
        let Some((required, optional)) = self.transition(from, to) else {
            return Err(ModifyQueuePairErrorKind::InvalidTransition {
                cur_state: from,
                next_state: to,
                source: einval(),
            });
        };
        // A modification without IBV_QP_STATE stays in its state: the state bit is never needed.
        let needed = required & !given & !state_bit;
        let invalid = given & !(required | optional | state_bit);
        if needed != 0 || invalid != 0 {
            return Err(ModifyQueuePairErrorKind::InvalidAttributeMask {
                cur_state: from,
                next_state: to,
                invalid: QueuePairAttributeMask::from(invalid),
                needed: QueuePairAttributeMask::from(needed),
                source: einval(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sideway::ibverbs::device_context::Mtu;
    use sideway::ibverbs::AccessFlags;

    use super::*;
    use crate::test_support::rts_attr;
    use QueuePairAttributeMask as M;
    use QueuePairState::*;

    #[test]
    fn rc_rtr_to_rts_with_the_required_bits_passes() {
        assert!(RELIABLE_CONNECTION.check(ReadyToReceive, &rts_attr()).is_ok());
    }

    #[test]
    fn rc_reset_to_rts_is_an_invalid_transition() {
        let err = RELIABLE_CONNECTION.check(Reset, &rts_attr()).unwrap_err();
        assert!(matches!(
            err,
            ModifyQueuePairErrorKind::InvalidTransition {
                cur_state: Reset,
                next_state: ReadyToSend,
                ..
            }
        ));
    }

    #[test]
    fn missing_bits_are_named_as_needed() {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(Init).setup_pkey_index(0).setup_port(1);
        let err = RELIABLE_CONNECTION.check(Reset, &attr).unwrap_err();
        match err {
            ModifyQueuePairErrorKind::InvalidAttributeMask { needed, invalid, .. } => {
                assert_eq!(needed, M::AccessFlags);
                assert_eq!(invalid, M::none());
            },
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn extra_bits_are_named_as_invalid() {
        // UD takes a Q_Key, not access flags.
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(Init)
            .setup_pkey_index(0)
            .setup_port(1)
            .setup_qkey(0x1111)
            .setup_access_flags(AccessFlags::LocalWrite);
        let err = UNRELIABLE_DATAGRAM.check(Reset, &attr).unwrap_err();
        match err {
            ModifyQueuePairErrorKind::InvalidAttributeMask { needed, invalid, .. } => {
                assert_eq!(needed, M::none());
                assert_eq!(invalid, M::AccessFlags);
            },
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn any_state_can_go_to_reset_and_error() {
        for from in [Reset, Init, ReadyToReceive, ReadyToSend, Error] {
            for to in [Reset, Error] {
                let mut attr = QueuePairAttribute::new();
                attr.setup_state(to);
                assert!(RELIABLE_CONNECTION.check(from, &attr).is_ok(), "{from:?} -> {to:?}");
                assert!(UNRELIABLE_DATAGRAM.check(from, &attr).is_ok(), "{from:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn ud_needs_only_the_state_for_rtr_and_the_psn_for_rts() {
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(ReadyToReceive);
        assert!(UNRELIABLE_DATAGRAM.check(Init, &rtr).is_ok());
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(ReadyToSend);
        let err = UNRELIABLE_DATAGRAM.check(ReadyToReceive, &rts).unwrap_err();
        assert!(
            matches!(err, ModifyQueuePairErrorKind::InvalidAttributeMask { needed, .. } if needed == M::SendQueuePacketSequenceNumber)
        );
    }

    #[test]
    fn send_queue_drain_and_error_transitions_follow_the_kernel_table() {
        // Refused before the fix: the tables had no SQD or SQE rows.
        let mut sqd = QueuePairAttribute::new();
        sqd.setup_state(SendQueueDrain);
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(ReadyToSend);
        for table in [&RELIABLE_CONNECTION, &UNRELIABLE_DATAGRAM] {
            assert!(table.check(ReadyToSend, &sqd).is_ok(), "RTS -> SQD");
            assert!(table.check(SendQueueDrain, &sqd).is_ok(), "SQD -> SQD");
            assert!(table.check(SendQueueDrain, &rts).is_ok(), "SQD -> RTS");
            assert!(table.check(SendQueueError, &rts).is_ok(), "SQE -> RTS");
        }
        // RTS -> SQD may ask for the drained event, nothing else.
        sqd.setup_min_rnr_timer(12);
        assert!(matches!(
            RELIABLE_CONNECTION.check(ReadyToSend, &sqd),
            Err(ModifyQueuePairErrorKind::InvalidAttributeMask { invalid, .. }) if invalid == M::MinResponderNotReadyTimer
        ));
        // In SQD an RC queue pair may change its path and timers...
        let mut change = QueuePairAttribute::new();
        change.setup_state(SendQueueDrain).setup_timeout(20).setup_retry_cnt(3);
        assert!(RELIABLE_CONNECTION.check(SendQueueDrain, &change).is_ok());
        // ... a UD one only its P_Key index and Q_Key.
        assert!(UNRELIABLE_DATAGRAM.check(SendQueueDrain, &change).is_err());
        let mut ud = QueuePairAttribute::new();
        ud.setup_state(SendQueueDrain).setup_qkey(0x1111);
        assert!(UNRELIABLE_DATAGRAM.check(SendQueueDrain, &ud).is_ok());
        // SQD cannot go back to RTR.
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(ReadyToReceive);
        assert!(matches!(
            UNRELIABLE_DATAGRAM.check(SendQueueDrain, &rtr),
            Err(ModifyQueuePairErrorKind::InvalidTransition { .. })
        ));
    }

    #[test]
    fn a_modification_without_state_stays_in_the_state() {
        let mut attr = QueuePairAttribute::new();
        attr.setup_min_rnr_timer(12);
        assert!(RELIABLE_CONNECTION.check(ReadyToSend, &attr).is_ok());
        let mut attr = QueuePairAttribute::new();
        attr.setup_path_mtu(Mtu::Mtu1024);
        assert!(RELIABLE_CONNECTION.check(ReadyToSend, &attr).is_err());
    }
}
