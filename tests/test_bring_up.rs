//! The examples' bring-up (examples/common/bring_up.rs): its attributes against the RC and UD
//! transition rules, its endpoint's checks and serde form; and on a real device (SoftRoCE in
//! the VM) RC queue pairs connected from each other's endpoints, UD queue pairs from a port and
//! a Q_Key, an address handle made from a received datagram's completion answering its sender;
//! bad ports and a RoCE port without a GID index are typed errors that reach no library call.
#[path = "../examples/common/bring_up.rs"]
mod bring_up;
mod common;

use std::sync::Arc;
use std::time::Duration;

use bring_up::{
    BringUpRcErrorKind, BringUpUdErrorKind, InvalidRcEndpointErrorKind, QueryRcEndpointErrorKind, RcBringUp,
    RcEndpoint, UdBringUp, MAX_PSN, MAX_QP_NUMBER,
};
use common::{address_of, local_gid, open_test_device, wait_completions, Buffer};
use rdma_mummy_sys::ibv_sge;
use serial_test::serial;
use sideway::ibverbs::address::Gid;
use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer, Mtu};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    ModifyQueuePairErrorKind, QueuePairAttributeMask, QueuePairState, SetInlineData, WorkRequestFlags,
};
use sideway_ext::ibverbs::address_from_work_completion::GRH_LEN;
use sideway_ext::ibverbs::extension::ProtectionDomainExt;
use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueue;

const TIMEOUT: Duration = Duration::from_secs(30);
const QKEY: u32 = 0x1234_5678;
/// Receive slots of 256 bytes: a GRH and a short message.
const SLOT: usize = 256;

/// A RoCE v2 GID: IPv4 192.0.2.7 mapped into IPv6.
fn roce_gid() -> Gid {
    Gid::from(std::net::Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0xc000, 0x0207]))
}

#[test]
fn endpoint_fields_are_checked_to_24_bits() {
    assert!(RcEndpoint::new(0, roce_gid(), MAX_QP_NUMBER, MAX_PSN).is_ok());
    assert!(matches!(
        RcEndpoint::new(0, roce_gid(), MAX_QP_NUMBER + 1, 0).unwrap_err().0,
        InvalidRcEndpointErrorKind::QueuePairNumberOutOfRange { qp_number: 0x100_0000 }
    ));
    assert!(matches!(
        RcEndpoint::new(0, roce_gid(), 1, u32::MAX).unwrap_err().0,
        InvalidRcEndpointErrorKind::PacketSequenceNumberOutOfRange { psn: u32::MAX }
    ));
    let debug = format!("{:?}", RcEndpoint::new(1, roce_gid(), 0x42, 7).unwrap());
    assert!(debug.contains("::ffff:192.0.2.7") && debug.contains("0x42"), "{debug}");
}

#[cfg(feature = "serde")]
#[test]
fn endpoint_json_round_trip_and_validation() {
    let ep = RcEndpoint::new(3, roce_gid(), 0xab_cdef, 0x12).unwrap();
    let json = serde_json::to_string(&ep).unwrap();
    assert_eq!(
        json,
        r#"{"lid":3,"gid":"::ffff:192.0.2.7","qp_number":11259375,"psn":18}"#
    );
    assert_eq!(serde_json::from_str::<RcEndpoint>(&json).unwrap(), ep);
    for bad in [
        r#"{"lid":3,"gid":"::1","qp_number":16777216,"psn":0}"#,
        r#"{"lid":3,"gid":"::1","qp_number":1,"psn":16777216}"#,
        r#"{"lid":3,"gid":"nope","qp_number":1,"psn":0}"#,
        r#"{"lid":3,"gid":"::1","qp_number":1}"#,
        r#"{"lid":3,"gid":"::1","qp_number":1,"psn":0,"extra":1}"#,
    ] {
        assert!(serde_json::from_str::<RcEndpoint>(bad).is_err(), "accepted {bad}");
    }
}

/// The RC attributes carry exactly the kernel's `qp_state_table` required masks for RESET → INIT
/// → RTR → RTS (drivers/infiniband/core/verbs.c), with the endpoint's and the defaults' values.
#[test]
fn rc_attributes_pass_the_rc_table_in_order() {
    use QueuePairAttributeMask as M;
    let remote = RcEndpoint::new(0, roce_gid(), 0x12_3456, 0xab_cdef).unwrap();
    let mut params = RcBringUp::new(1);
    params.src_gid_index = Some(3);
    params.psn = 0x42;
    let [init, rtr, rts] = params.attributes(&remote, Mtu::Mtu1024);
    assert_eq!(
        [init.state(), rtr.state(), rts.state()],
        [
            QueuePairState::Init,
            QueuePairState::ReadyToReceive,
            QueuePairState::ReadyToSend
        ]
    );
    assert_eq!(init.mask(), M::State | M::PartitionKeyIndex | M::Port | M::AccessFlags);
    assert_eq!(
        rtr.mask(),
        M::State
            | M::AddressVector
            | M::PathMtu
            | M::DestinationQueuePairNumber
            | M::ReceiveQueuePacketSequenceNumber
            | M::MaxDestinationReadAtomic
            | M::MinResponderNotReadyTimer
    );
    assert_eq!(
        rts.mask(),
        M::State
            | M::SendQueuePacketSequenceNumber
            | M::Timeout
            | M::RetryCount
            | M::ResponderNotReadyRetryCount
            | M::MaxReadAtomic
    );
    assert_eq!(
        (rtr.dest_qp_num(), rtr.rq_psn(), rts.sq_psn()),
        (0x12_3456, 0xab_cdef, 0x42)
    );
    assert_eq!(
        (init.port(), rts.timeout(), rts.retry_cnt(), rts.rnr_retry()),
        (1, 14, 7, 7)
    );
    let av = params.address_vector(&remote);
    assert!(av.is_global());
    assert_eq!(
        (av.src_gid_index(), av.hop_limit(), av.dest_gid()),
        (3, sideway_ext::ibverbs::address_handle::DEFAULT_HOP_LIMIT, roce_gid())
    );
}

#[test]
fn rc_without_a_gid_index_addresses_the_lid() {
    let remote = RcEndpoint::new(0x17, Gid::default(), 5, 0).unwrap();
    let av = RcBringUp::new(2).address_vector(&remote);
    assert!(!av.is_global());
    assert_eq!((av.dest_lid(), av.port()), (0x17, 2));
}

/// The UD attributes carry the kernel's required masks for RESET → INIT → RTR → RTS.
#[test]
fn ud_attributes_pass_the_ud_table_in_order() {
    use QueuePairAttributeMask as M;
    let mut params = UdBringUp::new(1, 0x1111_2222);
    params.sq_psn = 9;
    let [init, rtr, rts] = params.attributes();
    assert_eq!(
        [init.state(), rtr.state(), rts.state()],
        [
            QueuePairState::Init,
            QueuePairState::ReadyToReceive,
            QueuePairState::ReadyToSend
        ]
    );
    assert_eq!(
        [init.mask(), rtr.mask(), rts.mask()],
        [
            M::State | M::PartitionKeyIndex | M::Port | M::QueueKey,
            M::State,
            M::State | M::SendQueuePacketSequenceNumber
        ]
    );
    assert_eq!((init.qkey(), rts.sq_psn()), (0x1111_2222, 9));
}

struct Setup {
    ctx: Arc<DeviceContext>,
    pd: Arc<ProtectionDomain>,
    cq: Arc<BasicCompletionQueue>,
    srq: Arc<SharedReceiveQueue>,
    buffer: Buffer,
}

/// A PD, one CQ for everything, and an SRQ with 16 receives of [`SLOT`] bytes posted.
fn setup() -> Setup {
    let ctx = open_test_device();
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq_builder().setup_cqe(128).build().expect("CQ");
    let srq = pd.create_srq_builder().setup_max_wr(32).build().expect("SRQ");
    let buffer = Buffer::new(&pd, 16 * SLOT);
    for slot in 0..16 {
        let sge = ibv_sge {
            addr: buffer.addr(slot * SLOT),
            length: SLOT as u32,
            lkey: buffer.lkey(),
        };
        // SAFETY: the slot lies in the buffer, which outlives every use of the SRQ here.
        unsafe { srq.post_recv_one(slot as u64, &[sge]) }.expect("post_recv_one");
    }
    Setup {
        ctx,
        pd,
        cq,
        srq,
        buffer,
    }
}

/// Two RC queue pairs, each brought up from the other's endpoint (through JSON with `serde`),
/// with distinct PSNs: the attributes read back are the endpoint's, and a message goes each way,
/// landing on the right queue pair.
#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn rc_bring_up_connects_from_the_peers_endpoint() {
    let s = setup();
    let (gid_index, gid) = local_gid(&s.ctx);
    let build = || {
        s.srq
            .create_qp_builder()
            .setup_send_cq(s.cq.clone())
            .setup_recv_cq(s.cq.clone())
            .setup_max_inline_data(64)
            .build_rc()
            .expect("RC")
    };
    let (mut a, mut b) = (build(), build());
    let mut params_a = RcBringUp::new(1);
    params_a.src_gid_index = Some(gid_index);
    params_a.psn = 0x11_1111;
    let mut params_b = RcBringUp::new(1);
    params_b.src_gid_index = Some(gid_index);
    params_b.psn = 0x22_2222;
    let endpoint_a = params_a.endpoint(&s.ctx, &a).expect("endpoint a");
    let endpoint_b = params_b.endpoint(&s.ctx, &b).expect("endpoint b");
    assert_eq!(
        (endpoint_a.gid(), endpoint_a.qp_number(), endpoint_a.psn()),
        (gid, a.qp_number(), 0x11_1111)
    );
    #[cfg(feature = "serde")]
    let endpoint_b: RcEndpoint = serde_json::from_str(&serde_json::to_string(&endpoint_b).unwrap()).unwrap();
    params_a.bring_up(&s.ctx, &mut a, &endpoint_b).expect("bring up a");
    params_b.bring_up(&s.ctx, &mut b, &endpoint_a).expect("bring up b");
    assert_eq!(
        (a.state(), b.state()),
        (QueuePairState::ReadyToSend, QueuePairState::ReadyToSend)
    );
    let attr = b
        .query(
            QueuePairAttributeMask::State
                | QueuePairAttributeMask::DestinationQueuePairNumber
                | QueuePairAttributeMask::ReceiveQueuePacketSequenceNumber
                | QueuePairAttributeMask::SendQueuePacketSequenceNumber,
        )
        .expect("query b");
    assert_eq!(
        (attr.state(), attr.dest_qp_num(), attr.rq_psn(), attr.sq_psn()),
        (QueuePairState::ReadyToSend, a.qp_number(), 0x11_1111, 0x22_2222)
    );

    a.post_send_one(1, WorkRequestFlags::Signaled, |wr| {
        wr.setup_send().setup_inline_data(b"from a")
    })
    .expect("send a");
    b.post_send_one(2, WorkRequestFlags::Signaled, |wr| {
        wr.setup_send().setup_inline_data(b"from b")
    })
    .expect("send b");
    let wcs = wait_completions(&*s.cq, 4, TIMEOUT);
    let mut received = Vec::new();
    for wc in &wcs {
        assert!(wc.is_success(), "{wc:?}");
        if wc.opcode_raw() == rdma_mummy_sys::ibv_wc_opcode::IBV_WC_RECV {
            let text = s.buffer.read(wc.wr_id() as usize * SLOT, wc.byte_len() as usize);
            received.push((wc.qp_number(), text));
        }
    }
    received.sort();
    let mut expected = vec![(b.qp_number(), b"from a".to_vec()), (a.qp_number(), b"from b".to_vec())];
    expected.sort();
    assert_eq!(received, expected);
}

/// Port 0 is InvalidPort and a RoCE port without a GID index is SourceGidIndexRequired, for the
/// endpoint and the bring-up, leaving the queue pair in RESET; a second bring-up from RTS is an
/// invalid transition.
#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn rc_bring_up_refuses_a_bad_port_and_a_roce_port_without_a_gid_index() {
    let s = setup();
    let (gid_index, gid) = local_gid(&s.ctx);
    let mut qp = s
        .srq
        .create_qp_builder()
        .setup_send_cq(s.cq.clone())
        .setup_recv_cq(s.cq.clone())
        .build_rc()
        .expect("RC");
    let peer = RcEndpoint::new(0, gid, qp.qp_number(), 0).expect("endpoint");
    let err = RcBringUp::new(0).bring_up(&s.ctx, &mut qp, &peer).unwrap_err();
    assert!(
        matches!(err.0, BringUpRcErrorKind::InvalidPort { port: 0, .. }),
        "{err:?}"
    );
    let err = RcBringUp::new(0).endpoint(&s.ctx, &qp).unwrap_err();
    assert!(
        matches!(err.0, QueryRcEndpointErrorKind::InvalidPort { port: 0, .. }),
        "{err:?}"
    );
    assert_eq!(
        s.ctx.query_port(1).expect("port 1").link_layer(),
        LinkLayer::Ethernet,
        "this test needs a RoCE port (rxe)"
    );
    let err = RcBringUp::new(1).bring_up(&s.ctx, &mut qp, &peer).unwrap_err();
    assert!(
        matches!(err.0, BringUpRcErrorKind::SourceGidIndexRequired { port: 1 }),
        "{err:?}"
    );
    let err = RcBringUp::new(1).endpoint(&s.ctx, &qp).unwrap_err();
    assert!(
        matches!(err.0, QueryRcEndpointErrorKind::SourceGidIndexRequired { port: 1 }),
        "{err:?}"
    );
    assert_eq!(qp.state(), QueuePairState::Reset);

    // To itself: a loopback connection, then once more from RTS.
    let mut params = RcBringUp::new(1);
    params.src_gid_index = Some(gid_index);
    let own = params.endpoint(&s.ctx, &qp).expect("endpoint");
    params.bring_up(&s.ctx, &mut qp, &own).expect("bring up");
    let err = params.bring_up(&s.ctx, &mut qp, &own).unwrap_err();
    assert!(
        matches!(
            &err.0,
            BringUpRcErrorKind::Modify(modify) if matches!(modify.0, ModifyQueuePairErrorKind::InvalidTransition { .. })
        ),
        "{err:?}"
    );
}

/// A UD queue pair brought up from a port and a Q_Key reads back RTS and that Q_Key; port 0 is
/// InvalidPort and leaves it in RESET.
#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn ud_bring_up_reaches_rts_with_the_qkey() {
    let s = setup();
    let mut qp = s
        .srq
        .create_qp_builder()
        .setup_send_cq(s.cq.clone())
        .setup_recv_cq(s.cq.clone())
        .build_ud()
        .expect("UD");
    let err = UdBringUp::new(0, QKEY).bring_up(&s.ctx, &mut qp).unwrap_err();
    assert!(
        matches!(err.0, BringUpUdErrorKind::InvalidPort { port: 0, .. }),
        "{err:?}"
    );
    assert_eq!(qp.state(), QueuePairState::Reset);
    UdBringUp::new(1, QKEY).bring_up(&s.ctx, &mut qp).expect("bring up");
    let attr = qp
        .query(QueuePairAttributeMask::State | QueuePairAttributeMask::QueueKey)
        .expect("query");
    assert_eq!((attr.state(), attr.qkey()), (QueuePairState::ReadyToSend, QKEY));
}

/// A client sends a datagram; the server makes an address handle from its receive completion
/// and GRH, which names the client's GID from the local GID it arrived on, and answers through
/// it: the client receives the answer from the server's queue pair.
#[test]
#[serial]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn an_address_handle_from_a_work_completion_answers_the_sender() {
    let s = setup();
    let (gid_index, gid) = local_gid(&s.ctx);
    let build = || {
        let mut qp = s
            .srq
            .create_qp_builder()
            .setup_send_cq(s.cq.clone())
            .setup_recv_cq(s.cq.clone())
            .setup_max_inline_data(64)
            .build_ud()
            .expect("UD");
        UdBringUp::new(1, QKEY).bring_up(&s.ctx, &mut qp).expect("bring up");
        qp
    };
    let (mut server, mut client) = (build(), build());
    let to_server = s.pd.create_ah(&address_of(gid_index, gid)).expect("AH to the server");
    client
        .post_send_one(1, WorkRequestFlags::Signaled, |wr| {
            wr.setup_send()
                .setup_ud_addr(&to_server, server.qp_number(), QKEY)
                .setup_inline_data(b"question")
        })
        .expect("client send");
    let mut wcs = wait_completions(&*s.cq, 2, TIMEOUT);
    wcs.retain(|wc| wc.qp_number() == server.qp_number());
    let [question] = wcs.as_slice() else {
        panic!("one receive on the server: {wcs:?}")
    };
    assert!(question.is_success() && question.has_grh(), "{question:?}");
    assert_eq!(question.src_qp(), client.qp_number());
    let offset = question.wr_id() as usize * SLOT;
    assert_eq!(s.buffer.read(offset + GRH_LEN, 8), b"question");
    let grh: [u8; GRH_LEN] = s.buffer.read(offset, GRH_LEN).try_into().unwrap();

    let to_client =
        s.pd.create_ah_from_wc(1, question, &grh)
            .expect("AH from the completion");
    let attr = to_client.attribute();
    assert!(attr.is_global(), "{attr:?}");
    assert_eq!(
        (attr.dest_gid(), attr.src_gid_index(), attr.port()),
        (gid, gid_index, 1)
    );

    server
        .post_send_one(2, WorkRequestFlags::Signaled, |wr| {
            wr.setup_send()
                .setup_ud_addr(&to_client, question.src_qp(), QKEY)
                .setup_inline_data(b"answer")
        })
        .expect("server send");
    let mut wcs = wait_completions(&*s.cq, 2, TIMEOUT);
    wcs.retain(|wc| wc.qp_number() == client.qp_number());
    let [answer] = wcs.as_slice() else {
        panic!("one receive on the client: {wcs:?}")
    };
    assert!(answer.is_success(), "{answer:?}");
    assert_eq!(answer.src_qp(), server.qp_number());
    assert_eq!(s.buffer.read(answer.wr_id() as usize * SLOT + GRH_LEN, 6), b"answer");
}
