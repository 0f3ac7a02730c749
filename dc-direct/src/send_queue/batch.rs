//! A batch of requests ([`SendQueueBatch`]) and the steps of each request: its operation
//! ([`DirectRequest`]), its DC address ([`DirectRequestDestination`], unless the batch has one:
//! [`BatchAddress`]), its data ([`DirectRequestData`], where the WQE is written).
use std::io::IoSlice;

use rdma_mummy_sys::ibv_sge;
use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::operation::{self, InlineOperation, WqeOperation};
use super::wqe::{Data, Datagram, Made, Request, Written};
use super::{AddressVector, Limits, SendQueue, WorkRequestError, WorkRequestErrorKind};

/// The state of the batch being described (libmlx5's `cur_post`, `nreq`, `cur_ctrl` and `cur_size`), with
/// copies of what does not change while it is open, which the compiler can keep in registers.
#[derive(Debug, Clone, Copy)]
pub(super) struct Batch {
    /// The posting index of the next request.
    pub(super) posting_index: u32,
    /// The requests written.
    pub(super) len: u32,
    /// The last of them (meaningful once `len` is not 0).
    pub(super) last: Written,
    pub(super) limits: Limits,
    /// Requests posted before the batch (`sq.head`).
    pub(super) head: u32,
    /// How many requests the batch may hold: `max_post` less those outstanding at its start
    /// (no completion is retired while a batch holds the queue).
    room: u32,
}

/// What each step of a request holds: the queue, and the batch it goes into.
#[derive(Debug)]
pub struct Target<'g> {
    queue: &'g mut SendQueue,
    batch: &'g mut Batch,
}

/// How the requests of a batch are addressed: [`EachRequest`] or [`BatchAddress`]. Sealed.
pub trait Addressing: Copy + private::Sealed {
    /// The step after a request's operation `O`.
    type Next<'g, O: WqeOperation>;
}

mod private {
    use super::{Target, WqeOperation};

    pub trait Sealed {
        /// The step after the operation, of a request with this `wr_id` and `fm_ce_se`.
        fn next<'g, O: WqeOperation>(
            &'g self, target: Target<'g>, wr_id: u64, fm_ce_se: u8, operation: O,
        ) -> <Self as super::Addressing>::Next<'g, O>
        where
            Self: super::Addressing;
    }
}

/// Each request of the batch is addressed at its own address step, as in sideway-ext's DC guard.
#[derive(Debug, Clone, Copy)]
pub struct EachRequest;

impl Addressing for EachRequest {
    type Next<'g, O: WqeOperation> = DirectRequestDestination<'g, O>;
}

impl private::Sealed for EachRequest {
    #[inline]
    fn next<'g, O: WqeOperation>(
        &'g self, target: Target<'g>, wr_id: u64, fm_ce_se: u8, operation: O,
    ) -> <Self as Addressing>::Next<'g, O> {
        DirectRequestDestination {
            target,
            wr_id,
            fm_ce_se,
            operation,
        }
    }
}

/// The DC address (and DCI stream, if any) every request of a batch goes to.
#[derive(Debug, Clone, Copy)]
pub struct BatchAddress {
    /// The datagram segment every request copies, made once.
    datagram: Made,
    stream_id: Option<u16>,
}

impl BatchAddress {
    /// Requests to the DC target `dct_number` with key `dc_key` over `address`, on `stream_id` if given.
    #[inline]
    pub fn new(address: &AddressVector, dct_number: u32, dc_key: u64, stream_id: Option<u16>) -> Self {
        Self {
            datagram: Made::new(address, dct_number, dc_key),
            stream_id,
        }
    }
}

impl Addressing for BatchAddress {
    type Next<'g, O: WqeOperation> = DirectRequestData<'g, 'g, O>;
}

impl private::Sealed for BatchAddress {
    #[inline]
    fn next<'g, O: WqeOperation>(
        &'g self, target: Target<'g>, wr_id: u64, fm_ce_se: u8, operation: O,
    ) -> <Self as Addressing>::Next<'g, O> {
        DirectRequestData::new(
            target,
            wr_id,
            fm_ce_se,
            operation,
            Datagram::Made(&self.datagram),
            self.stream_id,
        )
    }
}

/// A batch of requests on a [`SendQueue`]: [`post`](Self::post) rings the doorbell for them;
/// dropped without it, the device is told nothing (`mlx5_send_wr_abort`).
#[must_use = "the batch is posted only by post(); dropping the guard gives its slots back"]
#[derive(Debug)]
pub struct SendQueueBatch<'q, A: Addressing = EachRequest> {
    queue: &'q mut SendQueue,
    batch: Batch,
    addressing: A,
}

impl<'q, A: Addressing> SendQueueBatch<'q, A> {
    /// Starts a batch on `queue` (`mlx5_send_wr_start`).
    #[inline]
    pub(super) fn new(queue: &'q mut SendQueue, addressing: A) -> Self {
        let batch = Batch {
            posting_index: queue.posting_index,
            len: 0,
            last: Written { slot: 0, size: 0 },
            limits: queue.limits,
            head: queue.head,
            room: queue.limits.max_post.saturating_sub(queue.outstanding()),
        };
        Self {
            queue,
            batch,
            addressing,
        }
    }

    /// Starts a request with this `wr_id` and flags ([`Inline`](WorkRequestFlags::Inline) is
    /// ignored: the data step says what is inline).
    #[inline]
    pub fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> DirectRequest<'_, A> {
        DirectRequest {
            target: Target {
                queue: self.queue,
                batch: &mut self.batch,
            },
            wr_id,
            fm_ce_se: fm_ce_se(wr_flags.bits()),
            addressing: &self.addressing,
        }
    }

    /// How many requests the batch holds (those whose data step succeeded).
    #[inline]
    pub fn batch_len(&self) -> usize {
        self.batch.len as usize
    }

    /// Posts the batch, as `mlx5_send_wr_complete`: the queue's posting index moves past it and
    /// the doorbell rings (nothing when it holds no request).
    #[inline]
    pub fn post(self) {
        let Self { queue, batch, .. } = self;
        if batch.len == 0 {
            return;
        }
        queue.posting_index = batch.posting_index;
        queue.head = queue.head.wrapping_add(batch.len);
        // SAFETY: `last` was written into the ring by this batch.
        unsafe {
            queue
                .doorbell
                .ring(&queue.limits.ring, queue.posting_index, batch.len, batch.last)
        };
    }
}

impl Batch {
    /// Room for one more request (`mlx5_wq_overflow`).
    #[inline]
    pub(super) fn check_room(&self, max_post: u32) -> Result<(), WorkRequestError> {
        if self.len >= self.room {
            return Err(WorkRequestErrorKind::QueueFull { max_post }.into());
        }
        Ok(())
    }
}

/// The pool's batch, for an initiator of one's own built on the writer.
#[cfg(feature = "pool")]
impl sideway_ext_dc_pool::initiator::PoolBatch for SendQueueBatch<'_, BatchAddress> {
    type Request<'r>
        = DirectRequest<'r, BatchAddress>
    where
        Self: 'r;

    #[inline]
    fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> Self::Request<'_> {
        SendQueueBatch::construct_wr(self, wr_id, wr_flags)
    }

    #[inline]
    fn batch_len(&self) -> usize {
        SendQueueBatch::batch_len(self)
    }

    #[inline]
    fn post(self) -> Result<(), sideway_ext_dc_pool::types::PostBatchError> {
        SendQueueBatch::post(self);
        Ok(())
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

/// A request being described: pick its operation.
#[must_use = "a request is added to the batch only at its data step"]
#[derive(Debug)]
pub struct DirectRequest<'g, A: Addressing = EachRequest> {
    target: Target<'g>,
    wr_id: u64,
    fm_ce_se: u8,
    addressing: &'g A,
}

impl<'g, A: Addressing> DirectRequest<'g, A> {
    #[inline]
    fn with<O: WqeOperation>(self, operation: O) -> A::Next<'g, O> {
        private::Sealed::next(self.addressing, self.target, self.wr_id, self.fm_ce_se, operation)
    }

    /// A SEND (`ibv_wr_send`).
    #[inline]
    pub fn setup_send(self) -> A::Next<'g, operation::Send> {
        self.with(operation::Send {})
    }

    /// A SEND with immediate data (`ibv_wr_send_imm`); `imm_data` is stored as it is (`__be32`).
    #[inline]
    pub fn setup_send_imm(self, imm_data: u32) -> A::Next<'g, operation::SendWithImmediate> {
        self.with(operation::SendWithImmediate { imm_data })
    }

    /// An RDMA WRITE to `remote_addr` in the remote region of `rkey` (`ibv_wr_rdma_write`).
    #[inline]
    pub fn setup_write(self, rkey: u32, remote_addr: u64) -> A::Next<'g, operation::Write> {
        self.with(operation::Write { rkey, remote_addr })
    }

    /// An RDMA WRITE with immediate data (`ibv_wr_rdma_write_imm`); `imm_data` is stored as it is.
    #[inline]
    pub fn setup_write_imm(
        self, rkey: u32, remote_addr: u64, imm_data: u32,
    ) -> A::Next<'g, operation::WriteWithImmediate> {
        self.with(operation::WriteWithImmediate {
            rkey,
            remote_addr,
            imm_data,
        })
    }

    /// An RDMA READ from `remote_addr` in the remote region of `rkey` (`ibv_wr_rdma_read`).
    #[inline]
    pub fn setup_read(self, rkey: u32, remote_addr: u64) -> A::Next<'g, operation::Read> {
        self.with(operation::Read { rkey, remote_addr })
    }

    /// An atomic compare-and-swap on the 8 bytes at `remote_addr` (`ibv_wr_atomic_cmp_swp`);
    /// the old value lands in the local buffer.
    #[inline]
    pub fn setup_atomic_compare_swap(
        self, rkey: u32, remote_addr: u64, compare: u64, swap: u64,
    ) -> A::Next<'g, operation::AtomicCompareAndSwap> {
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
    ) -> A::Next<'g, operation::AtomicFetchAndAdd> {
        self.with(operation::AtomicFetchAndAdd { rkey, remote_addr, add })
    }
}

/// The address step of a request: its DC target.
#[must_use = "a request is added to the batch only at its data step"]
#[derive(Debug)]
pub struct DirectRequestDestination<'g, O: WqeOperation> {
    target: Target<'g>,
    wr_id: u64,
    fm_ce_se: u8,
    operation: O,
}

impl<'g, O: WqeOperation> DirectRequestDestination<'g, O> {
    /// Sends to the DC target `dct_number` with key `dc_key` over `address` (`mlx5dv_wr_set_dc_addr`).
    #[inline]
    pub fn setup_dc_addr<'a>(
        self, address: &'a AddressVector, dct_number: u32, dc_key: u64,
    ) -> DirectRequestData<'g, 'a, O> {
        self.addressed(address, dct_number, dc_key, None)
    }

    /// As [`setup_dc_addr`](Self::setup_dc_addr), on DCI stream `stream_id` (`mlx5dv_wr_set_dc_addr_stream`).
    #[inline]
    pub fn setup_dc_addr_stream<'a>(
        self, address: &'a AddressVector, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> DirectRequestData<'g, 'a, O> {
        self.addressed(address, dct_number, dc_key, Some(stream_id))
    }

    #[inline]
    fn addressed<'a>(
        self, address: &'a AddressVector, dct_number: u32, dc_key: u64, stream_id: Option<u16>,
    ) -> DirectRequestData<'g, 'a, O> {
        let datagram = Datagram::Parts {
            address,
            dct_number,
            dc_key,
        };
        DirectRequestData::new(
            self.target,
            self.wr_id,
            self.fm_ce_se,
            self.operation,
            datagram,
            stream_id,
        )
    }
}

/// The data step of a request, where its WQE is written: scatter/gather entries, or inline data
/// (SEND and WRITE only). Each answers at once; a refused request writes nothing.
#[must_use = "a request is added to the batch only at its data step"]
pub struct DirectRequestData<'g, 'a, O: WqeOperation> {
    target: Target<'g>,
    request: Request<'a>,
    _operation: std::marker::PhantomData<O>,
}

impl<O: WqeOperation> std::fmt::Debug for DirectRequestData<'_, '_, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectRequestData")
            .field("wr_id", &self.request.wr_id)
            .field("operation", &self.request.segments.name)
            .finish_non_exhaustive()
    }
}

impl<'g, 'a, O: WqeOperation> DirectRequestData<'g, 'a, O> {
    #[inline]
    fn new(
        target: Target<'g>, wr_id: u64, fm_ce_se: u8, operation: O, datagram: Datagram<'a>, stream_id: Option<u16>,
    ) -> Self {
        Self {
            target,
            request: Request {
                wr_id,
                fm_ce_se,
                segments: operation.segments(),
                datagram,
                stream_id,
            },
            _operation: std::marker::PhantomData,
        }
    }

    #[inline]
    fn add(self, data: Data<'_>) -> Result<(), WorkRequestError> {
        let Target { queue, batch } = self.target;
        queue.write(batch, self.request, data)
    }

    /// One scatter/gather entry (`ibv_wr_set_sge`); a zero-length one is left out of the WQE.
    ///
    /// # Errors
    ///
    /// [`QueueFull`](super::WorkRequestErrorKind::QueueFull),
    /// [`TooManyScatterGatherEntries`](super::WorkRequestErrorKind::TooManyScatterGatherEntries)
    /// (a queue granted none), [`StreamsNotEnabled`](super::WorkRequestErrorKind::StreamsNotEnabled).
    ///
    /// # Safety
    ///
    /// The buffer must lie in the memory region of `lkey` and stay valid until the request completes.
    #[inline]
    pub unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) -> Result<(), WorkRequestError> {
        self.add(Data::Sge { lkey, addr, length })
    }

    /// Scatter/gather entries (`ibv_wr_set_sge_list`), at most `max_send_sge`; zero-length ones left out.
    ///
    /// # Errors
    ///
    /// As [`setup_sge`](Self::setup_sge).
    ///
    /// # Safety
    ///
    /// Each buffer must lie in its `lkey`'s memory region and stay valid until the request completes.
    #[inline]
    pub unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) -> Result<(), WorkRequestError> {
        self.add(Data::SgeList(sg_list))
    }
}

impl<O: InlineOperation> DirectRequestData<'_, '_, O> {
    /// Copies `buf` into the request (`ibv_wr_set_inline_data`): at most `max_inline_data` bytes.
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

    /// Copies the slices in order into the request (`ibv_wr_set_inline_data_list`): at most
    /// `max_inline_data` bytes together.
    ///
    /// # Errors
    ///
    /// As [`setup_inline_data`](Self::setup_inline_data).
    #[inline]
    pub fn setup_inline_data_list(self, bufs: &[IoSlice<'_>]) -> Result<(), WorkRequestError> {
        self.add(Data::InlineList(bufs))
    }
}
