//! Attributes the unit tests of several modules start from.
use sideway::ibverbs::queue_pair::QueuePairState::ReadyToSend;

use crate::ibverbs::queue_pair::QueuePairAttribute;

/// RTR -> RTS with the RC send-side attributes.
pub(crate) fn rts_attr() -> QueuePairAttribute {
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(ReadyToSend)
        .setup_sq_psn(1)
        .setup_timeout(14)
        .setup_retry_cnt(7)
        .setup_rnr_retry(7)
        .setup_max_read_atomic(1);
    attr
}
