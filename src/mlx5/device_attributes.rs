//! The attributes [`Mlx5DeviceContext::query_device`] returns: the decoded
//! `struct mlx5dv_context` of [`mlx5dv_query_device(3)`].
//!
//! Every optional part of the C struct is valid only when its bit came back set in the returned
//! `comp_mask` (the mask is in/out: the crate requests every bit it knows, the provider clears
//! the ones it did not fill). Each such part is an [`Option`] here: [`Some`] exactly when its bit
//! came back set.
//!
//! [`Mlx5DeviceContext::query_device`]: super::device_context::Mlx5DeviceContext::query_device
//! [`mlx5dv_query_device(3)`]: https://man7.org/linux/man-pages/man3/mlx5dv_query_device.3.html
use bitmask_enum::bitmask;
use rdma_mummy_sys::{
    ibv_odp_transport_cap_bits, mlx5dv_context, mlx5dv_context_comp_mask, mlx5dv_context_flags,
    MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_CW_MPLS_OVER_GRE, MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_CW_MPLS_OVER_UDP,
    MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_GENEVE, MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_GRE,
    MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_VXLAN,
};

/// Flags of an mlx5 device context (`enum mlx5dv_context_flags`), as returned in
/// [`Mlx5DeviceAttributes::flags`].
///
/// See [`mlx5dv_query_device(3)`](https://man7.org/linux/man-pages/man3/mlx5dv_query_device.3.html).
#[bitmask(u64)]
#[bitmask_config(vec_debug, flags_iter)]
pub enum Mlx5ContextFlags {
    /// CQE version 1 is used (`MLX5DV_CONTEXT_FLAGS_CQE_V1`); version 0 otherwise.
    CqeV1 = mlx5dv_context_flags::MLX5DV_CONTEXT_FLAGS_CQE_V1.0 as _,
    /// Multi-packet work queue elements are allowed (`MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED`).
    MultiPacketWqeAllowed = mlx5dv_context_flags::MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED.0 as _,
    /// Enhanced multi-packet work queue elements are supported
    /// (`MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW`).
    EnhancedMultiPacketWqe = mlx5dv_context_flags::MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW.0 as _,
    /// Compression of 128-byte CQEs is supported (`MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP`).
    Cqe128ByteCompression = mlx5dv_context_flags::MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP.0 as _,
    /// Padding of 128-byte CQEs is supported (`MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD`).
    Cqe128BytePadding = mlx5dv_context_flags::MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD.0 as _,
    /// Packet-based credit mode is supported for RC queue pairs
    /// (`MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE`).
    PacketBasedCreditMode = mlx5dv_context_flags::MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE.0 as _,
    /// Completion timestamps are in real time (nanoseconds) rather than free-running clock ticks
    /// (`MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS`).
    RealTimeTimestamp = mlx5dv_context_flags::MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS.0 as _,
    /// The device has BlueFlame registers (`MLX5DV_CONTEXT_FLAGS_BLUEFLAME`: libmlx5's
    /// `bf_reg_size` > 0, whatever `MLX5_SHUT_UP_BF` says). Reported since rdma-core 58: clear
    /// from an older libmlx5 whatever the device has.
    BlueFlame = mlx5dv_context_flags::MLX5DV_CONTEXT_FLAGS_BLUEFLAME.0 as _,
}

/// Which optional parts of `struct mlx5dv_context` are requested from, and were filled by,
/// [`mlx5dv_query_device(3)`](https://man7.org/linux/man-pages/man3/mlx5dv_query_device.3.html)
/// (`enum mlx5dv_context_comp_mask`).
///
/// The query requests [`Mlx5ContextMask::all_flags`]; [`Mlx5DeviceAttributes::comp_mask`] is what
/// came back.
#[bitmask(u64)]
#[bitmask_config(vec_debug, flags_iter)]
pub enum Mlx5ContextMask {
    /// CQE compression capabilities (`MLX5DV_CONTEXT_MASK_CQE_COMPRESION`).
    CqeCompression = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_CQE_COMPRESION.0 as _,
    /// Software-parsing capabilities (`MLX5DV_CONTEXT_MASK_SWP`).
    SoftwareParsing = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_SWP.0 as _,
    /// Striding receive queue capabilities (`MLX5DV_CONTEXT_MASK_STRIDING_RQ`).
    StridingReceiveQueue = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_STRIDING_RQ.0 as _,
    /// Tunnel offload capabilities (`MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS`).
    TunnelOffloads = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS.0 as _,
    /// Number of dynamic BlueFlame registers (`MLX5DV_CONTEXT_MASK_DYN_BFREGS`).
    DynamicBlueFlameRegisters = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_DYN_BFREGS.0 as _,
    /// Clock-info update period (`MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE`).
    ClockInfoUpdate = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE.0 as _,
    /// Flow-action flags (`MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS`).
    FlowActionFlags = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS.0 as _,
    /// On-demand paging capabilities of the DC transport (`MLX5DV_CONTEXT_MASK_DC_ODP_CAPS`).
    DcOnDemandPaging = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_DC_ODP_CAPS.0 as _,
    /// The HCA core-clock page mapping (`MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK`).
    HcaCoreClock = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK.0 as _,
    /// Number of LAG ports (`MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS`).
    NumLagPorts = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS.0 as _,
    /// Signature offload capabilities (`MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD`).
    SignatureOffload = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD.0 as _,
    /// DCI streams capabilities (`MLX5DV_CONTEXT_MASK_DCI_STREAMS`).
    DciStreams = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_DCI_STREAMS.0 as _,
    /// Maximum length of a memcpy work request (`MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH`).
    WrMemcpyLength = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH.0 as _,
    /// Crypto offload capabilities (`MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD`).
    CryptoOffload = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD.0 as _,
    /// Maximum DC read/atomic depths, as responder and initiator
    /// (`MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM`).
    MaxDcReadAtomic = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM.0 as _,
    /// Metadata register C0 value and mask (`MLX5DV_CONTEXT_MASK_REG_C0`).
    RegisterC0 = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_REG_C0.0 as _,
    /// Out-of-order receive work request capabilities (`MLX5DV_CONTEXT_MASK_OOO_RECV_WRS`).
    OutOfOrderReceive = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_OOO_RECV_WRS.0 as _,
}

/// Tunnel offloads of raw packet queue pairs (`enum mlx5dv_tunnel_offloads`), as returned in
/// [`Mlx5DeviceAttributes::tunnel_offloads_caps`].
#[bitmask(u32)]
#[bitmask_config(vec_debug, flags_iter)]
pub enum TunnelOffloads {
    /// VXLAN (`MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_VXLAN`).
    Vxlan = MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_VXLAN as _,
    /// GRE (`MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_GRE`).
    Gre = MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_GRE as _,
    /// GENEVE (`MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_GENEVE`).
    Geneve = MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_GENEVE as _,
    /// Control-word MPLS over GRE (`MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_CW_MPLS_OVER_GRE`).
    ControlWordMplsOverGre = MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_CW_MPLS_OVER_GRE as _,
    /// Control-word MPLS over UDP (`MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_CW_MPLS_OVER_UDP`).
    ControlWordMplsOverUdp = MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_CW_MPLS_OVER_UDP as _,
}

/// Operations that support on-demand paging on a transport (`enum ibv_odp_transport_cap_bits`),
/// as returned for the DC transport in [`Mlx5DeviceAttributes::dc_odp_caps`].
#[bitmask(u32)]
#[bitmask_config(vec_debug, flags_iter)]
pub enum OdpTransportCapabilities {
    /// Send (`IBV_ODP_SUPPORT_SEND`).
    Send = ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_SEND.0 as _,
    /// Receive (`IBV_ODP_SUPPORT_RECV`).
    Receive = ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_RECV.0 as _,
    /// RDMA write (`IBV_ODP_SUPPORT_WRITE`).
    Write = ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_WRITE.0 as _,
    /// RDMA read (`IBV_ODP_SUPPORT_READ`).
    Read = ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_READ.0 as _,
    /// Atomic operations (`IBV_ODP_SUPPORT_ATOMIC`).
    Atomic = ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_ATOMIC.0 as _,
    /// Receive through a shared receive queue (`IBV_ODP_SUPPORT_SRQ_RECV`).
    SharedReceiveQueueReceive = ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_SRQ_RECV.0 as _,
    /// Flush (`IBV_ODP_SUPPORT_FLUSH`).
    Flush = ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_FLUSH.0 as _,
    /// Atomic write (`IBV_ODP_SUPPORT_ATOMIC_WRITE`).
    AtomicWrite = ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_ATOMIC_WRITE.0 as _,
}

/// CQE compression capabilities (`struct mlx5dv_cqe_comp_caps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct CqeCompressionCapabilities {
    /// Maximum number of CQEs in one compression session (`max_num`).
    pub max_num: u32,
    /// Supported compressed CQE formats, a mask of `enum mlx5dv_cqe_comp_res_format`
    /// (`supported_format`).
    pub supported_format: u32,
}

/// Software-parsing capabilities (`struct mlx5dv_sw_parsing_caps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SoftwareParsingCapabilities {
    /// Supported software-parsing offloads, a mask of `enum mlx5dv_sw_parsing_offloads`
    /// (`sw_parsing_offloads`).
    pub sw_parsing_offloads: u32,
    /// Queue pair types that support them, a mask of `1 << ibv_qp_type` (`supported_qpts`).
    pub supported_qpts: u32,
}

/// Striding receive queue capabilities (`struct mlx5dv_striding_rq_caps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct StridingReceiveQueueCapabilities {
    /// Minimum log2 of the stride size in bytes.
    pub min_single_stride_log_num_of_bytes: u32,
    /// Maximum log2 of the stride size in bytes.
    pub max_single_stride_log_num_of_bytes: u32,
    /// Minimum log2 of the number of strides per work queue element.
    pub min_single_wqe_log_num_of_strides: u32,
    /// Maximum log2 of the number of strides per work queue element.
    pub max_single_wqe_log_num_of_strides: u32,
    /// Queue pair types that support striding receive queues, a mask of `1 << ibv_qp_type`.
    pub supported_qpts: u32,
}

/// Signature offload capabilities (`struct mlx5dv_sig_caps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SignatureCapabilities {
    /// Supported block sizes, a mask of `enum mlx5dv_block_size_caps`.
    pub block_size: u64,
    /// Supported block protections, a mask of `enum mlx5dv_sig_prot_caps`.
    pub block_prot: u32,
    /// Supported T10-DIF guard types, a mask of `enum mlx5dv_sig_t10dif_bg_caps`.
    pub t10dif_bg: u16,
    /// Supported CRC types, a mask of `enum mlx5dv_sig_crc_type_caps`.
    pub crc_type: u16,
}

/// DCI streams capabilities (`struct mlx5dv_dci_streams_caps`): how many concurrent streams a
/// DC initiator can have, and the largest `log_num_errored` it may ask for (2^`log_num_errored`
/// streams in error move it to ERR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DciStreamsCapabilities {
    /// Maximum log2 of the number of concurrent streams (`max_log_num_concurent`).
    pub max_log_num_concurrent: u8,
    /// Maximum log2 of the number of errored streams that move a DCI to ERR
    /// (`max_log_num_errored`).
    pub max_log_num_errored: u8,
}

impl DciStreamsCapabilities {
    /// Capabilities of up to 2^`max_log_num_concurrent` concurrent streams, 2^`max_log_num_errored`
    /// of them in error moving a DCI to ERR: what a device reports, written by hand.
    pub const fn new(max_log_num_concurrent: u8, max_log_num_errored: u8) -> Self {
        Self {
            max_log_num_concurrent,
            max_log_num_errored,
        }
    }
}

/// Crypto offload capabilities (`struct mlx5dv_crypto_caps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct CryptoCapabilities {
    /// Non-zero when some crypto self tests failed (`failed_selftests`).
    pub failed_selftests: u16,
    /// Supported crypto engines, a mask of `enum mlx5dv_crypto_engines_caps`.
    pub crypto_engines: u8,
    /// Supported wrapped-key import methods, a mask of
    /// `enum mlx5dv_crypto_wrapped_import_method_caps`.
    pub wrapped_import_method: u8,
    /// Log2 of the maximum number of data encryption keys.
    pub log_max_num_deks: u8,
    /// Crypto state flags, a mask of `enum mlx5dv_crypto_caps_flags`.
    pub flags: u32,
}

/// The metadata register C0 value and mask (`struct mlx5dv_reg`), used to match traffic from
/// this function in flow steering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RegisterC0 {
    /// The value.
    pub value: u32,
    /// The mask of the valid bits of [`value`](Self::value).
    pub mask: u32,
}

/// Out-of-order receive work request capabilities (`struct mlx5dv_ooo_recv_wrs_caps`): the
/// maximum number of receive work requests that may complete out of order, per transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct OutOfOrderReceiveCapabilities {
    /// On RC queue pairs.
    pub max_rc: u32,
    /// On XRC queue pairs.
    pub max_xrc: u32,
    /// On DC targets.
    pub max_dct: u32,
    /// On UD queue pairs.
    pub max_ud: u32,
    /// On UC queue pairs.
    pub max_uc: u32,
}

/// The mlx5-specific attributes of a device, as returned by
/// [`mlx5dv_query_device(3)`](https://man7.org/linux/man-pages/man3/mlx5dv_query_device.3.html)
/// through [`Mlx5DeviceContext::query_device`].
///
/// Each optional part is [`Some`] exactly when its [`Mlx5ContextMask`] bit came back set in
/// [`comp_mask`](Self::comp_mask).
///
/// [`Mlx5DeviceContext::query_device`]: super::device_context::Mlx5DeviceContext::query_device
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mlx5DeviceAttributes {
    version: u8,
    flags: Mlx5ContextFlags,
    comp_mask: Mlx5ContextMask,
    cqe_comp_caps: Option<CqeCompressionCapabilities>,
    sw_parsing_caps: Option<SoftwareParsingCapabilities>,
    striding_rq_caps: Option<StridingReceiveQueueCapabilities>,
    tunnel_offloads_caps: Option<TunnelOffloads>,
    max_dynamic_bfregs: Option<u32>,
    max_clock_info_update_nsec: Option<u64>,
    flow_action_flags: Option<u32>,
    dc_odp_caps: Option<OdpTransportCapabilities>,
    hca_core_clock_mapped: Option<bool>,
    num_lag_ports: Option<u8>,
    sig_caps: Option<SignatureCapabilities>,
    dci_streams_caps: Option<DciStreamsCapabilities>,
    max_wr_memcpy_length: Option<usize>,
    crypto_caps: Option<CryptoCapabilities>,
    max_dc_rd_atom: Option<u64>,
    max_dc_init_rd_atom: Option<u64>,
    reg_c0: Option<RegisterC0>,
    ooo_recv_wrs_caps: Option<OutOfOrderReceiveCapabilities>,
}

impl Mlx5DeviceAttributes {
    /// Decodes the struct filled by `mlx5dv_query_device`: only the parts whose bits are set in
    /// `raw.comp_mask` are read. The raw `hca_core_clock` pointer is not kept (only whether it is
    /// mapped), so the result is a plain value that is `Send` and `Sync`.
    pub(crate) fn from_raw(raw: &mlx5dv_context) -> Self {
        let comp_mask = Mlx5ContextMask::from(raw.comp_mask);
        let has = |bit: Mlx5ContextMask| comp_mask.contains(bit);
        Mlx5DeviceAttributes {
            version: raw.version,
            flags: Mlx5ContextFlags::from(raw.flags),
            comp_mask,
            cqe_comp_caps: has(Mlx5ContextMask::CqeCompression).then_some(CqeCompressionCapabilities {
                max_num: raw.cqe_comp_caps.max_num,
                supported_format: raw.cqe_comp_caps.supported_format,
            }),
            sw_parsing_caps: has(Mlx5ContextMask::SoftwareParsing).then_some(SoftwareParsingCapabilities {
                sw_parsing_offloads: raw.sw_parsing_caps.sw_parsing_offloads,
                supported_qpts: raw.sw_parsing_caps.supported_qpts,
            }),
            striding_rq_caps: has(Mlx5ContextMask::StridingReceiveQueue).then(|| {
                let caps = &raw.striding_rq_caps;
                StridingReceiveQueueCapabilities {
                    min_single_stride_log_num_of_bytes: caps.min_single_stride_log_num_of_bytes,
                    max_single_stride_log_num_of_bytes: caps.max_single_stride_log_num_of_bytes,
                    min_single_wqe_log_num_of_strides: caps.min_single_wqe_log_num_of_strides,
                    max_single_wqe_log_num_of_strides: caps.max_single_wqe_log_num_of_strides,
                    supported_qpts: caps.supported_qpts,
                }
            }),
            tunnel_offloads_caps: has(Mlx5ContextMask::TunnelOffloads)
                .then(|| TunnelOffloads::from(raw.tunnel_offloads_caps)),
            max_dynamic_bfregs: has(Mlx5ContextMask::DynamicBlueFlameRegisters).then_some(raw.max_dynamic_bfregs),
            max_clock_info_update_nsec: has(Mlx5ContextMask::ClockInfoUpdate).then_some(raw.max_clock_info_update_nsec),
            flow_action_flags: has(Mlx5ContextMask::FlowActionFlags).then_some(raw.flow_action_flags),
            dc_odp_caps: has(Mlx5ContextMask::DcOnDemandPaging)
                .then(|| OdpTransportCapabilities::from(raw.dc_odp_caps)),
            hca_core_clock_mapped: has(Mlx5ContextMask::HcaCoreClock).then_some(!raw.hca_core_clock.is_null()),
            num_lag_ports: has(Mlx5ContextMask::NumLagPorts).then_some(raw.num_lag_ports),
            sig_caps: has(Mlx5ContextMask::SignatureOffload).then_some(SignatureCapabilities {
                block_size: raw.sig_caps.block_size,
                block_prot: raw.sig_caps.block_prot,
                t10dif_bg: raw.sig_caps.t10dif_bg,
                crc_type: raw.sig_caps.crc_type,
            }),
            dci_streams_caps: has(Mlx5ContextMask::DciStreams).then_some(DciStreamsCapabilities {
                max_log_num_concurrent: raw.dci_streams_caps.max_log_num_concurent,
                max_log_num_errored: raw.dci_streams_caps.max_log_num_errored,
            }),
            max_wr_memcpy_length: has(Mlx5ContextMask::WrMemcpyLength).then_some(raw.max_wr_memcpy_length),
            crypto_caps: has(Mlx5ContextMask::CryptoOffload).then_some(CryptoCapabilities {
                failed_selftests: raw.crypto_caps.failed_selftests,
                crypto_engines: raw.crypto_caps.crypto_engines,
                wrapped_import_method: raw.crypto_caps.wrapped_import_method,
                log_max_num_deks: raw.crypto_caps.log_max_num_deks,
                flags: raw.crypto_caps.flags,
            }),
            max_dc_rd_atom: has(Mlx5ContextMask::MaxDcReadAtomic).then_some(raw.max_dc_rd_atom),
            max_dc_init_rd_atom: has(Mlx5ContextMask::MaxDcReadAtomic).then_some(raw.max_dc_init_rd_atom),
            reg_c0: has(Mlx5ContextMask::RegisterC0).then_some(RegisterC0 {
                value: raw.reg_c0.value,
                mask: raw.reg_c0.mask,
            }),
            ooo_recv_wrs_caps: has(Mlx5ContextMask::OutOfOrderReceive).then_some(OutOfOrderReceiveCapabilities {
                max_rc: raw.ooo_recv_wrs_caps.max_rc,
                max_xrc: raw.ooo_recv_wrs_caps.max_xrc,
                max_dct: raw.ooo_recv_wrs_caps.max_dct,
                max_ud: raw.ooo_recv_wrs_caps.max_ud,
                max_uc: raw.ooo_recv_wrs_caps.max_uc,
            }),
        }
    }

    /// The format version of the hardware structures that `mlx5dv.h` describes (`version`).
    pub fn version(&self) -> u8 {
        self.version
    }

    /// The context flags (`flags`): CQE version, multi-packet WQE, CQE compression and padding,
    /// credit mode, timestamp format and BlueFlame.
    pub fn flags(&self) -> Mlx5ContextFlags {
        self.flags
    }

    /// The optional parts the provider filled (`comp_mask` as returned).
    pub fn comp_mask(&self) -> Mlx5ContextMask {
        self.comp_mask
    }

    /// CQE compression capabilities, when [`Mlx5ContextMask::CqeCompression`] came back set.
    pub fn cqe_comp_caps(&self) -> Option<CqeCompressionCapabilities> {
        self.cqe_comp_caps
    }

    /// Software-parsing capabilities, when [`Mlx5ContextMask::SoftwareParsing`] came back set.
    pub fn sw_parsing_caps(&self) -> Option<SoftwareParsingCapabilities> {
        self.sw_parsing_caps
    }

    /// Striding receive queue capabilities, when [`Mlx5ContextMask::StridingReceiveQueue`] came
    /// back set.
    pub fn striding_rq_caps(&self) -> Option<StridingReceiveQueueCapabilities> {
        self.striding_rq_caps
    }

    /// Tunnel offloads of raw packet queue pairs, when [`Mlx5ContextMask::TunnelOffloads`] came
    /// back set.
    pub fn tunnel_offloads_caps(&self) -> Option<TunnelOffloads> {
        self.tunnel_offloads_caps
    }

    /// Maximum number of dynamically allocated BlueFlame registers, when
    /// [`Mlx5ContextMask::DynamicBlueFlameRegisters`] came back set.
    pub fn max_dynamic_bfregs(&self) -> Option<u32> {
        self.max_dynamic_bfregs
    }

    /// Maximum period, in nanoseconds, between updates of the clock info page, when
    /// [`Mlx5ContextMask::ClockInfoUpdate`] came back set.
    pub fn max_clock_info_update_nsec(&self) -> Option<u64> {
        self.max_clock_info_update_nsec
    }

    /// Flow-action flags, a mask of `enum mlx5dv_flow_action_cap_flags` (ESP AES-GCM offloads),
    /// when [`Mlx5ContextMask::FlowActionFlags`] came back set.
    pub fn flow_action_flags(&self) -> Option<u32> {
        self.flow_action_flags
    }

    /// The operations that support on-demand paging on the DC transport, when
    /// [`Mlx5ContextMask::DcOnDemandPaging`] came back set.
    pub fn dc_odp_caps(&self) -> Option<OdpTransportCapabilities> {
        self.dc_odp_caps
    }

    /// Whether the HCA core-clock page is mapped into the process (`hca_core_clock` is not
    /// NULL), when [`Mlx5ContextMask::HcaCoreClock`] came back set.
    pub fn hca_core_clock_mapped(&self) -> Option<bool> {
        self.hca_core_clock_mapped
    }

    /// Number of ports in the LAG (link aggregation), when [`Mlx5ContextMask::NumLagPorts`] came
    /// back set.
    pub fn num_lag_ports(&self) -> Option<u8> {
        self.num_lag_ports
    }

    /// Signature offload capabilities, when [`Mlx5ContextMask::SignatureOffload`] came back set.
    pub fn sig_caps(&self) -> Option<SignatureCapabilities> {
        self.sig_caps
    }

    /// DCI streams capabilities, when [`Mlx5ContextMask::DciStreams`] came back set.
    pub fn dci_streams_caps(&self) -> Option<DciStreamsCapabilities> {
        self.dci_streams_caps
    }

    /// Maximum length of a memcpy work request in bytes, when [`Mlx5ContextMask::WrMemcpyLength`]
    /// came back set.
    pub fn max_wr_memcpy_length(&self) -> Option<usize> {
        self.max_wr_memcpy_length
    }

    /// Crypto offload capabilities, when [`Mlx5ContextMask::CryptoOffload`] came back set.
    pub fn crypto_caps(&self) -> Option<CryptoCapabilities> {
        self.crypto_caps
    }

    /// "Maximum number of outstanding RDMA read/atomic per DC QP as a requester"
    /// ([mlx5dv_query_device(3)](https://man7.org/linux/man-pages/man3/mlx5dv_query_device.3.html)),
    /// when [`Mlx5ContextMask::MaxDcReadAtomic`] came back set. libmlx5 reads it as
    /// `1 << log_max_ra_req_dc` of the device's capabilities (`mlx5_init_context` in `verbs.c`).
    /// A DC initiator's depth is at most this and [`max_dc_init_rd_atom`](Self::max_dc_init_rd_atom)
    /// ([`DcInitiator::max_read_atomic`](crate::mlx5::dc::initiator::DcInitiator::max_read_atomic)).
    ///
    /// rdma-core reports this from version 47 on; a value of 0 means the provider could not
    /// read it.
    pub fn max_dc_rd_atom(&self) -> Option<u64> {
        self.max_dc_rd_atom
    }

    /// "Maximum number of outstanding RDMA read/atomic per DC QP as a responder"
    /// ([mlx5dv_query_device(3)](https://man7.org/linux/man-pages/man3/mlx5dv_query_device.3.html)),
    /// when [`Mlx5ContextMask::MaxDcReadAtomic`] came back set. libmlx5 reads it as
    /// `1 << log_max_ra_res_dc`, and that is also the bound the kernel puts on a DC initiator's
    /// `max_rd_atomic` (`validate_rd_atomic` in mlx5_ib's `qp.c` compares a DCI's
    /// `max_rd_atomic` with `1 << log_max_ra_res_dc`, `EINVAL` above it): so, whatever the
    /// label, a DC initiator's depth is capped by it, and by [`max_dc_rd_atom`](Self::max_dc_rd_atom)
    /// ([`DcInitiator::max_read_atomic`](crate::mlx5::dc::initiator::DcInitiator::max_read_atomic)).
    ///
    /// rdma-core reports this from version 47 on; a value of 0 means the provider could not
    /// read it.
    pub fn max_dc_init_rd_atom(&self) -> Option<u64> {
        self.max_dc_init_rd_atom
    }

    /// The metadata register C0 value and mask, when [`Mlx5ContextMask::RegisterC0`] came back
    /// set.
    pub fn reg_c0(&self) -> Option<RegisterC0> {
        self.reg_c0
    }

    /// Out-of-order receive capabilities, when [`Mlx5ContextMask::OutOfOrderReceive`] came back
    /// set.
    pub fn ooo_recv_wrs_caps(&self) -> Option<OutOfOrderReceiveCapabilities> {
        self.ooo_recv_wrs_caps
    }
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use proptest::prelude::*;
    use rdma_mummy_sys::mlx5dv_context;

    use super::*;

    /// A raw query result with a distinct non-zero value in every field, and `comp_mask` set
    /// as given.
    fn raw_context(comp_mask: u64, flags: u64) -> mlx5dv_context {
        // SAFETY: mlx5dv_context holds only integers and a raw pointer: all-zero bytes are valid.
        let mut raw: mlx5dv_context = unsafe { MaybeUninit::zeroed().assume_init() };
        raw.version = 1;
        raw.flags = flags;
        raw.comp_mask = comp_mask;
        raw.cqe_comp_caps.max_num = 64;
        raw.cqe_comp_caps.supported_format = 0b11;
        raw.sw_parsing_caps.sw_parsing_offloads = 0b101;
        raw.sw_parsing_caps.supported_qpts = 1 << 8;
        raw.striding_rq_caps.min_single_stride_log_num_of_bytes = 6;
        raw.striding_rq_caps.max_single_stride_log_num_of_bytes = 13;
        raw.striding_rq_caps.min_single_wqe_log_num_of_strides = 3;
        raw.striding_rq_caps.max_single_wqe_log_num_of_strides = 16;
        raw.striding_rq_caps.supported_qpts = 1 << 8;
        raw.tunnel_offloads_caps = 0b111;
        raw.max_dynamic_bfregs = 1024;
        raw.max_clock_info_update_nsec = 1_000_000;
        raw.flow_action_flags = 0b1;
        raw.dc_odp_caps = 0b1011;
        raw.hca_core_clock = std::ptr::NonNull::<u64>::dangling().as_ptr().cast();
        raw.num_lag_ports = 2;
        raw.sig_caps.block_size = 0b11;
        raw.sig_caps.block_prot = 0b10;
        raw.sig_caps.t10dif_bg = 0b1;
        raw.sig_caps.crc_type = 0b111;
        raw.dci_streams_caps.max_log_num_concurent = 4;
        raw.dci_streams_caps.max_log_num_errored = 3;
        raw.max_wr_memcpy_length = 1 << 20;
        raw.crypto_caps.failed_selftests = 0;
        raw.crypto_caps.crypto_engines = 0b1;
        raw.crypto_caps.wrapped_import_method = 0b1;
        raw.crypto_caps.log_max_num_deks = 20;
        raw.crypto_caps.flags = 0b1;
        raw.max_dc_rd_atom = 16;
        raw.max_dc_init_rd_atom = 8;
        raw.reg_c0.value = 0x1234;
        raw.reg_c0.mask = 0xffff;
        raw.ooo_recv_wrs_caps.max_rc = 1;
        raw.ooo_recv_wrs_caps.max_xrc = 2;
        raw.ooo_recv_wrs_caps.max_dct = 3;
        raw.ooo_recv_wrs_caps.max_ud = 4;
        raw.ooo_recv_wrs_caps.max_uc = 5;
        raw
    }

    /// For each comp_mask bit, whether its part of the attributes is present.
    fn presence(attr: &Mlx5DeviceAttributes) -> Vec<(Mlx5ContextMask, bool)> {
        vec![
            (Mlx5ContextMask::CqeCompression, attr.cqe_comp_caps().is_some()),
            (Mlx5ContextMask::SoftwareParsing, attr.sw_parsing_caps().is_some()),
            (Mlx5ContextMask::StridingReceiveQueue, attr.striding_rq_caps().is_some()),
            (Mlx5ContextMask::TunnelOffloads, attr.tunnel_offloads_caps().is_some()),
            (
                Mlx5ContextMask::DynamicBlueFlameRegisters,
                attr.max_dynamic_bfregs().is_some(),
            ),
            (
                Mlx5ContextMask::ClockInfoUpdate,
                attr.max_clock_info_update_nsec().is_some(),
            ),
            (Mlx5ContextMask::FlowActionFlags, attr.flow_action_flags().is_some()),
            (Mlx5ContextMask::DcOnDemandPaging, attr.dc_odp_caps().is_some()),
            (Mlx5ContextMask::HcaCoreClock, attr.hca_core_clock_mapped().is_some()),
            (Mlx5ContextMask::NumLagPorts, attr.num_lag_ports().is_some()),
            (Mlx5ContextMask::SignatureOffload, attr.sig_caps().is_some()),
            (Mlx5ContextMask::DciStreams, attr.dci_streams_caps().is_some()),
            (Mlx5ContextMask::WrMemcpyLength, attr.max_wr_memcpy_length().is_some()),
            (Mlx5ContextMask::CryptoOffload, attr.crypto_caps().is_some()),
            (Mlx5ContextMask::MaxDcReadAtomic, attr.max_dc_rd_atom().is_some()),
            (Mlx5ContextMask::MaxDcReadAtomic, attr.max_dc_init_rd_atom().is_some()),
            (Mlx5ContextMask::RegisterC0, attr.reg_c0().is_some()),
            (Mlx5ContextMask::OutOfOrderReceive, attr.ooo_recv_wrs_caps().is_some()),
        ]
    }

    #[test]
    fn every_bit_set_decodes_every_part() {
        let raw = raw_context(Mlx5ContextMask::all_flags().bits(), 0);
        let attr = Mlx5DeviceAttributes::from_raw(&raw);
        assert_eq!(attr.version(), 1);
        assert_eq!(attr.comp_mask(), Mlx5ContextMask::all_flags());
        assert_eq!(
            attr.cqe_comp_caps(),
            Some(CqeCompressionCapabilities {
                max_num: 64,
                supported_format: 0b11
            })
        );
        assert_eq!(
            attr.sw_parsing_caps(),
            Some(SoftwareParsingCapabilities {
                sw_parsing_offloads: 0b101,
                supported_qpts: 1 << 8
            })
        );
        assert_eq!(
            attr.striding_rq_caps(),
            Some(StridingReceiveQueueCapabilities {
                min_single_stride_log_num_of_bytes: 6,
                max_single_stride_log_num_of_bytes: 13,
                min_single_wqe_log_num_of_strides: 3,
                max_single_wqe_log_num_of_strides: 16,
                supported_qpts: 1 << 8,
            })
        );
        assert_eq!(
            attr.tunnel_offloads_caps(),
            Some(TunnelOffloads::Vxlan | TunnelOffloads::Gre | TunnelOffloads::Geneve)
        );
        assert_eq!(attr.max_dynamic_bfregs(), Some(1024));
        assert_eq!(attr.max_clock_info_update_nsec(), Some(1_000_000));
        assert_eq!(attr.flow_action_flags(), Some(1));
        assert_eq!(
            attr.dc_odp_caps(),
            Some(OdpTransportCapabilities::Send | OdpTransportCapabilities::Receive | OdpTransportCapabilities::Read)
        );
        assert_eq!(attr.hca_core_clock_mapped(), Some(true));
        assert_eq!(attr.num_lag_ports(), Some(2));
        assert_eq!(
            attr.sig_caps(),
            Some(SignatureCapabilities {
                block_size: 0b11,
                block_prot: 0b10,
                t10dif_bg: 1,
                crc_type: 0b111
            })
        );
        assert_eq!(
            attr.dci_streams_caps(),
            Some(DciStreamsCapabilities {
                max_log_num_concurrent: 4,
                max_log_num_errored: 3
            })
        );
        assert_eq!(attr.max_wr_memcpy_length(), Some(1 << 20));
        assert_eq!(
            attr.crypto_caps(),
            Some(CryptoCapabilities {
                failed_selftests: 0,
                crypto_engines: 1,
                wrapped_import_method: 1,
                log_max_num_deks: 20,
                flags: 1,
            })
        );
        assert_eq!(attr.max_dc_rd_atom(), Some(16));
        assert_eq!(attr.max_dc_init_rd_atom(), Some(8));
        assert_eq!(
            attr.reg_c0(),
            Some(RegisterC0 {
                value: 0x1234,
                mask: 0xffff
            })
        );
        assert_eq!(
            attr.ooo_recv_wrs_caps(),
            Some(OutOfOrderReceiveCapabilities {
                max_rc: 1,
                max_xrc: 2,
                max_dct: 3,
                max_ud: 4,
                max_uc: 5
            })
        );
    }

    #[test]
    fn no_bit_returned_decodes_no_part() {
        let attr = Mlx5DeviceAttributes::from_raw(&raw_context(0, 0));
        assert!(attr.comp_mask().is_none());
        for (bit, present) in presence(&attr) {
            assert!(!present, "{bit:?} was not returned but its part is present");
        }
    }

    #[test]
    fn hca_core_clock_null_is_not_mapped() {
        let mut raw = raw_context(Mlx5ContextMask::HcaCoreClock.bits(), 0);
        raw.hca_core_clock = std::ptr::null_mut();
        assert_eq!(
            Mlx5DeviceAttributes::from_raw(&raw).hca_core_clock_mapped(),
            Some(false)
        );
    }

    #[test]
    fn flags_decode_and_debug_names_the_set_bits() {
        let raw = raw_context(0, 0b1_0000_0001);
        let flags = Mlx5DeviceAttributes::from_raw(&raw).flags();
        assert_eq!(flags, Mlx5ContextFlags::CqeV1 | Mlx5ContextFlags::BlueFlame);
        assert_eq!(format!("{flags:?}"), "Mlx5ContextFlags[CqeV1, BlueFlame]");
        assert_eq!(format!("{:?}", Mlx5ContextFlags::none()), "Mlx5ContextFlags[]");
        assert_eq!(
            Mlx5ContextFlags::all_flags().bits(),
            0b1_1111_1101,
            "every flag but OBSOLETE"
        );
    }

    #[test]
    fn the_query_mask_requests_every_bit_the_binding_knows() {
        assert_eq!(Mlx5ContextMask::all_flags().bits(), (1 << 17) - 1);
        assert_eq!(Mlx5ContextMask::flags().count(), 17);
    }

    proptest! {
        #[test]
        fn a_part_is_present_exactly_when_its_bit_came_back(comp_mask in any::<u64>(), flags in any::<u64>()) {
            let attr = Mlx5DeviceAttributes::from_raw(&raw_context(comp_mask, flags));
            prop_assert_eq!(attr.comp_mask().bits(), comp_mask);
            prop_assert_eq!(attr.flags().bits(), flags);
            for (bit, present) in presence(&attr) {
                prop_assert_eq!(present, comp_mask & bit.bits() != 0, "{:?}", bit);
            }
        }

        #[test]
        fn flags_debug_names_exactly_the_set_known_flags(flags in any::<u64>()) {
            let debug = format!("{:?}", Mlx5ContextFlags::from(flags));
            for (name, flag) in Mlx5ContextFlags::flags() {
                prop_assert_eq!(debug.contains(name), flags & flag.bits() != 0, "{}", name);
            }
        }
    }
}
