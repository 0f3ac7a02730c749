//! The barrier the poller puts between the owner check and reading the rest of a CQE.

/// rdma-core's `udma_from_device_barrier` (`util/udma_barrier.h`): reads of a CQE's contents
/// happen after the read of its owner bit. On x86-64 a compiler barrier, on aarch64
/// `dmb oshld`.
///
/// TODO(lead): a placeholder until `src/barrier.rs` is on main; use its from-device barrier
/// instead. An acquire fence is a compiler barrier on x86-64 as rdma-core's is, but `dmb ishld`
/// (inner shareable) on aarch64 where rdma-core orders the outer shareable domain.
#[inline]
pub(super) fn from_device_barrier() {
    std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
}
