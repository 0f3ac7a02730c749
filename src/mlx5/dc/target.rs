//! The DC target (DCT): the receiving end of the DC transport, one per node for every DC initiator
//! that names its DCT number and DC key, consuming receives from its [`SharedReceiveQueue`]. Build
//! it with [`DcTargetBuilder`], bring it to RTR with [`DcTarget::modify`] (RESET → INIT → RTR), then
//! send its peers its [`dct_number`](DcTarget::dct_number) and DC key (the DCT number exists only
//! from RTR on).
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{
    ibv_qp, ibv_qp_init_attr_ex, ibv_qp_init_attr_mask, ibv_qp_type, mlx5dv_qp_init_attr, mlx5dv_qp_init_attr_mask,
};
use sideway::ibverbs::completion::{CompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, QueuePairAttributeMask as Mask, QueuePairState};
use sideway::ibverbs::AccessFlags;

use super::queue_pair::{create_dc_qp, DcQueuePair};
use super::state_table::DC_TARGET_TRANSITIONS;
use crate::ibverbs::queue_pair::QueuePairAttribute;
use crate::ibverbs::shared_receive_queue::SharedReceiveQueue;
use crate::ibverbs::zeroed::Zeroed;
use crate::mlx5::device_context::{query_device_raw, QueryMlx5DeviceErrorKind};

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
    access_flags: AccessFlags,
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
            access_flags: DEFAULT_ACCESS,
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

    /// What initiators may do to this node's memory, given at RESET → INIT; default
    /// [`DEFAULT_ACCESS`], so that a DC initiator built with its defaults can post each of its
    /// operations. The kernel refuses remote atomics on a device without DC atomics
    /// (`mlx5_ib_modify_dct`: `EOPNOTSUPP`).
    pub fn setup_access_flags(&mut self, access_flags: AccessFlags) -> &mut Self {
        self.access_flags = access_flags;
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
            access_flags: self.access_flags,
            port: None,
            path_mtu: None,
            src_gid_index: None,
        })
    }
}

/// A DC target (DCT), created by [`DcTargetBuilder::build`]; holds its parents.
pub struct DcTarget {
    qp: DcQueuePair,
    dc_key: u64,
    access_flags: AccessFlags,
    port: Option<u8>,
    path_mtu: Option<Mtu>,
    src_gid_index: Option<u8>,
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

    /// What initiators may do to this node's memory: as built, or as given to the last
    /// [`modify`](Self::modify) that set them.
    pub fn access_flags(&self) -> AccessFlags {
        self.access_flags
    }

    /// The local port given at RESET → INIT (`None` before).
    pub fn port(&self) -> Option<u8> {
        self.port
    }

    /// The path MTU given at INIT → RTR (`None` before): initiators must send no larger packets,
    /// and it answers READs in packets as large (`mlx5_ib_modify_dct`, `dctc.mtu`).
    pub fn path_mtu(&self) -> Option<Mtu> {
        self.path_mtu
    }

    /// The source GID index of a global address vector given at INIT → RTR (`None` before, and
    /// without one).
    pub fn src_gid_index(&self) -> Option<u8> {
        self.src_gid_index
    }

    /// The state, as of the last [`modify`](Self::modify) through this value.
    pub fn state(&self) -> QueuePairState {
        self.qp.state()
    }

    /// Modifies the queue pair with `ibv_modify_qp`, a refusal explained by the DC target's
    /// table (mlx5_ib's `mlx5_ib_modify_dct`: RESET → INIT → RTR, each with the state and its
    /// exact attributes; it is torn down by dropping it, never by a move to RESET or ERR).
    pub fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), ModifyQueuePairError> {
        self.qp.modify(attr)?;
        let (raw, has) = (&attr.attr, |bit| attr.attr_mask.contains(bit));
        if has(Mask::AccessFlags) {
            self.access_flags = AccessFlags::from(raw.qp_access_flags as i32);
        }
        self.port = has(Mask::Port).then_some(raw.port_num).or(self.port);
        self.path_mtu = has(Mask::PathMtu).then(|| Mtu::from(raw.path_mtu)).or(self.path_mtu);
        if has(Mask::AddressVector) {
            self.src_gid_index = (raw.ah_attr.is_global != 0).then_some(raw.ah_attr.grh.sgid_index);
        }
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
