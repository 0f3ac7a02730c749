//! The DC (Dynamically Connected) transport of mlx5: one DC initiator reaches many DC targets,
//! each work request naming its target (`mlx5dv_wr_set_dc_addr`). Only compiled with the `mlx5`
//! feature.
//!
//! - [`target`]: [`DcTarget`](target::DcTarget), the DC target (DCT), which receives through a
//!   shared receive queue what every DC initiator that names its DCT number and DC key sends:
//!   built with [`ProtectionDomain::create_dct_builder`], brought to RTR with
//!   [`modify`](target::DcTarget::modify), then its DCT number and DC key sent to the peers.
//!
//! [`ProtectionDomain::create_dct_builder`]: crate::ibverbs::protection_domain::ProtectionDomain::create_dct_builder
mod queue_pair;
mod state_table;
pub mod target;
