//! An [`AddressHandle`] describes the route to a remote port, which every work request of a
//! datagram transport (UD, and DC with the `mlx5` feature) names. It is made from an
//! [`AddressHandleAttribute`] with `pd.create_ah(&attr)`.
//!
//! On RoCE, and on an InfiniBand port that requires a GRH, every address must be global: set the
//! `setup_grh_*` methods, its source GID index from the port's GID table
//! (`DeviceContext::query_gid_table`). The kernel refuses any other
//! (`rdma_check_ah_attr`: `EINVAL`), and on RoCE a router forwards no packet from a link-local
//! source to a routed destination (RFC 4291, section 2.5.6): both are refused before the call.
//!
//! # The first handle to a RoCE peer
//!
//! On RoCE the kernel resolves the peer's MAC address inside `ibv_create_ah`
//! (`rdma_create_user_ah` → `ib_resolve_eth_dmac` → `rdma_addr_find_l2_eth_by_grh`, in
//! `drivers/infiniband/core/addr.c`): the call waits for an ARP or neighbour discovery answer,
//! and no answer or no route is
//! [`PeerMacUnresolved`](CreateAddressHandleErrorKind::PeerMacUnresolved) (those errnos are the
//! kernel's source; no ConnectX run here has shown them yet). Make a destination's handle ahead
//! of the first request to it to keep that wait off the posting path.
//!
//! ```no_run
//! use sideway::ibverbs::address::GidType;
//! use sideway::ibverbs::device::{DeviceInfo, DeviceList};
//! use sideway_ext::ibverbs::address::AddressHandleAttribute;
//! use sideway_ext::ibverbs::address_handle::DEFAULT_HOP_LIMIT;
//! use sideway_ext::ibverbs::extension::ProtectionDomainExt;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let devices = DeviceList::new()?;
//!     let ctx = devices.iter().next().ok_or("no RDMA device")?.open()?;
//!     let pd = ctx.alloc_pd()?;
//!     // The peer's address, as it sent it: its LID (InfiniBand) and GID.
//!     let (remote_lid, remote_gid) = (0x12, "::ffff:192.0.2.7".parse::<std::net::Ipv6Addr>()?.into());
//!     let mut attr = AddressHandleAttribute::new();
//!     attr.setup_port(1).setup_dest_lid(remote_lid);
//!     // On RoCE, send from the port's RoCE v2 GID with an IPv4 address (a router forwards its
//!     // packets); on InfiniBand the LID is the address.
//!     let table = ctx.query_gid_table()?;
//!     let routable = table.iter().find(|e| {
//!         let ipv4 = std::net::Ipv6Addr::from(e.gid()).to_ipv4_mapped().is_some();
//!         e.port_num() == 1 && e.gid_type() == GidType::RoceV2 && ipv4
//!     });
//!     if let Some(local) = routable {
//!         attr.setup_grh_src_gid_index(local.gid_index() as u8)
//!             .setup_grh_dest_gid(&remote_gid)
//!             .setup_grh_hop_limit(DEFAULT_HOP_LIMIT);
//!     }
//!     let _ah = pd.create_ah(&attr)?; // cache it: one per destination
//!     Ok(())
//! }
//! ```
use std::net::Ipv6Addr;
use std::ptr::NonNull;
use std::sync::Arc;
use std::{fmt, io};

use rdma_mummy_sys::{ibv_ah, ibv_create_ah, ibv_destroy_ah, ibv_gid, ibv_port_attr, IBV_LINK_LAYER_ETHERNET};
use sideway::ibverbs::address::Gid;
use sideway::ibverbs::protection_domain::ProtectionDomain;

use super::address::AddressHandleAttribute;

/// The GRH hop limit (the IP TTL on RoCE v2) a global address takes: 255, as perftest and UCX
/// (`UCX_IB_HOP_LIMIT`) use; rdma-core's pingpong examples' 1 works within one subnet only.
pub const DEFAULT_HOP_LIMIT: u8 = 255;

/// Error returned by `pd.create_ah(&attr)`.
#[derive(Debug, thiserror::Error)]
#[error("failed to create address handle")]
#[non_exhaustive]
pub struct CreateAddressHandleError(#[from] pub CreateAddressHandleErrorKind);

/// The enum type for [`CreateAddressHandleError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateAddressHandleErrorKind {
    /// The port is RoCE, where every address handle must carry a GRH.
    #[error("port {port} is RoCE: the address handle must be global (setup_grh_dest_gid and setup_grh_src_gid_index)")]
    GlobalRoutingRequired {
        /// The port the handle was for.
        port: u8,
    },
    /// The port is InfiniBand and requires a GRH (an InfiniBand virtual function).
    #[error(
        "port {port} requires a GRH (IBV_QPF_GRH_REQUIRED): the address handle must be global \
         (setup_grh_dest_gid and setup_grh_src_gid_index)"
    )]
    GrhRequired {
        /// The port the handle was for.
        port: u8,
    },
    /// On RoCE, a link-local source GID (`fe80::/10`) for a destination that is not link-local.
    #[error(
        "GID index {src_gid_index} of port {port} is link-local (fe80::/10) and the destination {destination} is \
         not: send from a global or IPv4-mapped GID"
    )]
    LinkLocalSourceToRoutedDestination {
        /// The port.
        port: u8,
        /// The source GID index.
        src_gid_index: u8,
        /// The destination GID.
        destination: Ipv6Addr,
    },
    /// On RoCE, the kernel could not resolve the peer's MAC address (see the [module](self)
    /// docs); a later try makes the handle once the peer answers `ping` from that device.
    #[error(
        "cannot resolve the peer's MAC address from port {port}: no ARP or neighbour answer, or no route to it \
         through the source GID's network device"
    )]
    PeerMacUnresolved {
        /// The port.
        port: u8,
        /// The library's error.
        source: io::Error,
    },
    /// The port number is 0 or above the device's port count.
    #[error("port {port} does not exist on this device")]
    InvalidPort {
        /// The port the handle was for.
        port: u8,
        /// The library's error from querying the port.
        source: io::Error,
    },
    /// The library call failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// `ibv_port_attr::flags`: the port requires a GRH in every address (rdma-core `verbs.h`,
/// `IBV_QPF_GRH_REQUIRED`; the kernel's `rdma_is_grh_required`).
const IBV_QPF_GRH_REQUIRED: u8 = 1;

/// How a port's addresses are formed (as UCX reads it: `uct_ib_grh_required`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PortAddressing {
    /// Ethernet link layer: every address global.
    Roce,
    /// InfiniBand: the LID within the subnet, a GRH between subnets.
    InfiniBand,
    /// InfiniBand with `IBV_QPF_GRH_REQUIRED`: every address global.
    InfiniBandGrhRequired,
}

impl PortAddressing {
    pub(crate) fn of(attr: &ibv_port_attr) -> Self {
        match (attr.link_layer, attr.flags & IBV_QPF_GRH_REQUIRED != 0) {
            (IBV_LINK_LAYER_ETHERNET, _) => Self::Roce,
            (_, true) => Self::InfiniBandGrhRequired,
            (_, false) => Self::InfiniBand,
        }
    }

    pub(crate) fn is_roce(self) -> bool {
        self == Self::Roce
    }

    /// Refuses an address that is not global where the port requires a GRH.
    fn check_global(self, port: u8, global: bool) -> Result<(), CreateAddressHandleErrorKind> {
        match self {
            _ if global => Ok(()),
            Self::Roce => Err(CreateAddressHandleErrorKind::GlobalRoutingRequired { port }),
            Self::InfiniBandGrhRequired => Err(CreateAddressHandleErrorKind::GrhRequired { port }),
            Self::InfiniBand => Ok(()),
        }
    }
}

/// How local `port` forms its addresses (`ibv_query_port`): a port that does not exist is
/// [`InvalidPort`](CreateAddressHandleErrorKind::InvalidPort), where `ibv_create_ah` says `EINVAL`.
pub(crate) fn port_addressing(
    pd: &Arc<ProtectionDomain>, port: u8,
) -> Result<PortAddressing, CreateAddressHandleError> {
    // SAFETY: the PD (and so its context) is alive.
    let attr = unsafe { super::query_port(NonNull::new_unchecked(pd.pd().as_ref().context), port) }
        .map_err(|source| CreateAddressHandleErrorKind::InvalidPort { port, source })?;
    Ok(PortAddressing::of(&attr))
}

/// Refuses a global `attr` whose source GID (read only when needed; `None`: unreadable) is
/// link-local while its destination is not.
fn check_link_local(
    port: u8, attr: &AddressHandleAttribute, source: impl FnOnce() -> Option<Gid>,
) -> Result<(), CreateAddressHandleErrorKind> {
    let destination = Gid::from(attr.attr.grh.dgid);
    if attr.attr.is_global == 0 || is_link_local(destination) || !source().is_some_and(is_link_local) {
        return Ok(());
    }
    Err(CreateAddressHandleErrorKind::LinkLocalSourceToRoutedDestination {
        port,
        src_gid_index: attr.attr.grh.sgid_index,
        destination: destination.into(),
    })
}

/// The error of a failed `ibv_create_ah`: on RoCE, those of the kernel's MAC resolution are
/// [`PeerMacUnresolved`](CreateAddressHandleErrorKind::PeerMacUnresolved).
fn create_failure(port: u8, addressing: PortAddressing, source: io::Error) -> CreateAddressHandleErrorKind {
    match source.raw_os_error() {
        Some(libc::ETIMEDOUT | libc::ENETUNREACH | libc::EHOSTUNREACH) if addressing.is_roce() => {
            CreateAddressHandleErrorKind::PeerMacUnresolved { port, source }
        },
        _ => CreateAddressHandleErrorKind::Ibverbs(source),
    }
}

fn is_link_local(gid: Gid) -> bool {
    Ipv6Addr::from(gid).is_unicast_link_local()
}

/// The GID at `index` of local `port`'s table; `None` where it cannot be read (`ibv_create_ah`
/// then says why).
///
/// # Safety
///
/// The PD's context must be open (it is while the PD is alive).
unsafe fn query_gid(pd: &Arc<ProtectionDomain>, port: u8, index: u8) -> Option<Gid> {
    let mut gid = std::mem::MaybeUninit::<ibv_gid>::zeroed();
    // SAFETY: the caller's open context; gid is writable.
    let ret = rdma_mummy_sys::ibv_query_gid(pd.pd().as_ref().context, port, index.into(), gid.as_mut_ptr());
    // SAFETY: the call filled it (and it was zeroed before).
    (ret == 0).then(|| Gid::from(gid.assume_init()))
}

/// An address handle (`ibv_ah`), destroyed when dropped. Cache one per destination: creating a
/// handle per work request is slow.
pub struct AddressHandle {
    ah: NonNull<ibv_ah>,
    attr: AddressHandleAttribute,
    // Destroyed before the protection domain it was created on.
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: an ibv_ah is immutable after creation and may be used from any thread.
unsafe impl Send for AddressHandle {}
// SAFETY: as above.
unsafe impl Sync for AddressHandle {}

impl fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AddressHandle")
            .field("ah", &self.ah)
            .finish_non_exhaustive()
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from ibv_create_ah and is destroyed once.
        let ret = unsafe { ibv_destroy_ah(self.ah.as_ptr()) };
        super::check_destroy("ibv_destroy_ah", ret);
    }
}

impl AddressHandle {
    pub(crate) fn new(
        pd: &Arc<ProtectionDomain>, attr: &AddressHandleAttribute,
    ) -> Result<Self, CreateAddressHandleError> {
        let port = attr.attr.port_num;
        let addressing = port_addressing(pd, port)?;
        addressing.check_global(port, attr.attr.is_global != 0)?;
        if addressing.is_roce() {
            // SAFETY: the PD (and so its context) is alive.
            check_link_local(port, attr, || unsafe { query_gid(pd, port, attr.attr.grh.sgid_index) })?;
        }
        let mut raw = attr.attr;
        // SAFETY: the PD is alive; raw is a valid ibv_ah_attr the call only reads.
        let ah = unsafe { ibv_create_ah(pd.pd().as_ptr(), &mut raw) };
        let ah = NonNull::new(ah).ok_or_else(|| create_failure(port, addressing, io::Error::last_os_error()))?;
        Ok(Self {
            ah,
            attr: AddressHandleAttribute { attr: attr.attr },
            _pd: Arc::clone(pd),
        })
    }

    /// # Safety
    ///
    /// Return the handle of the address handle. We mark this method unsafe because the lifetime
    /// of `ibv_ah` is not associated with the return value.
    pub unsafe fn ah(&self) -> NonNull<ibv_ah> {
        self.ah
    }

    /// The attributes the handle was created with.
    pub fn attribute(&self) -> &AddressHandleAttribute {
        &self.attr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(link_layer: u8, flags: u8) -> ibv_port_attr {
        // SAFETY: ibv_port_attr is plain integers: all zero is valid.
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        (attr.link_layer, attr.flags) = (link_layer, flags);
        attr
    }

    #[test]
    fn an_infiniband_port_that_requires_a_grh_takes_only_global_addresses() {
        let infiniband = rdma_mummy_sys::IBV_LINK_LAYER_INFINIBAND;
        let grh_required = PortAddressing::of(&port(infiniband, IBV_QPF_GRH_REQUIRED));
        assert_eq!(grh_required, PortAddressing::InfiniBandGrhRequired);
        assert!(!grh_required.is_roce());
        assert!(matches!(
            grh_required.check_global(1, false),
            Err(CreateAddressHandleErrorKind::GrhRequired { port: 1 })
        ));
        assert!(grh_required.check_global(1, true).is_ok());
        let plain = PortAddressing::of(&port(infiniband, 0));
        assert_eq!(plain, PortAddressing::InfiniBand);
        assert!(plain.check_global(1, false).is_ok());
        // RoCE, whatever its flags.
        let roce = PortAddressing::of(&port(IBV_LINK_LAYER_ETHERNET, IBV_QPF_GRH_REQUIRED));
        assert!(roce.is_roce());
        assert!(matches!(
            roce.check_global(2, false),
            Err(CreateAddressHandleErrorKind::GlobalRoutingRequired { port: 2 })
        ));
    }

    #[test]
    fn an_unanswered_or_unrouted_roce_peer_is_named_with_its_errno_as_source() {
        use std::error::Error as _;

        for errno in [libc::ETIMEDOUT, libc::ENETUNREACH, libc::EHOSTUNREACH] {
            let kind = create_failure(1, PortAddressing::Roce, io::Error::from_raw_os_error(errno));
            assert!(
                matches!(&kind, CreateAddressHandleErrorKind::PeerMacUnresolved { port: 1, source } if source.raw_os_error() == Some(errno)),
                "{kind:?}"
            );
            assert!(kind.to_string().contains("MAC address"), "{kind}");
            let source = kind.source().and_then(|source| source.downcast_ref::<io::Error>());
            assert_eq!(source.and_then(io::Error::raw_os_error), Some(errno));
        }
        // Other errors, and InfiniBand (no MAC to resolve), stay the library's.
        let other = create_failure(1, PortAddressing::Roce, io::Error::from_raw_os_error(libc::EINVAL));
        assert!(matches!(other, CreateAddressHandleErrorKind::Ibverbs(_)), "{other:?}");
        let infiniband = create_failure(
            1,
            PortAddressing::InfiniBand,
            io::Error::from_raw_os_error(libc::ETIMEDOUT),
        );
        assert!(
            matches!(infiniband, CreateAddressHandleErrorKind::Ibverbs(_)),
            "{infiniband:?}"
        );
    }

    fn gid(text: &str) -> Gid {
        Gid::from(text.parse::<Ipv6Addr>().unwrap())
    }

    fn to(destination: &str) -> AddressHandleAttribute {
        let mut attr = AddressHandleAttribute::new();
        attr.setup_grh_dest_gid(&gid(destination)).setup_grh_src_gid_index(1);
        attr
    }

    #[test]
    fn a_link_local_source_reaches_only_link_local_destinations() {
        let link_local = || Some(gid("fe80::1"));
        for routed in ["::ffff:192.0.2.7", "2001:db8::7", "fec0::7"] {
            let err = check_link_local(1, &to(routed), link_local).unwrap_err();
            assert!(
                matches!(err, CreateAddressHandleErrorKind::LinkLocalSourceToRoutedDestination { port: 1, src_gid_index: 1, destination }
                    if destination == routed.parse::<Ipv6Addr>().unwrap()),
                "{err:?}"
            );
        }
        let err = check_link_local(1, &to("::ffff:192.0.2.7"), link_local).unwrap_err();
        assert_eq!(
            err.to_string(),
            "GID index 1 of port 1 is link-local (fe80::/10) and the destination ::ffff:192.0.2.7 is not: send \
             from a global or IPv4-mapped GID"
        );
        // Link-local to link-local: the source is not even read.
        let unread = || panic!("no need to read the source GID");
        assert!(check_link_local(1, &to("fe80::2"), unread).is_ok());
        assert!(
            check_link_local(1, &AddressHandleAttribute::new(), unread).is_ok(),
            "not global"
        );
        // A routable or unreadable source.
        for source in [Some(gid("::ffff:192.0.2.1")), Some(gid("2001:db8::1")), None] {
            assert!(check_link_local(1, &to("2001:db8::7"), || source).is_ok(), "{source:?}");
        }
    }
}
