//! Bringing RC and UD queue pairs to RTS in one call, as DC's `bring_up` does: a UD queue pair
//! from a port and a Q_Key ([`UdBringUp`]), an RC queue pair from the peer's [`RcEndpoint`]
//! ([`RcBringUp`]), each RESET → INIT → RTR → RTS, every transition checked against the
//! queue-pair type's table before `ibv_modify_qp`.
//!
//! An RC connection is two queue pairs that each know the other: each side describes its queue
//! pair with [`SharedReceiveQueuePair::endpoint`] (its port's LID, the GID it sends from, its
//! queue pair number and first PSN), sends that to the peer out of band (over TCP; with the
//! `serde` feature it serializes), and brings its queue pair up with the peer's:
//!
//! ```no_run
//! use sideway::ibverbs::device::{DeviceInfo, DeviceList};
//! use sideway_ext::ibverbs::bring_up::{RcBringUp, RcEndpoint, UdBringUp};
//! use sideway_ext::ibverbs::extension::DeviceContextExt;
//! use sideway_ext::ibverbs::source_gid::SourceGid;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let devices = DeviceList::new()?;
//!     let ctx = devices.iter().next().ok_or("no RDMA device")?.open()?;
//!     let pd = ctx.alloc_pd()?;
//!     let cq = ctx.create_cq_builder().setup_cqe(64).build()?;
//!     let srq = sideway_ext::ibverbs::extension::ProtectionDomainExt::create_srq_builder(&pd).build()?;
//!     let mut builder = srq.create_qp_builder();
//!     builder.setup_send_cq(cq.clone()).setup_recv_cq(cq);
//!
//!     // RC: port 1, sending from its RoCE v2 GID (on RoCE one is required; on InfiniBand none).
//!     let mut rc = builder.build_rc()?;
//!     let mut params = RcBringUp::new(1);
//!     if let Some(local) = ctx.source_gid(1, &SourceGid::Automatic)? {
//!         params.setup_src_gid_index(local.index());
//!     }
//!     let mine: RcEndpoint = rc.endpoint(&params)?;
//!     let theirs = mine; // ... sent to the peer, and the peer's received, over TCP ...
//!     rc.bring_up(&params, &theirs)?;
//!
//!     // UD: port 1 and the Q_Key senders name.
//!     let mut ud = builder.build_ud()?;
//!     ud.bring_up(&UdBringUp::new(1, 0x1111_1111))?;
//!     Ok(())
//! }
//! ```
//!
//! A UD server answers each sender through an address handle made from the sender's receive
//! completion and the GRH at the start of its buffer:
//! [`create_ah_from_wc`](super::extension::ProtectionDomainExt::create_ah_from_wc).
//!
//! # Reference
//!
//! - RDMAmojo: [`ibv_modify_qp`](https://www.rdmamojo.com/2013/01/12/ibv_modify_qp/),
//!   [QP state machine](https://www.rdmamojo.com/2012/05/05/qp-state-machine/),
//!   [`ibv_query_port`](https://www.rdmamojo.com/2012/07/21/ibv_query_port/),
//!   [`ibv_query_gid`](https://www.rdmamojo.com/2012/08/02/ibv_query_gid/)
//! - rdma-core manpages: [`ibv_modify_qp`](https://man7.org/linux/man-pages/man3/ibv_modify_qp.3.html),
//!   [`ibv_query_port`](https://man7.org/linux/man-pages/man3/ibv_query_port.3.html); rdma-core's
//!   `ibv_rc_pingpong` and `ibv_ud_pingpong`, whose attributes the defaults follow
mod endpoint;
mod reliable_connection;
mod unreliable_datagram;

use std::io;

pub use self::endpoint::{InvalidRcEndpointError, InvalidRcEndpointErrorKind, RcEndpoint, MAX_PSN, MAX_QP_NUMBER};
pub use self::reliable_connection::{
    BringUpRcError, BringUpRcErrorKind, QueryRcEndpointError, QueryRcEndpointErrorKind, RcBringUp,
};
pub use self::unreliable_datagram::{BringUpUdError, BringUpUdErrorKind, UdBringUp};
use super::post_send_guard::Transport;
use super::queue_pair::SharedReceiveQueuePair;

impl<T: Transport> SharedReceiveQueuePair<T> {
    /// `ibv_query_port` on the queue pair's device.
    fn query_port(&self, port: u8) -> io::Result<rdma_mummy_sys::ibv_port_attr> {
        self.core().query_port(port)
    }
}
