//! [`DirectCompletionQueue`]: a sideway completion queue polled by this crate's poller, for the
//! direct DC initiators that complete into it.
use std::ptr::NonNull;
use std::rc::Rc;

use rdma_mummy_sys::ibv_cq;
use sideway::ibverbs::completion::{CompletionQueue, GenericCompletionQueue};
use sideway_ext::mlx5::direct_objects::completion_queue_object;

use super::table::SendQueueTable;
use super::{
    Completion, CompletionQueueParts, CompletionQueuePoller, CreateDirectCompletionQueueError,
    CreateDirectCompletionQueueErrorKind, PollDirectCompletionQueueError,
};

/// The send completion queue of direct DC initiators ([`DirectDcInitiator`](crate::DirectDcInitiator)),
/// read from its memory as `mlx5_poll_cq` reads it.
///
/// ```no_run
/// use sideway::ibverbs::completion::GenericCompletionQueue;
/// use sideway_ext_dc_direct::completion_queue::Completion;
/// use sideway_ext_dc_direct::DirectCompletionQueue;
///
/// # fn poll(cq: GenericCompletionQueue) -> Result<(), Box<dyn std::error::Error>> {
/// // SAFETY: nothing polls `cq` but this value, and only direct initiators complete into it.
/// let mut direct_cq = unsafe { DirectCompletionQueue::new(cq) }?;
/// let mut completions = [Completion::default(); 16];
/// let polled = direct_cq.poll(&mut completions)?;
/// for completion in &completions[..polled] {
///     println!("{} {:?}", completion.wr_id(), completion.status());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DirectCompletionQueue {
    poller: CompletionQueuePoller,
    /// The send queues it retires requests of.
    table: Rc<SendQueueTable>,
    /// Keeps the CQ, and with it the memory the poller reads, alive.
    cq: GenericCompletionQueue,
}

impl DirectCompletionQueue {
    /// Takes over polling `cq`: reads its memory with `mlx5dv_init_obj` (after which libmlx5
    /// treats the CQ as its caller's and no longer cleans it of a destroyed or reset queue
    /// pair's completions), and polls from the consumer index its doorbell record holds.
    ///
    /// Give the same CQ (a clone) to the builder of each DC initiator that will complete into
    /// it, sized for all their `max_send_wr` together. It cannot be armed for events.
    ///
    /// # Errors
    ///
    /// [`CreateDirectCompletionQueueErrorKind`].
    ///
    /// # Safety
    ///
    /// While this value lives, nothing else may poll `cq` (`ibv_poll_cq`, sideway's pollers on
    /// any clone of it): libmlx5 would consume CQEs this poller counts on and store its own
    /// consumer index in the doorbell record the device reads.
    pub unsafe fn new(cq: GenericCompletionQueue) -> Result<Self, CreateDirectCompletionQueueError> {
        // Before libmlx5 hands the CQ's memory out (and stops cleaning it).
        crate::barrier::check_architecture(std::env::consts::ARCH)
            .map_err(|architecture| CreateDirectCompletionQueueErrorKind::UnsupportedArchitecture { architecture })?;
        // SAFETY: `cq` is alive, held below.
        let object =
            unsafe { completion_queue_object(cq.cq()) }.map_err(CreateDirectCompletionQueueErrorKind::InitObject)?;
        let (Some(buffer), Some(doorbell_record)) = (NonNull::new(object.buf), NonNull::new(object.dbrec)) else {
            return Err(CreateDirectCompletionQueueErrorKind::MissingMemory.into());
        };
        let parts = CompletionQueueParts {
            buffer: buffer.cast(),
            cqe_count: object.cqe_cnt,
            cqe_size: object.cqe_size,
            doorbell_record: doorbell_record.cast(),
            cq_number: object.cqn,
        };
        // SAFETY: the memory libmlx5 gave is the CQ's, alive while `cq` (held with the poller)
        // is; the caller promises nothing else polls it.
        let poller = unsafe { CompletionQueuePoller::new(parts) }?;
        Ok(Self {
            poller,
            table: Rc::default(),
            cq,
        })
    }

    /// Polls at most `completions.len()` send completions into `completions` and returns how
    /// many it filled (`mlx5_poll_cq`); their requests' room is free again.
    ///
    /// # Errors
    ///
    /// A CQE that is not a send completion of one of its initiators' outstanding requests
    /// ([`PollDirectCompletionQueueErrorKind`](super::PollDirectCompletionQueueErrorKind)),
    /// returned once the completions before it were.
    #[inline]
    pub fn poll(&mut self, completions: &mut [Completion]) -> Result<usize, PollDirectCompletionQueueError> {
        self.poller.poll(&self.table, completions)
    }

    /// The CQ number (`mlx5dv_cq`'s `cqn`).
    pub fn cq_number(&self) -> u32 {
        self.poller.cq_number()
    }

    /// The CQ's handle.
    pub(crate) fn ibv_cq(&self) -> NonNull<ibv_cq> {
        // SAFETY: the handle is only compared, never dereferenced through this copy.
        unsafe { self.cq.cq() }
    }

    pub(crate) fn table(&self) -> &Rc<SendQueueTable> {
        &self.table
    }
}

/// The direct poller as a pool polls it (feature `pool`): each completion as a value, none handed
/// over whole (a completion of another queue pair fails the poll).
#[cfg(feature = "pool")]
mod pool {
    use std::io;

    use sideway::ibverbs::completion::PollCompletionQueueError;
    use sideway_ext::ibverbs::work_completion::WorkCompletion;
    use sideway_ext_dc_pool::initiator::{PoolCompletion, PoolCompletionQueue};

    use super::{Completion, DirectCompletionQueue};
    use crate::completion_queue::PollDirectCompletionQueueErrorKind;

    /// The most completions one pool poll reads (the pool's own batch of work completions).
    const MOST_PER_POLL: usize = 32;

    impl PoolCompletionQueue for DirectCompletionQueue {
        fn poll(
            &mut self, mut each: impl FnMut(PoolCompletion, Option<&WorkCompletion>),
        ) -> Result<usize, PollCompletionQueueError> {
            let mut completions = [Completion::default(); MOST_PER_POLL];
            let polled = self.poller.poll(&self.table, &mut completions).map_err(|error| {
                let kind = match error.0 {
                    PollDirectCompletionQueueErrorKind::SendQueueInUse { .. } => io::ErrorKind::WouldBlock,
                    _ => io::ErrorKind::InvalidData,
                };
                PollCompletionQueueError::Ibverbs(io::Error::new(kind, error))
            })?;
            for completion in &completions[..polled] {
                let status = completion.status() as u32;
                each(
                    PoolCompletion::new(
                        completion.qp_number(),
                        completion.wr_id(),
                        status,
                        completion.vendor_err(),
                    ),
                    None,
                );
            }
            Ok(polled)
        }
    }
}
