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
//! - [`dc_capabilities`]: the DC summary (can the device have DC, read/atomic depths, DCI streams,
//!   ODP, the largest send request);
//! - [`send_wqe_sizes`]: the largest send request the device takes (`max_wqe_sz_sq`,
//!   `max_wqe_sz_sq_dc`), read with `QUERY_HCA_CAP`;
//! - [`dc`]: DC initiators and targets, and their endpoints (a pool of initiators is the crate
//!   `sideway-ext-dc-pool`);
//! - [`direct_objects`]: the memory behind a queue pair, CQ and address handle
//!   (`mlx5dv_init_obj`), for code that writes its own WQEs (`sideway-ext-dc-direct`);
//! - [`extension`]: the DC factories on sideway's protection domain (`pd.create_dci_builder()`,
//!   `pd.create_dct_builder()`).
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
//! It builds a DC target on a shared receive queue and a DC initiator, then runs an RDMA WRITE
//! and READ of 4 KiB (checked byte for byte), fetch-and-add and compare-and-swap, a SEND into the
//! target's SRQ, a write with a wrong DC key and one to a destroyed DC target (each: the error
//! completion, the initiator in ERR, `recover`, a write that arrives), and an errored DCI stream
//! where the device has streams. It prints one line per check, `ok`, `FAILED` with the
//! completion status, or `skipped` with why, and exits 0 when nothing failed, 2 when a check
//! failed, and 1 with one line on a device that is not mlx5, as on SoftRoCE. With
//! `--report FILE` it also writes a JSON report to attach to an issue (versions, device,
//! capabilities, granted sizes, each check, each fault's status, vendor syndrome and time; see
//! TESTING.md). The ConnectX test suite (TESTING.md) goes further.
pub mod dc;
pub mod dc_capabilities;
pub mod device_attributes;
pub mod device_context;
pub mod direct_objects;
pub mod extension;
mod library;
pub mod send_wqe_sizes;
