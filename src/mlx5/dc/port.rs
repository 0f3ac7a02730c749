//! Whether a port can carry DC traffic, checked by the bring-up of both DC queue pairs before any
//! transition ([`PortNotReady`]), and its active MTU, which they are brought up with.
use sideway::ibverbs::device_context::Mtu;

/// Why a port cannot carry DC traffic yet, found by bring-up before any transition (a queue pair
/// brought up on it would fail every request with `RETRY_EXC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PortNotReady {
    /// The port's logical state is not `IBV_PORT_ACTIVE`.
    #[error("port {port} is not active (state {}): bring its link up first", port_state_name(*.state))]
    NotActive {
        /// The port.
        port: u8,
        /// Its `ibv_port_state` value.
        state: u32,
    },
    /// An InfiniBand port without a LID (0): no subnet manager has assigned one.
    #[error("InfiniBand port {port} has no LID: is a subnet manager running?")]
    NoLid {
        /// The port.
        port: u8,
    },
}

/// `ibv_port_state_str`'s names.
fn port_state_name(state: u32) -> String {
    match state {
        0 => "NOP".into(),
        1 => "DOWN".into(),
        2 => "INIT".into(),
        3 => "ARMED".into(),
        4 => "ACTIVE".into(),
        5 => "ACTIVE_DEFER".into(),
        other => other.to_string(),
    }
}

/// Refuses a port that cannot carry DC traffic yet ([`PortNotReady`]).
pub(crate) fn check_port_ready(port: u8, attr: &rdma_mummy_sys::ibv_port_attr) -> Result<(), PortNotReady> {
    if attr.state != rdma_mummy_sys::ibv_port_state::IBV_PORT_ACTIVE {
        return Err(PortNotReady::NotActive {
            port,
            state: attr.state,
        });
    }
    if attr.link_layer != rdma_mummy_sys::IBV_LINK_LAYER_ETHERNET && attr.lid == 0 {
        return Err(PortNotReady::NoLid { port });
    }
    Ok(())
}

/// A port's active MTU (`ibv_port_attr::active_mtu`).
pub(crate) fn active_mtu(attr: &rdma_mummy_sys::ibv_port_attr) -> Mtu {
    match attr.active_mtu {
        1..=5 => Mtu::from(attr.active_mtu),
        // A value this crate does not know: the smallest MTU every port supports.
        _ => Mtu::Mtu1024,
    }
}

#[cfg(test)]
mod tests {
    use rdma_mummy_sys::ibv_port_state::{IBV_PORT_ACTIVE, IBV_PORT_DOWN};

    use super::*;

    fn port(state: u32, link_layer: u8, lid: u16) -> rdma_mummy_sys::ibv_port_attr {
        // SAFETY: ibv_port_attr is plain data for which all zeroes is valid.
        let mut attr: rdma_mummy_sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        attr.state = state;
        attr.link_layer = link_layer;
        attr.lid = lid;
        attr
    }

    /// The ports the software ConnectX cannot be: an InfiniBand port no subnet manager gave a LID
    /// (its ports always have one); and the rest of the rule beside it.
    #[test]
    fn a_port_is_ready_when_active_and_on_infiniband_with_a_lid() {
        let (infiniband, ethernet) = (1, rdma_mummy_sys::IBV_LINK_LAYER_ETHERNET);
        assert_eq!(check_port_ready(1, &port(IBV_PORT_ACTIVE, infiniband, 7)), Ok(()));
        assert_eq!(
            check_port_ready(1, &port(IBV_PORT_ACTIVE, infiniband, 0)),
            Err(PortNotReady::NoLid { port: 1 })
        );
        assert_eq!(
            PortNotReady::NoLid { port: 1 }.to_string(),
            "InfiniBand port 1 has no LID: is a subnet manager running?"
        );
        // RoCE has no LID: active is enough.
        assert_eq!(check_port_ready(2, &port(IBV_PORT_ACTIVE, ethernet, 0)), Ok(()));
        assert_eq!(
            check_port_ready(1, &port(IBV_PORT_DOWN, infiniband, 7)),
            Err(PortNotReady::NotActive {
                port: 1,
                state: IBV_PORT_DOWN
            })
        );
    }
}
