//! A batch of requests ([`PostSendGuard`]) and the steps of each request: its operation
//! ([`WorkRequestHandle`]), its DC address ([`DcDestination`]), its data
//! ([`LocalBufferHandle`], where the WQE is written).
use std::io::IoSlice;

use rdma_mummy_sys::ibv_sge;
use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::operation::{self, InlineOperation, Operation};
use super::wqe::{Data, Request, Written};
use super::{AddressVector, SendQueue, WorkRequestError};

/// The state of the batch being described (libmlx5's `cur_post`, `nreq`, `cur_ctrl` and
/// `cur_size` while it builds one); the queue's own posting index moves to its end only when
/// the batch is posted.
#[derive(Debug, Clone, Copy)]
pub(super) struct Batch {
    /// The posting index of the next request.
    pub(super) posting_index: u32,
    /// The requests written.
    pub(super) len: u32,
    /// The last of them (meaningful once `len` is not 0).
    pub(super) last: Written,
}

/// What each step of a request holds: the queue, and the batch it goes into.
#[derive(Debug)]
struct Target<'g> {
    queue: &'g mut SendQueue,
    batch: &'g mut Batch,
}

/// A batch of requests on a [`SendQueue`]: [`post`](Self::post) rings the doorbell for them;
/// dropped without it, the batch's slots are given back and the device is told nothing
/// (`mlx5_send_wr_abort`).
#[must_use = "the batch is posted only by post(); dropping the guard gives its slots back"]
#[derive(Debug)]
pub struct PostSendGuard<'q> {
    queue: &'q mut SendQueue,
    batch: Batch,
}

impl<'q> PostSendGuard<'q> {
    /// Starts a batch on `queue` (`mlx5_send_wr_start`).
    #[inline]
    pub(super) fn new(queue: &'q mut SendQueue) -> Self {
        let batch = Batch::start(queue);
        Self { queue, batch }
    }

    /// Starts a request with this `wr_id` (given back by its completion) and flags
    /// ([`Signaled`](WorkRequestFlags::Signaled), [`Fence`](WorkRequestFlags::Fence),
    /// [`Solicited`](WorkRequestFlags::Solicited); [`Inline`](WorkRequestFlags::Inline) is
    /// ignored: the data step says what is inline); continue with an operation.
    #[inline]
    pub fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> WorkRequestHandle<'_> {
        WorkRequestHandle {
            target: Target {
                queue: self.queue,
                batch: &mut self.batch,
            },
            wr_id,
            fm_ce_se: fm_ce_se(wr_flags.bits()),
        }
    }

    /// How many requests the batch holds (those whose data step succeeded).
    #[inline]
    pub fn batch_len(&self) -> usize {
        self.batch.len as usize
    }

    /// Posts the batch: rings the doorbell for its requests (nothing when it has none), as
    /// libmlx5's `mlx5_send_wr_complete`. It cannot fail: each request was checked at its data
    /// step.
    #[inline]
    pub fn post(self) {
        let Self { queue, batch } = self;
        queue.post_batch(&batch);
    }
}

impl Batch {
    /// An empty batch on `queue` (`mlx5_send_wr_start`): its first request goes at the queue's
    /// posting index.
    #[inline]
    pub(super) fn start(queue: &SendQueue) -> Self {
        Self {
            posting_index: queue.posting_index,
            len: 0,
            last: Written { slot: 0, size: 0 },
        }
    }
}

impl SendQueue {
    /// Posts `batch`, a batch started on this queue and written by [`write`](Self::write) since:
    /// the queue's posting index moves past it and the doorbell rings (nothing when it holds no
    /// request), as `mlx5_send_wr_complete`.
    #[inline]
    pub(super) fn post_batch(&mut self, batch: &Batch) {
        if batch.len == 0 {
            return;
        }
        self.posting_index = batch.posting_index;
        self.head = self.head.wrapping_add(batch.len);
        // SAFETY: `last` was written into the ring by this batch.
        unsafe {
            self.doorbell
                .ring(&self.ring, self.posting_index, batch.len, batch.last)
        };
    }
}

/// `fm_ce_se` of a request's flags, as `ibv_send_flags` bits (`_common_wqe_init_op`):
/// `MLX5_WQE_CTRL_FENCE`, `MLX5_WQE_CTRL_CQ_UPDATE`, `MLX5_WQE_CTRL_SOLICITED`.
#[inline]
pub(super) const fn fm_ce_se(wr_flags: u32) -> u8 {
    let mut bits = 0;
    if wr_flags & WorkRequestFlags::Fence.bits() != 0 {
        bits |= 4 << 5;
    }
    if wr_flags & WorkRequestFlags::Signaled.bits() != 0 {
        bits |= 2 << 2;
    }
    if wr_flags & WorkRequestFlags::Solicited.bits() != 0 {
        bits |= 1 << 1;
    }
    bits
}

/// [`fm_ce_se`] of every combination of the three flags, by `wr_flags & 7` (fence, signaled,
/// solicited: `IBV_SEND_FENCE` 1, `IBV_SEND_SIGNALED` 2, `IBV_SEND_SOLICITED` 4), for the C
/// entries, whose flags are known only at run time: one load in place of three tests (the DC
/// pool row of `scripts/bench`, direct).
pub(super) const FM_CE_SE: [u8; 8] = {
    let flags = WorkRequestFlags::Fence.bits() | WorkRequestFlags::Signaled.bits() | WorkRequestFlags::Solicited.bits();
    assert!(flags == 7, "the three flags are bits 0 to 2");
    let mut table = [0; 8];
    let mut flags = 0;
    while flags < 8 {
        table[flags] = fm_ce_se(flags as u32);
        flags += 1;
    }
    table
};

/// A request being described: pick its operation.
#[must_use = "a request is added to the batch only at its data step"]
#[derive(Debug)]
pub struct WorkRequestHandle<'g> {
    target: Target<'g>,
    wr_id: u64,
    fm_ce_se: u8,
}

impl<'g> WorkRequestHandle<'g> {
    #[inline]
    fn with<O: Operation>(self, operation: O) -> DcDestination<'g, O> {
        DcDestination {
            target: self.target,
            wr_id: self.wr_id,
            fm_ce_se: self.fm_ce_se,
            operation,
        }
    }

    /// A SEND (`ibv_wr_send`).
    #[inline]
    pub fn setup_send(self) -> DcDestination<'g, operation::Send> {
        self.with(operation::Send {})
    }

    /// A SEND with immediate data (`ibv_wr_send_imm`); `imm_data` is stored as it is, as the C
    /// API's `__be32` (as sideway-ext's guard passes it).
    #[inline]
    pub fn setup_send_imm(self, imm_data: u32) -> DcDestination<'g, operation::SendWithImmediate> {
        self.with(operation::SendWithImmediate { imm_data })
    }

    /// An RDMA WRITE to `remote_addr` in the remote region of `rkey` (`ibv_wr_rdma_write`).
    #[inline]
    pub fn setup_write(self, rkey: u32, remote_addr: u64) -> DcDestination<'g, operation::Write> {
        self.with(operation::Write { rkey, remote_addr })
    }

    /// An RDMA WRITE with immediate data (`ibv_wr_rdma_write_imm`); `imm_data` as for
    /// [`setup_send_imm`](Self::setup_send_imm).
    #[inline]
    pub fn setup_write_imm(
        self, rkey: u32, remote_addr: u64, imm_data: u32,
    ) -> DcDestination<'g, operation::WriteWithImmediate> {
        self.with(operation::WriteWithImmediate {
            rkey,
            remote_addr,
            imm_data,
        })
    }

    /// An RDMA READ from `remote_addr` in the remote region of `rkey` (`ibv_wr_rdma_read`).
    #[inline]
    pub fn setup_read(self, rkey: u32, remote_addr: u64) -> DcDestination<'g, operation::Read> {
        self.with(operation::Read { rkey, remote_addr })
    }

    /// An atomic compare-and-swap on the 8 bytes at `remote_addr` (`ibv_wr_atomic_cmp_swp`);
    /// the old value lands in the local buffer.
    #[inline]
    pub fn setup_atomic_compare_swap(
        self, rkey: u32, remote_addr: u64, compare: u64, swap: u64,
    ) -> DcDestination<'g, operation::AtomicCompareAndSwap> {
        self.with(operation::AtomicCompareAndSwap {
            rkey,
            remote_addr,
            compare,
            swap,
        })
    }

    /// An atomic fetch-and-add on the 8 bytes at `remote_addr` (`ibv_wr_atomic_fetch_add`); the
    /// old value lands in the local buffer.
    #[inline]
    pub fn setup_atomic_fetch_add(
        self, rkey: u32, remote_addr: u64, add: u64,
    ) -> DcDestination<'g, operation::AtomicFetchAndAdd> {
        self.with(operation::AtomicFetchAndAdd { rkey, remote_addr, add })
    }
}

/// The address step of a request: its DC target.
#[must_use = "a request is added to the batch only at its data step"]
#[derive(Debug)]
pub struct DcDestination<'g, O: Operation> {
    target: Target<'g>,
    wr_id: u64,
    fm_ce_se: u8,
    operation: O,
}

impl<'g, O: Operation> DcDestination<'g, O> {
    /// Sends to the DC target `dct_number` with access key `dc_key`, over the route of
    /// `address` (`mlx5dv_wr_set_dc_addr`); the address vector is copied at the data step. It
    /// carries no path MTU: a READ is not held to the target's (see the crate's "What is
    /// refused").
    #[inline]
    pub fn setup_dc_addr<'a>(
        self, address: &'a AddressVector, dct_number: u32, dc_key: u64,
    ) -> LocalBufferHandle<'g, 'a, O> {
        self.addressed(address, dct_number, dc_key, None)
    }

    /// As [`setup_dc_addr`](Self::setup_dc_addr), on DCI stream `stream_id`
    /// (`mlx5dv_wr_set_dc_addr_stream`); refused at the data step
    /// ([`StreamsNotEnabled`](super::WorkRequestErrorKind::StreamsNotEnabled)) on a queue
    /// without streams.
    #[inline]
    pub fn setup_dc_addr_stream<'a>(
        self, address: &'a AddressVector, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> LocalBufferHandle<'g, 'a, O> {
        self.addressed(address, dct_number, dc_key, Some(stream_id))
    }

    #[inline]
    fn addressed<'a>(
        self, address: &'a AddressVector, dct_number: u32, dc_key: u64, stream_id: Option<u16>,
    ) -> LocalBufferHandle<'g, 'a, O> {
        LocalBufferHandle {
            target: self.target,
            request: Request {
                wr_id: self.wr_id,
                fm_ce_se: self.fm_ce_se,
                segments: self.operation.segments(),
                address,
                dct_number,
                dc_key,
                stream_id,
            },
            _operation: std::marker::PhantomData,
        }
    }
}

/// The data step of a request, where its WQE is written: scatter/gather entries, or inline data
/// (SEND and WRITE only). Each answers at once; a refused request writes nothing.
#[must_use = "a request is added to the batch only at its data step"]
pub struct LocalBufferHandle<'g, 'a, O: Operation> {
    target: Target<'g>,
    request: Request<'a>,
    _operation: std::marker::PhantomData<O>,
}

impl<O: Operation> std::fmt::Debug for LocalBufferHandle<'_, '_, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBufferHandle")
            .field("wr_id", &self.request.wr_id)
            .field("operation", &self.request.segments.name)
            .finish_non_exhaustive()
    }
}

impl<O: Operation> LocalBufferHandle<'_, '_, O> {
    #[inline]
    fn add(self, data: Data<'_>) -> Result<(), WorkRequestError> {
        let Target { queue, batch } = self.target;
        queue.write(batch, self.request, data)
    }

    /// One scatter/gather entry (`ibv_wr_set_sge`); a zero-length one is left out of the WQE,
    /// as libmlx5 does.
    ///
    /// # Errors
    ///
    /// [`QueueFull`](super::WorkRequestErrorKind::QueueFull),
    /// [`TooManyScatterGatherEntries`](super::WorkRequestErrorKind::TooManyScatterGatherEntries)
    /// (a queue granted none), [`StreamsNotEnabled`](super::WorkRequestErrorKind::StreamsNotEnabled).
    ///
    /// # Safety
    ///
    /// The buffer must lie in the memory region of `lkey` and stay valid until the request
    /// completes.
    #[inline]
    pub unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) -> Result<(), WorkRequestError> {
        self.add(Data::Sge { lkey, addr, length })
    }

    /// Scatter/gather entries (`ibv_wr_set_sge_list`), at most the queue's `max_send_sge`;
    /// zero-length ones are left out of the WQE.
    ///
    /// # Errors
    ///
    /// As [`setup_sge`](Self::setup_sge).
    ///
    /// # Safety
    ///
    /// Each buffer must lie in the memory region of its `lkey` and stay valid until the request
    /// completes.
    #[inline]
    pub unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) -> Result<(), WorkRequestError> {
        self.add(Data::SgeList(sg_list))
    }
}

impl<O: InlineOperation> LocalBufferHandle<'_, '_, O> {
    /// Copies `buf` into the request (`ibv_wr_set_inline_data`): at most the queue's
    /// `max_inline_data` bytes.
    ///
    /// # Errors
    ///
    /// [`QueueFull`](super::WorkRequestErrorKind::QueueFull),
    /// [`InlineDataTooLong`](super::WorkRequestErrorKind::InlineDataTooLong),
    /// [`StreamsNotEnabled`](super::WorkRequestErrorKind::StreamsNotEnabled).
    #[inline]
    pub fn setup_inline_data(self, buf: &[u8]) -> Result<(), WorkRequestError> {
        self.add(Data::Inline(buf))
    }

    /// Copies the slices, one after the other, into the request
    /// (`ibv_wr_set_inline_data_list`): at most `max_inline_data` bytes together.
    ///
    /// # Errors
    ///
    /// As [`setup_inline_data`](Self::setup_inline_data).
    #[inline]
    pub fn setup_inline_data_list(self, bufs: &[IoSlice<'_>]) -> Result<(), WorkRequestError> {
        self.add(Data::InlineList(bufs))
    }
}
