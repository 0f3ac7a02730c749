//! A completion queue as libmlx5's `mlx5_create_cq` leaves it (64-byte CQEs, no compression,
//! every CQE invalid and owned by the device), polled by libmlx5's own `mlx5_poll_cq_v1`.
use std::ptr::NonNull;

use rdma_mummy_sys::ibv_wc;

use super::dci::OracleDci;
use super::ffi;

/// The raw parts of a CQ, as `mlx5dv_init_obj`'s `struct mlx5dv_cq` gives them.
#[derive(Debug, Clone, Copy)]
pub struct CompletionQueueLayout {
    /// The first CQE.
    pub buffer: NonNull<u8>,
    /// CQEs, a power of two.
    pub cqe_count: u32,
    /// Bytes a CQE (64).
    pub cqe_size: u32,
    /// The doorbell record's two big-endian words (the consumer index is the first).
    pub doorbell_record: NonNull<u32>,
    /// Its CQ number.
    pub cq_number: u32,
}

/// A CQ over plain memory that libmlx5's poller reads.
pub struct OracleCq {
    raw: NonNull<ffi::OracleCqC>,
    variant: &'static ffi::Variant,
}

impl OracleCq {
    /// One of `cqe_count` 64-byte CQEs (a power of two), whose doorbell-record barrier is
    /// recorded (the DCIs' [`take_events`](OracleDci::take_events)).
    pub fn new(cqe_count: u32) -> Self {
        Self::of(cqe_count, &ffi::RECORDED)
    }

    /// As [`new`](Self::new), over libmlx5 built with rdma-core's own barriers: for instruction
    /// counts.
    pub fn unrecorded(cqe_count: u32) -> Self {
        Self::of(cqe_count, &ffi::PLAIN)
    }

    fn of(cqe_count: u32, variant: &'static ffi::Variant) -> Self {
        // SAFETY: the shim returns an owned object, or aborts.
        let raw = unsafe { (variant.cq_new)(cqe_count, 0x77) };
        Self {
            raw: NonNull::new(raw).expect("oracle_cq_new"),
            variant,
        }
    }

    fn view(&self) -> ffi::CompletionQueueViewC {
        let mut view = std::mem::MaybeUninit::<ffi::CompletionQueueViewC>::uninit();
        // SAFETY: the shim fills every field.
        unsafe {
            (self.variant.cq_view)(self.raw.as_ptr(), view.as_mut_ptr());
            view.assume_init()
        }
    }

    /// The raw parts `mlx5dv_init_obj` would give.
    pub fn layout(&self) -> CompletionQueueLayout {
        let view = self.view();
        CompletionQueueLayout {
            buffer: NonNull::new(view.buffer).expect("buffer"),
            cqe_count: view.cqe_count,
            cqe_size: view.cqe_size,
            doorbell_record: NonNull::new(view.doorbell_record).expect("doorbell record"),
            cq_number: view.cq_number,
        }
    }

    /// The CQEs' bytes, to write completions into.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        let view = self.view();
        // SAFETY: cqe_count CQEs of cqe_size bytes, alive while self is; `&mut self` makes it
        // the only access.
        unsafe { std::slice::from_raw_parts_mut(view.buffer, (view.cqe_count * view.cqe_size) as usize) }
    }

    /// Lets libmlx5's poller find `dci` by its user index, as `mlx5_store_uidx` does at
    /// creation. `dci` must outlive every later [`poll`](Self::poll).
    pub fn attach(&mut self, dci: &OracleDci) {
        // SAFETY: both objects are alive; the CQ's table keeps a pointer into the DCI.
        unsafe { (self.variant.cq_attach)(self.raw.as_ptr(), dci.raw().as_ptr()) }
    }

    /// Polls up to `max` completions with libmlx5's `mlx5_poll_cq_v1`; panics on its error
    /// return (a CQE of an unknown user index). The fields libmlx5 leaves unset keep the bytes
    /// `0xa5`, so that a test sees which it set.
    pub fn poll(&mut self, max: usize) -> Vec<ibv_wc> {
        let mut unset = std::mem::MaybeUninit::<ibv_wc>::uninit();
        // SAFETY: ibv_wc is plain C data (integers and a union of integers): any bytes are a value.
        let unset = unsafe {
            unset.as_mut_ptr().write_bytes(0xa5, 1);
            unset.assume_init()
        };
        let mut wc = vec![unset; max];
        // SAFETY: `max` entries to fill; the CQ and the attached DCIs are alive.
        let polled = unsafe { (self.variant.cq_poll)(self.raw.as_ptr(), max as i32, wc.as_mut_ptr()) };
        assert!(polled >= 0, "mlx5_poll_cq_v1 returned {polled}");
        wc.truncate(polled as usize);
        wc
    }

    /// The consumer index (`cq->cons_index`).
    pub fn consumer_index(&self) -> u32 {
        self.view().consumer_index
    }

    /// The doorbell record's two words, as stored.
    pub fn doorbell_record(&self) -> [u32; 2] {
        let view = self.view();
        // SAFETY: two aligned words, alive while self is.
        unsafe { [view.doorbell_record.read(), view.doorbell_record.add(1).read()] }
    }
}

impl Drop for OracleCq {
    fn drop(&mut self) {
        // SAFETY: created by oracle_cq_new, freed once.
        unsafe { (self.variant.cq_free)(self.raw.as_ptr()) }
    }
}
