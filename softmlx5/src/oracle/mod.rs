//! libmlx5's own send and completion paths over plain memory: the oracle that
//! sideway-ext-dc-direct's WQE writer and completion poller are compared with, byte for byte
//! (its unit tests and its instruction benchmark), beside the software device that runs the same
//! `qp.c` and `cq.c` behind the verbs: this package is the one that compiles libmlx5.
//!
//! softmlx5's `build.rs` compiles rdma-core 55's `providers/mlx5/qp.c` and `cq.c` unmodified, from the
//! crates.io package ibverbs-sys (unpacked by `cargo fetch`; nothing of rdma-core is copied
//! here), with `c/shim.c`, which fills libmlx5's private `struct mlx5_qp` and `struct mlx5_cq` as
//! its creation paths leave them, and with stand-ins for `util/udma_barrier.h` and `util/mmio.h`
//! (`c/record/`) that record each barrier and MMIO store instead of issuing it.
//!
//! - [`OracleDci`]: a DC initiator in RTS whose `ibv_qp_ex` and mlx5 view carry libmlx5's own
//!   builders (`ibv_wr_start`, `ibv_wr_rdma_write`, `mlx5dv_wr_set_dc_addr`, …, `ibv_wr_complete`
//!   through rdma-mummy-sys drive them); its send queue, doorbell record, BlueFlame register and
//!   the [`MmioEvent`]s of each doorbell are read back.
//! - [`OracleAh`]: an address handle with a chosen 48-byte address vector.
//! - [`OracleCq`]: a CQ whose CQEs a test writes and libmlx5's `mlx5_poll_cq_v1` polls.
//! - [`decode`]: a WQE decoder written from the mlx5 layout, for checks that a request's bytes say
//!   what it asked.
//!
//! What it does not cover: the creation paths themselves (the shim transcribes what they leave,
//! `verbs.c`'s `create_qp` and `mlx5_calc_sq_size`, `mlx5_create_cq`), locks shared between
//! threads (the DCI's BlueFlame register is owned outright, `need_lock` 0), and everything a
//! device does with the bytes.
mod cq;
mod dci;
pub mod decode;
mod events;
mod ffi;

pub use cq::{CompletionQueueLayout, OracleCq};
pub use dci::{DciShape, OracleAh, OracleDci, SendQueueLayout};
pub use events::{Barrier, MmioEvent};
