//! The faults a test sets, each doing what it says and nothing more: drops, delays and
//! reordering on the way to a target, an errored stream. The step mode's clock times them.
mod common;

use std::time::Duration;

use common::{all, Bed, PORT};
use sideway::ibverbs::completion::WorkCompletionStatus;
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
use softmlx5::{drop, event_kind, RouteFault};

/// The transport timeout of the beds here (4.096 µs · 2^10).
const TIMEOUT: Duration = Duration::from_nanos(4096 << 10);

fn bed() -> Bed {
    Bed::with(
        all(),
        |_| {},
        |params| {
            params.setup_timeout(10);
        },
    )
}

fn count(kind: u32, status: u8) -> usize {
    common::device()
        .trace()
        .iter()
        .filter(|e| e.kind == kind && e.status == status)
        .count()
}

/// The next two requests are lost; the third try arrives, one transport timeout after the second.
#[test]
fn dropped_requests_arrive_after_their_retransmissions() {
    on_device!(("SOFTMLX5_STEP", "1"));
    let device = common::device();
    let mut bed = bed();
    let (mut local, remote) = (bed.buffer(64), bed.buffer(64));
    local.fill(3);
    device
        .route_fault(
            bed.dct_number(),
            &RouteFault {
                drop_next: 2,
                ..Default::default()
            },
        )
        .unwrap();
    bed.write(1, local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0), 64);
    device.step();
    for _ in 0..2 {
        assert!(bed.sends(1, Duration::ZERO).is_empty());
        device.advance(TIMEOUT);
        device.step();
    }
    let wcs = bed.sends(1, Duration::ZERO);
    assert!(wcs.len() == 1 && wcs[0].is_success(), "{wcs:?}");
    assert_eq!(count(event_kind::DROPPED, drop::FAULT), 2);
    assert_eq!(remote.read(0, 64), vec![3; 64]);
}

/// A delay holds each request for its time: nothing arrives before, everything after.
#[test]
fn a_delay_holds_requests_for_its_time() {
    on_device!(("SOFTMLX5_STEP", "1"));
    let device = common::device();
    let mut bed = bed();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    let delay = TIMEOUT / 4;
    device
        .route_fault(
            bed.dct_number(),
            &RouteFault {
                delay,
                ..Default::default()
            },
        )
        .unwrap();
    bed.write(1, local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0), 64);
    device.step();
    device.advance(delay - Duration::from_nanos(1));
    device.step();
    assert!(bed.sends(1, Duration::ZERO).is_empty(), "not before the delay");
    assert_eq!(count(event_kind::EXECUTED, softmlx5::answer::ACK), 0);
    device.advance(Duration::from_nanos(1));
    device.step();
    let wcs = bed.sends(1, Duration::ZERO);
    assert!(wcs.len() == 1 && wcs[0].is_success(), "{wcs:?}");
}

/// Reordered requests: the target drops the one that comes ahead of its turn, the initiator goes
/// back, and both complete, in order.
#[test]
fn reordered_requests_complete_in_order_after_going_back() {
    on_device!(("SOFTMLX5_STEP", "1"));
    let device = common::device();
    let mut bed = bed();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    device
        .route_fault(
            bed.dct_number(),
            &RouteFault {
                reorder: true,
                ..Default::default()
            },
        )
        .unwrap();
    bed.write(1, local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0), 32);
    bed.write(
        2,
        local.mr.lkey(),
        local.addr(32),
        remote.mr.rkey(),
        remote.addr(32),
        32,
    );
    device.step();
    assert_eq!(
        count(event_kind::DROPPED, drop::OUT_OF_SEQUENCE),
        1,
        "the second came first"
    );
    device.route_fault(bed.dct_number(), &RouteFault::default()).unwrap();
    device.advance(TIMEOUT);
    device.step();
    let wcs = bed.sends(2, Duration::ZERO);
    assert_eq!(
        wcs.iter().map(|wc| (wc.wr_id(), wc.is_success())).collect::<Vec<_>>(),
        [(1, true), (2, true)]
    );
}

/// A seeded share of drops: the same seed drops the same requests, and every write completes.
#[test]
fn a_seeded_share_of_drops_loses_requests_but_no_write() {
    on_device!(("SOFTMLX5_STEP", "1"), ("SOFTMLX5_SEED", "7"));
    let device = common::device();
    let mut bed = bed();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    device
        .route_fault(
            bed.dct_number(),
            &RouteFault {
                drop_per_million: 500_000,
                ..Default::default()
            },
        )
        .unwrap();
    for wr_id in 0..16 {
        bed.write(
            wr_id,
            local.mr.lkey(),
            local.addr(0),
            remote.mr.rkey(),
            remote.addr(0),
            64,
        );
    }
    let mut done = Vec::new();
    for _ in 0..200 {
        device.step();
        device.advance(TIMEOUT);
        done.extend(bed.sends(16, Duration::ZERO));
        if done.len() == 16 {
            break;
        }
    }
    assert_eq!(done.iter().filter(|wc| wc.is_success()).count(), 16, "{done:?}");
    let dropped = count(event_kind::DROPPED, drop::FAULT);
    assert!(dropped > 4, "about half the tries dropped: {dropped}");
}

/// An errored stream flushes its requests until it is reset; the others go on.
#[test]
fn an_errored_stream_flushes_until_reset() {
    on_device!();
    use sideway_ext::mlx5::dc::initiator::{DcInitiatorBringUp, DciStreams};
    use sideway_ext::mlx5::extension::DcProtectionDomainExt;
    let device = common::device();
    let bed = Bed::new();
    let mut dci = bed
        .pd
        .create_dci_builder()
        .setup_send_cq(bed.send_cq.clone())
        .setup_dci_streams(DciStreams {
            log_num_concurrent: 2,
            log_num_errored: 2,
        })
        .build()
        .unwrap();
    dci.bring_up(&DcInitiatorBringUp::new(PORT)).unwrap();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    let (ah, dct_number) = (bed.ah.clone(), bed.dct_number());
    let write = |dci: &mut sideway_ext::mlx5::dc::initiator::DcInitiator, wr_id: u64, stream: u16| {
        dci.post_send_one(wr_id, WorkRequestFlags::Signaled, |wr| {
            // SAFETY: both buffers outlive the completion polled below.
            unsafe {
                wr.setup_write(remote.mr.rkey(), remote.addr(0))
                    .setup_dc_addr_stream(&ah, dct_number, common::DC_KEY, stream)
                    .setup_sge(local.mr.lkey(), local.addr(0), 8)
            }
        })
        .unwrap();
        let wcs = bed.sends(1, Duration::from_secs(5));
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        wcs[0].status()
    };
    device.error_stream(dci.qp_number(), 1).unwrap();
    let flushed = Some(WorkCompletionStatus::WorkRequestFlushedError);
    assert_eq!(write(&mut dci, 1, 1), flushed);
    assert_eq!(write(&mut dci, 2, 0), Some(WorkCompletionStatus::Success));
    dci.reset_stream(1).unwrap();
    assert_eq!(write(&mut dci, 3, 1), Some(WorkCompletionStatus::Success));
}

/// An errored stream flushes what is already queued on it too: requests taken and on their way
/// when the fault comes complete as flushed (the unsignalled one with a completion, as every
/// flushed request), not with their answers; the other stream's request goes on. A device whose
/// fault only stopped the stream's later requests would let them succeed.
#[test]
fn an_errored_stream_flushes_what_is_queued_on_it() {
    on_device!(("SOFTMLX5_STEP", "1"));
    use sideway_ext::mlx5::dc::initiator::{DcInitiatorBringUp, DciStreams};
    use sideway_ext::mlx5::extension::DcProtectionDomainExt;
    let device = common::device();
    let bed = bed();
    let mut dci = bed
        .pd
        .create_dci_builder()
        .setup_send_cq(bed.send_cq.clone())
        .setup_dci_streams(DciStreams {
            log_num_concurrent: 2,
            log_num_errored: 2,
        })
        .build()
        .unwrap();
    dci.bring_up(&DcInitiatorBringUp::new(PORT)).unwrap();
    let (mut local, remote) = (bed.buffer(64), bed.buffer(64));
    local.fill(9);
    let (ah, dct_number) = (bed.ah.clone(), bed.dct_number());
    let mut write = |wr_id: u64, stream: u16, signaled: bool| {
        let offset = wr_id as usize * 8;
        let flags = if signaled {
            WorkRequestFlags::Signaled
        } else {
            WorkRequestFlags::none()
        };
        dci.post_send_one(wr_id, flags, |wr| {
            // SAFETY: both buffers outlive the completions polled below.
            unsafe {
                wr.setup_write(remote.mr.rkey(), remote.addr(offset))
                    .setup_dc_addr_stream(&ah, dct_number, common::DC_KEY, stream)
                    .setup_sge(local.mr.lkey(), local.addr(offset), 8)
            }
        })
        .unwrap();
    };
    let delay = Duration::from_micros(100);
    device
        .route_fault(
            dct_number,
            &RouteFault {
                delay,
                ..Default::default()
            },
        )
        .unwrap();
    write(1, 1, true);
    write(2, 1, false);
    write(3, 0, true);
    device.step();
    assert!(bed.sends(1, Duration::ZERO).is_empty(), "all three on their way");
    device.error_stream(dci.qp_number(), 1).unwrap();
    device.advance(delay);
    device.step();
    let got: Vec<_> = bed
        .sends(3, Duration::ZERO)
        .iter()
        .map(|wc| (wc.wr_id(), wc.status()))
        .collect();
    let flushed = Some(WorkCompletionStatus::WorkRequestFlushedError);
    assert_eq!(
        got,
        [(1, flushed), (2, flushed), (3, Some(WorkCompletionStatus::Success))]
    );
    assert_eq!(remote.read(24, 8), vec![9; 8]);
}
