//! Driving the oracle for the comparison: the same requests posted through libmlx5's own
//! builders on an oracle DCI and through the crate's writer on a send queue of the same shape
//! (over a second DCI's memory) in the poller's table, so that both hold the same requests at
//! the same slots; and libmlx5's error dumps kept off the test output.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::rc::Rc;

use rand::rngs::SmallRng;
use rand::Rng;
use softmlx5::oracle::decode::decode_dc_wqe;
use softmlx5::oracle::{OracleAh, OracleDci};

use crate::completion_queue::SendQueueTable;
use crate::send_queue::shared::SharedSendQueue;
use crate::send_queue::tests::requests::{post_direct, post_libmlx5, Draw, Operations};
use crate::send_queue::{AddressVector, SendQueue, SendQueueParts};

/// `MLX5_OPCODE_SEND`: what a posted SEND's WQE carries.
pub(super) const MLX5_OPCODE_SEND: u8 = 0x0a;

/// A request posted both ways and not yet retired by a generated CQE.
#[derive(Debug, Clone, Copy)]
pub(super) struct Posted {
    /// The posting index of its first 64-byte slot (`sq.cur_post` before it).
    pub(super) index: u32,
    pub(super) wqe_opcode: u8,
}

/// libmlx5's DCI and the writer's send queue of the same shape, in the table the poller is
/// given.
pub(super) struct Posting {
    /// libmlx5's DCI, its requests posted through libmlx5's builders.
    pub(super) dci: OracleDci,
    /// The table holding `queue`, the poller's.
    pub(super) table: SendQueueTable,
    queue: Rc<SharedSendQueue>,
    /// The second DCI, whose memory the writer's queue writes: dropped after it.
    _memory: OracleDci,
    oracle_routes: Vec<OracleAh>,
    routes: Vec<AddressVector>,
    draw: Draw,
}

impl Posting {
    /// Both ways over DCIs of `dci`'s shape.
    pub(super) fn new(dci: OracleDci, rng: &mut SmallRng) -> Self {
        let shape = dci.shape().clone();
        let memory = OracleDci::new(&shape);
        let layout = memory.layout();
        let parts = SendQueueParts {
            buffer: layout.buffer,
            wqe_count: layout.wqe_count,
            stride: layout.stride,
            doorbell_record: layout.doorbell_record,
            blueflame: layout.blueflame,
            blueflame_size: layout.blueflame_size,
            max_post: dci.max_post(),
            max_inline_data: dci.max_inline_data(),
            max_send_sge: shape.max_send_sge,
            sq_sig_all: shape.sq_sig_all,
            qp_number: shape.qp_number,
            streams: shape.streams,
        };
        // SAFETY: the second DCI's memory outlives the queue (the table and the queue are
        // dropped before it) and nothing else posts on it.
        let queue = unsafe { SendQueue::from_parts(parts) }.expect("the oracle's shape");
        let queue = Rc::new(SharedSendQueue::new(queue));
        let table = SendQueueTable::default();
        table.insert(shape.qp_number, Rc::clone(&queue));
        let routes: Vec<AddressVector> = (0..3)
            .map(|_| AddressVector::new(std::array::from_fn(|_| rng.random())))
            .collect();
        let draw = Draw {
            operations: Operations::SendWrite,
            max_inline_data: dci.max_inline_data(),
            max_send_sge: shape.max_send_sge,
            streams: shape.streams,
            routes: routes.len(),
        };
        Self {
            oracle_routes: routes.iter().map(|route| OracleAh::new(*route.bytes())).collect(),
            routes,
            draw,
            dci,
            table,
            queue,
            _memory: memory,
        }
    }

    /// Requests the writer's queue holds posted and not completed (`sq.head - sq.tail`).
    pub(super) fn outstanding(&self) -> u32 {
        self.queue.try_with_mut(|queue| queue.outstanding()).unwrap()
    }

    /// Posts one batch of up to `count` random DC WRITEs and SENDs, as many as the queue has
    /// room for, through libmlx5's builders and through the writer; checks that both hold each
    /// at the same slot with the same `wr_id` and posting count (`sq.wrid[]`, `sq.wqe_head[]`),
    /// and records them in `posted`.
    pub(super) fn post_batch(&mut self, count: usize, rng: &mut SmallRng, posted: &mut VecDeque<Posted>) {
        let (head, tail) = self.dci.head_and_tail();
        // mlx5_wq_overflow: a batch fits while the requests outstanding and those before it in
        // the batch stay under max_post.
        let room = self.dci.max_post().saturating_sub(head.wrapping_sub(tail)) as usize;
        assert_eq!(self.outstanding(), head.wrapping_sub(tail), "requests outstanding");
        let count = count.min(room);
        if count == 0 {
            return;
        }
        let batch: Vec<_> = (0..count)
            .map(|_| {
                let wr_id = rng.random();
                self.draw.request(rng, wr_id)
            })
            .collect();
        let mut index = self.dci.posting_index();
        post_libmlx5(&self.dci, &self.oracle_routes, &batch);
        self.queue
            .try_with_mut(|queue| post_direct(queue, &self.routes, &batch))
            .unwrap();
        let wqe_count = self.dci.shape().wqe_count;
        for request in &batch {
            let slot = index & (wqe_count - 1);
            let wqe = decode_dc_wqe(self.dci.send_queue(), slot).unwrap();
            let writers = self
                .queue
                .try_with_mut(|queue| (queue.wr_id(slot), queue.wqe_head(slot)))
                .unwrap();
            let libmlx5s = (self.dci.wr_id(slot), self.dci.wqe_head(slot));
            assert_eq!(libmlx5s, writers, "slot {slot}: wr_id and wqe_head");
            assert_eq!(writers.0, request.wr_id, "slot {slot}: the request's wr_id");
            posted.push_back(Posted {
                index,
                wqe_opcode: wqe.opcode,
            });
            index = index.wrapping_add(u32::from(wqe.ds).div_ceil(4));
        }
        let direct_index = self.queue.try_with_mut(|queue| queue.posting_index()).unwrap();
        assert_eq!(
            (self.dci.posting_index(), direct_index),
            (index, index),
            "posting indices"
        );
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
