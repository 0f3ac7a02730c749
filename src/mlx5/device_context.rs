//! The mlx5 direct-verbs view of a device context: [`Mlx5DeviceContext`] and its queries.
use std::io;
use std::mem::MaybeUninit;
use std::sync::Arc;

use rdma_mummy_sys::{mlx5dv_context, mlx5dv_query_device};
use sideway::ibverbs::device_context::{DeviceContext, QueryDeviceError};

use super::dc_capabilities::DcCapabilities;
use super::device_attributes::{Mlx5ContextMask, Mlx5DeviceAttributes};

/// Error returned by [`Mlx5DeviceContext::query_device`].
#[derive(Debug, thiserror::Error)]
#[error("failed to query mlx5 device")]
#[non_exhaustive]
pub struct QueryMlx5DeviceError(#[from] pub QueryMlx5DeviceErrorKind);

/// The enum type for [`QueryMlx5DeviceError`].
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
#[non_exhaustive]
pub enum QueryMlx5DeviceErrorKind {
    /// The device is not an mlx5 device, or libmlx5 could not be loaded (`EOPNOTSUPP`).
    #[error("device is not an mlx5 device or libmlx5 is not available")]
    NotSupported,
    /// Any other error `mlx5dv_query_device` returned.
    Ibverbs(#[from] io::Error),
}

impl QueryMlx5DeviceError {
    /// Whether the query failed because the device is not mlx5 or libmlx5 is missing.
    pub fn is_not_supported(&self) -> bool {
        matches!(self.0, QueryMlx5DeviceErrorKind::NotSupported)
    }
}

/// Error returned by [`Mlx5DeviceContext::query_dc_capabilities`].
#[derive(Debug, thiserror::Error)]
#[error("failed to query DC capabilities")]
#[non_exhaustive]
pub struct QueryDcCapabilitiesError(#[from] pub QueryDcCapabilitiesErrorKind);

/// The enum type for [`QueryDcCapabilitiesError`].
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
#[non_exhaustive]
pub enum QueryDcCapabilitiesErrorKind {
    /// `mlx5dv_query_device` failed for a reason other than "not supported".
    QueryMlx5Device(#[from] QueryMlx5DeviceError),
    /// `ibv_query_device` failed.
    QueryDevice(#[from] QueryDeviceError),
}

/// `mlx5dv_query_device` on a raw context.
///
/// # Safety
///
/// `context` must be an open device context.
pub(crate) unsafe fn query_device_raw(
    context: std::ptr::NonNull<rdma_mummy_sys::ibv_context>,
) -> Result<Mlx5DeviceAttributes, QueryMlx5DeviceError> {
    let raw = MaybeUninit::<mlx5dv_context>::zeroed();
    // SAFETY: every field of mlx5dv_context is an integer, a plain struct of integers or a raw
    // pointer, for which all-zero bytes are valid.
    let mut raw = unsafe { raw.assume_init() };
    raw.comp_mask = Mlx5ContextMask::all_flags().bits();
    // SAFETY: the context is open (the caller's promise), and `raw` is a valid, writable
    // mlx5dv_context for the duration of the call.
    let ret = unsafe { mlx5dv_query_device(context.as_ptr(), &mut raw) };
    match ret {
        0 => Ok(Mlx5DeviceAttributes::from_raw(&raw)),
        // The call reports its error as its return value (errno is not reliable here).
        libc::EOPNOTSUPP => Err(QueryMlx5DeviceErrorKind::NotSupported.into()),
        errno => Err(QueryMlx5DeviceErrorKind::Ibverbs(io::Error::from_raw_os_error(errno)).into()),
    }
}

/// The mlx5 direct-verbs (`mlx5dv_*`) view of a sideway [`DeviceContext`], which it holds; whether
/// the device is mlx5 is known when it is queried.
#[derive(Debug)]
pub struct Mlx5DeviceContext {
    context: Arc<DeviceContext>,
}

impl Mlx5DeviceContext {
    /// Wraps a sideway device context for mlx5 direct-verbs calls.
    pub fn new(context: Arc<DeviceContext>) -> Self {
        Mlx5DeviceContext { context }
    }

    /// The sideway device context this wraps.
    pub fn device_context(&self) -> &Arc<DeviceContext> {
        &self.context
    }

    /// Queries the device with [`mlx5dv_query_device(3)`](https://man7.org/linux/man-pages/man3/mlx5dv_query_device.3.html),
    /// asking for every part this crate decodes.
    ///
    /// # Errors
    ///
    /// - [`QueryMlx5DeviceErrorKind::NotSupported`]: the device is not mlx5, or libmlx5 is not
    ///   installed (the call returns `EOPNOTSUPP`).
    /// - [`QueryMlx5DeviceErrorKind::Ibverbs`]: any other error the call returns.
    pub fn query_device(&self) -> Result<Mlx5DeviceAttributes, QueryMlx5DeviceError> {
        // SAFETY: the context is open for as long as `self.context` lives.
        unsafe { query_device_raw(self.context.context()) }
    }

    /// Whether the device answers mlx5 direct-verbs queries: it is an mlx5 device and libmlx5 is
    /// loaded. Runs [`query_device`](Self::query_device); any error counts as "no".
    pub fn is_mlx5(&self) -> bool {
        self.query_device().is_ok()
    }

    /// The DC (Dynamically Connected transport) summary of the device: whether DC is usable,
    /// the DC read/atomic depths, DCI streams and DC on-demand paging, with the RC depths from
    /// `ibv_query_device` for comparison.
    ///
    /// On a device that is not mlx5 (or without libmlx5) this succeeds, with
    /// [`DcCapabilities::is_supported`] `false`.
    ///
    /// # Errors
    ///
    /// - [`QueryDcCapabilitiesErrorKind::QueryMlx5Device`]: `mlx5dv_query_device` failed with an
    ///   error other than "not supported".
    /// - [`QueryDcCapabilitiesErrorKind::QueryDevice`]: `ibv_query_device` failed.
    pub fn query_dc_capabilities(&self) -> Result<DcCapabilities, QueryDcCapabilitiesError> {
        let mlx5 = match self.query_device() {
            Ok(attr) => Some(attr),
            Err(err) if err.is_not_supported() => None,
            Err(err) => return Err(QueryDcCapabilitiesErrorKind::from(err).into()),
        };
        let attr = self
            .context
            .query_device()
            .map_err(QueryDcCapabilitiesErrorKind::from)?;
        Ok(DcCapabilities::from_parts(
            mlx5.as_ref(),
            attr.max_qp_rd_atom(),
            attr.max_qp_init_rd_atom(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_is_debug() {
        fn debug<T: std::fmt::Debug>() {}
        debug::<Mlx5DeviceContext>();
    }
}
