#![cfg(feature = "mlx5")]
//! A DC endpoint's address handle is a plain `ibv_create_ah`: these run on any device, rxe
//! included, with an endpoint made from the first port's own LID and GID.

use sideway::ibverbs::address_handle::{CreateAddressHandleErrorKind, DEFAULT_HOP_LIMIT};
use sideway::ibverbs::device;
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer};
use sideway::ibverbs::source_gid::SourceGid;
use sideway::mlx5::dc::endpoint::{CreateDcAddressHandleErrorKind, DcEndpoint, DcServiceClass};

/// The first port's endpoint (as a DC target on it would announce it) and the GID index to send
/// from.
fn own_endpoint(ctx: &DeviceContext) -> Result<(DcEndpoint, u8), Box<dyn std::error::Error>> {
    let port = ctx.query_port(1)?;
    let roce = port.link_layer() == Ok(LinkLayer::Ethernet);
    let (index, gid) = match ctx.source_gid(1, &SourceGid::Automatic)? {
        Some(entry) => (entry.index(), entry.gid()),
        None => (0, ctx.query_gid(1, 0)?),
    };
    Ok((DcEndpoint::new(port.lid(), gid, 0x12_3456, 0xdc, roce)?, index))
}

#[test]
fn dc_endpoint_gets_the_address_of_its_link_layer() -> Result<(), Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    let mut tested = 0;
    for device in &device_list {
        let ctx = device.open()?;
        let pd = ctx.alloc_pd()?;
        let (endpoint, index) = own_endpoint(&ctx)?;
        let ah = endpoint.create_ah(&pd, 1, index)?;
        let attr = ah.attribute();
        assert_eq!((attr.port(), attr.is_global()), (1, endpoint.is_roce()));
        if endpoint.is_roce() {
            assert_eq!(attr.dest_gid(), endpoint.gid());
            assert_eq!((attr.src_gid_index(), attr.hop_limit()), (index, DEFAULT_HOP_LIMIT));
        } else {
            assert_eq!(attr.dest_lid(), endpoint.lid());
        }

        // With a class of service: the service level everywhere, the GRH's fields on RoCE.
        let mut class = DcServiceClass::new();
        class
            .setup_traffic_class(26 << 2)
            .setup_flow_label(0x1_2345)
            .setup_service_level(3);
        let ah = endpoint.create_ah_with_class(&pd, 1, index, &class)?;
        let attr = ah.attribute();
        assert_eq!(attr.service_level(), 3);
        if endpoint.is_roce() {
            assert_eq!((attr.traffic_class(), attr.flow_label()), (104, 0x1_2345));
        }
        tested += 1;
    }
    assert!(tested > 0, "no RDMA device");
    Ok(())
}

#[test]
fn dc_endpoint_on_the_other_link_layer_is_a_mismatch() -> Result<(), Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    for device in &device_list {
        let ctx = device.open()?;
        let pd = ctx.alloc_pd()?;
        let (endpoint, index) = own_endpoint(&ctx)?;
        let local_is_roce = endpoint.is_roce();
        // The same values, said of a port on the other link layer (a RoCE endpoint needs a GID).
        let other = DcEndpoint::new(1, endpoint.gid(), endpoint.dct_number(), 0xdc, !local_is_roce)?;
        let err = other.create_ah(&pd, 1, index).unwrap_err();
        assert!(
            matches!(
                err.0,
                CreateDcAddressHandleErrorKind::LinkLayerMismatch { port: 1, local_is_roce: l, remote_is_roce: r }
                    if l == local_is_roce && r != local_is_roce
            ),
            "{err:?}"
        );
        // A port the device lacks is the address handle's InvalidPort.
        for port in [0, 200] {
            let err = endpoint.create_ah(&pd, port, index).unwrap_err();
            match err.0 {
                CreateDcAddressHandleErrorKind::AddressHandle(ref inner) => assert!(
                    matches!(inner.0, CreateAddressHandleErrorKind::InvalidPort { port: p, .. } if p == port),
                    "{inner:?}"
                ),
                ref other => panic!("port {port}: {other:?}"),
            }
        }
    }
    Ok(())
}
