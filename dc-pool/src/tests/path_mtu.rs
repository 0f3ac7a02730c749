//! A destination whose port takes smaller packets than the pool's initiators send, and one whose
//! READ responses would be larger than the initiators' path takes.
use sideway::ibverbs::device_context::Mtu;

use super::*;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;

/// An endpoint of a RoCE target whose endpoint says its path MTU is `mtu` (or does not say).
fn endpoint(mtu: Option<Mtu>) -> DcEndpoint {
    let gid = std::net::Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0xc000, 0x0207]).into();
    let mut endpoint = DcEndpoint::new(0, gid, 0x42, 7, true).expect("an endpoint");
    if let Some(mtu) = mtu {
        endpoint.setup_path_mtu(mtu);
    }
    endpoint
}

#[test]
fn a_destination_with_a_smaller_path_mtu_than_the_initiators_is_refused_before_the_wire() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    // Initiators brought up at 4096 bytes (a 9000-byte Ethernet port).
    for initiator in &mut pool.initiators {
        initiator.path_mtu = Some(Mtu::Mtu4096);
    }
    // A 1500-byte node: 1024-byte packets at most.
    let small = pool.add_destination(endpoint(Some(Mtu::Mtu1024)));
    let err = pool.prepare(small).unwrap_err();
    assert!(
        matches!(
            err.0,
            PostToDestinationErrorKind::PathMtuTooSmall {
                destination: Mtu::Mtu1024,
                initiators: Mtu::Mtu4096
            }
        ),
        "{err:?}"
    );
    assert!(
        pool.start_post_send(small).is_err(),
        "nor does a post reach the initiator"
    );
    assert_eq!(pool.outstanding(small), 0);
    // As large, or unknown (a peer that does not say): not refused for its MTU.
    for mtu in [Some(Mtu::Mtu4096), None] {
        let id = pool.add_destination(endpoint(mtu));
        if let Err(err) = pool.prepare(id) {
            assert!(
                !matches!(err.0, PostToDestinationErrorKind::PathMtuTooSmall { .. }),
                "{err:?}"
            );
        }
    }
    take_calls();
}

/// Posts one signalled RDMA READ of `length` bytes to `destination`, in a batch of its own.
fn post_read(
    pool: &mut DcInitiatorPool<RecordingInitiator>, destination: DestinationId, wr_id: u64, length: u32,
) -> Result<(), sideway_ext::ibverbs::post_send_guard::PostSendError> {
    let mut guard = pool.start_post_send(destination).expect("the pool grants a batch");
    // SAFETY: the recorders never touch the buffer.
    unsafe {
        guard
            .construct_wr(wr_id, WorkRequestFlags::Signaled)
            .expect("room")
            .setup_read(0x55, 0x1000)
            .setup_sge(0x9, 0x2000, length);
    }
    guard.post()
}

#[test]
fn a_read_whose_responses_would_not_reach_the_initiators_is_refused_before_the_wire() {
    let mut pool = pool(DcPoolPolicy::Static, 16, 0);
    // Initiators brought up at 1024 bytes (a 1500-byte Ethernet port).
    for initiator in &mut pool.initiators {
        initiator.path_mtu = Some(Mtu::Mtu1024);
    }
    // A 9000-byte node: it answers a READ in packets of up to 4096 bytes.
    let far = pool.add_destination(endpoint(Some(Mtu::Mtu4096)));
    pool.prepare(far)
        .expect("a larger MTU takes every request the initiators send");
    take_calls();
    let err = post_read(&mut pool, far, 1, 4096).unwrap_err();
    assert!(
        matches!(
            err.0,
            PostSendErrorKind::ReadResponsesTooLarge {
                index: 0,
                wr_id: 1,
                length: 4096,
                path_mtu: Mtu::Mtu1024,
                responder_path_mtu: Mtu::Mtu4096,
                batch_len: 1,
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        take_calls(),
        ["qp16 start", "qp16 abort"],
        "nothing reached the provider"
    );
    assert_eq!(pool.outstanding(far), 0, "the refused batch holds nothing");
    // A READ of the initiators' MTU is one response packet of its length; writes go at the
    // initiators' own MTU: both posted.
    post_read(&mut pool, far, 2, 1024).expect("one response packet of 1024 bytes");
    post_writes(&mut pool, far, &[3]);
    assert_eq!(pool.outstanding(far), 2);
    // Any READ to a target at the initiators' MTU, or one whose endpoint does not say (an older
    // peer's), or added by its address alone: nothing to hold it to.
    let alike = pool.add_destination(endpoint(Some(Mtu::Mtu1024)));
    let unknown = pool.add_destination(endpoint(None));
    let raw = Address::new(1).add_to(&mut pool);
    for destination in [alike, unknown, raw] {
        post_read(&mut pool, destination, 4, 1 << 20).expect("no larger MTU known");
        assert_eq!(pool.outstanding(destination), 1);
    }
    take_calls();
}
