//! The DC target (DCT): the receiving end of the DC transport, one per node for every DC initiator
//! that names its DCT number and DC key, consuming receives from its [`SharedReceiveQueue`]. Build
//! it with [`DcTargetBuilder`], bring it to RTR with [`DcTarget::bring_up`], then publish its
//! [`endpoint`](DcTarget::endpoint) (the DCT number exists only from RTR on).
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{
    ibv_qp, ibv_qp_init_attr_ex, ibv_qp_init_attr_mask, ibv_qp_type, mlx5dv_qp_init_attr, mlx5dv_qp_init_attr_mask,
    IBV_LINK_LAYER_ETHERNET,
};
use sideway::ibverbs::completion::{CompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, ModifyQueuePairErrorKind, QueuePairState};
use sideway::ibverbs::AccessFlags;

use super::endpoint::DcEndpoint;
use super::queue_pair::{active_mtu, check_port_ready, create_dc_qp, DcQueuePair, PortNotReady};
use super::state_table::DC_TARGET_TRANSITIONS;
use crate::ibverbs::address_handle::PortAddressing;
use crate::ibverbs::queue_pair::QueuePairAttribute;
use crate::ibverbs::shared_receive_queue::SharedReceiveQueue;
use crate::ibverbs::source_gid::{SourceGidEntry, SourceGidError};
use crate::ibverbs::zeroed::Zeroed;
use crate::mlx5::device_context::{query_device_raw, QueryMlx5DeviceErrorKind};

mod bring_up;

pub use self::bring_up::DcTargetBringUp;

/// Error returned by [`DcTargetBuilder::build`].
#[derive(Debug, thiserror::Error)]
#[error("failed to create DC target")]
#[non_exhaustive]
pub struct CreateDcTargetError(#[from] pub CreateDcTargetErrorKind);

impl CreateDcTargetError {
    /// Whether DC is not available at all (no mlx5, no libmlx5, or no DC transport).
    pub fn is_not_supported(&self) -> bool {
        matches!(
            self.0,
            CreateDcTargetErrorKind::NotSupported | CreateDcTargetErrorKind::DcNotSupportedByDevice
        )
    }
}

/// The enum type for [`CreateDcTargetError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateDcTargetErrorKind {
    /// The device is not an mlx5 device, or libmlx5 could not be loaded (`EOPNOTSUPP`).
    #[error("DC needs an mlx5 device and libmlx5")]
    NotSupported,
    /// `mlx5dv_create_qp` returned `EOPNOTSUPP` after `mlx5dv_query_device` succeeded.
    #[error("this mlx5 device has no DC transport (mlx5dv_create_qp: EOPNOTSUPP)")]
    DcNotSupportedByDevice,
    /// No shared receive queue was set up.
    #[error("a shared receive queue is required (setup_srq)")]
    MissingSharedReceiveQueue,
    /// No receive completion queue was set up.
    #[error("a receive completion queue is required (setup_recv_cq)")]
    MissingReceiveCompletionQueue,
    /// The library call failed.
    #[error(transparent)]
    Ibverbs(#[from] io::Error),
}

/// The init attributes of a DC target, without the PD, CQ and SRQ pointers (the caller sets them).
pub(crate) fn dct_init_attributes(dc_key: u64) -> (Zeroed<ibv_qp_init_attr_ex>, Zeroed<mlx5dv_qp_init_attr>) {
    let (mut init, mut mlx5) = (
        Zeroed::<ibv_qp_init_attr_ex>::new(),
        Zeroed::<mlx5dv_qp_init_attr>::new(),
    );
    init.qp_type = ibv_qp_type::IBV_QPT_DRIVER;
    init.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
    mlx5.comp_mask = mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DC.0 as u64;
    mlx5.dc_init_attr.dc_type = rdma_mummy_sys::MLX5DV_DCTYPE_DCT;
    // SAFETY: the union's access-key member is written for a DCT.
    unsafe { *mlx5.dc_init_attr.__bindgen_anon_1.dct_access_key.as_mut() = dc_key };
    (init, mlx5)
}

/// Builds a [`DcTarget`] on a protection domain; see `pd.create_dct_builder()`.
#[derive(Debug)]
pub struct DcTargetBuilder {
    pd: Arc<ProtectionDomain>,
    recv_cq: Option<GenericCompletionQueue>,
    srq: Option<Arc<SharedReceiveQueue>>,
    dc_key: u64,
    /// `None`: [`DEFAULT_ACCESS`], with remote atomics where the device has DC atomics.
    access_flags: Option<AccessFlags>,
}

/// The default access of a DC target ([`DcTargetBuilder::setup_access_flags`]).
pub const DEFAULT_ACCESS: AccessFlags = AccessFlags::LocalWrite
    .or(AccessFlags::RemoteWrite)
    .or(AccessFlags::RemoteRead)
    .or(AccessFlags::RemoteAtomic);

impl DcTargetBuilder {
    /// A builder with DC key 0 and the default access ([`DEFAULT_ACCESS`]).
    pub fn new(pd: &Arc<ProtectionDomain>) -> Self {
        Self {
            pd: Arc::clone(pd),
            recv_cq: None,
            srq: None,
            dc_key: 0,
            access_flags: None,
        }
    }

    /// The completion queue of receive completions (required).
    pub fn setup_recv_cq(&mut self, recv_cq: impl Into<GenericCompletionQueue>) -> &mut Self {
        self.recv_cq = Some(recv_cq.into());
        self
    }

    /// The shared receive queue incoming sends consume (required); the DC target keeps it alive.
    pub fn setup_srq(&mut self, srq: &Arc<SharedReceiveQueue>) -> &mut Self {
        self.srq = Some(Arc::clone(srq));
        self
    }

    /// The DC access key initiators must name (`dct_access_key`, default 0).
    pub fn setup_dc_key(&mut self, dc_key: u64) -> &mut Self {
        self.dc_key = dc_key;
        self
    }

    /// What initiators may do to this node's memory (set at RESET → INIT), used as given; default
    /// [`DEFAULT_ACCESS`], so that a
    /// [`DcInitiator`](super::initiator::DcInitiator) built with its defaults can post each of its
    /// operations, less remote atomics where the kernel refuses them (`mlx5_ib_modify_dct`:
    /// `EOPNOTSUPP` without DC atomics).
    pub fn setup_access_flags(&mut self, access_flags: AccessFlags) -> &mut Self {
        self.access_flags = Some(access_flags);
        self
    }

    /// Creates the DC target with `mlx5dv_create_qp`.
    pub fn build(&self) -> Result<DcTarget, CreateDcTargetError> {
        let srq = self
            .srq
            .clone()
            .ok_or(CreateDcTargetErrorKind::MissingSharedReceiveQueue)?;
        let recv_cq = self
            .recv_cq
            .clone()
            .ok_or(CreateDcTargetErrorKind::MissingReceiveCompletionQueue)?;
        // SAFETY: the PD's context is open while the PD is.
        let context = unsafe { NonNull::new_unchecked(self.pd.pd().as_ref().context) };
        // SAFETY: as above.
        unsafe { query_device_raw(context) }.map_err(|err| match err.0 {
            QueryMlx5DeviceErrorKind::NotSupported => CreateDcTargetErrorKind::NotSupported,
            QueryMlx5DeviceErrorKind::Ibverbs(err) => CreateDcTargetErrorKind::Ibverbs(err),
        })?;
        let (mut init, mut mlx5) = dct_init_attributes(self.dc_key);
        // SAFETY: the PD, CQ and SRQ are alive: self holds them, and the queue pair will too.
        unsafe {
            init.pd = self.pd.pd().as_ptr();
            init.send_cq = recv_cq.cq().as_ptr();
            init.recv_cq = recv_cq.cq().as_ptr();
            init.srq = srq.srq().as_ptr();
        }
        // SAFETY: init's pointers are alive for the call.
        let qp = unsafe { create_dc_qp(context, &mut init, &mut mlx5) }.map_err(|err| match err {
            None => CreateDcTargetErrorKind::DcNotSupportedByDevice,
            Some(err) => CreateDcTargetErrorKind::Ibverbs(err),
        })?;
        // SAFETY: qp was just created on these parents, in RESET, and is owned here.
        let qp = unsafe { DcQueuePair::new(qp, &DC_TARGET_TRANSITIONS, Arc::clone(&self.pd), recv_cq, Some(srq)) };
        Ok(DcTarget {
            qp,
            dc_key: self.dc_key,
            access_flags: self.access_flags.unwrap_or(DEFAULT_ACCESS),
            default_access: self.access_flags.is_none(),
            brought_up_with: None,
        })
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
    /// Remote atomics asked for with [`DcTargetBuilder::setup_access_flags`] on a device without
    /// DC atomics (`mlx5_ib_modify_dct`: `EOPNOTSUPP`); it is left in RESET.
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
    /// The DC target was not brought up to RTR by [`DcTarget::bring_up`].
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
    InvalidEndpoint(#[from] super::endpoint::InvalidDcEndpointError),
}

/// A DC target (DCT), created by [`DcTargetBuilder::build`]; holds its parents.
#[doc = include_str!("target/wrong_key.md")]
pub struct DcTarget {
    qp: DcQueuePair,
    dc_key: u64,
    access_flags: AccessFlags,
    /// Whether `access_flags` is the builder's default (remote atomics dropped where refused).
    default_access: bool,
    /// What [`DcTarget::bring_up`] brought it up with, which its endpoint announces.
    brought_up_with: Option<TargetAddress>,
}

/// The port, source GID and path MTU a DC target was brought up with.
#[derive(Debug, Clone, Copy)]
struct TargetAddress {
    port: u8,
    source_gid: Option<SourceGidEntry>,
    path_mtu: Mtu,
}

// SAFETY: the handles may be used from any thread; every call that lets the library write the
// queue pair (modify) takes `&mut self`.
unsafe impl Send for DcTarget {}
// SAFETY: `&self` methods read Rust-side copies, or the queue pair number, which the library
// writes only inside modify (`&mut self`).
unsafe impl Sync for DcTarget {}

impl std::fmt::Debug for DcTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcTarget")
            .field("dct_number", &self.dct_number())
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl DcTarget {
    /// # Safety
    ///
    /// Return the handle of the queue pair. We mark this method unsafe because the lifetime of
    /// `ibv_qp` is not associated with the return value.
    pub unsafe fn qp(&self) -> NonNull<ibv_qp> {
        self.qp.qp()
    }

    /// The DCT number initiators address, read from the library: `None` before RTR, where the
    /// hardware object and its number are created.
    pub fn dct_number(&self) -> Option<u32> {
        (self.qp.state() == QueuePairState::ReadyToReceive).then(|| self.qp.qp_number())
    }

    /// The DC access key initiators must name.
    pub fn dc_key(&self) -> u64 {
        self.dc_key
    }

    /// What initiators may do to this node's memory, as granted.
    pub fn access_flags(&self) -> AccessFlags {
        self.access_flags
    }

    /// The state, as of the last [`modify`](Self::modify) through this value.
    pub fn state(&self) -> QueuePairState {
        self.qp.state()
    }

    /// Modifies the queue pair with `ibv_modify_qp`, a refusal explained by the DC target's
    /// table (mlx5_ib's `mlx5_ib_modify_dct`: RESET → INIT → RTR, each with the state and its
    /// exact attributes; it is torn down by dropping it, never by a move to RESET or ERR).
    pub fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairError> {
        self.qp.modify(attr)
    }

    /// What a peer needs to reach this DC target, as [`bring_up`](Self::bring_up) brought it
    /// up; its GID is the one the target answers from (zero on InfiniBand without one).
    pub fn endpoint(&self) -> Result<DcEndpoint, DcTargetEndpointError> {
        let dct_number = self.dct_number().ok_or(DcTargetEndpointErrorKind::NoDctNumber)?;
        let address = self.brought_up_with.ok_or(DcTargetEndpointErrorKind::NoDctNumber)?;
        let port = address.port;
        let attr = self
            .qp
            .query_port(port)
            .map_err(|source| DcTargetEndpointErrorKind::InvalidPort { port, source })?;
        let gid = address.source_gid.map(|entry| entry.gid()).unwrap_or_default();
        let mut endpoint = DcEndpoint::new(
            attr.lid,
            gid,
            dct_number,
            self.dc_key,
            attr.link_layer == IBV_LINK_LAYER_ETHERNET,
        )
        .map_err(DcTargetEndpointErrorKind::InvalidEndpoint)?;
        endpoint.setup_path_mtu(address.path_mtu);
        Ok(endpoint)
    }

    /// The source GID it was brought up with (`None` before [`bring_up`](Self::bring_up), and
    /// on InfiniBand without one).
    pub fn source_gid(&self) -> Option<SourceGidEntry> {
        self.brought_up_with?.source_gid
    }

    /// Brings the DC target from RESET to RTR in one call, with the access flags it was built
    /// with, after checking the port and resolving the source GID.
    pub fn bring_up(&mut self, params: &DcTargetBringUp) -> Result<(), BringUpDcTargetError> {
        let invalid_port = |source| BringUpDcTargetErrorKind::InvalidPort {
            port: params.port,
            source,
        };
        let port = self.qp.query_port(params.port).map_err(invalid_port)?;
        check_port_ready(params.port, &port).map_err(BringUpDcTargetErrorKind::PortNotReady)?;
        let (active, addressing) = (active_mtu(&port), PortAddressing::of(&port));
        let table = match params.source_gid.reads_gid_table(addressing) {
            true => self
                .qp
                .gid_table(params.port, &port)
                .map_err(BringUpDcTargetErrorKind::SourceGid)?,
            false => Vec::new(),
        };
        let source_gid = params
            .source_gid
            .resolve(params.port, addressing, &table)
            .map_err(|kind| BringUpDcTargetErrorKind::SourceGid(kind.into()))?;
        let path_mtu = params.path_mtu.unwrap_or(active);
        let src_gid_index = source_gid.map(|entry| entry.index());
        let [init, rtr] = params.attributes(self.access_flags, path_mtu, src_gid_index);
        match self.modify(&init) {
            // The kernel refuses remote atomics without DC atomics before it changes anything:
            // the default access, which asks for them, asks for INIT again without.
            Err(err)
                if self.access_flags.contains(AccessFlags::RemoteAtomic)
                    && matches!(&err.0, ModifyQueuePairErrorKind::Ibverbs(errno) if errno.raw_os_error() == Some(libc::EOPNOTSUPP)) =>
            {
                if !self.default_access {
                    return Err(BringUpDcTargetErrorKind::RemoteAtomicsNotSupported.into());
                }
                self.access_flags = DEFAULT_ACCESS.and(AccessFlags::RemoteAtomic.not());
                let [init, _] = params.attributes(self.access_flags, path_mtu, src_gid_index);
                self.modify(&init).map_err(BringUpDcTargetErrorKind::Modify)?;
            },
            other => other.map_err(BringUpDcTargetErrorKind::Modify)?,
        }
        self.modify(&rtr).map_err(BringUpDcTargetErrorKind::Modify)?;
        self.brought_up_with = Some(TargetAddress {
            port: params.port,
            source_gid,
            path_mtu,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dct_init_attributes_follow_the_reference_rules() {
        let (init, mlx5) = dct_init_attributes(0xfeed_beef);
        assert_eq!(init.qp_type, ibv_qp_type::IBV_QPT_DRIVER);
        // The PD only: SEND_OPS_FLAGS on a DCT is EINVAL.
        assert_eq!(init.comp_mask, ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0);
        assert_eq!(init.send_ops_flags, 0);
        assert_eq!((init.cap.max_send_wr, init.cap.max_recv_wr), (0, 0));
        assert_eq!(
            mlx5.comp_mask,
            mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DC.0 as u64
        );
        assert_eq!(mlx5.dc_init_attr.dc_type, rdma_mummy_sys::MLX5DV_DCTYPE_DCT);
        // SAFETY: the access-key member was written.
        assert_eq!(
            unsafe { *mlx5.dc_init_attr.__bindgen_anon_1.dct_access_key.as_ref() },
            0xfeed_beef
        );
    }
}
