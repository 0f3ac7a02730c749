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
    ibv_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_ex, ibv_qp_init_attr, ibv_qp_init_attr_ex, ibv_qp_init_attr_mask,
    ibv_qp_type,
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
use super::post_send_guard::{
    entry, MissingProviderEntry, PostSendGuard, ProviderEntries, ReliableConnection, Transport, UnreliableDatagram,
};
use super::shared_receive_queue::SharedReceiveQueue;
use super::zeroed::Zeroed;

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
    /// The provider left an `ibv_qp_ex` entry NULL that the queue pair needs (the builder of a
    /// requested send operation, a batch or data setter): posting would call through it. The
    /// queue pair was destroyed.
    #[error("the provider does not implement `{entry}` for this queue pair")]
    MissingProviderEntry {
        /// The entry's name in `struct ibv_qp_ex`.
        entry: &'static str,
    },
    /// The library call failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// The attributes given to [`SharedReceiveQueuePair::modify`] (`struct ibv_qp_attr` and its mask):
/// each `setup_*` sets a field and its mask bit.
pub struct QueuePairAttribute {
    pub(crate) attr: Zeroed<ibv_qp_attr>,
    pub(crate) mask: QueuePairAttributeMask,
}

impl Clone for QueuePairAttribute {
    fn clone(&self) -> Self {
        Self {
            attr: self.attr.clone(),
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
        Self {
            attr: Zeroed::new(),
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

    /// The state set by [`setup_state`](Self::setup_state) (or read by a query);
    /// [`Unknown`](QueuePairState::Unknown) for a value this crate does not know.
    pub fn state(&self) -> QueuePairState {
        state_from_raw(self.attr.qp_state)
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
        // SAFETY: an untyped copy between two live values: the GRH's padding stays zero.
        unsafe { std::ptr::copy_nonoverlapping(&*ah_attr.attr, &mut self.attr.ah_attr, 1) };
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

/// `enum ibv_qp_state` without panicking on a value a newer library may add (sideway's `From`
/// does).
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

/// One legal transition of a queue-pair type, with its attribute masks (`IBV_QP_STATE` is implied
/// in `required` when the state changes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Transition {
    pub(crate) from: QueuePairState,
    pub(crate) to: QueuePairState,
    pub(crate) required: i32,
    pub(crate) optional: i32,
}

/// The transitions a queue-pair type allows, as data: every queue-pair type of this crate (here
/// RC and UD, DC in the mlx5 module) brings its own, and the queue-pair core checks a
/// modification against it before `ibv_modify_qp`.
#[derive(Debug)]
pub(crate) struct TransitionTable {
    pub(crate) transitions: &'static [Transition],
    /// Whether any state may go to RESET or ERR with the state alone, as the kernel's
    /// `qp_state_table` lets RC and UD do. When `false` (the DC types, whose rules are mlx5_ib's
    /// own), only the listed transitions exist.
    pub(crate) any_to_reset_or_error: bool,
    /// Whether every modification must carry `IBV_QP_STATE`, even one that stays in its state
    /// (mlx5_ib's DC rules: `modify_dci_qp_is_ok` requires it, `mlx5_ib_modify_dct` refuses a
    /// mask without it).
    pub(crate) state_always_required: bool,
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

    /// RC, as the kernel's `qp_state_table` (drivers/infiniband/core/verbs.c).
    pub(crate) static RELIABLE_CONNECTION: TransitionTable = TransitionTable {
        any_to_reset_or_error: true,
        state_always_required: false,
        transitions: &[
            transition(
                Reset,
                Init,
                mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT, m::IBV_QP_ACCESS_FLAGS]),
                0,
            ),
            transition(
                Init,
                Init,
                0,
                mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT, m::IBV_QP_ACCESS_FLAGS]),
            ),
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
        any_to_reset_or_error: true,
        state_always_required: false,
        transitions: &[
            transition(
                Reset,
                Init,
                mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT, m::IBV_QP_QKEY]),
                0,
            ),
            transition(
                Init,
                Init,
                0,
                mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT, m::IBV_QP_QKEY]),
            ),
            transition(Init, ReadyToReceive, 0, mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_QKEY])),
            transition(ReadyToReceive, ReadyToSend, mask(&[m::IBV_QP_SQ_PSN]), UD_RTS_OPTIONAL),
            transition(ReadyToSend, ReadyToSend, 0, UD_RTS_OPTIONAL),
            transition(ReadyToSend, SendQueueDrain, 0, mask(&[m::IBV_QP_EN_SQD_ASYNC_NOTIFY])),
            transition(SendQueueDrain, ReadyToSend, 0, UD_RTS_OPTIONAL),
            transition(
                SendQueueDrain,
                SendQueueDrain,
                0,
                mask(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_QKEY]),
            ),
            transition(SendQueueError, ReadyToSend, 0, UD_RTS_OPTIONAL),
        ],
    };
}

pub(crate) use tables::{RELIABLE_CONNECTION, UNRELIABLE_DATAGRAM};

impl TransitionTable {
    /// `(required, optional)` attribute masks of the transition `from -> to` (`IBV_QP_STATE`
    /// included in required), or `None` when the type does not allow it.
    pub(crate) fn transition(&self, from: QueuePairState, to: QueuePairState) -> Option<(i32, i32)> {
        let state = mask(&[ibv_qp_attr_mask::IBV_QP_STATE]);
        // Any state may go to RESET or ERR (kernel `qp_state_table`), where the type says so.
        if self.any_to_reset_or_error
            && matches!(to, QueuePairState::Reset | QueuePairState::Error)
            && from != QueuePairState::Unknown
        {
            return Some((state, 0));
        }
        self.transitions
            .iter()
            .find(|t| t.from == from && t.to == to)
            .map(|t| (t.required | state, t.optional))
    }

    /// Checks a modification against the table: the transition must exist, every required bit
    /// must be set and no bit may be outside required and optional.
    pub(crate) fn check(
        &self, from: QueuePairState, attr: &QueuePairAttribute,
    ) -> Result<(), ModifyQueuePairErrorKind> {
        let given = attr.mask.bits();
        let to = if attr.mask.contains(QueuePairAttributeMask::State) {
            attr.state()
        } else {
            from
        };
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        let state_bit = mask(&[ibv_qp_attr_mask::IBV_QP_STATE]);
        if self.state_always_required && given & state_bit == 0 {
            return Err(ModifyQueuePairErrorKind::InvalidAttributeMask {
                cur_state: from,
                next_state: to,
                invalid: QueuePairAttributeMask::from(0),
                needed: QueuePairAttributeMask::from(state_bit),
                source: einval(),
            });
        }
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

/// The calls the queue-pair core makes outside the data path, as a table of functions: the real
/// library's ([`LIBIBVERBS`]), or in unit tests a model of the kernel's rules that records them,
/// so that the public API of a queue pair can be driven without a device.
#[derive(Debug)]
pub(crate) struct QueuePairVerbs {
    /// `ibv_modify_qp`: an errno value, 0 on success; updates `ibv_qp::state` on success.
    pub(crate) modify: unsafe fn(*mut ibv_qp, *mut ibv_qp_attr, i32) -> i32,
    /// `ibv_query_qp`: an errno value, 0 on success.
    pub(crate) query: unsafe fn(*mut ibv_qp, *mut ibv_qp_attr, i32, *mut ibv_qp_init_attr) -> i32,
    /// `ibv_destroy_qp`: an errno value, 0 on success.
    pub(crate) destroy: unsafe fn(*mut ibv_qp) -> i32,
    /// `ibv_qp_to_qp_ex`: NULL when the queue pair has no extended view.
    pub(crate) to_qp_ex: unsafe fn(*mut ibv_qp) -> *mut ibv_qp_ex,
    /// `ibv_query_port`: an errno value, 0 on success.
    pub(crate) query_port: unsafe fn(*mut rdma_mummy_sys::ibv_context, u8, *mut rdma_mummy_sys::ibv_port_attr) -> i32,
    /// `ibv_query_gid_ex` without flags: an errno value, 0 on success (`ENODATA`: an empty
    /// slot). (Used by DC bring-up.)
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub(crate) query_gid_entry:
        unsafe fn(*mut rdma_mummy_sys::ibv_context, u8, u32, *mut rdma_mummy_sys::ibv_gid_entry) -> i32,
}

/// libibverbs itself, as rdma-mummy-sys loads it.
pub(crate) static LIBIBVERBS: QueuePairVerbs = QueuePairVerbs {
    modify: libibverbs::modify,
    query: libibverbs::query,
    destroy: libibverbs::destroy,
    to_qp_ex: libibverbs::to_qp_ex,
    query_port: libibverbs::query_port,
    query_gid_entry: super::source_gid::query_gid_entry,
};

mod libibverbs {
    //! Thin forwarders with the [`QueuePairVerbs`](super::QueuePairVerbs) signatures.
    //!
    //! # Safety
    //!
    //! Each takes the pointers of the C function it forwards to, with the same requirements.
    use rdma_mummy_sys::{ibv_context, ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_ex, ibv_qp_init_attr};

    /// # Safety
    ///
    /// As `ibv_modify_qp`: a live queue pair and a valid attribute struct.
    pub(super) unsafe fn modify(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: i32) -> i32 {
        rdma_mummy_sys::ibv_modify_qp(qp, attr, mask)
    }

    /// # Safety
    ///
    /// As `ibv_query_qp`: a live queue pair and writable structs.
    pub(super) unsafe fn query(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: i32, init: *mut ibv_qp_init_attr) -> i32 {
        rdma_mummy_sys::ibv_query_qp(qp, attr, mask, init)
    }

    /// # Safety
    ///
    /// As `ibv_destroy_qp`: a live queue pair, not used afterwards.
    pub(super) unsafe fn destroy(qp: *mut ibv_qp) -> i32 {
        rdma_mummy_sys::ibv_destroy_qp(qp)
    }

    /// # Safety
    ///
    /// As `ibv_qp_to_qp_ex`: a live queue pair.
    pub(super) unsafe fn to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
        rdma_mummy_sys::ibv_qp_to_qp_ex(qp)
    }

    /// # Safety
    ///
    /// As `ibv_query_port`: an open context and a writable struct.
    pub(super) unsafe fn query_port(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> i32 {
        rdma_mummy_sys::ibv_query_port(context, port, attr)
    }
}

/// The part every queue pair of this crate shares: the handle, its extended (`ibv_wr_*`) view and
/// provider entries, its type's transition table, its state as of the last modify or query, and
/// the `Arc`s of its parents, released after the handle is destroyed.
///
/// Nothing here reads the C struct through a Rust reference: libibverbs writes `ibv_qp::state`
/// in `ibv_modify_qp` and `ibv_query_qp`, which take `&mut self`; the number is read once.
#[derive(Debug)]
pub(crate) struct QueuePairCore {
    qp: NonNull<ibv_qp>,
    qp_ex: Option<(NonNull<ibv_qp_ex>, ProviderEntries)>,
    table: &'static TransitionTable,
    verbs: &'static QueuePairVerbs,
    /// The device context of the protection domain (kept alive by `_pd`).
    context: NonNull<rdma_mummy_sys::ibv_context>,
    qp_number: u32,
    state: QueuePairState,
    _srq: Option<Arc<SharedReceiveQueue>>,
    _send_cq: Option<GenericCompletionQueue>,
    _recv_cq: Option<GenericCompletionQueue>,
    // Always set for a queue pair on a device; `None` only for the unit tests' modelled ones.
    _pd: Option<Arc<ProtectionDomain>>,
}

impl Drop for QueuePairCore {
    fn drop(&mut self) {
        // SAFETY: the handle came from a create call and is destroyed once, before the parents.
        let ret = unsafe { (self.verbs.destroy)(self.qp.as_ptr()) };
        super::check_destroy("ibv_destroy_qp", ret);
    }
}

impl QueuePairCore {
    /// Takes ownership of a new queue pair. With `granted` (the send operations it was created
    /// with), reads its extended view and provider entries: a missing entry destroys the queue
    /// pair and is returned.
    ///
    /// # Safety
    ///
    /// `qp` must be a live queue pair created on `pd` with the given CQs and SRQ, in RESET, owned
    /// by the returned value (it destroys it); with `granted`, created with those
    /// `send_ops_flags`.
    pub(crate) unsafe fn new(
        qp: NonNull<ibv_qp>, table: &'static TransitionTable, granted: Option<SendOperationFlags>,
        pd: Arc<ProtectionDomain>, send_cq: Option<GenericCompletionQueue>, recv_cq: Option<GenericCompletionQueue>,
        srq: Option<Arc<SharedReceiveQueue>>,
    ) -> Result<Self, MissingProviderEntry> {
        let context = NonNull::new_unchecked(pd.pd().as_ref().context);
        let mut core = Self {
            qp,
            qp_ex: None,
            table,
            verbs: &LIBIBVERBS,
            context,
            qp_number: (*qp.as_ptr()).qp_num,
            state: QueuePairState::Reset,
            _srq: srq,
            _send_cq: send_cq,
            _recv_cq: recv_cq,
            _pd: Some(pd),
        };
        core.read_send_view(granted)?;
        Ok(core)
    }

    /// A queue pair whose calls go to `verbs` (a unit test's model), without parents.
    ///
    /// # Safety
    ///
    /// `qp` must stay valid for `verbs` until `verbs.destroy` is called on it; `context` is
    /// only handed to `verbs`.
    #[cfg(test)]
    #[allow(dead_code)] // used by the DC queue pairs' model (feature mlx5)
    pub(crate) unsafe fn modelled(
        qp: NonNull<ibv_qp>, table: &'static TransitionTable, granted: Option<SendOperationFlags>,
        verbs: &'static QueuePairVerbs, context: NonNull<rdma_mummy_sys::ibv_context>,
    ) -> Result<Self, MissingProviderEntry> {
        let mut core = Self {
            qp,
            qp_ex: None,
            table,
            verbs,
            context,
            qp_number: (*qp.as_ptr()).qp_num,
            state: QueuePairState::Reset,
            _srq: None,
            _send_cq: None,
            _recv_cq: None,
            _pd: None,
        };
        core.read_send_view(granted)?;
        Ok(core)
    }

    /// Reads the extended view and its entries (`ibv_qp_to_qp_ex` is valid only for queue pairs
    /// created with `send_ops_flags`).
    ///
    /// # Safety
    ///
    /// The handle must be live; with `granted`, created with those `send_ops_flags`.
    unsafe fn read_send_view(&mut self, granted: Option<SendOperationFlags>) -> Result<(), MissingProviderEntry> {
        self.qp_ex = None;
        if let Some(granted) = granted {
            let qp_ex =
                NonNull::new((self.verbs.to_qp_ex)(self.qp.as_ptr())).ok_or(MissingProviderEntry("ibv_qp_to_qp_ex"))?;
            self.qp_ex = Some((qp_ex, ProviderEntries::new(qp_ex, granted)?));
        }
        Ok(())
    }

    /// Destroys the queue pair and adopts `qp`, a new one on the same parents (a DC initiator
    /// rebuilt where the kernel refuses its move to RESET): the parents stay, the number and
    /// views are the new queue pair's, the state RESET.
    ///
    /// # Safety
    ///
    /// As [`new`](Self::new), for `qp` on this core's parents, and no view of the old queue pair
    /// may be used afterwards.
    #[allow(dead_code)] // used by the DC initiator of the mlx5 module
    pub(crate) unsafe fn replace(
        &mut self, qp: NonNull<ibv_qp>, granted: Option<SendOperationFlags>,
    ) -> Result<(), MissingProviderEntry> {
        let old = std::mem::replace(&mut self.qp, qp);
        let ret = (self.verbs.destroy)(old.as_ptr());
        super::check_destroy("ibv_destroy_qp", ret);
        self.qp_number = (*qp.as_ptr()).qp_num;
        self.state = QueuePairState::Reset;
        self.read_send_view(granted)
    }

    pub(crate) fn qp(&self) -> NonNull<ibv_qp> {
        self.qp
    }

    /// The provider entries of a queue pair created with send operations (none otherwise).
    pub(crate) fn entries(&self) -> ProviderEntries {
        self.qp_ex.map_or(ProviderEntries::NONE, |(_, entries)| entries)
    }

    /// The device context the queue pair was created on.
    #[allow(dead_code)] // used by the DC queue pairs of the mlx5 module
    pub(crate) fn context(&self) -> NonNull<rdma_mummy_sys::ibv_context> {
        self.context
    }

    /// `ibv_query_port` on the queue pair's context, through its verbs.
    #[allow(dead_code)] // used by the DC queue pairs of the mlx5 module
    pub(crate) fn query_port(&self, port: u8) -> io::Result<rdma_mummy_sys::ibv_port_attr> {
        if port == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut attr = MaybeUninit::<rdma_mummy_sys::ibv_port_attr>::zeroed();
        // SAFETY: the context is open while the protection domain is (or is the model's);
        // attr is writable.
        let ret = unsafe { (self.verbs.query_port)(self.context.as_ptr(), port, attr.as_mut_ptr()) };
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
        // SAFETY: the call filled it (and it was zeroed before).
        Ok(unsafe { attr.assume_init() })
    }

    /// The set slots of local `port`'s GID table ([`read_gid_table`](super::source_gid::read_gid_table)).
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub(crate) fn gid_table(
        &self, port: u8, port_attr: &rdma_mummy_sys::ibv_port_attr,
    ) -> Result<Vec<rdma_mummy_sys::ibv_gid_entry>, super::source_gid::SourceGidError> {
        // SAFETY: the context is open while the protection domain is (or is the model's, which
        // its verbs take).
        unsafe {
            super::source_gid::read_gid_table(self.context, port, port_attr.gid_tbl_len, self.verbs.query_gid_entry)
        }
    }

    /// The extended view of a queue pair created with send operations, and its entries.
    pub(crate) fn send_view(&self) -> Option<(NonNull<ibv_qp_ex>, ProviderEntries)> {
        self.qp_ex
    }

    /// Adds entries the queue pair's provider filled outside `ibv_qp_ex` (checked by the caller).
    #[allow(dead_code)] // used by the DC queue pairs of the mlx5 module
    pub(crate) fn add_entries(&mut self, bits: u32) {
        if let Some((_, entries)) = &mut self.qp_ex {
            *entries = entries.with(bits);
        }
    }

    /// The queue pair number as the library holds it now (a DC target gets its number at RTR).
    #[allow(dead_code)] // used by the DC queue pairs of the mlx5 module
    pub(crate) fn live_qp_number(&self) -> u32 {
        // SAFETY: the handle is alive; the library writes qp_num only inside ibv_modify_qp, which
        // takes `&mut self`; the field is read through a raw pointer, no reference.
        unsafe { std::ptr::addr_of!((*self.qp.as_ptr()).qp_num).read() }
    }

    pub(crate) fn qp_number(&self) -> u32 {
        self.qp_number
    }

    pub(crate) fn state(&self) -> QueuePairState {
        self.state
    }

    /// The transition table the queue pair is checked against.
    #[allow(dead_code)] // used by the DC queue pairs of the mlx5 module
    pub(crate) fn table(&self) -> &'static TransitionTable {
        self.table
    }

    pub(crate) fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairError> {
        self.table.check(self.state, attr)?;
        let mut raw = attr.attr.clone();
        // SAFETY: the handle is alive and exclusively borrowed; raw is a valid ibv_qp_attr.
        let ret = unsafe { (self.verbs.modify)(self.qp.as_ptr(), raw.as_mut_ptr(), attr.mask.bits()) };
        if ret != 0 {
            return Err(ModifyQueuePairErrorKind::Ibverbs(io::Error::from_raw_os_error(ret)).into());
        }
        if attr.mask.contains(QueuePairAttributeMask::State) {
            self.state = attr.state();
        }
        Ok(())
    }

    pub(crate) fn query(&mut self, mask: QueuePairAttributeMask) -> Result<QueuePairAttribute, QueryQueuePairError> {
        let mut attr = QueuePairAttribute::new();
        // SAFETY: ibv_qp_init_attr is plain data for which all zeroes is valid.
        let mut init_attr: ibv_qp_init_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: the handle is alive and exclusively borrowed (libibverbs updates its cached
        // state); both structs are writable.
        let ret = unsafe { (self.verbs.query)(self.qp.as_ptr(), attr.attr.as_mut_ptr(), mask.bits(), &mut init_attr) };
        if ret != 0 {
            return Err(QueryQueuePairErrorKind::Ibverbs(io::Error::from_raw_os_error(ret)).into());
        }
        attr.mask = mask;
        if mask.contains(QueuePairAttributeMask::State) {
            // The device may have moved the queue pair (to SQE or ERR) on its own.
            self.state = state_from_raw(attr.attr.qp_state);
        }
        Ok(attr)
    }
}

impl SharedReceiveQueue {
    /// Creates a builder for RC and UD queue pairs that receive through this queue, on the same
    /// protection domain.
    pub fn create_qp_builder(self: &Arc<Self>) -> SharedReceiveQueuePairBuilder {
        SharedReceiveQueuePairBuilder::new(self)
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
        self.build(ibv_qp_type::IBV_QPT_RC, &RELIABLE_CONNECTION, all)
    }

    /// Creates an unreliable-datagram (UD) queue pair; its receives include the 40-byte GRH
    /// headroom at the start of each buffer.
    pub fn build_ud(&self) -> Result<SharedReceiveQueuePair<UnreliableDatagram>, CreateQueuePairError> {
        let all = SendOperationFlags::Send | SendOperationFlags::SendWithImmediate;
        self.build(ibv_qp_type::IBV_QPT_UD, &UNRELIABLE_DATAGRAM, all)
    }

    fn build<T: Transport>(
        &self, qp_type: u32, table: &'static TransitionTable, allowed: SendOperationFlags,
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

        let mut init = Zeroed::<ibv_qp_init_attr_ex>::new();
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
        let qp = unsafe { rdma_mummy_sys::ibv_create_qp_ex(pd.pd().as_ref().context, init.as_mut_ptr()) };
        let qp = NonNull::new(qp).ok_or_else(|| CreateQueuePairErrorKind::Ibverbs(io::Error::last_os_error()))?;
        // SAFETY: qp was just created on these parents, with these send operations, and is owned
        // here (a missing provider entry destroys it).
        let core = unsafe {
            QueuePairCore::new(
                qp,
                table,
                Some(send_ops),
                pd,
                Some(send_cq),
                Some(recv_cq),
                Some(Arc::clone(&self.srq)),
            )
        }
        .map_err(|missing| CreateQueuePairErrorKind::MissingProviderEntry { entry: missing.0 })?;
        if qp_type == ibv_qp_type::IBV_QPT_UD && !core.entries().contains(entry::SET_UD_ADDR) {
            return Err(CreateQueuePairErrorKind::MissingProviderEntry {
                entry: "wr_set_ud_addr",
            }
            .into());
        }
        let send_view = core.send_view().ok_or(CreateQueuePairErrorKind::MissingProviderEntry {
            entry: "ibv_qp_to_qp_ex",
        })?;
        Ok(SharedReceiveQueuePair {
            core,
            send_view,
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
    // The core's extended view and entries, which every SharedReceiveQueuePair has.
    send_view: (NonNull<ibv_qp_ex>, ProviderEntries),
    max_send_wr: u32,
    max_inline_data: u32,
    _transport: PhantomData<T>,
}

// SAFETY: the handle may be used from any thread; every call that lets the library write the
// queue pair (modify, query, posting) takes `&mut self`.
unsafe impl<T: Transport> Send for SharedReceiveQueuePair<T> {}
// SAFETY: `&self` methods read only Rust-side copies (number, state, capacities), never the C
// struct.
unsafe impl<T: Transport> Sync for SharedReceiveQueuePair<T> {}

impl<T: Transport> SharedReceiveQueuePair<T> {
    /// The queue-pair core, for the bring-up helpers.
    pub(crate) fn core(&self) -> &QueuePairCore {
        &self.core
    }

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

    /// The current state, as of the last [`modify`](Self::modify) or [`query`](Self::query) of the
    /// state through this value (the device may move a queue pair to SQE or ERR on its own: query
    /// to see it).
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

    /// Reads the attributes named by `mask` with `ibv_query_qp`. Takes `&mut self` because
    /// libibverbs writes the queue pair's cached state during the call.
    pub fn query(&mut self, mask: QueuePairAttributeMask) -> Result<QueuePairAttribute, QueryQueuePairError> {
        self.core.query(mask)
    }

    /// Starts a batch of send requests (`ibv_wr_start`); the guard posts them with `post()` or
    /// discards them when dropped.
    #[inline]
    pub fn start_post_send(&mut self) -> PostSendGuard<'_, T>
    where
        T: Transport<Context = ()>,
    {
        let (qp_ex, entries) = self.send_view;
        // SAFETY: the queue pair is alive and exclusively borrowed for the guard's lifetime; its
        // provider filled the entries read at creation; RC and UD need no context.
        unsafe { PostSendGuard::start(qp_ex, entries, ()) }
    }

    /// Posts one send request, at the cost of the raw calls (`ibv_wr_start`, the request's
    /// `ibv_wr_*` calls, `ibv_wr_complete`): for the everyday "send the next message". `request`
    /// describes it from its operation on, with the same steps as a batch's
    /// ([`construct_wr`](PostSendGuard::construct_wr)):
    ///
    /// ```no_run
    /// # use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
    /// # fn f(qp: &mut sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair<sideway_ext::ibverbs::post_send_guard::ReliableConnection>) -> Result<(), Box<dyn std::error::Error>> {
    /// qp.post_send_one(7, WorkRequestFlags::Signaled, |wr| wr.setup_send().setup_inline_data(b"hello"))?;
    /// # Ok(()) }
    /// ```
    ///
    /// It guarantees what a batch does: an operation or data setter the queue pair was not
    /// created with never reaches the provider
    /// ([`OperationNotEnabled`](super::post_send_guard::PostSendErrorKind::OperationNotEnabled)
    /// names the request's `wr_id`), and a failed post posted nothing. A `request` that stops
    /// before its data step posts nothing and returns `Ok`.
    ///
    /// See [`ibv_wr_post`](https://man7.org/linux/man-pages/man3/ibv_wr_post.3.html).
    #[inline(always)]
    // Paths spelled out, so that this data-path method leaves the control plane's imports alone.
    pub fn post_send_one(
        &mut self, wr_id: u64, wr_flags: sideway::ibverbs::queue_pair::WorkRequestFlags,
        request: impl FnOnce(super::post_send_guard::WorkRequestHandle<'_, T>),
    ) -> Result<(), super::post_send_guard::PostSendError>
    where
        T: Transport<Context = ()>,
    {
        let (qp_ex, entries) = self.send_view;
        // SAFETY: as in start_post_send: the queue pair is alive and exclusively borrowed for the
        // call; its provider filled the entries read at creation; RC and UD need no context.
        unsafe { PostSendGuard::post_one(qp_ex, entries, (), wr_id, wr_flags, request) }
    }
}

#[cfg(test)]
mod tests {
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
    fn an_unknown_state_value_decodes_without_panicking() {
        let mut attr = QueuePairAttribute::new();
        attr.attr.qp_state = 1000;
        assert_eq!(attr.state(), Unknown);
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
