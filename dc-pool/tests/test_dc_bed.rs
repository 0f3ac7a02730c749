//! One DC initiator and one DC target on the ConnectX of `SIDEWAY_EXT_TEST_MLX5_DEVICE`
//! (`mlx5_hw_…`, ignored without it; [`common::dc_bed::DeviceBed`]): the initiator posts with
//! its guard and its completions are polled as `WorkCompletion`s. The same programs run on the
//! software ConnectX in the device tests.
mod common;

use serial_test::serial;
use sideway::ibverbs::completion::WorkCompletionOperationType;
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};

use common::dc_bed::DeviceBed;

/// An RDMA WRITE and a SEND in one batch: both complete, the WRITE's bytes are in the target's
/// memory, the SEND's in a receive that completed.
fn write_and_send_arrive(mut bed: DeviceBed) {
    bed.post_receives(1);
    let endpoint = bed.endpoint();
    let (rkey, address) = bed.remote();
    let (dci, ah) = bed.sender();
    let qp_number = dci.qp_number();
    let mut guard = dci.start_post_send();
    guard
        .construct_wr(1, WorkRequestFlags::Signaled)
        .setup_write(rkey, address + 128)
        .setup_dc_addr(ah, endpoint.dct_number(), endpoint.dc_key())
        .setup_inline_data(b"written over DC");
    guard
        .construct_wr(2, WorkRequestFlags::Signaled)
        .setup_send()
        .setup_dc_addr(ah, endpoint.dct_number(), endpoint.dc_key())
        .setup_inline_data(b"sent over DC");
    guard.post().expect("post a WRITE and a SEND");

    let sends = bed.wait_sends(2);
    let ended: Vec<_> = sends
        .iter()
        .map(|wc| (wc.wr_id(), wc.is_success(), wc.opcode(), wc.qp_number()))
        .collect();
    assert_eq!(
        ended,
        [
            (1, true, Some(WorkCompletionOperationType::Write), qp_number),
            (2, true, Some(WorkCompletionOperationType::Send), qp_number),
        ],
        "{sends:?}"
    );
    assert_eq!(bed.read_remote(128, 15), b"written over DC");
    assert_eq!(
        bed.read_remote(0, 128),
        vec![0; 128],
        "nothing before the WRITE's bytes"
    );
    assert_eq!(bed.wait_receives(1), [b"sent over DC".to_vec()]);
}

/// An unsignaled WRITE (the DC initiator is created with `sq_sig_all` 0) has no completion of
/// its own when it succeeds: only the signaled SEND behind it completes, and both arrived.
fn only_signaled_requests_complete(mut bed: DeviceBed) {
    bed.post_receives(1);
    let endpoint = bed.endpoint();
    let (rkey, address) = bed.remote();
    let (dci, ah) = bed.sender();
    let mut guard = dci.start_post_send();
    guard
        .construct_wr(1, WorkRequestFlags::none())
        .setup_write(rkey, address)
        .setup_dc_addr(ah, endpoint.dct_number(), endpoint.dc_key())
        .setup_inline_data(b"unsignaled");
    guard
        .construct_wr(2, WorkRequestFlags::Signaled)
        .setup_send()
        .setup_dc_addr(ah, endpoint.dct_number(), endpoint.dc_key())
        .setup_inline_data(b"signaled");
    guard.post().expect("post an unsignaled WRITE and a signaled SEND");
    let sends = bed.wait_sends(1);
    assert_eq!((sends[0].wr_id(), sends[0].is_success()), (2, true), "{sends:?}");
    bed.assert_no_send_completion();
    assert_eq!(bed.read_remote(0, 10), b"unsignaled");
    assert_eq!(bed.wait_receives(1), [b"signaled".to_vec()]);
}

/// A WRITE to a destroyed target ends with a "no such target" error completion.
fn a_destroyed_target_fails_the_request(mut bed: DeviceBed) {
    let endpoint = bed.endpoint();
    let (rkey, address) = bed.remote();
    bed.destroy_target();
    let (dci, ah) = bed.sender();
    dci.post_send_one(9, WorkRequestFlags::Signaled, |wr| {
        wr.setup_write(rkey, address)
            .setup_dc_addr(ah, endpoint.dct_number(), endpoint.dc_key())
            .setup_inline_data(b"nobody there");
    })
    .expect("post a WRITE to the destroyed target");
    let wcs = bed.wait_sends(1);
    assert_eq!(wcs[0].wr_id(), 9);
    let status = wcs[0].status();
    assert!(
        status.is_some_and(|s| bed.dead_target_statuses().contains(&s)),
        "a destroyed target answered {status:?}, not one of {:?}",
        bed.dead_target_statuses()
    );
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_write_and_send_arrive() {
    write_and_send_arrive(DeviceBed::new());
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_only_signaled_requests_complete() {
    only_signaled_requests_complete(DeviceBed::new());
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_destroyed_target_fails_the_request() {
    a_destroyed_target_fails_the_request(DeviceBed::new());
}
