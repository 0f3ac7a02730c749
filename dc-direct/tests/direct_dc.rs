//! The direct DC path on a ConnectX, in loopback on port 1: a DC target, and a DC initiator
//! whose requests this crate writes, completing into a [`DirectCompletionQueue`]: made safely on
//! a thread domain of its own ([`DirectDcInitiator::new`]), and without one on a promise
//! ([`DirectDcInitiator::new_with_blueflame`]).
//!
//! `mlx5_hw_` tests: see `common`.
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serial_test::serial;
use sideway::ibverbs::completion::{BasicCompletionQueue, GenericCompletionQueue, WorkCompletionStatus};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{QueuePairState, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::{CompletionQueueExt, ProtectionDomainExt};
use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::DcInitiatorBringUp;
use sideway_ext::mlx5::dc::target::DcTarget;
use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
use sideway_ext::mlx5::device_attributes::Mlx5ContextFlags;
use sideway_ext::mlx5::device_context::Mlx5DeviceContext;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;
use sideway_ext_dc_direct::completion_queue::Completion;
use sideway_ext_dc_direct::send_queue::AddressVector;
use sideway_ext_dc_direct::{
    CreateDirectDcInitiatorErrorKind, DirectCompletionQueue, DirectDcInitiator, DirectRegister, OwnedDcInitiator,
    RecoverDirectDcInitiatorErrorKind,
};

use common::{gid_index, open, pattern, Buffer, PORT};

const KEY: u64 = 0xd1_2ec7;
const LEN: usize = 4096;
const TIMEOUT: Duration = Duration::from_secs(10);

/// The loopback: a DC target on an SRQ, its endpoint's address vector, a direct CQ, buffers.
struct Loopback {
    /// What `mlx5dv_query_device` reported (`MLX5DV_CONTEXT_FLAGS_BLUEFLAME` among them).
    flags: Mlx5ContextFlags,
    pd: Arc<ProtectionDomain>,
    cq: GenericCompletionQueue,
    direct_cq: DirectCompletionQueue,
    recv_cq: GenericCompletionQueue,
    srq: Arc<SharedReceiveQueue>,
    endpoint: DcEndpoint,
    av: AddressVector,
    remote: Buffer,
    local: Buffer,
    _dct: DcTarget,
}

fn cq(ctx: &Arc<DeviceContext>) -> GenericCompletionQueue {
    let cq: Arc<BasicCompletionQueue> = ctx.create_cq_builder().setup_cqe(256).build().expect("CQ");
    cq.into()
}

impl Loopback {
    fn new() -> Self {
        let ctx = open();
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let (cq, recv_cq) = (cq(&ctx), cq(&ctx));
        // SAFETY: nothing polls `cq` but the direct CQ; only direct initiators complete into it.
        let direct_cq = unsafe { DirectCompletionQueue::new(cq.clone()) }.expect("a direct CQ");
        let srq = pd.create_srq_builder().setup_max_wr(16).build().expect("SRQ");
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead;
        let mut dct = pd
            .create_dct_builder()
            .setup_recv_cq(recv_cq.clone())
            .setup_srq(&srq)
            .setup_dc_key(KEY)
            .setup_access_flags(access)
            .build()
            .expect("a DC target");
        dct.bring_up(&DcTargetBringUp::new(PORT)).expect("DC target to RTR");
        let endpoint = dct.endpoint().expect("its endpoint");
        let ah = endpoint.create_ah(&pd, PORT, gid_index(&ctx)).expect("address handle");
        let av = AddressVector::from_address_handle(&ah).expect("its address vector");
        let flags = Mlx5DeviceContext::new(Arc::clone(&ctx))
            .query_device()
            .expect("mlx5dv_query_device")
            .flags();
        Self {
            flags,
            remote: Buffer::new(&pd, LEN, access),
            local: Buffer::new(&pd, LEN, AccessFlags::LocalWrite),
            pd,
            cq,
            direct_cq,
            recv_cq,
            srq,
            endpoint,
            av,
            _dct: dct,
        }
    }

    /// A DC initiator completing into the direct CQ, in RESET, on a thread domain of its own or
    /// not.
    fn dci(&self, thread_domain: bool) -> OwnedDcInitiator {
        let mut builder = self.pd.create_dci_builder();
        builder.setup_send_cq(self.cq.clone()).setup_max_send_wr(16);
        match thread_domain {
            true => builder.build_on_thread_domain().expect("a DC initiator").into(),
            false => builder.build().expect("a DC initiator").into(),
        }
    }

    /// Waits for one completion of the direct CQ.
    fn wait_direct(&mut self) -> Completion {
        let deadline = Instant::now() + TIMEOUT;
        let mut completions = [Completion::default(); 1];
        while self.direct_cq.poll(&mut completions).expect("poll the direct CQ") == 0 {
            assert!(Instant::now() < deadline, "no direct completion within {TIMEOUT:?}");
        }
        completions[0]
    }

    /// Waits for one receive of the DC target.
    fn wait_receive(&self) -> WorkCompletion {
        let deadline = Instant::now() + TIMEOUT;
        let mut wcs = [WorkCompletion::default(); 1];
        loop {
            if let Some(wc) = self.recv_cq.poll_work_completions(&mut wcs).expect("poll").first() {
                return *wc;
            }
            assert!(Instant::now() < deadline, "no receive within {TIMEOUT:?}");
        }
    }
}

/// An RDMA WRITE of `seed`'s pattern into the remote buffer with DC key `key`, and its
/// completion.
fn write(lb: &mut Loopback, dci: &mut DirectDcInitiator, key: u64, seed: u8) -> Completion {
    lb.local.data.copy_from_slice(&pattern(LEN, seed));
    let mut guard = dci.start_post_send();
    let request = guard
        .construct_wr(u64::from(seed), WorkRequestFlags::Signaled)
        .setup_write(lb.remote.mr.rkey(), lb.remote.addr())
        .setup_dc_addr(&lb.av, lb.endpoint.dct_number(), key);
    // SAFETY: the local buffer lies in its region and outlives the request.
    unsafe { request.setup_sge(lb.local.mr.lkey(), lb.local.addr(), LEN as u32) }.expect("the write");
    guard.post();
    lb.wait_direct()
}

/// Brings `dci` up, then an RDMA WRITE and a 16-byte inline SEND through it, each checked by
/// its completion and the bytes that arrived.
fn write_and_send(lb: &mut Loopback, dci: &mut DirectDcInitiator, seed: u8) {
    dci.bring_up(&DcInitiatorBringUp::new(PORT)).expect("to RTS");
    assert_eq!(dci.query_state().expect("state"), QueuePairState::ReadyToSend);
    let (dct_number, key) = (lb.endpoint.dct_number(), lb.endpoint.dc_key());

    let completion = write(lb, dci, key, seed);
    assert_eq!(
        (completion.wr_id(), completion.status(), completion.qp_number()),
        (
            u64::from(seed),
            WorkCompletionStatus::Success,
            dci.dc_initiator().qp_number()
        )
    );
    assert_eq!(lb.remote.read(LEN), pattern(LEN, seed), "the bytes written");
    assert_eq!(dci.outstanding(), 0);

    let mut receive = lb.srq.start_post_recv();
    // SAFETY: the remote buffer lies in its region and outlives the receive.
    unsafe {
        receive
            .construct_wr(5)
            .setup_sge(lb.remote.mr.lkey(), lb.remote.addr(), LEN as u32)
    };
    receive.post().expect("post a receive");
    let inline = pattern(16, seed ^ 0xff);
    let mut guard = dci.start_post_send();
    guard
        .construct_wr(0x178, WorkRequestFlags::Signaled)
        .setup_send()
        .setup_dc_addr(&lb.av, dct_number, key)
        .setup_inline_data(&inline)
        .expect("the inline send");
    guard.post();
    let completion = lb.wait_direct();
    assert_eq!(
        (completion.wr_id(), completion.status()),
        (0x178, WorkCompletionStatus::Success)
    );
    let received = lb.wait_receive();
    assert_eq!(
        (received.wr_id(), received.byte_len()),
        (5, 16),
        "{:?}",
        received.status()
    );
    assert_eq!(lb.remote.read(16), inline, "the bytes sent inline");
}

/// What only a ConnectX has is skipped on the software one, known by its name or its firmware,
/// with the reason; hardware runs it. The skip's line is the one scripts/device-suite-tally
/// counts as skipped.
#[test]
fn the_software_connectx_skips_what_only_hardware_has_with_the_reason() {
    use common::skip::{hardware_decision, SKIP_MARKER};
    let why = hardware_decision("softmlx5_0", "softmlx5 cx6dx (software)", "PCIe").unwrap_err();
    assert_eq!(
        why,
        "softmlx5_0 (softmlx5 cx6dx (software)) is the software ConnectX; the test needs PCIe"
    );
    assert!(hardware_decision("mlx5_3", "softmlx5 cx7 (software)", "PCIe").is_err());
    assert_eq!(hardware_decision("mlx5_0", "22.39.1002", "PCIe"), Ok(()));
    assert_eq!(hardware_decision("rxe0", "", "PCIe"), Ok(()));
    let tally = include_str!("../../scripts/device-suite-tally");
    assert!(
        tally.contains(&format!("^{SKIP_MARKER} ")),
        "the tally no longer matches the skip line"
    );
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_the_safe_constructor_takes_a_thread_domains_register_and_writes_through_it() {
    let mut lb = Loopback::new();
    // Two at once: libmlx5 gives each thread domain a register of its own, so neither claim is
    // refused.
    let mut first = DirectDcInitiator::new(lb.dci(true), &lb.direct_cq).expect("direct, on a thread domain");
    let mut second = DirectDcInitiator::new(lb.dci(true), &lb.direct_cq).expect("another, on another thread domain");
    for dci in [&first, &second] {
        let register = dci.register();
        assert!(matches!(register, DirectRegister::ThreadDomain { .. }), "{register:?}");
        // mlx5_alloc_td: a BlueFlame register on a device that has them, else a doorbell one.
        if lb.flags.contains(Mlx5ContextFlags::BlueFlame) {
            assert!(register.blueflame_size() > 0, "{register:?}");
        }
        assert!(register.blueflame_exists(lb.flags).is_some(), "{register:?}");
    }
    write_and_send(&mut lb, &mut first, 0x77);
    write_and_send(&mut lb, &mut second, 0x79);
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_without_a_thread_domain_only_a_doorbell_register_is_taken_safely() {
    let mut lb = Loopback::new();
    let shut_up = std::env::var_os("MLX5_SHUT_UP_BF").is_some_and(|value| value != "0");
    match DirectDcInitiator::new(lb.dci(false), &lb.direct_cq) {
        Ok(mut dci) => {
            // MLX5_SHUT_UP_BF on a kernel with dynamic UAR allocation, or no BlueFlame at all.
            assert_eq!(dci.register(), DirectRegister::Doorbell);
            assert!(
                shut_up || !lb.flags.contains(Mlx5ContextFlags::BlueFlame),
                "a doorbell register without MLX5_SHUT_UP_BF on a device with BlueFlame"
            );
            write_and_send(&mut lb, &mut dci, 0x7a);
        },
        // A kernel without dynamic UAR allocation gives BlueFlame halves whatever
        // MLX5_SHUT_UP_BF says.
        Err(refused) => assert!(
            matches!(
                refused.0,
                CreateDirectDcInitiatorErrorKind::BlueFlameRegisterNotOwned { blueflame_size } if blueflame_size > 0
            ),
            "{refused:?}"
        ),
    }
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_a_promised_blueflame_register_writes_without_a_thread_domain() {
    let blueflame = "a BlueFlame register the device reads (the software one's registers are plain memory: it \
                     runs the send queue's copy of each request, never the BlueFlame write)";
    if !common::require_hardware(&open(), blueflame) {
        return;
    }
    let mut lb = Loopback::new();
    // SAFETY: this test's device context is its own, and nothing but this initiator posts on it.
    let mut dci = unsafe { DirectDcInitiator::new_with_blueflame(lb.dci(false), &lb.direct_cq) }.expect("direct");
    assert!(
        matches!(
            dci.register(),
            DirectRegister::Promised { .. } | DirectRegister::Doorbell
        ),
        "{:?}",
        dci.register()
    );
    write_and_send(&mut lb, &mut dci, 0x7b);
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_a_dc_initiator_brought_up_or_on_another_cq_is_refused() {
    let lb = Loopback::new();
    let mut brought_up = lb.dci(true);
    brought_up.bring_up(&DcInitiatorBringUp::new(PORT)).expect("to RTS");
    let refused = DirectDcInitiator::new(brought_up, &lb.direct_cq).unwrap_err();
    assert!(
        matches!(
            refused.0,
            CreateDirectDcInitiatorErrorKind::NotInReset {
                state: QueuePairState::ReadyToSend
            }
        ),
        "{refused:?}"
    );
    let mut builder = lb.pd.create_dci_builder();
    builder.setup_send_cq(lb.recv_cq.clone());
    let elsewhere = builder.build_on_thread_domain().expect("a DC initiator");
    let refused = DirectDcInitiator::new(elsewhere, &lb.direct_cq).unwrap_err();
    assert!(
        matches!(refused.0, CreateDirectDcInitiatorErrorKind::DifferentCompletionQueue),
        "{refused:?}"
    );
}

#[test]
#[ignore = "mlx5 hardware test: needs SIDEWAY_EXT_TEST_MLX5_DEVICE naming a ConnectX-4 or newer"]
#[serial]
fn mlx5_hw_a_direct_initiator_recovers_after_a_wrong_dc_key_and_writes_again() {
    let mut lb = Loopback::new();
    let mut dci = DirectDcInitiator::new(lb.dci(true), &lb.direct_cq).expect("direct, on a thread domain");
    let refused = dci.recover().unwrap_err();
    assert!(
        matches!(refused.0, RecoverDirectDcInitiatorErrorKind::NotBroughtUp),
        "{refused:?}"
    );
    dci.bring_up(&DcInitiatorBringUp::new(PORT)).expect("to RTS");
    for round in 0..3u8 {
        let error = write(&mut lb, &mut dci, KEY ^ 1, 10 + round);
        assert_ne!(
            error.status(),
            WorkCompletionStatus::Success,
            "a wrong key, round {round}"
        );
        assert_eq!(error.wr_id(), u64::from(10 + round));
        assert_eq!(dci.outstanding(), 0, "the error completion retired the request");
        let state = dci.wait_for_error(Duration::from_secs(1)).expect("query the state");
        assert_eq!(state, QueuePairState::Error, "round {round}");
        dci.recover().expect("recover: RESET, the send queue at 0, RTS");
        assert_eq!(dci.query_state().expect("state"), QueuePairState::ReadyToSend);
        // The send queue starts over at index 0, as the device does after RESET.
        let completion = write(&mut lb, &mut dci, KEY, 20 + round);
        assert_eq!(
            (completion.wr_id(), completion.status()),
            (u64::from(20 + round), WorkCompletionStatus::Success),
            "round {round}"
        );
        assert_eq!(lb.remote.read(LEN), pattern(LEN, 20 + round), "round {round}");
    }
}
