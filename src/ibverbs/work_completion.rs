//! Work completions with every field of `struct ibv_wc` (sideway's pollers do not give the queue
//! pair a receive through a shared receive queue arrived on), polled into the caller's buffer.
use std::io;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_cq, ibv_poll_cq, ibv_wc, ibv_wc_opcode as op, ibv_wc_status};
use sideway::ibverbs::completion::{PollCompletionQueueError, WorkCompletionOperationType, WorkCompletionStatus};

/// `IBV_WC_GRH`: the receive buffer starts with the 40-byte GRH (UD).
const WC_GRH: u32 = 1 << 0;
/// `IBV_WC_WITH_IMM`: the completion carries immediate data.
const WC_WITH_IMM: u32 = 1 << 1;

/// Whether sideway's `WorkCompletionOperationType::from` knows `raw` (it panics on any other
/// value): `IBV_WC_SEND` to `IBV_WC_ATOMIC_WRITE`, `IBV_WC_RECV` to `IBV_WC_DRIVER3`.
fn known_opcode(raw: u32) -> bool {
    matches!(raw, op::IBV_WC_SEND..=op::IBV_WC_ATOMIC_WRITE | op::IBV_WC_RECV..=op::IBV_WC_DRIVER3)
}

/// One work completion (`struct ibv_wc`).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct WorkCompletion(ibv_wc);

impl Default for WorkCompletion {
    fn default() -> Self {
        // SAFETY: ibv_wc is plain data for which all zeroes is valid.
        Self(unsafe { MaybeUninit::zeroed().assume_init() })
    }
}

impl std::fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkCompletion")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status())
            .field("opcode", &self.0.opcode)
            .field("byte_len", &self.byte_len())
            .field("qp_number", &self.qp_number())
            .field("src_qp", &self.src_qp())
            .finish()
    }
}

impl PartialEq for WorkCompletion {
    fn eq(&self, other: &Self) -> bool {
        let fields = |wc: &ibv_wc| {
            // SAFETY: every member of the union is a u32: any bits are a valid value.
            let union = unsafe { wc.imm_data_invalidated_rkey_union.imm_data };
            let completion = (wc.wr_id, wc.status, wc.opcode, wc.vendor_err, wc.byte_len, union);
            let address = (wc.qp_num, wc.src_qp, wc.wc_flags, wc.pkey_index, wc.slid, wc.sl);
            (completion, address, wc.dlid_path_bits)
        };
        fields(&self.0) == fields(&other.0)
    }
}

impl Eq for WorkCompletion {}

impl From<ibv_wc> for WorkCompletion {
    fn from(wc: ibv_wc) -> Self {
        Self(wc)
    }
}

impl WorkCompletion {
    /// The C struct, for a library call that reads it (copy it field by field into a
    /// [`Zeroed`](super::zeroed::Zeroed) first: a typed copy leaves its padding undefined).
    pub(crate) fn raw(&self) -> &ibv_wc {
        &self.0
    }

    /// The `wr_id` of the request that completed (on a shared receive queue: of the SRQ's receive).
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    /// The completion's status, or `None` for a value this crate does not know ([`status_raw`](Self::status_raw)).
    pub fn status(&self) -> Option<WorkCompletionStatus> {
        decode_status(self.0.status)
    }

    /// Whether the status is success.
    pub fn is_success(&self) -> bool {
        self.0.status == 0
    }

    /// The raw status value (`enum ibv_wc_status`).
    pub fn status_raw(&self) -> u32 {
        self.0.status
    }

    /// The operation that completed (valid only on success), or `None` for a value this crate
    /// does not know ([`opcode_raw`](Self::opcode_raw)).
    pub fn opcode(&self) -> Option<WorkCompletionOperationType> {
        known_opcode(self.0.opcode).then(|| WorkCompletionOperationType::from(self.0.opcode))
    }

    /// The raw operation value (`enum ibv_wc_opcode`).
    pub fn opcode_raw(&self) -> u32 {
        self.0.opcode
    }

    /// The vendor's error syndrome, for failed completions.
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }

    /// Bytes received (receive completions; includes the 40-byte GRH on UD).
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// The number of the local queue pair the request was on: for a receive through a shared
    /// receive queue, the queue pair the message arrived on.
    pub fn qp_number(&self) -> u32 {
        self.0.qp_num
    }

    /// The remote queue pair that sent the message (UD receives).
    pub fn src_qp(&self) -> u32 {
        self.0.src_qp
    }

    /// The immediate data when the completion carries some, unchanged, as sideway gives it (see
    /// [`setup_send_imm`](crate::ibverbs::post_send_guard::TypedWorkRequestHandle::setup_send_imm)).
    pub fn imm_data(&self) -> Option<u32> {
        // SAFETY: every member of the union is a u32: any bits are a valid value, and it holds
        // immediate data when IBV_WC_WITH_IMM is set.
        let imm_data = unsafe { self.0.imm_data_invalidated_rkey_union.imm_data };
        (self.0.wc_flags & WC_WITH_IMM != 0).then_some(imm_data)
    }

    /// Whether the receive buffer starts with a 40-byte GRH (UD).
    pub fn has_grh(&self) -> bool {
        self.0.wc_flags & WC_GRH != 0
    }

    /// The sender's LID (UD receives on InfiniBand).
    pub fn slid(&self) -> u16 {
        self.0.slid
    }

    /// The service level (UD receives).
    pub fn sl(&self) -> u8 {
        self.0.sl
    }

    /// The P_Key index (GSI queue pairs).
    pub fn pkey_index(&self) -> u16 {
        self.0.pkey_index
    }
}

/// `ibv_poll_cq` into `wcs` on a raw completion queue: the completions that were ready, or the
/// provider's failure ([`PollCompletionQueueError::Ibverbs`]).
///
/// # Safety
///
/// `cq` must be a live completion queue, its context's `poll_cq` entry filled.
pub(crate) unsafe fn poll(
    cq: NonNull<ibv_cq>, wcs: &mut [WorkCompletion],
) -> Result<&[WorkCompletion], PollCompletionQueueError> {
    let len = wcs.len().min(i32::MAX as usize) as i32;
    // SAFETY: the CQ is alive (the caller's promise); WorkCompletion is a transparent ibv_wc and
    // the buffer holds `len` of them.
    let ret = unsafe { ibv_poll_cq(cq.as_ptr(), len, wcs.as_mut_ptr().cast()) };
    if ret < 0 {
        // Providers return -1 (mlx5, with errno unset) or a negative errno.
        let err = match ret.checked_neg() {
            Some(errno) if ret != -1 => io::Error::from_raw_os_error(errno),
            _ => io::Error::other(format!("the provider's poll_cq failed ({ret})")),
        };
        return Err(PollCompletionQueueError::Ibverbs(err));
    }
    // A provider never reports more than it was given room for; do not trust it with a slice.
    Ok(&wcs[..(ret as usize).min(wcs.len())])
}

/// An `ibv_wc_status` value decoded, or `None` for one sideway's `WorkCompletionStatus::from`
/// would panic on.
pub fn decode_status(status: u32) -> Option<WorkCompletionStatus> {
    // Numbered from IBV_WC_SUCCESS (0) without gaps; sideway's `From` knows them up to this one.
    (status <= ibv_wc_status::IBV_WC_TM_RNDV_INCOMPLETE).then(|| WorkCompletionStatus::from(status))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI32, Ordering};

    use rdma_mummy_sys::ibv_context;

    use super::*;

    static POLL_RETURNS: AtomicI32 = AtomicI32::new(0);

    unsafe extern "C" fn fake_poll_cq(_: *mut ibv_cq, _: i32, _: *mut ibv_wc) -> i32 {
        POLL_RETURNS.load(Ordering::Relaxed)
    }

    #[test]
    fn negative_and_oversized_poll_returns_are_errors_not_panics() {
        // SAFETY: zeroes are valid for these plain C structs (pointers and optional functions).
        let mut context: Box<ibv_context> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
        context.ops.poll_cq = Some(fake_poll_cq);
        // SAFETY: as above.
        let mut cq: Box<ibv_cq> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
        cq.context = &mut *context;
        let mut wcs = [WorkCompletion::default(); 4];
        for (ret, expect) in [(-1, None), (-libc::EAGAIN, Some(libc::EAGAIN)), (i32::MIN, None)] {
            POLL_RETURNS.store(ret, Ordering::Relaxed);
            // SAFETY: the fake CQ is alive.
            match unsafe { poll(NonNull::from(&mut *cq), &mut wcs) } {
                Err(PollCompletionQueueError::Ibverbs(err)) => assert_eq!(err.raw_os_error(), expect, "{ret}"),
                other => panic!("{ret}: unexpected {other:?}"),
            }
        }
        POLL_RETURNS.store(9, Ordering::Relaxed);
        // SAFETY: as above.
        assert_eq!(unsafe { poll(NonNull::from(&mut *cq), &mut wcs) }.unwrap().len(), 4);
        POLL_RETURNS.store(2, Ordering::Relaxed);
        // SAFETY: as above.
        assert_eq!(unsafe { poll(NonNull::from(&mut *cq), &mut wcs) }.unwrap().len(), 2);
    }

    #[test]
    fn unknown_status_and_opcode_values_decode_without_panicking() {
        let mut wc = WorkCompletion::default();
        assert_eq!(wc.status(), Some(WorkCompletionStatus::Success));
        assert_eq!(wc.opcode(), Some(WorkCompletionOperationType::Send));
        // Values a newer library or device may report: sideway's From panics on them.
        wc.0.status = 200;
        wc.0.opcode = 77;
        assert_eq!((wc.status(), wc.status_raw(), wc.is_success()), (None, 200, false));
        assert_eq!((wc.opcode(), wc.opcode_raw()), (None, 77));
        let _ = format!("{wc:?}");
        wc.0.status = ibv_wc_status::IBV_WC_TM_RNDV_INCOMPLETE;
        wc.0.opcode = op::IBV_WC_DRIVER3;
        assert!(wc.status().is_some() && wc.opcode().is_some());
        // Every value of the byte decodes without a panic, the 20 sideway knows to Some.
        let known = (0..=255u32)
            .filter(|&opcode| WorkCompletion::from(ibv_wc { opcode, ..wc.0 }).opcode().is_some())
            .count();
        assert_eq!(known, 20);
    }

    #[test]
    fn immediate_data_is_passed_through_as_sideway_does() {
        let mut wc = WorkCompletion::default();
        assert_eq!(wc.imm_data(), None);
        wc.0.wc_flags = WC_WITH_IMM;
        wc.0.imm_data_invalidated_rkey_union.imm_data = 0x0102_0304;
        assert_eq!(wc.imm_data(), Some(0x0102_0304));
    }
}
