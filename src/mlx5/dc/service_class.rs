//! The class of service of DC packets ([`DcServiceClass`], re-exported by
//! [`endpoint`](super::endpoint)).
use crate::ibverbs::address::AddressHandleAttribute;

/// The class of service of DC packets: the GRH's traffic class and flow label, and the service
/// level, which a lossless fabric maps to a priority. Applied to the requests' address handles
/// ([`DcEndpoint::create_ah_with_class`](super::endpoint::DcEndpoint::create_ah_with_class)) and
/// to a DC target's replies (ACKs, read and atomic responses) with its bring-up's
/// `setup_service_class`.
/// Set the same class on both sides: otherwise responses leave in class 0 while requests do not.
///
/// On RoCE v2 the traffic class is the IP header's DS field (`dscp << 2 | ecn`: DSCP 26 is 104,
/// as perftest's `--tclass=104`); on RoCE mlx5 maps the service level to the VLAN priority.
/// Traffic class and flow label exist only in a global address (a GRH).
///
/// # A DC target's replies
///
/// Through `ibv_modify_qp` (not DEVX), kernel mlx5 `mlx5_ib_modify_dct` (qp.c) programs
/// the DCT's `tclass` and `flow_label` from the RTR address vector's GRH and, on RoCE only (Linux
/// 5.15 on), `eth_prio` from the service level; never `dctc.dscp`, which UCX's DEVX target
/// (`uct_dc_mlx5_iface_devx_create_dct`) sets on RoCE v2. So whether the replies carry the DSCP
/// on RoCE v2 is what the references leave open, and no ConnectX has confirmed it: they may
/// leave with DSCP 0, outside the lossless class (check the switch's per-class counters).
///
/// # Example
///
/// ```
/// use sideway_ext::mlx5::dc::endpoint::DcServiceClass;
///
/// let mut class = DcServiceClass::new();
/// class.setup_traffic_class(26 << 2).setup_service_level(3);
/// assert_eq!((class.traffic_class(), class.flow_label(), class.service_level()), (104, 0, 3));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DcServiceClass {
    traffic_class: u8,
    flow_label: u32,
    service_level: u8,
}

impl DcServiceClass {
    /// Traffic class 0, flow label 0, service level 0 (what an address gets without a class).
    pub fn new() -> Self {
        Self::default()
    }

    /// The GRH traffic class (on RoCE v2: `dscp << 2 | ecn`).
    pub fn setup_traffic_class(&mut self, traffic_class: u8) -> &mut Self {
        self.traffic_class = traffic_class;
        self
    }

    /// The GRH flow label (20 bits; on RoCE v2 it may feed the UDP source port's hash).
    pub fn setup_flow_label(&mut self, flow_label: u32) -> &mut Self {
        self.flow_label = flow_label;
        self
    }

    /// The service level (4 bits).
    pub fn setup_service_level(&mut self, service_level: u8) -> &mut Self {
        self.service_level = service_level;
        self
    }

    /// The traffic class.
    pub fn traffic_class(&self) -> u8 {
        self.traffic_class
    }

    /// The flow label.
    pub fn flow_label(&self) -> u32 {
        self.flow_label
    }

    /// The service level.
    pub fn service_level(&self) -> u8 {
        self.service_level
    }

    /// Sets this class on `attr`: its service level, and on a global address its traffic class
    /// and flow label.
    pub fn apply_to(&self, attr: &mut AddressHandleAttribute) {
        attr.setup_service_level(self.service_level);
        if attr.is_global() {
            attr.setup_grh_traffic_class(self.traffic_class)
                .setup_grh_flow_label(self.flow_label);
        }
    }
}
