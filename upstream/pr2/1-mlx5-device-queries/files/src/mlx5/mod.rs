//! mlx5 direct verbs (`mlx5dv_*`): the NVIDIA/Mellanox ConnectX provider's extensions to
//! libibverbs, here its device queries.
//!
//! Only compiled with the `mlx5` feature. rdma-mummy-sys loads libmlx5 at run time: on a device
//! that is not mlx5, or where libmlx5 is missing, every query reports "not supported" instead of
//! failing to link or panicking.
//!
//! - [`device_context`](crate::mlx5::device_context):
//!   [`Mlx5DeviceContext`](crate::mlx5::device_context::Mlx5DeviceContext), built from a
//!   [`DeviceContext`](crate::ibverbs::device_context::DeviceContext), and its queries;
//! - [`device_attributes`](crate::mlx5::device_attributes): the attributes `mlx5dv_query_device`
//!   returns, decoded;
//! - [`dc_capabilities`](crate::mlx5::dc_capabilities): the DC (Dynamically Connected transport)
//!   summary: can the device have DC, its read/atomic depths, DCI streams, on-demand paging.
//!
//! # Is this device mlx5, and what can its DC do?
//!
//! Ask before building anything (`examples/mlx5_devinfo.rs` prints all of it, `--json` for
//! scripts):
//!
//! ```no_run
//! use sideway::ibverbs::device::{DeviceInfo, DeviceList};
//! use sideway::mlx5::device_attributes::Mlx5ContextFlags;
//! use sideway::mlx5::device_context::Mlx5DeviceContext;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let devices = DeviceList::new()?;
//!     for device in devices.iter() {
//!         let mlx5 = Mlx5DeviceContext::new(device.open()?);
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
pub mod dc_capabilities;
pub mod device_attributes;
pub mod device_context;
