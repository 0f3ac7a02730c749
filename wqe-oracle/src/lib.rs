//! libmlx5's own send and completion paths over plain memory: the oracle that
//! sideway-ext-dc-direct's WQE writer and completion poller are compared with, byte for byte.
//! Test-only; see `Cargo.toml` for where rdma-core's source comes from.
