//! [`VerbsCompletionQueue`]: the direct poller behind a `struct ibv_cq`, for code that polls with
//! `ibv_poll_cq` (a DC pool, feature `pool`): its context's `ops.poll_cq` runs the poller and
//! fills each `struct ibv_wc` as libmlx5's `mlx5_poll_cq` fills it for a send completion;
//! `ops.req_notify_cq` answers `EOPNOTSUPP`. Nothing else of the context is filled: only
//! `ibv_poll_cq` and `ibv_req_notify_cq` may be called on it.
//!
//! Arming is not offered because libmlx5's `mlx5_arm_cq` writes the doorbell record's arm word
//! from its own consumer index (`struct mlx5_cq`'s `cons_index`), which the direct poller never
//! advances: the device would be armed for CQEs already polled.
use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{addr_of_mut, NonNull};

use rdma_mummy_sys::{ibv_context, ibv_cq, ibv_wc, ibv_wc_flags};

use super::direct::Polling;
use super::{Completion, PollCompletionQueueErrorKind};

/// The most completions one `poll_cq` call returns (the poller's buffer, on the stack).
const MOST_PER_CALL: usize = 32;

/// The poller at a fixed address, with the `struct ibv_cq` and context that reach it.
pub(crate) struct VerbsCompletionQueue {
    tables: NonNull<Tables>,
}

/// `cq` first: the `*mut ibv_cq` handed out is a `*mut Tables`.
#[repr(C)]
struct Tables {
    cq: ibv_cq,
    context: ibv_context,
    polling: Polling,
}

impl std::fmt::Debug for VerbsCompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsCompletionQueue")
            .field("polling", self.polling())
            .finish()
    }
}

impl VerbsCompletionQueue {
    /// `polling` behind a `struct ibv_cq` of its own.
    pub(crate) fn new(polling: Polling) -> Self {
        // SAFETY: ibv_cq and ibv_context are plain C data (integers, raw pointers, optional
        // functions, pthread objects that are never used here): all zeroes is a valid value.
        let (cq, context): (ibv_cq, ibv_context) =
            unsafe { (MaybeUninit::zeroed().assume_init(), MaybeUninit::zeroed().assume_init()) };
        let tables = NonNull::from(Box::leak(Box::new(Tables { cq, context, polling })));
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

    /// The poller.
    pub(crate) fn polling(&self) -> &Polling {
        // SAFETY: the live tables; the C entry borrows them only inside `ibv_poll_cq`, which no
        // holder of `&self` is inside.
        unsafe { &(*self.tables.as_ptr()).polling }
    }

    /// The poller, to poll.
    pub(crate) fn polling_mut(&mut self) -> &mut Polling {
        // SAFETY: as for `polling`; `&mut self` excludes every other use of the tables.
        unsafe { &mut (*self.tables.as_ptr()).polling }
    }

    /// Its `struct ibv_cq`, for `ibv_poll_cq`; alive as long as `self`.
    #[cfg(any(test, feature = "pool"))]
    pub(crate) fn raw(&self) -> NonNull<ibv_cq> {
        self.tables.cast()
    }
}

impl Drop for VerbsCompletionQueue {
    fn drop(&mut self) {
        // SAFETY: leaked from a Box in `new`, freed once here; nothing polls it any more (a poll
        // through `raw` needs the CQ alive, its holder's promise).
        drop(unsafe { Box::from_raw(self.tables.as_ptr()) });
    }
}

/// The errno a refused CQE fails `ibv_poll_cq` with (negated): `EBUSY` for a send queue a batch
/// holds (the CQE is not consumed: poll again once the batch is posted or dropped); for the
/// others, consumed: `ENOENT` an unknown QP, `EPROTO` a CQE opcode that is not a send
/// completion's, `EOPNOTSUPP` a compressed CQE, `EIO` a slot where no outstanding request starts.
fn errno(kind: &PollCompletionQueueErrorKind) -> c_int {
    match kind {
        PollCompletionQueueErrorKind::SendQueueInUse { .. } => libc::EBUSY,
        PollCompletionQueueErrorKind::UnknownQueuePair { .. } => libc::ENOENT,
        PollCompletionQueueErrorKind::UnexpectedCqeOpcode { .. } => libc::EPROTO,
        PollCompletionQueueErrorKind::CompressedCqe { .. } => libc::EOPNOTSUPP,
        PollCompletionQueueErrorKind::UnexpectedWqeCounter { .. } => libc::EIO,
    }
}

/// `completion` as `mlx5_poll_cq` leaves a send completion's `struct ibv_wc`: `wr_id`, status,
/// vendor syndrome, QP number, the opcode and byte count where libmlx5 sets them
/// (`handle_good_req`), `IBV_WC_WITH_IMM` for the immediate variants; every other byte 0 (an
/// error completion's opcode too, which libmlx5 leaves as it was).
fn work_completion(completion: &Completion) -> ibv_wc {
    // SAFETY: ibv_wc is plain C data: all zeroes is a valid value.
    let mut wc: ibv_wc = unsafe { MaybeUninit::zeroed().assume_init() };
    wc.wr_id = completion.wr_id();
    wc.status = completion.status() as u32;
    wc.opcode = completion.opcode().map_or(0, |opcode| opcode as u32);
    wc.vendor_err = completion.vendor_err();
    wc.byte_len = completion.byte_len().unwrap_or(0);
    wc.qp_num = completion.qp_number();
    if completion.with_immediate() {
        wc.wc_flags = ibv_wc_flags::IBV_WC_WITH_IMM.0;
    }
    wc
}

/// `ibv_poll_cq` (the context's `ops.poll_cq`): at most `num_entries` (and at most 32) send
/// completions into `wc`, their count returned; a refused CQE fails the call (negative
/// [`errno`]) once the completions before it were returned. Nothing unwinds out of it: a panic
/// would be `-EIO`.
///
/// # Safety
///
/// `cq` is a [`VerbsCompletionQueue`]'s `struct ibv_cq`, alive through the call, and `wc` has
/// room for `num_entries` completions (libibverbs' contract for `ibv_poll_cq`).
unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `cq` is a VerbsCompletionQueue's (its context is only reachable through one),
        // alive while it is polled; only its poller is borrowed, and nothing else borrows it
        // during the call (a holder of the queue polls it either way, not both at once).
        let polling = unsafe { &mut *addr_of_mut!((*cq.cast::<Tables>()).polling) };
        let room = usize::try_from(num_entries).unwrap_or(0).min(MOST_PER_CALL);
        let mut completions = [Completion::default(); MOST_PER_CALL];
        match polling.poll(&mut completions[..room]) {
            Ok(polled) => {
                for (index, completion) in completions[..polled].iter().enumerate() {
                    // SAFETY: ibv_poll_cq(3): `wc` holds `num_entries` completions, and `index`
                    // is below it.
                    unsafe { wc.add(index).write(work_completion(completion)) };
                }
                polled as c_int
            },
            Err(error) => -errno(&error.0),
        }
    }))
    .unwrap_or(-libc::EIO)
}

/// `ibv_req_notify_cq` (the context's `ops.req_notify_cq`): not supported (see the
/// [module](self) documentation).
///
/// # Safety
///
/// Nothing is read: any arguments.
unsafe extern "C" fn req_notify_cq(_cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    libc::EOPNOTSUPP
}
