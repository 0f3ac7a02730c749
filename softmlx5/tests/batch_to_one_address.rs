//! A DC initiator's batch to one address (`start_post_send_to`, what a pool posts on it): its
//! requests reach their target with no address step, and a DCI stream on an initiator created
//! without streams is refused before the device.
mod common;

use std::time::Duration;

use common::Bed;
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
use sideway_ext::ibverbs::post_send_guard::TypedPostSendErrorKind;

#[test]
fn a_batch_to_one_address_reaches_its_target_and_a_stream_without_streams_is_refused() {
    on_device!();
    let mut bed = Bed::new();
    let (mut local, remote) = (bed.buffer(256), bed.buffer(256));
    local.fill(0x5a);
    let (ah, dct_number) = (bed.ah.clone(), bed.dct_number());
    let mut guard = bed.dci.start_post_send_to(&ah, dct_number, common::DC_KEY, None);
    for n in 0..4u64 {
        let offset = 64 * n as usize;
        // SAFETY: both buffers outlive the completions polled below.
        unsafe {
            guard
                .construct_wr(n, WorkRequestFlags::Signaled)
                .setup_write(remote.mr.rkey(), remote.addr(offset))
                .setup_sge(local.mr.lkey(), local.addr(offset), 64)
        };
    }
    assert_eq!(guard.batch_len(), 4);
    guard.post().expect("the batch is posted");
    let completions: Vec<_> = bed
        .sends(4, Duration::from_secs(5))
        .iter()
        .map(|wc| (wc.wr_id(), wc.is_success()))
        .collect();
    assert_eq!(completions, [(0, true), (1, true), (2, true), (3, true)]);
    assert_eq!(remote.read(0, 256), vec![0x5a; 256], "every write landed");

    // The initiator has no DCI streams: a batch on stream 1 is refused whole, before the device.
    let mut guard = bed.dci.start_post_send_to(&ah, dct_number, common::DC_KEY, Some(1));
    // SAFETY: as above.
    unsafe {
        guard
            .construct_wr(9, WorkRequestFlags::Signaled)
            .setup_write(remote.mr.rkey(), remote.addr(0))
            .setup_sge(local.mr.lkey(), local.addr(0), 64)
    };
    let err = guard.post().expect_err("no stream setter");
    assert!(
        matches!(
            err.0,
            TypedPostSendErrorKind::OperationNotEnabled {
                index: 0,
                wr_id: 9,
                entry: "wr_set_dc_addr_stream",
                batch_len: 1,
            }
        ),
        "{err:?}"
    );
    assert!(
        bed.sends(1, Duration::from_millis(200)).is_empty(),
        "nothing reached the device"
    );
}
