//! A DC target brought to RTR in one call ([`DcTarget::bring_up`], after checking the port and
//! resolving the source GID, [`DcTargetBringUp`]) and what a peer needs to reach it
//! ([`DcTarget::endpoint`]), on the DC target's public API.
//!
#![doc = include_str!("target_wrong_key.md")]
use std::io;
use std::ptr::NonNull;

use rdma_mummy_sys::{ibv_context, IBV_LINK_LAYER_ETHERNET};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, ModifyQueuePairErrorKind, QueuePairState};
use sideway::ibverbs::AccessFlags;

use super::endpoint::{DcEndpoint, DcServiceClass, InvalidDcEndpointError, DEFAULT_HOP_LIMIT};
use super::port::{active_mtu, check_port_ready, PortNotReady};
use super::target::{DcTarget, DEFAULT_ACCESS};
use crate::ibverbs::address::AddressHandleAttribute;
use crate::ibverbs::address_handle::PortAddressing;
use crate::ibverbs::queue_pair::QueuePairAttribute;
use crate::ibverbs::source_gid::{query_gid_entry, read_gid_table, SourceGid, SourceGidEntry, SourceGidError};

/// How [`DcTarget::bring_up`] brings a DC target to RTR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcTargetBringUp {
    port: u8,
    pkey_index: u16,
    path_mtu: Option<Mtu>,
    min_rnr_timer: u8,
    source_gid: SourceGid,
    hop_limit: u8,
    class: DcServiceClass,
}

impl DcTargetBringUp {
    /// The defaults, on local port `port` (from 1).
    pub fn new(port: u8) -> Self {
        Self {
            port,
            pkey_index: 0,
            path_mtu: None,
            min_rnr_timer: 12,
            source_gid: SourceGid::Automatic,
            hop_limit: DEFAULT_HOP_LIMIT,
            class: DcServiceClass::new(),
        }
    }

    /// The P_Key index (default 0).
    pub fn setup_pkey_index(&mut self, pkey_index: u16) -> &mut Self {
        self.pkey_index = pkey_index;
        self
    }

    /// The path MTU (default: the port's active MTU), which the target's endpoint announces:
    /// initiators must send no larger packets, and it answers READs in packets as large
    /// (`mlx5_ib_modify_dct`, `dctc.mtu`).
    pub fn setup_path_mtu(&mut self, path_mtu: Mtu) -> &mut Self {
        self.path_mtu = Some(path_mtu);
        self
    }

    /// The minimum RNR NAK timer (default 12).
    pub fn setup_min_rnr_timer(&mut self, min_rnr_timer: u8) -> &mut Self {
        self.min_rnr_timer = min_rnr_timer;
        self
    }

    /// The local GID its address vector is global with and its endpoint announces (default
    /// [`SourceGid::Automatic`]).
    pub fn setup_source_gid(&mut self, source_gid: SourceGid) -> &mut Self {
        self.source_gid = source_gid;
        self
    }

    /// [`setup_source_gid`](Self::setup_source_gid) with [`SourceGid::Index`].
    pub fn setup_src_gid_index(&mut self, src_gid_index: u8) -> &mut Self {
        self.setup_source_gid(SourceGid::Index(src_gid_index))
    }

    /// The GRH hop limit of a global address vector (default [`DEFAULT_HOP_LIMIT`]).
    pub fn setup_hop_limit(&mut self, hop_limit: u8) -> &mut Self {
        self.hop_limit = hop_limit;
        self
    }

    /// The class of its ACKs and READ and atomic responses (default all 0): its initiators'
    /// ([`DcServiceClass`]).
    pub fn setup_service_class(&mut self, class: DcServiceClass) -> &mut Self {
        self.class = class;
        self
    }

    /// The attributes of RESET → INIT and INIT → RTR (global from the resolved `src_gid_index`).
    fn attributes(
        &self, access_flags: AccessFlags, path_mtu: Mtu, src_gid_index: Option<u8>,
    ) -> [QueuePairAttribute; 2] {
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(self.pkey_index)
            .setup_port(self.port)
            .setup_access_flags(access_flags);
        let mut av = AddressHandleAttribute::new();
        av.setup_port(self.port);
        if let Some(index) = src_gid_index {
            av.setup_grh_src_gid_index(index).setup_grh_hop_limit(self.hop_limit);
        }
        self.class.apply_to(&mut av);
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(path_mtu)
            .setup_min_rnr_timer(self.min_rnr_timer)
            .setup_address_vector(&av);
        [init, rtr]
    }
}

/// Error returned by [`DcTarget::bring_up`].
#[derive(Debug, thiserror::Error)]
#[error("failed to bring up DC target")]
#[non_exhaustive]
pub struct BringUpDcTargetError(#[from] pub BringUpDcTargetErrorKind);

/// The enum type for [`BringUpDcTargetError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BringUpDcTargetErrorKind {
    /// The port is 0 or the device has no such port.
    #[error("port {port} does not exist on this device")]
    InvalidPort {
        /// The port asked for.
        port: u8,
        /// The library's error from querying it.
        source: io::Error,
    },
    /// The port cannot carry DC traffic yet.
    #[error(transparent)]
    PortNotReady(PortNotReady),
    /// The source GID could not be resolved.
    #[error(transparent)]
    SourceGid(#[from] SourceGidError),
    /// Remote atomics asked for, other than by [`DEFAULT_ACCESS`], on a device without DC
    /// atomics (`mlx5_ib_modify_dct`: `EOPNOTSUPP`); it is left in RESET.
    #[error("the device has no DC atomics: remote atomic access refused")]
    RemoteAtomicsNotSupported,
    /// A transition failed (a refusal told apart by the DC target's table).
    #[error(transparent)]
    Modify(#[from] ModifyQueuePairError),
}

/// Error returned by [`DcTarget::endpoint`].
#[derive(Debug, thiserror::Error)]
#[error("failed to describe the DC target's endpoint")]
#[non_exhaustive]
pub struct DcTargetEndpointError(#[from] pub DcTargetEndpointErrorKind);

/// The enum type for [`DcTargetEndpointError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DcTargetEndpointErrorKind {
    /// The DC target is not at RTR (its port, path MTU and DCT number come with it).
    #[error("the DC target has no DCT number before RTR (bring_up first)")]
    NoDctNumber,
    /// The port is 0 or the device has no such port.
    #[error("port {port} does not exist on this device")]
    InvalidPort {
        /// The port asked for.
        port: u8,
        /// The library's error from querying it.
        source: io::Error,
    },
    /// The endpoint would be invalid (a RoCE port and the zero GID given).
    #[error(transparent)]
    InvalidEndpoint(#[from] InvalidDcEndpointError),
}

/// The device context of `dct`'s protection domain.
fn context(dct: &DcTarget) -> NonNull<ibv_context> {
    // SAFETY: the queue pair is alive while `dct` is, and its context while its protection domain is.
    unsafe { NonNull::new_unchecked(dct.qp().as_ref().context) }
}

impl DcTarget {
    /// What a peer needs to reach this DC target at RTR: its port's LID, the GID it answers from
    /// (zero on InfiniBand without one), its DCT number, DC key and path MTU.
    pub fn endpoint(&self) -> Result<DcEndpoint, DcTargetEndpointError> {
        let (Some(dct_number), Some(port), Some(path_mtu)) = (self.dct_number(), self.port(), self.path_mtu()) else {
            return Err(DcTargetEndpointErrorKind::NoDctNumber.into());
        };
        // SAFETY: the context is open while the target is.
        let attr = unsafe { crate::ibverbs::query_port(context(self), port) }
            .map_err(|source| DcTargetEndpointErrorKind::InvalidPort { port, source })?;
        let gid = self.source_gid().map(|entry| entry.gid()).unwrap_or_default();
        let is_roce = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
        let mut endpoint = DcEndpoint::new(attr.lid, gid, dct_number, self.dc_key(), is_roce)
            .map_err(DcTargetEndpointErrorKind::from)?;
        endpoint.setup_path_mtu(path_mtu);
        Ok(endpoint)
    }

    /// The source GID of its address vector (`None` before RTR, and on InfiniBand without one).
    pub fn source_gid(&self) -> Option<SourceGidEntry> {
        let (port, index) = (self.port()?, self.src_gid_index()?);
        // SAFETY: the context is open while the target is (both calls).
        let attr = unsafe { crate::ibverbs::query_port(context(self), port) }.ok()?;
        let table = unsafe { read_gid_table(context(self), port, attr.gid_tbl_len, query_gid_entry) }.ok()?;
        SourceGid::Index(index)
            .resolve(port, PortAddressing::of(&attr), &table)
            .ok()?
    }

    /// Brings the DC target from RESET to RTR in one call, with the access flags it was built
    /// with (the default, [`DEFAULT_ACCESS`], without remote atomics where the kernel refuses
    /// them), after checking the port and resolving the source GID.
    pub fn bring_up(&mut self, params: &DcTargetBringUp) -> Result<(), BringUpDcTargetError> {
        let invalid_port = |source| BringUpDcTargetErrorKind::InvalidPort {
            port: params.port,
            source,
        };
        // SAFETY: the context is open while the target is.
        let port = unsafe { crate::ibverbs::query_port(context(self), params.port) }.map_err(invalid_port)?;
        check_port_ready(params.port, &port).map_err(BringUpDcTargetErrorKind::PortNotReady)?;
        let (active, addressing) = (active_mtu(&port), PortAddressing::of(&port));
        let table = match params.source_gid.reads_gid_table(addressing) {
            // SAFETY: the context is open while the target is.
            true => unsafe { read_gid_table(context(self), params.port, port.gid_tbl_len, query_gid_entry) }
                .map_err(BringUpDcTargetErrorKind::from)?,
            false => Vec::new(),
        };
        let source_gid = params
            .source_gid
            .resolve(params.port, addressing, &table)
            .map_err(|kind| BringUpDcTargetErrorKind::SourceGid(kind.into()))?;
        let path_mtu = params.path_mtu.unwrap_or(active);
        let src_gid_index = source_gid.map(|entry| entry.index());
        let [init, rtr] = params.attributes(self.access_flags(), path_mtu, src_gid_index);
        match self.modify(&init) {
            // The kernel refuses remote atomics without DC atomics before it changes anything:
            // the default access, which asks for them, asks for INIT again without.
            Err(err)
                if self.access_flags().contains(AccessFlags::RemoteAtomic)
                    && matches!(&err.0, ModifyQueuePairErrorKind::Ibverbs(errno) if errno.raw_os_error() == Some(libc::EOPNOTSUPP)) =>
            {
                if self.access_flags() != DEFAULT_ACCESS {
                    return Err(BringUpDcTargetErrorKind::RemoteAtomicsNotSupported.into());
                }
                let access = DEFAULT_ACCESS.and(AccessFlags::RemoteAtomic.not());
                let [init, _] = params.attributes(access, path_mtu, src_gid_index);
                self.modify(&init).map_err(BringUpDcTargetErrorKind::from)?;
            },
            other => other.map_err(BringUpDcTargetErrorKind::from)?,
        }
        self.modify(&rtr).map_err(BringUpDcTargetErrorKind::from)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sideway::ibverbs::queue_pair::QueuePairAttributeMask;

    use super::*;
    use crate::mlx5::dc::state_table::{check, DC_TARGET_TRANSITIONS};

    /// Whether the DC target's table takes `attr` in state `from`.
    fn takes(from: QueuePairState, attr: &QueuePairAttribute) -> bool {
        check(&DC_TARGET_TRANSITIONS, from, attr.state(), attr.attr_mask).is_ok()
    }

    #[test]
    fn bring_up_attributes_pass_the_dc_table() {
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
        let [init, rtr] = DcTargetBringUp::new(1).attributes(access, Mtu::Mtu4096, None);
        assert!(takes(QueuePairState::Reset, &init));
        assert!(takes(QueuePairState::Init, &rtr));
        assert_eq!(rtr.attr.min_rnr_timer, 12);
        assert!(!rtr.attr_mask.contains(QueuePairAttributeMask::MaxDestinationReadAtomic));
        // RoCE: a global address vector from the source GID index.
        let mut roce = DcTargetBringUp::new(1);
        let [_, rtr] = roce.attributes(access, Mtu::Mtu1024, Some(3));
        assert!(rtr.attr.ah_attr.is_global != 0);
        assert_eq!(
            (rtr.attr.ah_attr.grh.sgid_index, rtr.attr.ah_attr.grh.hop_limit),
            (3, DEFAULT_HOP_LIMIT),
            "the hop limit of the initiators' address handles"
        );
        // By default class 0; with a class, the RTR address vector carries it.
        assert_eq!(
            (
                rtr.attr.ah_attr.grh.traffic_class,
                rtr.attr.ah_attr.grh.flow_label,
                rtr.attr.ah_attr.sl
            ),
            (0, 0, 0)
        );
        let mut class = DcServiceClass::new();
        class
            .setup_traffic_class(26 << 2)
            .setup_flow_label(7)
            .setup_service_level(3);
        roce.setup_service_class(class);
        let [_, rtr] = roce.attributes(access, Mtu::Mtu1024, Some(3));
        assert_eq!(
            (
                rtr.attr.ah_attr.grh.traffic_class,
                rtr.attr.ah_attr.grh.flow_label,
                rtr.attr.ah_attr.sl
            ),
            (104, 7, 3)
        );
        assert!(takes(QueuePairState::Init, &rtr));
    }
}
