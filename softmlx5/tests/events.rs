//! Asynchronous events as a ConnectX raises them, read with sideway-ext's unchanged reader.
mod common;

use std::time::Duration;

use common::{Bed, PORT};
use sideway::ibverbs::completion::WorkCompletionStatus;
use sideway::ibverbs::queue_pair::QueuePairState;
use sideway_ext::ibverbs::async_event::{AsyncEventElement, AsyncEventType};
use sideway_ext::ibverbs::extension::{DeviceContextExt, ProtectionDomainExt};
use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;

const WAIT: Duration = Duration::from_secs(5);

/// Kinder: a device whose initiators never failed but through a completion. A fatal error
/// raises IBV_EVENT_QP_FATAL for the DCI, and flushes what it held.
#[test]
fn a_fatal_initiator_error_is_an_event_and_flushes_its_queue() {
    on_device!(("SOFTMLX5_STEP", "1"));
    let device = common::device();
    let mut bed = Bed::new();
    let reader = bed.ctx.async_event_reader();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    device.stall_initiator(bed.dci.qp_number(), true).unwrap();
    bed.write(1, local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0), 64);
    device.error_initiator(bed.dci.qp_number()).unwrap();
    let event = reader.read_timeout(WAIT).unwrap().expect("an event");
    assert_eq!(event.event_type(), AsyncEventType::QueuePairFatal);
    assert_eq!(
        event.element(),
        AsyncEventElement::QueuePair {
            qp_number: bed.dci.qp_number()
        }
    );
    device.step();
    let wcs = bed.sends(1, Duration::ZERO);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status(), Some(WorkCompletionStatus::WorkRequestFlushedError));
    assert_eq!(bed.dci.query_state().unwrap(), QueuePairState::Error);
    assert!(remote.read(0, 64).iter().all(|&b| b == 0), "nothing was written");
}

/// Kinder: a device that armed the limit at creation, or raised it early, or twice. The limit
/// armed at 2 fires once, when the second of three receives is taken.
#[test]
fn the_srq_limit_fires_once_when_the_receives_fall_below_it() {
    on_device!();
    let bed = Bed::new();
    let reader = bed.ctx.async_event_reader();
    let srq = bed
        .pd
        .create_srq_builder()
        .setup_max_wr(16)
        .setup_srq_limit(2)
        .build()
        .unwrap();
    let mut dct = bed
        .pd
        .create_dct_builder()
        .setup_recv_cq(bed.recv_cq.clone())
        .setup_srq(&srq)
        .setup_dc_key(common::DC_KEY)
        .setup_access_flags(common::all())
        .build()
        .unwrap();
    dct.bring_up(&DcTargetBringUp::new(PORT)).unwrap();
    let gid_index = bed.dci.source_gid().map_or(0, |entry| entry.index());
    let ah = dct.endpoint().unwrap().create_ah(&bed.pd, PORT, gid_index).unwrap();
    let receive = bed.buffer(3 * 64);
    for i in 0..3u64 {
        // SAFETY: the buffer outlives the SRQ's use of it.
        unsafe {
            srq.post_recv_one(
                i,
                &[rdma_mummy_sys::ibv_sge {
                    addr: receive.addr(i as usize * 64),
                    length: 64,
                    lkey: receive.mr.lkey(),
                }],
            )
            .unwrap()
        };
    }
    let mut dci = bed.dci;
    let dct_number = dct.dct_number().unwrap();
    for (sent, expect_event) in [(0u64, false), (1, true), (2, false)] {
        dci.post_send_one(sent, sideway::ibverbs::queue_pair::WorkRequestFlags::Signaled, |wr| {
            use sideway::ibverbs::queue_pair::SetInlineData;
            wr.setup_send()
                .setup_dc_addr(&ah, dct_number, common::DC_KEY)
                .setup_inline_data(b"hi")
        })
        .unwrap();
        assert_eq!(common::wait(bed.send_cq.as_ref(), 1, WAIT).len(), 1);
        let event = reader.read_timeout(Duration::from_millis(50)).unwrap();
        match (expect_event, event) {
            (true, Some(event)) => {
                assert_eq!(event.event_type(), AsyncEventType::SharedReceiveQueueLimitReached);
                assert_eq!(event.element(), AsyncEventElement::SharedReceiveQueue(srq.id()));
            },
            (false, None) => {},
            (expected, got) => panic!("after send {sent}: expected an event: {expected}, got {got:?}"),
        }
    }
}
