//! The rules the Linux mlx5 driver (mlx5_ib) and libmlx5 hold DC (Dynamically Connected) queue
//! pairs to, transcribed from their source, for tests and simulations of mlx5 DC: which
//! `ibv_modify_qp` a DC initiator (DCI) or target (DCT) accepts in each state, with which
//! attribute bits; which init attributes `mlx5dv_create_qp` creates a DCI or DCT from, and the
//! send queue it grants; and when DCI streams in error move a DCI to ERR. They keep the sources'
//! shapes (`IB_QP_*`/`IBV_QP_*` mask bits as `i32`, sideway's [`QueuePairState`], the
//! `ibv_qp_init_attr_ex` and `mlx5dv_qp_init_attr` of rdma-mummy-sys), and each names the function
//! it comes from.
//!
//! Used by sideway-ext's unit tests (its transition tables and the rule an RDMA READ's responses
//! are held to are checked against these rules; its DC tests run on the software ConnectX,
//! softmlx5, which holds the same rules) and by sideway-ext-dc-pool's simulated DC fabric, which
//! enforces them.
//! They are transcribed on their own from the sources below, deliberately never derived from
//! sideway-ext's tables or attribute builders: checking sideway-ext against them then proves
//! something.
//!
//! # Sources
//!
//! Public repositories:
//! - Linux `drivers/infiniband/core/verbs.c`: `rdma_check_ah_attr`; `include/rdma/ib_verbs.h`:
//!   `rdma_is_grh_required`;
//! - Linux `drivers/infiniband/hw/mlx5/qp.c`: `is_valid_mask`, `mlx5_ib_modify_qp`,
//!   `modify_dci_qp_is_ok`, `validate_rd_atomic`, `mlx5_ib_modify_dct`, `mlx5_ib_create_dct`,
//!   `check_qp_attr`, `process_vendor_flag`; its `main.c`: `mlx5_ib_query_device`,
//!   `mlx5_ib_alloc_ucontext` (what [`Device`] holds), `get_core_cap_flags`;
//! - rdma-core `providers/mlx5/{verbs.c,qp.c,mlx5.c}`: `mlx5dv_create_qp` (`create_qp`,
//!   `create_dct`), `_sq_overhead`, `mlx5_calc_send_wqe`, `mlx5_calc_sq_size`,
//!   `mlx5_qp_fill_wr_pfns`, `mlx5dv_dci_stream_id_reset`, `mlx5_init_context`,
//!   `_mlx5dv_query_device`; libibverbs `ibv_create_qp_ex`; rdma-core `tests/test_mlx5_dc.py`;
//! - perftest `src/perftest_communication.c`: `check_mtu`;
//! - the man pages mlx5dv_create_qp(3), mlx5dv_query_device(3) and mlx5dv_dci_stream_id_reset(3).
//!
//! # Example
//!
//! ```
//! use rdma_mummy_sys::ibv_qp_attr_mask as m;
//! use sideway::ibverbs::queue_pair::QueuePairState;
//! use sideway_ext_dc_rules::{modify_dci_qp_is_ok, DciKernel};
//!
//! let mask = (m::IBV_QP_STATE.0 | m::IBV_QP_PKEY_INDEX.0 | m::IBV_QP_PORT.0) as i32;
//! let (reset, init) = (QueuePairState::Reset, QueuePairState::Init);
//! assert!(modify_dci_qp_is_ok(reset, init, mask, DciKernel::CURRENT));
//! // INIT needs the port: the kernel refuses the state alone (EINVAL).
//! assert!(!modify_dci_qp_is_ok(reset, init, m::IBV_QP_STATE.0 as i32, DciKernel::CURRENT));
//! ```
#![deny(missing_docs)]

use rdma_mummy_sys::ibv_qp_attr_mask as m;
use rdma_mummy_sys::{
    ibv_qp_create_send_ops_flags as ops, ibv_qp_init_attr_ex, ibv_qp_init_attr_mask, ibv_qp_type, mlx5dv_qp_init_attr,
    mlx5dv_qp_init_attr_mask,
};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::QueuePairState::{self, *};

const fn bits(list: &[m]) -> i32 {
    let mut value = 0;
    let mut i = 0;
    while i < list.len() {
        value |= list[i].0 as i32;
        i += 1;
    }
    value
}

/// Kernel `is_valid_mask`: every required bit, nothing outside required and optional.
pub fn is_valid_mask(mask: i32, req: i32, opt: i32) -> bool {
    (mask & req) == req && (mask & !(req | opt)) == 0
}

/// The state a modification moves to, as kernel `mlx5_ib_modify_qp` computes it: the given one
/// with `IB_QP_STATE`, the current one otherwise.
pub fn new_state(cur: QueuePairState, mask: i32, given: QueuePairState) -> QueuePairState {
    if mask & bits(&[m::IBV_QP_STATE]) != 0 {
        given
    } else {
        cur
    }
}

/// Which kernel's `modify_dci_qp_is_ok`: its branches changed over time.
#[derive(Debug, Clone, Copy)]
pub struct DciKernel {
    /// The first branch, `new_state == IB_QPS_RESET` (any state to RESET, the state alone);
    /// older kernels have none, and refuse every move to RESET (`EINVAL`).
    pub reset_branch: bool,
    /// INIT → RTR takes `IB_QP_AV` as optional, beside `IB_QP_PKEY_INDEX`
    /// (`opt = IB_QP_PKEY_INDEX | IB_QP_AV`, so that a DCI can carry a service level or a
    /// LAG port, as UCX and perftest send); older kernels take `IB_QP_PKEY_INDEX` only, and
    /// refuse an address vector with `EINVAL`. Linux v5.0 is the first release with it: v4.20's
    /// `qp.c` has `opt = IB_QP_PKEY_INDEX` there and v5.0's `IB_QP_PKEY_INDEX | IB_QP_AV`, the
    /// function's only change between the two (the commit's id and subject were not found
    /// without the kernel's history). Distribution kernels whose mlx5_ib is older refuse it too
    /// (UCX's DCI RTR with an AV fails `EINVAL` on SLES 12 SP5's 4.12, openucx/ucx#8604).
    pub rtr_av: bool,
}

impl DciKernel {
    /// A current kernel: Linux v5.0 and later (v4.20 already has the RESET branch, without the
    /// address vector).
    pub const CURRENT: Self = Self {
        reset_branch: true,
        rtr_av: true,
    };
    /// The first kernels with DC (Linux 4.15's `modify_dci_qp_is_ok`): neither.
    pub const OLD: Self = Self {
        reset_branch: false,
        rtr_av: false,
    };
}

/// Kernel `modify_dci_qp_is_ok`, as `kernel` has it (the RESET branch first).
pub fn modify_dci_qp_is_ok(cur: QueuePairState, new: QueuePairState, mask: i32, kernel: DciKernel) -> bool {
    let req = bits(&[m::IBV_QP_STATE]);
    if new == Reset {
        return kernel.reset_branch && is_valid_mask(mask, req, 0);
    }
    let rtr_optional = if kernel.rtr_av {
        bits(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_AV])
    } else {
        bits(&[m::IBV_QP_PKEY_INDEX])
    };
    match (cur, new) {
        (Reset, Init) => is_valid_mask(mask, req | bits(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT]), 0),
        (Init, Init) => is_valid_mask(mask, req, bits(&[m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT])),
        (Init, ReadyToReceive) => is_valid_mask(mask, req | bits(&[m::IBV_QP_PATH_MTU]), rtr_optional),
        (ReadyToReceive, ReadyToSend) => is_valid_mask(
            mask,
            req | bits(&[
                m::IBV_QP_TIMEOUT,
                m::IBV_QP_RETRY_CNT,
                m::IBV_QP_RNR_RETRY,
                m::IBV_QP_MAX_QP_RD_ATOMIC,
                m::IBV_QP_SQ_PSN,
            ]),
            bits(&[m::IBV_QP_MIN_RNR_TIMER]),
        ),
        (ReadyToSend, ReadyToSend) => is_valid_mask(mask, req, bits(&[m::IBV_QP_MIN_RNR_TIMER])),
        (cur, Error) if cur != Reset => is_valid_mask(mask, req, 0),
        _ => false,
    }
}

/// Kernel `rdma_check_ah_attr` (`drivers/infiniband/core/verbs.c`), for the address vector of a
/// modify with `IB_QP_AV` (a DC target's INIT → RTR, a DCI's) as for every address handle: one
/// without a GRH is `EINVAL` on RoCE (`RDMA_AH_ATTR_TYPE_ROCE`) and on a port that requires a GRH
/// (`rdma_is_grh_required`: mlx5_ib's `get_core_cap_flags` sets `RDMA_CORE_CAP_IB_GRH_REQUIRED`
/// on an InfiniBand port whose vport context says `grh_required`, an InfiniBand virtual
/// function; `ibv_query_port` reports it as `IBV_QPF_GRH_REQUIRED`).
pub fn check_ah_attr(is_global: bool, roce: bool, grh_required: bool) -> bool {
    is_global || !(roce || grh_required)
}

/// Kernel `validate_rd_atomic` (qp.c), for a DCI: `max_rd_atomic` (with `IB_QP_MAX_QP_RD_ATOMIC`)
/// at most `1 << log_max_ra_res_dc`, else `EINVAL`. libmlx5 (`mlx5_init_context`) reports that
/// same capability as `max_dc_init_rd_atom`, which mlx5dv_query_device(3) labels "as a
/// responder", and `1 << log_max_ra_req_dc` as `max_dc_rd_atom` ("as a requester").
pub fn validate_dci_rd_atomic(mask: i32, max_rd_atomic: u8, log_max_ra_res_dc: u8) -> bool {
    mask & bits(&[m::IBV_QP_MAX_QP_RD_ATOMIC]) == 0 || u32::from(max_rd_atomic) <= 1u32 << log_max_ra_res_dc
}

/// Kernel `mlx5_ib_modify_dct`: `IB_QP_STATE` always; RESET → INIT and INIT → RTR with exact
/// masks; "Modify DCT: Invalid transition" (`EINVAL`) for anything else.
pub fn modify_dct_is_ok(cur: QueuePairState, new: QueuePairState, mask: i32) -> bool {
    let req = bits(&[m::IBV_QP_STATE]);
    if mask & req == 0 {
        return false;
    }
    match (cur, new) {
        (Reset, Init) => is_valid_mask(
            mask,
            req | bits(&[m::IBV_QP_ACCESS_FLAGS, m::IBV_QP_PKEY_INDEX, m::IBV_QP_PORT]),
            0,
        ),
        (Init, ReadyToReceive) => is_valid_mask(
            mask,
            req | bits(&[m::IBV_QP_MIN_RNR_TIMER, m::IBV_QP_AV, m::IBV_QP_PATH_MTU]),
            0,
        ),
        _ => false,
    }
}

/// Every state a DC queue pair can be in.
pub const STATES: [QueuePairState; 7] = [
    Reset,
    Init,
    ReadyToReceive,
    ReadyToSend,
    SendQueueDrain,
    SendQueueError,
    Error,
];

/// What the device reports that the creation rules read.
#[derive(Debug, Clone, Copy)]
pub struct Device {
    /// `ibv_device_attr::max_qp_wr`. Kernel `mlx5_ib_query_device`: `1 << log_max_qp_sz`, which
    /// `mlx5_ib_alloc_ucontext` also hands libmlx5 as `max_send_wqebb` (send queue basic blocks).
    pub max_qp_wr: u32,
    /// libmlx5 `ctx->max_sq_desc_sz`: kernel `mlx5_ib_alloc_ucontext` sends
    /// `MLX5_CAP_GEN(max_wqe_sz_sq)`, the largest send request in bytes.
    pub max_sq_desc_sz: u32,
    /// The `max_wqe_sz_sq_dc` capability, the largest send request of a DC initiator in bytes.
    /// No creation rule reads it: neither the kernel nor libmlx5 does (`mlx5_calc_send_wqe`
    /// checks `max_sq_desc_sz` only), so a DCI whose requests exceed it is created.
    pub max_wqe_sz_sq_dc: u32,
    /// The `log_max_ra_res_dc` capability (libmlx5's `max_dc_init_rd_atom` is its power of two).
    pub log_max_ra_res_dc: u8,
    /// The `log_max_ra_req_dc` capability (libmlx5's `max_dc_rd_atom` is its power of two).
    pub log_max_ra_req_dc: u8,
    /// `ibv_device_attr::max_sge`.
    pub max_sge: u32,
    /// libmlx5 `mlx5_init_context`: `mctx->atomic_cap = device_attr.orig_attr.atomic_cap`, not
    /// `IBV_ATOMIC_NONE`.
    pub atomic_cap: bool,
    /// libmlx5 `mctx->dci_streams_caps`, as `_mlx5dv_query_device` copies it out (zeros on a
    /// device without streams): (`max_log_num_concurent`, `max_log_num_errored`).
    pub dci_streams_caps: (u8, u8),
}

/// libmlx5 `MLX5_SUPPORTED_SEND_OPS_FLAGS_DCI` (qp.c): `MLX5_SUPPORTED_SEND_OPS_FLAGS_RC`.
const SUPPORTED_SEND_OPS_FLAGS_DCI: u64 = (ops::IBV_QP_EX_WITH_SEND.0
    | ops::IBV_QP_EX_WITH_SEND_WITH_INV.0
    | ops::IBV_QP_EX_WITH_SEND_WITH_IMM.0
    | ops::IBV_QP_EX_WITH_RDMA_WRITE.0
    | ops::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0
    | ops::IBV_QP_EX_WITH_RDMA_READ.0
    | ops::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP.0
    | ops::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD.0
    | ops::IBV_QP_EX_WITH_LOCAL_INV.0
    | ops::IBV_QP_EX_WITH_BIND_MW.0) as u64;

fn has(mask: u64, bit: u64) -> bool {
    mask & bit == bit
}

/// Whether `mlx5dv_create_qp` creates a DC initiator from these attributes on `device`, and the
/// rule that refuses it otherwise. The PD and CQ pointers are not looked at.
pub fn create_dci(init: &ibv_qp_init_attr_ex, mlx5: &mlx5dv_qp_init_attr, device: &Device) -> Result<(), &'static str> {
    let dc = mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DC.0 as u64;
    let streams = mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS.0 as u64;
    // libmlx5 `create_qp` (verbs.c): DC is an IBV_QPT_DRIVER queue pair with the DC mask.
    if init.qp_type != ibv_qp_type::IBV_QPT_DRIVER || !has(mlx5.comp_mask, dc) {
        return Err("create_qp: DC needs IBV_QPT_DRIVER and MLX5DV_QP_INIT_ATTR_MASK_DC");
    }
    if mlx5.dc_init_attr.dc_type != rdma_mummy_sys::MLX5DV_DCTYPE_DCI {
        return Err("create_qp: dc_type is not MLX5DV_DCTYPE_DCI");
    }
    // libibverbs `ibv_create_qp_ex`: a PD; libmlx5 `mlx5_qp_fill_wr_pfns` is reached, and the
    // `ibv_wr_*` entries filled, only with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.
    let pd = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
    let send_ops = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
    if init.comp_mask & pd == 0 || init.comp_mask & send_ops == 0 {
        return Err("create_qp: a DCI needs IBV_QP_INIT_ATTR_PD and IBV_QP_INIT_ATTR_SEND_OPS_FLAGS");
    }
    // kernel `check_qp_attr` (DCI): no receive queue.
    if init.cap.max_recv_wr != 0 || init.cap.max_recv_sge != 0 {
        return Err("check_qp_attr: a DCI has no receive queue");
    }
    // Kernel `check_qp_attr`/`calc_sq_size` and ibv_device_attr: within the device's limits.
    if init.cap.max_send_wr == 0 || init.cap.max_send_wr > device.max_qp_wr || init.cap.max_send_sge > device.max_sge {
        return Err("mlx5_calc_sq_size: send queue beyond max_qp_wr or max_sge");
    }
    calc_dci_sq_size(init, device)?;
    // libmlx5 `create_qp`: DCI streams within dci_streams_caps (EINVAL); kernel
    // `process_vendor_flag(MLX5_QP_FLAG_DCI_STREAM, log_max_dci_stream_channels)`: EINVAL on a
    // device without stream channels.
    if has(mlx5.comp_mask, streams) {
        // SAFETY: the union's storage is its `u64` (`bindgen_union_field`), always initialized,
        // and `mlx5dv_dci_streams` is two `u8`s, valid for any bytes.
        let asked = unsafe { *mlx5.dc_init_attr.__bindgen_anon_1.dci_streams.as_ref() };
        let (max_concurrent, max_errored) = device.dci_streams_caps;
        if max_concurrent == 0 {
            return Err("process_vendor_flag: the device has no DCI stream channels");
        }
        if asked.log_num_concurent > max_concurrent || asked.log_num_errored > max_errored {
            return Err("create_qp: DCI streams beyond dci_streams_caps");
        }
    }
    // libmlx5 `mlx5_qp_fill_wr_pfns` (qp.c): atomics need `atomics_enabled` (the device's
    // atomic_cap), and only the DCI's supported operations (EOPNOTSUPP).
    let atomics = ops::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP.0 as u64 | ops::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD.0 as u64;
    if !device.atomic_cap && init.send_ops_flags & atomics != 0 {
        return Err("mlx5_qp_fill_wr_pfns: atomics without atomics_enabled");
    }
    if init.send_ops_flags & !SUPPORTED_SEND_OPS_FLAGS_DCI != 0 {
        return Err("mlx5_qp_fill_wr_pfns: an operation outside MLX5_SUPPORTED_SEND_OPS_FLAGS_DCI");
    }
    Ok(())
}

/// 16 bytes: `struct mlx5_wqe_ctrl_seg`, `mlx5_wqe_raddr_seg`, `mlx5_wqe_atomic_seg` and
/// `mlx5_wqe_data_seg` each (`mlx5dv.h`).
const SEGMENT: u32 = 16;
/// `struct mlx5_wqe_datagram_seg`: the address vector `struct mlx5_wqe_av`, 48 bytes.
const DATAGRAM_SEGMENT: u32 = 48;
/// `MLX5_SEND_WQE_BB`: a send queue basic block.
const SEND_WQE_BB: u32 = 64;

fn align(value: u32, to: u32) -> u32 {
    value.div_ceil(to) * to
}

/// libmlx5 `_sq_overhead` (verbs.c) for a DCI: the control segment, grown to the largest
/// operation's segments among the send operations asked for (RDMA: control + remote address;
/// atomics: control + remote address + atomic), plus the transport's: `IBV_QPT_DRIVER` with
/// `MLX5DV_DCTYPE_DCI` falls through to UD's datagram segment.
fn dci_sq_overhead(send_ops_flags: u64) -> u32 {
    let rdma = (ops::IBV_QP_EX_WITH_RDMA_WRITE.0
        | ops::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0
        | ops::IBV_QP_EX_WITH_RDMA_READ.0) as u64;
    let atomic = (ops::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP.0 | ops::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD.0) as u64;
    let mut size = SEGMENT;
    if send_ops_flags & rdma != 0 {
        size = size.max(2 * SEGMENT);
    }
    if send_ops_flags & atomic != 0 {
        size = size.max(3 * SEGMENT);
    }
    size + DATAGRAM_SEGMENT
}

/// libmlx5 `mlx5_calc_sq_size` with `mlx5_calc_send_wqe` (verbs.c), for a DCI: the request size
/// is the overhead plus the larger of the scatter/gather entries (16 bytes each, `EINVAL` past
/// `max_sq_desc_sz`) and the inline data (a 4-byte `mlx5_wqe_inl_data_seg` header, padded to
/// 16; only when some was asked for), rounded up to basic blocks of 64 bytes — two for the
/// smallest DC request. The granted inline size is what that request leaves after the overhead
/// and the header (written back into `cap.max_inline_data`, even when 0 was asked). The queue is
/// `roundup_pow_of_two(max_send_wr × request size)` bytes, `EINVAL` past `max_send_wqebb`
/// blocks; `create_qp` writes back `max_post`, the requests it holds, as `cap.max_send_wr`.
/// Returns (granted `max_send_wr`, granted `max_inline_data`).
pub fn calc_dci_sq_size(init: &ibv_qp_init_attr_ex, device: &Device) -> Result<(u32, u32), &'static str> {
    let cap = init.cap;
    let overhead = dci_sq_overhead(init.send_ops_flags);
    let inline = if cap.max_inline_data != 0 {
        overhead + align(4 + cap.max_inline_data, 16)
    } else {
        0
    };
    let max_gather = device.max_sq_desc_sz.saturating_sub(overhead) / SEGMENT;
    if cap.max_send_sge > max_gather {
        return Err("mlx5_calc_send_wqe: max_send_sge beyond max_sq_desc_sz");
    }
    let total = (overhead + cap.max_send_sge * SEGMENT).max(inline);
    if total > device.max_sq_desc_sz {
        return Err("mlx5_calc_send_wqe: request beyond max_sq_desc_sz");
    }
    let wqe_size = align(total, SEND_WQE_BB);
    let granted_inline = wqe_size - overhead - 4;
    if cap.max_send_wr > 0x7fff_ffff / device.max_sq_desc_sz {
        return Err("mlx5_calc_sq_size: max_send_wr overflows");
    }
    let wq_size = (u64::from(cap.max_send_wr) * u64::from(wqe_size)).next_power_of_two();
    if wq_size / u64::from(SEND_WQE_BB) > u64::from(device.max_qp_wr) {
        return Err("mlx5_calc_sq_size: send queue beyond max_send_wqebb basic blocks");
    }
    Ok(((wq_size / u64::from(wqe_size)) as u32, granted_inline))
}

/// Whether `mlx5dv_create_qp` creates a DC target from these attributes, and the rule that
/// refuses it otherwise (the SRQ and CQ pointers are only checked for being set).
pub fn create_dct(init: &ibv_qp_init_attr_ex, mlx5: &mlx5dv_qp_init_attr) -> Result<(), &'static str> {
    let dc = mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DC.0 as u64;
    if init.qp_type != ibv_qp_type::IBV_QPT_DRIVER || !has(mlx5.comp_mask, dc) {
        return Err("create_qp: DC needs IBV_QPT_DRIVER and MLX5DV_QP_INIT_ATTR_MASK_DC");
    }
    if mlx5.dc_init_attr.dc_type != rdma_mummy_sys::MLX5DV_DCTYPE_DCT {
        return Err("create_qp: dc_type is not MLX5DV_DCTYPE_DCT");
    }
    // libmlx5 `create_dct`: `check_comp_mask(attr->comp_mask, IBV_QP_INIT_ATTR_PD)` (EINVAL).
    if init.comp_mask & !ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0 != 0 {
        return Err("create_dct: comp_mask beyond IBV_QP_INIT_ATTR_PD");
    }
    // libmlx5 `create_dct`: vendor mask within DC | QP_CREATE_FLAGS.
    let allowed = dc | mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS.0 as u64;
    if mlx5.comp_mask & !allowed != 0 {
        return Err("create_dct: vendor comp_mask beyond DC and QP_CREATE_FLAGS");
    }
    // kernel `mlx5_ib_create_dct`: `!attr->srq || !attr->recv_cq` is EINVAL.
    if init.srq.is_null() || init.recv_cq.is_null() {
        return Err("mlx5_ib_create_dct: a DCT needs an SRQ and a receive CQ");
    }
    Ok(())
}

/// DCI streams: a DCI stays in RTS with fewer than 2^`log_num_errored` streams in error; the
/// 2^`log_num_errored`-th moves it to ERR as a whole, asynchronously (with `log_num_errored` 0,
/// the first stream error). rdma-core `tests/test_mlx5_dc.py`, `test_dc_stream_qp_recovery`:
/// `1 << log_num_errored` errors, then the state polled up to a second must read ERR;
/// mlx5dv_dci_stream_id_reset(3): ERR "once the number of unique stream_id in error reaches" the
/// DCI's `log_num_errored` streams. No ConnectX has confirmed it for sideway-ext.
pub fn dci_errored_streams_move_it_to_error(errored_streams: usize, log_num_errored: u8) -> bool {
    errored_streams >= 1usize << log_num_errored.min(16)
}

/// libmlx5 `mlx5dv_dci_stream_id_reset` (mlx5.c): `EOPNOTSUPP` unless the queue pair is in RTS
/// (the library's cached state).
pub fn dci_stream_reset_is_ok(state: QueuePairState) -> bool {
    state == ReadyToSend
}

/// The payload bytes of a packet at `mtu`: `IBV_MTU_256` (1) to `IBV_MTU_4096` (5), 256 · 2^(n − 1)
/// (libibverbs' `ibv_mtu` values, the InfiniBand path MTUs).
pub fn mtu_bytes(mtu: Mtu) -> u32 {
    256 << (mtu as u32 - 1)
}

/// Whether the responses of an RDMA READ of `read_length` bytes from a DC target reach the DC
/// initiator that asked. Kernel `mlx5_ib_modify_dct` (qp.c) programs a DCT, at INIT → RTR, with
/// the path MTU it was given there (`MLX5_SET(dctc, dctc, mtu, attr->path_mtu)`): one per DCT,
/// whatever initiator reads from it, where a DCI has its own, set at its own INIT → RTR. The
/// target sends a READ's data in response packets of up to its MTU; a DCI whose path takes
/// smaller packets (a 1500-byte Ethernet port at `IBV_MTU_1024` reading from a 9000-byte one at
/// `IBV_MTU_4096`) never gets them, and the READ ends in `IBV_WC_RETRY_EXC_ERR`. A READ of at
/// most the DCI's path MTU is one response packet of its own length, which fits. perftest's
/// `check_mtu` keeps both ends of every test at the smaller of their two MTUs, so it never meets
/// the case. An atomic's response is one packet of 8 bytes, which every path MTU takes: atomics
/// are not held to this rule. Read from the sources, not confirmed on a ConnectX for sideway-ext.
pub fn dc_read_responses_reach_the_initiator(read_length: u64, dci_path_mtu: Mtu, dct_path_mtu: Mtu) -> bool {
    let (dci, dct) = (mtu_bytes(dci_path_mtu), mtu_bytes(dct_path_mtu));
    // Every response packet carries up to the target's MTU, the last one the rest.
    let largest_response_packet = read_length.min(u64::from(dct));
    largest_response_packet <= u64::from(dci)
}
