//! The memory behind an mlx5 queue pair, completion queue and address handle, as libmlx5's
//! `mlx5dv_init_obj` hands it out: the send queue's buffer, doorbell record and BlueFlame register
//! (`struct mlx5dv_qp`), the CQE ring and its doorbell record (`struct mlx5dv_cq`), and an
//! address handle's address vector (`struct mlx5dv_ah`). For code that writes its own WQEs and
//! reads its own CQEs, as `sideway-ext-dc-direct` does; nothing else of this crate uses them.
//!
//! Through this crate's libmlx5 loader (rdma-mummy-sys does not bind `mlx5dv_init_obj`): without
//! libmlx5, or for an object of another provider, the answer is
//! [`NotSupported`](InitObjectErrorKind::NotSupported).
//!
//! Once a CQ's memory is handed out, libmlx5 marks it owned by its caller
//! (`MLX5_CQ_FLAGS_DV_OWNED`, `mlx5dv_get_cq`): it no longer cleans the CQ of a destroyed queue
//! pair's completions. A queue pair whose WQEs its caller writes must not be posted through
//! libmlx5 too: libmlx5's own poller takes `wr_id`s from its private bookkeeping, which such
//! posts do not fill.
use std::io;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use rdma_mummy_sys::{
    ibv_ah, ibv_cq, ibv_qp, mlx5dv_ah, mlx5dv_cq, mlx5dv_obj, mlx5dv_qp, MLX5DV_OBJ_AH, MLX5DV_OBJ_CQ, MLX5DV_OBJ_QP,
};

use super::library;

/// Why `mlx5dv_init_obj` refused.
#[derive(Debug, thiserror::Error)]
#[error("failed to read the mlx5 object's memory")]
#[non_exhaustive]
pub struct InitObjectError(#[from] pub InitObjectErrorKind);

/// The kinds of [`InitObjectError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitObjectErrorKind {
    /// libmlx5 is missing, or the object is not an mlx5 device's (`EOPNOTSUPP`).
    #[error("libmlx5 is missing or the object is not an mlx5 device's")]
    NotSupported,
    /// libmlx5 refused (`errno`).
    #[error("mlx5dv_init_obj failed")]
    Mlx5(#[source] io::Error),
}

impl InitObjectError {
    /// Whether the object or its library cannot do this at all (no libmlx5, not mlx5).
    pub fn is_not_supported(&self) -> bool {
        matches!(self.0, InitObjectErrorKind::NotSupported)
    }
}

/// Calls `mlx5dv_init_obj` for one object of `obj_type`, `fill` having named it and its output.
///
/// # Safety
///
/// `obj` must name a live object of that type and an output of its type.
unsafe fn init(obj: &mut mlx5dv_obj, obj_type: u32) -> Result<(), InitObjectError> {
    let init_obj = library::init_obj().ok_or(InitObjectErrorKind::NotSupported)?;
    match init_obj(obj, u64::from(obj_type)) {
        0 => Ok(()),
        libc::EOPNOTSUPP => Err(InitObjectErrorKind::NotSupported.into()),
        errno => Err(InitObjectErrorKind::Mlx5(io::Error::from_raw_os_error(errno)).into()),
    }
}

fn empty_obj() -> mlx5dv_obj {
    // SAFETY: mlx5dv_obj is pointers only; null ones are what libmlx5 skips.
    unsafe { MaybeUninit::zeroed().assume_init() }
}

/// The memory of a queue pair's send and receive queues: buffer, slots and stride, doorbell
/// record, BlueFlame register and size (`mlx5dv_init_obj` with `MLX5DV_OBJ_QP`).
///
/// # Safety
///
/// `qp` must be a live queue pair. The pointers returned are valid while it is; writing through
/// them is the caller's concern (the device reads them).
pub unsafe fn queue_pair_object(qp: NonNull<ibv_qp>) -> Result<mlx5dv_qp, InitObjectError> {
    let mut out = MaybeUninit::<mlx5dv_qp>::zeroed();
    let mut obj = empty_obj();
    obj.qp.in_ = qp.as_ptr();
    obj.qp.out = out.as_mut_ptr();
    init(&mut obj, MLX5DV_OBJ_QP)?;
    // SAFETY: libmlx5 filled it (zeroed before: every field is an integer or a pointer).
    Ok(out.assume_init())
}

/// The memory of a completion queue: its CQEs, their count and size, doorbell record, CQ number
/// (`mlx5dv_init_obj` with `MLX5DV_OBJ_CQ`). libmlx5 then treats the CQ as its caller's (see the
/// [module](self) documentation).
///
/// # Safety
///
/// As [`queue_pair_object`], for a live completion queue.
pub unsafe fn completion_queue_object(cq: NonNull<ibv_cq>) -> Result<mlx5dv_cq, InitObjectError> {
    let mut out = MaybeUninit::<mlx5dv_cq>::zeroed();
    let mut obj = empty_obj();
    obj.cq.in_ = cq.as_ptr();
    obj.cq.out = out.as_mut_ptr();
    init(&mut obj, MLX5DV_OBJ_CQ)?;
    // SAFETY: as in queue_pair_object.
    Ok(out.assume_init())
}

/// An address handle's 48-byte address vector (`struct mlx5_wqe_av`), which libmlx5 copies into
/// each DC or UD WQE (`mlx5dv_init_obj` with `MLX5DV_OBJ_AH`).
///
/// # Safety
///
/// As [`queue_pair_object`], for a live address handle.
pub unsafe fn address_handle_object(ah: NonNull<ibv_ah>) -> Result<mlx5dv_ah, InitObjectError> {
    let mut out = MaybeUninit::<mlx5dv_ah>::zeroed();
    let mut obj = empty_obj();
    obj.ah.in_ = ah.as_ptr();
    obj.ah.out = out.as_mut_ptr();
    init(&mut obj, MLX5DV_OBJ_AH)?;
    // SAFETY: as in queue_pair_object.
    Ok(out.assume_init())
}
