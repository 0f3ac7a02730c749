//! mlx5 direct verbs (`mlx5dv_*`): the NVIDIA/Mellanox ConnectX provider's extensions, among them
//! the DC (Dynamically Connected) transport.
//!
//! Only compiled with the `mlx5` feature. libmlx5 is loaded at run time: on a device that is not
//! mlx5, or where libmlx5 is missing, every call reports "not supported" instead of failing to
//! link or panicking.
