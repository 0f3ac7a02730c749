//! Queue pairs owned by this crate: RC and UD queue pairs that receive through a
//! [`SharedReceiveQueue`], on one queue-pair core that the DC queue pairs of the `mlx5` feature
//! share (raw handle and `Arc` parents, a transition table per queue-pair type checked before
//! `ibv_modify_qp`, and the `ibv_wr_*` post guard of [`post_send_guard`](super::post_send_guard)).
//!
//! sideway's own [`QueuePairBuilder`](sideway::ibverbs::queue_pair::QueuePairBuilder) cannot
//! attach a shared receive queue, and its [`QueuePairAttribute`](sideway::ibverbs::queue_pair::QueuePairAttribute)
//! hides its raw struct, so this module has its own builder and [`QueuePairAttribute`], shaped
//! like sideway's and using sideway's value types.
//!
//! # Reference
//!
//! - RDMAmojo: [`ibv_create_qp`](https://www.rdmamojo.com/2012/12/21/ibv_create_qp/),
//!   [`ibv_modify_qp`](https://www.rdmamojo.com/2013/01/12/ibv_modify_qp/),
//!   [QP state machine](https://www.rdmamojo.com/2012/05/05/qp-state-machine/)
//! - rdma-core manpages: [`ibv_create_qp_ex`](https://man7.org/linux/man-pages/man3/ibv_create_qp_ex.3.html),
//!   [`ibv_modify_qp`](https://man7.org/linux/man-pages/man3/ibv_modify_qp.3.html)
use std::io;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{
    ibv_destroy_qp, ibv_modify_qp, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_ex, ibv_qp_init_attr,
    ibv_qp_init_attr_ex, ibv_qp_init_attr_mask, ibv_qp_to_qp_ex, ibv_qp_type, ibv_query_qp,
};
use sideway::ibverbs::completion::{CompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    ModifyQueuePairError, ModifyQueuePairErrorKind, QueryQueuePairError, QueryQueuePairErrorKind,
    QueuePairAttributeMask, QueuePairState, SendOperationFlags,
};
use sideway::ibverbs::AccessFlags;

use super::address_handle::AddressHandleAttribute;
use super::post_send_guard::{PostSendGuard, ReliableConnection, Transport, UnreliableDatagram};
use super::shared_receive_queue::SharedReceiveQueue;

/// Error returned by [`SharedReceiveQueuePairBuilder::build_rc`] and
/// [`build_ud`](SharedReceiveQueuePairBuilder::build_ud).
#[derive(Debug, thiserror::Error)]
#[error("failed to create queue pair")]
#[non_exhaustive]
pub struct CreateQueuePairError(#[from] pub CreateQueuePairErrorKind);

/// The enum type for [`CreateQueuePairError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateQueuePairErrorKind {
    /// No send completion queue was set up.
    #[error("a send completion queue is required (setup_send_cq)")]
    MissingSendCompletionQueue,
    /// No receive completion queue was set up.
    #[error("a receive completion queue is required (setup_recv_cq)")]
    MissingReceiveCompletionQueue,
    /// The send operations asked for are not all available on this queue-pair type.
    #[error("send operations {requested:?} are not available on this queue pair type (allowed: {allowed:?})")]
    UnsupportedSendOperations {
        /// What was asked for.
        requested: SendOperationFlags,
        /// What the type allows.
        allowed: SendOperationFlags,
    },
    /// `max_send_wr` is 0 or above the device's `max_qp_wr`.
    #[error("max_send_wr {requested} must be between 1 and the device's max_qp_wr {max}")]
    InvalidMaxSendWorkRequests {
        /// What was asked for.
        requested: u32,
        /// The device's limit.
        max: u32,
    },
    /// `max_send_sge` is above the device's `max_sge`.
    #[error("max_send_sge {requested} is above the device's max_sge {max}")]
    TooManyScatterGatherEntries {
        /// What was asked for.
        requested: u32,
        /// The device's limit.
        max: u32,
    },
    /// The library call failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// The attributes given to [`SharedReceiveQueuePair::modify`] (`struct ibv_qp_attr` and its mask):
/// each `setup_*` sets a field and its mask bit.
pub struct QueuePairAttribute {
    pub(crate) attr: ibv_qp_attr,
    pub(crate) mask: QueuePairAttributeMask,
}

impl Clone for QueuePairAttribute {
    fn clone(&self) -> Self {
        Self {
            attr: ibv_qp_attr { ..self.attr },
            mask: self.mask,
        }
    }
}

impl Default for QueuePairAttribute {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for QueuePairAttribute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePairAttribute")
            .field("mask", &self.mask)
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
                self.mask |= QueuePairAttributeMask::$mask;
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
        // SAFETY: ibv_qp_attr is plain data for which all zeroes is valid.
        Self {
            attr: unsafe { MaybeUninit::zeroed().assume_init() },
            mask: QueuePairAttributeMask::none(),
        }
    }

    /// The mask of the fields set so far.
    pub fn mask(&self) -> QueuePairAttributeMask {
        self.mask
    }

    /// The state to move to (`IBV_QP_STATE`).
    pub fn setup_state(&mut self, state: QueuePairState) -> &mut Self {
        self.attr.qp_state = state as u32;
        self.mask |= QueuePairAttributeMask::State;
        self
    }

    /// The state set by [`setup_state`](Self::setup_state) (or read by a query).
    pub fn state(&self) -> QueuePairState {
        QueuePairState::from(self.attr.qp_state)
    }

    /// The access flags for incoming RDMA and atomics (`IBV_QP_ACCESS_FLAGS`).
    pub fn setup_access_flags(&mut self, access_flags: AccessFlags) -> &mut Self {
        self.attr.qp_access_flags = access_flags.bits() as u32;
        self.mask |= QueuePairAttributeMask::AccessFlags;
        self
    }

    /// The path MTU (`IBV_QP_PATH_MTU`).
    pub fn setup_path_mtu(&mut self, path_mtu: Mtu) -> &mut Self {
        self.attr.path_mtu = path_mtu as u32;
        self.mask |= QueuePairAttributeMask::PathMtu;
        self
    }

    /// The primary path's address vector (`IBV_QP_AV`); on RoCE it must be global.
    pub fn setup_address_vector(&mut self, ah_attr: &AddressHandleAttribute) -> &mut Self {
        self.attr.ah_attr = ah_attr.attr;
        self.mask |= QueuePairAttributeMask::AddressVector;
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

/// The queue-pair types this crate creates, each with its transition table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// The DC variants are constructed by the DC queue pairs of the mlx5 module's data plane; until
// then only the tables' tests use them.
#[cfg_attr(all(feature = "mlx5", not(test)), allow(dead_code))]
pub(crate) enum QueuePairKind {
    ReliableConnection,
    UnreliableDatagram,
    #[cfg(feature = "mlx5")]
    DcInitiator,
    #[cfg(feature = "mlx5")]
    DcTarget,
}

const fn mask(bits: &[ibv_qp_attr_mask]) -> i32 {
    let mut value = 0;
    let mut i = 0;
    while i < bits.len() {
        value |= bits[i].0;
        i += 1;
    }
    value as i32
}

impl QueuePairKind {
    /// `(required, optional)` attribute masks of the transition `from -> to` (`IBV_QP_STATE`
    /// included in required), or `None` when the type does not allow it. Mirrors the kernel's
    /// `qp_state_table` and, for DC, mlx5_ib's checks.
    pub(crate) fn transition(self, from: QueuePairState, to: QueuePairState) -> Option<(i32, i32)> {
        use ibv_qp_attr_mask as m;
        use QueuePairKind::*;
        use QueuePairState::*;
        let state = mask(&[m::IBV_QP_STATE]);
        // Any state may go to RESET or ERR (a DCT too: that is how it is torn down).
        if matches!(to, Reset | Error) && from != Unknown {
            return Some((state, 0));
        }
        let (required, optional) = match (self, from, to) {
            (ReliableConnection, Reset, Init) => {
                (mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT, m::IBV_QP_ACCESS_FLAGS]), 0)
            },
            (ReliableConnection, Init, Init) => {
                (0, mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT, m::IBV_QP_ACCESS_FLAGS]))
            },
            (ReliableConnection, Init, ReadyToReceive) => (
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
            (ReliableConnection, ReadyToReceive, ReadyToSend) => (
                mask(&[
                    m::IBV_QP_SQ_PSN,
                    m::IBV_QP_TIMEOUT,
                    m::IBV_QP_RETRY_CNT,
                    m::IBV_QP_RNR_RETRY,
                    m::IBV_QP_MAX_QP_RD_ATOMIC,
                ]),
                mask(&[
                    m::IBV_QP_CUR_STATE,
                    m::IBV_QP_ACCESS_FLAGS,
                    m::IBV_QP_MIN_RNR_TIMER,
                    m::IBV_QP_ALT_PATH,
                    m::IBV_QP_PATH_MIG_STATE,
                ]),
            ),
            (ReliableConnection, ReadyToSend, ReadyToSend) => (
                0,
                mask(&[
                    m::IBV_QP_CUR_STATE,
                    m::IBV_QP_ACCESS_FLAGS,
                    m::IBV_QP_MIN_RNR_TIMER,
                    m::IBV_QP_ALT_PATH,
                    m::IBV_QP_PATH_MIG_STATE,
                ]),
            ),
            (UnreliableDatagram, Reset, Init) => (mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT, m::IBV_QP_QKEY]), 0),
            (UnreliableDatagram, Init, Init) => (0, mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT, m::IBV_QP_QKEY])),
            (UnreliableDatagram, Init, ReadyToReceive) => (0, mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_QKEY])),
            (UnreliableDatagram, ReadyToReceive, ReadyToSend) => {
                (mask(&[m::IBV_QP_SQ_PSN]), mask(&[m::IBV_QP_CUR_STATE, m::IBV_QP_QKEY]))
            },
            (UnreliableDatagram, ReadyToSend, ReadyToSend) => (0, mask(&[m::IBV_QP_CUR_STATE, m::IBV_QP_QKEY])),
            // DC initiator: as mlx5_ib's modify_dci_qp_is_ok.
            #[cfg(feature = "mlx5")]
            (DcInitiator, Reset, Init) => (mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT]), 0),
            #[cfg(feature = "mlx5")]
            (DcInitiator, Init, ReadyToReceive) => {
                (mask(&[m::IBV_QP_PATH_MTU]), mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_AV]))
            },
            #[cfg(feature = "mlx5")]
            (DcInitiator, ReadyToReceive, ReadyToSend) => (
                mask(&[
                    m::IBV_QP_TIMEOUT,
                    m::IBV_QP_RETRY_CNT,
                    m::IBV_QP_RNR_RETRY,
                    m::IBV_QP_MAX_QP_RD_ATOMIC,
                    m::IBV_QP_SQ_PSN,
                ]),
                mask(&[m::IBV_QP_MIN_RNR_TIMER]),
            ),
            #[cfg(feature = "mlx5")]
            (DcInitiator, ReadyToSend, ReadyToSend) => (0, mask(&[m::IBV_QP_MIN_RNR_TIMER])),
            // DC target: it never goes past RTR.
            #[cfg(feature = "mlx5")]
            (DcTarget, Reset, Init) => (mask(&[m::IBV_QP_ACCESS_FLAGS, m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT]), 0),
            #[cfg(feature = "mlx5")]
            (DcTarget, Init, ReadyToReceive) => (mask(&[m::IBV_QP_MIN_RNR_TIMER, m::IBV_QP_AV, m::IBV_QP_PATH_MTU]), 0),
            _ => return None,
        };
        Some((required | state, optional))
    }

    /// Checks a modification against the transition table: the transition must exist, every
    /// required bit must be set and no bit may be outside required and optional.
    pub(crate) fn check(self, from: QueuePairState, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairErrorKind> {
        let given = attr.mask.bits();
        let to = if attr.mask.contains(QueuePairAttributeMask::State) {
            attr.state()
        } else {
            from
        };
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        let Some((required, optional)) = self.transition(from, to) else {
            return Err(ModifyQueuePairErrorKind::InvalidTransition {
                cur_state: from,
                next_state: to,
                source: einval(),
            });
        };
        // A modification without IBV_QP_STATE stays in the same state: then the state bit itself
        // is not required.
        let required = if given & mask(&[ibv_qp_attr_mask::IBV_QP_STATE]) == 0 {
            required & !mask(&[ibv_qp_attr_mask::IBV_QP_STATE])
        } else {
            required
        };
        let needed = required & !given;
        let invalid = given & !(required | optional | mask(&[ibv_qp_attr_mask::IBV_QP_STATE]));
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

/// The part every queue pair of this crate shares: the handle, its extended (`ibv_wr_*`) view,
/// its type's transition table and the `Arc`s of its parents, released after the handle is
/// destroyed.
#[derive(Debug)]
pub(crate) struct QueuePairCore {
    qp: NonNull<ibv_qp>,
    qp_ex: Option<NonNull<ibv_qp_ex>>,
    kind: QueuePairKind,
    _srq: Option<Arc<SharedReceiveQueue>>,
    _send_cq: Option<GenericCompletionQueue>,
    _recv_cq: Option<GenericCompletionQueue>,
    _pd: Arc<ProtectionDomain>,
}

impl Drop for QueuePairCore {
    fn drop(&mut self) {
        // SAFETY: the handle came from a create call and is destroyed once, before the parents.
        let ret = unsafe { ibv_destroy_qp(self.qp.as_ptr()) };
        assert_eq!(ret, 0, "ibv_destroy_qp failed: {}", io::Error::from_raw_os_error(ret));
    }
}

impl QueuePairCore {
    /// # Safety
    ///
    /// `qp` must be a live queue pair created on `pd` with the given CQs and SRQ, owned by the
    /// returned value (it destroys it).
    pub(crate) unsafe fn new(
        qp: NonNull<ibv_qp>, kind: QueuePairKind, with_send_ops: bool, pd: Arc<ProtectionDomain>,
        send_cq: Option<GenericCompletionQueue>, recv_cq: Option<GenericCompletionQueue>,
        srq: Option<Arc<SharedReceiveQueue>>,
    ) -> Self {
        // ibv_qp_to_qp_ex is valid only for queue pairs created with send_ops_flags.
        let qp_ex = if with_send_ops {
            NonNull::new(ibv_qp_to_qp_ex(qp.as_ptr()))
        } else {
            None
        };
        Self {
            qp,
            qp_ex,
            kind,
            _srq: srq,
            _send_cq: send_cq,
            _recv_cq: recv_cq,
            _pd: pd,
        }
    }

    pub(crate) fn qp(&self) -> NonNull<ibv_qp> {
        self.qp
    }

    pub(crate) fn qp_number(&self) -> u32 {
        // SAFETY: the handle is alive while self is.
        unsafe { self.qp.as_ref().qp_num }
    }

    pub(crate) fn state(&self) -> QueuePairState {
        // SAFETY: the handle is alive; libibverbs keeps `state` up to date on every modify.
        QueuePairState::from(unsafe { self.qp.as_ref().state })
    }

    pub(crate) fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairError> {
        self.kind.check(self.state(), attr)?;
        let mut raw = ibv_qp_attr { ..attr.attr };
        // SAFETY: the handle is alive and exclusively borrowed; raw is a valid ibv_qp_attr.
        let ret = unsafe { ibv_modify_qp(self.qp.as_ptr(), &mut raw, attr.mask.bits()) };
        if ret != 0 {
            return Err(ModifyQueuePairErrorKind::Ibverbs(io::Error::from_raw_os_error(ret)).into());
        }
        Ok(())
    }

    pub(crate) fn query(&self, mask: QueuePairAttributeMask) -> Result<QueuePairAttribute, QueryQueuePairError> {
        let mut attr = QueuePairAttribute::new();
        // SAFETY: ibv_qp_init_attr is plain data for which all zeroes is valid.
        let mut init_attr: ibv_qp_init_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: the handle is alive; both structs are writable.
        let ret = unsafe { ibv_query_qp(self.qp.as_ptr(), &mut attr.attr, mask.bits(), &mut init_attr) };
        if ret != 0 {
            return Err(QueryQueuePairErrorKind::Ibverbs(io::Error::from_raw_os_error(ret)).into());
        }
        attr.mask = mask;
        Ok(attr)
    }

    /// # Safety
    ///
    /// The queue pair must have been created with send operations (`qp_ex` is `Some`) and
    /// `context` must be what transport `T` needs for this queue pair.
    pub(crate) unsafe fn start_post_send<T: Transport>(&mut self, context: T::Context) -> PostSendGuard<'_, T> {
        let qp_ex = self.qp_ex.expect("queue pair created with send operations");
        PostSendGuard::start(qp_ex, context)
    }
}

/// Builds RC or UD queue pairs that receive through a [`SharedReceiveQueue`]; created by
/// [`SharedReceiveQueue::create_qp_builder`]. The queue pairs use the SRQ's protection domain.
#[derive(Debug)]
pub struct SharedReceiveQueuePairBuilder {
    srq: Arc<SharedReceiveQueue>,
    send_cq: Option<GenericCompletionQueue>,
    recv_cq: Option<GenericCompletionQueue>,
    max_send_wr: u32,
    max_send_sge: u32,
    max_inline_data: u32,
    send_ops_flags: Option<SendOperationFlags>,
    sq_sig_all: bool,
}

impl SharedReceiveQueuePairBuilder {
    pub(crate) fn new(srq: &Arc<SharedReceiveQueue>) -> Self {
        Self {
            srq: Arc::clone(srq),
            send_cq: None,
            recv_cq: None,
            max_send_wr: 16,
            max_send_sge: 1,
            max_inline_data: 0,
            send_ops_flags: None,
            sq_sig_all: false,
        }
    }

    /// The completion queue of send completions (required).
    pub fn setup_send_cq(&mut self, send_cq: impl Into<GenericCompletionQueue>) -> &mut Self {
        self.send_cq = Some(send_cq.into());
        self
    }

    /// The completion queue of receive completions (required); receives come from the SRQ.
    pub fn setup_recv_cq(&mut self, recv_cq: impl Into<GenericCompletionQueue>) -> &mut Self {
        self.recv_cq = Some(recv_cq.into());
        self
    }

    /// Capacity of the send queue (default 16).
    pub fn setup_max_send_wr(&mut self, max_send_wr: u32) -> &mut Self {
        self.max_send_wr = max_send_wr;
        self
    }

    /// Scatter/gather entries per send request (default 1).
    pub fn setup_max_send_sge(&mut self, max_send_sge: u32) -> &mut Self {
        self.max_send_sge = max_send_sge;
        self
    }

    /// Inline data per send request in bytes (default 0).
    pub fn setup_max_inline_data(&mut self, max_inline_data: u32) -> &mut Self {
        self.max_inline_data = max_inline_data;
        self
    }

    /// The send operations the queue pair will post (every opcode used must be listed).
    /// Default: all of the type's operations (RC: send, write, read and atomics, with and
    /// without immediate; UD: send and send with immediate).
    pub fn setup_send_ops_flags(&mut self, send_ops_flags: SendOperationFlags) -> &mut Self {
        self.send_ops_flags = Some(send_ops_flags);
        self
    }

    /// Whether every send request generates a completion, whatever its flags (default false).
    pub fn setup_sq_sig_all(&mut self, sq_sig_all: bool) -> &mut Self {
        self.sq_sig_all = sq_sig_all;
        self
    }

    /// Creates a reliable-connection (RC) queue pair.
    pub fn build_rc(&self) -> Result<SharedReceiveQueuePair<ReliableConnection>, CreateQueuePairError> {
        let all = SendOperationFlags::Send
            | SendOperationFlags::SendWithImmediate
            | SendOperationFlags::Write
            | SendOperationFlags::WriteWithImmediate
            | SendOperationFlags::Read
            | SendOperationFlags::AtomicCompareAndSwap
            | SendOperationFlags::AtomicFetchAndAdd;
        self.build(ibv_qp_type::IBV_QPT_RC, QueuePairKind::ReliableConnection, all)
    }

    /// Creates an unreliable-datagram (UD) queue pair; its receives include the 40-byte GRH
    /// headroom at the start of each buffer.
    pub fn build_ud(&self) -> Result<SharedReceiveQueuePair<UnreliableDatagram>, CreateQueuePairError> {
        let all = SendOperationFlags::Send | SendOperationFlags::SendWithImmediate;
        self.build(ibv_qp_type::IBV_QPT_UD, QueuePairKind::UnreliableDatagram, all)
    }

    fn build<T: Transport>(
        &self, qp_type: u32, kind: QueuePairKind, allowed: SendOperationFlags,
    ) -> Result<SharedReceiveQueuePair<T>, CreateQueuePairError> {
        let send_cq = self
            .send_cq
            .clone()
            .ok_or(CreateQueuePairErrorKind::MissingSendCompletionQueue)?;
        let recv_cq = self
            .recv_cq
            .clone()
            .ok_or(CreateQueuePairErrorKind::MissingReceiveCompletionQueue)?;
        let send_ops = self.send_ops_flags.unwrap_or(allowed);
        if send_ops.bits() & !allowed.bits() != 0 {
            return Err(CreateQueuePairErrorKind::UnsupportedSendOperations {
                requested: send_ops,
                allowed,
            }
            .into());
        }
        let pd = Arc::clone(self.srq.pd());
        let device = super::query_device_attr(&pd).map_err(CreateQueuePairErrorKind::Ibverbs)?;
        let max_qp_wr = device.max_qp_wr.max(0) as u32;
        if self.max_send_wr == 0 || self.max_send_wr > max_qp_wr {
            return Err(CreateQueuePairErrorKind::InvalidMaxSendWorkRequests {
                requested: self.max_send_wr,
                max: max_qp_wr,
            }
            .into());
        }
        let max_sge = device.max_sge.max(0) as u32;
        if self.max_send_sge > max_sge {
            return Err(CreateQueuePairErrorKind::TooManyScatterGatherEntries {
                requested: self.max_send_sge,
                max: max_sge,
            }
            .into());
        }

        // SAFETY: ibv_qp_init_attr_ex is plain data for which all zeroes is valid.
        let mut init: ibv_qp_init_attr_ex = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: the CQs, SRQ and PD are alive: self holds them, and the queue pair will too.
        unsafe {
            init.send_cq = send_cq.cq().as_ptr();
            init.recv_cq = recv_cq.cq().as_ptr();
            init.srq = self.srq.srq().as_ptr();
            init.pd = pd.pd().as_ptr();
        }
        init.qp_type = qp_type;
        init.sq_sig_all = self.sq_sig_all as i32;
        init.cap.max_send_wr = self.max_send_wr;
        init.cap.max_send_sge = self.max_send_sge;
        init.cap.max_inline_data = self.max_inline_data;
        init.comp_mask =
            (ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS).0;
        init.send_ops_flags = send_ops.bits();
        // SAFETY: init is fully set up and its pointers are alive for the call.
        let qp = unsafe { rdma_mummy_sys::ibv_create_qp_ex(pd.pd().as_ref().context, &mut init) };
        let qp = NonNull::new(qp).ok_or_else(|| CreateQueuePairErrorKind::Ibverbs(io::Error::last_os_error()))?;
        // SAFETY: qp was just created on these parents, with send operations, and is owned here.
        let core = unsafe {
            QueuePairCore::new(
                qp,
                kind,
                true,
                pd,
                Some(send_cq),
                Some(recv_cq),
                Some(Arc::clone(&self.srq)),
            )
        };
        Ok(SharedReceiveQueuePair {
            core,
            max_send_wr: init.cap.max_send_wr,
            max_inline_data: init.cap.max_inline_data,
            _transport: PhantomData,
        })
    }
}

/// An RC or UD queue pair that receives through a [`SharedReceiveQueue`] (which it keeps alive).
/// Receives are posted on the SRQ; sends with [`start_post_send`](Self::start_post_send).
#[derive(Debug)]
pub struct SharedReceiveQueuePair<T: Transport> {
    core: QueuePairCore,
    max_send_wr: u32,
    max_inline_data: u32,
    _transport: PhantomData<T>,
}

// SAFETY: the handle may be used from any thread; mutation (modify, posting) needs `&mut self`.
unsafe impl<T: Transport> Send for SharedReceiveQueuePair<T> {}
// SAFETY: shared access only reads immutable fields of the handle.
unsafe impl<T: Transport> Sync for SharedReceiveQueuePair<T> {}

impl<T: Transport> SharedReceiveQueuePair<T> {
    /// # Safety
    ///
    /// Return the handle of the queue pair. We mark this method unsafe because the lifetime of
    /// `ibv_qp` is not associated with the return value.
    pub unsafe fn qp(&self) -> NonNull<ibv_qp> {
        self.core.qp()
    }

    /// The queue pair number.
    pub fn qp_number(&self) -> u32 {
        self.core.qp_number()
    }

    /// The current state, as of the last modification through this value.
    pub fn state(&self) -> QueuePairState {
        self.core.state()
    }

    /// The send queue capacity the device granted.
    pub fn max_send_wr(&self) -> u32 {
        self.max_send_wr
    }

    /// The inline data size the device granted.
    pub fn max_inline_data(&self) -> u32 {
        self.max_inline_data
    }

    /// Modifies the queue pair with `ibv_modify_qp`, after checking the transition and the
    /// attribute mask against this type's table: an impossible transition is
    /// [`InvalidTransition`](ModifyQueuePairErrorKind::InvalidTransition), missing or extra mask
    /// bits are [`InvalidAttributeMask`](ModifyQueuePairErrorKind::InvalidAttributeMask) with
    /// `needed` and `invalid` set; neither reaches the library.
    pub fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairError> {
        self.core.modify(attr)
    }

    /// Reads the attributes named by `mask` with `ibv_query_qp`.
    pub fn query(&self, mask: QueuePairAttributeMask) -> Result<QueuePairAttribute, QueryQueuePairError> {
        self.core.query(mask)
    }

    /// Starts a batch of send requests (`ibv_wr_start`); the guard posts them with `post()` or
    /// discards them when dropped.
    pub fn start_post_send(&mut self) -> PostSendGuard<'_, T> {
        // SAFETY: every SharedReceiveQueuePair is created with send operations; RC and UD need no
        // context.
        unsafe { self.core.start_post_send::<T>(T::Context::default()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use QueuePairAttributeMask as M;
    use QueuePairState::*;

    fn rts_attr() -> QueuePairAttribute {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(ReadyToSend)
            .setup_sq_psn(1)
            .setup_timeout(14)
            .setup_retry_cnt(7)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(1);
        attr
    }

    #[test]
    fn rc_rtr_to_rts_with_the_required_bits_passes() {
        assert!(QueuePairKind::ReliableConnection
            .check(ReadyToReceive, &rts_attr())
            .is_ok());
    }

    #[test]
    fn rc_reset_to_rts_is_an_invalid_transition() {
        let err = QueuePairKind::ReliableConnection.check(Reset, &rts_attr()).unwrap_err();
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
        let err = QueuePairKind::ReliableConnection.check(Reset, &attr).unwrap_err();
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
        let err = QueuePairKind::UnreliableDatagram.check(Reset, &attr).unwrap_err();
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
                assert!(
                    QueuePairKind::ReliableConnection.check(from, &attr).is_ok(),
                    "{from:?} -> {to:?}"
                );
                assert!(
                    QueuePairKind::UnreliableDatagram.check(from, &attr).is_ok(),
                    "{from:?} -> {to:?}"
                );
            }
        }
    }

    #[test]
    fn ud_needs_only_the_state_for_rtr_and_the_psn_for_rts() {
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(ReadyToReceive);
        assert!(QueuePairKind::UnreliableDatagram.check(Init, &rtr).is_ok());
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(ReadyToSend);
        let err = QueuePairKind::UnreliableDatagram
            .check(ReadyToReceive, &rts)
            .unwrap_err();
        assert!(
            matches!(err, ModifyQueuePairErrorKind::InvalidAttributeMask { needed, .. } if needed == M::SendQueuePacketSequenceNumber)
        );
    }

    #[cfg(feature = "mlx5")]
    #[test]
    fn dc_tables_follow_mlx5_ib() {
        // DCI RESET->INIT takes no access flags.
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(Init).setup_pkey_index(0).setup_port(1);
        assert!(QueuePairKind::DcInitiator.check(Reset, &attr).is_ok());
        attr.setup_access_flags(AccessFlags::LocalWrite);
        assert!(matches!(
            QueuePairKind::DcInitiator.check(Reset, &attr),
            Err(ModifyQueuePairErrorKind::InvalidAttributeMask { invalid, .. }) if invalid == M::AccessFlags
        ));
        // ... but a DCT needs them.
        assert!(QueuePairKind::DcTarget.check(Reset, &attr).is_ok());
        // DCI INIT->RTR needs only the path MTU.
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(ReadyToReceive).setup_path_mtu(Mtu::Mtu1024);
        assert!(QueuePairKind::DcInitiator.check(Init, &rtr).is_ok());
        // A DCT needs min_rnr_timer and the address vector too.
        assert!(matches!(
            QueuePairKind::DcTarget.check(Init, &rtr),
            Err(ModifyQueuePairErrorKind::InvalidAttributeMask { needed, .. })
                if needed == M::MinResponderNotReadyTimer | M::AddressVector
        ));
        // DCI RTR->RTS: the RC send-side set, without the destination.
        assert!(QueuePairKind::DcInitiator.check(ReadyToReceive, &rts_attr()).is_ok());
        // A DCT never reaches RTS.
        assert!(matches!(
            QueuePairKind::DcTarget.check(ReadyToReceive, &rts_attr()),
            Err(ModifyQueuePairErrorKind::InvalidTransition { .. })
        ));
    }

    #[test]
    fn a_modification_without_state_stays_in_the_state() {
        let mut attr = QueuePairAttribute::new();
        attr.setup_min_rnr_timer(12);
        assert!(QueuePairKind::ReliableConnection.check(ReadyToSend, &attr).is_ok());
        let mut attr = QueuePairAttribute::new();
        attr.setup_path_mtu(Mtu::Mtu1024);
        assert!(QueuePairKind::ReliableConnection.check(ReadyToSend, &attr).is_err());
    }
}
