//! The address that answers the sender of a received datagram,
//! [`AddressHandleAttribute::from_work_completion`] (`ibv_init_ah_from_wc`), and
//! [`create_ah_from_wc`](super::extension::ProtectionDomainExt::create_ah_from_wc), which makes
//! the handle from it. Cache the handle per sender.
use std::io;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_grh, ibv_init_ah_from_wc, ibv_wc};
use sideway::ibverbs::device_context::DeviceContext;

use super::address::AddressHandleAttribute;
use super::address_handle::CreateAddressHandleError;
use super::work_completion::WorkCompletion;
use super::zeroed::Zeroed;

/// The bytes of the GRH (global route header) at the start of every UD receive buffer, whether
/// the datagram carried one or not; on RoCE v2 over IPv4 its last 20 bytes hold the IPv4 header.
pub const GRH_LEN: usize = 40;

/// Error returned by [`AddressHandleAttribute::from_work_completion`].
#[derive(Debug, thiserror::Error)]
#[error("failed to read the sender's address from a work completion")]
#[non_exhaustive]
pub struct InitAddressHandleAttributeError(#[from] pub InitAddressHandleAttributeErrorKind);

/// The enum type for [`InitAddressHandleAttributeError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitAddressHandleAttributeErrorKind {
    /// The port number is 0 or above the device's port count.
    #[error("port {port} does not exist on this device")]
    InvalidPort {
        /// The port asked for.
        port: u8,
        /// The library's error from querying the port.
        source: io::Error,
    },
    /// `ibv_init_ah_from_wc` failed: for example no local GID matches the datagram's
    /// destination GID, or the GRH is neither IPv4 nor IPv6 on RoCE.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// Error returned by [`create_ah_from_wc`](super::extension::ProtectionDomainExt::create_ah_from_wc).
#[derive(Debug, thiserror::Error)]
#[error("failed to create an address handle from a work completion")]
#[non_exhaustive]
pub struct CreateAddressHandleFromWorkCompletionError(#[from] pub CreateAddressHandleFromWorkCompletionErrorKind);

/// The enum type for [`CreateAddressHandleFromWorkCompletionError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateAddressHandleFromWorkCompletionErrorKind {
    /// Reading the address failed.
    #[error(transparent)]
    Attribute(#[from] InitAddressHandleAttributeError),
    /// Creating the handle failed (a completion without a GRH on a RoCE port is
    /// [`GlobalRoutingRequired`](super::address_handle::CreateAddressHandleErrorKind::GlobalRoutingRequired)).
    #[error(transparent)]
    AddressHandle(#[from] CreateAddressHandleError),
}

impl AddressHandleAttribute {
    /// The address that answers the sender of a received datagram through local `port`, from its
    /// completion `wc` and `grh`, the first [`GRH_LEN`] bytes of its receive buffer.
    ///
    /// # Errors
    ///
    /// [`InvalidPort`](InitAddressHandleAttributeErrorKind::InvalidPort), or the library's.
    pub fn from_work_completion(
        ctx: &DeviceContext, port: u8, wc: &WorkCompletion, grh: &[u8; GRH_LEN],
    ) -> Result<Self, InitAddressHandleAttributeError> {
        // SAFETY: the context is open while `ctx` is.
        unsafe { Self::from_work_completion_on(ctx.context(), port, wc, grh) }
    }

    /// [`from_work_completion`](Self::from_work_completion) on a raw context.
    ///
    /// # Safety
    ///
    /// `context` must be an open device context.
    pub(crate) unsafe fn from_work_completion_on(
        context: NonNull<rdma_mummy_sys::ibv_context>, port: u8, wc: &WorkCompletion, grh: &[u8; GRH_LEN],
    ) -> Result<Self, InitAddressHandleAttributeError> {
        // SAFETY: the context is open (the caller's promise).
        unsafe { super::query_port(context, port) }
            .map_err(|source| InitAddressHandleAttributeErrorKind::InvalidPort { port, source })?;
        let mut raw_wc = Zeroed::<ibv_wc>::new();
        let polled = wc.raw();
        raw_wc.wr_id = polled.wr_id;
        raw_wc.status = polled.status;
        raw_wc.opcode = polled.opcode;
        raw_wc.vendor_err = polled.vendor_err;
        raw_wc.byte_len = polled.byte_len;
        raw_wc.imm_data_invalidated_rkey_union = polled.imm_data_invalidated_rkey_union;
        raw_wc.qp_num = polled.qp_num;
        raw_wc.src_qp = polled.src_qp;
        raw_wc.wc_flags = polled.wc_flags;
        raw_wc.pkey_index = polled.pkey_index;
        raw_wc.slid = polled.slid;
        raw_wc.sl = polled.sl;
        raw_wc.dlid_path_bits = polled.dlid_path_bits;
        let mut raw_grh = Zeroed::<ibv_grh>::new();
        // SAFETY: ibv_grh is GRH_LEN bytes of integers, no padding (checked below); both are live.
        unsafe { std::ptr::copy_nonoverlapping(grh.as_ptr(), raw_grh.as_mut_ptr().cast::<u8>(), GRH_LEN) };
        let mut attr = Self::new();
        // SAFETY: the context is open; the three structs are valid and writable for the call.
        let ret = unsafe {
            ibv_init_ah_from_wc(
                context.as_ptr(),
                port,
                raw_wc.as_mut_ptr(),
                raw_grh.as_mut_ptr(),
                &mut attr.attr,
            )
        };
        if ret != 0 {
            return Err(InitAddressHandleAttributeErrorKind::Ibverbs(init_error(ret)).into());
        }
        Ok(attr)
    }
}

const _: () = assert!(std::mem::size_of::<ibv_grh>() == GRH_LEN);

/// The error of a failed `ibv_init_ah_from_wc`: -1 with `errno` (its man page), or a negative
/// errno value as some libibverbs versions return.
fn init_error(ret: i32) -> io::Error {
    match ret {
        -1 => match io::Error::last_os_error() {
            err if err.raw_os_error() == Some(0) => io::Error::from_raw_os_error(libc::EINVAL),
            err => err,
        },
        ret => io::Error::from_raw_os_error(ret.saturating_abs()),
    }
}
