//! A DC initiator's batch to one DC address ([`DcBatch`]): its post guard, with the address set
//! on each request between its operation and its data (libmlx5 writes it into every request
//! anyway), the requests counted at their data step, and inline data over the initiator's
//! granted size or a READ whose responses would not reach it refused before the provider.
use std::io::{self, IoSlice};
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_ah, ibv_sge};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{PostSendError, SetInlineData, SetScatterGatherEntry, WorkRequestFlags};

use super::initiator::PoolBatch;
use super::path_mtus::PathMtus;
use super::types::{PostBatchError, PostBatchErrorKind};
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::ibverbs::post_send_guard::{TypedPostSendError, TypedPostSendErrorKind};
use sideway_ext::mlx5::dc::initiator::{
    DcDestinationHandle, DcInitiator, DcLocalBufferHandle, DcPostSendGuard, DcWorkRequestHandle,
};

/// A destination's address as a DC initiator's batches use it: its address handle, and the path
/// MTU the destination announced, to which READs are held.
#[derive(Debug, Clone)]
pub struct DcAddress {
    ah: Arc<AddressHandle>,
    path_mtu: Option<Mtu>,
}

impl DcAddress {
    /// The address of `ah`, reaching a port whose path MTU is `path_mtu` where known.
    pub fn new(ah: Arc<AddressHandle>, path_mtu: Option<Mtu>) -> Self {
        Self { ah, path_mtu }
    }

    /// The address handle.
    pub fn ah(&self) -> &Arc<AddressHandle> {
        &self.ah
    }

    /// The path MTU of the port it reaches, where the destination announced one.
    pub fn path_mtu(&self) -> Option<Mtu> {
        self.path_mtu
    }
}

/// Where a batch's requests go (an address handle, a DC target and its key, a stream), and what
/// they are held to (both ends' path MTUs where known, the granted inline size).
#[derive(Clone, Copy)]
struct DcBatchAddress {
    ah: NonNull<ibv_ah>,
    dct_number: u32,
    dc_key: u64,
    stream: Option<u16>,
    path_mtus: Option<PathMtus>,
    max_inline_data: u32,
}

/// Why a batch is refused at [`post`](PoolBatch::post), before the provider.
#[derive(Clone, Copy)]
enum Refusal {
    /// A stream asked of a DC initiator without streams.
    Stream,
    /// The first READ whose responses would not reach the initiator: its index and length.
    Read(u32, u64),
    /// The first inline data over the granted size: its index and length.
    Inline(u32, usize),
}

/// The batch's count and refusal, which each request's data step updates (a batch holds at most
/// a send queue's requests: an index fits in a `u32`).
#[derive(Default)]
struct Tally {
    len: usize,
    refusal: Option<Refusal>,
}

/// A batch of requests to one DC address on a DC initiator.
pub struct DcBatch<'a> {
    guard: DcPostSendGuard<'a>,
    address: DcBatchAddress,
    tally: Tally,
}

impl<'a> DcBatch<'a> {
    /// Starts a batch on `dci` to `dct_number`/`dc_key` at `address`, on `stream` if given; its
    /// READs are held to the path MTUs of `dci` and of the port `address` reaches, its inline data
    /// to the size `dci` was granted.
    pub(crate) fn new(
        dci: &'a mut DcInitiator, address: &'a DcAddress, dct_number: u32, dc_key: u64, stream: Option<u16>,
    ) -> Self {
        let stream_refused = stream.is_some() && dci.streams().is_none();
        let (ah, path_mtus) = (&address.ah, PathMtus::known(dci.path_mtu(), address.path_mtu));
        let max_inline_data = dci.max_inline_data();
        let guard = dci.start_post_send();
        // SAFETY: `ah` is borrowed as long as the guard; a stream is kept only where `dci` has
        // streams, whose build checked their setter.
        let mut batch =
            unsafe { Self::adopted(guard, ah.ah(), dct_number, dc_key, stream, path_mtus, max_inline_data) };
        if stream_refused {
            batch.address.stream = None;
            batch.tally.refusal = Some(Refusal::Stream);
        }
        batch
    }

    /// The batch of a DC initiator created elsewhere, on its `guard`
    /// ([`DcPostSendGuard::start_adopted`]): to `dct_number`/`dc_key` over `ah`, on `stream` if
    /// given, its READs held to `path_mtus` if given and its inline data to `max_inline_data`.
    ///
    /// # Safety
    ///
    /// `ah` must be a live address handle for as long as the batch; a stream only on a DC
    /// initiator created with streams.
    #[inline]
    pub unsafe fn adopted(
        guard: DcPostSendGuard<'a>, ah: NonNull<ibv_ah>, dct_number: u32, dc_key: u64, stream: Option<u16>,
        path_mtus: Option<PathMtus>, max_inline_data: u32,
    ) -> Self {
        Self {
            guard,
            address: DcBatchAddress {
                ah,
                dct_number,
                dc_key,
                stream,
                path_mtus,
                max_inline_data,
            },
            tally: Tally::default(),
        }
    }
}

impl PoolBatch for DcBatch<'_> {
    type Request<'r>
        = DcBatchRequest<'r>
    where
        Self: 'r;

    #[inline]
    fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> DcBatchRequest<'_> {
        DcBatchRequest {
            request: self.guard.construct_wr(wr_id, wr_flags),
            pending: Pending {
                address: &self.address,
                tally: &mut self.tally,
            },
        }
    }

    #[inline]
    fn batch_len(&self) -> usize {
        self.tally.len
    }

    // inline(always): the pool rows of `scripts/bench` ask for it: called, the batch passed by
    // reference is reloaded from memory after each provider call of each request.
    #[inline(always)]
    fn post(self) -> Result<(), PostBatchError> {
        let batch_len = self.tally.len;
        if let Some(refusal) = self.tally.refusal {
            // Dropping the guard aborts the batch.
            return Err(refused(refusal, self.address, batch_len));
        }
        self.guard.post().map_err(|err| post_error(err, batch_len).into())
    }
}

/// The error of a refused batch; a refused request's `wr_id` is left 0: the pool names it by the
/// `wr_id` its caller gave.
#[cold]
fn refused(refusal: Refusal, address: DcBatchAddress, batch_len: usize) -> PostBatchError {
    let refused = match (refusal, address.path_mtus) {
        (Refusal::Read(index, length), Some(mtus)) => {
            return PostBatchErrorKind::ReadResponsesTooLarge {
                index: index as usize,
                wr_id: 0,
                length,
                path_mtu: mtus.requester(),
                responder_path_mtu: mtus.responder(),
                batch_len,
            }
            .into();
        },
        (Refusal::Inline(index, length), _) => TypedPostSendErrorKind::InlineDataTooLong {
            index: index as usize,
            wr_id: 0,
            length,
            max_inline_data: address.max_inline_data,
            batch_len,
        },
        _ => TypedPostSendErrorKind::OperationNotEnabled {
            index: 0,
            wr_id: 0,
            entry: "wr_set_dc_addr_stream",
            batch_len,
        },
    };
    TypedPostSendError::from(refused).into()
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
    pending: Pending<'r>,
}

/// What a request takes from its batch to its data step.
struct Pending<'r> {
    address: &'r DcBatchAddress,
    tally: &'r mut Tally,
}

impl<'r> Pending<'r> {
    /// The request's address, right after its operation (a READ if `read`).
    #[inline]
    fn data(self, destination: DcDestinationHandle<'r>, read: bool) -> DcBatchData<'r> {
        let address = *self.address;
        // SAFETY: the batch's promise (see DcBatch::adopted).
        let data = unsafe {
            destination.setup_dc_addr_adopted(address.ah, address.dct_number, address.dc_key, address.stream)
        };
        DcBatchData {
            data,
            pending: self,
            read,
        }
    }
}

/// The operations of a [`DcBatchRequest`]: the DC guard's, each followed by the batch's address
/// (`true`: a READ, held to the batch's path MTUs).
macro_rules! operations {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*), $read:literal;)*) => {
        impl<'r> DcBatchRequest<'r> {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $name(self, $($arg: $ty),*) -> DcBatchData<'r> {
                    self.pending.data(self.request.$name($($arg),*), $read)
                }
            )*
        }
    };
}

operations! {
    /// A SEND.
    setup_send(), false;
    /// A SEND with immediate data.
    setup_send_imm(imm_data: u32), false;
    /// An RDMA WRITE.
    setup_write(rkey: u32, remote_addr: u64), false;
    /// An RDMA WRITE with immediate data.
    setup_write_imm(rkey: u32, remote_addr: u64, imm_data: u32), false;
    /// An RDMA READ: refused at post if longer than the initiator's path MTU to a destination
    /// whose path MTU is larger ([`PathMtus::read_fits`]).
    setup_read(rkey: u32, remote_addr: u64), true;
    /// An atomic compare-and-swap.
    setup_atomic_compare_swap(rkey: u32, remote_addr: u64, compare: u64, swap: u64), false;
    /// An atomic fetch-and-add.
    setup_atomic_fetch_add(rkey: u32, remote_addr: u64, add: u64), false;
}

/// The data step of a [`DcBatchRequest`], where it joins the batch.
#[must_use = "a request joins the batch at its data step"]
pub struct DcBatchData<'r> {
    data: DcLocalBufferHandle<'r>,
    pending: Pending<'r>,
    read: bool,
}

impl DcBatchData<'_> {
    /// Counts the request, and holds a READ of `length` bytes to the batch's path MTUs.
    #[inline]
    fn count(&mut self, length: impl FnOnce() -> u64) {
        let pending = &mut self.pending;
        if let Some(mtus) = pending.address.path_mtus.filter(|_| self.read) {
            let length = length();
            if !mtus.read_fits(length) {
                let refusal = Refusal::Read(pending.tally.len as u32, length);
                pending.tally.refusal.get_or_insert(refusal);
            }
        }
        pending.tally.len += 1;
    }

    /// Counts inline data of `length` bytes, refused over the granted size.
    #[inline]
    fn count_inline(&mut self, length: usize) {
        let pending = &mut self.pending;
        if length > pending.address.max_inline_data as usize {
            let refusal = Refusal::Inline(pending.tally.len as u32, length);
            pending.tally.refusal.get_or_insert(refusal);
        }
        self.count(|| length as u64);
    }
}

impl SetInlineData for DcBatchData<'_> {
    #[inline]
    fn setup_inline_data(mut self, buf: &[u8]) {
        self.count_inline(buf.len());
        self.data.setup_inline_data(buf)
    }

    #[inline]
    fn setup_inline_data_list(mut self, bufs: &[IoSlice<'_>]) {
        self.count_inline(bufs.iter().map(|buf| buf.len()).sum());
        self.data.setup_inline_data_list(bufs)
    }
}

impl SetScatterGatherEntry for DcBatchData<'_> {
    /// # Safety
    ///
    /// As sideway's [`SetScatterGatherEntry::setup_sge`].
    #[inline]
    unsafe fn setup_sge(mut self, lkey: u32, addr: u64, length: u32) {
        self.count(|| u64::from(length));
        self.data.setup_sge(lkey, addr, length)
    }

    /// # Safety
    ///
    /// As sideway's [`SetScatterGatherEntry::setup_sge_list`].
    #[inline]
    unsafe fn setup_sge_list(mut self, sg_list: &[ibv_sge]) {
        self.count(|| sg_list.iter().map(|sge| u64::from(sge.length)).sum());
        self.data.setup_sge_list(sg_list)
    }
}
