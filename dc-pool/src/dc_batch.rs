//! A [`DcInitiator`]'s batch to one DC address ([`DcBatch`]): its post guard, with the address
//! set on each request between its operation and its data (libmlx5 writes it into every request
//! anyway), and the requests counted at their data step.
use std::io::{self, IoSlice};

use rdma_mummy_sys::ibv_sge;
use sideway::ibverbs::queue_pair::{PostSendError, SetInlineData, SetScatterGatherEntry, WorkRequestFlags};

use super::initiator::PoolBatch;
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::ibverbs::post_send_guard::{TypedPostSendError, TypedPostSendErrorKind};
use sideway_ext::mlx5::dc::initiator::{
    DcDestinationHandle, DcInitiator, DcLocalBufferHandle, DcPostSendGuard, DcWorkRequestHandle,
};

/// Where a batch's requests go: an address handle, a DC target and its key, a stream.
#[derive(Clone, Copy)]
struct DcBatchAddress<'a> {
    ah: &'a AddressHandle,
    dct_number: u32,
    dc_key: u64,
    /// Only for a DC initiator built with streams (see [`DcBatch::new`]).
    stream: Option<u16>,
}

/// A batch of requests to one DC address on a [`DcInitiator`].
pub struct DcBatch<'a> {
    guard: DcPostSendGuard<'a>,
    address: DcBatchAddress<'a>,
    len: usize,
    /// A stream asked of a DC initiator without streams: the batch is refused at post.
    stream_refused: bool,
}

impl<'a> DcBatch<'a> {
    /// Starts a batch on `dci` to `dct_number`/`dc_key` over `ah`, on `stream` if given.
    pub(crate) fn new(
        dci: &'a mut DcInitiator, ah: &'a AddressHandle, dct_number: u32, dc_key: u64, stream: Option<u16>,
    ) -> Self {
        let stream_refused = stream.is_some() && dci.streams().is_none();
        Self {
            guard: dci.start_post_send(),
            address: DcBatchAddress {
                ah,
                dct_number,
                dc_key,
                stream: stream.filter(|_| !stream_refused),
            },
            len: 0,
            stream_refused,
        }
    }
}

impl<'a> PoolBatch for DcBatch<'a> {
    type Request<'r>
        = DcBatchRequest<'r>
    where
        Self: 'r;

    #[inline]
    fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> DcBatchRequest<'_> {
        DcBatchRequest {
            request: self.guard.construct_wr(wr_id, wr_flags),
            address: self.address,
            len: &mut self.len,
        }
    }

    #[inline]
    fn batch_len(&self) -> usize {
        self.len
    }

    #[inline]
    fn post(self) -> Result<(), TypedPostSendError> {
        let batch_len = self.len;
        if self.stream_refused {
            return Err(stream_refused(batch_len));
        }
        self.guard.post().map_err(|err| post_error(err, batch_len))
    }
}

#[cold]
fn stream_refused(batch_len: usize) -> TypedPostSendError {
    TypedPostSendErrorKind::OperationNotEnabled {
        index: 0,
        wr_id: 0,
        entry: "wr_set_dc_addr_stream",
        batch_len,
    }
    .into()
}

/// sideway's error of `ibv_wr_complete`, as the pool reports it.
#[cold]
fn post_error(err: PostSendError, batch_len: usize) -> TypedPostSendError {
    use TypedPostSendErrorKind as Kind;
    match err {
        PostSendError::InvalidWorkRequest(source) => Kind::InvalidWorkRequest { batch_len, source },
        PostSendError::NotEnoughResources(source) => Kind::QueueFull { batch_len, source },
        PostSendError::InvalidQueuePair(source) | PostSendError::Ibverbs(source) => Kind::Ibverbs { batch_len, source },
        other => Kind::Ibverbs {
            batch_len,
            source: io::Error::other(other),
        },
    }
    .into()
}

/// A request of a [`DcBatch`]: pick its operation, then its data.
#[must_use = "a request joins the batch at its data step"]
pub struct DcBatchRequest<'r> {
    request: DcWorkRequestHandle<'r>,
    address: DcBatchAddress<'r>,
    len: &'r mut usize,
}

impl<'r> DcBatchRequest<'r> {
    /// The request's address, right after its operation.
    #[inline]
    fn address(
        address: DcBatchAddress<'r>, len: &'r mut usize, destination: DcDestinationHandle<'r>,
    ) -> DcBatchData<'r> {
        let DcBatchAddress {
            ah,
            dct_number,
            dc_key,
            stream,
        } = address;
        let data = match stream {
            None => destination.setup_dc_addr(ah, dct_number, dc_key),
            // SAFETY: a batch keeps a stream only for a DC initiator built with streams.
            Some(stream) => unsafe { destination.setup_dc_addr_stream(ah, dct_number, dc_key, stream) },
        };
        DcBatchData { data, len }
    }

    /// A SEND.
    #[inline]
    pub fn setup_send(self) -> DcBatchData<'r> {
        Self::address(self.address, self.len, self.request.setup_send())
    }

    /// A SEND with immediate data.
    #[inline]
    pub fn setup_send_imm(self, imm_data: u32) -> DcBatchData<'r> {
        Self::address(self.address, self.len, self.request.setup_send_imm(imm_data))
    }

    /// An RDMA WRITE.
    #[inline]
    pub fn setup_write(self, rkey: u32, remote_addr: u64) -> DcBatchData<'r> {
        Self::address(self.address, self.len, self.request.setup_write(rkey, remote_addr))
    }

    /// An RDMA WRITE with immediate data.
    #[inline]
    pub fn setup_write_imm(self, rkey: u32, remote_addr: u64, imm_data: u32) -> DcBatchData<'r> {
        let destination = self.request.setup_write_imm(rkey, remote_addr, imm_data);
        Self::address(self.address, self.len, destination)
    }

    /// An RDMA READ.
    #[inline]
    pub fn setup_read(self, rkey: u32, remote_addr: u64) -> DcBatchData<'r> {
        Self::address(self.address, self.len, self.request.setup_read(rkey, remote_addr))
    }

    /// An atomic compare-and-swap.
    #[inline]
    pub fn setup_atomic_compare_swap(self, rkey: u32, remote_addr: u64, compare: u64, swap: u64) -> DcBatchData<'r> {
        let destination = self.request.setup_atomic_compare_swap(rkey, remote_addr, compare, swap);
        Self::address(self.address, self.len, destination)
    }

    /// An atomic fetch-and-add.
    #[inline]
    pub fn setup_atomic_fetch_add(self, rkey: u32, remote_addr: u64, add: u64) -> DcBatchData<'r> {
        let destination = self.request.setup_atomic_fetch_add(rkey, remote_addr, add);
        Self::address(self.address, self.len, destination)
    }
}

/// The data step of a [`DcBatchRequest`], where it joins the batch.
#[must_use = "a request joins the batch at its data step"]
pub struct DcBatchData<'r> {
    data: DcLocalBufferHandle<'r>,
    len: &'r mut usize,
}

impl SetInlineData for DcBatchData<'_> {
    #[inline]
    fn setup_inline_data(self, buf: &[u8]) {
        *self.len += 1;
        self.data.setup_inline_data(buf)
    }

    #[inline]
    fn setup_inline_data_list(self, bufs: &[IoSlice<'_>]) {
        *self.len += 1;
        self.data.setup_inline_data_list(bufs)
    }
}

impl SetScatterGatherEntry for DcBatchData<'_> {
    /// # Safety
    ///
    /// As sideway's [`SetScatterGatherEntry::setup_sge`].
    #[inline]
    unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) {
        *self.len += 1;
        self.data.setup_sge(lkey, addr, length)
    }

    /// # Safety
    ///
    /// As sideway's [`SetScatterGatherEntry::setup_sge_list`].
    #[inline]
    unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) {
        *self.len += 1;
        self.data.setup_sge_list(sg_list)
    }
}
