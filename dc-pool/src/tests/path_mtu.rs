//! A destination whose port takes smaller packets than the pool's initiators send.
use sideway::ibverbs::device_context::Mtu;

use super::*;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;

#[test]
fn a_destination_with_a_smaller_path_mtu_than_the_initiators_is_refused_before_the_wire() {
    let mut pool = pool(DcPoolPolicy::Dedicated, 16, 0);
    // Initiators brought up at 4096 bytes (a 9000-byte Ethernet port).
    for initiator in &mut pool.core.initiators {
        initiator.path_mtu = Some(Mtu::Mtu4096);
    }
    let gid = std::net::Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0xc000, 0x0207]).into();
    let endpoint = |mtu: Option<Mtu>| {
        let mut endpoint = DcEndpoint::new(0, gid, 0x42, 7, true).expect("an endpoint");
        if let Some(mtu) = mtu {
            endpoint.setup_path_mtu(mtu);
        }
        endpoint
    };
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
