#![cfg(feature = "mlx5")]
use sideway::ibverbs::device::DeviceList;
use sideway::ibverbs::queue_pair::{ModifyQueuePairErrorKind, QueuePairAttribute, QueuePairState};
use sideway::mlx5::dc::target::{CreateDcTargetErrorKind, DcTargetBringUp, DcTargetEndpointErrorKind};
use sideway::mlx5::device_context::Mlx5DeviceContext;

/// On every device: a DC target without its shared receive queue or receive CQ is refused before
/// the library; with both, it is created where the device has DC (mlx5), brought to RTR on port
/// 1, given a DCT number its endpoint carries, and moves no further; on any other device its
/// creation is the typed "not supported".
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
        // A ConnectX with DC (not run yet: the SoftRoCE VM has none).
        let mut dct = built?;
        assert_eq!((dct.state(), dct.dct_number()), (QueuePairState::Reset, None));
        let err = dct.endpoint().unwrap_err();
        assert!(matches!(err.0, DcTargetEndpointErrorKind::NoDctNumber), "{err:?}");
        dct.bring_up(&DcTargetBringUp::new(1))?;
        assert_eq!(dct.state(), QueuePairState::ReadyToReceive);
        let endpoint = dct.endpoint()?;
        assert_eq!(Some(endpoint.dct_number()), dct.dct_number());
        assert_eq!(endpoint.dc_key(), 0xd0d0);
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
