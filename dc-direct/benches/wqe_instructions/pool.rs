//! The "DC pool, WRITE 1 SGE" row: sideway-ext-dc-pool's pool (the `Static` policy, one
//! initiator, one destination, every batch to it) posting signalled DC RDMA WRITEs of one 64-byte
//! entry, through the pool's traits on two initiators: one posting through libmlx5's own
//! builders (sideway-ext's DC post guard over an unrecorded oracle DCI, its views checked once,
//! in the pool's DC batch as a `DcInitiator`'s), and one posting through
//! the direct writer's batch to one address (`SendQueue::start_post_send_to` over a second such
//! DCI's memory, as a direct initiator's pool posts; the direct initiator adds its queue's borrow
//! flag, a store at each end of a batch). The same pool code on both, counted whole: what the
//! direct writer saves a pool, with the pool's own bookkeeping on both sides. Posting only;
//! nothing is settled while a measured function runs (each queue and the pool's ring hold the
//! whole run).
use std::error::Error;
use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::ibv_ah;
use sideway::ibverbs::completion::PollCompletionQueueError;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{SendOperationFlags, WorkRequestFlags};
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::adopted::AdoptedDcSendViews;
use sideway_ext::mlx5::dc::initiator::DcPostSendGuard;
use sideway_ext_dc_direct::send_queue::{AddressVector, BatchAddress, SendQueue, SendQueueParts};
use sideway_ext_dc_pool::dc_batch::DcBatch;
use sideway_ext_dc_pool::initiator::{PoolCompletion, PoolCompletionQueue, StreamResetRefusal};
use sideway_ext_dc_pool::settings::DcPoolSettings;
use sideway_ext_dc_pool::types::{DcPoolPolicy, DestinationId};
use sideway_ext_dc_pool::{DcInitiatorPool, PoolInitiator};
use softmlx5::oracle::{OracleAh, OracleDci};

use super::{failed, shape, Fields, SGE_LENGTH};

/// A DCI posted on through libmlx5's builders.
struct Libmlx5Initiator {
    dci: OracleDci,
    views: AdoptedDcSendViews,
}

/// A DCI's memory posted on through the direct writer.
struct DirectInitiator {
    /// Dropped first: it writes `memory`.
    queue: SendQueue,
    memory: OracleDci,
}

/// No completion queue: the pool polls nothing here.
enum NoCompletions {}

impl PoolCompletionQueue for NoCompletions {
    fn poll(
        &mut self, _: impl FnMut(PoolCompletion, Option<&WorkCompletion>),
    ) -> Result<usize, PollCompletionQueueError> {
        match *self {}
    }
}

/// What the pool asks of both besides posting (no stream, no error: nothing to recover; the
/// destination is added with its address: no address handle is made).
macro_rules! pooled {
    () => {
        fn stream_count(&self) -> u32 {
            0
        }

        fn recover(&mut self) -> Result<(), Box<dyn Error + Send + Sync>> {
            Err("no error completion here".into())
        }

        fn reset_stream(&mut self, _: u16) -> Result<(), StreamResetRefusal> {
            Err(StreamResetRefusal::NotReadyToSend)
        }

        fn address(
            &self, _: Arc<AddressHandle>, _: Option<Mtu>,
        ) -> Result<Self::Address, Box<dyn Error + Send + Sync>> {
            Err("destinations are added with their address".into())
        }
    };
}

impl PoolInitiator for Libmlx5Initiator {
    /// The oracle's address handle, alive as long as the pool (`PoolState` drops it last).
    type Address = NonNull<ibv_ah>;
    type Batch<'a> = DcBatch<'a>;
    type CompletionQueue = NoCompletions;

    pooled!();

    fn qp_number(&self) -> u32 {
        self.dci.shape().qp_number
    }

    fn max_send_wr(&self) -> u32 {
        self.dci.max_post()
    }

    /// As a `DcInitiator`'s batch.
    #[inline]
    fn start_batch<'a>(
        &'a mut self, ah: &'a NonNull<ibv_ah>, dct_number: u32, dc_key: u64, _: Option<u16>,
    ) -> Self::Batch<'a> {
        // SAFETY: the oracle DCI's own views, alive and borrowed for the guard's lifetime, their
        // entries checked; the handle outlives the pool; no stream; both ends' path MTUs not
        // known here.
        unsafe {
            let guard = DcPostSendGuard::start_adopted(self.views);
            DcBatch::adopted(guard, *ah, dct_number, dc_key, None, None, self.dci.max_inline_data())
        }
    }
}

impl PoolInitiator for DirectInitiator {
    type Address = AddressVector;
    type Batch<'a> = sideway_ext_dc_direct::send_queue::SendQueueBatch<'a, BatchAddress>;
    type CompletionQueue = NoCompletions;

    pooled!();

    fn qp_number(&self) -> u32 {
        self.queue.qp_number()
    }

    fn max_send_wr(&self) -> u32 {
        self.queue.max_post()
    }

    /// As a direct initiator's `start_post_send_to`.
    #[inline]
    fn start_batch<'a>(
        &'a mut self, address: &'a AddressVector, dct_number: u32, dc_key: u64, stream: Option<u16>,
    ) -> Self::Batch<'a> {
        self.queue
            .start_post_send_to(BatchAddress::new(address, dct_number, dc_key, stream))
    }
}

/// The two pools, each with its destination, on the same route.
pub(super) struct PoolState {
    /// Dropped before the route they post to.
    libmlx5: (DcInitiatorPool<Libmlx5Initiator>, DestinationId),
    direct: (DcInitiatorPool<DirectInitiator>, DestinationId),
    _ah: OracleAh,
    batch: usize,
    fields: Fields,
}

impl PoolState {
    pub(super) fn new(batch: usize, fields: Fields) -> Self {
        let shape = shape();
        let (mut dci, mut memory) = (OracleDci::unrecorded(&shape), OracleDci::unrecorded(&shape));
        // The same stale bytes in both, so that both queues must end equal.
        dci.fill_stale(37);
        memory.fill_stale(37);
        let av: [u8; 48] = std::array::from_fn(|i| (i as u8).wrapping_mul(31) ^ 0xa5);
        let ah = OracleAh::new(av);
        let operations = SendOperationFlags::Write | SendOperationFlags::Send;
        // SAFETY: the oracle's tables are alive, libmlx5's builders installed.
        let views =
            unsafe { AdoptedDcSendViews::new(dci.qp_ex(), dci.mlx5_qp_ex(), operations) }.expect("libmlx5's entries");
        let layout = memory.layout();
        let parts = SendQueueParts {
            buffer: layout.buffer,
            wqe_count: layout.wqe_count,
            stride: layout.stride,
            doorbell_record: layout.doorbell_record,
            blueflame: layout.blueflame,
            blueflame_size: layout.blueflame_size,
            max_post: dci.max_post(),
            max_inline_data: dci.max_inline_data(),
            max_send_sge: shape.max_send_sge,
            sq_sig_all: shape.sq_sig_all,
            qp_number: shape.qp_number,
            streams: shape.streams,
        };
        // SAFETY: the memory outlives the queue (the initiator drops its queue first) and
        // nothing else posts on it.
        let queue = unsafe { SendQueue::from_parts(parts) }.expect("the oracle's shape");
        let mut settings = DcPoolSettings::default();
        settings.setup_policy(DcPoolPolicy::Static);
        let mut libmlx5 = DcInitiatorPool::from_initiators(vec![Libmlx5Initiator { dci, views }], None, &settings)
            .expect("a pool of one initiator");
        let mut direct = DcInitiatorPool::from_initiators(vec![DirectInitiator { queue, memory }], None, &settings)
            .expect("a pool of one initiator");
        let to_libmlx5 = libmlx5.add_destination_with_address(ah.ibv_ah(), fields.dct_number, fields.dc_key);
        let to_direct = direct.add_destination_with_address(AddressVector::new(av), fields.dct_number, fields.dc_key);
        Self {
            libmlx5: (libmlx5, to_libmlx5),
            direct: (direct, to_direct),
            _ah: ah,
            batch: black_box(batch),
            fields: black_box(fields),
        }
    }

    /// `requests` WRITEs through the pool on libmlx5.
    // inline(always): into its measured_* function, as the harness's own in dc-pool/benches (the
    // pool rows count the posting there).
    #[inline(always)]
    pub(super) fn libmlx5(&mut self, requests: usize) {
        let (pool, destination) = &mut self.libmlx5;
        let (batch, f) = (self.batch, self.fields);
        let mut next = 0;
        while next < requests {
            let Ok(mut guard) = pool.start_post_send(*destination) else {
                failed("start_post_send");
            };
            for n in next as u64..(next + batch) as u64 {
                let Ok(request) = guard.construct_wr(n, WorkRequestFlags::Signaled) else {
                    failed("construct_wr");
                };
                let request = request.setup_write(f.rkey, f.remote + n * u64::from(SGE_LENGTH));
                // SAFETY: the buffers are only described; nothing reads them.
                unsafe {
                    sideway::ibverbs::queue_pair::SetScatterGatherEntry::setup_sge(
                        request,
                        f.lkey,
                        f.local + n * u64::from(SGE_LENGTH),
                        SGE_LENGTH,
                    )
                };
            }
            if guard.post().is_err() {
                failed("post");
            }
            next += batch;
        }
    }

    /// `requests` WRITEs through the pool on the direct writer.
    // inline(always): into its measured_* function, as the harness's own in dc-pool/benches (the
    // pool rows count the posting there).
    #[inline(always)]
    pub(super) fn direct(&mut self, requests: usize) {
        let (pool, destination) = &mut self.direct;
        let (batch, f) = (self.batch, self.fields);
        let mut next = 0;
        while next < requests {
            let Ok(mut guard) = pool.start_post_send(*destination) else {
                failed("start_post_send");
            };
            for n in next as u64..(next + batch) as u64 {
                let Ok(request) = guard.construct_wr(n, WorkRequestFlags::Signaled) else {
                    failed("construct_wr");
                };
                let request = request.setup_write(f.rkey, f.remote + n * u64::from(SGE_LENGTH));
                // SAFETY: the buffers are only described; nothing reads them.
                if unsafe { request.setup_sge(f.lkey, f.local + n * u64::from(SGE_LENGTH), SGE_LENGTH) }.is_err() {
                    failed("setup_sge");
                }
            }
            if guard.post().is_err() {
                failed("post");
            }
            next += batch;
        }
    }

    /// Requests posted through libmlx5 (`sq.head`).
    pub(super) fn posted(&self) -> u32 {
        self.libmlx5
            .0
            .initiator(0)
            .map_or(0, |initiator| initiator.dci.head_and_tail().0)
    }

    /// Both pools left the same send queue, doorbell record and BlueFlame register.
    pub(super) fn assert_same(&self, row: &str) {
        let (Some(libmlx5), Some(direct)) = (self.libmlx5.0.initiator(0), self.direct.0.initiator(0)) else {
            panic!("{row}: the pools' initiators");
        };
        let (theirs, ours) = (&libmlx5.dci, &direct.memory);
        assert!(
            theirs.send_queue() == ours.send_queue(),
            "{row}: the send queues differ"
        );
        assert_eq!(
            theirs.doorbell_record(),
            ours.doorbell_record(),
            "{row}: doorbell record"
        );
        assert!(theirs.blueflame() == ours.blueflame(), "{row}: BlueFlame register");
    }
}
