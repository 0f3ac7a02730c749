//! The poller against CQEs this test writes from `mlx5dv.h`'s layout, one behaviour of cq.c at a
//! time.

use sideway::ibverbs::completion::{WorkCompletionOperationType, WorkCompletionStatus};

use super::support::{CqMemory, CqeFields, SlotTable};
use crate::completion_queue::{
    Completion, CompletionQueuePoller, CreateDirectCompletionQueueErrorKind, PollDirectCompletionQueueErrorKind,
};

const QP: u32 = 0x00ab_cdef;

/// A table with QP `QP` of 8 slots, wr_id `0x1000 + slot`, wqe_head `100 + slot`.
fn table() -> SlotTable {
    let mut table = SlotTable::default();
    table.add(
        QP,
        (0..8).map(|slot| 0x1000 + slot).collect(),
        (0..8).map(|slot| 100 + slot as u32).collect(),
    );
    table
}

fn poll(poller: &mut CompletionQueuePoller, table: &mut SlotTable, max: usize) -> Vec<Completion> {
    let mut completions = vec![Completion::default(); max];
    let polled = poller.poll(table, &mut completions).unwrap();
    completions.truncate(polled);
    completions
}

fn poll_error(poller: &mut CompletionQueuePoller, table: &mut SlotTable) -> PollDirectCompletionQueueErrorKind {
    poller.poll(table, &mut [Completion::default(); 4]).unwrap_err().0
}

#[test]
fn a_new_cq_is_empty_and_the_doorbell_record_is_stored_anyway() {
    let mut memory = CqMemory::new(8, 64);
    memory.set_doorbell_record(0x00ff_0000);
    let mut poller = memory.poller();
    assert_eq!(poller.consumer_index, 0x00ff_0000);
    assert_eq!(poller.cq_number(), 0x4d2);
    memory.set_doorbell_record(0xdead_beef);
    assert!(poll(&mut poller, &mut table(), 4).is_empty());
    assert_eq!(memory.doorbell_record(), 0x00ff_0000);
    assert_eq!(memory.arm_word(), 0);
    // No room asked: nothing read, the record still stored (poll_cq's update_cons_index).
    memory.set_doorbell_record(1);
    CqeFields::write(QP, 0, false).store(memory.cqe_mut(0));
    assert!(poll(&mut poller, &mut table(), 0).is_empty());
    assert_eq!(memory.doorbell_record(), 0x00ff_0000);
}

#[test]
fn a_write_completion_reads_each_field_from_its_offset() {
    let mut memory = CqMemory::new(8, 64);
    memory.cqe_mut(0).fill(0x5a);
    CqeFields {
        wqe_counter: 0x1236,
        ..CqeFields::write(QP, 0, false)
    }
    .store(memory.cqe_mut(0));
    let mut table = table();
    let mut poller = memory.poller();
    let completions = poll(&mut poller, &mut table, 4);
    assert_eq!(completions.len(), 1);
    let completion = completions[0];
    assert_eq!(completion.wr_id(), 0x1006, "slot 0x1236 & 7");
    assert_eq!(completion.status(), WorkCompletionStatus::Success);
    assert_eq!(completion.opcode(), Some(WorkCompletionOperationType::Write));
    assert_eq!(completion.byte_len(), None);
    assert_eq!(completion.qp_number(), QP);
    assert_eq!(completion.vendor_err(), 0);
    assert!(!completion.with_immediate());
    assert_eq!(table.tail(QP), 107, "wqe_head[6] + 1");
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
    let mut memory = CqMemory::new(16, 64);
    for (slot, (wqe_opcode, ..)) in cases.iter().enumerate() {
        let fields = CqeFields {
            wqe_opcode: *wqe_opcode,
            byte_count: 0x0102_0304,
            ..CqeFields::write(QP, 0, false)
        };
        fields.store(memory.cqe_mut(slot as u32));
    }
    let mut poller = memory.poller();
    let completions = poll(&mut poller, &mut table(), 16);
    assert_eq!(completions.len(), cases.len());
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
    let mut memory = CqMemory::new(4, 64);
    for (slot, format) in [(0, 1), (1, 2), (2, 0)] {
        CqeFields {
            wqe_opcode: 0x10,
            byte_count: 4,
            format,
            ..CqeFields::write(QP, slot, false)
        }
        .store(memory.cqe_mut(u32::from(slot)));
    }
    let statuses: Vec<_> = poll(&mut memory.poller(), &mut table(), 4)
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
        let mut memory = CqMemory::new(2, 64);
        let fields = CqeFields {
            cqe_opcode: 13,
            syndrome,
            vendor_err: syndrome ^ 0xff,
            wqe_opcode: 0x0a,
            byte_count: 77,
            ..CqeFields::write(QP, 3, false)
        };
        fields.store(memory.cqe_mut(0));
        let mut table = table();
        let completion = poll(&mut memory.poller(), &mut table, 1)[0];
        assert_eq!(completion.status(), expected, "syndrome {syndrome:#x}");
        assert_eq!(completion.vendor_err(), u32::from(syndrome ^ 0xff));
        assert_eq!((completion.wr_id(), completion.qp_number()), (0x1003, QP));
        assert_eq!((completion.opcode(), completion.byte_len()), (None, None));
        assert_eq!(table.tail(QP), 104);
    }
}

#[test]
fn the_owner_bit_alternates_with_each_pass_over_the_ring() {
    let mut memory = CqMemory::new(4, 64);
    let mut poller = memory.poller();
    let mut table = table();
    for index in 0u32..40 {
        let owner = index & 4 != 0;
        // Last pass's owner bit: still the device's.
        CqeFields::write(QP, index as u16, !owner).store(memory.cqe_mut(index));
        assert!(poll(&mut poller, &mut table, 2).is_empty(), "index {index}");
        CqeFields {
            cqe_opcode: 15,
            ..CqeFields::write(QP, index as u16, owner)
        }
        .store(memory.cqe_mut(index));
        assert!(
            poll(&mut poller, &mut table, 2).is_empty(),
            "MLX5_CQE_INVALID at index {index}"
        );
        CqeFields::write(QP, index as u16, owner).store(memory.cqe_mut(index));
        let completions = poll(&mut poller, &mut table, 2);
        assert_eq!(completions.len(), 1, "index {index}");
        assert_eq!(completions[0].wr_id(), 0x1000 + u64::from(index & 7));
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
    let mut table = table();
    for index in 0x00ff_fffe_u32..0x0100_0003 {
        CqeFields::write(QP, 0, index & 2 != 0).store(memory.cqe_mut(index));
        assert_eq!(poll(&mut poller, &mut table, 1).len(), 1, "index {index:#x}");
        assert_eq!(poller.consumer_index, index + 1);
        assert_eq!(memory.doorbell_record(), (index + 1) & 0x00ff_ffff);
    }
}

#[test]
fn a_128_byte_cqe_is_read_from_its_second_half() {
    let mut memory = CqMemory::new(4, 128);
    for slot in 0..3u32 {
        let start = slot as usize * 128;
        // The first half is what an INLINE_SCATTER_64 CQE's data would be: any bytes.
        memory.bytes_mut()[start..start + 64].fill(0x0f);
        CqeFields::write(QP, slot as u16, false).store(memory.cqe_mut(slot));
    }
    let mut poller = memory.poller();
    let wr_ids: Vec<_> = poll(&mut poller, &mut table(), 8)
        .iter()
        .map(Completion::wr_id)
        .collect();
    assert_eq!(wr_ids, [0x1000, 0x1001, 0x1002]);
    assert_eq!(poller.consumer_index, 3);
}

#[test]
fn a_compressed_cqe_is_refused_after_the_completions_before_it() {
    let mut memory = CqMemory::new(8, 64);
    CqeFields::write(QP, 0, false).store(memory.cqe_mut(0));
    CqeFields::write(QP, 1, false).store(memory.cqe_mut(1));
    CqeFields {
        format: 3,
        ..CqeFields::write(QP, 2, false)
    }
    .store(memory.cqe_mut(2));
    CqeFields::write(QP, 3, false).store(memory.cqe_mut(3));
    let mut poller = memory.poller();
    let mut table = table();
    assert_eq!(poll(&mut poller, &mut table, 8).len(), 2);
    assert_eq!((poller.consumer_index, memory.doorbell_record()), (2, 2));
    assert_eq!(
        poll_error(&mut poller, &mut table),
        PollDirectCompletionQueueErrorKind::CompressedCqe {
            opcode_format_owner: 0x0c
        }
    );
    assert_eq!((poller.consumer_index, memory.doorbell_record()), (3, 3));
    assert_eq!(table.tail(QP), 102, "the refused CQE retires nothing");
    let completions = poll(&mut poller, &mut table, 8);
    assert_eq!(completions.iter().map(Completion::wr_id).collect::<Vec<_>>(), [0x1003]);
}

#[test]
fn cqes_that_are_not_send_completions_are_refused() {
    for cqe_opcode in (1..=12).chain([14]) {
        let mut memory = CqMemory::new(2, 64);
        CqeFields {
            cqe_opcode,
            ..CqeFields::write(QP, 5, false)
        }
        .store(memory.cqe_mut(0));
        let mut table = table();
        let mut poller = memory.poller();
        assert_eq!(
            poll_error(&mut poller, &mut table),
            PollDirectCompletionQueueErrorKind::UnexpectedCqeOpcode {
                cqe_opcode,
                qp_number: QP
            }
        );
        assert_eq!((poller.consumer_index, memory.doorbell_record()), (1, 1));
        assert_eq!(table.tail(QP), 0);
    }
}

#[test]
fn a_completion_of_an_unknown_qp_is_refused() {
    let mut memory = CqMemory::new(2, 64);
    CqeFields {
        cqe_opcode: 13,
        syndrome: 5,
        ..CqeFields::write(QP + 1, 5, false)
    }
    .store(memory.cqe_mut(0));
    let mut poller = memory.poller();
    assert_eq!(
        poll_error(&mut poller, &mut table()),
        PollDirectCompletionQueueErrorKind::UnknownQueuePair { qp_number: QP + 1 }
    );
    assert_eq!((poller.consumer_index, memory.doorbell_record()), (1, 1));
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
