//! Connecting an RC queue pair to its peer: [`RcBringUp`], its parameters, and the two calls
//! on a [`SharedReceiveQueuePair`] it drives, [`endpoint`](SharedReceiveQueuePair::endpoint)
//! (what to tell the peer) and [`bring_up`](SharedReceiveQueuePair::bring_up) (RESET → INIT →
//! RTR → RTS towards the peer's [`RcEndpoint`]).
use std::io;

use rdma_mummy_sys::{ibv_gid, ibv_query_gid};
use sideway::ibverbs::address::Gid;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, QueuePairState};
use sideway::ibverbs::AccessFlags;

use super::endpoint::{InvalidRcEndpointError, RcEndpoint};
use crate::ibverbs::address::AddressHandleAttribute;
use crate::ibverbs::address_handle::DEFAULT_HOP_LIMIT;
use crate::ibverbs::post_send_guard::ReliableConnection;
use crate::ibverbs::queue_pair::{QueuePairAttribute, SharedReceiveQueuePair};
use rdma_mummy_sys::IBV_LINK_LAYER_ETHERNET;

/// Error returned by [`RcBringUp`]'s [`bring_up`](SharedReceiveQueuePair::bring_up).
#[derive(Debug, thiserror::Error)]
#[error("failed to bring up RC queue pair")]
#[non_exhaustive]
pub struct BringUpRcError(#[from] pub BringUpRcErrorKind);

/// The enum type for [`BringUpRcError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BringUpRcErrorKind {
    /// The port is 0 or the device has no such port.
    #[error("port {port} does not exist on this device")]
    InvalidPort {
        /// The port asked for.
        port: u8,
        /// The library's error from querying it.
        source: io::Error,
    },
    /// The port is RoCE: the address vector must be global, with a source GID index
    /// ([`RcBringUp::setup_src_gid_index`]).
    #[error("port {port} is RoCE: set the source GID index (setup_src_gid_index)")]
    SourceGidIndexRequired {
        /// The port.
        port: u8,
    },
    /// A transition failed (checked against the RC table first).
    #[error(transparent)]
    Modify(#[from] ModifyQueuePairError),
}

/// Error returned by [`SharedReceiveQueuePair::endpoint`].
#[derive(Debug, thiserror::Error)]
#[error("failed to describe the RC queue pair's endpoint")]
#[non_exhaustive]
pub struct QueryRcEndpointError(#[from] pub QueryRcEndpointErrorKind);

/// The enum type for [`QueryRcEndpointError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueryRcEndpointErrorKind {
    /// The port is 0 or the device has no such port.
    #[error("port {port} does not exist on this device")]
    InvalidPort {
        /// The port asked for.
        port: u8,
        /// The library's error from querying it.
        source: io::Error,
    },
    /// The port is RoCE and no source GID index was set: the peer would have no GID to
    /// address.
    #[error("port {port} is RoCE: set the source GID index (setup_src_gid_index)")]
    SourceGidIndexRequired {
        /// The port.
        port: u8,
    },
    /// `ibv_query_gid` failed (e.g. no GID at that index).
    #[error("no GID at index {index} of port {port}")]
    QueryGid {
        /// The port.
        port: u8,
        /// The GID index.
        index: u8,
        /// The library's error.
        source: io::Error,
    },
    /// The PSN set with [`RcBringUp::setup_psn`] does not fit in 24 bits.
    #[error(transparent)]
    InvalidEndpoint(#[from] InvalidRcEndpointError),
}
/// How [`bring_up`](SharedReceiveQueuePair::bring_up) connects an RC queue pair to a peer's
/// [`RcEndpoint`]: the local port and P_Key index, the access flags for incoming RDMA (default
/// none), the path MTU (default: the port's active MTU), the address vector (service level 0;
/// global with [`setup_src_gid_index`](Self::setup_src_gid_index), required on RoCE, hop limit
/// 255), the PSN its send queue starts at (default 0), and `ibv_rc_pingpong`'s values for the
/// rest: minimum RNR timer 12, timeout 14, retry count 7, RNR retry 7, one outstanding RDMA read
/// or atomic each way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcBringUp {
    port: u8,
    pkey_index: u16,
    access_flags: AccessFlags,
    path_mtu: Option<Mtu>,
    service_level: u8,
    src_gid_index: Option<u8>,
    hop_limit: u8,
    psn: u32,
    min_rnr_timer: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    max_read_atomic: u8,
    max_dest_read_atomic: u8,
}

impl RcBringUp {
    /// The defaults, on local port `port` (from 1).
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

    /// The local port.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The P_Key index (default 0).
    pub fn setup_pkey_index(&mut self, pkey_index: u16) -> &mut Self {
        self.pkey_index = pkey_index;
        self
    }

    /// The access flags for incoming RDMA writes, reads and atomics (default none).
    pub fn setup_access_flags(&mut self, access_flags: AccessFlags) -> &mut Self {
        self.access_flags = access_flags;
        self
    }

    /// The path MTU (default: the port's active MTU).
    pub fn setup_path_mtu(&mut self, path_mtu: Mtu) -> &mut Self {
        self.path_mtu = Some(path_mtu);
        self
    }

    /// The service level of the address vector (default 0).
    pub fn setup_service_level(&mut self, service_level: u8) -> &mut Self {
        self.service_level = service_level;
        self
    }

    /// The local GID index the queue pair sends from: makes the address vector global, and is
    /// the GID [`endpoint`](SharedReceiveQueuePair::endpoint) announces. Required on RoCE (a
    /// RoCE v2 GID of the peer's IP family); on InfiniBand without it the address is the LID.
    pub fn setup_src_gid_index(&mut self, src_gid_index: u8) -> &mut Self {
        self.src_gid_index = Some(src_gid_index);
        self
    }

    /// The GRH hop limit of a global address vector (default 255).
    pub fn setup_hop_limit(&mut self, hop_limit: u8) -> &mut Self {
        self.hop_limit = hop_limit;
        self
    }

    /// The PSN the send queue starts at (default 0; 24 bits), announced by
    /// [`endpoint`](SharedReceiveQueuePair::endpoint).
    pub fn setup_psn(&mut self, psn: u32) -> &mut Self {
        self.psn = psn;
        self
    }

    /// The minimum RNR NAK timer (default 12).
    pub fn setup_min_rnr_timer(&mut self, min_rnr_timer: u8) -> &mut Self {
        self.min_rnr_timer = min_rnr_timer;
        self
    }

    /// The local ACK timeout, 4.096 µs · 2^timeout (default 14).
    pub fn setup_timeout(&mut self, timeout: u8) -> &mut Self {
        self.timeout = timeout;
        self
    }

    /// Retries after a timeout (default 7).
    pub fn setup_retry_cnt(&mut self, retry_cnt: u8) -> &mut Self {
        self.retry_cnt = retry_cnt;
        self
    }

    /// Retries after an RNR NAK, 7 meaning infinite (default 7).
    pub fn setup_rnr_retry(&mut self, rnr_retry: u8) -> &mut Self {
        self.rnr_retry = rnr_retry;
        self
    }

    /// Outstanding RDMA reads and atomics as initiator (default 1).
    pub fn setup_max_read_atomic(&mut self, max_read_atomic: u8) -> &mut Self {
        self.max_read_atomic = max_read_atomic;
        self
    }

    /// Outstanding RDMA reads and atomics as responder (default 1).
    pub fn setup_max_dest_read_atomic(&mut self, max_dest_read_atomic: u8) -> &mut Self {
        self.max_dest_read_atomic = max_dest_read_atomic;
        self
    }

    /// The three transitions' attributes: RESET → INIT, INIT → RTR, RTR → RTS.
    pub(crate) fn attributes(&self, remote: &RcEndpoint, path_mtu: Mtu) -> [QueuePairAttribute; 3] {
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(self.pkey_index)
            .setup_port(self.port)
            .setup_access_flags(self.access_flags);
        let mut av = AddressHandleAttribute::new();
        av.setup_port(self.port)
            .setup_dest_lid(remote.lid())
            .setup_service_level(self.service_level);
        if let Some(index) = self.src_gid_index {
            av.setup_grh_dest_gid(&remote.gid())
                .setup_grh_src_gid_index(index)
                .setup_grh_hop_limit(self.hop_limit);
        }
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(path_mtu)
            .setup_dest_qp_num(remote.qp_number())
            .setup_rq_psn(remote.psn())
            .setup_max_dest_read_atomic(self.max_dest_read_atomic)
            .setup_min_rnr_timer(self.min_rnr_timer)
            .setup_address_vector(&av);
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

/// A port's active MTU (`ibv_port_attr::active_mtu`); a value this crate does not know is the
/// 1024 bytes every port supports.
fn active_mtu(attr: &rdma_mummy_sys::ibv_port_attr) -> Mtu {
    match attr.active_mtu {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        _ => Mtu::Mtu1024,
    }
}
impl SharedReceiveQueuePair<ReliableConnection> {
    /// What the peer needs to connect to this queue pair with `params`: the LID of
    /// `params.port()`, the GID at the source GID index (zero without one: InfiniBand's LID
    /// routing), the queue pair number and the PSN of [`RcBringUp::setup_psn`].
    ///
    /// # Errors
    ///
    /// - [`InvalidPort`](QueryRcEndpointErrorKind::InvalidPort): no such port;
    /// - [`SourceGidIndexRequired`](QueryRcEndpointErrorKind::SourceGidIndexRequired): a RoCE
    ///   port and no source GID index;
    /// - [`QueryGid`](QueryRcEndpointErrorKind::QueryGid): `ibv_query_gid` failed;
    /// - [`InvalidEndpoint`](QueryRcEndpointErrorKind::InvalidEndpoint): the PSN is above 24 bits.
    pub fn endpoint(&self, params: &RcBringUp) -> Result<RcEndpoint, QueryRcEndpointError> {
        let port = params.port;
        let attr = self
            .query_port(port)
            .map_err(|source| QueryRcEndpointErrorKind::InvalidPort { port, source })?;
        let gid = match params.src_gid_index {
            None if attr.link_layer == IBV_LINK_LAYER_ETHERNET => {
                return Err(QueryRcEndpointErrorKind::SourceGidIndexRequired { port }.into())
            },
            None => Gid::default(),
            Some(index) => {
                // SAFETY: ibv_gid is a union of byte arrays and integers: all zero is valid.
                let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
                // SAFETY: the context is open while the queue pair's protection domain is; gid is
                // writable.
                let ret = unsafe { ibv_query_gid(self.core().context().as_ptr(), port, index.into(), &mut gid) };
                if ret != 0 {
                    return Err(QueryRcEndpointErrorKind::QueryGid {
                        port,
                        index,
                        source: io::Error::from_raw_os_error(ret),
                    }
                    .into());
                }
                Gid::from(gid)
            },
        };
        Ok(RcEndpoint::new(attr.lid, gid, self.qp_number(), params.psn).map_err(QueryRcEndpointErrorKind::from)?)
    }

    /// Connects the RC queue pair to `remote` in one call: RESET → INIT → RTR → RTS, each checked
    /// against the RC table. Reads the port first: it must exist, its active MTU is the default
    /// path MTU, and on RoCE the address vector must be global.
    ///
    /// # Errors
    ///
    /// - [`InvalidPort`](BringUpRcErrorKind::InvalidPort): `ibv_query_port` refused the port;
    /// - [`SourceGidIndexRequired`](BringUpRcErrorKind::SourceGidIndexRequired): a RoCE port and
    ///   no [`setup_src_gid_index`](RcBringUp::setup_src_gid_index);
    /// - [`Modify`](BringUpRcErrorKind::Modify): a transition was refused (not in RESET, or by
    ///   the library).
    pub fn bring_up(&mut self, params: &RcBringUp, remote: &RcEndpoint) -> Result<(), BringUpRcError> {
        let port = params.port;
        let attr = self
            .query_port(port)
            .map_err(|source| BringUpRcErrorKind::InvalidPort { port, source })?;
        if attr.link_layer == IBV_LINK_LAYER_ETHERNET && params.src_gid_index.is_none() {
            return Err(BringUpRcErrorKind::SourceGidIndexRequired { port }.into());
        }
        let path_mtu = params.path_mtu.unwrap_or_else(|| active_mtu(&attr));
        for attr in &params.attributes(remote, path_mtu) {
            self.modify(attr).map_err(BringUpRcErrorKind::Modify)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ibverbs::queue_pair::transition::RELIABLE_CONNECTION;
    use crate::test_support::roce_gid;

    #[test]
    fn rc_attributes_pass_the_rc_table_in_order() {
        let remote = RcEndpoint::new(0, roce_gid(), 0x12_3456, 0xab_cdef).unwrap();
        let mut params = RcBringUp::new(1);
        params.setup_src_gid_index(3).setup_psn(0x42);
        let [init, rtr, rts] = params.attributes(&remote, Mtu::Mtu1024);
        let mut state = QueuePairState::Reset;
        for attr in [&init, &rtr, &rts] {
            RELIABLE_CONNECTION.check(state, attr).expect("a legal transition");
            state = attr.state();
        }
        assert_eq!(state, QueuePairState::ReadyToSend);
        assert_eq!(
            (rtr.dest_qp_num(), rtr.rq_psn(), rts.sq_psn()),
            (0x12_3456, 0xab_cdef, 0x42)
        );
        assert_eq!(
            (init.port(), rts.timeout(), rts.retry_cnt(), rts.rnr_retry()),
            (1, 14, 7, 7)
        );
        assert_eq!(rtr.attr.ah_attr.is_global, 1);
        assert_eq!(rtr.attr.ah_attr.grh.sgid_index, 3);
        assert_eq!(rtr.attr.ah_attr.grh.hop_limit, DEFAULT_HOP_LIMIT);
        assert_eq!(Gid::from(rtr.attr.ah_attr.grh.dgid), roce_gid());
    }

    #[test]
    fn rc_without_a_gid_index_addresses_the_lid() {
        let remote = RcEndpoint::new(0x17, Gid::default(), 5, 0).unwrap();
        let [_, rtr, _] = RcBringUp::new(2).attributes(&remote, Mtu::Mtu4096);
        assert_eq!(rtr.attr.ah_attr.is_global, 0);
        assert_eq!((rtr.attr.ah_attr.dlid, rtr.attr.ah_attr.port_num), (0x17, 2));
    }
}
