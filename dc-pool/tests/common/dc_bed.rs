//! A DC test bed: one DC initiator and one DC target on the ConnectX of
//! `SIDEWAY_EXT_TEST_MLX5_DEVICE` ([`DeviceBed`]), for the `mlx5_hw_` tests, `#[ignore]`d and
//! `#[serial]` as the other mlx5 hardware tests (TESTING.md). A test posts with the
//! `DcInitiator`'s guard (`setup_dc_addr` taking the bed's address handle), and reads what the
//! target got through the bed.
use std::sync::Arc;
use std::time::Duration;

use sideway::ibverbs::completion::{BasicCompletionQueue, WorkCompletionStatus};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::SetScatterGatherEntry;
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::{CompletionQueueExt, ProtectionDomainExt};
use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::{DcInitiator, DcInitiatorBringUp};
use sideway_ext::mlx5::dc::target::DcTarget;
use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;

/// The target's memory the WRITEs reach, in bytes.
pub const MEMORY: usize = 4096;
/// The size of each receive posted on the target.
pub const RECEIVE: usize = 256;
/// The DC key of the target.
pub const KEY: u64 = 0xd0d0;
/// The port of the device bed.
const PORT: u8 = 1;
/// How long the device bed waits for a completion that should come quickly; an error
/// completion comes after the transport's retries (timeout 14: about 67 ms each, 8 tries).
const TIMEOUT: Duration = Duration::from_secs(30);

/// The bed on the ConnectX of `SIDEWAY_EXT_TEST_MLX5_DEVICE`: loopback on port 1, a DC target
/// on an SRQ, a DC initiator brought up with the defaults.
pub struct DeviceBed {
    // Dropped in order: the queue pairs before the buffers' regions, those before the PD.
    dci: DcInitiator,
    target: Option<DcTarget>,
    ah: Arc<sideway_ext::ibverbs::address_handle::AddressHandle>,
    endpoint: DcEndpoint,
    srq: Arc<SharedReceiveQueue>,
    send_cq: Arc<BasicCompletionQueue>,
    recv_cq: Arc<BasicCompletionQueue>,
    remote: super::Buffer,
    receives: super::Buffer,
    posted: usize,
    _pd: Arc<ProtectionDomain>,
}

impl DeviceBed {
    pub fn new() -> Self {
        let ctx = super::open_mlx5_test_device();
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let send_cq = ctx.create_cq_builder().setup_cqe(256).build().expect("send CQ");
        let recv_cq = ctx.create_cq_builder().setup_cqe(256).build().expect("receive CQ");
        let srq = pd.create_srq_builder().setup_max_wr(64).build().expect("SRQ");
        let (gid_index, _) = super::local_gid(&ctx);
        let mut target = pd
            .create_dct_builder()
            .setup_recv_cq(recv_cq.clone())
            .setup_srq(&srq)
            .setup_dc_key(KEY)
            .setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead)
            .build()
            .expect("a DC target");
        target.bring_up(&DcTargetBringUp::new(PORT)).expect("DC target to RTR");
        let endpoint = target.endpoint().expect("the DC target's endpoint");
        let ah = endpoint
            .create_ah(&pd, PORT, gid_index)
            .expect("the endpoint's address handle");
        let mut dci = pd
            .create_dci_builder()
            .setup_send_cq(send_cq.clone())
            .setup_max_send_wr(64)
            .setup_max_inline_data(64)
            .build()
            .expect("a DC initiator");
        dci.bring_up(&DcInitiatorBringUp::new(PORT))
            .expect("DC initiator to RTS");
        Self {
            dci,
            target: Some(target),
            ah,
            endpoint,
            srq,
            send_cq,
            recv_cq,
            remote: super::Buffer::new(&pd, MEMORY),
            receives: super::Buffer::new(&pd, 64 * RECEIVE),
            posted: 0,
            _pd: pd,
        }
    }
}

impl DeviceBed {
    pub fn sender(&mut self) -> (&mut DcInitiator, &sideway_ext::ibverbs::address_handle::AddressHandle) {
        (&mut self.dci, &self.ah)
    }

    pub fn endpoint(&self) -> DcEndpoint {
        self.endpoint
    }

    pub fn remote(&self) -> (u32, u64) {
        (self.remote.rkey(), self.remote.addr(0))
    }

    pub fn read_remote(&self, offset: usize, len: usize) -> Vec<u8> {
        self.remote.read(offset, len)
    }

    pub fn post_receives(&mut self, count: usize) {
        for _ in 0..count {
            let slot = self.posted;
            assert!(slot < 64, "the bed holds 64 receives");
            let mut guard = self.srq.start_post_recv();
            // SAFETY: the slot lies in the receives' region, which outlives the SRQ's use of it
            // (the queue pairs drop first).
            unsafe {
                guard.construct_wr(slot as u64).setup_sge(
                    self.receives.lkey(),
                    self.receives.addr(slot * RECEIVE),
                    RECEIVE as u32,
                )
            };
            guard.post().expect("post a receive on the SRQ");
            self.posted += 1;
        }
    }

    pub fn wait_sends(&mut self, count: usize) -> Vec<WorkCompletion> {
        let wcs = super::wait_completions(self.send_cq.as_ref(), count, super::slowed(TIMEOUT));
        assert_eq!(wcs.len(), count, "the DC initiator's completions: {wcs:?}");
        wcs
    }

    pub fn assert_no_send_completion(&mut self) {
        std::thread::sleep(super::slowed(Duration::from_millis(50)));
        let mut wcs = [WorkCompletion::default(); 4];
        let polled = self.send_cq.poll_work_completions(&mut wcs).expect("poll the send CQ");
        assert!(polled.is_empty(), "an unexpected completion: {polled:?}");
    }

    pub fn wait_receives(&mut self, count: usize) -> Vec<Vec<u8>> {
        let wcs = super::wait_completions(self.recv_cq.as_ref(), count, super::slowed(TIMEOUT));
        wcs.iter()
            .map(|wc| {
                assert!(wc.is_success(), "a receive failed: {wc:?}");
                self.receives
                    .read(wc.wr_id() as usize * RECEIVE, wc.byte_len() as usize)
            })
            .collect()
    }

    pub fn destroy_target(&mut self) {
        drop(self.target.take());
    }

    pub fn dead_target_statuses(&self) -> &'static [WorkCompletionStatus] {
        // What test_dc.rs's `destroyed_target_verdict` takes: the references show all three.
        &[
            WorkCompletionStatus::RetryCounterExceededError,
            WorkCompletionStatus::ResponderNotReadyRetryCounterExceededError,
            WorkCompletionStatus::RemoteInvalidRequestError,
        ]
    }
}
