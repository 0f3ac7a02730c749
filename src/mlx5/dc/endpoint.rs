//! A [`DcEndpoint`] is what a DC initiator needs to reach a DC target on another host: the
//! target port's LID and GID, the DCT number and DC key, and whether that port is RoCE. Peers
//! exchange it out of band (over TCP, or a key-value store; it serializes
//! with serde), then each initiator turns it into an [`AddressHandle`] for its local port with
//! [`DcEndpoint::create_ah`], once per destination, and names that handle, the DCT number and
//! the DC key in every work request (`mlx5dv_wr_set_dc_addr`).
//!
//! The endpoint carries the target's path MTU ([`DcEndpoint::path_mtu`]), for the fleet rule:
//! every DC initiator and target brought up with one path MTU, the smallest of their ports'. An
//! initiator sends at its own MTU and a target answers READs at its own: where they differ, the
//! larger packets are dropped.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use sideway::ibverbs::protection_domain::ProtectionDomain;
//! use sideway_ext::ibverbs::address_handle::AddressHandle;
//! use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
//! use sideway_ext::mlx5::dc::initiator::DcInitiator;
//!
//! /// The address handle that reaches the peer's DC target from `dci`, brought up on `port`.
//! fn reach(
//!     pd: &Arc<ProtectionDomain>, dci: &DcInitiator, port: u8,
//! ) -> Result<Arc<AddressHandle>, Box<dyn std::error::Error>> {
//!     // Received from the peer (its DCT's number and key, its port's LID and GID):
//!     let gid = "::ffff:192.0.2.7".parse::<std::net::Ipv6Addr>()?.into();
//!     let remote = DcEndpoint::new(0, gid, 0x00_1234, 0xdc_0000_0001, true)?;
//!     // Once per destination, from the GID the initiator sends from:
//!     let src_gid_index = dci.source_gid().map_or(0, |entry| entry.index());
//!     let ah = remote.create_ah(pd, port, src_gid_index)?;
//!     println!("{remote:?} through {:?}", ah.attribute());
//!     Ok(ah)
//! }
//! ```
use std::net::Ipv6Addr;
use std::sync::Arc;

use sideway::ibverbs::address::Gid;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::protection_domain::ProtectionDomain;

use crate::ibverbs::address::AddressHandleAttribute;
use crate::ibverbs::address_handle::{port_addressing, AddressHandle, CreateAddressHandleError, PortAddressing};

/// The largest DCT number: queue pair numbers are 24 bits.
pub const MAX_DCT_NUMBER: u32 = 0xff_ffff;

// One public path: `ibverbs::address_handle`; the DC target takes it from here too.
pub(crate) use crate::ibverbs::address_handle::DEFAULT_HOP_LIMIT;

pub use super::service_class::DcServiceClass;

/// Error returned by [`DcEndpoint::new`] (and by deserialization, as a serde error).
#[derive(Debug, thiserror::Error)]
#[error("invalid DC endpoint")]
#[non_exhaustive]
pub struct InvalidDcEndpointError(#[from] pub InvalidDcEndpointErrorKind);

/// The enum type for [`InvalidDcEndpointError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidDcEndpointErrorKind {
    /// The DCT number does not fit in 24 bits (above [`MAX_DCT_NUMBER`]).
    #[error("DCT number {dct_number:#x} does not fit in 24 bits (at most {MAX_DCT_NUMBER:#x})")]
    DctNumberOutOfRange {
        /// The number given.
        dct_number: u32,
    },
    /// A RoCE endpoint with the zero GID, which `ibv_query_gid` reads from an empty slot.
    #[error("the GID is zero (an empty GID table slot): a RoCE endpoint is addressed by its GID")]
    ZeroGid,
}

/// Error returned by [`DcEndpoint::create_ah`].
#[derive(Debug, thiserror::Error)]
#[error("failed to create the address handle of a DC endpoint")]
#[non_exhaustive]
pub struct CreateDcAddressHandleError(#[from] pub CreateDcAddressHandleErrorKind);

/// The enum type for [`CreateDcAddressHandleError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateDcAddressHandleErrorKind {
    /// The local port and the endpoint's port are on different link layers.
    #[error(
        "local port {port} is {} but the endpoint's port is {}",
        link_layer_name(*local_is_roce),
        link_layer_name(*remote_is_roce)
    )]
    LinkLayerMismatch {
        /// The local port.
        port: u8,
        /// Whether the local port is RoCE (Ethernet link layer).
        local_is_roce: bool,
        /// Whether the endpoint says its port is RoCE.
        remote_is_roce: bool,
    },
    /// The local InfiniBand port requires a GRH (a virtual function) but the endpoint has no GID.
    #[error(
        "local port {port} requires a GRH (IBV_QPF_GRH_REQUIRED) but the endpoint has no GID: bring its DC \
         target up with a source GID (SourceGid::Index(0))"
    )]
    GidRequired {
        /// The local port.
        port: u8,
    },
    /// Querying the port or creating the handle failed.
    #[error(transparent)]
    AddressHandle(#[from] CreateAddressHandleError),
}

fn link_layer_name(is_roce: bool) -> &'static str {
    if is_roce {
        "RoCE (Ethernet)"
    } else {
        "InfiniBand"
    }
}

/// What a DC initiator needs to reach a DC target (DCT), as the module says.
///
/// It is `Serialize` and `Deserialize`: the GID as IPv6 text (16 octets
/// in binary formats), the path MTU as its bytes, the rest named like the getters; deserializing
/// validates like [`new`](Self::new). An unknown field is skipped and a missing MTU is unknown,
/// so peers of different versions read each other's endpoints.
#[derive(Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DcEndpoint {
    lid: u16,
    #[serde(with = "crate::ibverbs::gid_as_ipv6")]
    gid: Gid,
    dct_number: u32,
    dc_key: u64,
    is_roce: bool,
    #[serde(with = "mtu_as_bytes", skip_serializing_if = "Option::is_none")]
    path_mtu: Option<Mtu>,
}

impl std::fmt::Debug for DcEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcEndpoint")
            .field("lid", &self.lid)
            .field("gid", &Ipv6Addr::from(self.gid))
            .field("dct_number", &format_args!("{:#x}", self.dct_number))
            .field("dc_key", &format_args!("{:#x}", self.dc_key))
            .field("is_roce", &self.is_roce)
            .field("path_mtu", &self.path_mtu)
            .finish()
    }
}

impl DcEndpoint {
    /// An endpoint from the target's values: its port's `lid` (0 on RoCE) and `gid`, its
    /// `dct_number` and `dc_key` (`dct_access_key`), and whether its port `is_roce`.
    ///
    /// # Errors
    ///
    /// - [`DctNumberOutOfRange`](InvalidDcEndpointErrorKind::DctNumberOutOfRange): `dct_number`
    ///   is above [`MAX_DCT_NUMBER`].
    /// - [`ZeroGid`](InvalidDcEndpointErrorKind::ZeroGid): a RoCE endpoint with the zero GID.
    pub fn new(
        lid: u16, gid: Gid, dct_number: u32, dc_key: u64, is_roce: bool,
    ) -> Result<Self, InvalidDcEndpointError> {
        if dct_number > MAX_DCT_NUMBER {
            return Err(InvalidDcEndpointErrorKind::DctNumberOutOfRange { dct_number }.into());
        }
        if is_roce && gid.is_zero() {
            return Err(InvalidDcEndpointErrorKind::ZeroGid.into());
        }
        Ok(Self {
            lid,
            gid,
            dct_number,
            dc_key,
            is_roce,
            path_mtu: None,
        })
    }

    /// The target's path MTU: the largest packets its port takes, and those it answers READs with
    /// (a DC target's endpoint sets the one it was brought up
    /// with): a DC initiator must send no larger packets, and one at a smaller MTU drops the
    /// responses of a READ longer than its own. Unset (an older peer's endpoint), the MTU is
    /// unknown.
    pub fn setup_path_mtu(&mut self, path_mtu: Mtu) -> &mut Self {
        self.path_mtu = Some(path_mtu);
        self
    }

    /// The target's path MTU, if the peer said ([`setup_path_mtu`](Self::setup_path_mtu)).
    pub fn path_mtu(&self) -> Option<Mtu> {
        self.path_mtu
    }

    /// The LID of the target's port (InfiniBand; unused on RoCE).
    pub fn lid(&self) -> u16 {
        self.lid
    }

    /// The GID of the target's port: the destination of a global address.
    pub fn gid(&self) -> Gid {
        self.gid
    }

    /// The DCT number (24 bits): `remote_dctn` of `mlx5dv_wr_set_dc_addr`.
    pub fn dct_number(&self) -> u32 {
        self.dct_number
    }

    /// The DC key: `remote_dc_key` of `mlx5dv_wr_set_dc_addr`, equal to the DCT's `dct_access_key`.
    pub fn dc_key(&self) -> u64 {
        self.dc_key
    }

    /// Whether the target's port is RoCE (Ethernet link layer) rather than InfiniBand.
    pub fn is_roce(&self) -> bool {
        self.is_roce
    }

    /// The address that reaches this endpoint from local `port`: on RoCE the global one, on
    /// InfiniBand the destination LID (`src_gid_index` unused), enough within one subnet.
    pub fn address_handle_attribute(&self, port: u8, src_gid_index: u8) -> AddressHandleAttribute {
        if self.is_roce {
            return self.global_address_handle_attribute(port, src_gid_index);
        }
        let mut attr = AddressHandleAttribute::new();
        attr.setup_port(port).setup_dest_lid(self.lid);
        attr
    }

    /// The global address: a GRH to the endpoint's GID from local GID `src_gid_index`, hop limit
    /// [`DEFAULT_HOP_LIMIT`]; required on RoCE and between InfiniBand subnets.
    pub fn global_address_handle_attribute(&self, port: u8, src_gid_index: u8) -> AddressHandleAttribute {
        let mut attr = AddressHandleAttribute::new();
        attr.setup_port(port)
            .setup_dest_lid(self.lid)
            .setup_grh_dest_gid(&self.gid)
            .setup_grh_src_gid_index(src_gid_index)
            .setup_grh_hop_limit(DEFAULT_HOP_LIMIT);
        attr
    }

    /// Creates the address handle that reaches this endpoint from local `port`, after checking
    /// with `ibv_query_port` that the port is on the endpoint's link layer (global from an
    /// InfiniBand port that requires a GRH, `IBV_QPF_GRH_REQUIRED`, where the kernel refuses any
    /// other). Cache it: one per destination, alive until its requests complete.
    ///
    /// # Errors
    ///
    /// - [`LinkLayerMismatch`](CreateDcAddressHandleErrorKind::LinkLayerMismatch): the local port
    ///   is RoCE and the endpoint InfiniBand, or the reverse.
    /// - [`GidRequired`](CreateDcAddressHandleErrorKind::GidRequired): the local port requires a
    ///   GRH and the endpoint has no GID.
    /// - [`AddressHandle`](CreateDcAddressHandleErrorKind::AddressHandle): the port does not
    ///   exist, or `ibv_create_ah` failed (`EINVAL` for a GID index the port does not have).
    pub fn create_ah(
        &self, pd: &Arc<ProtectionDomain>, port: u8, src_gid_index: u8,
    ) -> Result<Arc<AddressHandle>, CreateDcAddressHandleError> {
        self.create_ah_with_class(pd, port, src_gid_index, &DcServiceClass::new())
    }

    /// As [`create_ah`](Self::create_ah), with the requests' traffic class, flow label and
    /// service level from `class` (see [`DcServiceClass`] for their meaning on RoCE v2).
    pub fn create_ah_with_class(
        &self, pd: &Arc<ProtectionDomain>, port: u8, src_gid_index: u8, class: &DcServiceClass,
    ) -> Result<Arc<AddressHandle>, CreateDcAddressHandleError> {
        let addressing = port_addressing(pd, port).map_err(CreateDcAddressHandleErrorKind::from)?;
        let mut attr = self.address_from(port, addressing, src_gid_index)?;
        class.apply_to(&mut attr);
        let ah = AddressHandle::new(pd, &attr).map_err(CreateDcAddressHandleErrorKind::from)?;
        Ok(Arc::new(ah))
    }

    /// The address [`create_ah`](Self::create_ah) makes from local `port`, addressed as `addressing`.
    fn address_from(
        &self, port: u8, addressing: PortAddressing, src_gid_index: u8,
    ) -> Result<AddressHandleAttribute, CreateDcAddressHandleErrorKind> {
        let local_is_roce = addressing.is_roce();
        if local_is_roce != self.is_roce {
            return Err(CreateDcAddressHandleErrorKind::LinkLayerMismatch {
                port,
                local_is_roce,
                remote_is_roce: self.is_roce,
            });
        }
        match addressing {
            PortAddressing::InfiniBandGrhRequired if self.gid.is_zero() => {
                Err(CreateDcAddressHandleErrorKind::GidRequired { port })
            },
            PortAddressing::InfiniBandGrhRequired => Ok(self.global_address_handle_attribute(port, src_gid_index)),
            _ => Ok(self.address_handle_attribute(port, src_gid_index)),
        }
    }
}

impl<'de> serde::Deserialize<'de> for DcEndpoint {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// The serialized fields, not yet validated.
        #[derive(serde::Deserialize)]
        #[serde(rename = "DcEndpoint")]
        struct Unchecked {
            lid: u16,
            #[serde(with = "crate::ibverbs::gid_as_ipv6")]
            gid: Gid,
            dct_number: u32,
            dc_key: u64,
            is_roce: bool,
            #[serde(default, with = "mtu_as_bytes")]
            path_mtu: Option<Mtu>,
        }
        let raw = Unchecked::deserialize(deserializer)?;
        let mut endpoint = DcEndpoint::new(raw.lid, raw.gid, raw.dct_number, raw.dc_key, raw.is_roce)
            .map_err(|err| serde::de::Error::custom(err.0))?;
        endpoint.path_mtu = raw.path_mtu;
        Ok(endpoint)
    }
}

/// A path MTU for serde: its bytes (256 to 4096).
mod mtu_as_bytes {
    use serde::{Deserialize, Deserializer, Serializer};
    use sideway::ibverbs::device_context::Mtu;

    const ALL: [(Mtu, u16); 5] = [
        (Mtu::Mtu256, 256),
        (Mtu::Mtu512, 512),
        (Mtu::Mtu1024, 1024),
        (Mtu::Mtu2048, 2048),
        (Mtu::Mtu4096, 4096),
    ];

    pub(super) fn serialize<S: Serializer>(mtu: &Option<Mtu>, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = ALL
            .iter()
            .find(|(each, _)| Some(*each) == *mtu)
            .map(|(_, bytes)| *bytes);
        serializer.serialize_u16(bytes.unwrap_or(0))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Mtu>, D::Error> {
        let bytes = u16::deserialize(deserializer)?;
        match ALL.iter().find(|(_, each)| *each == bytes) {
            Some((mtu, _)) => Ok(Some(*mtu)),
            None => Err(serde::de::Error::custom(format!(
                "path MTU {bytes} is not 256, 512, 1024, 2048 or 4096"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roce_gid() -> Gid {
        Gid::from(Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0xc000, 0x0207]))
    }

    fn ib_gid() -> Gid {
        Gid::from(Ipv6Addr::new(0xfe80, 0, 0, 0, 0x0002, 0xc903, 0x00a1, 0xb2c3))
    }

    #[test]
    fn new_keeps_the_values() {
        let ep = DcEndpoint::new(7, ib_gid(), 0x12_3456, 0xdead_beef_cafe, false).unwrap();
        assert_eq!(
            (ep.lid(), ep.gid(), ep.dct_number(), ep.dc_key(), ep.is_roce()),
            (7, ib_gid(), 0x12_3456, 0xdead_beef_cafe, false)
        );
        let debug = format!("{ep:?}");
        assert!(
            debug.contains("fe80::2:c903:a1:b2c3") && debug.contains("0x123456"),
            "{debug}"
        );
    }

    #[test]
    fn new_checks_the_dct_number_fits_24_bits() {
        assert!(DcEndpoint::new(0, roce_gid(), MAX_DCT_NUMBER, 0, true).is_ok());
        let err = DcEndpoint::new(0, roce_gid(), MAX_DCT_NUMBER + 1, 0, true).unwrap_err();
        assert!(matches!(
            err.0,
            InvalidDcEndpointErrorKind::DctNumberOutOfRange { dct_number: 0x100_0000 }
        ));
        assert!(DcEndpoint::new(0, roce_gid(), u32::MAX, 0, true).is_err());
    }

    #[test]
    fn a_roce_endpoint_with_the_zero_gid_is_refused() {
        let zero = Gid::from(Ipv6Addr::UNSPECIFIED);
        let err = DcEndpoint::new(0, zero, 0x42, 1, true).unwrap_err();
        assert!(matches!(err.0, InvalidDcEndpointErrorKind::ZeroGid), "{err:?}");
        assert!(err.0.to_string().contains("empty GID table slot"), "{}", err.0);
        // InfiniBand addresses by LID: its GID is only used by a global address.
        assert!(DcEndpoint::new(7, zero, 0x42, 1, false).is_ok());
    }

    #[test]
    fn roce_address_is_global_with_the_gid_and_index() {
        let ep = DcEndpoint::new(0, roce_gid(), 0x42, 1, true).unwrap();
        let attr = ep.address_handle_attribute(2, 3);
        assert!(attr.is_global());
        assert_eq!(attr.port(), 2);
        assert_eq!(attr.dest_gid(), roce_gid());
        assert_eq!(attr.src_gid_index(), 3);
        assert_eq!(attr.hop_limit(), DEFAULT_HOP_LIMIT);
        assert_eq!(
            (attr.traffic_class(), attr.flow_label(), attr.service_level()),
            (0, 0, 0)
        );
    }

    #[test]
    fn a_service_class_sets_the_grh_on_roce_and_the_service_level_everywhere() {
        let mut class = DcServiceClass::new();
        class
            .setup_traffic_class(26 << 2 | 1)
            .setup_flow_label(0xabcde)
            .setup_service_level(5);
        let roce = DcEndpoint::new(0, roce_gid(), 0x42, 1, true).unwrap();
        let mut attr = roce.address_handle_attribute(1, 3);
        class.apply_to(&mut attr);
        assert_eq!(
            (attr.traffic_class(), attr.flow_label(), attr.service_level()),
            (105, 0xabcde, 5)
        );
        assert_eq!((attr.dest_gid(), attr.src_gid_index()), (roce_gid(), 3));
        // InfiniBand within the subnet: no GRH, so the service level only.
        let ib = DcEndpoint::new(0x1234, ib_gid(), 0x42, 1, false).unwrap();
        let mut attr = ib.address_handle_attribute(1, 0);
        class.apply_to(&mut attr);
        assert!(!attr.is_global());
        assert_eq!(
            (attr.traffic_class(), attr.flow_label(), attr.service_level()),
            (0, 0, 5)
        );
    }

    #[test]
    fn infiniband_address_is_the_lid_not_global() {
        let ep = DcEndpoint::new(0x1234, ib_gid(), 0x42, 1, false).unwrap();
        let attr = ep.address_handle_attribute(1, 5);
        assert!(!attr.is_global());
        assert_eq!((attr.port(), attr.dest_lid(), attr.service_level()), (1, 0x1234, 0));
    }

    #[test]
    fn global_address_on_infiniband_keeps_the_lid() {
        let ep = DcEndpoint::new(0x1234, ib_gid(), 0x42, 1, false).unwrap();
        let attr = ep.global_address_handle_attribute(1, 0);
        assert!(attr.is_global());
        assert_eq!(
            (attr.dest_lid(), attr.dest_gid(), attr.src_gid_index()),
            (0x1234, ib_gid(), 0)
        );
        assert_eq!(attr.hop_limit(), DEFAULT_HOP_LIMIT);
    }

    #[test]
    fn from_an_infiniband_port_that_requires_a_grh_the_address_is_global() {
        let ep = DcEndpoint::new(0x1234, ib_gid(), 0x42, 1, false).unwrap();
        let global = ep.address_from(1, PortAddressing::InfiniBandGrhRequired, 0).unwrap();
        assert!(global.is_global());
        assert_eq!((global.dest_gid(), global.src_gid_index()), (ib_gid(), 0));
        let lid = ep.address_from(1, PortAddressing::InfiniBand, 0).unwrap();
        assert!(!lid.is_global());
        // A target that announced no GID cannot be reached from such a port.
        let zero = Gid::from(Ipv6Addr::UNSPECIFIED);
        let no_gid = DcEndpoint::new(0x1234, zero, 0x42, 1, false).unwrap();
        let err = no_gid
            .address_from(2, PortAddressing::InfiniBandGrhRequired, 0)
            .unwrap_err();
        assert!(
            matches!(err, CreateDcAddressHandleErrorKind::GidRequired { port: 2 }),
            "{err:?}"
        );
        let err = ep.address_from(1, PortAddressing::Roce, 0).unwrap_err();
        assert!(
            matches!(err, CreateDcAddressHandleErrorKind::LinkLayerMismatch { port: 1, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn mismatch_error_names_both_link_layers() {
        let err = CreateDcAddressHandleError::from(CreateDcAddressHandleErrorKind::LinkLayerMismatch {
            port: 1,
            local_is_roce: true,
            remote_is_roce: false,
        });
        assert_eq!(
            err.0.to_string(),
            "local port 1 is RoCE (Ethernet) but the endpoint's port is InfiniBand"
        );
    }
}

#[cfg(test)]
mod serde_tests {
    use super::*;

    #[test]
    fn json_round_trip_with_the_gid_as_ipv6_text() {
        let gid = Gid::from(Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0xc000, 0x0207]));
        let ep = DcEndpoint::new(0, gid, 0xab_cdef, u64::MAX, true).unwrap();
        let json = serde_json::to_string(&ep).unwrap();
        assert_eq!(
            json,
            r#"{"lid":0,"gid":"::ffff:192.0.2.7","dct_number":11259375,"dc_key":18446744073709551615,"is_roce":true}"#
        );
        assert_eq!(serde_json::from_str::<DcEndpoint>(&json).unwrap(), ep);

        let ib = DcEndpoint::new(
            0x1234,
            Gid::from(Ipv6Addr::new(0xfe80, 0, 0, 0, 2, 0xc903, 0xa1, 0xb2c3)),
            1,
            2,
            false,
        )
        .unwrap();
        let json = serde_json::to_string(&ib).unwrap();
        assert!(json.contains(r#""gid":"fe80::2:c903:a1:b2c3""#), "{json}");
        assert_eq!(serde_json::from_str::<DcEndpoint>(&json).unwrap(), ib);
    }

    #[test]
    fn the_path_mtu_travels_as_bytes_and_may_be_absent() {
        let gid = Gid::from(Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0xc000, 0x0207]));
        let mut ep = DcEndpoint::new(0, gid, 7, 9, true).unwrap();
        ep.setup_path_mtu(Mtu::Mtu1024);
        let json = serde_json::to_string(&ep).unwrap();
        assert!(json.ends_with(r#""is_roce":true,"path_mtu":1024}"#), "{json}");
        assert_eq!(
            serde_json::from_str::<DcEndpoint>(&json).unwrap().path_mtu(),
            Some(Mtu::Mtu1024)
        );
        // From a peer that does not say: unknown.
        let old = r#"{"lid":0,"gid":"::ffff:192.0.2.7","dct_number":7,"dc_key":9,"is_roce":true}"#;
        assert_eq!(serde_json::from_str::<DcEndpoint>(old).unwrap().path_mtu(), None);
        let bad = r#"{"lid":0,"gid":"::ffff:192.0.2.7","dct_number":7,"dc_key":9,"is_roce":true,"path_mtu":1500}"#;
        let err = serde_json::from_str::<DcEndpoint>(bad).unwrap_err();
        assert!(err.to_string().contains("path MTU 1500"), "{err}");
    }

    #[test]
    fn an_endpoint_from_a_later_version_with_fields_this_one_does_not_know_parses() {
        // A later version's endpoint: a field this one has never heard of, of any type, before
        // and after the known ones; what this version knows is kept, the rest is skipped.
        let later = r#"{"version":3,"lid":5,"gid":"::ffff:192.0.2.7","dct_number":7,"dc_key":9,
            "is_roce":true,"path_mtu":2048,"traffic_class":{"dscp":26},"extra":[1,"two",null]}"#;
        let endpoint = serde_json::from_str::<DcEndpoint>(later).expect("unknown fields are skipped");
        let mut expected = DcEndpoint::new(
            5,
            Gid::from(Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0xc000, 0x0207])),
            7,
            9,
            true,
        )
        .unwrap();
        expected.setup_path_mtu(Mtu::Mtu2048);
        assert_eq!(endpoint, expected);
        // What this version writes back has only its own fields.
        let json = serde_json::to_string(&endpoint).unwrap();
        assert!(!json.contains("extra") && !json.contains("version"), "{json}");
        // An unknown field does not excuse a known one's value: still validated.
        let bad = r#"{"extra":1,"lid":0,"gid":"::1","dct_number":16777216,"dc_key":0,"is_roce":true}"#;
        assert!(serde_json::from_str::<DcEndpoint>(bad).is_err());
    }

    #[test]
    fn deserializing_rejects_a_dct_number_above_24_bits() {
        let json = r#"{"lid":0,"gid":"::1","dct_number":16777216,"dc_key":0,"is_roce":true}"#;
        let err = serde_json::from_str::<DcEndpoint>(json).unwrap_err();
        assert!(err.to_string().contains("does not fit in 24 bits"), "{err}");
    }

    #[test]
    fn deserializing_rejects_bad_gids_and_fields() {
        for json in [
            r#"{"lid":0,"gid":"not-a-gid","dct_number":1,"dc_key":0,"is_roce":true}"#,
            r#"{"lid":0,"gid":"192.0.2.7","dct_number":1,"dc_key":0,"is_roce":true}"#,
            r#"{"lid":0,"gid":"::1","dct_number":1,"dc_key":0}"#,
            r#"{"lid":70000,"gid":"::1","dct_number":1,"dc_key":0,"is_roce":true}"#,
        ] {
            assert!(serde_json::from_str::<DcEndpoint>(json).is_err(), "accepted {json}");
        }
    }
}
