//! The attributes [`Mlx5DeviceContext::query_device`] returns: the parts of `struct
//! mlx5dv_context` ([`mlx5dv_query_device(3)`]) that DC and the BlueFlame choice read.
//!
//! Every optional part is valid only when its bit came back set in the returned `comp_mask`
//! (the mask is in/out: the crate requests every bit it decodes, the provider clears the ones it
//! did not fill). Each such part is an [`Option`] here: [`Some`] exactly when its bit came back
//! set.
//!
//! [`Mlx5DeviceContext::query_device`]: super::device_context::Mlx5DeviceContext::query_device
//! [`mlx5dv_query_device(3)`]: https://man7.org/linux/man-pages/man3/mlx5dv_query_device.3.html
use bitmask_enum::bitmask;
use rdma_mummy_sys::{ibv_odp_transport_cap_bits, mlx5dv_context, mlx5dv_context_comp_mask, mlx5dv_context_flags};

/// Flags of an mlx5 device context (`enum mlx5dv_context_flags`).
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

/// The optional parts of `struct mlx5dv_context` this crate requests and decodes
/// (`enum mlx5dv_context_comp_mask`); [`Mlx5DeviceAttributes::comp_mask`] is what came back.
#[bitmask(u64)]
#[bitmask_config(vec_debug, flags_iter)]
pub enum Mlx5ContextMask {
    /// Number of dynamic BlueFlame registers (`MLX5DV_CONTEXT_MASK_DYN_BFREGS`).
    DynamicBlueFlameRegisters = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_DYN_BFREGS.0 as _,
    /// On-demand paging capabilities of the DC transport (`MLX5DV_CONTEXT_MASK_DC_ODP_CAPS`).
    DcOnDemandPaging = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_DC_ODP_CAPS.0 as _,
    /// Number of LAG ports (`MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS`).
    NumLagPorts = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS.0 as _,
    /// DCI streams capabilities (`MLX5DV_CONTEXT_MASK_DCI_STREAMS`).
    DciStreams = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_DCI_STREAMS.0 as _,
    /// Maximum DC read/atomic depths, as responder and initiator
    /// (`MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM`).
    MaxDcReadAtomic = mlx5dv_context_comp_mask::MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM.0 as _,
}

/// Operations that support on-demand paging on a transport (`enum ibv_odp_transport_cap_bits`).
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

/// DCI streams capabilities (`struct mlx5dv_dci_streams_caps`): how many concurrent streams a
/// DC initiator can have, and the largest `log_num_errored` it may ask for.
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

/// The mlx5-specific attributes of a device, as returned by
/// [`Mlx5DeviceContext::query_device`](super::device_context::Mlx5DeviceContext::query_device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mlx5DeviceAttributes {
    version: u8,
    flags: Mlx5ContextFlags,
    comp_mask: Mlx5ContextMask,
    max_dynamic_bfregs: Option<u32>,
    dc_odp_caps: Option<OdpTransportCapabilities>,
    num_lag_ports: Option<u8>,
    dci_streams_caps: Option<DciStreamsCapabilities>,
    max_dc_rd_atom: Option<u64>,
    max_dc_init_rd_atom: Option<u64>,
}

impl Mlx5DeviceAttributes {
    /// Decodes the struct filled by `mlx5dv_query_device`: only the parts whose bits are set in
    /// `raw.comp_mask` are read.
    pub(crate) fn from_raw(raw: &mlx5dv_context) -> Self {
        let comp_mask = Mlx5ContextMask::from(raw.comp_mask);
        let has = |bit: Mlx5ContextMask| comp_mask.contains(bit);
        Mlx5DeviceAttributes {
            version: raw.version,
            flags: Mlx5ContextFlags::from(raw.flags),
            comp_mask,
            max_dynamic_bfregs: has(Mlx5ContextMask::DynamicBlueFlameRegisters).then_some(raw.max_dynamic_bfregs),
            dc_odp_caps: has(Mlx5ContextMask::DcOnDemandPaging)
                .then(|| OdpTransportCapabilities::from(raw.dc_odp_caps)),
            num_lag_ports: has(Mlx5ContextMask::NumLagPorts).then_some(raw.num_lag_ports),
            dci_streams_caps: has(Mlx5ContextMask::DciStreams).then_some(DciStreamsCapabilities {
                max_log_num_concurrent: raw.dci_streams_caps.max_log_num_concurent,
                max_log_num_errored: raw.dci_streams_caps.max_log_num_errored,
            }),
            max_dc_rd_atom: has(Mlx5ContextMask::MaxDcReadAtomic).then_some(raw.max_dc_rd_atom),
            max_dc_init_rd_atom: has(Mlx5ContextMask::MaxDcReadAtomic).then_some(raw.max_dc_init_rd_atom),
        }
    }

    /// The format version of the hardware structures that `mlx5dv.h` describes (`version`).
    pub fn version(&self) -> u8 {
        self.version
    }

    /// The context flags (`flags`).
    pub fn flags(&self) -> Mlx5ContextFlags {
        self.flags
    }

    /// The optional parts the provider filled (`comp_mask` as returned).
    pub fn comp_mask(&self) -> Mlx5ContextMask {
        self.comp_mask
    }

    /// Maximum number of dynamically allocated BlueFlame registers, when
    /// [`Mlx5ContextMask::DynamicBlueFlameRegisters`] came back set.
    pub fn max_dynamic_bfregs(&self) -> Option<u32> {
        self.max_dynamic_bfregs
    }

    /// The operations that support on-demand paging on the DC transport, when
    /// [`Mlx5ContextMask::DcOnDemandPaging`] came back set.
    pub fn dc_odp_caps(&self) -> Option<OdpTransportCapabilities> {
        self.dc_odp_caps
    }

    /// Number of ports in the LAG (link aggregation), when [`Mlx5ContextMask::NumLagPorts`] came
    /// back set.
    pub fn num_lag_ports(&self) -> Option<u8> {
        self.num_lag_ports
    }

    /// DCI streams capabilities, when [`Mlx5ContextMask::DciStreams`] came back set.
    pub fn dci_streams_caps(&self) -> Option<DciStreamsCapabilities> {
        self.dci_streams_caps
    }

    /// Outstanding RDMA reads and atomics per DC queue pair "as a requester" (libmlx5's
    /// `mlx5_init_context`: `1 << log_max_ra_req_dc`), when [`Mlx5ContextMask::MaxDcReadAtomic`]
    /// came back set (rdma-core 47 and later); 0 when the provider could not read it.
    pub fn max_dc_rd_atom(&self) -> Option<u64> {
        self.max_dc_rd_atom
    }

    /// Outstanding RDMA reads and atomics per DC queue pair "as a responder"
    /// (`1 << log_max_ra_res_dc`), yet the bound of a DC initiator's depth
    /// ([`DcCapabilities::max_dc_init_rd_atom`](super::dc_capabilities::DcCapabilities::max_dc_init_rd_atom));
    /// present and 0 as for [`max_dc_rd_atom`](Self::max_dc_rd_atom).
    pub fn max_dc_init_rd_atom(&self) -> Option<u64> {
        self.max_dc_init_rd_atom
    }
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use proptest::prelude::*;
    use rdma_mummy_sys::mlx5dv_context;

    use super::*;

    /// A raw query result with a distinct non-zero value in every decoded field, and `comp_mask`
    /// set as given.
    fn raw_context(comp_mask: u64, flags: u64) -> mlx5dv_context {
        // SAFETY: mlx5dv_context holds only integers and a raw pointer: all-zero bytes are valid.
        let mut raw: mlx5dv_context = unsafe { MaybeUninit::zeroed().assume_init() };
        raw.version = 1;
        raw.flags = flags;
        raw.comp_mask = comp_mask;
        raw.max_dynamic_bfregs = 1024;
        raw.dc_odp_caps = 0b1011;
        raw.num_lag_ports = 2;
        raw.dci_streams_caps.max_log_num_concurent = 4;
        raw.dci_streams_caps.max_log_num_errored = 3;
        raw.max_dc_rd_atom = 16;
        raw.max_dc_init_rd_atom = 8;
        raw
    }

    /// For each comp_mask bit, whether its part of the attributes is present.
    fn presence(attr: &Mlx5DeviceAttributes) -> Vec<(Mlx5ContextMask, bool)> {
        vec![
            (
                Mlx5ContextMask::DynamicBlueFlameRegisters,
                attr.max_dynamic_bfregs().is_some(),
            ),
            (Mlx5ContextMask::DcOnDemandPaging, attr.dc_odp_caps().is_some()),
            (Mlx5ContextMask::NumLagPorts, attr.num_lag_ports().is_some()),
            (Mlx5ContextMask::DciStreams, attr.dci_streams_caps().is_some()),
            (Mlx5ContextMask::MaxDcReadAtomic, attr.max_dc_rd_atom().is_some()),
            (Mlx5ContextMask::MaxDcReadAtomic, attr.max_dc_init_rd_atom().is_some()),
        ]
    }

    #[test]
    fn every_bit_set_decodes_every_part() {
        let raw = raw_context(Mlx5ContextMask::all_flags().bits(), 0);
        let attr = Mlx5DeviceAttributes::from_raw(&raw);
        assert_eq!(attr.version(), 1);
        assert_eq!(attr.comp_mask(), Mlx5ContextMask::all_flags());
        assert_eq!(attr.max_dynamic_bfregs(), Some(1024));
        assert_eq!(
            attr.dc_odp_caps(),
            Some(OdpTransportCapabilities::Send | OdpTransportCapabilities::Receive | OdpTransportCapabilities::Read)
        );
        assert_eq!(attr.num_lag_ports(), Some(2));
        assert_eq!(attr.dci_streams_caps(), Some(DciStreamsCapabilities::new(4, 3)));
        assert_eq!(attr.max_dc_rd_atom(), Some(16));
        assert_eq!(attr.max_dc_init_rd_atom(), Some(8));
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
    fn the_query_mask_requests_the_decoded_parts_only() {
        // DYN_BFREGS 1 << 4, DC_ODP_CAPS 1 << 7, NUM_LAG_PORTS 1 << 9, DCI_STREAMS 1 << 11,
        // MAX_DC_RD_ATOM 1 << 14 (mlx5dv.h).
        let bits = [4, 7, 9, 11, 14].iter().fold(0u64, |mask, bit| mask | 1 << bit);
        assert_eq!(Mlx5ContextMask::all_flags().bits(), bits);
        assert_eq!(Mlx5ContextMask::flags().count(), 5);
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
