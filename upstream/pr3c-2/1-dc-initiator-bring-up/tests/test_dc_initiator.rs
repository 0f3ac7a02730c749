#![cfg(feature = "mlx5")]
use sideway::ibverbs::device::DeviceList;
use sideway::ibverbs::queue_pair::{QueuePairAttribute, QueuePairState, SendOperationFlags};
use std::time::Duration;

use sideway::mlx5::dc::initiator::{CreateDcInitiatorErrorKind, DcInitiatorBringUp, DcRecovery, DC_SEND_OPERATIONS};
use sideway::mlx5::device_context::Mlx5DeviceContext;

/// On every device: a DC initiator without its send CQ, or with an operation DC cannot post, is
/// refused before the library; with its send CQ it is created where the device has DC (mlx5), in
/// RESET, granted at least the send queue it asked for (what `planned_max_send_wr` said before)
/// and the operations the device can do, moves to INIT through the DC initiator's table, is
/// brought up to RTS on port 1 and recovered from there; on any other device its creation is the
/// typed "not supported".
#[test]
fn dc_initiator_on_every_device() -> Result<(), Box<dyn std::error::Error>> {
    let list = DeviceList::new()?;
    assert!(list.iter().next().is_some(), "no RDMA device");
    for device in &list {
        let ctx = device.open()?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq_builder().setup_cqe(64).build()?;

        let err = pd.create_dci_builder().build().unwrap_err();
        assert!(
            matches!(err.0, CreateDcInitiatorErrorKind::MissingSendCompletionQueue),
            "{err:?}"
        );
        let err = pd
            .create_dci_builder()
            .setup_send_cq(cq.clone())
            .setup_send_ops_flags(SendOperationFlags::Send | SendOperationFlags::LocalInvalidate)
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err.0,
                CreateDcInitiatorErrorKind::UnsupportedSendOperations {
                    allowed: DC_SEND_OPERATIONS,
                    ..
                }
            ),
            "{err:?}"
        );

        let dc = Mlx5DeviceContext::new(ctx.clone()).query_dc_capabilities()?;
        let mut builder = pd.create_dci_builder();
        builder.setup_send_cq(cq).setup_max_send_wr(20);
        let built = builder.build();
        if !dc.is_supported() {
            let err = built.unwrap_err();
            assert!(err.is_not_supported(), "{err:?}");
            let err = builder.planned_max_send_wr().unwrap_err();
            assert!(err.is_not_supported(), "{err:?}");
            continue;
        }
        // A ConnectX with DC (not run yet: the SoftRoCE VM has none).
        let mut dci = built?;
        assert_eq!(dci.state(), QueuePairState::Reset);
        assert!(dci.max_send_wr() >= 20);
        assert_eq!(dci.max_send_wr(), builder.planned_max_send_wr()?);
        assert_eq!(dci.send_ops_flags().bits() & !DC_SEND_OPERATIONS.bits(), 0);
        assert!(dci.max_read_atomic() >= 1);
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend);
        assert!(
            dci.modify(&rts).is_err(),
            "RESET -> RTS is not a DC initiator's transition"
        );
        let mut init = QueuePairAttribute::new();
        init.setup_state(QueuePairState::Init).setup_pkey_index(0).setup_port(1);
        dci.modify(&init)?;
        assert_eq!(dci.state(), QueuePairState::Init);

        let mut dci = builder.build()?;
        assert_eq!(dci.path_mtu(), None, "not brought up");
        dci.bring_up(&DcInitiatorBringUp::new(1))?;
        assert_eq!(dci.state(), QueuePairState::ReadyToSend);
        assert_eq!(dci.query_state()?, QueuePairState::ReadyToSend);
        assert!(dci.path_mtu().is_some());
        assert_eq!(dci.wait_for_error(Duration::ZERO)?, QueuePairState::ReadyToSend);
        let qp_number = dci.qp_number();
        match dci.recover()? {
            DcRecovery::Reset => assert_eq!(dci.qp_number(), qp_number),
            DcRecovery::Rebuilt { previous_qp_number } => assert_eq!(previous_qp_number, qp_number),
            other => panic!("{other:?}"),
        }
        assert_eq!(dci.query_state()?, QueuePairState::ReadyToSend);
    }
    Ok(())
}
