//! The operation types of [`Operation`]: one per `ibv_wr_*` builder, each what a request's
//! operation step issues.
use rdma_mummy_sys::{
    ibv_qp_ex, ibv_wr_atomic_cmp_swp, ibv_wr_atomic_fetch_add, ibv_wr_rdma_read, ibv_wr_rdma_write,
    ibv_wr_rdma_write_imm, ibv_wr_send, ibv_wr_send_imm,
};

use super::{entry, sealed, Operation};

macro_rules! operations {
    ($($(#[$doc:meta])* $name:ident { $($field:ident: $ty:ty),* } => $entry:ident, $call:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name {
            $(pub(crate) $field: $ty,)*
        }

        impl sealed::Sealed for $name {}

        impl Operation for $name {
            const ENTRY: u32 = entry::$entry;

            #[inline]
            unsafe fn build(self, qp: *mut ibv_qp_ex) {
                $call(qp $(, self.$field)*)
            }
        }
    )*};
}

operations! {
    /// A SEND (`ibv_wr_send`).
    Send {} => SEND, ibv_wr_send;
    /// A SEND with immediate data (`ibv_wr_send_imm`).
    SendWithImmediate { imm_data: u32 } => SEND_IMM, ibv_wr_send_imm;
    /// An RDMA WRITE (`ibv_wr_rdma_write`).
    Write { rkey: u32, remote_addr: u64 } => RDMA_WRITE, ibv_wr_rdma_write;
    /// An RDMA WRITE with immediate data (`ibv_wr_rdma_write_imm`).
    WriteWithImmediate { rkey: u32, remote_addr: u64, imm_data: u32 } => RDMA_WRITE_IMM, ibv_wr_rdma_write_imm;
    /// An RDMA READ (`ibv_wr_rdma_read`).
    Read { rkey: u32, remote_addr: u64 } => RDMA_READ, ibv_wr_rdma_read;
    /// An atomic compare-and-swap (`ibv_wr_atomic_cmp_swp`).
    AtomicCompareAndSwap { rkey: u32, remote_addr: u64, compare: u64, swap: u64 } => ATOMIC_CMP_SWP, ibv_wr_atomic_cmp_swp;
    /// An atomic fetch-and-add (`ibv_wr_atomic_fetch_add`).
    AtomicFetchAndAdd { rkey: u32, remote_addr: u64, add: u64 } => ATOMIC_FETCH_ADD, ibv_wr_atomic_fetch_add;
}
