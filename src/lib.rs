//! Extensions for the [sideway] RDMA verbs crate.
//!
//! sideway-ext adds what sideway 0.4.3 does not have yet, shaped so that each part can move
//! upstream into sideway as one pull request, under the same public path:
//!
//! - [`ibverbs`]: shared receive queues and the queue pairs that receive through them, address
//!   handles, asynchronous events and completion events (plain libibverbs, always compiled);
//! - `mlx5` (feature `mlx5`): mlx5 direct verbs, the device and DC (Dynamically Connected
//!   transport) capability queries and, later, DC queue pairs.
//!
//! The crate reuses sideway's objects ([`DeviceContext`], [`ProtectionDomain`], completion
//! queues, memory regions) and value types, and takes their raw handles through sideway's own
//! `unsafe` accessors.
//!
//! # Resource cleanup order
//!
//! Every object holds an [`Arc`] of each parent it was created from, and its `Drop` destroys its
//! own handle before those `Arc`s are released. So whatever order a program drops its values
//! in, a queue pair is destroyed before the shared receive queue it receives through, which is
//! destroyed before its protection domain, which goes before the device context.
//!
//! [sideway]: https://docs.rs/sideway
//! [`DeviceContext`]: sideway::ibverbs::device_context::DeviceContext
//! [`ProtectionDomain`]: sideway::ibverbs::protection_domain::ProtectionDomain
//! [`Arc`]: std::sync::Arc
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Declares an item the benchmarks reach over hand-made provider tables (raw posts, a pool of
/// counting initiators): `pub` and hidden from the docs with the non-default `__bench` feature,
/// which only `benches/` (and the allocation test over their workloads) enable; crate-private
/// without it. None of it is API.
macro_rules! bench_visible {
    ($(#[$attr:meta])* pub $($item:tt)*) => {
        #[cfg(feature = "__bench")]
        $(#[$attr])*
        #[doc(hidden)]
        pub $($item)*
        #[cfg(not(feature = "__bench"))]
        $(#[$attr])*
        #[allow(dead_code)]
        pub(crate) $($item)*
    };
}

pub mod ibverbs;

#[cfg(feature = "mlx5")]
#[cfg_attr(docsrs, doc(cfg(feature = "mlx5")))]
pub mod mlx5;

/// README's Rust snippets, compiled as doctests (`no_run`: they need a device to run). They
/// include the mlx5 one, so they are checked with the `mlx5` feature: `cargo test --features mlx5`.
#[cfg(all(doctest, feature = "mlx5"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod test_support;
