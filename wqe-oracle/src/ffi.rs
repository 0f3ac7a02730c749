//! `c/oracle.h`, declared for Rust.
use rdma_mummy_sys::{ibv_ah, ibv_qp_ex, ibv_wc, mlx5dv_qp_ex};

#[repr(C)]
pub(crate) struct OracleDciC {
    _opaque: [u8; 0],
}

#[repr(C)]
pub(crate) struct OracleCqC {
    _opaque: [u8; 0],
}

#[repr(C)]
pub(crate) struct DciShapeC {
    pub wqe_count: u32,
    pub max_inline_data: u32,
    pub max_send_sge: u32,
    pub sq_sig_all: u32,
    pub send_ops_flags: u64,
    pub blueflame_size: u32,
    pub qp_number: u32,
}

#[repr(C)]
pub(crate) struct SendQueueViewC {
    pub buffer: *mut u8,
    pub wqe_count: u32,
    pub stride: u32,
    pub doorbell_record: *mut u32,
    pub blueflame: *mut u8,
    pub blueflame_size: u32,
    pub blueflame_offset: u32,
    pub posting_index: u32,
    pub head: u32,
    pub tail: u32,
    pub max_post: u32,
    pub max_inline_data: u32,
    pub user_index: u32,
    pub wrid: *const u64,
    pub wqe_head: *const u32,
}

#[repr(C)]
pub(crate) struct CompletionQueueViewC {
    pub buffer: *mut u8,
    pub cqe_count: u32,
    pub cqe_size: u32,
    pub doorbell_record: *mut u32,
    pub cq_number: u32,
    pub consumer_index: u32,
}

#[repr(C)]
pub(crate) struct EventC {
    pub kind: u32,
    pub len: u32,
    pub addr: usize,
    pub bytes: [u8; 8],
}

extern "C" {
    pub(crate) fn oracle_dci_new(shape: *const DciShapeC) -> *mut OracleDciC;
    pub(crate) fn oracle_dci_free(dci: *mut OracleDciC);
    pub(crate) fn oracle_dci_qp_ex(dci: *mut OracleDciC) -> *mut ibv_qp_ex;
    pub(crate) fn oracle_dci_mlx5(dci: *mut OracleDciC) -> *mut mlx5dv_qp_ex;
    pub(crate) fn oracle_dci_view(dci: *const OracleDciC, view: *mut SendQueueViewC);
    pub(crate) fn oracle_dci_retire_all(dci: *mut OracleDciC);

    pub(crate) fn oracle_ah_new(av: *const u8) -> *mut ibv_ah;
    pub(crate) fn oracle_ah_free(ah: *mut ibv_ah);
    pub(crate) fn oracle_ah_av(ah: *const ibv_ah, av: *mut u8);

    pub(crate) fn oracle_cq_new(cqe_count: u32, cq_number: u32) -> *mut OracleCqC;
    pub(crate) fn oracle_cq_free(cq: *mut OracleCqC);
    pub(crate) fn oracle_cq_attach(cq: *mut OracleCqC, dci: *mut OracleDciC);
    pub(crate) fn oracle_cq_view(cq: *const OracleCqC, view: *mut CompletionQueueViewC);
    pub(crate) fn oracle_cq_poll(cq: *mut OracleCqC, entries: i32, wc: *mut ibv_wc) -> i32;

    pub(crate) fn oracle_events_len() -> usize;
    pub(crate) fn oracle_events() -> *const EventC;
    pub(crate) fn oracle_events_clear();
}
