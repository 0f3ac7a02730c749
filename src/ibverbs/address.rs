//! [`AddressHandleAttribute`]: the route to a remote port, for an [`address_handle`](super::address_handle)
//! and for a connected queue pair's address vector.
//!
//! sideway's own keeps its `ibv_ah_attr` private: this one has the same crate-private field, which
//! the address handle reads in both crates, and what sideway's lacks (every field readable,
//! traffic class and flow label, `Copy`, `Debug`); [`new`](AddressHandleAttribute::new) starts on
//! port 1, sideway's on port 0.
use rdma_mummy_sys::ibv_ah_attr;
use sideway::ibverbs::address::Gid;

/// The route to a remote port, and for global routing (required on RoCE) its GRH.
#[derive(Clone, Copy)]
pub struct AddressHandleAttribute {
    pub(crate) attr: ibv_ah_attr,
}

impl Default for AddressHandleAttribute {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for AddressHandleAttribute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("AddressHandleAttribute");
        s.field("dest_lid", &self.dest_lid())
            .field("service_level", &self.service_level())
            .field("port", &self.port())
            .field("is_global", &self.is_global());
        if self.is_global() {
            s.field("dest_gid", &self.dest_gid().to_string())
                .field("src_gid_index", &self.src_gid_index())
                .field("hop_limit", &self.hop_limit())
                .field("traffic_class", &self.traffic_class())
                .field("flow_label", &self.flow_label());
        }
        s.finish()
    }
}

impl AddressHandleAttribute {
    /// An all-zero attribute on port 1, not global.
    pub fn new() -> Self {
        // SAFETY: ibv_ah_attr is plain integers: all zero is valid.
        let mut attr: ibv_ah_attr = unsafe { std::mem::zeroed() };
        attr.port_num = 1;
        Self { attr }
    }

    /// The destination LID (InfiniBand; ignored on RoCE).
    pub fn setup_dest_lid(&mut self, dest_lid: u16) -> &mut Self {
        self.attr.dlid = dest_lid;
        self
    }

    /// The service level (4 bits).
    pub fn setup_service_level(&mut self, sl: u8) -> &mut Self {
        self.attr.sl = sl;
        self
    }

    /// The local port the packets leave from (from 1; default 1).
    pub fn setup_port(&mut self, port_num: u8) -> &mut Self {
        self.attr.port_num = port_num;
        self
    }

    /// The destination GID of the GRH; makes the address global.
    pub fn setup_grh_dest_gid(&mut self, dest_gid: &Gid) -> &mut Self {
        self.attr.grh.dgid = (*dest_gid).into();
        self.attr.is_global = 1;
        self
    }

    /// The index of the local GID the packets are sent from (on RoCE, this picks v1 or v2 and
    /// the source IP); makes the address global.
    pub fn setup_grh_src_gid_index(&mut self, src_gid_index: u8) -> &mut Self {
        self.attr.grh.sgid_index = src_gid_index;
        self.attr.is_global = 1;
        self
    }

    /// The GRH hop limit (IP TTL on RoCE v2); makes the address global.
    pub fn setup_grh_hop_limit(&mut self, hop_limit: u8) -> &mut Self {
        self.attr.grh.hop_limit = hop_limit;
        self.attr.is_global = 1;
        self
    }

    /// The GRH traffic class (DSCP/ECN on RoCE v2); makes the address global.
    pub fn setup_grh_traffic_class(&mut self, traffic_class: u8) -> &mut Self {
        self.attr.grh.traffic_class = traffic_class;
        self.attr.is_global = 1;
        self
    }

    /// The GRH flow label: its low 20 bits, the field's width (the rest is dropped); makes the
    /// address global.
    pub fn setup_grh_flow_label(&mut self, flow_label: u32) -> &mut Self {
        self.attr.grh.flow_label = flow_label & 0xf_ffff;
        self.attr.is_global = 1;
        self
    }

    /// The destination LID.
    pub fn dest_lid(&self) -> u16 {
        self.attr.dlid
    }

    /// The service level.
    pub fn service_level(&self) -> u8 {
        self.attr.sl
    }

    /// The local port.
    pub fn port(&self) -> u8 {
        self.attr.port_num
    }

    /// Whether the address carries a GRH.
    pub fn is_global(&self) -> bool {
        self.attr.is_global != 0
    }

    /// The GRH destination GID.
    pub fn dest_gid(&self) -> Gid {
        self.attr.grh.dgid.into()
    }

    /// The GRH source GID index.
    pub fn src_gid_index(&self) -> u8 {
        self.attr.grh.sgid_index
    }

    /// The GRH hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.attr.grh.hop_limit
    }

    /// The GRH traffic class.
    pub fn traffic_class(&self) -> u8 {
        self.attr.grh.traffic_class
    }

    /// The GRH flow label.
    pub fn flow_label(&self) -> u32 {
        self.attr.grh.flow_label
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grh_setters_make_the_address_global() {
        let mut attr = AddressHandleAttribute::new();
        assert!(!attr.is_global());
        assert_eq!(attr.port(), 1);
        attr.setup_dest_lid(7).setup_service_level(3);
        assert!(!attr.is_global());
        let gid = Gid::from(std::net::Ipv6Addr::new(0xfe80, 0, 0, 0, 1, 2, 3, 4));
        attr.setup_grh_dest_gid(&gid)
            .setup_grh_src_gid_index(1)
            .setup_grh_hop_limit(64);
        attr.setup_grh_traffic_class(0x10).setup_grh_flow_label(0xabcde);
        assert!(attr.is_global());
        assert_eq!(attr.dest_gid(), gid);
        assert_eq!(
            (
                attr.dest_lid(),
                attr.service_level(),
                attr.src_gid_index(),
                attr.hop_limit()
            ),
            (7, 3, 1, 64)
        );
        assert_eq!((attr.traffic_class(), attr.flow_label()), (0x10, 0xabcde));
    }

    #[test]
    fn a_flow_label_keeps_its_low_20_bits() {
        let mut attr = AddressHandleAttribute::new();
        attr.setup_grh_flow_label(0xfff0_0001);
        assert_eq!(attr.flow_label(), 1);
        attr.setup_grh_flow_label(u32::MAX);
        assert_eq!(attr.flow_label(), 0xf_ffff);
    }
}
