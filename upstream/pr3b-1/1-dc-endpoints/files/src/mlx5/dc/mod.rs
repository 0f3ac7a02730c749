//! The DC (Dynamically Connected) transport of mlx5: one DC initiator reaches many DC targets,
//! each work request naming its target (`mlx5dv_wr_set_dc_addr`). Only compiled with the `mlx5`
//! feature.
//!
//! - [`endpoint`]: [`DcEndpoint`](endpoint::DcEndpoint), what a peer sends to be reached over DC
//!   (its port's LID and GID, the DCT number and DC key, whether the port is RoCE, its path MTU;
//!   serializable, the GID as IPv6 text), the address handle that reaches it from a local port
//!   (global on RoCE, the LID on InfiniBand, after checking that both ports are on the same link
//!   layer), and [`DcServiceClass`](endpoint::DcServiceClass), the traffic class, flow label and
//!   service level DC packets are sent with.
//!
//! ```no_run
//! use sideway::ibverbs::device::{DeviceInfo, DeviceList};
//! use sideway::ibverbs::source_gid::SourceGid;
//! use sideway::mlx5::dc::endpoint::{DcEndpoint, DcServiceClass};
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let devices = DeviceList::new()?;
//!     let ctx = devices.iter().next().ok_or("no RDMA device")?.open()?;
//!     let pd = ctx.alloc_pd()?;
//!     // Sent by the peer, e.g. as JSON:
//!     let remote: DcEndpoint = serde_json::from_str(
//!         r#"{"lid":0,"gid":"::ffff:192.0.2.7","dct_number":4660,"dc_key":1,"is_roce":true,"path_mtu":1024}"#,
//!     )?;
//!     // Sent from the local port's RoCE v2 GID (on InfiniBand, the LID is the address).
//!     let index = ctx.source_gid(1, &SourceGid::Automatic)?.map_or(0, |entry| entry.index());
//!     let mut class = DcServiceClass::new();
//!     class.setup_traffic_class(26 << 2); // DSCP 26
//!     let ah = remote.create_ah_with_class(&pd, 1, index, &class)?; // once per destination
//!     println!("{remote:?} through {:?}", ah.attribute());
//!     Ok(())
//! }
//! ```
pub mod endpoint;
mod service_class;
