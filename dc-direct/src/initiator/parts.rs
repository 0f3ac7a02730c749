//! A DC initiator's send queue parts, from `mlx5dv_init_obj`'s `struct mlx5dv_qp` and what the
//! DC initiator was created with, and the checks a direct initiator makes on them.
use std::ffi::OsStr;
use std::ptr::NonNull;

use rdma_mummy_sys::mlx5dv_qp;

use super::CreateDirectDcInitiatorErrorKind;
use crate::send_queue::SendQueueParts;

/// The variable that makes libmlx5 sign every WQE (`qp_sig_enabled` in `verbs.c`: set, to anything).
pub(crate) const WQE_SIGNATURE_VARIABLE: &str = "MLX5_QP_SIGNATURE";

/// The doorbell record's send word (`MLX5_SND_DBR`).
const SEND_DOORBELL_RECORD: usize = 1;

/// A completion's `wqe_counter` is 16 bits.
const MAX_WQE_COUNT: u32 = 1 << 16;

/// What the DC initiator was created with: its number, granted limits, signal-all and streams.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Created {
    pub(crate) qp_number: u32,
    pub(crate) max_post: u32,
    pub(crate) max_inline_data: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) sq_sig_all: bool,
    pub(crate) streams: bool,
}

/// Refuses a libmlx5 that signs its WQEs: `signature` is the value of [`WQE_SIGNATURE_VARIABLE`], if set.
pub(crate) fn check_signatures(signature: Option<&OsStr>) -> Result<(), CreateDirectDcInitiatorErrorKind> {
    match signature {
        Some(_) => Err(CreateDirectDcInitiatorErrorKind::WqeSignatures),
        None => Ok(()),
    }
}

/// The send queue parts of `object` with the limits it was `created` with, after checking that
/// nothing was posted on it through libmlx5 and that its completions' 16-bit index names one
/// slot (whether its register may be written is `DirectRegister::of`'s).
///
/// # Safety
///
/// `object` is what `mlx5dv_init_obj` gave for a live queue pair: its doorbell record is two readable words.
pub(crate) unsafe fn send_queue_parts(
    object: &mlx5dv_qp, created: Created,
) -> Result<SendQueueParts, CreateDirectDcInitiatorErrorKind> {
    use CreateDirectDcInitiatorErrorKind::*;
    let buffer = NonNull::new(object.sq.buf.cast::<u8>()).ok_or(MissingMemory { part: "send queue" })?;
    let doorbell_record = NonNull::new(object.dbrec).ok_or(MissingMemory {
        part: "doorbell record",
    })?;
    let register = NonNull::new(object.bf.reg.cast::<u8>()).ok_or(MissingMemory {
        part: "BlueFlame register",
    })?;
    // SAFETY: the caller's promise: two readable words; the device does not write this one.
    let posted = u32::from_be(unsafe { doorbell_record.add(SEND_DOORBELL_RECORD).read_volatile() });
    if posted != 0 {
        return Err(AlreadyPosted {
            posting_index: posted as u16,
        });
    }
    if object.sq.wqe_cnt > MAX_WQE_COUNT {
        return Err(QueueTooLarge {
            wqe_count: object.sq.wqe_cnt,
        });
    }
    Ok(SendQueueParts {
        buffer,
        wqe_count: object.sq.wqe_cnt,
        stride: object.sq.stride,
        doorbell_record: doorbell_record.cast(),
        blueflame: register,
        blueflame_size: object.bf.size,
        max_post: created.max_post,
        max_inline_data: created.max_inline_data,
        max_send_sge: created.max_send_sge,
        sq_sig_all: created.sq_sig_all,
        qp_number: created.qp_number,
        streams: created.streams,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::ffi::OsStr;
    use std::mem::MaybeUninit;

    use rdma_mummy_sys::mlx5dv_qp;
    use softmlx5::oracle::{DciShape, OracleDci};

    use super::*;

    fn shape(blueflame_size: u32) -> DciShape {
        DciShape {
            wqe_count: 64,
            max_inline_data: 60,
            max_send_sge: 1,
            sq_sig_all: false,
            send_ops_flags: 1 | 1 << 3,
            streams: false,
            blueflame_size,
            qp_number: 0x12_3456,
        }
    }

    /// What `mlx5dv_init_obj` gives for the oracle's DCI.
    pub(crate) fn object_of(dci: &OracleDci) -> mlx5dv_qp {
        let layout = dci.layout();
        // SAFETY: integers and pointers: zero is a value of each.
        let mut object: mlx5dv_qp = unsafe { MaybeUninit::zeroed().assume_init() };
        object.sq.buf = layout.buffer.as_ptr().cast();
        object.sq.wqe_cnt = layout.wqe_count;
        object.sq.stride = layout.stride;
        object.dbrec = layout.doorbell_record.as_ptr();
        object.bf.reg = layout.blueflame.as_ptr().cast();
        object.bf.size = layout.blueflame_size;
        object
    }

    pub(crate) fn created_of(dci: &OracleDci) -> Created {
        Created {
            qp_number: dci.shape().qp_number,
            max_post: dci.max_post(),
            max_inline_data: dci.max_inline_data(),
            max_send_sge: dci.shape().max_send_sge,
            sq_sig_all: dci.shape().sq_sig_all,
            streams: dci.shape().streams,
        }
    }

    #[test]
    fn the_parts_are_the_objects_with_the_granted_limits() {
        let dci = OracleDci::new(&shape(256));
        let object = object_of(&dci);
        // SAFETY: the oracle's DCI is alive.
        let parts = unsafe { send_queue_parts(&object, created_of(&dci)) }.unwrap();
        let layout = dci.layout();
        assert_eq!(
            (parts.buffer, parts.wqe_count, parts.stride, parts.doorbell_record),
            (layout.buffer, 64, 64, layout.doorbell_record)
        );
        assert_eq!((parts.blueflame, parts.blueflame_size), (layout.blueflame, 256));
        assert_eq!(
            (parts.max_post, parts.max_inline_data, parts.qp_number),
            (dci.max_post(), dci.max_inline_data(), 0x12_3456)
        );
    }

    #[test]
    fn a_queue_posted_on_through_libmlx5_is_refused() {
        let mut dci = OracleDci::new(&shape(0));
        let ah = softmlx5::oracle::OracleAh::new([0; 48]);
        let (qp, mlx5) = (dci.qp_ex().as_ptr(), dci.mlx5_qp_ex().as_ptr());
        // SAFETY: the oracle's DCI and AH are alive, libmlx5's builders installed.
        unsafe {
            rdma_mummy_sys::ibv_wr_start(qp);
            rdma_mummy_sys::ibv_wr_send(qp);
            rdma_mummy_sys::mlx5dv_wr_set_dc_addr(mlx5, ah.ibv_ah().as_ptr(), 7, 8);
            rdma_mummy_sys::ibv_wr_set_sge(qp, 1, 0x1000, 8);
            assert_eq!(rdma_mummy_sys::ibv_wr_complete(qp), 0);
        }
        dci.take_events();
        // SAFETY: as above.
        let refused = unsafe { send_queue_parts(&object_of(&dci), created_of(&dci)) };
        assert!(
            matches!(
                refused,
                Err(CreateDirectDcInitiatorErrorKind::AlreadyPosted { posting_index })
                    if u32::from(posting_index) == dci.posting_index()
            ),
            "{refused:?}"
        );
    }

    #[test]
    fn a_queue_whose_index_a_completion_cannot_name_and_null_memory_are_refused() {
        let dci = OracleDci::new(&shape(0));
        let mut object = object_of(&dci);
        object.sq.wqe_cnt = 1 << 17;
        // SAFETY: as above (the count is only checked).
        let refused = unsafe { send_queue_parts(&object, created_of(&dci)) };
        assert!(matches!(
            refused,
            Err(CreateDirectDcInitiatorErrorKind::QueueTooLarge { wqe_count: 0x2_0000 })
        ));
        let mut object = object_of(&dci);
        object.bf.reg = std::ptr::null_mut();
        // SAFETY: as above.
        let refused = unsafe { send_queue_parts(&object, created_of(&dci)) };
        assert!(matches!(
            refused,
            Err(CreateDirectDcInitiatorErrorKind::MissingMemory {
                part: "BlueFlame register"
            })
        ));
    }

    #[test]
    fn wqe_signatures_are_refused_whatever_the_variable_holds() {
        assert!(check_signatures(None).is_ok());
        for value in ["1", "0", ""] {
            assert!(matches!(
                check_signatures(Some(OsStr::new(value))),
                Err(CreateDirectDcInitiatorErrorKind::WqeSignatures)
            ));
        }
    }
}
