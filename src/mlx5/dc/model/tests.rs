//! The public API of the DC queue pairs, driven through the model.
use std::time::Duration;

use sideway::ibverbs::queue_pair::{ModifyQueuePairErrorKind, QueuePairState, SendOperationFlags};
use sideway::ibverbs::AccessFlags;

use super::*;
use crate::ibverbs::queue_pair::QueuePairAttribute;
use crate::ibverbs::source_gid::SourceGidErrorKind;
use crate::mlx5::dc::initiator::creation::{DciDevice, DciRequest};
use crate::mlx5::dc::initiator::{
    BringUpDcInitiatorErrorKind, CreateDcInitiatorErrorKind, DcInitiator, DcInitiatorBringUp, DcRecovery, DciStreams,
    RecoverDcInitiatorErrorKind, ResetDciStreamErrorKind, DC_ATOMIC_OPERATIONS, DC_SEND_OPERATIONS,
};
use crate::mlx5::dc::target::{BringUpDcTargetErrorKind, DcTarget, DcTargetBringUp, ModifyDcTargetErrorKind};
use crate::mlx5::device_attributes::DciStreamsCapabilities;
use crate::mlx5::send_wqe_sizes::SendWqeSizes;
use crate::test_support::take_calls;

fn streams(log_num_concurrent: u8, log_num_errored: u8) -> DciStreams {
    DciStreams {
        log_num_concurrent,
        log_num_errored,
    }
}

fn request(streams: Option<DciStreams>) -> DciRequest {
    DciRequest {
        max_send_wr: 16,
        max_send_sge: 1,
        max_inline_data: 0,
        send_ops: None,
        streams,
        sq_sig_all: false,
    }
}

/// The device of the model, as the builder reads it (its send request sizes reported, as
/// `QUERY_HCA_CAP` answers them).
fn dci_device(device: &Device) -> DciDevice {
    let (max_log_num_concurrent, max_log_num_errored) = device.dci_streams_caps;
    DciDevice {
        max_qp_wr: device.max_qp_wr,
        max_sge: device.max_sge,
        atomics: device.atomic_cap,
        dci_streams: Some(DciStreamsCapabilities {
            max_log_num_concurrent,
            max_log_num_errored,
        }),
        read_atomic_depth: crate::mlx5::dc::initiator::creation::dci_read_atomic_depth(
            Some(1 << device.log_max_ra_req_dc),
            Some(1 << device.log_max_ra_res_dc),
        ),
        send_wqe_sizes: SendWqeSizes::new(
            u16::try_from(device.max_sq_desc_sz).expect("a 16-bit size"),
            u16::try_from(device.max_wqe_sz_sq_dc).expect("a 16-bit size"),
        ),
    }
}

/// The `max_rd_atomic` the model's kernel was last given for queue pair `n`.
fn given_max_rd_atomic(n: u32) -> u8 {
    with(|model| model.queue_pairs[&n].max_rd_atomic)
}

fn dci_on(device: Device, streams: Option<DciStreams>) -> DcInitiator {
    reset(device);
    let dci = DcInitiator::modelled(&request(streams), &dci_device(&device), &QUEUE_PAIR_VERBS, &DC_VERBS)
        .expect("the model creates it");
    take_calls();
    dci
}

fn brought_up(device: Device, streams: Option<DciStreams>) -> DcInitiator {
    let mut dci = dci_on(device, streams);
    dci.bring_up(&DcInitiatorBringUp::new(1)).expect("bring up");
    take_calls();
    dci
}

fn to(state: QueuePairState) -> QueuePairAttribute {
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(state);
    attr
}

#[test]
fn a_dci_is_brought_up_and_each_refused_transition_is_refused_before_the_kernel() {
    let mut dci = dci_on(DEVICE, None);
    let n = dci.qp_number();
    // RESET -> ERR: refused by the kernel's modify_dci_qp_is_ok, so refused before the call.
    let err = dci.modify(&to(QueuePairState::Error)).unwrap_err();
    assert!(
        matches!(err.0, ModifyQueuePairErrorKind::InvalidTransition { .. }),
        "{err:?}"
    );
    assert!(take_calls().is_empty(), "nothing reached the kernel");

    dci.bring_up(&DcInitiatorBringUp::new(1)).expect("bring up");
    assert_eq!(
        take_calls(),
        [
            format!("modify qp{n:#x} Reset -> Init"),
            format!("modify qp{n:#x} Init -> ReadyToReceive"),
            format!("modify qp{n:#x} ReadyToReceive -> ReadyToSend"),
        ]
    );
    // RTS -> RTR, RTS -> INIT: no such transition.
    for state in [QueuePairState::ReadyToReceive, QueuePairState::Init] {
        assert!(matches!(
            dci.modify(&to(state)).unwrap_err().0,
            ModifyQueuePairErrorKind::InvalidTransition { .. }
        ));
    }
    // RTS -> RTS with the minimum RNR timer is allowed; with a timeout it is not.
    let mut rts = to(QueuePairState::ReadyToSend);
    rts.setup_min_rnr_timer(12);
    dci.modify(&rts).expect("RTS -> RTS with the RNR timer");
    rts.setup_timeout(10);
    assert!(matches!(
        dci.modify(&rts).unwrap_err().0,
        ModifyQueuePairErrorKind::InvalidAttributeMask { .. }
    ));
    // A modification without the state is refused (mlx5_ib requires IB_QP_STATE).
    let mut no_state = QueuePairAttribute::new();
    no_state.setup_min_rnr_timer(12);
    assert!(dci.modify(&no_state).is_err());
    assert_eq!(
        take_calls(),
        [format!("modify qp{n:#x} ReadyToSend -> ReadyToSend")],
        "only the allowed modification reached the kernel"
    );

    // INIT -> INIT with the port, on a new DCI.
    let mut dci = dci_on(DEVICE, None);
    let mut init = to(QueuePairState::Init);
    init.setup_pkey_index(0).setup_port(1);
    dci.modify(&init).expect("RESET -> INIT");
    let mut again = to(QueuePairState::Init);
    again.setup_port(1);
    dci.modify(&again).expect("INIT -> INIT with the port");
    assert_eq!(dci.state(), QueuePairState::Init);
}

#[test]
fn recover_after_an_error_goes_through_reset() {
    let mut dci = brought_up(DEVICE, None);
    let n = dci.qp_number();
    fail(n);
    assert_eq!(dci.query_state().unwrap(), QueuePairState::Error);
    take_calls();
    assert_eq!(dci.recover().expect("recover"), DcRecovery::Reset);
    assert_eq!(
        take_calls(),
        [
            format!("modify qp{n:#x} Error -> Reset"),
            format!("modify qp{n:#x} Reset -> Init"),
            format!("modify qp{n:#x} Init -> ReadyToReceive"),
            format!("modify qp{n:#x} ReadyToReceive -> ReadyToSend"),
        ]
    );
    assert_eq!((dci.qp_number(), device_state(n)), (n, QueuePairState::ReadyToSend));
}

#[test]
fn recover_rebuilds_the_dci_where_the_kernel_refuses_reset_and_the_handle_stays_valid() {
    let mut dci = brought_up(DEVICE, None);
    set_reset_branch(false);
    let old = dci.qp_number();
    fail(old);
    dci.query_state().unwrap();
    take_calls();
    let recovery = dci.recover().expect("recover by rebuilding");
    let new = dci.qp_number();
    assert_eq!(
        recovery,
        DcRecovery::Rebuilt {
            previous_qp_number: old
        }
    );
    assert_ne!(new, old);
    assert_eq!(
        take_calls(),
        [
            format!("modify qp{old:#x} Error -> Reset refused ({})", libc::EINVAL),
            format!("create qp{new:#x}"),
            format!("destroy qp{old:#x}"),
            format!("modify qp{new:#x} Reset -> Init"),
            format!("modify qp{new:#x} Init -> ReadyToReceive"),
            format!("modify qp{new:#x} ReadyToReceive -> ReadyToSend"),
        ]
    );
    assert_eq!(device_state(new), QueuePairState::ReadyToSend);
    assert_eq!(dci.state(), QueuePairState::ReadyToSend);
    // Posting goes to the new queue pair's tables, with its DC setter.
    let mut guard = dci.start_post_send();
    let request = guard
        .construct_wr(5, sideway::ibverbs::queue_pair::WorkRequestFlags::Signaled)
        .setup_send();
    // SAFETY: the model's address setter only records the pointer.
    let request = unsafe { request.setup_dc_addr_raw(NonNull::dangling(), 0x42, 7) };
    sideway::ibverbs::queue_pair::SetInlineData::setup_inline_data(request, b"x");
    guard.post().expect("post on the rebuilt DCI");
    let calls = take_calls();
    assert_eq!(calls.first().map(String::as_str), Some("start"));
    assert!(
        calls
            .iter()
            .any(|call| call.starts_with("dc_addr") && call.contains("dctn=0x42")),
        "{calls:?}"
    );
    // The rebuilt DCI recovers again (the old kernel still refuses RESET).
    fail(new);
    dci.query_state().unwrap();
    assert!(matches!(dci.recover().unwrap(), DcRecovery::Rebuilt { previous_qp_number } if previous_qp_number == new));
}

#[test]
fn the_rtr_address_vector_is_sent_only_when_asked_and_an_old_kernel_says_so() {
    // By default no address vector at RTR: both kernels take that.
    let attributes = DcInitiatorBringUp::new(1).attributes(sideway::ibverbs::device_context::Mtu::Mtu1024, 1, None);
    assert!(!attributes.steps()[1]
        .mask()
        .contains(sideway::ibverbs::queue_pair::QueuePairAttributeMask::AddressVector));
    // Asked for (a service level, on the current kernel): sent, and the DCI reaches RTS.
    let mut av = crate::ibverbs::address::AddressHandleAttribute::new();
    av.setup_port(1).setup_service_level(3);
    let mut params = DcInitiatorBringUp::new(1);
    params.setup_rtr_address_vector(av);
    let rtr = params
        .attributes(sideway::ibverbs::device_context::Mtu::Mtu1024, 1, None)
        .steps()[1]
        .clone();
    assert!(rtr
        .mask()
        .contains(sideway::ibverbs::queue_pair::QueuePairAttributeMask::AddressVector));
    assert_eq!(rtr.attr.ah_attr.sl, 3);
    let mut dci = dci_on(DEVICE, None);
    dci.bring_up(&params).expect("the current kernel takes the AV at RTR");
    assert_eq!(dci.state(), QueuePairState::ReadyToSend);
    // A kernel whose modify_dci_qp_is_ok predates the AV: its EINVAL is named.
    let mut dci = dci_on(DEVICE, None);
    set_rtr_av(false);
    let err = dci.bring_up(&params).unwrap_err();
    assert!(
        matches!(err.0, BringUpDcInitiatorErrorKind::RtrAddressVectorRefused { .. }),
        "{err:?}"
    );
    // It names the first kernel that takes one (Linux v5.0), so the user knows what to run.
    assert!(err.0.to_string().contains("kernels before Linux 5.0"), "{}", err.0);
    assert_eq!(dci.state(), QueuePairState::Init);
    // Without it, the same kernel brings the DCI up.
    let mut dci = dci_on(DEVICE, None);
    set_rtr_av(false);
    dci.bring_up(&DcInitiatorBringUp::new(1)).expect("no AV: every kernel");
}

#[test]
fn a_dcis_depth_is_capped_by_max_dc_init_rd_atom_as_validate_rd_atomic_bounds_it() {
    // The model's kernel refuses a DCI max_rd_atomic above 1 << log_max_ra_res_dc (16),
    // which libmlx5 reports as max_dc_init_rd_atom ("as a responder" in the man page).
    let mut dci = dci_on(DEVICE, None);
    let mut params = DcInitiatorBringUp::new(1);
    params.setup_max_read_atomic(64);
    dci.bring_up(&params).expect("capped at max_dc_init_rd_atom");
    let mut init = to(QueuePairState::Init);
    init.setup_pkey_index(0).setup_port(1);
    let mut dci = dci_on(DEVICE, None);
    dci.modify(&init).unwrap();
    let mut rtr = to(QueuePairState::ReadyToReceive);
    rtr.setup_path_mtu(sideway::ibverbs::device_context::Mtu::Mtu1024);
    dci.modify(&rtr).unwrap();
    let mut rts = crate::test_support::rts_attr();
    rts.setup_max_read_atomic(17);
    assert!(dci.modify(&rts).is_err(), "the kernel's bound");
}

#[test]
fn a_dcis_default_depth_is_the_smaller_of_the_requester_and_initiator_depths() {
    // A device whose DC requester takes 4 reads and atomics in flight (max_dc_rd_atom) and
    // whose kernel bounds a DCI at 16 (max_dc_init_rd_atom): the depth is 4.
    let device = Device {
        log_max_ra_req_dc: 2,
        ..DEVICE
    };
    let mut dci = dci_on(device, None);
    assert_eq!(dci.max_read_atomic(), 4);
    dci.bring_up(&DcInitiatorBringUp::new(1)).expect("bring up");
    assert_eq!(given_max_rd_atomic(dci.qp_number()), 4, "the default depth");
    // Asked for more, it is capped the same way; asked for less, it gets what it asked.
    let mut dci = dci_on(device, None);
    let mut params = DcInitiatorBringUp::new(1);
    params.setup_max_read_atomic(64);
    dci.bring_up(&params).expect("bring up");
    assert_eq!(given_max_rd_atomic(dci.qp_number()), 4, "capped");
    let mut dci = dci_on(device, None);
    params.setup_max_read_atomic(2);
    dci.bring_up(&params).expect("bring up");
    assert_eq!(given_max_rd_atomic(dci.qp_number()), 2, "as asked");
}

#[test]
fn recover_before_bring_up_is_refused() {
    let mut dci = dci_on(DEVICE, None);
    assert!(matches!(
        dci.recover().unwrap_err().0,
        RecoverDcInitiatorErrorKind::NotBroughtUp
    ));
    assert!(take_calls().is_empty());
}

#[test]
fn a_stream_is_reset_after_its_flush_and_every_id_that_can_be_posted_can_be_reset() {
    let streams = streams(2, 1);
    let mut dci = brought_up(DEVICE, Some(streams));
    let n = dci.qp_number();
    // Stream 9 is beyond the 4 concurrent streams; setup_dc_addr_stream takes it, so the
    // reset must too (pyverbs' generate_stream_id does the same).
    stream_error(n, 9, 2);
    assert_eq!(
        dci.query_state().unwrap(),
        QueuePairState::ReadyToSend,
        "one errored stream; two would move it to ERR"
    );
    // The caller polls the stream's flush errors, then resets.
    flush(n, 9);
    take_calls();
    dci.reset_stream(9).expect("reset after the flush");
    assert_eq!(take_calls(), [format!("stream_reset qp{n:#x} 9")]);
    assert_eq!(device_state(n), QueuePairState::ReadyToSend);
}

#[test]
fn waiting_for_an_error_with_no_timeout_waits_until_err() {
    let mut dci = brought_up(DEVICE, Some(streams(2, 0)));
    let n = dci.qp_number();
    stream_error(n, 0, 0);
    stream_error(n, 1, 0);
    assert_eq!(dci.wait_for_error(Duration::MAX).unwrap(), QueuePairState::Error);
}

#[test]
fn a_whole_dci_error_after_too_many_stream_errors_shows_up_late_and_is_waited_for() {
    let streams = streams(2, 0);
    let mut dci = brought_up(DEVICE, Some(streams));
    let n = dci.qp_number();
    stream_error(n, 0, 0);
    stream_error(n, 1, 0);
    // One immediate query still reads RTS: the move to ERR is asynchronous.
    assert_eq!(dci.query_state().unwrap(), QueuePairState::ReadyToSend);
    assert_eq!(
        dci.wait_for_error(Duration::from_secs(1)).unwrap(),
        QueuePairState::Error
    );
    take_calls();
    // A stream reset now is its own error, and never reaches libmlx5.
    match dci.reset_stream(1).unwrap_err().0 {
        ResetDciStreamErrorKind::NotReadyToSend { state } => assert_eq!(state, QueuePairState::Error),
        other => panic!("unexpected {other:?}"),
    }
    assert!(take_calls().is_empty());
    assert_eq!(dci.recover().unwrap(), DcRecovery::Reset);
    assert_eq!(device_state(n), QueuePairState::ReadyToSend);
}

#[test]
fn exactly_two_to_the_log_num_errored_errored_streams_move_the_dci_to_err() {
    // pyverbs `test_dc_stream_qp_recovery`: 1 << log_num_errored errors, then ERR.
    let mut device = DEVICE;
    device.dci_streams_caps = (4, 2);
    for log_num_errored in 0..=2u8 {
        let mut dci = brought_up(device, Some(streams(3, log_num_errored)));
        let n = dci.qp_number();
        let allowed = (1u16 << log_num_errored) - 1;
        for stream in 0..allowed {
            stream_error(n, stream, 0);
        }
        for _ in 0..=QUERIES_BEFORE_ERROR + 1 {
            assert_eq!(
                dci.query_state().unwrap(),
                QueuePairState::ReadyToSend,
                "{allowed} errored streams, log_num_errored {log_num_errored}"
            );
        }
        stream_error(n, allowed, 0);
        let states: Vec<_> = (0..=QUERIES_BEFORE_ERROR).map(|_| dci.query_state().unwrap()).collect();
        assert_eq!(
            states.last(),
            Some(&QueuePairState::Error),
            "{} errored streams, log_num_errored {log_num_errored}: {states:?}",
            allowed + 1
        );
    }
}

#[test]
fn a_stream_reset_racing_the_move_to_err_is_not_ready_to_send() {
    let streams = streams(2, 1);
    let mut dci = brought_up(DEVICE, Some(streams));
    let n = dci.qp_number();
    // The device moved to ERR; the cached state still says RTS, so the call is made, the
    // device refuses it, and a query tells why.
    fail(n);
    let err = dci.reset_stream(0).unwrap_err();
    assert!(
        matches!(
            err.0,
            ResetDciStreamErrorKind::NotReadyToSend {
                state: QueuePairState::Error
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_device_with_zero_stream_concurrency_has_no_streams() {
    let streams = streams(1, 0);
    // libmlx5 reports the capability on every device, zeros where there are no streams.
    let mut device = DEVICE;
    device.dci_streams_caps = (0, 0);
    reset(device);
    let err = DcInitiator::modelled(
        &request(Some(streams)),
        &dci_device(&device),
        &QUEUE_PAIR_VERBS,
        &DC_VERBS,
    )
    .unwrap_err();
    assert!(
        matches!(err, CreateDcInitiatorErrorKind::DciStreamsNotSupported),
        "{err:?}"
    );
    assert!(err.to_string().contains("max_log_num_concurent"), "{err}");
    assert!(take_calls().is_empty(), "refused before mlx5dv_create_qp");
    // The capability summary says the same.
    // SAFETY: mlx5dv_context holds only integers and a raw pointer: all-zero bytes are valid.
    let mut raw: rdma_mummy_sys::mlx5dv_context = unsafe { MaybeUninit::zeroed().assume_init() };
    raw.comp_mask = crate::mlx5::device_attributes::Mlx5ContextMask::all_flags().bits();
    let attributes = crate::mlx5::device_attributes::Mlx5DeviceAttributes::from_raw(&raw);
    let capabilities = crate::mlx5::dc_capabilities::DcCapabilities::from_parts(
        Some((&attributes, crate::mlx5::send_wqe_sizes::SendWqeSizes::guaranteed(30))),
        16,
        16,
    );
    assert_eq!(capabilities.dci_streams(), None);
    // Streams whose errors cannot be reset: created, but the reset is refused up front.
    device.dci_streams_caps = (2, 0);
    let mut dci = brought_up(device, Some(streams));
    assert!(matches!(
        dci.reset_stream(0).unwrap_err().0,
        ResetDciStreamErrorKind::DeviceCannotResetStreams
    ));
    assert!(take_calls().is_empty());
    // A DC initiator without streams has none to reset; a libmlx5 without the function says
    // so.
    let mut plain = brought_up(DEVICE, None);
    assert!(matches!(
        plain.reset_stream(0).unwrap_err().0,
        ResetDciStreamErrorKind::NoStreams
    ));
    reset(DEVICE);
    let mut old_library = DcInitiator::modelled(
        &request(Some(streams)),
        &dci_device(&DEVICE),
        &QUEUE_PAIR_VERBS,
        &DC_VERBS_WITHOUT_STREAM_RESET,
    )
    .unwrap();
    old_library.bring_up(&DcInitiatorBringUp::new(1)).unwrap();
    assert!(matches!(
        old_library.reset_stream(0).unwrap_err().0,
        ResetDciStreamErrorKind::NotSupported
    ));
}

#[test]
fn the_default_operations_follow_the_atomic_capability() {
    let mut device = DEVICE;
    device.atomic_cap = false;
    let dci = dci_on(device, None);
    assert_eq!(dci.send_ops_flags(), DC_SEND_OPERATIONS.and(DC_ATOMIC_OPERATIONS.not()));
    let dci = dci_on(DEVICE, None);
    assert_eq!(dci.send_ops_flags(), DC_SEND_OPERATIONS);
    // Asking for atomics on a device without them is refused, naming them.
    reset(device);
    let mut asked = request(None);
    asked.send_ops = Some(SendOperationFlags::Write | SendOperationFlags::AtomicFetchAndAdd);
    let err = DcInitiator::modelled(&asked, &dci_device(&device), &QUEUE_PAIR_VERBS, &DC_VERBS).unwrap_err();
    match err {
        CreateDcInitiatorErrorKind::AtomicOperationsNotSupported { requested } => {
            assert_eq!(requested, SendOperationFlags::AtomicFetchAndAdd)
        },
        other => panic!("unexpected {other:?}"),
    }
    assert!(take_calls().is_empty());
}

#[test]
fn a_dct_goes_reset_init_rtr_only_and_is_torn_down_by_dropping_it() {
    reset(DEVICE);
    let mut dct = DcTarget::modelled(
        7,
        Some(AccessFlags::LocalWrite | AccessFlags::RemoteWrite),
        &QUEUE_PAIR_VERBS,
        &DC_VERBS,
    )
    .expect("the model creates it");
    let n = take_calls()
        .iter()
        .find_map(|call| {
            call.strip_prefix("create qp0x")
                .map(|n| u32::from_str_radix(n, 16).unwrap())
        })
        .expect("created");
    dct.bring_up(&DcTargetBringUp::new(1)).expect("bring up");
    assert_eq!(
        take_calls(),
        [
            format!("modify qp{n:#x} Reset -> Init"),
            format!("modify qp{n:#x} Init -> ReadyToReceive"),
        ]
    );
    assert!(dct.dct_number().is_some());
    for state in [
        QueuePairState::Reset,
        QueuePairState::Error,
        QueuePairState::ReadyToSend,
    ] {
        let err = dct.modify(&to(state)).unwrap_err();
        match &err.0 {
            ModifyDcTargetErrorKind::InvalidTransition { from, to } => {
                assert_eq!((*from, *to), (QueuePairState::ReadyToReceive, state))
            },
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.0.to_string().contains("torn down by dropping it"), "{}", err.0);
    }
    assert!(take_calls().is_empty(), "nothing reached the kernel");
    drop(dct);
    assert_eq!(take_calls(), [format!("destroy qp{n:#x}")]);
}

#[test]
fn an_rtr_address_vector_is_checked_before_an_old_kernel_is_blamed() {
    use crate::ibverbs::address::AddressHandleAttribute;
    let gid = sideway::ibverbs::address::Gid::from(std::net::Ipv6Addr::from([0xfe80, 0, 0, 0, 0, 0, 0, 1]));
    let with = |av: AddressHandleAttribute| {
        let mut params = DcInitiatorBringUp::new(1);
        params.setup_rtr_address_vector(av);
        params
    };
    let mut not_global = AddressHandleAttribute::new();
    not_global.setup_port(1).setup_service_level(3);
    let mut empty_slot = AddressHandleAttribute::new();
    empty_slot
        .setup_port(1)
        .setup_grh_dest_gid(&gid)
        .setup_grh_src_gid_index(0);
    let mut good = empty_slot;
    good.setup_grh_src_gid_index(1);
    // On RoCE (GIDs at 1 only), on an old kernel: the address vector's own faults are named,
    // before any transition, and only a sound one is put down to the kernel.
    for (av, want) in [(not_global, "not global"), (empty_slot, "empty slot")] {
        let mut dci = dci_on(DEVICE, None);
        set_roce(&[1]);
        set_rtr_av(false);
        let err = dci.bring_up(&with(av)).unwrap_err();
        let named = match &err.0 {
            BringUpDcInitiatorErrorKind::RtrAddressVectorNotGlobal { port: 1 } => "not global",
            BringUpDcInitiatorErrorKind::RtrAddressVectorGid(gid)
                if matches!(gid.0, SourceGidErrorKind::EmptySlot { port: 1, index: 0 }) =>
            {
                "empty slot"
            },
            _ => "something else",
        };
        assert_eq!(named, want, "{err:?}");
        assert_eq!(dci.state(), QueuePairState::Reset, "{want}: before any transition");
    }
    let mut dci = dci_on(DEVICE, None);
    set_roce(&[1]);
    set_rtr_av(false);
    let err = dci.bring_up(&with(good)).unwrap_err();
    assert!(
        matches!(err.0, BringUpDcInitiatorErrorKind::RtrAddressVectorRefused { .. }),
        "{err:?}"
    );
    // The current kernel takes it.
    let mut dci = dci_on(DEVICE, None);
    set_roce(&[1]);
    dci.bring_up(&with(good))
        .expect("a global address vector with a set GID");
    assert_eq!(dci.state(), QueuePairState::ReadyToSend);
}

#[test]
fn a_port_that_cannot_carry_dc_traffic_is_refused_by_both_bring_ups_before_any_transition() {
    use crate::mlx5::dc::initiator::PortNotReady;
    use rdma_mummy_sys::ibv_port_state::{IBV_PORT_ACTIVE, IBV_PORT_DOWN};
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    // A port whose link is down; then an InfiniBand port no subnet manager gave a LID.
    for (state, lid, want) in [
        (
            IBV_PORT_DOWN,
            7,
            PortNotReady::NotActive {
                port: 1,
                state: IBV_PORT_DOWN,
            },
        ),
        (IBV_PORT_ACTIVE, 0, PortNotReady::NoLid { port: 1 }),
    ] {
        let mut dci = dci_on(DEVICE, None);
        set_port(state, lid);
        let err = dci.bring_up(&DcInitiatorBringUp::new(1)).unwrap_err();
        assert!(
            matches!(err.0, BringUpDcInitiatorErrorKind::PortNotReady(got) if got == want),
            "{err:?}"
        );
        assert_eq!(dci.state(), QueuePairState::Reset);
        let mut dct = DcTarget::modelled(7, Some(access), &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
        take_calls();
        let err = dct.bring_up(&DcTargetBringUp::new(1)).unwrap_err();
        assert!(
            matches!(err.0, BringUpDcTargetErrorKind::PortNotReady(got) if got == want),
            "{err:?}"
        );
        assert!(take_calls().is_empty(), "nothing reached the kernel");
    }
    // The message names the port and its state.
    let down = PortNotReady::NotActive {
        port: 1,
        state: IBV_PORT_DOWN,
    };
    assert_eq!(
        down.to_string(),
        "port 1 is not active (state DOWN): bring its link up first"
    );
    // A RoCE port has no LID: active is enough.
    let mut dci = dci_on(DEVICE, None);
    set_roce(&[1]);
    set_port(IBV_PORT_ACTIVE, 0);
    dci.bring_up(&DcInitiatorBringUp::new(1)).expect("an active RoCE port");
}

#[test]
fn a_dct_on_roce_answers_from_a_roce_v2_gid_and_announces_it_with_its_path_mtu() {
    use crate::mlx5::dc::target::DcTargetEndpointErrorKind;
    reset(DEVICE);
    // As on mlx5: RoCE v1 at 0 and 2, RoCE v2 at 1 and 3.
    set_roce(&[0, 1, 2, 3]);
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    let mut dct = DcTarget::modelled(7, Some(access), &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
    assert!(matches!(
        dct.endpoint().unwrap_err().0,
        DcTargetEndpointErrorKind::NoDctNumber
    ));
    take_calls();
    // A RoCE v1 GID, an empty slot: refused by name before any transition.
    let mut params = DcTargetBringUp::new(1);
    for (index, want) in [(0, "RoCE v1"), (5, "empty")] {
        params.setup_src_gid_index(index);
        let err = dct.bring_up(&params).unwrap_err();
        let BringUpDcTargetErrorKind::SourceGid(gid) = &err.0 else {
            panic!("{err:?}")
        };
        let named = match gid.0 {
            SourceGidErrorKind::NotRoceV2 { port: 1, index: 0, .. } => "RoCE v1",
            SourceGidErrorKind::EmptySlot { port: 1, index: 5 } => "empty",
            _ => "something else",
        };
        assert_eq!(named, want, "{err:?}");
        assert!(take_calls().is_empty(), "nothing reached the kernel");
    }
    // By default: the port's first RoCE v2 GID, in the RTR address vector and the endpoint.
    dct.bring_up(&DcTargetBringUp::new(1)).expect("a RoCE v2 GID at 1");
    assert_eq!(dct.state(), QueuePairState::ReadyToReceive);
    assert_eq!(dct.source_gid().map(|entry| entry.index()), Some(1));
    let endpoint = dct.endpoint().expect("its endpoint");
    let gid = std::net::Ipv6Addr::from(endpoint.gid());
    assert_eq!(gid, "::ffff:192.0.2.1".parse::<std::net::Ipv6Addr>().unwrap());
    let mtu = sideway::ibverbs::device_context::Mtu::Mtu1024;
    assert_eq!(
        (endpoint.is_roce(), endpoint.path_mtu()),
        (true, Some(mtu)),
        "the port's active MTU"
    );
    // A port with RoCE v1 GIDs only has nothing to answer from.
    let mut dct = DcTarget::modelled(7, Some(access), &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
    set_roce(&[0, 2]);
    let err = dct.bring_up(&DcTargetBringUp::new(1)).unwrap_err();
    assert!(
        matches!(&err.0, BringUpDcTargetErrorKind::SourceGid(gid) if matches!(gid.0, SourceGidErrorKind::NoRoceV2Gid { port: 1 })),
        "{err:?}"
    );
}

#[test]
fn a_dci_on_roce_sends_from_a_roce_v2_gid_and_refuses_a_roce_v1_one() {
    use crate::ibverbs::source_gid::SourceGid;
    let mut dci = dci_on(DEVICE, None);
    set_roce(&[0, 1, 2, 3]);
    let mut params = DcInitiatorBringUp::new(1);
    params.setup_source_gid(SourceGid::Index(2));
    let err = dci.bring_up(&params).unwrap_err();
    assert!(
        matches!(&err.0, BringUpDcInitiatorErrorKind::SourceGid(gid) if matches!(gid.0, SourceGidErrorKind::NotRoceV2 { port: 1, index: 2, .. })),
        "{err:?}"
    );
    assert_eq!(dci.state(), QueuePairState::Reset, "before any transition");
    params.setup_source_gid(SourceGid::Index(3));
    dci.bring_up(&params).expect("a RoCE v2 GID");
    assert_eq!(dci.source_gid().map(|entry| entry.index()), Some(3));
    assert_eq!(dci.path_mtu(), Some(sideway::ibverbs::device_context::Mtu::Mtu1024));
    // By default the first RoCE v2 GID; on InfiniBand none.
    let mut dci = dci_on(DEVICE, None);
    set_roce(&[0, 1, 2, 3]);
    dci.bring_up(&DcInitiatorBringUp::new(1)).expect("brought up");
    assert_eq!(dci.source_gid().map(|entry| entry.index()), Some(1));
    let mut dci = dci_on(DEVICE, None);
    dci.bring_up(&DcInitiatorBringUp::new(1))
        .expect("brought up on InfiniBand");
    assert_eq!(dci.source_gid(), None);
}

/// An InfiniBand port that requires a GRH (an InfiniBand virtual function): the kernel refuses an
/// address vector without one (`rdma_check_ah_attr`), so by default both bring-ups send from GID
/// index 0, and the target announces that GID.
#[test]
fn on_an_infiniband_port_that_requires_a_grh_both_bring_ups_use_gid_index_0() {
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    reset(DEVICE);
    set_grh_required();
    let mut dct = DcTarget::modelled(7, Some(access), &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
    dct.bring_up(&DcTargetBringUp::new(1))
        .expect("a global RTR address vector");
    assert_eq!(dct.state(), QueuePairState::ReadyToReceive);
    assert_eq!(dct.source_gid().map(|entry| entry.index()), Some(0));
    let endpoint = dct.endpoint().expect("its endpoint");
    assert_eq!(
        (endpoint.is_roce(), std::net::Ipv6Addr::from(endpoint.gid())),
        (false, "fe80::1".parse().unwrap())
    );
    let mut dci = dci_on(DEVICE, None);
    set_grh_required();
    dci.bring_up(&DcInitiatorBringUp::new(1)).expect("brought up");
    assert_eq!(dci.source_gid().map(|entry| entry.index()), Some(0));
    // The kernel's rule, as the model holds it: no DCT reaches RTR without a GRH there.
    let mut dct = DcTarget::modelled(7, Some(access), &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
    let [init, rtr] = DcTargetBringUp::new(1).attributes(access, sideway::ibverbs::device_context::Mtu::Mtu1024, None);
    dct.modify(&init).expect("INIT");
    let err = dct.modify(&rtr).unwrap_err();
    assert!(
        matches!(&err.0, ModifyDcTargetErrorKind::Modify(modify) if matches!(&modify.0, ModifyQueuePairErrorKind::Ibverbs(errno) if errno.raw_os_error() == Some(libc::EINVAL))),
        "{err:?}"
    );
}

/// A libibverbs before rdma-core 32 (no `_ibv_query_gid_ex`) whose sysfs gives no GID type
/// either: on InfiniBand both bring-ups need no GID and go on; on RoCE the error says the library
/// is too old and which version reads the table, before any transition.
#[test]
fn without_a_readable_gid_table_infiniband_brings_up_and_roce_names_the_library_version() {
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    let mut dci = dci_on(DEVICE, None);
    set_gid_table_unreadable();
    dci.bring_up(&DcInitiatorBringUp::new(1))
        .expect("InfiniBand reads no GID table");
    assert_eq!(dci.source_gid(), None);
    let mut dct = DcTarget::modelled(7, Some(access), &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
    dct.bring_up(&DcTargetBringUp::new(1))
        .expect("InfiniBand reads no GID table");
    assert_eq!(dct.state(), QueuePairState::ReadyToReceive);

    let mut dci = dci_on(DEVICE, None);
    set_roce(&[0, 1]);
    set_gid_table_unreadable();
    let err = dci.bring_up(&DcInitiatorBringUp::new(1)).unwrap_err();
    let BringUpDcInitiatorErrorKind::SourceGid(gid) = &err.0 else {
        panic!("{err:?}")
    };
    assert!(
        matches!(gid.0, SourceGidErrorKind::LibraryTooOld { port: 1, index: 0 }),
        "{err:?}"
    );
    assert!(gid.0.to_string().contains("rdma-core 32 or newer"), "{}", gid.0);
    assert_eq!(dci.state(), QueuePairState::Reset, "before any transition");
    let mut dct = DcTarget::modelled(7, Some(access), &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
    take_calls();
    let err = dct.bring_up(&DcTargetBringUp::new(1)).unwrap_err();
    assert!(
        matches!(&err.0, BringUpDcTargetErrorKind::SourceGid(gid) if matches!(gid.0, SourceGidErrorKind::LibraryTooOld { port: 1, index: 0 })),
        "{err:?}"
    );
    assert!(take_calls().is_empty(), "nothing reached the kernel");
}

#[test]
fn a_request_beyond_the_devices_dc_send_request_is_refused_before_the_library() {
    // A device whose DC initiators take requests of 256 bytes at most, where any other queue
    // pair takes 1024: libmlx5 checks only the latter, and would create the DCI.
    let small_dc = Device {
        max_wqe_sz_sq_dc: 256,
        ..DEVICE
    };
    let create = |device: Device, sge: u32, inline: u32| {
        reset(device);
        take_calls();
        let mut asked = request(None);
        asked.max_send_sge = sge;
        asked.max_inline_data = inline;
        DcInitiator::modelled(&asked, &dci_device(&device), &QUEUE_PAIR_VERBS, &DC_VERBS)
    };
    // 11 entries with the atomics' overhead: 96 + 11 * 16 = 272 bytes.
    let err = create(small_dc, 11, 0).unwrap_err();
    assert!(
        matches!(
            err,
            CreateDcInitiatorErrorKind::RequestTooLarge {
                max_send_sge: 11,
                max_inline_data: 0,
                request_bytes: 272,
                max_wqe_sz_sq: 1024,
                max_wqe_sz_sq_dc: 256,
                reported: true,
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("272 bytes")
            && message.contains("max_wqe_sz_sq 1024")
            && message.contains("max_wqe_sz_sq_dc 256"),
        "{message}"
    );
    assert!(take_calls().is_empty(), "refused before mlx5dv_create_qp");
    // 157 bytes inline: 96 + (4 + 157, padded to 16) = 272.
    let err = create(small_dc, 1, 157).unwrap_err();
    assert!(
        matches!(
            err,
            CreateDcInitiatorErrorKind::RequestTooLarge { request_bytes: 272, .. }
        ),
        "{err:?}"
    );
    assert!(take_calls().is_empty(), "refused before mlx5dv_create_qp");
    // What fits 256 bytes is created: 10 entries, or 156 bytes inline.
    create(small_dc, 10, 0).expect("10 entries fit 256 bytes");
    create(small_dc, 1, 156).expect("156 inline bytes fit 256 bytes");
    // The smaller of the two sizes bounds a DCI, whichever it is.
    let small_general = Device {
        max_sq_desc_sz: 512,
        ..DEVICE
    };
    let err = create(small_general, 30, 0).unwrap_err();
    assert!(
        matches!(
            err,
            CreateDcInitiatorErrorKind::RequestTooLarge {
                request_bytes: 576,
                max_wqe_sz_sq: 512,
                max_wqe_sz_sq_dc: 1024,
                reported: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(take_calls().is_empty(), "refused before mlx5dv_create_qp");
}

#[test]
fn a_request_beyond_unreported_sizes_is_left_to_libmlx5_and_named_not_a_bare_einval() {
    // A device whose largest send request is 512 bytes: every device with max_sge 30 takes
    // that much, some take more. It did not report its sizes (QUERY_HCA_CAP refused), so the
    // builder knows only the bound every device takes.
    let small = Device {
        max_sq_desc_sz: 512,
        ..DEVICE
    };
    let create = |device: Device, sge: u32, inline: u32| {
        reset(device);
        let mut asked = request(None);
        asked.max_send_sge = sge;
        asked.max_inline_data = inline;
        let unreported = DciDevice {
            send_wqe_sizes: SendWqeSizes::guaranteed(device.max_sge),
            ..dci_device(&device)
        };
        DcInitiator::modelled(&asked, &unreported, &QUEUE_PAIR_VERBS, &DC_VERBS)
    };
    // 30 entries with the atomics' overhead: 96 + 30 * 16 = 576 bytes.
    let err = create(small, 30, 0).unwrap_err();
    assert!(
        matches!(
            err,
            CreateDcInitiatorErrorKind::RequestTooLarge {
                max_send_sge: 30,
                max_inline_data: 0,
                request_bytes: 576,
                max_wqe_sz_sq: 512,
                max_wqe_sz_sq_dc: 512,
                reported: false,
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("libmlx5 refused it"), "{err}");
    // 500 bytes inline: 96 + (4 + 500, padded to 16) = 608.
    let err = create(small, 1, 500).unwrap_err();
    assert!(
        matches!(
            err,
            CreateDcInitiatorErrorKind::RequestTooLarge { request_bytes: 608, .. }
        ),
        "{err:?}"
    );
    // The same requests on a device that takes 1024 bytes are created; what fits every device
    // (26 entries, 412 bytes inline with atomics) is created on the small one.
    create(DEVICE, 30, 0).expect("1024 bytes take 30 entries");
    create(DEVICE, 1, 500).expect("1024 bytes take 500 inline");
    create(small, 26, 0).expect("26 entries fit 512 bytes");
    let dci = create(small, 1, 412).expect("412 inline bytes fit 512 bytes");
    assert_eq!(dci.max_inline_data(), 412);
    // Another EINVAL is left as it is: the request fits, the library refused something else.
    let params = crate::mlx5::dc::initiator::creation::plan_dci(&request(None), &dci_device(&DEVICE)).unwrap();
    let einval = std::io::Error::from_raw_os_error(libc::EINVAL);
    let kind = crate::mlx5::dc::initiator::creation::creation_error(Some(einval), &params, &dci_device(&DEVICE));
    assert!(matches!(kind, CreateDcInitiatorErrorKind::Ibverbs(_)), "{kind:?}");
}

#[test]
fn max_send_wr_and_max_inline_data_are_what_libmlx5_granted() {
    reset(DEVICE);
    let mut asked = request(None);
    asked.max_send_wr = 20;
    let dci = DcInitiator::modelled(&asked, &dci_device(&DEVICE), &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
    // A DC request with every operation and one entry takes 128 bytes (2 basic blocks); 20 of
    // them round up to a 4 KiB queue, which holds 32; the request leaves 28 bytes inline.
    assert_eq!((dci.max_send_wr(), dci.max_inline_data()), (32, 28));
    // 100 inline bytes make the request 256 bytes, which leave 156.
    asked.max_inline_data = 100;
    let dci = DcInitiator::modelled(&asked, &dci_device(&DEVICE), &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
    assert_eq!((dci.max_send_wr(), dci.max_inline_data()), (32, 156));
}

#[test]
fn the_send_queue_the_crate_plans_is_the_one_libmlx5_grants() {
    use crate::mlx5::dc::initiator::creation::plan_dci;
    let mut checked = 0;
    for send_ops in [None, Some(SendOperationFlags::Send), Some(SendOperationFlags::Write)] {
        for max_send_sge in [1, 5] {
            for max_inline_data in [0, 29, 220] {
                for max_send_wr in [1, 3, 16, 20, 100, 1000] {
                    reset(DEVICE);
                    let mut asked = request(None);
                    asked.send_ops = send_ops;
                    asked.max_send_sge = max_send_sge;
                    asked.max_inline_data = max_inline_data;
                    asked.max_send_wr = max_send_wr;
                    let planned = plan_dci(&asked, &dci_device(&DEVICE)).expect("planned");
                    let dci = DcInitiator::modelled(&asked, &dci_device(&DEVICE), &QUEUE_PAIR_VERBS, &DC_VERBS)
                        .expect("created");
                    assert_eq!(planned.granted_max_send_wr(), dci.max_send_wr(), "{asked:?}");
                    checked += usize::from(dci.max_send_wr() > max_send_wr);
                }
            }
        }
    }
    assert!(
        checked > 0,
        "no request was granted more than it asked: the comparison proves little"
    );
}

/// Posts 28 bytes inline through `post` (the default DCI's granted size: it fits), then 29:
/// refused by name before the provider, never libmlx5's `ENOMEM` (`QueueFull`).
fn inline_beyond_the_granted_28_is_refused(
    mut post: impl FnMut(usize) -> Result<(), crate::ibverbs::post_send_guard::PostSendError>,
) {
    post(28).expect("the granted size fits");
    take_calls();
    let err = post(29).unwrap_err();
    assert!(
        matches!(
            err.0,
            crate::ibverbs::post_send_guard::PostSendErrorKind::InlineDataTooLong {
                length: 29,
                max_inline_data: 28,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(take_calls(), ["start", "abort"]);
}

#[test]
fn inline_data_beyond_what_was_granted_is_its_own_error_not_a_full_queue() {
    let mut dci = brought_up(DEVICE, None);
    assert_eq!(dci.max_inline_data(), 28);
    inline_beyond_the_granted_28_is_refused(|len| {
        dci.post_send_one(9, sideway::ibverbs::queue_pair::WorkRequestFlags::Signaled, |wr| {
            // SAFETY: the model's address setter only records the pointer.
            let wr = unsafe { wr.setup_send().setup_dc_addr_raw(NonNull::dangling(), 0x42, 7) };
            sideway::ibverbs::queue_pair::SetInlineData::setup_inline_data(wr, &[0x5a; 64][..len]);
        })
    });
}

#[test]
fn a_send_queue_beyond_the_devices_basic_blocks_is_refused_naming_the_limit() {
    reset(DEVICE);
    let mut asked = request(None);
    // Within max_qp_wr, but 2 basic blocks a request: twice the blocks the device has.
    asked.max_send_wr = DEVICE.max_qp_wr;
    let err = DcInitiator::modelled(&asked, &dci_device(&DEVICE), &QUEUE_PAIR_VERBS, &DC_VERBS).unwrap_err();
    match &err {
        CreateDcInitiatorErrorKind::SendQueueTooLarge {
            requested,
            max,
            request_size,
            ..
        } => assert_eq!((*requested, *max, *request_size), (32768, 16384, 128)),
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("at most 16384"), "{err}");
    assert!(take_calls().is_empty(), "refused before mlx5dv_create_qp");
    asked.max_send_wr = 16384;
    DcInitiator::modelled(&asked, &dci_device(&DEVICE), &QUEUE_PAIR_VERBS, &DC_VERBS).expect("the limit itself fits");
}

#[test]
fn the_largest_send_queue_the_crate_plans_is_libmlx5s_largest() {
    use crate::mlx5::dc::initiator::creation::{dci_init_attributes, plan_dci};
    let mut checked = 0;
    for send_ops in [
        None,
        Some(SendOperationFlags::Send),
        Some(SendOperationFlags::Write | SendOperationFlags::Read),
    ] {
        for max_send_sge in [1, 2, 5, 16] {
            for max_inline_data in [0, 12, 28, 29, 100, 220, 500] {
                let mut asked = request(None);
                asked.send_ops = send_ops;
                asked.max_send_sge = max_send_sge;
                asked.max_inline_data = max_inline_data;
                asked.max_send_wr = DEVICE.max_qp_wr;
                let max = match plan_dci(&asked, &dci_device(&DEVICE)) {
                    Err(CreateDcInitiatorErrorKind::SendQueueTooLarge { max, .. }) => max,
                    other => panic!("{asked:?}: {other:?}"),
                };
                for (max_send_wr, fits) in [(max, true), (max + 1, false)] {
                    asked.max_send_wr = max_send_wr;
                    let params = match plan_dci(&asked, &dci_device(&DEVICE)) {
                        Ok(params) => params,
                        Err(_) if !fits => continue,
                        Err(err) => panic!("{asked:?}: {err:?}"),
                    };
                    assert!(fits, "{asked:?} planned beyond the limit");
                    let (init, mlx5) = dci_init_attributes(&params);
                    assert_eq!(rules::create_dci(&init, &mlx5, &DEVICE), Ok(()), "{asked:?}");
                    let mut beyond = params;
                    beyond.max_send_wr += 1;
                    let (init, mlx5) = dci_init_attributes(&beyond);
                    assert!(rules::create_dci(&init, &mlx5, &DEVICE).is_err(), "{asked:?} + 1");
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 84);
}

#[test]
fn the_dci_and_dct_defaults_agree_on_atomics() {
    // A device with atomics and DC atomics: the DC initiator's default operations include
    // the atomics, so the DC target's default access must let them in.
    let dci = dci_on(DEVICE, None);
    assert!(dci.send_ops_flags().contains(SendOperationFlags::AtomicFetchAndAdd));
    let mut dct = DcTarget::modelled(7, None, &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
    dct.bring_up(&DcTargetBringUp::new(1))
        .expect("bring up with the defaults");
    assert!(
        dct.access_flags().contains(AccessFlags::RemoteAtomic),
        "{:?}",
        dct.access_flags()
    );
    // A device without DC atomics: the default brings the DC target up without them (one
    // refused move to INIT, no error), while atomics listed by the caller stay an error.
    set_dc_atomics(false);
    let mut dct = DcTarget::modelled(7, None, &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
    take_calls();
    dct.bring_up(&DcTargetBringUp::new(1))
        .expect("bring up with the defaults");
    assert_eq!(
        dct.access_flags(),
        AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead
    );
    let calls = take_calls();
    assert_eq!(calls.len(), 3, "INIT refused, INIT, RTR: {calls:?}");
    assert!(
        calls[0].ends_with(&format!("refused ({})", libc::EOPNOTSUPP)),
        "{calls:?}"
    );
}

#[test]
fn remote_atomics_on_a_device_without_dc_atomics_are_their_own_error() {
    reset(DEVICE);
    set_dc_atomics(false);
    let mut dct = DcTarget::modelled(
        7,
        Some(AccessFlags::LocalWrite | AccessFlags::RemoteAtomic),
        &QUEUE_PAIR_VERBS,
        &DC_VERBS,
    )
    .expect("created");
    let err = dct.bring_up(&DcTargetBringUp::new(1)).unwrap_err();
    assert!(
        matches!(&err.0, BringUpDcTargetErrorKind::Modify(modify) if matches!(modify.0, ModifyDcTargetErrorKind::RemoteAtomicsNotSupported)),
        "{err:?}"
    );
}

#[test]
fn every_dci_creation_the_crate_plans_is_one_libmlx5_and_the_kernel_accept() {
    use crate::mlx5::dc::initiator::creation::{dci_init_attributes, plan_dci, DciInitParameters};
    let devices = [
        DEVICE,
        Device {
            atomic_cap: false,
            ..DEVICE
        },
        Device {
            dci_streams_caps: (0, 0),
            ..DEVICE
        },
        Device {
            dci_streams_caps: (2, 0),
            ..DEVICE
        },
    ];
    let operations = [
        None,
        Some(DC_SEND_OPERATIONS),
        Some(SendOperationFlags::Write | SendOperationFlags::Read),
        Some(DC_ATOMIC_OPERATIONS),
    ];
    let streams = [
        None,
        Some((2, 1)),
        Some((4, 1)),
        Some((5, 0)),
        Some((1, 2)),
        Some((0, 0)),
    ];
    let (mut planned, mut refused) = (0, 0);
    for device in devices {
        for max_send_wr in [0, 1, 16, DEVICE.max_qp_wr, DEVICE.max_qp_wr + 1] {
            for max_send_sge in [1, DEVICE.max_sge, DEVICE.max_sge + 1] {
                for send_ops in operations {
                    for streams in streams {
                        let asked = DciRequest {
                            max_send_wr,
                            max_send_sge,
                            max_inline_data: 0,
                            send_ops,
                            streams: streams.map(|(log_num_concurrent, log_num_errored)| DciStreams {
                                log_num_concurrent,
                                log_num_errored,
                            }),
                            sq_sig_all: false,
                        };
                        let what = format!("{asked:?} on {device:?}");
                        // What the library would get without the crate's checks: the request
                        // as is, every DC operation by default.
                        let naive = DciInitParameters {
                            max_send_wr,
                            max_send_sge,
                            max_inline_data: 0,
                            send_ops: send_ops.unwrap_or(DC_SEND_OPERATIONS),
                            streams: asked.streams,
                            sq_sig_all: false,
                        };
                        let (init, mlx5) = dci_init_attributes(&naive);
                        let library = rules::create_dci(&init, &mlx5, &device);
                        match plan_dci(&asked, &dci_device(&device)) {
                            Ok(params) => {
                                let (init, mlx5) = dci_init_attributes(&params);
                                assert_eq!(rules::create_dci(&init, &mlx5, &device), Ok(()), "{what}");
                                planned += 1;
                            },
                            Err(_) => refused += 1,
                        }
                        if library.is_err() && send_ops.is_some() {
                            assert!(plan_dci(&asked, &dci_device(&device)).is_err(), "{what}: {library:?}");
                        }
                    }
                }
            }
        }
    }
    assert!(planned > 0 && refused > 0, "{planned} planned, {refused} refused");
}

#[test]
fn the_dct_creation_and_every_bring_up_step_follow_the_reference_rules() {
    use crate::mlx5::dc::target::dct_init_attributes;
    let (mut init, mlx5) = dct_init_attributes(0xdc);
    // The builder sets the SRQ and CQ it requires before the call.
    init.srq = NonNull::dangling().as_ptr();
    init.recv_cq = NonNull::dangling().as_ptr();
    assert_eq!(rules::create_dct(&init, &mlx5), Ok(()));
    init.srq = std::ptr::null_mut();
    assert!(rules::create_dct(&init, &mlx5).is_err(), "the rule can refuse");
    // DCT: RESET -> INIT -> RTR with the attributes bring_up hands to ibv_modify_qp.
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    let mut state = QueuePairState::Reset;
    for src_gid_index in [None, Some(1)] {
        let params = DcTargetBringUp::new(1);
        for attr in params.attributes(access, sideway::ibverbs::device_context::Mtu::Mtu4096, src_gid_index) {
            let new = rules::new_state(state, attr.mask().bits(), attr.state());
            assert!(
                rules::modify_dct_is_ok(state, new, attr.mask().bits()),
                "{state:?} -> {new:?}"
            );
            state = new;
        }
        assert_eq!(state, QueuePairState::ReadyToReceive);
        state = QueuePairState::Reset;
    }
    // DCI: RESET -> INIT -> RTR -> RTS with the attributes bring_up hands over, then, from
    // every state, recover's move to RESET and the same steps again.
    use crate::mlx5::dc::initiator::recovery::reset_attribute;
    let mut bring_up = DcInitiatorBringUp::new(1);
    bring_up.setup_pkey_index(0).setup_max_read_atomic(4);
    let attributes = bring_up.attributes(sideway::ibverbs::device_context::Mtu::Mtu1024, 16, None);
    for from in rules::STATES {
        let reset = reset_attribute();
        let mut state = rules::new_state(from, reset.mask().bits(), reset.state());
        assert!(
            rules::modify_dci_qp_is_ok(from, state, reset.mask().bits(), rules::DciKernel::CURRENT),
            "{from:?} -> RESET"
        );
        assert!(
            !rules::modify_dci_qp_is_ok(from, state, reset.mask().bits(), rules::DciKernel::OLD),
            "old kernels refuse it"
        );
        for attr in attributes.steps() {
            let new = rules::new_state(state, attr.mask().bits(), attr.state());
            assert!(
                rules::modify_dci_qp_is_ok(state, new, attr.mask().bits(), rules::DciKernel::OLD),
                "{state:?} -> {new:?}"
            );
            state = new;
        }
        assert_eq!(state, QueuePairState::ReadyToSend);
    }
}

/// A route to a DC target, from its endpoint, as `DcEndpoint::create_ah` makes one: the target's
/// path MTU goes with it (the model has no address handles: the pointer is only recorded).
struct EndpointRoute(crate::mlx5::dc::endpoint::DcEndpoint);

impl crate::mlx5::dc::initiator::DcRoute for EndpointRoute {
    type Address = crate::mlx5::dc::initiator::DcAddress;
    type StreamAddress = crate::mlx5::dc::initiator::DcStreamAddress;

    fn address(&self, view: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64) -> Self::Address {
        // SAFETY: the model's DC setter only records the handle's address.
        unsafe { crate::mlx5::dc::initiator::DcAddress::new(view, NonNull::dangling(), dct_number, dc_key) }
    }

    fn stream_address(
        &self, view: NonNull<mlx5dv_qp_ex>, dct_number: u32, dc_key: u64, stream_id: u16,
    ) -> Self::StreamAddress {
        crate::mlx5::dc::initiator::DcStreamAddress::new(self.address(view, dct_number, dc_key), stream_id)
    }

    fn destination_path_mtu(&self) -> Option<sideway::ibverbs::device_context::Mtu> {
        self.0.path_mtu()
    }
}

#[test]
fn a_read_from_a_target_at_a_larger_mtu_is_refused_where_its_responses_would_not_reach_the_dci() {
    use crate::ibverbs::post_send_guard::PostSendErrorKind;
    use sideway::ibverbs::device_context::Mtu;
    use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
    // The DC initiator at the model port's active MTU, 1024 bytes (a 1500-byte Ethernet port).
    let mut dci = brought_up(DEVICE, None);
    assert_eq!(dci.path_mtu(), Some(Mtu::Mtu1024));
    // A DC target brought up at 4096 (a 9000-byte port): the kernel programs its DCT with that
    // MTU (`mlx5_ib_modify_dct`: `dctc.mtu`), and its endpoint says so.
    let mut dct = DcTarget::modelled(7, None, &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
    dct.bring_up(DcTargetBringUp::new(1).setup_path_mtu(Mtu::Mtu4096))
        .expect("brought up");
    let endpoint = dct.endpoint().expect("its endpoint");
    assert_eq!(endpoint.path_mtu(), Some(Mtu::Mtu4096));
    let route = EndpointRoute(endpoint);
    take_calls();
    let read = |dci: &mut DcInitiator, length: u32| {
        dci.post_send_one(1, WorkRequestFlags::Signaled, |wr| {
            let wr = wr
                .setup_read(5, 0x1000)
                .setup_dc_addr(&route, endpoint.dct_number(), endpoint.dc_key());
            // SAFETY: the model's tables only record the buffer.
            unsafe { wr.setup_sge(3, 0x2000, length) };
        })
    };
    // Its responses would come in packets of 4096 bytes, which the DC initiator's path drops
    // (RETRY_EXC on a ConnectX): refused before the provider, the rule's own answer.
    let err = read(&mut dci, 4096).unwrap_err();
    assert!(
        matches!(
            err.0,
            PostSendErrorKind::ReadResponsesTooLarge {
                length: 4096,
                path_mtu: Mtu::Mtu1024,
                responder_path_mtu: Mtu::Mtu4096,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!rules::dc_read_responses_reach_the_initiator(
        4096,
        Mtu::Mtu1024,
        Mtu::Mtu4096
    ));
    assert_eq!(take_calls(), ["start", "abort"], "nothing reached the provider");
    // A READ of the DC initiator's MTU is one packet of its length: posted.
    read(&mut dci, 1024).expect("one response packet of 1024 bytes");
    assert!(rules::dc_read_responses_reach_the_initiator(
        1024,
        Mtu::Mtu1024,
        Mtu::Mtu4096
    ));
    assert_eq!(take_calls().last().map(String::as_str), Some("complete"));
    // A target at the DC initiator's MTU (its port's, by default), as perftest's `check_mtu`
    // keeps both ends: every READ's responses reach it.
    let mut dct = DcTarget::modelled(7, None, &QUEUE_PAIR_VERBS, &DC_VERBS).expect("created");
    dct.bring_up(&DcTargetBringUp::new(1)).expect("brought up");
    let alike = EndpointRoute(dct.endpoint().expect("its endpoint"));
    assert_eq!(alike.0.path_mtu(), Some(Mtu::Mtu1024));
    dci.post_send_one(2, WorkRequestFlags::Signaled, |wr| {
        let wr = wr
            .setup_read(5, 0x1000)
            .setup_dc_addr(&alike, alike.0.dct_number(), alike.0.dc_key());
        // SAFETY: the model's tables only record the buffer.
        unsafe { wr.setup_sge(3, 0x2000, 1 << 20) };
    })
    .expect("a target at the same MTU");
}
