//! The poller's tests: its own reading of CQE layouts (`layout`), and the comparison with
//! libmlx5's `mlx5_poll_cq` (`oracle`).

mod layout;
mod oracle;
mod oracle_support;
mod support;
