//! First device test: sideway's own objects on the device named by `SIDEWAY_EXT_TEST_DEVICE`.
mod common;

use sideway::ibverbs::completion::{GenericCompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::AccessFlags;

#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn open_device_alloc_pd_reg_mr_create_cqs() {
    let ctx = common::open_test_device();

    let attr = ctx.query_device().expect("query_device");
    assert!(attr.phys_port_cnt() >= 1, "a device has at least one port");
    assert!(attr.max_qp() > 0 && attr.max_cqe() > 0 && attr.max_mr() > 0);
    let port = ctx.query_port(1).expect("query_port(1)");
    assert!(port.gid_tbl_len() > 0);

    let pd = ctx.alloc_pd().expect("alloc_pd");

    let buffer = vec![0u8; 4096];
    let mr = unsafe {
        pd.reg_mr(
            buffer.as_ptr() as usize,
            buffer.len(),
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite,
        )
    }
    .expect("reg_mr");
    assert_eq!(mr.region_len(), buffer.len());
    assert_eq!(mr.get_ptr(), buffer.as_ptr() as usize);
    assert_ne!(mr.lkey(), 0);

    let mut builder = ctx.create_cq_builder();
    builder.setup_cqe(64);
    let basic = builder.build().expect("basic CQ");
    let extended = builder.build_ex().expect("extended CQ");

    // Both CQs are new and empty: polling reports exactly that.
    for cq in [
        GenericCompletionQueue::from(basic),
        GenericCompletionQueue::from(extended),
    ] {
        assert!(matches!(
            cq.start_poll(),
            Err(PollCompletionQueueError::CompletionQueueEmpty)
        ));
    }
}

/// `DeviceContextExt::source_gid` picks what the tests address a device by: on rxe0, a RoCE v2
/// port, its IPv4-mapped RoCE v2 GID (never an empty, zero slot), also by its network device
/// and by its address; a RoCE v1 GID by index is refused.
#[test]
#[ignore = "device test: needs SIDEWAY_EXT_TEST_DEVICE (scripts/test runs it in the SoftRoCE VM)"]
fn source_gid_is_the_ipv4_mapped_roce_v2_gid_of_the_port() {
    use sideway::ibverbs::address::GidType;
    use sideway::ibverbs::device_context::LinkLayer;
    use sideway_ext::ibverbs::extension::DeviceContextExt;
    use sideway_ext::ibverbs::source_gid::{SourceGid, SourceGidErrorKind};

    let ctx = common::open_test_device();
    let found = ctx.source_gid(1, &SourceGid::Automatic).expect("query the GID table");
    if ctx.query_port(1).expect("query_port(1)").link_layer() != LinkLayer::Ethernet {
        assert!(found.is_none(), "an InfiniBand port sends from its LID by default");
        return;
    }
    let entry = found.expect("a RoCE port with an IP address has a RoCE v2 GID");
    let (index, gid) = common::local_gid(&ctx);
    assert_eq!((entry.index(), entry.gid()), (index, gid));
    assert!(matches!(entry.gid_type(), GidType::RoceV2) && !entry.gid().is_zero());
    let address = std::net::Ipv6Addr::from(entry.gid())
        .to_ipv4_mapped()
        .expect("IPv4-mapped");
    assert_eq!(ctx.query_gid(1, entry.index().into()).expect("query_gid"), entry.gid());
    // The same GID by its address and by its network device.
    let by_address = ctx
        .source_gid(1, &SourceGid::Address(address.into()))
        .expect("by address");
    assert_eq!(by_address, Some(entry));
    let table = ctx.query_gid_table().expect("the GID table");
    let netdev = table
        .iter()
        .find(|e| e.gid_index() == u32::from(index) && e.port_num() == 1)
        .and_then(|e| e.netdev_name().ok())
        .expect("the GID's network device");
    let by_netdev = ctx
        .source_gid(1, &SourceGid::Netdev(netdev))
        .expect("by network device");
    assert_eq!(by_netdev.map(|e| e.gid()), Some(entry.gid()));
    // A RoCE v1 GID of the same address, where the table has one, is refused by index.
    if let Some(v1) = table
        .iter()
        .find(|e| e.port_num() == 1 && e.gid() == gid && matches!(e.gid_type(), GidType::RoceV1))
    {
        let err = ctx.source_gid(1, &SourceGid::Index(v1.gid_index() as u8)).unwrap_err();
        assert!(matches!(err.0, SourceGidErrorKind::NotRoceV2 { .. }), "{err:?}");
    }
    // A port that does not exist is refused.
    let err = ctx.source_gid(2, &SourceGid::Automatic).unwrap_err();
    assert!(
        matches!(err.0, SourceGidErrorKind::InvalidPort { port: 2, .. }),
        "{err:?}"
    );
}
