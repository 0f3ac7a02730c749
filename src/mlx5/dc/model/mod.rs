//! A model of what the kernel's mlx5 driver and libmlx5 do with a DC queue pair outside the
//! data path, behind the verbs tables ([`QueuePairVerbs`], [`DcVerbs`]), so that unit tests drive
//! the public API of [`DcInitiator`] and [`DcTarget`] without a device, as hostile as the
//! hardware: it refuses what the kernel refuses (the rules of
//! [`sideway_ext_dc_rules`], shared with the simulated fabric of sideway-ext-dc-pool)), moves a DCI to ERR some queries after
//! 2^`log_num_errored` stream errors (asynchronously, as pyverbs sees it), refuses a stream reset where
//! libmlx5 does (its cached state not RTS), records a reset made before the stream's requests
//! were flushed, and fails a batch with inline data beyond the granted size as libmlx5 does
//! (`ENOMEM` from `wr_complete`). Every call is recorded (`test_support::take_calls`).
//!
//! [`DcInitiator`]: crate::mlx5::dc::initiator::DcInitiator
//! [`DcTarget`]: crate::mlx5::dc::target::DcTarget
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_int;
use std::io;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use rdma_mummy_sys::{
    ibv_context, ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_ex, ibv_qp_init_attr, ibv_qp_init_attr_ex, mlx5dv_qp_ex,
    mlx5dv_qp_init_attr,
};
use sideway::ibverbs::queue_pair::QueuePairState;
use sideway_ext_dc_rules::{self as rules, Device};

use crate::ibverbs::queue_pair::attribute::state_from_raw;
use crate::ibverbs::queue_pair::verbs::QueuePairVerbs;
use crate::mlx5::library::DcVerbs;
use crate::test_support::dc::recording_dci;
use crate::test_support::{self, record};

/// How many queries of the state still read RTS after a DCI's stream errors passed its limit.
pub(crate) const QUERIES_BEFORE_ERROR: u32 = 3;

/// One queue pair of the model.
struct ModelQueuePair {
    dct: bool,
    /// The state the device holds (the library's cached `ibv_qp::state` may lag behind).
    state: QueuePairState,
    /// log2 of the streams in error that move the DCI to ERR, with streams.
    log_num_errored: Option<u8>,
    errored: BTreeSet<u16>,
    /// Requests of an errored stream not flushed yet.
    unflushed: BTreeMap<u16, u32>,
    queries_until_error: Option<u32>,
    /// The inline data its requests take, as `create` granted it (a DCI).
    max_inline_data: u32,
    /// libmlx5's `mqp->err` of the open batch: `ENOMEM` after inline data beyond the granted size.
    batch_error: bool,
    /// The `max_rd_atomic` the last modify that set one handed the kernel.
    max_rd_atomic: u8,
    // The tables the queue pair's pointers point into; kept for the model's lifetime.
    tables: (Box<ibv_qp_ex>, Box<mlx5dv_qp_ex>),
}

struct Model {
    device: Device,
    /// Whether the kernel has `modify_dci_qp_is_ok`'s RESET branch.
    reset_branch: bool,
    /// Whether the kernel's `modify_dci_qp_is_ok` takes `IB_QP_AV` at INIT → RTR.
    rtr_av: bool,
    /// Whether the device has DC atomics (`mlx5_ib_dc_atomic_is_supported`).
    dc_atomics: bool,
    /// `None`: port 1 is InfiniBand; `Some(indices)`: it is RoCE, with a GID set at these
    /// indices of its table and the other slots empty (read as zeros).
    roce_gids: Option<&'static [u8]>,
    /// Port 1's `ibv_port_state` and, on InfiniBand, its LID.
    port: (rdma_mummy_sys::ibv_port_state::Type, u16),
    /// Whether port 1 is InfiniBand and requires a GRH (`IBV_QPF_GRH_REQUIRED`).
    grh_required: bool,
    /// Whether no slot of the GID table can be read: a libibverbs without `_ibv_query_gid_ex`
    /// (before rdma-core 32) whose sysfs gives no GID type either.
    gid_table_unreadable: bool,
    queue_pairs: BTreeMap<u32, ModelQueuePair>,
    next_qp_number: u32,
}

thread_local! {
    static MODEL: RefCell<Model> = RefCell::new(Model::new(DEVICE));
}

/// A ConnectX-6 Dx as the model's default: atomics, 16 streams, 2 of them in error move a DCI to
/// ERR.
pub(crate) const DEVICE: Device = Device {
    max_qp_wr: 32768,
    max_sq_desc_sz: 1024,
    max_wqe_sz_sq_dc: 1024,
    log_max_ra_res_dc: 4,
    log_max_ra_req_dc: 4,
    max_sge: 30,
    atomic_cap: true,
    dci_streams_caps: (4, 1),
};

impl Model {
    fn new(device: Device) -> Self {
        Self {
            device,
            reset_branch: true,
            rtr_av: true,
            dc_atomics: true,
            roce_gids: None,
            port: (rdma_mummy_sys::ibv_port_state::IBV_PORT_ACTIVE, 7),
            grh_required: false,
            gid_table_unreadable: false,
            queue_pairs: BTreeMap::new(),
            next_qp_number: 0x100,
        }
    }
}

fn with<R>(f: impl FnOnce(&mut Model) -> R) -> R {
    MODEL.with(|model| f(&mut model.borrow_mut()))
}

/// A fresh model of `device` for this thread (tests run one per thread). The queue pairs of the
/// previous model stay until they are destroyed: a handle that is still alive points into them.
pub(crate) fn reset(device: Device) {
    with(|model| {
        let live = std::mem::take(&mut model.queue_pairs);
        *model = Model {
            queue_pairs: live,
            next_qp_number: model.next_qp_number,
            ..Model::new(device)
        };
    });
}

/// Whether the kernel has the DCI's RESET branch (older kernels do not).
pub(crate) fn set_reset_branch(reset_branch: bool) {
    with(|model| model.reset_branch = reset_branch);
}

/// Whether the kernel takes an address vector at a DCI's INIT → RTR (older ones do not).
pub(crate) fn set_rtr_av(rtr_av: bool) {
    with(|model| model.rtr_av = rtr_av);
}

/// Whether the device has DC atomics.
pub(crate) fn set_dc_atomics(dc_atomics: bool) {
    with(|model| model.dc_atomics = dc_atomics);
}

/// Port 1's `ibv_port_state` and, on InfiniBand, its LID.
pub(crate) fn set_port(state: rdma_mummy_sys::ibv_port_state::Type, lid: u16) {
    with(|model| model.port = (state, lid));
}

/// Port 1 is RoCE, with GIDs set at `gid_indices` only: as on mlx5, each address twice, RoCE v1
/// at the even index and RoCE v2 at the odd one.
pub(crate) fn set_roce(gid_indices: &'static [u8]) {
    with(|model| model.roce_gids = Some(gid_indices));
}

/// Port 1 is InfiniBand and requires a GRH (an InfiniBand virtual function): `ibv_query_port`
/// says `IBV_QPF_GRH_REQUIRED`, and an address vector without a GRH is refused
/// ([`rules::check_ah_attr`]).
pub(crate) fn set_grh_required() {
    with(|model| model.grh_required = true);
}

/// No slot of the GID table can be read: the model's `query_gid_entry` answers `EOPNOTSUPP`, as
/// the crate's does with a libibverbs before rdma-core 32 whose sysfs gives no GID type.
pub(crate) fn set_gid_table_unreadable() {
    with(|model| model.gid_table_unreadable = true);
}

/// The state the device holds for queue pair `qp_number`.
pub(crate) fn device_state(qp_number: u32) -> QueuePairState {
    with(|model| model.queue_pairs[&qp_number].state)
}

/// An error completion on the whole DCI (a wrong DC key, a dead target): the device moves it to
/// ERR at once; the library's cached state still reads RTS until a query.
pub(crate) fn fail(qp_number: u32) {
    with(|model| model.queue_pairs.get_mut(&qp_number).expect("a model queue pair").state = QueuePairState::Error);
}

/// An error on stream `stream` with `unflushed` of its requests still queued: at
/// 2^`log_num_errored` errored streams the DCI goes to ERR, after [`QUERIES_BEFORE_ERROR`]
/// queries.
pub(crate) fn stream_error(qp_number: u32, stream: u16, unflushed: u32) {
    with(|model| {
        let qp = model.queue_pairs.get_mut(&qp_number).expect("a model queue pair");
        qp.errored.insert(stream);
        qp.unflushed.insert(stream, unflushed);
        let log_num_errored = qp.log_num_errored.expect("a DCI with streams");
        if rules::dci_errored_streams_move_it_to_error(qp.errored.len(), log_num_errored)
            && qp.queries_until_error.is_none()
        {
            qp.queries_until_error = Some(QUERIES_BEFORE_ERROR);
        }
    });
}

/// The flush errors of stream `stream`'s remaining requests have been polled.
pub(crate) fn flush(qp_number: u32, stream: u16) {
    with(|model| {
        model
            .queue_pairs
            .get_mut(&qp_number)
            .expect("a model queue pair")
            .unflushed
            .remove(&stream);
    });
}

/// The queue pair behind `qp`.
///
/// # Safety
///
/// `qp` must be a model queue pair.
unsafe fn number(qp: *mut ibv_qp) -> u32 {
    (*qp).qp_num
}

/// `ibv_modify_qp`, as mlx5_ib: the DCI or DCT rules against the device's state, then the
/// library's cached state.
///
/// # Safety
///
/// `qp` must be a model queue pair and `attr` a valid `ibv_qp_attr` (as `ibv_modify_qp`).
unsafe fn modify(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: i32) -> i32 {
    let n = number(qp);
    let given = state_from_raw((*attr).qp_state);
    let remote_atomic = (*attr).qp_access_flags & rdma_mummy_sys::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0 != 0;
    let max_rd_atomic = (*attr).max_rd_atomic;
    let global = (*attr).ah_attr.is_global != 0;
    let result = with(|model| {
        let kernel = rules::DciKernel {
            reset_branch: model.reset_branch,
            rtr_av: model.rtr_av,
        };
        let dc_atomics = model.dc_atomics;
        let log_max_ra_res_dc = model.device.log_max_ra_res_dc;
        let av_ok = mask & rdma_mummy_sys::ibv_qp_attr_mask::IBV_QP_AV.0 as i32 == 0
            || rules::check_ah_attr(global, model.roce_gids.is_some(), model.grh_required);
        let entry = model.queue_pairs.get_mut(&n).expect("a model queue pair");
        let cur = entry.state;
        let new = rules::new_state(cur, mask, given);
        let ok = av_ok
            && if entry.dct {
                rules::modify_dct_is_ok(cur, new, mask)
            } else {
                rules::modify_dci_qp_is_ok(cur, new, mask, kernel)
                    && rules::validate_dci_rd_atomic(mask, max_rd_atomic, log_max_ra_res_dc)
            };
        if !ok {
            return Err((cur, new, libc::EINVAL));
        }
        if entry.dct && new == QueuePairState::Init && remote_atomic && !dc_atomics {
            return Err((cur, new, libc::EOPNOTSUPP));
        }
        entry.state = new;
        if mask & rdma_mummy_sys::ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0 as i32 != 0 {
            entry.max_rd_atomic = max_rd_atomic;
        }
        if new == QueuePairState::Reset {
            entry.errored.clear();
            entry.unflushed.clear();
            entry.queries_until_error = None;
        }
        Ok((cur, new))
    });
    match result {
        Ok((cur, new)) => {
            record(format!("modify qp{n:#x} {cur:?} -> {new:?}"));
            // libibverbs `ibv_modify_qp` caches the new state.
            (*qp).state = (*attr).qp_state;
            0
        },
        Err((cur, new, errno)) => {
            record(format!("modify qp{n:#x} {cur:?} -> {new:?} refused ({errno})"));
            errno
        },
    }
}

/// `ibv_query_qp`: the device's state (which the asynchronous ERR may reach after a few
/// queries), cached by the library as libibverbs does.
///
/// # Safety
///
/// `qp` must be a model queue pair and `attr` writable (as `ibv_query_qp`).
unsafe fn query(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, _mask: i32, _init: *mut ibv_qp_init_attr) -> i32 {
    let n = number(qp);
    let state = with(|model| {
        let entry = model.queue_pairs.get_mut(&n).expect("a model queue pair");
        match entry.queries_until_error {
            Some(0) => {
                entry.state = QueuePairState::Error;
                entry.queries_until_error = None;
            },
            Some(k) => entry.queries_until_error = Some(k - 1),
            None => {},
        }
        entry.state
    });
    record(format!("query qp{n:#x} -> {state:?}"));
    (*attr).qp_state = state as u32;
    (*qp).state = state as u32;
    0
}

/// The model's `destroy`.
///
/// # Safety
///
/// `qp` must be a model queue pair.
unsafe fn destroy(qp: *mut ibv_qp) -> i32 {
    let n = number(qp);
    record(format!("destroy qp{n:#x}"));
    // The handle is gone: its tables go with it (`qp` points into them and is not read again).
    with(|model| model.queue_pairs.remove(&n));
    0
}

/// The model's `to_qp_ex`.
///
/// # Safety
///
/// `qp` must be a model queue pair (the first field of its `ibv_qp_ex` table).
unsafe fn to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // The model's queue pairs are ibv_qp_ex tables whose first field is the ibv_qp.
    qp.cast()
}

/// The model's `query_port`.
///
/// # Safety
///
/// `attr` must be writable (as `ibv_query_port`).
unsafe fn query_port(_: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> i32 {
    if port != 1 {
        return libc::EINVAL;
    }
    let (roce, grh_required) = with(|model| (model.roce_gids.is_some(), model.grh_required));
    (*attr).active_mtu = 3;
    (*attr).flags = u8::from(grh_required);
    (*attr).gid_tbl_len = 16;
    (*attr).link_layer = if roce {
        rdma_mummy_sys::IBV_LINK_LAYER_ETHERNET
    } else {
        1
    };
    let (state, lid) = with(|model| model.port);
    (*attr).state = state;
    (*attr).lid = if roce { 0 } else { lid };
    0
}

/// The model's `ibv_query_gid_ex`: on RoCE, a GID (`::ffff:192.0.2.<index>`) at the indices set,
/// RoCE v1 at an even index and RoCE v2 at an odd one (mlx5's table lists each address once per
/// RoCE version), `ENODATA` elsewhere (libibverbs' answer for an empty slot); on InfiniBand a
/// link-local GID at index 0 only.
///
/// # Safety
///
/// `entry` must be writable (as `ibv_query_gid_ex`).
unsafe fn query_gid_entry(_: *mut ibv_context, port: u8, index: u32, entry: *mut rdma_mummy_sys::ibv_gid_entry) -> i32 {
    if port != 1 {
        return libc::EINVAL;
    }
    if index >= 16 {
        return libc::EINVAL;
    }
    if with(|model| model.gid_table_unreadable) {
        return libc::EOPNOTSUPP;
    }
    let roce = with(|model| model.roce_gids);
    let (raw, gid_type) = match roce {
        Some(indices) if indices.iter().any(|&i| u32::from(i) == index) => {
            let mut raw = [0u8; 16];
            raw[10] = 0xff;
            raw[11] = 0xff;
            raw[12..].copy_from_slice(&[192, 0, 2, index as u8]);
            let gid_type = match index % 2 {
                0 => rdma_mummy_sys::IBV_GID_TYPE_ROCE_V1,
                _ => rdma_mummy_sys::IBV_GID_TYPE_ROCE_V2,
            };
            (raw, gid_type)
        },
        None if index == 0 => (
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            rdma_mummy_sys::IBV_GID_TYPE_IB,
        ),
        _ => return libc::ENODATA,
    };
    (*entry).gid.raw = raw;
    (*entry).gid_index = index;
    (*entry).port_num = 1;
    (*entry).gid_type = gid_type;
    (*entry).ndev_ifindex = u32::from(roce.is_some()) * 2;
    0
}

/// `mlx5dv_create_qp`: the creation rules, then a new queue pair in RESET.
///
/// # Safety
///
/// `init` and `mlx5` must be valid attribute structs (as `mlx5dv_create_qp`).
unsafe fn create(
    _: *mut ibv_context, init: *mut ibv_qp_init_attr_ex, mlx5: *mut mlx5dv_qp_init_attr,
) -> Result<NonNull<ibv_qp>, io::Error> {
    let dct = (*mlx5).dc_init_attr.dc_type == rdma_mummy_sys::MLX5DV_DCTYPE_DCT;
    let device = with(|model| model.device);
    let checked = if dct {
        rules::create_dct(&*init, &*mlx5)
    } else {
        rules::create_dci(&*init, &*mlx5, &device)
    };
    if let Err(rule) = checked {
        record(format!("create refused: {rule}"));
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut granted_inline = 0;
    if !dct {
        // libmlx5 `create_qp` writes the granted sizes back.
        let (max_send_wr, max_inline_data) = rules::calc_dci_sq_size(&*init, &device).expect("checked");
        (*init).cap.max_send_wr = max_send_wr;
        (*init).cap.max_inline_data = max_inline_data;
        granted_inline = max_inline_data;
    }
    let streams = (*mlx5).comp_mask
        & rdma_mummy_sys::mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS.0 as u64
        != 0;
    let log_num_errored = streams.then(|| {
        (*mlx5)
            .dc_init_attr
            .__bindgen_anon_1
            .dci_streams
            .as_ref()
            .log_num_errored
    });
    let (mut qp, mlx5_view) = if dct {
        // SAFETY: zeroes are valid for both tables.
        (
            Box::new(MaybeUninit::zeroed().assume_init()),
            Box::new(MaybeUninit::zeroed().assume_init()),
        )
    } else {
        let (mut qp, mlx5_view) = recording_dci(streams);
        qp.wr_start = Some(wr_start);
        qp.wr_complete = Some(wr_complete);
        qp.wr_abort = Some(wr_abort);
        qp.wr_set_inline_data = Some(wr_set_inline_data);
        qp.wr_set_inline_data_list = Some(wr_set_inline_data_list);
        (qp, mlx5_view)
    };
    let n = with(|model| {
        let n = model.next_qp_number;
        model.next_qp_number += 1;
        n
    });
    qp.qp_base.qp_num = n;
    qp.qp_base.state = rdma_mummy_sys::ibv_qp_state::IBV_QPS_RESET;
    let pointer = NonNull::from(&mut qp.qp_base);
    with(|model| {
        model.queue_pairs.insert(
            n,
            ModelQueuePair {
                dct,
                state: QueuePairState::Reset,
                log_num_errored,
                errored: BTreeSet::new(),
                unflushed: BTreeMap::new(),
                queries_until_error: None,
                max_inline_data: granted_inline,
                batch_error: false,
                max_rd_atomic: 0,
                tables: (qp, mlx5_view),
            },
        )
    });
    record(format!("create qp{n:#x}"));
    Ok(pointer)
}

/// The open batch's error of the model queue pair behind `qp`: `set` it, or take it (`None`).
///
/// # Safety
///
/// `qp` must be the extended view of a model queue pair.
unsafe fn batch_error(qp: *mut ibv_qp_ex, set: Option<bool>) -> bool {
    let n = (*qp).qp_base.qp_num;
    with(|model| {
        let entry = model.queue_pairs.get_mut(&n).expect("a model queue pair");
        match set {
            Some(error) => entry.batch_error = error,
            None => return std::mem::take(&mut entry.batch_error),
        }
        false
    })
}

/// libmlx5 `_mlx5_send_wr_set_inline_data` (qp.c): data beyond the queue pair's granted
/// `max_inline_data` is not copied; the batch's error becomes `ENOMEM`.
///
/// # Safety
///
/// `qp` must be the extended view of a model queue pair.
unsafe fn check_inline(qp: *mut ibv_qp_ex, length: usize) {
    let n = (*qp).qp_base.qp_num;
    let max = with(|model| model.queue_pairs[&n].max_inline_data);
    if length > max as usize {
        record(format!("inline of {length} bytes beyond {max}: ENOMEM"));
        batch_error(qp, Some(true));
    }
}

/// The model's `wr_start`: a new batch, without error (libmlx5 clears `mqp->err`).
unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    test_support::wr_start(qp);
    batch_error(qp, Some(false));
}

/// The model's `wr_complete`: the batch's error, if any, instead of posting it (libmlx5
/// `mlx5_send_wr_complete`).
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    if batch_error(qp, None) {
        record("complete refused: ENOMEM".into());
        return libc::ENOMEM;
    }
    test_support::wr_complete(qp)
}

/// The model's `wr_abort`: the batch and its error are dropped.
unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    test_support::wr_abort(qp);
    batch_error(qp, Some(false));
}

/// The model's `wr_set_inline_data`.
unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut std::ffi::c_void, length: usize) {
    test_support::wr_set_inline_data(qp, addr, length);
    check_inline(qp, length);
}

/// The model's `wr_set_inline_data_list`: the slices' lengths together.
unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex, num: usize, list: *const rdma_mummy_sys::ibv_data_buf,
) {
    test_support::dc::wr_set_inline_data_list(qp, num, list);
    let length = std::slice::from_raw_parts(list, num).iter().map(|buf| buf.length).sum();
    check_inline(qp, length);
}

/// The model's `mlx5_view`.
///
/// # Safety
///
/// `qp_ex` must be the extended view of a model queue pair.
unsafe fn mlx5_view(qp_ex: *mut ibv_qp_ex) -> *mut mlx5dv_qp_ex {
    let n = (*qp_ex).qp_base.qp_num;
    with(|model| {
        let entry = model.queue_pairs.get_mut(&n).expect("a model queue pair");
        &mut *entry.tables.1 as *mut mlx5dv_qp_ex
    })
}

/// `mlx5dv_dci_stream_id_reset`, as libmlx5: `EOPNOTSUPP` when the library's cached state is not
/// RTS or the device cannot reset streams; the device then refuses a DCI no longer in RTS.
///
/// # Safety
///
/// `qp` must be a model queue pair (as `mlx5dv_dci_stream_id_reset`).
unsafe extern "C" fn stream_id_reset(qp: *mut ibv_qp, stream: u16) -> c_int {
    let n = number(qp);
    let cached = state_from_raw((*qp).state);
    let result = with(|model| {
        if model.device.dci_streams_caps.1 == 0 || !rules::dci_stream_reset_is_ok(cached) {
            return Err(libc::EOPNOTSUPP);
        }
        let entry = model.queue_pairs.get_mut(&n).expect("a model queue pair");
        if entry.state != QueuePairState::ReadyToSend {
            return Err(libc::EINVAL);
        }
        let unflushed = entry.unflushed.remove(&stream).unwrap_or(0);
        entry.errored.remove(&stream);
        Ok(unflushed)
    });
    match result {
        Ok(0) => {
            record(format!("stream_reset qp{n:#x} {stream}"));
            0
        },
        Ok(unflushed) => {
            record(format!(
                "stream_reset qp{n:#x} {stream} BEFORE {unflushed} requests were flushed"
            ));
            0
        },
        Err(errno) => {
            record(format!("stream_reset qp{n:#x} {stream} refused ({errno})"));
            errno
        },
    }
}

fn stream_id_reset_entry() -> Option<crate::mlx5::library::DciStreamIdReset> {
    Some(stream_id_reset)
}

/// The model's queue-pair calls.
pub(crate) static QUEUE_PAIR_VERBS: QueuePairVerbs = QueuePairVerbs {
    modify,
    query,
    destroy,
    to_qp_ex,
    query_port,
    query_gid_entry,
};

/// The model's libmlx5 calls.
pub(crate) static DC_VERBS: DcVerbs = DcVerbs {
    create,
    mlx5_view,
    stream_id_reset: stream_id_reset_entry,
};

/// The model's libmlx5 calls, from a libmlx5 without `mlx5dv_dci_stream_id_reset` (before v37).
pub(crate) static DC_VERBS_WITHOUT_STREAM_RESET: DcVerbs = DcVerbs {
    create,
    mlx5_view,
    stream_id_reset: || None,
};

mod tests;
