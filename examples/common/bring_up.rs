//! Bringing an RC or UD queue pair to RTS (RESET → INIT → RTR → RTS) with
//! `SharedReceiveQueuePair::modify`, using rdma-core's `ibv_rc_pingpong` and `ibv_ud_pingpong`
//! attributes. This is an application's policy, shared by the examples and tests that include
//! this file with `#[path]`.
use std::io;
use std::net::Ipv6Addr;

use rdma_mummy_sys::IBV_LINK_LAYER_ETHERNET;
use sideway::ibverbs::address::Gid;
use sideway::ibverbs::device_context::{DeviceContext, Mtu, PortAttr, QueryGidError};
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, QueuePairState};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::address::AddressHandleAttribute;
use sideway_ext::ibverbs::address_handle::DEFAULT_HOP_LIMIT;
use sideway_ext::ibverbs::post_send_guard::{ReliableConnection, UnreliableDatagram};
use sideway_ext::ibverbs::queue_pair::{QueuePairAttribute, SharedReceiveQueuePair};

/// The largest queue pair number: 24 bits.
pub const MAX_QP_NUMBER: u32 = 0xff_ffff;
/// The largest packet sequence number: 24 bits.
pub const MAX_PSN: u32 = 0xff_ffff;

#[derive(Debug, thiserror::Error)]
#[error("invalid RC endpoint")]
pub struct InvalidRcEndpointError(#[from] pub InvalidRcEndpointErrorKind);

#[derive(Debug, thiserror::Error)]
pub enum InvalidRcEndpointErrorKind {
    #[error("queue pair number {qp_number:#x} does not fit in 24 bits")]
    QueuePairNumberOutOfRange { qp_number: u32 },
    #[error("PSN {psn:#x} does not fit in 24 bits")]
    PacketSequenceNumberOutOfRange { psn: u32 },
}

#[derive(Debug, thiserror::Error)]
#[error("failed to describe the RC queue pair's endpoint")]
pub struct QueryRcEndpointError(#[from] pub QueryRcEndpointErrorKind);

#[derive(Debug, thiserror::Error)]
pub enum QueryRcEndpointErrorKind {
    #[error("port {port} does not exist on this device")]
    InvalidPort { port: u8, source: io::Error },
    #[error("port {port} is RoCE: set the source GID index")]
    SourceGidIndexRequired { port: u8 },
    #[error(transparent)]
    QueryGid(#[from] QueryGidError),
    #[error(transparent)]
    InvalidEndpoint(#[from] InvalidRcEndpointError),
}

#[derive(Debug, thiserror::Error)]
#[error("failed to bring up RC queue pair")]
pub struct BringUpRcError(#[from] pub BringUpRcErrorKind);

#[derive(Debug, thiserror::Error)]
pub enum BringUpRcErrorKind {
    #[error("port {port} does not exist on this device")]
    InvalidPort { port: u8, source: io::Error },
    #[error("port {port} is RoCE: set the source GID index")]
    SourceGidIndexRequired { port: u8 },
    #[error(transparent)]
    Modify(#[from] ModifyQueuePairError),
}

#[derive(Debug, thiserror::Error)]
#[error("failed to bring up UD queue pair")]
pub struct BringUpUdError(#[from] pub BringUpUdErrorKind);

#[derive(Debug, thiserror::Error)]
pub enum BringUpUdErrorKind {
    #[error("port {port} does not exist on this device")]
    InvalidPort { port: u8, source: io::Error },
    #[error(transparent)]
    Modify(#[from] ModifyQueuePairError),
}

/// What an RC queue pair tells its peer out of band: its port's LID (0 on RoCE), the GID it
/// sends from (unused with LID routing on InfiniBand), its queue pair number and first PSN.
/// With the `serde` feature the GID is its IPv6 text, as `DcEndpoint`'s.
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "UncheckedRcEndpoint"))]
pub struct RcEndpoint {
    lid: u16,
    gid: Ipv6Addr,
    qp_number: u32,
    psn: u32,
}

impl std::fmt::Debug for RcEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RcEndpoint")
            .field("lid", &self.lid)
            .field("gid", &self.gid)
            .field("qp_number", &format_args!("{:#x}", self.qp_number))
            .field("psn", &format_args!("{:#x}", self.psn))
            .finish()
    }
}

impl RcEndpoint {
    pub fn new(lid: u16, gid: Gid, qp_number: u32, psn: u32) -> Result<Self, InvalidRcEndpointError> {
        if qp_number > MAX_QP_NUMBER {
            return Err(InvalidRcEndpointErrorKind::QueuePairNumberOutOfRange { qp_number }.into());
        }
        if psn > MAX_PSN {
            return Err(InvalidRcEndpointErrorKind::PacketSequenceNumberOutOfRange { psn }.into());
        }
        let gid = Ipv6Addr::from(gid);
        Ok(Self {
            lid,
            gid,
            qp_number,
            psn,
        })
    }

    pub fn lid(&self) -> u16 {
        self.lid
    }

    pub fn gid(&self) -> Gid {
        Gid::from(self.gid)
    }

    pub fn qp_number(&self) -> u32 {
        self.qp_number
    }

    pub fn psn(&self) -> u32 {
        self.psn
    }
}

/// A deserialized endpoint, validated by [`RcEndpoint::new`].
#[cfg(feature = "serde")]
#[derive(serde::Deserialize)]
#[serde(rename = "RcEndpoint", deny_unknown_fields)]
struct UncheckedRcEndpoint {
    lid: u16,
    gid: Ipv6Addr,
    qp_number: u32,
    psn: u32,
}

#[cfg(feature = "serde")]
impl TryFrom<UncheckedRcEndpoint> for RcEndpoint {
    type Error = InvalidRcEndpointErrorKind;

    fn try_from(raw: UncheckedRcEndpoint) -> Result<Self, Self::Error> {
        RcEndpoint::new(raw.lid, raw.gid.into(), raw.qp_number, raw.psn).map_err(|err| err.0)
    }
}

/// `ibv_query_port`, port 0 refused before the call (the library's answer for it varies).
fn query_port(ctx: &DeviceContext, port: u8) -> io::Result<PortAttr> {
    if port == 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    ctx.query_port(port).map_err(io::Error::other)
}

/// How an RC queue pair connects to its peer: `ibv_rc_pingpong`'s attributes, the path MTU
/// defaulting to the port's active MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcBringUp {
    pub port: u8,
    pub pkey_index: u16,
    /// Incoming RDMA writes, reads and atomics allowed (none by default).
    pub access_flags: AccessFlags,
    pub path_mtu: Option<Mtu>,
    pub service_level: u8,
    /// The local GID the queue pair sends from: makes the address vector global, which RoCE
    /// requires (a RoCE v2 GID of the peer's IP family); without it InfiniBand routes by LID.
    pub src_gid_index: Option<u8>,
    pub hop_limit: u8,
    /// The send queue's first PSN, announced by [`endpoint`](Self::endpoint).
    pub psn: u32,
    pub min_rnr_timer: u8,
    /// The local ACK timeout, 4.096 µs · 2^timeout.
    pub timeout: u8,
    pub retry_cnt: u8,
    /// Retries after an RNR NAK, 7 meaning infinite.
    pub rnr_retry: u8,
    pub max_read_atomic: u8,
    pub max_dest_read_atomic: u8,
}

impl RcBringUp {
    pub fn new(port: u8) -> Self {
        Self {
            port,
            pkey_index: 0,
            access_flags: AccessFlags::none(),
            path_mtu: None,
            service_level: 0,
            src_gid_index: None,
            hop_limit: DEFAULT_HOP_LIMIT,
            psn: 0,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_read_atomic: 1,
            max_dest_read_atomic: 1,
        }
    }

    /// What the peer needs to connect to `qp`, created on `ctx`: the port's LID, the GID at the
    /// source GID index (zero without one), the queue pair number and [`psn`](Self::psn).
    pub fn endpoint(
        &self, ctx: &DeviceContext, qp: &SharedReceiveQueuePair<ReliableConnection>,
    ) -> Result<RcEndpoint, QueryRcEndpointError> {
        let port = self.port;
        let attr = query_port(ctx, port).map_err(|source| QueryRcEndpointErrorKind::InvalidPort { port, source })?;
        let gid = match self.src_gid_index {
            None if attr.attr.link_layer == IBV_LINK_LAYER_ETHERNET => {
                return Err(QueryRcEndpointErrorKind::SourceGidIndexRequired { port }.into())
            },
            None => Gid::default(),
            Some(index) => ctx
                .query_gid(port, index.into())
                .map_err(QueryRcEndpointErrorKind::from)?,
        };
        Ok(RcEndpoint::new(attr.lid(), gid, qp.qp_number(), self.psn).map_err(QueryRcEndpointErrorKind::from)?)
    }

    /// Connects `qp`, created on `ctx`, to `remote`: RESET → INIT → RTR → RTS.
    pub fn bring_up(
        &self, ctx: &DeviceContext, qp: &mut SharedReceiveQueuePair<ReliableConnection>, remote: &RcEndpoint,
    ) -> Result<(), BringUpRcError> {
        let port = self.port;
        let attr = query_port(ctx, port).map_err(|source| BringUpRcErrorKind::InvalidPort { port, source })?;
        // On RoCE the address vector must be global.
        if attr.attr.link_layer == IBV_LINK_LAYER_ETHERNET && self.src_gid_index.is_none() {
            return Err(BringUpRcErrorKind::SourceGidIndexRequired { port }.into());
        }
        // sideway's `Mtu::from` panics on a value it does not know: read it as the 1024 bytes
        // every port supports.
        let active_mtu = match attr.attr.active_mtu {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => Mtu::Mtu1024,
        };
        for attr in &self.attributes(remote, self.path_mtu.unwrap_or(active_mtu)) {
            qp.modify(attr).map_err(BringUpRcErrorKind::Modify)?;
        }
        Ok(())
    }

    /// The address vector towards `remote`.
    pub fn address_vector(&self, remote: &RcEndpoint) -> AddressHandleAttribute {
        let mut av = AddressHandleAttribute::new();
        av.setup_port(self.port)
            .setup_dest_lid(remote.lid())
            .setup_service_level(self.service_level);
        if let Some(index) = self.src_gid_index {
            av.setup_grh_dest_gid(&remote.gid())
                .setup_grh_src_gid_index(index)
                .setup_grh_hop_limit(self.hop_limit);
        }
        av
    }

    /// The three transitions' attributes: RESET → INIT, INIT → RTR, RTR → RTS.
    pub fn attributes(&self, remote: &RcEndpoint, path_mtu: Mtu) -> [QueuePairAttribute; 3] {
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(self.pkey_index)
            .setup_port(self.port)
            .setup_access_flags(self.access_flags);
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(path_mtu)
            .setup_dest_qp_num(remote.qp_number())
            .setup_rq_psn(remote.psn())
            .setup_max_dest_read_atomic(self.max_dest_read_atomic)
            .setup_min_rnr_timer(self.min_rnr_timer)
            .setup_address_vector(&self.address_vector(remote));
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(self.psn)
            .setup_timeout(self.timeout)
            .setup_retry_cnt(self.retry_cnt)
            .setup_rnr_retry(self.rnr_retry)
            .setup_max_read_atomic(self.max_read_atomic);
        [init, rtr, rts]
    }
}

/// How a UD queue pair reaches RTS: the port, P_Key index and send PSN, and the Q_Key senders
/// must name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdBringUp {
    pub port: u8,
    pub pkey_index: u16,
    pub qkey: u32,
    pub sq_psn: u32,
}

impl UdBringUp {
    pub fn new(port: u8, qkey: u32) -> Self {
        Self {
            port,
            pkey_index: 0,
            qkey,
            sq_psn: 0,
        }
    }

    /// Brings `qp`, created on `ctx`, to RTS after checking that the port exists.
    pub fn bring_up(
        &self, ctx: &DeviceContext, qp: &mut SharedReceiveQueuePair<UnreliableDatagram>,
    ) -> Result<(), BringUpUdError> {
        let port = self.port;
        query_port(ctx, port).map_err(|source| BringUpUdErrorKind::InvalidPort { port, source })?;
        for attr in &self.attributes() {
            qp.modify(attr).map_err(BringUpUdErrorKind::Modify)?;
        }
        Ok(())
    }

    /// The three transitions' attributes: RESET → INIT, INIT → RTR, RTR → RTS.
    pub fn attributes(&self) -> [QueuePairAttribute; 3] {
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(self.pkey_index)
            .setup_port(self.port)
            .setup_qkey(self.qkey);
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive);
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend).setup_sq_psn(self.sq_psn);
        [init, rtr, rts]
    }
}
