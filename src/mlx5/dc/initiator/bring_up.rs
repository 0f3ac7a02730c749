//! How a DC initiator reaches RTS: the bring-up parameters, their settings and the three
//! transitions' attributes (which the DC initiator's table takes), `bring_up` and its errors,
//! and what it was brought up with (kept for `recover`, in `recovery`).
use std::io;
use std::sync::Arc;

use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, ModifyQueuePairErrorKind, QueuePairState};

use super::DcInitiator;
use crate::ibverbs::address::AddressHandleAttribute;
use crate::ibverbs::address_handle::PortAddressing;
use crate::ibverbs::queue_pair::QueuePairAttribute;
use crate::ibverbs::source_gid::{SourceGid, SourceGidEntry, SourceGidError};
use crate::mlx5::dc::port::{active_mtu, check_port_ready, PortNotReady};
use crate::mlx5::dc::state_table::DC_INITIATOR_TRANSITIONS;

/// Error returned by [`DcInitiator::bring_up`].
#[derive(Debug, thiserror::Error)]
#[error("failed to bring up DC initiator")]
#[non_exhaustive]
pub struct BringUpDcInitiatorError(#[from] pub BringUpDcInitiatorErrorKind);

/// The enum type for [`BringUpDcInitiatorError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BringUpDcInitiatorErrorKind {
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
    /// The RTR address vector is not global on a RoCE port.
    #[error(
        "port {port} is RoCE: the RTR address vector must be global (setup_grh_dest_gid and setup_grh_src_gid_index)"
    )]
    RtrAddressVectorNotGlobal {
        /// The port.
        port: u8,
    },
    /// The RTR address vector's source GID is not usable.
    #[error("the RTR address vector's source GID is not usable")]
    RtrAddressVectorGid(#[source] SourceGidError),
    /// The source GID could not be resolved.
    #[error(transparent)]
    SourceGid(#[from] SourceGidError),
    /// The kernel refused the RTR address vector (`EINVAL`); the DC initiator is left in INIT.
    #[error(
        "the kernel refused the address vector at the DC initiator's INIT -> RTR (EINVAL): kernels before \
         Linux 5.0 take none there; bring it up without setup_rtr_address_vector"
    )]
    RtrAddressVectorRefused {
        /// The library's error.
        source: ModifyQueuePairError,
    },
    /// A transition failed (a refusal told apart by the DC initiator's table).
    #[error(transparent)]
    Modify(#[from] ModifyQueuePairError),
}

/// How [`DcInitiator::bring_up`] brings a DC initiator to RTS; perftest's defaults (timeout 14,
/// retry count 7, RNR retry 7, PSN 0).
#[derive(Debug, Clone)]
pub struct DcInitiatorBringUp {
    port: u8,
    pkey_index: u16,
    path_mtu: Option<Mtu>,
    destination_path_mtu: Option<Mtu>,
    source_gid: SourceGid,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    max_read_atomic: Option<u8>,
    rtr_address_vector: Option<AddressHandleAttribute>,
}

/// The attributes a DC initiator was brought up with, to bring it up again after an error.
pub(crate) struct BringUpAttributes {
    init: QueuePairAttribute,
    rtr: QueuePairAttribute,
    rts: QueuePairAttribute,
    path_mtu: Mtu,
    source_gid: Option<SourceGidEntry>,
}

impl BringUpAttributes {
    /// The path MTU of the move to RTR.
    pub(crate) fn path_mtu(&self) -> Mtu {
        self.path_mtu
    }

    /// The source GID bring-up resolved.
    pub(crate) fn source_gid(&self) -> Option<SourceGidEntry> {
        self.source_gid
    }

    /// The three steps, in order: RESET → INIT, INIT → RTR, RTR → RTS.
    pub(crate) fn steps(&self) -> [&QueuePairAttribute; 3] {
        [&self.init, &self.rtr, &self.rts]
    }
}

impl DcInitiatorBringUp {
    /// The local port.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The defaults, on local port `port` (from 1).
    pub fn new(port: u8) -> Self {
        Self {
            port,
            pkey_index: 0,
            path_mtu: None,
            destination_path_mtu: None,
            source_gid: SourceGid::Automatic,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_read_atomic: None,
            rtr_address_vector: None,
        }
    }

    /// An address vector for the move to RTR (`IBV_QP_AV`; default none): a service level, or on
    /// RoCE a global address whose traffic class and source GID pick the priority and, under RoCE
    /// LAG, the port, as UCX and perftest send it. mlx5_ib's `modify_dci_qp_is_ok` accepts it from
    /// Linux v5.0 on ([`RtrAddressVectorRefused`](BringUpDcInitiatorErrorKind::RtrAddressVectorRefused)).
    pub fn setup_rtr_address_vector(&mut self, address_vector: AddressHandleAttribute) -> &mut Self {
        self.rtr_address_vector = Some(address_vector);
        self
    }

    /// The P_Key index (default 0).
    pub fn setup_pkey_index(&mut self, pkey_index: u16) -> &mut Self {
        self.pkey_index = pkey_index;
        self
    }

    /// The path MTU (default: the port's active MTU). Bring-up takes the smaller of it and
    /// [`setup_destination_path_mtu`](Self::setup_destination_path_mtu).
    pub fn setup_path_mtu(&mut self, path_mtu: Mtu) -> &mut Self {
        self.path_mtu = Some(path_mtu);
        self
    }

    /// The smallest path MTU among the DC targets it will reach (default: none known); bring-up
    /// takes the smaller of this and its own: no packet larger than a destination's port takes.
    pub fn setup_destination_path_mtu(&mut self, path_mtu: Mtu) -> &mut Self {
        self.destination_path_mtu = Some(path_mtu);
        self
    }

    /// The local GID its requests are sent from (default [`SourceGid::Automatic`]); the address
    /// handles of its requests use its index ([`DcInitiator::source_gid`]).
    pub fn setup_source_gid(&mut self, source_gid: SourceGid) -> &mut Self {
        self.source_gid = source_gid;
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

    /// Outstanding RDMA reads and atomics, capped by [`DcInitiator::max_read_atomic`] (the default).
    pub fn setup_max_read_atomic(&mut self, max_read_atomic: u8) -> &mut Self {
        self.max_read_atomic = Some(max_read_atomic);
        self
    }

    /// The three transitions' attributes, with the smallest of its path MTU, `port_mtu` and the
    /// destinations'.
    pub(crate) fn attributes(&self, port_mtu: Mtu, depth: u8, source_gid: Option<SourceGidEntry>) -> BringUpAttributes {
        let path_mtu = self
            .path_mtu
            .unwrap_or(port_mtu)
            .min(self.destination_path_mtu.unwrap_or(Mtu::Mtu4096));
        let max_read_atomic = self.max_read_atomic.map_or(depth, |asked| asked.min(depth));
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(self.pkey_index)
            .setup_port(self.port);
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive).setup_path_mtu(path_mtu);
        if let Some(address_vector) = &self.rtr_address_vector {
            rtr.setup_address_vector(address_vector);
        }
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_timeout(self.timeout)
            .setup_retry_cnt(self.retry_cnt)
            .setup_rnr_retry(self.rnr_retry)
            .setup_max_read_atomic(max_read_atomic)
            .setup_sq_psn(0);
        BringUpAttributes {
            init,
            rtr,
            rts,
            path_mtu,
            source_gid,
        }
    }
}

impl DcInitiator {
    /// The local GID its requests' address handles are sent from, resolved by
    /// [`bring_up`](Self::bring_up); `None` on InfiniBand without one.
    pub fn source_gid(&self) -> Option<SourceGidEntry> {
        self.brought_up_with.as_ref()?.source_gid()
    }

    /// The path MTU it was brought up with.
    pub fn path_mtu(&self) -> Option<Mtu> {
        Some(self.brought_up_with.as_ref()?.path_mtu())
    }

    /// The attributes (`ibv_qp_attr_mask` bits, `IBV_QP_STATE` aside) a DC initiator must be
    /// given to move from `from` to `to` (mlx5_ib's `modify_dci_qp_is_ok`); `None` where no such
    /// move exists.
    ///
    /// ```
    /// use sideway::ibverbs::queue_pair::QueuePairState::{Error, Init, ReadyToReceive, Reset};
    /// use sideway_ext::mlx5::dc::initiator::DcInitiator;
    ///
    /// // INIT → RTR needs the path MTU; RESET → RTR does not exist.
    /// assert_eq!(DcInitiator::required_attributes(Init, ReadyToReceive), Some(rdma_mummy_sys::ibv_qp_attr_mask::IBV_QP_PATH_MTU.0 as i32));
    /// assert_eq!(DcInitiator::required_attributes(Reset, ReadyToReceive), None);
    /// assert_eq!(DcInitiator::required_attributes(Init, Error), Some(0));
    /// ```
    pub fn required_attributes(
        from: sideway::ibverbs::queue_pair::QueuePairState, to: sideway::ibverbs::queue_pair::QueuePairState,
    ) -> Option<i32> {
        DC_INITIATOR_TRANSITIONS
            .iter()
            .find(|(listed_from, listed_to, _, _)| (*listed_from, *listed_to) == (from, to))
            .map(|(_, _, required, _)| required.bits())
    }

    /// Brings the DC initiator from RESET to RTS in one call (RESET → INIT → RTR → RTS, a
    /// refusal told apart by the DC initiator's table), and keeps the attributes for
    /// [`recover`](Self::recover); a port that cannot carry traffic yet is refused first.
    pub fn bring_up(&mut self, params: &DcInitiatorBringUp) -> Result<(), BringUpDcInitiatorError> {
        let invalid_port = |source| BringUpDcInitiatorErrorKind::InvalidPort {
            port: params.port,
            source,
        };
        let port = self.qp.query_port(params.port).map_err(invalid_port)?;
        check_port_ready(params.port, &port).map_err(BringUpDcInitiatorErrorKind::PortNotReady)?;
        let addressing = PortAddressing::of(&port);
        let roce = addressing.is_roce();
        let global_av = params.rtr_address_vector.as_ref().is_some_and(|av| av.is_global());
        let table = match params.source_gid.reads_gid_table(addressing) || global_av {
            true => self
                .qp
                .gid_table(params.port, &port)
                .map_err(BringUpDcInitiatorErrorKind::SourceGid)?,
            false => Vec::new(),
        };
        let resolve = |source_gid: &SourceGid| source_gid.resolve(params.port, addressing, &table);
        if let Some(address_vector) = &params.rtr_address_vector {
            if roce && !address_vector.is_global() {
                return Err(BringUpDcInitiatorErrorKind::RtrAddressVectorNotGlobal { port: params.port }.into());
            }
            if address_vector.is_global() {
                resolve(&SourceGid::Index(address_vector.src_gid_index()))
                    .map_err(|kind| BringUpDcInitiatorErrorKind::RtrAddressVectorGid(kind.into()))?;
            }
        }
        let source_gid =
            resolve(&params.source_gid).map_err(|kind| BringUpDcInitiatorErrorKind::SourceGid(kind.into()))?;
        let attributes = params.attributes(active_mtu(&port), self.read_atomic_depth, source_gid);
        for attr in [&attributes.init, &attributes.rtr, &attributes.rts] {
            self.qp.modify(attr).map_err(|err| {
                let refused_av = params.rtr_address_vector.is_some()
                    && attr.state() == QueuePairState::ReadyToReceive
                    && matches!(&err.0, ModifyQueuePairErrorKind::Ibverbs(errno) if errno.raw_os_error() == Some(libc::EINVAL));
                match refused_av {
                    true => BringUpDcInitiatorErrorKind::RtrAddressVectorRefused { source: err },
                    false => BringUpDcInitiatorErrorKind::Modify(err),
                }
            })?;
        }
        self.brought_up_with = Some(Arc::new(attributes));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The bring-up attributes against the DC table.
    use super::*;
    use crate::mlx5::dc::state_table::{check, DC_INITIATOR_TRANSITIONS};

    /// Whether the DC initiator's table takes `attr` in state `from`.
    fn takes(from: QueuePairState, attr: &QueuePairAttribute) -> bool {
        check(&DC_INITIATOR_TRANSITIONS, from, attr.state(), attr.attr_mask).is_ok()
    }

    #[test]
    fn bring_up_attributes_pass_the_dc_table_and_cap_the_read_atomic_depth() {
        let mut params = DcInitiatorBringUp::new(1);
        let attributes = params.attributes(Mtu::Mtu1024, 8, None);
        assert!(takes(QueuePairState::Reset, &attributes.init));
        assert!(takes(QueuePairState::Init, &attributes.rtr));
        assert!(takes(QueuePairState::ReadyToReceive, &attributes.rts));
        assert_eq!(attributes.rts.max_read_atomic(), 8, "default: the device's DC depth");
        assert_eq!(
            (
                attributes.rts.timeout(),
                attributes.rts.retry_cnt(),
                attributes.rts.rnr_retry()
            ),
            (14, 7, 7)
        );
        params.setup_max_read_atomic(64);
        assert_eq!(
            params.attributes(Mtu::Mtu1024, 8, None).rts.max_read_atomic(),
            8,
            "capped"
        );
        params.setup_max_read_atomic(2);
        assert_eq!(params.attributes(Mtu::Mtu1024, 8, None).rts.max_read_atomic(), 2);
    }

    #[test]
    fn the_path_mtu_is_the_smallest_of_its_own_the_ports_and_the_destinations() {
        let mut params = DcInitiatorBringUp::new(1);
        assert_eq!(
            params.attributes(Mtu::Mtu4096, 1, None).path_mtu,
            Mtu::Mtu4096,
            "the port's"
        );
        // A 1500-byte Ethernet peer (path MTU 1024) next to a 9000-byte local port.
        params.setup_destination_path_mtu(Mtu::Mtu1024);
        let attributes = params.attributes(Mtu::Mtu4096, 1, None);
        assert_eq!(
            (attributes.path_mtu, attributes.rtr.attr.path_mtu),
            (Mtu::Mtu1024, Mtu::Mtu1024 as u32)
        );
        params.setup_path_mtu(Mtu::Mtu512);
        assert_eq!(
            params.attributes(Mtu::Mtu4096, 1, None).path_mtu,
            Mtu::Mtu512,
            "its own, smaller"
        );
    }
}
