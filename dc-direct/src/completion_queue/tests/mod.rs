//! The poller's tests: its own reading of CQE layouts (`layout`), the comparison with
//! libmlx5's `mlx5_poll_cq` (`oracle`), and one CQ shared by several send queues (`sharing`).

mod layout;
mod oracle;
mod oracle_support;
pub(super) mod sharing;
pub(crate) mod support;
