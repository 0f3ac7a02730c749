//! [`TypedPostSendGuard`]: a batch of send requests between `ibv_wr_start` and `ibv_wr_complete`, and
//! the [`Batch`] state its requests update.
use std::marker::PhantomData;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_qp_ex, ibv_wr_abort, ibv_wr_complete, ibv_wr_start};
use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::error::complete_error;
use super::{PathMtus, ProviderEntries, Transport, TypedPostSendError, TypedPostSendErrorKind, TypedWorkRequestHandle};

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
    /// The path MTUs an RDMA READ is held to, when known: the batch's two ends', for a batch to
    /// one responder ([`TypedPostSendGuard::set_path_mtus`]); or, on a transport whose requests are
    /// addressed one by one, the last READ's own, set at its address step.
    pub(super) path_mtus: Option<PathMtus>,
    /// The path MTUs of the first refused request, when it is an RDMA READ refused for them
    /// (its refusal is then [`Refusal::DataTooLong`] with the READ's length).
    refused_path_mtus: Option<PathMtus>,
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
    /// Its data has this length: inline data over the granted size, or, where the batch has
    /// `refused_path_mtus`, an RDMA READ whose responses the requester's path would drop (one
    /// variant for both keeps `Refused` small).
    DataTooLong(usize),
}

impl Batch {
    /// Records a refused request.
    #[inline]
    pub(super) fn refuse(&mut self, wr_id: u64, needed: u32, external: &'static str) {
        if self.refused.is_none() {
            self.refused = Some(refusal(self.missing, self.len, wr_id, needed, external));
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

impl Batch {
    /// Records an RDMA READ of `length` bytes whose responses, at the responder's path MTU, are
    /// larger than the requester's path takes.
    #[cold]
    #[inline(never)]
    pub(super) fn refuse_read(&mut self, wr_id: u64, length: u64, path_mtus: PathMtus) {
        if self.refused.is_none() {
            self.refused = Some(Refused {
                index: self.len,
                wr_id,
                reason: Refusal::DataTooLong(usize::try_from(length).unwrap_or(usize::MAX)),
            });
            self.refused_path_mtus = Some(path_mtus);
        }
        self.len += 1;
    }
}

/// The error of a READ refused for its responses (out of the post's path: refusals are rare).
#[cold]
#[inline(never)]
fn read_refused(
    index: usize, wr_id: u64, length: usize, path_mtus: PathMtus, batch_len: usize,
) -> TypedPostSendErrorKind {
    TypedPostSendErrorKind::ReadResponsesTooLarge {
        index,
        wr_id,
        length: length as u64,
        path_mtu: path_mtus.requester(),
        responder_path_mtu: path_mtus.responder(),
        batch_len,
    }
}

#[cold]
#[inline(never)]
fn refusal(missing: u32, index: usize, wr_id: u64, needed: u32, external: &'static str) -> Refused {
    Refused {
        index,
        wr_id,
        reason: Refusal::Entry(ProviderEntries(!missing).name_of_first_missing(needed, external)),
    }
}

/// A batch of send requests on one queue pair; see the [module](super) documentation.
#[must_use = "the batch is posted only by post(); dropping the guard aborts it"]
pub struct TypedPostSendGuard<'qp, T: Transport> {
    batch: Batch,
    context: T::Context,
    _qp: PhantomData<&'qp mut ()>,
}

impl<T: Transport> TypedPostSendGuard<'_, T> {
    /// Starts a batch with `ibv_wr_start` on a queue pair this crate did not create: one created
    /// through libibverbs directly, or a provider table of one's own (a counting table).
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
    /// let mut guard = unsafe { TypedPostSendGuard::<ReliableConnection>::start(qp_ex, entries, ()) };
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
    ///   (read them with [`ProviderEntries::new`]);
    /// - `context` must be what `T` needs for this queue pair.
    #[inline]
    pub unsafe fn start(qp_ex: NonNull<ibv_qp_ex>, entries: ProviderEntries, context: T::Context) -> Self {
        ibv_wr_start(qp_ex.as_ptr());
        Self {
            batch: Batch {
                qp_ex,
                missing: !entries.bits(),
                len: 0,
                refused: None,
                max_inline_data: u32::MAX,
                path_mtus: None,
                refused_path_mtus: None,
            },
            context,
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
            context: self.context,
        }
    }

    /// Refuses inline data longer than `max_inline_data` bytes, the queue pair's granted size,
    /// before the provider ([`InlineDataTooLong`](TypedPostSendErrorKind::InlineDataTooLong)); by
    /// default the provider decides.
    #[inline]
    pub fn set_max_inline_data(&mut self, max_inline_data: u32) {
        self.batch.max_inline_data = max_inline_data;
    }

    /// The path MTUs of the batch's two ends, for a guard whose requests all go to one
    /// responder ([`BatchAddressed`](crate::mlx5::dc::initiator::BatchAddressed)): an RDMA READ
    /// whose responses would not reach this queue pair is then refused before the provider
    /// ([`ReadResponsesTooLarge`](TypedPostSendErrorKind::ReadResponsesTooLarge)).
    #[inline]
    pub fn set_path_mtus(&mut self, path_mtus: Option<PathMtus>) {
        self.batch.path_mtus = path_mtus;
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
            let (max_inline_data, refused_path_mtus) = (self.batch.max_inline_data, self.batch.refused_path_mtus);
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
                Refusal::DataTooLong(length) => match refused_path_mtus {
                    None => TypedPostSendErrorKind::InlineDataTooLong {
                        index,
                        wr_id,
                        length,
                        max_inline_data,
                        batch_len,
                    },
                    Some(path_mtus) => read_refused(index, wr_id, length, path_mtus, batch_len),
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
