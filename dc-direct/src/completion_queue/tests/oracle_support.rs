//! Driving the oracle for the comparison: requests posted through libmlx5's own builders, the
//! oracle DCI's `sq.wrid[]`/`sq.wqe_head[]` as the poller's slot table, and libmlx5's error
//! dumps kept off the test output.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;

use rand::rngs::StdRng;
use rand::Rng;
use rdma_mummy_sys::{
    ibv_send_flags, ibv_wr_complete, ibv_wr_rdma_write, ibv_wr_send, ibv_wr_set_inline_data, ibv_wr_set_sge,
    ibv_wr_start, mlx5dv_wr_set_dc_addr,
};
use softmlx5::oracle::{OracleAh, OracleDci};

use crate::completion_queue::{PollDirectCompletionQueueErrorKind, SendQueueSlots};

/// `MLX5_OPCODE_RDMA_WRITE` and `MLX5_OPCODE_SEND`: what the posted WQEs carry.
pub(super) const MLX5_OPCODE_RDMA_WRITE: u8 = 0x08;
pub(super) const MLX5_OPCODE_SEND: u8 = 0x0a;

/// A request posted through libmlx5 and not yet retired by a generated CQE.
#[derive(Debug, Clone, Copy)]
pub(super) struct Posted {
    /// The posting index of its first 64-byte slot (`sq.cur_post` before it).
    pub(super) index: u32,
    pub(super) wqe_opcode: u8,
}

/// Posts one batch of up to `count` random DC WRITEs and SENDs through libmlx5's builders
/// (`ibv_wr_start`, `ibv_wr_rdma_write`/`ibv_wr_send`, `mlx5dv_wr_set_dc_addr`,
/// `ibv_wr_set_sge`/`ibv_wr_set_inline_data`, `ibv_wr_complete`), as many as the queue has room
/// for, and records them in `posted`.
pub(super) fn post_batch(
    dci: &mut OracleDci, ah: &OracleAh, count: usize, rng: &mut StdRng, posted: &mut VecDeque<Posted>,
) {
    let (head, tail) = dci.head_and_tail();
    // mlx5_wq_overflow: a batch fits while the requests outstanding and those before it in the
    // batch stay under max_post.
    let room = dci.max_post().saturating_sub(head.wrapping_sub(tail)) as usize;
    let count = count.min(room);
    if count == 0 {
        return;
    }
    let inline_data = [0x3cu8; 512];
    let max_inline = dci.max_inline_data() as usize;
    let (qp, mlx5) = (dci.qp_ex().as_ptr(), dci.mlx5_qp_ex().as_ptr());
    // SAFETY: the oracle's DCI and AH are alive and libmlx5's builders installed; the inline
    // data outlives the builder call, which copies it.
    unsafe {
        ibv_wr_start(qp);
        for _ in 0..count {
            let index = dci.posting_index();
            (*qp).wr_id = rng.random();
            (*qp).wr_flags = if rng.random_bool(0.5) {
                ibv_send_flags::IBV_SEND_SIGNALED.0
            } else {
                0
            };
            let wqe_opcode = if rng.random_bool(0.5) {
                ibv_wr_rdma_write(qp, rng.random(), rng.random());
                MLX5_OPCODE_RDMA_WRITE
            } else {
                ibv_wr_send(qp);
                MLX5_OPCODE_SEND
            };
            mlx5dv_wr_set_dc_addr(
                mlx5,
                ah.ibv_ah().as_ptr(),
                rng.random::<u32>() & 0x00ff_ffff,
                rng.random(),
            );
            if rng.random_bool(0.5) {
                let length = rng.random_range(0..=max_inline);
                ibv_wr_set_inline_data(qp, inline_data.as_ptr().cast_mut().cast(), length);
            } else {
                ibv_wr_set_sge(qp, rng.random(), rng.random(), rng.random_range(0..=4096));
            }
            posted.push_back(Posted { index, wqe_opcode });
        }
        assert_eq!(ibv_wr_complete(qp), 0, "libmlx5 refused a batch the queue had room for");
    }
}

/// The oracle DCI's `sq.wrid[]` and `sq.wqe_head[]` as the poller's slot table, with a tail of
/// its own (`sq.tail` as the poller moves it), to compare with the one libmlx5's poll moves.
pub(super) struct OracleSlots<'a> {
    pub(super) dci: &'a OracleDci,
    pub(super) tail: u32,
}

impl SendQueueSlots for OracleSlots<'_> {
    fn retire(&mut self, qp_number: u32, wqe_counter: u16) -> Result<u64, PollDirectCompletionQueueErrorKind> {
        if qp_number != self.dci.shape().qp_number {
            return Err(PollDirectCompletionQueueErrorKind::UnknownQueuePair { qp_number });
        }
        let slot = u32::from(wqe_counter) & (self.dci.shape().wqe_count - 1);
        self.tail = self.dci.wqe_head(slot).wrapping_add(1);
        Ok(self.dci.wr_id(slot))
    }
}

/// Runs `f` with the process's standard error sent to /dev/null: libmlx5 dumps every error CQE
/// but flushes and retry errors there (`mlx5_parse_cqe`), thousands of times in these tests.
pub(super) fn with_stderr_muted<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(libc::c_int);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: the descriptor saved below, restored once and closed.
            unsafe {
                libc::dup2(self.0, libc::STDERR_FILENO);
                libc::close(self.0);
            }
        }
    }
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
    // SAFETY: plain descriptor calls; standard error is restored by `Restore` on every exit.
    let _restore = unsafe {
        let saved = libc::dup(libc::STDERR_FILENO);
        assert!(saved >= 0);
        libc::dup2(null.as_raw_fd(), libc::STDERR_FILENO);
        Restore(saved)
    };
    f()
}
