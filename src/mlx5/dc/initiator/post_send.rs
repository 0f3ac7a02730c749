//! Posting on a DC initiator: [`DcPostSendGuard`], sideway's `ExtendedPostSendGuard` with one
//! step more, the request's DC address.
//!
//! A request is `construct_wr` → operation → `setup_dc_addr` → data, each step a C call made at
//! once, as sideway's guard makes them: the operation names sideway's (`setup_send`,
//! `setup_write`, …), the address is `mlx5dv_wr_set_dc_addr`, the data sideway's own
//! [`SetScatterGatherEntry`] and [`SetInlineData`]. The data step is reachable only through the
//! address:
//!
//! ```compile_fail,E0599
//! use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
//! use sideway_ext::mlx5::dc::initiator::DcInitiator;
//!
//! fn data_before_address(dci: &mut DcInitiator) {
//!     let mut guard = dci.start_post_send();
//!     guard.construct_wr(1, WorkRequestFlags::Signaled).setup_send().setup_inline_data(b"no address");
//! }
//! ```
//!
//! libmlx5 copies the address handle's address vector into the request at `setup_dc_addr`: the
//! handle is borrowed until the request's data step, not until its completion.
//!
//! ```no_run
//! use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
//! use sideway_ext::ibverbs::address_handle::AddressHandle;
//! use sideway_ext::mlx5::dc::initiator::DcInitiator;
//!
//! fn send_hello(dci: &mut DcInitiator, ah: &AddressHandle, dct_number: u32, dc_key: u64)
//!     -> Result<(), Box<dyn std::error::Error>> {
//!     let mut guard = dci.start_post_send();
//!     guard
//!         .construct_wr(1, WorkRequestFlags::Signaled)
//!         .setup_send()
//!         .setup_dc_addr(ah, dct_number, dc_key)
//!         .setup_inline_data(b"hello");
//!     guard.post()?;
//!     Ok(())
//! }
//! ```
use std::io::{self, IoSlice};
use std::marker::PhantomData;
use std::ptr::NonNull;

use rdma_mummy_sys::{
    ibv_data_buf, ibv_qp_ex, ibv_sge, ibv_wr_abort, ibv_wr_atomic_cmp_swp, ibv_wr_atomic_fetch_add, ibv_wr_complete,
    ibv_wr_rdma_read, ibv_wr_rdma_write, ibv_wr_rdma_write_imm, ibv_wr_send, ibv_wr_send_imm, ibv_wr_set_inline_data,
    ibv_wr_set_inline_data_list, ibv_wr_set_sge, ibv_wr_set_sge_list, ibv_wr_start, mlx5dv_qp_ex,
    mlx5dv_wr_set_dc_addr,
};
use sideway::ibverbs::queue_pair::{
    PostSendError, SendOperationFlags, SetInlineData, SetScatterGatherEntry, WorkRequestFlags,
};

use super::DcInitiator;
use crate::ibverbs::address_handle::AddressHandle;

/// The views a DC initiator posts through, every entry its guard calls checked filled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DcSendView {
    qp_ex: NonNull<ibv_qp_ex>,
    mlx5_qp_ex: NonNull<mlx5dv_qp_ex>,
    send_ops: SendOperationFlags,
}

impl DcSendView {
    /// Checks that the provider filled every entry a guard calls: the batch entries, the
    /// builders of `send_ops`, the four data setters and `wr_set_dc_addr`, and
    /// `wr_set_dc_addr_stream` for a DC initiator created with `streams` (libmlx5 before
    /// rdma-core 37 has none); or the name of the first it left NULL.
    ///
    /// # Safety
    ///
    /// `qp_ex` and `mlx5_qp_ex` must be the extended and mlx5 views of a live DC initiator
    /// created with `send_ops`.
    pub(crate) unsafe fn new(
        qp_ex: NonNull<ibv_qp_ex>, mlx5_qp_ex: NonNull<mlx5dv_qp_ex>, send_ops: SendOperationFlags, streams: bool,
    ) -> Result<Self, &'static str> {
        let (qp, mlx5) = (qp_ex.as_ref(), mlx5_qp_ex.as_ref());
        let granted = |operation| send_ops.contains(operation);
        let entries = [
            (qp.wr_start.is_some(), "wr_start"),
            (qp.wr_complete.is_some(), "wr_complete"),
            (qp.wr_abort.is_some(), "wr_abort"),
            (qp.wr_send.is_some() || !granted(SendOperationFlags::Send), "wr_send"),
            (
                qp.wr_send_imm.is_some() || !granted(SendOperationFlags::SendWithImmediate),
                "wr_send_imm",
            ),
            (
                qp.wr_rdma_write.is_some() || !granted(SendOperationFlags::Write),
                "wr_rdma_write",
            ),
            (
                qp.wr_rdma_write_imm.is_some() || !granted(SendOperationFlags::WriteWithImmediate),
                "wr_rdma_write_imm",
            ),
            (
                qp.wr_rdma_read.is_some() || !granted(SendOperationFlags::Read),
                "wr_rdma_read",
            ),
            (
                qp.wr_atomic_cmp_swp.is_some() || !granted(SendOperationFlags::AtomicCompareAndSwap),
                "wr_atomic_cmp_swp",
            ),
            (
                qp.wr_atomic_fetch_add.is_some() || !granted(SendOperationFlags::AtomicFetchAndAdd),
                "wr_atomic_fetch_add",
            ),
            (qp.wr_set_sge.is_some(), "wr_set_sge"),
            (qp.wr_set_sge_list.is_some(), "wr_set_sge_list"),
            (qp.wr_set_inline_data.is_some(), "wr_set_inline_data"),
            (qp.wr_set_inline_data_list.is_some(), "wr_set_inline_data_list"),
            (mlx5.wr_set_dc_addr.is_some(), "wr_set_dc_addr"),
            (
                mlx5.wr_set_dc_addr_stream.is_some() || !streams,
                "wr_set_dc_addr_stream",
            ),
        ];
        match entries.into_iter().find(|(filled, _)| !filled) {
            Some((_, name)) => Err(name),
            None => Ok(Self {
                qp_ex,
                mlx5_qp_ex,
                send_ops,
            }),
        }
    }
}

impl DcInitiator {
    /// Starts a batch of send requests (`ibv_wr_start`); each request is addressed with
    /// [`setup_dc_addr`](DcDestinationHandle::setup_dc_addr) between its operation and its data.
    #[inline]
    pub fn start_post_send(&mut self) -> DcPostSendGuard<'_> {
        // SAFETY: the queue pair is alive and exclusively borrowed for the guard's lifetime.
        unsafe { DcPostSendGuard::start(self.send) }
    }
}

/// A batch of send requests on a DC initiator, between `ibv_wr_start` and `ibv_wr_complete`;
/// dropped without [`post`](Self::post), it aborts them (`ibv_wr_abort`).
///
/// It follows sideway's `ExtendedPostSendGuard` step for step and adds the DC address between
/// a request's operation and its data. It is not an `impl PostSendGuard`: sideway's
/// `WorkRequestHandle` goes from the operation to the data, and an address step there would
/// change every guard.
#[must_use = "the batch is posted only by post(); dropping the guard aborts it"]
pub struct DcPostSendGuard<'qp> {
    view: DcSendView,
    /// Whether a request asked for an operation the DC initiator was not created with.
    refused: bool,
    _qp: PhantomData<&'qp mut DcInitiator>,
}

impl DcPostSendGuard<'_> {
    /// Starts a batch on `view` (`ibv_wr_start`).
    ///
    /// # Safety
    ///
    /// The queue pair of `view` must be alive and used by nothing else for the guard's lifetime.
    #[inline]
    pub(crate) unsafe fn start(view: DcSendView) -> Self {
        // SAFETY: the caller's promise; the view's check covered `wr_start`.
        unsafe { ibv_wr_start(view.qp_ex.as_ptr()) };
        Self {
            view,
            refused: false,
            _qp: PhantomData,
        }
    }

    /// Starts a new request with this `wr_id` and flags; continue with its operation.
    #[inline]
    pub fn construct_wr(&mut self, wr_id: u64, wr_flags: WorkRequestFlags) -> DcWorkRequestHandle<'_> {
        let qp = self.view.qp_ex.as_ptr();
        // SAFETY: the guard holds the live queue pair exclusively; plain fields.
        unsafe {
            (*qp).wr_id = wr_id;
            (*qp).wr_flags = wr_flags.bits();
        }
        DcWorkRequestHandle {
            view: self.view,
            refused: &mut self.refused,
        }
    }

    /// Posts the batch with `ibv_wr_complete`, sideway's errors from its errno. libmlx5 posts all
    /// of it or, on error, none of it (`mlx5_send_wr_complete` rolls the queue back when a request
    /// failed). A batch holding an operation the DC initiator was not created with is aborted
    /// instead, [`PostSendError::InvalidWorkRequest`] with `EOPNOTSUPP`.
    #[inline]
    pub fn post(self) -> Result<(), PostSendError> {
        if self.refused {
            // Dropping the guard aborts the batch.
            drop(self);
            return Err(PostSendError::InvalidWorkRequest(io::Error::from_raw_os_error(
                libc::EOPNOTSUPP,
            )));
        }
        let qp = self.view.qp_ex.as_ptr();
        // The batch is finished either way: it must not be aborted too.
        std::mem::forget(self);
        // SAFETY: the batch was started on this live queue pair; its build checked `wr_complete`.
        match unsafe { ibv_wr_complete(qp) } {
            0 => Ok(()),
            libc::EINVAL => Err(PostSendError::InvalidWorkRequest(io::Error::from_raw_os_error(
                libc::EINVAL,
            ))),
            libc::ENOMEM => Err(PostSendError::NotEnoughResources(io::Error::from_raw_os_error(
                libc::ENOMEM,
            ))),
            libc::EFAULT => Err(PostSendError::InvalidQueuePair(io::Error::from_raw_os_error(
                libc::EFAULT,
            ))),
            err => Err(PostSendError::Ibverbs(io::Error::from_raw_os_error(err))),
        }
    }
}

impl Drop for DcPostSendGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the batch was started and not completed; its build checked `wr_abort`.
        unsafe { ibv_wr_abort(self.view.qp_ex.as_ptr()) };
    }
}

/// One request being described: pick its operation.
#[must_use = "a request joins the batch at its data step"]
pub struct DcWorkRequestHandle<'g> {
    view: DcSendView,
    refused: &'g mut bool,
}

impl<'g> DcWorkRequestHandle<'g> {
    /// Calls `build` when the DC initiator was created with `operation`; otherwise refuses the
    /// batch (libmlx5 fills every DC builder, granted or not: `fill_wr_builders_rc_xrc_dc`).
    #[inline]
    fn with(self, operation: SendOperationFlags, build: impl FnOnce(*mut ibv_qp_ex)) -> DcDestinationHandle<'g> {
        if self.view.send_ops.contains(operation) {
            build(self.view.qp_ex.as_ptr());
        } else {
            *self.refused = true;
        }
        DcDestinationHandle {
            view: self.view,
            refused: self.refused,
        }
    }

    /// A SEND (`ibv_wr_send`).
    #[inline]
    pub fn setup_send(self) -> DcDestinationHandle<'g> {
        // SAFETY (each builder below): the guard holds the live queue pair inside a batch; the
        // DC initiator's build checked the builder of every operation it was created with.
        self.with(SendOperationFlags::Send, |qp| unsafe { ibv_wr_send(qp) })
    }

    /// A SEND with immediate data (`ibv_wr_send_imm`), `imm_data` as sideway passes it.
    #[inline]
    pub fn setup_send_imm(self, imm_data: u32) -> DcDestinationHandle<'g> {
        self.with(SendOperationFlags::SendWithImmediate, |qp| unsafe {
            ibv_wr_send_imm(qp, imm_data)
        })
    }

    /// An RDMA WRITE (`ibv_wr_rdma_write`).
    #[inline]
    pub fn setup_write(self, rkey: u32, remote_addr: u64) -> DcDestinationHandle<'g> {
        self.with(SendOperationFlags::Write, |qp| unsafe {
            ibv_wr_rdma_write(qp, rkey, remote_addr)
        })
    }

    /// An RDMA WRITE with immediate data (`ibv_wr_rdma_write_imm`).
    #[inline]
    pub fn setup_write_imm(self, rkey: u32, remote_addr: u64, imm_data: u32) -> DcDestinationHandle<'g> {
        self.with(SendOperationFlags::WriteWithImmediate, |qp| unsafe {
            ibv_wr_rdma_write_imm(qp, rkey, remote_addr, imm_data)
        })
    }

    /// An RDMA READ (`ibv_wr_rdma_read`).
    #[inline]
    pub fn setup_read(self, rkey: u32, remote_addr: u64) -> DcDestinationHandle<'g> {
        self.with(SendOperationFlags::Read, |qp| unsafe {
            ibv_wr_rdma_read(qp, rkey, remote_addr)
        })
    }

    /// An atomic compare-and-swap of the 8 bytes at `remote_addr` (`ibv_wr_atomic_cmp_swp`); the
    /// old value lands in the local buffer.
    #[inline]
    pub fn setup_atomic_compare_swap(
        self, rkey: u32, remote_addr: u64, compare: u64, swap: u64,
    ) -> DcDestinationHandle<'g> {
        self.with(SendOperationFlags::AtomicCompareAndSwap, |qp| unsafe {
            ibv_wr_atomic_cmp_swp(qp, rkey, remote_addr, compare, swap)
        })
    }

    /// An atomic fetch-and-add on the 8 bytes at `remote_addr` (`ibv_wr_atomic_fetch_add`); the
    /// old value lands in the local buffer.
    #[inline]
    pub fn setup_atomic_fetch_add(self, rkey: u32, remote_addr: u64, add: u64) -> DcDestinationHandle<'g> {
        self.with(SendOperationFlags::AtomicFetchAndAdd, |qp| unsafe {
            ibv_wr_atomic_fetch_add(qp, rkey, remote_addr, add)
        })
    }
}

/// The address step of a DC request.
#[must_use = "a request joins the batch at its data step"]
pub struct DcDestinationHandle<'g> {
    view: DcSendView,
    refused: &'g mut bool,
}

impl<'g> DcDestinationHandle<'g> {
    /// Sends to the DC target `dct_number` with access key `dc_key`, over the route of `ah`
    /// (`mlx5dv_wr_set_dc_addr`).
    #[inline]
    pub fn setup_dc_addr(self, ah: &'g AddressHandle, dct_number: u32, dc_key: u64) -> DcLocalBufferHandle<'g> {
        // SAFETY: the guard holds the live queue pair inside a batch, right after a builder; the
        // DC initiator's build checked `wr_set_dc_addr`; `ah` is borrowed until the data step,
        // after which libmlx5 no longer reads it (it copied the address vector here).
        self.setup_address(|mlx5| unsafe { mlx5dv_wr_set_dc_addr(mlx5.as_ptr(), ah.ah().as_ptr(), dct_number, dc_key) })
    }

    /// Calls `set` with the mlx5 view, unless the request's operation was refused.
    #[inline]
    pub(crate) fn setup_address(self, set: impl FnOnce(NonNull<mlx5dv_qp_ex>)) -> DcLocalBufferHandle<'g> {
        if !*self.refused {
            set(self.view.mlx5_qp_ex);
        }
        DcLocalBufferHandle {
            view: self.view,
            refused: self.refused,
        }
    }
}

/// The data step of a DC request: sideway's [`SetScatterGatherEntry`] and [`SetInlineData`].
#[must_use = "a request joins the batch at its data step"]
pub struct DcLocalBufferHandle<'g> {
    view: DcSendView,
    refused: &'g mut bool,
}

impl DcLocalBufferHandle<'_> {
    /// Calls `set` with the extended view, unless the request's operation was refused.
    #[inline]
    fn with(self, set: impl FnOnce(*mut ibv_qp_ex)) {
        if !*self.refused {
            set(self.view.qp_ex.as_ptr());
        }
    }
}

// IoSlice is ABI-compatible with iovec, which has the layout of ibv_data_buf (pointer, length).
const _: () = assert!(std::mem::size_of::<IoSlice<'_>>() == std::mem::size_of::<ibv_data_buf>());

// SAFETY (each setter below): the guard holds the live queue pair inside a batch, after the
// request's builder and address; the DC initiator's build checked all four setters. Inline data
// over the granted `max_inline_data` needs no check here: libmlx5 records ENOMEM and
// `ibv_wr_complete` returns it (`_mlx5_send_wr_set_inline_data`).
impl SetInlineData for DcLocalBufferHandle<'_> {
    /// Copies `buf` into the request (`ibv_wr_set_inline_data`).
    #[inline]
    fn setup_inline_data(self, buf: &[u8]) {
        self.with(|qp| unsafe { ibv_wr_set_inline_data(qp, buf.as_ptr() as *mut _, buf.len()) });
    }

    /// Copies the slices, one after the other, into the request (`ibv_wr_set_inline_data_list`).
    #[inline]
    fn setup_inline_data_list(self, bufs: &[IoSlice<'_>]) {
        self.with(|qp| unsafe { ibv_wr_set_inline_data_list(qp, bufs.len(), bufs.as_ptr() as *const ibv_data_buf) });
    }
}

impl SetScatterGatherEntry for DcLocalBufferHandle<'_> {
    /// # Safety
    ///
    /// The buffer must lie in the memory region of `lkey` and stay valid until the request
    /// completes.
    #[inline]
    unsafe fn setup_sge(self, lkey: u32, addr: u64, length: u32) {
        self.with(|qp| ibv_wr_set_sge(qp, lkey, addr, length));
    }

    /// # Safety
    ///
    /// Each buffer must lie in the memory region of its `lkey` and stay valid until the request
    /// completes.
    #[inline]
    unsafe fn setup_sge_list(self, sg_list: &[ibv_sge]) {
        self.with(|qp| ibv_wr_set_sge_list(qp, sg_list.len(), sg_list.as_ptr()));
    }
}
