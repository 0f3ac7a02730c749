#![cfg(feature = "mlx5")]
use sideway::ibverbs::address::{AddressHandleAttribute, GidType};
use sideway::ibverbs::device::DeviceList;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{ModifyQueuePairErrorKind, QueuePairAttribute, QueuePairState};
use sideway::ibverbs::AccessFlags;
use sideway::mlx5::dc::target::CreateDcTargetErrorKind;
use sideway::mlx5::device_context::Mlx5DeviceContext;

/// On every device: a DC target without its shared receive queue or receive CQ is refused before
/// the library; with both, it is created where the device has DC (mlx5), brought to RTR on port
/// 1 with `modify` (RESET -> INIT -> RTR, global from the port's RoCE v2 GID where it has one),
/// given its DCT number there, and moves no further; on any other device its creation is the
/// typed "not supported".
#[test]
fn dc_target_on_every_device() -> Result<(), Box<dyn std::error::Error>> {
    let list = DeviceList::new()?;
    assert!(list.iter().next().is_some(), "no RDMA device");
    for device in &list {
        let ctx = device.open()?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq_builder().setup_cqe(16).build()?;
        let srq = pd.create_srq_builder().build()?;

        let err = pd.create_dct_builder().setup_recv_cq(cq.clone()).build().unwrap_err();
        assert!(
            matches!(err.0, CreateDcTargetErrorKind::MissingSharedReceiveQueue),
            "{err:?}"
        );
        let err = pd.create_dct_builder().setup_srq(&srq).build().unwrap_err();
        assert!(
            matches!(err.0, CreateDcTargetErrorKind::MissingReceiveCompletionQueue),
            "{err:?}"
        );

        let roce_v2 = ctx
            .query_gid_table()?
            .into_iter()
            .find(|entry| entry.port_num() == 1 && matches!(entry.gid_type(), GidType::RoceV2));
        let dc = Mlx5DeviceContext::new(ctx.clone()).query_dc_capabilities()?;
        let built = pd
            .create_dct_builder()
            .setup_recv_cq(cq)
            .setup_srq(&srq)
            .setup_dc_key(0xd0d0)
            .build();
        if !dc.is_supported() {
            let err = built.unwrap_err();
            assert!(err.is_not_supported(), "{err:?}");
            continue;
        }
        let mut dct = built?;
        assert_eq!((dct.state(), dct.dct_number()), (QueuePairState::Reset, None));
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(1)
            .setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite);
        dct.modify(&init)?;
        assert_eq!((dct.state(), dct.dct_number()), (QueuePairState::Init, None));
        let mut av = AddressHandleAttribute::new();
        av.setup_port(1);
        if let Some(entry) = &roce_v2 {
            av.setup_grh_src_gid_index(entry.gid_index() as u8)
                .setup_grh_hop_limit(64);
        }
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(Mtu::Mtu1024)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&av);
        dct.modify(&rtr)?;
        assert_eq!(dct.state(), QueuePairState::ReadyToReceive);
        assert!(dct.dct_number().is_some());
        assert_eq!(
            (dct.port(), dct.path_mtu(), dct.dc_key()),
            (Some(1), Some(Mtu::Mtu1024), 0xd0d0)
        );
        assert_eq!(dct.src_gid_index(), roce_v2.map(|entry| entry.gid_index() as u8));
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend);
        let err = dct.modify(&rts).unwrap_err();
        assert!(
            matches!(err.0, ModifyQueuePairErrorKind::InvalidTransition { .. }),
            "{err:?}"
        );
    }
    Ok(())
}
