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
//! (on rxe, or without libmlx5, creation is the typed "not supported"). The whole of it in one
//! program, `examples/dc_hello.rs` as it is in the file: one DC target and one DC initiator on
//! the same port, an RDMA WRITE and a SEND addressed by the target's endpoint, both checked.
//! `cargo run --features mlx5 --example dc_hello -- mlx5_0` on a ConnectX; on rxe0 it stops with
//! "rxe0: not an mlx5 device".
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
//! - **GID.** On RoCE both ends send from the port's RoCE v2 GID by default, IPv4-mapped first
//!   ([`SourceGid`](crate::ibverbs::source_gid::SourceGid)); pick another by index, network device
//!   or address where a port has several. A RoCE v1 GID (mlx5's index 0) is refused: its packets
//!   have no IP header and no router forwards them. A DC target's `endpoint()` announces the GID
//!   it answers from; a DC initiator's address handles use its
//!   [`source_gid`](initiator::DcInitiator::source_gid) index.
//! - **MTU: one for the fleet.** Each end of a DC exchange sends at its own path MTU, set at its
//!   own INIT → RTR, and nothing negotiates them (perftest's `check_mtu` brings both ends of a
//!   test down to the smaller of their two; a DC program must do the same). Bring every DC
//!   initiator and target up with the smallest path MTU of the nodes they talk to (a 1500-byte
//!   Ethernet port is 1024, a 9000-byte one 4096). Both ways fail otherwise, with `RETRY_EXC`
//!   after the transport's retries (a pool then reports the destination unreachable):
//!   - a DC initiator sends every request at its path MTU, whatever the destination: a target
//!     whose port takes less drops the larger packets. Bring initiators up with the smallest of
//!     their destinations' (`setup_destination_path_mtu` with their endpoints' `path_mtu`); a pool
//!     refuses such a destination (`PathMtuTooSmall`);
//!   - a DC target answers an RDMA READ at *its* path MTU: the kernel programs a DCT with the
//!     path MTU of its INIT → RTR (`mlx5_ib_modify_dct` sets `dctc.mtu`), whatever initiator
//!     reads. An initiator at a smaller MTU drops the responses of a READ longer than its own
//!     MTU. Such a READ is refused before the provider
//!     (`TypedPostSendErrorKind::ReadResponsesTooLarge`), by a DC initiator, a pool, and a batch to
//!     one address whose guard was given both (`set_path_mtus`), where both are known: the initiator's
//!     once brought up, the target's from its endpoint (which `DcTarget::endpoint` fills and
//!     `DcEndpoint::create_ah` carries into the address handle). A READ of at most the
//!     initiator's MTU is one response packet and passes; atomics are never refused (their
//!     response is one 8-byte packet). Bring targets up with the fleet's MTU
//!     (`DcTargetBringUp::setup_path_mtu`).
//!
//!   An endpoint that does not say its MTU (from an older peer), a handle made from an attribute
//!   alone, or a raw address leaves the target's MTU unknown, and nothing is refused for it:
//!   the fleet rule is then the program's to keep (as it is for sideway-ext-dc-direct's own
//!   requests, whose address vectors carry no MTU). This is what the kernel's and perftest's
//!   sources say (`mlx5_ib_modify_dct`; perftest's `check_mtu`); no ConnectX has confirmed it
//!   for sideway-ext.
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
pub mod endpoint;
pub mod initiator;
mod queue_pair;
mod service_class;
mod state_table;
pub mod target;
