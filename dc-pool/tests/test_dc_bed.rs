//! One DC program, two places: each test body below is written once, generic over the bed
//! ([`common::dc_bed::DcBed`]), and runs on the simulated fabric (`simulated_…`, every run) and
//! on the ConnectX of `SIDEWAY_EXT_TEST_MLX5_DEVICE` (`mlx5_hw_…`, ignored without it). The
//! body posts on one DC initiator with the guard of a `DcInitiator` (`DcSend`), and polls its
//! completions as `WorkCompletion`s.
mod common;

use serial_test::serial;
use sideway::ibverbs::completion::WorkCompletionOperationType;
use sideway::ibverbs::queue_pair::{SetInlineData, WorkRequestFlags};
use sideway_ext::ibverbs::extension::CompletionQueueExt;
use sideway_ext::ibverbs::post_send_guard::PostSendErrorKind;
use sideway_ext::mlx5::dc::initiator::{CreateDcInitiatorErrorKind, DcRecovery, DcSend, DciStreams};
use sideway_ext_dc_pool::simulation::{ResetSimulatedStreamErrorKind, SimulatedFabric};

use common::dc_bed::{DcBed, DeviceBed, SimulatedBed};

/// An RDMA WRITE and a SEND in one batch: both complete, the WRITE's bytes are in the target's
/// memory, the SEND's in a receive that completed.
fn write_and_send_arrive<B: DcBed>(mut bed: B) {
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
fn only_signaled_requests_complete<B: DcBed>(mut bed: B) {
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
fn a_destroyed_target_fails_the_request<B: DcBed>(mut bed: B) {
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
fn simulated_write_and_send_arrive() {
    write_and_send_arrive(SimulatedBed::new());
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_write_and_send_arrive() {
    write_and_send_arrive(DeviceBed::new());
}

#[test]
fn simulated_only_signaled_requests_complete() {
    only_signaled_requests_complete(SimulatedBed::new());
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_only_signaled_requests_complete() {
    only_signaled_requests_complete(DeviceBed::new());
}

#[test]
fn simulated_destroyed_target_fails_the_request() {
    a_destroyed_target_fails_the_request(SimulatedBed::new());
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_destroyed_target_fails_the_request() {
    a_destroyed_target_fails_the_request(DeviceBed::new());
}

// The simulated initiator's own API: what the bed does not cover.

#[test]
fn a_simulated_initiator_recovers_from_a_dead_target_and_posts_again() {
    let fabric = SimulatedFabric::new(3);
    let target = fabric.create_target_builder().build().expect("target");
    let access = sideway::ibverbs::AccessFlags::LocalWrite | sideway::ibverbs::AccessFlags::RemoteWrite;
    let region = target.register_memory(0..64, access).expect("register");
    let cq = fabric.create_cq();
    let mut dci = fabric.create_dci_builder().build().expect("initiator");
    let endpoint = target.endpoint();
    let ah = fabric.create_ah(&endpoint);
    let write = |dci: &mut sideway_ext_dc_pool::simulation::SimulatedInitiator, wr_id: u64, bytes: &[u8]| {
        dci.post_send_one(wr_id, WorkRequestFlags::Signaled, |wr| {
            wr.setup_write(region.rkey(), region.address())
                .setup_dc_addr(&ah, endpoint.dct_number(), endpoint.dc_key())
                .setup_inline_data(bytes);
        })
        .expect("post a WRITE");
    };
    let mut wcs = [sideway_ext::ibverbs::work_completion::WorkCompletion::default(); 4];
    let mut poll = |count: usize| {
        let mut out = Vec::new();
        for _ in 0..1000 {
            out.extend_from_slice(cq.poll_work_completions(&mut wcs).expect("poll"));
            if out.len() == count {
                break;
            }
        }
        out.iter().map(|wc| (wc.wr_id(), wc.status_raw())).collect::<Vec<_>>()
    };
    target.kill();
    write(&mut dci, 1, b"lost");
    assert_eq!(poll(1), [(1, 12)], "IBV_WC_RETRY_EXC_ERR");
    assert!(dci.is_in_error());
    write(&mut dci, 2, b"flushed");
    assert_eq!(poll(1), [(2, 5)], "IBV_WC_WR_FLUSH_ERR: posted to an initiator in ERR");
    target.revive();
    assert_eq!(dci.recover().expect("recover"), DcRecovery::Reset);
    assert!(!dci.is_in_error());
    write(&mut dci, 3, b"back");
    assert_eq!(poll(1), [(3, 0)]);
    assert_eq!(target.read(0..4).as_deref(), Some(&b"back"[..]));

    dci.refuse_recovery(true);
    let err = dci.recover().expect_err("a refused recovery");
    assert!(err.to_string().contains("recover"), "{err}");
}

/// The builder holds a simulated initiator to the hardware builder's rules: a request of the
/// default initiator (64 bytes inline, RDMA, one entry) takes 192 bytes, three basic blocks.
#[test]
fn the_simulated_builder_sizes_the_send_queue_as_libmlx5() {
    let fabric = SimulatedFabric::new(1);
    let build = |max_send_wr: u32| fabric.create_dci_builder().setup_max_send_wr(max_send_wr).build();
    for requested in [0, (1 << 15) + 1] {
        let err = build(requested).expect_err("out of range");
        assert!(
            matches!(err.0, CreateDcInitiatorErrorKind::InvalidMaxSendWorkRequests { requested: r, max: 32768 } if r == requested),
            "{err:?}"
        );
    }
    // 2^15 blocks of 64 bytes hold 10922 requests of 192.
    let err = build(10_923).expect_err("more than the blocks hold");
    assert!(
        matches!(
            err.0,
            CreateDcInitiatorErrorKind::SendQueueTooLarge {
                requested: 10_923,
                max: 10_922,
                request_size: 192,
                max_qp_wr: 32768
            }
        ),
        "{err:?}"
    );
    // Granted: the requests' bytes rounded up to a power of two (64 × 192 → 16384 = 85 × 192 + 64).
    let granted: Vec<_> = [1, 20, 64, 10_922]
        .into_iter()
        .map(|asked| build(asked).expect("fits").max_send_wr())
        .collect();
    assert_eq!(granted, [1, 21, 85, 10_922]);
    let err = fabric
        .create_dci_builder()
        .setup_dci_streams(DciStreams {
            log_num_concurrent: 17,
            log_num_errored: 0,
        })
        .build()
        .expect_err("over 2^16 streams");
    assert!(
        matches!(
            err.0,
            CreateDcInitiatorErrorKind::DciStreamsTooLarge { requested: 17, .. }
        ),
        "{err:?}"
    );
}

#[test]
fn a_simulated_initiator_refuses_what_its_creation_does_not_allow_at_post() {
    let fabric = SimulatedFabric::new(1);
    let target = fabric.create_target_builder().build().expect("target");
    let endpoint = target.endpoint();
    let ah = fabric.create_ah(&endpoint);
    let mut dci = fabric
        .create_dci_builder()
        .setup_max_inline_data(8)
        .build()
        .expect("initiator");
    assert_eq!(dci.max_inline_data(), 8);
    let err = dci
        .post_send_one(1, WorkRequestFlags::Signaled, |wr| {
            wr.setup_send()
                .setup_dc_addr(&ah, endpoint.dct_number(), endpoint.dc_key())
                .setup_inline_data(b"nine bytes");
        })
        .expect_err("inline data over 8 bytes");
    assert!(
        matches!(
            err.0,
            PostSendErrorKind::InlineDataTooLong {
                length: 10,
                max_inline_data: 8,
                ..
            }
        ),
        "{err:?}"
    );
    // No streams: the stream setter is not there (libmlx5 fills it on DCIs with streams only).
    let err = dci
        .post_send_one(2, WorkRequestFlags::Signaled, |wr| {
            wr.setup_send()
                .setup_dc_addr_stream(&ah, endpoint.dct_number(), endpoint.dc_key(), 0)
                .setup_inline_data(b"x");
        })
        .expect_err("a stream address without streams");
    assert!(
        matches!(err.0, PostSendErrorKind::OperationNotEnabled { wr_id: 2, .. }),
        "{err:?}"
    );
    assert_eq!(fabric.counters().posted, 0, "nothing reached the fabric");
}

/// An unsignaled request's send-queue entry frees only when a later completion of its initiator
/// is polled (libmlx5 `mlx5_parse_cqe` moves the tail past it): a queue of two entries holding
/// one unsignaled WRITE takes one request more, not two, until that one's completion is polled.
#[test]
fn an_unsignaled_requests_entry_frees_with_the_next_completion() {
    let fabric = SimulatedFabric::new(5);
    let target = fabric.create_target_builder().build().expect("target");
    let access = sideway::ibverbs::AccessFlags::LocalWrite | sideway::ibverbs::AccessFlags::RemoteWrite;
    let region = target.register_memory(0..64, access).expect("register");
    let cq = fabric.create_cq();
    let mut dci = fabric
        .create_dci_builder()
        .setup_max_send_wr(2)
        .build()
        .expect("initiator");
    assert_eq!(dci.max_send_wr(), 2);
    let endpoint = target.endpoint();
    let ah = fabric.create_ah(&endpoint);
    let mut write = |wr_id: u64, flags: WorkRequestFlags| {
        dci.post_send_one(wr_id, flags, |wr| {
            wr.setup_write(region.rkey(), region.address())
                .setup_dc_addr(&ah, endpoint.dct_number(), endpoint.dc_key())
                .setup_inline_data(b"x");
        })
    };
    let mut wcs = [sideway_ext::ibverbs::work_completion::WorkCompletion::default(); 4];
    write(1, WorkRequestFlags::none()).expect("the first entry");
    fabric.advance(100);
    assert!(
        cq.poll_work_completions(&mut wcs).expect("poll").is_empty(),
        "no completion: unsignaled"
    );
    write(2, WorkRequestFlags::Signaled).expect("the second entry");
    let err = write(3, WorkRequestFlags::Signaled).expect_err("the WRITE that executed still holds its entry");
    assert!(
        matches!(err.0, PostSendErrorKind::QueueFull { batch_len: 1, .. }),
        "{err:?}"
    );
    fabric.advance(100);
    let polled: Vec<_> = cq
        .poll_work_completions(&mut wcs)
        .expect("poll")
        .iter()
        .map(|wc| wc.wr_id())
        .collect();
    assert_eq!(polled, [2]);
    write(3, WorkRequestFlags::Signaled).expect("both entries free");
    write(4, WorkRequestFlags::none()).expect("the second free entry");
    assert_eq!(fabric.counters().executed, 2, "the first two executed");
}

/// With streams, an error errs its stream only; the stream is reset once its requests are
/// flushed (not before), and then executes again. Without streams there is nothing to reset.
#[test]
fn a_simulated_initiators_errored_stream_is_reset_after_its_flush() {
    let fabric = SimulatedFabric::new(9);
    let target = fabric.create_target_builder().build().expect("target");
    let access = sideway::ibverbs::AccessFlags::LocalWrite | sideway::ibverbs::AccessFlags::RemoteWrite;
    let region = target.register_memory(0..64, access).expect("register");
    let cq = fabric.create_cq();
    let endpoint = target.endpoint();
    let ah = fabric.create_ah(&endpoint);
    let mut plain = fabric.create_dci_builder().build().expect("initiator without streams");
    let err = plain.reset_stream(0).expect_err("no streams");
    assert!(matches!(err.0, ResetSimulatedStreamErrorKind::NoStreams), "{err:?}");

    let streams = DciStreams {
        log_num_concurrent: 1,
        log_num_errored: 1,
    };
    let mut dci = fabric
        .create_dci_builder()
        .setup_dci_streams(streams)
        .build()
        .expect("initiator");
    let mut guard = dci.start_post_send();
    for wr_id in [1, 2] {
        guard
            .construct_wr(wr_id, WorkRequestFlags::Signaled)
            .setup_write(region.rkey(), region.address())
            .setup_dc_addr_stream(&*ah, endpoint.dct_number(), endpoint.dc_key(), 0)
            .setup_inline_data(b"s0");
    }
    guard.post().expect("post two WRITEs on stream 0");
    dci.fail_next(0, 10); // IBV_WC_REM_ACCESS_ERR
    let mut wcs = [sideway_ext::ibverbs::work_completion::WorkCompletion::default(); 4];
    let mut first = Vec::new();
    while first.is_empty() {
        first.extend(
            cq.poll_work_completions(&mut wcs)
                .expect("poll")
                .iter()
                .map(|wc| (wc.wr_id(), wc.status_raw())),
        );
    }
    assert_eq!(first, [(1, 10)]);
    let err = dci.reset_stream(0).expect_err("WRITE 2 is not flushed yet");
    assert!(matches!(err.0, ResetSimulatedStreamErrorKind::NotFlushed), "{err:?}");
    let flushed: Vec<_> = cq
        .poll_work_completions(&mut wcs)
        .expect("poll")
        .iter()
        .map(|wc| (wc.wr_id(), wc.status_raw()))
        .collect();
    assert_eq!(flushed, [(2, 5)], "IBV_WC_WR_FLUSH_ERR");
    assert!(
        !dci.is_in_error(),
        "one errored stream of 2^1 leaves the initiator in RTS"
    );
    dci.reset_stream(0).expect("the stream is flushed");
    dci.post_send_one(3, WorkRequestFlags::Signaled, |wr| {
        wr.setup_write(region.rkey(), region.address())
            .setup_dc_addr_stream(&*ah, endpoint.dct_number(), endpoint.dc_key(), 0)
            .setup_inline_data(b"ok");
    })
    .expect("post on the reset stream");
    let mut last = Vec::new();
    while last.is_empty() {
        last.extend(
            cq.poll_work_completions(&mut wcs)
                .expect("poll")
                .iter()
                .map(|wc| (wc.wr_id(), wc.status_raw())),
        );
    }
    assert_eq!(last, [(3, 0)]);
    assert_eq!(target.read(0..2).as_deref(), Some(&b"ok"[..]));

    dci.move_to_error();
    let err = dci.reset_stream(1).expect_err("in ERR");
    assert!(
        matches!(err.0, ResetSimulatedStreamErrorKind::NotReadyToSend),
        "{err:?}"
    );
}
