//! How a DC initiator is created: the builder's settings and `build`, which hands them to
//! `mlx5dv_create_qp` and completes the queue pair into a [`DcInitiator`].
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{
    ibv_pd, ibv_qp, ibv_qp_init_attr_ex, ibv_qp_init_attr_mask, ibv_qp_to_qp_ex, ibv_qp_type, mlx5dv_dc_type,
    mlx5dv_qp_init_attr, mlx5dv_qp_init_attr_mask,
};
use sideway::ibverbs::completion::{CompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::SendOperationFlags;

use super::post_send::DcSendView;
use super::{
    CreateDcInitiatorError, CreateDcInitiatorErrorKind, DcInitiator, DcInitiatorBuilder, DciStreams, Granted,
    DC_ATOMIC_OPERATIONS, DC_SEND_OPERATIONS,
};
use crate::ibverbs::zeroed::Zeroed;
use crate::mlx5::dc::queue_pair::{create_dc_qp, DcQueuePair};
use crate::mlx5::dc::state_table::DC_INITIATOR_TRANSITIONS;
use crate::mlx5::device_attributes::Mlx5DeviceAttributes;
use crate::mlx5::device_context::{query_device_raw, QueryMlx5DeviceErrorKind};

/// The init attributes of a DC initiator but the pointers (`cap`, `send_ops_flags`, streams,
/// `sq_sig_all`), as a [`DcInitiatorBuilder`] asks for them ([`DciRequest`]) and as created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DciParameters<SendOps> {
    pub max_send_wr: u32,
    pub max_send_sge: u32,
    pub max_inline_data: u32,
    pub send_ops: SendOps,
    pub streams: Option<DciStreams>,
    pub sq_sig_all: bool,
}

/// What a builder asks for; send operations `None`: [`DC_SEND_OPERATIONS`] the device can do.
pub(crate) type DciRequest = DciParameters<Option<SendOperationFlags>>;

/// What a DC initiator is created with.
pub(crate) type DciInitParameters = DciParameters<SendOperationFlags>;

impl DciRequest {
    /// The parameters a DC initiator is created with on a device with atomics or without: the
    /// send operations asked for, or every DC operation the device can do. Atomics asked of a
    /// device without them are refused here, as libmlx5's `mlx5_qp_fill_wr_pfns` would refuse
    /// them with the `EOPNOTSUPP` of a device without DC.
    pub(crate) fn init_parameters(&self, atomics: bool) -> Result<DciInitParameters, CreateDcInitiatorErrorKind> {
        let send_ops = match self.send_ops {
            Some(requested) if !atomics && !requested.and(DC_ATOMIC_OPERATIONS).is_none() => {
                let requested = requested.and(DC_ATOMIC_OPERATIONS);
                return Err(CreateDcInitiatorErrorKind::AtomicOperationsNotSupported { requested });
            },
            Some(requested) => requested,
            None if atomics => DC_SEND_OPERATIONS,
            None => DC_SEND_OPERATIONS.and(DC_ATOMIC_OPERATIONS.not()),
        };
        Ok(DciInitParameters {
            max_send_wr: self.max_send_wr,
            max_send_sge: self.max_send_sge,
            max_inline_data: self.max_inline_data,
            send_ops,
            streams: self.streams,
            sq_sig_all: self.sq_sig_all,
        })
    }
}

/// Refuses send operations a DC initiator cannot post, whatever the device.
pub(crate) fn check_dc_operations(requested: SendOperationFlags) -> Result<(), CreateDcInitiatorErrorKind> {
    if requested.bits() & !DC_SEND_OPERATIONS.bits() != 0 {
        return Err(CreateDcInitiatorErrorKind::UnsupportedSendOperations {
            requested,
            allowed: DC_SEND_OPERATIONS,
        });
    }
    Ok(())
}

/// A DC initiator's read/atomic depth from what libmlx5 reports (0 or absent: unknown): the
/// smaller known of `max_dc_rd_atom` and `max_dc_init_rd_atom` (`1 << log_max_ra_res_dc`, the
/// bound of mlx5_ib's `validate_rd_atomic`); 1, which every device takes, before rdma-core 47.
pub(crate) fn dci_read_atomic_depth(max_dc_rd_atom: Option<u64>, max_dc_init_rd_atom: Option<u64>) -> u8 {
    [max_dc_rd_atom, max_dc_init_rd_atom]
        .into_iter()
        .flatten()
        .filter(|&depth| depth > 0)
        .min()
        .map_or(1, |depth| depth.min(u64::from(u8::MAX)) as u8)
}

impl DcInitiatorBuilder {
    /// A builder with the defaults: 16 send requests of 1 entry, no inline data, every DC
    /// operation the device can do, no streams.
    pub fn new(pd: &Arc<ProtectionDomain>) -> Self {
        Self {
            pd: Arc::clone(pd),
            send_cq: None,
            request: DciRequest {
                max_send_wr: 16,
                max_send_sge: 1,
                max_inline_data: 0,
                send_ops: None,
                streams: None,
                sq_sig_all: false,
            },
        }
    }

    /// The send queue asked for: at most what [`build`](Self::build) is granted.
    pub fn max_send_wr(&self) -> u32 {
        self.request.max_send_wr
    }

    /// The DCI streams asked for.
    pub fn streams(&self) -> Option<DciStreams> {
        self.request.streams
    }

    /// The completion queue of send completions (required).
    pub fn setup_send_cq(&mut self, send_cq: impl Into<GenericCompletionQueue>) -> &mut Self {
        self.send_cq = Some(send_cq.into());
        self
    }

    /// Capacity of the send queue (default 16; [`DcInitiator::max_send_wr`] reads what was
    /// granted, which libmlx5 rounds up), at most the device's `max_qp_wr`.
    pub fn setup_max_send_wr(&mut self, max_send_wr: u32) -> &mut Self {
        self.request.max_send_wr = max_send_wr;
        self
    }

    /// Scatter/gather entries per send request (default 1), at most the device's `max_sge`.
    ///
    /// libmlx5 also bounds the whole request (`mlx5_calc_send_wqe`): a DC request's overhead
    /// (control segment, 48-byte address vector, 16 more for RDMA's remote address, 32 more for
    /// an atomic's), then 16 bytes an entry, or the inline data with a 4-byte header padded to
    /// 16, must fit the device's largest send request (`max_wqe_sz_sq`), or `build` fails with
    /// `EINVAL`.
    pub fn setup_max_send_sge(&mut self, max_send_sge: u32) -> &mut Self {
        self.request.max_send_sge = max_send_sge;
        self
    }

    /// Inline data per send request in bytes (default 0), bounded as
    /// [`setup_max_send_sge`](Self::setup_max_send_sge) says.
    pub fn setup_max_inline_data(&mut self, max_inline_data: u32) -> &mut Self {
        self.request.max_inline_data = max_inline_data;
        self
    }

    /// The send operations the DC initiator will post; another one is refused at post. Default:
    /// every one of [`DC_SEND_OPERATIONS`] the device can do (no atomics where `atomic_cap` is
    /// `IBV_ATOMIC_NONE`).
    pub fn setup_send_ops_flags(&mut self, send_ops_flags: SendOperationFlags) -> &mut Self {
        self.request.send_ops = Some(send_ops_flags);
        self
    }

    /// DCI streams (`MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS`), at most the device's
    /// `dci_streams_caps`; `build` also checks the provider's stream address setter
    /// ([`MissingProviderEntry`](CreateDcInitiatorErrorKind::MissingProviderEntry)
    /// `wr_set_dc_addr_stream` where it has none).
    pub fn setup_dci_streams(&mut self, streams: DciStreams) -> &mut Self {
        self.request.streams = Some(streams);
        self
    }

    /// Whether every send request generates a completion, whatever its flags (default false).
    pub fn setup_sq_sig_all(&mut self, sq_sig_all: bool) -> &mut Self {
        self.request.sq_sig_all = sq_sig_all;
        self
    }

    /// Creates the DC initiator with `mlx5dv_create_qp`, in RESET. A send operation that is not a
    /// DC operation is refused first; what the device does not take (capacities, DCI streams,
    /// atomics) libmlx5 or the kernel refuses.
    ///
    /// Scatter to CQE is off: libmlx5's `create_qp` turns it off for every DC queue pair.
    pub fn build(&self) -> Result<DcInitiator, CreateDcInitiatorError> {
        // SAFETY: the builder's protection domain, which the DC initiator holds.
        unsafe { self.build_on(self.pd.pd()) }
    }

    /// Creates the DC initiator as [`build`](Self::build) does, on `pd`.
    ///
    /// # Safety
    ///
    /// `pd` must be the builder's protection domain, or a parent domain of it, alive while the DC
    /// initiator is.
    pub(crate) unsafe fn build_on(&self, pd: NonNull<ibv_pd>) -> Result<DcInitiator, CreateDcInitiatorError> {
        let send_cq = self
            .send_cq
            .clone()
            .ok_or(CreateDcInitiatorErrorKind::MissingSendCompletionQueue)?;
        if let Some(requested) = self.request.send_ops {
            check_dc_operations(requested)?;
        }
        let (mlx5, device) = self.query_device()?;
        let atomics = device.atomic_cap != rdma_mummy_sys::ibv_atomic_cap::IBV_ATOMIC_NONE;
        let params = self.request.init_parameters(atomics)?;
        // SAFETY: the PD's context is open while the PD is.
        let context = unsafe { NonNull::new_unchecked(self.pd.pd().as_ref().context) };
        let (mut init, mut mlx5_init) = dci_init_attributes(&params);
        init.pd = pd.as_ptr();
        // SAFETY: the CQ is alive: self holds it, and the queue pair will too.
        unsafe {
            init.send_cq = send_cq.cq().as_ptr();
            init.recv_cq = send_cq.cq().as_ptr();
        }
        // SAFETY: init's pointers are alive for the call (the caller's promise for the PD).
        let qp = unsafe { create_dc_qp(context, &mut init, &mut mlx5_init) }
            .map_err(|err| err.map_or(CreateDcInitiatorErrorKind::DcNotSupportedByDevice, Into::into))?;
        // libmlx5 wrote the granted sizes back (`create_qp`, `mlx5_calc_sq_size`).
        let granted = Granted::of(&init);
        // SAFETY: qp was just created on these parents, in RESET, and is owned here (an error
        // below destroys it).
        let qp = unsafe { DcQueuePair::new(qp, &DC_INITIATOR_TRANSITIONS, Arc::clone(&self.pd), send_cq, None) };
        let read_atomic_depth = dci_read_atomic_depth(mlx5.max_dc_rd_atom(), mlx5.max_dc_init_rd_atom());
        DcInitiator::adopt(qp, params, granted, read_atomic_depth)
            .map_err(|entry| CreateDcInitiatorErrorKind::MissingProviderEntry { entry }.into())
    }
}

impl DcInitiatorBuilder {
    /// What the builder's device reports (`mlx5dv_query_device`, `ibv_query_device`); a device
    /// that is not mlx5, or no libmlx5, is the typed "not supported".
    pub(crate) fn query_device(
        &self,
    ) -> Result<(Mlx5DeviceAttributes, rdma_mummy_sys::ibv_device_attr), CreateDcInitiatorErrorKind> {
        // SAFETY: the PD's context is open while the PD is.
        let context = unsafe { NonNull::new_unchecked(self.pd.pd().as_ref().context) };
        // SAFETY: as above.
        let mlx5 = unsafe { query_device_raw(context) }.map_err(|err| match err.0 {
            QueryMlx5DeviceErrorKind::NotSupported => CreateDcInitiatorErrorKind::NotSupported,
            QueryMlx5DeviceErrorKind::Ibverbs(err) => CreateDcInitiatorErrorKind::Ibverbs(err),
        })?;
        let device = crate::ibverbs::query_device_attr(&self.pd)?;
        Ok((mlx5, device))
    }
}

impl DcInitiator {
    /// Completes a DC initiator around its new queue pair: its checked send views, or the name of
    /// the first entry the provider left NULL.
    fn adopt(
        qp: DcQueuePair, params: DciInitParameters, granted: Granted, read_atomic_depth: u8,
    ) -> Result<Self, &'static str> {
        // SAFETY: a DC initiator's queue pair, created with these send operations.
        let send = unsafe { Self::attach(qp.qp(), &params) }?;
        Ok(Self {
            qp,
            granted,
            send,
            params,
            read_atomic_depth,
            brought_up_with: None,
        })
    }

    /// Reads the send views of a DC initiator's queue pair, every entry a guard calls checked, or
    /// the name of the first entry the provider left NULL.
    ///
    /// # Safety
    ///
    /// `qp` must be a live DC initiator created with `params`' send operations.
    pub(super) unsafe fn attach(qp: NonNull<ibv_qp>, params: &DciInitParameters) -> Result<DcSendView, &'static str> {
        // SAFETY: the queue pair is alive and was created with send operations.
        let qp_ex = NonNull::new(unsafe { ibv_qp_to_qp_ex(qp.as_ptr()) }).ok_or("ibv_qp_to_qp_ex")?;
        // SAFETY: qp_ex is the extended view of a live mlx5 queue pair.
        let mlx5_qp_ex = NonNull::new(unsafe { rdma_mummy_sys::mlx5dv_qp_ex_from_ibv_qp_ex(qp_ex.as_ptr()) })
            .ok_or("mlx5dv_qp_ex_from_ibv_qp_ex")?;
        // SAFETY: the views of a live DC initiator created with these send operations.
        unsafe { DcSendView::new(qp_ex, mlx5_qp_ex, params.send_ops, params.streams.is_some()) }
    }
}

/// The init attributes of a DC initiator, without the PD and CQ pointers (the caller sets them).
pub(crate) fn dci_init_attributes(
    params: &DciInitParameters,
) -> (Zeroed<ibv_qp_init_attr_ex>, Zeroed<mlx5dv_qp_init_attr>) {
    let (mut init, mut mlx5) = (
        Zeroed::<ibv_qp_init_attr_ex>::new(),
        Zeroed::<mlx5dv_qp_init_attr>::new(),
    );
    init.qp_type = ibv_qp_type::IBV_QPT_DRIVER;
    init.sq_sig_all = params.sq_sig_all as i32;
    init.cap.max_send_wr = params.max_send_wr;
    init.cap.max_send_sge = params.max_send_sge;
    init.cap.max_inline_data = params.max_inline_data;
    // A DCI has no receive queue: the kernel refuses one.
    init.cap.max_recv_wr = 0;
    init.cap.max_recv_sge = 0;
    init.comp_mask =
        (ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS).0;
    init.send_ops_flags = params.send_ops.bits();
    mlx5.comp_mask = mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DC.0 as u64;
    mlx5.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
    if let Some(streams) = params.streams {
        mlx5.comp_mask |= mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS.0 as u64;
        // SAFETY: the union's streams member is written for a DCI with streams.
        let dci_streams = unsafe { mlx5.dc_init_attr.__bindgen_anon_1.dci_streams.as_mut() };
        dci_streams.log_num_concurent = streams.log_num_concurrent;
        dci_streams.log_num_errored = streams.log_num_errored;
    }
    (init, mlx5)
}

/// `MLX5DV_DCTYPE_DCI`.
const MLX5DV_DCTYPE_DCI: mlx5dv_dc_type = rdma_mummy_sys::MLX5DV_DCTYPE_DCI;

#[cfg(test)]
mod tests {
    //! The init attributes and the send operations, against the reference rules.
    use super::*;

    #[test]
    fn the_read_atomic_depth_is_the_smaller_known_depth_and_1_when_none_is_known() {
        assert_eq!(dci_read_atomic_depth(Some(4), Some(16)), 4);
        assert_eq!(dci_read_atomic_depth(Some(16), Some(8)), 8);
        assert_eq!(dci_read_atomic_depth(None, Some(16)), 16);
        assert_eq!(
            dci_read_atomic_depth(Some(0), Some(8)),
            8,
            "0: the provider could not read it"
        );
        assert_eq!(dci_read_atomic_depth(Some(1 << 20), None), u8::MAX);
        // rdma-core before 47 reports neither: 1, which every device takes.
        assert_eq!(dci_read_atomic_depth(None, None), 1);
        assert_eq!(dci_read_atomic_depth(Some(0), Some(0)), 1);
    }

    fn params() -> DciInitParameters {
        DciInitParameters {
            max_send_wr: 64,
            max_send_sge: 2,
            max_inline_data: 32,
            send_ops: DC_SEND_OPERATIONS,
            streams: None,
            sq_sig_all: false,
        }
    }
    #[test]
    fn dci_init_attributes_follow_the_reference_rules() {
        let (init, mlx5) = dci_init_attributes(&params());
        assert_eq!(init.qp_type, ibv_qp_type::IBV_QPT_DRIVER);
        assert_eq!(
            (init.cap.max_recv_wr, init.cap.max_recv_sge),
            (0, 0),
            "no receive queue"
        );
        assert_eq!(
            (init.cap.max_send_wr, init.cap.max_send_sge, init.cap.max_inline_data),
            (64, 2, 32)
        );
        assert_eq!(
            init.comp_mask,
            (ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS).0
        );
        // Every granted operation is listed.
        assert_eq!(init.send_ops_flags, DC_SEND_OPERATIONS.bits());
        assert!(init.pd.is_null() && init.send_cq.is_null() && init.srq.is_null());
        assert_eq!(
            mlx5.comp_mask,
            mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DC.0 as u64
        );
        assert_eq!(mlx5.dc_init_attr.dc_type, MLX5DV_DCTYPE_DCI);
        assert_eq!(mlx5.create_flags, 0);

        let mut with = params();
        with.send_ops = SendOperationFlags::Write | SendOperationFlags::Read;
        with.streams = Some(DciStreams {
            log_num_concurrent: 3,
            log_num_errored: 1,
        });
        let (init, mlx5) = dci_init_attributes(&with);
        assert_eq!(init.send_ops_flags, with.send_ops.bits());
        assert_eq!(
            mlx5.comp_mask,
            (mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DC
                | mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS)
                .0 as u64
        );
        // SAFETY: the streams member was written.
        let streams = unsafe { *mlx5.dc_init_attr.__bindgen_anon_1.dci_streams.as_ref() };
        assert_eq!((streams.log_num_concurent, streams.log_num_errored), (3, 1));
        assert_eq!(mlx5.create_flags, 0);
    }
    #[test]
    fn the_default_send_operations_are_the_dc_operations_the_device_can_do() {
        let request = |send_ops| DciRequest {
            max_send_wr: 16,
            max_send_sge: 1,
            max_inline_data: 0,
            send_ops,
            streams: None,
            sq_sig_all: false,
        };
        let send_ops = |request: DciRequest, atomics| request.init_parameters(atomics).map(|params| params.send_ops);
        assert_eq!(send_ops(request(None), true).unwrap(), DC_SEND_OPERATIONS);
        let without_atomics = send_ops(request(None), false).unwrap();
        assert!(without_atomics.and(DC_ATOMIC_OPERATIONS).is_none());
        assert!(without_atomics.contains(SendOperationFlags::Read | SendOperationFlags::Send));
        // Asked for: as asked, but atomics of a device without them.
        let asked = SendOperationFlags::Write | SendOperationFlags::AtomicFetchAndAdd;
        assert_eq!(send_ops(request(Some(asked)), true).unwrap(), asked);
        assert!(matches!(
            send_ops(request(Some(asked)), false),
            Err(CreateDcInitiatorErrorKind::AtomicOperationsNotSupported { requested })
                if requested == SendOperationFlags::AtomicFetchAndAdd
        ));
        assert!(check_dc_operations(asked).is_ok());
        assert!(matches!(
            check_dc_operations(SendOperationFlags::SendWithInvalidate),
            Err(CreateDcInitiatorErrorKind::UnsupportedSendOperations { .. })
        ));
    }
}
