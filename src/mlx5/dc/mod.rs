//! The DC (Dynamically Connected) transport: one initiator reaches many targets, each request
//! addressed on its own (`mlx5dv_wr_set_dc_addr`).
//!
//! A pool of DC initiators for many destinations is the crate `sideway-ext-dc-pool`, built on
//! this module's public API. The tests run on a software ConnectX (softmlx5, the workspace's test
//! tool), which runs libmlx5's own code and holds mlx5_ib's rules.
//!
//! # A DC program
//!
//! A DC target (DCT) receives through a shared receive queue; a DC initiator (DCI) sends to any
//! target, each work request naming it: address handle, DCT number, DC key. Both need a ConnectX
//! (elsewhere creation is the typed "not supported"). `examples/dc_hello.rs`: one DC target and
//! one DC initiator on the same port, an RDMA WRITE and a SEND, both checked
//! (`cargo run --features mlx5 --example dc_hello -- mlx5_0`).
//!
//! ```no_run
#![doc = include_str!("../../../examples/dc_hello.rs")]
//! ```
//!
//! A DC initiator reaches a target through the [`DcEndpoint`](endpoint::DcEndpoint) the peer
//! sends, turned into an address handle with `endpoint.create_ah(&pd, port, gid_index)`.
//!
//! # Across nodes
//!
//! What a single node in loopback never shows, bring-up settles for a routed RoCE v2 fabric:
//!
//! - **GID.** On RoCE both ends send from the port's RoCE v2 GID by default
//!   ([`SourceGid`](crate::ibverbs::source_gid::SourceGid)). A DC target's `endpoint()` announces
//!   the GID it answers from; a DC initiator's address handles use its
//!   [`source_gid`](initiator::DcInitiator::source_gid) index.
//! - **MTU: one for the fleet.** Each end of a DC exchange sends at its own path MTU, set at its
//!   own INIT → RTR, and nothing negotiates them: bring every DC initiator and target up with the
//!   smallest path MTU of the nodes they talk to (perftest's `check_mtu` does the same). Both ways
//!   fail otherwise, with `RETRY_EXC`:
//!   - a DC initiator sends every request at its path MTU: a target whose port takes less drops
//!     the larger packets (`setup_destination_path_mtu` with the endpoints' `path_mtu`; a pool
//!     refuses such a destination);
//!   - a DC target answers an RDMA READ at *its* path MTU (`mlx5_ib_modify_dct` sets
//!     `dctc.mtu`): an initiator at a smaller MTU drops the responses of a READ longer than its
//!     own. The DC post guard does not refuse it: check both MTUs (the target's from its
//!     endpoint) before such a READ with sideway-ext-dc-pool's `PathMtus::read_fits` (its pool
//!     refuses such a READ, `ReadResponsesTooLarge`, where both are known).
//!
//!   This is what the kernel's and perftest's sources say; no ConnectX has confirmed it for
//!   sideway-ext.
//! - **Port.** A port that is not active, or an InfiniBand port without a LID, is refused before
//!   any transition (`PortNotReady`).
//!
//! # After an error
//!
//! An error completion (wrong key, target gone) puts a DC initiator in ERR for every target:
//! poll its completions, then `dci.recover()?` brings it back to RTS (through RESET, or by
//! creating it again where the kernel refuses that: `DcRecovery::Reset` or `Rebuilt`).
//!
//! # Reference
//!
//! - rdma-core manpages: [`mlx5dv_create_qp`](https://man7.org/linux/man-pages/man3/mlx5dv_create_qp.3.html),
//!   [`mlx5dv_wr_post`](https://man7.org/linux/man-pages/man3/mlx5dv_wr_post.3.html) (`mlx5dv_wr_set_dc_addr`),
//!   [`ibv_create_ah`](https://man7.org/linux/man-pages/man3/ibv_create_ah.3.html),
//!   [`ibv_query_port`](https://man7.org/linux/man-pages/man3/ibv_query_port.3.html)
//! - Linux `drivers/infiniband/hw/mlx5/qp.c`: `modify_dci_qp_is_ok`, `mlx5_ib_modify_dct`, `is_valid_mask`
pub mod adopted;
pub mod endpoint;
pub mod initiator;
mod port;
mod post_one;
mod queue_pair;
mod service_class;
mod state_table;
pub mod streams;
pub mod target;
pub mod target_bring_up;

pub use self::port::PortNotReady;
