use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::completion::{GenericCompletionQueue, PollCompletionQueueError, WorkCompletionStatus};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::queue_pair::{GenericQueuePair, PostSendGuard, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::{
    address::{AddressHandleAttribute, GidType},
    device,
    device_context::Mtu,
    queue_pair::{QueuePair, QueuePairAttribute, QueuePairState},
    AccessFlags,
};

use rstest::rstest;

const RECEIVERS: usize = 4;
const ROUNDS: usize = 50;
const MESSAGE_LEN: usize = 64;
const SRQ_LIMIT: u32 = 16;

/// Brings an RC QP to RTS, connected to itself.
fn connect_to_self(ctx: &Arc<DeviceContext>, qp: &mut GenericQueuePair) {
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

/// The bytes QP `receiver` sends in `round`.
fn message(receiver: usize, round: usize) -> [u8; MESSAGE_LEN] {
    std::array::from_fn(|i| (receiver * 31 + round * 7 + i) as u8)
}

/// Polls `cq` until `want` completions came, each checked successful, and returns them as
/// (wr_id, qp_number, byte_len).
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
                    completions.push((wc.wr_id(), wc.qp_number(), wc.byte_len()));
                }
            },
            Err(PollCompletionQueueError::CompletionQueueEmpty) => std::thread::yield_now(),
            Err(err) => panic!("poll: {err}"),
        }
    }
    assert_eq!(completions.len(), want, "more completions than requests");
    completions
}

/// Four RC queue pairs receive through one SRQ: every message lands once, in a receive of the
/// SRQ, on the QP it was sent to, and the SRQ's limit, armed until then, fires and disarms itself.
#[rstest]
#[case::basic_qp(false)]
#[case::extended_qp(true)]
fn four_rc_receivers_share_one_srq(#[case] use_qp_ex: bool) -> Result<(), Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    for device in &device_list {
        let ctx = device.open().unwrap();
        let pd = ctx.alloc_pd().unwrap();

        let messages = RECEIVERS * ROUNDS;
        let mut recv_data = vec![0u8; messages * MESSAGE_LEN];
        let mut send_data = vec![0u8; RECEIVERS * MESSAGE_LEN];
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
        // SAFETY: both buffers outlive their regions, which are dropped first at the end.
        let recv_mr = unsafe { pd.reg_mr(recv_data.as_mut_ptr() as _, recv_data.len(), access).unwrap() };
        let send_mr = unsafe { pd.reg_mr(send_data.as_mut_ptr() as _, send_data.len(), access).unwrap() };

        let mut cq_builder = ctx.create_cq_builder();
        cq_builder.setup_cqe(512);
        let sq = GenericCompletionQueue::from(cq_builder.build().unwrap());
        let rq = GenericCompletionQueue::from(cq_builder.build().unwrap());

        let srq = pd
            .create_srq_builder()
            .setup_max_wr(messages as u32)
            .setup_srq_limit(SRQ_LIMIT)
            .build()
            .unwrap();
        // One receive per message, each its own slot (wr_id = slot).
        let mut guard = srq.start_post_recv();
        for slot in 0..messages {
            // SAFETY: the slot lies inside `recv_data`, registered as `recv_mr`.
            unsafe {
                guard.construct_wr(slot as u64).setup_sge(
                    recv_mr.lkey(),
                    recv_data.as_ptr().add(slot * MESSAGE_LEN) as u64,
                    MESSAGE_LEN as u32,
                )
            };
        }
        guard.post().unwrap();
        assert_eq!(srq.query()?.srq_limit, SRQ_LIMIT, "armed");

        let mut builder = pd.create_qp_builder();
        builder
            .setup_send_cq(sq.clone())
            .setup_recv_cq(rq.clone())
            .setup_srq(&srq);
        let mut qps: Vec<GenericQueuePair> = (0..RECEIVERS)
            .map(|_| {
                if use_qp_ex {
                    builder.build_ex().unwrap().into()
                } else {
                    builder.build().unwrap().into()
                }
            })
            .collect();
        for qp in &mut qps {
            connect_to_self(&ctx, qp);
        }
        let receiver_of: BTreeMap<u32, usize> = qps.iter().enumerate().map(|(i, qp)| (qp.qp_number(), i)).collect();
        assert_eq!(receiver_of.len(), RECEIVERS);

        let mut received = Vec::new();
        for round in 0..ROUNDS {
            for (receiver, qp) in qps.iter_mut().enumerate() {
                let offset = receiver * MESSAGE_LEN;
                send_data[offset..offset + MESSAGE_LEN].copy_from_slice(&message(receiver, round));
                let mut guard = qp.start_post_send();
                let send_handle = guard
                    .construct_wr((round * RECEIVERS + receiver) as u64, WorkRequestFlags::Signaled)
                    .setup_send();
                // SAFETY: the message lies inside `send_data`, registered as `send_mr`.
                unsafe {
                    send_handle.setup_sge(
                        send_mr.lkey(),
                        send_data.as_ptr().add(offset) as u64,
                        MESSAGE_LEN as u32,
                    )
                };
                guard.post().unwrap();
            }
            // The send buffers are reused next round: wait until every send of this one is done.
            poll(&sq, RECEIVERS);
            received.extend(poll(&rq, RECEIVERS));
        }

        // Every receive was consumed once, each holding the message of one (receiver, round).
        let slots: BTreeSet<u64> = received.iter().map(|&(wr_id, _, _)| wr_id).collect();
        assert_eq!(slots.len(), messages);
        let mut rounds_of = vec![BTreeSet::new(); RECEIVERS];
        for &(slot, qp_number, byte_len) in &received {
            assert_eq!(byte_len as usize, MESSAGE_LEN);
            let receiver = receiver_of[&qp_number];
            let data = &recv_data[slot as usize * MESSAGE_LEN..][..MESSAGE_LEN];
            let round = (0..ROUNDS)
                .find(|&round| data == message(receiver, round))
                .unwrap_or_else(|| panic!("slot {slot} on receiver {receiver} holds {data:?}"));
            assert!(
                rounds_of[receiver].insert(round),
                "receiver {receiver} got round {round} twice"
            );
        }
        assert!(rounds_of.iter().all(|rounds| rounds.len() == ROUNDS));

        // Fewer than SRQ_LIMIT receives left: the limit fired, which disarms it (the device
        // reports 0 from then on; the asynchronous event it raised is not read here).
        assert_eq!(srq.query()?.srq_limit, 0, "the limit fired");
        println!("{messages} messages over {RECEIVERS} receivers on one SRQ, its limit reached");
    }

    Ok(())
}
