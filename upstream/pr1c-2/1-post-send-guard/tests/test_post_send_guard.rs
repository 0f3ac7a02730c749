use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::completion::{GenericCompletionQueue, PollCompletionQueueError, WorkCompletionStatus};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::post_send_guard::{ReliableConnection, TypedPostSendErrorKind};
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, QueuePairType, SendOperationFlags, SetInlineData, SetScatterGatherEntry, StartPostSendErrorKind,
    WorkRequestFlags,
};
use sideway::ibverbs::{
    address::{AddressHandleAttribute, GidType},
    device,
    device_context::Mtu,
    queue_pair::{QueuePair, QueuePairAttribute, QueuePairState},
    AccessFlags,
};

/// Brings an RC QP to RTS, connected to itself.
fn connect_to_self(ctx: &Arc<DeviceContext>, qp: &mut ExtendedQueuePair) {
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(1)
        .setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite);
    qp.modify(&attr).unwrap();

    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(Mtu::Mtu1024)
        .setup_dest_qp_num(qp.qp_number())
        .setup_rq_psn(1)
        .setup_max_dest_read_atomic(0)
        .setup_min_rnr_timer(12);
    let mut ah_attr = AddressHandleAttribute::new();
    let port_attr = ctx.query_port(1).unwrap();
    let gid_entries = ctx.query_gid_table().unwrap();
    let gid = gid_entries
        .iter()
        .find(|&&gid| {
            gid.port_num() == 1
                && (!gid.gid().is_unicast_link_local()
                    || gid.gid_type() == GidType::RoceV1
                    || gid.gid_type() == GidType::InfiniBand)
        })
        .unwrap();
    ah_attr
        .setup_dest_lid(port_attr.lid())
        .setup_port(1)
        .setup_service_level(1)
        .setup_grh_src_gid_index(gid.gid_index().try_into().unwrap())
        .setup_grh_dest_gid(&gid.gid())
        .setup_grh_hop_limit(64);
    attr.setup_address_vector(&ah_attr);
    qp.modify(&attr).unwrap();

    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToSend)
        .setup_sq_psn(1)
        .setup_timeout(12)
        .setup_retry_cnt(7)
        .setup_rnr_retry(7)
        .setup_max_read_atomic(0);
    qp.modify(&attr).unwrap();
    assert_eq!(QueuePairState::ReadyToSend, qp.state());
}

/// Polls `cq` until `want` completions came, each checked successful, and returns their wr_ids
/// and lengths (meaningful for receives only), sorted.
fn poll(cq: &GenericCompletionQueue, want: usize) -> Vec<(u64, u32)> {
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
                    completions.push((wc.wr_id(), wc.byte_len()));
                }
            },
            Err(PollCompletionQueueError::CompletionQueueEmpty) => std::thread::yield_now(),
            Err(err) => panic!("poll: {err}"),
        }
    }
    assert_eq!(completions.len(), want, "more completions than requests");
    completions.sort();
    completions
}

/// An RC queue pair connected to itself posts a WRITE (scatter/gather) and a SEND (inline) in one
/// batch through the transport guard: both land, byte for byte. A queue pair created without
/// WRITE has its write refused before the provider (`OperationNotEnabled`, naming the entry),
/// the batch aborted, and posts again afterwards; a UD queue pair refuses the RC guard.
#[test]
fn rc_guard_posts_send_and_write_and_refuses_what_the_queue_pair_lacks() -> Result<(), Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    assert!(device_list.iter().next().is_some(), "no device to test on");
    for device in &device_list {
        let ctx = device.open()?;
        let pd = ctx.alloc_pd()?;
        let source: Vec<u8> = (0..32).collect();
        let mut target = vec![0u8; 32];
        let mut received = vec![0u8; 64];
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
        // SAFETY: each buffer outlives its memory region and every request that uses it.
        let source_mr = unsafe { pd.reg_mr(source.as_ptr() as _, source.len(), access)? };
        let target_mr = unsafe { pd.reg_mr(target.as_mut_ptr() as _, target.len(), access)? };
        let received_mr = unsafe { pd.reg_mr(received.as_mut_ptr() as _, received.len(), access)? };

        let mut cq_builder = ctx.create_cq_builder();
        cq_builder.setup_cqe(64);
        // Basic CQs: on rxe, an extended CQ polled to its end reports phantom completions at its
        // next poll.
        let send_cq = GenericCompletionQueue::from(cq_builder.build()?);
        let recv_cq = GenericCompletionQueue::from(cq_builder.build()?);
        let mut builder = pd.create_qp_builder();
        builder
            .setup_max_inline_data(64)
            .setup_send_cq(send_cq.clone())
            .setup_recv_cq(recv_cq.clone())
            .setup_send_ops_flags(SendOperationFlags::Send | SendOperationFlags::Write);
        let mut qp = builder.build_ex()?;
        connect_to_self(&ctx, &mut qp);

        let mut guard = qp.start_post_recv();
        // SAFETY: `received` is registered under `received_mr` and outlives the receive.
        unsafe {
            guard
                .construct_wr(1)
                .setup_sge(received_mr.lkey(), received.as_mut_ptr() as _, 64)
        };
        guard.post()?;

        let mut guard = qp.start_post_send_as::<ReliableConnection>()?;
        // SAFETY: `source` is registered under `source_mr`, `target` under `target_mr` (remote
        // write allowed); both outlive the request.
        unsafe {
            guard
                .construct_wr(10, WorkRequestFlags::Signaled)
                .setup_write(target_mr.rkey(), target.as_mut_ptr() as u64)
                .setup_sge(source_mr.lkey(), source.as_ptr() as u64, 32)
        };
        guard
            .construct_wr(11, WorkRequestFlags::Signaled)
            .setup_send()
            .setup_inline_data(b"through the transport guard");
        assert_eq!(guard.batch_len(), 2);
        guard.post()?;

        let sent = poll(&send_cq, 2);
        assert_eq!(sent.iter().map(|&(wr_id, _)| wr_id).collect::<Vec<_>>(), [10, 11]);
        assert_eq!(poll(&recv_cq, 1), [(1, 27)]);
        assert_eq!(&received[..27], b"through the transport guard");
        assert_eq!(target, source);

        // A queue pair created with SEND only: its provider may leave the write's entry NULL.
        builder.setup_send_ops_flags(SendOperationFlags::Send);
        let mut send_only = builder.build_ex()?;
        connect_to_self(&ctx, &mut send_only);
        let mut guard = send_only.start_post_send_as::<ReliableConnection>()?;
        guard
            .construct_wr(20, WorkRequestFlags::Signaled)
            .setup_send()
            .setup_inline_data(b"aborted");
        // SAFETY: as above.
        unsafe {
            guard
                .construct_wr(21, WorkRequestFlags::Signaled)
                .setup_write(target_mr.rkey(), target.as_mut_ptr() as u64)
                .setup_sge(source_mr.lkey(), source.as_ptr() as u64, 32)
        };
        let err = guard.post().unwrap_err();
        assert!(
            matches!(
                err.0,
                TypedPostSendErrorKind::OperationNotEnabled {
                    index: 1,
                    wr_id: 21,
                    entry: "wr_rdma_write",
                    batch_len: 2,
                }
            ),
            "{err:?}"
        );
        // The whole batch was aborted: the queue pair posts again, and only what comes next lands.
        let mut guard = send_only.start_post_recv();
        // SAFETY: as above.
        unsafe {
            guard
                .construct_wr(2)
                .setup_sge(received_mr.lkey(), received.as_mut_ptr() as _, 64)
        };
        guard.post()?;
        let mut guard = send_only.start_post_send_as::<ReliableConnection>()?;
        guard
            .construct_wr(22, WorkRequestFlags::Signaled)
            .setup_send()
            .setup_inline_data(b"posted");
        guard.post()?;
        assert_eq!(poll(&send_cq, 1)[0].0, 22);
        assert_eq!(poll(&recv_cq, 1), [(2, 6)]);
        assert_eq!(&received[..6], b"posted");

        // The RC guard on a UD queue pair: refused before any request.
        builder.setup_qp_type(QueuePairType::UnreliableDatagram);
        let mut datagram = builder.build_ex()?;
        let Err(err) = datagram.start_post_send_as::<ReliableConnection>() else {
            panic!("an RC guard started on a UD queue pair");
        };
        assert!(
            matches!(
                err.0,
                StartPostSendErrorKind::WrongTransport {
                    qp_type: QueuePairType::UnreliableDatagram,
                    transport: QueuePairType::ReliableConnection,
                }
            ),
            "{err:?}"
        );
    }
    Ok(())
}

/// Inline data longer than the queue pair's granted `max_inline_data` (as `build_ex` read it
/// back) is refused by the guard before the provider, with the granted size, and the batch is
/// aborted: the queue pair posts again afterwards.
#[test]
fn rc_guard_refuses_inline_data_over_the_granted_size() -> Result<(), Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    assert!(device_list.iter().next().is_some(), "no device to test on");
    for device in &device_list {
        let ctx = device.open()?;
        let pd = ctx.alloc_pd()?;
        let mut received = vec![0u8; 4096];
        // SAFETY: the buffer outlives its memory region and every request that uses it.
        let received_mr = unsafe { pd.reg_mr(received.as_mut_ptr() as _, received.len(), AccessFlags::LocalWrite)? };

        let mut cq_builder = ctx.create_cq_builder();
        cq_builder.setup_cqe(64);
        let send_cq = GenericCompletionQueue::from(cq_builder.build()?);
        let recv_cq = GenericCompletionQueue::from(cq_builder.build()?);
        let mut builder = pd.create_qp_builder();
        builder
            .setup_max_inline_data(64)
            .setup_send_cq(send_cq.clone())
            .setup_recv_cq(recv_cq.clone())
            .setup_send_ops_flags(SendOperationFlags::Send);
        let mut qp = builder.build_ex()?;
        connect_to_self(&ctx, &mut qp);

        // Far over what any provider grants for 64 bytes asked.
        let too_long = vec![7u8; 4096];
        let mut guard = qp.start_post_send_as::<ReliableConnection>()?;
        guard
            .construct_wr(30, WorkRequestFlags::Signaled)
            .setup_send()
            .setup_inline_data(b"aborted");
        guard
            .construct_wr(31, WorkRequestFlags::Signaled)
            .setup_send()
            .setup_inline_data(&too_long);
        let err = guard.post().unwrap_err();
        let TypedPostSendErrorKind::InlineDataTooLong {
            index,
            wr_id,
            length,
            max_inline_data,
            batch_len,
        } = err.0
        else {
            panic!("{err:?}");
        };
        assert_eq!((index, wr_id, length, batch_len), (1, 31, 4096, 2));
        assert!((64..4096).contains(&max_inline_data), "granted {max_inline_data}");

        // The batch was aborted: only what comes next lands.
        let mut guard = qp.start_post_recv();
        // SAFETY: `received` is registered under `received_mr` and outlives the receive.
        unsafe {
            guard
                .construct_wr(3)
                .setup_sge(received_mr.lkey(), received.as_mut_ptr() as _, 4096)
        };
        guard.post()?;
        let mut guard = qp.start_post_send_as::<ReliableConnection>()?;
        guard
            .construct_wr(32, WorkRequestFlags::Signaled)
            .setup_send()
            .setup_inline_data(&too_long[..max_inline_data as usize]);
        guard.post()?;
        assert_eq!(poll(&send_cq, 1)[0].0, 32);
        assert_eq!(poll(&recv_cq, 1), [(3, max_inline_data)]);
        assert!(received[..max_inline_data as usize].iter().all(|&byte| byte == 7));
    }
    Ok(())
}
