//! The DC queue pairs' public API on the software ConnectX (softmlx5): what the kernel's mlx5
//! driver and libmlx5 refuse at creation and at each transition, a DC initiator's errors, its
//! streams and its recovery (by reset, and by rebuilding it where the kernel refuses RESET), the
//! requests the DC post guard and libmlx5 refuse, and the exact fields of the requests it
//! posts (the device's trace of each request). Each test runs in a process of its own on the
//! device (`on_device!`), with the device's settings it names; softmlx5's own rules are those of
//! the kernel and libmlx5 (softmlx5/tests/c/dc_rules.c holds them to their source functions).
#![cfg(feature = "mlx5")]

#[path = "../softmlx5/tests/common/mod.rs"]
mod bed;

use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;

use bed::{all, Bed, Buffer, PORT};
use sideway::ibverbs::completion::{BasicCompletionQueue, WorkCompletionStatus};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    ModifyQueuePairErrorKind, PostSendError, QueuePairState, SendOperationFlags, SetInlineData, SetScatterGatherEntry,
    WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::address::AddressHandleAttribute;
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::ibverbs::queue_pair::QueuePairAttribute;
use sideway_ext::ibverbs::source_gid::{SourceGid, SourceGidErrorKind};
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::{
    BringUpDcInitiatorErrorKind, CreateDcInitiatorError, CreateDcInitiatorErrorKind, DcInitiator, DcInitiatorBringUp,
    DcInitiatorBuilder, DcRecovery, DciStreams, PlanDcInitiatorErrorKind, RecoverDcInitiatorErrorKind,
    ResetDciStreamErrorKind, DC_ATOMIC_OPERATIONS, DC_SEND_OPERATIONS,
};
use sideway_ext::mlx5::dc::target::DcTarget;
use sideway_ext::mlx5::dc::target_bring_up::{BringUpDcTargetErrorKind, DcTargetBringUp, DcTargetEndpointErrorKind};
use sideway_ext::mlx5::dc::PortNotReady;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;
use softmlx5::event_kind;

const WAIT: Duration = Duration::from_secs(5);

/// A protection domain and a send CQ on `softmlx5_0`.
struct Device {
    context: Arc<DeviceContext>,
    pd: Arc<ProtectionDomain>,
    cq: Arc<BasicCompletionQueue>,
}

fn open() -> Device {
    let context = bed::open();
    let pd = context.alloc_pd().expect("alloc_pd");
    let cq = context.create_cq_builder().setup_cqe(256).build().expect("CQ");
    Device { context, pd, cq }
}

impl Device {
    /// A DC initiator builder with this device's CQ and 16 requests of one entry, then `f`.
    fn builder(&self, f: impl FnOnce(&mut DcInitiatorBuilder)) -> DcInitiatorBuilder {
        let mut builder = self.pd.create_dci_builder();
        builder.setup_send_cq(self.cq.clone()).setup_max_send_wr(16);
        f(&mut builder);
        builder
    }

    fn dci(&self, f: impl FnOnce(&mut DcInitiatorBuilder)) -> Result<DcInitiator, CreateDcInitiatorError> {
        self.builder(f).build()
    }

    /// A DC initiator with `streams`, brought up.
    fn brought_up(&self, streams: Option<DciStreams>) -> DcInitiator {
        let mut dci = self
            .dci(|builder| {
                if let Some(streams) = streams {
                    builder.setup_dci_streams(streams);
                }
            })
            .expect("created");
        dci.bring_up(&DcInitiatorBringUp::new(PORT)).expect("brought up");
        dci
    }

    /// A DC target on an SRQ with `access` (the default where `None`).
    fn dct(&self, access: Option<AccessFlags>) -> DcTarget {
        let srq = {
            use sideway_ext::ibverbs::extension::ProtectionDomainExt;
            self.pd.create_srq_builder().setup_max_wr(16).build().expect("SRQ")
        };
        let mut builder = self.pd.create_dct_builder();
        builder
            .setup_recv_cq(self.cq.clone())
            .setup_srq(&srq)
            .setup_dc_key(bed::DC_KEY);
        if let Some(access) = access {
            builder.setup_access_flags(access);
        }
        builder.build().expect("DC target")
    }

    fn buffer(&self, len: usize) -> Buffer {
        Buffer::new(&self.pd, len, all())
    }

    /// The address handle of `endpoint` from `dci`'s source GID.
    fn ah(&self, dci: &DcInitiator, endpoint: &DcEndpoint) -> Arc<AddressHandle> {
        let gid_index = dci.source_gid().map_or(0, |entry| entry.index());
        endpoint.create_ah(&self.pd, PORT, gid_index).expect("address handle")
    }
}

/// Whether the library refused the DC initiator with `EINVAL`.
fn is_einval(err: &CreateDcInitiatorError) -> bool {
    matches!(&err.0, CreateDcInitiatorErrorKind::Ibverbs(err) if err.raw_os_error() == Some(libc::EINVAL))
}

fn streams(log_num_concurrent: u8, log_num_errored: u8) -> DciStreams {
    DciStreams {
        log_num_concurrent,
        log_num_errored,
    }
}

fn to(state: QueuePairState) -> QueuePairAttribute {
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(state);
    attr
}

/// The requests the device saw leave DC initiator `qp_number` since the trace was last cleared.
fn requests(qp_number: u32) -> Vec<softmlx5::Event> {
    bed::device()
        .trace()
        .into_iter()
        .filter(|event| event.kind == event_kind::REQUEST && event.qp_number == qp_number)
        .collect()
}

/// Posts one signaled WRITE of `len` bytes from `local` to `remote` at `endpoint` (on `stream`,
/// if any) and returns its completion's status.
fn write(
    device: &Device, dci: &mut DcInitiator, endpoint: &DcEndpoint, stream: Option<u16>, local: &Buffer,
    remote: &Buffer, len: u32,
) -> Option<WorkCompletionStatus> {
    let ah = device.ah(dci, endpoint);
    let (dct_number, dc_key) = (endpoint.dct_number(), endpoint.dc_key());
    let (lkey, from, rkey, to) = (local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0));
    dci.post_send_one(7, WorkRequestFlags::Signaled, |wr| {
        let wr = wr.setup_write(rkey, to);
        // SAFETY: both buffers outlive the completion, polled below.
        unsafe {
            match stream {
                Some(stream) => wr
                    .setup_dc_addr_stream(&ah, dct_number, dc_key, stream)
                    .setup_sge(lkey, from, len),
                None => wr.setup_dc_addr(&ah, dct_number, dc_key).setup_sge(lkey, from, len),
            }
        }
    })
    .expect("post a WRITE");
    let wcs = bed::wait(device.cq.as_ref(), 1, WAIT);
    assert_eq!(wcs.len(), 1, "one completion: {wcs:?}");
    wcs[0].status()
}

/// A DC target brought up on `device` and its endpoint.
fn target(device: &Device, bring_up: impl FnOnce(&mut DcTargetBringUp)) -> (DcTarget, DcEndpoint) {
    let mut dct = device.dct(None);
    let mut params = DcTargetBringUp::new(PORT);
    bring_up(&mut params);
    dct.bring_up(&params).expect("DC target to RTR");
    let endpoint = dct.endpoint().expect("endpoint");
    (dct, endpoint)
}

/// One WRITE from `dci` reaches a fresh target: the DC initiator works.
fn assert_writes(device: &Device, dci: &mut DcInitiator) {
    let (_dct, endpoint) = target(device, |_| {});
    let (local, remote) = (device.buffer(64), device.buffer(64));
    assert_eq!(
        write(device, dci, &endpoint, None, &local, &remote, 64),
        Some(WorkCompletionStatus::Success)
    );
}

// ---- transitions ----

#[test]
fn a_dci_is_brought_up_and_each_refused_transition_is_explained_by_the_table() {
    on_device!();
    let device = open();
    let mut dci = device.dci(|_| {}).expect("created");
    // RESET -> ERR: refused by the kernel's modify_dci_qp_is_ok, its EINVAL explained by the
    // crate's table (its own error, not the library's bare EINVAL).
    let err = dci.modify(&to(QueuePairState::Error)).unwrap_err();
    assert!(
        matches!(err.0, ModifyQueuePairErrorKind::InvalidTransition { .. }),
        "{err:?}"
    );
    assert_eq!(dci.query_state().unwrap(), QueuePairState::Reset, "the device's state");
    dci.bring_up(&DcInitiatorBringUp::new(PORT)).expect("bring up");
    assert_eq!(dci.query_state().unwrap(), QueuePairState::ReadyToSend);
    // RTS -> RTR, RTS -> INIT: no such transition.
    for state in [QueuePairState::ReadyToReceive, QueuePairState::Init] {
        assert!(matches!(
            dci.modify(&to(state)).unwrap_err().0,
            ModifyQueuePairErrorKind::InvalidTransition { .. }
        ));
    }
    // RTS -> RTS with the minimum RNR timer is allowed (the device takes it); with a timeout it
    // is not.
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
    let err = dci.modify(&no_state).unwrap_err();
    assert!(
        matches!(err.0, ModifyQueuePairErrorKind::InvalidAttributeMask { .. }),
        "the state named as needed: {err:?}"
    );
    assert_eq!(dci.query_state().unwrap(), QueuePairState::ReadyToSend);
    // INIT -> INIT with the port, on a new DCI.
    let mut dci = device.dci(|_| {}).expect("created");
    let mut init = to(QueuePairState::Init);
    init.setup_pkey_index(0).setup_port(PORT);
    dci.modify(&init).expect("RESET -> INIT");
    let mut again = to(QueuePairState::Init);
    again.setup_port(PORT);
    dci.modify(&again).expect("INIT -> INIT with the port");
    assert_eq!(dci.query_state().unwrap(), QueuePairState::Init);
}

#[test]
fn the_rtr_address_vector_is_sent_only_when_asked_and_an_old_kernel_says_so() {
    // InfiniBand, where an address vector need not be global.
    on_device!(("SOFTMLX5_LINK", "ib"), ("SOFTMLX5_STACK", "no-dci-reset"));
    let device = open();
    let mut av = AddressHandleAttribute::new();
    av.setup_port(PORT).setup_service_level(3);
    let mut params = DcInitiatorBringUp::new(PORT);
    params.setup_rtr_address_vector(av);
    // A kernel whose modify_dci_qp_is_ok predates the AV: its EINVAL is named.
    let mut dci = device.dci(|_| {}).expect("created");
    let err = dci.bring_up(&params).unwrap_err();
    assert!(
        matches!(err.0, BringUpDcInitiatorErrorKind::RtrAddressVectorRefused { .. }),
        "{err:?}"
    );
    // It names the first kernel that takes one (Linux v5.0), so the user knows what to run.
    assert!(err.0.to_string().contains("kernels before Linux 5.0"), "{}", err.0);
    assert_eq!(dci.query_state().unwrap(), QueuePairState::Init);
    // By default no address vector at RTR: the same kernel brings the DCI up.
    let mut dci = device.dci(|_| {}).expect("created");
    dci.bring_up(&DcInitiatorBringUp::new(PORT))
        .expect("no AV: every kernel");
}

#[test]
fn the_rtr_address_vector_is_taken_by_the_current_kernel() {
    on_device!(("SOFTMLX5_LINK", "ib"));
    let device = open();
    let mut av = AddressHandleAttribute::new();
    av.setup_port(PORT).setup_service_level(3);
    let mut params = DcInitiatorBringUp::new(PORT);
    params.setup_rtr_address_vector(av);
    let mut dci = device.dci(|_| {}).expect("created");
    dci.bring_up(&params).expect("the current kernel takes the AV at RTR");
    assert_eq!(dci.query_state().unwrap(), QueuePairState::ReadyToSend);
}

#[test]
fn an_rtr_address_vector_is_checked_before_an_old_kernel_is_blamed() {
    on_device!(("SOFTMLX5_STACK", "no-dci-reset"));
    let device = open();
    let gid = sideway::ibverbs::address::Gid::from(std::net::Ipv6Addr::from([0xfe80, 0, 0, 0, 0, 0, 0, 1]));
    let with = |av: AddressHandleAttribute| {
        let mut params = DcInitiatorBringUp::new(PORT);
        params.setup_rtr_address_vector(av);
        params
    };
    let mut not_global = AddressHandleAttribute::new();
    not_global.setup_port(PORT).setup_service_level(3);
    // softmlx5's RoCE table: slots 0 to 3 set, 5 empty.
    let mut empty_slot = AddressHandleAttribute::new();
    empty_slot
        .setup_port(PORT)
        .setup_grh_dest_gid(&gid)
        .setup_grh_src_gid_index(5);
    let mut good = empty_slot;
    good.setup_grh_src_gid_index(3);
    // On RoCE, on an old kernel: the address vector's own faults are named, before any
    // transition, and only a sound one is put down to the kernel.
    for (av, want) in [(not_global, "not global"), (empty_slot, "empty slot")] {
        let mut dci = device.dci(|_| {}).expect("created");
        let err = dci.bring_up(&with(av)).unwrap_err();
        let named = match &err.0 {
            BringUpDcInitiatorErrorKind::RtrAddressVectorNotGlobal { port: 1 } => "not global",
            BringUpDcInitiatorErrorKind::RtrAddressVectorGid(gid)
                if matches!(gid.0, SourceGidErrorKind::EmptySlot { port: 1, index: 5 }) =>
            {
                "empty slot"
            },
            _ => "something else",
        };
        assert_eq!(named, want, "{err:?}");
        assert_eq!(
            dci.query_state().unwrap(),
            QueuePairState::Reset,
            "{want}: before any transition"
        );
    }
    let mut dci = device.dci(|_| {}).expect("created");
    let err = dci.bring_up(&with(good)).unwrap_err();
    assert!(
        matches!(err.0, BringUpDcInitiatorErrorKind::RtrAddressVectorRefused { .. }),
        "{err:?}"
    );
}

#[test]
fn a_global_rtr_address_vector_with_a_set_gid_is_taken_by_the_current_kernel() {
    on_device!();
    let device = open();
    let gid = sideway::ibverbs::address::Gid::from(std::net::Ipv6Addr::from([0xfe80, 0, 0, 0, 0, 0, 0, 1]));
    let mut good = AddressHandleAttribute::new();
    good.setup_port(PORT)
        .setup_grh_dest_gid(&gid)
        .setup_grh_src_gid_index(3);
    let mut params = DcInitiatorBringUp::new(PORT);
    params.setup_rtr_address_vector(good);
    let mut dci = device.dci(|_| {}).expect("created");
    dci.bring_up(&params).expect("a global address vector with a set GID");
    assert_eq!(dci.query_state().unwrap(), QueuePairState::ReadyToSend);
}

/// The `max_rd_atomic` the device holds for `dci` (`ibv_query_qp`).
fn given_max_rd_atomic(dci: &DcInitiator) -> u8 {
    // SAFETY: zeroes are valid for both plain C structs.
    let mut attr: rdma_mummy_sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut init: rdma_mummy_sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the queue pair is alive; both structs are writable. (A query of the device, not of
    // the crate's state.)
    let ret = unsafe {
        rdma_mummy_sys::ibv_query_qp(
            dci.qp().as_ptr(),
            &mut attr,
            rdma_mummy_sys::ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0 as i32,
            &mut init,
        )
    };
    assert_eq!(ret, 0, "ibv_query_qp");
    attr.max_rd_atomic
}

#[test]
fn a_dcis_depth_is_capped_by_max_dc_init_rd_atom_as_validate_rd_atomic_bounds_it() {
    on_device!();
    let device = open();
    // softmlx5 reports 16 for both max_dc_rd_atom and max_dc_init_rd_atom.
    let mut dci = device.dci(|_| {}).expect("created");
    assert_eq!(dci.max_read_atomic(), 16);
    dci.bring_up(&DcInitiatorBringUp::new(PORT)).expect("bring up");
    assert_eq!(given_max_rd_atomic(&dci), 16, "the default depth");
    // Asked for more, it is capped; asked for less, it gets what it asked.
    for (asked, given) in [(64, 16), (2, 2)] {
        let mut dci = device.dci(|_| {}).expect("created");
        let mut params = DcInitiatorBringUp::new(PORT);
        params.setup_max_read_atomic(asked);
        dci.bring_up(&params).expect("bring up");
        assert_eq!(given_max_rd_atomic(&dci), given, "asked {asked}");
    }
    // The kernel's bound (validate_rd_atomic), past the crate's cap: the device refuses 17.
    let mut dci = device.dci(|_| {}).expect("created");
    let mut init = to(QueuePairState::Init);
    init.setup_pkey_index(0).setup_port(PORT);
    dci.modify(&init).unwrap();
    let mut rtr = to(QueuePairState::ReadyToReceive);
    rtr.setup_path_mtu(Mtu::Mtu1024);
    dci.modify(&rtr).unwrap();
    let mut rts = to(QueuePairState::ReadyToSend);
    rts.setup_sq_psn(1)
        .setup_timeout(14)
        .setup_retry_cnt(7)
        .setup_rnr_retry(7)
        .setup_max_read_atomic(17);
    let err = dci.modify(&rts).unwrap_err();
    assert!(
        matches!(&err.0, ModifyQueuePairErrorKind::Ibverbs(errno) if errno.raw_os_error() == Some(libc::EINVAL)),
        "{err:?}"
    );
    rts.setup_max_read_atomic(16);
    dci.modify(&rts).expect("the bound itself");
}

// ---- recovery ----

#[test]
fn recover_after_an_error_goes_through_reset() {
    on_device!();
    let device = open();
    let mut dci = device.brought_up(None);
    let n = dci.qp_number();
    bed::device().error_initiator(n).unwrap();
    assert_eq!(dci.query_state().unwrap(), QueuePairState::Error);
    assert_eq!(dci.recover().expect("recover"), DcRecovery::Reset);
    assert_eq!(dci.qp_number(), n, "the same queue pair");
    assert_eq!(dci.query_state().unwrap(), QueuePairState::ReadyToSend);
    assert_writes(&device, &mut dci);
}

#[test]
fn recover_rebuilds_the_dci_where_the_kernel_refuses_reset_and_the_handle_stays_valid() {
    on_device!(("SOFTMLX5_STACK", "no-dci-reset"));
    let device = open();
    let mut dci = device.brought_up(None);
    let old = dci.qp_number();
    bed::device().error_initiator(old).unwrap();
    dci.query_state().unwrap();
    let recovery = dci.recover().expect("recover by rebuilding");
    let new = dci.qp_number();
    assert_eq!(
        recovery,
        DcRecovery::Rebuilt {
            previous_qp_number: old
        }
    );
    assert_ne!(new, old);
    assert_eq!(dci.state(), QueuePairState::ReadyToSend);
    assert_eq!(dci.query_state().unwrap(), QueuePairState::ReadyToSend, "the device's");
    // Posting goes to the new queue pair, with its DC setter: the device sees the request leave
    // the new DC initiator.
    bed::device().clear_trace();
    assert_writes(&device, &mut dci);
    assert_eq!(requests(new).len(), 1);
    assert!(requests(old).is_empty());
    // The rebuilt DCI recovers again (the old kernel still refuses RESET).
    bed::device().error_initiator(new).unwrap();
    dci.query_state().unwrap();
    assert!(matches!(dci.recover().unwrap(), DcRecovery::Rebuilt { previous_qp_number } if previous_qp_number == new));
    assert_writes(&device, &mut dci);
}

#[test]
fn recover_before_bring_up_is_refused() {
    on_device!();
    let device = open();
    let mut dci = device.dci(|_| {}).expect("created");
    assert!(matches!(
        dci.recover().unwrap_err().0,
        RecoverDcInitiatorErrorKind::NotBroughtUp
    ));
    assert_eq!(dci.query_state().unwrap(), QueuePairState::Reset);
}

// ---- streams ----

#[test]
fn a_stream_is_reset_after_its_error_and_every_id_that_can_be_posted_can_be_reset() {
    on_device!();
    let device = open();
    let mut dci = device.brought_up(Some(streams(2, 1)));
    let (_dct, endpoint) = target(&device, |_| {});
    let (local, remote) = (device.buffer(64), device.buffer(64));
    // Stream 9 is beyond the 4 concurrent streams; setup_dc_addr_stream takes it, so the reset
    // must too (pyverbs' generate_stream_id does the same).
    bed::device().error_stream(dci.qp_number(), 9).unwrap();
    assert_eq!(
        dci.query_state().unwrap(),
        QueuePairState::ReadyToSend,
        "one errored stream; two would move it to ERR"
    );
    // The errored stream's requests are flushed; the others go on.
    assert_eq!(
        write(&device, &mut dci, &endpoint, Some(9), &local, &remote, 64),
        Some(WorkCompletionStatus::WorkRequestFlushedError)
    );
    assert_eq!(
        write(&device, &mut dci, &endpoint, Some(1), &local, &remote, 64),
        Some(WorkCompletionStatus::Success)
    );
    dci.reset_stream(9).expect("reset after the flush");
    assert_eq!(
        write(&device, &mut dci, &endpoint, Some(9), &local, &remote, 64),
        Some(WorkCompletionStatus::Success),
        "the stream works again"
    );
    assert_eq!(dci.query_state().unwrap(), QueuePairState::ReadyToSend);
}

#[test]
fn waiting_for_an_error_with_no_timeout_waits_until_err() {
    on_device!();
    let device = open();
    let mut dci = device.brought_up(Some(streams(2, 0)));
    bed::device().error_stream(dci.qp_number(), 0).unwrap();
    assert_eq!(dci.wait_for_error(Duration::MAX).unwrap(), QueuePairState::Error);
}

#[test]
fn a_whole_dci_error_after_too_many_stream_errors_is_waited_for_and_recovered() {
    on_device!();
    let device = open();
    let mut dci = device.brought_up(Some(streams(2, 1)));
    let n = dci.qp_number();
    bed::device().error_stream(n, 0).unwrap();
    bed::device().error_stream(n, 1).unwrap();
    assert_eq!(
        dci.wait_for_error(Duration::from_secs(1)).unwrap(),
        QueuePairState::Error
    );
    // A stream reset now is its own error, and never reaches libmlx5 (whose EOPNOTSUPP would be
    // DeviceCannotResetStreams).
    match dci.reset_stream(1).unwrap_err().0 {
        ResetDciStreamErrorKind::NotReadyToSend { state } => assert_eq!(state, QueuePairState::Error),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(dci.recover().unwrap(), DcRecovery::Reset);
    assert_eq!(dci.query_state().unwrap(), QueuePairState::ReadyToSend);
    assert_writes(&device, &mut dci);
}

#[test]
fn exactly_two_to_the_log_num_errored_errored_streams_move_the_dci_to_err() {
    // pyverbs `test_dc_stream_qp_recovery`: 1 << log_num_errored errors, then ERR.
    on_device!();
    let device = open();
    for log_num_errored in 0..=3u8 {
        let mut dci = device.brought_up(Some(streams(4, log_num_errored)));
        let n = dci.qp_number();
        let allowed = (1u16 << log_num_errored) - 1;
        for stream in 0..allowed {
            bed::device().error_stream(n, stream).unwrap();
        }
        assert_eq!(
            dci.query_state().unwrap(),
            QueuePairState::ReadyToSend,
            "{allowed} errored streams, log_num_errored {log_num_errored}"
        );
        bed::device().error_stream(n, allowed).unwrap();
        assert_eq!(
            dci.wait_for_error(Duration::from_secs(1)).unwrap(),
            QueuePairState::Error,
            "{} errored streams, log_num_errored {log_num_errored}",
            allowed + 1
        );
    }
}

#[test]
fn a_stream_reset_racing_the_move_to_err_is_not_ready_to_send() {
    on_device!();
    let device = open();
    let mut dci = device.brought_up(Some(streams(2, 1)));
    // The device moved to ERR; the crate's state still says RTS, so the call is made, libmlx5
    // refuses it, and a query tells why.
    bed::device().error_initiator(dci.qp_number()).unwrap();
    assert_eq!(dci.state(), QueuePairState::ReadyToSend);
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
fn a_device_without_stream_channels_has_no_streams() {
    // ConnectX-5: mlx5dv_query_device reports zeros.
    on_device!(("SOFTMLX5_PROFILE", "cx5"));
    let device = open();
    let builder = device.builder(|builder| {
        builder.setup_dci_streams(streams(1, 0));
    });
    let err = builder.planned_max_send_wr().unwrap_err();
    assert!(
        matches!(err.0, PlanDcInitiatorErrorKind::DciStreamsNotSupported),
        "the plan names it: {err:?}"
    );
    assert!(err.0.to_string().contains("max_log_num_concurent"), "{}", err.0);
    // build leaves it to libmlx5's `create_qp`: EINVAL.
    let err = builder.build().unwrap_err();
    assert!(is_einval(&err), "{err:?}");
    // The capability summary says the same.
    let capabilities = sideway_ext::mlx5::device_context::Mlx5DeviceContext::new(device.context.clone())
        .query_dc_capabilities()
        .expect("capabilities");
    assert_eq!(capabilities.dci_streams(), None);
}

#[test]
fn a_dc_initiator_without_streams_has_none_to_reset() {
    on_device!();
    let device = open();
    let mut plain = device.brought_up(None);
    assert!(matches!(
        plain.reset_stream(0).unwrap_err().0,
        ResetDciStreamErrorKind::NoStreams
    ));
}

// ---- creation ----

#[test]
fn the_default_operations_are_every_dc_operation_on_a_device_with_atomics() {
    on_device!();
    let device = open();
    let dci = device.dci(|_| {}).expect("created");
    assert_eq!(dci.send_ops_flags(), DC_SEND_OPERATIONS);
}

#[test]
fn max_send_wr_and_max_inline_data_are_what_libmlx5_granted() {
    on_device!();
    let device = open();
    let dci = device.dci(|builder| {
        builder.setup_max_send_wr(20);
    });
    let dci = dci.expect("created");
    // A DC request with every operation and one entry takes 128 bytes (2 basic blocks); 20 of
    // them round up to a 4 KiB queue, which holds 32; the request leaves 28 bytes inline.
    assert_eq!((dci.max_send_wr(), dci.max_inline_data()), (32, 28));
    // 100 inline bytes make the request 256 bytes, which leave 156.
    let dci = device.dci(|builder| {
        builder.setup_max_send_wr(20).setup_max_inline_data(100);
    });
    let dci = dci.expect("created");
    assert_eq!((dci.max_send_wr(), dci.max_inline_data()), (32, 156));
}

#[test]
fn max_send_sge_and_sq_sig_all_are_those_created_with() {
    on_device!();
    let device = open();
    for (max_send_sge, sq_sig_all) in [(1, false), (3, true)] {
        let dci = device.dci(|builder| {
            builder.setup_max_send_sge(max_send_sge).setup_sq_sig_all(sq_sig_all);
        });
        let dci = dci.expect("created");
        assert_eq!((dci.max_send_sge(), dci.sq_sig_all()), (max_send_sge, sq_sig_all));
    }
}

#[test]
fn the_send_queue_the_crate_plans_is_the_one_libmlx5_grants() {
    on_device!();
    let device = open();
    let mut more = 0;
    for send_ops in [None, Some(SendOperationFlags::Send), Some(SendOperationFlags::Write)] {
        for max_send_sge in [1, 5] {
            for max_inline_data in [0, 29, 220] {
                for max_send_wr in [1, 3, 16, 20, 100, 1000] {
                    let builder = device.builder(|builder| {
                        builder
                            .setup_max_send_wr(max_send_wr)
                            .setup_max_send_sge(max_send_sge)
                            .setup_max_inline_data(max_inline_data);
                        if let Some(send_ops) = send_ops {
                            builder.setup_send_ops_flags(send_ops);
                        }
                    });
                    let planned = builder.planned_max_send_wr().expect("planned");
                    let dci = builder.build().expect("created");
                    let what = format!("{send_ops:?} {max_send_sge} {max_inline_data} {max_send_wr}");
                    assert_eq!(planned, dci.max_send_wr(), "{what}");
                    more += usize::from(dci.max_send_wr() > max_send_wr);
                }
            }
        }
    }
    assert!(
        more > 0,
        "no request was granted more than it asked: the comparison proves little"
    );
}

#[test]
fn a_send_queue_beyond_the_devices_basic_blocks_is_refused_naming_the_limit() {
    on_device!();
    let device = open();
    // Within max_qp_wr (32768), but 2 basic blocks a request: twice the blocks the device has.
    let builder = device.builder(|builder| {
        builder.setup_max_send_wr(32768);
    });
    let err = builder.planned_max_send_wr().unwrap_err();
    match &err.0 {
        PlanDcInitiatorErrorKind::SendQueueTooLarge {
            requested,
            max,
            request_size,
            ..
        } => assert_eq!((*requested, *max, *request_size), (32768, 16384, 128)),
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.0.to_string().contains("at most 16384"), "{}", err.0);
    // libmlx5 refuses it too (`mlx5_calc_sq_size`).
    let err = builder.build().unwrap_err();
    assert!(matches!(err.0, CreateDcInitiatorErrorKind::Ibverbs(_)), "{err:?}");
    let dci = device.dci(|builder| {
        builder.setup_max_send_wr(16384);
    });
    dci.expect("the limit itself fits");
}

#[test]
fn the_largest_send_queue_the_crate_plans_is_libmlx5s_largest() {
    on_device!();
    let device = open();
    let mut checked = 0;
    for send_ops in [
        None,
        Some(SendOperationFlags::Send),
        Some(SendOperationFlags::Write | SendOperationFlags::Read),
    ] {
        for max_send_sge in [1, 2, 5, 16] {
            for max_inline_data in [0, 12, 28, 29, 100, 220] {
                let set = |builder: &mut DcInitiatorBuilder| {
                    builder
                        .setup_max_send_sge(max_send_sge)
                        .setup_max_inline_data(max_inline_data);
                    if let Some(send_ops) = send_ops {
                        builder.setup_send_ops_flags(send_ops);
                    }
                };
                let what = format!("{send_ops:?} {max_send_sge} {max_inline_data}");
                let planned = device
                    .builder(|builder| {
                        set(builder);
                        builder.setup_max_send_wr(32768);
                    })
                    .planned_max_send_wr();
                let max = match planned.map_err(|err| err.0) {
                    Err(PlanDcInitiatorErrorKind::SendQueueTooLarge { max, .. }) => max,
                    other => panic!("{what}: {other:?}"),
                };
                let dci = device.dci(|builder| {
                    set(builder);
                    builder.setup_max_send_wr(max);
                });
                dci.unwrap_or_else(|err| panic!("{what}: the device refused the crate's largest, {max}: {err:?}"));
                let beyond = device.dci(|builder| {
                    set(builder);
                    builder.setup_max_send_wr(max + 1);
                });
                assert!(
                    matches!(beyond.map_err(|err| err.0), Err(CreateDcInitiatorErrorKind::Ibverbs(_))),
                    "{what}: libmlx5 refuses {}, beyond the largest",
                    max + 1
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 72);
}

#[test]
fn the_plan_refuses_exactly_what_the_library_refuses() {
    // Every request the crate plans is one libmlx5 and the kernel accept, and every one they
    // refuse the plan refuses, naming why.
    for profile in ["cx5", "cx6dx"] {
        let status = softmlx5::rerun_on_device(&[("SOFTMLX5_PROFILE", profile)]);
        if let Some(status) = status {
            assert!(status.success(), "{profile}: {status}");
            continue;
        }
        let device = open();
        let operations = [
            None,
            Some(DC_SEND_OPERATIONS),
            Some(SendOperationFlags::Write | SendOperationFlags::Read),
            Some(DC_ATOMIC_OPERATIONS),
        ];
        let stream_cases = [
            None,
            Some((2, 1)),
            Some((4, 1)),
            Some((5, 0)),
            Some((1, 4)),
            Some((0, 0)),
        ];
        let (mut created, mut refused) = (0, 0);
        for max_send_wr in [0, 1, 16, 32768, 32769] {
            for max_send_sge in [1, 30, 31] {
                for send_ops in operations {
                    for stream in stream_cases {
                        let builder = device.builder(|builder| {
                            builder.setup_max_send_wr(max_send_wr).setup_max_send_sge(max_send_sge);
                            if let Some(send_ops) = send_ops {
                                builder.setup_send_ops_flags(send_ops);
                            }
                            if let Some((concurrent, errored)) = stream {
                                builder.setup_dci_streams(streams(concurrent, errored));
                            }
                        });
                        let what = format!("{max_send_wr} {max_send_sge} {send_ops:?} {stream:?}");
                        match (builder.planned_max_send_wr(), builder.build()) {
                            (Ok(_), Ok(_)) => created += 1,
                            (Err(_), Err(_)) => refused += 1,
                            (Ok(_), Err(err)) => panic!("{what}: the library refused what the crate planned: {err:?}"),
                            (Err(err), Ok(_)) => panic!("{what}: the plan refused what the library took: {err:?}"),
                        }
                    }
                }
            }
        }
        assert!(created > 0 && refused > 0, "{created} created, {refused} refused");
        return;
    }
}

#[test]
fn a_request_beyond_the_devices_send_request_is_refused_by_libmlx5_and_named() {
    // ConnectX-6 Dx on softmlx5: send requests of 1024 bytes at most (libmlx5's
    // `max_sq_desc_sz`), DC requests of 512. libmlx5 checks only the former (EINVAL); the DC
    // initiator checks nothing device-specific before it.
    on_device!(("SOFTMLX5_PROFILE", "cx6dx"));
    let device = open();
    let create = |sge: u32, inline: u32| {
        device.dci(|builder| {
            builder.setup_max_send_sge(sge).setup_max_inline_data(inline);
        })
    };
    // 1000 bytes inline with the atomics' overhead: 96 + (4 + 1000, padded to 16) = 1104.
    let err = create(1, 1000).unwrap_err();
    assert!(is_einval(&err), "{err:?}");
    // What fits 1024 bytes is created, beyond the DC limit too (the device refuses it at post).
    create(27, 0).expect("528 bytes fit 1024 bytes");
    let dci = create(1, 924).expect("924 inline bytes fit 1024 bytes");
    assert_eq!(dci.max_inline_data(), 924);
}

/// A DC initiator on a thread domain of its own is destroyed before it; one swapped into another
/// owner (through `DerefMut`) makes both owners leak their thread domains rather than deallocate
/// one under a live queue pair (libmlx5 and softmlx5 answer `EBUSY`, which would panic in drop).
#[test]
fn a_dc_initiator_on_a_thread_domain_is_destroyed_first_and_a_swapped_one_leaks_it() {
    on_device!();
    let device = open();
    let builder = device.builder(|_| {});
    let dci = builder.build_on_thread_domain().expect("on a thread domain");
    assert!(dci.is_on_its_thread_domain());
    drop(dci);
    let mut first = builder.build_on_thread_domain().expect("on a thread domain");
    let mut second = builder.build_on_thread_domain().expect("on another");
    assert!(first.is_on_its_thread_domain() && second.is_on_its_thread_domain());
    std::mem::swap(&mut *first, &mut *second);
    assert!(!first.is_on_its_thread_domain() && !second.is_on_its_thread_domain());
    drop(first);
    drop(second);
}

#[test]
fn a_request_within_a_device_without_a_dc_limit_is_created() {
    // ConnectX-5 on softmlx5: DC requests as large as any (1024 bytes).
    on_device!(("SOFTMLX5_PROFILE", "cx5"));
    let device = open();
    let create = |sge: u32, inline: u32| {
        device.dci(|builder| {
            builder.setup_max_send_sge(sge).setup_max_inline_data(inline);
        })
    };
    create(30, 0).expect("1024 bytes take 30 entries");
    create(1, 500).expect("1024 bytes take 500 inline");
}

// ---- DC targets ----

#[test]
fn a_dct_goes_reset_init_rtr_only_and_is_torn_down_by_dropping_it() {
    on_device!();
    let device = open();
    let mut dct = device.dct(Some(AccessFlags::LocalWrite | AccessFlags::RemoteWrite));
    assert!(matches!(
        dct.endpoint().unwrap_err().0,
        DcTargetEndpointErrorKind::NoDctNumber
    ));
    dct.bring_up(&DcTargetBringUp::new(PORT)).expect("bring up");
    assert_eq!(dct.state(), QueuePairState::ReadyToReceive);
    let dct_number = dct.dct_number().expect("a number at RTR");
    for state in [
        QueuePairState::Reset,
        QueuePairState::Error,
        QueuePairState::ReadyToSend,
    ] {
        let err = dct.modify(&to(state)).unwrap_err();
        match &err.0 {
            ModifyQueuePairErrorKind::InvalidTransition {
                cur_state, next_state, ..
            } => assert_eq!((*cur_state, *next_state), (QueuePairState::ReadyToReceive, state)),
            other => panic!("unexpected {other:?}"),
        }
    }
    // Still there: a WRITE reaches it.
    let endpoint = dct.endpoint().expect("endpoint");
    let mut dci = device.brought_up(None);
    let (local, remote) = (device.buffer(64), device.buffer(64));
    assert_eq!(
        write(&device, &mut dci, &endpoint, None, &local, &remote, 64),
        Some(WorkCompletionStatus::Success)
    );
    // Dropped: destroyed, its requests find no target.
    drop(dct);
    bed::device().clear_trace();
    let ah = device.ah(&dci, &endpoint);
    let (lkey, from, rkey, to) = (local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0));
    dci.post_send_one(8, WorkRequestFlags::Signaled, |wr| {
        // SAFETY: both buffers outlive the test.
        unsafe {
            wr.setup_write(rkey, to)
                .setup_dc_addr(&ah, dct_number, bed::DC_KEY)
                .setup_sge(lkey, from, 64)
        }
    })
    .expect("post");
    let deadline = std::time::Instant::now() + WAIT;
    while !bed::device().trace().iter().any(|event| {
        event.kind == event_kind::DROPPED && event.peer == dct_number && event.status == softmlx5::drop::NO_TARGET
    }) {
        assert!(std::time::Instant::now() < deadline, "no drop for the destroyed target");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_dci_and_dct_defaults_agree_on_atomics() {
    // A device with atomics and DC atomics: the DC initiator's default operations include the
    // atomics, so the DC target's default access must let them in, and one does.
    on_device!();
    let mut bed = Bed::with(all(), |_| {}, |_| {});
    assert!(bed.dci.send_ops_flags().contains(SendOperationFlags::AtomicFetchAndAdd));
    let device = open();
    let mut dct = device.dct(None);
    dct.bring_up(&DcTargetBringUp::new(PORT))
        .expect("bring up with the defaults");
    assert!(
        dct.access_flags().contains(AccessFlags::RemoteAtomic),
        "{:?}",
        dct.access_flags()
    );
    let local = bed.buffer(8);
    let remote = bed.buffer(8);
    let (ah, dct_number, dc_key) = (bed.ah.clone(), bed.dct_number(), bed.endpoint.dc_key());
    bed.dci
        .post_send_one(1, WorkRequestFlags::Signaled, |wr| {
            // SAFETY: both buffers outlive the completion.
            unsafe {
                wr.setup_atomic_fetch_add(remote.mr.rkey(), remote.addr(0), 1)
                    .setup_dc_addr(&ah, dct_number, dc_key)
                    .setup_sge(local.mr.lkey(), local.addr(0), 8)
            }
        })
        .expect("post a fetch-and-add");
    let wcs = bed.sends(1, WAIT);
    assert_eq!(
        wcs.first().and_then(|wc| wc.status()),
        Some(WorkCompletionStatus::Success)
    );
}

// ---- ports and GIDs ----

#[test]
fn a_port_that_cannot_carry_dc_traffic_is_refused_by_both_bring_ups_before_any_transition() {
    on_device!();
    use rdma_mummy_sys::ibv_port_state::IBV_PORT_DOWN;
    let device = open();
    let mut dct = device.dct(Some(AccessFlags::LocalWrite | AccessFlags::RemoteWrite));
    let mut dci = device.dci(|_| {}).expect("created");
    bed::device().set_port_state("softmlx5_0", false).unwrap();
    let want = PortNotReady::NotActive {
        port: 1,
        state: IBV_PORT_DOWN,
    };
    let err = dci.bring_up(&DcInitiatorBringUp::new(PORT)).unwrap_err();
    assert!(
        matches!(err.0, BringUpDcInitiatorErrorKind::PortNotReady(got) if got == want),
        "{err:?}"
    );
    assert_eq!(dci.query_state().unwrap(), QueuePairState::Reset);
    let err = dct.bring_up(&DcTargetBringUp::new(PORT)).unwrap_err();
    assert!(
        matches!(err.0, BringUpDcTargetErrorKind::PortNotReady(got) if got == want),
        "{err:?}"
    );
    assert_eq!(dct.state(), QueuePairState::Reset);
    // The message names the port and its state.
    assert_eq!(
        want.to_string(),
        "port 1 is not active (state DOWN): bring its link up first"
    );
    // Up again (a RoCE port has no LID: active is enough).
    bed::device().set_port_state("softmlx5_0", true).unwrap();
    dci.bring_up(&DcInitiatorBringUp::new(PORT))
        .expect("an active RoCE port");
}

/// The GID at `index` of port 1's table, as the device gives it.
fn gid_at(device: &Device, index: u8) -> std::net::Ipv6Addr {
    let gid = device.context.query_gid(PORT, index.into()).expect("query_gid");
    std::net::Ipv6Addr::from(gid)
}

#[test]
fn a_dct_on_roce_answers_from_a_roce_v2_gid_and_announces_it_with_its_path_mtu() {
    on_device!();
    let device = open();
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    let mut dct = device.dct(Some(access));
    // softmlx5's RoCE table: RoCE v1 at 0 and 2, RoCE v2 at 1 and 3, 5 empty. A RoCE v1 GID, an
    // empty slot: refused by name before any transition.
    let mut params = DcTargetBringUp::new(PORT);
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
        assert_eq!(dct.state(), QueuePairState::Reset, "before any transition");
    }
    // By default: the port's first RoCE v2 GID, in the RTR address vector and the endpoint.
    dct.bring_up(&DcTargetBringUp::new(PORT)).expect("a RoCE v2 GID");
    assert_eq!(dct.state(), QueuePairState::ReadyToReceive);
    let index = dct.source_gid().map(|entry| entry.index()).expect("a source GID");
    assert_eq!(index % 2, 1, "a RoCE v2 slot: {index}");
    let endpoint = dct.endpoint().expect("its endpoint");
    assert_eq!(std::net::Ipv6Addr::from(endpoint.gid()), gid_at(&device, index));
    assert_eq!(
        (endpoint.is_roce(), endpoint.path_mtu()),
        (true, Some(Mtu::Mtu1024)),
        "the port's active MTU"
    );
}

#[test]
fn a_dci_on_roce_sends_from_a_roce_v2_gid_and_refuses_a_roce_v1_one() {
    on_device!();
    let device = open();
    let mut dci = device.dci(|_| {}).expect("created");
    let mut params = DcInitiatorBringUp::new(PORT);
    params.setup_source_gid(SourceGid::Index(2));
    let err = dci.bring_up(&params).unwrap_err();
    assert!(
        matches!(&err.0, BringUpDcInitiatorErrorKind::SourceGid(gid) if matches!(gid.0, SourceGidErrorKind::NotRoceV2 { port: 1, index: 2, .. })),
        "{err:?}"
    );
    assert_eq!(
        dci.query_state().unwrap(),
        QueuePairState::Reset,
        "before any transition"
    );
    params.setup_source_gid(SourceGid::Index(3));
    dci.bring_up(&params).expect("a RoCE v2 GID");
    assert_eq!(dci.source_gid().map(|entry| entry.index()), Some(3));
    assert_eq!(dci.path_mtu(), Some(Mtu::Mtu1024));
    // By default a RoCE v2 GID.
    let dci = device.brought_up(None);
    assert_eq!(dci.source_gid().map(|entry| entry.index() % 2), Some(1));
}

#[test]
fn a_dci_on_infiniband_has_no_source_gid() {
    on_device!(("SOFTMLX5_LINK", "ib"));
    let device = open();
    let dci = device.brought_up(None);
    assert_eq!(dci.source_gid(), None);
    assert_writes(&device, &mut device.brought_up(None));
}

/// An InfiniBand port that requires a GRH (an InfiniBand virtual function): the kernel refuses an
/// address vector without one (`rdma_check_ah_attr`), so by default both bring-ups send from GID
/// index 0, and the target announces that GID.
#[test]
fn on_an_infiniband_port_that_requires_a_grh_both_bring_ups_use_gid_index_0() {
    on_device!(("SOFTMLX5_LINK", "ib"), ("SOFTMLX5_GRH_REQUIRED", "1"));
    let device = open();
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    let mut dct = device.dct(Some(access));
    dct.bring_up(&DcTargetBringUp::new(PORT))
        .expect("a global RTR address vector");
    assert_eq!(dct.state(), QueuePairState::ReadyToReceive);
    assert_eq!(dct.source_gid().map(|entry| entry.index()), Some(0));
    let endpoint = dct.endpoint().expect("its endpoint");
    assert_eq!(
        (endpoint.is_roce(), std::net::Ipv6Addr::from(endpoint.gid())),
        (false, gid_at(&device, 0))
    );
    let dci = device.brought_up(None);
    assert_eq!(dci.source_gid().map(|entry| entry.index()), Some(0));
    // The kernel's rule, as the device holds it: no DCT reaches RTR without a GRH there.
    let mut dct = device.dct(Some(access));
    let mut init = to(QueuePairState::Init);
    init.setup_pkey_index(0).setup_port(PORT).setup_access_flags(access);
    dct.modify(&init).expect("INIT");
    let mut av = AddressHandleAttribute::new();
    av.setup_port(PORT);
    let mut rtr = to(QueuePairState::ReadyToReceive);
    rtr.setup_path_mtu(Mtu::Mtu1024)
        .setup_min_rnr_timer(12)
        .setup_address_vector(&av);
    let err = dct.modify(&rtr).unwrap_err();
    assert!(
        matches!(&err.0, ModifyQueuePairErrorKind::Ibverbs(errno) if errno.raw_os_error() == Some(libc::EINVAL)),
        "{err:?}"
    );
}

/// A libibverbs before rdma-core 32 (no `_ibv_query_gid_ex`): on InfiniBand both bring-ups need
/// no GID and go on.
#[test]
fn without_query_gid_ex_infiniband_brings_up() {
    on_device!(("SOFTMLX5_LINK", "ib"), ("SOFTMLX5_STACK", "no-query-gid-ex"));
    let device = open();
    let dci = device.brought_up(None);
    assert_eq!(dci.source_gid(), None);
    let mut dct = device.dct(Some(AccessFlags::LocalWrite | AccessFlags::RemoteWrite));
    dct.bring_up(&DcTargetBringUp::new(PORT))
        .expect("InfiniBand reads no GID table");
    assert_eq!(dct.state(), QueuePairState::ReadyToReceive);
}

// ---- posting ----

/// Posts a receive of `buffer`'s first 64 bytes on the SRQ of `bed`'s target.
fn post_receive(bed: &Bed, buffer: &Buffer, wr_id: u64) {
    let sge = rdma_mummy_sys::ibv_sge {
        addr: buffer.addr(0),
        length: 64,
        lkey: buffer.mr.lkey(),
    };
    // SAFETY: the buffer outlives the receive's completion (the test's).
    unsafe { bed.srq.post_recv_one(wr_id, &[sge]) }.expect("post a receive");
}

/// Posts `len` bytes inline on `dci` to `endpoint`.
fn post_inline(device: &Device, dci: &mut DcInitiator, endpoint: &DcEndpoint, len: usize) -> Result<(), PostSendError> {
    let ah = device.ah(dci, endpoint);
    let (dct_number, dc_key) = (endpoint.dct_number(), endpoint.dc_key());
    dci.post_send_one(9, WorkRequestFlags::Signaled, |wr| {
        wr.setup_send()
            .setup_dc_addr(&ah, dct_number, dc_key)
            .setup_inline_data(&[0x5a; 64][..len]);
    })
}

/// Whether `err` is libmlx5's refusal of inline data beyond `max_inline_data`: `ENOMEM` recorded
/// by `_mlx5_send_wr_set_inline_data`, returned by `ibv_wr_complete`.
fn is_inline_refusal(err: &PostSendError) -> bool {
    matches!(err, PostSendError::NotEnoughResources(errno) if errno.raw_os_error() == Some(libc::ENOMEM))
}

#[test]
fn inline_data_beyond_what_was_granted_is_refused_by_libmlx5_and_nothing_leaves() {
    on_device!();
    let mut bed = Bed::new();
    let device = open();
    let mut dci = device.brought_up(None);
    assert_eq!(dci.max_inline_data(), 28);
    // The target takes SENDs into its SRQ.
    let receive = bed.buffer(64);
    for wr_id in 0..2 {
        post_receive(&bed, &receive, wr_id);
    }
    bed::device().clear_trace();
    post_inline(&device, &mut dci, &bed.endpoint, 28).expect("the granted size fits");
    assert_eq!(
        bed::wait(device.cq.as_ref(), 1, WAIT)[0].status(),
        Some(WorkCompletionStatus::Success)
    );
    let sent = requests(dci.qp_number());
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].length, 28, "the request's length, as it left");
    let err = post_inline(&device, &mut dci, &bed.endpoint, 29).unwrap_err();
    assert!(is_inline_refusal(&err), "{err:?}");
    // The list variant counts every slice.
    let ah = device.ah(&dci, &bed.endpoint);
    let (dct_number, dc_key) = (bed.endpoint.dct_number(), bed.endpoint.dc_key());
    let err = dci
        .post_send_one(10, WorkRequestFlags::Signaled, |wr| {
            wr.setup_send()
                .setup_dc_addr(&ah, dct_number, dc_key)
                .setup_inline_data_list(&[IoSlice::new(&[1; 20]), IoSlice::new(&[2; 9])]);
        })
        .unwrap_err();
    assert!(is_inline_refusal(&err), "{err:?}");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(requests(dci.qp_number()).len(), 1, "nothing more left the DC initiator");
    let _ = &mut bed;
}

#[test]
fn refused_requests_and_a_dropped_guard_never_reach_the_device() {
    on_device!();
    let bed = Bed::new();
    let receive = bed.buffer(64);
    post_receive(&bed, &receive, 0);
    let endpoint = bed.endpoint;
    let device = open();
    // Created with SEND only and without streams.
    let mut dci = device
        .dci(|builder| {
            builder.setup_send_ops_flags(SendOperationFlags::Send);
        })
        .expect("created");
    dci.bring_up(&DcInitiatorBringUp::new(PORT)).expect("brought up");
    let ah = device.ah(&dci, &endpoint);
    let (dct_number, dc_key) = (endpoint.dct_number(), endpoint.dc_key());
    let local = device.buffer(64);
    bed::device().clear_trace();
    let mut guard = dci.start_post_send();
    // SAFETY: the buffer outlives the batch (which is refused).
    unsafe {
        guard
            .construct_wr(1, WorkRequestFlags::Signaled)
            .setup_write(1, 2)
            .setup_dc_addr(&ah, dct_number, dc_key)
            .setup_sge(local.mr.lkey(), local.addr(0), 3);
    }
    guard
        .construct_wr(2, WorkRequestFlags::Signaled)
        .setup_send()
        .setup_dc_addr(&ah, dct_number, dc_key)
        .setup_inline_data(b"x");
    // The batch holds an operation the DC initiator was not created with: all of it is aborted.
    match guard.post().unwrap_err() {
        PostSendError::InvalidWorkRequest(errno) => assert_eq!(errno.raw_os_error(), Some(libc::EOPNOTSUPP)),
        other => panic!("unexpected {other:?}"),
    }
    // A guard dropped unposted aborts its batch.
    let mut guard = dci.start_post_send();
    guard
        .construct_wr(4, WorkRequestFlags::Signaled)
        .setup_send()
        .setup_dc_addr(&ah, dct_number, dc_key)
        .setup_inline_data(b"y");
    drop(guard);
    std::thread::sleep(Duration::from_millis(20));
    assert!(requests(dci.qp_number()).is_empty(), "nothing left the DC initiator");
    assert!(
        bed::wait(device.cq.as_ref(), 1, Duration::from_millis(20)).is_empty(),
        "no completion"
    );
    // The queue is whole: the next request goes out alone.
    let wr_id = 5;
    dci.post_send_one(wr_id, WorkRequestFlags::Signaled, |wr| {
        wr.setup_send()
            .setup_dc_addr(&ah, dct_number, dc_key)
            .setup_inline_data(b"z");
    })
    .expect("post");
    let wcs = bed::wait(device.cq.as_ref(), 1, WAIT);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].wr_id(), wr_id);
    assert_eq!(requests(dci.qp_number()).len(), 1);
}

#[test]
fn requests_leave_with_the_fields_they_were_given() {
    on_device!();
    let device = open();
    let (_dct, endpoint) = target(&device, |_| {});
    let mut dci = device.brought_up(Some(streams(2, 1)));
    let local = device.buffer(4096);
    let remote = device.buffer(4096);
    let dci_number = dci.qp_number();
    let ah = device.ah(&dci, &endpoint);
    let (dct_number, dc_key) = (endpoint.dct_number(), endpoint.dc_key());
    bed::device().clear_trace();
    let mut guard = dci.start_post_send();
    // SAFETY (each data step): both buffers outlive the completions.
    unsafe {
        guard
            .construct_wr(1, WorkRequestFlags::Signaled)
            .setup_write(remote.mr.rkey(), remote.addr(64))
            .setup_dc_addr(&ah, dct_number, dc_key)
            .setup_sge(local.mr.lkey(), local.addr(0), 100);
        guard
            .construct_wr(2, WorkRequestFlags::Signaled)
            .setup_read(remote.mr.rkey(), remote.addr(256))
            .setup_dc_addr_stream(&ah, dct_number, dc_key, 3)
            .setup_sge(local.mr.lkey(), local.addr(512), 200);
        guard
            .construct_wr(3, WorkRequestFlags::none())
            .setup_atomic_fetch_add(remote.mr.rkey(), remote.addr(1024), 5)
            .setup_dc_addr(&ah, dct_number, dc_key)
            .setup_sge(local.mr.lkey(), local.addr(1024), 8);
    }
    guard.post().expect("posted");
    assert_eq!(bed::wait(device.cq.as_ref(), 2, WAIT).len(), 2, "the signaled two");
    let sent: Vec<_> = requests(dci_number)
        .iter()
        .map(|e| {
            (
                e.opcode,
                e.remote_addr,
                e.rkey,
                e.length,
                e.dc_key,
                e.peer,
                e.stream,
                e.signaled,
            )
        })
        .collect();
    // MLX5_OPCODE_RDMA_WRITE 0x08, RDMA_READ 0x10, ATOMIC_FA 0x12.
    assert_eq!(
        sent,
        [
            (0x08, remote.addr(64), remote.mr.rkey(), 100, dc_key, dct_number, 0, 1),
            (0x10, remote.addr(256), remote.mr.rkey(), 200, dc_key, dct_number, 3, 1),
            (0x12, remote.addr(1024), remote.mr.rkey(), 8, dc_key, dct_number, 0, 0),
        ]
    );
}

#[test]
fn the_default_operations_follow_the_atomic_capability() {
    // A device without atomics (atomic_cap IBV_ATOMIC_NONE).
    on_device!(("SOFTMLX5_ATOMICS", "none"));
    let device = open();
    let dci = device.dci(|_| {}).expect("created");
    assert_eq!(dci.send_ops_flags(), DC_SEND_OPERATIONS.and(DC_ATOMIC_OPERATIONS.not()));
    // Asking for atomics on it is refused, naming them, before the library (whose EOPNOTSUPP
    // would read as a device without DC).
    let err = device.dci(|builder| {
        builder.setup_send_ops_flags(SendOperationFlags::Write | SendOperationFlags::AtomicFetchAndAdd);
    });
    match err.unwrap_err().0 {
        CreateDcInitiatorErrorKind::AtomicOperationsNotSupported { requested } => {
            assert_eq!(requested, SendOperationFlags::AtomicFetchAndAdd)
        },
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_dct_on_a_device_without_dc_atomics_is_brought_up_without_them_by_default() {
    // Atomics, but not on DC: the kernel refuses a DCT's remote atomics (EOPNOTSUPP).
    on_device!(("SOFTMLX5_ATOMICS", "no-dc"));
    let device = open();
    // The default brings the DC target up without them (one refused move to INIT, no error).
    let mut dct = device.dct(None);
    dct.bring_up(&DcTargetBringUp::new(PORT))
        .expect("bring up with the defaults");
    assert_eq!(dct.state(), QueuePairState::ReadyToReceive);
    assert_eq!(
        dct.access_flags(),
        AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead
    );
    // Atomics listed by the caller stay an error, its own.
    let mut dct = device.dct(Some(AccessFlags::LocalWrite | AccessFlags::RemoteAtomic));
    let err = dct.bring_up(&DcTargetBringUp::new(PORT)).unwrap_err();
    assert!(
        matches!(err.0, BringUpDcTargetErrorKind::RemoteAtomicsNotSupported),
        "{err:?}"
    );
    assert_eq!(dct.state(), QueuePairState::Reset);
}

/// A libibverbs before rdma-core 32 (no `_ibv_query_gid_ex`) on RoCE: the GID types come from
/// sysfs, as libibverbs' own fallback reads them, and both bring-ups find their RoCE v2 GID.
#[test]
fn without_query_gid_ex_roce_reads_the_gid_types_from_sysfs() {
    on_device!(("SOFTMLX5_STACK", "no-query-gid-ex"));
    let device = open();
    let dci = device.brought_up(None);
    assert_eq!(
        dci.source_gid().map(|entry| entry.index() % 2),
        Some(1),
        "a RoCE v2 slot"
    );
    let (_dct, endpoint) = target(&device, |_| {});
    assert!(endpoint.is_roce());
    let mut dci = dci;
    let (local, remote) = (device.buffer(64), device.buffer(64));
    assert_eq!(
        write(&device, &mut dci, &endpoint, None, &local, &remote, 64),
        Some(WorkCompletionStatus::Success)
    );
}

/// `IBV_QP_STATE`, as a mask.
const IBV_QP_STATE: i32 = rdma_mummy_sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32;

/// The states a DC queue pair is asked to move to, from each of them.
const STATES: [QueuePairState; 5] = [
    QueuePairState::Reset,
    QueuePairState::Init,
    QueuePairState::ReadyToReceive,
    QueuePairState::ReadyToSend,
    QueuePairState::Error,
];

/// The attribute bits mlx5_ib's DC rules name, plus `IBV_QP_DEST_QPN`, which they never allow:
/// every subset of them is tried. (`IBV_QP_CUR_STATE` has no setter: no modification through
/// the crate carries it.)
const BITS: [rdma_mummy_sys::ibv_qp_attr_mask; 13] = {
    use rdma_mummy_sys::ibv_qp_attr_mask as m;
    [
        m::IBV_QP_STATE,
        m::IBV_QP_ACCESS_FLAGS,
        m::IBV_QP_PKEY_INDEX,
        m::IBV_QP_PORT,
        m::IBV_QP_AV,
        m::IBV_QP_PATH_MTU,
        m::IBV_QP_TIMEOUT,
        m::IBV_QP_RETRY_CNT,
        m::IBV_QP_RNR_RETRY,
        m::IBV_QP_MIN_RNR_TIMER,
        m::IBV_QP_SQ_PSN,
        m::IBV_QP_MAX_QP_RD_ATOMIC,
        m::IBV_QP_DEST_QPN,
    ]
};

/// Subset `subset` of [`BITS`] to state `given`, every field a value the device takes, and its
/// mask.
fn attributes(subset: u32, given: QueuePairState) -> (QueuePairAttribute, i32) {
    use rdma_mummy_sys::ibv_qp_attr_mask as m;
    let mut attr = QueuePairAttribute::new();
    let mut mask = 0;
    for (i, bit) in BITS.iter().enumerate() {
        if subset & (1 << i) == 0 {
            continue;
        }
        mask |= bit.0 as i32;
        match *bit {
            m::IBV_QP_STATE => {
                attr.setup_state(given);
            },
            m::IBV_QP_ACCESS_FLAGS => {
                let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead;
                attr.setup_access_flags(access);
            },
            m::IBV_QP_PKEY_INDEX => {
                attr.setup_pkey_index(0);
            },
            m::IBV_QP_PORT => {
                attr.setup_port(PORT);
            },
            m::IBV_QP_AV => {
                let mut av = AddressHandleAttribute::new();
                av.setup_port(PORT).setup_grh_src_gid_index(3);
                attr.setup_address_vector(&av);
            },
            m::IBV_QP_PATH_MTU => {
                attr.setup_path_mtu(Mtu::Mtu1024);
            },
            m::IBV_QP_TIMEOUT => {
                attr.setup_timeout(14);
            },
            m::IBV_QP_RETRY_CNT => {
                attr.setup_retry_cnt(7);
            },
            m::IBV_QP_RNR_RETRY => {
                attr.setup_rnr_retry(7);
            },
            m::IBV_QP_MIN_RNR_TIMER => {
                attr.setup_min_rnr_timer(12);
            },
            m::IBV_QP_SQ_PSN => {
                attr.setup_sq_psn(0);
            },
            m::IBV_QP_MAX_QP_RD_ATOMIC => {
                attr.setup_max_read_atomic(1);
            },
            _ => {
                attr.setup_dest_qp_num(0);
            },
        }
    }
    assert_eq!(attr.mask().bits(), mask, "the crate's attribute has the mask tried");
    (attr, mask)
}

/// `dci` reset, then moved up to `state` (RTS → ERR for ERR).
fn dci_at(dci: &mut DcInitiator, state: QueuePairState) {
    dci.modify(&to(QueuePairState::Reset)).expect("any state -> RESET");
    let mut steps = Vec::new();
    let mut init = to(QueuePairState::Init);
    init.setup_pkey_index(0).setup_port(PORT);
    steps.push((QueuePairState::Init, init));
    let mut rtr = to(QueuePairState::ReadyToReceive);
    rtr.setup_path_mtu(Mtu::Mtu1024);
    steps.push((QueuePairState::ReadyToReceive, rtr));
    let mut rts = to(QueuePairState::ReadyToSend);
    rts.setup_timeout(14)
        .setup_retry_cnt(7)
        .setup_rnr_retry(7)
        .setup_sq_psn(0)
        .setup_max_read_atomic(1);
    steps.push((QueuePairState::ReadyToSend, rts));
    steps.push((QueuePairState::Error, to(QueuePairState::Error)));
    for (reached, attr) in steps {
        if STATES.iter().position(|s| *s == reached) > STATES.iter().position(|s| *s == state) {
            break;
        }
        dci.modify(&attr)
            .unwrap_or_else(|err| panic!("to {reached:?}: {err:?}"));
    }
    assert_eq!(dci.query_state().expect("query"), state);
}

/// Every (state, state asked for, subset of [`BITS`]) the device (mlx5_ib's
/// `modify_dci_qp_is_ok`, softmlx5/c/queue_pair.c) refuses, `modify` explains by the DC
/// initiator's table (never the bare `EINVAL`); every one it takes, the table lists with its
/// required attributes and the state.
#[test]
fn the_dc_initiators_transition_table_is_the_devices_for_every_state_and_mask() {
    on_device!();
    let device = open();
    let mut dci = device.dci(|_| {}).expect("created");
    let (mut accepted, mut explained, mut differ) = (0, 0, Vec::new());
    for cur in STATES {
        dci_at(&mut dci, cur);
        for given in STATES {
            for subset in 0u32..1 << BITS.len() {
                let (attr, mask) = attributes(subset, given);
                match dci.modify(&attr) {
                    Ok(()) => {
                        accepted += 1;
                        let to = if mask & IBV_QP_STATE != 0 { given } else { cur };
                        let listed = DcInitiator::required_attributes(cur, to);
                        if mask & IBV_QP_STATE == 0 || listed.is_none_or(|required| mask & required != required) {
                            differ.push(format!("{cur:?} -> {given:?} mask {mask:#x}: taken, not in the table"));
                        }
                        dci_at(&mut dci, cur);
                    },
                    Err(err) if matches!(err.0, ModifyQueuePairErrorKind::Ibverbs(_)) => {
                        differ.push(format!(
                            "{cur:?} -> {given:?} mask {mask:#x}: refused, not by the table"
                        ));
                    },
                    Err(_) => explained += 1,
                }
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} differ: {:#?}",
        differ.len(),
        &differ[..differ.len().min(20)]
    );
    assert!(accepted > 0 && explained > 0, "the comparison proves nothing");
}

/// A DC target at `state` (RESET, INIT or RTR: the only ones it reaches), new.
fn dct_at(device: &Device, state: QueuePairState) -> DcTarget {
    let mut dct = device.dct(None);
    match state {
        QueuePairState::Reset => {},
        QueuePairState::Init => {
            let mut init = to(QueuePairState::Init);
            init.setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite)
                .setup_pkey_index(0)
                .setup_port(PORT);
            dct.modify(&init).expect("RESET -> INIT");
        },
        _ => dct.bring_up(&DcTargetBringUp::new(PORT)).expect("RTR"),
    }
    assert_eq!(dct.state(), state);
    dct
}

/// As for the DC initiator: every refusal of the device (mlx5_ib's `mlx5_ib_modify_dct`), from
/// every state a DC target reaches, is explained by its table.
#[test]
fn the_dc_targets_transition_table_is_the_devices_for_every_state_and_mask() {
    on_device!();
    let device = open();
    let (mut accepted, mut explained, mut differ) = (0, 0, Vec::new());
    for cur in [
        QueuePairState::Reset,
        QueuePairState::Init,
        QueuePairState::ReadyToReceive,
    ] {
        let mut dct = dct_at(&device, cur);
        for given in STATES {
            for subset in 0u32..1 << BITS.len() {
                let (attr, mask) = attributes(subset, given);
                match dct.modify(&attr) {
                    Ok(()) => {
                        accepted += 1;
                        dct = dct_at(&device, cur);
                    },
                    Err(err) if matches!(err.0, ModifyQueuePairErrorKind::Ibverbs(_)) => {
                        differ.push(format!(
                            "{cur:?} -> {given:?} mask {mask:#x}: refused, not by the table"
                        ));
                    },
                    Err(_) => explained += 1,
                }
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} differ: {:#?}",
        differ.len(),
        &differ[..differ.len().min(20)]
    );
    assert!(accepted > 0 && explained > 0, "the comparison proves nothing");
}
