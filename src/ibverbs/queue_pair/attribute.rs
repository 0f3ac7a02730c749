//! [`QueuePairAttribute`], the attributes of an `ibv_modify_qp` or `ibv_query_qp` call (`struct
//! ibv_qp_attr` and its mask), and the decoding of a raw queue-pair state.
use rdma_mummy_sys::ibv_qp_attr;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{QueuePairAttributeMask, QueuePairState};
use sideway::ibverbs::AccessFlags;

use crate::ibverbs::address::AddressHandleAttribute;
use crate::ibverbs::zeroed::Zeroed;

/// The attributes given to [`SharedReceiveQueuePair::modify`] (`struct ibv_qp_attr` and its mask):
/// each `setup_*` sets a field and its mask bit.
///
/// [`SharedReceiveQueuePair::modify`]: super::SharedReceiveQueuePair::modify
#[derive(Clone)]
pub struct QueuePairAttribute {
    pub(crate) attr: Zeroed<ibv_qp_attr>,
    pub(crate) attr_mask: QueuePairAttributeMask,
}

impl Default for QueuePairAttribute {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for QueuePairAttribute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePairAttribute")
            .field("attr_mask", &self.attr_mask)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

macro_rules! qp_attribute_setters {
    ($($(#[$doc:meta])* $setup:ident / $get:ident: $ty:ty => $field:ident, $mask:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $setup(&mut self, value: $ty) -> &mut Self {
                self.attr.$field = value;
                self.attr_mask |= QueuePairAttributeMask::$mask;
                self
            }

            #[doc = concat!("The value set by [`", stringify!($setup), "`](Self::", stringify!($setup), ").")]
            pub fn $get(&self) -> $ty {
                self.attr.$field
            }
        )*
    };
}

impl QueuePairAttribute {
    /// An empty attribute: all zero, no mask bit set.
    pub fn new() -> Self {
        Self {
            attr: Zeroed::new(),
            attr_mask: QueuePairAttributeMask::none(),
        }
    }

    /// The mask of the fields set so far.
    pub fn mask(&self) -> QueuePairAttributeMask {
        self.attr_mask
    }

    /// The state to move to (`IBV_QP_STATE`).
    pub fn setup_state(&mut self, state: QueuePairState) -> &mut Self {
        self.attr.qp_state = state as u32;
        self.attr_mask |= QueuePairAttributeMask::State;
        self
    }

    /// The state set by [`setup_state`](Self::setup_state) (or read by a query);
    /// [`Unknown`](QueuePairState::Unknown) for a value this crate does not know.
    pub fn state(&self) -> QueuePairState {
        state_from_raw(self.attr.qp_state)
    }

    /// The access flags for incoming RDMA and atomics (`IBV_QP_ACCESS_FLAGS`).
    pub fn setup_access_flags(&mut self, access_flags: AccessFlags) -> &mut Self {
        self.attr.qp_access_flags = access_flags.bits() as u32;
        self.attr_mask |= QueuePairAttributeMask::AccessFlags;
        self
    }

    /// The path MTU (`IBV_QP_PATH_MTU`).
    pub fn setup_path_mtu(&mut self, path_mtu: Mtu) -> &mut Self {
        self.attr.path_mtu = path_mtu as u32;
        self.attr_mask |= QueuePairAttributeMask::PathMtu;
        self
    }

    /// The primary path's address vector (`IBV_QP_AV`); on RoCE it must be global.
    pub fn setup_address_vector(&mut self, ah_attr: &AddressHandleAttribute) -> &mut Self {
        // SAFETY: an untyped copy between two live values: the GRH's padding stays zero.
        unsafe { std::ptr::copy_nonoverlapping(&ah_attr.attr, &mut self.attr.ah_attr, 1) };
        self.attr_mask |= QueuePairAttributeMask::AddressVector;
        self
    }

    qp_attribute_setters! {
        /// The P_Key index (`IBV_QP_PKEY_INDEX`).
        setup_pkey_index / pkey_index: u16 => pkey_index, PartitionKeyIndex;
        /// The local port, from 1 (`IBV_QP_PORT`).
        setup_port / port: u8 => port_num, Port;
        /// The Q_Key of a UD queue pair (`IBV_QP_QKEY`).
        setup_qkey / qkey: u32 => qkey, QueueKey;
        /// The remote queue pair number of a connected queue pair (`IBV_QP_DEST_QPN`).
        setup_dest_qp_num / dest_qp_num: u32 => dest_qp_num, DestinationQueuePairNumber;
        /// The receive queue's first packet sequence number (`IBV_QP_RQ_PSN`).
        setup_rq_psn / rq_psn: u32 => rq_psn, ReceiveQueuePacketSequenceNumber;
        /// The send queue's first packet sequence number (`IBV_QP_SQ_PSN`).
        setup_sq_psn / sq_psn: u32 => sq_psn, SendQueuePacketSequenceNumber;
        /// Outstanding RDMA reads and atomics as initiator (`IBV_QP_MAX_QP_RD_ATOMIC`).
        setup_max_read_atomic / max_read_atomic: u8 => max_rd_atomic, MaxReadAtomic;
        /// Outstanding RDMA reads and atomics as responder (`IBV_QP_MAX_DEST_RD_ATOMIC`).
        setup_max_dest_read_atomic / max_dest_read_atomic: u8 => max_dest_rd_atomic, MaxDestinationReadAtomic;
        /// The minimum RNR NAK timer (`IBV_QP_MIN_RNR_TIMER`).
        setup_min_rnr_timer / min_rnr_timer: u8 => min_rnr_timer, MinResponderNotReadyTimer;
        /// The local ACK timeout, 4.096 µs · 2^timeout (`IBV_QP_TIMEOUT`).
        setup_timeout / timeout: u8 => timeout, Timeout;
        /// Retries after a timeout (`IBV_QP_RETRY_CNT`).
        setup_retry_cnt / retry_cnt: u8 => retry_cnt, RetryCount;
        /// Retries after an RNR NAK, 7 meaning infinite (`IBV_QP_RNR_RETRY`).
        setup_rnr_retry / rnr_retry: u8 => rnr_retry, ResponderNotReadyRetryCount;
    }
}

/// `enum ibv_qp_state`, `Unknown` for a value a newer library may add (sideway's `From` panics).
pub(crate) fn state_from_raw(state: u32) -> QueuePairState {
    use rdma_mummy_sys::ibv_qp_state as s;
    match state {
        s::IBV_QPS_RESET => QueuePairState::Reset,
        s::IBV_QPS_INIT => QueuePairState::Init,
        s::IBV_QPS_RTR => QueuePairState::ReadyToReceive,
        s::IBV_QPS_RTS => QueuePairState::ReadyToSend,
        s::IBV_QPS_SQD => QueuePairState::SendQueueDrain,
        s::IBV_QPS_SQE => QueuePairState::SendQueueError,
        s::IBV_QPS_ERR => QueuePairState::Error,
        _ => QueuePairState::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use QueuePairState::*;

    #[test]
    fn an_unknown_state_value_decodes_without_panicking() {
        let mut attr = QueuePairAttribute::new();
        attr.attr.qp_state = 1000;
        assert_eq!(attr.state(), Unknown);
    }
}
