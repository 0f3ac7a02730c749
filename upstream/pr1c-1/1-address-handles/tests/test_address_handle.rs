use std::net::Ipv6Addr;

use sideway::ibverbs::address::{AddressHandleAttribute, GidType};
use sideway::ibverbs::address_handle::{CreateAddressHandleErrorKind, DEFAULT_HOP_LIMIT};
use sideway::ibverbs::device;
use sideway::ibverbs::device_context::LinkLayer;
use sideway::ibverbs::source_gid::{SourceGid, SourceGidErrorKind};

/// On each device's first port: an address handle to the port's own GID, sent from the GID that
/// `source_gid` picks (on RoCE, its IPv4-mapped RoCE v2 GID), keeps the route it was made with;
/// a non-global one on RoCE and one on a port the device lacks are refused before the library.
#[test]
fn create_ah_from_the_source_gid() -> Result<(), Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    let mut tested = 0;
    for device in &device_list {
        let ctx = device.open()?;
        let pd = ctx.alloc_pd()?;
        let port = ctx.query_port(1)?;
        let roce = port.link_layer() == Ok(LinkLayer::Ethernet);

        let mut attr = AddressHandleAttribute::new();
        attr.setup_port(1).setup_dest_lid(port.lid()).setup_service_level(1);
        match ctx.source_gid(1, &SourceGid::Automatic)? {
            Some(entry) => {
                assert!(roce, "InfiniBand sends from the LID by default");
                assert_eq!(entry.gid_type(), GidType::RoceV2);
                assert!(!entry.gid().is_zero());
                assert_eq!(ctx.query_gid(1, entry.index().into())?, entry.gid());
                // The same entry by its address.
                if let Some(v4) = Ipv6Addr::from(entry.gid()).to_ipv4_mapped() {
                    assert_eq!(ctx.source_gid(1, &SourceGid::Address(v4.into()))?, Some(entry));
                }
                // A non-global handle on RoCE is refused.
                let err = pd.create_ah(&attr).unwrap_err();
                assert!(
                    matches!(err.0, CreateAddressHandleErrorKind::GlobalRoutingRequired { port: 1 }),
                    "{err:?}"
                );
                attr.setup_grh_src_gid_index(entry.index())
                    .setup_grh_dest_gid(&entry.gid())
                    .setup_grh_hop_limit(DEFAULT_HOP_LIMIT)
                    .setup_grh_traffic_class(0x10)
                    .setup_grh_flow_label(0x12345);
            },
            None => assert!(!roce, "a RoCE port with an IP address has a RoCE v2 GID"),
        }

        let ah = pd.create_ah(&attr)?;
        let made = ah.attribute();
        assert_eq!((made.port(), made.dest_lid(), made.service_level()), (1, port.lid(), 1));
        assert_eq!(made.is_global(), roce);
        if roce {
            assert_eq!(made.dest_gid(), attr.dest_gid());
            assert_eq!(
                (made.hop_limit(), made.traffic_class(), made.flow_label()),
                (DEFAULT_HOP_LIMIT, 0x10, 0x12345)
            );
        }
        // A second handle for the same route, dropped before the first.
        drop(pd.create_ah(&attr)?);

        // A port the device lacks: a typed error, from the handle and from the GID lookup.
        let missing = port_after_the_last(&ctx);
        attr.setup_port(missing);
        let err = pd.create_ah(&attr).unwrap_err();
        assert!(
            matches!(err.0, CreateAddressHandleErrorKind::InvalidPort { port, .. } if port == missing),
            "{err:?}"
        );
        let err = ctx.source_gid(missing, &SourceGid::Automatic).unwrap_err();
        assert!(
            matches!(err.0, SourceGidErrorKind::InvalidPort { port, .. } if port == missing),
            "{err:?}"
        );
        tested += 1;
    }
    assert!(tested > 0, "no RDMA device");
    Ok(())
}

/// On RoCE, a GID by index must be RoCE v2: its RoCE v1 twin (same address, no IP header) and an
/// empty slot are refused.
#[test]
fn source_gid_by_index_refuses_what_is_not_roce_v2() -> Result<(), Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    for device in &device_list {
        let ctx = device.open()?;
        if ctx.query_port(1)?.link_layer() != Ok(LinkLayer::Ethernet) {
            continue;
        }
        let entry = ctx
            .source_gid(1, &SourceGid::Automatic)?
            .ok_or("a RoCE port with an IP address has a RoCE v2 GID")?;
        let by_index = ctx.source_gid(1, &SourceGid::Index(entry.index()))?;
        assert_eq!(by_index, Some(entry));
        let table = ctx.query_gid_table()?;
        if let Some(v1) = table
            .iter()
            .find(|e| e.port_num() == 1 && e.gid() == entry.gid() && e.gid_type() == GidType::RoceV1)
        {
            let err = ctx.source_gid(1, &SourceGid::Index(v1.gid_index() as u8)).unwrap_err();
            assert!(
                matches!(
                    err.0,
                    SourceGidErrorKind::NotRoceV2 {
                        port: 1,
                        gid_type: GidType::RoceV1,
                        ..
                    }
                ),
                "{err:?}"
            );
        }
        let empty = (0..=u8::MAX)
            .find(|&index| {
                !table
                    .iter()
                    .any(|e| e.port_num() == 1 && e.gid_index() == u32::from(index))
            })
            .expect("a free slot");
        let err = ctx.source_gid(1, &SourceGid::Index(empty)).unwrap_err();
        assert!(
            matches!(err.0, SourceGidErrorKind::EmptySlot { port: 1, index } if index == empty),
            "{err:?}"
        );
    }
    Ok(())
}

/// The first port number above the device's ports.
fn port_after_the_last(ctx: &sideway::ibverbs::device_context::DeviceContext) -> u8 {
    (2..=u8::MAX)
        .find(|&port| ctx.query_port(port).is_err())
        .expect("a missing port")
}
