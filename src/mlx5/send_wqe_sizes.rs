//! The largest send request (WQE) an mlx5 device takes: [`SendWqeSizes`], `max_wqe_sz_sq` and
//! `max_wqe_sz_sq_dc` from the general capabilities of the firmware command `QUERY_HCA_CAP`.
//!
//! The kernel's `mlx5_ib_alloc_ucontext` hands libmlx5 `max_wqe_sz_sq` as `max_sq_desc_sz`, which
//! `mlx5_calc_send_wqe` refuses a larger request by (`EINVAL`); nothing before the device reads
//! `max_wqe_sz_sq_dc`. mlx5_ib serves `QUERY_HCA_CAP` to every context (`devx_is_whitelist_cmd`,
//! `devx_get_uid`), and libmlx5's `get_hca_general_caps` sends it on every context it opens.
//! Where it is refused (no `log_max_uctx`, kernels before DEVX, rdma-core before v21) both sizes
//! fall back to `16 · max_sge + 32` bytes, as `mlx5_ib_query_device` derives `max_sge` as
//! `(min(max_wqe_sz_sq, 512) − 32) / 16`; no ConnectX has confirmed the fallback. The layout is
//! the PRM's (`mlx5_ifc.h`: the constants below).
use std::ffi::c_int;
use std::ptr::NonNull;

use rdma_mummy_sys::ibv_context;
use sideway::ibverbs::device_context::QueryDeviceError;

use super::device_context::{Mlx5DeviceContext, QueryMlx5DeviceError};
use super::library::devx_general_cmd;

/// Error returned by [`Mlx5DeviceContext::query_send_wqe_sizes`].
#[derive(Debug, thiserror::Error)]
#[error("failed to query the send request sizes")]
#[non_exhaustive]
pub struct QuerySendWqeSizesError(#[from] pub QuerySendWqeSizesErrorKind);

/// The enum type for [`QuerySendWqeSizesError`].
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
#[non_exhaustive]
pub enum QuerySendWqeSizesErrorKind {
    /// `mlx5dv_query_device` failed: the device is not mlx5, libmlx5 is missing
    /// ([`is_not_supported`](QueryMlx5DeviceError::is_not_supported)), or another error.
    QueryMlx5Device(#[from] QueryMlx5DeviceError),
    /// `ibv_query_device` (for `max_sge`) failed.
    QueryDevice(#[from] QueryDeviceError),
}

impl QuerySendWqeSizesError {
    /// Whether the device is not mlx5 or libmlx5 is missing.
    pub fn is_not_supported(&self) -> bool {
        matches!(&self.0, QuerySendWqeSizesErrorKind::QueryMlx5Device(err) if err.is_not_supported())
    }
}

impl Mlx5DeviceContext {
    /// The largest send request the device takes (`max_wqe_sz_sq`, and `max_wqe_sz_sq_dc` for a
    /// DC initiator), read with `QUERY_HCA_CAP`, or the bound every device takes where it did not
    /// answer ([`SendWqeSizes::is_reported`]).
    ///
    /// # Errors
    ///
    /// - [`QuerySendWqeSizesErrorKind::QueryMlx5Device`]: the device is not mlx5 (or libmlx5 is
    ///   missing), or `mlx5dv_query_device` failed.
    /// - [`QuerySendWqeSizesErrorKind::QueryDevice`]: `ibv_query_device` failed.
    pub fn query_send_wqe_sizes(&self) -> Result<SendWqeSizes, QuerySendWqeSizesError> {
        self.query_device().map_err(QuerySendWqeSizesErrorKind::from)?;
        let context = self.device_context();
        let max_sge = context
            .query_device()
            .map_err(QuerySendWqeSizesErrorKind::from)?
            .max_sge()
            .max(0) as u32;
        // SAFETY: the context is open for as long as `self` holds it, and it is mlx5 (it answered
        // mlx5dv_query_device).
        Ok(unsafe { query_send_wqe_sizes_raw(context.context(), max_sge) })
    }
}

/// `MLX5_CMD_OP_QUERY_HCA_CAP` (mlx5_ifc.h).
const QUERY_HCA_CAP: u16 = 0x100;
/// `op_mod`: the general device capabilities (`MLX5_CAP_GENERAL << 1` = 0), current values
/// (`HCA_CAP_OPMOD_GET_CUR` = 1), as libmlx5's `get_hca_general_caps` asks.
const GENERAL_DEVICE_CURRENT: u16 = 1;
/// `struct mlx5_ifc_query_hca_cap_in_bits`: 0x80 bits, `opcode` at bit 0 and `op_mod` at bit 0x30.
const INPUT_BYTES: usize = 0x80 / 8;
/// `struct mlx5_ifc_query_hca_cap_out_bits`: a 0x80-bit header, then the capability union of
/// 0x8000 bits (the size libmlx5 asks for).
const OUTPUT_BYTES: usize = (0x80 + 0x8000) / 8;
/// Where `cmd_hca_cap` starts in the output (`capability`, at bit 0x80).
const CAPABILITY: usize = 0x80 / 8;
/// `cmd_hca_cap.max_wqe_sz_sq`: 16 bits at bit 0x290.
const MAX_WQE_SZ_SQ: usize = CAPABILITY + 0x290 / 8;
/// `cmd_hca_cap.max_wqe_sz_sq_dc`: 16 bits at bit 0x2d0.
const MAX_WQE_SZ_SQ_DC: usize = CAPABILITY + 0x2d0 / 8;

/// The largest send request (WQE) a device takes, in bytes, reported or the bound every device
/// takes: [`Mlx5DeviceContext::query_send_wqe_sizes`].
///
/// ```no_run
/// use sideway::ibverbs::device::DeviceList;
/// use sideway_ext::mlx5::device_context::Mlx5DeviceContext;
///
/// let list = DeviceList::new()?;
/// let device = list.iter().next().expect("an RDMA device");
/// let mlx5 = Mlx5DeviceContext::new(device.open()?);
/// let sizes = mlx5.query_send_wqe_sizes()?;
/// println!("max_wqe_sz_sq {}, max_wqe_sz_sq_dc {} (reported: {})",
///     sizes.max_wqe_sz_sq(), sizes.max_wqe_sz_sq_dc(), sizes.is_reported());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWqeSizes {
    max_wqe_sz_sq: u32,
    max_wqe_sz_sq_dc: u32,
    reported: bool,
}

impl SendWqeSizes {
    /// The sizes as a device reports them. A `max_wqe_sz_sq_dc` of 0 is no DC limit of its own:
    /// `max_wqe_sz_sq` then bounds DC requests too.
    pub const fn new(max_wqe_sz_sq: u16, max_wqe_sz_sq_dc: u16) -> Self {
        let max_wqe_sz_sq_dc = match max_wqe_sz_sq_dc {
            0 => max_wqe_sz_sq,
            size => size,
        };
        Self {
            max_wqe_sz_sq: max_wqe_sz_sq as u32,
            max_wqe_sz_sq_dc: max_wqe_sz_sq_dc as u32,
            reported: true,
        }
    }

    /// The bound every device with `ibv_device_attr::max_sge` of `max_sge` takes, for both sizes:
    /// `16 · max_sge + 32` bytes.
    pub const fn guaranteed(max_sge: u32) -> Self {
        let bound = max_sge.saturating_mul(16).saturating_add(32);
        Self {
            max_wqe_sz_sq: bound,
            max_wqe_sz_sq_dc: bound,
            reported: false,
        }
    }

    /// The largest send request of any queue pair, in bytes (`max_wqe_sz_sq`).
    pub fn max_wqe_sz_sq(&self) -> u32 {
        self.max_wqe_sz_sq
    }

    /// The largest send request of a DC initiator, in bytes (`max_wqe_sz_sq_dc`).
    pub fn max_wqe_sz_sq_dc(&self) -> u32 {
        self.max_wqe_sz_sq_dc
    }

    /// Whether the device reported the sizes; `false`: they are [`guaranteed`](Self::guaranteed),
    /// and the device may take more.
    pub fn is_reported(&self) -> bool {
        self.reported
    }

    /// The largest request a DC initiator can be created with: the smaller of the two sizes.
    pub fn max_dc_request_bytes(&self) -> u32 {
        self.max_wqe_sz_sq.min(self.max_wqe_sz_sq_dc)
    }

    /// The sizes in a `query_hca_cap_out`; `None` if too short, refused or `max_wqe_sz_sq` 0.
    pub(crate) fn from_query_hca_cap(output: &[u8]) -> Option<Self> {
        let field = |at: usize| {
            output
                .get(at..at + 2)
                .map(|bytes| u16::from_be_bytes([bytes[0], bytes[1]]))
        };
        if *output.first()? != 0 {
            return None;
        }
        match (field(MAX_WQE_SZ_SQ)?, field(MAX_WQE_SZ_SQ_DC)?) {
            (0, _) => None,
            (sq, dc) => Some(Self::new(sq, dc)),
        }
    }

    /// The sizes from what `mlx5dv_devx_general_cmd` returned (`ret`) and wrote (`output`), else
    /// [`guaranteed`](Self::guaranteed) for `max_sge`.
    pub(crate) fn from_answer(ret: c_int, output: &[u8], max_sge: u32) -> Self {
        match ret {
            0 => Self::from_query_hca_cap(output).unwrap_or(Self::guaranteed(max_sge)),
            _ => Self::guaranteed(max_sge),
        }
    }
}

/// The input of `QUERY_HCA_CAP` (`query_hca_cap_in`, big-endian; the kernel sets the `uid`).
pub(crate) fn query_hca_cap_input() -> [u8; INPUT_BYTES] {
    let mut input = [0u8; INPUT_BYTES];
    input[0..2].copy_from_slice(&QUERY_HCA_CAP.to_be_bytes());
    input[6..8].copy_from_slice(&GENERAL_DEVICE_CURRENT.to_be_bytes());
    input
}

/// Reads the device's send request sizes with `mlx5dv_devx_general_cmd(QUERY_HCA_CAP)`
/// ([`SendWqeSizes::from_answer`]; guaranteed when libmlx5 has no such call).
///
/// # Safety
///
/// `context` must be an open device context of an mlx5 device.
pub(crate) unsafe fn query_send_wqe_sizes_raw(context: NonNull<ibv_context>, max_sge: u32) -> SendWqeSizes {
    let Some(general_cmd) = devx_general_cmd() else {
        return SendWqeSizes::guaranteed(max_sge);
    };
    let input = query_hca_cap_input();
    let mut output = vec![0u8; OUTPUT_BYTES];
    // SAFETY: the context is open (the caller's promise); `input` and `output` are valid for
    // their lengths for the duration of the call, which writes at most `output.len()` bytes.
    let ret = unsafe {
        general_cmd(
            context.as_ptr(),
            input.as_ptr().cast(),
            input.len(),
            output.as_mut_ptr().cast(),
            output.len(),
        )
    };
    SendWqeSizes::from_answer(ret, &output, max_sge)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer laid out as the PRM says: status 0, `max_wqe_sz_sq` at bit 0x290 and
    /// `max_wqe_sz_sq_dc` at bit 0x2d0 of the capability, which starts at byte 16.
    fn answer(status: u8, max_wqe_sz_sq: u16, max_wqe_sz_sq_dc: u16) -> Vec<u8> {
        let mut output = vec![0u8; OUTPUT_BYTES];
        output[0] = status;
        // Byte 16 + 0x290 / 8 = 98 and 16 + 0x2d0 / 8 = 106, big-endian.
        output[98..100].copy_from_slice(&max_wqe_sz_sq.to_be_bytes());
        output[106..108].copy_from_slice(&max_wqe_sz_sq_dc.to_be_bytes());
        // The neighbours, which must not be read: max_wqe_sz_rq (bit 0x2b0) and
        // max_flow_counter_31_16 (bit 0x2c0).
        output[102..104].copy_from_slice(&0xeeeeu16.to_be_bytes());
        output[104..106].copy_from_slice(&0xddddu16.to_be_bytes());
        output
    }

    #[test]
    fn the_sizes_are_read_where_the_prm_puts_them() {
        let sizes = SendWqeSizes::from_query_hca_cap(&answer(0, 1024, 512)).expect("reported");
        assert_eq!((sizes.max_wqe_sz_sq(), sizes.max_wqe_sz_sq_dc()), (1024, 512));
        assert!(sizes.is_reported());
        assert_eq!(sizes.max_dc_request_bytes(), 512);
        // The PRM's widths: 16 bits, the largest value read whole.
        let sizes = SendWqeSizes::from_query_hca_cap(&answer(0, 0xffff, 0x8000)).expect("reported");
        assert_eq!((sizes.max_wqe_sz_sq(), sizes.max_wqe_sz_sq_dc()), (0xffff, 0x8000));
    }

    #[test]
    fn an_answer_without_the_sizes_is_none_and_never_a_panic() {
        assert_eq!(SendWqeSizes::from_query_hca_cap(&[]), None);
        assert_eq!(SendWqeSizes::from_query_hca_cap(&answer(0, 1024, 512)[..107]), None);
        assert_eq!(SendWqeSizes::from_query_hca_cap(&answer(0, 1024, 512)[..99]), None);
        // A status other than 0: the firmware refused the command.
        assert_eq!(SendWqeSizes::from_query_hca_cap(&answer(0x03, 1024, 512)), None);
        // No max_wqe_sz_sq: nothing usable.
        assert_eq!(SendWqeSizes::from_query_hca_cap(&answer(0, 0, 512)), None);
        // Exactly long enough is enough.
        assert!(SendWqeSizes::from_query_hca_cap(&answer(0, 1024, 512)[..108]).is_some());
        for length in 0..200 {
            let _ = SendWqeSizes::from_query_hca_cap(&vec![0xff; length]);
        }
    }

    #[test]
    fn no_dc_size_is_the_general_one() {
        let sizes = SendWqeSizes::from_query_hca_cap(&answer(0, 1024, 0)).expect("reported");
        assert_eq!((sizes.max_wqe_sz_sq(), sizes.max_wqe_sz_sq_dc()), (1024, 1024));
        // A DC size above the general one: the general one bounds DC requests (libmlx5 checks it).
        let sizes = SendWqeSizes::new(512, 1024);
        assert_eq!(sizes.max_dc_request_bytes(), 512);
    }

    #[test]
    fn a_refused_command_falls_back_to_the_bound_every_device_takes() {
        // max_sge 30: (min(max_wqe_sz_sq, 512) − 32) / 16 = 30 holds for every max_wqe_sz_sq ≥ 512.
        let guaranteed = SendWqeSizes::guaranteed(30);
        assert_eq!((guaranteed.max_wqe_sz_sq(), guaranteed.max_wqe_sz_sq_dc()), (512, 512));
        assert!(!guaranteed.is_reported());
        assert_eq!(
            SendWqeSizes::from_answer(libc::EOPNOTSUPP, &answer(0, 1024, 512), 30),
            guaranteed
        );
        assert_eq!(
            SendWqeSizes::from_answer(libc::EREMOTEIO, &answer(0x03, 0, 0), 30),
            guaranteed
        );
        assert_eq!(SendWqeSizes::from_answer(0, &answer(0x03, 1024, 512), 30), guaranteed);
        assert_eq!(SendWqeSizes::from_answer(0, &[0; 8], 30), guaranteed);
        assert_eq!(
            SendWqeSizes::from_answer(0, &answer(0, 1024, 512), 30),
            SendWqeSizes::new(1024, 512)
        );
        assert_eq!(SendWqeSizes::guaranteed(u32::MAX).max_wqe_sz_sq(), u32::MAX);
    }

    #[test]
    fn the_input_asks_for_the_current_general_capabilities() {
        let input = query_hca_cap_input();
        assert_eq!(input.len(), 16);
        // opcode 0x100 in the first 16 bits, op_mod (bit 0x30) = (MLX5_CAP_GENERAL << 1) | GET_CUR.
        assert_eq!(input, [0x01, 0x00, 0, 0, 0, 0, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]);
    }
}
