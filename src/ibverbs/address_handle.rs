//! An [`AddressHandle`] describes the route to a remote port: the datagram transports (UD, and
//! DC with the `mlx5` feature) name one in every work request. The same
//! [`AddressHandleAttribute`] is the address vector of a connected queue pair's RTR transition.
//!
//! On RoCE (Ethernet link layer) every address must be global (carry a GRH): set it with the
//! `setup_grh_*` methods. A non-global handle on a RoCE port is refused with
//! [`CreateAddressHandleErrorKind::GlobalRoutingRequired`].
//!
//! A UD server answers a sender through the address in the sender's datagram:
//! [`AddressHandleAttribute::from_work_completion`] (`ibv_init_ah_from_wc`) reads it from the
//! receive completion and the [`GRH_LEN`] bytes at the start of the receive buffer, and
//! [`create_ah_from_wc`](super::extension::ProtectionDomainExt::create_ah_from_wc) makes the
//! handle from them, as `ibv_create_ah_from_wc` does. Cache the handle per sender.
//!
//! # Reference
//!
//! - RDMAmojo: [`ibv_create_ah`](https://www.rdmamojo.com/2012/09/22/ibv_create_ah/),
//!   [`ibv_init_ah_from_wc`](https://www.rdmamojo.com/2013/01/05/ibv_init_ah_from_wc/),
//!   [`ibv_create_ah_from_wc`](https://www.rdmamojo.com/2012/11/17/ibv_create_ah_from_wc/)
//! - rdma-core manpages: [`ibv_create_ah`](https://man7.org/linux/man-pages/man3/ibv_create_ah.3.html),
//!   [`ibv_init_ah_from_wc`, `ibv_create_ah_from_wc`](https://man7.org/linux/man-pages/man3/ibv_create_ah_from_wc.3.html)
use super::zeroed::Zeroed;
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_ah, ibv_ah_attr, ibv_create_ah, ibv_destroy_ah, ibv_grh, ibv_init_ah_from_wc, ibv_wc};
use sideway::ibverbs::address::Gid;
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain;

use super::work_completion::WorkCompletion;

/// The bytes of the GRH (global route header) at the start of every UD receive buffer, whether
/// the datagram carried one or not; on RoCE v2 over IPv4 its last 20 bytes hold the IPv4 header.
pub const GRH_LEN: usize = 40;

/// `IBV_LINK_LAYER_ETHERNET`: a RoCE port.
pub(crate) const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// The GRH hop limit of the global addresses this crate builds unless set (RC and DC address
/// vectors, a DC target's, DC endpoints' address handles): 255, as perftest (`0xFF`) and UCX
/// (`UCX_IB_HOP_LIMIT`, default 255) use. The hop limit is the IP TTL on RoCE v2 and bounds the
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

/// Error returned by
/// [`ProtectionDomainExt::create_ah_from_wc`](super::extension::ProtectionDomainExt::create_ah_from_wc).
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
    /// [`GlobalRoutingRequired`](CreateAddressHandleErrorKind::GlobalRoutingRequired)).
    #[error(transparent)]
    AddressHandle(#[from] CreateAddressHandleError),
}

/// The route to a remote port: destination LID, service level and local port, and for global
/// routing (required on RoCE) the GRH: destination GID, source GID index, hop limit, traffic
/// class and flow label.
#[derive(Clone, Copy)]
pub struct AddressHandleAttribute {
    pub(crate) attr: Zeroed<ibv_ah_attr>,
}

impl Default for AddressHandleAttribute {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for AddressHandleAttribute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("AddressHandleAttribute");
        s.field("dest_lid", &self.attr.dlid)
            .field("service_level", &self.attr.sl)
            .field("port", &self.attr.port_num)
            .field("is_global", &self.is_global());
        if self.is_global() {
            s.field("dest_gid", &self.dest_gid().to_string())
                .field("src_gid_index", &self.attr.grh.sgid_index)
                .field("hop_limit", &self.attr.grh.hop_limit)
                .field("traffic_class", &self.attr.grh.traffic_class)
                .field("flow_label", &self.attr.grh.flow_label);
        }
        s.finish()
    }
}

impl AddressHandleAttribute {
    /// An all-zero attribute on port 1, not global.
    pub fn new() -> Self {
        let mut attr = Zeroed::<ibv_ah_attr>::new();
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

    /// The GRH flow label (20 bits); makes the address global.
    pub fn setup_grh_flow_label(&mut self, flow_label: u32) -> &mut Self {
        self.attr.grh.flow_label = flow_label;
        self.attr.is_global = 1;
        self
    }

    /// The address that answers the sender of a received datagram through local `port`, with
    /// `ibv_init_ah_from_wc`: from the receive completion `wc` (its source LID, service level and
    /// whether it carried a GRH) and `grh`, the first [`GRH_LEN`] bytes of its receive buffer (the
    /// sender's GID, and on RoCE the IP header). The source GID index is the local GID the
    /// datagram was sent to, the hop limit 255.
    ///
    /// # Errors
    ///
    /// - [`InvalidPort`](InitAddressHandleAttributeErrorKind::InvalidPort): no such port
    ///   (checked with `ibv_query_port` first);
    /// - [`Ibverbs`](InitAddressHandleAttributeErrorKind::Ibverbs): the library refused.
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
        // The header has no padding: a byte copy is the struct.
        let mut raw_grh = Zeroed::<ibv_grh>::new();
        // SAFETY: ibv_grh is GRH_LEN bytes of integers (checked below); both are live.
        unsafe { std::ptr::copy_nonoverlapping(grh.as_ptr(), raw_grh.as_mut_ptr().cast::<u8>(), GRH_LEN) };
        let mut attr = Self::new();
        // SAFETY: the context is open; the three structs are valid and writable for the call.
        let ret = unsafe {
            ibv_init_ah_from_wc(
                context.as_ptr(),
                port,
                raw_wc.as_mut_ptr(),
                raw_grh.as_mut_ptr(),
                attr.attr.as_mut_ptr(),
            )
        };
        if ret != 0 {
            return Err(InitAddressHandleAttributeErrorKind::Ibverbs(init_error(ret)).into());
        }
        Ok(attr)
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

/// The `link_layer` of a local port of the PD's device, from `ibv_query_port`: compare it with
/// [`IBV_LINK_LAYER_ETHERNET`] (sideway's `LinkLayer::from` panics on values it does not know).
/// Port 0, or one above the device's port count, is
/// [`InvalidPort`](CreateAddressHandleErrorKind::InvalidPort): checked before `ibv_create_ah`,
/// whose own error for a bad port is a bare `EINVAL`.
pub(crate) fn query_port_link_layer(pd: &Arc<ProtectionDomain>, port: u8) -> Result<u8, CreateAddressHandleError> {
    // SAFETY: the PD (and so its context) is alive.
    let attr = unsafe { super::query_port(NonNull::new_unchecked(pd.pd().as_ref().context), port) }
        .map_err(|source| CreateAddressHandleErrorKind::InvalidPort { port, source })?;
    Ok(attr.link_layer)
}

/// An address handle (`ibv_ah`), destroyed when dropped. Cache one per destination: creating a
/// handle per work request is slow.
#[derive(Debug)]
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
        let link_layer = query_port_link_layer(pd, port)?;
        if !attr.is_global() && link_layer == IBV_LINK_LAYER_ETHERNET {
            return Err(CreateAddressHandleErrorKind::GlobalRoutingRequired { port }.into());
        }
        let mut raw = attr.attr;
        // SAFETY: the PD is alive; raw is a valid ibv_ah_attr the call only reads.
        let ah = unsafe { ibv_create_ah(pd.pd().as_ptr(), raw.as_mut_ptr()) };
        let ah = NonNull::new(ah).ok_or_else(|| CreateAddressHandleErrorKind::Ibverbs(io::Error::last_os_error()))?;
        Ok(Self {
            ah,
            attr: *attr,
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

/// The GID as an [`Ipv6Addr`] for serde: text in human-readable formats, 16 octets otherwise
/// (`RcEndpoint`'s and `DcEndpoint`'s).
#[cfg(feature = "serde")]
pub(crate) mod gid_as_ipv6 {
    use std::net::Ipv6Addr;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use sideway::ibverbs::address::Gid;

    pub(crate) fn serialize<S: Serializer>(gid: &Gid, serializer: S) -> Result<S::Ok, S::Error> {
        Ipv6Addr::from(*gid).serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Gid, D::Error> {
        Ipv6Addr::deserialize(deserializer).map(Gid::from)
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
}
