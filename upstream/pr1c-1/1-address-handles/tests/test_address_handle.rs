use std::net::Ipv6Addr;

use sideway::ibverbs::address::{AddressHandleAttribute, GidEntry, GidType};
use sideway::ibverbs::address_handle::{CreateAddressHandleErrorKind, DEFAULT_HOP_LIMIT};
use sideway::ibverbs::device;
use sideway::ibverbs::device_context::DeviceContext;

/// On each device's first port: an address handle to the port's own GID, sent from its RoCE v2
/// GID with an IPv4 address (on RoCE), is made, twice; a non-global one on RoCE and one on a port
/// the device lacks are refused before the library.
#[test]
fn create_ah_to_the_port_itself() -> Result<(), Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    let mut tested = 0;
    for device in &device_list {
        let ctx = device.open()?;
        let pd = ctx.alloc_pd()?;
        let port = ctx.query_port(1)?;
        let roce = first_port_is_roce(&ctx)?;

        let mut attr = AddressHandleAttribute::new();
        attr.setup_port(1).setup_dest_lid(port.lid()).setup_service_level(1);
        if roce {
            let table = ctx.query_gid_table()?;
            let entry = roce_v2_gids(&table)
                .find(|e| Ipv6Addr::from(e.gid()).to_ipv4_mapped().is_some())
                .ok_or("a RoCE port with an IPv4 address has an IPv4-mapped RoCE v2 GID")?;
            // A non-global handle on RoCE is refused.
            let err = pd.create_ah(&attr).unwrap_err();
            assert!(
                matches!(err.0, CreateAddressHandleErrorKind::GlobalRoutingRequired { port: 1 }),
                "{err:?}"
            );
            // Flow label 0x12345, traffic class 0x10.
            let index = entry.gid_index() as u8;
            attr.setup_grh(&entry.gid(), 0x12345, index, DEFAULT_HOP_LIMIT, 0x10);
        }

        let ah = pd.create_ah(&attr)?;
        // A second handle for the same route, dropped before the first.
        drop(pd.create_ah(&attr)?);
        drop(ah);

        // A port the device lacks: a typed error.
        let missing = port_after_the_last(&ctx);
        attr.setup_port(missing);
        let err = pd.create_ah(&attr).unwrap_err();
        assert!(
            matches!(err.0, CreateAddressHandleErrorKind::InvalidPort { port, .. } if port == missing),
            "{err:?}"
        );
        tested += 1;
    }
    assert!(tested > 0, "no RDMA device");
    Ok(())
}

/// On RoCE, an address handle from the port's link-local GID (`fe80::/10`) to its IPv4-mapped
/// one is refused by name before `ibv_create_ah`; from the same GID to a link-local destination
/// it is made.
#[test]
fn create_ah_from_a_link_local_gid_to_a_routed_destination_is_refused() -> Result<(), Box<dyn std::error::Error>> {
    let device_list = device::DeviceList::new()?;
    for device in &device_list {
        let ctx = device.open()?;
        if !first_port_is_roce(&ctx)? {
            continue;
        }
        let pd = ctx.alloc_pd()?;
        let table = ctx.query_gid_table()?;
        let link_local = roce_v2_gids(&table)
            .find(|e| Ipv6Addr::from(e.gid()).is_unicast_link_local())
            .ok_or("every RoCE port has a link-local RoCE v2 GID")?;
        let routed = roce_v2_gids(&table)
            .find(|e| Ipv6Addr::from(e.gid()).to_ipv4_mapped().is_some())
            .ok_or("a RoCE port with an IPv4 address has an IPv4-mapped RoCE v2 GID")?;
        let index = link_local.gid_index() as u8;
        let mut attr = AddressHandleAttribute::new();
        attr.setup_port(1)
            .setup_grh_src_gid_index(index)
            .setup_grh_dest_gid(&routed.gid())
            .setup_grh_hop_limit(DEFAULT_HOP_LIMIT);
        let err = pd.create_ah(&attr).unwrap_err();
        assert!(
            matches!(err.0, CreateAddressHandleErrorKind::LinkLocalSourceToRoutedDestination { port: 1, src_gid_index, destination }
                if src_gid_index == index && destination == Ipv6Addr::from(routed.gid())),
            "{err:?}"
        );
        attr.setup_grh_dest_gid(&link_local.gid());
        pd.create_ah(&attr)?;
    }
    Ok(())
}

/// The RoCE v2 GIDs of port 1 in `table`.
fn roce_v2_gids(table: &[GidEntry]) -> impl Iterator<Item = &GidEntry> {
    table
        .iter()
        .filter(|e| e.port_num() == 1 && e.gid_type() == GidType::RoceV2)
}

/// The first port number above the device's ports.
fn port_after_the_last(ctx: &DeviceContext) -> u8 {
    (2..=u8::MAX)
        .find(|&port| ctx.query_port(port).is_err())
        .expect("a missing port")
}

/// Whether the first port is RoCE: its GIDs are RoCE's (an InfiniBand port's are all
/// `GidType::InfiniBand`).
fn first_port_is_roce(ctx: &DeviceContext) -> Result<bool, Box<dyn std::error::Error>> {
    let table = ctx.query_gid_table()?;
    Ok(table
        .iter()
        .any(|entry| entry.port_num() == 1 && entry.gid_type() != GidType::InfiniBand))
}
