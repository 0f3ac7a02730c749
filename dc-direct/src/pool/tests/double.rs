//! A pool's initiator made of the pieces a [`DirectDcInitiator`](crate::DirectDcInitiator) is
//! made of ([`OracleInitiator`]: the send queue parts `mlx5dv_init_obj` would give, read by
//! `send_queue_parts`, the writer over them, entered in the completion queue's table behind its C
//! entries), over an oracle DCI's memory in place of a device's; and the device
//! ([`Device`]): it reads the WQEs the pool's batches left in each send queue and writes a CQE
//! for each, in order, into the CQ memory the direct poller reads through its `struct ibv_cq`.
use std::collections::VecDeque;
use std::error::Error;
use std::ptr::NonNull;
use std::rc::Rc;

use rdma_mummy_sys::{ibv_cq, ibv_qp_ex, mlx5dv_qp_ex};
use sideway::ibverbs::queue_pair::SendOperationFlags;
use sideway_ext::ibverbs::post_send_guard::ProviderEntries;
use sideway_ext_dc_pool::initiator::{PooledInitiator, PostingInitiator, StreamResetRefusal};
use sideway_ext_dc_pool::PoolInitiator;
use sideway_ext_wqe_oracle::decode::decode_dc_wqe;
use sideway_ext_wqe_oracle::{DciShape, OracleAh, OracleDci};

use crate::completion_queue::tests::support::{CqMemory, CqeFields};
use crate::completion_queue::{Polling, SendQueueTable, VerbsCompletionQueue};
use crate::initiator::parts::send_queue_parts;
use crate::initiator::parts::tests::{created_of, object_of};
use crate::initiator::posting::PostingQueue;
use crate::send_queue::tests::entries_pair::oracle_lookup;
use crate::send_queue::SendQueue;

/// The CQE opcodes of `mlx5dv.h`: a requester's, and a requester's error.
const REQUESTER: u8 = 0;
const REQUESTER_ERROR: u8 = 13;
/// `MLX5_CQE_SYNDROME_WR_FLUSH_ERR`: what the device completes every request after an error with.
pub(super) const FLUSHED: u8 = 0x05;

/// A DC initiator of the pool: its send queue posted on through its C entries, over an oracle
/// DCI's memory. Its recovery is the direct initiator's, the device's part left out: refused
/// while requests are outstanding, else the send queue back to index 0.
pub(super) struct OracleInitiator {
    /// Dropped first: it writes `memory`.
    posting: PostingQueue,
    memory: OracleDci,
    pub(super) recoveries: u32,
}

impl OracleInitiator {
    /// A DCI of QP `qp_number` (WRITE and SEND, 60 bytes inline, 128 basic blocks), completing
    /// into the CQ of `table`, its DC setters knowing `routes`.
    pub(super) fn new(qp_number: u32, routes: &[OracleAh], table: &Rc<SendQueueTable>) -> Self {
        let memory = OracleDci::new(&DciShape {
            wqe_count: 128,
            max_inline_data: 60,
            max_send_sge: 1,
            sq_sig_all: false,
            send_ops_flags: 1 | 1 << 3,
            streams: false,
            blueflame_size: 256,
            qp_number,
        });
        // SAFETY: the oracle's DCI is alive and outlives the queue (field order); nothing else
        // writes its memory.
        let queue = unsafe {
            let parts = send_queue_parts(&object_of(&memory), created_of(&memory)).unwrap();
            SendQueue::from_parts(parts).unwrap()
        };
        let operations = SendOperationFlags::Write | SendOperationFlags::Send;
        Self {
            posting: PostingQueue::new(queue, operations, oracle_lookup(routes), table),
            memory,
            recoveries: 0,
        }
    }

    pub(super) fn memory(&self) -> &OracleDci {
        &self.memory
    }

    pub(super) fn outstanding(&self) -> u32 {
        self.posting.outstanding()
    }
}

impl PooledInitiator for OracleInitiator {
    fn max_send_wr(&self) -> u32 {
        self.memory.max_post()
    }

    fn stream_count(&self) -> u32 {
        0
    }

    fn recover(&mut self) -> Result<(), Box<dyn Error + Send + Sync>> {
        let outstanding = self.posting.outstanding();
        if outstanding != 0 {
            return Err(format!("{outstanding} requests outstanding").into());
        }
        self.posting.reset();
        self.recoveries += 1;
        Ok(())
    }

    fn reset_stream(&mut self, _: u16) -> Result<(), StreamResetRefusal> {
        Err(StreamResetRefusal::NotReadyToSend)
    }
}

// SAFETY: the views are the posting queue's C entries, alive while the initiator is and used
// through its `&mut`; `raw_cq` gives the verbs CQ's own `struct ibv_cq`, alive while it is.
unsafe impl PostingInitiator for OracleInitiator {
    fn qp_number(&self) -> u32 {
        self.memory.shape().qp_number
    }

    fn send_view(&mut self) -> (NonNull<ibv_qp_ex>, ProviderEntries, NonNull<mlx5dv_qp_ex>) {
        self.posting.send_views()
    }

    fn max_inline_data(&self) -> u32 {
        self.memory.max_inline_data()
    }
}

impl PoolInitiator for OracleInitiator {
    type CompletionQueue = VerbsCompletionQueue;

    fn raw_cq(cq: &VerbsCompletionQueue) -> NonNull<ibv_cq> {
        cq.raw()
    }
}

/// A WQE posted and not yet executed.
#[derive(Debug, Clone, Copy)]
struct Wqe {
    index: u16,
    opcode: u8,
}

/// The device: the CQ's memory, and per initiator the WQEs it has yet to execute.
pub(super) struct Device {
    cq: CqMemory,
    write_index: u32,
    /// Per initiator: its QP number, the WQEs posted and not executed, the posting index after
    /// the last one read.
    queues: Vec<(u32, VecDeque<Wqe>, u32)>,
}

impl Device {
    /// A device whose CQ holds `cqe_count` CQEs, and the direct poller behind a `struct ibv_cq`
    /// over them (the pool's send CQ; the device outlives it).
    pub(super) fn new(cqe_count: u32) -> (Self, VerbsCompletionQueue) {
        let mut cq = CqMemory::new(cqe_count, 64);
        // SAFETY: the memory is the device's, which the tests keep past the pool's life; only
        // the device writes CQEs, only this poller polls.
        let polling = unsafe { Polling::new(cq.parts(64)) }.unwrap();
        let device = Self {
            cq,
            write_index: 0,
            queues: Vec::new(),
        };
        (device, VerbsCompletionQueue::new(polling))
    }

    /// Serves initiator `initiator` of QP `qp_number` (in the pool's order).
    pub(super) fn add(&mut self, qp_number: u32) {
        self.queues.push((qp_number, VecDeque::new(), 0));
    }

    /// Reads the WQEs `initiator`'s last batches left in its send queue, up to its doorbell
    /// record's posting index.
    pub(super) fn read(&mut self, initiator: usize, memory: &OracleDci) {
        let (qp_number, wqes, ending) = &mut self.queues[initiator];
        let posted = u32::from_be(memory.doorbell_record()[1]) as u16;
        let mask = memory.shape().wqe_count - 1;
        while *ending as u16 != posted {
            let wqe = decode_dc_wqe(memory.send_queue(), *ending & mask).expect("a DC WQE");
            assert_eq!((wqe.index, wqe.qp_number), (*ending as u16, *qp_number));
            wqes.push_back(Wqe {
                index: wqe.index,
                opcode: wqe.opcode,
            });
            *ending += u32::from(wqe.ds).div_ceil(4);
        }
    }

    /// Executes up to `count` of `initiator`'s WQEs, in order, each with a successful CQE.
    pub(super) fn execute(&mut self, initiator: usize, count: usize) -> usize {
        let mut done = 0;
        while done < count {
            let Some(wqe) = self.queues[initiator].1.pop_front() else {
                break;
            };
            let qp_number = self.queues[initiator].0;
            self.write(
                CqeFields {
                    byte_count: 0x77,
                    ..CqeFields::write(qp_number, wqe.index, false)
                },
                wqe.opcode,
                REQUESTER,
            );
            done += 1;
        }
        done
    }

    /// Fails `initiator`'s first WQE with `syndrome` and `vendor_err`, and flushes the others;
    /// the device restarts the queue at index 0 once it is reset.
    pub(super) fn fail(&mut self, initiator: usize, syndrome: u8, vendor_err: u8) {
        let qp_number = self.queues[initiator].0;
        let wqes: Vec<Wqe> = self.queues[initiator].1.drain(..).collect();
        for (n, wqe) in wqes.into_iter().enumerate() {
            let (syndrome, vendor_err) = if n == 0 { (syndrome, vendor_err) } else { (FLUSHED, 0) };
            self.write(
                CqeFields {
                    syndrome,
                    vendor_err,
                    ..CqeFields::write(qp_number, wqe.index, false)
                },
                wqe.opcode,
                REQUESTER_ERROR,
            );
        }
        self.queues[initiator].2 = 0;
    }

    /// A CQE for a QP no initiator has.
    pub(super) fn stray(&mut self, qp_number: u32) {
        self.write(CqeFields::write(qp_number, 0, false), 0x08, REQUESTER);
    }

    /// WQEs of `initiator` not executed yet.
    pub(super) fn pending(&self, initiator: usize) -> usize {
        self.queues[initiator].1.len()
    }

    fn write(&mut self, fields: CqeFields, wqe_opcode: u8, cqe_opcode: u8) {
        let index = self.write_index;
        self.write_index += 1;
        let cqe_count = self.cq.cqe_count();
        let consumed = self.cq.doorbell_record();
        assert!(index.wrapping_sub(consumed) < cqe_count, "the CQ overflows");
        let fields = CqeFields {
            cqe_opcode,
            wqe_opcode,
            owner: index & cqe_count != 0,
            ..fields
        };
        fields.store(self.cq.cqe_mut(index));
    }
}
