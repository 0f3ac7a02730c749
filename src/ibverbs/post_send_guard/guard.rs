//! [`TypedPostSendGuard`]: a batch of send requests between `ibv_wr_start` and `ibv_wr_complete`, and
//! the [`Batch`] state its requests update.
use std::marker::PhantomData;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_qp_ex, ibv_wr_abort, ibv_wr_complete, ibv_wr_start};
use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::error::complete_error;
use super::{ProviderEntries, Transport, TypedPostSendError, TypedPostSendErrorKind, TypedWorkRequestHandle};

/// The state of a batch that its requests update (reached only through a [`TypedPostSendGuard`]).
#[derive(Debug)]
pub struct Batch {
    pub(super) qp_ex: NonNull<ibv_qp_ex>,
    /// The entries the provider lacks: a request checks its bits with one test.
    pub(super) missing: u32,
    pub(super) len: usize,
    refused: Option<Refused>,
    /// The queue pair's granted inline size (`u32::MAX` where it is not known here).
    pub(super) max_inline_data: u32,
}

/// The first request of a batch that was refused before reaching the provider.
#[derive(Debug, Clone, Copy)]
struct Refused {
    index: usize,
    wr_id: u64,
    reason: Refusal,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// It needed this entry, which the queue pair lacks.
    Entry(&'static str),
    /// Its inline data has this length, over the granted size.
    DataTooLong(usize),
}

impl Batch {
    /// Records a refused request.
    #[inline]
    pub(super) fn refuse(&mut self, wr_id: u64, needed: u32) {
        if self.refused.is_none() {
            self.refused = Some(refusal(self.missing, self.len, wr_id, needed));
        }
        self.len += 1;
    }

    /// Records a request whose inline data of `length` bytes is over the granted size.
    #[cold]
    #[inline(never)]
    pub(super) fn refuse_inline(&mut self, wr_id: u64, length: usize) {
        if self.refused.is_none() {
            self.refused = Some(Refused {
                index: self.len,
                wr_id,
                reason: Refusal::DataTooLong(length),
            });
        }
        self.len += 1;
    }
}

#[cold]
#[inline(never)]
fn refusal(missing: u32, index: usize, wr_id: u64, needed: u32) -> Refused {
    Refused {
        index,
        wr_id,
        reason: Refusal::Entry(ProviderEntries(!missing).name_of_first_missing(needed)),
    }
}

/// A batch of send requests on one queue pair; see the [module](super) documentation.
#[must_use = "the batch is posted only by post(); dropping the guard aborts it"]
pub struct TypedPostSendGuard<'qp, T: Transport> {
    batch: Batch,
    _qp: PhantomData<(&'qp mut (), T)>,
}

impl<T: Transport> TypedPostSendGuard<'_, T> {
    /// Starts a batch with `ibv_wr_start` on a queue pair's extended view: one created
    /// through libibverbs directly.
    ///
    /// ```no_run
    /// # use std::ptr::NonNull;
    /// # use sideway::ibverbs::queue_pair::{SendOperationFlags, WorkRequestFlags, SetScatterGatherEntry};
    /// use sideway_ext::ibverbs::post_send_guard::{ProviderEntries, ReliableConnection, TypedPostSendGuard};
    /// # fn adopt(qp_ex: NonNull<rdma_mummy_sys::ibv_qp_ex>) -> Result<(), Box<dyn std::error::Error>> {
    /// // `qp_ex`: the extended view of an RC queue pair created elsewhere and in RTS.
    /// // SAFETY: the queue pair is alive and used by no one else while the guard lives.
    /// let entries = unsafe { ProviderEntries::new(qp_ex, SendOperationFlags::Send) }?;
    /// // SAFETY: as above; its provider filled `entries`.
    /// let mut guard = unsafe { TypedPostSendGuard::<ReliableConnection>::start(qp_ex, entries) };
    /// // SAFETY: the buffer at 0x1000 is registered under lkey 7 and outlives the request.
    /// unsafe { guard.construct_wr(1, WorkRequestFlags::Signaled).setup_send().setup_sge(7, 0x1000, 64) };
    /// guard.post()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    ///
    /// - `qp_ex` must be the extended view of a live queue pair, exclusively borrowed for the
    ///   guard's lifetime, whose provider filled at least the entries named by `entries`
    ///   (read them with [`ProviderEntries::new`]), of `T`'s queue-pair type.
    #[inline]
    pub unsafe fn start(qp_ex: NonNull<ibv_qp_ex>, entries: ProviderEntries) -> Self {
        ibv_wr_start(qp_ex.as_ptr());
        Self {
            batch: Batch {
                qp_ex,
                missing: !entries.bits(),
                len: 0,
                refused: None,
                max_inline_data: u32::MAX,
            },
            _qp: PhantomData,
        }
    }

    /// Starts a new request with this `wr_id` and flags (the [`Inline`](WorkRequestFlags::Inline)
    /// bit is the data step's); continue with an operation on the returned handle.
    #[inline]
    pub fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> TypedWorkRequestHandle<'_, T> {
        TypedWorkRequestHandle {
            batch: &mut self.batch,
            wr_id,
            wr_flags: wr_flags.bits(),
            _transport: PhantomData,
        }
    }

    /// Refuses inline data longer than `max_inline_data` bytes, the queue pair's granted size,
    /// before the provider ([`InlineDataTooLong`](TypedPostSendErrorKind::InlineDataTooLong)); by
    /// default the provider decides.
    #[inline]
    pub fn set_max_inline_data(&mut self, max_inline_data: u32) {
        self.batch.max_inline_data = max_inline_data;
    }

    /// How many requests the batch holds (those that reached their data step).
    #[inline]
    pub fn batch_len(&self) -> usize {
        self.batch.len
    }

    /// Posts the batch with `ibv_wr_complete`: all of it, or on error none of it. A batch holding
    /// a request the queue pair was not created for is aborted instead
    /// ([`OperationNotEnabled`](TypedPostSendErrorKind::OperationNotEnabled)).
    #[inline]
    pub fn post(self) -> Result<(), TypedPostSendError> {
        let batch_len = self.batch.len;
        let qp = self.batch.qp_ex.as_ptr();
        if let Some(refused) = self.batch.refused {
            let max_inline_data = self.batch.max_inline_data;
            // Dropping the guard aborts the batch.
            drop(self);
            let Refused { index, wr_id, reason } = refused;
            return Err(match reason {
                Refusal::Entry(entry) => TypedPostSendErrorKind::OperationNotEnabled {
                    index,
                    wr_id,
                    entry,
                    batch_len,
                },
                Refusal::DataTooLong(length) => TypedPostSendErrorKind::InlineDataTooLong {
                    index,
                    wr_id,
                    length,
                    max_inline_data,
                    batch_len,
                },
            }
            .into());
        }
        // The batch is finished either way: it must not be aborted too.
        std::mem::forget(self);
        // SAFETY: the batch was started on this live queue pair by `start`.
        let ret = unsafe { ibv_wr_complete(qp) };
        if ret == 0 {
            return Ok(());
        }
        Err(complete_error(ret, batch_len))
    }
}

impl<T: Transport> Drop for TypedPostSendGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the batch was started by `start` and not completed.
        unsafe { ibv_wr_abort(self.batch.qp_ex.as_ptr()) };
    }
}
