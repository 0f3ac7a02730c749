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

/// One build of libmlx5's objects and the shim: their entry points.
pub(crate) struct Variant {
    pub dci_new: unsafe extern "C" fn(*const DciShapeC) -> *mut OracleDciC,
    pub dci_free: unsafe extern "C" fn(*mut OracleDciC),
    pub dci_qp_ex: unsafe extern "C" fn(*mut OracleDciC) -> *mut ibv_qp_ex,
    pub dci_mlx5: unsafe extern "C" fn(*mut OracleDciC) -> *mut mlx5dv_qp_ex,
    pub dci_view: unsafe extern "C" fn(*const OracleDciC, *mut SendQueueViewC),
    pub dci_retire_all: unsafe extern "C" fn(*mut OracleDciC),
    pub ah_new: unsafe extern "C" fn(*const u8) -> *mut ibv_ah,
    pub ah_free: unsafe extern "C" fn(*mut ibv_ah),
    pub ah_av: unsafe extern "C" fn(*const ibv_ah, *mut u8),
    pub cq_new: unsafe extern "C" fn(u32, u32) -> *mut OracleCqC,
    pub cq_free: unsafe extern "C" fn(*mut OracleCqC),
    pub cq_attach: unsafe extern "C" fn(*mut OracleCqC, *mut OracleDciC),
    pub cq_view: unsafe extern "C" fn(*const OracleCqC, *mut CompletionQueueViewC),
    pub cq_poll: unsafe extern "C" fn(*mut OracleCqC, i32, *mut ibv_wc) -> i32,
}

macro_rules! variant {
    ($module:ident, $name:ident, $prefix:literal) => {
        mod $module {
            use super::*;
            extern "C" {
                #[link_name = concat!($prefix, "oracle_dci_new")]
                pub fn dci_new(shape: *const DciShapeC) -> *mut OracleDciC;
                #[link_name = concat!($prefix, "oracle_dci_free")]
                pub fn dci_free(dci: *mut OracleDciC);
                #[link_name = concat!($prefix, "oracle_dci_qp_ex")]
                pub fn dci_qp_ex(dci: *mut OracleDciC) -> *mut ibv_qp_ex;
                #[link_name = concat!($prefix, "oracle_dci_mlx5")]
                pub fn dci_mlx5(dci: *mut OracleDciC) -> *mut mlx5dv_qp_ex;
                #[link_name = concat!($prefix, "oracle_dci_view")]
                pub fn dci_view(dci: *const OracleDciC, view: *mut SendQueueViewC);
                #[link_name = concat!($prefix, "oracle_dci_retire_all")]
                pub fn dci_retire_all(dci: *mut OracleDciC);
                #[link_name = concat!($prefix, "oracle_ah_new")]
                pub fn ah_new(av: *const u8) -> *mut ibv_ah;
                #[link_name = concat!($prefix, "oracle_ah_free")]
                pub fn ah_free(ah: *mut ibv_ah);
                #[link_name = concat!($prefix, "oracle_ah_av")]
                pub fn ah_av(ah: *const ibv_ah, av: *mut u8);
                #[link_name = concat!($prefix, "oracle_cq_new")]
                pub fn cq_new(cqe_count: u32, cq_number: u32) -> *mut OracleCqC;
                #[link_name = concat!($prefix, "oracle_cq_free")]
                pub fn cq_free(cq: *mut OracleCqC);
                #[link_name = concat!($prefix, "oracle_cq_attach")]
                pub fn cq_attach(cq: *mut OracleCqC, dci: *mut OracleDciC);
                #[link_name = concat!($prefix, "oracle_cq_view")]
                pub fn cq_view(cq: *const OracleCqC, view: *mut CompletionQueueViewC);
                #[link_name = concat!($prefix, "oracle_cq_poll")]
                pub fn cq_poll(cq: *mut OracleCqC, entries: i32, wc: *mut ibv_wc) -> i32;
            }
        }

        pub(crate) static $name: Variant = Variant {
            dci_new: $module::dci_new,
            dci_free: $module::dci_free,
            dci_qp_ex: $module::dci_qp_ex,
            dci_mlx5: $module::dci_mlx5,
            dci_view: $module::dci_view,
            dci_retire_all: $module::dci_retire_all,
            ah_new: $module::ah_new,
            ah_free: $module::ah_free,
            ah_av: $module::ah_av,
            cq_new: $module::cq_new,
            cq_free: $module::cq_free,
            cq_attach: $module::cq_attach,
            cq_view: $module::cq_view,
            cq_poll: $module::cq_poll,
        };
    };
}

// libmlx5 with the recording barriers and stores (c/record/), and with rdma-core's own.
variant!(recorded, RECORDED, "");
variant!(plain, PLAIN, "plain_");

// The recorder, in the recorded build only.
extern "C" {
    pub(crate) fn oracle_events_len() -> usize;
    pub(crate) fn oracle_events() -> *const EventC;
    pub(crate) fn oracle_events_clear();
}
