//! How a DC initiator is created: the builder's settings and `build`, which plans the init
//! parameters, hands them to `mlx5dv_create_qp` and completes the queue pair into a [`DcInitiator`].
use std::io;
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
use super::{CreateDcInitiatorError, CreateDcInitiatorErrorKind, DcInitiator, DcInitiatorBuilder, DciStreams, Granted};
use crate::ibverbs::zeroed::Zeroed;
use crate::mlx5::dc::queue_pair::{create_dc_qp, DcQueuePair};
use crate::mlx5::dc::state_table::DC_INITIATOR_TRANSITIONS;
use crate::mlx5::device_context::{query_device_raw, QueryMlx5DeviceErrorKind};

// The planning, which `build` runs first (and the unit tests' paths name here).
pub(crate) use super::plan::*;

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
    /// granted), in requests of at least two 64-byte blocks (libmlx5's `mlx5_calc_send_wqe`) where
    /// `max_qp_wr` counts blocks ([`SendQueueTooLarge`](CreateDcInitiatorErrorKind::SendQueueTooLarge)).
    pub fn setup_max_send_wr(&mut self, max_send_wr: u32) -> &mut Self {
        self.request.max_send_wr = max_send_wr;
        self
    }

    /// Scatter/gather entries per send request (default 1), at most the device's `max_sge`.
    ///
    /// libmlx5 also bounds the whole request (`mlx5_calc_send_wqe`): this initiator's overhead
    /// (control segment, 48-byte address vector, 16 more for RDMA's remote address, 32 more for
    /// an atomic's), then 16 bytes an entry, or the inline data with a 4-byte header padded to
    /// 16, must fit the device's largest send request, `max_wqe_sz_sq`, which no query of
    /// libibverbs or libmlx5 reports. Every device takes at least `16 · max_sge + 32` bytes (the
    /// kernel derives `max_sge` from it, capped at 512), so `max_sge − 3` entries (`− 4` with
    /// atomics) and 428 bytes of inline data (412 with atomics) fit every device with `max_sge`
    /// 30. A larger request is left to the library, and its refusal reported as
    /// [`RequestTooLarge`](CreateDcInitiatorErrorKind::RequestTooLarge), never a bare `EINVAL`.
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
    /// every one of [`DC_SEND_OPERATIONS`](super::DC_SEND_OPERATIONS) the device can do (no
    /// atomics where `atomic_cap` is `IBV_ATOMIC_NONE`).
    pub fn setup_send_ops_flags(&mut self, send_ops_flags: SendOperationFlags) -> &mut Self {
        self.request.send_ops = Some(send_ops_flags);
        self
    }

    /// DCI streams (`MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS`), checked against `dci_streams_caps`.
    /// Requests then address with `setup_dc_addr_stream`.
    pub fn setup_dci_streams(&mut self, streams: DciStreams) -> &mut Self {
        self.request.streams = Some(streams);
        self
    }

    /// Whether every send request generates a completion, whatever its flags (default false).
    pub fn setup_sq_sig_all(&mut self, sq_sig_all: bool) -> &mut Self {
        self.request.sq_sig_all = sq_sig_all;
        self
    }

    /// Creates the DC initiator with `mlx5dv_create_qp`, after checking the request against the
    /// device (send operations, capacities, DCI streams, see [`CreateDcInitiatorErrorKind`]).
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
        let DciPlan {
            context,
            device,
            params,
        } = self.plan()?;
        let (mut init, mut mlx5_init) = dci_init_attributes(&params);
        init.pd = pd.as_ptr();
        // SAFETY: the CQ is alive: self holds it, and the queue pair will too.
        unsafe {
            init.send_cq = send_cq.cq().as_ptr();
            init.recv_cq = send_cq.cq().as_ptr();
        }
        // SAFETY: init's pointers are alive for the call (the caller's promise for the PD).
        let qp = unsafe { create_dc_qp(context, &mut init, &mut mlx5_init) }
            .map_err(|err| creation_error(err, &params, &device))?;
        // libmlx5 wrote the granted sizes back (`create_qp`, `mlx5_calc_sq_size`).
        let granted = Granted::of(&init);
        // SAFETY: qp was just created on these parents, in RESET, and is owned here (an error
        // below destroys it).
        let qp = unsafe { DcQueuePair::new(qp, &DC_INITIATOR_TRANSITIONS, Arc::clone(&self.pd), send_cq, None) };
        DcInitiator::adopt(qp, params, granted, device.read_atomic_depth)
            .map_err(|entry| CreateDcInitiatorErrorKind::MissingProviderEntry { entry }.into())
    }

    /// The send queue [`build`](Self::build) will be granted, before creating anything.
    pub fn planned_max_send_wr(&self) -> Result<u32, CreateDcInitiatorError> {
        Ok(self.plan()?.params.granted_max_send_wr())
    }

    /// Queries the device (`mlx5dv_query_device`, `ibv_query_device`) and plans the creation
    /// ([`plan_dci`]), refusing what the device does not take before `mlx5dv_create_qp`.
    fn plan(&self) -> Result<DciPlan, CreateDcInitiatorError> {
        if let Some(requested) = self.request.send_ops {
            check_dc_operations(requested)?;
        }
        // SAFETY: the PD's context is open while the PD is.
        let context = unsafe { NonNull::new_unchecked(self.pd.pd().as_ref().context) };
        // SAFETY: as above.
        let mlx5 = unsafe { query_device_raw(context) }.map_err(|err| match err.0 {
            QueryMlx5DeviceErrorKind::NotSupported => CreateDcInitiatorErrorKind::NotSupported,
            QueryMlx5DeviceErrorKind::Ibverbs(err) => CreateDcInitiatorErrorKind::Ibverbs(err),
        })?;
        let device = crate::ibverbs::query_device_attr(&self.pd).map_err(CreateDcInitiatorErrorKind::Ibverbs)?;
        let device = DciDevice {
            max_qp_wr: device.max_qp_wr.max(0) as u32,
            max_sge: device.max_sge.max(0) as u32,
            atomics: device.atomic_cap != rdma_mummy_sys::ibv_atomic_cap::IBV_ATOMIC_NONE,
            dci_streams: mlx5.dci_streams_caps(),
            read_atomic_depth: dci_read_atomic_depth(mlx5.max_dc_rd_atom(), mlx5.max_dc_init_rd_atom()),
        };
        let params = plan_dci(&self.request, &device)?;
        Ok(DciPlan {
            context,
            device,
            params,
        })
    }
}

/// What [`DcInitiatorBuilder::build`] creates a DC initiator from.
struct DciPlan {
    context: NonNull<rdma_mummy_sys::ibv_context>,
    device: DciDevice,
    params: DciInitParameters,
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
        unsafe { DcSendView::new(qp_ex, mlx5_qp_ex, params.send_ops) }
    }
}

/// Why `mlx5dv_create_qp` refused the DC initiator `params` describes: `EOPNOTSUPP` (`None`) is
/// a device without DC; `EINVAL` for a request larger than every device takes
/// ([`guaranteed_request_bytes`]) is libmlx5's `mlx5_calc_send_wqe` refusing its size.
pub(crate) fn creation_error(
    err: Option<io::Error>, params: &DciInitParameters, device: &DciDevice,
) -> CreateDcInitiatorErrorKind {
    let Some(err) = err else {
        return CreateDcInitiatorErrorKind::DcNotSupportedByDevice;
    };
    let request_bytes = dci_request_bytes(params.send_ops, params.max_send_sge, params.max_inline_data);
    let guaranteed = guaranteed_request_bytes(device.max_sge);
    match err.raw_os_error() {
        Some(libc::EINVAL) if request_bytes > guaranteed => CreateDcInitiatorErrorKind::RequestTooLarge {
            max_send_sge: params.max_send_sge,
            max_inline_data: params.max_inline_data,
            request_bytes,
            guaranteed,
        },
        _ => CreateDcInitiatorErrorKind::Ibverbs(err),
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
    //! The init attributes and the streams check, against the reference rules.
    use super::super::DC_SEND_OPERATIONS;
    use super::*;
    use crate::mlx5::device_attributes::DciStreamsCapabilities;

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
    fn streams_are_checked_against_the_device_with_the_limit_named() {
        let caps = DciStreamsCapabilities {
            max_log_num_concurrent: 4,
            max_log_num_errored: 2,
        };
        let ok = DciStreams {
            log_num_concurrent: 4,
            log_num_errored: 2,
        };
        assert!(check_streams(ok, Some(caps)).is_ok());
        assert!(matches!(
            check_streams(ok, None),
            Err(CreateDcInitiatorErrorKind::DciStreamsNotSupported)
        ));
        let errored = DciStreams {
            log_num_errored: 3,
            ..ok
        };
        assert!(matches!(
            check_streams(errored, Some(caps)),
            Err(CreateDcInitiatorErrorKind::DciStreamsTooLarge {
                limit: "log_num_errored",
                requested: 3,
                max: 2
            })
        ));
    }

    /// libmlx5 rounds the queue's bytes up to a power of two (20 requests of 128 bytes: 32).
    #[test]
    fn the_plan_rounds_the_send_queue_as_libmlx5() {
        let request = DciRequest {
            max_send_wr: 20,
            max_send_sge: 1,
            max_inline_data: 0,
            send_ops: None,
            streams: None,
            sq_sig_all: false,
        };
        let device = DciDevice {
            max_qp_wr: 1 << 15,
            max_sge: 30,
            atomics: false,
            dci_streams: None,
            read_atomic_depth: 1,
        };
        let planned = plan_dci(&request, &device).expect("planned");
        assert_eq!(planned.granted_max_send_wr(), 32);
    }

    /// A request beyond what every device takes is left to libmlx5, and its `EINVAL` is named,
    /// not a bare errno; another `EINVAL` is left as it is.
    #[test]
    fn a_request_beyond_every_device_is_left_to_libmlx5_and_its_einval_named() {
        let device = DciDevice {
            max_qp_wr: 32768,
            max_sge: 30,
            atomics: true,
            dci_streams: None,
            read_atomic_depth: 16,
        };
        let einval = || Some(io::Error::from_raw_os_error(libc::EINVAL));
        let request = |max_send_sge, max_inline_data| DciRequest {
            max_send_wr: 16,
            max_send_sge,
            max_inline_data,
            send_ops: None,
            streams: None,
            sq_sig_all: false,
        };
        // 30 entries with the atomics' overhead: 96 + 30 * 16 = 576 bytes, beyond 16 * 30 + 32.
        let params = plan_dci(&request(30, 0), &device).expect("left to libmlx5");
        let kind = creation_error(einval(), &params, &device);
        assert!(
            matches!(
                kind,
                CreateDcInitiatorErrorKind::RequestTooLarge {
                    max_send_sge: 30,
                    max_inline_data: 0,
                    request_bytes: 576,
                    guaranteed: 512,
                }
            ),
            "{kind:?}"
        );
        assert!(kind.to_string().contains("512 bytes fit every device"), "{kind}");
        // 500 bytes inline: 96 + (4 + 500, padded to 16) = 608.
        let params = plan_dci(&request(1, 500), &device).expect("left to libmlx5");
        let kind = creation_error(einval(), &params, &device);
        assert!(
            matches!(
                kind,
                CreateDcInitiatorErrorKind::RequestTooLarge { request_bytes: 608, .. }
            ),
            "{kind:?}"
        );
        // The request fits every device: the library refused something else.
        let params = plan_dci(&request(26, 0), &device).expect("planned");
        let kind = creation_error(einval(), &params, &device);
        assert!(matches!(kind, CreateDcInitiatorErrorKind::Ibverbs(_)), "{kind:?}");
        // EOPNOTSUPP (None): a device without DC.
        assert!(matches!(
            creation_error(None, &params, &device),
            CreateDcInitiatorErrorKind::DcNotSupportedByDevice
        ));
    }
}
