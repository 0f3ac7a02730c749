//! The simulated send completion queue: a `struct ibv_cq` whose context's `poll_cq` entry is
//! this module's `extern "C"` function, so that the pool polls it with the `ibv_poll_cq` it
//! polls a ConnectX CQ with. Each call is one tick of the fabric: the device runs while the
//! program polls.
use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{addr_of, addr_of_mut, NonNull};

use rdma_mummy_sys::{ibv_context, ibv_cq, ibv_wc};

use super::Shared;

/// The completion queue of a simulated fabric: the send CQ of a simulated pool
/// ([`pool.send_cq()`](crate::DcInitiatorPool::send_cq)), or of initiators
/// without a pool ([`SimulatedFabric::create_cq`](super::SimulatedFabric::create_cq)): every
/// completion of the fabric's initiators reaches it, and [`poll`](crate::DcInitiatorPool::poll)
/// reads it through `ibv_poll_cq`, each call one tick of the fabric.
pub struct SimulatedCompletionQueue {
    tables: NonNull<Tables>,
}

/// The CQ and the context its `poll_cq` entry is read from; `cq` first: the `*mut ibv_cq` handed
/// out is a `*mut Tables`.
#[repr(C)]
struct Tables {
    cq: ibv_cq,
    context: ibv_context,
    fabric: Shared,
}

impl std::fmt::Debug for SimulatedCompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedCompletionQueue").finish_non_exhaustive()
    }
}

impl SimulatedCompletionQueue {
    /// The CQ of `fabric`.
    pub(crate) fn new(fabric: &Shared) -> Self {
        // SAFETY: ibv_cq and ibv_context are plain C data (integers, raw pointers, optional
        // functions, pthread objects that are never used here): all zeroes is a valid value.
        let (cq, context): (ibv_cq, ibv_context) =
            unsafe { (MaybeUninit::zeroed().assume_init(), MaybeUninit::zeroed().assume_init()) };
        let tables = NonNull::from(Box::leak(Box::new(Tables {
            cq,
            context,
            fabric: Shared::clone(fabric),
        })));
        // SAFETY: fields of the live tables just made; the CQ's context points into the same
        // allocation, which never moves.
        unsafe {
            let raw = tables.as_ptr();
            (*raw).context.ops.poll_cq = Some(poll_cq);
            (*raw).context.ops.req_notify_cq = Some(req_notify_cq);
            (*raw).cq.context = addr_of_mut!((*raw).context);
        }
        Self { tables }
    }

    /// Its `struct ibv_cq`, alive as long as self.
    pub(crate) fn raw(&self) -> NonNull<ibv_cq> {
        self.tables.cast()
    }
}

/// Polled as a device's CQ is: [`poll_work_completions`](sideway_ext::ibverbs::extension::CompletionQueueExt::poll_work_completions)
/// reads it through `ibv_poll_cq`. It has no completion channel: `ibv_req_notify_cq` on it
/// returns `EOPNOTSUPP`.
impl sideway::ibverbs::completion::CompletionQueue for SimulatedCompletionQueue {
    unsafe fn cq(&self) -> NonNull<ibv_cq> {
        self.raw()
    }
}

/// Polled as a device's CQ is, through `ibv_poll_cq`.
impl crate::initiator::PoolCompletionQueue for SimulatedCompletionQueue {
    fn poll(
        &mut self,
        mut each: impl FnMut(
            crate::initiator::PoolCompletion,
            Option<&sideway_ext::ibverbs::work_completion::WorkCompletion>,
        ),
    ) -> Result<usize, sideway::ibverbs::completion::PollCompletionQueueError> {
        use sideway_ext::ibverbs::extension::CompletionQueueExt;
        let mut wcs = [sideway_ext::ibverbs::work_completion::WorkCompletion::default(); 32];
        let polled = self.poll_work_completions(&mut wcs)?;
        for wc in polled {
            each(wc.into(), Some(wc));
        }
        Ok(polled.len())
    }
}

impl Drop for SimulatedCompletionQueue {
    fn drop(&mut self) {
        // SAFETY: leaked from a Box in `new`, freed once here; nothing polls it any more (a poll
        // borrows the pool that owns self).
        drop(unsafe { Box::from_raw(self.tables.as_ptr()) });
    }
}

/// `ibv_poll_cq` (the context's `ops.poll_cq`): one tick of the fabric, then up to
/// `num_entries` completions into `wc`, the count returned (ibv_poll_cq(3)); a negative errno if
/// the fabric is busy or something panicked (nothing unwinds out of it).
///
/// # Safety
///
/// `cq` is a simulated CQ's `struct ibv_cq`, alive through the call, and `wc` has room for
/// `num_entries` completions (libibverbs' contract for `ibv_poll_cq`).
unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `cq` is a simulated CQ's (its context is only reachable through one), alive
        // while it is polled; only its fabric field is read.
        let fabric = unsafe { &*addr_of!((*cq.cast::<Tables>()).fabric) };
        let Ok(mut fabric) = fabric.try_borrow_mut() else {
            return -libc::EBUSY;
        };
        let room = usize::try_from(num_entries).unwrap_or(0);
        let polled = fabric.poll(room, |index, completion| {
            // SAFETY: ibv_poll_cq(3): `wc` holds `num_entries` completions, and `index` is below
            // it; the copy takes every byte (padding included) of a zero-started completion.
            unsafe { std::ptr::copy_nonoverlapping(&**completion as *const ibv_wc, wc.add(index), 1) }
        });
        polled as c_int
    }))
    .unwrap_or(-libc::EIO)
}

/// `ibv_req_notify_cq` (the context's `ops.req_notify_cq`): the fabric has no completion
/// channel.
///
/// # Safety
///
/// Nothing is read: any arguments.
unsafe extern "C" fn req_notify_cq(_cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    libc::EOPNOTSUPP
}
