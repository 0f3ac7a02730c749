//! Extensions for the [sideway] RDMA verbs crate: shared receive queues, mlx5 direct verbs and
//! the DC (Dynamically Connected) transport, for programs that run RDMA on NVIDIA/Mellanox
//! ConnectX NICs and write their verbs code with sideway.
//!
//! Each part is shaped to move upstream into sideway under the same path (UPSTREAM.md is that
//! series), reusing sideway's objects ([`DeviceContext`], [`ProtectionDomain`], completion
//! queues, memory regions).
//!
//! # Features
//!
//! - always: [`ibverbs`], shared receive queues, RC/UD queue pairs on them, posting, address
//!   handles, async and completion events; proven on SoftRoCE.
//! - `mlx5`: `mlx5`, the direct-verbs device context and DC capability queries, and `mlx5::dc`,
//!   DC initiators and targets, checked on a software ConnectX (softmlx5: libmlx5's own code,
//!   mlx5_ib's rules), not yet run on a ConnectX. libmlx5 is loaded at run time: on a device
//!   that is not mlx5, or without libmlx5, every mlx5 call is a typed "not supported" error.
//! - `tokio`: completion and asynchronous events awaited from a tokio task.
//! - `serde`: `Serialize`/`Deserialize` for a DC endpoint.
//!
//! A pool of DC initiators is a second crate, `sideway-ext-dc-pool`, on this crate's public API.
//!
//! # A first program
//!
//! Receive on many queue pairs through one shared receive queue:
//!
//! ```no_run
//! use sideway::ibverbs::device::{DeviceInfo, DeviceList};
//! use sideway::ibverbs::queue_pair::SetScatterGatherEntry;
//! use sideway::ibverbs::AccessFlags;
//! use sideway_ext::ibverbs::extension::{CompletionQueueExt, ProtectionDomainExt};
//! use sideway_ext::ibverbs::work_completion::WorkCompletion;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let devices = DeviceList::new()?;
//!     let ctx = devices.iter().next().ok_or("no RDMA device")?.open()?;
//!     let pd = ctx.alloc_pd()?;
//!     let cq = ctx.create_cq_builder().setup_cqe(256).build()?;
//!     let buffer = vec![0u8; 64 * 4096];
//!     let base = buffer.as_ptr() as u64;
//!     // SAFETY: the buffer outlives the memory region (dropped after it) and is never moved.
//!     let mr = unsafe { pd.reg_mr(base as usize, buffer.len(), AccessFlags::LocalWrite)? };
//!
//!     let srq = pd.create_srq_builder().setup_max_wr(64).setup_max_sge(1).build()?;
//!     let mut guard = srq.start_post_recv();
//!     for slot in 0..64u64 {
//!         // SAFETY: each slot lies in `mr` and stays valid until its receive completes.
//!         unsafe { guard.construct_wr(slot).setup_sge(mr.lkey(), base + slot * 4096, 4096) };
//!     }
//!     guard.post()?;
//!     // Four RC queue pairs receive through it (`modify` each to RTS towards its peer, then post).
//!     let qps = (0..4)
//!         .map(|_| srq.create_qp_builder().setup_send_cq(cq.clone()).setup_recv_cq(cq.clone()).build_rc())
//!         .collect::<Result<Vec<_>, _>>()?;
//!     let mut wcs = [WorkCompletion::default(); 16];
//!     for wc in cq.poll_work_completions(&mut wcs)? {
//!         println!("slot {} filled through QP {:#x}", wc.wr_id(), wc.qp_number());
//!     }
//!     # drop(qps);
//!     Ok(())
//! }
//! ```
//!
//! # The guide
//!
//! Each module's documentation is a chapter: [`ibverbs`] (one-request posts, what posting
//! guarantees, completion events), then [`ibverbs::async_event`] (the SRQ limit event); `mlx5`
//! (is this device mlx5, what can its DC do); `mlx5::dc` (a whole DC program, recovery). The
//! repository's `examples/` run on SoftRoCE, except `mlx5_devinfo --dc-selftest` and
//! `dc_hello`, which need a ConnectX-4 or newer.
//!
//! # Resource cleanup order
//!
//! Every object holds an [`Arc`] of each parent it was created from and destroys its own handle
//! before releasing them: whatever order a program drops its values in, a queue pair goes before
//! its shared receive queue, its protection domain and its device context.
//!
//! [sideway]: https://docs.rs/sideway
//! [`DeviceContext`]: sideway::ibverbs::device_context::DeviceContext
//! [`ProtectionDomain`]: sideway::ibverbs::protection_domain::ProtectionDomain
//! [`Arc`]: std::sync::Arc
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod ibverbs;

#[cfg(feature = "mlx5")]
#[cfg_attr(docsrs, doc(cfg(feature = "mlx5")))]
pub mod mlx5;

/// README's Rust snippets as doctests (with the `mlx5` feature, which one of them needs).
#[cfg(all(doctest, feature = "mlx5"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod test_support;
