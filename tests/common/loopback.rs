//! A connected RC pair on one device whose sender completes on an event CQ: the completion-event
//! tests' fixture (sideway-ext's, and the DC pool's on a shared CQ).
use std::sync::Arc;
use std::time::Duration;

use sideway::ibverbs::completion::{CompletionChannel, GenericCompletionQueue};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::ProtectionDomainExt;
use sideway_ext::ibverbs::post_send_guard::ReliableConnection;
use sideway_ext::ibverbs::queue_pair::SharedReceiveQueuePair;
use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;

use super::{connect_rc, local_gid, open_test_device, wait_completions, Buffer};

/// How long a completion may take to raise its event.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Which kind of CQ the event CQ is.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Basic,
    Extended,
}

/// A connected RC pair whose sender completes on `cq`, an event CQ on `channel`.
pub struct Loopback {
    // Queue pairs first: they are destroyed before the CQs they hold.
    pub sender: SharedReceiveQueuePair<ReliableConnection>,
    pub receiver: SharedReceiveQueuePair<ReliableConnection>,
    /// The SRQ both queue pairs receive through (the sender's receives complete on `cq`).
    pub srq: Arc<SharedReceiveQueue>,
    pub cq: GenericCompletionQueue,
    pub channel: Arc<CompletionChannel>,
    pub local: Buffer,
    pub remote: Buffer,
    pub pd: Arc<ProtectionDomain>,
    _ctx: Arc<DeviceContext>,
}

pub fn loopback(kind: Kind) -> Loopback {
    let ctx = open_test_device();
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let (gid_index, gid) = local_gid(&ctx);
    let channel = ctx.create_comp_channel().expect("create_comp_channel");
    let mut builder = ctx.create_cq_builder();
    builder.setup_cqe(16).setup_comp_channel(&channel, 0);
    let cq = match kind {
        Kind::Basic => GenericCompletionQueue::from(builder.build().expect("basic CQ with a channel")),
        Kind::Extended => GenericCompletionQueue::from(builder.build_ex().expect("extended CQ with a channel")),
    };
    let other_cq = ctx.create_cq_builder().setup_cqe(16).build().expect("plain CQ");
    let srq = pd.create_srq_builder().setup_max_wr(4).build().expect("SRQ");
    let mut sender = srq
        .create_qp_builder()
        .setup_send_cq(cq.clone())
        .setup_recv_cq(cq.clone())
        .setup_max_send_wr(8)
        .build_rc()
        .expect("sender QP");
    let mut receiver = srq
        .create_qp_builder()
        .setup_send_cq(other_cq.clone())
        .setup_recv_cq(other_cq)
        .build_rc()
        .expect("receiver QP");
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    let (sq, rq) = (sender.qp_number(), receiver.qp_number());
    connect_rc(&mut sender, rq, gid_index, gid, access);
    connect_rc(&mut receiver, sq, gid_index, gid, access);
    let local = Buffer::new(&pd, 64);
    let remote = Buffer::new(&pd, 64);
    Loopback {
        sender,
        receiver,
        srq,
        cq,
        channel,
        local,
        remote,
        pd,
        _ctx: ctx,
    }
}

impl Loopback {
    /// Posts one signaled RDMA write of `byte` to the remote buffer (one completion on `cq`).
    pub fn write(&mut self, wr_id: u64, byte: u8) {
        self.local.write(0, &[byte; 8]);
        let (rkey, raddr) = (self.remote.mr.rkey(), self.remote.addr(0));
        let mut guard = self.sender.start_post_send();
        // SAFETY: both buffers outlive the completion, awaited before they are dropped.
        unsafe {
            guard
                .construct_wr(wr_id, WorkRequestFlags::Signaled)
                .setup_write(rkey, raddr)
                .setup_sge(self.local.lkey(), self.local.addr(0), 8);
        }
        guard.post().expect("post RDMA write");
    }

    /// Polls the one completion of a write and checks it.
    pub fn expect_completion(&self, wr_id: u64, byte: u8) {
        let wcs = wait_completions(&self.cq, 1, EVENT_TIMEOUT);
        assert!(wcs[0].is_success(), "{:?}", wcs[0]);
        assert_eq!(wcs[0].wr_id(), wr_id);
        assert_eq!(self.remote.read(0, 8), [byte; 8]);
    }
}
