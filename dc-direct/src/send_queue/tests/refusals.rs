//! What the writer refuses: requests over the queue's limits (nothing of them is written, the
//! batch goes on), a batch dropped unposted, parts it does not write.
use rdma_mummy_sys::ibv_sge;
use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::layout::{address, DCTN, DC_KEY, STALE};
use super::{Limits, Memory};
use crate::send_queue::{CreateSendQueueErrorKind, SendQueue, SendQueueParts, WorkRequestErrorKind};

#[test]
fn refused_requests_write_nothing_and_the_batch_goes_on() {
    let mut memory = Memory::new(8, 256, STALE);
    let limits = Limits {
        max_post: 3,
        max_inline_data: 16,
        max_send_sge: 2,
        ..Limits::default()
    };
    let mut queue = memory.queue(256, limits);
    let av = address();
    let list = [ibv_sge {
        addr: 1,
        length: 1,
        lkey: 1,
    }; 3];
    let mut guard = queue.start_post_send();
    let request = guard.construct_wr(1, WorkRequestFlags::Signaled).setup_send();
    request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(b"ok")
        .expect("room");
    let request = guard.construct_wr(2, WorkRequestFlags::Signaled).setup_send();
    let error = request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(&[0; 17])
        .unwrap_err();
    assert!(matches!(
        error.0,
        WorkRequestErrorKind::InlineDataTooLong {
            length: 17,
            max_inline_data: 16
        }
    ));
    let request = guard.construct_wr(3, WorkRequestFlags::Signaled).setup_write(1, 2);
    // SAFETY: as above.
    let error = unsafe { request.setup_dc_addr(&av, DCTN, DC_KEY).setup_sge_list(&list) }.unwrap_err();
    assert!(matches!(
        error.0,
        WorkRequestErrorKind::TooManyScatterGatherEntries {
            count: 3,
            max_send_sge: 2
        }
    ));
    let request = guard.construct_wr(4, WorkRequestFlags::Signaled).setup_send();
    let error = request
        .setup_dc_addr_stream(&av, DCTN, DC_KEY, 5)
        .setup_inline_data(b"")
        .unwrap_err();
    assert!(matches!(
        error.0,
        WorkRequestErrorKind::StreamsNotEnabled { stream_id: 5 }
    ));
    assert_eq!(guard.batch_len(), 1);
    guard.post();
    // Only the first: two blocks (its inline header and data in the second), BlueFlame.
    assert_eq!(queue.posting_index(), 2);
    assert_eq!(memory.buffer()[64..70], [0x80, 0, 0, 2, b'o', b'k']);
    assert!(memory.buffer()[70..].iter().all(|&byte| byte == STALE));
    assert_eq!(memory.register()[..128], memory.buffer()[..128]);

    // Two more fit (max_post 3 outstanding, none completed); the third is refused.
    let mut guard = queue.start_post_send();
    for wr_id in 5..7 {
        let request = guard.construct_wr(wr_id, WorkRequestFlags::Signaled).setup_send();
        request
            .setup_dc_addr(&av, DCTN, DC_KEY)
            .setup_inline_data(b"")
            .expect("room");
    }
    let request = guard.construct_wr(7, WorkRequestFlags::Signaled).setup_send();
    let error = request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(b"")
        .unwrap_err();
    assert!(matches!(error.0, WorkRequestErrorKind::QueueFull { max_post: 3 }));
    guard.post();
    assert_eq!(queue.posting_index(), 4);
    // The first request's completion makes room for one.
    assert_eq!(queue.complete(0), Some(1));
    let mut guard = queue.start_post_send();
    let request = guard.construct_wr(8, WorkRequestFlags::Signaled).setup_send();
    request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(b"")
        .expect("room after a completion");
    let request = guard.construct_wr(9, WorkRequestFlags::Signaled).setup_send();
    let error = request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(b"")
        .unwrap_err();
    assert!(matches!(error.0, WorkRequestErrorKind::QueueFull { .. }));
    guard.post();
    // Completing the last posted (wqe_counter 4) completes all.
    assert_eq!(queue.complete(4), Some(8));
    assert_eq!(queue.head.wrapping_sub(queue.tail), 0);
    // Nor twice, nor a slot no request starts at: nothing is completed.
    assert_eq!((queue.complete(4), queue.complete(5)), (None, None));
    assert_eq!(queue.head.wrapping_sub(queue.tail), 0);
}

#[test]
fn a_request_over_its_own_limits_is_refused_for_them_on_a_full_queue() {
    let mut memory = Memory::new(8, 256, STALE);
    let limits = Limits {
        max_post: 1,
        max_inline_data: 16,
        max_send_sge: 1,
        ..Limits::default()
    };
    let mut queue = memory.queue(256, limits);
    let av = address();
    let list = [ibv_sge {
        addr: 1,
        length: 1,
        lkey: 1,
    }; 2];
    let mut guard = queue.start_post_send();
    let request = guard.construct_wr(1, WorkRequestFlags::Signaled).setup_send();
    request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(b"ok")
        .expect("room");
    // The queue is full now; each request below breaks a limit of its own too, and is refused
    // for that, whatever the queue holds.
    let request = guard.construct_wr(2, WorkRequestFlags::Signaled).setup_send();
    let error = request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(&[0; 17])
        .unwrap_err();
    assert!(matches!(
        error.0,
        WorkRequestErrorKind::InlineDataTooLong {
            length: 17,
            max_inline_data: 16
        }
    ));
    let request = guard.construct_wr(3, WorkRequestFlags::Signaled).setup_write(1, 2);
    // SAFETY: the writer only describes the buffers.
    let error = unsafe { request.setup_dc_addr(&av, DCTN, DC_KEY).setup_sge_list(&list) }.unwrap_err();
    assert!(matches!(
        error.0,
        WorkRequestErrorKind::TooManyScatterGatherEntries {
            count: 2,
            max_send_sge: 1
        }
    ));
    let request = guard.construct_wr(4, WorkRequestFlags::Signaled).setup_send();
    let error = request
        .setup_dc_addr_stream(&av, DCTN, DC_KEY, 5)
        .setup_inline_data(b"")
        .unwrap_err();
    assert!(matches!(
        error.0,
        WorkRequestErrorKind::StreamsNotEnabled { stream_id: 5 }
    ));
    // A request within its limits is refused for the queue's room.
    let request = guard.construct_wr(5, WorkRequestFlags::Signaled).setup_send();
    let error = request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(b"")
        .unwrap_err();
    assert!(matches!(error.0, WorkRequestErrorKind::QueueFull { max_post: 1 }));
    assert_eq!(guard.batch_len(), 1);
    guard.post();
    assert_eq!(queue.posting_index(), 2);
}

#[test]
fn a_dropped_batch_gives_its_slots_back_and_rings_nothing() {
    let mut memory = Memory::new(8, 256, STALE);
    let mut queue = memory.queue(256, Limits::default());
    let av = address();
    let mut guard = queue.start_post_send();
    let request = guard.construct_wr(1, WorkRequestFlags::Signaled).setup_send();
    request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(b"gone")
        .expect("room");
    drop(guard);
    assert_eq!(queue.posting_index(), 0);
    assert_eq!(memory.record(), [0, 0]);
    assert!(memory.register().iter().all(|&byte| byte == STALE));
    // An empty batch rings nothing either.
    queue.start_post_send().post();
    assert_eq!(memory.record(), [0, 0]);
    assert!(memory.register().iter().all(|&byte| byte == STALE));
    // The next request takes the same slot.
    let mut guard = queue.start_post_send();
    let request = guard.construct_wr(2, WorkRequestFlags::Signaled).setup_send();
    request
        .setup_dc_addr_stream(&av, DCTN, DC_KEY, 0)
        .setup_inline_data(b"kept")
        .unwrap_err();
    let request = guard.construct_wr(3, WorkRequestFlags::Signaled).setup_send();
    request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(b"kept")
        .expect("room");
    guard.post();
    assert_eq!((queue.posting_index(), queue.wr_id(0)), (2, 3));
}

#[test]
fn parts_the_writer_does_not_write_are_refused() {
    let mut memory = Memory::new(8, 256, STALE);
    type Case = (fn(&mut SendQueueParts), fn(&CreateSendQueueErrorKind) -> bool);
    let cases: [Case; 6] = [
        (
            |parts| parts.stride = 128,
            |kind| matches!(kind, CreateSendQueueErrorKind::UnsupportedStride { stride: 128 }),
        ),
        (
            |parts| parts.wqe_count = 6,
            |kind| matches!(kind, CreateSendQueueErrorKind::InvalidWqeCount { wqe_count: 6 }),
        ),
        (
            |parts| parts.blueflame_size = 100,
            |kind| {
                matches!(
                    kind,
                    CreateSendQueueErrorKind::InvalidBlueFlameSize { blueflame_size: 100 }
                )
            },
        ),
        (
            |parts| parts.qp_number = 1 << 24,
            |kind| matches!(kind, CreateSendQueueErrorKind::InvalidQpNumber { .. }),
        ),
        (
            |parts| parts.max_post = 9,
            |kind| matches!(kind, CreateSendQueueErrorKind::LimitsDoNotFit { max_post: 9, .. }),
        ),
        // 4 units of control and address, 1 of remote address, 32 of inline: 10 blocks.
        (
            |parts| parts.max_inline_data = 500,
            |kind| {
                matches!(
                    kind,
                    CreateSendQueueErrorKind::LimitsDoNotFit {
                        max_inline_data: 500,
                        ..
                    }
                )
            },
        ),
    ];
    for (change, expected) in cases {
        let mut parts = memory.parts(256, Limits::default());
        change(&mut parts);
        // SAFETY: the memory outlives the attempt.
        let error = unsafe { SendQueue::from_parts(parts) }.unwrap_err();
        assert!(expected(&error.0), "{error:?}");
    }
    let mut parts = memory.parts(256, Limits::default());
    // SAFETY: one byte into the buffer, never written: the creation is refused.
    parts.buffer = unsafe { parts.buffer.add(1) };
    // SAFETY: the memory outlives the attempt, which is refused before any write.
    let error = unsafe { SendQueue::from_parts(parts) }.unwrap_err();
    assert!(matches!(
        error.0,
        CreateSendQueueErrorKind::Misaligned {
            part: "send queue buffer",
            alignment: 64
        }
    ));
    // The largest request that fits: 8 blocks of 4 units, less control, address and remote address.
    let mut parts = memory.parts(256, Limits::default());
    parts.max_inline_data = 32 * 16 - 5 * 16 - 4;
    // SAFETY: as above.
    assert!(unsafe { SendQueue::from_parts(parts) }.is_ok());
}
