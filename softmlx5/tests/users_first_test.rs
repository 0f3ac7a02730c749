//! What a DC user's own tests look like on the software device, and how fast they run: one
//! target, two initiators, a pool of 100 destinations, a few faults, in well under a second.
mod common;

use std::time::{Duration, Instant};

use common::{all, Bed, PORT};
use sideway::ibverbs::completion::WorkCompletionStatus;
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::mlx5::dc::initiator::DcInitiatorBringUp;
use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;
use sideway_ext_dc_pool::builder::DcPoolProtectionDomainExt;
use sideway_ext_dc_pool::types::{DcPoolEvent, DcPoolPolicy};

/// One after the other, so that neither shares the machine with the other.
#[test]
fn a_pool_reports_a_dead_target_among_100_in_well_under_a_second_and_writes_1000_in_seconds() {
    on_device!();
    let elapsed = pool_run(100, Some(7));
    assert!(elapsed < Duration::from_millis(900), "well under a second: {elapsed:?}");
    let elapsed = pool_run(1000, None);
    assert!(elapsed < Duration::from_secs(10), "seconds: {elapsed:?}");
}

/// Two initiators write one target; then a pool of 4 initiators writes 64 bytes to each of
/// `destinations` targets, `dead` (if any) killed first. How long it all took.
fn pool_run(destinations: usize, dead: Option<usize>) -> Duration {
    let device = common::device();
    let started = Instant::now();
    // One target written by two initiators.
    let mut bed = Bed::new();
    let (mut local, remote) = (bed.buffer(64), bed.buffer(128));
    local.fill(0xab);
    let mut second = bed
        .pd
        .create_dci_builder()
        .setup_send_cq(bed.send_cq.clone())
        .build()
        .unwrap();
    second.bring_up(&DcInitiatorBringUp::new(PORT)).unwrap();
    bed.write(1, local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0), 64);
    let (ah, dct_number) = (bed.ah.clone(), bed.dct_number());
    second
        .post_send_one(2, WorkRequestFlags::Signaled, |wr| {
            // SAFETY: both buffers outlive the completion polled below.
            unsafe {
                wr.setup_write(remote.mr.rkey(), remote.addr(64))
                    .setup_dc_addr(&ah, dct_number, common::DC_KEY)
                    .setup_sge(local.mr.lkey(), local.addr(0), 64)
            }
        })
        .unwrap();
    assert_eq!(
        bed.sends(2, Duration::from_secs(5))
            .iter()
            .filter(|wc| wc.is_success())
            .count(),
        2
    );
    assert_eq!(remote.read(0, 128), vec![0xab; 128], "both initiators' writes landed");

    // 100 targets, each with its own DCT number, on the bed's SRQ and receive CQ.
    let targets: Vec<_> = (0..destinations)
        .map(|_| {
            let mut dct = bed
                .pd
                .create_dct_builder()
                .setup_recv_cq(bed.recv_cq.clone())
                .setup_srq(&bed.srq)
                .setup_dc_key(common::DC_KEY)
                .setup_access_flags(all())
                .build()
                .unwrap();
            dct.bring_up(&DcTargetBringUp::new(PORT)).unwrap();
            dct
        })
        .collect();
    let regions: Vec<_> = (0..destinations).map(|_| bed.buffer(64)).collect();
    // A pool of 4 initiators; its transport timeout short, so that a dead target is told fast.
    let cq = bed.ctx.create_cq_builder().setup_cqe(1024).build().unwrap();
    let mut bring_up = DcInitiatorBringUp::new(PORT);
    bring_up.setup_timeout(8).setup_retry_cnt(2);
    let mut pool = bed
        .pd
        .create_dci_pool_builder()
        .setup_send_cq(cq)
        .setup_initiators(4)
        .setup_policy(DcPoolPolicy::Dedicated)
        .setup_initiator(bed.pd.create_dci_builder().setup_max_send_wr(64))
        .setup_bring_up(bring_up)
        .build()
        .unwrap();
    let ids: Vec<_> = targets
        .iter()
        .map(|t| pool.add_destination(t.endpoint().unwrap()))
        .collect();
    // The fault: the dead target answers nothing.
    if let Some(dead) = dead {
        device.kill_target(targets[dead].dct_number().unwrap(), true).unwrap();
    }

    let mut pending: Vec<usize> = (0..destinations).collect();
    let (mut completed, mut failed) = (0, Vec::new());
    while completed + failed.len() < destinations {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{completed} completed, {failed:?} failed"
        );
        pending.retain(|&d| match pool.start_post_send(ids[d]) {
            Ok(mut guard) => {
                // SAFETY: the regions outlive the pool's completions.
                unsafe {
                    guard
                        .construct_wr(d as u64, WorkRequestFlags::Signaled)
                        .unwrap()
                        .setup_write(regions[d].mr.rkey(), regions[d].addr(0))
                        .setup_sge(local.mr.lkey(), local.addr(0), 64)
                };
                guard.post().unwrap();
                false
            },
            Err(err) if err.is_would_block() => true,
            Err(err) => panic!("{err}"),
        });
        pool.poll(|event| match event {
            DcPoolEvent::Completed { .. } => completed += 1,
            DcPoolEvent::Failed { wr_id, status, .. } => failed.push((wr_id, status)),
            _ => {},
        })
        .unwrap();
    }
    let expected_failed: Vec<_> = dead
        .map(|d| (d as u64, WorkCompletionStatus::RetryCounterExceededError as u32))
        .into_iter()
        .collect();
    assert_eq!(failed, expected_failed);
    assert_eq!(completed, destinations - expected_failed.len());
    for (d, region) in regions.iter().enumerate() {
        let expected = if Some(d) == dead { [0; 64] } else { [0xab; 64] };
        assert_eq!(region.read(0, 64), expected, "destination {d}");
    }
    started.elapsed()
}
