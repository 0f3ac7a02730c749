use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::address::AddressHandleAttribute;
use sideway::ibverbs::address_handle::DEFAULT_HOP_LIMIT;
use sideway::ibverbs::completion::{GenericCompletionQueue, PollCompletionQueueError, WorkCompletionStatus};
use sideway::ibverbs::device;
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer};
use sideway::ibverbs::post_send_guard::UnreliableDatagram;
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, QueuePair, QueuePairAttribute, QueuePairAttributeMask, QueuePairState, QueuePairType,
    SendOperationFlags, SetInlineData, SetScatterGatherEntry, StartPostSendErrorKind, WorkRequestFlags,
};
use sideway::ibverbs::source_gid::SourceGid;
use sideway::ibverbs::AccessFlags;

/// The Q_Key both queue pairs are brought up with.
const QKEY: u32 = 0x1111_1111;
/// The Global Routing Header a UD receive buffer starts with (present on RoCE, always).
const GRH_LEN: usize = 40;

/// Brings a UD queue pair to RTS with Q_Key [`QKEY`].
fn bring_up(qp: &mut ExtendedQueuePair) {
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(1)
        .setup_qkey(QKEY);
    assert_eq!(
        attr.mask(),
        QueuePairAttributeMask::State
            | QueuePairAttributeMask::PartitionKeyIndex
            | QueuePairAttributeMask::Port
            | QueuePairAttributeMask::QueueKey
    );
    qp.modify(&attr).unwrap();
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToReceive);
    qp.modify(&attr).unwrap();
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToSend).setup_sq_psn(1);
    qp.modify(&attr).unwrap();
    assert_eq!(qp.state(), QueuePairState::ReadyToSend);
}

/// An address handle to port 1's own GID (on RoCE, the RoCE v2 GID `source_gid` picks).
fn attribute_to_self(ctx: &Arc<DeviceContext>) -> AddressHandleAttribute {
    let port = ctx.query_port(1).unwrap();
    let mut attr = AddressHandleAttribute::new();
    attr.setup_port(1).setup_dest_lid(port.lid());
    if let Some(entry) = ctx.source_gid(1, &SourceGid::Automatic).unwrap() {
        attr.setup_grh_src_gid_index(entry.index())
            .setup_grh_dest_gid(&entry.gid())
            .setup_grh_hop_limit(DEFAULT_HOP_LIMIT);
    } else {
        assert_ne!(
            port.link_layer(),
            Ok(LinkLayer::Ethernet),
            "a RoCE port without a RoCE v2 GID"
        );
    }
    attr
}

/// Polls `cq` until `want` completions came, each checked successful: their wr_ids, byte lengths
/// and local queue pair numbers.
fn poll(cq: &GenericCompletionQueue, want: usize) -> Vec<(u64, u32, u32)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut completions = Vec::new();
    while completions.len() < want {
        assert!(Instant::now() < deadline, "{} of {want} completions", completions.len());
        match cq.start_poll() {
            Ok(poller) => {
                for wc in poller {
                    assert_eq!(
                        wc.status(),
                        WorkCompletionStatus::Success as u32,
                        "wr_id {}",
                        wc.wr_id()
                    );
                    completions.push((wc.wr_id(), wc.byte_len(), wc.qp_number()));
                }
            },
            Err(PollCompletionQueueError::CompletionQueueEmpty) => std::thread::yield_now(),
            Err(err) => panic!("poll: {err}"),
        }
    }
    assert_eq!(completions.len(), want, "more completions than requests");
    completions
}

/// Two UD queue pairs on port 1: a datagram sent with `setup_ud_addr` to the receiver's number,
/// through an address handle, arrives byte for byte after the GRH; one sent first with another
/// Q_Key is dropped by the receiver, so the first receive gets the second datagram. The UD guard
/// refuses an RC queue pair.
#[test]
fn ud_guard_sends_datagrams_through_an_address_handle() -> Result<(), Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    assert!(device_list.iter().next().is_some(), "no device to test on");
    for device in &device_list {
        let ctx = device.open()?;
        let pd = ctx.alloc_pd()?;
        let payload = b"a datagram through the UD guard".to_vec();
        let mut received = vec![0u8; 2 * (GRH_LEN + 64)];
        // SAFETY: each buffer outlives its memory region and every request that uses it.
        let payload_mr = unsafe { pd.reg_mr(payload.as_ptr() as _, payload.len(), AccessFlags::LocalWrite)? };
        let received_mr = unsafe { pd.reg_mr(received.as_mut_ptr() as _, received.len(), AccessFlags::LocalWrite)? };

        let mut cq_builder = ctx.create_cq_builder();
        cq_builder.setup_cqe(16);
        let send_cq = GenericCompletionQueue::from(cq_builder.build()?);
        let recv_cq = GenericCompletionQueue::from(cq_builder.build()?);
        let mut builder = pd.create_qp_builder();
        builder
            .setup_qp_type(QueuePairType::UnreliableDatagram)
            .setup_max_inline_data(64)
            .setup_send_cq(send_cq.clone())
            .setup_recv_cq(recv_cq.clone())
            .setup_send_ops_flags(SendOperationFlags::Send);
        let mut sender = builder.build_ex()?;
        let mut receiver = builder.build_ex()?;
        bring_up(&mut sender);
        bring_up(&mut receiver);

        let mut guard = receiver.start_post_recv();
        for (wr_id, slot) in received.chunks_exact_mut(GRH_LEN + 64).enumerate() {
            // SAFETY: `received` is registered under `received_mr` and outlives the receives.
            unsafe {
                guard.construct_wr(wr_id as u64 + 1).setup_sge(
                    received_mr.lkey(),
                    slot.as_mut_ptr() as _,
                    slot.len() as u32,
                )
            };
        }
        guard.post()?;

        // Kept until the sends' completions are polled: the provider may read it after the post.
        let ah = pd.create_ah(&attribute_to_self(&ctx))?;
        let mut guard = sender.start_post_send_as::<UnreliableDatagram>()?;
        guard
            .construct_wr(10, WorkRequestFlags::Signaled)
            .setup_send()
            .setup_ud_addr(&ah, receiver.qp_number(), QKEY + 1)
            .setup_inline_data(b"wrong Q_Key");
        // SAFETY: `payload` is registered under `payload_mr` and outlives the request.
        unsafe {
            guard
                .construct_wr(11, WorkRequestFlags::Signaled)
                .setup_send()
                .setup_ud_addr(&ah, receiver.qp_number(), QKEY)
                .setup_sge(payload_mr.lkey(), payload.as_ptr() as u64, payload.len() as u32)
        };
        assert_eq!(guard.batch_len(), 2);
        guard.post()?;

        // Both sent (UD completes a send when it leaves), one received: the first receive holds
        // the GRH, then the datagram with the right Q_Key.
        let sent: Vec<u64> = poll(&send_cq, 2).iter().map(|&(wr_id, _, _)| wr_id).collect();
        assert_eq!(sent, [10, 11]);
        let length = (GRH_LEN + payload.len()) as u32;
        assert_eq!(poll(&recv_cq, 1), [(1, length, receiver.qp_number())]);
        assert_eq!(&received[GRH_LEN..GRH_LEN + payload.len()], &payload[..]);
        drop(ah);

        // The UD guard on an RC queue pair: refused before any request.
        builder.setup_qp_type(QueuePairType::ReliableConnection);
        let mut connected = builder.build_ex()?;
        let Err(err) = connected.start_post_send_as::<UnreliableDatagram>() else {
            panic!("a UD guard started on an RC queue pair");
        };
        assert!(
            matches!(
                err.0,
                StartPostSendErrorKind::WrongTransport {
                    qp_type: QueuePairType::ReliableConnection,
                    transport: QueuePairType::UnreliableDatagram,
                }
            ),
            "{err:?}"
        );
    }
    Ok(())
}
