//! The DC (Dynamically Connected) transport: one initiator reaches many targets, each request
//! addressed on its own (`mlx5dv_wr_set_dc_addr`).
//!
//! - [`endpoint`]: [`DcEndpoint`](endpoint::DcEndpoint), what a peer sends to be reached over DC
//!   (LID, GID, DCT number, DC key, RoCE or not; serializable with the `serde` feature), and the
//!   address handle that reaches it;
//! - [`initiator`]: the DC initiator (DCI), its bring-up and recovery, and the DC transport of
//!   the post guard, whose requests are addressed one by one;
//! - [`target`]: the DC target (DCT), which receives through a shared receive queue;
//! - [`pool`]: [`DcInitiatorPool`](pool::DcInitiatorPool), DC initiators on one send CQ assigned
//!   to many destinations by a policy, with every completion mapped back to its destination and
//!   initiators recovered after errors.
//!
//! The transition tables of both queue-pair types (which attributes each state change needs) are
//! in a private module; a model of mlx5_ib and libmlx5 and the rules it enforces, transcribed
//! from them, drive the public API in the unit tests without a device.
pub mod endpoint;
pub mod initiator;
#[cfg(test)]
mod model;
pub mod pool;
mod state_table;
pub mod target;
