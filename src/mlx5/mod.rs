//! mlx5 direct verbs (`mlx5dv_*`): the NVIDIA/Mellanox ConnectX provider's extensions, among them
//! the DC (Dynamically Connected) transport.
//!
//! Only compiled with the `mlx5` feature. libmlx5 is loaded at run time: on a device that is not
//! mlx5, or where libmlx5 is missing, every call reports "not supported" instead of failing to
//! link or panicking.
//!
//! This folder holds the control plane; the DC data plane is in [`dc`]:
//! - [`device_context`]: [`Mlx5DeviceContext`](device_context::Mlx5DeviceContext), built from a
//!   sideway device context, and its queries;
//! - [`device_attributes`]: the attributes `mlx5dv_query_device` returns, decoded;
//! - [`dc_capabilities`]: the DC summary (is DC usable, read/atomic depths, DCI streams, ODP);
//! - [`dc`]: DC initiators and targets, their endpoints, and the pool of initiators;
//! - [`extension`]: the DC factories on sideway's protection domain (`pd.create_dci_builder()`,
//!   `pd.create_dct_builder()`, `pd.create_dci_pool_builder()`).
pub mod dc;
pub mod dc_capabilities;
pub mod device_attributes;
pub mod device_context;
pub mod extension;
mod library;
