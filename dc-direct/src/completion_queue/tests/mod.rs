//! The poller's tests: its own reading of CQE layouts (`layout`), the comparison with
//! libmlx5's `mlx5_poll_cq` (`oracle`), one CQ shared by several send queues (`sharing`), and
//! the poller polled through its `struct ibv_cq` (`verbs`).

mod layout;
mod oracle;
mod oracle_support;
pub(super) mod sharing;
pub(crate) mod support;
mod verbs;
