//! mlx5 direct verbs (`mlx5dv_*`): the NVIDIA/Mellanox ConnectX provider's extensions, among them
//! the DC (Dynamically Connected) transport.
//!
//! Only compiled with the `mlx5` feature. libmlx5 is loaded at run time: on a device that is not
//! mlx5, or where libmlx5 is missing, every call reports "not supported" instead of failing to
//! link or panicking.
//!
//! - [`device_context`]: [`Mlx5DeviceContext`](device_context::Mlx5DeviceContext), built from a
//!   sideway device context, and its queries;
//! - [`device_attributes`]: the attributes `mlx5dv_query_device` returns, decoded;
//! - [`dc_capabilities`]: the DC summary (is DC usable, read/atomic depths, DCI streams, ODP);
//! - [`dc_endpoint`]: [`DcEndpoint`](dc_endpoint::DcEndpoint), what a peer sends to be reached
//!   over DC (LID, GID, DCT number, DC key, RoCE or not; serializable with the `serde` feature),
//!   and the address handle that reaches it;
//! - [`dc_initiator`]: the DC initiator (DCI), whose requests are addressed one by one with
//!   `mlx5dv_wr_set_dc_addr`;
//! - [`dc_initiator_pool`]: [`DcInitiatorPool`](dc_initiator_pool::DcInitiatorPool), DC
//!   initiators on one send CQ assigned to many destinations by a policy, with every completion
//!   mapped back to its destination and initiators recovered after errors;
//! - [`dc_target`]: the DC target (DCT), which receives through a shared receive queue;
//! - [`extension`]: the DC factories on sideway's protection domain (`pd.create_dci_builder()`,
//!   `pd.create_dct_builder()`).
pub mod dc_capabilities;
pub mod dc_endpoint;
pub mod dc_initiator;
pub mod dc_initiator_pool;
#[cfg(test)]
mod dc_model;
mod dc_pool_assignment;
#[cfg(test)]
mod dc_pool_simulation;
#[cfg(test)]
mod dc_reference_rules;
mod dc_state_table;
pub mod dc_target;
pub mod device_attributes;
pub mod device_context;
pub mod extension;
mod library;
