//! The poller against CQEs this test writes from `mlx5dv.h`'s layout, one behaviour of cq.c at a
//! time, for requests the crate's writer posted on a send queue in the poller's table.

use sideway::ibverbs::completion::{WorkCompletionOperationType, WorkCompletionStatus};

use super::support::{CqMemory, CqeFields, TableWithQueue};
use crate::completion_queue::{
    Completion, CompletionQueuePoller, CreateDirectCompletionQueueErrorKind, PollDirectCompletionQueueErrorKind,
};

const QP: u32 = 0x00ab_cdef;

/// A table with QP `QP`'s send queue of 64 slots (room for 32 requests), nothing posted.
fn table() -> TableWithQueue {
    TableWithQueue::new(QP, 64)
}

fn poll(poller: &mut CompletionQueuePoller, table: &TableWithQueue, max: usize) -> Vec<Completion> {
    let mut completions = vec![Completion::default(); max];
    let polled = poller.poll(&table.table, &mut completions).unwrap();
    completions.truncate(polled);
    completions
}

fn poll_error(poller: &mut CompletionQueuePoller, table: &TableWithQueue) -> PollDirectCompletionQueueErrorKind {
    poller
        .poll(&table.table, &mut [Completion::default(); 4])
        .unwrap_err()
        .0
}

fn wr_ids(completions: &[Completion]) -> Vec<u64> {
    completions.iter().map(Completion::wr_id).collect()
}

#[test]
fn a_new_cq_is_empty_and_the_doorbell_record_is_stored_anyway() {
    let mut memory = CqMemory::new(8, 64);
    memory.set_doorbell_record(0x00ff_0000);
    let mut poller = memory.poller();
    assert_eq!(poller.consumer_index, 0x00ff_0000);
    assert_eq!(poller.cq_number(), 0x4d2);
    memory.set_doorbell_record(0xdead_beef);
    let table = table();
    assert!(poll(&mut poller, &table, 4).is_empty());
    assert_eq!(memory.doorbell_record(), 0x00ff_0000);
    assert_eq!(memory.arm_word(), 0);
    // No room asked: nothing read, the record still stored (poll_cq's update_cons_index).
    memory.set_doorbell_record(1);
    let index = table.post_one(0x1000);
    CqeFields::write(QP, index, false).store(memory.cqe_mut(0));
    assert!(poll(&mut poller, &table, 0).is_empty());
    assert_eq!(memory.doorbell_record(), 0x00ff_0000);
    assert_eq!(table.outstanding(), 1, "the CQE was not read");
}

#[test]
fn a_write_completion_reads_each_field_from_its_offset() {
    // Both bytes of the WQE counter count: a queue of 8 slots whose requests reach index 0x1236.
    let table = TableWithQueue::new(QP, 8);
    table.advance_to(0x1234);
    assert_eq!(table.post([0x1005, 0x1006, 0x1007]), [0x1234, 0x1236, 0x1238]);
    let mut memory = CqMemory::new(8, 64);
    memory.cqe_mut(0).fill(0x5a);
    CqeFields {
        wqe_counter: 0x1236,
        ..CqeFields::write(QP, 0, false)
    }
    .store(memory.cqe_mut(0));
    let mut poller = memory.poller();
    let completions = poll(&mut poller, &table, 4);
    assert_eq!(completions.len(), 1);
    let completion = completions[0];
    assert_eq!(completion.wr_id(), 0x1006, "the request at 0x1236");
    assert_eq!(completion.status(), WorkCompletionStatus::Success);
    assert_eq!(completion.opcode(), Some(WorkCompletionOperationType::Write));
    assert_eq!(completion.byte_len(), None);
    assert_eq!(completion.qp_number(), QP);
    assert_eq!(completion.vendor_err(), 0);
    assert!(!completion.with_immediate());
    assert_eq!(
        table.outstanding(),
        1,
        "it and the request before it retired: sq.tail = sq.wqe_head[slot] + 1"
    );
    assert_eq!((poller.consumer_index, memory.doorbell_record()), (1, 1));
}

#[test]
fn requester_opcodes_give_the_opcode_and_byte_count_handle_good_req_gives() {
    use WorkCompletionOperationType::*;
    let cases: [(u8, Option<WorkCompletionOperationType>, Option<u32>, bool); 14] = [
        (0x08, Some(Write), None, false),
        (0x09, Some(Write), None, true),
        (0x0a, Some(Send), None, false),
        (0x0b, Some(Send), None, true),
        (0x01, Some(Send), None, false),
        (0x10, Some(Read), Some(0x0102_0304), false),
        (0x11, Some(CompareAndSwap), Some(8), false),
        (0x12, Some(FetchAndAdd), Some(8), false),
        (0x0e, Some(TcpSegmentationOffload), None, false),
        (0x00, None, None, false),
        (0x25, None, None, false),
        (0x20, None, None, false),
        (0x2f, None, None, false),
        (0x14, None, None, false),
    ];
    let table = table();
    // The CQE echoes the WQE opcode it names; the poller takes the opcode from the CQE.
    let indices = table.post((0..cases.len() as u64).map(|n| 0x1000 + n));
    let mut memory = CqMemory::new(16, 64);
    for (slot, ((wqe_opcode, ..), index)) in cases.iter().zip(&indices).enumerate() {
        let fields = CqeFields {
            wqe_opcode: *wqe_opcode,
            byte_count: 0x0102_0304,
            ..CqeFields::write(QP, *index, false)
        };
        fields.store(memory.cqe_mut(slot as u32));
    }
    let mut poller = memory.poller();
    let completions = poll(&mut poller, &table, 16);
    assert_eq!(wr_ids(&completions), (0x1000..0x100e).collect::<Vec<_>>());
    assert_eq!(table.outstanding(), 0);
    for ((wqe_opcode, opcode, byte_len, with_immediate), completion) in cases.iter().zip(&completions) {
        assert_eq!(completion.opcode(), *opcode, "WQE opcode {wqe_opcode:#x}");
        assert_eq!(completion.byte_len(), *byte_len, "WQE opcode {wqe_opcode:#x}");
        assert_eq!(
            completion.with_immediate(),
            *with_immediate,
            "WQE opcode {wqe_opcode:#x}"
        );
        assert_eq!(completion.status(), WorkCompletionStatus::Success);
    }
}

#[test]
fn scattered_data_completes_with_a_general_error_as_for_any_qp_not_rc() {
    let table = table();
    let indices = table.post([0x1000, 0x1001, 0x1002]);
    let mut memory = CqMemory::new(4, 64);
    for (slot, (format, index)) in [1, 2, 0].into_iter().zip(indices).enumerate() {
        CqeFields {
            wqe_opcode: 0x10,
            byte_count: 4,
            format,
            ..CqeFields::write(QP, index, false)
        }
        .store(memory.cqe_mut(slot as u32));
    }
    let statuses: Vec<_> = poll(&mut memory.poller(), &table, 4)
        .iter()
        .map(Completion::status)
        .collect();
    use WorkCompletionStatus::*;
    assert_eq!(statuses, [GeneralError, GeneralError, Success]);
}

#[test]
fn every_error_syndrome_gives_the_status_mlx5_handle_error_cqe_gives() {
    use WorkCompletionStatus::*;
    let named = [
        (0x01, LocalLengthError),
        (0x02, LocalQueuePairOperationError),
        (0x04, LocalProtectionError),
        (0x05, WorkRequestFlushedError),
        (0x06, MemoryWindowBindError),
        (0x10, BadResponseError),
        (0x11, LocalAccessError),
        (0x12, RemoteInvalidRequestError),
        (0x13, RemoteAccessError),
        (0x14, RemoteOperationError),
        (0x15, RetryCounterExceededError),
        (0x16, ResponderNotReadyRetryCounterExceededError),
        (0x22, RemoteAbortedError),
    ];
    for syndrome in 0..=u8::MAX {
        let expected = named
            .iter()
            .find(|(named, _)| *named == syndrome)
            .map_or(GeneralError, |(_, status)| *status);
        let table = table();
        let indices = table.post(0x1000..0x1005);
        let mut memory = CqMemory::new(2, 64);
        let fields = CqeFields {
            cqe_opcode: 13,
            syndrome,
            vendor_err: syndrome ^ 0xff,
            wqe_opcode: 0x0a,
            byte_count: 77,
            ..CqeFields::write(QP, indices[3], false)
        };
        fields.store(memory.cqe_mut(0));
        let completion = poll(&mut memory.poller(), &table, 1)[0];
        assert_eq!(completion.status(), expected, "syndrome {syndrome:#x}");
        assert_eq!(completion.vendor_err(), u32::from(syndrome ^ 0xff));
        assert_eq!((completion.wr_id(), completion.qp_number()), (0x1003, QP));
        assert_eq!((completion.opcode(), completion.byte_len()), (None, None));
        assert_eq!(table.outstanding(), 1, "the fourth request and those before it retired");
    }
}

#[test]
fn the_owner_bit_alternates_with_each_pass_over_the_ring() {
    let mut memory = CqMemory::new(4, 64);
    let mut poller = memory.poller();
    let table = TableWithQueue::new(QP, 8);
    for index in 0u32..40 {
        let owner = index & 4 != 0;
        let wqe_counter = table.post_one(0x1000 + u64::from(index));
        // Last pass's owner bit: still the device's.
        CqeFields::write(QP, wqe_counter, !owner).store(memory.cqe_mut(index));
        assert!(poll(&mut poller, &table, 2).is_empty(), "index {index}");
        CqeFields {
            cqe_opcode: 15,
            ..CqeFields::write(QP, wqe_counter, owner)
        }
        .store(memory.cqe_mut(index));
        assert!(
            poll(&mut poller, &table, 2).is_empty(),
            "MLX5_CQE_INVALID at index {index}"
        );
        assert_eq!(table.outstanding(), 1, "index {index}: nothing retired");
        CqeFields::write(QP, wqe_counter, owner).store(memory.cqe_mut(index));
        let completions = poll(&mut poller, &table, 2);
        assert_eq!(wr_ids(&completions), [0x1000 + u64::from(index)], "index {index}");
        assert_eq!(table.outstanding(), 0, "index {index}");
        assert_eq!(
            (poller.consumer_index, memory.doorbell_record()),
            (index + 1, index + 1)
        );
    }
}

#[test]
fn the_consumer_index_wraps_the_doorbell_records_24_bits() {
    let mut memory = CqMemory::new(2, 64);
    memory.set_doorbell_record(0x00ff_fffe);
    let mut poller = memory.poller();
    let table = table();
    for index in 0x00ff_fffe_u32..0x0100_0003 {
        let wqe_counter = table.post_one(u64::from(index));
        CqeFields::write(QP, wqe_counter, index & 2 != 0).store(memory.cqe_mut(index));
        assert_eq!(
            wr_ids(&poll(&mut poller, &table, 1)),
            [u64::from(index)],
            "index {index:#x}"
        );
        assert_eq!(poller.consumer_index, index + 1);
        assert_eq!(memory.doorbell_record(), (index + 1) & 0x00ff_ffff);
    }
}

#[test]
fn a_128_byte_cqe_is_read_from_its_second_half() {
    let table = table();
    let indices = table.post([0x1000, 0x1001, 0x1002]);
    let mut memory = CqMemory::new(4, 128);
    for (slot, index) in indices.into_iter().enumerate() {
        let start = slot * 128;
        // The first half is what an INLINE_SCATTER_64 CQE's data would be: any bytes.
        memory.bytes_mut()[start..start + 64].fill(0x0f);
        CqeFields::write(QP, index, false).store(memory.cqe_mut(slot as u32));
    }
    let mut poller = memory.poller();
    assert_eq!(wr_ids(&poll(&mut poller, &table, 8)), [0x1000, 0x1001, 0x1002]);
    assert_eq!(poller.consumer_index, 3);
}

#[test]
fn a_compressed_cqe_is_refused_after_the_completions_before_it() {
    let table = table();
    let indices = table.post(0x1000..0x1004);
    let mut memory = CqMemory::new(8, 64);
    for (slot, &index) in indices.iter().enumerate() {
        CqeFields {
            format: if slot == 2 { 3 } else { 0 },
            ..CqeFields::write(QP, index, false)
        }
        .store(memory.cqe_mut(slot as u32));
    }
    let mut poller = memory.poller();
    assert_eq!(wr_ids(&poll(&mut poller, &table, 8)), [0x1000, 0x1001]);
    assert_eq!((poller.consumer_index, memory.doorbell_record()), (2, 2));
    assert_eq!(table.outstanding(), 2);
    assert_eq!(
        poll_error(&mut poller, &table),
        PollDirectCompletionQueueErrorKind::CompressedCqe {
            opcode_format_owner: 0x0c
        }
    );
    assert_eq!((poller.consumer_index, memory.doorbell_record()), (3, 3));
    assert_eq!(table.outstanding(), 2, "the refused CQE retires nothing");
    assert_eq!(wr_ids(&poll(&mut poller, &table, 8)), [0x1003]);
    assert_eq!(table.outstanding(), 0);
}

#[test]
fn cqes_that_are_not_send_completions_are_refused() {
    for cqe_opcode in (1..=12).chain([14]) {
        let table = table();
        let indices = table.post([0x1000, 0x1001]);
        let mut memory = CqMemory::new(2, 64);
        CqeFields {
            cqe_opcode,
            ..CqeFields::write(QP, indices[1], false)
        }
        .store(memory.cqe_mut(0));
        let mut poller = memory.poller();
        assert_eq!(
            poll_error(&mut poller, &table),
            PollDirectCompletionQueueErrorKind::UnexpectedCqeOpcode {
                cqe_opcode,
                qp_number: QP
            }
        );
        assert_eq!((poller.consumer_index, memory.doorbell_record()), (1, 1));
        assert_eq!(table.outstanding(), 2, "nothing retired");
    }
}

#[test]
fn a_completion_of_an_unknown_qp_is_refused() {
    let table = table();
    let index = table.post_one(0x1000);
    let mut memory = CqMemory::new(2, 64);
    CqeFields {
        cqe_opcode: 13,
        syndrome: 5,
        ..CqeFields::write(QP + 1, index, false)
    }
    .store(memory.cqe_mut(0));
    let mut poller = memory.poller();
    assert_eq!(
        poll_error(&mut poller, &table),
        PollDirectCompletionQueueErrorKind::UnknownQueuePair { qp_number: QP + 1 }
    );
    assert_eq!((poller.consumer_index, memory.doorbell_record()), (1, 1));
    assert_eq!(table.outstanding(), 1, "QP {QP:#x}'s request not retired");
}

#[test]
fn unsupported_cq_shapes_are_refused() {
    for (cqe_count, cqe_size) in [(8, 32), (8, 256), (8, 0), (3, 64), (0, 64), (1 << 24, 64)] {
        let mut memory = CqMemory::new(1, 64);
        let mut parts = memory.parts(cqe_size);
        parts.cqe_count = cqe_count;
        // SAFETY: the constructor refuses before reading anything but the doorbell record.
        let error = unsafe { CompletionQueuePoller::new(parts) }.unwrap_err().0;
        match error {
            CreateDirectCompletionQueueErrorKind::UnsupportedCqeSize { cqe_size: size } => assert_eq!(size, cqe_size),
            CreateDirectCompletionQueueErrorKind::UnsupportedCqeCount { cqe_count: count } => {
                assert_eq!((count, cqe_size), (cqe_count, 64))
            },
            other => panic!("{other:?}"),
        }
    }
    let mut memory = CqMemory::new(1 << 23, 64);
    // SAFETY: the memory outlives the poller.
    assert!(unsafe { CompletionQueuePoller::new(memory.parts(64)) }.is_ok());
}
