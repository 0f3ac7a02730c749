//! An [`AddressHandle`] describes the route to a remote port: the datagram transports (UD, and
//! DC with the `mlx5` feature) name one in every work request. It is made from an
//! [`AddressHandleAttribute`], the same route a connected queue pair's RTR transition takes as
//! its address vector, with
//! [`ProtectionDomainExt::create_ah`](super::extension::ProtectionDomainExt::create_ah).
//!
//! On RoCE (Ethernet link layer) every address must be global (carry a GRH): set it with the
//! `setup_grh_*` methods, its source GID index from a
//! [`SourceGid`](super::source_gid::SourceGid). A non-global handle on a RoCE port is refused
//! with [`CreateAddressHandleErrorKind::GlobalRoutingRequired`].
//!
//! ```no_run
//! use sideway::ibverbs::device::{DeviceInfo, DeviceList};
//! use sideway_ext::ibverbs::address::AddressHandleAttribute;
//! use sideway_ext::ibverbs::address_handle::DEFAULT_HOP_LIMIT;
//! use sideway_ext::ibverbs::extension::{DeviceContextExt, ProtectionDomainExt};
//! use sideway_ext::ibverbs::source_gid::SourceGid;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let devices = DeviceList::new()?;
//!     let ctx = devices.iter().next().ok_or("no RDMA device")?.open()?;
//!     let pd = ctx.alloc_pd()?;
//!     // The peer's address, as it sent it: its LID (InfiniBand) and GID.
//!     let (remote_lid, remote_gid) = (0x12, "::ffff:192.0.2.7".parse::<std::net::Ipv6Addr>()?.into());
//!     let mut attr = AddressHandleAttribute::new();
//!     attr.setup_port(1).setup_dest_lid(remote_lid);
//!     // On RoCE, send from the port's RoCE v2 GID; on InfiniBand the LID is the address.
//!     if let Some(local) = ctx.source_gid(1, &SourceGid::Automatic)? {
//!         attr.setup_grh_src_gid_index(local.index())
//!             .setup_grh_dest_gid(&remote_gid)
//!             .setup_grh_hop_limit(DEFAULT_HOP_LIMIT);
//!     }
//!     let ah = pd.create_ah(&attr)?; // cache it: one per destination
//!     assert_eq!(ah.attribute().dest_gid(), remote_gid);
//!     Ok(())
//! }
//! ```
//!
//! # Reference
//!
//! - RDMAmojo: [`ibv_create_ah`](https://www.rdmamojo.com/2012/09/22/ibv_create_ah/)
//! - rdma-core manpages: [`ibv_create_ah`](https://man7.org/linux/man-pages/man3/ibv_create_ah.3.html)
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_ah, ibv_create_ah, ibv_destroy_ah, IBV_LINK_LAYER_ETHERNET};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::protection_domain::ProtectionDomain;

use super::address::AddressHandleAttribute;

/// The GRH hop limit a global address takes unless there is a reason for another (bring-up's
/// address vectors and the DC endpoints' address handles take it): 255, as perftest (`0xFF`) and
/// UCX (`UCX_IB_HOP_LIMIT`, default 255) use. The hop limit is the IP TTL on RoCE v2 and bounds the
/// routers an InfiniBand packet may cross: the maximum never drops a packet on a routed network,
/// while the 1 of rdma-core's pingpong examples only works within one subnet.
pub const DEFAULT_HOP_LIMIT: u8 = 255;

/// Error returned by [`ProtectionDomainExt::create_ah`](super::extension::ProtectionDomainExt::create_ah).
#[derive(Debug, thiserror::Error)]
#[error("failed to create address handle")]
#[non_exhaustive]
pub struct CreateAddressHandleError(#[from] pub CreateAddressHandleErrorKind);

/// The enum type for [`CreateAddressHandleError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateAddressHandleErrorKind {
    /// The port's link layer is Ethernet (RoCE), where every address handle must carry a GRH.
    #[error("port {port} is RoCE: the address handle must be global (setup_grh_dest_gid and setup_grh_src_gid_index)")]
    GlobalRoutingRequired {
        /// The port the handle was for.
        port: u8,
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

/// Whether local `port` of the PD's device is RoCE (its `link_layer` from `ibv_query_port` is
/// `IBV_LINK_LAYER_ETHERNET`). Port 0, or one above the device's port count, is
/// [`InvalidPort`](CreateAddressHandleErrorKind::InvalidPort): checked before `ibv_create_ah`,
/// whose own error for a bad port is a bare `EINVAL`.
pub(crate) fn port_is_roce(pd: &Arc<ProtectionDomain>, port: u8) -> Result<bool, CreateAddressHandleError> {
    // SAFETY: the PD (and so its context) is alive.
    let attr = unsafe { super::query_port(NonNull::new_unchecked(pd.pd().as_ref().context), port) }
        .map_err(|source| CreateAddressHandleErrorKind::InvalidPort { port, source })?;
    Ok(attr.link_layer == IBV_LINK_LAYER_ETHERNET)
}

/// An address handle (`ibv_ah`), destroyed when dropped. Cache one per destination: creating a
/// handle per work request is slow.
#[derive(Debug)]
pub struct AddressHandle {
    ah: NonNull<ibv_ah>,
    attr: AddressHandleAttribute,
    destination_path_mtu: Option<Mtu>,
    // Destroyed before the protection domain it was created on.
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: an ibv_ah is immutable after creation and may be used from any thread.
unsafe impl Send for AddressHandle {}
// SAFETY: as above.
unsafe impl Sync for AddressHandle {}

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
        let port = attr.port();
        // The port is checked before the call, global or not.
        let roce = port_is_roce(pd, port)?;
        if !attr.is_global() && roce {
            return Err(CreateAddressHandleErrorKind::GlobalRoutingRequired { port }.into());
        }
        let mut raw = attr.attr;
        // SAFETY: the PD is alive; raw is a valid ibv_ah_attr the call only reads.
        let ah = unsafe { ibv_create_ah(pd.pd().as_ptr(), raw.as_mut_ptr()) };
        let ah = NonNull::new(ah).ok_or_else(|| CreateAddressHandleErrorKind::Ibverbs(io::Error::last_os_error()))?;
        Ok(Self {
            ah,
            attr: *attr,
            destination_path_mtu: None,
            _pd: Arc::clone(pd),
        })
    }

    /// The same handle, reaching a port whose path MTU is `path_mtu` (when known).
    #[cfg(feature = "mlx5")]
    pub(crate) fn with_destination_path_mtu(mut self, path_mtu: Option<Mtu>) -> Self {
        self.destination_path_mtu = path_mtu;
        self
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

    /// The path MTU of the port the handle reaches, when its creator knew it: a DC endpoint's
    /// ([`DcEndpoint::create_ah`](crate::mlx5::dc::endpoint::DcEndpoint::create_ah) takes its
    /// [`path_mtu`](crate::mlx5::dc::endpoint::DcEndpoint::path_mtu)); `None` for a handle made
    /// from an attribute alone.
    #[inline]
    pub fn destination_path_mtu(&self) -> Option<Mtu> {
        self.destination_path_mtu
    }
}
