//! The "DC pool, WRITE 1 SGE" row: sideway-ext-dc-pool's pool (the `Static` policy, one
//! initiator, one destination, every batch to it) posting signalled DC RDMA WRITEs of one 64-byte
//! entry, on a DCI through libmlx5's own builders (an unrecorded oracle DCI, its provider
//! entries read from its tables, as on a device) and on the direct writer's C entries
//! ([`SendQueueEntries`] over a second such DCI's memory, as a direct initiator's pool posts).
//! The same pool code, the same calls through `ibv_qp_ex`, both counted whole: what the direct
//! writer saves a pool, with the pool's own bookkeeping on both sides. Posting only; nothing is
//! settled while a measured function runs (each queue and the pool's ring hold the whole run).
use std::convert::Infallible;
use std::hint::black_box;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_cq, ibv_qp_ex, mlx5dv_qp_ex};
use sideway::ibverbs::queue_pair::{SendOperationFlags, SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::ibverbs::post_send_guard::ProviderEntries;
use sideway_ext::mlx5::dc::initiator::DcContext;
use sideway_ext_dc_direct::send_queue::{SendQueue, SendQueueEntries, SendQueueParts};
use sideway_ext_dc_pool::initiator::{PooledInitiator, PostingInitiator, StreamResetRefusal};
use sideway_ext_dc_pool::types::{DcPoolPolicy, DestinationId};
use sideway_ext_dc_pool::{DcInitiatorPool, PoolInitiator};
use sideway_ext_wqe_oracle::{OracleAh, OracleDci};

use super::{failed, shape, Fields, SGE_LENGTH};

/// A DCI posted on through libmlx5's builders.
struct Libmlx5Initiator {
    dci: OracleDci,
    entries: ProviderEntries,
}

/// A DCI's memory posted on through the direct writer's C entries.
struct DirectInitiator {
    /// Dropped first: it writes `memory`.
    entries: SendQueueEntries,
    memory: OracleDci,
}

/// What the pool asks of both (no stream, no error: nothing to recover).
macro_rules! pooled {
    ($initiator:ty, $max_send_wr:expr) => {
        impl PooledInitiator for $initiator {
            fn max_send_wr(&self) -> u32 {
                let max_send_wr: fn(&Self) -> u32 = $max_send_wr;
                max_send_wr(self)
            }

            fn stream_count(&self) -> u32 {
                0
            }

            fn recover(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
                Err("no error completion here".into())
            }

            fn reset_stream(&mut self, _: u16) -> Result<(), StreamResetRefusal> {
                Err(StreamResetRefusal::NotReadyToSend)
            }
        }

        impl PoolInitiator for $initiator {
            /// None: the pool polls nothing here.
            type CompletionQueue = Infallible;

            fn raw_cq(cq: &Infallible) -> NonNull<ibv_cq> {
                match *cq {}
            }
        }
    };
}

pooled!(Libmlx5Initiator, |libmlx5| libmlx5.dci.max_post());
pooled!(DirectInitiator, |direct| direct.entries.queue().max_post());

// SAFETY: the oracle DCI's own views, alive while it is, with the entries libmlx5's tables have.
unsafe impl PostingInitiator for Libmlx5Initiator {
    fn qp_number(&self) -> u32 {
        self.dci.shape().qp_number
    }

    fn send_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        (self.dci.qp_ex(), self.entries, self.dci.mlx5_qp_ex())
    }

    fn max_inline_data(&self) -> u32 {
        self.dci.max_inline_data()
    }
}

// SAFETY: the entries' own views, alive while they are and used through `&mut`.
unsafe impl PostingInitiator for DirectInitiator {
    fn qp_number(&self) -> u32 {
        self.entries.queue().qp_number()
    }

    fn send_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        self.entries.send_views()
    }

    fn max_inline_data(&self) -> u32 {
        self.entries.queue().max_inline_data()
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
        let entries = unsafe {
            let ibv = ProviderEntries::new(dci.qp_ex(), operations).expect("libmlx5's entries");
            DcContext::from_raw(dci.mlx5_qp_ex())
                .entries(ibv, false)
                .expect("libmlx5's DC setters")
        };
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
        // SAFETY: the memory outlives the queue (the initiator drops its entries first) and
        // nothing else posts on it.
        let queue = unsafe { SendQueue::from_parts(parts) }.expect("the oracle's shape");
        // The route's address vector where the lookup says, as mlx5dv_init_obj says for a
        // device's handle.
        let (known, place) = (ah.ibv_ah().as_ptr() as usize, Box::new(av));
        // SAFETY: the place is the lookup's own box, alive as long as the entries.
        let entries_direct = unsafe {
            SendQueueEntries::with_address_lookup(queue, operations, move |handle| {
                (handle.as_ptr() as usize == known).then(|| NonNull::from(&*place))
            })
        };
        let mut libmlx5 =
            DcInitiatorPool::from_initiators(vec![Libmlx5Initiator { dci, entries }], DcPoolPolicy::Static, 3);
        let mut direct = DcInitiatorPool::from_initiators(
            vec![DirectInitiator {
                entries: entries_direct,
                memory,
            }],
            DcPoolPolicy::Static,
            3,
        );
        // SAFETY: the route outlives both pools (dropped after them).
        let (to_libmlx5, to_direct) = unsafe {
            (
                libmlx5.add_destination_raw(ah.ibv_ah(), fields.dct_number, fields.dc_key),
                direct.add_destination_raw(ah.ibv_ah(), fields.dct_number, fields.dc_key),
            )
        };
        Self {
            libmlx5: (libmlx5, to_libmlx5),
            direct: (direct, to_direct),
            _ah: ah,
            batch: black_box(batch),
            fields: black_box(fields),
        }
    }

    /// `requests` WRITEs through the pool on libmlx5.
    #[inline(always)]
    pub(super) fn libmlx5(&mut self, requests: usize) {
        let (pool, destination) = &mut self.libmlx5;
        post(pool, *destination, self.batch, requests, &self.fields);
    }

    /// `requests` WRITEs through the pool on the direct writer.
    #[inline(always)]
    pub(super) fn direct(&mut self, requests: usize) {
        let (pool, destination) = &mut self.direct;
        post(pool, *destination, self.batch, requests, &self.fields);
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

/// `requests` signalled WRITEs of one 64-byte entry to `destination` in batches of `batch`, as
/// the counting pool row (`send_dc_pool_write`) posts them.
#[inline(always)]
fn post<I: PoolInitiator>(
    pool: &mut DcInitiatorPool<I>, destination: DestinationId, batch: usize, requests: usize, f: &Fields,
) {
    let mut next = 0;
    while next < requests {
        let Ok(mut guard) = pool.start_post_send(destination) else {
            failed("start_post_send");
        };
        for n in next as u64..(next + batch) as u64 {
            let Ok(request) = guard.construct_wr(n, WorkRequestFlags::Signaled) else {
                failed("construct_wr");
            };
            let request = request.setup_write(f.rkey, f.remote + n * u64::from(SGE_LENGTH));
            // SAFETY: the buffers are only described; nothing reads them.
            unsafe { request.setup_sge(f.lkey, f.local + n * u64::from(SGE_LENGTH), SGE_LENGTH) };
        }
        if guard.post().is_err() {
            failed("post");
        }
        next += batch;
    }
}
