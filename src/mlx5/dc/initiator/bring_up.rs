//! How a DC initiator reaches RTS and comes back after an error: the bring-up parameters'
//! settings and the three transitions' attributes (checked against the DC initiator's table),
//! `bring_up`, `recover` (through RESET, or by creating the DC initiator again where the kernel
//! refuses RESET) and the reset of one errored DCI stream.
use std::io;

use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{ModifyQueuePairErrorKind, QueuePairState};

use super::creation::Granted;
use super::{
    BringUpDcInitiatorError, BringUpDcInitiatorErrorKind, DcInitiator, DcInitiatorBringUp, DcRecovery,
    RecoverDcInitiatorError, RecoverDcInitiatorErrorKind, ResetDciStreamError, ResetDciStreamErrorKind,
};
use crate::ibverbs::address::AddressHandleAttribute;
use crate::ibverbs::post_send_guard::ProviderEntries;
use crate::ibverbs::queue_pair::QueuePairAttribute;
use crate::ibverbs::source_gid::{netdev_index, SourceGid, SourceGidEntry};
use crate::mlx5::dc::queue_pair::{active_mtu, check_port_ready, create_dc_qp};
use crate::mlx5::dc::state_table::DC_INITIATOR_TRANSITIONS;

/// The attributes a DC initiator was brought up with, to bring it up again after an error.
#[derive(Debug, Clone)]
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
    #[cfg(test)]
    pub(crate) fn steps(&self) -> [&QueuePairAttribute; 3] {
        [&self.init, &self.rtr, &self.rts]
    }
}

/// The first step of [`DcInitiator::recover`]: the move to RESET, with the state alone (mlx5_ib's
/// `modify_dci_qp_is_ok` allows nothing else with it).
pub(crate) fn reset_attribute() -> QueuePairAttribute {
    let mut reset = QueuePairAttribute::new();
    reset.setup_state(QueuePairState::Reset);
    reset
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

    /// An address vector for the move to RTR (`IBV_QP_AV`; default none). A DC initiator needs
    /// none — each request names its destination's address handle — and none is what every
    /// kernel takes. Set one where the DC initiator's own path matters: a service level
    /// ([`setup_service_level`](AddressHandleAttribute::setup_service_level)) on InfiniBand, or
    /// on RoCE a global address whose traffic class and source GID pick the priority and, under
    /// RoCE LAG, the port, as UCX and perftest send it (e.g. an endpoint's
    /// [`address_handle_attribute`](crate::mlx5::dc::endpoint::DcEndpoint::address_handle_attribute)).
    ///
    /// mlx5_ib's `modify_dci_qp_is_ok` accepts it at INIT → RTR from Linux v5.0 on (v4.20 and
    /// older, and distribution kernels with an older mlx5_ib such as SLES 12 SP5's, refuse it
    /// with `EINVAL`), reported as
    /// [`RtrAddressVectorRefused`](BringUpDcInitiatorErrorKind::RtrAddressVectorRefused).
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

    /// The smallest path MTU among the DC targets it will reach (their endpoints'
    /// [`path_mtu`](crate::mlx5::dc::endpoint::DcEndpoint::path_mtu); default: none known).
    /// A DC initiator sends every request with one path MTU, set at bring-up, whatever its
    /// destination: bring-up takes the smaller of this and its own
    /// ([`setup_path_mtu`](Self::setup_path_mtu) or the port's), so that no packet is larger
    /// than a destination's port takes (dropped there, the requests end in `RETRY_EXC`).
    pub fn setup_destination_path_mtu(&mut self, path_mtu: Mtu) -> &mut Self {
        self.destination_path_mtu = Some(path_mtu);
        self
    }

    /// The local GID its requests are sent from (default [`SourceGid::Automatic`]: on RoCE the
    /// port's RoCE v2 GID, IPv4-mapped first; on InfiniBand none). Bring-up resolves it in the
    /// port's GID table and refuses a slot that is empty or, on RoCE, not RoCE v2; the address
    /// handles of its requests use its index ([`DcInitiator::source_gid`]), as a pool's do.
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

    /// Outstanding RDMA reads and atomics (default: the device's DC initiator depth,
    /// [`DcInitiator::max_read_atomic`]: the smaller of `max_dc_rd_atom` and
    /// `max_dc_init_rd_atom`, 1 before rdma-core 47); capped by that depth either way.
    pub fn setup_max_read_atomic(&mut self, max_read_atomic: u8) -> &mut Self {
        self.max_read_atomic = Some(max_read_atomic);
        self
    }

    /// The three transitions' attributes: RESET → INIT, INIT → RTR, RTR → RTS, with the smaller
    /// of this path MTU, `port_mtu` (the port's active one) and the destinations'.
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
    /// The attributes (`ibv_qp_attr_mask` bits, `IBV_QP_STATE` aside) a DC initiator must be
    /// given to move from `from` to `to`, as its transition table holds mlx5_ib's
    /// `modify_dci_qp_is_ok`; `None` where no such move exists. For a program that brings DC
    /// initiators up by hand, or a simulated device held to the same rules.
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
}

impl DcInitiator {
    /// Brings the DC initiator from RESET to RTS in one call (RESET → INIT → RTR → RTS, each
    /// checked against the DC initiator's table), and keeps the attributes for
    /// [`recover`](Self::recover). A port that cannot carry traffic yet (not active, or an
    /// InfiniBand port without a LID) is refused first, with
    /// [`PortNotReady`](BringUpDcInitiatorErrorKind::PortNotReady).
    pub fn bring_up(&mut self, params: &DcInitiatorBringUp) -> Result<(), BringUpDcInitiatorError> {
        let port = self
            .core
            .query_port(params.port)
            .map_err(|source| BringUpDcInitiatorErrorKind::InvalidPort {
                port: params.port,
                source,
            })?;
        check_port_ready(params.port, &port).map_err(BringUpDcInitiatorErrorKind::PortNotReady)?;
        let roce = port.link_layer == rdma_mummy_sys::IBV_LINK_LAYER_ETHERNET;
        let table = self
            .core
            .gid_table(params.port, &port)
            .map_err(BringUpDcInitiatorErrorKind::SourceGid)?;
        let resolve = |source_gid: &SourceGid| source_gid.resolve(params.port, roce, &table, netdev_index);
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
            self.core.modify(attr).map_err(|err| {
                let refused_av = params.rtr_address_vector.is_some()
                    && attr.state() == QueuePairState::ReadyToReceive
                    && matches!(&err.0, ModifyQueuePairErrorKind::Ibverbs(errno) if errno.raw_os_error() == Some(libc::EINVAL));
                match refused_av {
                    true => BringUpDcInitiatorErrorKind::RtrAddressVectorRefused { source: err },
                    false => BringUpDcInitiatorErrorKind::Modify(err),
                }
            })?;
        }
        self.brought_up_with = Some(attributes);
        Ok(())
    }

    /// Brings a DC initiator in ERR (after an error completion, for every destination) back to
    /// RTS in one call, with the attributes of the last [`bring_up`](Self::bring_up): RESET →
    /// INIT → RTR → RTS ([`DcRecovery::Reset`]). Where the kernel refuses a DC initiator's move to
    /// RESET (`EINVAL`, kernels whose `modify_dci_qp_is_ok` has no RESET branch), it creates the
    /// DC initiator again with the same attributes and brings that one up instead
    /// ([`DcRecovery::Rebuilt`], with a new [`qp_number`](Self::qp_number)); either way this
    /// value stays the caller's handle.
    ///
    /// Poll its failed completions first: the reset (or the destruction) discards its send
    /// queue and libmlx5 cleans the send CQ of its completions.
    pub fn recover(&mut self) -> Result<DcRecovery, RecoverDcInitiatorError> {
        let attributes = self
            .brought_up_with
            .clone()
            .ok_or(RecoverDcInitiatorErrorKind::NotBroughtUp)?;
        let recovery = match self.core.modify(&reset_attribute()) {
            Ok(()) => DcRecovery::Reset,
            Err(err) if matches!(&err.0, ModifyQueuePairErrorKind::Ibverbs(errno) if errno.raw_os_error() == Some(libc::EINVAL)) => {
                self.rebuild()?
            },
            Err(err) => return Err(RecoverDcInitiatorErrorKind::Modify(err).into()),
        };
        for attr in [&attributes.init, &attributes.rtr, &attributes.rts] {
            self.core.modify(attr).map_err(RecoverDcInitiatorErrorKind::Modify)?;
        }
        Ok(recovery)
    }

    /// Creates the DC initiator again with its creation attributes and puts the new queue pair
    /// in the old one's place (which is destroyed).
    fn rebuild(&mut self) -> Result<DcRecovery, RecoverDcInitiatorError> {
        let previous_qp_number = self.core.qp_number();
        let (mut init, mut mlx5) = (self.creation.init, self.creation.mlx5);
        // SAFETY: init's PD and CQ pointers are this queue pair's parents, alive while the core
        // is; the context is theirs.
        let qp = unsafe { create_dc_qp(self.verbs, self.core.context(), &mut init, &mut mlx5) }.map_err(|err| {
            RecoverDcInitiatorErrorKind::Rebuild(err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP)))
        })?;
        // The same request is granted the same sizes; keep what this one was granted.
        self.granted = Granted::of(&init);
        // SAFETY: qp was just created on the core's parents with these send operations, in
        // RESET; the old views are replaced below before any use.
        let replaced = unsafe { self.core.replace(qp, Some(self.creation.params.send_ops)) };
        let attached = replaced
            .map_err(|err| err.0)
            .and_then(|()| Self::attach(&mut self.core, self.verbs, self.creation.params.streams.is_some()))
            .and_then(|mlx5_qp_ex| Ok((self.core.send_view().ok_or("ibv_qp_to_qp_ex")?, mlx5_qp_ex)));
        match attached {
            Ok((send_view, mlx5_qp_ex)) => {
                self.send_view = send_view;
                self.mlx5_qp_ex = mlx5_qp_ex;
                Ok(DcRecovery::Rebuilt { previous_qp_number })
            },
            Err(entry) => {
                // Posting must not reach the new queue pair's NULL entry: no entry is granted
                // until a later recover succeeds.
                self.send_view.1 = ProviderEntries::NONE;
                Err(RecoverDcInitiatorErrorKind::RebuildMissingProviderEntry { entry }.into())
            },
        }
    }

    /// Resets one errored DCI stream with `mlx5dv_dci_stream_id_reset` (libmlx5 v37 and later,
    /// resolved at run time), so that the stream can be used again while the others went on.
    /// Any `stream_id` a request was posted on with `setup_dc_addr_stream` can be reset (the
    /// provider writes it into the request as is).
    ///
    /// Reset a stream only once every request posted on it has completed — the error
    /// completion first, then the flush errors of the stream's later requests (man page
    /// `mlx5dv_dci_stream_id_reset(3)`): the stream's requests still queued are not flushed
    /// yet when its error completion arrives. Requests of other streams go on executing.
    ///
    /// # Errors
    ///
    /// - [`NoStreams`](ResetDciStreamErrorKind::NoStreams): created without streams;
    /// - [`DeviceCannotResetStreams`](ResetDciStreamErrorKind::DeviceCannotResetStreams);
    /// - [`NotSupported`](ResetDciStreamErrorKind::NotSupported): libmlx5 lacks the function;
    /// - [`NotReadyToSend`](ResetDciStreamErrorKind::NotReadyToSend): the DC initiator is not
    ///   in RTS (as last modified or queried; or libmlx5 said so and a query confirmed it):
    ///   [`recover`](Self::recover) it.
    pub fn reset_stream(&mut self, stream_id: u16) -> Result<(), ResetDciStreamError> {
        if self.creation.params.streams.is_none() {
            return Err(ResetDciStreamErrorKind::NoStreams.into());
        }
        if self.creation.max_log_num_errored == 0 {
            return Err(ResetDciStreamErrorKind::DeviceCannotResetStreams.into());
        }
        let reset = (self.verbs.stream_id_reset)().ok_or(ResetDciStreamErrorKind::NotSupported)?;
        // libmlx5 checks its cached state, which ibv_modify_qp and ibv_query_qp update as the
        // core does.
        let state = self.core.state();
        if state != QueuePairState::ReadyToSend {
            return Err(ResetDciStreamErrorKind::NotReadyToSend { state }.into());
        }
        // SAFETY: the queue pair is alive and exclusively borrowed; the function has the C
        // signature it was resolved with.
        match unsafe { reset(self.core.qp().as_ptr(), stream_id) } {
            0 => Ok(()),
            // The DC initiator may have gone to ERR since the state was last read (libmlx5
            // refuses with EOPNOTSUPP after a query, the device with a command error before).
            errno => match self.query_state() {
                Ok(state) if state != QueuePairState::ReadyToSend => {
                    Err(ResetDciStreamErrorKind::NotReadyToSend { state }.into())
                },
                _ if errno == libc::EOPNOTSUPP => Err(ResetDciStreamErrorKind::DeviceCannotResetStreams.into()),
                _ => Err(ResetDciStreamErrorKind::Ibverbs(io::Error::from_raw_os_error(errno)).into()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    //! The bring-up attributes against the DC table.
    use super::*;
    use crate::mlx5::dc::state_table::DC_INITIATOR_STATE_TABLE;

    #[test]
    fn bring_up_attributes_pass_the_dc_table_and_cap_the_read_atomic_depth() {
        let mut params = DcInitiatorBringUp::new(1);
        let attributes = params.attributes(Mtu::Mtu1024, 8, None);
        assert!(DC_INITIATOR_STATE_TABLE
            .check(QueuePairState::Reset, &attributes.init)
            .is_ok());
        assert!(DC_INITIATOR_STATE_TABLE
            .check(QueuePairState::Init, &attributes.rtr)
            .is_ok());
        assert!(DC_INITIATOR_STATE_TABLE
            .check(QueuePairState::ReadyToReceive, &attributes.rts)
            .is_ok());
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
