//! [`QueuePairVerbs`], the library calls the queue-pair core makes outside the data path, and
//! [`LIBIBVERBS`], the real library's.
use rdma_mummy_sys::{ibv_qp, ibv_qp_attr, ibv_qp_ex, ibv_qp_init_attr};

/// The calls the queue-pair core makes outside the data path, as a table of functions: the real
/// library's ([`LIBIBVERBS`]), or in unit tests a model of the kernel's rules that records them,
/// so that the public API of a queue pair can be driven without a device.
#[derive(Debug)]
pub(crate) struct QueuePairVerbs {
    /// `ibv_modify_qp`: an errno value, 0 on success; updates `ibv_qp::state` on success.
    pub(crate) modify: unsafe fn(*mut ibv_qp, *mut ibv_qp_attr, i32) -> i32,
    /// `ibv_query_qp`: an errno value, 0 on success.
    pub(crate) query: unsafe fn(*mut ibv_qp, *mut ibv_qp_attr, i32, *mut ibv_qp_init_attr) -> i32,
    /// `ibv_destroy_qp`: an errno value, 0 on success.
    pub(crate) destroy: unsafe fn(*mut ibv_qp) -> i32,
    /// `ibv_qp_to_qp_ex`: NULL when the queue pair has no extended view.
    pub(crate) to_qp_ex: unsafe fn(*mut ibv_qp) -> *mut ibv_qp_ex,
    /// `ibv_query_port`: an errno value, 0 on success.
    pub(crate) query_port: unsafe fn(*mut rdma_mummy_sys::ibv_context, u8, *mut rdma_mummy_sys::ibv_port_attr) -> i32,
    /// `ibv_query_gid_ex` without flags: an errno value, 0 on success (`ENODATA`: an empty
    /// slot). (Used by DC bring-up.)
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub(crate) query_gid_entry:
        unsafe fn(*mut rdma_mummy_sys::ibv_context, u8, u32, *mut rdma_mummy_sys::ibv_gid_entry) -> i32,
}

/// libibverbs itself, as rdma-mummy-sys loads it.
pub(crate) static LIBIBVERBS: QueuePairVerbs = QueuePairVerbs {
    modify: libibverbs::modify,
    query: libibverbs::query,
    destroy: libibverbs::destroy,
    to_qp_ex: libibverbs::to_qp_ex,
    query_port: libibverbs::query_port,
    query_gid_entry: crate::ibverbs::source_gid::query_gid_entry,
};

mod libibverbs {
    //! Thin forwarders with the [`QueuePairVerbs`](super::QueuePairVerbs) signatures.
    //!
    //! # Safety
    //!
    //! Each takes the pointers of the C function it forwards to, with the same requirements.
    use rdma_mummy_sys::{ibv_context, ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_ex, ibv_qp_init_attr};

    /// # Safety
    ///
    /// As `ibv_modify_qp`: a live queue pair and a valid attribute struct.
    pub(super) unsafe fn modify(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: i32) -> i32 {
        rdma_mummy_sys::ibv_modify_qp(qp, attr, mask)
    }

    /// # Safety
    ///
    /// As `ibv_query_qp`: a live queue pair and writable structs.
    pub(super) unsafe fn query(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: i32, init: *mut ibv_qp_init_attr) -> i32 {
        rdma_mummy_sys::ibv_query_qp(qp, attr, mask, init)
    }

    /// # Safety
    ///
    /// As `ibv_destroy_qp`: a live queue pair, not used afterwards.
    pub(super) unsafe fn destroy(qp: *mut ibv_qp) -> i32 {
        rdma_mummy_sys::ibv_destroy_qp(qp)
    }

    /// # Safety
    ///
    /// As `ibv_qp_to_qp_ex`: a live queue pair.
    pub(super) unsafe fn to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
        rdma_mummy_sys::ibv_qp_to_qp_ex(qp)
    }

    /// # Safety
    ///
    /// As `ibv_query_port`: an open context and a writable struct.
    pub(super) unsafe fn query_port(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> i32 {
        rdma_mummy_sys::ibv_query_port(context, port, attr)
    }
}
