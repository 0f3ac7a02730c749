//! Bringing a UD queue pair to RTS: [`UdBringUp`], its parameters, and
//! [`SharedReceiveQueuePair::bring_up`]'s RESET → INIT → RTR → RTS.
use std::io;

use sideway::ibverbs::queue_pair::{ModifyQueuePairError, QueuePairState};

use crate::ibverbs::post_send_guard::UnreliableDatagram;
use crate::ibverbs::queue_pair::{QueuePairAttribute, SharedReceiveQueuePair};

/// Error returned by [`UdBringUp`]'s [`bring_up`](SharedReceiveQueuePair::bring_up).
#[derive(Debug, thiserror::Error)]
#[error("failed to bring up UD queue pair")]
#[non_exhaustive]
pub struct BringUpUdError(#[from] pub BringUpUdErrorKind);

/// The enum type for [`BringUpUdError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BringUpUdErrorKind {
    /// The port is 0 or the device has no such port.
    #[error("port {port} does not exist on this device")]
    InvalidPort {
        /// The port asked for.
        port: u8,
        /// The library's error from querying it.
        source: io::Error,
    },
    /// A transition failed (checked against the UD table first).
    #[error(transparent)]
    Modify(#[from] ModifyQueuePairError),
}
/// How [`bring_up`](SharedReceiveQueuePair::bring_up) brings a UD queue pair to RTS: the local
/// port and P_Key index, the Q_Key senders must name, and the send queue's PSN (default 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdBringUp {
    port: u8,
    pkey_index: u16,
    qkey: u32,
    sq_psn: u32,
}

impl UdBringUp {
    /// The defaults, on local port `port` (from 1), receiving datagrams that carry `qkey`.
    pub fn new(port: u8, qkey: u32) -> Self {
        Self {
            port,
            pkey_index: 0,
            qkey,
            sq_psn: 0,
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

    /// The send queue's PSN (default 0).
    pub fn setup_sq_psn(&mut self, sq_psn: u32) -> &mut Self {
        self.sq_psn = sq_psn;
        self
    }

    /// The three transitions' attributes: RESET → INIT, INIT → RTR, RTR → RTS.
    pub(crate) fn attributes(&self) -> [QueuePairAttribute; 3] {
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
impl SharedReceiveQueuePair<UnreliableDatagram> {
    /// Brings the UD queue pair from RESET to RTS in one call (RESET → INIT → RTR → RTS, each
    /// checked against the UD table), after checking that the port exists.
    ///
    /// # Errors
    ///
    /// - [`InvalidPort`](BringUpUdErrorKind::InvalidPort): `ibv_query_port` refused the port;
    /// - [`Modify`](BringUpUdErrorKind::Modify): a transition was refused (not in RESET, or by
    ///   the library).
    pub fn bring_up(&mut self, params: &UdBringUp) -> Result<(), BringUpUdError> {
        self.query_port(params.port)
            .map_err(|source| BringUpUdErrorKind::InvalidPort {
                port: params.port,
                source,
            })?;
        for attr in &params.attributes() {
            self.modify(attr).map_err(BringUpUdErrorKind::Modify)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ibverbs::queue_pair::transition::UNRELIABLE_DATAGRAM;

    #[test]
    fn ud_attributes_pass_the_ud_table_in_order() {
        let mut params = UdBringUp::new(1, 0x1111_2222);
        params.setup_sq_psn(9);
        let attributes = params.attributes();
        let mut state = QueuePairState::Reset;
        for attr in &attributes {
            UNRELIABLE_DATAGRAM.check(state, attr).expect("a legal transition");
            state = attr.state();
        }
        assert_eq!(state, QueuePairState::ReadyToSend);
        assert_eq!((attributes[0].qkey(), attributes[2].sq_psn()), (0x1111_2222, 9));
    }
}
