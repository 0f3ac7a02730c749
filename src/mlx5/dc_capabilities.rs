//! The DC (Dynamically Connected transport) summary of a device:
//! [`Mlx5DeviceContext::query_dc_capabilities`].
//!
//! [`Mlx5DeviceContext::query_dc_capabilities`]: super::device_context::Mlx5DeviceContext::query_dc_capabilities
use super::device_attributes::{DciStreamsCapabilities, Mlx5DeviceAttributes, OdpTransportCapabilities};

/// What a program needs to know before it builds DC queue pairs on a device.
///
/// Combines [`mlx5dv_query_device(3)`] (the DC values) with sideway's
/// [`DeviceAttr`](sideway::ibverbs::device_context::DeviceAttr) (the RC depths, for comparison).
/// On a device that is not mlx5 (or without libmlx5), every DC value is [`None`].
///
/// [`mlx5dv_query_device(3)`]: https://man7.org/linux/man-pages/man3/mlx5dv_query_device.3.html
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcCapabilities {
    is_mlx5: bool,
    max_dc_rd_atom: Option<u64>,
    max_dc_init_rd_atom: Option<u64>,
    dci_streams: Option<DciStreamsCapabilities>,
    dc_odp: Option<OdpTransportCapabilities>,
    rc_max_qp_rd_atom: u32,
    rc_max_qp_init_rd_atom: u32,
}

impl DcCapabilities {
    /// Combines the mlx5 parts (`None` when the device is not mlx5) with the RC depths.
    pub(crate) fn from_parts(
        mlx5: Option<&Mlx5DeviceAttributes>, rc_max_qp_rd_atom: i32, rc_max_qp_init_rd_atom: i32,
    ) -> Self {
        // rdma-core reports 0 when it could not read a DC depth: that is "unknown", not "none".
        let known = |depth: Option<u64>| depth.filter(|&d| d != 0);
        DcCapabilities {
            is_mlx5: mlx5.is_some(),
            max_dc_rd_atom: known(mlx5.and_then(Mlx5DeviceAttributes::max_dc_rd_atom)),
            max_dc_init_rd_atom: known(mlx5.and_then(Mlx5DeviceAttributes::max_dc_init_rd_atom)),
            dci_streams: mlx5
                .and_then(Mlx5DeviceAttributes::dci_streams_caps)
                .filter(|caps| caps.max_log_num_concurrent > 0),
            dc_odp: mlx5.and_then(Mlx5DeviceAttributes::dc_odp_caps),
            rc_max_qp_rd_atom: rc_max_qp_rd_atom.max(0) as u32,
            rc_max_qp_init_rd_atom: rc_max_qp_init_rd_atom.max(0) as u32,
        }
    }

    /// Whether the device answered the mlx5 direct-verbs query (an mlx5 device, libmlx5 loaded).
    pub fn is_mlx5(&self) -> bool {
        self.is_mlx5
    }

    /// Whether the device can have DC at all: [`is_mlx5`](Self::is_mlx5), the only provider with
    /// DC. `true` does not promise it: `mlx5dv_query_device` has no "DC supported" bit, and a few
    /// mlx5 devices (ConnectX-4 Lx, some virtual functions) lack DC; the definitive test is moving
    /// a DC target to RTR, where the hardware object is created.
    pub fn is_supported(&self) -> bool {
        self.is_mlx5
    }

    /// Outstanding RDMA reads and atomics per DC queue pair "as a requester" (mlx5dv_query_device(3)'s
    /// `max_dc_rd_atom`, libmlx5's `1 << log_max_ra_req_dc`); [`None`] when the device is not mlx5
    /// or the provider did not report it (rdma-core before 47) or reported 0.
    pub fn max_dc_rd_atom(&self) -> Option<u64> {
        self.max_dc_rd_atom
    }

    /// Outstanding RDMA reads and atomics per DC queue pair "as a responder" (`max_dc_init_rd_atom`,
    /// libmlx5's `1 << log_max_ra_res_dc`), yet the bound of a DCI's `max_rd_atomic` (mlx5_ib's
    /// `validate_rd_atomic`, `EINVAL` above it), so a DC initiator's depth is capped
    /// by this value. [`None`] as for [`max_dc_rd_atom`](Self::max_dc_rd_atom).
    pub fn max_dc_init_rd_atom(&self) -> Option<u64> {
        self.max_dc_init_rd_atom
    }

    /// DCI streams capabilities, when the device has DCI streams (ConnectX-6 Dx and newer);
    /// [`None`] also where `max_log_num_concurent` is 0: libmlx5's `_mlx5dv_query_device` sets
    /// the bit on every device, with zeros where there are no streams.
    pub fn dci_streams(&self) -> Option<DciStreamsCapabilities> {
        self.dci_streams
    }

    /// Operations that support on-demand paging on DC, when the device reports them.
    pub fn dc_odp(&self) -> Option<OdpTransportCapabilities> {
        self.dc_odp
    }

    /// The RC depth as responder from `ibv_query_device` (`max_qp_rd_atom`), for comparison.
    pub fn rc_max_qp_rd_atom(&self) -> u32 {
        self.rc_max_qp_rd_atom
    }

    /// The RC depth as initiator from `ibv_query_device` (`max_qp_init_rd_atom`), for comparison.
    pub fn rc_max_qp_init_rd_atom(&self) -> u32 {
        self.rc_max_qp_init_rd_atom
    }
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use rdma_mummy_sys::mlx5dv_context;

    use super::*;
    use crate::mlx5::device_attributes::Mlx5ContextMask;

    fn mlx5(comp_mask: Mlx5ContextMask, rd_atom: u64, init_rd_atom: u64) -> Mlx5DeviceAttributes {
        // SAFETY: mlx5dv_context holds only integers and a raw pointer: all-zero bytes are valid.
        let mut raw: mlx5dv_context = unsafe { MaybeUninit::zeroed().assume_init() };
        raw.comp_mask = comp_mask.bits();
        raw.max_dc_rd_atom = rd_atom;
        raw.max_dc_init_rd_atom = init_rd_atom;
        raw.dci_streams_caps.max_log_num_concurent = 4;
        raw.dc_odp_caps = 0b1;
        Mlx5DeviceAttributes::from_raw(&raw)
    }

    #[test]
    fn not_mlx5_is_unsupported_with_rc_values_only() {
        let dc = DcCapabilities::from_parts(None, 16, 16);
        assert!(!dc.is_mlx5() && !dc.is_supported());
        assert_eq!((dc.max_dc_rd_atom(), dc.max_dc_init_rd_atom()), (None, None));
        assert_eq!((dc.dci_streams(), dc.dc_odp()), (None, None));
        assert_eq!((dc.rc_max_qp_rd_atom(), dc.rc_max_qp_init_rd_atom()), (16, 16));
    }

    #[test]
    fn mlx5_with_every_part() {
        let attr = mlx5(Mlx5ContextMask::all_flags(), 64, 16);
        let dc = DcCapabilities::from_parts(Some(&attr), 16, 16);
        assert!(dc.is_mlx5() && dc.is_supported());
        assert_eq!((dc.max_dc_rd_atom(), dc.max_dc_init_rd_atom()), (Some(64), Some(16)));
        assert_eq!(dc.dci_streams().map(|s| s.max_log_num_concurrent), Some(4));
        assert_eq!(dc.dc_odp(), Some(OdpTransportCapabilities::Send));
    }

    #[test]
    fn zero_or_unreported_dc_depths_are_unknown() {
        let zero = mlx5(Mlx5ContextMask::MaxDcReadAtomic, 0, 0);
        let dc = DcCapabilities::from_parts(Some(&zero), 16, 16);
        assert!(dc.is_supported());
        assert_eq!((dc.max_dc_rd_atom(), dc.max_dc_init_rd_atom()), (None, None));

        let old = mlx5(Mlx5ContextMask::none(), 64, 16);
        let dc = DcCapabilities::from_parts(Some(&old), -1, 16);
        assert_eq!((dc.max_dc_rd_atom(), dc.max_dc_init_rd_atom()), (None, None));
        assert_eq!((dc.dci_streams(), dc.dc_odp()), (None, None));
        assert_eq!(dc.rc_max_qp_rd_atom(), 0, "a negative count from ibverbs is clamped");
    }
}
