//! [`DirectDcInitiator`]: a sideway-ext [`DcInitiator`] whose WQEs this crate writes, through a
//! [`SendQueue`](crate::send_queue::SendQueue) over the queue pair's own memory
//! (`mlx5dv_init_obj`), completing into a [`DirectCompletionQueue`].
mod address;
mod error;
pub(crate) mod parts;
#[cfg(feature = "pool")]
mod pool;
pub(crate) mod posting;
mod recovery;
mod register;
#[cfg(test)]
mod tests;

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use sideway::ibverbs::queue_pair::{QueryQueuePairError, QueuePairState};
use sideway_ext::mlx5::dc::initiator::thread_domain::DcInitiatorOnThreadDomain;
use sideway_ext::mlx5::dc::initiator::{BringUpDcInitiatorError, DcInitiator, DcInitiatorBringUp, ResetDciStreamError};
use sideway_ext::mlx5::direct_objects::queue_pair_object;

pub use self::error::{
    CreateDirectDcInitiatorError, CreateDirectDcInitiatorErrorKind, RecoverDirectDcInitiatorError,
    RecoverDirectDcInitiatorErrorKind,
};
use self::parts::{check_signatures, send_queue_parts, Created, WQE_SIGNATURE_VARIABLE};
use self::posting::PostingQueue;
pub use self::register::DirectRegister;
use self::register::{BlueFlame, RegisterClaim};
use crate::barrier::check_architecture;
use crate::completion_queue::DirectCompletionQueue;
pub use crate::send_queue::shared::DirectBatch;
use crate::send_queue::{AddressVector, BatchAddress, CreateSendQueueErrorKind, EachRequest};

/// A DC initiator whose requests this crate writes and whose doorbell it rings, as libmlx5's
/// post path would; its completions are polled by its [`DirectCompletionQueue`].
#[derive(Debug)]
pub struct DirectDcInitiator {
    /// Dropped first: it writes the queue pair's memory, and takes itself out of the completion
    /// queue's table.
    posting: PostingQueue,
    register: DirectRegister,
    /// The BlueFlame register's claim, while this initiator writes it (none for a doorbell
    /// register).
    _claim: Option<RegisterClaim>,
    /// What [`bring_up`](Self::bring_up) was given, for [`recover`](Self::recover).
    brought_up_with: Option<DcInitiatorBringUp>,
    /// Dropped last: the queue pair whose memory the send queue writes (and its thread domain).
    dci: OwnedDcInitiator,
}

/// The DC initiator a [`DirectDcInitiator`] takes over: alone, or with the thread domain it was
/// created on ([`build_on_thread_domain`](sideway_ext::mlx5::dc::initiator::DcInitiatorBuilder::build_on_thread_domain)),
/// whose register the direct initiator then writes without a lock, holding the thread domain
/// until after the queue pair.
#[derive(Debug)]
pub enum OwnedDcInitiator {
    /// Without a thread domain of its own.
    Alone(DcInitiator),
    /// With the thread domain it was created on.
    OnThreadDomain(DcInitiatorOnThreadDomain),
}

impl OwnedDcInitiator {
    /// Whether it is the DC initiator created on the thread domain held with it.
    fn is_on_its_thread_domain(&self) -> bool {
        match self {
            Self::Alone(_) => false,
            Self::OnThreadDomain(dci) => dci.is_on_its_thread_domain(),
        }
    }
}

impl From<DcInitiator> for OwnedDcInitiator {
    fn from(dci: DcInitiator) -> Self {
        Self::Alone(dci)
    }
}

impl From<DcInitiatorOnThreadDomain> for OwnedDcInitiator {
    fn from(dci: DcInitiatorOnThreadDomain) -> Self {
        Self::OnThreadDomain(dci)
    }
}

impl Deref for OwnedDcInitiator {
    type Target = DcInitiator;

    fn deref(&self) -> &DcInitiator {
        match self {
            Self::Alone(dci) => dci,
            Self::OnThreadDomain(dci) => dci,
        }
    }
}

impl DerefMut for OwnedDcInitiator {
    fn deref_mut(&mut self) -> &mut DcInitiator {
        match self {
            Self::Alone(dci) => dci,
            Self::OnThreadDomain(dci) => dci,
        }
    }
}

impl DirectDcInitiator {
    /// Takes over posting on `dci`, which must complete into `cq`, be in RESET, and have a
    /// register this writer may write without a lock ([crate](crate#the-blueflame-register)).
    ///
    /// # Errors
    ///
    /// [`CreateDirectDcInitiatorErrorKind`]; `dci` is dropped (destroyed) with the error.
    pub fn new(
        dci: impl Into<OwnedDcInitiator>, cq: &DirectCompletionQueue,
    ) -> Result<Self, CreateDirectDcInitiatorError> {
        // SAFETY: without a promise, only registers this writer may write alone are taken.
        unsafe { Self::create(dci.into(), cq, BlueFlame::Refused) }
    }

    /// As [`new`](Self::new), also for a DC initiator without a thread domain of its own whose
    /// register is a BlueFlame register, written without libmlx5's lock.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    ///
    /// # Safety
    ///
    /// While the direct initiator lives, no queue pair posted through libmlx5 (or any other
    /// writer than this crate's) may write its BlueFlame register. libmlx5 shares registers,
    /// locked, among the queue pairs of a device context beyond its first
    /// `MLX5_NUM_LOW_LAT_UUARS` (default 4) (`mlx5_get_qp_uar`, `need_uuar_lock`; read from
    /// rdma-core, no ConnectX has confirmed it): this holds when no other queue pair of the
    /// context posts meanwhile, or when at most that many exist. A kernel without dynamic UAR
    /// allocation maps them uncached under `MLX5_SHUT_UP_BF`, which nothing has checked.
    pub unsafe fn new_with_blueflame(
        dci: impl Into<OwnedDcInitiator>, cq: &DirectCompletionQueue,
    ) -> Result<Self, CreateDirectDcInitiatorError> {
        // SAFETY: the caller's promise.
        unsafe { Self::create(dci.into(), cq, BlueFlame::Owned) }
    }

    /// # Safety
    ///
    /// With [`BlueFlame::Owned`], as [`new_with_blueflame`](Self::new_with_blueflame).
    unsafe fn create(
        mut dci: OwnedDcInitiator, cq: &DirectCompletionQueue, blueflame: BlueFlame,
    ) -> Result<Self, CreateDirectDcInitiatorError> {
        use CreateDirectDcInitiatorErrorKind::*;
        check_architecture(std::env::consts::ARCH).map_err(|architecture| UnsupportedArchitecture { architecture })?;
        check_signatures(std::env::var_os(WQE_SIGNATURE_VARIABLE).as_deref())?;
        let state = dci.query_state().map_err(QueryState)?;
        if state != QueuePairState::Reset {
            return Err(NotInReset { state }.into());
        }
        // SAFETY: the queue pair is alive (`dci` holds it); its send CQ field is only read.
        let send_cq = unsafe { dci.qp().as_ref().send_cq };
        if send_cq != cq.ibv_cq().as_ptr() {
            return Err(DifferentCompletionQueue.into());
        }
        // SAFETY: as above.
        let object = unsafe { queue_pair_object(dci.qp()) }.map_err(InitObject)?;
        let created = Created {
            qp_number: dci.qp_number(),
            max_post: dci.max_send_wr(),
            max_inline_data: dci.max_inline_data(),
            max_send_sge: dci.max_send_sge(),
            sq_sig_all: dci.sq_sig_all(),
            streams: dci.streams().is_some(),
        };
        // SAFETY: libmlx5 gave `object` for the live queue pair.
        let parts = unsafe { send_queue_parts(&object, created) }?;
        // Its own thread domain's register only where it holds the thread domain it was created on
        // (which this initiator then holds until after the queue pair).
        let register = DirectRegister::of(dci.is_on_its_thread_domain(), parts.blueflame_size, blueflame)?;
        let claim = match register.blueflame_size() {
            0 => None,
            _ => {
                let register = parts.blueflame.as_ptr() as usize;
                Some(RegisterClaim::claim(register).ok_or(BlueFlameRegisterShared { register })?)
            },
        };
        // SAFETY: the memory is the queue pair's, alive while `dci` is (held until the queue is
        // dropped); nothing else posts on it (owned here, libmlx5's post path unreachable) or
        // writes its register (its own thread domain's, a doorbell register, or the caller's
        // promise, and the claim); the limits are those libmlx5 granted; in RESET its posting
        // index is 0.
        let queue = unsafe { crate::send_queue::SendQueue::from_parts(parts) }.map_err(|err| match err.0 {
            CreateSendQueueErrorKind::UnsupportedArchitecture { architecture } => {
                UnsupportedArchitecture { architecture }
            },
            _ => SendQueue(err),
        })?;
        let posting = PostingQueue::new(queue, cq.table());
        Ok(Self {
            posting,
            register,
            _claim: claim,
            brought_up_with: None,
            dci,
        })
    }

    /// Starts a batch of requests (`mlx5_send_wr_start`): `construct_wr` → an operation →
    /// `setup_dc_addr` → the data, then [`post`](DirectBatch::post). Post in RTS, as
    /// on libmlx5 (after [`bring_up`](Self::bring_up)).
    #[inline]
    pub fn start_post_send(&mut self) -> DirectBatch<'_> {
        self.posting.start_post_send(EachRequest)
    }

    /// Starts a batch of requests to the DCT `dct_number` with access key `dc_key`, over the
    /// route of `address`, on DCI stream `stream_id` if given
    /// (`mlx5_send_wr_set_dc_addr_stream`): each goes `construct_wr` → an operation → the data.
    #[inline]
    pub fn start_post_send_to(
        &mut self, address: &AddressVector, dct_number: u32, dc_key: u64, stream_id: Option<u16>,
    ) -> DirectBatch<'_, BatchAddress> {
        self.posting
            .start_post_send(BatchAddress::new(address, dct_number, dc_key, stream_id))
    }

    /// The register it rings its doorbell through, and why it may write it alone.
    pub fn register(&self) -> DirectRegister {
        self.register
    }

    /// The DC initiator, for its accessors.
    pub fn dc_initiator(&self) -> &DcInitiator {
        &self.dci
    }

    /// Requests posted and not yet completed (their completions not yet polled).
    pub fn outstanding(&self) -> u32 {
        self.posting.outstanding()
    }

    /// Brings the DC initiator from RESET to RTS ([`DcInitiator::bring_up`]), keeping the
    /// parameters for [`recover`](Self::recover).
    ///
    /// # Errors
    ///
    /// As [`DcInitiator::bring_up`].
    pub fn bring_up(&mut self, params: &DcInitiatorBringUp) -> Result<(), BringUpDcInitiatorError> {
        self.dci.bring_up(params)?;
        self.brought_up_with = Some(params.clone());
        Ok(())
    }

    /// Reads the state from the device ([`DcInitiator::query_state`]).
    ///
    /// # Errors
    ///
    /// As [`DcInitiator::query_state`].
    pub fn query_state(&mut self) -> Result<QueuePairState, QueryQueuePairError> {
        self.dci.query_state()
    }

    /// Reads the state until it is ERR or `timeout` has passed
    /// ([`DcInitiator::wait_for_error`]).
    ///
    /// # Errors
    ///
    /// As [`DcInitiator::wait_for_error`].
    pub fn wait_for_error(&mut self, timeout: Duration) -> Result<QueuePairState, QueryQueuePairError> {
        self.dci.wait_for_error(timeout)
    }

    /// Resets one errored DCI stream ([`DcInitiator::reset_stream`]).
    ///
    /// # Errors
    ///
    /// As [`DcInitiator::reset_stream`].
    pub fn reset_stream(&mut self, stream_id: u16) -> Result<(), ResetDciStreamError> {
        self.dci.reset_stream(stream_id)
    }
}
