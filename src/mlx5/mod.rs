//! mlx5 direct verbs (`mlx5dv_*`): the NVIDIA/Mellanox ConnectX provider's extensions, among them
//! the DC (Dynamically Connected) transport.
//!
//! Only compiled with the `mlx5` feature. libmlx5 is loaded at run time: on a device that is not
//! mlx5, or where libmlx5 is missing, every call reports "not supported" instead of failing to
//! link or panicking.
//!
//! This folder holds the control plane (the device context and its queries); the DC transport
//! is in [`dc`], a pool of its initiators in the crate `sideway-ext-dc-pool`.
//!
//! # Is this device mlx5, and what can its DC do?
//!
//! Ask before building anything (`examples/mlx5_devinfo` prints all of it, `--json` for
//! scripts):
//!
//! ```no_run
//! use sideway::ibverbs::device::{DeviceInfo, DeviceList};
//! use sideway_ext::mlx5::device_attributes::Mlx5ContextFlags;
//! use sideway_ext::mlx5::device_context::Mlx5DeviceContext;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let devices = DeviceList::new()?;
//!     for device in devices.iter() {
//!         let mlx5 = Mlx5DeviceContext::new(device.open()?); // over sideway's DeviceContext
//!         match mlx5.query_device() {
//!             Ok(attr) => println!("{}: CQE v1: {}", device.name(), attr.flags().contains(Mlx5ContextFlags::CqeV1)),
//!             Err(err) if err.is_not_supported() => println!("{}: not mlx5 (or no libmlx5)", device.name()),
//!             Err(err) => return Err(err.into()),
//!         }
//!         let dc = mlx5.query_dc_capabilities()?; // also on devices that are not mlx5
//!         println!("DC: {}, read/atomic depths {:?}/{:?}", dc.is_supported(), dc.max_dc_rd_atom(), dc.max_dc_init_rd_atom());
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # First run on a ConnectX: the DC self-test
//!
//! The first command to run on a ConnectX-4 or newer (rdma-core with libmlx5 installed, port 1
//! up) checks DC end to end on that one host, in loopback on port 1:
//!
//! ```sh
//! cargo run --features mlx5 --example mlx5_devinfo -- --dc-selftest -d mlx5_0
//! ```
//!
//! It runs each DC operation, the faults a DC initiator recovers from and an errored DCI stream
//! against a DC target on the same port, prints one line per check (`ok`, `FAILED`, `skipped`)
//! and exits 0, 2 when a check failed, 1 on a device that is not mlx5; `--report FILE` writes
//! the JSON report TESTING.md describes.
pub mod dc;
pub mod dc_capabilities;
pub mod device_attributes;
pub mod device_context;
pub mod direct_objects;
pub mod extension;
mod library;
pub mod send_wqe_sizes;
